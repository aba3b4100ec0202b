"""What the benchmarks compare gpubench against: a bare `model.fit` with the lightest epoch clock."""

from __future__ import annotations

import time

import gpubench as gb


def epoch_clock():
    """A Keras callback that only reads perf_counter at each epoch's start and end (`.times`)."""
    import keras  # noqa: PLC0415 - loaded by gpubench's TensorFlow import

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times, self._t = [], 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self._t = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self._t)

    return Clock()


def bare_fit(model, split, epochs: int, batch_size: int) -> list[float]:
    """Plain model.fit with the arguments gpubench uses; returns epoch seconds."""
    clock = epoch_clock()
    model.fit(split.x_train, split.y_train, batch_size=batch_size, epochs=epochs,
              validation_data=(split.x_val, split.y_val), callbacks=[clock], verbose=0)
    return clock.times


def gpubench_fit(model, data, epochs: int, batch_size: int) -> list[float]:
    """gpubench.training.train as the chapters call it (record built, not stored)."""
    run = gb.training.train(model, data, epochs=epochs, batch_size=batch_size, device="cpu",
                            env="benchmark", verbose=0)
    return run.record["epoch_seconds"]
