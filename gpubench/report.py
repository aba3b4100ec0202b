"""Tables and charts from results: the notebooks' plots and the run report (report.md + PNGs).

The report joins the records of one or more run directories. Each column is one
machine and env ("vm · cpu", "vm · gpu"); the book's comparison is every column
against the CPU env of the same machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections import defaultdict
from pathlib import Path

from gpubench import results

MODEL_TITLES = {"mlp_h1000": "MNIST MLP h1000", "mnist_cnn": "MNIST CNN",
                "cifar_cnn": "CIFAR-10 CNN"}
MODEL_ORDER = ("mlp_h1000", "mnist_cnn", "cifar_cnn")
ADD_GPU_HINT = (
    "No GPU env in these runs, so this compares CPU columns only. To add the GPU env "
    "(Linux or WSL2 with an NVIDIA driver): `make setup GPU=1`, then `make run`."
)


# ---------------------------------------------------------------- loading

class ReportWriteError(ValueError):
    """The report could not be written (full or read-only disk); the message names the path."""


def load(run_dirs: list[str | os.PathLike], problems: list[str] | None = None) -> list[dict]:
    """Records of each job's latest attempt in every run dir, tagged with their column (`_column`).

    Unreadable lines are skipped with a warning and added to `problems`.
    """
    tagged = []
    for run_dir in run_dirs:
        for record in results.read_records(run_dir, problems):
            record["_run_dir"] = str(run_dir)
            tagged.append(record)
    _label_columns(tagged)
    return _dedupe(latest_attempts(tagged))


def latest_attempts(records: list[dict]) -> list[dict]:
    """Only the records of each job's latest attempt (a job: run dir, env and notebook)."""
    def job(record: dict) -> tuple:
        return record.get("_run_dir"), record["env"], record["notebook"]

    last: dict[tuple, int] = {}
    for record in records:
        last[job(record)] = max(last.get(job(record), 0), record["attempt"])
    return [r for r in records if r["attempt"] == last[job(r)]]


def failed_jobs(run_dir: str | os.PathLike, problems: list[str]) -> list[list[str]]:
    """[run, env, notebook, status, first line of error] of every job in run.json not "ok"."""
    path = Path(run_dir) / "run.json"
    if not path.exists():
        return []
    try:
        jobs = json.loads(path.read_text(encoding="utf-8"))["jobs"]
        rows = [[Path(run_dir).name, job["env"], job["notebook"], job["status"],
                 (job.get("error") or "").strip().split("\n")[0]]
                for job in jobs if job["status"] != "ok"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        message = f"{path}: unreadable job list ({type(exc).__name__}: {exc}); jobs not shown"
        warnings.warn(message, stacklevel=2)
        problems.append(message)
        return []
    return rows


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


def _key(record: dict) -> tuple:
    """What one measurement is: a later record of the same key replaces it (hand re-runs)."""
    fixed = (record.get("_column", record["env"]), record["benchmark"], record["device"])
    if record["benchmark"] == "matmul":
        return fixed + (record["size"], record["method"], record.get("dtype"))
    return fixed + (record["notebook"], record["model"], record.get("factor"),
                    record.get("batch_size"), record.get("precision"), record.get("jit_compile"),
                    record.get("steps_per_execution"), record.get("input_pipeline"),
                    record.get("replicas"), record.get("workers"))


def _dedupe(records: list[dict]) -> list[dict]:
    kept = {}
    for record in records:
        kept[_key(record)] = record
    return list(kept.values())


def columns(records: list[dict]) -> list[str]:
    """Column labels in a stable order: by machine, CPU env before the others."""
    seen = {}
    for r in records:
        seen.setdefault(r["_column"], (_machine(r), r["env"] != "cpu", r["env"], r["_column"]))
    return [label for label, _ in sorted(seen.items(), key=lambda item: item[1])]


def baseline(records: list[dict], column: str) -> str | None:
    """The column a column is compared with: the CPU env of the same machine."""
    machine = next(_machine(r) for r in records if r["_column"] == column)
    for label in columns(records):
        rec = next(r for r in records if r["_column"] == label)
        if _machine(rec) == machine and rec["env"] == "cpu" and label != column:
            return label
    return None


# ---------------------------------------------------------------- formatting

def fmt_seconds(value: float | None) -> str:
    """Seconds with three significant digits ("0.0123 s", "12.3 s", "402 s")."""
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:.0f} s"
    return f"{value:.3g} s"


