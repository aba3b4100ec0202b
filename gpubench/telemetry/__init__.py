"""GPU telemetry (tools tier, loaded where a GPU is measured): `Monitor` samples NVML (busy %: the
share of time a kernel ran, not how full the SMs were; memory, SM clock, power, energy) and CPU use
and RAPL energy around a region, as the record's `telemetry` object; `combine`, `epoch_fields`."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import math
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from statistics import fmean
from typing import Any

from gpubench import machine
from gpubench.results import TELEMETRY_FIELDS, unmeasured

DEFAULT_INTERVAL = 0.1  # NVML averages busy % and power over 1/6 s to 1 s; a sample: 14 us (H200)
MIN_AVERAGED_SECONDS = 0.5  # NVML's busy % and energy of a shorter region say nothing of it
THROTTLE_SHARE = 0.75  # a region whose SM clock fell below this share of its top is throttled
# The longest any caller waits for an NVML call. While a call given up on is stuck, no Monitor
# asks NVML anything and NVML is not shut down at exit; a Monitor never raises once started.
WAIT_S = 2.0
# Readings NVML cannot truthfully give: (least, most) in NVML's units, and the figure in words.
PLAUSIBLE = {"util": (0, 100, "utilisation %"), "memory": (0, 2**50, "memory used (bytes)"),
             "clock": (0, 10_000, "SM clock (MHz)"), "max_clock": (1, 10_000, "max SM clock (MHz)"),
             "power": (0, 10_000_000, "power (mW)"), "energy": (0, 2**63, "energy counter (mJ)"),
             "reasons": (0, 2**64, "reasons mask")}
# nvmlClocksEventReason* bits: the record's names of the slowdowns; idle, user, display: none.
REASON_BITS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
               0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
               0x80: "hw_power_brake_slowdown", 0x200: "board_limit", 0x400: "reliability"}
GPU_IDLE = 0x1
IGNORED_REASON_BITS = GPU_IDLE | 0x2 | 0x100
NO_PYNVML = "nvidia-ml-py is not installed, so NVML cannot be asked (pip install nvidia-ml-py)"
NO_DRIVER = "no NVIDIA driver: the NVML library could not be loaded"
NOT_LOADED = "the NVIDIA driver is installed but not loaded (NVML: Driver Not Loaded)"
LEFT_OPEN = "NVML is not shut down at exit"

_lock = threading.Lock()
_started: dict[Any, str | None] = {}  # pynvml module -> why nvmlInit failed, None if it did not
_stuck: list[threading.Thread] = []  # threads inside a call given up on, until they leave it


class Monitor:
    """`with Monitor("gpu:0") as m:`, then `m.result`; `rows`: the samples so far (time, CPU time,
    GPU reading, RAPL counters); `nvml`, `clock`, `cpu_clock`: stand-ins for tests."""

    def __init__(self, device: str, interval: float = DEFAULT_INTERVAL, *, nvml: Any = None,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        match = re.fullmatch(r"gpu:(\d+)", device) if isinstance(device, str) else None
        if not match and device != "cpu":
            raise ValueError(f"telemetry device {device!r} is not \"cpu\" or \"gpu:N\"; "
                             "pass the canonical name from gpubench.devices.resolve")
        self.device, self.index = device, int(match[1]) if match else None
        self.interval, self.result, self.source = float(interval), None, None
        self._module, self._clock, self._cpu_clock, self._thread = nvml, clock, cpu_clock, None

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Monitor:
        """Start the sampler thread; it finds the GPU (waited for at most WAIT_S), then samples."""
        if self._thread is not None:
            raise RuntimeError("Monitor.start: it is already running; call stop() first")
        self.result = self.source = self._failure = self._reason = None
        self.rows, self._readers, self._dropped, self._live = [], {}, {}, True
        self._lock, self._packages = threading.Lock(), machine.rapl_packages()
        self._stop, self._ready, self._done = (threading.Event() for _ in range(3))
        self._thread = threading.Thread(target=self._run, name="gpubench-telemetry", daemon=True)
        why = "an earlier NVML call has not answered yet"
        if self.index is None or not stuck():
            self._thread.start()
            self._ready.wait(WAIT_S)
            why = f"NVML did not answer within {WAIT_S:g} s at the start"
        with self._lock:
            if not self._ready.is_set():  # on without GPU figures; the thread's rows not kept
                self._live = False
                self._failure = (f"{why}: no GPU figures for this region, and {LEFT_OPEN} while "
                                 "a call is stuck")
                self.rows.append(self._row({}))
                _stuck.append(self._thread)
        return self

    def stop(self) -> dict:
        """Stop the thread after its last sample (waited for at most WAIT_S); the result."""
        if self._thread is None:
            self.result = self.result or unmeasured("the Monitor was never started")
            return self.result
        called, waited, thread = self._row({}), self._live, self._thread
        self._stop.set()
        if waited:
            self._done.wait(WAIT_S)
        with self._lock:
            if not self._done.is_set():  # the figures so far stay; the region ended here
                self._failure = self._failure or (f"an NVML call took over {WAIT_S:g} s "
                                                  f"({LEFT_OPEN} while it is stuck)")
                self.rows.append(called)
                _stuck.append(thread)
            self._live, self._thread = False, None
        try:
            self.result = self._summary()
        except Exception as error:  # noqa: BLE001  (nothing raises out of a Monitor)
            self.result = unmeasured(f"telemetry failed: {_error_text(error)}") | {"partial": True}
        return self.result

    def sample(self, last: bool = False) -> None:
        """Take one sample now (the thread does, every interval; `last`, with energy, at stop)."""
        gpu = {}
        if self._readers and self._failure is None:  # {} once NVML failed
            try:
                gpu = self._checked({name: read() for name, read in self._readers.items()
                                     if last or name != "energy"})
            except Exception as error:  # noqa: BLE001  (the GPU went away mid-run)
                self._failure = f"NVML failed after {len(self.rows)} samples: {_error_text(error)}"
        row = self._row(gpu)
        with self._lock:
            if self._live:
                self.rows.append(row)
                if last:
                    self._done.set()

    def _row(self, gpu: dict[str, Any]) -> tuple:
        return self._clock(), self._cpu_clock(), gpu, machine.read_rapl(self._packages)

    def _run(self) -> None:  # the thread: the GPU and the first sample, one per interval, the last
        readers, first, reason = {}, {}, machine.CPU_REASON
        if self.index is not None:
            try:
                readers, first, reason = _open_gpu(self._module, self.index)
            except Exception as error:  # noqa: BLE001  (nothing raises out of a Monitor)
                reason = f"NVML failed at the start: {_error_text(error)}"
        first = self._checked(first)
        with self._lock:
            if not self._live:
                return
            self._readers, self._reason, self.source = readers, reason, "nvml" if readers else None
            self.rows.append(self._row(first))
            self._ready.set()
        while not self._stop.wait(self.interval):
            self.sample()
        self.sample(last=True)

    def _checked(self, values: dict[str, Any]) -> dict[str, Any]:  # the plausible ones, and why
        whys = {name: plausible(name, value) for name, value in values.items()}
        self._dropped |= {n: why for n, why in whys.items() if why and n not in self._dropped}
        return {name: values[name] for name, why in whys.items() if why is None}

    def _summary(self) -> dict:
        with self._lock:
            times, cpu, gpu, rapl = zip(*self.rows, strict=True)
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

    def _energy(self, times: Sequence[float], gpu: Sequence[dict]) -> dict:  # counter, else P dt
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


def plausible(name: str, value: Any) -> str | None:
    """None if `value` is a reading figure `name` can have, else why not, in words."""
    least, most, words = PLAUSIBLE[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{words} {value!r:.40} is not a number"
    in_range = math.isfinite(value) and least <= value <= most
    return None if in_range else f"{words} {value!r:.40} is outside {least}-{most:,}"


def _gpu_figures(gpu: Sequence[dict]) -> dict:  # throttled: the lowest SM clock (not idle) / top
    later = gpu[1:] if len(gpu) > 1 else gpu  # a reading tells of the window before it

    def series(name: str, rows: Sequence[dict] = later) -> list:
        return [row[name] for row in rows if name in row]

    util, clocks, watts = series("util"), series("clock"), series("power")
    memory, top, reasons = series("memory", gpu), gpu[0].get("max_clock"), series("reasons", gpu)
    busy = [row["clock"] for row in later
            if "clock" in row and not int(row.get("reasons", 0)) & GPU_IDLE]
    return {"gpu_util_percent_mean": round(fmean(util), 1) if util else None,
            "gpu_util_percent_max": max(util, default=None),
            "gpu_memory_used_mb_max": round(max(memory) / 2**20, 1) if memory else None,
            "sm_clock_mhz_mean": round(fmean(clocks), 1) if clocks else None,
            "sm_clock_mhz_max": top,
            "sm_clock_mhz_min": min(busy, default=None),
            "throttled": None if not busy or top is None else min(busy) < THROTTLE_SHARE * top,
            "power_watts_mean": round(fmean(watts) / 1000, 2) if watts else None,
            "power_watts_max": round(max(watts) / 1000, 2) if watts else None,
            "clock_event_reasons": sorted({name for mask in reasons
                                           for name in reason_names(int(mask))})
            if reasons else None}


def _cpu_use(times: Sequence[float], cpu: Sequence[float]) -> dict:  # the mean, busiest interval
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
    told = sorted(regions, key=lambda r: not r.get("partial"))  # a partial region's reason first
    combined = unmeasured(next((r["reason"] for r in told if r.get("reason")), None))
    for field in TELEMETRY_FIELDS[2:]:  # by kind of figure
        values = [r[field] for r in regions if r.get(field) is not None]
        if field.endswith(("_max", "_min")) or field in ("partial", "throttled"):  # any: True
            combined[field] = (min if "_min" in field else max)(values, default=combined[field])
        elif field.endswith("_joules"):  # never a part-sum
            combined[field] = round(sum(values), 3) if len(values) == len(regions) else None
        elif field.endswith("_mean") and values:  # weighted by seconds, else samples
            weights = [r.get("seconds") or r.get("samples") or 1 for r in regions
                       if r.get(field) is not None]
            combined[field] = round(sum(v * w for v, w in zip(values, weights, strict=True))
                                    / sum(weights), 2 if field.startswith("power") else 1)
        elif field in ("samples", "seconds"):
            combined[field] = round(sum(values), 6)
        elif field.endswith("_method"):  # the regions' one, else the weaker: "power_integral"
            methods = {r.get(field) for r in regions}
            combined[field] = None if None in methods else max(methods)  # > "counter"
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


def reason_names(mask: int) -> list[str]:
    """The record's names for the slowdown bits of an NVML clock-event-reason bitmask."""
    unknown = mask & ~(IGNORED_REASON_BITS | sum(REASON_BITS))
    return [name for bit, name in REASON_BITS.items() if mask & bit] + [
        f"other_{1 << n:#x}" for n in range(unknown.bit_length()) if unknown >> n & 1]


