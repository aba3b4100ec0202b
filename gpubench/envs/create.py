"""`gpubench setup`: a conda env from environment-NAME.yml when mamba, conda or micromamba is on
PATH, else a venv with gpubench pip-installed; each checked by importing its backend and Keras,
then its kernel registered for this checkout and with --user. A failed step says what to do."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from gpubench import backends, machine  # stdlib-only at import
from gpubench.envs import EXTRAS, EnvError, checkout_kernels_dir, display_name, setup_command
from gpubench.rundir import locked  # stdlib-only at import

VENV_DIRS = {env: ".venv" if env == "cpu" else f".venv-{EXTRAS[env]}" for env in backends.ENVS}
VENV_PYTHONS = ((3, 11), (3, 12), (3, 13))  # TensorFlow 2.21, JAX 0.10, numpy 2.4 have wheels
STAMP = ".gpubench-installed"  # in a venv: pyproject.toml's sha256 once its pip install is done
# For conda commands: yes to any prompt (mamba 2 asks before creating).
CONDA_YES = {"CONDA_ALWAYS_YES": "true", "MAMBA_ALWAYS_YES": "true"}


def parse_backends(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """"tensorflow,jax" (or a list) -> ("tensorflow", "jax"); ValueError naming a bad one."""
    names = value.split(",") if isinstance(value, str) else list(value or [])
    chosen = tuple(dict.fromkeys(name.strip() for name in names if name.strip()))
    use = (f"use some of {', '.join(backends.SUPPORTED)} (BACKENDS=tensorflow,jax, or "
           "--backends tensorflow,jax)")
    for name in (n for n in chosen if n not in backends.SUPPORTED):
        why = backends.NOT_YET.get(name, "not a Keras backend gpubench knows")
        raise ValueError(f"backend {name!r}: {why}; {use}")
    if not chosen:
        raise ValueError(f"no backend given; {use}")
    return chosen


def find_conda() -> str | None:
    """mamba, conda or micromamba on PATH, or None for venvs; GPUBENCH_CONDA=TOOL|PATH|none."""
    choice = os.environ.get("GPUBENCH_CONDA", "").strip()
    if choice.lower() == "none":
        return None
    found = next(filter(None, map(shutil.which, [choice] if choice else
                                  ["mamba", "conda", "micromamba"])), None)
    if choice and found is None:
        raise EnvError(f"GPUBENCH_CONDA={choice!r} is not a command on PATH; set it to mamba, "
                       "conda, micromamba or the full path of one, or to none to use venvs")
    return found


def venv_python(venv: Path) -> Path:
    """The python of a venv: bin/python, or Scripts/python.exe on Windows."""
    return venv / "Scripts" / "python.exe" if os.name == "nt" else venv / "bin" / "python"


def conda_envs(conda: str) -> dict[str, str]:
    """Conda env name -> prefix, from `<conda> env list --json`."""
    cmd = [conda, "env", "list", "--json"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             env={**os.environ, **CONDA_YES}, check=True)
        return {Path(prefix).name: prefix for prefix in json.loads(out.stdout)["envs"]}
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = f"did not run ({exc})"
    except subprocess.CalledProcessError as exc:
        why = f"failed with exit code {exc.returncode}: {exc.stderr.strip()[-500:]}"
    except (ValueError, KeyError, TypeError):
        why = f"printed no JSON with an \"envs\" list: {out.stdout.strip()[:300]!r}"
    raise EnvError(f"`{shlex.join(cmd)}` {why}\nCheck that {conda} works (or update it), or set "
                   "GPUBENCH_CONDA=none to use venvs instead")


def driver_python(root: Path | None = None, env: str | None = None) -> str:
    """The python of gpubench's own commands: the cpu env's, else jax-cpu's (or `env`'s)."""
    root = Path(root) if root is not None else machine.project_root()
    drivers = (env,) if env else ("cpu", "jax-cpu")
    if (conda := find_conda()) is None:
        pythons = [venv_python(root / VENV_DIRS[name]) for name in drivers]
        return str(next((python for python in pythons if python.exists()), pythons[0]))
    found = conda_envs(conda)
    kernels = [backends.kernel_name(name) for name in drivers]
    if (prefix := next((found[k] for k in kernels if k in found), None)) is None:
        raise EnvError(f"{conda} has no env {kernels[0]}; create it with "
                       f"{setup_command(drivers[0])}")
    return str(Path(prefix) / ("python.exe" if os.name == "nt" else "bin/python"))


def gpu_requested(gpu: bool) -> bool:
    """Whether setup builds the GPU env: asked for, or `nvidia-smi -L` lists a GPU."""
    return bool(gpu) or bool(machine.nvidia_smi_gpus())


def _run(cmd: list[str], step: str, hint: str, *, cwd: Path, echo: Callable,
         env: dict | None = None) -> bool:
    echo("$ " + shlex.join(cmd))
    sys.stdout.flush()  # keep our lines in order with the child's when output is piped
    try:
        code = subprocess.run(cmd, cwd=cwd, env=env).returncode
        why = f" (exit code {code})"
    except OSError as exc:
        code, why = None, f"\n{cmd[0]} could not run: {exc}"
    if code != 0:
        echo(f"\nsetup failed at step: {step}{why}\n{hint}")
    return code == 0


def import_fails(python: list[str], name: str, echo: Callable,
                 env: dict | None = None) -> str | None:
    """Why env `name`'s backend and Keras do not import in `python`; None when they do."""
    backend = backends.env_backend(name)
    cmd = [*python, "-c", f"import {backend}, keras"]
    echo("$ " + shlex.join(cmd))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir(),
                              env={**(env or os.environ), "KERAS_BACKEND": backend}, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`import {backend}, keras` does not run there ({exc})"
    said = (done.stderr.strip() or done.stdout.strip()).splitlines() or [str(done.returncode)]
    return None if done.returncode == 0 else f"`import {backend}, keras` fails there ({said[-1]})"


