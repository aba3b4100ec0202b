"""`gpubench run`: every notebook, in every env's kernel, with papermill; then the report.

RUN_DIR/run.json holds the jobs and how each env is reached (`--resume` reads it);
RUN_DIR/run.lock is flock-ed by the running process. An env is a registered kernel
(gpubench-ENV, or any kernel with `--kernel`) or, with `--here`, a kernel of the Python that
runs gpubench. A job's attempt is claimed in run.json before its notebook starts. Kernels die
with the runner; a first Ctrl-C or SIGTERM interrupts the kernel, so the notebook keeps what
it measured; a second one stops at once.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.util
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from gpubench import backends, envs, machine, notebook, results, rundir
from gpubench import params as nb_params  # `params` names -p values here
from gpubench.rundir import LOCK, UsageError, lock_run_dir

# papermill -> nbformat -> jsonschema builds rfc3987_syntax's URI grammar at import: ~3.5 s of
# CPU before the first notebook, for a format check neither of them uses.
sys.modules.setdefault("rfc3987_syntax", None)

MANIFEST = "run.json"
MANIFEST_SCHEMA = 2  # 2: "envs" (how each env is reached) and the job status "running"
JOB_STATUSES = ("pending", "running", "ok", "failed", "skipped", "interrupted")
HERE_KERNEL = "gpubench-here"  # the kernel spec `--here` makes on the fly
# Parameters the runner sets itself, and the option a user gives instead.
RUNNER_PARAMS = {"profile": "--profile", "results_path": "--out", "env_name": "--envs"}
NEW_RUN = "start a new run with `gpubench run`"
_ANSI = notebook.ANSI  # colours and cursor moves (Keras's summary, via rich): kept out of logs
# Lines of a kernel's stderr the run's log leaves out: ipykernel's notice that its channels are
# not encrypted (they are where the kernel and jupyter_client can; it says nothing about the
# run). Every other line, errors included, is passed on.
KERNEL_NOISE = (b"Kernel is running over TCP without encryption",)
# Run in every ipykernel the runner starts, before the notebook: rich (Keras's model summary)
# shows in Jupyter as HTML plus a text/plain copy full of ANSI colour codes, which no
# environment variable turns off there; this stores the text copy plain.
PLAIN_RICH_TEXT = "import gpubench.notebook as _gb_nb; _gb_nb.store_rich_text_plain(); del _gb_nb"


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


@dataclass
class Target:
    """How an env is reached, and what its Python was found to run (run.json's "envs")."""

    # "env": a gpubench-ENV kernel (`make setup`); "kernel": `--kernel NAME`; "here": `--here`
    how: str = "env"
    kernel: str | None = None  # the Jupyter kernel's name ("env" and "kernel")
    python: str | None = None  # the Python (how == "here"; for a kernel, its argv[0])
    backend: str | None = None  # "tensorflow" | "jax"; None before the probe
    devices: list[str] | None = None  # what the backend sees ("cpu", "gpu:0", ...); None: unknown
    tensorflow_importable: bool | None = None
    diagnosis: str | None = None  # why it sees no GPU
    named: bool = field(default=False, repr=False)  # asked for by name (not saved)

    def saved(self) -> dict:
        """The fields run.json keeps."""
        return {k: v for k, v in asdict(self).items() if k != "named"}

    @property
    def gpus(self) -> list[str]:
        """The GPUs the backend sees ([] when unknown)."""
        return [d for d in self.devices or [] if d.startswith("gpu")]


def notebooks_dir() -> Path:
    """The folder of the source notebooks (the checkout's, else the ones a wheel installed)."""
    return envs.notebooks_dir()


# ---------------------------------------------------------------- arguments

def split_names(text: str | None) -> list[str] | None:
    """"a,b" -> ["a", "b"]; None stays None."""
    if text is None:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError(f"empty list {text!r}; give comma-separated names")
    return names


def check_notebooks(names: list[str] | None) -> list[str]:
    """The notebooks to run, in the canonical order; unknown or missing ones are a usage error."""
    unknown = [n for n in names or [] if n not in nb_params.NOTEBOOKS]
    if unknown:
        raise UsageError(f"unknown notebook(s) {', '.join(unknown)}; "
                         f"use some of {', '.join(nb_params.NOTEBOOKS)}")
    chosen = [n for n in nb_params.NOTEBOOKS if names is None or n in names]
    if missing := [n for n in chosen if not (notebooks_dir() / f"{n}.ipynb").is_file()]:
        raise UsageError(f"notebook(s) {', '.join(missing)} missing from {notebooks_dir()}; "
                         "restore them (git checkout notebooks) or leave them out with --notebooks")
    return chosen


def check_backend(value: str | None, where: str = "") -> str:
    """The Keras backend a kernel will load (`value`, its KERAS_BACKEND, else Keras's own rule);
    UsageError naming `where` for one gpubench cannot run (torch, a typo)."""
    try:
        return (backends.check_name(value.strip()) if value and value.strip()
                else backends.requested())
    except backends.BackendError as exc:
        raise UsageError(f"{where}: {exc}" if where else str(exc)) from None


def env_label(backend: str, seen: list[str]) -> str:
    """An env's label from its backend and the devices it sees: cpu, gpu, jax-cpu, jax-gpu."""
    kind = "gpu" if any(d.startswith("gpu") for d in seen) else "cpu"
    return backends.LABEL_PREFIX.get(backend, f"{backend}-") + kind


def _kernel_spec(name: str):
    """jupyter_client's KernelSpec of kernel `name`, or None when no such kernel exists."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel  # noqa: PLC0415

    try:
        return KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        return None


def _probe(target: Target, env: dict[str, str]) -> str | None:
    """Fill `target` from `PYTHON -m gpubench doctor --json` run with `env`; the error, if any."""
    info = envs.probe_python([target.python], env=env)
    if info.get("error"):
        return str(info["error"]).strip().splitlines()[-1]
    try:
        target.backend = backends.check_name(str(info["backend"]))
        target.devices = [str(d) for d in info["devices"]]
    except (KeyError, TypeError, ValueError) as exc:
        return f"its `gpubench doctor --json` names no backend or devices ({exc})"
    target.tensorflow_importable = bool(info.get("tensorflow_importable"))
    target.diagnosis = info.get("diagnosis") or None
    return None


# What `--here` needs in the Python that runs gpubench, and the pip name of each.
HERE_NEEDS = {"ipykernel": "ipykernel", "papermill": "papermill", "keras": "keras"}


def here_target() -> tuple[str, Target]:
    """`--here`: the env of the Python that runs gpubench, labelled by probing it."""
    python = sys.executable
    for module, package in HERE_NEEDS.items():
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"--here: {module} is not installed in {python}; install it "
                             f"(`{python} -m pip install {package}`) or run without --here in the "
                             "envs `make setup` creates")
    check_backend(os.environ.get("KERAS_BACKEND"), "--here")
    target = Target(how="here", python=python, named=True)
    if error := _probe(target, _here_env(target)):
        raise UsageError(f"--here: {python} cannot run gpubench ({error}); fix that env, or run "
                         "without --here in the envs `make setup` creates")
    return env_label(target.backend, target.devices), target


def kernel_target(name: str) -> tuple[str, Target]:
    """`--kernel NAME`: an existing Jupyter kernel, labelled by probing the Python it runs."""
    from jupyter_client.kernelspec import KernelSpecManager  # noqa: PLC0415

    spec = _kernel_spec(name)
    if spec is None:
        known = ", ".join(sorted(KernelSpecManager().find_kernel_specs())) or "none"
        raise UsageError(f"--kernel {name!r}: no such Jupyter kernel; use one of: {known} "
                         "(`jupyter kernelspec list`), or --here")
    python = spec.argv[0] if spec.argv else None
    check_backend(spec.env.get("KERAS_BACKEND") or os.environ.get("KERAS_BACKEND"),
                  f"--kernel {name}")
    if not python:
        raise UsageError(f"--kernel {name!r}: its kernel.json has an empty argv; "
                         "use another kernel")
    target = Target(how="kernel", kernel=name, python=python, named=True)
    if error := _probe(target, {**os.environ, **spec.env}):
        raise UsageError(f"--kernel {name!r}: its Python {python} cannot run gpubench ({error}); "
                         "install gpubench there, or use another kernel")
    return env_label(target.backend, target.devices), target


def check_envs(names: list[str] | None) -> dict[str, Target]:
    """The envs to run, each a gpubench-ENV kernel: by default those set up (what `gpubench envs`
    lists); an unknown name, or one not set up, is a usage error saying what to do."""
    specs = envs.kernel_specs()
    if names is None:
        if not specs:
            raise UsageError("no env is set up (no Jupyter kernel named "
                             f"{envs.kernel_name('ENV')}); run `make setup`, or "
                             "`gpubench run --here` to use this Python")
        # the book's TensorFlow envs; other backends' envs only when named (--envs jax-cpu)
        book = {env: spec for env, spec in specs.items() if envs.backend_of(env) == "tensorflow"}
        return {env: _standard_target(env, spec, named=False)
                for env, spec in (book or specs).items()}
    known = list(dict.fromkeys([*envs.STANDARD_ENVS, *sorted(specs)]))
    if unknown := [n for n in names if n not in known]:
        raise UsageError(f"unknown env(s) {', '.join(unknown)}; use some of {', '.join(known)} "
                         f"(an env is a Jupyter kernel named {envs.kernel_name('ENV')})")
    targets = {}
    for env in dict.fromkeys(names):
        if env not in specs:
            smi = machine.nvidia_smi_gpus()
            if envs.is_gpu_env(env) and not smi:
                found = "not found" if smi is None else "lists none"
                raise UsageError(f"--envs {env}: this machine has no NVIDIA GPU (nvidia-smi "
                                 f"{found}); leave {env} out (`gpubench envs` lists the envs "
                                 "set up)")
            raise UsageError(f"--envs {env}: env {env!r} is not set up (no kernel "
                             f"{envs.kernel_name(env)}); create it with "
                             f"{envs.SETUP_COMMANDS.get(env, '`make setup`')}, or leave it out")
        targets[env] = _standard_target(env, specs[env], named=True)
    return targets


def _standard_target(env: str, spec: dict, named: bool) -> Target:
    """The Target of a gpubench-ENV kernel (from envs.kernel_specs), its backend from its spec."""
    backend = check_backend(spec["env"].get("KERAS_BACKEND") or os.environ.get("KERAS_BACKEND"),
                            f"kernel {spec['kernel']}")
    return Target(kernel=spec["kernel"], python=spec["argv"][0] if spec["argv"] else None,
                  backend=backend, named=named)


def check_reachable(targets: dict[str, Target], path: Path) -> None:
    """On resume: every env's kernel or Python still exists, else a UsageError naming the field."""
    for env, target in targets.items():
        if target.how == "here":
            if not target.python or not Path(target.python).exists():
                raise UsageError(f"{path}: envs.{env}.python {target.python!r} no longer exists; "
                                 f"{NEW_RUN}")
        elif _kernel_spec(target.kernel or "") is None:
            raise UsageError(f"{path}: envs.{env}.kernel {target.kernel!r} is no longer a Jupyter "
                             f"kernel; register it again (`make setup`), or {NEW_RUN}")


def env_problems(targets: dict[str, Target]) -> dict[str, tuple[str, str]]:
    """Probe what must be known before the first kernel (a GPU env's GPUs, a non-TensorFlow
    env's TensorFlow); return env -> (status, why) for envs that cannot run. A GPU env named on
    the command line that sees no GPU is a usage error, with the diagnosis."""
    problems: dict[str, tuple[str, str]] = {}
    specs = {spec["kernel"]: spec for spec in envs.kernel_specs().values()}
    for env, target in targets.items():
        if target.how != "env":
            continue  # `--here` and `--kernel` were probed when chosen
        spec = specs.get(target.kernel)
        if spec is None:
            setup = envs.SETUP_COMMANDS.get(env, "`make setup`")
            problems[env] = ("skipped", f"env {env!r} is not set up (no kernel {target.kernel}); "
                                        f"create it with {setup}")
            continue
        if (foreign := envs.foreign_kernel(spec)) is not None:
            problems[env] = ("skipped", foreign)
            continue
        if target.backend is None or not target.python:  # a run of an older gpubench
            fresh = _standard_target(env, spec, target.named)
            target.backend, target.python = fresh.backend, target.python or fresh.python
        gpu = envs.is_gpu_env(env)
        if not gpu and target.backend == "tensorflow":
            target.devices, target.tensorflow_importable = ["cpu"], True  # a CPU TensorFlow env
            continue
        if error := _probe(target, {**os.environ, **spec["env"]}):
            problems[env] = ("failed", f"its Python {target.python} cannot run gpubench: {error}")
        elif gpu and not target.gpus:
            why = target.diagnosis or f"its {target.backend} sees no GPU"
            if target.named:
                raise UsageError(f"--envs {env}: {target.backend} in this env sees no GPU; "
                                 f"leave {env} out. " + " ".join(why.split()))
            problems[env] = ("failed", why)
    return problems


def _gpu_asked(name: object) -> str | None:
    """"gpu:N" when a device name asks for a GPU ("gpu", "/GPU:1", ...), else None."""
    match = re.fullmatch(r"/?(?:device:)?gpu(?::(\d+))?", str(name).strip().lower())
    return None if match is None else f"gpu:{int(match[1] or 0)}"


def _given(params: dict[str, dict], notebook: str) -> dict:
    """The -p values that reach `notebook` ("NOTEBOOK:" ones over the others)."""
    names = nb_params.parameter_names(notebook)
    return {name: value for scope in ("*", notebook)
            for name, value in params.get(scope, {}).items() if name in names}


def check_runnable(targets: dict[str, Target], notebooks: list[str], params: dict[str, dict],
                   problems: dict[str, tuple[str, str]]) -> None:
    """Refuse, before any kernel, -p values an env cannot run: a GPU it does not have, or what
    its backend lacks (tf.data without TensorFlow)."""
    for env, target in targets.items():
        if env in problems or target.devices is None:
            continue
        for nb in notebooks:
            given = _given(params, nb)
            for name in ("device", "devices"):
                value = given.get(name)
                asked = [_gpu_asked(v) for v in (value if isinstance(value, list) else [value])]
                if missing := [a for a in asked if a and a not in target.devices]:
                    has = f"no {missing[0]}" if target.gpus else "no GPU"
                    raise UsageError(
                        f"-p {name}={json.dumps(value)} for {nb}: env {env} has {has} "
                        f"({target.backend} there sees {', '.join(target.devices)}); use a GPU "
                        f"env (`gpubench envs` lists them) or drop -p {name}")
            try:
                nb_params.check_for_backend(nb, given, target.backend,
                                            bool(target.tensorflow_importable))
            except ValueError as exc:
                raise UsageError(f"-p for {nb} in env {env}: {exc}") from None


def parse_params(items: list[str] | None) -> dict[str, dict]:
    """--param [NOTEBOOK:]NAME=VALUE items -> {notebook or "*": {name: value}}; values as JSON."""
    parsed: dict[str, dict] = {}
    for item in items or []:
        head, sep, value = item.partition("=")
        target, _, name = head.rpartition(":")
        target = target or "*"
        if not sep or not name:
            raise UsageError(f"bad --param {item!r}; write NAME=VALUE or NOTEBOOK:NAME=VALUE")
        if target != "*":
            check_notebooks([target])
        if name in RUNNER_PARAMS:
            raise UsageError(f"-p {name} belongs to the runner; use {RUNNER_PARAMS[name]} instead")
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
        parsed.setdefault(target, {})[name] = value
    return parsed


def check_params(params: dict[str, dict], notebooks: list[str]) -> None:
    """Refuse a -p name no notebook it targets declares, or a value its notebook would reject."""
    # nb_params.parameter_names is each parameters cell (test_notebooks checks it with papermill)
    targets = {scope: notebooks if scope == "*" else [scope] for scope in params}
    for scope, values in params.items():
        for name in values:
            if not any(name in nb_params.parameter_names(nb) for nb in targets[scope]):
                takes = "; ".join(f"{nb} takes {', '.join(nb_params.parameter_names(nb))}"
                                  for nb in targets[scope])
                raise UsageError(f"unknown parameter -p {name}: {takes}")
    for nb in dict.fromkeys(nb for scope in targets for nb in targets[scope]):
        given = {name: value for scope in ("*", nb) for name, value in params.get(scope, {}).items()
                 if name in nb_params.parameter_names(nb)}
        try:
            nb_params.check_params(nb, given)
        except ValueError as exc:
            raise UsageError(f"-p for {nb}: {exc}") from None


# ---------------------------------------------------------------- run directory

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
    _save_jobs(run_dir, manifest, jobs)
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
    except ValueError as exc:
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


_JOB_TYPES = {"env": (str,), "notebook": (str,), "status": (str,),
              "seconds": (int, float, type(None)), "error": (str, type(None)), "attempt": (int,),
              "extra": (dict, type(None))}


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
    jobs = []
    for i, job in enumerate(manifest["jobs"]):
        where = f"jobs[{i}]"
        if not isinstance(job, dict):
            raise _bad(path, where, job, "a job is a JSON object")
        if unknown := set(job) - set(_JOB_TYPES):
            raise _bad(path, f"{where}.{sorted(unknown)[0]}", job[sorted(unknown)[0]],
                       "not a field of a job")
        for name, types in _JOB_TYPES.items():
            if name in ("env", "notebook") and name not in job:
                raise _bad(path, f"{where}.{name}", None, "the field is missing")
            value = job.get(name)
            if name in job and (not isinstance(value, types) or isinstance(value, bool)):
                raise _bad(path, f"{where}.{name}", value, "wrong type: expected "
                           + " or ".join("null" if t is type(None) else t.__name__ for t in types))
        if job.get("attempt", 0) < 0:
            raise _bad(path, f"{where}.attempt", job["attempt"], "it must be 0 or more")
        if job.get("status", "pending") not in JOB_STATUSES:
            raise _bad(path, f"{where}.status", job["status"],
                       f"use one of {', '.join(JOB_STATUSES)}")
        if job["notebook"] not in nb_params.NOTEBOOKS:
            raise _bad(path, f"{where}.notebook", job["notebook"], "this gpubench has no such "
                       f"notebook (it has {', '.join(nb_params.NOTEBOOKS)})")
        jobs.append(Job(**job))
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


def _saved_targets(saved, jobs: list[Job], path: Path) -> dict:
    """run.json's "envs", checked; a schema-1 run reached env ENV through kernel gpubench-ENV."""
    labels = list(dict.fromkeys(j.env for j in jobs))
    if saved is None:
        return {env: Target(kernel=envs.kernel_name(env)).saved() for env in labels}
    if not isinstance(saved, dict):
        raise _bad(path, "envs", saved, "it must map each env to how it is reached")
    names = {f.name for f in fields(Target)} - {"named"}
    for env in labels:
        target = saved.get(env)
        if not isinstance(target, dict) or set(target) - names:
            raise _bad(path, f"envs.{env}", target, "it must say how the env is reached")
        if target.get("how") not in ("env", "kernel", "here"):
            raise _bad(path, f"envs.{env}.how", target.get("how"), "use env, kernel or here")
        key = "python" if target["how"] == "here" else "kernel"
        if not isinstance(target.get(key), str) or not target[key]:
            raise _bad(path, f"envs.{env}.{key}", target.get(key), "it must be a non-empty string")
        if not isinstance(target.get("devices"), (list, type(None))):
            raise _bad(path, f"envs.{env}.devices", target.get("devices"), "it must be a list")
        if target.get("backend") is not None and target["backend"] not in backends.SUPPORTED:
            raise _bad(path, f"envs.{env}.backend", target["backend"],
                       f"use one of {', '.join(backends.SUPPORTED)}")
    return saved


# ---------------------------------------------------------------- execution

_PAPERMILL_CHATTER = ("Executing notebook with kernel", "Executing Cell", "Ending Cell",
                      "Input Notebook", "Output Notebook", "Executing notebook",
                      "Working directory:", "<Figure size", "<IPython.core.display.")


class _CellOutput(logging.Formatter):
    """Papermill's cell output as "  env/notebook| line", ANSI escapes removed."""

    prefix = ""

    def format(self, record: logging.LogRecord) -> str:
        """Prefix every line of the message."""
        text = _ANSI.sub("", record.getMessage()).rstrip()
        return "\n".join(f"  {self.prefix}| {line}" for line in text.splitlines())


def _worth_showing(record: logging.LogRecord) -> bool:
    """Drop papermill's own chatter and empty lines."""
    message = record.getMessage().strip()
    return bool(message) and not message.startswith(_PAPERMILL_CHATTER)


class _Stop:
    """What the runner's Ctrl-C / SIGTERM handler saw, and the kernels it can interrupt."""

    reason: str | None = None
    kernels: list = []


def kernel_manager_class(env: dict[str, str] | None = None,
                         spec_dir: str | None = None) -> type:
    """jupyter_client's AsyncKernelManager: kernels that die with the runner, can be interrupted,
    get `env` on top of their own environment, store rich's text plain (PLAIN_RICH_TEXT) and
    write their stderr to ours without KERNEL_NOISE; `spec_dir` holds kernel specs made on the
    fly (`--here`), looked up instead of the registered ones."""
    from jupyter_client.kernelspec import KernelSpecManager  # noqa: PLC0415
    from jupyter_client.manager import AsyncKernelManager  # noqa: PLC0415
    from traitlets import default  # noqa: PLC0415

    class RunnerKernelManager(AsyncKernelManager):
        """A kernel tied to the runner's life, listed in _Stop.kernels while it runs."""

        @default("kernel_spec_manager")
        def _specs(self) -> KernelSpecManager:
            where = {"kernel_dirs": [spec_dir]} if spec_dir else {}
            return KernelSpecManager(data_dir=self.data_dir, **where)

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
            kw["env"] = {**kw.get("env", os.environ), **(env or {})}
            if sys.platform.startswith("linux"):
                kw["preexec_fn"] = machine.die_with_parent()
            if any("ipykernel" in part for part in kernel_cmd):
                kernel_cmd = [*kernel_cmd, f"--IPKernelApp.exec_lines={PLAIN_RICH_TEXT}"]
            read = None
            if kw.get("stderr") is None:  # the kernel's stderr, through a filter to ours
                read, kw["stderr"] = os.pipe()
            try:
                await super()._async_launch_kernel(kernel_cmd, **kw)
            except BaseException:
                if read is not None:
                    os.close(read)
                raise
            finally:
                if read is not None:
                    os.close(kw["stderr"])  # the kernel holds its own copy
            if read is not None:
                threading.Thread(target=forward_stderr, args=(read,), daemon=True,
                                 name="kernel-stderr").start()
            _Stop.kernels.append(self)

    return RunnerKernelManager


def forward_stderr(read: int, write: int = 2) -> None:
    """Copy a kernel's stderr (file descriptor `read`, closed at the end) to `write`, line by
    line, leaving out KERNEL_NOISE; keeps reading when `write` fails, so the kernel never
    blocks on a full pipe."""
    def put(data: bytes) -> None:
        with contextlib.suppress(OSError):
            while data:
                data = data[os.write(write, data):]

    pending = b""
    with open(read, "rb", buffering=0) as stream:
        while chunk := stream.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            put(b"".join(line + b"\n" for line in lines
                         if not any(noise in line for noise in KERNEL_NOISE)))
    if not any(noise in pending for noise in KERNEL_NOISE):
        put(pending)


def write_here_spec(folder: Path, python: str) -> str:
    """A kernel spec in `folder` for a kernel of `python` (`--here`), as ipykernel writes one
    (its metadata says the kernel can encrypt its channels); the folder to look in."""
    from ipykernel.kernelspec import get_kernel_dict  # noqa: PLC0415 - --here needs ipykernel

    spec = get_kernel_dict()
    spec["argv"] = [python, *spec["argv"][1:]]  # the run's Python, also when resumed by another
    spec["display_name"] = f"gpubench --here ({python})"
    spec_dir = folder / HERE_KERNEL
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return str(folder)


def _here_env(target: Target) -> dict[str, str]:
    """The environment of a `--here` kernel and of its probe: this process's, with its backend
    fixed and this gpubench importable (PYTHONPATH) from the notebooks' folder."""
    source = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in [source, os.environ.get("PYTHONPATH", "")] if p)
    extra = {"KERAS_BACKEND": target.backend} if target.backend else {}
    return {**os.environ, "PYTHONPATH": path, **extra}


