"""Honest timing: warm-up, device sync, repeats, and the first call reported on its own.

GPU work is asynchronous, and JAX's is on the CPU too: a call returns before the device has
finished. Every timed region here ends with `sync(result)`, which waits for what the region
returned and for the work queued before it (JAX and TensorFlow run a device's work in the
order it was queued).

Two figures, one definition each:
- call latency (`measure`): one call, from the call to its result on the host, one sync per
  call; what a program that calls once pays, launch and sync included.
- product time (`measure_blocks`): calls queued back to back, one sync per block; the per-call
  time is the block's time / its calls, the device's throughput. The block grows 1, 2, 4, ...
  calls until one block lasts BLOCK_SECONDS, at most MAX_PER_BLOCK calls.
Why 20 ms: a sync and two clock reads cost 25 to 55 us on a 2-core VM (the overhead per call
that benchmarks/matmul_overhead.py prints), under 0.3 % of a 20 ms block; a longer block
would slow the quick profile and hold more queued outputs in device memory. The cost: sizing
takes under four targets (each block at most doubles), each timed block under two targets or
one call, and the single calls are timed apart only when a call is shorter than the target
(else the blocks are single calls), so a measurement adds at most about (4 + 3 x repeats) x
20 ms to the calls a slow product needs anyway.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

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


# Epoch 1 includes tracing and compilation (on JAX, compiling each new shape), so the steady
# state is every epoch after it. Every steady figure (the median, IQR and fastest epoch, the GPU
# busy %, Speed_Factors' rounds and rates) takes its epochs from `steady`; prose quotes this.
STEADY_EPOCHS = "epochs 2..n"

_T = TypeVar("_T")


def steady(per_epoch: Sequence[_T]) -> list[_T]:
    """The steady epochs (or rounds) of a per-epoch list: all but the first (STEADY_EPOCHS)."""
    return list(per_epoch[1:])


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


@dataclass(frozen=True)
class Blocks(Measurement):
    """What `measure_blocks` found: `times` are per-call times of blocks of `per_block` calls,
    `calls` the latencies of single calls (the blocks' own times when a block is one call)."""

    per_block: int = 1
    calls: list[float] = field(default_factory=list)

    @property
    def call_stats(self) -> Stats:
        """Statistics of the single calls' latencies."""
        return summarize(self.calls)


BLOCK_SECONDS = 0.02  # a block lasts at least this long: a sync and the clock are < 1 % of it
MAX_PER_BLOCK = 1024  # calls per block at most (memory: each queued call holds its output)


def _timed(fn: Callable[[], Any]) -> float:
    """Seconds of one call of `fn`, up to the sync on what it returned."""
    start = time.perf_counter()
    sync(fn())
    return time.perf_counter() - start


def _block(fn: Callable[[], Any], calls: int) -> float:
    """Seconds of `calls` calls of `fn` queued back to back, up to one sync on the last result
    (only that one is kept alive: each call's result replaces the one before)."""
    start = time.perf_counter()
    for _ in range(calls):
        result = fn()
    sync(result)
    return time.perf_counter() - start


def block_size(fn: Callable[[], Any], target: float = BLOCK_SECONDS,
               most: int = MAX_PER_BLOCK) -> int:
    """Calls per block: 1, 2, 4, ... until a block of them lasts `target` seconds, or `most`."""
    calls = 1
    while calls < most and _block(fn, calls) < target:
        calls *= 2
    return min(calls, most)


def _warm(fn: Callable[[], Any], warmup: int, repeats: int) -> float:
    """Check the counts, make `warmup` calls of `fn`; the first one's seconds (it compiles)."""
    positive_int("warmup", warmup)
    positive_int("repeats", repeats)
    first = _timed(fn)
    for _ in range(warmup - 1):
        _timed(fn)
    return first


def _monitored(device: str | None, timings: Callable[[], list[float]]):
    """`timings()` and the telemetry of a Monitor on `device` around it (None without one)."""
    if device is None:
        return timings(), None
    with telemetry.Monitor(device) as monitor:
        times = timings()
    return times, monitor.result


def measure(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5, *,
            device: str | None = None) -> Measurement:
    """Time `warmup` calls of `fn`, the first reported alone (it compiles), then `repeats` calls,
    each up to its own sync (call latency); with `device`, a telemetry.Monitor covers them."""
    first = _warm(fn, warmup, repeats)
    times, result = _monitored(device, lambda: [_timed(fn) for _ in range(repeats)])
    return Measurement(first, times, result)


def measure_blocks(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5, *,
                   device: str | None = None, target: float = BLOCK_SECONDS,
                   most: int = MAX_PER_BLOCK) -> Blocks:
    """Product time: after `warmup` calls (the first reported alone), size a block by
    `block_size`, time `repeats` single calls (call latency) unless a block is one call, then
    `repeats` blocks, each one sync; with `device`, a telemetry.Monitor covers the blocks."""
    first = _warm(fn, warmup, repeats)
    per_block = block_size(fn, target, most)
    calls = [_timed(fn) for _ in range(repeats)] if per_block > 1 else []
    times, result = _monitored(
        device, lambda: [_block(fn, per_block) / per_block for _ in range(repeats)])
    return Blocks(first, times, result, per_block=per_block, calls=calls or times)


def epoch_timer(device: str | None = None):
    """A Keras callback that times every epoch, ending each with a sync on the model's variables;
    with `device` (kept as `.device`, for the record), a telemetry.Monitor covers each epoch
    (`.epoch_telemetry`)."""
    keras = backends.keras()

    class EpochTimer(keras.callbacks.Callback):
        """Times every epoch (validation included); the clock stops once the variables are ready."""

        def __init__(self) -> None:
            super().__init__()
            self.device = device
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


def train_fields(epoch_seconds: Sequence[float], train_samples: int,
                 flops_per_sample: int | None) -> dict:
    """A train record's timing fields: epoch times, epoch 1 on its own, the median and IQR of the
    steady epochs, the total, and the throughput at the steady median (epoch 1's when alone)."""
    epochs = list(epoch_seconds)
    later = steady(epochs)
    stats = summarize(later) if later else None
    per_epoch = stats.median if stats else epochs[0] if epochs else None
    rate = train_samples / per_epoch if per_epoch else None
    return dict(
        epoch_seconds=epochs,
        first_epoch_seconds=epochs[0] if epochs else None,
        steady_epoch_seconds=stats.median if stats else None,
        steady_epoch_iqr=stats.iqr if stats else None,
        total_seconds=float(sum(epochs)) if epochs else None,
        samples_per_second=rate,
        achieved_gflops=flops_per_sample * rate / 1e9 if rate and flops_per_sample else None,
    )


def busy_percent(epoch_util: Sequence[float | None] | None,
                 run_mean: float | None) -> tuple[float | None, bool]:
    """GPU busy % by its one definition (BUSY_DEFINITION), and whether it fell back to the run's
    mean for want of per-epoch figures."""
    found = [u for u in steady(epoch_util or []) if u is not None]
    if found:
        return statistics.median(found), False
    return run_mean, run_mean is not None
