"""`Monitor`: GPU (NVML) and CPU figures sampled by a thread around a timed region, as the record's
`telemetry` object (W, J, MHz, %, MiB); `combine`, `epoch_fields`. It never syncs a device nor
raises once started: what it cannot read is null, `reason` says why; NVML is waited for WAIT_S."""

from __future__ import annotations

import itertools
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from gpubench import machine
from gpubench.results import TELEMETRY_FIELDS, unmeasured
from gpubench.telemetry import nvml

DEFAULT_INTERVAL = 0.1  # NVML averages busy % and power over 1/6 s to 1 s; a sample: 14 us (H200)
MIN_AVERAGED_SECONDS = 0.5  # NVML's busy % and energy of a shorter region say nothing of it
THROTTLE_SHARE = 0.75  # a region whose SM clock fell below this share of its top is throttled
# Readings NVML cannot truthfully give: (least, most) in NVML's units, and the figure in words.
PLAUSIBLE = {"util": (0, 100, "utilisation %"), "memory": (0, 2**50, "memory used (bytes)"),
             "clock": (0, 10_000, "SM clock (MHz)"), "max_clock": (1, 10_000, "max SM clock (MHz)"),
             "power": (0, 10_000_000, "power (mW)"), "energy": (0, 2**63, "energy counter (mJ)"),
             "reasons": (0, 2**64, "reasons mask")}


