"""report.md as a document: the topics' sections in order, the jobs, the environments and the
glossary around them; writing it with its charts (all or none); showing it in a notebook."""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from pathlib import Path

from gpubench import rundir
from gpubench.backends import backend_title, is_gpu_env
from gpubench.fmt import MISSING, clip, fmt
from gpubench.report import backends, matmul, scaling, telemetry, training
from gpubench.report.format import NO_GPU_HINT, explained_table, glossary
from gpubench.report.inputs import UNFINISHED, ReportWriteError, load, read_jobs
from gpubench.report.records import backend_of, columns, loaded, machine_of

ENVIRONMENT_HEADERS = ["machine · env", "CPU", "GPU", "OS", "backend", "Python", "commit", "data"]
JOB_WHY = {"running": "started and not finished: still running, or stopped by a crash",
           "pending": "not started yet", "ok": "finished, but wrote no record"}
ON_PURPOSE = "Multi_GPU_Scaling"  # the runner skips it by scaling's rules where it cannot run
SHOWN_PROBLEMS = 12  # skipped lines and records listed in the report; the rest are counted


def _versions(env: dict) -> str:
    """ "CUDA 13.0, cuDNN 9.19": the versions an environment read ("" for none)."""
    return ", ".join(f"{title} {env[key]}" for title, key in (("CUDA", "cuda_version"),
                                                             ("cuDNN", "cudnn_version"))
                     if env.get(key))


def backend_text(records: list[dict], column: str) -> str:
    """A column's backend, version and build, and Keras: "JAX 0.11.2 (CUDA 13.0, cuDNN 9.19),
    Keras 3.15.1"; a CUDA build run on the CPU names what its machine's GPU env read."""
    first = next(r for r in records if r["_column"] == column)
    env, name = first["environment"], backend_of(first)
    version = env.get("backend_version") or env.get(name)
    twin = next((r for r in records if r["environment"].get("cuda_version") and (
        machine_of(r), backend_of(r), r["environment"].get("backend_version")) == (
        machine_of(first), name, version)), None)
    if not env.get("cuda_build"):
        build = "CPU-only build"
    elif _versions(env) or not twin or is_gpu_env(first["env"]):
        build = _versions(env) or "CUDA build; CUDA and cuDNN versions not recorded"
    else:
        build = (f"CUDA build, run on the CPU: no CUDA version read; {twin['_column']}, the same "
                 f"machine and {backend_title(name)}, read {_versions(twin['environment'])}")
    return f"{backend_title(name)}{f' {version}' if version else ''} ({build}), Keras " + fmt(
        env.get("keras"), "")


def environment_rows(records: list[dict]) -> list[list]:
    """One row per column: hardware, OS, software, the full commit and each dataset's source."""
    rows = []
    for column in columns(records):
        recs = [r for r in records if r["_column"] == column]
        env = recs[-1]["environment"]
        gpus = "; ".join(f"{fmt(g.get('name'), '')} ({fmt(g.get('memory_gb'), '')} GB, driver "
                         f"{fmt(g.get('driver'), '')})" for g in env.get("gpus") or []) or "none"
        data = sorted({f"{fmt(r['dataset'], '')}: {fmt(r['data_source'], '')}" for r in recs
                       if r["benchmark"] == "train"})
        rows.append([column, f"{fmt(env.get('cpu_model'), '')} ({fmt(env.get('cpu_count'), '')} "
                     f"cores, {fmt(env.get('ram_gb'), '')} GB)", gpus, fmt(env.get("os"), ""),
                     backend_text(records, column), f"Python {fmt(env.get('python'), '')}",
                     fmt(env.get("git_commit"), ""), ", ".join(data) or MISSING])
    return rows


def jobs_lines(jobs: list[dict], records: list[dict], problems: list[str]) -> list[str]:
    """What the job list and the reading say: a run not finished (at the top), or every job of
    a run with no record to show (`records` empty)."""
    if not records:
        none = ("No record could be used (see What went wrong)." if problems
                else "No results were recorded.")
        if not jobs:
            return [f"{none} There is no job list (run.json) either.", ""]
        rows = [[j["run"], j["env"], j["notebook"], j["status"], j["error"] or JOB_WHY.get(
            j["status"], "")] for j in jobs]
        return ["## Jobs", "", f"{none} Each job of the run, and why:", "",
                *explained_table(["run", "env", "notebook", "status", "why"], rows)]
    if not (waiting := [j for j in jobs if j["status"] in UNFINISHED]):
        return []
    parts = [f"{words}: " + ", ".join(f"{j['env']}/{j['notebook']}" for j in waiting
                                      if j["status"] == status)
             for status, words in (("running", "running"), ("pending", "not started yet"))
             if any(j["status"] == status for j in waiting)]
    return [f"> **This run has not finished** ({'; '.join(parts)}). If `gpubench run` is still "
            "working on it, this report shows what was recorded so far; if it stopped, finish it "
            f"with `gpubench run --resume {' / '.join(sorted({j['dir'] for j in waiting}))}`.",
            ""]


def problems_section(records: list[dict], jobs: list[dict], problems: list[str]) -> list[str]:
    """Failed or skipped jobs (those skipped on purpose apart), records not "ok", and the lines
    and records the report left out."""
    lines = []
    if failed := [[j["run"], j["env"], j["notebook"], j["status"], j["error"]] for j in jobs
                  if j["status"] not in ("ok", *UNFINISHED) and j["notebook"] != ON_PURPOSE]:
        lines += ["Jobs that did not finish (from run.json):", "",
                  *explained_table(["run", "env", "notebook", "status", "error"], failed)]
    lines += [f"- {r['_column']} {r['notebook']} {r['device']}: **{r['status']}** "
              f"{clip(r.get('error'))}".rstrip() for r in records if r["status"] != "ok"]
    if problems:
        lines += ["", "Lines, records and fields left out while reading results:", "",
                  *(f"- `{clip(p).replace('`', chr(39))}`" for p in problems[:SHOWN_PROBLEMS])]
        more = len(problems) - SHOWN_PROBLEMS
        lines += [f"- and {more} more (`gpubench report` warns of each)"] * (more > 0)
    if not lines:
        return []
    return ["## What went wrong", "", *lines] + ([""] if lines[-1] else [])


