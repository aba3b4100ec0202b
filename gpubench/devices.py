"""Which devices TensorFlow sees, names for them, and the guard against a silent CPU fallback.

TensorFlow only logs "GPU will not be used" at info level and carries on on the
CPU. gpubench never does that: asking for a GPU that TensorFlow cannot see
raises `GPUNotAvailableError` with a diagnosis and the command that fixes it.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Iterator

from gpubench._tf import tensorflow

ACCEPTED = '"auto", "cpu", "gpu", "gpu:N", or TensorFlow\'s "/CPU:0", "/GPU:N", "/device:GPU:N"'

_PATTERN = re.compile(r"^/?(?:device:)?(cpu|gpu)(?::(\d+))?$", re.IGNORECASE)
_memory_growth_done = False


class DeviceError(ValueError):
    """A device name gpubench does not understand, or a device that does not exist."""


class GPUNotAvailableError(RuntimeError):
    """A GPU was asked for and TensorFlow cannot see one; the message says why."""


def _physical_gpus() -> list:
    """The GPUs TensorFlow sees (patched in tests to fake GPU machines)."""
    return tensorflow().config.list_physical_devices("GPU")


def _is_cuda_build() -> bool:
    """Whether this TensorFlow was built with CUDA (patched in tests)."""
    return bool(tensorflow().test.is_built_with_cuda())


def enable_memory_growth() -> None:
    """Let TensorFlow grow GPU memory as needed instead of taking it all at start-up.

    Must run before the GPU initialises; `list_devices` and `resolve` call it.
    """
    global _memory_growth_done
    if _memory_growth_done:
        return
    tf = tensorflow()
    for gpu in _physical_gpus():
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except (RuntimeError, ValueError):
            pass  # already initialised (e.g. by the user); growth stays as it was
    _memory_growth_done = True


def list_devices() -> list[str]:
    """Canonical names of the devices TensorFlow sees: "cpu" first, then "gpu:0", "gpu:1", ..."""
    enable_memory_growth()
    return ["cpu"] + [f"gpu:{i}" for i in range(len(_physical_gpus()))]


def check_name(name: object) -> str:
    """`name` stripped, if gpubench accepts its syntax (checked without TensorFlow); else DeviceError."""
    if not isinstance(name, str):
        raise DeviceError(f"device must be a string, got {name!r}; use one of {ACCEPTED}")
    match = _PATTERN.match(name.strip())
    if name.strip().lower() != "auto" and not match:
        raise DeviceError(f"unknown device {name!r}; use one of {ACCEPTED}")
    if match and match.group(1).lower() == "cpu" and int(match.group(2) or 0) != 0:
        raise DeviceError(f"unknown device {name!r}: TensorFlow has one CPU device, use \"cpu\"")
    return name.strip()


def resolve(name: str) -> str:
    """Map a device name to its canonical form ("cpu" or "gpu:N"), or raise a clear error.

    "auto" picks the first GPU when there is one and the CPU otherwise (and says
    which in the returned name). "gpu" or "gpu:N" with no visible GPU raises
    `GPUNotAvailableError`; an unknown name or index raises `DeviceError`.
    """
    text = check_name(name)
    if text.lower() == "auto":
        return "gpu:0" if len(list_devices()) > 1 else "cpu"
    match = _PATTERN.match(text)
    if match.group(1).lower() == "cpu":
        return "cpu"
    index = int(match.group(2) or 0)
    available = list_devices()[1:]
    if not available:
        raise GPUNotAvailableError(
            f"device {name!r} asked for a GPU, but TensorFlow sees none.\n" + diagnose()
        )
    canonical = f"gpu:{index}"
    if canonical not in available:
        raise DeviceError(
            f"unknown device {name!r}: TensorFlow sees {len(available)} GPU(s), "
            f"use one of {', '.join(available)} (or \"cpu\")"
        )
    return canonical


def tf_name(device: str) -> str:
    """TensorFlow's name for a device ("cpu" -> "/CPU:0", "gpu:1" -> "/GPU:1")."""
    canonical = resolve(device)
    if canonical == "cpu":
        return "/CPU:0"
    return "/GPU:" + canonical.split(":")[1]


