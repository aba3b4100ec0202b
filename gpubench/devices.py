"""Device names, the devices the backend sees, placement, and the guard against a silent
CPU fallback.

A thin face of `gpubench.backends`: where a framework would log "GPU will not be used" and
carry on on the CPU, asking gpubench for a GPU it cannot see raises `GPUNotAvailableError`
with a diagnosis and the command that fixes it, on every backend.
"""

from __future__ import annotations

import contextlib
import platform
import shutil
import warnings
from collections.abc import Iterator

from gpubench import backends, machine, params
from gpubench.backends import DeviceError, GPUNotAvailableError

__all__ = ["ACCEPTED", "DeviceError", "GPUNotAvailableError", "check_gpu", "check_name",
           "diagnose", "list_devices", "resolve", "scope"]
ACCEPTED = params.ACCEPTED_DEVICES
_PATTERN = params.DEVICE_PATTERN  # the syntax: one rule, in params
nvidia_smi_gpus = machine.nvidia_smi_gpus


def gpu_count() -> int:
    """How many GPUs the backend sees."""
    return backends.current().gpu_count()


def list_devices() -> list[str]:
    """Canonical names of the devices the backend sees: "cpu" first, then "gpu:0", "gpu:1", ..."""
    return ["cpu"] + [f"gpu:{i}" for i in range(gpu_count())]


def gpus_first() -> list[str]:
    """Every device of this environment, GPUs first and the CPU last: what a chapter measures
    when it is given no devices."""
    return list_devices()[1:] + ["cpu"]


def check_name(name: object, *, virtual_cpus: bool = False) -> str:
    """`name` stripped if its syntax is right ("cpu:N" only if virtual_cpus); loads no backend."""
    try:
        return params.check_device(name, virtual_cpus=virtual_cpus)
    except params.ParameterError as exc:
        raise DeviceError(str(exc)) from None


def resolve(name: str) -> str:
    """`name` as "cpu" or "gpu:N" ("auto": the first GPU, else the CPU), or DeviceError or
    GPUNotAvailableError (a GPU asked for and not seen) with what to do instead."""
    match = _PATTERN.match(check_name(name))
    if match and match[1].lower() == "cpu":
        return "cpu"
    gpus = list_devices()[1:]
    backend = backends.current().TITLE
    if not match:  # "auto"
        if not gpus and nvidia_smi_gpus():  # a GPU on the machine that the backend cannot use
            warnings.warn("device 'auto' runs on the CPU although nvidia-smi lists a GPU.\n"
                          + diagnose(), stacklevel=2)
        return gpus[0] if gpus else "cpu"
    if not gpus:
        raise GPUNotAvailableError(f"device {name!r} asked for a GPU, but {backend} sees none.\n"
                                   + diagnose())
    canonical = f"gpu:{int(match[2] or 0)}"
    if canonical not in gpus:
        raise DeviceError(f"unknown device {name!r}: {backend} sees {len(gpus)} GPU(s), "
                          f"use one of {', '.join(gpus)} (or \"cpu\")")
    return canonical


@contextlib.contextmanager
def scope(device: str) -> Iterator[str]:
    """Place the work inside the block on `device`; yields the canonical name."""
    canonical = resolve(device)
    with backends.current().scope(canonical):
        yield canonical


def check_gpu() -> list[str]:
    """Return the visible GPUs, or raise `GPUNotAvailableError` with the diagnosis."""
    gpus = list_devices()[1:]
    if not gpus:
        raise GPUNotAvailableError(f"{backends.current().TITLE} sees no GPU.\n" + diagnose())
    return gpus


def diagnose() -> str:
    """Explain why the backend sees no GPU and name the command that fixes it."""
    why, fix = backends.current().diagnose(
        nvidia_smi_gpus(), smi_present=bool(shutil.which("nvidia-smi")),
        windows=platform.system() == "Windows")
    return f"Diagnosis: {why}\nFix: {fix}"
