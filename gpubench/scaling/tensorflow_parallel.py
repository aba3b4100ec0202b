"""Data parallelism on TensorFlow: tf.distribute's MirroredStrategy and MultiWorkerMirroredStrategy.

Every backend's `*_parallel` module offers the same functions, used by `gpubench.scaling`:
  STRATEGY, JIT_COMPILE, INPUT_PIPELINE (what a record says of the run),
  split_cpu(count), cpu_count(), strategy(devices) -> (strategy, all-reduce name),
  scope(strategy), distributed_input(strategy, x, y, batch, seed=, shuffle=),
  make_step(strategy, model, batch), run_epoch(step, data, steps) -> summed loss,
  sync(model).
Device names are gpubench's canonical ones: "cpu:N" (a virtual CPU device) and "gpu:N".
TensorFlow alone also runs several machines: multi_worker(cluster, index), worker_devices().

The training step is shared by both strategies: `strategy.run` inside a `tf.function`, the
loss averaged over the global batch with `tf.nn.compute_average_loss`, the data split by
the strategy. Keras 3's `fit` cannot be that shared step: it fails under
MultiWorkerMirroredStrategy (keras-team/keras#20585).
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence

from gpubench.backends import tensorflow as _backend

STRATEGY = "mirrored"
JIT_COMPILE = False  # the step is a tf.function without XLA, as the book's training
INPUT_PIPELINE = "tf.data"
_cluster_process = False  # set once this process joined a MultiWorkerMirroredStrategy cluster


def split_cpu(count: int) -> None:
    """Split the CPU into `count` logical devices; must run before TensorFlow initialises them."""
    tf = _backend.tf()
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu) or [None]
    if len(current) == count:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError:
        raise RuntimeError(
            f"virtual_devices={count}: TensorFlow has already set up its devices in this process "
            f"({len(current)} CPU device(s)); restart the kernel and set virtual_devices "
            "before anything else runs") from None


def cpu_count() -> int:
    """How many CPU devices TensorFlow has (1, or the virtual split), without initialising them."""
    tf = _backend.tf()
    return len(tf.config.get_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0]) or [None])


def strategy(devices: Sequence[str]):
    """(MirroredStrategy over the canonical `devices`, the all-reduce it uses)."""
    tf = _backend.tf()
    names = [_backend.tf_name(d) for d in devices]
    gpus = all(d.startswith("gpu") for d in devices)
    if len(names) == 1:
        ops, name = tf.distribute.ReductionToOneDevice(), "none (one replica)"
    elif gpus and platform.system() == "Linux":
        ops, name = tf.distribute.NcclAllReduce(), "NCCL"
    elif gpus:
        ops, name = tf.distribute.HierarchicalCopyAllReduce(), "hierarchical copy"
    else:
        ops, name = tf.distribute.ReductionToOneDevice(), "reduction to one device"
    return tf.distribute.MirroredStrategy(devices=names, cross_device_ops=ops), name


def multi_worker(cluster: Sequence[str], index: int):
    """(MultiWorkerMirroredStrategy for worker `index` of `cluster`, the all-reduce it uses).

    Sets TF_CONFIG; create it before any other TensorFlow work in the process.
    """
    global _cluster_process
    _cluster_process = True
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": list(cluster)}, "task": {"type": "worker", "index": index}})
    tf = _backend.tf()
    impl = tf.distribute.experimental.CommunicationImplementation
    gpus = bool(tf.config.list_physical_devices("GPU"))
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=impl.NCCL if gpus else impl.RING)
    found = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    return found, "NCCL" if gpus else "ring (gRPC collectives)"


def worker_devices(replicas: int | None) -> tuple[int, int]:
    """(devices this worker trains on, GPUs it has): keeps `replicas` GPUs visible (all: None);
    a ValueError when it asks for more than there are. Initialises no device."""
    tf = _backend.tf()
    gpus = tf.config.list_physical_devices("GPU")
    here = max(len(gpus), 1)
    if (replicas or here) > here:
        raise ValueError(f"--replicas {replicas} is more than the {here} device(s) of this worker "
                         f"({len(gpus)} GPU(s)); use at most {here}")
    if gpus:
        tf.config.set_visible_devices(gpus[:replicas or here], "GPU")
    return replicas or here, len(gpus)


def scope(found):
    """The context in which the model's variables are created, mirrored on every replica."""
    return found.scope()


def distributed_input(found, x, y, batch: int, *, seed: int = 0, shuffle: bool = True):
    """The distributed dataset of `x`, `y` (whole global batches of `batch`) for one epoch each
    time it is iterated; every replica gets the same number of full batches."""
    tf = _backend.tf()
    count = len(x)

    def dataset_fn(context):
        data = tf.data.Dataset.from_tensor_slices((x, y))
        if shuffle:  # same seed on every worker: the same order, then disjoint shards
            data = data.shuffle(count, seed=seed, reshuffle_each_iteration=True)
        data = data.shard(context.num_input_pipelines, context.input_pipeline_id)
        data = data.batch(context.get_per_replica_batch_size(batch), drop_remainder=True)
        return data.prefetch(tf.data.AUTOTUNE)  # the next batch is ready while a step runs

    return found.distribute_datasets_from_function(dataset_fn)


def make_step(found, model, batch: int):
    """The compiled training step both strategies share: one global batch, gradients all-reduced."""
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
        losses = found.run(replica_step, args=next(iterator))
        return found.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step


def run_epoch(step, data, steps: int):
    """Run `steps` steps over one pass of `data`; the summed loss (a tensor)."""
    iterator = iter(data)
    return _backend.tf().add_n([step(iterator) for _ in range(steps)])


def sync(model) -> None:
    """Wait until the epoch's work is done: a device sync, or across workers the updated weights."""
    if _cluster_process:
        # sync_devices fails once MultiWorkerMirroredStrategy has set up the cluster;
        # reading a weight waits for every update queued before it, all-reduce included.
        for variable in model.trainable_variables:
            variable.numpy()
    else:
        _backend.sync(list(model.variables))