def md_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _ok(records: list[dict], benchmark: str) -> list[dict]:
    return [r for r in records if r["benchmark"] == benchmark and r["status"] == "ok"]


# ---------------------------------------------------------------- matmul

def crossover(records: list[dict], method: str = "rigorous") -> int | None:
    """Smallest size at which a GPU beats the CPU (same env, same method); None if it never does."""
    cpu = {r["size"]: r["seconds"] for r in _ok(records, "matmul")
           if r["method"] == method and r["device"] == "cpu"}
    gpu = {r["size"]: r["seconds"] for r in _ok(records, "matmul")
           if r["method"] == method and r["device"].startswith("gpu")}
    wins = sorted(size for size in gpu if size in cpu and gpu[size] < cpu[size])
    return wins[0] if wins else None


def crossover_text(records: list[dict], method: str) -> str:
    """Crossover in words, including the cases with no GPU or no win."""
    sizes = sorted({r["size"] for r in _ok(records, "matmul") if r["method"] == method})
    has_gpu = any(r["device"].startswith("gpu") for r in _ok(records, "matmul"))
    if not has_gpu:
        return "no GPU measured"
    size = crossover(records, method)
    if size is None:
        return "the GPU never beat the CPU at the sizes measured"
    if sizes and size == sizes[0]:
        return f"the GPU wins at every size measured (from {size})"
    return f"the GPU wins from {size} x {size} up"


def matmul_series(records: list[dict]) -> dict:
    """(column, device, method) -> sorted [(size, seconds, gflops)] of the ok matmul records."""
    series = defaultdict(list)
    for r in _ok(records, "matmul"):
        series[(r.get("_column", r["env"]), r["device"], r["method"])].append(
            (r["size"], r["seconds"], r["gflops"]))
    return {k: sorted(v) for k, v in sorted(series.items())}


