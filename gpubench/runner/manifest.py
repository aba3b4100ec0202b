"""A run directory's job list, RUN_DIR/run.json: its jobs and how each env is reached, written
atomically, created (and locked) for a new run, and read back field by field to resume one."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from gpubench import backends, envs, results, rundir, schema
from gpubench import params as nb_params
from gpubench.rundir import LOCK, UsageError, lock_run_dir
from gpubench.runner.arguments import NEW_RUN, check_notebooks, check_params
from gpubench.runner.targets import Target

MANIFEST = "run.json"
RUN_SCHEMA = schema.load("run")  # run.json's one declaration: gpubench/schemas/run.schema.json
MANIFEST_SCHEMA = max(RUN_SCHEMA["properties"]["schema"]["enum"])  # 2: "envs", status "running"
JOB_STATUSES = tuple(RUN_SCHEMA["$defs"]["job"]["properties"]["status"]["enum"])


@dataclass
class Job:
    """One notebook in one env."""

    env: str
    notebook: str
    status: str = "pending"  # one of JOB_STATUSES; "running" is claimed before it starts
    seconds: float | None = None
    error: str | None = None
    attempt: int = 0  # attempts claimed so far; the records of the current one carry it
    extra: dict | None = None  # parameters the runner adds (Multi_GPU_Scaling's virtual devices)


def is_run_dir(path: Path) -> bool:
    """Whether `path` holds a run started by `gpubench run`."""
    return (path / MANIFEST).is_file()


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Save run.json atomically; a full or read-only disk is a UsageError naming the file."""
    text = json.dumps(manifest, indent=1)
    try:
        rundir.write_atomic(run_dir / MANIFEST, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot write {run_dir / MANIFEST}: {results.write_problem(exc)}; free "
                         f"some space or make {run_dir} writable, then "
                         f"`gpubench run --resume {run_dir}`") from None


def save_jobs(run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    """Save the jobs in run.json (UsageError naming it when it cannot be written)."""
    manifest["jobs"] = [asdict(j) for j in jobs]
    write_manifest(run_dir, manifest)


def target_of(manifest: dict, env: str) -> Target:
    """How env `env` of a run is reached (a run without "envs": the kernel gpubench-ENV)."""
    saved = manifest.get("envs", {}).get(env)
    return Target(**saved) if saved else Target(kernel=envs.kernel_name(env))


def check_new_out(run_dir: Path) -> None:
    """Refuse an --out that holds a run or anything else (a lone run.lock is nothing)."""
    if is_run_dir(run_dir):
        raise UsageError(f"--out {str(run_dir)!r} already holds a run; finish it with "
                         f"--resume {run_dir}, or choose a new --out")
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
    if is_run_dir(run_dir):  # another process made it between our look and our lock
        raise UsageError(f"--out {str(run_dir)!r} was just created by another gpubench run; "
                         "choose a new --out")
    manifest = {"schema": MANIFEST_SCHEMA, "run_id": run_id, "profile": profile, "params": params,
                "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "named": notebooks if named else [],
                "envs": {env: target.saved() for env, target in targets.items()}}
    jobs = [Job(env, nb) for env in targets for nb in notebooks]
    save_jobs(run_dir, manifest, jobs)
    return run_dir, manifest, jobs


def load_run(resume: str, profile: str | None,
             stack: contextlib.ExitStack) -> tuple[Path, dict, list[Job]]:
    """Lock a run directory and read its manifest, to finish the run."""
    run_dir = Path(resume)
    if not is_run_dir(run_dir):
        raise UsageError(f"--resume {str(run_dir)!r} is not a run directory (no {MANIFEST}); "
                         "give a folder written by `gpubench run`")
    lock_run_dir(run_dir, stack)
    path = run_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise UsageError(f"{path} is empty or damaged ({type(exc).__name__}: {exc}); it is not "
                         f"a job list written by `gpubench run`: {NEW_RUN}") from None
    jobs = check_manifest(manifest, path)
    if profile is not None and profile != manifest["profile"]:
        raise UsageError(f"--profile {profile} differs from the run's profile "
                         f"{manifest['profile']}; resume without --profile")
    return run_dir, manifest, jobs


def _bad(path: Path, name: str, value, why: str) -> UsageError:
    """The error of a run.json field that cannot be resumed."""
    return UsageError(f"{path}: {name} is {schema.shown(value)}: {why}; {NEW_RUN}")


def _schema_error(path: Path, error) -> UsageError:
    """jsonschema's error of run.json as one line naming the field ("jobs[0].attempt")."""
    problem = schema.explain(RUN_SCHEMA, error)
    return _bad(path, problem.field, problem.value, f"expected {problem.wants}")


def check_manifest(manifest, path: Path) -> list[Job]:
    """run.json checked against its schema (gpubench/schemas/run.schema.json), then what only
    this gpubench knows (profiles, notebooks, parameters, backends): a run dir of an older
    gpubench, a hand edit. Its jobs; a bad field is a UsageError naming it and saying to start
    a new run."""
    if not isinstance(manifest, dict):
        raise _bad(path, "the file", type(manifest).__name__, "it must be a JSON object")
    checker = schema.checker("run")
    if not checker.valid(manifest):
        raise _schema_error(path, next(checker.errors(manifest)))
    if manifest["profile"] not in nb_params.PROFILES:
        raise _bad(path, "profile", manifest["profile"],
                   f"use one of {', '.join(nb_params.PROFILES)}")
    manifest.setdefault("named", [])
    jobs = [_check_job(job, f"jobs[{i}]", path) for i, job in enumerate(manifest["jobs"])]
    try:
        check_notebooks(list(dict.fromkeys(j.notebook for j in jobs)))
        for scope in manifest["params"]:
            if scope != "*":
                check_notebooks([scope])
        check_params(manifest["params"], list(dict.fromkeys(j.notebook for j in jobs)))
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}; {NEW_RUN}") from None
    manifest["envs"] = _saved_targets(manifest.get("envs"), jobs, path)
    return jobs


def _check_job(job: dict, where: str, path: Path) -> Job:
    """One entry of run.json's "jobs" (its schema checked) as a Job of a notebook this gpubench
    has (`where` names it)."""
    if job["notebook"] not in nb_params.NOTEBOOKS:
        raise _bad(path, f"{where}.notebook", job["notebook"], "this gpubench has no such "
                   f"notebook (it has {', '.join(nb_params.NOTEBOOKS)})")
    return Job(**job)


def _saved_targets(saved, jobs: list[Job], path: Path) -> dict:
    """run.json's "envs" (its schema checked), each backend one this gpubench has; a schema-1
    run reached env ENV through kernel gpubench-ENV."""
    labels = list(dict.fromkeys(j.env for j in jobs))
    if saved is None:
        return {env: Target(kernel=envs.kernel_name(env)).saved() for env in labels}
    for env in labels:
        if env not in saved:
            raise _bad(path, f"envs.{env}", None, "it must say how the env is reached")
    for env, target in saved.items():
        if target.get("backend") is not None and target["backend"] not in backends.SUPPORTED:
            raise _bad(path, f"envs.{env}.backend", target["backend"],
                       f"use one of {', '.join(backends.SUPPORTED)}")
    return saved