def _interrupt_kernels() -> bool:
    """SIGINT to each running kernel, as KernelManager.interrupt_kernel sends; whether any ran."""
    pids = [m.provisioner.pid for m in _Stop.kernels if getattr(m.provisioner, "pid", None)]
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGINT)
    return bool(pids)


def _on_signal(signum: int, frame) -> None:
    """First Ctrl-C / SIGTERM: interrupt the kernel and stop after it; a second one: stop now."""
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    if _Stop.reason is not None or not _interrupt_kernels():
        _Stop.reason = _Stop.reason or name
        raise KeyboardInterrupt
    _Stop.reason = name
    os.write(sys.stderr.fileno(), f"\n{name}: interrupting the notebook so it keeps what it "
             f"measured; {name} again stops at once\n".encode())


@contextlib.contextmanager
def _signals_stop_the_run():
    """Route SIGINT and SIGTERM to _on_signal while the run goes on (main thread only)."""
    _Stop.reason, _Stop.kernels = None, []
    saved = {}
    with contextlib.suppress(ValueError):  # not the main thread: keep Python's defaults
        for signum in (signal.SIGINT, signal.SIGTERM):
            saved[signum] = signal.signal(signum, _on_signal)
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def target_of(manifest: dict, env: str) -> Target:
    """How env `env` of a run is reached (a run without "envs": the kernel gpubench-ENV)."""
    saved = manifest.get("envs", {}).get(env)
    return Target(**saved) if saved else Target(kernel=envs.kernel_name(env))


