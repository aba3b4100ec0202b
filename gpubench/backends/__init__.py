"""The seam: everything that differs between Keras backends lives below this package.

`current()` returns the module of the backend Keras runs on (`tensorflow`, `jax`, `torch`); each
such module offers the same functions (see `tensorflow.py` for the list). Nothing outside
`gpubench/backends/` imports TensorFlow, JAX or PyTorch. A third backend is one more module here.

Which backend: Keras's own rule (KERAS_BACKEND, else ~/.keras/keras.json, else TensorFlow),
read by `requested()` before Keras loads, so a bad name fails before anything heavy runs.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
from pathlib import Path
from types import ModuleType

SUPPORTED = ("tensorflow", "jax", "torch")
# Keras backends gpubench knows of but does not support yet, with what to do instead.
NOT_YET = {"numpy": "numpy cannot train",
           "openvino": "OpenVINO cannot train"}
BACKEND_TITLES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}

def backend_title(name: str) -> str:
    """A backend's name as people write it ("TensorFlow", "JAX")."""
    return BACKEND_TITLES.get(name, name)


# Env labels: TensorFlow keeps the book's "cpu"/"gpu"; other backends prefix their name.
LABEL_PREFIX = {"tensorflow": "", "jax": "jax-", "torch": "torch-"}


def env_label(backend: str, gpu: bool) -> str:
    """The env label of `backend` with or without a GPU: "cpu", "gpu", "jax-cpu", "torch-gpu"."""
    return LABEL_PREFIX[backend] + ("gpu" if gpu else "cpu")


class BackendError(ValueError):
    """A Keras backend gpubench does not support; the message says what to use instead."""


class DeviceError(ValueError):
    """A device name gpubench does not understand, or a device that does not exist."""


class GPUNotAvailableError(RuntimeError):
    """A GPU was asked for and the backend cannot see one; the message says why."""


class PlatformError(RuntimeError):
    """The backend cannot start a platform it was told to use (e.g. JAX_PLATFORMS=tpu)."""


def prepare_environment() -> None:
    """Set, before any framework loads, what must hold in every env (a user's own setting wins):
    TensorFlow's C++ info logs off, and JAX's grab of 75 % of GPU memory off (it allocates as
    needed, as TensorFlow does with memory growth)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def requested() -> str:
    """The backend Keras will load, by Keras's rule (which strips no spaces), checked:
    BackendError for one not supported."""
    name = os.environ.get("KERAS_BACKEND", "")
    if not name:
        config = Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras") / "keras.json"
        try:
            name = str(json.loads(config.read_text()).get("backend", ""))
        except (OSError, ValueError, AttributeError):
            name = ""
    return check_name(name or "tensorflow")


def check_name(name: str) -> str:
    """`name` if gpubench supports that backend, else BackendError naming it and the choices."""
    if name in SUPPORTED:
        return name
    why = NOT_YET.get(name, "unknown Keras backend")
    raise BackendError(f"KERAS_BACKEND={name!r}: {why}; use one of {', '.join(SUPPORTED)} "
                       "(e.g. KERAS_BACKEND=jax, or the kernel gpubench-jax-cpu)")


def module(name: str) -> ModuleType:
    """The gpubench module of backend `name` (imports nothing heavy by itself)."""
    return importlib.import_module(f"gpubench.backends.{check_name(name)}")


@functools.cache
def keras() -> ModuleType:
    """Keras, loaded once on the requested backend, its start-up chatter held back."""
    return module(requested()).load_keras()


@functools.cache
def current() -> ModuleType:
    """The backend module Keras runs on (loads Keras); BackendError for an unsupported one."""
    return module(check_name(keras().backend.backend()))


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` means the device (or the host) ran out of memory: one rule, every backend."""
    if isinstance(exc, MemoryError):
        return True
    return current().is_oom(exc)


def failure(exc: BaseException) -> tuple[str, str]:
    """(status, error) of a record for a measurement that raised `exc`: "oom" or "error"."""
    text = str(exc).strip()
    return ("oom" if is_oom(exc) else "error",
            f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__)


def machine_cause(smi: list[str] | None, smi_present: bool, title: str,
                  version: str) -> tuple[str, str] | None:
    """(why, fix) when the machine keeps the GPU from framework `title` (its `version`): a driver
    that fails, or no NVIDIA GPU (`smi`: `nvidia-smi -L`'s GPU lines, None: it failed); None
    when nvidia-smi lists a GPU. Every backend's `diagnose` asks this first."""
    if smi is None and smi_present:
        return (f"`nvidia-smi -L` fails: the NVIDIA driver is missing or not working, so "
                f"{title} {version} cannot see a GPU.",
                "reinstall the NVIDIA driver until `nvidia-smi -L` lists your GPU (on WSL2, "
                "install the driver on Windows, not inside Linux).")
    if not smi:
        found = "not found" if smi is None else "lists none"
        return (f"no NVIDIA GPU on this machine (nvidia-smi {found}); {title} runs on the CPU.",
                "nothing to fix for CPU runs. If the machine does have an NVIDIA GPU, install its "
                "driver until `nvidia-smi -L` lists it (on WSL2: the driver on Windows).")
    return None


def hidden_cause(title: str) -> tuple[str, str] | None:
    """(why, fix) when CUDA_VISIBLE_DEVICES hides every GPU from framework `title`, else None."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is None or hidden.strip() not in ("", "-1"):
        return None
    return (f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU from {title}.",
            "`unset CUDA_VISIBLE_DEVICES` (or set it to the GPU index you want).")