def plot_matmul(records: list[dict], metric: str = "seconds", ax=None, title: str | None = None):
    """Time (or GFLOP/s) against matrix size: one line per device and method (the book's chart)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    ax = ax or plt.subplots(figsize=(8, 5))[1]
    index = 1 if metric == "seconds" else 2
    series = matmul_series(records)
    multi = len({k[0] for k in series}) > 1
    colours = {}  # one colour per column and device; the method sets the line style
    for (column, device, method), points in series.items():
        colour = colours.setdefault((column, device), f"C{len(colours) % 10}")
        label = f"{device} ({method})" + (f" — {column}" if multi else "")
        ax.plot([p[0] for p in points], [p[index] for p in points], color=colour,
                marker="o", linestyle="-" if method == "rigorous" else "--", label=label)
    ax.set_xlabel("matrix size n (n x n)")
    ax.set_ylabel("seconds per product" if metric == "seconds" else "GFLOP/s")
    ax.set_title(title or ("Matrix multiplication time" if metric == "seconds"
                           else "Matrix multiplication throughput"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def plot_speedup(records: list[dict], ax=None):
    """GPU-over-CPU speedup against size for each method, crossover marked; None without a GPU."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    series = matmul_series(records)
    pairs = [(k, v) for k, v in series.items() if k[1].startswith("gpu")]
    if not pairs:
        return None
    ax = ax or plt.subplots(figsize=(8, 5))[1]
    for (column, device, method), gpu_points in pairs:
        cpu = {s: sec for s, sec, _ in series.get((column, "cpu", method), [])}
        points = [(s, cpu[s] / sec) for s, sec, _ in gpu_points if s in cpu]
        if not points:
            continue
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                label=f"{device} vs cpu ({method})")
        col_records = [r for r in records if r.get("_column", r["env"]) == column]
        size = crossover(col_records, method)
        if size is not None:
            ax.axvline(size, linestyle=":", color="grey")
            ax.annotate(f"crossover {size}", (size, 1), textcoords="offset points",
                        xytext=(4, 8), fontsize="small")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("matrix size n (n x n)")
    ax.set_ylabel("speedup (CPU time / GPU time)")
    ax.set_title("GPU speedup over CPU (above 1: GPU faster)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def matmul_table(records: list[dict]) -> str:
    """Per size: seconds and GFLOP/s for every device and method of one column of records."""
    series = matmul_series(records)
    keys = [k for k in series]
    sizes = sorted({s for points in series.values() for s, _, _ in points})
    lookup = {(k, s): (sec, gf) for k, points in series.items() for s, sec, gf in points}
    problems = {(r["device"], r["method"], r["size"]): r["status"]
                for r in records if r["benchmark"] == "matmul" and r["status"] != "ok"}
    rows = []
    for size in sizes:
        row = [size]
        for k in keys:
            if (k, size) in lookup:
                sec, gf = lookup[(k, size)]
                row.append(f"{fmt_seconds(sec)} ({gf:,.0f} GFLOP/s)")
            else:
                row.append(problems.get((k[1], k[2], size), "–").upper())
        rows.append(row)
    return md_table(["size"] + [f"{k[1]} {k[2]}" for k in keys], rows)


# ---------------------------------------------------------------- training

def book_train(records: list[dict]) -> list[dict]:
    """Train records of the book's chapters (not Speed_Factors variants)."""
    return [r for r in records if r["benchmark"] == "train" and r.get("factor") is None]


def training_rows(records: list[dict]) -> list[list]:
    """The book's table: per model and column, total time, % saved and speedup vs the CPU env."""
    train = book_train(records)
    by_key = {(r["model"], r["_column"]): r for r in train}
    rows = []
    for model in [m for m in MODEL_ORDER if any(r["model"] == m for r in train)]:
        for column in columns(records):
            r = by_key.get((model, column))
            if r is None:
                continue
            data = r["dataset"] + (" **(synthetic)**" if r["data_source"] == "synthetic"
                                   else f" ({r['data_source']})")
            if r["status"] != "ok":
                rows.append([MODEL_TITLES[model], column, r["device"], r["epochs"],
                             r["status"].upper(), "–", "–", "–", "–", "–", data])
                continue
            saved, speedup = _versus(by_key.get((model, baseline(records, column))), r)
            rows.append([
                MODEL_TITLES[model], column, r["device"], r["epochs"],
                fmt_seconds(r["total_seconds"]), fmt_seconds(r["steady_epoch_seconds"]),
                fmt_seconds(r["first_epoch_seconds"]), saved, speedup,
                f"{r['test_accuracy']:.3f}", data,
            ])
    return rows


def _versus(base: dict | None, other: dict) -> tuple[str, str]:
    """'% time saved' and 'speedup' of `other` against `base` ('baseline' for the base itself)."""
    if base is None:
        return "baseline", "1.00x"
    if base["status"] != "ok":
        return "–", "–"
    if base["epochs"] != other["epochs"] or base["train_samples"] != other["train_samples"]:
        return "n/a (different settings)", "–"
    saved = 100.0 * (1 - other["total_seconds"] / base["total_seconds"])
    return f"{saved:.0f}%", f"{base['total_seconds'] / other['total_seconds']:.2f}x"


TRAINING_HEADERS = ["model", "machine · env", "device", "epochs", "total time",
                    "steady epoch", "first epoch", "time saved vs CPU env", "speedup",
                    "test accuracy", "data"]


def plot_epoch_bars(records: list[dict], path_or_ax=None):
    """Grouped bars: steady-state epoch time (and epoch 1) per model, one bar per column."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    train = _ok(records, "train")
    models = [m for m in MODEL_ORDER if any(r["model"] == m for r in train)]
    cols = [c for c in columns(records) if any(r["_column"] == c for r in train)]
    fig, axes = plt.subplots(1, max(len(models), 1), figsize=(4.5 * max(len(models), 1), 4.5),
                             squeeze=False)
    for ax, model in zip(axes[0], models):
        steady, first = [], []
        for column in cols:
            r = next((r for r in train if r["model"] == model and r["_column"] == column), None)
            steady.append((r["steady_epoch_seconds"] or r["first_epoch_seconds"]) if r else 0)
            first.append(r["first_epoch_seconds"] if r else 0)
        x = np.arange(len(cols))
        ax.bar(x - 0.2, steady, width=0.4, label="steady epoch (median of 2..n)")
        ax.bar(x + 0.2, first, width=0.4, label="epoch 1 (incl. tracing)", alpha=0.6)
        for xi, value in zip(x, steady):
            ax.annotate(fmt_seconds(value), (xi - 0.2, value), ha="center", va="bottom",
                        fontsize="small")
        ax.set_xticks(x, cols, rotation=15, fontsize="small")
        ax.set_title(MODEL_TITLES[model])
        ax.set_ylabel("seconds per epoch")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))  # room below for the legend, clear of the bars
    return fig


def plot_history(history: dict, epoch_seconds: list[float] | None = None):
    """Training curves (loss and accuracy per epoch, train and validation) and time per epoch."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    panels = 3 if epoch_seconds else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4))
    epochs = range(1, len(history.get("loss", [])) + 1)
    for ax, metric in zip(axes, ("loss", "accuracy")):
        ax.plot(epochs, history.get(metric, []), marker="o", label="train")
        if f"val_{metric}" in history:
            ax.plot(epochs, history[f"val_{metric}"], marker="o", label="validation")
        ax.set_xlabel("epoch")
        ax.set_title(metric)
        ax.grid(True, alpha=0.3)
        ax.legend()
    if epoch_seconds:
        ax = axes[2]
        ax.bar(range(1, len(epoch_seconds) + 1), epoch_seconds,
               color=["tab:orange"] + ["tab:blue"] * (len(epoch_seconds) - 1))
        ax.set_xlabel("epoch (orange: epoch 1, includes tracing)")
        ax.set_ylabel("seconds")
        ax.set_title("time per epoch")
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return fig


def plot_confusion(matrix, class_names: list[str] | None = None):
    """Confusion matrix as a heat map with counts, rows = true class."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = class_names or [str(i) for i in range(len(matrix))]
    fig, ax = plt.subplots(figsize=(7, 6))
    image = ax.imshow(matrix, cmap="Blues")
    for i in range(len(matrix)):
        for j in range(len(matrix)):
            ax.text(j, i, int(matrix[i][j]), ha="center", va="center", fontsize="x-small",
                    color="white" if matrix[i][j] > matrix.max() / 2 else "black")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- report

def environment_rows(records: list[dict]) -> list[list]:
    """One row per column: hardware, software and where each notebook's data came from."""
    rows = []
    for column in columns(records):
        recs = [r for r in records if r["_column"] == column]
        env = recs[-1]["environment"]
        gpus = "; ".join(f"{g['name']} ({g['memory_gb']} GB)" for g in env["gpus"]) or "none"
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
    bad = [r for r in records if r["status"] != "ok"]
    if bad:
        lines += [f"- {r['_column']} {r['notebook']} {r['device']}: **{r['status']}** "
                  f"{(r.get('error') or '').strip().split(chr(10))[0]}".rstrip() for r in bad]
        lines += [""]
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


def build(run_dirs: list[str | os.PathLike], out: str | os.PathLike | None = None) -> Path:
    """Write report.md and its PNG charts for `run_dirs` into `out` (default: the first run dir)."""
    if not run_dirs:
        raise ValueError("no run directory given; pass at least one, e.g. runs/20261202T1830Z")
    problems: list[str] = []
    records = load(run_dirs, problems)
    jobs = [row for d in run_dirs for row in failed_jobs(d, problems)]
    out = Path(out or run_dirs[0])
    cols = columns(records)
    charts = {}
    lines = ["# gpubench report", "",
             "Runs: " + ", ".join(f"`{Path(d).name}`" for d in run_dirs)
             + f" · columns: {', '.join(cols) or 'none'}", ""]
    has_gpu = any(r["device"].startswith("gpu") for r in records)
    if not has_gpu:
        lines += [f"> {ADD_GPU_HINT}", ""]
    if any(r.get("data_source") == "synthetic" for r in records):
        lines += ["> **Synthetic data** was used where the table says so: the timings are "
                  "real, the accuracies are not comparable with the book's.", ""]

    train = book_train(records)
    if train:
        lines += ["## Training: the book's table", "",
                  "Total time is all epochs (the book's number, 15 epochs in the full profile); "
                  "steady epoch is the median of epochs 2..n; epoch 1 includes tracing and "
                  "compilation. Time saved and speedup compare each env with the CPU env of "
                  "the same machine.", "",
                  md_table(TRAINING_HEADERS, training_rows(records)), ""]
        if _ok(train, "train"):
            charts["epoch_times.png"] = plot_epoch_bars(train)
            lines += ["![Epoch times](epoch_times.png)", ""]

    matmul = [r for r in records if r["benchmark"] == "matmul"]
    if matmul:
        lines += ["## Matrix multiplication", ""]
        for column in cols:
            col = [r for r in matmul if r["_column"] == column]
            if not col:
                continue
            lines += [f"### {column}", "",
                      f"Crossover (rigorous): {crossover_text(col, 'rigorous')}; "
                      f"(book's single timing): {crossover_text(col, 'book')}.", "",
                      matmul_table(col), ""]
        charts["matmul_time.png"] = plot_matmul(matmul, "seconds").figure
        charts["matmul_gflops.png"] = plot_matmul(matmul, "gflops").figure
        lines += ["![Time against matrix size](matmul_time.png)", "",
                  "![GFLOP/s against matrix size](matmul_gflops.png)", ""]
        ax = plot_speedup(matmul)
        if ax is not None:
            charts["matmul_speedup.png"] = ax.figure
            lines += ["![GPU speedup](matmul_speedup.png)", ""]

    lines += problems_section(records, jobs, problems)
    lines += ["## Environments", "",
              md_table(["machine · env", "CPU", "GPU", "TensorFlow", "Python", "commit", "data"],
                       environment_rows(records)), ""]
    return _write(out, "\n".join(lines), charts)


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
                "run `make run` (or `make quick`) first, or pass run_dirs=[...]"
            )
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
    chunk: list[str] = []
    for line in report_path.read_text(encoding="utf-8").splitlines():
        if line.startswith("![") and line.endswith(")"):
            display(Markdown("\n".join(chunk)))
            chunk = []
            display(Image(filename=str(report_path.parent / line[line.index("(") + 1:-1])))
        else:
            chunk.append(line)
    display(Markdown("\n".join(chunk)))


