"""The JAX backend: the same names as `gpubench.backends.tensorflow` (its docstring lists them).

JAX dispatches asynchronously, on the CPU too: `sync` blocks on the values a timed region
produced. JAX always compiles (eager JAX is a debugging mode), so every `xla` value trains
compiled and the record says so. GPU memory is allocated as needed
(XLA_PYTHON_CLIENT_PREALLOCATE=false, set by `backends.prepare_environment`), and recorded.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
from collections.abc import Callable, Iterator
from types import ModuleType

from gpubench import backends
from gpubench.backends import GPUNotAvailableError, PlatformError

NAME = "jax"
TITLE = backends.BACKEND_TITLES[NAME]
# The CUDA plugins of jax[cuda12] / jax[cuda13]: their presence makes a CUDA build.
CUDA_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins.xla_cuda12",
                "jax_plugins.xla_cuda13")
# The precisions JAX's float32 matmuls may run on TF32 with (None: JAX's default).
TF32_PRECISIONS = (None, "default", "tensorfloat32", "bfloat16_3x")
said: list[str] = []  # JAX's "falling back to cpu" warnings


class FallbackWatch(logging.Handler):
    """Keeps JAX's warnings about a GPU it could not use, so they never pass unnoticed."""

    def emit(self, record: logging.LogRecord) -> None:
        """Keep a warning that names the CPU fallback or CUDA."""
        message = record.getMessage()
        if "falling back to cpu" in message.lower() or "cuda" in message.lower():
            said.append(message.strip())


@functools.cache
def module() -> ModuleType:
    """The `jax` module, imported with its backend-initialisation warnings watched."""
    logging.getLogger("jax._src.xla_bridge").addHandler(FallbackWatch())
    import jax as found  # noqa: PLC0415 - loaded on first use only

    return found


@functools.cache
def jax() -> ModuleType:
    """The `jax` module with its platforms started; one line naming JAX_PLATFORMS if it fails."""
    found = module()
    try:
        found.devices()
    except Exception as exc:  # RuntimeError, or AssertionError for a platform with no plugin
        raise start_failure(exc) from exc
    return found


def start_failure(exc: BaseException) -> RuntimeError:
    """The error for JAX failing to start its platforms with `exc`: what JAX_PLATFORMS asked
    for, why it cannot be, and the fix, in one line."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    said_here = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    said_here = f" (JAX said: {said_here})" if said_here else ""
    named = f"JAX_PLATFORMS={platforms!r}"
    if not {p.strip() for p in platforms.lower().split(",")} & {"cuda", "gpu", "rocm"}:
        return PlatformError(f"JAX {version()} cannot start {named if platforms else 'a platform'}"
                             f"{said_here}; set JAX_PLATFORMS=cpu or unset it")
    if not is_cuda_build():
        return GPUNotAvailableError(
            f"{named} but this jaxlib {version()} has no CUDA plugin, so JAX cannot start at all"
            f"{said_here}; set JAX_PLATFORMS=cpu or unset it, or install jax[cuda12] "
            "(`pip install \"jax[cuda12]\"`) for the GPU")
    return GPUNotAvailableError(
        f"{named} but JAX {version()} cannot start the GPU{said_here}; unset JAX_PLATFORMS (or "
        "set it to cpu) to run on the CPU, or run `gpubench doctor --gpu` without JAX_PLATFORMS "
        "for why it sees no GPU")


def load_keras() -> ModuleType:
    """Keras on JAX (a TensorFlow beside it, for tf.data, imports quietly)."""
    jax()
    import keras  # noqa: PLC0415

    backends.quiet_lazy_tensorflow()
    return keras


def version() -> str:
    """JAX's version (starts no platform)."""
    return module().__version__


def gpus() -> list:
    """The GPUs JAX sees ([] without a GPU platform)."""
    found = jax()  # its own failure (no platform starts at all) is not "no GPU"
    try:
        return found.devices("gpu")
    except Exception:  # noqa: BLE001 - no GPU platform: CPU-only jaxlib, JAX_PLATFORMS=cpu,
        return []  # or no driver; RuntimeError today, whatever a later JAX raises for it


def gpu_count() -> int:
    """How many GPUs JAX sees."""
    return len(gpus())