def _setup_conda_env(conda: str, name: str, root: Path, echo: Callable) -> bool:
    kernel, yml, env = backends.kernel_name(name), f"environment-{name}.yml", {**os.environ,
                                                                             **CONDA_YES}
    if not (root / yml).is_file():
        echo(f"\nsetup failed: {root / yml} is missing; restore it (git checkout {yml}) and run "
             "setup again")
        return False
    echo("$ " + shlex.join([conda, "env", "list", "--json"]))
    try:
        exists = kernel in conda_envs(conda)
    except EnvError as exc:
        echo(f"\nsetup failed at step: list the conda envs\n{exc}")
        return False
    if Path(conda).name.lower().startswith("micromamba"):  # its create/update spelling differs
        cmd = ["update", "-y", "-n", kernel, "-f", yml] if exists else ["create", "-y", "-f", yml]
    else:
        cmd = (["env", "update", "-n", kernel, "-f", yml, "--prune"] if exists
               else ["env", "create", "-f", yml])
    remove = f"To start from scratch: `{shlex.join([conda, 'env', 'remove', '-y', '-n', kernel])}`"
    if not _run([conda, *cmd], f"{'update' if exists else 'create'} conda env {kernel} from {yml}",
                "Read the output above and fix its cause (network, disk space, a package "
                f"conflict), then run setup again. {remove}.", cwd=root, echo=echo, env=env):
        return False
    python = [conda, "run", "-n", kernel, "python"]
    if why := import_fails(python, name, echo, env):
        echo(f"\nsetup failed: conda env {kernel} is broken: {why}. {remove}, then run setup "
             "again.")
        return False
    return _register(python, name, root, f"ipykernel comes from {yml}; check `"
                     f"{shlex.join([*python, '-m', 'ipykernel', '--version'])}`, then run setup "
                     "again.", echo, env)


def _register(python: list[str], name: str, root: Path, hint: str, echo: Callable,
              env: dict | None = None) -> bool:
    """Register env `name`'s kernel (with its KERAS_BACKEND) in this checkout, then --user."""
    kernel = backends.kernel_name(name)
    base = [*python, "-m", "ipykernel", "install", "--user", "--name", kernel, "--display-name",
            display_name(name), "--env", "KERAS_BACKEND", backends.env_backend(name)]
    env = dict(env if env is not None else os.environ)
    if not _run(base + ["--env", "PYTHONPATH", str(root)],
                f"register the Jupyter kernel {kernel} for this checkout", hint, cwd=root,
                echo=echo, env={**env, "JUPYTER_DATA_DIR": str(checkout_kernels_dir(root))}):
        return False
    # `ipykernel install --user` deletes and re-copies the kernel folder: two at once crash one
    # of them (its logo-svg.svg vanishes), so they take turns under a per-user lock.
    echo("$ " + shlex.join(base))
    user = os.getuid() if hasattr(os, "getuid") else 0
    with locked(Path(tempfile.gettempdir()) / f"gpubench-kernels-{user}.lock"):
        try:
            done = subprocess.run(base, cwd=root, env=env, capture_output=True, text=True)
            code, said = done.returncode, (done.stderr.strip() or done.stdout.strip())
        except OSError as exc:
            code, said = None, str(exc)
    if code == 0 and done.stdout.strip():
        echo(done.stdout.strip())  # "Installed kernelspec ... in ..."
    elif code != 0:
        echo(f"warning: could not register {kernel} for Jupyter started by hand "
             f"({said.splitlines()[-1] if said else f'exit code {code}'}). This checkout's "
             "kernel is registered, and `gpubench run`, `make lab` and `make test` use it; for "
             "Jupyter started by hand, make Jupyter's per-user folder writable (`jupyter "
             f"--data-dir` names it) or set JUPYTER_PATH={checkout_kernels_dir(root)}")
    return True


