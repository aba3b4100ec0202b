"""The one place that says how `gpubench run` reaches each env (a gpubench-ENV kernel, `--kernel
NAME` or `--here`), for a new run or a resumed one; what a probe of its Python found it runs;
and, before any kernel starts, which envs or `-p` values cannot run there."""

from __future__ import annotations

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
from gpubench import params as nb_params
from gpubench.rundir import UsageError
from gpubench.runner.arguments import NEW_RUN, given


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


def kernel_spec(name: str):
    """jupyter_client's KernelSpec of kernel `name`, or None when no such kernel exists."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel  # noqa: PLC0415

    try:
        return KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        return None


def here_env(target: Target) -> dict[str, str]:
    """The environment of a `--here` kernel and its probe: this process's, its backend fixed,
    this gpubench importable (PYTHONPATH) from the notebooks' folder."""
    path = os.pathsep.join(filter(None, [str(machine.project_root()),
                                         os.environ.get("PYTHONPATH")]))
    extra = {"KERAS_BACKEND": target.backend} if target.backend else {}
    return {**os.environ, "PYTHONPATH": path, **extra}


def kernel_environ(target: Target) -> dict[str, str]:
    """The environment the kernel of `target` starts with (before the runner's additions)."""
    if target.how == "here":
        return here_env(target)
    return {**os.environ, **kernel_spec(target.kernel).env}


def _backend(value: str | None) -> str:
    """The Keras backend a kernel will load: `value` (its KERAS_BACKEND), else Keras's rule."""
    return backends.check_name(value) if value else backends.requested()


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


def _here() -> tuple[str, Target]:
    """`--here`: the env of the Python that runs gpubench, labelled by probing it."""
    python = os.path.abspath(sys.executable)  # relative when PATH names a relative folder
    or_envs = (", or run without --here in the envs `make setup` creates"
               if machine.checkout() else "")
    for module in ("ipykernel", "papermill", "keras"):
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"--here: {module} is not installed in {python}; install it "
                             f"(`{python} -m pip install {module}`){or_envs}")
    backends.requested()
    target = Target(how="here", python=python)
    if error := _probe(target, here_env(target)):
        raise UsageError(f"--here: {python} cannot run gpubench ({error}); fix that env{or_envs}")
    return backends.env_label(target.backend, bool(target.gpus)), target


def _kernel(name: str) -> tuple[str, Target]:
    """`--kernel NAME`: an existing Jupyter kernel, labelled by probing the Python it runs."""
    from jupyter_client.kernelspec import KernelSpecManager  # noqa: PLC0415

    if (spec := kernel_spec(name)) is None:
        known = ", ".join(sorted(KernelSpecManager().find_kernel_specs())) or "none"
        raise UsageError(f"--kernel {name!r}: no such Jupyter kernel; use one of: {known} "
                         "(`jupyter kernelspec list`), or --here")
    _backend(spec.env.get("KERAS_BACKEND") or os.environ.get("KERAS_BACKEND"))
    if not spec.argv:
        raise UsageError(f"--kernel {name!r}: its kernel.json has an empty argv; use another "
                         "kernel")
    target = Target(how="kernel", kernel=name, python=spec.argv[0])
    if error := _probe(target, {**os.environ, **spec.env}):
        raise UsageError(f"--kernel {name!r}: its Python {target.python} cannot run gpubench "
                         f"({error}); install gpubench there, or use another kernel")
    return backends.env_label(target.backend, bool(target.gpus)), target


def _standard(names: list[str] | None) -> dict[str, Target]:
    """The gpubench-ENV kernels to run: by default the book's TensorFlow envs set up (else every
    env set up); an unknown name, or one not set up, is a usage error saying what to do."""
    specs, env_kernel = envs.kernel_specs(), backends.kernel_name("ENV")
    if names is None and not specs:
        make = "run `make setup`, or " if machine.checkout() else ""
        raise UsageError(f"no env is set up (no Jupyter kernel named {env_kernel}); {make}"
                         "`gpubench run --here` to use this Python")
    if names is None:
        book = [e for e in specs if backends.env_backend(e) == "tensorflow"]
        names = book or list(specs)
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


def _problems(targets: dict[str, Target], named: bool) -> dict[str, tuple[str, str]]:
    """Probe what must be known before the first kernel (a GPU env's GPUs, a non-TensorFlow
    env's TensorFlow): env -> (status, why) for envs that cannot run. In envs `named` on the
    command line, that is a usage error instead, with the diagnosis."""
    problems: dict[str, tuple[str, str]] = {}
    specs = {spec["kernel"]: spec for spec in envs.kernel_specs().values()}
    for env, target in targets.items():
        if target.how != "env":
            continue  # `--here` and `--kernel` were probed when chosen
        if (spec := specs.get(target.kernel)) is None:
            problems[env] = ("skipped", f"env {env!r} is not set up (no kernel {target.kernel}); "
                                        f"create it with {envs.setup_command(env)}")
            continue
        try:  # the spec pins its backend, whatever the shell says
            target.backend = _backend(spec["env"].get("KERAS_BACKEND")
                                      or os.environ.get("KERAS_BACKEND"))
        except backends.BackendError as exc:
            raise UsageError(f"kernel {target.kernel}: {exc}") from None
        if (foreign := envs.foreign_kernel(spec)) is not None:
            problems[env] = ("skipped", foreign)
            continue
        target.python = target.python or (spec["argv"] or [None])[0]
        gpu, why = backends.is_gpu_env(env), None
        if not gpu and target.backend == "tensorflow":
            target.devices, target.tensorflow_importable = ["cpu"], True  # a CPU TensorFlow env
        elif error := _probe(target, {**os.environ, **spec["env"]}):
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
    return problems


