"""A run directory's job list, RUN_DIR/run.json: its jobs and how each env is reached, written
atomically, created (and locked) for a new run, and read back field by field to resume one."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from gpubench import backends, envs, results, rundir
from gpubench import params as nb_params
from gpubench.rundir import LOCK, UsageError, lock_run_dir
from gpubench.runner.arguments import NEW_RUN, check_notebooks, check_params
from gpubench.runner.targets import Target

MANIFEST = "run.json"
MANIFEST_SCHEMA = 2  # 2: "envs" (how each env is reached) and the job status "running"
JOB_STATUSES = ("pending", "running", "ok", "failed", "skipped", "interrupted")


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
    shown = json.dumps(value) if not isinstance(value, str) else repr(value)
    return UsageError(f"{path}: {name} is {shown[:80]}: {why}; {NEW_RUN}")


# The JSON types of a job's and of an env's fields (run.json's "jobs" and "envs").
_JOB_TYPES = {"env": (str,), "notebook": (str,), "status": (str,),
              "seconds": (int, float, type(None)), "error": (str, type(None)), "attempt": (int,),
              "extra": (dict, type(None))}
_TARGET_TYPES = {"how": (str,), "kernel": (str, type(None)), "python": (str, type(None)),
                 "backend": (str, type(None)), "devices": (list, type(None)),
                 "tensorflow_importable": (bool, type(None)), "diagnosis": (str, type(None))}


def _check_types(given: dict, types: dict[str, tuple], where: str, path: Path) -> None:
    """Each field of `given` named in `types` has one of its JSON types (true is no int)."""
    for name, allowed in types.items():
        if name in given and type(given[name]) not in allowed:
            raise _bad(path, f"{where}.{name}", given[name], "wrong type: expected " + " or ".join(
                "null" if t is type(None) else t.__name__ for t in allowed))


def check_manifest(manifest, path: Path) -> list[Job]:
    """run.json's values checked field by field (a run dir of an older gpubench, a hand edit);
    its jobs. A bad one is a UsageError naming the field and saying to start a new run."""
    if not isinstance(manifest, dict):
        raise _bad(path, "the file", type(manifest).__name__, "it must be a JSON object")
    for name in ("schema", "run_id", "profile", "params", "jobs"):
        if name not in manifest:
            raise _bad(path, name, None, "the field is missing")
    schema = manifest["schema"]
    if isinstance(schema, bool) or schema not in (1, MANIFEST_SCHEMA):
        raise _bad(path, "schema", schema, f"this gpubench resumes schemas 1 and {MANIFEST_SCHEMA}")
    if not isinstance(manifest["run_id"], str) or not manifest["run_id"]:
        raise _bad(path, "run_id", manifest["run_id"], "it must be a non-empty string")
    if manifest["profile"] not in nb_params.PROFILES:
        raise _bad(path, "profile", manifest["profile"],
                   f"use one of {', '.join(nb_params.PROFILES)}")
    params = manifest["params"]
    if not isinstance(params, dict) or not all(isinstance(v, dict) for v in params.values()):
        raise _bad(path, "params", params, "it must map \"*\" or a notebook to {name: value}")
    named = manifest.setdefault("named", [])
    if not isinstance(named, list) or not all(isinstance(n, str) for n in named):
        raise _bad(path, "named", named, "it must be a list of notebook names")
    if not isinstance(manifest["jobs"], list) or not manifest["jobs"]:
        raise _bad(path, "jobs", manifest["jobs"], "it must be a non-empty list of jobs")
    jobs = [_check_job(job, f"jobs[{i}]", path) for i, job in enumerate(manifest["jobs"])]
    try:
        check_notebooks(list(dict.fromkeys(j.notebook for j in jobs)))
        for scope in params:
            if scope != "*":
                check_notebooks([scope])
        check_params(params, list(dict.fromkeys(j.notebook for j in jobs)))
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}; {NEW_RUN}") from None
    manifest["envs"] = _saved_targets(manifest.get("envs"), jobs, path)
    return jobs


def _check_job(job, where: str, path: Path) -> Job:
    """One entry of run.json's "jobs", checked field by field (`where` names it)."""
    if not isinstance(job, dict):
        raise _bad(path, where, job, "a job is a JSON object")
    if unknown := set(job) - set(_JOB_TYPES):
        raise _bad(path, f"{where}.{sorted(unknown)[0]}", job[sorted(unknown)[0]],
                   "not a field of a job")
    for name in ("env", "notebook"):
        if name not in job:
            raise _bad(path, f"{where}.{name}", None, "the field is missing")
    _check_types(job, _JOB_TYPES, where, path)
    if job.get("attempt", 0) < 0:
        raise _bad(path, f"{where}.attempt", job["attempt"], "it must be 0 or more")
    if job.get("status", "pending") not in JOB_STATUSES:
        raise _bad(path, f"{where}.status", job["status"],
                   f"use one of {', '.join(JOB_STATUSES)}")
    if job["notebook"] not in nb_params.NOTEBOOKS:
        raise _bad(path, f"{where}.notebook", job["notebook"], "this gpubench has no such "
                   f"notebook (it has {', '.join(nb_params.NOTEBOOKS)})")
    return Job(**job)


def _saved_targets(saved, jobs: list[Job], path: Path) -> dict:
    """run.json's "envs", checked; a schema-1 run reached env ENV through kernel gpubench-ENV."""
    labels = list(dict.fromkeys(j.env for j in jobs))
    if saved is None:
        return {env: Target(kernel=envs.kernel_name(env)).saved() for env in labels}
    if not isinstance(saved, dict):
        raise _bad(path, "envs", saved, "it must map each env to how it is reached")
    names = {f.name for f in fields(Target)} - {"named"}
    for env in dict.fromkeys([*labels, *saved]):  # every env a job runs in, and any other
        target = saved.get(env)
        if not isinstance(target, dict) or set(target) - names:
            raise _bad(path, f"envs.{env}", target, "it must say how the env is reached")
        _check_types(target, _TARGET_TYPES, f"envs.{env}", path)
        if target.get("how") not in ("env", "kernel", "here"):
            raise _bad(path, f"envs.{env}.how", target.get("how"), "use env, kernel or here")
        key = "python" if target["how"] == "here" else "kernel"
        if not target.get(key):
            raise _bad(path, f"envs.{env}.{key}", target.get(key), "it must be a non-empty string")
        if not all(isinstance(d, str) for d in target.get("devices") or []):
            raise _bad(path, f"envs.{env}.devices", target["devices"],
                       "it must be a list of device names")
        if target.get("backend") is not None and target["backend"] not in backends.SUPPORTED:
            raise _bad(path, f"envs.{env}.backend", target["backend"],
                       f"use one of {', '.join(backends.SUPPORTED)}")
    return saved
