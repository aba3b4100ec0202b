"""What follows from an env's name (the labels are `backends.ENVS`): its venv, its pip extra, its
kernel's display name, the command that makes it where the user is, and where its Python is."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterable
from pathlib import Path

from gpubench import backends, machine  # stdlib-only at import

EXTRAS = {env: env.removesuffix("-cpu") for env in backends.ENVS}  # pyproject.toml's extras
VENV_DIRS = {env: ".venv" if env == "cpu" else f".venv-{EXTRAS[env]}" for env in backends.ENVS}


class EnvError(RuntimeError):
    """An environment or kernel problem; the message says what to do."""


def display_name(env: str) -> str:
    """The kernel's display name: the same in every checkout and Python, as notebooks store it."""
    return f"Python 3 ({backends.kernel_name(env)})"


def install_source() -> str:
    """What pip installed gpubench from: the wheel file or folder that PEP 610's direct_url.json
    names while it still exists, else "gpubench" (a package index)."""
    found = [d.read_text("direct_url.json") for d in importlib.metadata.distributions(
        name="gpubench")]  # an egg-info of a build in the checkout has none
    try:
        url = next((json.loads(text).get("url", "") for text in found if text), "")
    except (ValueError, AttributeError):
        url = ""
    path = urllib.parse.unquote(urllib.parse.urlparse(url).path) if url.startswith("file:") else ""
    return path if path and Path(path).exists() else "gpubench"


def pip_install(extra: str) -> str:
    """`pip install 'SOURCE[extra]'`: gpubench with `extra`, from where it was installed from."""
    return f"pip install '{install_source()}[{extra}]'"


def setup_command(env: str = "cpu") -> str:
    """The command that makes env `env` where the user is: the checkout's `make setup ...`, else
    pip with gpubench's extra, then `gpubench run --here` in that Python."""
    backend, gpu = backends.env_backend(env), backends.is_gpu_env(env)
    more = "" if backend == "tensorflow" else f"tensorflow,{backend}"
    if machine.checkout() is not None:
        make = "make setup" + (" GPU=1" if gpu else "") + (f" BACKENDS={more}" if more else "")
        cli = "gpubench setup" + (" --gpu" if gpu else "") + (f" --backends {more}" if more else "")
        return f"`{make}` (or `{cli}`)"
    chosen = "" if backend == "tensorflow" else f"KERAS_BACKEND={backend} "
    own = " in a Python of its own" if gpu else ""
    return (f"`{pip_install(EXTRAS.get(env, 'cpu'))}`{own}, then `{chosen}gpubench run --here` "
            "in that Python")


def parse_backends(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """"tensorflow,jax" (or a list) -> ("tensorflow", "jax"); ValueError naming a bad one."""
    names = value.split(",") if isinstance(value, str) else list(value or [])
    chosen = tuple(dict.fromkeys(name.strip() for name in names if name.strip()))
    use = (f"use some of {', '.join(backends.SUPPORTED)} (BACKENDS=tensorflow,jax, or "
           "--backends tensorflow,jax)")
    for name in chosen:
        if name not in backends.SUPPORTED:
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
    tools = [choice] if choice else ["mamba", "conda", "micromamba"]
    found = next(filter(None, map(shutil.which, tools)), None)
    if choice and found is None:
        raise EnvError(f"GPUBENCH_CONDA={choice!r} is not a command on PATH; set it to mamba, "
                       "conda, micromamba or the full path of one, or to none to use venvs")
    return found


def venv_python(venv: Path) -> Path:
    """The python of a venv: bin/python, or Scripts/python.exe on Windows."""
    return venv / "Scripts" / "python.exe" if os.name == "nt" else venv / "bin" / "python"


def conda_environ() -> dict[str, str]:
    """os.environ for conda commands, answering yes to any prompt (mamba 2 asks before creating)."""
    return {**os.environ, "CONDA_ALWAYS_YES": "true", "MAMBA_ALWAYS_YES": "true"}


def conda_envs(conda: str) -> dict[str, str]:
    """Conda env name -> prefix, from `<conda> env list --json`."""
    cmd = [conda, "env", "list", "--json"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             env=conda_environ(), check=True)
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
    """The python that runs gpubench's own commands: the cpu env's, else the jax-cpu env's
    (with `env`, that env's only)."""
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
