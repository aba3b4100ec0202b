"""Device names, the devices the backend sees, placement, and the guard against a silent CPU
fallback: a GPU asked for and not seen raises `GPUNotAvailableError` with the backend's
diagnosis, on every backend. A thin face of `gpubench.backends`."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from gpubench import backends, machine, params
from gpubench.backends import DeviceError, GPUNotAvailableError

__all__ = ["DeviceError", "GPUNotAvailableError", "check_gpu", "check_name", "diagnose",
           "gpu_count", "gpus_first", "list_devices", "resolve", "scope"]


def gpu_count() -> int:
    """How many GPUs the backend sees."""
    return backends.current().gpu_count()


def list_devices() -> list[str]:
    """Canonical names of the devices the backend sees: "cpu" first, then "gpu:0", "gpu:1", ..."""
    return ["cpu"] + [f"gpu:{i}" for i in range(gpu_count())]


def gpus_first() -> list[str]:
    """Every device of this environment, GPUs first, the CPU last (a chapter's default)."""
    return list_devices()[1:] + ["cpu"]


def check_name(name: object, *, virtual_cpus: bool = False) -> str:
    """`name` stripped if its syntax is right ("cpu:N" only if virtual_cpus); loads no backend."""
    try:
        return params.check_device(name, virtual_cpus=virtual_cpus)
    except params.ParameterError as exc:
        raise DeviceError(str(exc)) from None


def resolve(name: str) -> str:
    """`name` as "cpu" or "gpu:N" ("auto": the first GPU, else the CPU), or DeviceError or
    GPUNotAvailableError (a GPU asked for and not seen) saying what to do instead."""
    match = params.DEVICE_PATTERN.match(check_name(name))
    if match and match[1].lower() == "cpu":
        return "cpu"
    gpus = list_devices()[1:]
    title = backends.current().TITLE
    if not match:  # "auto"
        if not gpus and machine.nvidia_smi_gpus():  # a GPU the backend cannot use
            warnings.warn("device 'auto' runs on the CPU although nvidia-smi lists a GPU.\n"
                          + diagnose(), stacklevel=2)
        return gpus[0] if gpus else "cpu"
    if not gpus:
        raise GPUNotAvailableError(f"device {name!r} asked for a GPU, but {title} sees none.\n"
                                   + diagnose())
    canonical = f"gpu:{int(match[2] or 0)}"
    if canonical not in gpus:
        raise DeviceError(f"unknown device {name!r}: {title} sees {len(gpus)} GPU(s), "
                          f"use one of {', '.join(gpus)} (or \"cpu\")")
    return canonical


@contextlib.contextmanager
def scope(device: str) -> Iterator[str]:
    """Place the work inside the block on `device`; yields the canonical name."""
    canonical = resolve(device)
    with backends.current().scope(canonical):
        yield canonical


def check_gpu() -> list[str]:
    """The visible GPUs, or `GPUNotAvailableError` with the diagnosis."""
    gpus = list_devices()[1:]
    if not gpus:
        raise GPUNotAvailableError(f"{backends.current().TITLE} sees no GPU.\n" + diagnose())
    return gpus


def diagnose() -> str:
    """Why the backend sees no GPU and what fixes it (the diagnosis loads only now)."""
    from gpubench.backends import diagnosis  # noqa: PLC0415 - only when a GPU is missing

    why, fix = diagnosis.diagnose(backends.current())
    return f"Diagnosis: {why}\nFix: {fix}"
