"""report.md: the topics' sections in order, jobs, environments, glossary; writing, showing."""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from pathlib import Path

from gpubench import rundir
from gpubench.backends import backend_title, is_gpu_env
from gpubench.fmt import MISSING, clip, fmt
from gpubench.report import factors, inputs, matmul, scaling, telemetry, training
from gpubench.report.format import explained_table, glossary, prose
from gpubench.results import write_problem

ENVIRONMENT_HEADERS = ["machine · env", "CPU", "GPU", "OS", "backend", "Python", "commit", "data"]
JOB_WHY = {"running": "started and not finished: still running, or stopped by a crash",
           "pending": "not started yet", "ok": "finished, but wrote no record"}
ON_PURPOSE = "Multi_GPU_Scaling"  # the runner skips it by scaling's rules where it cannot run
SHOWN_PROBLEMS = 12  # skipped lines and records listed in the report; the rest are counted


def _versions(env: dict) -> str:  # "CUDA 13.0, cuDNN 9.19", or ""
    pairs = (("CUDA", "cuda_version"), ("cuDNN", "cudnn_version"))
    return ", ".join(f"{title} {env[key]}" for title, key in pairs if env.get(key))


def environment_rows(records: list[dict]) -> list[list]:
    """One row per column: hardware, OS, software and its build, the commit and the datasets."""
    rows = []
    for column in inputs.columns(records):
        recs = [r for r in records if r["_column"] == column]
        env, first = recs[-1]["environment"], recs[0]["environment"]
        name = inputs.backend_of(recs[0])
        version = first.get("backend_version") or first.get(name)
        twin = next((r for r in records if r["environment"].get("cuda_version") and (
            r["_machine"], inputs.backend_of(r), r["environment"].get("backend_version")) == (
            recs[0]["_machine"], name, version)), None)  # its machine's GPU env, for a CPU run
        if not first.get("cuda_build"):
            build = "CPU-only build"
        elif _versions(first) or not twin or is_gpu_env(recs[0]["env"]):
            build = _versions(first) or "CUDA build; CUDA and cuDNN versions not recorded"
        else:
            build = prose("cuda on cpu", twin=twin["_column"], title=backend_title(name),
                          versions=_versions(twin["environment"]))
        gpus = "; ".join(f"{fmt(g.get('name'), '')} ({fmt(g.get('memory_gb'), '')} GB, driver "
                         f"{fmt(g.get('driver'), '')})" for g in env.get("gpus") or []) or "none"
        data = sorted({f"{fmt(r['dataset'], '')}: {fmt(r['data_source'], '')}" for r in recs
                       if r["benchmark"] == "train"})
        rows.append([column, f"{fmt(env.get('cpu_model'), '')} ({fmt(env.get('cpu_count'), '')} "
                     f"cores, {fmt(env.get('ram_gb'), '')} GB)", gpus, fmt(env.get("os"), ""),
                     f"{backend_title(name)}{f' {version}' if version else ''} ({build}), "
                     f"Keras {fmt(first.get('keras'), '')}", f"Python {fmt(env.get('python'), '')}",
                     fmt(env.get("git_commit"), ""), ", ".join(data) or MISSING])
    return rows


def jobs_lines(jobs: list[dict], records: list[dict], problems: list[str]) -> list[str]:
    """A note on a run not finished, or, with no record to show, each job and why."""
    if not records:
        none = prose("no record used" if problems else "no results")
        if not jobs:
            return [f"{none} There is no job list (run.json) either.", ""]
        rows = [[j["run"], j["env"], j["notebook"], j["status"], j["error"] or JOB_WHY.get(
            j["status"], "")] for j in jobs]
        return ["## Jobs", "", f"{none} Each job of the run, and why:", "",
                *explained_table(["run", "env", "notebook", "status", "why"], rows)]
    parts = [f"{words}: " + ", ".join(f"{j['env']}/{j['notebook']}" for j in waiting)
             for words, status in (("running", "running"), ("not started yet", "pending"))
             if (waiting := [j for j in jobs if j["status"] == status])]
    dirs = sorted({j["dir"] for j in jobs if j["status"] in inputs.UNFINISHED})
    return [prose("unfinished", parts="; ".join(parts), dirs=" / ".join(dirs)), ""] * bool(parts)


def problems_section(records: list[dict], jobs: list[dict], problems: list[str]) -> list[str]:
    """Jobs not finished (but those skipped on purpose), records not "ok", what was left out."""
    lines = []
    if failed := [[j["run"], j["env"], j["notebook"], j["status"], j["error"]] for j in jobs
                  if j["status"] not in ("ok", *inputs.UNFINISHED) and j["notebook"] != ON_PURPOSE]:
        lines += ["Jobs that did not finish (from run.json):", "",
                  *explained_table(["run", "env", "notebook", "status", "error"], failed)]
    lines += [f"- {r['_column']} {r['notebook']} {r['device']}: **{r['status']}** "
              f"{clip(r.get('error'))}".rstrip() for r in records if r["status"] != "ok"]
    if problems:
        lines += ["", "Lines, records and fields left out while reading results:", "",
                  *(f"- `{clip(p).replace('`', chr(39))}`" for p in problems[:SHOWN_PROBLEMS])]
        more = len(problems) - SHOWN_PROBLEMS
        lines += [f"- and {more} more (`gpubench report` warns of each)"] * (more > 0)
    return ["## What went wrong", "", *lines] + [""] * bool(lines[-1]) if lines else []


