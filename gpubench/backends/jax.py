"""The JAX backend (the names of `backends.tensorflow`). JAX dispatches asynchronously, so `sync`
blocks on the values a timed region produced; it always compiles, and the record says so."""

import contextlib
import functools
import importlib.util
import logging
import os
from collections.abc import Callable
from types import ModuleType

from gpubench import backends
from gpubench.backends import GPUNotAvailableError, PlatformError

NAME = "jax"
TITLE = backends.BACKEND_TITLES[NAME]
tensorflow_importable = backends.tensorflow_importable
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
    try:
        module().devices()
    except Exception as exc:  # RuntimeError, or AssertionError for a platform with no plugin
        platforms = os.environ.get("JAX_PLATFORMS", "").strip()
        named = f"JAX_PLATFORMS={platforms!r}" if platforms else "a platform"
        said_here = f" (JAX said: {str(exc).strip().splitlines()[0]})" if str(exc).strip() else ""
        if not {p.strip() for p in platforms.lower().split(",")} & {"cuda", "gpu", "rocm"}:
            raise PlatformError(f"JAX {version()} cannot start {named}{said_here}; set "
                                "JAX_PLATFORMS=cpu or unset it") from exc
        raise GPUNotAvailableError(
            f"{named} but this jaxlib {version()} "
            f"{'cannot start the GPU' if is_cuda_build() else 'has no CUDA plugin'}{said_here}; "
            "set JAX_PLATFORMS=cpu or unset it, or install jax[cuda12] for the GPU (`gpubench "
            "doctor --gpu` without JAX_PLATFORMS says why it sees none)") from exc
    return module()


framework = jax  # what `backends.keras` starts before Keras


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
    return (gpus() if kind == "gpu" else jax().devices("cpu"))[int(index or 0)]


def gpu_name(index: int) -> str:
    """The name JAX gives GPU `index`."""
    return getattr(device(f"gpu:{index}"), "device_kind", f"GPU {index}")


def compute_capability(index: int) -> tuple[int, int] | None:
    """GPU `index`'s compute capability, None when unknown."""
    with contextlib.suppress(IndexError, ValueError):
        found = str(getattr(device(f"gpu:{index}"), "compute_capability", None)).split(".")
        return int(found[0]), int(found[1])
    return None


def is_cuda_build() -> bool:
    """Whether this jaxlib has a CUDA plugin installed (jax[cuda12] or jax[cuda13])."""
    return any(importlib.util.find_spec(f"jax_cuda{v}_plugin") for v in (12, 13))


def build_info() -> dict:
    """JAX, Keras and CUDA versions, and the settings that change speed or memory."""
    cuda = cudnn = None
    with contextlib.suppress(Exception):  # private helpers, absent in some versions
        from jax._src.lib import cuda_versions  # noqa: PLC0415

        if gpus():
            found = cuda_versions.cuda_runtime_get_version()
            cuda = f"{found // 1000}.{found % 1000 // 10}"
            found = cuda_versions.cudnn_get_version()
            cudnn = f"{found // 10000}.{found % 10000 // 100}"
    return {"backend": NAME, "backend_version": version(), "tensorflow": None,
            "jax": version(), "keras": backends.keras().__version__, "cuda_build": is_cuda_build(),
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


def scope(name: str) -> contextlib.AbstractContextManager:
    """Make `name` the default device of the JAX work inside the block."""
    return jax().default_device(device(name))


def sync(*values) -> None:
    """Block until `values` (arrays, Keras variables, lists of them) are computed."""
    jax().block_until_ready([getattr(v, "value", v)  # Keras variables hold a jax.Array
                             for value in values
                             for v in (value if isinstance(value, (list, tuple)) else [value])])


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` is XLA running out of device memory."""
    return type(exc).__name__ in ("XlaRuntimeError", "JaxRuntimeError") and (
        "RESOURCE_EXHAUSTED" in str(exc) or "out of memory" in str(exc).lower())


def tf32_enabled() -> bool:
    """Whether float32 matmuls may use TensorFloat-32 now (JAX's default allows it on GPUs)."""
    return jax().config.jax_default_matmul_precision in (None, "default", "tensorfloat32",
                                                          "bfloat16_3x")


def float32_precision(tf32: bool) -> contextlib.AbstractContextManager:
    """Inside the block, float32 matmuls do (True) or do not (False) use TF32."""
    return jax().default_matmul_precision("tensorfloat32" if tf32 else "highest")


def compiled(fn: Callable) -> Callable:
    """`fn` compiled by XLA (`jax.jit`), for the rigorous matmul."""
    return jax().jit(fn)
