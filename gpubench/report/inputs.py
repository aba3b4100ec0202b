"""The report's inputs: each job's latest records in run directories, checked against the whole
record schema (a bad record skipped, a bad droppable field nulled, with a warning), and run.json."""

from __future__ import annotations

import itertools
import json
import os
import re
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from gpubench import results, rundir, schema, schema_words
from gpubench.fmt import clip
from gpubench.report.records import identity, label_columns
from gpubench.results import RESULTS_FILE, job_of, latest_attempts

UNFINISHED = ("running", "pending")  # run.json's statuses of jobs not finished (yet)
_TEXT = re.compile(results.RECORD["$defs"]["text"]["pattern"])  # not "None", "nan", "-0", ...


class ReportWriteError(ValueError):
    """The report could not be written (full or read-only disk); the message names the path."""


def _nulled(record: dict, path: list[str]) -> dict:  # its objects copied, not changed
    name, *rest = path
    return {**record, name: _nulled(record[name], rest) if rest else None}


def usable(records: Iterable[dict], problems: list[str]) -> list[dict]:
    """The records the whole schema allows, bad droppable fields nulled; warns of the others."""
    kept, said, full = [], [], results.checker(ranges=True)
    for original in records:
        record, why, where = original, None, original.get("_origin", "a record")
        for error in full.errors(original):
            problem = schema_words.explain(results.RECORD, error)
            field = (f"{original.get('benchmark')} field {problem.field!r} is "
                     f"{schema_words.shown(schema_words.value_at(original, problem.path))}")
            if problem.droppable:
                path = itertools.takewhile(lambda step: isinstance(step, str), problem.path)
                record = _nulled(record, list(path))
                said.append(f"{where}: {field}, dropped; the report needs {problem.wants}")
            elif why is None:
                why = f"{field}; the report needs {problem.wants}"
        said += [f"{where}: skipped: {why}"] * bool(why)
        kept += [] if why else [record]
    named = rundir.NAMED_UNREADABLE
    for message in said[:named]:
        rundir.skipped(message, problems)
    if len(said) > named:
        rundir.skipped(f"{len(said)} records or fields in all left out by the report's checks: "
                        f"{len(said) - named} more after the {named} named", problems)
    return kept


def _readable(path: Path, problems: list[str]) -> bool:  # a symlink to nowhere is named
    if path.is_symlink() and not path.exists():
        rundir.skipped(f"{path}: a symlink that leads nowhere (a loop or a missing target); "
                        "not read", problems)
    return path.exists()


def _read(run_dir: str | os.PathLike, problems: list[str]) -> Iterator[dict]:  # tagged
    if not _readable(Path(run_dir) / RESULTS_FILE, problems):
        return
    try:
        for record in rundir.iter_records(run_dir, problems, origin=True):
            yield record | {"_run_dir": str(run_dir)}
    except results.ResultsPathError as exc:
        rundir.skipped(f"{exc}; its records are not shown", problems)


def load(run_dirs: list[str | os.PathLike], problems: list[str] | None = None) -> list[dict]:
    """The usable records of each job's latest attempt in `run_dirs`, labelled with columns."""
    problems = [] if problems is None else problems
    records = [r for run_dir in run_dirs for r in last_runs(_read(run_dir, problems), problems)]
    records = usable(latest_attempts(records), problems)
    label_columns(records)
    return list({identity(r): r for r in records}.values())  # the last of one measurement


def last_runs(records: Iterable[dict], problems: list[str]) -> list[dict]:
    """The records of each job's runs (run_id) that no later run repeats, read in one pass."""
    kept: dict[int, dict] = {}  # the records that may be shown, by their place in `records`
    runs: dict[tuple, dict] = {}  # job -> {run: its places, None once replaced}, in file order
    last: dict[tuple, object] = {}  # (job, identity) -> the run that measured it
    for number, r in enumerate(records):
        job, run = job_of(r), r.get("run_id")
        mine, key = runs.setdefault(job, {}), (job, identity(r))
        mine.setdefault(run, [])
        if (other := last.setdefault(key, run)) != run:  # the run first seen later replaces
            earlier, last[key] = sorted((other, run), key=list(mine).index)
            for place in mine[earlier] or []:
                kept.pop(place, None)
            mine[earlier] = None
        if mine[run] is not None:
            kept[number] = r
            mine[run].append(number)
    for (run_dir, env, notebook), mine in runs.items():
        if None in mine.values():
            ids = list(mine)
            more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
            rundir.skipped(f"{Path(run_dir) / RESULTS_FILE}: {env}/{notebook} holds runs "
                            f"{', '.join(map(str, ids[:3]))}{more}; shown: run {ids[-1]}, whose "
                            "records replace the others'", problems)
    return list(kept.values())


def read_jobs(run_dir: str | os.PathLike, problems: list[str]) -> list[dict]:
    """run.json's jobs (run, dir, env, notebook, status, error); warns of those unreadable."""
    path = Path(run_dir) / rundir.MANIFEST
    if not _readable(path, problems):
        return []
    found, checker = [], schema.checker("run", "job")
    try:
        jobs = json.loads(path.read_bytes().removeprefix(rundir.BOM).decode("utf-8"))["jobs"]
        if not isinstance(jobs, list):
            raise TypeError(f"'jobs' is {type(jobs).__name__}, not a list")
        for number, job in enumerate(jobs, start=1):
            if not checker.valid(job) or not all(_TEXT.match(job[k]) for k in ("env", "notebook")):
                rundir.skipped(f"{path}: job {number} is not as gpubench writes it: "
                                f"{clip(repr(job), 80)}", problems)
                continue
            error = clip((job.get("error") or "").strip().partition("\n")[0])
            found.append({"run": Path(run_dir).name, "dir": str(run_dir), "env": job["env"],
                          "notebook": job["notebook"], "status": job["status"],
                          "error": error if _TEXT.match(error) else ""})
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        rundir.skipped(f"{path}: unreadable job list ({type(exc).__name__}: "
                        f"{clip(str(exc), 200)}); jobs not shown", problems)
        return []
    return found


def reportable(path: str | os.PathLike) -> bool:
    """Whether the report can read `path`: it holds results.jsonl, or run.json alone."""
    return any(os.path.lexists(Path(path) / name) for name in (RESULTS_FILE, rundir.MANIFEST))


def find_runs(run_dirs: list[str] | str | None = None) -> list[Path]:
    """Run directories: `run_dirs`, else $GPUBENCH_RUN_DIRS, else the newest under runs/."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    run_dirs = run_dirs or [d for d in os.environ.get("GPUBENCH_RUN_DIRS", "").split(os.pathsep)
                            if d]
    if not run_dirs:
        root = results.runs_dir()
        if not (found := sorted(p for p in root.glob("*") if p.name != "interactive"
                                and reportable(p))):
            raise FileNotFoundError(f"no run directory with results under {root}; run `gpubench "
                                    "run` (in a checkout: `make run` or `make quick`) first")
        run_dirs = found[-1:]
    paths: dict[Path, Path] = {}  # each folder once, however it is written
    for path in map(Path, run_dirs):
        if not reportable(path):
            raise FileNotFoundError(f"{path} " + ("is not a run directory (no results.jsonl or "
                                    "run.json)" if path.exists() else "does not exist")
                                    + "; pass a folder written by `gpubench run`")
        if (same := paths.setdefault(path.resolve(), path)) is not path:
            twice = (f"{path} is given twice" if path == same
                     else f"{path} and {same} are the same folder")
            warnings.warn(f"{twice}; it is read once", stacklevel=2)
    return list(paths.values())
