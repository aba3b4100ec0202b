"""The training loop every replica count shares, on one machine or several.

One compiled step per global batch, the loss averaged over the global batch, the gradients
added across replicas (the all-reduce), the data split by the distribution; the step itself
is the backend's (`make_step` of gpubench/scaling/<backend>_parallel.py). Epochs are timed as
`training` times them: a sync on the model's variables ends each, and a telemetry.Monitor
covers each.

`train` is written once, in its chapter: the `#@save` cell of
notebooks/Multi_GPU_Scaling.ipynb. `python tools/export_chapters.py` copies it between the
markers below (d2l's way); tests/test_training.py fails when the two differ. It reaches the
models through `gb.models`, which loads Keras on first use, so importing this module loads
no framework.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import gpubench as gb
from gpubench import backends, telemetry
from gpubench.params import positive_int
from gpubench.scaling.placement import parallel


@dataclass
class Measured:
    """What one training run under a strategy gave."""

    epoch_seconds: list[float]
    epoch_losses: list[float]
    steps: int
    train_samples: int
    test_loss: float
    test_accuracy: float
    flops_per_sample: int | None = None
    epoch_telemetry: list[dict] = field(default_factory=list)

    @property
    def final_loss(self) -> float:
        """Mean training loss of the last epoch."""
        return self.epoch_losses[-1]


def steps_per_epoch(images: int, batch: int) -> tuple[int, int]:
    """(steps, images used) of an epoch of whole global batches of `batch`: every replica gets
    the same number of full batches, so no replica or worker waits on another."""
    steps = images // batch
    if steps == 0:
        raise ValueError(f"{images} training images are fewer than one global batch of {batch}; "
                         "use a larger max_train_samples or a smaller per_replica_batch_size")
    return steps, steps * batch


def evaluate(model, x, y, batch: int = 1000) -> tuple[float, float]:
    """(mean loss, accuracy) on the test set, computed locally (no collective ops)."""
    import numpy as np  # noqa: PLC0415 - no numpy at import time

    if len(x) == 0:
        return float("nan"), float("nan")
    out = np.concatenate([np.asarray(model(x[i:i + batch], training=False))
                          for i in range(0, len(x), batch)])
    return float(model.loss(y, out)), float(np.mean(np.argmax(out, axis=1) == y))


# Written by tools/export_chapters.py from the chapter's #@save cell: edit that.
# BEGIN CHAPTER CODE from Multi_GPU_Scaling


def train(found, model_name: str, split, *, batch: int, epochs: int, seed: int = 0,
          shuffle: bool = True, verbose: bool = True, monitor: str = "cpu") -> Measured:
    """Build `model_name` in the distribution `found`'s scope and train it for `epochs` with the
    backend's shared step; a telemetry.Monitor on `monitor` ("cpu" or "gpu:N") covers each epoch."""
    positive_int("epochs", epochs)
    par = parallel()  # the backend's data-parallel module
    backends.keras().utils.set_random_seed(seed)
    with par.scope(found):  # the variables made here are mirrored on every replica
        model = gb.models.build(model_name)
        model.optimizer.build(model.trainable_variables)
    steps, used = steps_per_epoch(len(split.x_train), batch)  # whole global batches only
    data = par.distributed_input(found, split.x_train[:used], split.y_train[:used], batch,
                                 seed=seed, shuffle=shuffle)
    step = par.make_step(found, model, batch)  # one compiled step per global batch
    seconds, losses, watched = [], [], []
    for epoch in range(epochs):
        watch = telemetry.Monitor(monitor).start()
        start = time.perf_counter()
        loss = par.run_epoch(step, data, steps)  # the summed loss of the epoch's steps
        par.sync(model)  # the epoch's updates, all of them, before the clock stops
        seconds.append(time.perf_counter() - start)
        watched.append(watch.stop())
        losses.append(float(loss) / steps)
        if verbose:
            print(f"  epoch {epoch + 1}/{epochs}: {seconds[-1]:.2f} s, loss {losses[-1]:.4f}",
                  flush=True)
    test_loss, test_accuracy = evaluate(model, split.x_test, split.y_test)
    return Measured(seconds, losses, steps, used, test_loss, test_accuracy,
                    gb.models.flops_per_sample(model), watched)


# END CHAPTER CODE
