"""The report's inputs: the records of one or more run directories (each job's latest attempt,
checked by `checks`), run.json's jobs, and which folders are run directories."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from gpubench import results, schema
from gpubench.fmt import first_line
from gpubench.report.checks import usable
from gpubench.report.records import dedupe, identity, label_columns
from gpubench.results import job_of, latest_attempts

# Job statuses of run.json that mean the run has not finished them (yet).
UNFINISHED = ("running", "pending")


class ReportWriteError(ValueError):
    """The report could not be written (full or read-only disk); the message names the path."""


def _read(run_dir: str | os.PathLike, problems: list[str]) -> list[dict]:
    """The records of one run dir that can be shown (`last_runs`), tagged with it (`_run_dir`):
    none where only run.json is there (nothing was recorded). The file is read once, in one
    pass, and a record is let go as soon as a later one replaces it."""
    path = Path(run_dir)
    if not (path / "results.jsonl").exists() and (path / "run.json").is_file():
        return []
    try:
        return last_runs(_tagged(results.iter_records(path, problems, origin=True), run_dir),
                         problems)
    except results.ResultsPathError as exc:
        results.skipped(f"{exc}; its records are not shown", problems)
        return []


def _tagged(records: Iterable[dict], run_dir: str | os.PathLike) -> Iterator[dict]:
    """`records`, each tagged in place with the run dir it comes from (`_run_dir`)."""
    for record in records:
        record["_run_dir"] = str(run_dir)
        yield record


def load(run_dirs: list[str | os.PathLike], problems: list[str] | None = None) -> list[dict]:
    """Records of each job's latest attempt in every run dir that the report can use, tagged with
    their column (`_column`); the others are skipped with a warning (also in `problems`)."""
    problems = [] if problems is None else problems
    records = [record for run_dir in run_dirs for record in _read(run_dir, problems)]
    records = usable(latest_attempts(records), problems)
    label_columns(records)
    return dedupe(records)


def last_runs(records: Iterable[dict], problems: list[str]) -> list[dict]:
    """Of a job (run dir, env, notebook) whose records come from several runs (run_id) in one
    file: a run that a later run repeats (any measurement of the same identity) is replaced by
    it, and named in `problems`; runs that measured different things (another size, another
    dtype, as the H200 reference's 8192 run beside its sweep) are all kept.

    One pass as `records` stream in: a replaced run's records are let go as soon as a later run
    repeats one of them, so memory grows with the records shown, not with the records read."""
    kept: dict[int, dict] = {}  # the records that may be shown, by their place in `records`
    jobs: dict[tuple, dict] = {}
    for number, r in enumerate(records):
        # runs: each run's kept places, in file order; rank: its place in that order; last: of
        # each identity, the last run in file order that holds it (the others are replaced)
        job = jobs.setdefault(job_of(r), {"runs": {}, "rank": {}, "last": {}, "dropped": set()})
        run, rank = r.get("run_id"), job["rank"]
        rank.setdefault(run, len(rank))
        places = job["runs"].setdefault(run, [])
        last = job["last"].setdefault(key := identity(r), run)
        if last != run:
            earlier, later = sorted((last, run), key=rank.__getitem__)
            job["dropped"].add(earlier)
            for place in job["runs"][earlier]:
                kept.pop(place, None)
            job["runs"][earlier].clear()
            job["last"][key] = later
        if run not in job["dropped"]:
            kept[number] = r
            places.append(number)
    for (run_dir, env, notebook), job in jobs.items():
        if job["dropped"]:  # one line per job, however many runs it holds
            ids = list(job["rank"])
            results.skipped(f"{Path(run_dir) / 'results.jsonl'}: {env}/{notebook} holds runs "
                            f"{_some(ids)}; shown: run {ids[-1]}, whose records replace the "
                            "others'", problems)
    return list(kept.values())


def _some(ids: list, named: int = 3) -> str:
    """The first `named` of `ids` and how many more ("a, b, c and 12 more")."""
    more = f" and {len(ids) - named} more" if len(ids) > named else ""
    return ", ".join(map(str, ids[:named])) + more


def read_jobs(run_dir: str | os.PathLike, problems: list[str]) -> list[dict]:
    """The jobs of run.json (run, env, notebook, status, error's first line); [] without one.

    An unreadable run.json, or a job in it that is not as its schema declares
    (gpubench/schemas/run.schema.json), is named in `problems` (with a warning) and left out.
    """
    path = Path(run_dir) / "run.json"
    if not path.exists():
        return []
    try:
        jobs = json.loads(path.read_bytes().removeprefix(results.BOM).decode("utf-8"))["jobs"]
        if not isinstance(jobs, list):
            raise TypeError(f"'jobs' is {type(jobs).__name__}, not a list")
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        results.skipped(f"{path}: unreadable job list ({type(exc).__name__}: {exc}); jobs not "
                        "shown", problems)
        return []
    found, checker = [], schema.checker("run", "job")  # a job as run.json's schema declares it
    for number, job in enumerate(jobs, start=1):
        if not checker.valid(job):
            results.skipped(f"{path}: job {number} is not as gpubench writes it: {job!r:.80}",
                            problems)
            continue
        found.append({"run": Path(run_dir).name, "dir": str(run_dir), "env": job["env"],
                      "notebook": job["notebook"],
                      "status": job["status"], "error": first_line(job.get("error"))})
    return found


def job_row(job: dict) -> list[str]:
    """A job as the report's table row: [run, env, notebook, status, error]."""
    return [job["run"], job["env"], job["notebook"], job["status"], job["error"]]


def reportable(path: str | os.PathLike) -> bool:
    """Whether the report can read `path`: it holds results.jsonl, or run.json alone (a run that
    recorded nothing). (`runner.is_run_dir` asks another question: did `gpubench run` start it.)"""
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
        found = sorted(p for p in root.glob("*") if p.name != "interactive" and reportable(p))
        if not found:
            raise FileNotFoundError(
                f"no run directory with results under {root}; "
                "run `gpubench run` (in a checkout: `make run` or `make quick`) first, or pass "
                "run_dirs=[...]")
        run_dirs = found[-1:]
    paths: dict[Path, Path] = {}  # each folder once, however it is written
    for path in map(Path, run_dirs):
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist; pass a folder written by "
                                    "`gpubench run`")
        if not reportable(path):
            raise FileNotFoundError(f"{path} is not a run directory (no results.jsonl or "
                                    "run.json); pass a folder written by `gpubench run`")
        if (same := paths.setdefault(path.resolve(), path)) is not path:
            twice = (f"{path} is given twice" if path == same
                     else f"{path} and {same} are the same folder")
            warnings.warn(f"{twice}; it is read once", stacklevel=2)
    return list(paths.values())

