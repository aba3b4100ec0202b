"""The training loop every replica count shares, in one process or several, and the `scaling`
record; `train` is Multi_GPU_Scaling's `#@save` cell, copied below by tools/export_chapters.py."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import gpubench as gb
from gpubench import backends, machine, results, telemetry, timing
from gpubench.params import positive_int
from gpubench.scaling.rules import parallel


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


def evaluate(model, x, y, batch: int = 1000) -> tuple[float, float]:
    """(mean loss, accuracy) on the test set, computed in this process (no collective op)."""
    import numpy as np  # noqa: PLC0415 - no numpy at import time

    numpy = backends.keras().ops.convert_to_numpy
    out = np.concatenate([numpy(model(x[i:i + batch], training=False))
                          for i in range(0, len(x), batch)])
    return float(model.loss(y, out)), float(np.mean(np.argmax(out, axis=1) == y))


def record(measured: Measured, one_replica_sps: float | None, **fields) -> dict:
    """The `scaling` record of a run (`fields`: where, how); efficiency from `one_replica_sps`."""
    timed = timing.train_fields(measured.epoch_seconds, measured.train_samples,
                                measured.flops_per_sample)
    rate, steady = timed["samples_per_second"], timed["steady_epoch_seconds"]
    gpu = "gpu" in fields["device"] or fields.get("collective") == "nccl"  # float32 may use TF32
    return results.make_record(
        "scaling", **fields, **timed, epochs=len(measured.epoch_seconds), validation_samples=0,
        batch_size=fields["global_batch_size"], train_samples=measured.train_samples,
        steady_epoch_min=min(timing.steady(measured.epoch_seconds), default=None),
        step_seconds=steady / measured.steps if steady else None,
        test_accuracy=measured.test_accuracy, test_loss=measured.test_loss,
        jit_compile=parallel().JIT_COMPILE, precision="float32", steps_per_execution=1,
        input_pipeline=parallel().INPUT_PIPELINE, flops_per_sample=measured.flops_per_sample,
        final_loss=measured.epoch_losses[-1], tf32=gpu and backends.current().tf32_enabled(),
        scaling_efficiency=(rate / (fields["replicas"] * one_replica_sps) if one_replica_sps
                            and rate else 1.0 if fields["replicas"] == 1 else None),
        load_average=timing.highest(*measured.epoch_load_average),
        epoch_load_average=measured.epoch_load_average,
        telemetry=telemetry.combine(measured.epoch_telemetry),
        **telemetry.epoch_fields(measured.epoch_telemetry),
    )


# Written by tools/export_chapters.py from the chapter's #@save cell: edit that.
# BEGIN CHAPTER CODE from Multi_GPU_Scaling


def train(found, model_name: str, split, *, batch: int, epochs: int, seed: int = 0,
          shuffle: bool = True, verbose: bool = True, monitor: str = "cpu") -> Measured:
    """Train `model_name`, built in `found`'s scope, for `epochs` of the backend's shared step."""
    positive_int("epochs", epochs)
    steps = len(split.x_train) // batch  # whole global batches only: no replica waits on another
    if steps == 0:
        raise ValueError(f"{len(split.x_train)} training images are fewer than one global batch "
                         f"of {batch}; use a larger max_train_samples or a smaller "
                         "per_replica_batch_size")
    backends.keras().utils.set_random_seed(seed)
    with found.scope():  # the variables made here are mirrored on every replica
        model = gb.models.build(model_name)
        model.optimizer.build(model.trainable_variables)
    used = steps * batch
    run_epoch = parallel().make_epoch(  # the backend's step, one per global batch, and the data
        found, model, split.x_train[:used], split.y_train[:used], batch, steps, seed=seed,
        shuffle=shuffle)
    seconds, losses, watched, loads = [], [], [], []
    for epoch in range(epochs):
        load, watch = machine.load_average(), telemetry.Monitor(monitor).start()
        start = time.perf_counter()
        loss = run_epoch()  # the summed loss of its steps, once their updates are all done
        seconds.append(time.perf_counter() - start)
        watched.append(watch.stop())
        loads.append(timing.highest(load, machine.load_average()))  # other work on the machine
        losses.append(loss / steps)
        if verbose:
            print(f"  epoch {epoch + 1}/{epochs}: {seconds[-1]:.2f} s, loss {losses[-1]:.4f}",
                  flush=True)
    test_loss, test_accuracy = evaluate(model, split.x_test, split.y_test)
    return Measured(seconds, losses, steps, used, test_loss, test_accuracy,
                    gb.training.flops_per_sample(model), watched, loads)


# END CHAPTER CODE
