"""Honest timing: warm-up, device sync, repeats, and the first call reported on its own.

GPU work is asynchronous, and JAX's is on the CPU too: a call returns before the device has
finished. Every timed region here ends with `sync(result)`, which waits for what the region
returned and for the work queued before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpubench import backends, telemetry
from gpubench.params import positive_int


def sync(*values: Any) -> None:
    """Wait until `values` are computed and the devices have finished the work queued so far."""
    backends.current().sync(*values)


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
    telemetry: dict | None = None

    @property
    def stats(self) -> Stats:
        """Statistics of the timed repeats (the first call is not among them)."""
        return summarize(self.times)


def _timed(fn: Callable[[], Any]) -> float:
    """Seconds of one call of `fn`, up to the sync on what it returned."""
    start = time.perf_counter()
    sync(fn())
    return time.perf_counter() - start


def measure(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5, *,
            device: str | None = None) -> Measurement:
    """Time `warmup` calls of `fn`, the first reported alone (it compiles), then `repeats` calls;
    with `device`, a telemetry.Monitor covers the repeats."""
    positive_int("warmup", warmup)
    positive_int("repeats", repeats)
    first = _timed(fn)
    for _ in range(warmup - 1):
        _timed(fn)
    if device is None:
        return Measurement(first, [_timed(fn) for _ in range(repeats)])
    with telemetry.Monitor(device) as monitor:
        times = [_timed(fn) for _ in range(repeats)]
    return Measurement(first, times, monitor.result)


def epoch_timer(device: str | None = None):
    """A Keras callback that times every epoch, ending each with a sync on the model's variables;
    with `device`, a telemetry.Monitor covers each epoch (`.epoch_telemetry`)."""
    keras = backends.keras()

    class EpochTimer(keras.callbacks.Callback):
        """Times every epoch (validation included); the clock stops once the variables are ready."""

        def __init__(self) -> None:
            super().__init__()
            self.epoch_seconds: list[float] = []
            self.epoch_telemetry: list[dict] = []
            self._start = 0.0
            self._monitor = None

        def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
            if device is not None:
                self._monitor = telemetry.Monitor(device)
                self._monitor.start()
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            sync(list(self.model.variables))  # the epoch's updates, all of them
            self.epoch_seconds.append(time.perf_counter() - self._start)
            if self._monitor is not None:
                self.epoch_telemetry.append(self._monitor.stop())
                self._monitor = None

    return EpochTimer()
