"""What a run runs and where, all checked before anything runs: the notebooks, the `-p` values (by
the parameters cell of the .ipynb that will run), and each env: how it is reached (a gpubench-ENV
kernel, `--kernel NAME` or `--here`) and what a probe of its Python found it runs."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpubench import backends, envs, machine
from gpubench import params as nb_params  # `params` names -p values here
from gpubench.factors import rules as factor_rules
from gpubench.rundir import UsageError
from gpubench.scaling import rules as scaling_rules

# Parameters the runner sets itself, and the option a user gives instead.
RUNNER_PARAMS = {"profile": "--profile", "results_path": "--out", "env_name": "--envs"}
NEW_RUN = "start a new run with `gpubench run`"
# The notebooks with rules of their own beyond each value's (they give them to chapter.start too).
OWN_RULES = {"Speed_Factors": factor_rules.check_parameters,
             "Multi_GPU_Scaling": scaling_rules.check_parameters}
Problems = dict[str, tuple[str, str]]  # env -> (status, why) of an env that cannot run


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

    @classmethod
    def of(cls, manifest: dict, env: str) -> Target:
        """How env `env` of a run is reached (a run without "envs": kernel gpubench-ENV)."""
        saved = manifest.get("envs", {}).get(env)
        return cls(**saved) if saved else cls(kernel=backends.kernel_name(env))

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


def _probed(kernel: str | None) -> dict[str, Target]:
    """`--kernel NAME` or (None) `--here`: one env, labelled by probing its Python."""
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


def _standard(names: list[str] | None) -> dict[str, Target]:
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


def _problems(targets: dict[str, Target], notebooks: list[str], params: dict[str, dict],
              named: bool) -> Problems:
    """The envs that cannot run (UsageError for one `named`): probed, XLA_FLAGS, -p values."""
    problems: Problems = {}
    for env, target in targets.items():
        spec, why = target.spec(), None
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
                why = f"its Python {target.python} cannot run gpubench: {error}"
                if named:
                    raise UsageError(f"--envs {env}: {why}")
            elif gpu and not target.gpus:
                why = target.diagnosis or f"its {target.backend} sees no GPU"
                if named:  # as a named GPU env that sees no GPU: before anything runs
                    raise UsageError(f"--envs {env}: {target.backend} in this env sees no GPU; "
                                     f"leave {env} out. " + " ".join(why.split()))
        if why:
            problems[env] = ("failed", why)
        elif target.backend == "tensorflow" and environ.get("XLA_FLAGS"):
            _check_xla_flags(env, target.python, environ)
    _check_runnable(targets, notebooks, params, problems)
    return problems


def _check_xla_flags(env: str, python: str, environ: dict[str, str]) -> None:
    """Compile an XLA function there: only then TensorFlow reads (and aborts on) XLA_FLAGS."""
    check = "from gpubench.backends import tensorflow; tensorflow.check_xla_flags()"
    flags = environ["XLA_FLAGS"]
    try:
        done = subprocess.run([python, "-c", check], env=environ, timeout=600,
                              capture_output=True, text=True, cwd=tempfile.gettempdir())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"env {env}: cannot check XLA_FLAGS={flags!r} in {python} ({exc}); "
                         "unset XLA_FLAGS, or fix that env") from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        line = next((s for s in reversed(said) if "XLA_FLAGS" in s), said[-1])
        raise UsageError(f"env {env}: TensorFlow refuses XLA_FLAGS={flags!r} ("
                         f"{line.strip()[:300]}); fix or unset XLA_FLAGS")


def _check_runnable(targets: dict[str, Target], notebooks: list[str], params: dict[str, dict],
                    problems: Problems) -> None:
    """Refuse -p values an env cannot run: a GPU it does not have, what its backend lacks."""
    for env, target in targets.items():
        for nb in notebooks if env not in problems and target.devices is not None else []:
            values = given(params, nb)
            for name in ("device", "devices"):
                value = values.get(name)
                asked = [re.fullmatch(r"/?(?:device:)?gpu(?::(\d+))?", str(v).strip().lower())
                         for v in (value if isinstance(value, list) else [value])]
                if missing := [f"gpu:{int(a[1] or 0)}" for a in asked if a
                               and f"gpu:{int(a[1] or 0)}" not in target.devices]:
                    raise UsageError(
                        f"-p {name}={json.dumps(value)} for {nb}: env {env} has "
                        f"{f'no {missing[0]}' if target.gpus else 'no GPU'} ({target.backend} "
                        f"there sees {', '.join(target.devices)}); use a GPU env (`gpubench "
                        f"envs` lists them) or drop -p {name}")
            try:
                factor_rules.check_for_backend(nb, values, target.backend,
                                               bool(target.tensorflow_importable))
            except ValueError as exc:
                raise UsageError(f"-p for {nb} in env {env}: {exc}") from None


def for_new_run(env_names: list[str] | None, here: bool, kernel: str | None,
                notebooks: list[str], params: dict[str, dict]) -> tuple[dict[str, Target],
                                                                        Problems]:
    """The envs of a new run, and the problems of those that cannot run."""
    targets = _probed(kernel) if here or kernel else _standard(env_names)
    return targets, _problems(targets, notebooks, params, named=env_names is not None)


def for_resume(manifest: dict, jobs: list, path: Path) -> tuple[dict[str, Target], Problems]:
    """The envs of a resumed run and their problems; UsageError for a kernel or Python gone."""
    targets = {env: Target.of(manifest, env) for env in manifest["envs"]}
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
    return targets, _problems(waiting, list(dict.fromkeys(j.notebook for j in todo)),
                              manifest["params"], named=False)
