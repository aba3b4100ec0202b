"""Data parallelism on TensorFlow: MirroredStrategy here, MultiWorkerMirroredStrategy across
processes, one step for both: Keras 3's `fit` fails under the latter (keras-team/keras#20585)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from gpubench.backends import tensorflow as _backend
from gpubench.scaling.rules import fields

STRATEGY = "mirrored"
JIT_COMPILE = False  # the step is a tf.function without XLA, as the book's training
INPUT_PIPELINE = "tf.data"
PROCESSES = False
EVERY_WORKER_LISTENS = True  # on the port of its own --cluster entry


def split_cpu(count: int | None) -> int:
    """Split the CPU into `count` logical devices (None: leave it); how many there are."""
    tf = _backend.tf()
    if count:
        tf.config.set_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    return count or 1


def strategy(devices: Sequence[str]):
    """(MirroredStrategy over the canonical `devices`, its fields); TensorFlow picks the ops."""
    gpus = all(d.startswith("gpu") for d in devices)
    found = _backend.tf().distribute.MirroredStrategy([_backend.tf_name(d) for d in devices])
    return found, fields(STRATEGY, "tf.distribute", None, len(devices),
                         "NCCL" if gpus else "reduction to one device")


def join(cluster: Sequence[str], index: int, replicas: int | None, device: str | None = None):
    """(MultiWorkerMirroredStrategy on `replicas` GPUs or the CPU, its fields): before TF works."""
    tf = _backend.tf()
    gpus = tf.config.list_physical_devices("GPU")
    if (replicas or 1) > max(len(gpus), 1):
        raise ValueError(f"--replicas {replicas} is more than the {max(len(gpus), 1)} device(s) "
                         f"of this worker ({len(gpus)} GPU(s)); use at most {max(len(gpus), 1)}")
    tf.config.set_visible_devices(gpus[:replicas or len(gpus)], "GPU")  # none: none
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": list(cluster)}, "task": {"type": "worker", "index": index}})
    impl = tf.distribute.experimental.CommunicationImplementation
    found = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=impl.NCCL if gpus else impl.RING))
    return found, fields("multi_worker", "tf.distribute", "nccl" if gpus else "grpc",
                         found.num_replicas_in_sync, "NCCL" if gpus else "ring (gRPC collectives)")


def all_reduce(found, values):
    """`values` from every replica of this process, summed over every replica of every worker."""
    mine = found.run(lambda: _backend.tf().constant(values, dtype="float32"))
    return found.reduce("SUM", mine, axis=None).numpy()


def leave(found) -> None:
    """Nothing to do: a TensorFlow process leaves its cluster when it ends."""


def make_epoch(found, model, x, y, batch: int, steps: int, *, seed: int = 0, shuffle: bool = True):
    """A function: an epoch of compiled steps, waited for, the summed loss of its steps."""
    tf = _backend.tf()

    def dataset_fn(context):
        data = tf.data.Dataset.from_tensor_slices((x, y))
        if shuffle:  # the same seeded order on every worker, then disjoint shards
            data = data.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
        data = data.shard(context.num_input_pipelines, context.input_pipeline_id)
        data = data.batch(context.get_per_replica_batch_size(batch), drop_remainder=True)
        return data.prefetch(tf.data.AUTOTUNE)  # the next batch is ready while a step runs

    data = found.distribute_datasets_from_function(dataset_fn)

    def replica_step(x, y):
        with tf.GradientTape() as tape:  # the mean over the global batch: replicas' are equal
            loss = model.loss(y, model(x, training=True)) / found.num_replicas_in_sync
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function(jit_compile=False)
    def step(iterator):
        return found.reduce("SUM", found.run(replica_step, args=next(iterator)), axis=None)

    def epoch() -> float:
        iterator = iter(data)
        loss = tf.add_n([step(iterator) for _ in range(steps)])
        if isinstance(found, tf.distribute.MultiWorkerMirroredStrategy):  # no sync_devices there:
            for variable in model.trainable_variables:  # reading a weight waits for its updates
                variable.numpy()
        else:
            _backend.sync()
        return float(loss)

    return epoch