def compose(run_dirs: list[str | os.PathLike], *, draw: bool = True) -> tuple[str, dict]:
    """report.md's text and its charts ({file name: Figure}) for `run_dirs`; `draw=False` leaves
    the charts out. Unusable lines and records are skipped with a warning each."""
    if not run_dirs:
        raise ValueError("no run directory given; pass at least one, e.g. runs/20261202T1830Z")
    problems: list[str] = []
    records = load(run_dirs, problems)
    jobs = [job for d in run_dirs for job in read_jobs(d, problems)]
    charts: dict | None = {} if draw else None
    lines = ["# gpubench report", "",
             "Runs: " + ", ".join(f"`{Path(d).name}`" for d in run_dirs)
             + f" · columns: {', '.join(columns(records)) or 'none'}", "",
             *training.profile_lines(records), *jobs_lines(jobs, records, problems)]
    if records and not any(r["device"].startswith("gpu") for r in records):
        lines += ["> No GPU env in these runs, so this compares CPU columns only. "
                  f"{NO_GPU_HINT}.", ""]
    if any(r.get("data_source") == "synthetic" for r in records):
        lines += ["> **Synthetic data** was used where the table says so: the timings are "
                  "real, the accuracies are not comparable with the book's.", ""]
    if busy := [f"- {r['_column']} {r['notebook']} {r['device']}" + (
            f" n = {r['size']}" if r.get("size") else "") + f": {loaded(r)}"
                for r in records if loaded(r)]:
        lines += ["> **Loaded machine**: these figures were taken while the load average "
                  "exceeded the cores (other work shared the CPU); they are flagged **loaded** "
                  "in the tables, and may be slower than the machine is:", "", *busy, ""]
    lines += training.section(records, charts, jobs) + backends.section(records)
    lines += telemetry.section(records) + matmul.section(records, charts)
    if any(r.get("factor") for r in records):
        from gpubench.report import factors  # noqa: PLC0415 - loads gpubench.factors

        lines += factors.section(records, charts)
    lines += scaling.section(records) + problems_section(records, jobs if records else [],
                                                         problems)
    if intended := [f"{j['env']}/{j['notebook']} ({j['error']})" for j in jobs
                    if j["status"] == "skipped" and j["notebook"] == ON_PURPOSE]:
        lines += ["Not run, on purpose: " + "; ".join(intended) + ".", ""]
    if records:
        lines += ["## Environments", "", *explained_table(ENVIRONMENT_HEADERS,
                                                          environment_rows(records))]
    return "\n".join(lines + glossary("\n".join(lines))), charts or {}


def write(out: Path, text: str, charts: dict) -> Path:
    """Save the charts and report.md as temp files beside their targets (.NAME.PID.tmp, as
    `rundir.write_atomic` names them), then move each into place, report.md last: a failure (a
    full disk) leaves the old report and charts, never a part of a new set."""
    staged: list[Path] = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        rundir.remove_leftovers(out)  # those of writers killed before
        for name, fig in charts.items():
            staged.append(out / f".{name}.{os.getpid()}.tmp")
            try:
                fig.savefig(staged[-1], dpi=110, bbox_inches="tight", format="png")
            except (ValueError, OverflowError, ZeroDivisionError) as exc:  # cannot be drawn
                staged.pop().unlink(missing_ok=True)
                warnings.warn(f"chart {name} not drawn: {exc}", stacklevel=2)
                text = re.sub(rf"^!\[[^\]]*\]\({re.escape(name)}\)$",
                              f"_Chart {name} not drawn: {clip(str(exc))}._", text, flags=re.M)
        staged.append(out / f".report.md.{os.getpid()}.tmp")
        staged[-1].write_text(text, encoding="utf-8")
        for tmp in staged:
            os.replace(tmp, out / tmp.name[1:].rsplit(".", 2)[0])
    except OSError as exc:
        from gpubench.results import write_problem  # noqa: PLC0415

        for tmp in staged:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise ReportWriteError(f"cannot write the report to {str(out)!r}: {write_problem(exc)}; "
                               "free some space or pass --out with a writable folder") from None
    return out / "report.md"


def build(run_dirs: list[str | os.PathLike], out: str | os.PathLike | None = None) -> Path:
    """Write report.md and its PNG charts for `run_dirs` into `out` (default: the first run dir);
    a run dir with only run.json still gets a report listing its jobs. An extreme figure
    (1e308) costs at most its chart, with no numpy warning."""
    import numpy as np  # noqa: PLC0415 - matplotlib's own dependency

    with np.errstate(all="ignore"):
        text, charts = compose(run_dirs)
        return write(Path(out or run_dirs[0]), text, charts)


def show(report_path: str | os.PathLike) -> None:
    """Display a report.md in a notebook: its text as Markdown, its charts as inline images."""
    from IPython.display import Image, Markdown, display  # noqa: PLC0415

    path = Path(report_path)
    # Text and chart file names alternate: re.split keeps the captured name of each image line.
    parts = re.split(r"^!\[.*\]\((.+)\)$", path.read_text(encoding="utf-8"), flags=re.M)
    for i, part in enumerate(parts):
        display(Image(filename=str(path.parent / part)) if i % 2 else Markdown(part))