def stuck() -> bool:
    """Whether a thread given up on is still inside NVML."""
    return any(thread.is_alive() for thread in _stuck)


def _error_text(error: Exception) -> str:  # an NVML error (or any other) as a short phrase
    return str(error) or type(error).__name__


def _start_nvml(nvml: Any) -> str | None:  # nvmlInit once per module; the failure in words
    with _lock:
        if nvml not in _started:
            _started[nvml] = None
            try:
                nvml.nvmlInit()
            except Exception as error:  # noqa: BLE001  (an NVMLError, or ctypes' OSError)
                _started[nvml] = {
                    getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1): NO_DRIVER,
                    getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1): NOT_LOADED,
                }.get(getattr(error, "value", None), f"NVML could not start: {_error_text(error)}")
        return _started[nvml]


@atexit.register
def _shutdown() -> None:  # nvmlShutdown of each started module, waited for at most WAIT_S
    def quietly(function: Callable[[], Any]) -> None:
        with contextlib.suppress(Exception):  # the process is ending
            function()

    for nvml in [nvml for nvml, failure in _started.items() if failure is None]:
        if stuck():
            return
        thread = threading.Thread(target=quietly, args=(nvml.nvmlShutdown,), daemon=True)
        thread.start()
        thread.join(WAIT_S)
        _stuck.append(thread)
    _started.clear()


