"""The TensorFlow backend: devices, placement, sync, OOM, build info, the GPU guard, compiling.

Every backend module offers the same functions:
  load_keras(), version(), gpu_count(), gpu_name(i), compute_capability(i), is_cuda_build(),
  build_info(), jit_compile(xla), scope(device), sync(*values), is_oom(exc), diagnose(smi),
  tf32_enabled(), compiled(fn), tensorflow_importable().
Device names given to them are gpubench's canonical ones: "cpu", "cpu:N" (a virtual CPU
device), "gpu:N".
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from types import ModuleType

from gpubench import backends
from gpubench.machine import ENVS_HINT

NAME = "tensorflow"
TITLE = "TensorFlow"
# Keras's jit_compile for gpubench's `xla`; "off" by default: Keras's "auto" turns XLA on only
# where TensorFlow sees a GPU, so the CPU env and the GPU env would train in different modes.
JIT_COMPILE = {"off": False, "on": True, "auto": "auto"}
_failure: list[str] = []  # why TensorFlow could not list its GPUs, kept for the diagnosis


@functools.cache
def tf() -> ModuleType:
    """The `tensorflow` module, imported with its C++ start-up chatter held back.

    TensorFlow prints absl/oneDNN info lines on file descriptor 2 while it loads, whatever
    TF_CPP_MIN_LOG_LEVEL says: they are dropped, unless the import fails; then they are
    printed with the error.
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            import keras  # noqa: F401,PLC0415 - loads with the same quiet stderr
            import tensorflow  # noqa: PLC0415 - loaded on first use only
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    tensorflow.get_logger().setLevel("ERROR")  # AutoGraph and retracing warnings
    _enable_memory_growth(tensorflow)
    return tensorflow


def _enable_memory_growth(module: ModuleType) -> None:
    """Let TensorFlow grow GPU memory as needed (before the GPUs initialise)."""
    for gpu in _list_gpus(module):
        with contextlib.suppress(RuntimeError, ValueError):  # already initialised: as it was
            module.config.experimental.set_memory_growth(gpu, True)


def load_keras() -> ModuleType:
    """Keras on TensorFlow, loaded quietly."""
    tf()
    import keras  # noqa: PLC0415

    return keras


def version() -> str:
    """TensorFlow's version."""
    return tf().__version__


def tensorflow_importable() -> bool:
    """Whether TensorFlow can be imported in this environment (here: it is the backend)."""
    return True


def _list_gpus(module: ModuleType) -> list:
    """TensorFlow's GPUs; [] when its GPU platform cannot start, the reason kept for diagnose."""
    try:
        return module.config.list_physical_devices("GPU")
    except Exception as exc:  # noqa: BLE001 - tf.errors.*, RuntimeError: a GPU that cannot start
        text = " ".join(str(exc).split())[:300]
        _failure[:] = [f"{type(exc).__name__}: {text}" if text else type(exc).__name__]
        return []


def _gpus() -> list:
    return _list_gpus(tf())


def gpu_count() -> int:
    """How many GPUs TensorFlow sees."""
    return len(_gpus())


def _details(index: int) -> dict:
    gpus = _gpus()
    if index >= len(gpus):
        return {}
    try:
        return tf().config.experimental.get_device_details(gpus[index])
    except (ValueError, RuntimeError):
        return {}


def gpu_name(index: int) -> str:
    """The name TensorFlow gives GPU `index` (for machines without nvidia-smi)."""
    return _details(index).get("device_name") or f"GPU {index}"


def compute_capability(index: int) -> tuple[int, int] | None:
    """GPU `index`'s compute capability, None when unknown."""
    found = _details(index).get("compute_capability")
    return tuple(found) if found else None


def is_cuda_build() -> bool:
    """Whether this TensorFlow was built with CUDA."""
    return bool(tf().test.is_built_with_cuda())


