"""The report's inputs: the records of run directories (each job's latest attempt, checked
against the record schema, ranges included: a record that fails is skipped, a droppable field
that fails costs only itself, each with a warning), run.json's jobs, and which folders are runs."""

from __future__ import annotations

import itertools
import json
import os
import re
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from gpubench import results, rundir, schema
from gpubench.fmt import clip
from gpubench.report.records import identity, label_columns
from gpubench.results import RESULTS_FILE, job_of, latest_attempts

UNFINISHED = ("running", "pending")  # run.json's statuses of jobs not finished (yet)
# A text a reader may see: not "None", "nan", "inf" or "-0" (the record schema's rule).
_TEXT = re.compile(results.RECORD["$defs"]["text"]["pattern"])


class ReportWriteError(ValueError):
    """The report could not be written (full or read-only disk); the message names the path."""


def _nulled(record: dict, path: list[str]) -> dict:
    """`record` with the field at `path` set to null (its objects copied, not changed)."""
    name, *rest = path
    return {**record, name: _nulled(record[name], rest) if rest else None}


def checked(record: dict) -> tuple[dict, list[str], str | None]:
    """`record` against the whole record schema: the record with each failing droppable field
    nulled, a message per field dropped, and why the report cannot use it (None: it can)."""
    full = results.checker(ranges=True)
    if full.valid(record):
        return record, [], None
    original, dropped, why, where = record, [], None, record.get("_origin", "a record")
    for error in full.errors(record):
        problem = schema.explain(results.RECORD, error)
        field = (f"{record.get('benchmark')} field {problem.field!r} is "
                 f"{schema.shown(schema.value_at(original, problem.path))}")
        if problem.droppable:
            path = itertools.takewhile(lambda step: isinstance(step, str), problem.path)
            record = _nulled(record, list(path))
            dropped.append(f"{where}: {field}, dropped; the report needs {problem.wants}")
        elif why is None:
            why = f"{field}; the report needs {problem.wants}"
    return record, dropped, why


def usable(records: Iterable[dict], problems: list[str]) -> list[dict]:
    """The records the report can use (`checked`); the first results.NAMED_UNREADABLE skipped
    records or dropped fields get a warning each, the rest one with the total."""
    kept, said = [], []
    for record in records:
        record, dropped, why = checked(record)
        said += dropped + ([f"{record.get('_origin', 'a record')}: skipped: {why}"] if why else [])
        kept += [] if why else [record]
    named = results.NAMED_UNREADABLE
    for message in said[:named]:
        results.skipped(message, problems)
    if len(said) > named:
        results.skipped(f"{len(said)} records or fields in all left out by the report's checks: "
                        f"{len(said) - named} more after the {named} named", problems)
    return kept


def _readable(path: Path, problems: list[str]) -> bool:
    """Whether `path` exists; a symlink that leads nowhere (a loop) is named in `problems`."""
    if path.is_symlink() and not path.exists():
        results.skipped(f"{path}: a symlink that leads nowhere (a loop or a missing target); "
                        "not read", problems)
    return path.exists()


def _read(run_dir: str | os.PathLike, problems: list[str]) -> Iterator[dict]:
    """The records of one run dir, tagged with it (`_run_dir`): none where only run.json is."""
    path = Path(run_dir) / RESULTS_FILE
    if not _readable(path, problems):
        return
    try:
        for record in results.iter_records(run_dir, problems, origin=True):
            yield record | {"_run_dir": str(run_dir)}
    except results.ResultsPathError as exc:
        results.skipped(f"{exc}; its records are not shown", problems)


def load(run_dirs: list[str | os.PathLike], problems: list[str] | None = None) -> list[dict]:
    """Records of each job's latest attempt in every run dir that the report can use, labelled
    with their machine and column; the others are skipped with a warning (also in `problems`)."""
    problems = [] if problems is None else problems
    records = [r for run_dir in run_dirs for r in last_runs(_read(run_dir, problems), problems)]
    records = usable(latest_attempts(records), problems)
    label_columns(records)
    return list({identity(r): r for r in records}.values())  # the last of one measurement


