"""The PyTorch backend: devices, placement, sync, OOM, build info, the GPU guard, compiling.

The same functions as `gpubench.backends.tensorflow` (its docstring lists them). Keras on torch
places tensors and variables on the device of `keras.device(...)` ("cpu", or "gpu:N", which
Keras maps to CUDA), so a "cpu" run in a GPU env keeps its model and data off the GPU. torch
runs CPU work synchronously and queues CUDA work: `sync` waits for every GPU torch has started.
`xla="on"` means Keras's `jit_compile=True`, which on torch is `torch.compile` of the training
step; "auto" is Keras's own rule, eager on torch; "off" is eager. float32 matmuls use TF32 only
when torch's matmul precision allows it (not by default), and the record says which.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType

from gpubench import backends
from gpubench.machine import ENVS_HINT

NAME = "torch"
TITLE = "PyTorch"
# Keras's jit_compile for gpubench's `xla`: "on" is torch.compile; "auto" is Keras's rule (eager).
JIT_COMPILE = {"off": False, "on": True, "auto": "auto"}
_warned: list[str] = []  # what torch warned while looking for a GPU, kept for the diagnosis


@functools.cache
def torch() -> ModuleType:
    """The `torch` module (loaded on first use)."""
    import torch as module  # noqa: PLC0415 - loaded on first use only

    return module


def load_keras() -> ModuleType:
    """Keras on PyTorch."""
    torch()
    import keras  # noqa: PLC0415

    return keras


def version() -> str:
    """torch's version, without a local build tag ("2.13.0", not "2.13.0+cpu")."""
    return torch().__version__.split("+")[0]


def tensorflow_importable() -> bool:
    """Whether TensorFlow can be imported in this environment (only tf.data needs it on torch)."""
    return importlib.util.find_spec("tensorflow") is not None


@functools.cache
def _available() -> bool:
    """Whether torch can use CUDA; the warning it gives when it cannot (an old driver) is kept."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = bool(torch().cuda.is_available())
    _warned[:] = [" ".join(str(w.message).split())[:300] for w in caught][:1]
    return found


def gpu_count() -> int:
    """How many GPUs torch sees."""
    return torch().cuda.device_count() if _available() else 0


def gpu_name(index: int) -> str:
    """The name torch gives GPU `index`."""
    return torch().cuda.get_device_name(index) if index < gpu_count() else ""


def compute_capability(index: int) -> tuple[int, int] | None:
    """GPU `index`'s compute capability, None when unknown."""
    return tuple(torch().cuda.get_device_capability(index)) if index < gpu_count() else None


def is_cuda_build() -> bool:
    """Whether this torch was built with CUDA (torch.version.cuda is None on a CPU build)."""
    return torch().version.cuda is not None


def _cudnn_version() -> str | None:
    """cuDNN's version as "9.10", None without one (a CPU build)."""
    found = torch().backends.cudnn.version() if is_cuda_build() else None
    return f"{found // 10000}.{found % 10000 // 100}" if found else None


def build_info() -> dict:
    """torch, Keras and CUDA versions of this build, and the settings that change speed."""
    return {"backend": NAME, "backend_version": version(), "tensorflow": None, "jax": None,
            "keras": load_keras().__version__, "cuda_build": is_cuda_build(),
            "cuda_version": torch().version.cuda, "cudnn_version": _cudnn_version(),
            "backend_settings": {
                "tf32": tf32_enabled(),
                "float32_matmul_precision": torch().get_float32_matmul_precision(),
                "torch_build": torch().__version__,
                "keras_torch_device": os.environ.get("KERAS_TORCH_DEVICE") or None,
                "cpu_threads": torch().get_num_threads()}}


def jit_compile(xla: str) -> bool | str:
    """Keras's jit_compile for gpubench's `xla`: "on" is torch.compile, "off" eager, "auto"
    Keras's rule (eager on torch)."""
    return JIT_COMPILE[xla]


def keras_device(device: str) -> str:
    """Keras's name for a canonical device: "cpu" -> "cpu", "gpu:1" -> "gpu:1" (CUDA device 1)."""
    kind, _, index = device.partition(":")
    return "cpu" if kind == "cpu" else f"gpu:{index or 0}"


@contextlib.contextmanager
def scope(device: str) -> Iterator[None]:
    """Make `device` the device of the tensors and variables Keras creates inside the block."""
    with load_keras().device(keras_device(device)):
        yield


def sync(*values) -> None:
    """Wait until every GPU torch has started has finished the work queued so far (CPU work is
    done when the call returns)."""
    cuda = torch().cuda
    if not cuda.is_initialized():
        return
    for index in range(cuda.device_count()):
        cuda.synchronize(index)


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` is torch running out of device (or host allocator) memory."""
    if isinstance(exc, torch().OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)


def diagnose(smi: list[str] | None, *, smi_present: bool, windows: bool) -> tuple[str, str]:
    """(why torch sees no GPU, the fix), given `nvidia-smi -L`'s GPU lines (None: failed)."""
    torch_version = version()
    if cause := backends.machine_cause(smi, smi_present, TITLE, torch_version):
        return cause
    if not is_cuda_build():
        return (f"the driver sees {smi[0].strip()}, but this PyTorch {torch().__version__} is a "
                "CPU-only build (torch.version.cuda is None); it can never see a GPU.",
                f"use the torch GPU env, created with {ENVS_HINT} (kernel "
                "gpubench-torch-gpu); in a plain venv: `pip install 'torch==2.13.*'` from PyPI, "
                "whose Linux wheel is the CUDA build.")
    if cause := backends.hidden_cause(TITLE):
        return cause
    _available()
    said = f" PyTorch said: {_warned[0]}" if _warned else ""
    return (f"the driver sees {len(smi)} GPU(s) ({smi[0].strip()}), but PyTorch "
            f"{torch_version}, built for CUDA {torch().version.cuda}, cannot use it: the driver "
            f"is likely too old for that CUDA.{said}",
            "update the NVIDIA driver to one that supports CUDA "
            f"{torch().version.cuda} (the header of `nvidia-smi` shows the newest CUDA it "
            "supports), or install a torch built for an older CUDA.")


def tf32_enabled() -> bool:
    """Whether float32 matmuls may use TensorFloat-32: not by default on torch ("highest")."""
    return torch().get_float32_matmul_precision() != "highest"


def compiled(fn: Callable) -> Callable:
    """`fn` as it is, for the rigorous matmul: eager torch runs one matmul as one ATen kernel,
    which torch.compile would only wrap in guard checks."""
    return fn
