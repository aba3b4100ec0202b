"""The training loop every replica count shares, on every backend, in one process or several, and
the `scaling` record of a run. One step per global batch (the backend's `make_step`), a sync at
the end of each epoch, a telemetry.Monitor over it. `train` is written once, in the `#@save` cell
of Multi_GPU_Scaling, and copied between the markers below by `python tools/export_chapters.py`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import gpubench as gb
from gpubench import backends, machine, results, telemetry, timing
from gpubench.params import positive_int
from gpubench.scaling.rules import canonical, parallel


@dataclass
class Measured:
    """What one training run gave."""

    epoch_seconds: list[float]
    epoch_losses: list[float]
    steps: int
    train_samples: int
    test_loss: float
    test_accuracy: float
    flops_per_sample: int | None = None
    epoch_telemetry: list[dict] = field(default_factory=list)
    epoch_load_average: list[float | None] = field(default_factory=list)


def steps_per_epoch(images: int, batch: int) -> tuple[int, int]:
    """(steps, images used) of an epoch of whole global batches: no replica waits on another."""
    steps = images // batch
    if steps == 0:
        raise ValueError(f"{images} training images are fewer than one global batch of {batch}; "
                         "use a larger max_train_samples or a smaller per_replica_batch_size")
    return steps, steps * batch


def evaluate(model, x, y, batch: int = 1000) -> tuple[float, float]:
    """(mean loss, accuracy) on the test set, computed in this process (no collective op)."""
    import numpy as np  # noqa: PLC0415 - no numpy at import time

    numpy = backends.keras().ops.convert_to_numpy
    out = np.concatenate([numpy(model(x[i:i + batch], training=False))
                          for i in range(0, len(x), batch)])
    return float(model.loss(y, out)), float(np.mean(np.argmax(out, axis=1) == y))


def telemetry_device(device_names: Sequence[str]) -> str:
    """The device a telemetry.Monitor watches: the first GPU, else "cpu"."""
    return next((d for d in map(canonical, device_names) if d.startswith("gpu")), "cpu")


def placed(devices: Sequence[str]) -> dict:
    """A record's `device` ("cpu:0,cpu:1") and `devices` (["cpu:0", "cpu:1"]) fields."""
    names = [canonical(d) for d in devices]
    return {"device": ",".join(names), "devices": names}


def record(measured: Measured, one_replica_sps: float | None, **fields) -> dict:
    """The `scaling` record of a run (`fields`: where, how), its efficiency against the one-replica
    run's samples/s `one_replica_sps` (None: this is that run, or there is none)."""
    par = parallel()
    timed = timing.train_fields(measured.epoch_seconds, measured.train_samples,
                                measured.flops_per_sample)
    rate, replicas, steady = (timed["samples_per_second"], fields["replicas"],
                              timed["steady_epoch_seconds"])
    gpu = "gpu" in fields["device"] or fields.get("collective") == "nccl"
    tf32 = gpu and backends.current().tf32_enabled()  # float32 matmuls that may use TF32
    return results.make_record(
        "scaling", **fields, **timed, epochs=len(measured.epoch_seconds),
        batch_size=fields["global_batch_size"], train_samples=measured.train_samples,
        validation_samples=0,
        steady_epoch_min=min(timing.steady(measured.epoch_seconds), default=None),
        step_seconds=steady / measured.steps if steady else None,
        test_accuracy=measured.test_accuracy, test_loss=measured.test_loss,
        jit_compile=par.JIT_COMPILE, precision="float32", steps_per_execution=1,
        input_pipeline=par.INPUT_PIPELINE, flops_per_sample=measured.flops_per_sample,
        final_loss=measured.epoch_losses[-1],
        scaling_efficiency=(rate / (replicas * one_replica_sps) if one_replica_sps and rate
                            else 1.0 if replicas == 1 else None),
        load_average=timing.highest(*measured.epoch_load_average),
        epoch_load_average=measured.epoch_load_average, tf32=tf32,
        telemetry=telemetry.combine(measured.epoch_telemetry),
        **telemetry.epoch_fields(measured.epoch_telemetry),
    )


# Written by tools/export_chapters.py from the chapter's #@save cell: edit that.
# BEGIN CHAPTER CODE from Multi_GPU_Scaling


def train(found, model_name: str, split, *, batch: int, epochs: int, seed: int = 0,
          shuffle: bool = True, verbose: bool = True, monitor: str = "cpu") -> Measured:
    """Build `model_name` in the distribution `found`'s scope and train it for `epochs` with the
    backend's shared step; a telemetry.Monitor on `monitor` ("cpu" or "gpu:N") covers each epoch."""
    positive_int("epochs", epochs)
    par = parallel()  # the backend's data-parallel module
    backends.keras().utils.set_random_seed(seed)
    with found.scope():  # the variables made here are mirrored on every replica
        model = gb.models.build(model_name)
        model.optimizer.build(model.trainable_variables)
    steps, used = steps_per_epoch(len(split.x_train), batch)  # whole global batches only
    data = par.distributed_input(found, split.x_train[:used], split.y_train[:used], batch,
                                 seed=seed, shuffle=shuffle)
    step = par.make_step(found, model, batch)  # one compiled step per global batch
    seconds, losses, watched, loads = [], [], [], []
    for epoch in range(epochs):
        load, watch = machine.load_average(), telemetry.Monitor(monitor).start()
        start = time.perf_counter()
        loss = par.run_epoch(step, data, steps)  # the summed loss of the epoch's steps
        par.sync(model)  # the epoch's updates, all of them, before the clock stops
        seconds.append(time.perf_counter() - start)
        watched.append(watch.stop())
        loads.append(timing.highest(load, machine.load_average()))  # other work on the machine
        losses.append(float(loss) / steps)
        if verbose:
            print(f"  epoch {epoch + 1}/{epochs}: {seconds[-1]:.2f} s, loss {losses[-1]:.4f}",
                  flush=True)
    test_loss, test_accuracy = evaluate(model, split.x_test, split.y_test)
    return Measured(seconds, losses, steps, used, test_loss, test_accuracy,
                    gb.models.flops_per_sample(model), watched, loads)


# END CHAPTER CODE