def book_vs_rigorous(records: list[dict]) -> str:
    """Why the book's single timing misleads at small sizes, told with the numbers just measured."""
    ok = _ok(records, "matmul")
    lines = []
    for device in sorted({r["device"] for r in ok}, key=lambda d: (d == "cpu", d)):
        book = {r["size"]: r for r in ok if r["device"] == device and r["method"] == "book"}
        rig = {r["size"]: r for r in ok if r["device"] == device and r["method"] == "rigorous"}
        sizes = sorted(set(book) & set(rig))
        if not sizes:
            continue
        small, large = sizes[0], sizes[-1]
        ratio_small = book[small]["seconds"] / rig[small]["seconds"]
        ratio_large = book[large]["seconds"] / rig[large]["seconds"]
        lines.append(
            f"- **{device}**: at {small} x {small} the book's single timing says "
            f"{fmt_seconds(book[small]['seconds'])}, the product itself takes "
            f"{fmt_seconds(rig[small]['seconds'])} (median of {rig[small]['repeats']}): the book "
            f"measures {ratio_small:.1f}x the real cost. At {large} x {large} it is "
            f"{fmt_seconds(book[large]['seconds'])} against {fmt_seconds(rig[large]['seconds'])} "
            f"({ratio_large:.1f}x). The first compiled call at {small} took "
            f"{fmt_seconds(rig[small]['first_seconds'])} (tracing), which the rigorous method "
            "reports apart and keeps out of the median."
        )
    if not lines:
        return "No size was measured with both methods, so there is nothing to compare."
    text = [
        "The book times one run that includes creating the two random matrices, the "
        "first-call set-up of each operation and, on a GPU, its start-up. Those costs grow "
        "like n^2 or not at all, while the product grows like n^3, so at small sizes they "
        "dominate and the chart compares overheads, not arithmetic:", "", *lines,
    ]
    for method in ("book", "rigorous"):
        if any(r["device"].startswith("gpu") for r in ok):
            text.append(f"- Crossover by the {method} method: {crossover_text(records, method)}.")
    return "\n".join(text)
