"""The run report (report.md + PNGs) and the tables and numbers it shows; charts are in plots.py.

The report joins the records of one or more run directories, each job's latest
attempt only. Each column is one machine and env ("vm · cpu", "vm · gpu"); the
book's comparison is every column against the CPU env of the same machine.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import warnings
from collections import defaultdict
from pathlib import Path

from matplotlib.figure import Figure

from gpubench import results

MODEL_TITLES = {"mlp_h1000": "MNIST MLP h1000", "mnist_cnn": "MNIST CNN",
                "cifar_cnn": "CIFAR-10 CNN"}
MODEL_ORDER = ("mlp_h1000", "mnist_cnn", "cifar_cnn")


# ---------------------------------------------------------------- loading

class ReportWriteError(ValueError):
    """The report could not be written (full or read-only disk); the message names the path."""


def load(run_dirs: list[str | os.PathLike], problems: list[str] | None = None) -> list[dict]:
    """Records of each job's latest attempt in every run dir, tagged with their column (`_column`)."""
    records = [record | {"_run_dir": str(run_dir)} for run_dir in run_dirs
               for record in results.read_records(run_dir, problems)]
    _label_columns(records)
    return _dedupe(latest_attempts(records))


def latest_attempts(records: list[dict]) -> list[dict]:
    """Only the records of each job's latest attempt (a job: run dir, env and notebook)."""
    last: dict[tuple, int] = defaultdict(int)
    for r in records:
        last[_job(r)] = max(last[_job(r)], r["attempt"])
    return [r for r in records if r["attempt"] == last[_job(r)]]


def _job(record: dict) -> tuple:
    return record.get("_run_dir"), record["env"], record["notebook"]


