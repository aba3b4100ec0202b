"""Honest clocks: every timed region ends with a sync; the first call is reported apart. Product
time: blocks of queued calls, one sync each, repeated while noisy (nvbench's rule); call latency:
one product from the call until its result is ready on the device (a sync)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpubench import backends, devices, machine, results
from gpubench.params import positive_int

BLOCK_SECONDS = 0.02  # a block lasts at least this long: a sync and the clock are < 1 % of it
MAX_PER_BLOCK = 1024  # calls per block at most (memory: each queued call holds its output)
NOISE_THRESHOLD = 0.05  # blocks repeat while IQR / median of their per-call times is above this
TIME_CAP_S = 1.0  # ... until this many seconds of blocks have run, noisy or not
STEADY_EPOCHS = "epochs 2..n"  # epoch 1 traces and compiles: every steady figure leaves it out


def sync(*values: Any) -> None:
    """Wait until `values` are computed and the devices have finished the work queued so far."""
    backends.current().sync(*values)


@dataclass(frozen=True)
class Stats:
    """Summary of repeated timings, in seconds, and their relative spread (IQR / median)."""

    median: float
    min: float
    max: float
    iqr: float
    n: int
    spread: float


def summarize(times: Sequence[float]) -> Stats:
    """Median, min, max, interquartile range and spread of `times` (at least one value)."""
    if not times:
        raise ValueError("summarize() needs at least one timing")
    q1, median, q3 = (float(q) for q in np.percentile(times, [25, 50, 75]))
    return Stats(median, float(min(times)), float(max(times)), q3 - q1, len(times),
                 (q3 - q1) / median if median > 0 else 0.0)


def steady(per_epoch: Sequence) -> list:
    """The steady epochs (or rounds) of a per-epoch list: all but the first (STEADY_EPOCHS)."""
    return list(per_epoch[1:])


@dataclass(frozen=True)
class Measurement:
    """What a measurement found: the first call, per-call times of blocks, single calls."""

    first: float
    times: list[float]
    telemetry: dict | None = None
    load_average: float | None = None
    per_block: int = 1
    calls: list[float] = field(default_factory=list)
    noisy: bool = False

    @property
    def stats(self) -> Stats:
        """Statistics of the timed repeats (the first call is not among them)."""
        return summarize(self.times)

    @property
    def call_stats(self) -> Stats:
        """Statistics of the single calls' latencies."""
        return summarize(self.calls or self.times)


def _cpu_figures(seconds: float, cpu_seconds: float, joules: float | None) -> dict:
    """A CPU region's telemetry object: every GPU figure null, CPU use and RAPL energy."""
    found = results.unmeasured(machine.CPU_REASON) | {"seconds": round(seconds, 6)}
    if seconds > 0:
        found["cpu_util_percent_mean"] = round(100 * cpu_seconds / seconds, 1)
    if joules is not None:
        found.update(cpu_energy_joules=round(joules, 3), cpu_energy_method="rapl")
    return found


class CpuMeter:
    """A CPU region's telemetry, with no thread: this process's CPU use and RAPL energy."""

    def start(self) -> CpuMeter:
        """Read the clocks and the RAPL counters at the region's start."""
        self.packages = machine.rapl_packages()
        self.begun = time.perf_counter(), time.process_time(), machine.read_rapl(self.packages)
        return self

    def stop(self) -> dict:
        """The region's telemetry object."""
        wall, cpu, energy = self.begun
        joules = machine.rapl_joules(self.packages, [energy, machine.read_rapl(self.packages)])
        return _cpu_figures(time.perf_counter() - wall, time.process_time() - cpu, joules)


def run_telemetry(parts: Sequence[dict], device: str) -> dict:
    """A run's telemetry object, and its per-epoch lists, from its epochs' telemetry objects."""
    if not parts:
        return {"telemetry": None}
    if device.startswith("gpu"):
        from gpubench import telemetry  # noqa: PLC0415 - tools tier, only where a GPU is measured
        return {"telemetry": telemetry.combine(parts), **telemetry.epoch_fields(parts)}
    energy = [p["cpu_energy_joules"] for p in parts]  # CPU use weighted by time, energy summed
    seconds = sum(p["seconds"] * (p["cpu_util_percent_mean"] or 0) for p in parts) / 100
    return {"telemetry": _cpu_figures(sum(p["seconds"] for p in parts), seconds,
                                      sum(energy) if energy and None not in energy else None),
            "epoch_cpu_util_percent": [p["cpu_util_percent_mean"] for p in parts]}


