"""GPU and CPU telemetry around a timed region: busy %, clocks, power, energy and CPU use.

A building block: the standard library and, where it is installed, NVIDIA's own
binding `pynvml` (the nvidia-ml-py package). It never imports an ML framework and
never syncs a device; the caller's timing does that. `Monitor` samples in a
daemon thread while the region runs and leaves the record's `telemetry` object in
`.result`; nothing in it raises once it has started: where a figure cannot be read
it is null, and `reason` says why in words.

Units: NVML gives power in mW, energy in mJ, clocks in MHz, utilisation in % and
memory in bytes; the record has W, J, MHz, % and MiB (`gpu_memory_used_mb_max`,
1 MiB = 2**20 bytes, as nvidia-smi counts).

NVML's utilisation is the share of time in which at least one kernel ran, not how
full the SMs were: a GPU 100 % busy with one small kernel at a time shows 100 %.
"""

from __future__ import annotations

import atexit
import itertools
import math
import os
import re
import threading
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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

FIELDS = (
    "source", "reason", "partial", "interval_s", "samples", "seconds",
    "gpu_util_percent_mean", "gpu_util_percent_max", "gpu_memory_used_mb_max",
    "sm_clock_mhz_mean", "power_watts_mean", "power_watts_max",
    "energy_joules", "energy_method", "clock_event_reasons",
    "cpu_util_percent_mean", "cpu_util_percent_max", "cpu_energy_joules", "cpu_energy_method",
)

EMPTY: types.MappingProxyType = types.MappingProxyType(
    {name: (False if name == "partial" else None) for name in FIELDS})
"""The all-null telemetry object (read-only; `unmeasured` gives a dict to store)."""

# Clock-event reason bits (NVML's nvmlClocksEventReason* values) and the names the
# record uses. Reasons that are not a slowdown of the work (idle, clocks set by the
# user or the display) are left out of `clock_event_reasons`.
REASON_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x200: "board_limit",
    0x400: "reliability",
}
IGNORED_REASON_BITS = 0x1 | 0x2 | 0x100  # gpu_idle, applications_clocks_setting, display clock

NO_PYNVML = "nvidia-ml-py is not installed, so NVML cannot be asked (pip install nvidia-ml-py)"
NO_DRIVER = "no NVIDIA driver: the NVML library could not be loaded"
CPU_DEVICE = "the device is the CPU"

RAPL_ROOT = Path("/sys/class/powercap")
_RAPL_PACKAGE = re.compile(r"intel-rapl:\d+")  # top-level domains; subdomains have two colons

_JOIN_TIMEOUT_S = 5.0  # a sampler stuck in NVML longer than this is abandoned (partial)

_nvml_lock = threading.Lock()
_nvml_started: dict[int, tuple[Any, str | None]] = {}  # id(module) -> (module, failure or None)


def unmeasured(reason: str | None) -> dict:
    """The all-null telemetry object with `reason` (for records made without a Monitor)."""
    return {**EMPTY, "reason": reason}


def _import_pynvml() -> Any:
    """The `pynvml` module, or None where nvidia-ml-py is not installed."""
    try:
        import pynvml  # noqa: PLC0415  (optional: nvidia-ml-py may be absent)
    except ImportError:
        return None
    return pynvml


def _start_nvml(nvml: Any) -> str | None:
    """nvmlInit once per process and module (kept open until exit); the failure in words."""
    with _nvml_lock:
        known = _nvml_started.get(id(nvml))
        if known is not None and known[0] is nvml:
            return known[1]
        try:
            nvml.nvmlInit()
            failure = None
            atexit.register(_shutdown_nvml, nvml)
        except Exception as error:  # noqa: BLE001  (an NVMLError, or ctypes' OSError)
            failure = _init_failure(nvml, error)
        _nvml_started[id(nvml)] = (nvml, failure)
        return failure


def _shutdown_nvml(nvml: Any) -> None:
    """nvmlShutdown at exit, matching the one nvmlInit."""
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001  (the process is ending)
        pass


def _init_failure(nvml: Any, error: Exception) -> str:
    """Why nvmlInit failed, in words."""
    code = getattr(error, "value", None)
    if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", object()):
        return NO_DRIVER
    if code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", object()):
        return "the NVIDIA driver is installed but not loaded (NVML: Driver Not Loaded)"
    return f"NVML could not start: {error}"