def failed_jobs(run_dir: str | os.PathLike, problems: list[str]) -> list[list[str]]:
    """[run, env, notebook, status, first line of error] of every job in run.json not "ok"."""
    path = Path(run_dir) / "run.json"
    if not path.exists():
        return []
    try:
        jobs = json.loads(path.read_text(encoding="utf-8"))["jobs"]
        return [[Path(run_dir).name, job["env"], job["notebook"], job["status"],
                 first_line(job.get("error"))] for job in jobs if job["status"] != "ok"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        message = f"{path}: unreadable job list ({type(exc).__name__}: {exc}); jobs not shown"
        warnings.warn(message, stacklevel=2)
        problems.append(message)
        return []


def _machine(record: dict) -> str:
    return record["environment"].get("hostname") or "machine"


def _label_columns(records: list[dict]) -> None:
    """Label columns "machine · env"; add the run directory when a pair repeats across runs."""
    dirs_per_pair = defaultdict(set)
    for r in records:
        dirs_per_pair[(_machine(r), r["env"])].add(r["_run_dir"])
    for r in records:
        label = f"{_machine(r)} · {r['env']}"
        if len(dirs_per_pair[(_machine(r), r["env"])]) > 1:
            label += f" ({Path(r['_run_dir']).name})"
        r["_column"] = label


# What makes one measurement: a later record with the same values replaces it (hand re-runs).
_IDENTITY = ("_column", "benchmark", "notebook", "device", "size", "method", "dtype", "model",
             "factor", "batch_size", "precision", "jit_compile", "steps_per_execution",
             "input_pipeline", "strategy", "replicas", "workers")


def _dedupe(records: list[dict]) -> list[dict]:
    return list({tuple(str(r.get(k)) for k in _IDENTITY): r for r in records}.values())


def columns(records: list[dict]) -> list[str]:
    """Column labels in a stable order: by machine, CPU env before the others."""
    keys = {r["_column"]: (_machine(r), r["env"] != "cpu", r["env"], r["_column"]) for r in records}
    return sorted(keys, key=keys.get)


def baseline(records: list[dict], column: str) -> str | None:
    """The column a column is compared with: the CPU env of the same machine."""
    machine = next(_machine(r) for r in records if r["_column"] == column)
    return min((r["_column"] for r in records if _machine(r) == machine and r["env"] == "cpu"
                and r["_column"] != column), default=None)


# ---------------------------------------------------------------- formatting

def fmt_seconds(value: float | None) -> str:
    """Seconds with three significant digits ("0.0123 s", "12.3 s", "402 s")."""
    if value is None:
        return "–"
    return f"{value:.0f} s" if value >= 100 else f"{value:.3g} s"


def fmt(value, spec: str) -> str:
    """`value` formatted with `spec`, or "–" when it is missing."""
    return "–" if value is None else format(value, spec)


def first_line(text: str | None) -> str:
    """The first line of an error message ("" for none)."""
    return (text or "").strip().partition("\n")[0]


def md_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def ok_records(records: list[dict], benchmark: str) -> list[dict]:
    """The records of `benchmark` whose status is "ok"."""
    return [r for r in records if r["benchmark"] == benchmark and r["status"] == "ok"]


# ---------------------------------------------------------------- matmul

def _dtype(record: dict) -> str:
    return record.get("dtype") or "float32"


def crossover(records: list[dict], method: str = "rigorous", dtype: str = "float32") -> int | None:
    """Smallest size at which a GPU beats the CPU (same env, method, dtype); None if it never does."""
    ok = [r for r in ok_records(records, "matmul") if r["method"] == method and _dtype(r) == dtype]
    cpu = {r["size"]: r["seconds"] for r in ok if r["device"] == "cpu"}
    gpu = {r["size"]: r["seconds"] for r in ok if r["device"].startswith("gpu")}
    return min((size for size in gpu if size in cpu and gpu[size] < cpu[size]), default=None)


def crossover_text(records: list[dict], method: str, dtype: str = "float32") -> str:
    """Crossover in words, including the cases with no GPU or no win."""
    ok = [r for r in ok_records(records, "matmul") if _dtype(r) == dtype]
    if not any(r["device"].startswith("gpu") for r in ok):
        return "no GPU measured"
    size = crossover(records, method, dtype)
    if size is None:
        return "the GPU never beat the CPU at the sizes measured"
    if size == min(r["size"] for r in ok if r["method"] == method):
        return f"the GPU wins at every size measured (from {size})"
    return f"the GPU wins from {size} x {size} up"


def matmul_series(records: list[dict]) -> dict:
    """(column, device, method, dtype) -> sorted [(size, seconds, gflops)] of ok matmul records."""
    series = defaultdict(list)
    for r in ok_records(records, "matmul"):
        key = (r.get("_column", r["env"]), r["device"], r["method"], _dtype(r))
        series[key].append((r["size"], r["seconds"], r["gflops"]))
    return {k: sorted(v) for k, v in sorted(series.items())}


def matmul_table(records: list[dict]) -> str:
    """Per size: seconds, GFLOP/s and % of datasheet peak (where known) per device, method, dtype."""
    matmul = [r for r in records if r["benchmark"] == "matmul"]
    several = len({_dtype(r) for r in matmul}) > 1
    keys = sorted({(r["device"], r["method"], _dtype(r)) for r in matmul})
    cells = {}
    for r in matmul:
        text = r["status"].upper()
        if r["status"] == "ok":
            text = f"{fmt_seconds(r['seconds'])} ({r['gflops']:,.0f} GFLOP/s"
            if r.get("spec_peak_gflops"):
                text += f", {100 * r['gflops'] / r['spec_peak_gflops']:.0f}% of datasheet peak"
            text += ")"
        cells[(r["device"], r["method"], _dtype(r), r["size"])] = text
    rows = [[size] + [cells.get(k + (size,), "–") for k in keys]
            for size in sorted({r["size"] for r in matmul})]
    return md_table(["size"] + [" ".join(k if several else k[:2]) for k in keys], rows)


# ---------------------------------------------------------------- training

def book_train(records: list[dict]) -> list[dict]:
    """Train records of the book's chapters (not Speed_Factors variants)."""
    return [r for r in records if r["benchmark"] == "train" and r.get("factor") is None]


def _by_model_and_column(records: list[dict]) -> dict[tuple[str, str], dict]:
    return {(r["model"], r["_column"]): r for r in book_train(records)}


_MODE = (("jit_compile", "XLA ", lambda v: "on" if v else "off"), ("precision", "", str),
         ("batch_size", "batch ", str), ("steps_per_execution", "steps/exec ", str),
         ("input_pipeline", "", str))


def mode(record: dict) -> dict[str, str]:
    """The mode a train record ran in, each field in words ("XLA off", "batch 100", ...)."""
    return {name: label + ("?" if record.get(name) is None else show(record[name]))
            for name, label, show in _MODE}


def training_rows(records: list[dict]) -> list[list]:
    """The book's table: per model and column, total time, % saved and speedup vs the CPU env."""
    by_key = _by_model_and_column(records)
    rows = []
    for model in MODEL_ORDER:
        for column in columns(records):
            if (r := by_key.get((model, column))) is None:
                continue
            data = r["dataset"] + (" **(synthetic)**" if r["data_source"] == "synthetic"
                                   else f" ({r['data_source']})")
            first = [MODEL_TITLES[model], column, r["device"], ", ".join(mode(r).values()),
                     r["epochs"]]
            if r["status"] != "ok":
                rows.append(first + [r["status"].upper(), "–", "–", "–", "–", "–", data])
                continue
            saved, speedup = _versus(by_key.get((model, baseline(records, column))), r)
            rows.append(first + [
                fmt_seconds(r["total_seconds"]), fmt_seconds(r["steady_epoch_seconds"]),
                fmt_seconds(r["first_epoch_seconds"]), saved, speedup,
                fmt(r["test_accuracy"], ".3f"), data])
    return rows


def _versus(base: dict | None, other: dict) -> tuple[str, str]:
    """'% time saved' and 'speedup' of `other` against `base` ('baseline' for the base itself)."""
    if base is None:
        return "baseline", "1.00x"
    if base["status"] != "ok" or not base["total_seconds"] or not other["total_seconds"]:
        return "–", "–"
    if base["epochs"] != other["epochs"] or base["train_samples"] != other["train_samples"]:
        return "n/a (different settings)", "–"
    saved = 100.0 * (1 - other["total_seconds"] / base["total_seconds"])
    return f"{saved:.0f}%", f"{base['total_seconds'] / other['total_seconds']:.2f}x"


TRAINING_HEADERS = ["model", "machine · env", "device", "mode", "epochs", "total time",
                    "steady epoch", "first epoch", "time saved vs CPU env", "speedup",
                    "test accuracy", "data"]


def not_like_for_like(records: list[dict]) -> list[str]:
    """A "**Not like for like:**" line per model whose compared columns ran in different modes."""
    by_key = _by_model_and_column(records)
    lines = []
    for (model, column), record in by_key.items():
        if (base := by_key.get((model, baseline(records, column)))) is None:
            continue
        theirs, ours = mode(base), mode(record)
        differ = [name for name in ours if ours[name] != theirs[name]]
        if differ:
            lines.append(
                f"**Not like for like:** {MODEL_TITLES.get(model, model)}: "
                f"{record['env']}: {', '.join(ours[n] for n in differ)}, "
                f"{base['env']}: {', '.join(theirs[n] for n in differ)}.")
    return lines


UNSTABLE_SPREAD = 0.20  # steady-epoch IQR over median above which timings are flagged


def unstable(records: list[dict]) -> list[str]:
    """A line per train record whose steady epochs spread more than UNSTABLE_SPREAD."""
    lines = []
    for r in ok_records(records, "train"):
        spread = (r.get("steady_epoch_iqr") or 0) / (r["steady_epoch_seconds"] or math.inf)
        if spread <= UNSTABLE_SPREAD:
            continue
        steady = (r["epoch_seconds"] or [])[1:] or [r["steady_epoch_seconds"]]
        what = MODEL_TITLES.get(r["model"], r["model"])
        what += f", {r['factor']}" if r.get("factor") else ""
        lines.append(f"- **unstable**: {r['_column']} {what} on {r['device']}: steady epochs "
                     f"{min(steady):.3g}..{max(steady):.3g} s (IQR {spread:.0%} of the median); "
                     "compare the minima (steady_epoch_min) or rerun on a quieter machine.")
    return lines


# ---------------------------------------------------------------- speed factors and scaling

def factors_section(records: list[dict], charts: dict) -> list[str]:
    """The "Speed factors" section from Speed_Factors records (gpubench.factors' numbers)."""
    if not any(r["benchmark"] == "train" and r.get("factor") for r in records):
        return []
    from gpubench import factors, plots  # noqa: PLC0415 - factors imports no TensorFlow

    lines = ["## Speed factors", "",
             "Each variant changes one factor of the book's setting on the same device, measured "
             "in interleaved rounds: x is the fastest steady round against the baseline's, the "
             "interval spans the paired rounds, and an interval that includes 1.0 is "
             "\"no clear effect\".", ""]
    all_rows = []
    for column in columns(records):
        mine = [r for r in records if r["_column"] == column]
        rows = factors.effects(mine)
        if not rows:
            continue
        all_rows += rows
        size = factors.crossover_batch_size(mine)
        lines += [f"### {column}", "", factors.table(rows, ok_records(mine, "matmul")), "",
                  factors.findings(rows), ""]
        if size is not None:
            lines += [f"CPU–GPU crossover batch size: the GPU trains faster from batch {size}.", ""]
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
             "Data-parallel training with tf.distribute. Scaling efficiency is samples per "
             "second over replicas x the one-replica samples per second of the same run "
             "(100%: perfect).", ""]
    if any(r.get("virtual_devices") for r in records):
        lines += ["> **Virtual devices**: one CPU split into logical devices. These rows show "
                  "that the mechanics work, not how real devices scale.", ""]
    return lines + [md_table(SCALING_HEADERS, rows), ""]


