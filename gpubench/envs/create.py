"""Creating the envs: a conda env from environment-NAME.yml when mamba, conda or micromamba is
on PATH, else a venv with gpubench pip-installed in it; then its kernel registered in this
checkout's .jupyter (PYTHONPATH=this checkout) and with --user. Each step is printed, and a
failed one says what to do. Stdlib-only at import: a bare `python3 -m gpubench setup` runs it."""

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
    DEFAULT_BACKENDS,
    EXTRAS,
    VENV_DIRS,
    VENV_PYTHONS,
    EnvError,
    display_name,
    env_backend,
    kernel_name,
    parse_backends,
)
from gpubench.envs.pythons import conda_environ, conda_envs, find_conda, venv_python
from gpubench.machine import project_root
from gpubench.rundir import locked  # stdlib-only at import


def gpu_requested(gpu: bool) -> bool:
    """Whether setup builds the GPU env: asked for, or `nvidia-smi -L` lists a GPU."""
    return bool(gpu) or bool(machine.nvidia_smi_gpus())



def _run(cmd: list[str], step: str, hint: str, *, cwd: Path, echo: Callable,
         env: dict | None = None) -> bool:
    """Print and run one setup step with its output streaming; on failure say which step and
    what to do."""
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


def _conda_create_cmd(conda: str, env: str, yml: str, exists: bool) -> list[str]:
    """The command that creates conda env `env` from `yml`, or updates it when it exists."""
    if Path(conda).name.lower().startswith("micromamba"):  # its create/update spelling differs
        if exists:
            return [conda, "update", "-y", "-n", env, "-f", yml]
        return [conda, "create", "-y", "-f", yml]
    if exists:
        return [conda, "env", "update", "-n", env, "-f", yml, "--prune"]
    return [conda, "env", "create", "-f", yml]


def _setup_conda_env(conda: str, name: str, root: Path, echo: Callable) -> bool:
    """Create or update the conda env of `name` from its yml file, then register its kernel."""
    kernel = kernel_name(name)
    yml = f"environment-{name}.yml"
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
    action = "update" if exists else "create"
    remove = shlex.join([conda, "env", "remove", "-y", "-n", kernel])
    ok = _run(
        _conda_create_cmd(conda, kernel, yml, exists),
        f"{action} conda env {kernel} from {yml}",
        "Read the output above and fix its cause (network, disk space, a package conflict), then "
        f"run setup again. To start from scratch: `{remove}`.",
        cwd=root, echo=echo, env=conda_environ(),
    )
    python = [conda, "run", "-n", kernel, "python"]
    return ok and _register(
        python, name, root, f"ipykernel comes from {yml}; check "
        f"`{shlex.join([*python, '-m', 'ipykernel', '--version'])}`, then run setup again.",
        echo, conda_environ(),
    )


def _register(python: list[str], name: str, root: Path, hint: str, echo: Callable,
              env: dict | None = None) -> bool:
    """Register env `name`'s kernel in this checkout's folder, then (a warning if it fails)
    with --user. Both specs set KERAS_BACKEND, so no Keras config can pick another backend."""
    kernel = kernel_name(name)
    base = [*python, "-m", "ipykernel", "install", "--user", "--name", kernel,
            "--display-name", display_name(name), "--env", "KERAS_BACKEND", env_backend(name)]
    env = dict(env if env is not None else os.environ)
    step = f"register the Jupyter kernel {kernel}"
    here = {**env, "JUPYTER_DATA_DIR": str(checkout_kernels_dir(root))}
    if not _run(base + ["--env", "PYTHONPATH", str(root)], step + " for this checkout", hint,
                cwd=root, echo=echo, env=here):
        return False
    # `ipykernel install --user` deletes and re-copies the kernel folder: two at once crash one
    # of them (its logo-svg.svg vanishes), so they take turns under a per-user lock.
    user = os.getuid() if hasattr(os, "getuid") else 0
    echo("$ " + shlex.join(base))
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
    last = said.splitlines()[-1] if said else f"exit code {code}"
    echo(f"warning: could not register {kernel} for Jupyter started by hand ({last}). This "
         "checkout's kernel is registered, and `gpubench run`, `make lab` and `make test` use "
         "it; for Jupyter started by hand, make Jupyter's per-user folder writable (`jupyter "
         f"--data-dir` names it) or set JUPYTER_PATH={checkout_kernels_dir(root)}")
    return True


def _broken_venv(venv: Path) -> str | None:
    """What an interrupted set-up left missing in an existing venv (its python, or a complete
    pip: pip records its install last), or None when nothing is."""
    if not venv_python(venv).exists():  # a dangling link counts as missing
        return f"it has no {venv_python(venv).relative_to(venv)}"
    site = "Lib/site-packages" if os.name == "nt" else "lib/python*/site-packages"
    if (venv / "pyvenv.cfg").is_file() and not any(venv.glob(f"{site}/pip-*.dist-info/RECORD")):
        return "its pip is missing or half-installed"
    return None


