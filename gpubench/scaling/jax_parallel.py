"""Data parallelism on JAX: `keras.distribution.DataParallel` and Keras's own `fit`; across
processes, jax.distributed (process 0 the coordinator; gloo between CPUs, NCCL between GPUs)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from gpubench import backends
from gpubench.backends import jax as _backend
from gpubench.scaling.rules import fields

STRATEGY = "data_parallel"
JIT_COMPILE = True  # Keras's fit compiles the step on JAX
INPUT_PIPELINE = "arrays"
PROCESSES = False
EVERY_WORKER_LISTENS = False  # worker 0, the coordinator, alone


def split_cpu(count: int | None) -> int:
    """Split the CPU into `count` devices (None: leave it, or XLA_FLAGS's); how many there are."""
    jax = _backend.module()  # not started yet
    try:
        if count:
            jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        if len(jax.devices("cpu")) < count:
            raise
    return count or len(jax.devices("cpu"))


def _fields(found, engine: str, collective: str | None):
    mesh = found.device_mesh.devices
    over = "NCCL" if "gpu" in str(mesh.flat[0]) else collective or "host"
    return found, fields(STRATEGY, engine, collective, mesh.size, f"XLA all-reduce ({over})")


def strategy(devices: Sequence[str]):
    """(DataParallel over the canonical `devices` of this process, its fields)."""
    found = backends.keras().distribution.DataParallel(devices=list(devices))
    return _fields(found, "keras.distribution", None)


def join(cluster: Sequence[str], index: int, replicas: int | None, device: str | None = None):
    """(DataParallel over every process's devices, its fields); before anything runs on JAX."""
    import keras  # noqa: PLC0415 - as it is: gpubench's backends.keras() starts JAX's platforms

    jax = _backend.module()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_num_cpu_devices", replicas or 1)  # a CPU: one device unless asked
    if replicas:
        os.environ.setdefault("JAX_LOCAL_DEVICE_IDS", ",".join(map(str, range(replicas))))
    keras.distribution.initialize(",".join(cluster), len(cluster), index)
    if len(jax.local_devices()) < (replicas or 1):
        raise ValueError(f"--replicas {replicas} is more than the {len(jax.local_devices())} "
                         "device(s) of this worker")
    return _fields(keras.distribution.DataParallel(auto_shard_dataset=False), "jax.distributed",
                   "nccl" if jax.devices()[0].platform == "gpu" else "gloo")


def all_reduce(found, values):
    """`values` from every replica of this process, summed over every replica of every process."""
    import numpy as np  # noqa: PLC0415

    jax = _backend.jax()
    layout = found.get_data_layout((found.device_mesh.devices.size, len(values))).backend_layout
    mine = np.tile(np.asarray(values, dtype="float32"), (jax.local_device_count(), 1))
    replicated = jax.sharding.NamedSharding(layout.mesh, jax.sharding.PartitionSpec())
    total = jax.jit(lambda a: a.sum(axis=0), out_shardings=replicated)(
        jax.make_array_from_process_local_data(layout, mine))
    return np.asarray(total.addressable_data(0))


def leave(found) -> None:
    """Leave the cluster (nothing to do in one process, or once left)."""
    _backend.module().distributed.shutdown()


def make_epoch(found, model, x, y, batch: int, steps: int, *, seed: int = 0, shuffle: bool = True):
    """A function: an epoch of `fit` on this process's share, the summed loss of its steps."""
    import numpy as np  # noqa: PLC0415

    rank, count = _backend.jax().process_index(), _backend.jax().process_count()
    mine, batch = slice(rank * (len(x) // count), (rank + 1) * (len(x) // count)), batch // count
    x, y, order = x[mine], y[mine], np.random.default_rng(seed) if shuffle else None
    splits = [[steps // 2 * batch]]  # epoch 1 in two calls: Keras compiles again on the second

    def epoch() -> float:
        total, shuffled = 0.0, order.permutation(len(x)) if order else np.arange(len(x))
        with found.scope():
            for part in np.split(shuffled, splits.pop() if splits else []):
                if len(part):  # (it resets the metrics)
                    fitted = model.fit(x[part], y[part], batch_size=batch, shuffle=False, verbose=0)
                    total += fitted.history["loss"][0] * (len(part) // batch)
        _backend.sync(list(model.variables))
        return total

    return epoch