def job_parameters(job: Job, run_dir: Path, manifest: dict) -> dict:
    """The papermill parameters of one job: profile, env, results path, device, -p values."""
    names = nb_params.parameter_names(job.notebook)
    params = {"profile": manifest["profile"], "env_name": job.env,
              "results_path": str((run_dir / "results.jsonl").resolve()), **(job.extra or {})}
    if "device" in names:
        target = target_of(manifest, job.env)
        gpu = bool(target.gpus) if target.devices is not None else envs.is_gpu_env(job.env)
        params["device"] = "gpu" if gpu else "cpu"
    params.update(_given(manifest["params"], job.notebook))
    return params


def kernel_config() -> dict:
    """papermill's (or a KernelManager's) keywords that encrypt the kernel's channels, if it can."""
    from jupyter_client.manager import KernelManager  # noqa: PLC0415
    from traitlets.config import Config  # noqa: PLC0415

    if "transport_encryption" not in KernelManager.class_trait_names():
        return {}
    return {"config": Config({"KernelManager": {"transport_encryption": "auto"}})}


def _records_written(run_dir: Path, job: Job) -> bool:
    """Whether results.jsonl holds a readable record of this job's current attempt."""
    try:  # unreadable lines are skipped; the report warns of them, once
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            records = results.read_records(run_dir)
    except OSError:
        return False
    this = (job.env, job.notebook, job.attempt)
    return any((r["env"], r["notebook"], r.get("attempt", 1)) == this for r in records)


