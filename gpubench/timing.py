"""Honest timing: warm-up, device sync, repeats, and the first call reported on its own.

GPU work is asynchronous: a TensorFlow op returns before the GPU has finished.
Every timed region here ends with `sync()`, which waits for all devices.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpubench._tf import tensorflow
from gpubench.checks import positive_int


def sync() -> None:
    """Wait until every device has finished the work queued so far."""
    tensorflow().test.experimental.sync_devices()


@dataclass(frozen=True)
class Stats:
    """Summary of repeated timings, in seconds."""

    median: float
    min: float
    max: float
    iqr: float
    n: int


def summarize(times: Sequence[float]) -> Stats:
    """Median, min, max and interquartile range of `times` (at least one value)."""
    if not times:
        raise ValueError("summarize() needs at least one timing")
    values = sorted(float(t) for t in times)
    if len(values) >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        iqr = q3 - q1
    else:
        iqr = 0.0
    return Stats(statistics.median(values), values[0], values[-1], iqr, len(values))


@dataclass(frozen=True)
class Measurement:
    """What `measure` found: the first call alone, then statistics of the repeats."""

    first: float
    times: list[float] = field(default_factory=list)

    @property
    def stats(self) -> Stats:
        """Statistics of the timed repeats (the first call is not among them)."""
        return summarize(self.times)



def measure(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5) -> Measurement:
    """Time `fn()`: `warmup` untimed-for-statistics calls, then `repeats` timed calls.

    The first warm-up call, which pays for tracing, compilation and device start-up,
    is timed and reported as `first`; it never enters the statistics. Each call is
    followed by a device sync before the clock stops.
    """
    positive_int("warmup", warmup)
    positive_int("repeats", repeats)
    start = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        fn()
        sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return Measurement(first=first, times=times)


def _keras_callback_base() -> type:
    tensorflow()
    import keras  # noqa: PLC0415 - loaded by tensorflow() already

    return keras.callbacks.Callback


class EpochTimer(_keras_callback_base()):
    """Keras callback that times every epoch, ending each with a device sync."""

    def __init__(self) -> None:
        """Start with no epochs timed."""
        super().__init__()
        self.epoch_seconds: list[float] = []
        self._start = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Start the clock for this epoch."""
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Sync the devices and record the epoch's wall time (validation included)."""
        sync()
        self.epoch_seconds.append(time.perf_counter() - self._start)

    @property
    def first_epoch_seconds(self) -> float | None:
        """Epoch 1, which includes tracing and compilation."""
        return self.epoch_seconds[0] if self.epoch_seconds else None

    @property
    def steady(self) -> Stats | None:
        """Statistics of epochs 2..n (None with fewer than two epochs)."""
        return summarize(self.epoch_seconds[1:]) if len(self.epoch_seconds) > 1 else None

    @property
    def total_seconds(self) -> float:
        """All epochs together: the number in the book's table."""
        return float(sum(self.epoch_seconds))