def last_runs(records: Iterable[dict], problems: list[str]) -> list[dict]:
    """Of a job whose records come from several runs (run_id) in one file: a run that a later run
    repeats (a measurement of the same identity) is replaced by it, named in `problems`; runs
    that measured different things (another size or dtype) are all kept. One pass: a replaced
    run's records are let go as soon as a later run repeats one of them."""
    kept: dict[int, dict] = {}  # the records that may be shown, by their place in `records`
    jobs: dict[tuple, dict] = {}
    for number, r in enumerate(records):
        job = jobs.setdefault(job_of(r), {"runs": {}, "last": {}, "dropped": set()})
        run = r.get("run_id")
        places = job["runs"].setdefault(run, [])
        last = job["last"].setdefault(key := identity(r), run)
        if last != run:  # the run that first appeared later in the file replaces the other
            earlier, later = sorted((last, run), key=list(job["runs"]).index)
            job["dropped"].add(earlier)
            for place in job["runs"][earlier]:
                kept.pop(place, None)
            job["runs"][earlier].clear()
            job["last"][key] = later
        if run not in job["dropped"]:
            kept[number] = r
            places.append(number)
    for (run_dir, env, notebook), job in jobs.items():
        if job["dropped"]:
            ids = list(job["runs"])
            more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
            results.skipped(f"{Path(run_dir) / RESULTS_FILE}: {env}/{notebook} holds runs "
                            f"{', '.join(map(str, ids[:3]))}{more}; shown: run {ids[-1]}, whose "
                            "records replace the others'", problems)
    return list(kept.values())


def read_jobs(run_dir: str | os.PathLike, problems: list[str]) -> list[dict]:
    """The jobs of run.json (run, dir, env, notebook, status, error's first line); [] without
    one. An unreadable run.json, or a job not as run.schema.json declares, is named in
    `problems` (with a warning) and left out."""
    path = Path(run_dir) / rundir.MANIFEST
    if not _readable(path, problems):
        return []
    found, checker = [], schema.checker("run", "job")
    try:
        jobs = json.loads(path.read_bytes().removeprefix(results.BOM).decode("utf-8"))["jobs"]
        if not isinstance(jobs, list):
            raise TypeError(f"'jobs' is {type(jobs).__name__}, not a list")
        for number, job in enumerate(jobs, start=1):
            if not checker.valid(job) or not all(_TEXT.match(job[k]) for k in ("env", "notebook")):
                results.skipped(f"{path}: job {number} is not as gpubench writes it: "
                                f"{clip(repr(job), 80)}", problems)
                continue
            error = clip((job.get("error") or "").strip().partition("\n")[0])
            found.append({"run": Path(run_dir).name, "dir": str(run_dir), "env": job["env"],
                          "notebook": job["notebook"], "status": job["status"],
                          "error": error if _TEXT.match(error) else ""})
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        results.skipped(f"{path}: unreadable job list ({type(exc).__name__}: "
                        f"{clip(str(exc), 200)}); jobs not shown", problems)
        return []
    return found


def reportable(path: str | os.PathLike) -> bool:
    """Whether the report can read `path`: it holds results.jsonl, or run.json alone."""
    return any(os.path.lexists(Path(path) / name) for name in (RESULTS_FILE, rundir.MANIFEST))


def find_runs(run_dirs: list[str] | str | None = None) -> list[Path]:
    """Run directories to report: `run_dirs`, else $GPUBENCH_RUN_DIRS, else the newest under
    runs/."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    if not run_dirs and os.environ.get("GPUBENCH_RUN_DIRS"):
        run_dirs = os.environ["GPUBENCH_RUN_DIRS"].split(os.pathsep)
    if not run_dirs:
        root = results.runs_dir()
        found = sorted(p for p in root.glob("*") if p.name != "interactive" and reportable(p))
        if not found:
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