def plausible(name: str, value: Any) -> str | None:
    """None if `value` is a reading figure `name` can have, else why not, in words."""
    least, most, words = PLAUSIBLE[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{words} {value!r:.40} is not a number"
    in_range = math.isfinite(value) and least <= value <= most
    return None if in_range else f"{words} {value!r:.40} is outside {least}-{most:,}"


class Monitor:
    """`with Monitor("gpu:0") as m: ...`: `.result` is the region's `telemetry` object; `nvml`,
    `clock`, `cpu_clock` stand in for pynvml, perf_counter and process_time in tests."""

    def __init__(self, device: str, interval: float = DEFAULT_INTERVAL, *, nvml: Any = None,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        match = re.fullmatch(r"gpu:(\d+)", device) if isinstance(device, str) else None
        if not match and device != "cpu":
            raise ValueError(f"telemetry device {device!r} is not \"cpu\" or \"gpu:N\"; "
                             "pass the canonical name from gpubench.devices.resolve")
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not (
                0 < interval < math.inf):
            raise ValueError(f"telemetry interval {interval!r} must be a positive number of "
                             f"seconds, e.g. {DEFAULT_INTERVAL}")
        self.device, self.index = device, int(match[1]) if match else None
        self.interval, self.result, self.source = float(interval), None, None
        self._module, self._clock, self._cpu_clock, self._thread = nvml, clock, cpu_clock, None
        self._rows: list[tuple] = []

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def times(self) -> list[float]:
        """The times of the samples kept so far."""
        return [row[0] for row in self._rows]

    def start(self) -> Monitor:
        """Start the sampler thread; it finds the GPU (waited for at most WAIT_S), then samples."""
        if self._thread is not None:
            raise RuntimeError("Monitor.start: it is already running; call stop() first")
        self.result = self.source = self._failure = self._reason = None
        self._rows, self._readers, self._dropped, self._live = [], {}, {}, True
        self._lock, self._packages = threading.Lock(), machine.rapl_packages()
        self._stop, self._ready, self._done = (threading.Event() for _ in range(3))
        self._thread = threading.Thread(target=self._run, name="gpubench-telemetry", daemon=True)
        why = "an earlier NVML call has not answered yet"
        if self.index is None or not nvml.stuck():
            self._thread.start()
            self._ready.wait(nvml.WAIT_S)
            why = f"NVML did not answer within {nvml.WAIT_S:g} s at the start"
        with self._lock:
            if not self._ready.is_set():  # on without GPU figures; the thread's rows not kept
                self._live = False
                self._failure = (f"{why}: no GPU figures for this region, and {nvml.LEFT_OPEN} "
                                 "while a call is stuck")
                self._rows.append(self._row({}))
        if not self._live and self._thread.is_alive():
            nvml.give_up(self._thread)
        return self

    def stop(self) -> dict:
        """Stop the thread after its last sample (waited for at most WAIT_S); the result."""
        if self._thread is None:
            self.result = self.result or unmeasured("the Monitor was never started")
            return self.result
        called, waited, thread = self._row({}), self._live, self._thread
        self._stop.set()
        if waited:
            self._done.wait(nvml.WAIT_S)
        with self._lock:
            if not self._done.is_set():  # the figures so far stay; the region ended here
                self._failure = self._failure or (f"an NVML call took over {nvml.WAIT_S:g} s "
                                                  f"({nvml.LEFT_OPEN} while it is stuck)")
                self._rows.append(called)
            self._live, self._thread = False, None
        if waited and not self._done.is_set():
            nvml.give_up(thread)
        try:
            self.result = self._summary()
        except Exception as error:  # noqa: BLE001  (nothing raises out of a Monitor)
            self.result = {**unmeasured(f"telemetry failed: {nvml.error_text(error)}"),
                           "partial": True}
        return self.result

    def sample(self, last: bool = False) -> None:
        """Take one sample now (the thread does, every interval; `last`, with energy, at stop)."""
        row = self._row(self._read(last))
        with self._lock:
            if self._live:
                self._rows.append(row)
                if last:
                    self._done.set()

    def _row(self, gpu: dict[str, Any]) -> tuple:  # the clocks, a GPU reading, RAPL's counters
        rapl = machine.read_rapl(self._packages) if self._packages else None
        return self._clock(), self._cpu_clock(), gpu, rapl

    def _run(self) -> None:
        """The thread: the GPU and the first sample, one per interval, the last (with energy)."""
        readers, first, reason = {}, {}, machine.CPU_REASON
        if self.index is not None:
            try:
                readers, first, reason = nvml.open_gpu(self._module, self.index)
            except Exception as error:  # noqa: BLE001  (nothing raises out of a Monitor)
                reason = f"NVML failed at the start: {nvml.error_text(error)}"
        first = self._checked(first)
        with self._lock:
            if not self._live:
                return
            self._readers, self._reason, self.source = readers, reason, "nvml" if readers else None
            self._rows.append(self._row(first))
            self._ready.set()
        while not self._stop.wait(self.interval):
            self.sample()
        self.sample(last=True)

    def _read(self, last: bool = False) -> dict[str, Any]:
        """One GPU reading (energy only when `last`) of plausible values; {} once NVML failed."""
        if not self._readers or self._failure is not None:
            return {}
        try:
            return self._checked({name: read() for name, read in self._readers.items()
                                  if last or name != "energy"})
        except Exception as error:  # noqa: BLE001  (the GPU went away mid-run)
            self._failure = f"NVML failed after {len(self._rows)} samples: {nvml.error_text(error)}"
            return {}

    def _checked(self, values: dict[str, Any]) -> dict[str, Any]:
        """`values` without the impossible readings (the first reason for each figure kept)."""
        whys = {name: plausible(name, value) for name, value in values.items()}
        self._dropped |= {n: why for n, why in whys.items() if why and n not in self._dropped}
        return {name: values[name] for name, why in whys.items() if why is None}

    def _summary(self) -> dict:
        with self._lock:
            times, cpu, gpu, rapl = zip(*self._rows, strict=True)
        seconds, failure = times[-1] - times[0], self._failure
        result = unmeasured(self._reason if self.source or not failure else failure) | {
            "interval_s": self.interval, "samples": len(times), "seconds": round(seconds, 6),
            "partial": failure is not None, **_cpu_use(times, cpu)}
        if (joules := machine.rapl_joules(self._packages, rapl)) is not None:
            result.update(cpu_energy_joules=round(joules, 3), cpu_energy_method="rapl")
        if self.source is None:
            return result
        result.update(source="nvml", **_gpu_figures(gpu))
        if short := seconds < MIN_AVERAGED_SECONDS:  # NVML's busy % and energy tell of before
            result.update(gpu_util_percent_mean=None, gpu_util_percent_max=None)
        elif failure is None:
            result.update(self._energy(times, gpu))
        words = [failure + "; the figures cover the region up to then, and its energy is unknown"
                 if failure else result["reason"],
                 self._dropped and "NVML gave impossible readings, dropped: "
                 + "; ".join(self._dropped.values()),
                 short and f"a region of {1000 * seconds:.0f} ms is shorter than NVML's "
                 "utilisation window and energy-counter step: busy % and energy not reported"]
        result["reason"] = "; ".join(w for w in words if w) or None
        return result

    def _energy(self, times: Sequence[float], gpu: Sequence[dict]) -> dict:
        """GPU energy: the counter's end minus start, else the trapezoid of power over time."""
        start, end = gpu[0].get("energy"), gpu[-1].get("energy") if len(gpu) > 1 else None
        if start is not None and end is not None and end >= start:
            return {"energy_joules": round((end - start) / 1000, 3), "energy_method": "counter"}
        if start is not None and end is not None:
            self._dropped["energy"] = f"the energy counter ran backwards ({start} to {end} mJ)"
        points = [(t, row["power"]) for t, row in zip(times, gpu, strict=True) if "power" in row]
        if len(points) < 2:
            return {}
        joules = sum((t1 - t0) * (p0 + p1) / 2
                     for (t0, p0), (t1, p1) in itertools.pairwise(points)) / 1000
        return {"energy_joules": round(joules, 3), "energy_method": "power_integral"}


def _mean(values: Sequence[float], digits: int) -> float | None:
    return round(sum(values) / len(values), digits) if values else None


def _gpu_figures(gpu: Sequence[dict]) -> dict:
    """The GPU figures; `throttled`: the lowest SM clock while not idle against the top one."""
    later = gpu[1:] if len(gpu) > 1 else gpu  # a reading tells of the window before it

    def series(name: str, rows: Sequence[dict] = later) -> list:
        return [row[name] for row in rows if name in row]

    util, memory, watts = series("util"), series("memory", gpu), series("power")
    top, reasons = gpu[0].get("max_clock"), series("reasons", gpu)
    busy = [row["clock"] for row in later
            if "clock" in row and not int(row.get("reasons", 0)) & nvml.GPU_IDLE]
    return {"gpu_util_percent_mean": _mean(util, 1),
            "gpu_util_percent_max": max(util, default=None),
            "gpu_memory_used_mb_max": round(max(memory) / 2**20, 1) if memory else None,
            "sm_clock_mhz_mean": _mean(series("clock"), 1), "sm_clock_mhz_max": top,
            "sm_clock_mhz_min": min(busy, default=None),
            "throttled": None if not busy or top is None else min(busy) < THROTTLE_SHARE * top,
            "power_watts_mean": _mean([mw / 1000 for mw in watts], 2),
            "power_watts_max": round(max(watts) / 1000, 2) if watts else None,
            "clock_event_reasons": sorted({name for mask in reasons
                                           for name in nvml.reason_names(int(mask))})
            if reasons else None}


def _cpu_use(times: Sequence[float], cpu: Sequence[float]) -> dict:
    """This process's CPU use in % of one core: the region's, and its busiest interval's."""
    seconds = times[-1] - times[0]
    if seconds <= 0:
        return {}
    steps = list(itertools.pairwise(zip(times, cpu, strict=True)))
    longest = max(t1 - t0 for (t0, _), (t1, _) in steps)
    rates = [(c1 - c0) / (t1 - t0) * 100 for (t0, c0), (t1, c1) in steps
             if t1 - t0 >= longest / 2]  # not the last, cut short by stop: too short for a peak
    mean = (cpu[-1] - cpu[0]) / seconds * 100
    return {"cpu_util_percent_mean": round(mean, 1),
            "cpu_util_percent_max": round(max(rates, default=mean), 1)}


def combine(results: Sequence[dict | None]) -> dict:
    """One run-level telemetry object from per-region (per-epoch) ones."""
    regions = [r for r in results if r is not None]
    if not regions:
        return unmeasured("no region was measured")
    partial = [r["reason"] for r in regions if r.get("partial")]
    reasons = [r["reason"] for r in regions if r.get("reason")]
    if reasons and not partial and len(reasons) < len(regions):
        reasons[0] = f"{len(reasons)} of {len(regions)} regions: {reasons[0]}"
    combined = unmeasured((partial or reasons or [None])[0])
    for field in TELEMETRY_FIELDS[2:]:  # by kind of figure
        values = [r[field] for r in regions if r.get(field) is not None]
        if field.endswith(("_max", "_min")) or field in ("partial", "throttled"):  # any: True
            best = min if field.endswith("_min") else max
            combined[field] = best(values, default=combined[field])
        elif field.endswith("_joules"):  # never a part-sum
            combined[field] = round(sum(values), 3) if len(values) == len(regions) else None
        elif field.endswith("_mean") and values:  # weighted by seconds, else samples
            weights = [r.get("seconds") or r.get("samples") or 1 for r in regions
                       if r.get(field) is not None]
            combined[field] = round(sum(v * w for v, w in zip(values, weights, strict=True))
                                    / sum(weights), 2 if field.startswith("power") else 1)
        elif field in ("samples", "seconds"):
            combined[field] = round(sum(values), 6)
        elif field.endswith("_method"):  # the regions' one method, else the weaker, else none
            methods = {r.get(field) for r in regions}
            combined[field] = (None if None in methods else methods.pop() if len(methods) == 1
                               else "power_integral")
        elif field == "clock_event_reasons" and values:
            combined[field] = sorted({name for names in values for name in names})
    return combined | {"source": regions[0].get("source"),
                       "interval_s": regions[0].get("interval_s")}


def epoch_fields(results: Sequence[dict | None]) -> dict:
    """The per-epoch lists a train record carries, None where an epoch lacks the figure."""
    regions = [r or {} for r in results]
    return {"epoch_energy_joules": [r.get("energy_joules") for r in regions],
            "epoch_gpu_util_percent": [r.get("gpu_util_percent_mean") for r in regions],
            "epoch_cpu_util_percent": [r.get("cpu_util_percent_mean") for r in regions],
            "epoch_clock_event_reasons": [r.get("clock_event_reasons") for r in regions]}
