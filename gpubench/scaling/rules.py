"""Multi_GPU_Scaling's rules that need no framework: when `gpubench run` includes the chapter,
the --cluster list and --index, the global batch of weak and strong scaling, and the names
that the launcher and its workers share."""

from __future__ import annotations

import re

NOTEBOOK = "Multi_GPU_Scaling"
CLI_NOTEBOOK = "gpubench scaling"
CLUSTER_BACKEND = "tensorflow"  # the backend of the several-machine mode
# The backends with a data-parallel path (gpubench/scaling/<backend>_parallel.py).
PARALLEL_BACKENDS = ("tensorflow", "jax")
# Set by `launch_local` in each worker's environment: the launcher's PID (the worker dies with
# it), and the run directory whose lock the launcher holds for the workers.
LAUNCHER_ENV = "GPUBENCH_SCALING_LAUNCHER"
LOCKED_ENV = "GPUBENCH_SCALING_LOCKED"
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})$")


def include_in_run(env_is_gpu: bool, gpu_count: int, profile: str,
                   asked_by_name: bool) -> dict | None:
    """Extra notebook parameters for `gpubench run`, or None to leave Multi_GPU_Scaling out.

    Two or more GPUs: as it is. Else on the CPU split into two virtual devices, only in a CPU
    env's quick profile or when asked for by name, so the full run keeps to its time budget.
    On JAX the chapter's first cell splits the CPU (XLA_FLAGS) before JAX loads: no kernel
    environment is needed.
    """
    if env_is_gpu and gpu_count >= 2:
        return {}
    if asked_by_name or (profile == "quick" and not env_is_gpu):
        return {"virtual_devices": 2}
    return None


def backend_refusal(backend: str) -> str | None:
    """Why the chapter cannot run on `backend`, naming the backends that can; None if it can."""
    if backend in PARALLEL_BACKENDS:
        return None
    can = " or ".join(PARALLEL_BACKENDS)
    return (f"{NOTEBOOK} cannot run on {backend}: Keras's distribution API does not cover it and "
            f"gpubench has no data-parallel path for it; run it in a {can} env (e.g. --envs cpu "
            "or --envs jax-cpu)")


def check_backend(backend: str) -> str:
    """`backend` if the chapter runs on it, else a ValueError saying which backends can."""
    if why := backend_refusal(backend):
        raise ValueError(why)
    return backend


def parse_cluster(text: str) -> list[str]:
    """"host:port,host:port,..." -> the list of addresses; a ValueError names a malformed one."""
    entries = [part.strip() for part in str(text).split(",")]
    for entry in entries:
        match = _HOST_PORT.match(entry)
        if not match or not 0 < int(match.group("port")) < 65536:
            raise ValueError(f"malformed --cluster entry {entry!r} in {text!r}; give HOST:PORT "
                             "pairs separated by commas, e.g. 10.0.0.1:12345,10.0.0.2:12345")
    if len(set(entries)) != len(entries):
        raise ValueError(f"--cluster {text!r} names an address twice; give each worker once")
    return entries


def check_index(index: int, workers: int) -> int:
    """This worker's index in a cluster of `workers`, or a ValueError naming it."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < workers:
        raise ValueError(f"--index {index!r} is out of range for a cluster of {workers} "
                         f"worker(s); use 0 to {workers - 1}")
    return index


def global_batch(scaling: str, per_replica_batch_size: int, replicas: int) -> tuple[int, int]:
    """(global batch, batch per replica): weak keeps `per_replica_batch_size` per replica, strong
    keeps it as the global batch, split as evenly as whole images allow."""
    if scaling == "weak":
        return per_replica_batch_size * replicas, per_replica_batch_size
    per_replica = per_replica_batch_size // replicas
    if per_replica < 1:
        raise ValueError(f"strong scaling splits a global batch of {per_replica_batch_size} over "
                         f"{replicas} replicas: less than one image each; use a larger "
                         "per_replica_batch_size or fewer replicas")
    return per_replica * replicas, per_replica
