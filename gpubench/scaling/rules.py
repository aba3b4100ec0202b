"""Multi_GPU_Scaling's rules, with no framework loaded: when `gpubench run` includes it, the
--cluster list, the global batch, device names, replica counts, the backend's parallel module."""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from types import ModuleType

from gpubench import backends, params

NOTEBOOK = "Multi_GPU_Scaling"
CLI_NOTEBOOK = "gpubench scaling"
LAUNCHER_ENV = "GPUBENCH_SCALING_LAUNCHER"  # the PID a worker dies with; it holds the lock
PARAMS_ENV = "GPUBENCH_SCALING_PARAMS"  # JSON: the workers' parameters over the profile's
CONNECT_TIMEOUT_ENV = "GPUBENCH_SCALING_CONNECT_TIMEOUT"  # seconds a worker waits for worker 0
CORRUPT_ENV = "GPUBENCH_TEST_CORRUPT_ALLREDUCE"  # a test's seam: this worker sends a wrong tensor
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})$")


def include_in_run(env_is_gpu: bool, gpu_count: int, profile: str,
                   asked_by_name: bool) -> dict | None:
    """Extra parameters for `gpubench run` (2+ GPUs, or the CPU split in two), or None: left out."""
    if env_is_gpu and gpu_count >= 2:
        return {}
    if asked_by_name or (profile == "quick" and not env_is_gpu):
        return {"virtual_devices": 2}
    return None


def parallel() -> ModuleType:
    """The backend's data-parallel module, gpubench/scaling/<backend>_parallel.py."""
    return importlib.import_module(f"gpubench.scaling.{backends.requested()}_parallel")


def parse_cluster(text: str, index: int = 0) -> list[str]:
    """"host:port,..." -> the addresses, `index` this worker's; ValueError: a bad entry or index."""
    entries = [part.strip() for part in str(text).split(",")]
    for entry in entries:
        match = _HOST_PORT.match(entry)
        if not match or not 0 < int(match.group("port")) < 65536:
            raise ValueError(f"malformed --cluster entry {entry!r} in {text!r}; give HOST:PORT "
                             "pairs separated by commas, e.g. 10.0.0.1:12345,10.0.0.2:12345")
    if len(set(entries)) != len(entries):
        raise ValueError(f"--cluster {text!r} names an address twice; give each worker once")
    if not 0 <= index < len(entries):
        raise ValueError(f"--index {index!r} is out of range for a cluster of {len(entries)} "
                         f"worker(s); use 0 to {len(entries) - 1}")
    return entries


def global_batch(scaling: str, per_replica_batch_size: int, replicas: int) -> tuple[int, int]:
    """(global batch, per replica): weak keeps the per-replica batch, strong the global one."""
    if scaling == "weak":
        return per_replica_batch_size * replicas, per_replica_batch_size
    per_replica = per_replica_batch_size // replicas
    if per_replica < 1:
        raise ValueError(f"strong scaling splits a global batch of {per_replica_batch_size} over "
                         f"{replicas} replicas: less than one image each; use a larger "
                         "per_replica_batch_size or fewer replicas")
    return per_replica * replicas, per_replica


def fields(strategy: str, engine: str, collective: str | None, replicas: int,
           all_reduce: str) -> dict:
    """A distribution's record fields; with one replica there is no all-reduce."""
    return {"strategy": strategy, "engine": engine, "collective": collective, "replicas": replicas,
            "all_reduce": all_reduce if replicas > 1 else "none (one replica)"}


def canonical(device: str) -> str:
    """"/GPU:1" -> "gpu:1", "/CPU:0" and "cpu" -> "cpu:0" (the names records carry)."""
    kind, _, index = str(device).strip().strip("/").lower().removeprefix("device:").partition(":")
    return f"{kind}:{index or 0}"


def check_replicas(replicas: Sequence[int] | None, device_count: int) -> list[int]:
    """The replica counts to run, ascending: `replicas`, else 1..device_count; checked."""
    if replicas and max(replicas) > device_count:  # each a positive int: check_parameters
        raise ValueError(f"replicas {max(replicas)} is more than the {device_count} device(s) to "
                         f"replicate over; use at most {device_count} (or more devices, "
                         "or virtual_devices on a CPU)")
    return sorted(set(replicas)) if replicas else list(range(1, device_count + 1))


def check_parameters(values: dict) -> dict:
    """Multi_GPU_Scaling's parameters checked together; `devices`, `replicas` become lists."""
    for name in ("model", "scaling"):
        params.one_of(name, values.get(name), name)
    for name in ("per_replica_batch_size", "epochs"):
        params.positive_int(name, values.get(name), maximum=params.LIMITS[name])
    names = ("devices", "replicas", "max_train_samples", "virtual_devices")
    return {**values, **{name: params.check_value(name, values.get(name), virtual_cpus=True)
                         for name in names}}
