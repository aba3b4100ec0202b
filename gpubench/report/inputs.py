"""The report's inputs: each job's latest records, checked, in columns; run.json; the queries."""

from __future__ import annotations

import itertools
import json
import os
import re
import warnings
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

from gpubench import backends, results, rundir, schema, schema_words
from gpubench.fmt import clip, fmt
from gpubench.plots import column_of, sweep_records
from gpubench.results import RESULTS_FILE, job_of, latest_attempts

MODEL_TITLES = {"mlp_h1000": "MNIST MLP h1000", "mnist_cnn": "MNIST CNN",
                "cifar_cnn": "CIFAR-10 CNN"}
# What makes one measurement: a later record with the same values replaces it (hand re-runs).
IDENTITY = ("_column", "benchmark", "notebook", "device", "size", "method", "dtype", "tf32",
            "model", "factor", "batch_size", "precision", "jit_compile", "steps_per_execution",
            "input_pipeline", "strategy", "replicas", "workers")
_VENDOR = re.compile(r"\((R|TM)\)|\b(Intel|AMD|NVIDIA|Processor|CPU|\d+-Core)\b|@.*", re.I)
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
                     f"{schema_words.shown(problem.value)}")
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
            more = f" and {len(mine) - 3} more" if len(mine) > 3 else ""
            rundir.skipped(f"{Path(run_dir) / RESULTS_FILE}: {env}/{notebook} holds runs "
                            f"{', '.join(map(str, list(mine)[:3]))}{more}; shown: run "
                            f"{list(mine)[-1]}, whose records replace the others'", problems)
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
    run_dirs = [run_dirs] if isinstance(run_dirs, (str, os.PathLike)) else run_dirs or [
        d for d in os.environ.get("GPUBENCH_RUN_DIRS", "").split(os.pathsep) if d]
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


def model_title(model: str) -> str:
    """A model's name for a reader: the book's models by title, a learner's own by its name."""
    return MODEL_TITLES.get(model, model)


def model_rank(model: str) -> tuple[int, str]:
    """A model's place in the book's order (unknown models after, by name)."""
    return [*MODEL_TITLES, model].index(model), model


def backend_of(record: dict) -> str:
    """The backend that made a record."""
    return record.get("backend") or "tensorflow"


def backend_rank(name: str) -> tuple[int, str]:
    """Sort key of a backend: the supported ones in their order, then the others by name."""
    return [*backends.SUPPORTED, name].index(name), name


def cpu_env(backend: str) -> str:
    """The label of `backend`'s CPU env: "cpu" for TensorFlow, "jax-cpu" for JAX."""
    return backends.LABEL_PREFIX.get(backend, f"{backend}-") + "cpu"


def machine_of(record: dict) -> str:
    """The machine that made a record, as `label_columns` named it."""
    return record.get("_machine") or record["environment"].get("hostname") or "machine"


def label_columns(records: list[dict]) -> None:
    """Label each record's `_machine` (told apart by hardware, then OS) and `_column`."""
    def kind(r: dict) -> tuple[str, str]:  # "16-core Xeon, H200" and the OS
        env = r["environment"]
        cpu = " ".join(_VENDOR.sub(" ", str(env.get("cpu_model") or "")).split()) or "CPU"
        gpus = [_VENDOR.sub("", str(g.get("name") or "GPU")).strip()
                for g in env.get("gpus") or [] if isinstance(g, dict)]
        return (", ".join([f"{fmt(env.get('cpu_count'), '')}-core {cpu}", *gpus]),
                env.get("os") or "OS unknown")

    kinds: dict[str, set] = defaultdict(set)
    for r in records:
        kinds[machine_of(r)].add(kind(r))
    pairs: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        same = kinds[host := machine_of(r)]
        told = kind(r)[:1] if len({k[0] for k in same}) == len(same) else kind(r)
        r["_machine"] = host if len(same) == 1 else f"{host} ({', '.join(told)})"
        pairs[(r["_machine"], r["env"])].append(r)
    for (machine, env), mine in pairs.items():
        names, runs = {backend_of(r) for r in mine}, {r["_run_dir"] for r in mine}
        for r in mine:
            r["_column"] = (f"{machine} · {env}"
                            + f" ({backends.backend_title(backend_of(r))})" * (len(names) > 1)
                            + f" ({Path(r['_run_dir']).name})" * (len(runs) > 1))


def identity(record: dict) -> tuple:
    """What makes one measurement (IDENTITY's fields, as text)."""
    return tuple(str(record.get(k)) for k in IDENTITY)


def columns(records: list[dict]) -> list[str]:
    """Column labels in a stable order: by machine and backend, each CPU env before the others."""
    keys = {column_of(r): (machine_of(r), backend_rank(backend_of(r)),
                           r["env"] != cpu_env(backend_of(r)), r["env"], column_of(r))
            for r in records}
    return sorted(keys, key=keys.get)


def baselines(records: list[dict]) -> dict[str, str | None]:
    """Each column's baseline: its machine's CPU env of its backend (in the book's mode first)."""
    other_mode = {column_of(r) for r in book_train(records) if r.get("precision") not in (
        None, "float32") or r.get("jit_compile") and backend_of(r) != "jax"}
    first: dict[tuple, tuple] = {}  # (machine, backend) -> the best CPU column's rank
    for r in records:
        if r["env"] == cpu_env(backend_of(r)):
            rank = (column_of(r) in other_mode, str(r.get("timestamp")), column_of(r))
            key = (machine_of(r), backend_of(r))
            first[key] = min(first.get(key, rank), rank)
    bases = {column_of(r): first.get((machine_of(r), backend_of(r)), (None,) * 3)[2]
             for r in records}
    return {column: None if base == column else base for column, base in bases.items()}


def pairings(records: list[dict]) -> dict[str, str | None]:
    """The column whose CPU matmul timings pair with each column's: its own, else its baseline."""
    timed = {column_of(r) for r in sweep_records(records) if r["device"] == "cpu"}
    return {column: column if column in timed else base if base in timed else None
            for column, base in baselines(records).items()}


def crossover(points: list[tuple[int, float]]) -> int | None:
    """The size from which the GPU wins (speedup above 1) at every larger size, if any."""
    wins = itertools.takewhile(lambda point: point[1] > 1, sorted(points, reverse=True))
    return min((n for n, _ in wins), default=None)


def loaded(record: dict) -> str:
    """"load 6.5 on 2 cores" where a load average of the record exceeded the cores; else ""."""
    loads = [x for x in [record.get("load_average"), *(record.get("epoch_load_average") or [])]
             if isinstance(x, (int, float))]
    cores = record["environment"].get("cpu_count")
    if not loads or not cores or max(loads) <= cores:
        return ""
    return f"load {fmt(max(loads), '.1f')} on {cores} cores"


def book_train(records: list[dict]) -> list[dict]:
    """Train records of the book's chapters (not Speed_Factors variants)."""
    return [r for r in records if r["benchmark"] == "train" and r.get("factor") is None]
