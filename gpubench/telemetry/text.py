"""Telemetry in words: the chapters' one-line summary, diagnosis lines and the report's cells.

Pure functions from a record's numbers to text; no NVML, no ML framework. The
figures come from the rest of `gpubench.telemetry` (the record's `telemetry` object and a
train record's per-epoch lists), though this module imports none of it.

Energy is kept per part: the GPU's (NVML) and the CPU package's (RAPL) are never
added together, since a run has one without the other as often as both (a CPU env
has no GPU figure, and most kernels let only root read RAPL). `images_per_joule`
uses the GPU's energy; `cpu_images_per_joule` the CPU package's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from gpubench import timing

BUSY_LOW_PERCENT = 60  # below this the GPU mostly waits: on the input feed or on Python
POWER_CAP_REASONS = frozenset({"sw_power_cap"})
THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
HARDWARE_REASONS = frozenset({"hw_slowdown", "hw_power_brake_slowdown"})

NA = "n/a"
NO_RAPL = "n/a (no RAPL on this machine)"

_METHOD_WORDS = {"counter": "counter", "power_integral": "power x time"}


def _number(value: float, digits: int = 0) -> str:
    """1930.4 -> "1,930"; digits after the point as asked; "n/a" for no finite number, and
    never "-0" (the report's `fmt` rule, which this layer cannot import)."""
    if not math.isfinite(value):
        return NA
    text = f"{value:,.{digits}f}" if abs(value) < 1e15 else f"{value:.3g}"
    return text.removeprefix("-") if not text.strip("-0.,") else text


def _joules(value: float) -> str:
    return _number(value, 1 if abs(value) < 10 else 0) + " J"


def _epochs(record: dict) -> int | None:
    """The number of epochs a record's telemetry covers, None for a matmul record."""
    epochs = record.get("epochs")
    if isinstance(epochs, int) and epochs > 0:
        return epochs
    per_epoch = record.get("epoch_seconds")
    return len(per_epoch) if per_epoch else None


def line(telemetry: dict | None, epochs: int | None = None,
         epoch_gpu_util: Sequence[float | None] | None = None) -> str:
    """One line for a chapter, e.g. "GPU: busy 91 %, 287 W mean, ...; CPU: 104 % of one core".

    Energy is per epoch when `epochs` is given, else for the whole region; GPU busy by its one
    definition (`busy_percent`, from `epoch_gpu_util` where given), as the report's table.
    """
    if not telemetry:
        return "telemetry: not recorded"
    per = " per epoch" if epochs else ""
    if telemetry.get("source") == "nvml":
        parts = []
        busy = busy_percent(epoch_gpu_util, telemetry.get("gpu_util_percent_mean"))
        if busy[0] is not None:
            parts.append(f"busy {busy_text(*busy)}")
        if telemetry.get("power_watts_mean") is not None:
            parts.append(f"{_number(telemetry['power_watts_mean'])} W mean")
        if telemetry.get("sm_clock_mhz_mean") is not None:
            parts.append(f"{_number(telemetry['sm_clock_mhz_mean'])} MHz")
        energy = telemetry.get("energy_joules")
        if energy is not None:
            method = _METHOD_WORDS.get(telemetry.get("energy_method"), "?")
            parts.append(f"{_joules(energy / (epochs or 1))}{per} ({method})")
        if telemetry.get("partial"):
            parts.append("partial: NVML failed during the run")
        gpu = "GPU: " + (", ".join(parts) or "no figures")
    else:
        gpu = f"GPU: none ({telemetry.get('reason') or 'not measured'})"
    cpu_parts = []
    if telemetry.get("cpu_util_percent_mean") is not None:
        cpu_parts.append(f"{_number(telemetry['cpu_util_percent_mean'])} % of one core")
    if telemetry.get("cpu_energy_joules") is not None:
        cpu_parts.append(f"{_joules(telemetry['cpu_energy_joules'] / (epochs or 1))}{per}"
                         " (RAPL)")
    cpu = "CPU: " + (", ".join(cpu_parts) or "not measured")
    return f"{gpu}; {cpu}"


def _count(epochs: Sequence[Sequence[str] | None], names: frozenset) -> int:
    return sum(1 for seen in epochs if seen and names & set(seen))


def _reason_lines(record: dict, telemetry: dict) -> list[str]:
    """Clock slowdowns: per epoch where the record has them, else over the whole run."""
    per_epoch = record.get("epoch_clock_event_reasons")
    checks = [
        (POWER_CAP_REASONS, "clocks held back by the power cap",
         "the GPU drew its power limit; normal at full load, it sets the top speed"),
        (THERMAL_REASONS, "clocks slowed by heat (thermal slowdown)",
         "the GPU is too hot: check its cooling and airflow"),
        (HARDWARE_REASONS, "clocks slowed by the hardware (slowdown or power brake)",
         "the board or its power supply asked the GPU to slow down"),
    ]
    lines = []
    for names, what, why in checks:
        if per_epoch and any(seen is not None for seen in per_epoch):
            count = _count(per_epoch, names)
            if count:
                lines.append(f"{what} in {count} of {len(per_epoch)} epochs: {why}")
        elif names & set(telemetry.get("clock_event_reasons") or ()):
            lines.append(f"{what} during the run: {why}")
    return lines


BUSY_DEFINITION = ("the median over the steady epochs (2..n; epoch 1, which compiles, left "
                   "out) of NVML's share of the time in which a GPU kernel ran (not how full the "
                   "GPU was); a Speed_Factors variant whose rounds were too short for NVML: the "
                   "mean over its busy region (its steady training repeated for at least 2 s); "
                   "\"(run mean)\": no per-epoch figure, the mean over the whole run")


def busy_percent(epoch_util: Sequence[float | None] | None,
                 run_mean: float | None) -> tuple[float | None, bool]:
    """GPU busy % by its one definition (BUSY_DEFINITION), and whether it fell back to the run's
    mean for want of per-epoch figures."""
    steady = [u for u in timing.steady(epoch_util or []) if u is not None]
    if steady:
        return statistics.median(steady), False
    return run_mean, run_mean is not None


def gpu_busy(record: dict) -> tuple[float | None, bool]:
    """A record's GPU busy % (BUSY_DEFINITION) and whether it is the run's mean: its busy
    region's where one ran (Speed_Factors), else `busy_percent` of its epochs."""
    if record.get("busy_region") is not None:
        return record["busy_region"].get("gpu_util_percent_mean"), False
    return busy_percent(record.get("epoch_gpu_util_percent"),
                        (record.get("telemetry") or {}).get("gpu_util_percent_mean"))


def busy_text(busy: float | None, run_mean: bool) -> str:
    """"6 %", "4 % (run mean)", or "n/a"."""
    if busy is None:
        return NA
    return f"{_number(busy)} %" + (" (run mean)" if run_mean else "")


def diagnosis(record: dict) -> list[str]:
    """What the telemetry says about a train or matmul record, one finding a line; [] if fine."""
    telemetry = record.get("telemetry") or {}
    if telemetry.get("source") != "nvml":
        return []
    lines = []
    busy, _ = gpu_busy(record)
    if busy is not None and busy < BUSY_LOW_PERCENT:
        if record.get("benchmark") == "matmul":
            lines.append(f"GPU busy {_number(busy)} % of the timed region: the matrices are "
                         "too small to keep it busy, or Python's calls dominate")
        else:
            lines.append(f"GPU busy {_number(busy)} % of the epoch: it waits on the input feed "
                         "or on Python between steps; see Speed_Factors' input pipelines and "
                         "steps per execution")
    lines += _reason_lines(record, telemetry)
    if telemetry.get("partial"):
        lines.append("telemetry partial: NVML failed during the run, so its figures cover only "
                     "part of it and the energy is unknown")
    return lines


def energy_cells(record: dict) -> dict[str, str]:
    """The report's telemetry cells for one record, as text ("n/a" where unmeasured).

    joules_per_epoch and images_per_joule are the GPU's; cpu_joules_per_epoch and
    cpu_images_per_joule the CPU package's (RAPL); gpu_busy by BUSY_DEFINITION; watts_mean and
    cpu_util the run's means.
    """
    telemetry = record.get("telemetry") or {}
    epochs = _epochs(record)
    images = (record.get("train_samples") or 0) * (epochs or 0)

    def per_epoch(joules: float | None, missing: str) -> str:
        return _joules(joules / epochs) if joules is not None and epochs else missing

    def per_joule(joules: float | None) -> str:
        if joules is None or joules <= 0 or not images:
            return NA
        rate = images / joules
        return _number(rate, 1 if rate < 100 else 0)

    def percent(value: float | None) -> str:
        return NA if value is None else f"{_number(value)} %"

    gpu_joules = telemetry.get("energy_joules")
    cpu_joules = telemetry.get("cpu_energy_joules")
    watts = telemetry.get("power_watts_mean")
    return {
        "joules_per_epoch": per_epoch(gpu_joules, NA),
        "images_per_joule": per_joule(gpu_joules),
        "cpu_joules_per_epoch": per_epoch(cpu_joules, NO_RAPL if epochs else NA),
        "cpu_images_per_joule": per_joule(cpu_joules),
        "gpu_busy": busy_text(*gpu_busy(record)),
        "watts_mean": NA if watts is None else f"{_number(watts)} W",
        "cpu_util": percent(telemetry.get("cpu_util_percent_mean")),
    }
