"""Data parallelism on TensorFlow: MirroredStrategy in one process; MultiWorkerMirroredStrategy
across processes and machines (TF_CONFIG; a gRPC ring between CPUs, NCCL between GPUs). Keras 3's
`fit` fails under the latter (keras-team/keras#20585), so both strategies share this step."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence

from gpubench.backends import tensorflow as _backend

STRATEGY = "mirrored"
JIT_COMPILE = False  # the step is a tf.function without XLA, as the book's training
INPUT_PIPELINE = "tf.data"
PROCESSES = False
EVERY_WORKER_LISTENS = True  # on the port of its own --cluster entry
_cluster_process = False  # set once this process joined a MultiWorkerMirroredStrategy cluster


def split_cpu(count: int) -> None:
    """Split the CPU into `count` logical devices; must run before TensorFlow initialises them."""
    tf = _backend.tf()
    cpu = tf.config.list_physical_devices("CPU")[0]
    if cpu_count() == count:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError:
        raise RuntimeError(
            f"virtual_devices={count}: TensorFlow has already set up its devices in this process "
            f"({cpu_count()} CPU device(s)); restart the kernel and set virtual_devices "
            "before anything else runs") from None


def cpu_count() -> int:
    """How many CPU devices TensorFlow has (1, or the virtual split), without initialising them."""
    tf = _backend.tf()
    return len(tf.config.get_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0]) or [None])


def strategy(devices: Sequence[str]):
    """(MirroredStrategy over the canonical `devices`, its fields)."""
    tf = _backend.tf()
    gpus = all(d.startswith("gpu") for d in devices)
    if len(devices) == 1:
        ops, name = tf.distribute.ReductionToOneDevice(), "none (one replica)"
    elif gpus and platform.system() == "Linux":
        ops, name = tf.distribute.NcclAllReduce(), "NCCL"
    elif gpus:
        ops, name = tf.distribute.HierarchicalCopyAllReduce(), "hierarchical copy"
    else:
        ops, name = tf.distribute.ReductionToOneDevice(), "reduction to one device"
    found = tf.distribute.MirroredStrategy([_backend.tf_name(d) for d in devices], ops)
    return found, {"strategy": STRATEGY, "engine": "tf.distribute", "collective": None,
                   "all_reduce": name, "replicas": len(devices)}


def join(cluster: Sequence[str], index: int, replicas: int | None, device: str | None = None):
    """(MultiWorkerMirroredStrategy on `replicas` GPUs or the CPU, its fields): before TF works."""
    global _cluster_process
    _cluster_process = True
    tf = _backend.tf()
    gpus = tf.config.list_physical_devices("GPU")
    if (replicas or 1) > max(len(gpus), 1):
        raise ValueError(f"--replicas {replicas} is more than the {max(len(gpus), 1)} device(s) "
                         f"of this worker ({len(gpus)} GPU(s)); use at most {max(len(gpus), 1)}")
    if gpus:
        tf.config.set_visible_devices(gpus[:replicas or len(gpus)], "GPU")
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": list(cluster)}, "task": {"type": "worker", "index": index}})
    impl = tf.distribute.experimental.CommunicationImplementation
    found = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=impl.NCCL if gpus else impl.RING))
    return found, {"strategy": "multi_worker", "engine": "tf.distribute",
                   "collective": "nccl" if gpus else "grpc",
                   "all_reduce": "NCCL" if gpus else "ring (gRPC collectives)",
                   "replicas": found.num_replicas_in_sync}


def all_reduce(found, values):
    """`values` from every replica of this process, summed over every replica of every worker."""
    tf = _backend.tf()
    mine = tf.constant(values, dtype=tf.float32)
    return found.reduce("SUM", found.run(lambda: tf.identity(mine)), axis=None).numpy()


def leave(found) -> None:
    """Nothing to do: a TensorFlow process leaves its cluster when it ends."""


def distributed_input(found, x, y, batch: int, *, seed: int = 0, shuffle: bool = True):
    """The distributed dataset of `x`, `y` in global batches: an epoch each time it is iterated."""
    tf = _backend.tf()

    def dataset_fn(context):
        data = tf.data.Dataset.from_tensor_slices((x, y))
        if shuffle:  # the same seeded order on every worker, then disjoint shards
            data = data.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
        data = data.shard(context.num_input_pipelines, context.input_pipeline_id)
        data = data.batch(context.get_per_replica_batch_size(batch), drop_remainder=True)
        return data.prefetch(tf.data.AUTOTUNE)  # the next batch is ready while a step runs

    return found.distribute_datasets_from_function(dataset_fn)


def make_step(found, model, batch: int):
    """The compiled step both strategies share: one global batch, the gradients all-reduced."""
    tf = _backend.tf()
    from_logits = model.loss.get_config().get("from_logits", False)
    per_example = model.loss.__class__(from_logits=from_logits, reduction=None)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_example(y, model(x, training=True)),
                                              global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function(jit_compile=False)
    def step(iterator):
        return found.reduce("SUM", found.run(replica_step, args=next(iterator)), axis=None)

    return step


def run_epoch(step, data, steps: int):
    """Run `steps` steps over one pass of `data`; the summed loss (a tensor)."""
    iterator = iter(data)
    return _backend.tf().add_n([step(iterator) for _ in range(steps)])


def sync(model) -> None:
    """Wait until the epoch's work is done: a device sync, or across workers the updated weights."""
    if _cluster_process:  # sync_devices fails there; reading a weight waits for its updates
        for variable in model.trainable_variables:
            variable.numpy()
    else:
        _backend.sync(list(model.variables))
