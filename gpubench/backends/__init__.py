"""The seam: what differs between Keras backends lives below, one module each with the same names
(`tensorflow.py` lists them); the env names and the backends' titles live here."""

import contextlib
import functools
import importlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

SUPPORTED = ("tensorflow", "jax", "torch")
NOT_YET = {"numpy": "numpy cannot train", "openvino": "OpenVINO cannot train"}
BACKEND_TITLES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
COMPILER = {"tensorflow": "XLA", "jax": "XLA", "torch": "torch.compile"}  # what compiling is
LABEL_PREFIX = {"tensorflow": "", "jax": "jax-", "torch": "torch-"}  # TF keeps "cpu", "gpu"


class BackendError(ValueError):
    """A Keras backend gpubench does not support; the message says what to use instead."""


class GPUNotAvailableError(RuntimeError):
    """A GPU was asked for and the backend cannot see one; the message says why."""


class PlatformError(RuntimeError):
    """The backend cannot start a platform it was told to use (e.g. JAX_PLATFORMS=tpu)."""


def backend_title(name: str) -> str:
    """A backend's name as people write it ("TensorFlow", "JAX", "PyTorch")."""
    return BACKEND_TITLES.get(name, name)


def env_label(backend: str, gpu: bool) -> str:
    """The env label of `backend` with or without a GPU: "cpu", "gpu", "jax-cpu", "torch-gpu"."""
    return LABEL_PREFIX[backend] + ("gpu" if gpu else "cpu")


ENVS = tuple(env_label(b, gpu) for b in SUPPORTED for gpu in (False, True))


def env_backend(env: str) -> str:
    """The backend env `env` runs: "jax" for jax-..., "torch" for torch-..., else "tensorflow"."""
    return next((name for name, prefix in LABEL_PREFIX.items()
                 if prefix and env.startswith(prefix)), "tensorflow")


def is_gpu_env(env: str) -> bool:
    """Whether env `env` is meant to use a GPU: gpu, jax-gpu, torch-gpu, and variants gpu-..."""
    kind = env.removeprefix(LABEL_PREFIX[env_backend(env)])
    return kind == "gpu" or kind.startswith("gpu-")


def kernel_name(env: str) -> str:
    """The Jupyter kernel of env `env` ("cpu" -> "gpubench-cpu")."""
    return "gpubench-" + env


def no_gpu_hint(backend: str) -> str:
    """What a chapter says when `backend` sees no GPU: where to see one, how to get one here."""
    words = json.loads((Path(__file__).parents[1] / "tables" / "diagnosis.json").read_bytes())
    return words["no_gpu_hint"].format(title=backend_title(backend))


def quiet_import(name: str) -> ModuleType:
    """Import module `name`, what it writes on fd 2 (absl, oneDNN) shown only where it fails."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            return importlib.import_module(name)
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def tensorflow_importable() -> bool:
    """Whether TensorFlow can be imported in this environment (tf.data needs it)."""
    return importlib.util.find_spec("tensorflow") is not None


def load_keras() -> ModuleType:
    """Keras, after its backend's framework; a TensorFlow beside JAX or PyTorch imports quietly."""
    import keras  # noqa: PLC0415 - after the backend's framework
    from keras.src.utils import module_utils  # noqa: PLC0415

    lazy = module_utils.tensorflow
    if lazy.module is None and tensorflow_importable():
        lazy.initialize = lambda: setattr(lazy, "module", quiet_import("tensorflow"))
    return keras


def jit_compile(xla: str) -> bool | str:
    """Keras's jit_compile for gpubench's `xla` ("off", "on", "auto": Keras chooses)."""
    return {"off": False, "on": True, "auto": "auto"}[xla]


def requested() -> str:
    """The backend Keras will load, by Keras's rule (which strips no spaces), checked."""
    name = os.environ.get("KERAS_BACKEND", "")
    if not name:
        config = Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras") / "keras.json"
        with contextlib.suppress(OSError, ValueError, AttributeError):
            name = str(json.loads(config.read_text()).get("backend", ""))
    return check_name(name or "tensorflow")


def check_name(name: str) -> str:
    """`name` if gpubench supports that backend, else BackendError naming it and the choices."""
    if name in SUPPORTED:
        return name
    why = NOT_YET.get(name, "unknown Keras backend")
    raise BackendError(f"KERAS_BACKEND={name!r}: {why}; use one of {', '.join(SUPPORTED)} "
                       "(e.g. KERAS_BACKEND=jax, or the kernel gpubench-jax-cpu)")


@functools.cache
def keras() -> ModuleType:
    """Keras, loaded once on the requested backend after its framework, its chatter held back."""
    importlib.import_module(f"gpubench.backends.{requested()}").framework()
    return load_keras()


@functools.cache
def current() -> ModuleType:
    """The gpubench module of the backend Keras runs on (loads Keras)."""
    return importlib.import_module(f"gpubench.backends.{check_name(keras().backend.backend())}")


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` means the device (or the host) ran out of memory: one rule, every backend."""
    return isinstance(exc, MemoryError) or current().is_oom(exc)


def failure(exc: BaseException) -> tuple[str, str]:
    """(status, error) of a record for a measurement that raised `exc`: "oom" or "error"."""
    text = str(exc).strip()
    return ("oom" if is_oom(exc) else "error",
            f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__)
