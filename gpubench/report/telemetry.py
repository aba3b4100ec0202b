"""Telemetry in the report: GPU busy, power and energy, CPU use (GPU and CPU energy apart)."""

from __future__ import annotations

from gpubench import timing
from gpubench.fmt import NOT_A_NUMBER as NA
from gpubench.fmt import busy_text, dtype_label, joules, number
from gpubench.report.format import explained_table, prose
from gpubench.report.inputs import book_train, columns, model_rank, model_title
from gpubench.results import TELEMETRY_FIELDS, dtype_of, ok_records

BUSY_LOW_PERCENT = 60  # below this the GPU mostly waits: on the input feed or on Python
CLOCK_REASONS = {"power cap": {"sw_power_cap"},  # NVML's clock event reasons, by what they mean
                 "heat": {"sw_thermal_slowdown", "hw_thermal_slowdown"},
                 "hardware": {"hw_slowdown", "hw_power_brake_slowdown"}}
TELEMETRY_HEADERS = ["machine · env", "run", "device", "GPU busy", "GPU mean power",
                     "GPU energy per steady epoch", "images per joule (GPU)",
                     "CPU use (one core = 100 %)", "CPU energy per epoch", "images per joule (CPU)"]
NO_RAPL = f"{NA} (no RAPL on this machine)"


def gpu_busy(record: dict) -> tuple[float | None, bool]:
    """GPU busy % and whether it is the run's mean: the busy region's, else the epochs'."""
    if record.get("busy_region") is not None:
        return record["busy_region"].get("gpu_util_percent_mean"), False
    return timing.busy_percent(record.get("epoch_gpu_util_percent"),
                               (record.get("telemetry") or {}).get("gpu_util_percent_mean"))


def busy_cell(record: dict) -> str:
    """GPU busy in a cell; where NVML gave no steady figure, why, and the run's mean apart."""
    busy, run_mean = gpu_busy(record)
    telemetry = record.get("telemetry") or {}
    if busy is None and telemetry.get("source") == "nvml":
        return f"{NA} ({(telemetry.get('reason') or 'not measured').partition(':')[0]})"
    if run_mean and record.get("epoch_gpu_util_percent"):  # per-epoch figures, none steady
        return (f"{NA} in the steady {'rounds' if record.get('factor') else 'epochs'} (each too "
                f"short for NVML); {busy_text(busy, True)}, compiling included")
    return busy_text(busy, run_mean)


def energy_cells(record: dict) -> list[str]:
    """A record's cells of the table from "GPU mean power" on."""
    telemetry = record.get("telemetry") or {}
    epochs = record.get("epochs") or len(record.get("epoch_seconds") or []) or None
    gpu, words = timing.busy_percent(record.get("epoch_energy_joules"), None)[0], ""
    if gpu is None and telemetry.get("energy_joules") is not None and epochs:
        gpu, words = telemetry["energy_joules"] / epochs, " (all epochs' mean)"
    cpu = telemetry.get("cpu_energy_joules")
    cpu = cpu / epochs if cpu is not None and epochs else None
    rates = [(record.get("train_samples") or 0) / e if e and e > 0 else 0 for e in (gpu, cpu)]
    per_joule = [number(rate, 1 if rate < 100 else 0) if rate else NA for rate in rates]
    watts, util = telemetry.get("power_watts_mean"), telemetry.get("cpu_util_percent_mean")
    return [NA if watts is None else f"{number(watts)} W",
            NA if gpu is None else joules(gpu) + words, per_joule[0],
            NA if util is None else f"{number(util)} %",
            joules(cpu) if cpu is not None else NO_RAPL if epochs else NA, per_joule[1]]


def diagnosis(record: dict) -> list[str]:
    """What the telemetry says about a record, one finding a line; [] if fine."""
    telemetry = record.get("telemetry") or {}
    if telemetry.get("source") != "nvml":
        return []
    lines, (busy, _) = [], gpu_busy(record)
    if busy is not None and busy < BUSY_LOW_PERCENT and record["benchmark"] != "matmul":
        lines.append(prose("busy low", busy=number(busy)))
    if telemetry.get("throttled"):
        lines.append(prose("throttled", low=number(telemetry.get("sm_clock_mhz_min")),
                           top=number(telemetry.get("sm_clock_mhz_max"))))
    per_epoch = record.get("epoch_clock_event_reasons") or []
    for key, names in CLOCK_REASONS.items():
        what, why = prose(f"clocks {key}").split(": ", 1)
        if any(seen is not None for seen in per_epoch):
            count = sum(1 for seen in per_epoch if seen and names & set(seen))
            lines += [f"{what} in {count} of {len(per_epoch)} epochs: {why}"] * bool(count)
        elif names & set(telemetry.get("clock_event_reasons") or ()):
            lines.append(f"{what} during the run: {why}")
    return lines + [prose("partial")] * bool(telemetry.get("partial"))


def _run_name(record: dict) -> str:
    if record["benchmark"] == "matmul":
        return f"n = {record['size']} {dtype_label(dtype_of(record), record.get('tf32'))}"
    return model_title(record["model"]) + (f", {record.get('replicas')} replica(s)"
                                           if record["benchmark"] == "scaling" else "")


def section(records: list[dict]) -> list[str]:
    """The "Telemetry" section: GPU busy, power, energy and CPU use, and what they say."""
    order, figures = columns(records), TELEMETRY_FIELDS[3:]  # after source, reason, partial
    measured = [r for r in book_train(ok_records(records, "train")) + ok_records(records, "scaling")
                if any((r.get("telemetry") or {}).get(n) not in (None, [], False) for n in figures)]
    shown = sorted(measured, key=lambda r: (r["benchmark"] != "train", model_rank(r["model"]),
                                            order.index(r["_column"]), r.get("replicas") or 0))
    if not shown:
        return []
    hot = [r for r in ok_records(records, "matmul") if (r.get("telemetry") or {}).get("throttled")]
    findings = [f"- {r['_column']} {_run_name(r)} on {r['device']}: {finding}."
                for r in shown + hot for finding in diagnosis(r)]
    rows = [[r["_column"], _run_name(r), r["device"], busy_cell(r), *energy_cells(r)]
            for r in shown]
    return ["## Telemetry: how busy, how much power, how much energy", "", prose("telemetry"), "",
            *explained_table(TELEMETRY_HEADERS, rows),
            *(["What the numbers say:", "", *findings, ""] if findings else [])]
