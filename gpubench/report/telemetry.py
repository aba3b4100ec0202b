"""Telemetry in words and in the report: the lines a record's telemetry gives, how busy each
run kept the GPU, its power and energy, CPU use, and what those numbers say.

Energy is kept per part: the GPU's (NVML) and the CPU package's (RAPL) are never added
together, since a run has one without the other as often as both.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpubench import timing
from gpubench.fmt import NOT_A_NUMBER as NA
from gpubench.fmt import busy_text
from gpubench.fmt import joules as _joules
from gpubench.fmt import number as _number
from gpubench.report.checks import TELEMETRY_NUMBERS
from gpubench.report.format import BUSY_DEFINITION, COLUMN_NOTES, explained_table
from gpubench.report.records import book_train, columns, model_rank, model_title
from gpubench.results import ok_records

BUSY_LOW_PERCENT = 60  # below this the GPU mostly waits: on the input feed or on Python
POWER_CAP_REASONS = frozenset({"sw_power_cap"})
THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
HARDWARE_REASONS = frozenset({"hw_slowdown", "hw_power_brake_slowdown"})

NO_RAPL = f"{NA} (no RAPL on this machine)"

def _epochs(record: dict) -> int | None:
    """The number of epochs a record's telemetry covers, None for a matmul record."""
    epochs = record.get("epochs")
    if isinstance(epochs, int) and epochs > 0:
        return epochs
    per_epoch = record.get("epoch_seconds")
    return len(per_epoch) if per_epoch else None


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


def gpu_busy(record: dict) -> tuple[float | None, bool]:
    """A record's GPU busy % (BUSY_DEFINITION) and whether it is the run's mean: its busy
    region's where one ran (Speed_Factors), else `busy_percent` of its epochs."""
    if record.get("busy_region") is not None:
        return record["busy_region"].get("gpu_util_percent_mean"), False
    return timing.busy_percent(record.get("epoch_gpu_util_percent"),
                        (record.get("telemetry") or {}).get("gpu_util_percent_mean"))


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


TELEMETRY_HEADERS = ["machine · env", "run", "device", "GPU busy", "GPU mean power",
                     "GPU energy per epoch", "images per joule (GPU)", "CPU use (one core = 100 %)",
                     "CPU energy per epoch", "images per joule (CPU)"]

# GPU busy is one figure per run: this table, the lines under it and the chapters' line.
TELEMETRY_NOTES = {**COLUMN_NOTES, "GPU busy": BUSY_DEFINITION
                   + " (the same figure in the lines below and in each chapter's telemetry line)"}


def _telemetry_records(records: list[dict]) -> list[dict]:
    """Ok book train and scaling records whose telemetry measured anything, in the book's table's
    order (its models in the book's order, each in column order), the scaling runs after."""
    order = {column: i for i, column in enumerate(columns(records))}
    found = [r for r in book_train(ok_records(records, "train")) + ok_records(records, "scaling")
             if any((r.get("telemetry") or {}).get(name) is not None
                    for name in TELEMETRY_NUMBERS)]
    return sorted(found, key=lambda r: (r["benchmark"] != "train", model_rank(r["model"]),
                                        order[r["_column"]], r.get("replicas") or 0))


def _run_name(record: dict) -> str:
    name = model_title(record["model"])
    if record["benchmark"] == "scaling":
        name += f", {record.get('replicas')} replica(s)"
    return name


def rows(records: list[dict]) -> list[list]:
    """Per run: GPU busy %, mean W, joules per epoch, images per joule and CPU use."""
    found = []
    for r in _telemetry_records(records):
        cells = energy_cells(r)
        found.append([r["_column"], _run_name(r), r["device"], cells["gpu_busy"],
                     cells["watts_mean"], cells["joules_per_epoch"], cells["images_per_joule"],
                     cells["cpu_util"], cells["cpu_joules_per_epoch"],
                     cells["cpu_images_per_joule"]])
    return found


def diagnosis_lines(records: list[dict]) -> list[str]:
    """What each run's telemetry says, one finding a line ("GPU busy 23 % of the epoch: ...")."""
    return [f"- {r['_column']} {_run_name(r)} on {r['device']}: {finding}."
            for r in _telemetry_records(records) for finding in diagnosis(r)]


def section(records: list[dict]) -> list[str]:
    """The "Telemetry" section: how busy the GPU was, its power and energy, and CPU use."""
    if not (found := rows(records)):
        return []
    lines = ["## Telemetry: how busy, how much power, how much energy", "",
             "Measured while each epoch ran. GPU energy comes from the driver's counter, or "
             "power x time where the GPU has none; GPU and CPU energy are kept apart, never "
             "added.", "",
             *explained_table(TELEMETRY_HEADERS, found, TELEMETRY_NOTES)]
    if findings := diagnosis_lines(records):
        lines += ["What the numbers say:", "", *findings, ""]
    return lines

