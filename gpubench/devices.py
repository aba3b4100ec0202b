"""Device names, the devices the backend sees, placement, and the guard against a silent CPU
fallback: a GPU asked for and not seen raises `GPUNotAvailableError` with the diagnosis."""

import contextlib
import warnings
from collections.abc import Iterator

from gpubench import backends, machine, params
from gpubench.backends import GPUNotAvailableError
from gpubench.params import DeviceError

check_name = params.check_device  # a name's syntax, checked without loading a backend


def list_devices() -> list[str]:
    """Canonical names of the devices the backend sees: "cpu" first, then "gpu:0", "gpu:1", ..."""
    return ["cpu"] + [f"gpu:{i}" for i in range(backends.current().gpu_count())]


def gpus_first() -> list[str]:
    """Every device of this environment, GPUs first, the CPU last (a chapter's default)."""
    return list_devices()[1:] + ["cpu"]


def resolve(name: str) -> str:
    """`name` as "cpu" or "gpu:N" ("auto": the first GPU, else the CPU), or DeviceError or
    GPUNotAvailableError (a GPU asked for and not seen) saying what to do instead."""
    match = params.DEVICE_PATTERN.match(check_name(name))
    if str(match[1]).lower() == "cpu":
        return "cpu"
    if match[1] is None:  # "auto"
        if not (gpus := list_devices()[1:]) and machine.nvidia_smi_gpus():
            from gpubench.backends.diagnosis import diagnose  # noqa: PLC0415 - loaded only now

            warnings.warn("device 'auto' runs on the CPU although nvidia-smi lists a GPU.\n"
                          + diagnose(), stacklevel=2)
        return gpus[0] if gpus else "cpu"
    canonical = f"gpu:{int(match[2] or 0)}"
    if canonical not in (gpus := check_gpu(f"device {name!r} asked for a GPU")):
        raise DeviceError(f"unknown device {name!r}: {backends.current().TITLE} sees "
                          f"{len(gpus)} GPU(s), use one of {', '.join(gpus)} (or \"cpu\")")
    return canonical


@contextlib.contextmanager
def scope(device: str) -> Iterator[str]:
    """Place the work inside the block on `device`; yields the canonical name."""
    canonical = resolve(device)
    with backends.current().scope(canonical):
        yield canonical


def check_gpu(asked: str | None = None) -> list[str]:
    """The visible GPUs, or `GPUNotAvailableError` with the diagnosis (`asked`: who wanted one)."""
    if not (gpus := list_devices()[1:]):
        from gpubench.backends.diagnosis import diagnose  # noqa: PLC0415 - only when missing

        title = backends.current().TITLE
        said = f"{asked}, but {title} sees none" if asked else f"{title} sees no GPU"
        raise GPUNotAvailableError(f"{said}.\n" + diagnose())
    return gpus