# (NVML handle of gpu:`index`, failure, caveat): the N-th entry of CUDA_VISIBLE_DEVICES as CUDA
# reads it (an index, a UUID or its prefix), else NVML index N; asks no framework.
def _resolve_handle(nvml: Any, index: int) -> tuple[Any, str | None, str | None]:
    count = nvml.nvmlDeviceGetCount()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [str(i) for i in range(count)] if visible is None else list(itertools.takewhile(
        lambda e: re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]*", e), map(str.strip, visible.split(","))))
    if index >= len(entries):
        return None, (f"gpu:{index} does not exist: NVML sees {count} GPU(s)" if visible is None
                      else f"gpu:{index} is not visible: CUDA_VISIBLE_DEVICES={visible!r} "
                      f"names {len(entries)} GPU(s)"), None
    entry = entries[index]
    if entry.isdigit():
        if int(entry) >= count:
            return None, (f"gpu:{index} is NVML device {entry} (CUDA_VISIBLE_DEVICES), but NVML "
                          f"sees {count} GPU(s)"), None
        caveat = None  # an index is right in PCI bus order; CUDA's own order may differ
        if count > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            with contextlib.suppress(Exception):  # no name, no check
                if len({str(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)))
                        for i in range(count)}) > 1:
                    caveat = ("the GPUs differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA's "
                              "numbering may not be NVML's: set CUDA_DEVICE_ORDER=PCI_BUS_ID")
        return nvml.nvmlDeviceGetHandleByIndex(int(entry)), None, caveat
    if entry.upper().startswith("MIG-"):
        return None, (f"gpu:{index} is a MIG instance ({entry}): NVML gives no utilisation, "
                      "power or energy of its own for one"), None
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    matches = [h for h in handles if str(nvml.nvmlDeviceGetUUID(h)).lower().startswith(
        (entry.lower(), "gpu-" + entry.lower()))]
    if len(matches) != 1:
        return None, (f"gpu:{index} is {entry!r} in CUDA_VISIBLE_DEVICES, and "
                      f"{len(matches) or 'no'} NVML device has that UUID"), None
    return matches[0], None, None