def compose(run_dirs: list[str | os.PathLike], *, draw: bool = True) -> tuple[str, dict]:
    """report.md's text and its charts ({file name: Figure}; none with `draw=False`)."""
    if not run_dirs:
        raise ValueError("no run directory given; pass at least one, e.g. runs/20261202T1830Z")
    problems: list[str] = []
    records = inputs.load(run_dirs, problems)
    jobs = [job for d in run_dirs for job in inputs.read_jobs(d, problems)]
    charts: dict | None = {} if draw else None
    lines = ["# gpubench report", "",
             "Runs: " + ", ".join(f"`{Path(d).name}`" for d in run_dirs)
             + f" · columns: {', '.join(inputs.columns(records)) or 'none'}", "",
             *training.profile_lines(records), *jobs_lines(jobs, records, problems)]
    if records and not any(r["device"].startswith("gpu") for r in records):
        lines += [prose("no gpu", hint=prose("no gpu hint")), ""]
    if any(r.get("data_source") == "synthetic" for r in records):
        lines += [prose("synthetic"), ""]
    if busy := [f"- {r['_column']} {r['notebook']} {r['device']}" + (
            f" n = {r['size']}" if r.get("size") else "") + f": {inputs.loaded(r)}"
                for r in records if inputs.loaded(r)]:
        lines += [prose("loaded"), "", *busy, ""]
    lines += training.section(records, charts, jobs) + training.backends_section(records)
    lines += telemetry.section(records) + matmul.section(records, charts)
    lines += factors.section(records, charts) + scaling.section(records)
    lines += problems_section(records, jobs if records else [], problems)
    if intended := [f"{j['env']}/{j['notebook']} ({j['error']})" for j in jobs
                    if j["status"] == "skipped" and j["notebook"] == ON_PURPOSE]:
        lines += ["Not run, on purpose: " + "; ".join(intended) + ".", ""]
    lines += ["## Environments", "", *explained_table(
        ENVIRONMENT_HEADERS, environment_rows(records))] * bool(records)
    return "\n".join(lines + glossary("\n".join(lines))), charts or {}


def write(out: Path, text: str, charts: dict) -> Path:
    """Write the charts and report.md into `out`, all or none (a full disk leaves the old set)."""
    staged: dict[str, Path] = {}
    try:
        out.mkdir(parents=True, exist_ok=True)
        rundir.remove_leftovers(out)  # those of writers killed before
        for name, fig in charts.items():
            tmp = staged[name] = rundir.temp_of(out / name)
            try:
                fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
            except (ValueError, OverflowError, ZeroDivisionError) as exc:  # cannot be drawn
                staged.pop(name).unlink(missing_ok=True)
                warnings.warn(f"chart {name} not drawn: {exc}", stacklevel=2)
                text = re.sub(rf"^!\[[^\]]*\]\({re.escape(name)}\)$",
                              f"_Chart {name} not drawn: {clip(str(exc))}._", text, flags=re.M)
        staged["report.md"] = rundir.temp_of(out / "report.md")
        staged["report.md"].write_text(text, encoding="utf-8")
        for name, tmp in staged.items():
            os.replace(tmp, out / name)
    except OSError as exc:
        for tmp in staged.values():
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise inputs.ReportWriteError(
            f"cannot write the report to {str(out)!r}: {write_problem(exc)}; free some space or "
            "pass --out with a writable folder") from None
    return out / "report.md"


def build(run_dirs: list[str | os.PathLike], out: str | os.PathLike | None = None) -> Path:
    """Write report.md and its PNG charts for `run_dirs` into `out` (default: the first one)."""
    import numpy as np  # noqa: PLC0415 - matplotlib's own dependency

    with np.errstate(all="ignore"):
        text, charts = compose(run_dirs)
        return write(Path(out or run_dirs[0]), text, charts)


def show(report_path: str | os.PathLike) -> None:
    """Display a report.md in a notebook: its text as Markdown, its charts as inline images."""
    from IPython.display import Image, Markdown, display  # noqa: PLC0415

    path = Path(report_path)
    parts = re.split(r"^!\[.*\]\((.+)\)$", path.read_text(encoding="utf-8"), flags=re.M)
    for i, part in enumerate(parts):
        display(Image(filename=str(path.parent / part)) if i % 2 else Markdown(part))