def monitor(device: str):
    """The telemetry of a region on `device`: NVML's Monitor on a GPU, else a CpuMeter."""
    if not device.lower().lstrip("/").startswith("cpu") and devices.resolve(device) != "cpu":
        from gpubench import telemetry  # noqa: PLC0415 - tools tier, only where a GPU is measured
        return telemetry.Monitor(devices.resolve(device))
    return CpuMeter()  # "cpu", or "cpu:N" of a CPU split into virtual devices


def highest(*loads: float | None) -> float | None:
    """The highest of load averages taken around a region (None when none was read)."""
    return max((x for x in loads if x is not None), default=None)


@contextlib.contextmanager
def region(device: str | None) -> Iterator[dict]:
    """Around a region: the dict yielded gets its `telemetry` and highest `load_average`."""
    found = {"telemetry": None, "load_average": machine.load_average()}
    meter = monitor(device).start() if device is not None else None
    try:
        yield found
    finally:
        found["telemetry"] = meter.stop() if meter is not None else None
        found["load_average"] = highest(found["load_average"], machine.load_average())


def _block(fn: Callable[[], Any], calls: int) -> float:
    """Seconds of `calls` calls queued back to back, one sync on the last (the one kept)."""
    start = time.perf_counter()
    for _ in range(calls):
        result = fn()
    sync(result)
    return time.perf_counter() - start


def measure(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5, *,
            device: str | None = None) -> Measurement:
    """Call latency: after `warmup` calls (the first kept apart), `repeats` calls, a sync each."""
    return measure_blocks(fn, warmup, repeats, device=device, most=1, threshold=float("inf"))


def measure_blocks(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5, *,
                   device: str | None = None, target: float = BLOCK_SECONDS,
                   most: int = MAX_PER_BLOCK, threshold: float = NOISE_THRESHOLD,
                   cap: float = TIME_CAP_S) -> Measurement:
    """Product time: blocks of calls, one sync each, at least `repeats`, more while noisy."""
    positive_int("warmup", warmup)
    positive_int("repeats", repeats)
    first = [_block(fn, 1) for _ in range(warmup)][0]  # the first call compiles
    per_block = 1
    while per_block < most and _block(fn, per_block) < target:
        per_block = min(2 * per_block, most)
    calls = [_block(fn, 1) for _ in range(repeats)] if per_block > 1 else []
    times: list[float] = []
    with region(device) as found:  # the cap counts the blocks' seconds
        while len(times) < repeats or (summarize(times).spread > threshold
                                       and sum(times) * per_block < cap):
            times.append(_block(fn, per_block) / per_block)
    return Measurement(first, times, per_block=per_block, calls=calls or times,
                       noisy=summarize(times).spread > threshold, **found)


def epoch_timer(device: str | None = None):
    """A Keras callback: each epoch's seconds up to a sync, its telemetry (with `device`), load."""
    class EpochTimer(backends.keras().callbacks.Callback):
        """Times every epoch (validation included); the clock stops once the variables are ready."""

        def __init__(self) -> None:
            super().__init__()
            self.device, self.epoch_seconds, self.epoch_telemetry = device, [], []
            self.epoch_load_average: list[float | None] = []

        def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
            self._load = machine.load_average()
            self._monitor = monitor(device).start() if device is not None else None
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            sync(list(self.model.variables))  # the epoch's updates, all of them
            self.epoch_seconds.append(time.perf_counter() - self._start)
            if self._monitor is not None:
                self.epoch_telemetry.append(self._monitor.stop())
            self.epoch_load_average.append(highest(self._load, machine.load_average()))

    return EpochTimer()


def train_fields(epoch_seconds: Sequence[float], train_samples: int,
                 flops_per_sample: int | None) -> dict:
    """A train record's timing fields: epoch 1 apart, the steady median and IQR, throughput."""
    epochs = list(epoch_seconds)
    stats = summarize(steady(epochs)) if len(epochs) > 1 else None
    per_epoch = stats.median if stats else epochs[0] if epochs else None
    rate = train_samples / per_epoch if per_epoch else None
    flops = flops_per_sample * rate / 1e9 if rate and flops_per_sample else None
    return dict(epoch_seconds=epochs, first_epoch_seconds=epochs[0] if epochs else None,
                steady_epoch_seconds=stats and stats.median, steady_epoch_iqr=stats and stats.iqr,
                total_seconds=float(sum(epochs)) if epochs else None, samples_per_second=rate,
                achieved_gflops=flops)


def busy_percent(epoch_util: Sequence[float | None] | None,
                 run_mean: float | None) -> tuple[float | None, bool]:
    """GPU busy %: the median of the steady epochs' figures, else the run's mean (and True)."""
    found = [u for u in steady(epoch_util or []) if u is not None]
    return (float(np.median(found)), False) if found else (run_mean, run_mean is not None)