def build_info() -> dict:
    """TensorFlow, Keras and CUDA versions of this build, and the settings that change speed."""
    info = tf().sysconfig.get_build_info()
    return {"backend": NAME, "backend_version": version(), "tensorflow": version(), "jax": None,
            "keras": load_keras().__version__, "cuda_build": is_cuda_build(),
            "cuda_version": info.get("cuda_version"), "cudnn_version": info.get("cudnn_version"),
            "backend_settings": {"gpu_memory_growth": True,
                                 "tf32": tf32_enabled()}}


def jit_compile(xla: str) -> bool | str:
    """Keras's jit_compile for gpubench's `xla` ("off", "on", "auto")."""
    return JIT_COMPILE[xla]


def check_xla_flags() -> None:
    """Compile one small function with XLA on the CPU: TensorFlow reads XLA_FLAGS at its first
    XLA compile and aborts the process on a flag it does not know (`gpubench run` calls this in
    a TensorFlow env's Python given XLA_FLAGS, before any kernel starts)."""
    with tf().device("/CPU:0"):
        tf().function(lambda x: x + 1, jit_compile=True)(tf().constant(1.0))


def tf_name(device: str) -> str:
    """TensorFlow's name for a canonical device: "cpu" -> "/CPU:0", "gpu:1" -> "/GPU:1"."""
    kind, _, index = device.partition(":")
    return f"/{kind.upper()}:{index or 0}"


@contextlib.contextmanager
def scope(device: str) -> Iterator[None]:
    """Place the TensorFlow work inside the block on `device`."""
    with tf().device(tf_name(device)):
        yield


def sync(*values) -> None:
    """Wait until every device has finished the work queued so far (`values` included)."""
    tf().test.experimental.sync_devices()


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` is TensorFlow running out of device memory."""
    return isinstance(exc, tf().errors.ResourceExhaustedError)


def diagnose(smi: list[str] | None, *, smi_present: bool, windows: bool) -> tuple[str, str]:
    """(why TensorFlow sees no GPU, the fix), given `nvidia-smi -L`'s GPU lines (None: failed)."""
    tf_version = version()
    if cause := backends.machine_cause(smi, smi_present, TITLE, tf_version):
        return cause
    if windows:
        return ("native Windows. TensorFlow dropped GPU support on native Windows after 2.10.",
                "run gpubench inside WSL2: install the NVIDIA driver on Windows, then, in WSL2, "
                f"create the gpu env with {ENVS_HINT}.")
    if not is_cuda_build():
        return (f"the driver sees {smi[0].strip()}, but this TensorFlow {tf_version} is a CPU-only "
                "build (tensorflow-cpu, or a platform without CUDA wheels); it can never see a "
                "GPU.",
                f"use the GPU environment: create the gpu env with {ENVS_HINT}, and run in it; "
                "in a plain venv: `pip install 'tensorflow[and-cuda]==2.21.*'`.")
    if cause := backends.hidden_cause(TITLE):
        return cause
    said = f" TensorFlow said: {_failure[0]}" if _failure else ""
    return (f"the driver sees {len(smi)} GPU(s) ({smi[0].strip()}), but this CUDA build of "
            f"TensorFlow {tf_version} cannot load the CUDA/cuDNN libraries it needs.{said}",
            "`pip install 'tensorflow[and-cuda]==2.21.*'` in this environment (it brings "
            "matching CUDA and cuDNN wheels), and make sure LD_LIBRARY_PATH does not point at "
            "an older CUDA.")


def tf32_enabled() -> bool:
    """Whether float32 matmuls may use TensorFloat-32 on GPUs that have it."""
    return bool(tf().config.experimental.tensor_float_32_execution_enabled())


def compiled(fn: Callable) -> Callable:
    """`fn` compiled as a TensorFlow graph (`tf.function`, no XLA), for the rigorous matmul."""
    return tf().function(fn, autograph=False, jit_compile=False)