# (a reader per figure gpu:`index` gives, their first reading, the reason or caveat); `nvml` None:
# pynvml, if installed. "max_clock" is read only here.
def _open_gpu(nvml: Any, index: int) -> tuple[dict[str, Callable[[], Any]], dict, str | None]:
    if nvml is None:
        try:
            import pynvml as nvml  # noqa: PLC0415  (optional: nvidia-ml-py may be absent)
        except ImportError:
            return {}, {}, NO_PYNVML
    failure = _start_nvml(nvml)
    if failure is None:
        handle, failure, caveat = _resolve_handle(nvml, index)
    if failure is not None:
        return {}, {}, failure
    readers = {
        "util": lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,  # %
        "memory": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used,  # bytes
        "clock": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),  # MHz
        "max_clock": lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),  # MHz
        "power": lambda: nvml.nvmlDeviceGetPowerUsage(handle),  # mW
        "energy": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),  # mJ
        "reasons": lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle),  # bitmask
    }
    first, errors = {}, []
    for name, read in list(readers.items()):
        try:  # a figure this GPU does not give (NotSupported and the like) stays null
            first[name] = read()
        except Exception as error:  # noqa: BLE001
            errors.append(_error_text(error))
            del readers[name]
    readers.pop("max_clock", None)
    if not readers:
        return {}, {}, f"NVML reads nothing for gpu:{index}: {errors[0]}"
    return readers, first, caveat