def _setup_venv(name: str, root: Path, echo: Callable) -> bool:
    """Make env `name`'s venv, pip install unless it is stamped and imports, check, register."""
    dirname = VENV_DIRS[name]
    venv = root / dirname
    python = venv_python(venv)
    broken = None  # what an interrupted set-up left missing (pip records its install last)
    site = "Lib/site-packages" if os.name == "nt" else "lib/python*/site-packages"
    if venv.exists() and not python.exists():  # a dangling link counts as missing
        broken = f"it has no {python.relative_to(venv)}"
    elif (venv / "pyvenv.cfg").is_file() and not any(venv.glob(f"{site}/pip-*.dist-info/RECORD")):
        broken = "its pip is missing or half-installed"
    afresh = f"`rm -rf {shlex.quote(str(venv))} && python3 -m gpubench setup`"
    if broken and Path(sys.prefix).resolve() == venv.resolve():
        echo(f"\nsetup failed: {dirname} is broken ({broken}) and runs this setup; rebuild it "
             f"with {afresh}")
        return False
    if broken:
        echo(f"{dirname} is broken ({broken}; an interrupted set-up leaves it so): rebuilding it")
    if broken or not python.exists():  # made with this Python (`--clear`: a broken one)
        if sys.version_info[:2] not in VENV_PYTHONS:
            want = ", ".join(".".join(map(str, v)) for v in VENV_PYTHONS)
            echo(f"\nsetup failed: the venv needs Python {want} (TensorFlow 2.21, JAX 0.10, numpy "
                 f"2.4), but this is Python {sys.version.split()[0]} at {sys.executable}.\nRun "
                 "`python3.11 -m gpubench setup`, or install conda/micromamba (its envs bring "
                 "their own Python).")
            return False
        existed = venv.exists()
        if not _run([sys.executable, "-m", "venv", *(["--clear"] if broken else []), dirname],
                    f"create the venv {dirname}", "If the output above says ensurepip is not "
                    "available: `sudo apt install python3-venv` (Debian/Ubuntu), or install "
                    "conda/micromamba; then run setup again.", cwd=root, echo=echo):
            if not existed:  # remove a half-made one
                shutil.rmtree(venv, ignore_errors=True)
            return False
    stamp, spec = venv / STAMP, f".[{EXTRAS[name]},test]"
    digest = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()
    current = stamp.is_file() and stamp.read_text().strip() == digest
    if current and (why := import_fails([str(python)], name, echo)):
        echo(f"{dirname}: its stamp says gpubench{spec[1:]} is installed, but {why}: "
             "running pip again")
        current = False
    elif current:
        echo(f"{dirname}: gpubench{spec[1:]} is installed for this pyproject.toml; skipping pip")
    if not current:
        stamp.unlink(missing_ok=True)
        if not _run([str(python), "-m", "pip", "install", "-e", spec],
                    f"pip install gpubench{spec[1:]} into {dirname}", "Read pip's output above and "
                    "fix its cause (network, disk space; the GPU extras need Linux or WSL2), then "
                    f"run setup again. To start from scratch: {afresh}.", cwd=root, echo=echo):
            return False
        if why := import_fails([str(python)], name, echo):
            echo(f"\nsetup failed: {dirname} is broken after pip install: {why}. Start it "
                 f"afresh: {afresh}")
            return False
        stamp.write_text(digest + "\n")
    return _register([str(python)], name, root, "ipykernel comes with gpubench's dependencies; "
                     f"check `{python} -m ipykernel --version`, or start afresh: {afresh}.", echo)


def setup(gpu: bool = False, backends: str | Iterable[str] = ("tensorflow",), *,
          root: Path | None = None, echo: Callable = print) -> int:
    """Make each backend's CPU env (and GPU env, if asked or found), register them; 0 ok."""
    chosen = parse_backends(backends)
    root = Path(root) if root is not None else machine.project_root()
    try:  # one setup per checkout at a time: a second one waits, then finds the work done
        with locked(checkout_kernels_dir(root) / "setup.lock"):
            return _setup(gpu, chosen, root, echo)
    except OSError as exc:
        echo(f"setup failed: cannot write in {root} ({exc.strerror or exc}); run it in a writable "
             "clone")
        return 1


def _setup(gpu: bool, chosen: tuple[str, ...], root: Path, echo: Callable) -> int:
    try:
        conda = find_conda()
    except EnvError as exc:
        echo(f"setup failed: {exc}")
        return 1
    with_gpu = gpu_requested(gpu)
    names = [backends.env_label(b, g) for g in (False, True) for b in chosen if with_gpu or not g]
    echo(f"gpubench setup: conda envs with {conda} (GPUBENCH_CONDA=none uses venvs instead)"
         if conda else "gpubench setup: no mamba, conda or micromamba on PATH; using venvs and pip")
    echo(f"Backends: {', '.join(chosen)} (BACKENDS=tensorflow,jax,torch adds JAX and PyTorch)")
    echo("GPU envs: yes (" + ("asked for" if gpu else "nvidia-smi lists a GPU") + ")" if with_gpu
         else "GPU envs: no (nvidia-smi lists no GPU); `make setup GPU=1` builds them anyway")
    for name in names:
        if not (_setup_conda_env(conda, name, root, echo) if conda
                else _setup_venv(name, root, echo)):
            return 1
    echo("\nKernels registered: " + ", ".join(backends.kernel_name(n) for n in names))
    echo("Next: `make run` runs the benchmarks (`make lab` to step through the notebooks).")
    return 0
