"""The run report (report.md + PNGs) and the tables and numbers it shows; charts are in plots.py.

The report joins the records of one or more run directories, each job's latest
attempt only. Each column is one machine and env ("vm · cpu", "vm · jax-gpu"); the
book's comparison is every column against the CPU env of the same machine and the
same Keras backend ("gpu" against "cpu", "jax-gpu" against "jax-cpu"), never across
backends: the backends are compared in a section of their own. Every field a table
or chart uses is checked per record first; a record that fails is skipped with a
warning naming its file, line and field, so no record can cost the report.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from gpubench import factors, plots, results, rundir, telemetry_text  # no framework
from gpubench.records import (  # the record queries the charts share; report.X for callers
    MODEL_ORDER,
    MODEL_TITLES,
    backend_title,
    baseline,
    book_train,
    columns,
    cpu_env,
    crossover,
    fmt_seconds,
    latest_attempts,
    ok_records,
)
from gpubench.records import backend_of as _backend
from gpubench.records import backend_rank as _backend_rank
from gpubench.records import by_model_and_column as _by_model_and_column
from gpubench.records import dedupe as _dedupe
from gpubench.records import dtype_of as _dtype
from gpubench.records import label_columns as _label_columns
from gpubench.records import machine_of as _machine

# Job statuses of run.json that mean the run has not finished them (yet).
UNFINISHED = ("running", "pending")


# ---------------------------------------------------------------- checking records

_LIMIT = 2**53  # an integer beyond this is no measurement (and not exact as a float)
Rule = tuple[Callable[[Any], bool], str]  # a test of a value, and what it wants in words


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= _LIMIT if isinstance(value, int) else math.isfinite(value)


def _optional(rule: Rule) -> Rule:
    test, words = rule
    return (lambda v: v is None or test(v)), f"{words} or null"


def _list_of(rule: Rule, *, nulls: bool = False) -> Rule:
    test, words = _optional(rule) if nulls else rule
    return (lambda v: isinstance(v, list) and all(test(x) for x in v)), f"a list of ({words})"


NAME: Rule = (lambda v: isinstance(v, str) and bool(v.strip())), "a non-empty string"
TEXT: Rule = (lambda v: isinstance(v, str)), "a string"
FLAG: Rule = (lambda v: isinstance(v, bool)), "true or false"
OBJECT: Rule = (lambda v: isinstance(v, dict)), "a JSON object"
COUNT: Rule = (lambda v: _finite(v) and isinstance(v, int) and v >= 0), "a whole number >= 0"
POSITIVE_COUNT: Rule = (lambda v: _finite(v) and isinstance(v, int) and v > 0,
                        "a whole number >= 1")
NUMBER: Rule = (lambda v: _finite(v) and v >= 0), "a finite number >= 0"
POSITIVE: Rule = (lambda v: _finite(v) and v > 0), "a finite number > 0"

# (field, rule, for every record or only "ok" ones). "a.b" is field b of the object a.
_ALL, _OK = "all", "ok"
_COMMON = [("env", NAME, _ALL), ("notebook", TEXT, _ALL), ("device", NAME, _ALL),
           ("backend", NAME, _ALL), ("error", _optional(TEXT), _ALL),
           ("environment.hostname", _optional(TEXT), _ALL),
           ("environment.gpus", _optional(_list_of(OBJECT)), _ALL),
           ("environment.git_commit", _optional(TEXT), _ALL),
           ("telemetry", _optional(OBJECT), _OK)]
_TELEMETRY_NUMBERS = ("interval_s", "samples", "seconds", "gpu_util_percent_mean",
                      "gpu_util_percent_max", "gpu_memory_used_mb_max", "sm_clock_mhz_mean",
                      "power_watts_mean", "power_watts_max", "energy_joules",
                      "cpu_util_percent_mean", "cpu_util_percent_max", "cpu_energy_joules")
_TELEMETRY = ([(f"telemetry.{name}", _optional(NUMBER), _OK) for name in _TELEMETRY_NUMBERS]
              + [(f"telemetry.{name}", _optional(TEXT), _OK)
                 for name in ("source", "reason", "energy_method", "cpu_energy_method")]
              + [("telemetry.partial", _optional(FLAG), _OK),
                 ("telemetry.clock_event_reasons", _optional(_list_of(TEXT)), _OK)])
_MATMUL = [("size", POSITIVE_COUNT, _ALL), ("method", NAME, _ALL), ("dtype", _optional(NAME), _ALL),
           ("seconds", POSITIVE, _OK), ("gflops", _optional(NUMBER), _OK),
           *[(name, _optional(NUMBER), _OK) for name in (
               "seconds_min", "seconds_max", "seconds_iqr", "first_seconds", "spec_peak_gflops")],
           ("repeats", _optional(COUNT), _OK)]
_TRAIN = [("model", NAME, _ALL), ("dataset", _optional(TEXT), _ALL),
          ("data_source", _optional(TEXT), _ALL), ("factor", _optional(NAME), _ALL),
          ("epochs", _optional(COUNT), _ALL), ("batch_size", _optional(COUNT), _ALL),
          ("train_samples", _optional(COUNT), _ALL), ("jit_compile", _optional(FLAG), _ALL),
          ("precision", _optional(TEXT), _ALL), ("steps_per_execution", _optional(COUNT), _ALL),
          ("input_pipeline", _optional(TEXT), _ALL),
          ("epoch_seconds", _optional(_list_of(NUMBER)), _OK),
          ("paired_baseline_seconds", _optional(_list_of(NUMBER)), _OK),
          *[(name, _optional(NUMBER), _OK) for name in (
              "first_epoch_seconds", "steady_epoch_seconds", "steady_epoch_iqr", "total_seconds",
              "samples_per_second", "test_accuracy", "achieved_gflops")],
          ("steps_measured", _optional(POSITIVE_COUNT), _OK), ("time_boxed", _optional(FLAG), _OK),
          *[(name, _optional(_list_of(NUMBER, nulls=True)), _OK) for name in (
              "epoch_energy_joules", "epoch_gpu_util_percent", "epoch_cpu_util_percent")],
          ("epoch_clock_event_reasons", _optional(_list_of(_list_of(TEXT), nulls=True)), _OK)]
_SCALING = _TRAIN + [("strategy", _optional(TEXT), _ALL), ("replicas", _optional(COUNT), _ALL),
                     ("workers", _optional(COUNT), _ALL),
                     ("global_batch_size", _optional(COUNT), _ALL),
                     ("devices", _optional(_list_of(TEXT)), _ALL),
                     ("virtual_devices", _optional(COUNT), _ALL),
                     ("all_reduce", _optional(TEXT), _ALL),
                     ("scaling_efficiency", _optional(NUMBER), _OK)]
RULES = {"matmul": _COMMON + _TELEMETRY + _MATMUL,
         "train": _COMMON + _TELEMETRY + _TRAIN + [("train_samples", POSITIVE_COUNT, _OK)],
         "scaling": _COMMON + _TELEMETRY + _SCALING}


def _value(record: dict, path: str) -> tuple[bool, Any]:
    """(whether there is anything to check, the value) of "field" or "object.field"."""
    owner, _, name = path.rpartition(".")
    holder = record.get(owner) if owner else record
    if not isinstance(holder, dict):
        return False, None  # an object that is null (or checked as wrong) itself
    return True, holder.get(name)


def check(record: dict) -> None:
    """Raise ValueError naming the first field the report would compute with that is unusable."""
    ok = record["status"] == "ok"
    for path, (test, words), when in RULES[record["benchmark"]]:
        if when == _OK and not ok:
            continue
        present, value = _value(record, path)
        if present and not test(value):
            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise ValueError(f"{record['benchmark']} field {path!r} is {shown}; the report needs "
                             f"{words}")
    if ok and record["benchmark"] != "matmul" and record.get("time_boxed"):
        for name in ("steps_measured", "batch_size"):
            if not POSITIVE_COUNT[0](record.get(name)):
                raise ValueError(f"time-boxed train field {name!r} is {record.get(name)!r}; the "
                                 f"report needs {POSITIVE_COUNT[1]}")


def usable(records: list[dict], problems: list[str] | None = None) -> list[dict]:
    """The records that pass `check`; each other one is skipped with a warning naming its origin
    (file:line) and the field, also added to `problems`."""
    kept = []
    for record in records:
        try:
            check(record)
        except ValueError as exc:
            results.skipped(f"{record.get('_origin', 'a record')}: skipped: {exc}", problems)
            continue
        kept.append(record)
    return kept


# ---------------------------------------------------------------- loading

class ReportWriteError(ValueError):
    """The report could not be written (full or read-only disk); the message names the path."""


def _read(run_dir: str | os.PathLike, problems: list[str]) -> list[dict]:
    """The records of one run dir: none where only run.json is there (nothing was recorded)."""
    path = Path(run_dir)
    if not (path / "results.jsonl").exists() and (path / "run.json").is_file():
        return []
    try:
        return results.read_records(path, problems, origin=True)
    except results.ResultsPathError as exc:
        results.skipped(f"{exc}; its records are not shown", problems)
        return []


def load(run_dirs: list[str | os.PathLike], problems: list[str] | None = None) -> list[dict]:
    """Records of each job's latest attempt in every run dir that the report can use, tagged with
    their column (`_column`); the others are skipped with a warning (also in `problems`)."""
    problems = [] if problems is None else problems
    records = [record | {"_run_dir": str(run_dir)} for run_dir in run_dirs
               for record in _read(run_dir, problems)]
    records = usable(latest_attempts(records), problems)
    _label_columns(records)
    return _dedupe(records)


def read_jobs(run_dir: str | os.PathLike, problems: list[str]) -> list[dict]:
    """The jobs of run.json (run, env, notebook, status, error's first line); [] without one.

    An unreadable run.json, or a job in it that is not as the runner writes it, is named in
    `problems` (with a warning) and left out.
    """
    path = Path(run_dir) / "run.json"
    if not path.exists():
        return []
    try:
        jobs = json.loads(path.read_bytes().removeprefix(results.BOM).decode("utf-8"))["jobs"]
        if not isinstance(jobs, list):
            raise TypeError(f"'jobs' is {type(jobs).__name__}, not a list")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        results.skipped(f"{path}: unreadable job list ({type(exc).__name__}: {exc}); jobs not "
                        "shown", problems)
        return []
    found = []
    for number, job in enumerate(jobs, start=1):
        if not (isinstance(job, dict) and all(isinstance(job.get(k), str)
                                              for k in ("env", "notebook", "status"))
                and isinstance(job.get("error"), (str, type(None)))):
            results.skipped(f"{path}: job {number} is not as gpubench writes it: {job!r:.80}",
                            problems)
            continue
        found.append({"run": Path(run_dir).name, "dir": str(run_dir), "env": job["env"],
                      "notebook": job["notebook"],
                      "status": job["status"], "error": first_line(job.get("error"))})
    return found


def failed_jobs(run_dir: str | os.PathLike, problems: list[str]) -> list[list[str]]:
    """[run, env, notebook, status, first line of error] of every finished job in run.json not
    "ok" (failed, skipped, interrupted); jobs still running or pending are `unfinished`."""
    return [_job_row(job) for job in read_jobs(run_dir, problems)
            if job["status"] not in ("ok", *UNFINISHED)]


def _job_row(job: dict) -> list[str]:
    return [job["run"], job["env"], job["notebook"], job["status"], job["error"]]


# ---------------------------------------------------------------- formatting

def fmt(value, spec: str) -> str:
    """`value` formatted with `spec`, or "–" when it is missing."""
    return "–" if value is None else format(value, spec)


def first_line(text: str | None) -> str:
    """The first line of an error message ("" for none)."""
    return (text or "").strip().partition("\n")[0]


def md_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    """A table cell's text on one line, its own "|" escaped."""
    return " ".join(str(value).split()).replace("|", "\\|")


def _figure(value: float, digits: int) -> str:
    """`value` to `digits` significant figures, trailing zeros kept ("1.0", "0.64"); whole
    numbers from 100 up ("118")."""
    if value >= 10 ** digits:
        return f"{value:.0f}"
    text = f"{value:#.{digits}g}"
    return text.rstrip(".") if "e" not in text else f"{value:.{digits}g}"


def fmt_range(low: float, high: float, unit: str = "s") -> str:
    """A range as "0.64–1.0 s": two significant figures, more where two would not tell the
    ends apart, joined by an en dash."""
    for digits in (2, 3, 4):
        ends = _figure(low, digits), _figure(high, digits)
        if ends[0] != ends[1] or low == high:
            break
    return f"{ends[0]}–{ends[1]}{f' {unit}' if unit else ''}"


# What each column of the report's tables means, where its header does not say it; shown under
# every table that has the column (`column_note`).
COLUMN_NOTES = {
    "mode": "XLA on or off, precision, batch size, steps per execution (steps per compiled "
            "call), input pipeline (arrays: NumPy arrays given to `fit`)",
    "total time": "all epochs, as the book times them",
    "steady epoch": "the median of epochs 2..n",
    "first epoch": "epoch 1, which includes tracing and compilation",
    "time saved vs CPU env": "1 − total time / the total time of the CPU env of the same "
                             "machine and backend (gpu against cpu, jax-gpu against jax-cpu; "
                             "\"baseline\": that env)",
    "speedup": "that CPU env's total time over this row's (above 1: faster)",
    "energy (all epochs)": "the GPU's (NVML) on a GPU and the CPU package's (RAPL), kept apart",
    "data": "the dataset and where it came from (keras download, dir, or synthetic: random "
            "images, timings only)",
    "images/s": "training images per second in the steady epochs",
    "ratio": "images/s over the reference row's (the first backend's run in the same mode); "
             "above 1: faster",
    "like for like?": "whether mode and training-set size match the reference row's",
    "GPU busy": "NVML's share of the time in which a GPU kernel ran (not how full the GPU was)",
    "GPU mean power": "the board's mean power draw while the epochs ran",
    "images per joule (GPU)": "training images per joule of GPU energy (higher: more efficient)",
    "CPU use (one core = 100 %)": "this process's CPU time over wall time",
    "CPU energy per epoch": "the CPU package's energy (RAPL), where the system lets it be read",
    "images per joule (CPU)": "training images per joule of CPU package energy",
    "strategy": "how the replicas are kept in step: mirrored on one machine, multi_worker "
                "across processes or machines",
    "workers": "processes (machines) taking part",
    "replicas": "copies of the model training in parallel, one per device",
    "global batch": "images per step over all replicas",
    "samples/s": "training images per second, from the median of epochs 2..n",
    "scaling efficiency": "samples/s over replicas x the one-replica samples/s of the same run "
                          "(100%: perfect scaling)",
    "all-reduce": "how the replicas' gradients are added up",
    "status": "failed: the notebook raised an error; skipped: not run; interrupted: stopped by "
              "Ctrl-C or a signal",
    "commit": "the checkout's git commit",
}
FACTOR_NOTES = {
    "variant": "the factor changed from the baseline, the book's setting (batch 100, float32, "
               "XLA off, steps/exec 1, arrays: NumPy arrays given to `fit`); tf.data: a "
               "tf.data.Dataset; on_device: the training set kept on the device",
    "x vs baseline (min)": "images/s of the variant's fastest steady round over the baseline's "
                           "fastest (above 1: faster)",
    "median x": "the same with each one's median round",
    "interval": "the lowest and highest ratio of paired rounds (round r of the variant against "
                "round r of the baseline); one that includes 1.0 is \"no clear effect\"",
    "images/s": "training images per second in the variant's fastest steady round",
    "steps": "training steps timed in the steady rounds (time-boxed: a fixed number per round, "
             "a full epoch being far slower than the baseline's)",
    "GFLOP/s": "the model's arithmetic per second at that speed",
    "% of matmul": "that GFLOP/s as a share of the fastest matrix product measured on the same "
                   "device at the same compute dtype",
    "GPU busy": "NVML's share of the rounds' time in which a GPU kernel ran; n/a on a CPU",
    "test accuracy": "after the rounds; not measured for a time-boxed variant",
}
MATMUL_NOTE = ("Columns: **size**: n, for the product of two n x n matrices; each other column "
               "is a device and method: **rigorous** is the median of repeated products after a "
               "warm-up call, **book** one timing that includes creating the matrices and the "
               "first call's set-up; each cell is the time, the GFLOP/s (2n³ / time) and, where "
               "the GPU's datasheet is known, the share of its peak.")


def column_note(headers: list[str], notes: dict[str, str] | None = None) -> str:
    """The line under a table explaining its columns: "Columns: **header**: meaning; ..." for
    each header in `notes` (default COLUMN_NOTES); "" when none needs it."""
    notes = COLUMN_NOTES if notes is None else notes
    parts = [f"**{header}**: {notes[header]}" for header in headers if header in notes]
    return ("Columns: " + "; ".join(parts) + ".") if parts else ""


def explained_table(headers: list[str], rows: list[list],
                    notes: dict[str, str] | None = None) -> list[str]:
    """Markdown lines: the table, then the line explaining its columns (`column_note`)."""
    note = column_note(headers, notes)
    return [md_table(headers, rows), ""] + ([note, ""] if note else [])


def table_headers(table: str) -> list[str]:
    """The headers of a Markdown table (its first line)."""
    return [cell.strip() for cell in table.partition("\n")[0].strip().strip("|").split("|")]


# ---------------------------------------------------------------- matmul

def crossover_text(records: list[dict], method: str, dtype: str = "float32") -> str:
    """Crossover in words, including the cases with no GPU or no win."""
    ok = [r for r in ok_records(records, "matmul") if _dtype(r) == dtype]
    if not any(r["device"].startswith("gpu") for r in ok):
        return "no GPU measured"
    if not any(r["device"] == "cpu" and r["method"] == method for r in ok):
        return "no CPU measured in this env to compare with"
    size = crossover(records, method, dtype)
    if size is None:
        return "the GPU never beat the CPU at the sizes measured"
    if size == min(r["size"] for r in ok if r["method"] == method):
        return f"the GPU wins at every size measured (from {size})"
    return f"the GPU wins from {size} x {size} up"


def matmul_table(records: list[dict]) -> str:
    """Per size: seconds, GFLOP/s and % of datasheet peak (where known) per device, method and
    dtype."""
    matmul = [r for r in records if r["benchmark"] == "matmul"]
    several = len({_dtype(r) for r in matmul}) > 1
    keys = sorted({(r["device"], r["method"], _dtype(r)) for r in matmul})
    cells = {}
    for r in matmul:
        text = r["status"].upper()
        if r["status"] == "ok":
            text = f"{fmt_seconds(r['seconds'])} ({fmt(r['gflops'], ',.0f')} GFLOP/s"
            if r.get("spec_peak_gflops") and r["gflops"] is not None:
                text += f", {100 * r['gflops'] / r['spec_peak_gflops']:.0f}% of datasheet peak"
            text += ")"
        cells[(r["device"], r["method"], _dtype(r), r["size"])] = text
    rows = [[size] + [cells.get(k + (size,), "–") for k in keys]
            for size in sorted({r["size"] for r in matmul})]
    return md_table(["size"] + [" ".join(k if several else k[:2]) for k in keys], rows)


# ---------------------------------------------------------------- training

_MODE = (("jit_compile", "XLA ", lambda v: "on" if v else "off"), ("precision", "", str),
         ("batch_size", "batch ", str), ("steps_per_execution", "steps/exec ", str),
         ("input_pipeline", "", str))


def mode(record: dict) -> dict[str, str]:
    """The mode a train record ran in, each field in words ("XLA off", "batch 100", ...)."""
    return {name: label + ("?" if record.get(name) is None else show(record[name]))
            for name, label, show in _MODE}


def training_rows(records: list[dict]) -> list[list]:
    """The book's table: per model and column, total time, % saved and speedup vs the CPU env
    of the same machine and backend, and the energy of all epochs where it was measured."""
    by_key = _by_model_and_column(records)
    rows = []
    for model in MODEL_ORDER:
        for column in columns(records):
            if (r := by_key.get((model, column))) is None:
                continue
            source = r["data_source"] or "?"
            data = (r["dataset"] or "?") + (" **(synthetic)**" if source == "synthetic"
                                            else f" ({source})")
            first = [MODEL_TITLES[model], column, r["device"], ", ".join(mode(r).values()),
                     fmt(r["epochs"], "")]
            if r["status"] != "ok":
                rows.append(first + [r["status"].upper()] + ["–"] * 6 + [data])
                continue
            base = baseline(records, column)
            if base is not None and (model, base) not in by_key:  # the CPU env lacks this model
                saved, speedup = f"n/a (no {model} run in {base})", "–"
            else:
                saved, speedup = _versus(by_key.get((model, base)), r, base is None
                                         and r["env"] != cpu_env(_backend(r)))
            rows.append(first + [
                fmt_seconds(r["total_seconds"]), fmt_seconds(r["steady_epoch_seconds"]),
                fmt_seconds(r["first_epoch_seconds"]), saved, speedup, energy_text(r),
                fmt(r["test_accuracy"], ".3f"), data])
    return rows


def _versus(base: dict | None, other: dict, no_cpu_env: bool = False) -> tuple[str, str]:
    """'% time saved' and 'speedup' of `other` against `base` ('baseline' for the base itself;
    with `no_cpu_env`, `other` is no CPU env and its backend has none on its machine)."""
    if no_cpu_env:
        return f"n/a (no {cpu_env(_backend(other))} env)", "–"
    if base is None:
        return "baseline", "1.00x"
    if base["status"] != "ok" or not base["total_seconds"] or not other["total_seconds"]:
        return "–", "–"
    if base["epochs"] != other["epochs"] or base["train_samples"] != other["train_samples"]:
        return "n/a (different settings)", "–"
    saved = 100.0 * (1 - other["total_seconds"] / base["total_seconds"])
    return f"{saved:.0f}%", f"{base['total_seconds'] / other['total_seconds']:.2f}x"


def _joules(value: float) -> str:
    return f"{value:,.1f} J" if value < 10 else f"{value:,.0f} J"


def energy_text(record: dict) -> str:
    """Energy of all a train record's epochs: the GPU's (NVML) on a GPU, and the CPU package's
    (RAPL) or why there is none; "–" where the record has no telemetry (older gpubench)."""
    telemetry = record.get("telemetry")
    if not telemetry:
        return "–"
    parts = []
    if record["device"].startswith("gpu"):
        gpu = telemetry.get("energy_joules")
        method = {"counter": "counter", "power_integral": "power x time"}.get(
            telemetry.get("energy_method"), "")
        parts.append(f"GPU {_joules(gpu)}" + (f" ({method})" if method else "") if gpu is not None
                     else f"GPU n/a ({telemetry.get('reason') or 'not measured'})")
    cpu = telemetry.get("cpu_energy_joules")
    parts.append(f"CPU {_joules(cpu)} (RAPL)" if cpu is not None
                 else f"CPU {telemetry_text.NO_RAPL}")
    return "; ".join(parts)


TRAINING_HEADERS = ["model", "machine · env", "device", "mode", "epochs", "total time",
                    "steady epoch", "first epoch", "time saved vs CPU env", "speedup",
                    "energy (all epochs)", "test accuracy", "data"]


def _mode_differences(ours: dict, theirs: dict) -> list[str]:
    return [name for name in ours if ours[name] != theirs[name]]


def not_like_for_like(records: list[dict]) -> list[str]:
    """A "**Not like for like:**" line per model whose compared columns ran in different modes."""
    by_key = _by_model_and_column(records)
    lines = []
    for (model, column), record in by_key.items():
        if (base := by_key.get((model, baseline(records, column)))) is None:
            continue
        theirs, ours = mode(base), mode(record)
        if differ := _mode_differences(ours, theirs):
            lines.append(
                f"**Not like for like:** {MODEL_TITLES.get(model, model)}: "
                f"{record['env']}: {', '.join(ours[n] for n in differ)}, "
                f"{base['env']}: {', '.join(theirs[n] for n in differ)}.")
    return lines


UNSTABLE_SPREAD = 0.20  # steady-epoch IQR over median above which timings are flagged


def unstable(records: list[dict]) -> list[str]:
    """A line per train record whose steady epochs (Speed_Factors: rounds) spread more than
    UNSTABLE_SPREAD, naming a variant as the factors table does and saying how to read it."""
    lines = []
    for r in ok_records(records, "train"):
        spread = (r.get("steady_epoch_iqr") or 0) / (r["steady_epoch_seconds"] or math.inf)
        if spread <= UNSTABLE_SPREAD:
            continue
        steady = (r["epoch_seconds"] or [])[1:] or [r["steady_epoch_seconds"]]
        what = MODEL_TITLES.get(r["model"], r["model"])
        if r.get("factor"):
            labels = [row["label"] for row in factors.effects([r])]
            what = f"Speed_Factors {what}, variant {labels[0] if labels else r['factor']}"
            how = ("steady rounds", "its \"x vs baseline (min)\" in the factors table compares "
                   "the fastest rounds, which noise slows least; trust an effect only where its "
                   "interval leaves out 1.0, or rerun on a quieter machine")
        else:
            how = ("steady epochs", "the table's steady epoch is their median: read differences "
                   "between rows smaller than this spread as noise, or rerun on a quieter machine")
        lines.append(f"- **unstable**: {r['_column']} {what} on {r['device']}: {how[0]} "
                     f"{fmt_range(min(steady), max(steady))} (IQR {spread:.0%} of the median); "
                     f"{how[1]}.")
    return lines


# ---------------------------------------------------------------- backends

BACKEND_HEADERS = ["model", "machine", "device", "backend", "env", "mode", "steady epoch",
                   "images/s", "ratio", "like for like?"]


def images_per_second(record: dict) -> float | None:
    """A train record's images per second: its own rate, else train images over the steady epoch."""
    if record.get("samples_per_second"):
        return record["samples_per_second"]
    steady = record.get("steady_epoch_seconds")
    return record["train_samples"] / steady if steady else None


def _like_for_like(record: dict, reference: dict) -> str:
    """"yes", or what differs between two backends' runs, XLA spelled out (JAX always compiles)."""
    differ = _mode_differences(mode(record), mode(reference))
    if record.get("train_samples") != reference.get("train_samples"):
        differ.append("train_samples")
    if not differ:
        return "yes"
    ours = {n: mode(record).get(n, f"{record.get(n)} images") for n in differ}
    theirs = {n: mode(reference).get(n, f"{reference.get(n)} images") for n in differ}
    text = ("**not like for like**: " + ", ".join(ours[n] for n in differ) + " against "
            + ", ".join(theirs[n] for n in differ))
    if "jit_compile" in differ and "jax" in (_backend(record), _backend(reference)):
        text += (" (JAX always compiles with XLA; run TensorFlow with `-p xla=on` for the "
                 "like-for-like pair)")
    return text


def backend_groups(records: list[dict]) -> list[list[dict]]:
    """Ok book train records grouped by machine, model and device, where the group holds more
    than one backend; each group's rows in backend order."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in book_train(ok_records(records, "train")):
        groups[(_machine(r), r["model"], r["device"])].append(r)
    order = {column: i for i, column in enumerate(columns(records))}
    return [sorted(group, key=lambda r: (_backend_rank(_backend(r)), order[r["_column"]]))
            for key, group in sorted(groups.items(), key=lambda item: (
                item[0][0], _model_rank(item[0][1]), item[0][2]))
            if len({_backend(r) for r in group}) > 1]


def _model_rank(model: str) -> tuple[int, str]:
    return (MODEL_ORDER.index(model) if model in MODEL_ORDER else len(MODEL_ORDER)), model


def _reference(record: dict, group: list[dict]) -> dict:
    """The run `record` is compared with: the first backend's run in the same mode, else its
    first run."""
    first = _backend(group[0])
    candidates = [r for r in group if _backend(r) == first]
    return next((r for r in candidates if mode(r) == mode(record)), candidates[0])


def backend_rows(records: list[dict]) -> list[list]:
    """One row per run of a model on a device of a machine that ran on several backends: steady
    epoch, images/s, the ratio of images/s to the first backend's run, and whether the modes
    match."""
    rows = []
    for group in backend_groups(records):
        for r in group:
            reference = _reference(r, group)
            rate, theirs = images_per_second(r), images_per_second(reference)
            version = r["environment"].get("backend_version") or r["environment"].get(_backend(r))
            if r is reference:
                ratio, like = "1.00x (reference)", "–"
            else:
                ratio = f"{rate / theirs:.2f}x" if rate and theirs else "–"
                like = _like_for_like(r, reference)
            rows.append([MODEL_TITLES.get(r["model"], r["model"]), _machine(r), r["device"],
                         backend_title(_backend(r)) + (f" {version}" if version else ""),
                         r["env"], ", ".join(mode(r).values()),
                         fmt_seconds(r["steady_epoch_seconds"]), fmt(rate, ",.0f"), ratio, like])
    return rows


def backends_section(records: list[dict]) -> list[str]:
    """The "Backends: TensorFlow vs JAX" section: one model on one device across backends."""
    if not (rows := backend_rows(records)):
        return []
    names = sorted({_backend(r) for group in backend_groups(records) for r in group},
                   key=_backend_rank)
    first = backend_title(names[0])
    return [f"## Backends: {' vs '.join(backend_title(n) for n in names)}", "",
            "The same model on the same device of the same machine, trained by different Keras "
            f"backends. Ratio: images/s against {first}'s run (above 1: faster than {first}). "
            "Rows whose mode differs (XLA, precision, batch, steps per execution, input "
            "pipeline, data size) are not like for like. JAX always compiles with XLA, while "
            "gpubench runs TensorFlow with XLA off unless `xla=on`: TensorFlow with XLA off "
            "against JAX compares the modes as much as the backends.", "",
            *explained_table(BACKEND_HEADERS, rows)]


# ---------------------------------------------------------------- telemetry

TELEMETRY_HEADERS = ["machine · env", "run", "device", "GPU busy", "GPU mean power",
                     "GPU energy per epoch", "images per joule (GPU)", "CPU use (one core = 100 %)",
                     "CPU energy per epoch", "images per joule (CPU)"]


def _telemetry_records(records: list[dict]) -> list[dict]:
    """Ok book train and scaling records whose telemetry measured anything, in column order."""
    order = {column: i for i, column in enumerate(columns(records))}
    found = [r for r in book_train(ok_records(records, "train")) + ok_records(records, "scaling")
             if any((r.get("telemetry") or {}).get(name) is not None
                    for name in _TELEMETRY_NUMBERS)]
    return sorted(found, key=lambda r: (order[r["_column"]], r["benchmark"],
                                        _model_rank(r["model"]), r.get("replicas") or 0))


def _run_name(record: dict) -> str:
    name = MODEL_TITLES.get(record["model"], record["model"])
    if record["benchmark"] == "scaling":
        name += f", {record.get('replicas')} replica(s)"
    return name


def telemetry_rows(records: list[dict]) -> list[list]:
    """Per run: GPU busy %, mean W, joules per epoch, images per joule and CPU use."""
    rows = []
    for r in _telemetry_records(records):
        cells = telemetry_text.energy_cells(r)
        rows.append([r["_column"], _run_name(r), r["device"], cells["gpu_busy"],
                     cells["watts_mean"], cells["joules_per_epoch"], cells["images_per_joule"],
                     cells["cpu_util"], cells["cpu_joules_per_epoch"],
                     cells["cpu_images_per_joule"]])
    return rows


def diagnosis_lines(records: list[dict]) -> list[str]:
    """What each run's telemetry says, one finding a line ("GPU busy 23 % of the epoch: ...")."""
    return [f"- {r['_column']} {_run_name(r)} on {r['device']}: {finding}."
            for r in _telemetry_records(records) for finding in telemetry_text.diagnosis(r)]


def telemetry_section(records: list[dict]) -> list[str]:
    """The "Telemetry" section: how busy the GPU was, its power and energy, and CPU use."""
    if not (rows := telemetry_rows(records)):
        return []
    lines = ["## Telemetry: how busy, how much power, how much energy", "",
             "Measured while each epoch ran. GPU energy comes from the driver's counter, or "
             "power x time where the GPU has none; GPU and CPU energy are kept apart, never "
             "added.", "",
             *explained_table(TELEMETRY_HEADERS, rows)]
    if findings := diagnosis_lines(records):
        lines += ["What the numbers say:", "", *findings, ""]
    return lines


# ---------------------------------------------------------------- speed factors and scaling

def factors_section(records: list[dict], charts: dict | None) -> list[str]:
    """The "Speed factors" section from Speed_Factors records (gpubench.factors' numbers)."""
    if not any(r["benchmark"] == "train" and r.get("factor") for r in records):
        return []
    lines = ["## Speed factors", "",
             "Each variant changes one factor of the book's setting on the same device, measured "
             "in interleaved rounds (round r of every variant, then round r+1), so that a machine "
             "that slows down for a while slows them all alike.", ""]
    all_rows = []
    for column in columns(records):
        mine = [r for r in records if r["_column"] == column]
        rows = factors.effects(mine)
        if not rows:
            continue
        all_rows += rows
        size = factors.crossover_batch_size(mine)
        table = factors.table(rows, ok_records(mine, "matmul"))
        lines += [f"### {column}", "", table, "", column_note(table_headers(table), FACTOR_NOTES),
                  "", factors.findings(rows), ""]
        if size is not None:
            lines += [f"CPU–GPU crossover batch size: the GPU trains faster from batch {size}.", ""]
    if charts is None:
        return lines
    ax = plots.plot_factors(all_rows, ax=_axes((8, 0.35 * len(all_rows) + 1.5)))
    charts["speed_factors.png"] = ax.figure
    return lines + ["![Speed factors](speed_factors.png)", ""]


SCALING_HEADERS = ["machine · env", "strategy", "workers", "replicas", "devices", "global batch",
                   "samples/s", "scaling efficiency", "all-reduce", "test accuracy"]


def scaling_rows(records: list[dict]) -> list[list]:
    """One row per scaling record: replicas, workers, speed, efficiency, and the devices used."""
    rows = []
    scaling = [r for r in records if r["benchmark"] == "scaling"]
    for r in sorted(scaling, key=lambda r: (r["_column"], str(r["strategy"]),
                                            r["workers"] or 1, r["replicas"] or 0)):
        devices = (f"virtual ({r['virtual_devices']} on one CPU)" if r.get("virtual_devices")
                   else ", ".join(r.get("devices") or []) or r["device"])
        ok = r["status"] == "ok"
        rows.append([r["_column"], r["strategy"], r["workers"], r["replicas"], devices,
                     r["global_batch_size"],
                     fmt(r["samples_per_second"], ",.0f") if ok else r["status"].upper(),
                     fmt(r["scaling_efficiency"], ".0%") if ok else "–",
                     r.get("all_reduce") or "–", fmt(r["test_accuracy"], ".3f") if ok else "–"])
    return rows


def scaling_section(records: list[dict]) -> list[str]:
    """The "Scaling" section, when there are scaling records."""
    rows = scaling_rows(records)
    if not rows:
        return []
    lines = ["## Scaling", "",
             "Data-parallel training (tf.distribute on TensorFlow, keras.distribution on "
             "JAX): the same model trained on 1, 2, ... devices at once.", ""]
    if any(r.get("virtual_devices") for r in records):
        lines += ["> **Virtual devices**: one CPU split into logical devices. These rows show "
                  "that the mechanics work, not how real devices scale.", ""]
    return lines + explained_table(SCALING_HEADERS, rows)


# ---------------------------------------------------------------- report

def backend_text(environment: dict, backend: str) -> str:
    """A column's backend, its version and build, and Keras ("JAX 0.10 (CPU-only build), Keras
    3.15"); the version from the schema-3 field, else the backend's own field (older records)."""
    version = environment.get("backend_version") or environment.get(backend)
    build = (f"CUDA {environment.get('cuda_version')}, cuDNN {environment.get('cudnn_version')}"
             if environment.get("cuda_build") else "CPU-only build")
    return (f"{backend_title(backend)}{f' {version}' if version else ''} ({build}), "
            f"Keras {environment.get('keras')}")


ENVIRONMENT_HEADERS = ["machine · env", "CPU", "GPU", "backend", "Python", "commit", "data"]


def environment_rows(records: list[dict]) -> list[list]:
    """One row per column: hardware, software and where each notebook's data came from."""
    rows = []
    for column in columns(records):
        recs = [r for r in records if r["_column"] == column]
        env = recs[-1]["environment"]
        gpus = "; ".join(f"{g.get('name')} ({g.get('memory_gb')} GB)"
                         for g in env.get("gpus") or []) or "none"
        data = sorted({f"{r['dataset']}: {r['data_source']}" for r in recs
                       if r["benchmark"] == "train"})
        rows.append([column, f"{env.get('cpu_model')} ({env.get('cpu_count')} cores, "
                             f"{env.get('ram_gb')} GB)",
                     gpus, backend_text(env, _backend(recs[-1])), f"Python {env.get('python')}",
                     (env.get("git_commit") or "–")[:12], ", ".join(data) or "–"])
    return rows


JOB_WHY = {"running": "started and not finished: still running, or stopped by a crash",
           "pending": "not started yet", "ok": "finished, but wrote no record"}


def unfinished_note(jobs: list[dict]) -> list[str]:
    """A note at the top of a report made while jobs are still running or pending."""
    waiting = [job for job in jobs if job["status"] in UNFINISHED]
    if not waiting:
        return []
    names = {status: ", ".join(f"{j['env']}/{j['notebook']}" for j in waiting
                               if j["status"] == status) for status in UNFINISHED}
    parts = [f"running: {names['running']}" if names["running"] else "",
             f"not started yet: {names['pending']}" if names["pending"] else ""]
    runs = sorted({job["dir"] for job in waiting})
    return [f"> **This run has not finished** ({'; '.join(p for p in parts if p)}). If "
            "`gpubench run` is still working on it, this report shows what was recorded so far; "
            "if it stopped, finish it with `gpubench run --resume "
            f"{' / '.join(runs)}`.", ""]


def jobs_section(jobs: list[dict], skipped: bool = False) -> list[str]:
    """Every job of run.json with its status and why, for a report with no record to show
    (`skipped`: records were read but none could be used)."""
    none = ("No record could be used (see What went wrong)." if skipped
            else "No results were recorded.")
    if not jobs:
        return [f"{none} There is no job list (run.json) either.", ""]
    rows = [[job["run"], job["env"], job["notebook"], job["status"],
             job["error"] or JOB_WHY.get(job["status"], "")] for job in jobs]
    return ["## Jobs", "", f"{none} Each job of the run, and why:", "",
            *explained_table(["run", "env", "notebook", "status", "why"], rows)]


def problems_section(records: list[dict], jobs: list[list[str]], problems: list[str]) -> list[str]:
    """Markdown lines: failed or skipped jobs, records not "ok", and records the report skipped."""
    lines = []
    if jobs:
        lines += ["Jobs that did not finish (from run.json):", "",
                  *explained_table(["run", "env", "notebook", "status", "error"], jobs)]
    if bad := [r for r in records if r["status"] != "ok"]:
        lines += [f"- {r['_column']} {r['notebook']} {r['device']}: **{r['status']}** "
                  f"{first_line(r.get('error'))}".rstrip() for r in bad] + [""]
    if problems:
        lines += ["Lines and records skipped while reading results:", ""]
        lines += [f"- `{_code(p)}`" for p in problems] + [""]
    return (["## What went wrong", ""] + lines) if lines else []


def _code(text: str) -> str:
    """`text` safe inside one pair of backticks on one line."""
    return " ".join(text.split()).replace("`", "'")


def _write(out: Path, text: str, charts: dict) -> Path:
    """Save the charts, then report.md, each through `rundir.write_atomic` (a temp file of this
    process's own, then os.replace); a failed write raises ReportWriteError."""
    report = out / "report.md"
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, fig in charts.items():
            try:
                rundir.write_atomic(out / name, lambda tmp, fig=fig: fig.savefig(
                    tmp, dpi=110, bbox_inches="tight", format="png"))
            except (ValueError, OverflowError, ZeroDivisionError) as exc:  # numbers it cannot draw
                warnings.warn(f"chart {name} not drawn: {exc}", stacklevel=2)
                text = re.sub(rf"^!\[[^\]]*\]\({re.escape(name)}\)$",
                              f"_Chart {name} not drawn: {_code(str(exc))}._", text, flags=re.M)
        rundir.write_atomic(report, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError as exc:
        raise ReportWriteError(
            f"cannot write the report to {str(out)!r}: {results.write_problem(exc)}; "
            "free some space or pass --out with a writable folder") from None
    return report


def _axes(figsize: tuple[float, float] = (8, 5)):
    """Axes on a new Figure of the report's own, outside pyplot."""
    return Figure(figsize=figsize).subplots()


def training_section(records: list[dict], charts: dict | None) -> list[str]:
    """The book's table, its mode warnings, the epoch-time chart and the unstable flags."""
    lines = []
    if book_train(records):
        lines += ["## Training: the book's table", "",
                  "Each book model on each machine and env, trained as the book does (15 epochs "
                  "in the full profile), in the mode each row shows.", "",
                  *explained_table(TRAINING_HEADERS, training_rows(records))]
        lines += [line + "\n" for line in not_like_for_like(records)]
    if charts is not None and book_train(ok_records(records, "train")):
        charts["epoch_times.png"] = plots.plot_epoch_bars(records, fig=Figure())
        lines += ["![Epoch times](epoch_times.png)", ""]
    if flagged := unstable(records):
        lines += [f"Timings that varied a lot between epochs (IQR over median above "
                  f"{UNSTABLE_SPREAD:.0%}):", "", *flagged, ""]
    return lines


def matmul_section(records: list[dict], charts: dict | None) -> list[str]:
    """Per column: crossover and table; then the time, GFLOP/s and speedup charts."""
    matmul = [r for r in records if r["benchmark"] == "matmul"]
    if not matmul:
        return []
    lines = ["## Matrix multiplication", ""]
    for column in columns(matmul):
        col = [r for r in matmul if r["_column"] == column]
        dtypes = sorted({_dtype(r) for r in col})
        lines += [f"### {column}", ""]
        for dtype in dtypes:
            at = f" at {dtype}" if len(dtypes) > 1 else ""
            lines += [f"Crossover{at} (rigorous): {crossover_text(col, 'rigorous', dtype)}; "
                      f"(book's single timing): {crossover_text(col, 'book', dtype)}.", ""]
        lines += [matmul_table(col), "", MATMUL_NOTE, ""]
    if charts is None:
        return lines
    charts["matmul_time.png"] = plots.plot_matmul(matmul, "seconds", _axes()).figure
    charts["matmul_gflops.png"] = plots.plot_matmul(matmul, "gflops", _axes()).figure
    lines += ["![Time against matrix size](matmul_time.png)", "",
              "![GFLOP/s against matrix size](matmul_gflops.png)", ""]
    if (ax := plots.plot_speedup(matmul, _axes())) is not None:
        charts["matmul_speedup.png"] = ax.figure
        lines += ["![GPU speedup](matmul_speedup.png)", ""]
    return lines


def compose(run_dirs: list[str | os.PathLike], *, draw: bool = True) -> tuple[str, dict]:
    """report.md's text and its charts ({file name: Figure}) for `run_dirs`; `draw=False` leaves
    the charts out (text only). Unusable lines and records are skipped with a warning each."""
    if not run_dirs:
        raise ValueError("no run directory given; pass at least one, e.g. runs/20261202T1830Z")
    problems: list[str] = []
    records = load(run_dirs, problems)
    jobs = [job for d in run_dirs for job in read_jobs(d, problems)]
    failed = [_job_row(job) for job in jobs if job["status"] not in ("ok", *UNFINISHED)]
    charts: dict | None = {} if draw else None
    lines = ["# gpubench report", "",
             "Runs: " + ", ".join(f"`{Path(d).name}`" for d in run_dirs)
             + f" · columns: {', '.join(columns(records)) or 'none'}", ""]
    lines += unfinished_note(jobs)
    if not records:
        lines += jobs_section(jobs, skipped=bool(problems))
        lines += problems_section(records, [], problems)
        return "\n".join(lines), charts or {}
    if not any(r["device"].startswith("gpu") for r in records):
        lines += ["> No GPU env in these runs, so this compares CPU columns only. To add the GPU "
                  "env (Linux or WSL2 with an NVIDIA driver): `make setup GPU=1`, then `make run`.",
                  ""]
    if any(r.get("data_source") == "synthetic" for r in records):
        lines += ["> **Synthetic data** was used where the table says so: the timings are "
                  "real, the accuracies are not comparable with the book's.", ""]
    lines += training_section(records, charts) + backends_section(records)
    lines += telemetry_section(records) + matmul_section(records, charts)
    lines += factors_section(records, charts) + scaling_section(records)
    lines += problems_section(records, failed, problems)
    lines += ["## Environments", "",
              *explained_table(ENVIRONMENT_HEADERS, environment_rows(records))]
    return "\n".join(lines), charts or {}


def build(run_dirs: list[str | os.PathLike], out: str | os.PathLike | None = None) -> Path:
    """Write report.md and its PNG charts for `run_dirs` into `out` (default: the first run dir).

    A run dir with only run.json (nothing recorded) still gets a report listing its jobs.
    """
    text, charts = compose(run_dirs)
    return _write(Path(out or run_dirs[0]), text, charts)


def is_run_dir(path: str | os.PathLike) -> bool:
    """Whether `path` holds a run: results.jsonl, or run.json alone (a run that recorded
    nothing)."""
    path = Path(path)
    return (path / "results.jsonl").exists() or (path / "run.json").is_file()


def find_runs(run_dirs: list[str] | str | None = None) -> list[Path]:
    """Run directories to report: `run_dirs`, else $GPUBENCH_RUN_DIRS, else the newest under
    runs/ (a run dir has results.jsonl, or run.json alone)."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    if not run_dirs and os.environ.get("GPUBENCH_RUN_DIRS"):
        run_dirs = os.environ["GPUBENCH_RUN_DIRS"].split(os.pathsep)
    if not run_dirs:
        root = results.runs_dir()
        found = sorted(p for p in root.glob("*") if p.name != "interactive" and is_run_dir(p))
        if not found:
            raise FileNotFoundError(
                f"no run directory with results under {root}; "
                "run `make run` (or `make quick`) first, or pass run_dirs=[...]")
        run_dirs = found[-1:]
    paths = [Path(d) for d in run_dirs]
    for path in paths:
        if not is_run_dir(path):
            raise FileNotFoundError(f"{str(path)!r} is not a run directory (no results.jsonl "
                                    "or run.json); pass a folder written by `gpubench run`")
    return paths


def show(report_path: str | os.PathLike) -> None:
    """Display a report.md in a notebook: its text as Markdown, its charts as inline images."""
    from IPython.display import Image, Markdown, display  # noqa: PLC0415

    report_path = Path(report_path)
    # Text and chart file names alternate: re.split keeps the captured name of each image line.
    parts = re.split(r"^!\[.*\]\((.+)\)$", report_path.read_text(encoding="utf-8"), flags=re.M)
    for i, part in enumerate(parts):
        display(Image(filename=str(report_path.parent / part)) if i % 2 else Markdown(part))


def book_vs_rigorous(records: list[dict]) -> str:
    """Why the book's single timing misleads at small sizes, told with the numbers just measured."""
    ok = ok_records(records, "matmul")
    lines = []
    pairs = sorted({(r["device"], _dtype(r)) for r in ok}, key=lambda p: (p[0] == "cpu", p))
    for device, dtype in pairs:
        mine = [r for r in ok if r["device"] == device and _dtype(r) == dtype]
        book = {r["size"]: r for r in mine if r["method"] == "book"}
        rig = {r["size"]: r for r in mine if r["method"] == "rigorous"}
        if not (sizes := sorted(set(book) & set(rig))):
            continue
        small, large = sizes[0], sizes[-1]
        what = device + (f" ({dtype})" if len({p[1] for p in pairs}) > 1 else "")
        lines.append(
            f"- **{what}**: at {small} x {small} the book's single timing says "
            f"{fmt_seconds(book[small]['seconds'])}, the product itself takes "
            f"{fmt_seconds(rig[small]['seconds'])} (median of {rig[small]['repeats']}): the book "
            f"measures {book[small]['seconds'] / rig[small]['seconds']:.1f}x the real cost. "
            f"At {large} x {large} it is {fmt_seconds(book[large]['seconds'])} against "
            f"{fmt_seconds(rig[large]['seconds'])} "
            f"({book[large]['seconds'] / rig[large]['seconds']:.1f}x). The first compiled call "
            f"at {small} took {fmt_seconds(rig[small]['first_seconds'])} (tracing), which the "
            "rigorous method reports apart and keeps out of the median.")
    if not lines:
        return "No size was measured with both methods, so there is nothing to compare."
    text = [
        "The book times one run that includes creating the two random matrices, the "
        "first-call set-up of each operation and, on a GPU, its start-up. Those costs grow "
        "like n^2 or not at all, while the product grows like n^3, so at small sizes they "
        "dominate and the chart compares overheads, not arithmetic:", "", *lines,
    ]
    if any(r["device"] != "cpu" for r in ok):
        text += [f"- Crossover by the {method} method at {dtype}: "
                 f"{crossover_text(records, method, dtype)}."
                 for dtype in sorted({_dtype(r) for r in ok}) for method in ("book", "rigorous")]
    return "\n".join(text)