# ---------------------------------------------------------------- report

def environment_rows(records: list[dict]) -> list[list]:
    """One row per column: hardware, software and where each notebook's data came from."""
    rows = []
    for column in columns(records):
        recs = [r for r in records if r["_column"] == column]
        env = recs[-1]["environment"]
        gpus = "; ".join(f"{g['name']} ({g['memory_gb']} GB)" for g in env["gpus"] or []) or "none"
        build = (f"CUDA {env['cuda_version']}, cuDNN {env['cudnn_version']}"
                 if env["cuda_build"] else "CPU-only build")
        data = sorted({f"{r['dataset']}: {r['data_source']}" for r in recs
                       if r["benchmark"] == "train"})
        rows.append([column, f"{env['cpu_model']} ({env['cpu_count']} cores, {env['ram_gb']} GB)",
                     gpus, f"TF {env['tensorflow']} ({build}), Keras {env['keras']}",
                     f"Python {env['python']}", (env.get("git_commit") or "–")[:12],
                     ", ".join(data) or "–"])
    return rows


def problems_section(records: list[dict], jobs: list[list[str]], problems: list[str]) -> list[str]:
    """Markdown lines: failed or skipped jobs, records not "ok", and lines the reader skipped."""
    lines = []
    if jobs:
        lines += ["Jobs that did not finish (from run.json):", "",
                  md_table(["run", "env", "notebook", "status", "error"], jobs), ""]
    if bad := [r for r in records if r["status"] != "ok"]:
        lines += [f"- {r['_column']} {r['notebook']} {r['device']}: **{r['status']}** "
                  f"{first_line(r.get('error'))}".rstrip() for r in bad] + [""]
    if problems:
        lines += ["Lines skipped while reading results:", ""]
        lines += [f"- `{p}`" for p in problems] + [""]
    return (["## What went wrong", ""] + lines) if lines else []