def _check_runnable(targets: dict[str, Target], notebooks: list[str], params: dict[str, dict],
                    problems: dict[str, tuple[str, str]]) -> None:
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
                nb_params.check_for_backend(nb, values, target.backend,
                                            bool(target.tensorflow_importable))
            except ValueError as exc:
                raise UsageError(f"-p for {nb} in env {env}: {exc}") from None


def _check_xla_flags(targets: dict[str, Target]) -> None:
    """A TensorFlow env given XLA_FLAGS compiles one small XLA function in its own Python first
    (TensorFlow reads the flags only then, and aborts on one it does not know)."""
    for env, target in targets.items():
        environ = kernel_environ(target) if target.backend == "tensorflow" else {}
        if not target.python or not (flags := environ.get("XLA_FLAGS")):
            continue
        check = "from gpubench.backends import tensorflow; tensorflow.check_xla_flags()"
        try:
            done = subprocess.run([target.python, "-c", check], env=environ, timeout=600,
                                  capture_output=True, text=True, cwd=tempfile.gettempdir())
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"env {env}: cannot check XLA_FLAGS={flags!r} in {target.python} "
                             f"({exc}); unset XLA_FLAGS, or fix that env") from None
        if done.returncode != 0:
            said = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
            line = next((s for s in reversed(said) if "XLA_FLAGS" in s), said[-1])
            raise UsageError(f"env {env}: TensorFlow refuses XLA_FLAGS={flags!r} ("
                             f"{line.strip()[:300]}); fix or unset XLA_FLAGS")


def scaling_refusal(target: Target) -> str | None:
    """Why Multi_GPU_Scaling cannot run on `target`'s backend (scaling's rule), said for the way
    the env is reached; None when it can."""
    from gpubench.scaling import rules  # noqa: PLC0415 - stdlib-only, but its package is not

    if not target.backend or not rules.backend_refusal(target.backend):
        return None
    can = rules.PARALLEL_BACKENDS
    where = (" or ".join(f"--envs {backends.env_label(b, False)}" for b in can)
             if target.how == "env" else
             f"--here or --kernel in a Python whose KERAS_BACKEND is {' or '.join(can)}")
    return (f"{rules.NOTEBOOK} has no data-parallel path on "
            f"{backends.backend_title(target.backend)}; "
            f"run it on {' or '.join(map(backends.backend_title, can))} ({where})")


def for_new_run(env_names: list[str] | None, here: bool, kernel: str | None,
                notebooks: list[str], params: dict[str, dict],
                named: list[str]) -> tuple[dict[str, Target], dict[str, tuple[str, str]]]:
    """The envs of a new run and the problems of those that cannot run, every check made that
    can be made before the run directory exists (`named`: the notebooks given by name)."""
    targets = (dict([_here()]) if here else dict([_kernel(kernel)]) if kernel
               else _standard(env_names))
    problems = _problems(targets, named=env_names is not None)
    _check_runnable(targets, notebooks, params, problems)
    from gpubench.scaling import rules  # noqa: PLC0415 - stdlib-only, but its package is not

    for env, target in targets.items():
        if rules.NOTEBOOK in named and (why := scaling_refusal(target)):
            raise UsageError(f"--notebooks {rules.NOTEBOOK} in env {env}: {why}")
    _check_xla_flags({e: t for e, t in targets.items() if e not in problems})
    return targets, problems


def for_resume(manifest: dict, jobs: list, path: Path) -> tuple[dict[str, Target],
                                                                 dict[str, tuple[str, str]]]:
    """The envs of a resumed run (run.json at `path`) and the problems of those with work left;
    a kernel or Python that is gone is a usage error saying how to bring it back."""
    targets = {env: Target.of(manifest, env) for env in manifest["envs"]}
    todo = [j for j in jobs if j.status != "ok"]
    waiting = {e: t for e, t in targets.items() if any(j.env == e for j in todo)}
    for env, target in waiting.items():
        spec = None if target.how == "here" else kernel_spec(target.kernel or "")
        again = (envs.setup_command(env) if target.how == "env" else
                 f"`{shlex.quote(target.python or 'PYTHON')} -m ipykernel install --user "
                 f"--name {target.kernel}`")
        if target.how != "here" and spec is None:
            raise UsageError(f"{path}: envs.{env}.kernel {target.kernel!r} is no longer a Jupyter "
                             f"kernel; register it again ({again}), or {NEW_RUN}")
        python = target.python if spec is None else (spec.argv or [""])[0]
        if target.how == "here" and not (python and Path(python).exists()):
            raise UsageError(f"{path}: envs.{env}.python {python!r} no longer exists; {NEW_RUN}")
        if target.how != "here" and not shutil.which(python):
            fix = (f"re-create the env with {again}" if target.how == "env" else "register that "
                   "kernel again with a Python that exists (`jupyter kernelspec list` shows "
                   "where it is)")
            raise UsageError(f"{path}: envs.{env}.kernel {target.kernel!r} cannot start: its "
                             f"Python {python!r} no longer exists; {fix}, then resume, or "
                             f"{NEW_RUN}")
    _check_xla_flags(waiting)
    problems = _problems(waiting, named=False)
    _check_runnable(waiting, list(dict.fromkeys(j.notebook for j in todo)), manifest["params"],
                    problems)
    return targets, problems
