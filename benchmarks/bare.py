"""What the benchmarks compare gpubench against: a bare `model.fit` with the lightest epoch clock."""

from __future__ import annotations

import argparse
import time

import gpubench as gb


def epoch_clock(sync=None):
    """A Keras callback that only reads perf_counter at each epoch's start and end (`.times`);
    `sync(model)`, when given, runs just before the end is read."""
    import keras

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times, self._t = [], 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self._t = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            if sync is not None:
                sync(self.model)
            self.times.append(time.perf_counter() - self._t)

    return Clock()


def bare_fit(model, split, epochs: int, batch_size: int) -> list[float]:
    """Plain model.fit with the arguments gpubench uses; returns epoch seconds."""
    clock = epoch_clock()
    model.fit(split.x_train, split.y_train, batch_size=batch_size, epochs=epochs,
              validation_data=(split.x_val, split.y_val), callbacks=[clock], verbose=0)
    return clock.times


def gpubench_fit(model, split, data, epochs: int, batch_size: int) -> list[float]:
    """The training chapters' cells: fit with gpubench's epoch timer, evaluate, and the record
    (built, not stored); returns the record's epoch seconds."""
    timer = gb.timing.epoch_timer("cpu")
    with gb.devices.scope("cpu"):
        history = model.fit(split.x_train, split.y_train, batch_size=batch_size, epochs=epochs,
                            validation_data=(split.x_val, split.y_val), callbacks=[timer],
                            verbose=0)
        test = model.evaluate(split.x_test, split.y_test, batch_size=batch_size, verbose=0)
    record = gb.training.record(model, history, timer, data, batch_size=batch_size,
                                samples=(len(split.x_train), len(split.x_val)), test=test,
                                env="benchmark")
    return record["epoch_seconds"]


def round_options(doc: str, *, rounds: int, epochs: int, samples: int = 12000) -> argparse.ArgumentParser:
    """A parser with the options every benchmark shares: --rounds, --epochs, --samples."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--samples", type=int, default=samples)
    return parser


def parse_rounds(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Parse the command line; refuse fewer than 2 epochs (epoch 1 of each fit is dropped) or 0 rounds."""
    args = parser.parse_args()
    if args.epochs < 2 or args.rounds < 1:
        parser.error(f"--epochs must be >= 2 (epoch 1 of each fit is dropped), got {args.epochs}; "
                     f"--rounds >= 1, got {args.rounds}")
    return args


def machine() -> str:
    """The CPU and software a benchmark ran on, for its first line."""
    env = gb.results.environment_snapshot()
    return (f"CPU: {env['cpu_model']} ({env['cpu_count']} cores); "
            f"{gb.backends.BACKEND_TITLES.get(env['backend'], env['backend'])} "
            f"{env['backend_version']}, Keras {env['keras']}")