def _write(out: Path, text: str, charts: dict) -> Path:
    """Save the charts, then report.md atomically; a failed write raises ReportWriteError."""
    report = out / "report.md"
    tmp = out / "report.md.tmp"
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, fig in charts.items():
            fig.savefig(out / name, dpi=110, bbox_inches="tight")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(report)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise ReportWriteError(
            f"cannot write the report to {str(out)!r}: {results.write_problem(exc)}; "
            "free some space or pass --out with a writable folder") from None
    return report


def _axes(figsize: tuple[float, float] = (8, 5)):
    """Axes on a new Figure of the report's own, outside pyplot."""
    return Figure(figsize=figsize).subplots()


def training_section(records: list[dict], charts: dict) -> list[str]:
    """The book's table, its mode warnings, the epoch-time chart and the unstable flags."""
    from gpubench import plots  # noqa: PLC0415

    lines = []
    if book_train(records):
        lines += ["## Training: the book's table", "",
                  "Total time is all epochs (the book's number, 15 epochs in the full profile); "
                  "steady epoch is the median of epochs 2..n; epoch 1 includes tracing and "
                  "compilation. Time saved and speedup compare each env with the CPU env of "
                  "the same machine, in the mode each row shows.", "",
                  md_table(TRAINING_HEADERS, training_rows(records)), ""]
        lines += [line + "\n" for line in not_like_for_like(records)]
    if book_train(ok_records(records, "train")):
        charts["epoch_times.png"] = plots.plot_epoch_bars(records, fig=Figure())
        lines += ["![Epoch times](epoch_times.png)", ""]
    if flagged := unstable(records):
        lines += [f"Timings that varied a lot between epochs (IQR over median above "
                  f"{UNSTABLE_SPREAD:.0%}):", "", *flagged, ""]
    return lines