def claim(job: Job, run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    """Take the job's next attempt and save it in run.json as "running" before it starts, so that
    after any crash the next resume uses a higher attempt than any record on disk."""
    job.attempt += 1
    job.status, job.error, job.seconds = "running", None, None
    _save_jobs(run_dir, manifest, jobs)


def execute(job: Job, run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    """Claim the job's next attempt (saved in run.json with all the run's `jobs`), run its
    notebook with papermill, and set its status, time and error."""
    import papermill  # noqa: PLC0415 - only the driver env has it

    claim(job, run_dir, manifest, jobs)
    output = run_dir / job.env / f"{job.notebook}.ipynb"
    target = target_of(manifest, job.env)
    env = {"GPUBENCH_RUN_ID": manifest["run_id"], "GPUBENCH_ATTEMPT": str(job.attempt),
           "NO_COLOR": "1", "TERM": "dumb"}  # for the kernel
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="gpubench-kernel-") as folder:
            spec_dir, kernel = None, target.kernel
            if target.how == "here":
                spec_dir, kernel = write_here_spec(Path(folder), target.python), HERE_KERNEL
                env = {**_here_env(target), **env}
            output.parent.mkdir(parents=True, exist_ok=True)
            papermill.execute_notebook(
                str(notebooks_dir() / f"{job.notebook}.ipynb"), str(output),
                parameters=job_parameters(job, run_dir, manifest), log_output=True,
                kernel_name=kernel, kernel_manager_class=kernel_manager_class(env, spec_dir),
                progress_bar=False, cwd=str(notebooks_dir()), **kernel_config(),
                # Every record is already on disk when a notebook ends or is interrupted, so the
                # kernel is stopped at once: a graceful stop of a busy kernel took ~3 s and made
                # it print a zmq traceback.
                shutdown_kernel="immediate",
            )
        if _records_written(run_dir, job):
            job.status, job.error = "ok", None
        else:
            job.status = "failed"
            job.error = (f"the notebook ended but {run_dir / 'results.jsonl'} holds no readable "
                         f"record of it (attempt {job.attempt})")
    except papermill.PapermillExecutionError as exc:
        job.status, job.error = "failed", f"{exc.ename}: {exc.evalue}"[:2000]
    except KeyboardInterrupt:
        job.status, job.error = "interrupted", f"stopped by {_Stop.reason or 'Ctrl-C'}"
        raise
    except Exception as exc:  # noqa: BLE001 - a dead kernel or a bad notebook fails this job only
        job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"[:2000]
        if isinstance(exc, OSError) and exc.errno in results.WRITE_ERRORS:  # say which file
            job.error = (f"cannot write {exc.filename or output}: {results.write_problem(exc)}; "
                         f"free some space (or make it writable), then "
                         f"`gpubench run --resume {run_dir}`")
    finally:
        job.seconds = time.perf_counter() - start
        _Stop.kernels.clear()
    if _Stop.reason is not None and job.status != "ok":  # the interrupted cell failed it
        job.status, job.error = "interrupted", f"stopped by {_Stop.reason}"


def run(profile: str | None = None, env_names: list[str] | None = None,
        notebooks: list[str] | None = None, out: str | None = None, resume: str | None = None,
        params: dict | None = None, here: bool = False, kernel: str | None = None) -> int:
    """Run the notebooks across envs (or `here`, or in `kernel`) and build the report; return
    the CLI exit code. Every check that can be made is made before the run directory exists."""
    with _signals_stop_the_run():  # from the start: a Ctrl-C at any point ends in one line
        if resume and out:
            raise UsageError("give either --out (a new run) or --resume (an unfinished one), "
                             "not both")
        if resume and params:
            raise UsageError("-p goes with a new run; --resume runs with the parameters it "
                             "started with")
        chosen = [o for o, v in (("--envs", env_names), ("--here", here), ("--kernel", kernel))
                  if v]
        if resume and chosen:
            raise UsageError(f"{chosen[0]} goes with a new run; --resume reaches the envs the "
                             "run started with")
        if len(chosen) > 1:
            raise UsageError(f"give one of --envs, --here and --kernel, not {' and '.join(chosen)}")
        envs.use_checkout_kernels()
        with contextlib.ExitStack() as stack:
            problems = None
            if resume:
                run_dir, manifest, jobs = load_run(resume, profile, stack)
                targets = {env: target_of(manifest, env) for env in manifest["envs"]}
                check_reachable(targets, run_dir / MANIFEST)
            else:
                profile = nb_params.resolve_profile(profile) if profile else "full"
                notebook_list = check_notebooks(notebooks)
                check_params(params or {}, notebook_list)
                if here:
                    targets = dict([here_target()])
                elif kernel:
                    targets = dict([kernel_target(kernel)])
                else:
                    targets = check_envs(env_names)
                problems = env_problems(targets)
                check_runnable(targets, notebook_list, params or {}, problems)
                run_dir, manifest, jobs = new_run(out, profile, targets, notebook_list,
                                                  params or {}, stack, named=notebooks is not None)
            try:
                return _run_jobs(run_dir, manifest, jobs, targets, problems)
            except KeyboardInterrupt:  # before the first notebook: run.json is as it was
                _interrupted(run_dir)
                return 130


def _interrupted(run_dir: Path) -> None:
    """The one line of an interrupted run: what stopped it and the command that finishes it."""
    sys.stdout.flush()
    print(f"Interrupted by {_Stop.reason or 'Ctrl-C'}; every measurement so far is in "
          f"{run_dir / 'results.jsonl'}. Finish the run with: gpubench run --resume {run_dir}",
          file=sys.stderr, flush=True)


def _run_jobs(run_dir: Path, manifest: dict, jobs: list[Job], targets: dict[str, Target],
              problems: dict[str, tuple[str, str]] | None) -> int:
    """Run the jobs not yet ok (each claimed in run.json first), then write the report."""
    from tqdm import tqdm  # noqa: PLC0415
    from tqdm.contrib.logging import logging_redirect_tqdm  # noqa: PLC0415

    todo = [j for j in jobs if j.status != "ok"]
    print(f"gpubench run {run_dir}  (profile {manifest['profile']}, run id {manifest['run_id']})")
    for env, target in targets.items():
        if target.how != "env":
            print(f"env {env}: " + (f"this Python, {target.python}" if target.how == "here"
                                    else f"kernel {target.kernel} ({target.python})")
                  + f"; {target.backend} sees {', '.join(target.devices or ['?'])}")
    resumed = problems is None
    if resumed:
        print(f"resuming: {len(jobs) - len(todo)} notebook(s) already done, {len(todo)} to run")
        waiting = {e: t for e, t in targets.items() if any(j.env == e for j in todo)}
        problems = env_problems(waiting)
        check_runnable(waiting, list(dict.fromkeys(j.notebook for j in todo)),
                       manifest["params"], problems)
    _mark_unavailable(todo, manifest, targets, problems)

    expected = nb_params.EXPECTED_SECONDS[manifest["profile"]]
    runnable = [j for j in todo if j.status == "pending"]
    total = sum(expected[j.notebook] for j in runnable)
    bar = tqdm(total=total, unit="s", file=sys.stderr, dynamic_ncols=True,
               bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]",
               disable=not sys.stderr.isatty())  # a log file gets the start lines below instead
    started, done = time.perf_counter(), 0.0  # bar.n stays 0 when the bar is disabled
    logger, cell_output = logging.getLogger("papermill"), _CellOutput()
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(cell_output)
    logger.addHandler(handler)
    logger.addFilter(_worth_showing)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        with logging_redirect_tqdm(loggers=[logger], tqdm_class=tqdm):
            for number, job in enumerate(runnable, start=1):
                cell_output.prefix = f"{job.env}/{job.notebook}"
                label = f"[{number}/{len(runnable)}] {cell_output.prefix}"
                bar.set_description(label)
                bar.write(f"{label}  {_eta(time.perf_counter() - started, done, total)}")
                execute(job, run_dir, manifest, jobs)
                done += expected[job.notebook]
                bar.update(expected[job.notebook])
                bar.write(f"{job.env}/{job.notebook}: {job.status} in {job.seconds:.0f} s"
                          + (f" — {job.error}" if job.error else ""))
                _save_jobs(run_dir, manifest, jobs)
                if _Stop.reason is not None:
                    raise KeyboardInterrupt
        _save_jobs(run_dir, manifest, jobs)
        code = _summary(jobs)
        if not _finish_report(run_dir):
            code = 2
    except KeyboardInterrupt:
        bar.close()
        for job in jobs:
            if job.status == "running":  # a Ctrl-C between its claim and its start
                job.status, job.error = "interrupted", f"stopped by {_Stop.reason or 'Ctrl-C'}"
        _save_jobs(run_dir, manifest, jobs)
        _summary(jobs)
        _interrupted(run_dir)
        return 130
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(_worth_showing)
        bar.close()
    return code


