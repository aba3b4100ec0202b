"""RUN_DIR/run.json, the job list of a run and how each env is reached: written atomically,
created (and locked) for a new run, and read back field by field to resume one."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from gpubench import backends, results, rundir, schema, schema_words
from gpubench import params as nb_params
from gpubench.rundir import LOCK, MANIFEST, UsageError, lock_run_dir
from gpubench.runner.targets import NEW_RUN, Target, check_notebooks, check_params

RUN_SCHEMA = schema.load("run")  # run.json's one declaration: gpubench/schemas/run.schema.json
MANIFEST_SCHEMA = max(RUN_SCHEMA["properties"]["schema"]["enum"])  # 2: "envs", status "running"
MAX_DEPTH = 32  # run.json nests 4 levels; deeper is not a file gpubench wrote


@dataclass
class Job:
    """One notebook in one env."""

    env: str
    notebook: str
    status: str = "pending"  # run.json's job statuses; "running" is claimed before it starts
    seconds: float | None = None
    error: str | None = None
    attempt: int = 0  # attempts claimed so far; the records of the current one carry it
    extra: dict | None = None  # parameters the runner adds (Multi_GPU_Scaling's virtual devices)


def save_jobs(run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    """Save the jobs in run.json atomically; a full or read-only disk is a UsageError naming it."""
    manifest["jobs"] = [asdict(j) for j in jobs]
    text = json.dumps(manifest, indent=1)
    try:
        rundir.write_atomic(run_dir / MANIFEST, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot write {run_dir / MANIFEST}: {results.write_problem(exc)}; free "
                         f"some space or make {run_dir} writable, then "
                         f"`{rundir.resume_command(run_dir)}`") from None


def check_new_out(run_dir: Path) -> None:
    """Refuse an --out that holds a run or anything else (a lone run.lock is nothing)."""
    if (run_dir / MANIFEST).is_file():
        raise UsageError(f"--out {str(run_dir)!r} already holds a run; finish it with "
                         f"`{rundir.resume_command(run_dir)}`, or choose a new --out")
    if run_dir.exists() and (not run_dir.is_dir()
                             or any(p.name != LOCK for p in run_dir.iterdir())):
        raise UsageError(f"--out {str(run_dir)!r} exists and is not a run directory; "
                         "choose a new or empty folder")


def new_run(out: str | None, profile: str, targets: dict[str, Target], notebooks: list[str],
            params: dict, stack: contextlib.ExitStack,
            named: bool = False) -> tuple[Path, dict, list[Job]]:
    """Create and lock the run directory and its manifest; refuse an --out holding anything."""
    run_id = results.new_run_id()
    run_dir = Path(out) if out else results.runs_dir() / run_id
    check_new_out(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --out {str(run_dir)!r}: {results.write_problem(exc)}; "
                         "choose a writable folder") from None
    lock_run_dir(run_dir, stack)
    if (run_dir / MANIFEST).is_file():  # another process made it between our look and our lock
        raise UsageError(f"--out {str(run_dir)!r} was just created by another gpubench run; "
                         "choose a new --out")
    manifest = {"schema": MANIFEST_SCHEMA, "run_id": run_id, "profile": profile, "params": params,
                "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "named": notebooks if named else [],
                "envs": {env: asdict(target) for env, target in targets.items()}}
    jobs = [Job(env, nb) for env in targets for nb in notebooks]
    save_jobs(run_dir, manifest, jobs)
    return run_dir, manifest, jobs


def load_run(resume: str, profile: str | None,
             stack: contextlib.ExitStack) -> tuple[Path, dict, list[Job]]:
    """Lock a run directory and read its manifest, to finish the run."""
    run_dir = Path(resume)
    path = run_dir / MANIFEST
    if not path.is_symlink() and not path.is_file():
        raise UsageError(f"--resume {str(run_dir)!r} is not a run directory (no {MANIFEST}); "
                         "give a folder written by `gpubench run`")
    lock_run_dir(run_dir, stack)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:  # a symlink loop, a folder, no permission
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}; {NEW_RUN}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise UsageError(f"{path} is empty or damaged ({type(exc).__name__}: {exc}); it is not "
                         f"a job list written by `gpubench run`: {NEW_RUN}") from None
    jobs = check_manifest(manifest, path)
    if profile is not None and profile != manifest["profile"]:
        raise UsageError(f"--profile {profile} differs from the run's profile "
                         f"{manifest['profile']}; resume without --profile")
    return run_dir, manifest, jobs


def _bad(path: Path, name: str, value, why: str) -> UsageError:
    return UsageError(f"{path}: {name} is {schema_words.shown(value)}: {why}; {NEW_RUN}")


def _too_deep(doc) -> str | None:
    """The field (named to its third level) nested deeper than MAX_DEPTH, walked iteratively."""
    stack = [(doc, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            return where
        items = (value.items() if isinstance(value, dict) else
                 enumerate(value) if isinstance(value, list) else ())
        for key, item in items:
            name = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip(".")
            stack.append((item, name if depth < 3 else where, depth + 1))
    return None


def check_manifest(manifest, path: Path) -> list[Job]:
    """The jobs of run.json, checked by its schema and this gpubench; UsageError naming a field."""
    if not isinstance(manifest, dict):
        raise _bad(path, "the file", type(manifest).__name__, "it must be a JSON object")
    if (field := _too_deep(manifest)) is not None:
        raise UsageError(f"{path}: {field} is nested deeper than {MAX_DEPTH} levels: not a job "
                         f"list written by `gpubench run`; {NEW_RUN}")
    checker = schema.checker("run")
    if not checker.valid(manifest):
        problem = schema_words.explain(RUN_SCHEMA, next(checker.errors(manifest)))
        raise _bad(path, problem.field, problem.value, f"expected {problem.wants}")
    if manifest["profile"] not in nb_params.PROFILES:
        raise _bad(path, "profile", manifest["profile"],
                   f"use one of {', '.join(nb_params.PROFILES)}")
    for i, job in enumerate(manifest["jobs"]):
        if job["notebook"] not in nb_params.NOTEBOOKS:
            raise _bad(path, f"jobs[{i}].notebook", job["notebook"], "this gpubench has no such "
                       f"notebook (it has {', '.join(nb_params.NOTEBOOKS)})")
    jobs = [Job(**job) for job in manifest["jobs"]]
    notebooks = list(dict.fromkeys(j.notebook for j in jobs))
    try:
        check_notebooks(notebooks)
        check_notebooks([scope for scope in manifest["params"] if scope != "*"])
        check_params(manifest["params"], notebooks)
    except ValueError as exc:  # UsageError, or a parameters cell that cannot be read
        raise UsageError(f"{path}: {exc}; {NEW_RUN}") from None
    manifest.setdefault("named", [])
    saved, labels = manifest.get("envs"), list(dict.fromkeys(j.env for j in jobs))
    if saved is None:  # a schema-1 run reached env ENV through kernel gpubench-ENV
        saved = manifest["envs"] = {env: asdict(Target.of({}, env)) for env in labels}
    if missing := [env for env in labels if env not in saved]:
        raise _bad(path, f"envs.{missing[0]}", None, "it must say how the env is reached")
    for env, target in saved.items():
        if target.get("backend") is not None and target["backend"] not in backends.SUPPORTED:
            raise _bad(path, f"envs.{env}.backend", target["backend"],
                       f"use one of {', '.join(backends.SUPPORTED)}")
    return jobs
