"""The report as a document: report.md's text from every chapter topic's section, the
environments and jobs around them, writing it with its charts, and showing it in a notebook.

The report joins the records of one or more run directories, each job's latest
attempt only. Each column is one machine and env ("vm · cpu", "vm · jax-gpu"); the
book's comparison is every column against the CPU env of the same machine and the
same Keras backend ("gpu" against "cpu", "jax-gpu" against "jax-cpu"), never across
backends: the backends are compared in a section of their own. Every field a table
or chart uses is checked per record first; a record that fails is skipped with a
warning naming its file, line and field, so no record can cost the report.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from gpubench import results, rundir
from gpubench.backends import backend_title
from gpubench.fmt import code, first_line, fmt
from gpubench.machine import ENVS_HINT
from gpubench.report import backends, factors, matmul, scaling, telemetry, training
from gpubench.report.format import explained_table
from gpubench.report.inputs import UNFINISHED, ReportWriteError, job_row, load, read_jobs
from gpubench.report.records import backend_of, columns


def backend_text(environment: dict, backend: str) -> str:
    """A column's backend, its version and build, and Keras ("JAX 0.10 (CPU-only build), Keras
    3.15"); the version from the schema-3 field, else the backend's own field (older records)."""
    version = environment.get("backend_version") or environment.get(backend)
    known = [f"{name} {environment[key]}" for name, key in (("CUDA", "cuda_version"),
                                                            ("cuDNN", "cudnn_version"))
             if environment.get(key)]
    build = ("CPU-only build" if not environment.get("cuda_build")
             else ", ".join(known) if known else "CUDA build; CUDA and cuDNN versions not recorded")
    return (f"{backend_title(backend)}{f' {version}' if version else ''} ({build}), "
            f"Keras {fmt(environment.get('keras'), '')}")


def _cpu_text(environment: dict) -> str:
    """The CPU cell: model, cores and RAM, each as recorded ("–" where not)."""
    return (f"{fmt(environment.get('cpu_model'), '')} ({fmt(environment.get('cpu_count'), '')} "
            f"cores, {fmt(environment.get('ram_gb'), '')} GB)")


ENVIRONMENT_HEADERS = ["machine · env", "CPU", "GPU", "backend", "Python", "commit", "data"]


def environment_rows(records: list[dict]) -> list[list]:
    """One row per column: hardware, software and where each notebook's data came from."""
    rows = []
    for column in columns(records):
        recs = [r for r in records if r["_column"] == column]
        env = recs[-1]["environment"]
        gpus = "; ".join(f"{fmt(g.get('name'), '')} ({fmt(g.get('memory_gb'), '')} GB)"
                         for g in env.get("gpus") or []) or "none"
        data = sorted({f"{fmt(r['dataset'], '')}: {fmt(r['data_source'], '')}" for r in recs
                       if r["benchmark"] == "train"})
        rows.append([column, _cpu_text(env), gpus, backend_text(env, backend_of(recs[-1])),
                     f"Python {fmt(env.get('python'), '')}", (env.get("git_commit") or "–")[:12],
                     ", ".join(data) or "–"])
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


SHOWN_PROBLEMS = 12  # skipped lines and records listed in the report; the rest are counted


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
        more = len(problems) - SHOWN_PROBLEMS
        lines += ["Lines, records and fields left out while reading results:", ""]
        lines += [f"- `{code(p)}`" for p in problems[:SHOWN_PROBLEMS]]
        lines += [f"- and {more} more (`gpubench report` warns of each)"] if more > 0 else []
        lines += [""]
    return (["## What went wrong", ""] + lines) if lines else []


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
                              f"_Chart {name} not drawn: {code(str(exc))}._", text, flags=re.M)
        rundir.write_atomic(report, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError as exc:
        raise ReportWriteError(
            f"cannot write the report to {str(out)!r}: {results.write_problem(exc)}; "
            "free some space or pass --out with a writable folder") from None
    return report



def compose(run_dirs: list[str | os.PathLike], *, draw: bool = True) -> tuple[str, dict]:
    """report.md's text and its charts ({file name: Figure}) for `run_dirs`; `draw=False` leaves
    the charts out (text only). Unusable lines and records are skipped with a warning each."""
    if not run_dirs:
        raise ValueError("no run directory given; pass at least one, e.g. runs/20261202T1830Z")
    problems: list[str] = []
    records = load(run_dirs, problems)
    jobs = [job for d in run_dirs for job in read_jobs(d, problems)]
    failed = [job_row(job) for job in jobs if job["status"] not in ("ok", *UNFINISHED)]
    charts: dict | None = {} if draw else None
    lines = ["# gpubench report", "",
             "Runs: " + ", ".join(f"`{Path(d).name}`" for d in run_dirs)
             + f" · columns: {', '.join(columns(records)) or 'none'}", ""]
    lines += training.profile_lines(records)
    lines += unfinished_note(jobs)
    if not records:
        lines += jobs_section(jobs, skipped=bool(problems))
        lines += problems_section(records, [], problems)
        return "\n".join(lines), charts or {}
    if not any(r["device"].startswith("gpu") for r in records):
        lines += ["> No GPU env in these runs, so this compares CPU columns only. To add a GPU "
                  f"env (Linux or WSL2 with an NVIDIA driver), create it with {ENVS_HINT}, then "
                  "run again.", ""]
    if any(r.get("data_source") == "synthetic" for r in records):
        lines += ["> **Synthetic data** was used where the table says so: the timings are "
                  "real, the accuracies are not comparable with the book's.", ""]
    lines += training.section(records, charts) + backends.section(records)
    lines += telemetry.section(records) + matmul.section(records, charts)
    lines += factors.section(records, charts) + scaling.section(records)
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



def show(report_path: str | os.PathLike) -> None:
    """Display a report.md in a notebook: its text as Markdown, its charts as inline images."""
    from IPython.display import Image, Markdown, display  # noqa: PLC0415

    report_path = Path(report_path)
    # Text and chart file names alternate: re.split keeps the captured name of each image line.
    parts = re.split(r"^!\[.*\]\((.+)\)$", report_path.read_text(encoding="utf-8"), flags=re.M)
    for i, part in enumerate(parts):
        display(Image(filename=str(report_path.parent / part)) if i % 2 else Markdown(part))