def _eta(elapsed: float, done: float, total: float) -> str:
    """"(elapsed 1:05, about 3:20 left)", the rest scaled by how fast the work done so far went."""
    def clock(seconds: float) -> str:
        return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"

    left = elapsed / done * (total - done) if done else total
    return f"(elapsed {clock(elapsed)}, about {clock(left)} left)"


def _mark_unavailable(jobs: list[Job], manifest: dict, targets: dict[str, Target],
                      problems: dict[str, tuple[str, str]]) -> None:
    """Set each job pending, or skipped/failed by its env's problem; Multi_GPU_Scaling runs on
    2+ GPUs, or on 2 virtual CPU devices when quick or named."""
    named = manifest.get("named", [])
    for job in jobs:
        job.status, job.error = problems.get(job.env, ("pending", None))
        if job.status == "pending" and job.notebook == "Multi_GPU_Scaling":
            from gpubench import scaling  # noqa: PLC0415 - no ML framework at import

            gpus = targets[job.env].gpus
            job.extra = scaling.include_in_run(bool(gpus) or envs.is_gpu_env(job.env), len(gpus),
                                               manifest["profile"], job.notebook in named)
            if job.extra is None:
                job.status = "skipped"
                job.error = ("Multi_GPU_Scaling needs 2 or more GPUs in the full profile; name it "
                             "(--notebooks Multi_GPU_Scaling) to run it on 2 virtual CPU devices")
    for env, (status, why) in problems.items():
        print(f"{status.upper()} env {env}: {why}")


