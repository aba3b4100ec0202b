"""What a run runs and where, all checked before anything runs: the notebooks, the `-p` values (by
the parameters cell of the .ipynb that will run), each env (how it is reached: a gpubench-ENV
kernel, `--kernel NAME` or `--here`; what its Python runs), and a resumed run's run.json."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpubench import backends, envs, machine, schema, schema_words
from gpubench import params as nb_params  # `params` names -p values here
from gpubench.factors import rules as factor_rules
from gpubench.rundir import UsageError
from gpubench.scaling import rules as scaling_rules

# Parameters the runner sets itself, and the option a user gives instead.
RUNNER_PARAMS = {"profile": "--profile", "results_path": "--out", "env_name": "--envs"}
NEW_RUN = "start a new run with `gpubench run`"
OWN_RULES = {"Speed_Factors": factor_rules.check_parameters,  # rules beyond each value's
             "Multi_GPU_Scaling": scaling_rules.check_parameters}
Problems = dict[str, tuple[str, str]]  # env -> (status, why) of an env that cannot run
RUN_SCHEMA = schema.load("run")  # run.json's one declaration: gpubench/schemas/run.schema.json
MANIFEST_SCHEMA = 2  # the one run.json gpubench writes and resumes (with "envs")
MAX_DEPTH = 32  # run.json nests 4 levels; deeper is not a file gpubench wrote


def notebook_path(notebook: str) -> Path:
    """The .ipynb file a job of `notebook` runs."""
    return nb_params.notebooks_dir() / f"{notebook}.ipynb"


def declared(notebook: str) -> dict:
    """{name: default} of the parameters cell of the .ipynb file that will run."""
    return nb_params.declared_in(notebook_path(notebook))


def check_notebooks(names: list[str] | None) -> list[str]:
    """The notebooks to run, in the canonical order; unknown or missing: UsageError."""
    if unknown := [n for n in names or [] if n not in nb_params.NOTEBOOKS]:
        raise UsageError(f"unknown notebook(s) {', '.join(unknown)}; "
                         f"use some of {', '.join(nb_params.NOTEBOOKS)}")
    chosen = [n for n in nb_params.NOTEBOOKS if names is None or n in names]
    if missing := [n for n in chosen if not notebook_path(n).is_file()]:
        raise UsageError(f"notebook(s) {', '.join(missing)} missing from "
                         f"{nb_params.notebooks_dir()}; restore them (git checkout notebooks) or "
                         "leave them out with --notebooks")
    return chosen


def parse_params(items: list[str] | None) -> dict[str, dict]:
    """-p [NOTEBOOK:]NAME=VALUE items -> {notebook or "*": {name: value}}; values as JSON."""
    parsed: dict[str, dict] = {}
    for item in items or []:
        head, sep, value = item.partition("=")
        target, colon, name = head.rpartition(":")
        if not sep or not name or (colon and not target):
            raise UsageError(f"bad --param {item!r}; write NAME=VALUE or NOTEBOOK:NAME=VALUE")
        if target:
            check_notebooks([target])
        if name in RUNNER_PARAMS:
            raise UsageError(f"-p {name} belongs to the runner; use {RUNNER_PARAMS[name]} instead")
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
        if name in nb_params.FOLDERS and isinstance(value, str):  # kernels run in notebooks/
            value = os.path.abspath(os.path.expanduser(value))
        parsed.setdefault(target or "*", {})[name] = value
    return parsed


def given(params: dict[str, dict], notebook: str) -> dict:
    """The -p values that reach `notebook` ("NOTEBOOK:" ones over the others)."""
    names = declared(notebook)
    return {name: value for scope in ("*", notebook)
            for name, value in params.get(scope, {}).items() if name in names}


def check_params(params: dict[str, dict], notebooks: list[str]) -> None:
    """Refuse a -p name no notebook it targets declares, or a value its notebook would reject."""
    for scope, values in params.items():
        reached = notebooks if scope == "*" else [scope]
        for name in (n for n in values if not any(n in declared(nb) for nb in reached)):
            takes = "; ".join(f"{nb} takes " + ", ".join(n for n in declared(nb)
                                                       if n not in RUNNER_PARAMS)
                              for nb in reached)
            raise UsageError(f"unknown parameter -p {name}: {takes}")
    if outside := [scope for scope in params if scope not in ("*", *notebooks)]:
        raise UsageError(f"-p {outside[0]}:{','.join(params[outside[0]])}: {outside[0]} is not in "
                         f"this run ({', '.join(notebooks)}); add it to --notebooks or drop the -p")
    for nb in [nb for nb in notebooks if "*" in params or nb in params]:
        try:
            nb_params.check_params(nb, given(params, nb), declared=declared(nb),
                                   rules=OWN_RULES.get(nb))
        except ValueError as exc:
            raise UsageError(f"-p for {nb}: {exc}") from None


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


@dataclass
class Target:
    """How an env is reached, and what its Python was found to run (run.json's "envs")."""

    how: str = "env"  # "env": a gpubench-ENV kernel; "kernel": `--kernel NAME`; "here": `--here`
    kernel: str | None = None  # the Jupyter kernel's name ("env" and "kernel")
    python: str | None = None  # the Python (how == "here"; for a kernel, its argv[0])
    backend: str | None = None  # "tensorflow" | "jax" | "torch"; None before the probe
    devices: list[str] | None = None  # what the backend sees ("cpu", "gpu:0", ...); None: unknown
    tensorflow_importable: bool | None = None
    diagnosis: str | None = None  # why it sees no GPU

    @property
    def gpus(self) -> list[str]:
        """The GPUs the backend sees ([] when unknown)."""
        return [d for d in self.devices or [] if d.startswith("gpu")]

    def spec(self) -> dict | None:
        """Its kernel's spec (as envs.kernel_specs gives it); None for `--here` or none found."""
        return None if self.how == "here" else envs.kernel_specs("").get(self.kernel)

    def environ(self, spec: dict | None) -> dict[str, str]:
        """Its kernel's environment: `spec`'s over ours; `--here`: this gpubench on PYTHONPATH."""
        if self.how != "here":
            return {**os.environ, **spec["env"]}
        path = os.pathsep.join(filter(None, [str(machine.project_root()),
                                             os.environ.get("PYTHONPATH")]))
        return {**os.environ, "PYTHONPATH": path,
                **({"KERAS_BACKEND": self.backend} if self.backend else {})}

    def probe(self, environ: dict[str, str]) -> str | None:
        """Fill in what its Python's `gpubench doctor --json` finds; the error, if any."""
        info = envs.probe_python([self.python], env=environ)
        if info.get("error"):
            return str(info["error"]).strip().splitlines()[-1]
        try:
            self.backend = backends.check_name(str(info["backend"]))
            self.devices = [str(d) for d in info["devices"]]
        except (KeyError, TypeError, ValueError) as exc:
            return f"its `gpubench doctor --json` names no backend or devices ({exc})"
        self.tensorflow_importable = bool(info.get("tensorflow_importable"))
        self.diagnosis = info.get("diagnosis") or None
        return None


def _backend(environ: dict[str, str]) -> str:
    name = environ.get("KERAS_BACKEND")
    return backends.check_name(name) if name else backends.requested()


def probed(kernel: str | None) -> dict[str, Target]:
    """The env of `--kernel NAME` or (None) `--here`, labelled by probing its Python."""
    python = os.path.abspath(sys.executable)  # relative when PATH names a relative folder
    who, fix = f"--kernel {kernel!r}", "install gpubench there, or use another kernel"
    if kernel is None:
        or_envs = (", or run without --here in the envs `make setup` creates"
                   if machine.checkout() else "")
        who, fix = "--here", f"fix that env{or_envs}"
        if missing := [m for m in ("ipykernel", "papermill", "keras")
                       if importlib.util.find_spec(m) is None]:
            raise UsageError(f"--here: {missing[0]} is not installed in {python}; install it "
                             f"(`{python} -m pip install {missing[0]}`){or_envs}")
        target, spec = Target(how="here", python=python), None
        backends.requested()
    elif (spec := envs.kernel_specs("").get(kernel)) is None:
        known = ", ".join(envs.kernel_specs("")) or "none"
        raise UsageError(f"{who}: no such Jupyter kernel; use one of: {known} "
                         "(`jupyter kernelspec list`), or --here")
    else:
        _backend({**os.environ, **spec["env"]})
        if not spec["argv"]:
            raise UsageError(f"{who}: its kernel.json has an empty argv; use another kernel")
        target = Target(how="kernel", kernel=kernel, python=spec["argv"][0])
    if error := target.probe(target.environ(spec)):
        raise UsageError(f"{who}: its Python {target.python} cannot run gpubench ({error}); {fix}")
    return {backends.env_label(target.backend, bool(target.gpus)): target}


def standard(names: list[str] | None) -> dict[str, Target]:
    """The gpubench-ENV kernels `names` (default: the TensorFlow ones set up, else all)."""
    specs, env_kernel = envs.kernel_specs(), backends.kernel_name("ENV")
    if names is None and not specs:
        make = "run `make setup`, or " if machine.checkout() else ""
        raise UsageError(f"no env is set up (no Jupyter kernel named {env_kernel}); {make}"
                         "`gpubench run --here` to use this Python")
    if names is None:
        names = [e for e in specs if backends.env_backend(e) == "tensorflow"] or list(specs)
    known = list(dict.fromkeys([*backends.ENVS, *sorted(specs)]))
    if unknown := [n for n in names if n not in known]:
        raise UsageError(f"unknown env(s) {', '.join(unknown)}; use some of {', '.join(known)} "
                         f"(an env is a Jupyter kernel named {env_kernel})")
    for env in (e for e in names if e not in specs):
        if backends.is_gpu_env(env) and not (smi := machine.nvidia_smi_gpus()):
            raise UsageError(f"--envs {env}: this machine has no NVIDIA GPU (nvidia-smi "
                             f"{'not found' if smi is None else 'lists none'}); leave {env} out "
                             "(`gpubench envs` lists the envs set up)")
        raise UsageError(f"--envs {env}: env {env!r} is not set up (no kernel "
                         f"{backends.kernel_name(env)}); create it with "
                         f"{envs.setup_command(env)}, or leave it out")
    return {env: Target(kernel=specs[env]["kernel"], python=(specs[env]["argv"] or [None])[0])
            for env in dict.fromkeys(names)}


def find_problems(targets: dict[str, Target], notebooks: list[str], params: dict[str, dict],
                  named: bool) -> Problems:
    """The envs that cannot run (UsageError for one `named`): probed, XLA_FLAGS, -p values."""
    problems: Problems = {}
    for env, target in targets.items():
        spec = target.spec()
        environ = target.environ(spec)
        if target.how == "env":
            try:  # the spec pins its backend, whatever the shell says
                target.backend = _backend(environ)
            except backends.BackendError as exc:
                raise UsageError(f"kernel {target.kernel}: {exc}") from None
            if (foreign := envs.foreign_kernel(spec)) is not None:
                problems[env] = ("skipped", foreign)
                continue
            target.python = target.python or (spec["argv"] or [None])[0]
            gpu = backends.is_gpu_env(env)
            if not gpu and target.backend == "tensorflow":
                target.devices, target.tensorflow_importable = ["cpu"], True  # a CPU TF env
            elif error := target.probe(environ):
                problems[env] = ("failed", f"its Python {target.python} cannot run gpubench: "
                                           f"{error}")
                if named:
                    raise UsageError(f"--envs {env}: {problems[env][1]}")
            elif gpu and not target.gpus:
                problems[env] = ("failed", target.diagnosis or f"its {target.backend} sees no GPU")
                if named:  # as a named GPU env that sees no GPU: before anything runs
                    raise UsageError(f"--envs {env}: {target.backend} in this env sees no GPU; "
                                     f"leave {env} out. " + " ".join(problems[env][1].split()))
        if env in problems:
            continue
        if target.backend == "tensorflow" and (flags := environ.get("XLA_FLAGS")):
            # TensorFlow reads (and aborts on) XLA_FLAGS only once it compiles an XLA function
            check = "from gpubench.backends import tensorflow; tensorflow.check_xla_flags()"
            try:
                done = subprocess.run([target.python, "-c", check], env=environ, timeout=600,
                                      capture_output=True, text=True, cwd=tempfile.gettempdir())
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise UsageError(f"env {env}: cannot check XLA_FLAGS={flags!r} in {target.python} "
                                 f"({exc}); unset XLA_FLAGS, or fix that env") from None
            said = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
            if done.returncode != 0:
                line = next((s for s in reversed(said) if "XLA_FLAGS" in s), said[-1])
                raise UsageError(f"env {env}: TensorFlow refuses XLA_FLAGS={flags!r} ("
                                 f"{line.strip()[:300]}); fix or unset XLA_FLAGS")
        for nb in notebooks:  # what the backend lacks (a GPU it lacks: the kernel's own guard)
            try:
                factor_rules.check_for_backend(nb, given(params, nb), target.backend,
                                               bool(target.tensorflow_importable))
            except ValueError as exc:
                raise UsageError(f"-p for {nb} in env {env}: {exc}") from None
    return problems


def _bad(path: Path, name: str, value, why: str) -> UsageError:
    return UsageError(f"{path}: {name} is {schema_words.shown(value)}: {why}; {NEW_RUN}")


def check_manifest(manifest, path: Path) -> list[Job]:
    """The jobs of run.json, checked by its schema and this gpubench; UsageError naming a field."""
    if not isinstance(manifest, dict):
        raise _bad(path, "the file", type(manifest).__name__, "it must be a JSON object")
    stack = [(manifest, "", 0)]  # walked iteratively, each field named to its third level
    while stack:
        value, field, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UsageError(f"{path}: {field} is nested deeper than {MAX_DEPTH} levels: not a "
                             f"job list written by `gpubench run`; {NEW_RUN}")
        items = (value.items() if isinstance(value, dict) else
                 enumerate(value) if isinstance(value, list) else ())
        for key, item in items:
            name = f"{field}[{key}]" if isinstance(key, int) else f"{field}.{key}".lstrip(".")
            stack.append((item, name if depth < 3 else field, depth + 1))
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
    saved = manifest.get("envs", {})
    if missing := [job.env for job in jobs if job.env not in saved]:
        raise _bad(path, f"envs.{missing[0]}", None, "it must say how the env is reached")
    for env, target in saved.items():
        if target.get("backend") is not None and target["backend"] not in backends.SUPPORTED:
            raise _bad(path, f"envs.{env}.backend", target["backend"],
                       f"use one of {', '.join(backends.SUPPORTED)}")
    return jobs


def for_resume(manifest: dict, jobs: list, path: Path) -> tuple[dict[str, Target], Problems]:
    """The envs of a resumed run and their problems; UsageError for a kernel or Python gone."""
    targets = {env: Target(**saved) for env, saved in manifest["envs"].items()}
    todo = [j for j in jobs if j.status != "ok"]
    waiting = {e: t for e, t in targets.items() if any(j.env == e for j in todo)}
    for env, target in waiting.items():
        spec, field = target.spec(), f"{path}: envs.{env}"
        again = (envs.setup_command(env) if target.how == "env" else
                 f"`{shlex.quote(target.python or 'PYTHON')} -m ipykernel install --user "
                 f"--name {target.kernel}`")
        if target.how != "here" and spec is None:
            raise UsageError(f"{field}.kernel {target.kernel!r} is no longer a Jupyter kernel; "
                             f"register it again ({again}), or {NEW_RUN}")
        python = target.python if spec is None else (spec["argv"] or [""])[0]
        if target.how == "here" and not (python and Path(python).exists()):
            raise UsageError(f"{field}.python {python!r} no longer exists; {NEW_RUN}")
        if target.how != "here" and not shutil.which(python):
            fix = (f"re-create the env with {again}" if target.how == "env" else "register that "
                   "kernel again with a Python that exists (`jupyter kernelspec list` shows "
                   "where it is)")
            raise UsageError(f"{field}.kernel {target.kernel!r} cannot start: its Python "
                             f"{python!r} no longer exists; {fix}, then resume, or {NEW_RUN}")
    return targets, find_problems(waiting, list(dict.fromkeys(j.notebook for j in todo)),
                              manifest["params"], named=False)
