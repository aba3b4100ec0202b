"""Where data-parallel training runs: the backend's data-parallel module, the CPU split into
virtual devices, the devices to replicate over, the replica counts, the distribution over
them, and the device telemetry watches.

What differs by backend lives in `gpubench.backends.<backend>_parallel` (`parallel()`):
TensorFlow's `MirroredStrategy`, JAX's `keras.distribution.DataParallel`. Nothing here loads a
framework at import time; `split_cpu` must run before the backend sets up its devices.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence
from types import ModuleType

from gpubench import backends
from gpubench.params import positive_int
from gpubench.scaling.rules import check_backend

_CPU_N = re.compile(r"^/?(?:device:)?cpu:(\d+)$", re.IGNORECASE)


def backend_name() -> str:
    """The backend this process trains on: Keras's, once loaded, else the one it will load."""
    if "keras" in sys.modules:
        return backends.current().NAME
    return backends.requested()


def parallel() -> ModuleType:
    """The backend's data-parallel module (gpubench.backends.<backend>_parallel); loads no
    framework by itself); ValueError, naming the backends that can, for one that has none."""
    return importlib.import_module(f"gpubench.scaling.{check_backend(backend_name())}_parallel")


def split_cpu(count: int | None) -> None:
    """Split the CPU into `count` devices (None: leave it); must run before the backend sets up
    its devices: first thing in a chapter (on JAX it sets XLA_FLAGS before JAX loads)."""
    if count is None:
        return
    positive_int("virtual_devices", count)
    parallel().split_cpu(count)


def local_devices(names: Sequence[str] | None = None) -> list[str]:
    """Canonical names of the devices to replicate over: `names`, else every GPU, else every CPU
    device ("cpu:0", "cpu:1", ... when the CPU is split).

    "cpu:N" names a virtual CPU device (see `split_cpu`); other names go through
    `devices.resolve`, so a GPU asked for and not there raises GPUNotAvailableError.
    """
    from gpubench import devices  # noqa: PLC0415 - loads the backend, after split_cpu

    cpus = parallel().cpu_count()
    if names is None:
        return devices.list_devices()[1:] or [f"cpu:{i}" for i in range(cpus)]
    chosen = []
    for name in names:
        match = _CPU_N.match(str(name).strip())
        if match and int(match.group(1)) > 0:
            if int(match.group(1)) >= cpus:
                raise devices.DeviceError(
                    f"unknown device {name!r}: {backend_name()} has {cpus} CPU device(s); use "
                    f"cpu:0 to cpu:{cpus - 1}, or set virtual_devices to split the CPU into more")
            chosen.append(f"cpu:{match.group(1)}")
        else:
            chosen.append(canonical(devices.resolve(name)))
    if len(set(chosen)) != len(chosen):
        raise devices.DeviceError(f"devices {list(names)!r} name a device twice; give each once")
    return chosen


def canonical(device: str) -> str:
    """"/GPU:1" -> "gpu:1", "/CPU:0" and "cpu" -> "cpu:0" (the names records carry)."""
    kind, _, index = device.strip("/").lower().removeprefix("device:").partition(":")
    return f"{kind}:{index or 0}"


def check_replicas(replicas: Sequence[int] | None, device_count: int) -> list[int]:
    """The replica counts to run, ascending: `replicas`, else 1..device_count; checked."""
    if replicas is None:
        return list(range(1, device_count + 1))
    for count in replicas:  # each a positive int already: params.check_scaling
        if count > device_count:
            raise ValueError(f"replicas {count} is more than the {device_count} device(s) to "
                             f"replicate over; use at most {device_count} (or more devices, "
                             "or virtual_devices on a CPU)")
    return sorted(set(replicas))


def strategy(device_names: Sequence[str]):
    """(the backend's distribution over `device_names`, the all-reduce it uses): MirroredStrategy
    on TensorFlow, DataParallel on JAX."""
    return parallel().strategy([canonical(d) for d in device_names])


def telemetry_device(device_names: Sequence[str]) -> str:
    """The device a telemetry.Monitor watches for a run on `device_names`: the first GPU, else
    "cpu" (NVML reads one GPU at a time)."""
    gpus = [canonical(d) for d in device_names if canonical(d).startswith("gpu")]
    return gpus[0] if gpus else "cpu"