def _error_text(error: Exception) -> str:
    """An NVML error (or any other) as a short phrase."""
    return str(error) or type(error).__name__


def _device_index(device: str) -> int | None:
    """N of "gpu:N", None for "cpu"; ValueError naming the value for anything else."""
    if device == "cpu":
        return None
    match = re.fullmatch(r"gpu:(\d+)", device) if isinstance(device, str) else None
    if not match:
        raise ValueError(f"telemetry device {device!r} is not \"cpu\" or \"gpu:N\"; "
                         "pass the canonical name from gpubench.devices.resolve")
    return int(match[1])


def _visible_entries(value: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: comma-separated, up to the first bad entry."""
    entries = []
    for entry in value.split(","):
        entry = entry.strip()
        if entry.startswith("-") or not re.fullmatch(r"[A-Za-z0-9-]+", entry):
            break  # empty, negative or odd: CUDA ignores it and every entry after it
        entries.append(entry)
    return entries


def resolve_handle(nvml: Any, index: int) -> tuple[Any, str | None, str | None]:
    """(NVML handle of gpu:`index`, failure in words, caveat in words), asking no framework.

    gpu:N is the N-th GPU the process can see. Where CUDA_VISIBLE_DEVICES is set, that
    is its N-th entry: an index, a UUID ("GPU-..."), or a unique prefix of one. UUIDs
    are matched through nvmlDeviceGetUUID over all of NVML's devices. Indices (unset, or
    integer entries) are taken as NVML indices, which is right when CUDA numbers GPUs in
    PCI bus order as NVML does: always with CUDA_DEVICE_ORDER=PCI_BUS_ID, and with
    identical GPUs (CUDA's default "fastest first" then falls back to PCI order). With
    different GPUs and no PCI_BUS_ID the match cannot be checked without CUDA itself, so
    the caveat says so.
    """
    count = nvml.nvmlDeviceGetCount()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        entry = str(index)
        if index >= count:
            return None, f"gpu:{index} does not exist: NVML sees {count} GPU(s)", None
    else:
        entries = _visible_entries(visible)
        if index >= len(entries):
            return None, (f"gpu:{index} is not visible: CUDA_VISIBLE_DEVICES={visible!r} "
                          f"names {len(entries)} GPU(s)"), None
        entry = entries[index]
    if entry.isdigit():
        nvml_index = int(entry)
        if nvml_index >= count:
            return None, (f"gpu:{index} is NVML device {nvml_index} (CUDA_VISIBLE_DEVICES), "
                          f"but NVML sees {count} GPU(s)"), None
        return nvml.nvmlDeviceGetHandleByIndex(nvml_index), None, _order_caveat(nvml, count)
    if entry.upper().startswith("MIG-"):
        return None, (f"gpu:{index} is a MIG instance ({entry}): NVML gives no utilisation, "
                      "power or energy of its own for one"), None
    wanted = entry.lower()
    matches = []
    for i in range(count):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        uuid = str(nvml.nvmlDeviceGetUUID(handle)).lower()
        if uuid.startswith(wanted) or uuid.startswith("gpu-" + wanted):
            matches.append(handle)
    if len(matches) != 1:
        found = "no" if not matches else f"{len(matches)}"
        return None, (f"gpu:{index} is {entry!r} in CUDA_VISIBLE_DEVICES, and {found} NVML "
                      "device has that UUID"), None
    return matches[0], None, None


def _order_caveat(nvml: Any, count: int) -> str | None:
    """Words on an index match that may be wrong (different GPUs, CUDA's default order)."""
    if count < 2 or os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return None
    try:
        names = {str(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)))
                 for i in range(count)}
    except Exception:  # noqa: BLE001  (no name, no check)
        return None
    if len(names) < 2:
        return None
    return ("the GPUs differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA's numbering "
            "may not be NVML's: set CUDA_DEVICE_ORDER=PCI_BUS_ID to be sure of the device")


def _gpu_readers(nvml: Any, handle: Any) -> dict[str, Callable[[], Any]]:
    """One zero-argument reader per GPU figure, in NVML's units."""
    reasons = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
    readers = {
        "util": lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,  # %
        "memory": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used,  # bytes
        "clock": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),  # MHz
        "power": lambda: nvml.nvmlDeviceGetPowerUsage(handle),  # mW
        "energy": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),  # mJ
    }
    if reasons is not None:
        readers["reasons"] = lambda: reasons(handle)  # bitmask
    return readers