def device(name: str):
    """The jax.Device for a canonical device name ("cpu", "cpu:N", "gpu:N")."""
    kind, _, index = name.partition(":")
    found = gpus() if kind == "gpu" else jax().devices("cpu")
    return found[int(index or 0)]


def gpu_name(index: int) -> str:
    """The name JAX gives GPU `index`."""
    found = gpus()
    return getattr(found[index], "device_kind", f"GPU {index}") if index < len(found) else ""


def compute_capability(index: int) -> tuple[int, int] | None:
    """GPU `index`'s compute capability, None when unknown."""
    found = gpus()
    try:
        major, minor = str(getattr(found[index], "compute_capability", None)).split(".")[:2]
        return int(major), int(minor)
    except (IndexError, ValueError):
        return None


def tensorflow_importable() -> bool:
    """Whether TensorFlow can be imported in this environment (only tf.data needs it on JAX)."""
    return importlib.util.find_spec("tensorflow") is not None


def is_cuda_build() -> bool:
    """Whether this jaxlib has a CUDA plugin installed (jax[cuda12] or jax[cuda13])."""
    for name in CUDA_PLUGINS:
        with contextlib.suppress(ImportError, ValueError):
            if importlib.util.find_spec(name) is not None:
                return True
    return False


def cuda_versions() -> tuple[str | None, str | None]:
    """(CUDA, cuDNN) versions JAX reports for its GPU backend, None where it has none."""
    if not gpus():
        return None, None
    with contextlib.suppress(Exception):  # private helpers, absent in some versions
        from jax._src.lib import cuda_versions as found  # noqa: PLC0415

        cuda = found.cuda_runtime_get_version()
        cudnn = found.cudnn_get_version()
        return f"{cuda // 1000}.{cuda % 1000 // 10}", f"{cudnn // 10000}.{cudnn % 10000 // 100}"
    return None, None


def build_info() -> dict:
    """JAX, Keras and CUDA versions, and the settings that change speed or memory."""
    cuda, cudnn = cuda_versions()
    return {"backend": NAME, "backend_version": version(), "tensorflow": None,
            "jax": version(), "keras": load_keras().__version__, "cuda_build": is_cuda_build(),
            "cuda_version": cuda, "cudnn_version": cudnn,
            "backend_settings": {
                "gpu_memory_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE",
                                                         "true").lower() not in ("false", "0"),
                "default_matmul_precision": jax().config.jax_default_matmul_precision,
                "tf32": tf32_enabled(),
                "platforms": os.environ.get("JAX_PLATFORMS") or None,
                "fallback_warning": said[0] if said else None}}


def jit_compile(xla: str) -> bool:
    """Always True: JAX runs compiled; eager JAX is a debugging mode, not a speed to compare."""
    return True


@contextlib.contextmanager
def scope(name: str) -> Iterator[None]:
    """Make `name` the default device of the JAX work inside the block."""
    with jax().default_device(device(name)):
        yield


def sync(*values) -> None:
    """Block until `values` (arrays, Keras variables, lists of them) are computed."""
    leaves = []
    for value in values:
        leaves += value if isinstance(value, (list, tuple)) else [value]
    arrays = [getattr(v, "value", v) for v in leaves]  # Keras variables hold a jax.Array
    jax().block_until_ready([a for a in arrays if hasattr(a, "block_until_ready")])


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` is XLA running out of device memory."""
    text = str(exc)
    return type(exc).__name__ in ("XlaRuntimeError", "JaxRuntimeError") and (
        "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())


def tf32_enabled() -> bool:
    """Whether float32 matmuls may use TensorFloat-32 now (JAX's default allows it on GPUs)."""
    return jax().config.jax_default_matmul_precision in TF32_PRECISIONS


@contextlib.contextmanager
def float32_precision(tf32: bool) -> Iterator[None]:
    """Inside the block, float32 matmuls do (True) or do not (False) use TF32."""
    with jax().default_matmul_precision("tensorfloat32" if tf32 else "highest"):
        yield


def compiled(fn: Callable) -> Callable:
    """`fn` compiled by XLA (`jax.jit`), for the rigorous matmul."""
    return jax().jit(fn)
