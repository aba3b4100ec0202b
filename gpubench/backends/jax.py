"""The JAX backend: devices, placement, sync, OOM, build info, the GPU guard, compiling.

The same functions as `gpubench.backends.tensorflow` (its docstring lists them). JAX
dispatches asynchronously, on the CPU too: `sync` blocks on the values a timed region
produced. JAX always compiles (Keras's `jit_compile=False` on JAX is eager debugging, an
order of magnitude slower), so every `xla` value trains compiled and the record says so.
GPU memory is allocated as needed (XLA_PYTHON_CLIENT_PREALLOCATE=false, set by
`backends.prepare_environment` before JAX loads), and the setting is recorded.
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
from gpubench.machine import ENVS_HINT

NAME = "jax"
TITLE = "JAX"
# The CUDA plugins of jax[cuda12] / jax[cuda13]: their presence makes a CUDA build.
CUDA_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins.xla_cuda12",
                "jax_plugins.xla_cuda13")
_fallback: list[str] = []  # JAX's "falling back to cpu" warnings, kept for the diagnosis


class _FallbackWatch(logging.Handler):
    """Keeps JAX's warnings about a GPU it could not use, so they never pass unnoticed."""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "falling back to cpu" in message.lower() or "cuda" in message.lower():
            _fallback.append(message.strip())


@functools.cache
def _module() -> ModuleType:
    """The `jax` module, imported with its backend-initialisation warnings captured."""
    logging.getLogger("jax._src.xla_bridge").addHandler(_FallbackWatch())
    import jax as module  # noqa: PLC0415 - loaded on first use only

    return module


@functools.cache
def jax() -> ModuleType:
    """The `jax` module with its platforms started (so a fallback warning is seen here);
    GPUNotAvailableError or PlatformError, in one line naming JAX_PLATFORMS, if one cannot start."""
    module = _module()
    try:
        module.devices()
    except Exception as exc:  # RuntimeError, or AssertionError for a platform with no plugin
        raise start_failure(exc) from exc
    return module


def start_failure(exc: BaseException) -> RuntimeError:
    """The error for JAX failing to start its platforms with `exc`: what JAX_PLATFORMS asked
    for, why it cannot be, and the fix, in one line."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    said = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    said = f" (JAX said: {said})" if said else ""
    named = f"JAX_PLATFORMS={platforms!r}"
    if not {p.strip() for p in platforms.lower().split(",")} & {"cuda", "gpu", "rocm"}:
        return PlatformError(f"JAX {version()} cannot start {named if platforms else 'a platform'}"
                             f"{said}; set JAX_PLATFORMS=cpu or unset it")
    if not is_cuda_build():
        return GPUNotAvailableError(
            f"{named} but this jaxlib {version()} has no CUDA plugin, so JAX cannot start at all"
            f"{said}; set JAX_PLATFORMS=cpu or unset it, or install jax[cuda12] "
            "(`pip install \"jax[cuda12]\"`) for the GPU")
    return GPUNotAvailableError(
        f"{named} but JAX {version()} cannot start the GPU{said}; unset JAX_PLATFORMS (or set it "
        "to cpu) to run on the CPU, or run `gpubench doctor --gpu` without JAX_PLATFORMS for "
        "why it sees no GPU")


def load_keras() -> ModuleType:
    """Keras on JAX."""
    jax()
    import keras  # noqa: PLC0415

    return keras


def version() -> str:
    """JAX's version (starts no platform)."""
    return _module().__version__


def tensorflow_importable() -> bool:
    """Whether TensorFlow can be imported in this environment (only tf.data needs it on JAX)."""
    return importlib.util.find_spec("tensorflow") is not None


def _gpus() -> list:
    module = jax()  # its own failure (no platform starts at all) is not "no GPU"
    try:
        return module.devices("gpu")
    except Exception:  # noqa: BLE001 - no GPU platform: CPU-only jaxlib, JAX_PLATFORMS=cpu,
        return []  # or no driver; RuntimeError today, whatever a later JAX raises for it


def gpu_count() -> int:
    """How many GPUs JAX sees."""
    return len(_gpus())


def device(name: str):
    """The jax.Device for a canonical device name ("cpu", "cpu:N", "gpu:N")."""
    kind, _, index = name.partition(":")
    found = _gpus() if kind == "gpu" else jax().devices("cpu")
    return found[int(index or 0)]