@contextlib.contextmanager
def scope(device: str) -> Iterator[str]:
    """Place the TensorFlow work inside the block on `device`; yields the canonical name."""
    canonical = resolve(device)
    with tensorflow().device(tf_name(canonical)):
        yield canonical


def check_gpu() -> list[str]:
    """Return the visible GPUs, or raise `GPUNotAvailableError` with the diagnosis."""
    gpus = list_devices()[1:]
    if not gpus:
        raise GPUNotAvailableError("TensorFlow sees no GPU.\n" + diagnose())
    return gpus


def build_info() -> dict:
    """TensorFlow, Keras and CUDA versions of this build (the snapshot's software part)."""
    tf = tensorflow()
    import keras  # noqa: PLC0415 - loaded by tensorflow() already

    info = dict(tf.sysconfig.get_build_info())
    return {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "backend": keras.backend.backend(),
        "cuda_build": _is_cuda_build(),
        "cuda_version": info.get("cuda_version"),
        "cudnn_version": info.get("cudnn_version"),
    }


def nvidia_smi(*args: str) -> str | None:
    """What `nvidia-smi ARGS` prints, or None when the command is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def nvidia_smi_gpus() -> list[str] | None:
    """Lines of `nvidia-smi -L`, [] when it lists none, None when the command is missing or fails."""
    out = nvidia_smi("-L")
    return None if out is None else [line for line in out.splitlines() if line.strip().startswith("GPU")]


def diagnose() -> str:
    """Explain why TensorFlow sees no GPU and name the command that fixes it."""
    tf_version = tensorflow().__version__
    smi = nvidia_smi_gpus()
    if smi is None and shutil.which("nvidia-smi"):
        return (
            f"Diagnosis: `nvidia-smi -L` fails: the NVIDIA driver is missing or not working, so "
            f"TensorFlow {tf_version} cannot see a GPU.\n"
            "Fix: reinstall the NVIDIA driver until `nvidia-smi -L` lists your GPU "
            "(on WSL2, install the driver on Windows, not inside Linux)."
        )
    if not smi:
        why = "nvidia-smi not found" if smi is None else "nvidia-smi lists none"
        return (
            f"Diagnosis: no NVIDIA GPU on this machine ({why}); TensorFlow runs on the CPU.\n"
            "Fix: nothing to fix for CPU runs. If the machine does have an NVIDIA GPU, install "
            "its driver until `nvidia-smi -L` lists it (on WSL2: the driver on Windows)."
        )
    if platform.system() == "Windows":
        return (
            "Diagnosis: native Windows. TensorFlow dropped GPU support on native Windows "
            "after 2.10.\nFix: run gpubench inside WSL2 (install the NVIDIA driver on "
            "Windows, then `make setup GPU=1` in WSL2)."
        )
    if not _is_cuda_build():
        return (
            f"Diagnosis: the driver sees {smi[0].strip()}, but this TensorFlow {tf_version} is a "
            "CPU-only build (tensorflow-cpu, or a platform without CUDA wheels); it can never "
            "see a GPU.\nFix: use the GPU environment: `make setup GPU=1` (or `gpubench setup "
            "--gpu`), then pick the kernel gpubench-gpu; in a plain venv: "
            "`pip install 'tensorflow[and-cuda]==2.21.*'`."
        )
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return (
            f"Diagnosis: CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU from TensorFlow.\n"
            "Fix: `unset CUDA_VISIBLE_DEVICES` (or set it to the GPU index you want)."
        )
    return (
        f"Diagnosis: the driver sees {len(smi)} GPU(s) ({smi[0].strip()}), but this CUDA build "
        f"of TensorFlow {tf_version} cannot load the CUDA/cuDNN libraries it needs.\n"
        "Fix: `pip install 'tensorflow[and-cuda]==2.21.*'` in this environment (it brings "
        "matching CUDA and cuDNN wheels), and make sure LD_LIBRARY_PATH does not point at "
        "an older CUDA."
    )
