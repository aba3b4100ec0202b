"""Honest timing: warm-up, device sync, repeats, and the first call reported on its own.

GPU work is asynchronous: a TensorFlow op returns before the GPU has finished.
Every timed region here ends with `sync()`, which waits for all devices.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    q1, median, q3 = np.percentile(times, [25, 50, 75])  # linear, as in statistics' "inclusive"
    return Stats(float(median), float(min(times)), float(max(times)), float(q3 - q1), len(times))


@dataclass(frozen=True)
class Measurement:
    """What `measure` found: the first call alone, then statistics of the repeats."""

    first: float
    times: list[float]

    @property
    def stats(self) -> Stats:
        """Statistics of the timed repeats (the first call is not among them)."""
        return summarize(self.times)


def _timed(fn: Callable[[], Any]) -> float:
    """Seconds of one call of `fn`, up to the device sync that follows it."""
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def measure(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5) -> Measurement:
    """Time `warmup` calls of `fn`, the first reported alone (it compiles), then `repeats` calls."""
    positive_int("warmup", warmup)
    positive_int("repeats", repeats)
    first = _timed(fn)
    for _ in range(warmup - 1):
        _timed(fn)
    return Measurement(first, [_timed(fn) for _ in range(repeats)])


class EpochTimer(tensorflow().keras.callbacks.Callback):
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
