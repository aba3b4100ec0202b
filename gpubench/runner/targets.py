"""How `gpubench run` reaches each env (a gpubench-ENV kernel, `--kernel NAME`, `--here`), what
a probe of its Python found it runs, and which envs or `-p` values cannot run there."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpubench import backends, envs, machine
from gpubench import params as nb_params
from gpubench.rundir import UsageError
from gpubench.runner.arguments import NEW_RUN, check_backend, given, gpu_asked

# What `--here` needs in the Python that runs gpubench, and the pip name of each.
HERE_NEEDS = {"ipykernel": "ipykernel", "papermill": "papermill", "keras": "keras"}


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


def _or_envs() -> str:
    """The end of a --here error: the envs `make setup` creates, in a checkout."""
    return ", or run without --here in the envs `make setup` creates" if machine.checkout() else ""


def kernel_spec(name: str):
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


def here_env(target: Target) -> dict[str, str]:
    """The environment of a `--here` kernel and of its probe: this process's, with its backend
    fixed and this gpubench importable (PYTHONPATH) from the notebooks' folder."""
    path = os.pathsep.join(p for p in [str(machine.project_root()),
                                       os.environ.get("PYTHONPATH", "")] if p)
    extra = {"KERAS_BACKEND": target.backend} if target.backend else {}
    return {**os.environ, "PYTHONPATH": path, **extra}


def kernel_environ(target: Target) -> dict[str, str]:
    """The environment the kernel of `target` starts with: its spec's `env` on top of this
    process's, or here_env (before the runner's per-job additions)."""
    if target.how == "here":
        return here_env(target)
    return {**os.environ, **kernel_spec(target.kernel).env}


def here_target() -> tuple[str, Target]:
    """`--here`: the env of the Python that runs gpubench, labelled by probing it."""
    python = os.path.abspath(sys.executable)  # relative when PATH names a relative folder
    for module, package in HERE_NEEDS.items():
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"--here: {module} is not installed in {python}; install it "
                             f"(`{python} -m pip install {package}`)" + _or_envs())
    check_backend(os.environ.get("KERAS_BACKEND"), "--here")
    target = Target(how="here", python=python, named=True)
    if error := _probe(target, here_env(target)):
        raise UsageError(f"--here: {python} cannot run gpubench ({error}); fix that env"
                         + _or_envs())
    return backends.env_label(target.backend, bool(target.gpus)), target


def kernel_target(name: str) -> tuple[str, Target]:
    """`--kernel NAME`: an existing Jupyter kernel, labelled by probing the Python it runs."""
    from jupyter_client.kernelspec import KernelSpecManager  # noqa: PLC0415

    spec = kernel_spec(name)
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
    return backends.env_label(target.backend, bool(target.gpus)), target


def check_envs(names: list[str] | None) -> dict[str, Target]:
    """The envs to run, each a gpubench-ENV kernel: by default those set up (what `gpubench envs`
    lists); an unknown name, or one not set up, is a usage error saying what to do."""
    specs = envs.kernel_specs()
    if names is None:
        if not specs:
            raise UsageError("no env is set up (no Jupyter kernel named "
                             f"{envs.kernel_name('ENV')}); "
                             + ("run `make setup`, or " if machine.checkout() else "")
                             + "`gpubench run --here` to use this Python")
        # the book's TensorFlow envs; other backends' envs only when named (--envs jax-cpu)
        book = {env: spec for env, spec in specs.items() if envs.env_backend(env) == "tensorflow"}
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
                             f"{envs.setup_command(env)}, or leave it out")
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
        elif kernel_spec(target.kernel or "") is None:
            raise UsageError(f"{path}: envs.{env}.kernel {target.kernel!r} is no longer a Jupyter "
                             f"kernel; register it again ({envs.setup_command(env)}), or {NEW_RUN}")


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
            setup = envs.setup_command(env)
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
            if target.named:  # as a named GPU env that sees no GPU: before anything runs
                raise UsageError(f"--envs {env}: its Python {target.python} cannot run "
                                 f"gpubench: {error}")
            problems[env] = ("failed", f"its Python {target.python} cannot run gpubench: {error}")
        elif gpu and not target.gpus:
            why = target.diagnosis or f"its {target.backend} sees no GPU"
            if target.named:
                raise UsageError(f"--envs {env}: {target.backend} in this env sees no GPU; "
                                 f"leave {env} out. " + " ".join(why.split()))
            problems[env] = ("failed", why)
    return problems


def check_runnable(targets: dict[str, Target], notebooks: list[str], params: dict[str, dict],
                   problems: dict[str, tuple[str, str]]) -> None:
    """Refuse, before any kernel, -p values an env cannot run: a GPU it does not have, or what
    its backend lacks (tf.data without TensorFlow)."""
    for env, target in targets.items():
        if env in problems or target.devices is None:
            continue
        for nb in notebooks:
            values = given(params, nb)
            for name in ("device", "devices"):
                value = values.get(name)
                asked = [gpu_asked(v) for v in (value if isinstance(value, list) else [value])]
                if missing := [a for a in asked if a and a not in target.devices]:
                    has = f"no {missing[0]}" if target.gpus else "no GPU"
                    raise UsageError(
                        f"-p {name}={json.dumps(value)} for {nb}: env {env} has {has} "
                        f"({target.backend} there sees {', '.join(target.devices)}); use a GPU "
                        f"env (`gpubench envs` lists them) or drop -p {name}")
            try:
                nb_params.check_for_backend(nb, values, target.backend,
                                            bool(target.tensorflow_importable))
            except ValueError as exc:
                raise UsageError(f"-p for {nb} in env {env}: {exc}") from None