def _create_venv(root: Path, dirname: str, echo: Callable, clear: bool = False) -> bool:
    """Make the venv `dirname` at root with this Python (`clear`: empty a broken one first);
    remove a half-made one on failure."""
    if sys.version_info[:2] not in VENV_PYTHONS:
        want = ", ".join(".".join(map(str, v)) for v in VENV_PYTHONS)
        echo(
            f"\nsetup failed: the venv needs Python {want} (TensorFlow 2.21, JAX 0.10, numpy 2.4), "
            f"but this is Python {sys.version.split()[0]} at {sys.executable}.\nRun "
            "`python3.11 -m gpubench setup`, or install conda/micromamba (its envs bring their own "
            "Python)."
        )
        return False
    venv = root / dirname
    existed = venv.exists()
    ok = _run(
        [sys.executable, "-m", "venv", *(["--clear"] if clear else []), dirname],
        f"create the venv {dirname}",
        "If the output above says ensurepip is not available: `sudo apt install python3-venv` "
        "(Debian/Ubuntu), or install conda/micromamba; then run setup again.",
        cwd=root, echo=echo,
    )
    if not ok and not existed:
        shutil.rmtree(venv, ignore_errors=True)
    return ok


def _setup_venv(name: str, root: Path, echo: Callable) -> bool:
    """Make the venv of `name`, pip install gpubench with its extra (unless stamped), register
    its kernel."""
    dirname = VENV_DIRS[name]
    venv = root / dirname
    python = venv_python(venv)
    broken = _broken_venv(venv) if venv.exists() else None
    if broken and Path(sys.prefix).resolve() == venv.resolve():
        echo(f"\nsetup failed: {dirname} is broken ({broken}) and runs this setup; rebuild it "
             f"with `rm -rf {shlex.quote(str(venv))} && python3 -m gpubench setup`")
        return False
    if broken:
        echo(f"{dirname} is broken ({broken}; an interrupted set-up leaves it so): rebuilding it")
    if (broken or not python.exists()) and not _create_venv(root, dirname, echo, bool(broken)):
        return False
    # The stamp holds pyproject.toml's sha256 when the venv's pip install is current.
    stamp = root / dirname / ".gpubench-installed"
    digest = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()
    spec = f".[{EXTRAS[name]},test]"
    if stamp.is_file() and stamp.read_text().strip() == digest:
        echo(f"{dirname}: gpubench{spec[1:]} is installed for this pyproject.toml; skipping pip")
    else:
        ok = _run(
            [str(python), "-m", "pip", "install", "-e", spec],
            f"pip install gpubench{spec[1:]} into {dirname}",
            "Read pip's output above and fix its cause (network, disk space; the GPU extras need "
            f"Linux or WSL2), then run setup again. To start from scratch: delete {dirname} and "
            "run setup again.",
            cwd=root, echo=echo,
        )
        if not ok:
            return False
        stamp.write_text(digest + "\n")
    return _register(
        [str(python)], name, root,
        f"ipykernel comes with gpubench's dependencies; check `{python} -m ipykernel --version`, "
        f"or delete {dirname} and run setup again.",
        echo,
    )


def setup(gpu: bool = False, backends: str | Iterable[str] = DEFAULT_BACKENDS, *,
          root: Path | None = None, echo: Callable = print) -> int:
    """Make each backend's CPU env (its GPU env too if asked or a GPU is found) and register
    the kernels; 0 ok, 1 failed; ValueError for a backend gpubench does not support."""
    chosen = parse_backends(backends)
    root = Path(root) if root is not None else project_root()
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
    names = [backends.env_label(b, gpu) for gpu in (False, True) for b in chosen
             if with_gpu or not gpu]
    if conda:
        echo(f"gpubench setup: conda envs with {conda} (GPUBENCH_CONDA=none uses venvs instead)")
    else:
        echo("gpubench setup: no mamba, conda or micromamba on PATH; using venvs and pip")
    echo(f"Backends: {', '.join(chosen)} (BACKENDS=tensorflow,jax,torch adds JAX and PyTorch)")
    if with_gpu:
        echo("GPU envs: yes (" + ("asked for" if gpu else "nvidia-smi lists a GPU") + ")")
    else:
        echo("GPU envs: no (nvidia-smi lists no GPU); `make setup GPU=1` builds them anyway")
    for name in names:
        ok = _setup_conda_env(conda, name, root, echo) if conda else _setup_venv(name, root, echo)
        if not ok:
            return 1
    echo("\nKernels registered: " + ", ".join(kernel_name(name) for name in names))
    echo("Next: `make run` runs the benchmarks (`make lab` to step through the notebooks).")
    return 0

