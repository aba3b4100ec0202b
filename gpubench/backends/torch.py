"""The PyTorch backend (the names of `backends.tensorflow`): torch queues CUDA work, so `sync`
waits for every GPU it started; `xla="on"` is torch.compile of the step."""

import contextlib
import functools
import importlib
import os
import warnings
from collections.abc import Callable
from types import ModuleType

from gpubench import backends

NAME = "torch"
TITLE = backends.BACKEND_TITLES[NAME]
jit_compile = backends.jit_compile  # "on" is torch.compile; "off" and "auto" train eagerly
tensorflow_importable = backends.tensorflow_importable
said: list[str] = []  # what torch warned while looking for a GPU


def torch() -> ModuleType:
    """The `torch` module (loaded on first use)."""
    return importlib.import_module("torch")


framework = torch  # what `backends.keras` starts before Keras


def version() -> str:
    """torch's version, without a local build tag ("2.13.0", not "2.13.0+cpu")."""
    return torch().__version__.split("+")[0]


@functools.cache
def cuda_available() -> bool:
    """Whether torch can use CUDA; the warning it gives when it cannot is kept in `said`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = bool(torch().cuda.is_available())
    said[:] = [" ".join(str(w.message).split())[:300] for w in caught][:1]
    return found


def gpu_count() -> int:
    """How many GPUs torch sees."""
    return torch().cuda.device_count() if cuda_available() else 0


def gpu_name(index: int) -> str:
    """The name torch gives GPU `index`."""
    return torch().cuda.get_device_name(index)


def compute_capability(index: int) -> tuple[int, int] | None:
    """GPU `index`'s compute capability, None when unknown."""
    return tuple(torch().cuda.get_device_capability(index)) if index < gpu_count() else None


def is_cuda_build() -> bool:
    """Whether this torch was built with CUDA (torch.version.cuda is None on a CPU build)."""
    return torch().version.cuda is not None


def build_info() -> dict:
    """torch, Keras and CUDA versions of this build, and the settings that change speed."""
    cudnn = torch().backends.cudnn.version() if is_cuda_build() else None
    return {"backend": NAME, "backend_version": version(), "tensorflow": None, "jax": None,
            "keras": backends.keras().__version__, "cuda_build": is_cuda_build(),
            "cuda_version": torch().version.cuda,
            "cudnn_version": f"{cudnn // 10000}.{cudnn % 10000 // 100}" if cudnn else None,
            "backend_settings": {
                "tf32": tf32_enabled(),
                "float32_matmul_precision": torch().get_float32_matmul_precision(),
                "torch_build": torch().__version__,
                "keras_torch_device": os.environ.get("KERAS_TORCH_DEVICE") or None,
                "cpu_threads": torch().get_num_threads()}}


def scope(device: str) -> contextlib.AbstractContextManager:
    """Make `device` the device of what Keras creates inside the block ("cpu:N" is the CPU)."""
    return backends.keras().device("cpu" if device.startswith("cpu") else device)


def sync(*values) -> None:
    """Wait until every GPU torch has started has finished its queued work (CPU work is done)."""
    if torch().cuda.is_initialized():
        for index in range(torch().cuda.device_count()):
            torch().cuda.synchronize(index)


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` is torch running out of device (or host allocator) memory."""
    return isinstance(exc, torch().OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))


def tf32_enabled() -> bool:
    """Whether float32 matmuls may use TensorFloat-32 now: not by default on torch ("highest")."""
    return torch().get_float32_matmul_precision() != "highest"


def float32_precision(tf32: bool) -> contextlib.AbstractContextManager:
    """Inside the block, float32 matmuls do (True) or do not (False) use TF32; restored after."""
    restore = contextlib.ExitStack()
    restore.callback(torch().set_float32_matmul_precision, torch().get_float32_matmul_precision())
    torch().set_float32_matmul_precision("high" if tf32 else "highest")
    return restore


def compiled(fn: Callable) -> Callable:
    """`fn` as it is: eager torch runs one matmul as one ATen kernel (compiling adds guards)."""
    return fn
