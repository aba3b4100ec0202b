"""`gpubench setup`: a conda env from environment-NAME.yml when a conda tool is on PATH, else a
venv with gpubench pip-installed; each checked by importing its backend and Keras there, then
its kernel registered for this checkout and with --user. Each step is printed, and a failed one
says what to do."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from gpubench import backends, machine  # stdlib-only at import
from gpubench.envs.kernels import checkout_kernels_dir
from gpubench.envs.names import (
    EXTRAS,
    VENV_DIRS,
    EnvError,
    conda_environ,
    conda_envs,
    display_name,
    find_conda,
    parse_backends,
    venv_python,
)
from gpubench.rundir import locked  # stdlib-only at import

# Pythons a venv can use: TensorFlow 2.21, JAX 0.10 and numpy 2.4 have wheels for them.
VENV_PYTHONS = ((3, 11), (3, 12), (3, 13))
STAMP = ".gpubench-installed"  # in a venv: pyproject.toml's sha256 once its pip install is done


def gpu_requested(gpu: bool) -> bool:
    """Whether setup builds the GPU env: asked for, or `nvidia-smi -L` lists a GPU."""
    return bool(gpu) or bool(machine.nvidia_smi_gpus())


def _run(cmd: list[str], step: str, hint: str, *, cwd: Path, echo: Callable,
         env: dict | None = None) -> bool:
    """Print and run one step, its output streaming; on failure say which step and what to do."""
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
    """Why env `name`'s backend and Keras (with its KERAS_BACKEND) do not import in `python`, or
    None when they do: what setup promises."""
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
    """Create or update the conda env of `name` from its yml file, check it, register it."""
    kernel, yml = backends.kernel_name(name), f"environment-{name}.yml"
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
    if not _run([conda, *cmd], f"{'update' if exists else 'create'} conda env {kernel} from "
                f"{yml}", "Read the output above and fix its cause (network, disk space, a "
                f"package conflict), then run setup again. {remove}.", cwd=root, echo=echo,
                env=conda_environ()):
        return False
    python = [conda, "run", "-n", kernel, "python"]
    if why := import_fails(python, name, echo, conda_environ()):
        echo(f"\nsetup failed: conda env {kernel} is broken: {why}. {remove}, then run setup "
             "again.")
        return False
    return _register(python, name, root, f"ipykernel comes from {yml}; check `"
                     f"{shlex.join([*python, '-m', 'ipykernel', '--version'])}`, then run setup "
                     "again.", echo, conda_environ())


def _register(python: list[str], name: str, root: Path, hint: str, echo: Callable,
              env: dict | None = None) -> bool:
    """Register env `name`'s kernel in this checkout's folder, then (a warning if it fails)
    with --user; both specs set KERAS_BACKEND, so no Keras config can pick another backend."""
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
    if code == 0:
        if done.stdout.strip():
            echo(done.stdout.strip())  # "Installed kernelspec ... in ..."
        return True
    echo(f"warning: could not register {kernel} for Jupyter started by hand "
         f"({said.splitlines()[-1] if said else f'exit code {code}'}). This checkout's kernel "
         "is registered, and `gpubench run`, `make lab` and `make test` use it; for Jupyter "
         "started by hand, make Jupyter's per-user folder writable (`jupyter --data-dir` names "
         f"it) or set JUPYTER_PATH={checkout_kernels_dir(root)}")
    return True


def _broken_venv(venv: Path) -> str | None:
    """What an interrupted set-up left missing in a venv (its python, or a complete pip: pip
    records its install last), or None."""
    if not venv_python(venv).exists():  # a dangling link counts as missing
        return f"it has no {venv_python(venv).relative_to(venv)}"
    site = "Lib/site-packages" if os.name == "nt" else "lib/python*/site-packages"
    if (venv / "pyvenv.cfg").is_file() and not any(venv.glob(f"{site}/pip-*.dist-info/RECORD")):
        return "its pip is missing or half-installed"
    return None


def _create_venv(root: Path, dirname: str, echo: Callable, clear: bool = False) -> bool:
    """Make the venv `dirname` with this Python (`clear`: empty a broken one first); remove a
    half-made one on failure."""
    if sys.version_info[:2] not in VENV_PYTHONS:
        want = ", ".join(".".join(map(str, v)) for v in VENV_PYTHONS)
        echo(f"\nsetup failed: the venv needs Python {want} (TensorFlow 2.21, JAX 0.10, numpy "
             f"2.4), but this is Python {sys.version.split()[0]} at {sys.executable}.\nRun "
             "`python3.11 -m gpubench setup`, or install conda/micromamba (its envs bring their "
             "own Python).")
        return False
    existed = (root / dirname).exists()
    ok = _run([sys.executable, "-m", "venv", *(["--clear"] if clear else []), dirname],
              f"create the venv {dirname}", "If the output above says ensurepip is not available: "
              "`sudo apt install python3-venv` (Debian/Ubuntu), or install conda/micromamba; then "
              "run setup again.", cwd=root, echo=echo)
    if not ok and not existed:
        shutil.rmtree(root / dirname, ignore_errors=True)
    return ok


def _setup_venv(name: str, root: Path, echo: Callable) -> bool:
    """Make the venv of `name`, pip install gpubench with its extra unless its stamp is current
    and its backend imports, check that it does, register its kernel."""
    dirname = VENV_DIRS[name]
    venv = root / dirname
    python = venv_python(venv)
    broken = _broken_venv(venv) if venv.exists() else None
    afresh = f"`rm -rf {shlex.quote(str(venv))} && python3 -m gpubench setup`"
    if broken and Path(sys.prefix).resolve() == venv.resolve():
        echo(f"\nsetup failed: {dirname} is broken ({broken}) and runs this setup; rebuild it "
             f"with {afresh}")
        return False
    if broken:
        echo(f"{dirname} is broken ({broken}; an interrupted set-up leaves it so): rebuilding it")
    if (broken or not python.exists()) and not _create_venv(root, dirname, echo, bool(broken)):
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
                    f"pip install gpubench{spec[1:]} into {dirname}",
                    "Read pip's output above and fix its cause (network, disk space; the GPU "
                    "extras need Linux or WSL2), then run setup again. To start from scratch: "
                    f"{afresh}.", cwd=root, echo=echo):
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
    """Make each backend's CPU env (its GPU env too if asked or a GPU is found) and register
    the kernels; 0 ok, 1 failed; ValueError for a backend gpubench does not support."""
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
    """setup's steps, under the checkout's lock."""
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
