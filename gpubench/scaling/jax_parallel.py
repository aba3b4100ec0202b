"""Data parallelism on JAX: `keras.distribution.DataParallel`, trained by Keras's own `fit`; across
processes after `keras.distribution.initialize` (jax.distributed, process 0 the coordinator; gloo
between CPUs, NCCL between GPUs), each process giving `fit` its share of the data."""

from __future__ import annotations

import os
from collections.abc import Sequence

from gpubench import backends
from gpubench.backends import jax as _backend

STRATEGY = "data_parallel"
JIT_COMPILE = True  # Keras's fit compiles the step on JAX
INPUT_PIPELINE = "arrays"
PROCESSES = False
EVERY_WORKER_LISTENS = False  # worker 0, the coordinator, alone
_virtual: int | None = None  # the CPU devices split_cpu asked for


def split_cpu(count: int) -> None:
    """Split the CPU into `count` JAX devices; must run before JAX sets up its devices."""
    global _virtual
    jax = _backend.module()  # not started yet
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        if len(jax.devices("cpu")) < count:
            raise RuntimeError(
                f"virtual_devices={count}: JAX has already set up its devices in this process "
                f"({len(jax.devices('cpu'))} CPU device(s)); restart the kernel and call "
                f"gb.scaling.split_cpu({count}) before anything runs on JAX") from None
    _virtual = count


def cpu_count() -> int:
    """How many CPU devices JAX has (the split asked for, else all it was started with)."""
    return _virtual or len(_backend.jax().devices("cpu"))


def _fields(found, engine: str, collective: str | None) -> dict:
    devices = found.device_mesh.devices.size
    over = "NCCL" if "gpu" in str(found.device_mesh.devices.flat[0]) else collective or "host"
    return {"strategy": STRATEGY, "engine": engine, "collective": collective, "replicas": devices,
            "all_reduce": f"XLA all-reduce ({over})" if devices > 1 else "none (one replica)"}


def strategy(devices: Sequence[str]):
    """(DataParallel over the canonical `devices` of this process, its fields)."""
    found = backends.keras().distribution.DataParallel(devices=list(devices))
    return found, _fields(found, "keras.distribution", None)


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
    found = keras.distribution.DataParallel(auto_shard_dataset=False)
    gpu = jax.devices()[0].platform == "gpu"
    return found, _fields(found, "jax.distributed", "nccl" if gpu else "gloo")


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


def distributed_input(found, x, y, batch: int, *, seed: int = 0, shuffle: bool = True):
    """This process's share of `x`, `y` and of a batch; a seeded order generator (or None)."""
    import numpy as np  # noqa: PLC0415

    rank, count = _backend.jax().process_index(), _backend.jax().process_count()
    mine = slice(rank * (len(x) // count), (rank + 1) * (len(x) // count))
    return x[mine], y[mine], batch // count, np.random.default_rng(seed) if shuffle else None


def make_step(found, model, batch: int):
    """Keras's own compiled step, which `fit` runs in the distribution `found`."""
    return [found, model, True]  # True: the first epoch is still to come


def run_epoch(step, data, steps: int) -> float:
    """An epoch of `fit` over this process's share in a new order; the summed loss of its steps."""
    import numpy as np  # noqa: PLC0415

    (found, model, first), (x, y, batch, order) = step, data
    order = order.permutation(len(x)) if order is not None else np.arange(len(x))
    step[2], total = False, 0.0
    with found.scope():  # epoch 1 in two calls: Keras compiles again on the second (it resets
        for part in np.split(order, [steps // 2 * batch] if first else []):  # the metrics)
            if len(part):
                fitted = model.fit(x[part], y[part], batch_size=batch, shuffle=False, verbose=0)
                total += fitted.history["loss"][0] * (len(part) // batch)
    return total


def sync(model) -> None:
    """Wait until the epoch's updates are computed: block on the model's variables."""
    _backend.sync(list(model.variables))