def gpu_name(index: int) -> str:
    """The name JAX gives GPU `index`."""
    gpus = _gpus()
    return getattr(gpus[index], "device_kind", f"GPU {index}") if index < len(gpus) else ""


def compute_capability(index: int) -> tuple[int, int] | None:
    """GPU `index`'s compute capability, None when unknown."""
    gpus = _gpus()
    found = getattr(gpus[index], "compute_capability", None) if index < len(gpus) else None
    try:
        major, minor = str(found).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def is_cuda_build() -> bool:
    """Whether this jaxlib has a CUDA plugin installed (jax[cuda12] or jax[cuda13])."""
    for name in CUDA_PLUGINS:
        with contextlib.suppress(ImportError, ValueError):
            if importlib.util.find_spec(name) is not None:
                return True
    return False


def _cuda_versions() -> tuple[str | None, str | None]:
    """(CUDA, cuDNN) versions JAX reports for its GPU backend, None where it has none."""
    if not _gpus():
        return None, None
    with contextlib.suppress(Exception):  # private helpers, absent in some versions
        from jax._src.lib import cuda_versions  # noqa: PLC0415

        cuda = cuda_versions.cuda_runtime_get_version()
        cudnn = cuda_versions.cudnn_get_version()
        return f"{cuda // 1000}.{cuda % 1000 // 10}", f"{cudnn // 10000}.{cudnn % 10000 // 100}"
    return None, None


def build_info() -> dict:
    """JAX, Keras and CUDA versions, and the settings that change speed or memory."""
    cuda, cudnn = _cuda_versions()
    module = jax()
    return {"backend": NAME, "backend_version": version(), "tensorflow": None,
            "jax": version(), "keras": load_keras().__version__, "cuda_build": is_cuda_build(),
            "cuda_version": cuda, "cudnn_version": cudnn,
            "backend_settings": {
                "gpu_memory_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE",
                                                         "true").lower() not in ("false", "0"),
                "default_matmul_precision": module.config.jax_default_matmul_precision,
                "tf32": tf32_enabled(),
                "platforms": os.environ.get("JAX_PLATFORMS") or None,
                "fallback_warning": _fallback[0] if _fallback else None}}


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


def diagnose(smi: list[str] | None, *, smi_present: bool, windows: bool) -> tuple[str, str]:
    """(why JAX sees no GPU, the fix), given `nvidia-smi -L`'s GPU lines (None: failed)."""
    jax_version = version()
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms and "cuda" not in platforms and "gpu" not in platforms:
        return (f"JAX_PLATFORMS={platforms!r} keeps JAX {jax_version} off the GPU.",
                "unset JAX_PLATFORMS (or include cuda in it).")
    if cause := backends.machine_cause(smi, smi_present, TITLE, jax_version):
        return cause
    if windows:
        return ("native Windows: JAX has no CUDA wheels for it.",
                f"run gpubench inside WSL2, creating the jax-gpu env with {ENVS_HINT}.")
    if not is_cuda_build():
        return (f"the driver sees {smi[0].strip()}, but this jaxlib {jax_version} is CPU-only "
                "(no CUDA plugin installed).",
                "`pip install \"jax[cuda12]\"` in this environment (or create the jax-gpu env "
                f"with {ENVS_HINT}, and its kernel gpubench-jax-gpu).")
    if cause := backends.hidden_cause(TITLE):
        return cause
    warned = f" JAX said: {_fallback[0]}" if _fallback else ""
    return (f"the driver sees {len(smi)} GPU(s) ({smi[0].strip()}) and JAX {jax_version} has a "
            f"CUDA plugin, but it could not start it.{warned}",
            "update the NVIDIA driver to one the plugin supports (`pip install -U "
            "\"jax[cuda12]\"` brings matching CUDA wheels), and make sure LD_LIBRARY_PATH does "
            "not point at an older CUDA.")


def tf32_enabled() -> bool:
    """Whether float32 matmuls may use TensorFloat-32: JAX's default precision allows it on GPUs."""
    precision = jax().config.jax_default_matmul_precision
    return precision in (None, "default", "tensorfloat32", "bfloat16_3x")


def compiled(fn: Callable) -> Callable:
    """`fn` compiled by XLA (`jax.jit`), for the rigorous matmul."""
    return jax().jit(fn)