def _save_jobs(run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    """Save the jobs in run.json (UsageError naming it when it cannot be written)."""
    manifest["jobs"] = [asdict(j) for j in jobs]
    write_manifest(run_dir, manifest)


def _finish_report(run_dir: Path) -> bool:
    """Write the run's report, whatever was recorded (it lists every job); say why not if it
    cannot be written, with the command that writes it later. Whether it was written."""
    from gpubench import report  # noqa: PLC0415

    try:
        print(f"Report: {report.build([run_dir])}")
        return True
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - the jobs are done; the report can be made later
        why = str(exc).split("; ")[0] if isinstance(exc, report.ReportWriteError) else (
            f"{type(exc).__name__}: {exc}")
        if isinstance(exc, OSError):
            why = f"cannot write {exc.filename or run_dir}: {results.write_problem(exc)}"
        print(f"gpubench run: error: the report was not written ({why}); every record is in "
              f"{run_dir / 'results.jsonl'}: fix that, then `gpubench report {run_dir}`",
              file=sys.stderr)
        return False


def _summary(jobs: list[Job]) -> int:
    """Print ok / failed / skipped and return the exit code (0 all ok, 1 otherwise)."""
    print("\nSummary")
    for job in jobs:
        took = f"{job.seconds:6.0f} s" if job.seconds is not None else "      -"
        print(f"  {job.status:<11} {job.env + '/' + job.notebook:<32} {took}"
              + (f"  {job.error.splitlines()[0]}" if job.error else ""))
    counts = {s: sum(j.status == s for j in jobs) for s in ("ok", "failed", "skipped",
                                                              "interrupted")}
    print("  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return 1 if counts["failed"] or counts["interrupted"] or not counts["ok"] else 0