def _rapl_packages(root: Path) -> list[tuple[Path, int]]:
    """(energy_uj path, wrap range in µJ) of each readable CPU package domain."""
    packages = []
    try:
        domains = sorted(root.glob("intel-rapl:*"))
    except OSError:
        return []
    for domain in domains:
        if not _RAPL_PACKAGE.fullmatch(domain.name):
            continue
        try:
            if not (domain / "name").read_text().strip().startswith("package"):
                continue  # "psys" (the whole platform) would count the package twice
            int((domain / "energy_uj").read_text())
            wrap = int((domain / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            return []  # unreadable (energy_uj is root-only on most kernels since 2020)
        packages.append((domain / "energy_uj", wrap))
    return packages


def _read_rapl(packages: Sequence[tuple[Path, int]]) -> tuple[int, ...] | None:
    """The packages' energy counters in µJ, None if one cannot be read."""
    try:
        return tuple(int(path.read_text()) for path, _ in packages)
    except (OSError, ValueError):
        return None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def reason_names(mask: int) -> list[str]:
    """The record's names for the slowdown bits of an NVML clock-event-reason bitmask."""
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    unknown = mask & ~(IGNORED_REASON_BITS | sum(REASON_BITS))
    names += [f"other_{1 << n:#x}" for n in range(unknown.bit_length()) if unknown >> n & 1]
    return names


class Monitor:
    """Samples GPU (NVML) and process CPU figures in a background thread around a region.

    Use as `with Monitor("gpu:0") as m: ...` or `m.start(); ...; m.stop()`; `.result`
    (None until stopped) is the record's `telemetry` object. `device` is "cpu" or
    "gpu:N". `nvml`, `clock` and `cpu_clock` stand in for pynvml, time.perf_counter and
    time.process_time in tests.
    """

    def __init__(self, device: str, interval: float = DEFAULT_INTERVAL, *, nvml: Any = None,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        self.index = _device_index(device)
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
        """Take the first sample and start the sampler thread."""
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
        self._energy_end: Any = None
        self._first_gpu: dict[str, Any] = {}
        try:
            self._packages = _rapl_packages(RAPL_ROOT)
        except Exception:  # noqa: BLE001
            self._packages = []
        try:
            self._start_gpu()
        except Exception as error:  # noqa: BLE001  (nothing raises out of a Monitor)
            self._readers, self._source = {}, None
            self._reason = f"NVML failed at the start: {_error_text(error)}"
        self._sample(first=True)
        self._thread = threading.Thread(target=self._run, name="gpubench-telemetry",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Take the last sample, stop the thread and return (and keep) the result."""
        if self._thread is None:
            if self.result is None:
                self.result = unmeasured("the Monitor was never started")
            return self.result
        self._stop.set()
        self._thread.join(_JOIN_TIMEOUT_S)
        stuck = self._thread.is_alive()
        self._thread = None
        if stuck and self._failure is None:
            self._failure = f"an NVML call took over {_JOIN_TIMEOUT_S:g} s"
        try:
            self._sample(last=True, gpu=not stuck)
            self.result = self._summary()
        except Exception as error:  # noqa: BLE001  (nothing raises out of a Monitor)
            self.result = {**unmeasured(f"telemetry failed: {_error_text(error)}"),
                           "partial": True}
        return self.result

    def _start_gpu(self) -> None:
        """Find the NVML device and the figures it gives; set source or reason."""
        if self.index is None:
            self._reason = CPU_DEVICE
            return
        nvml = self._nvml if self._nvml is not None else _import_pynvml()
        if nvml is None:
            self._reason = NO_PYNVML
            return
        failure = _start_nvml(nvml)
        if failure is not None:
            self._reason = failure
            return
        handle, failure, caveat = resolve_handle(nvml, self.index)
        if handle is None:
            self._reason = failure
            return
        readers, first = {}, {}
        errors = []
        for name, read in _gpu_readers(nvml, handle).items():
            try:  # a figure this GPU does not give (NotSupported and the like) stays null
                first[name] = read()
                readers[name] = read
            except Exception as error:  # noqa: BLE001
                errors.append(_error_text(error))
        if not readers:
            self._reason = f"NVML reads nothing for {self.device}: {errors[0]}"
            return
        self._readers, self._first_gpu = readers, first
        self._source, self._reason = "nvml", caveat

    def _run(self) -> None:
        """The sampler thread: one sample per interval until stop."""
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self, first: bool = False, last: bool = False, gpu: bool = True) -> None:
        """Read the clocks, the GPU figures and RAPL once and keep them."""
        now, cpu = self._clock(), self._cpu_clock()
        values: dict[str, Any] = {}
        if first:
            values = dict(self._first_gpu)
        elif gpu and self._readers and self._failure is None:
            wanted = self._readers if last else {k: r for k, r in self._readers.items()
                                                 if k != "energy"}
            try:
                values = {name: read() for name, read in wanted.items()}
            except Exception as error:  # noqa: BLE001  (the GPU went away mid-run)
                values = {}
                with self._lock:
                    self._failure = (f"NVML failed after {len(self._times)} samples: "
                                     f"{_error_text(error)}")
        rapl = _read_rapl(self._packages) if self._packages else None
        with self._lock:
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
        result.update(self._cpu_figures(times, cpu))
        result.update(self._rapl_figures(rapl))
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
            result.update(gpu_util_percent_mean=_round(_mean(util), 1),
                          gpu_util_percent_max=_round(max(util, default=None), 1))
        if "memory" in self._readers:
            memory = series("memory", gpu)
            result["gpu_memory_used_mb_max"] = _round(
                max(memory) / 2**20 if memory else None, 1)
        if "clock" in self._readers:
            result["sm_clock_mhz_mean"] = _round(_mean(series("clock", later)), 1)
        if "power" in self._readers:
            watts = [mw / 1000 for mw in series("power", later)]
            result.update(power_watts_mean=_round(_mean(watts), 2),
                          power_watts_max=_round(max(watts, default=None), 2))
        if "reasons" in self._readers:
            seen: set[str] = set()
            for mask in series("reasons", gpu):
                seen.update(reason_names(int(mask)))
            result["clock_event_reasons"] = sorted(seen)
        if not partial:
            result.update(self._energy(times, gpu))
        if times[-1] - times[0] < MIN_AVERAGED_SECONDS:  # shorter than NVML's own averaging
            result.update(gpu_util_percent_mean=None, gpu_util_percent_max=None,
                          energy_joules=None, energy_method=None)
            result["reason"] = result.get("reason") or (
                f"a region of {1000 * (times[-1] - times[0]):.0f} ms is shorter than NVML's "
                "utilisation window and energy-counter step: busy % and energy not reported")
        return result

    def _energy(self, times: Sequence[float], gpu: Sequence[dict]) -> dict:
        """GPU energy: the counter's end minus start, else the trapezoid of power over time."""
        if "energy" in self._readers and self._energy_end is not None:
            joules = (self._energy_end - gpu[0]["energy"]) / 1000
            return {"energy_joules": round(joules, 3), "energy_method": "counter"}
        if "power" in self._readers:
            points = [(t, row["power"]) for t, row in zip(times, gpu, strict=True)
                      if "power" in row]
            if len(points) >= 2:
                joules = sum((t1 - t0) * (p0 + p1) / 2
                             for (t0, p0), (t1, p1) in itertools.pairwise(points)) / 1000
                return {"energy_joules": round(joules, 3), "energy_method": "power_integral"}
        return {}

    def _cpu_figures(self, times: Sequence[float], cpu: Sequence[float]) -> dict:
        """This process's CPU use in % of one core: over the region, and its busiest interval."""
        seconds = times[-1] - times[0]
        if seconds <= 0:
            return {}
        # Intervals shorter than half the longest (the last one, cut short by stop) are
        # too short for a meaningful peak; they still count in the mean.
        steps = list(itertools.pairwise(zip(times, cpu, strict=True)))
        longest = max(t1 - t0 for (t0, _), (t1, _) in steps)
        rates = [(c1 - c0) / (t1 - t0) * 100 for (t0, c0), (t1, c1) in steps
                 if t1 - t0 >= longest / 2]
        mean = (cpu[-1] - cpu[0]) / seconds * 100
        return {"cpu_util_percent_mean": round(mean, 1),
                "cpu_util_percent_max": round(max(rates, default=mean), 1)}

    def _rapl_figures(self, rapl: Sequence[tuple[int, ...] | None]) -> dict:
        """CPU package energy (all packages) from RAPL, counting each counter's wrap-around."""
        if not self._packages or any(reading is None for reading in rapl) or len(rapl) < 2:
            return {}
        microjoules = 0
        for before, after in itertools.pairwise(rapl):
            for (_, wrap), b, a in zip(self._packages, before, after, strict=True):
                microjoules += a - b if a >= b else a + wrap - b
        return {"cpu_energy_joules": round(microjoules / 1e6, 3), "cpu_energy_method": "rapl"}


def _weighted_mean(results: Sequence[dict], field: str) -> float | None:
    """The mean of a per-region mean, weighted by each region's seconds (else samples)."""
    pairs = [(r[field], r.get("seconds") or r.get("samples") or 0) for r in results
             if r.get(field) is not None]
    total = sum(weight for _, weight in pairs)
    if not pairs:
        return None
    if total <= 0:
        return sum(value for value, _ in pairs) / len(pairs)
    return sum(value * weight for value, weight in pairs) / total


def _maximum(results: Sequence[dict], field: str) -> float | None:
    values = [r[field] for r in results if r.get(field) is not None]
    return max(values) if values else None


def _total(results: Sequence[dict], field: str) -> float | None:
    """The sum over regions, or None if one region lacks the figure (never a part-sum)."""
    values = [r.get(field) for r in results]
    return None if not values or None in values else round(sum(values), 3)


def combine(results: Sequence[dict]) -> dict:
    """One run-level telemetry object from per-region (per-epoch) ones."""
    results = [r for r in results if r is not None]
    if not results:
        return unmeasured("no region was measured")
    first = results[0]
    combined = unmeasured(first.get("reason"))
    reason = next((r["reason"] for r in results if r.get("partial")), first.get("reason"))
    methods = {r.get("energy_method") for r in results}
    cpu_methods = {r.get("cpu_energy_method") for r in results}
    reasons = [r.get("clock_event_reasons") for r in results]
    combined.update(
        source=first.get("source"), reason=reason,
        partial=any(r.get("partial") for r in results),
        interval_s=first.get("interval_s"),
        samples=sum(r.get("samples") or 0 for r in results),
        seconds=round(sum(r.get("seconds") or 0 for r in results), 6),
        gpu_util_percent_mean=_round(_weighted_mean(results, "gpu_util_percent_mean"), 1),
        gpu_util_percent_max=_maximum(results, "gpu_util_percent_max"),
        gpu_memory_used_mb_max=_maximum(results, "gpu_memory_used_mb_max"),
        sm_clock_mhz_mean=_round(_weighted_mean(results, "sm_clock_mhz_mean"), 1),
        power_watts_mean=_round(_weighted_mean(results, "power_watts_mean"), 2),
        power_watts_max=_maximum(results, "power_watts_max"),
        energy_joules=_total(results, "energy_joules"),
        energy_method=(None if None in methods else
                       "counter" if methods == {"counter"} else "power_integral"),
        clock_event_reasons=(None if all(r is None for r in reasons) else
                             sorted({name for names in reasons for name in names or ()})),
        cpu_util_percent_mean=_round(_weighted_mean(results, "cpu_util_percent_mean"), 1),
        cpu_util_percent_max=_maximum(results, "cpu_util_percent_max"),
        cpu_energy_joules=_total(results, "cpu_energy_joules"),
        cpu_energy_method="rapl" if cpu_methods == {"rapl"} else None,
    )
    return combined


def epoch_fields(results: Sequence[dict]) -> dict:
    """The per-epoch lists a train record carries, None where an epoch lacks the figure."""
    results = [r or {} for r in results]
    return {
        "epoch_energy_joules": [r.get("energy_joules") for r in results],
        "epoch_gpu_util_percent": [r.get("gpu_util_percent_mean") for r in results],
        "epoch_cpu_util_percent": [r.get("cpu_util_percent_mean") for r in results],
        "epoch_clock_event_reasons": [r.get("clock_event_reasons") for r in results],
    }
