"""Why a backend sees no GPU, and the fix: loaded only when a GPU is asked for and missing."""

from __future__ import annotations

import os
import platform
import shutil
from types import ModuleType

from gpubench import machine

SETUP = "`gpubench doctor --gpu` names the command that makes it here"


def diagnose(backend: ModuleType) -> tuple[str, str]:
    """(why `backend` sees no GPU, the fix), from the machine, the build and the backend."""
    smi = machine.nvidia_smi_gpus()
    if backend.NAME == "jax" and (cause := jax_platforms(backend)):
        return cause
    if cause := machine_cause(smi, bool(shutil.which("nvidia-smi")), backend):
        return cause
    if cause := BUILDS[backend.NAME](backend, smi[0].strip()):
        return cause
    if cause := hidden_cause(backend.TITLE):
        return cause
    return BROKEN[backend.NAME](backend, len(smi), smi[0].strip())


def machine_cause(smi: list[str] | None, smi_present: bool,
                  backend: ModuleType) -> tuple[str, str] | None:
    """(why, fix) when the machine keeps the GPU from every framework, else None."""
    title = f"{backend.TITLE} {backend.version()}"
    if smi is None and smi_present:
        return (f"`nvidia-smi -L` fails: the NVIDIA driver is missing or not working, so "
                f"{title} cannot see a GPU.",
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


def jax_platforms(backend: ModuleType) -> tuple[str, str] | None:
    """(why, fix) when JAX_PLATFORMS keeps JAX off the GPU, else None."""
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if not platforms or "cuda" in platforms or "gpu" in platforms:
        return None
    return (f"JAX_PLATFORMS={platforms!r} keeps JAX {backend.version()} off the GPU.",
            "unset JAX_PLATFORMS (or include cuda in it).")


def tensorflow_build(backend: ModuleType, gpu: str) -> tuple[str, str] | None:
    """Native Windows, or a CPU-only TensorFlow."""
    if platform.system() == "Windows":
        return ("native Windows. TensorFlow dropped GPU support on native Windows after 2.10.",
                f"run gpubench inside WSL2 with the NVIDIA driver on Windows ({SETUP}).")
    if backend.is_cuda_build():
        return None
    return (f"the driver sees {gpu}, but this TensorFlow {backend.version()} is a CPU-only "
            "build (tensorflow-cpu, or a platform without CUDA wheels); it can never see a GPU.",
            f"use the GPU environment ({SETUP}); in a plain venv: "
            "`pip install 'tensorflow[and-cuda]==2.21.*'`.")


def jax_build(backend: ModuleType, gpu: str) -> tuple[str, str] | None:
    """Native Windows, or a jaxlib with no CUDA plugin."""
    if platform.system() == "Windows":
        return ("native Windows: JAX has no CUDA wheels for it.",
                f"run gpubench inside WSL2 ({SETUP}).")
    if backend.is_cuda_build():
        return None
    return (f"the driver sees {gpu}, but this jaxlib {backend.version()} is CPU-only "
            "(no CUDA plugin installed).",
            f"`pip install \"jax[cuda12]\"` in this environment (or use the jax-gpu env and its "
            f"kernel gpubench-jax-gpu: {SETUP}).")


def torch_build(backend: ModuleType, gpu: str) -> tuple[str, str] | None:
    """A CPU-only PyTorch."""
    if backend.is_cuda_build():
        return None
    return (f"the driver sees {gpu}, but this PyTorch {backend.torch().__version__} is a "
            "CPU-only build (torch.version.cuda is None); it can never see a GPU.",
            f"use the torch GPU env, kernel gpubench-torch-gpu ({SETUP}); in a plain venv: "
            "`pip install 'torch==2.13.*'` from PyPI, whose Linux wheel is the CUDA build.")


def tensorflow_broken(backend: ModuleType, count: int, gpu: str) -> tuple[str, str]:
    """A CUDA TensorFlow that cannot load its libraries."""
    said = f" TensorFlow said: {backend.said[0]}" if backend.said else ""
    return (f"the driver sees {count} GPU(s) ({gpu}), but this CUDA build of TensorFlow "
            f"{backend.version()} cannot load the CUDA/cuDNN libraries it needs.{said}",
            "`pip install 'tensorflow[and-cuda]==2.21.*'` in this environment (it brings "
            "matching CUDA and cuDNN wheels), and make sure LD_LIBRARY_PATH does not point at "
            "an older CUDA.")


def jax_broken(backend: ModuleType, count: int, gpu: str) -> tuple[str, str]:
    """A CUDA plugin that JAX could not start."""
    said = f" JAX said: {backend.said[0]}" if backend.said else ""
    return (f"the driver sees {count} GPU(s) ({gpu}) and JAX {backend.version()} has a "
            f"CUDA plugin, but it could not start it.{said}",
            "update the NVIDIA driver to one the plugin supports (`pip install -U "
            "\"jax[cuda12]\"` brings matching CUDA wheels), and make sure LD_LIBRARY_PATH does "
            "not point at an older CUDA.")


def torch_broken(backend: ModuleType, count: int, gpu: str) -> tuple[str, str]:
    """A CUDA PyTorch that cannot use the driver (too old for its CUDA)."""
    backend.cuda_available()
    cuda = backend.torch().version.cuda
    said = f" PyTorch said: {backend.said[0]}" if backend.said else ""
    return (f"the driver sees {count} GPU(s) ({gpu}), but PyTorch {backend.version()}, built "
            f"for CUDA {cuda}, cannot use it: the driver is likely too old for that CUDA.{said}",
            f"update the NVIDIA driver to one that supports CUDA {cuda} (the header of "
            "`nvidia-smi` shows the newest CUDA it supports), or install a torch built for an "
            "older CUDA.")


BUILDS = {"tensorflow": tensorflow_build, "jax": jax_build, "torch": torch_build}
BROKEN = {"tensorflow": tensorflow_broken, "jax": jax_broken, "torch": torch_broken}
