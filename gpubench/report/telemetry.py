"""Telemetry in the report: how busy each run kept the GPU, its power and energy, CPU use, and
what those numbers say. GPU (NVML) and CPU package (RAPL) energy are kept apart, never added."""

from __future__ import annotations

from gpubench import timing
from gpubench.fmt import NOT_A_NUMBER as NA
from gpubench.fmt import busy_text, dtype_label, joules, number
from gpubench.report.format import explained_table
from gpubench.report.records import book_train, columns, model_rank, model_title
from gpubench.results import TELEMETRY_FIELDS, dtype_of, ok_records

BUSY_LOW_PERCENT = 60  # below this the GPU mostly waits: on the input feed or on Python
CLOCK_REASONS = (  # NVML's clock event reasons: what they mean, and why
    ({"sw_power_cap"}, "clocks held back by the power cap",
     "the GPU drew its power limit; normal at full load, it sets the top speed"),
    ({"sw_thermal_slowdown", "hw_thermal_slowdown"}, "clocks slowed by heat (thermal slowdown)",
     "the GPU is too hot: check its cooling and airflow"),
    ({"hw_slowdown", "hw_power_brake_slowdown"},
     "clocks slowed by the hardware (slowdown or power brake)",
     "the board or its power supply asked the GPU to slow down"))
TELEMETRY_HEADERS = ["machine · env", "run", "device", "GPU busy", "GPU mean power",
                     "GPU energy per steady epoch", "images per joule (GPU)",
                     "CPU use (one core = 100 %)", "CPU energy per epoch", "images per joule (CPU)"]
NO_RAPL = f"{NA} (no RAPL on this machine)"


def gpu_busy(record: dict) -> tuple[float | None, bool]:
    """A record's GPU busy % and whether it is the run's mean: its busy region's where one ran
    (Speed_Factors), else `timing.busy_percent` of its epochs."""
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
    """GPU mean power, GPU energy per steady epoch (the median over the epochs of GPU busy; else
    all epochs' mean, said so), images per joule (GPU), CPU use, CPU energy per epoch and images
    per joule (CPU) of one record."""
    telemetry = record.get("telemetry") or {}
    epochs = record.get("epochs") or len(record.get("epoch_seconds") or []) or None
    gpu, words = timing.busy_percent(record.get("epoch_energy_joules"), None)[0], ""
    if gpu is None and telemetry.get("energy_joules") is not None and epochs:
        gpu, words = telemetry["energy_joules"] / epochs, " (all epochs' mean)"
    cpu = telemetry.get("cpu_energy_joules")
    cpu = cpu / epochs if cpu is not None and epochs else None

    def per_joule(energy: float | None) -> str:
        rate = (record.get("train_samples") or 0) / energy if energy and energy > 0 else 0
        return number(rate, 1 if rate < 100 else 0) if rate else NA

    watts, util = telemetry.get("power_watts_mean"), telemetry.get("cpu_util_percent_mean")
    return [NA if watts is None else f"{number(watts)} W",
            NA if gpu is None else joules(gpu) + words, per_joule(gpu),
            NA if util is None else f"{number(util)} %",
            joules(cpu) if cpu is not None else NO_RAPL if epochs else NA, per_joule(cpu)]


def diagnosis(record: dict) -> list[str]:
    """What the telemetry says about a record, one finding a line; [] if fine."""
    telemetry = record.get("telemetry") or {}
    if telemetry.get("source") != "nvml":
        return []
    lines, (busy, _) = [], gpu_busy(record)
    if busy is not None and busy < BUSY_LOW_PERCENT and record["benchmark"] != "matmul":
        lines.append(f"GPU busy {number(busy)} % of the epoch: it waits on the input feed or on "
                     "Python between steps; see Speed_Factors' input pipelines and steps per "
                     "execution")
    if telemetry.get("throttled"):
        low, top = telemetry.get("sm_clock_mhz_min"), telemetry.get("sm_clock_mhz_max")
        lines.append(f"**throttled**: the SM clock fell to {number(low)} MHz, below 75 % of its "
                     f"max ({number(top)} MHz): the figures are slower than this GPU can be")
    per_epoch = record.get("epoch_clock_event_reasons") or []
    for names, what, why in CLOCK_REASONS:
        if any(seen is not None for seen in per_epoch):
            count = sum(1 for seen in per_epoch if seen and names & set(seen))
            lines += [f"{what} in {count} of {len(per_epoch)} epochs: {why}"] if count else []
        elif names & set(telemetry.get("clock_event_reasons") or ()):
            lines.append(f"{what} during the run: {why}")
    if telemetry.get("partial"):
        lines.append("telemetry partial: NVML failed during the run, so its figures cover only "
                     "part of it and the energy is unknown")
    return lines


def _run_name(record: dict) -> str:
    if record["benchmark"] == "matmul":
        return f"n = {record['size']} {dtype_label(dtype_of(record), record.get('tf32'))}"
    return model_title(record["model"]) + (f", {record.get('replicas')} replica(s)"
                                           if record["benchmark"] == "scaling" else "")


def section(records: list[dict]) -> list[str]:
    """The "Telemetry" section: per book or scaling run whose telemetry measured anything, how
    busy the GPU was, its power and energy, and CPU use; then what the numbers say (a throttled
    matmul region too)."""
    order, figures = columns(records), TELEMETRY_FIELDS[3:]  # after source, reason, partial
    shown = sorted((r for r in book_train(ok_records(records, "train"))
                    + ok_records(records, "scaling") if any(
                        (r.get("telemetry") or {}).get(name) not in (None, [], False)
                        for name in figures)),
                   key=lambda r: (r["benchmark"] != "train", model_rank(r["model"]),
                                  order.index(r["_column"]), r.get("replicas") or 0))
    if not shown:
        return []
    hot = [r for r in ok_records(records, "matmul") if (r.get("telemetry") or {}).get("throttled")]
    findings = [f"- {r['_column']} {_run_name(r)} on {r['device']}: {finding}."
                for r in shown + hot for finding in diagnosis(r)]
    rows = [[r["_column"], _run_name(r), r["device"], busy_cell(r), *energy_cells(r)]
            for r in shown]
    return ["## Telemetry: how busy, how much power, how much energy", "",
            "Measured while each epoch ran: GPU energy from the driver's counter, or power x "
            "time where the GPU has none.", "", *explained_table(TELEMETRY_HEADERS, rows),
            *(["What the numbers say:", "", *findings, ""] if findings else [])]
