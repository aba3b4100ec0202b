"""`Monitor`: a daemon thread that samples GPU (NVML) and CPU figures around a timed region and
leaves the record's `telemetry` object in `.result`.

It never syncs a device (the caller's timing does) and nothing in it raises once it has
started: where a figure cannot be read it is null, and `reason` says why in words.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from gpubench.telemetry.cpu import cpu_figures, rapl_figures, rapl_packages, read_rapl
from gpubench.telemetry.nvml import (
    CPU_DEVICE,
    NO_PYNVML,
    device_index,
    error_text,
    gpu_readers,
    import_pynvml,
    reason_names,
    resolve_handle,
    start_nvml,
)
from gpubench.telemetry.summary import mean, rounded, unmeasured

# 0.1 s: the figures NVML gives are averages over a window of their own (utilisation
# over 1/6 s to 1 s depending on the GPU, power over 1 s on Ampere and newer), so
# sampling faster adds little resolution, while 10 samples a second still give a
# 1-second epoch ten readings for its mean and max. One sample (five NVML calls, made
# with the GIL released, and a few Python lines) took 14 us on an H200: 0.014 % of one
# core at this interval. Energy comes from the driver's counter read at the two ends, so
# it does not depend on the interval where the counter exists; the counter itself moves
# in steps (a 0.05 s idle region read 7.8 J on that H200 where 78 W x 0.05 s is 3.9 J),
# so energies of regions much shorter than a second are coarse.
DEFAULT_INTERVAL = 0.1
# Below this, NVML's utilisation (averaged over 1/6 to 1 s) and its energy counter (which moves
# in steps) say nothing about the region itself: seen on an H200, 0 % busy and 0 J for 16 ms of
# back-to-back 8192^3 matmuls. Such regions get null busy % and energy, and a reason.
MIN_AVERAGED_SECONDS = 0.5

# NVML is only ever called from the sampler thread: the caller's thread waits at most this long
# for NVML's first answer at start() and for its last at stop(). A hung driver thus costs a
# region this delay at most, and its telemetry is partial, with the reason.
NVML_WAIT_S = 2.0
# Readings NVML cannot truthfully give: (least, most) in NVML's units, and the figure in words.
PLAUSIBLE = {"util": (0, 100, "utilisation %"), "memory": (0, 2**50, "memory used (bytes)"),
             "clock": (0, 10_000, "SM clock (MHz)"), "power": (0, 10_000_000, "power (mW)"),
             "energy": (0, 2**63, "energy counter (mJ)"), "reasons": (0, 2**64, "reasons mask")}
_stuck: list[threading.Event] = []  # set when a sampler given up on leaves its NVML call


def plausible(name: str, value: Any) -> str | None:
    """None if `value` is a reading figure `name` can have, else why not, in words."""
    least, most, words = PLAUSIBLE[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{words} {value!r:.40} is not a number"
    if not math.isfinite(value) or not least <= value <= most:
        return f"{words} {value!r:.40} is outside {least}-{most:,}"
    return None


class Monitor:
    """Samples GPU (NVML) and process CPU figures in a background thread around a region.

    Use as `with Monitor("gpu:0") as m: ...` or `m.start(); ...; m.stop()`; `.result`
    (None until stopped) is the record's `telemetry` object. `device` is "cpu" or
    "gpu:N". `nvml`, `clock` and `cpu_clock` stand in for pynvml, time.perf_counter and
    time.process_time in tests. Every NVML call runs in the sampler thread.
    """

    def __init__(self, device: str, interval: float = DEFAULT_INTERVAL, *, nvml: Any = None,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        self.index = device_index(device)
        if (isinstance(interval, bool) or not isinstance(interval, (int, float))
                or not math.isfinite(interval) or interval <= 0):
            raise ValueError(f"telemetry interval {interval!r} must be a positive number of "
                             f"seconds, e.g. {DEFAULT_INTERVAL}")
        self.device = device
        self.interval = float(interval)
        self.result: dict | None = None
        self._nvml = nvml
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def __enter__(self) -> Monitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Monitor:
        """Start the sampler thread, wait (at most NVML_WAIT_S) for its first GPU reading, and
        take the first sample."""
        if self._thread is not None:
            raise RuntimeError("Monitor.start: it is already running; call stop() first")
        self.result = None
        self._stop.clear()
        self._times: list[float] = []
        self._cpu: list[float] = []
        self._gpu: list[dict[str, Any]] = []
        self._rapl: list[tuple[int, ...] | None] = []
        self._readers: dict[str, Callable[[], Any]] = {}
        self._source: str | None = None
        self._reason: str | None = None
        self._failure: str | None = None
        self._abandoned = False  # NVML did not answer in time: the thread's answers are ignored
        self._dropped: dict[str, str] = {}  # figure -> why its first impossible reading was dropped
        self._energy_end: Any = None
        self._first_gpu: dict[str, Any] = {}
        # the thread's GPU found (or given up); start()'s first sample kept; stop()'s last reading
        self._ready, self._begun, self._last = (threading.Event() for _ in range(3))
        self._last_gpu: dict[str, Any] = {}
        try:
            self._packages = rapl_packages()
        except Exception:  # noqa: BLE001
            self._packages = []
        self._closed = False  # stop() has summed up: the thread keeps nothing more
        self._thread = threading.Thread(target=self._run, name="gpubench-telemetry",
                                        daemon=True)
        if self.index is None:
            self._reason = CPU_DEVICE  # no NVML at all
            self._ready.set()
        elif any(not answered.is_set() for answered in _stuck):
            self._give_up("an earlier NVML call has not answered yet", None)
            self._ready.set()  # the thread asks NVML nothing
        self._thread.start()
        if not self._ready.wait(NVML_WAIT_S):
            self._give_up(f"NVML did not answer within {NVML_WAIT_S:g} s at the start",
                          self._ready)
        try:
            self._sample(first=True)
        finally:
            self._begun.set()  # the thread's samples come after the first
        return self

    def _give_up(self, why: str, answered: threading.Event | None) -> None:
        """Go on without GPU figures: the region is partial, `why` is its reason, and until
        `answered` is set no other Monitor asks NVML."""
        with self._lock:
            self._abandoned = True
            self._readers, self._source, self._first_gpu = {}, None, {}
            self._failure = f"{why}: no GPU figures for this region"
        if answered is not None:
            _stuck[:] = [event for event in _stuck if not event.is_set()] + [answered]

    def stop(self) -> dict:
        """Take the last sample (its GPU reading from the thread, waited for at most
        NVML_WAIT_S), stop the thread and return (and keep) the result."""
        if self._thread is None:
            if self.result is None:
                self.result = unmeasured("the Monitor was never started")
            return self.result
        called = self._clock(), self._cpu_clock()
        self._stop.set()
        answered = self._abandoned or self._last.wait(NVML_WAIT_S)
        now, cpu = (self._clock(), self._cpu_clock()) if answered else called
        if not answered:  # the figures so far stay; the region ended when stop() was called
            with self._lock:
                self._failure = self._failure or f"an NVML call took over {NVML_WAIT_S:g} s"
            _stuck[:] = [event for event in _stuck if not event.is_set()] + [self._last]
        self._thread = None
        try:
            with self._lock:
                values = dict(self._last_gpu) if answered and not self._abandoned else {}
                self._closed = True
            self._keep(now, cpu, values, last=True, closing=True)
            self.result = self._summary()
        except Exception as error:  # noqa: BLE001  (nothing raises out of a Monitor)
            self.result = {**unmeasured(f"telemetry failed: {error_text(error)}"),
                           "partial": True}
        return self.result

    def _start_gpu(self) -> None:
        """(In the sampler thread) find the NVML device and the figures it gives, take the first
        GPU reading, and publish them, unless start() stopped waiting."""
        readers, first, source, reason = {}, {}, None, None
        try:
            readers, first, source, reason = self._find_gpu()
        except Exception as error:  # noqa: BLE001  (nothing raises out of a Monitor)
            reason = f"NVML failed at the start: {error_text(error)}"
        first = self._checked(first)
        with self._lock:
            if not self._abandoned:
                self._readers, self._first_gpu = readers, first
                self._source, self._reason = source, reason
        self._ready.set()

    def _find_gpu(self) -> tuple[dict, dict, str | None, str | None]:
        """(readers, first reading, source, reason) of this Monitor's GPU, asking NVML."""
        nvml = self._nvml if self._nvml is not None else import_pynvml()
        if nvml is None:
            return {}, {}, None, NO_PYNVML
        failure = start_nvml(nvml)
        if failure is not None:
            return {}, {}, None, failure
        handle, failure, caveat = resolve_handle(nvml, self.index)
        if handle is None:
            return {}, {}, None, failure
        readers, first, errors = {}, {}, []
        for name, read in gpu_readers(nvml, handle).items():
            try:  # a figure this GPU does not give (NotSupported and the like) stays null
                first[name] = read()
                readers[name] = read
            except Exception as error:  # noqa: BLE001
                errors.append(error_text(error))
        if not readers:
            return {}, {}, None, f"NVML reads nothing for {self.device}: {errors[0]}"
        return readers, first, "nvml", caveat

    def _run(self) -> None:
        """The sampler thread: the GPU found, then one sample per interval until stop, then the
        last GPU reading (energy included) for stop()."""
        if not self._ready.is_set():
            self._start_gpu()
        self._begun.wait()
        while not self._stop.wait(self.interval):
            self._sample()
        self._last_gpu = self._read_gpu(last=True)
        self._last.set()

    def _read_gpu(self, last: bool = False) -> dict[str, Any]:
        """One GPU reading of every figure (the energy counter only when `last`), impossible
        values dropped; {} once NVML has failed."""
        if not self._readers or self._failure is not None:
            return {}
        wanted = self._readers if last else {k: r for k, r in self._readers.items()
                                             if k != "energy"}
        try:
            return self._checked({name: read() for name, read in wanted.items()})
        except Exception as error:  # noqa: BLE001  (the GPU went away mid-run)
            with self._lock:
                self._failure = (f"NVML failed after {len(self._times)} samples: "
                                 f"{error_text(error)}")
            return {}

    def _checked(self, values: dict[str, Any]) -> dict[str, Any]:
        """`values` without the readings NVML cannot truthfully give; the first such reading of
        each figure is kept in words for the reason."""
        kept = {}
        for name, value in values.items():
            why = plausible(name, value) if name in PLAUSIBLE else None
            if why is None:
                kept[name] = value
            else:
                with self._lock:
                    self._dropped.setdefault(name, why)
        return kept

    def _sample(self, first: bool = False) -> None:
        """Read the clocks, the GPU figures and RAPL once and keep them (`first`: the GPU
        reading the thread took at the start)."""
        now, cpu = self._clock(), self._cpu_clock()
        values = dict(self._first_gpu) if first else self._read_gpu()
        self._keep(now, cpu, values)

    def _keep(self, now: float, cpu: float, values: dict[str, Any], last: bool = False,
              closing: bool = False) -> None:
        """Keep one sample: the clocks, a GPU reading and RAPL's counters (nothing once stop()
        has summed up, unless it is stop()'s own `closing` sample)."""
        rapl = read_rapl(self._packages) if self._packages else None
        with self._lock:
            if self._closed and not closing:
                return
            self._times.append(now)
            self._cpu.append(cpu)
            self._gpu.append(values)
            self._rapl.append(rapl)
            if last and "energy" in values:
                self._energy_end = values["energy"]

    def _summary(self) -> dict:
        """The telemetry object from the samples."""
        with self._lock:
            times, cpu, gpu, rapl = (list(self._times), list(self._cpu), list(self._gpu),
                                     list(self._rapl))
        seconds = times[-1] - times[0]
        result = unmeasured(self._reason)
        result.update(interval_s=self.interval, samples=len(times), seconds=round(seconds, 6))
        result.update(cpu_figures(times, cpu))
        result.update(rapl_figures(self._packages, rapl))
        if self._abandoned:
            result.update(partial=True, reason=self._failure)
        if self._source is None:
            return result
        partial = self._failure is not None
        result.update(source="nvml", partial=partial)
        if partial:
            result["reason"] = (self._failure + "; the figures cover the region up to then, "
                                "and its energy is unknown")
        # A reading describes the time just before it (NVML averages over a window), so the
        # first one, taken as the region starts, describes what ran before: the means and
        # maxima use the later ones where there are any.
        later = gpu[1:] if len(gpu) > 1 else gpu

        def series(name: str, rows: Sequence[dict]) -> list[float]:
            return [row[name] for row in rows if row.get(name) is not None]

        if "util" in self._readers:
            util = series("util", later)
            result.update(gpu_util_percent_mean=rounded(mean(util), 1),
                          gpu_util_percent_max=rounded(max(util, default=None), 1))
        if "memory" in self._readers:
            memory = series("memory", gpu)
            result["gpu_memory_used_mb_max"] = rounded(
                max(memory) / 2**20 if memory else None, 1)
        if "clock" in self._readers:
            result["sm_clock_mhz_mean"] = rounded(mean(series("clock", later)), 1)
        if "power" in self._readers:
            watts = [mw / 1000 for mw in series("power", later)]
            result.update(power_watts_mean=rounded(mean(watts), 2),
                          power_watts_max=rounded(max(watts, default=None), 2))
        if "reasons" in self._readers:
            seen: set[str] = set()
            for mask in series("reasons", gpu):
                seen.update(reason_names(int(mask)))
            result["clock_event_reasons"] = sorted(seen)
        if not partial:
            result.update(self._energy(times, gpu))
        if self._dropped:
            dropped = "NVML gave impossible readings, dropped: " + "; ".join(
                self._dropped.values())
            result["reason"] = "; ".join(r for r in (result.get("reason"), dropped) if r)
        if times[-1] - times[0] < MIN_AVERAGED_SECONDS:  # shorter than NVML's own averaging
            result.update(gpu_util_percent_mean=None, gpu_util_percent_max=None,
                          energy_joules=None, energy_method=None)
            result["reason"] = result.get("reason") or (
                f"a region of {1000 * (times[-1] - times[0]):.0f} ms is shorter than NVML's "
                "utilisation window and energy-counter step: busy % and energy not reported")
        return result

    def _energy(self, times: Sequence[float], gpu: Sequence[dict]) -> dict:
        """GPU energy: the counter's end minus start, else the trapezoid of power over time."""
        start, end = gpu[0].get("energy"), self._energy_end
        if start is not None and end is not None and end >= start:
            return {"energy_joules": round((end - start) / 1000, 3), "energy_method": "counter"}
        if start is not None and end is not None:
            self._dropped["energy"] = f"the energy counter ran backwards ({start} to {end} mJ)"
        if "power" in self._readers:
            points = [(t, row["power"]) for t, row in zip(times, gpu, strict=True)
                      if "power" in row]
            if len(points) >= 2:
                joules = sum((t1 - t0) * (p0 + p1) / 2
                             for (t0, p0), (t1, p1) in itertools.pairwise(points)) / 1000
                return {"energy_joules": round(joules, 3), "energy_method": "power_integral"}
        return {}

