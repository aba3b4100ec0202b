"""Which devices TensorFlow sees, names for them, and the guard against a silent CPU fallback.

Where TensorFlow would log "GPU will not be used" and carry on on the CPU, asking gpubench for
a GPU it cannot see raises `GPUNotAvailableError` with a diagnosis and the command that fixes it.
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
    """Let TensorFlow grow GPU memory as needed; must run before the GPUs initialise."""
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


def check_name(name: object, *, virtual_cpus: bool = False) -> str:
    """`name` stripped if its syntax is right ("cpu:N" only if virtual_cpus); no TensorFlow."""
    if not isinstance(name, str):
        raise DeviceError(f"device must be a string, got {name!r}; use one of {ACCEPTED}")
    match = _PATTERN.match(name.strip())
    if name.strip().lower() != "auto" and not match:
        raise DeviceError(f"unknown device {name!r}; use one of {ACCEPTED}")
    if match and match[1].lower() == "cpu" and int(match[2] or 0) != 0 and not virtual_cpus:
        raise DeviceError(f"unknown device {name!r}: TensorFlow has one CPU device, use \"cpu\" "
                          "(Multi_GPU_Scaling's virtual_devices=N splits it into cpu:0..cpu:N-1)")
    return name.strip()


def resolve(name: str) -> str:
    """`name` as "cpu" or "gpu:N" ("auto": the first GPU, else the CPU), or DeviceError or
    GPUNotAvailableError (a GPU asked for and not seen) with what to do instead."""
    match = _PATTERN.match(check_name(name))
    if match and match[1].lower() == "cpu":
        return "cpu"
    gpus = list_devices()[1:]
    if not match:  # "auto"
        return gpus[0] if gpus else "cpu"
    if not gpus:
        raise GPUNotAvailableError(f"device {name!r} asked for a GPU, but TensorFlow sees none.\n"
                                   + diagnose())
    canonical = f"gpu:{int(match[2] or 0)}"
    if canonical not in gpus:
        raise DeviceError(f"unknown device {name!r}: TensorFlow sees {len(gpus)} GPU(s), "
                          f"use one of {', '.join(gpus)} (or \"cpu\")")
    return canonical


def tf_name(device: str) -> str:
    """TensorFlow's name for a device ("cpu" -> "/CPU:0", "gpu:1" -> "/GPU:1")."""
    canonical = resolve(device)
    return "/CPU:0" if canonical == "cpu" else "/GPU:" + canonical.removeprefix("gpu:")


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

    info = tf.sysconfig.get_build_info()
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
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):  # missing, not executable, or hung
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
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if smi is None and shutil.which("nvidia-smi"):
        why = (f"`nvidia-smi -L` fails: the NVIDIA driver is missing or not working, so "
               f"TensorFlow {tf_version} cannot see a GPU.")
        fix = ("reinstall the NVIDIA driver until `nvidia-smi -L` lists your GPU (on WSL2, install "
               "the driver on Windows, not inside Linux).")
    elif not smi:
        found = "not found" if smi is None else "lists none"
        why = f"no NVIDIA GPU on this machine (nvidia-smi {found}); TensorFlow runs on the CPU."
        fix = ("nothing to fix for CPU runs. If the machine does have an NVIDIA GPU, install its "
               "driver until `nvidia-smi -L` lists it (on WSL2: the driver on Windows).")
    elif platform.system() == "Windows":
        why = "native Windows. TensorFlow dropped GPU support on native Windows after 2.10."
        fix = ("run gpubench inside WSL2 (install the NVIDIA driver on Windows, then "
               "`make setup GPU=1` in WSL2).")
    elif not _is_cuda_build():
        why = (f"the driver sees {smi[0].strip()}, but this TensorFlow {tf_version} is a CPU-only "
               "build (tensorflow-cpu, or a platform without CUDA wheels); it can never see a GPU.")
        fix = ("use the GPU environment: `make setup GPU=1` (or `gpubench setup --gpu`), then pick "
               "the kernel gpubench-gpu; in a plain venv: "
               "`pip install 'tensorflow[and-cuda]==2.21.*'`.")
    elif hidden is not None and hidden.strip() in ("", "-1"):
        why = f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU from TensorFlow."
        fix = "`unset CUDA_VISIBLE_DEVICES` (or set it to the GPU index you want)."
    else:
        why = (f"the driver sees {len(smi)} GPU(s) ({smi[0].strip()}), but this CUDA build of "
               f"TensorFlow {tf_version} cannot load the CUDA/cuDNN libraries it needs.")
        fix = ("`pip install 'tensorflow[and-cuda]==2.21.*'` in this environment (it brings "
               "matching CUDA and cuDNN wheels), and make sure LD_LIBRARY_PATH does not point at "
               "an older CUDA.")
    return f"Diagnosis: {why}\nFix: {fix}"