def matmul_section(records: list[dict], charts: dict) -> list[str]:
    """Per column: crossover and table; then the time, GFLOP/s and speedup charts."""
    from gpubench import plots  # noqa: PLC0415

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
        lines += [matmul_table(col), ""]
    charts["matmul_time.png"] = plots.plot_matmul(matmul, "seconds", _axes()).figure
    charts["matmul_gflops.png"] = plots.plot_matmul(matmul, "gflops", _axes()).figure
    lines += ["![Time against matrix size](matmul_time.png)", "",
              "![GFLOP/s against matrix size](matmul_gflops.png)", ""]
    if (ax := plots.plot_speedup(matmul, _axes())) is not None:
        charts["matmul_speedup.png"] = ax.figure
        lines += ["![GPU speedup](matmul_speedup.png)", ""]
    return lines


def build(run_dirs: list[str | os.PathLike], out: str | os.PathLike | None = None) -> Path:
    """Write report.md and its PNG charts for `run_dirs` into `out` (default: the first run dir)."""
    if not run_dirs:
        raise ValueError("no run directory given; pass at least one, e.g. runs/20261202T1830Z")
    problems: list[str] = []
    records = load(run_dirs, problems)
    jobs = [row for d in run_dirs for row in failed_jobs(d, problems)]
    charts: dict = {}
    lines = ["# gpubench report", "",
             "Runs: " + ", ".join(f"`{Path(d).name}`" for d in run_dirs)
             + f" · columns: {', '.join(columns(records)) or 'none'}", ""]
    if not any(r["device"].startswith("gpu") for r in records):
        lines += ["> No GPU env in these runs, so this compares CPU columns only. To add the GPU "
                  "env (Linux or WSL2 with an NVIDIA driver): `make setup GPU=1`, then `make run`.",
                  ""]
    if any(r.get("data_source") == "synthetic" for r in records):
        lines += ["> **Synthetic data** was used where the table says so: the timings are "
                  "real, the accuracies are not comparable with the book's.", ""]
    lines += training_section(records, charts) + matmul_section(records, charts)
    lines += factors_section(records, charts) + scaling_section(records)
    lines += problems_section(records, jobs, problems)
    lines += ["## Environments", "",
              md_table(["machine · env", "CPU", "GPU", "TensorFlow", "Python", "commit", "data"],
                       environment_rows(records)), ""]
    return _write(Path(out or run_dirs[0]), "\n".join(lines), charts)


def find_runs(run_dirs: list[str] | str | None = None) -> list[Path]:
    """Run directories to report: `run_dirs`, else $GPUBENCH_RUN_DIRS, else the newest under runs/."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    if not run_dirs and os.environ.get("GPUBENCH_RUN_DIRS"):
        run_dirs = os.environ["GPUBENCH_RUN_DIRS"].split(os.pathsep)
    if not run_dirs:
        found = sorted(p.parent for p in results.runs_dir().glob("*/results.jsonl")
                       if p.parent.name != "interactive")
        if not found:
            raise FileNotFoundError(
                f"no run directory with results under {results.runs_dir()}; "
                "run `make run` (or `make quick`) first, or pass run_dirs=[...]")
        run_dirs = found[-1:]
    paths = [Path(d) for d in run_dirs]
    for path in paths:
        if not (path / "results.jsonl").exists():
            raise FileNotFoundError(f"{str(path)!r} is not a run directory (no results.jsonl); "
                                    "pass a folder written by `gpubench run`")
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

