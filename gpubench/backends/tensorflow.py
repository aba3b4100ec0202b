"""The TensorFlow backend. Every backend module offers the same names (docs/backends.md lists
them): NAME, TITLE, `said` (what the framework said when it found no GPU) and these functions."""

import contextlib
import functools
from collections.abc import Callable
from types import ModuleType

from gpubench import backends

NAME = "tensorflow"
TITLE = backends.BACKEND_TITLES[NAME]
jit_compile = backends.jit_compile  # not "auto": XLA would be on only where TF sees a GPU
tensorflow_importable = backends.tensorflow_importable
said: list[str] = []  # why TensorFlow could not list its GPUs


@functools.cache
def tf() -> ModuleType:
    """The `tensorflow` module, imported quietly, with GPU memory growth on."""
    backends.quiet_import("keras")
    module = backends.quiet_import("tensorflow")
    module.get_logger().setLevel("ERROR")  # AutoGraph and retracing warnings
    enable_memory_growth(module)
    return module


framework = tf  # what `backends.keras` starts before Keras


def enable_memory_growth(module: ModuleType) -> None:
    """Let TensorFlow `module` grow GPU memory as needed (before the GPUs initialise)."""
    for gpu in list_gpus(module):
        with contextlib.suppress(RuntimeError, ValueError):  # already initialised: as it was
            module.config.experimental.set_memory_growth(gpu, True)


def list_gpus(module: ModuleType) -> list:
    """TensorFlow's GPUs; [] when its GPU platform cannot start (the reason kept in `said`)."""
    try:
        return module.config.list_physical_devices("GPU")
    except Exception as exc:  # noqa: BLE001 - tf.errors.*, RuntimeError: a GPU that cannot start
        text = " ".join(str(exc).split())[:300]
        said[:] = [f"{type(exc).__name__}: {text}" if text else type(exc).__name__]
        return []


def version() -> str:
    """TensorFlow's version."""
    return tf().__version__


def gpu_count() -> int:
    """How many GPUs TensorFlow sees."""
    return len(list_gpus(tf()))


def _details(index: int) -> dict:
    with contextlib.suppress(IndexError, ValueError, RuntimeError):  # its name, capability
        return tf().config.experimental.get_device_details(list_gpus(tf())[index])
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
            "keras": backends.keras().__version__, "cuda_build": is_cuda_build(),
            "cuda_version": info.get("cuda_version"), "cudnn_version": info.get("cudnn_version"),
            "backend_settings": {"gpu_memory_growth": True, "tf32": tf32_enabled()}}


def check_xla_flags() -> None:
    """Compile with XLA on the CPU once: TensorFlow aborts there on XLA_FLAGS it does not know."""
    with tf().device("/CPU:0"):
        tf().function(lambda x: x + 1, jit_compile=True)(tf().constant(1.0))


def tf_name(device: str) -> str:
    """TensorFlow's name for a canonical device: "cpu" -> "/CPU:0", "gpu:1" -> "/GPU:1"."""
    kind, _, index = device.partition(":")
    return f"/{kind.upper()}:{index or 0}"


def scope(device: str) -> contextlib.AbstractContextManager:
    """Place the TensorFlow work inside the block on `device`."""
    return tf().device(tf_name(device))


def sync(*values) -> None:
    """Wait until every device has finished the work queued so far (`values` included)."""
    tf().test.experimental.sync_devices()


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` is TensorFlow running out of device memory."""
    return isinstance(exc, tf().errors.ResourceExhaustedError)


def tf32_enabled() -> bool:
    """Whether float32 matmuls may use TensorFloat-32 (on GPUs that have it) now."""
    return bool(tf().config.experimental.tensor_float_32_execution_enabled())


def float32_precision(tf32: bool) -> contextlib.AbstractContextManager:
    """Inside the block, float32 matmuls do (True) or do not (False) use TF32; restored after."""
    config, restore = tf().config.experimental, contextlib.ExitStack()
    restore.callback(config.enable_tensor_float_32_execution,
                     config.tensor_float_32_execution_enabled())
    config.enable_tensor_float_32_execution(tf32)
    return restore


def compiled(fn: Callable) -> Callable:
    """`fn` compiled as a TensorFlow graph (`tf.function`, no XLA), for the rigorous matmul."""
    return tf().function(fn, autograph=False, jit_compile=False)
