"""Where an env's Python is: the conda tool on PATH (or venvs), the conda envs it lists, the
python inside a venv or a conda env, and the driver python that runs gpubench's own commands.
Stdlib-only at import."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from gpubench.envs.names import CONDA_TOOLS, SETUP_COMMANDS, VENV_DIRS, EnvError, kernel_name
from gpubench.machine import project_root


def find_conda() -> str | None:
    """Path of mamba, conda or micromamba, or None for venvs; GPUBENCH_CONDA=TOOL|PATH|none
    decides."""
    choice = os.environ.get("GPUBENCH_CONDA", "").strip()
    if choice.lower() == "none":
        return None
    found = next(filter(None, map(shutil.which, [choice] if choice else CONDA_TOOLS)), None)
    if choice and found is None:
        raise EnvError(f"GPUBENCH_CONDA={choice!r} is not a command on PATH; set it to mamba, "
                       "conda, micromamba or the full path of one, or to none to use venvs")
    return found


def venv_python(venv: Path) -> Path:
    """The python of a venv: bin/python, or Scripts/python.exe on Windows."""
    return venv / "Scripts" / "python.exe" if os.name == "nt" else venv / "bin" / "python"


def conda_python(prefix: str) -> Path:
    """The python of a conda env: bin/python, or python.exe at the prefix on Windows."""
    return Path(prefix) / ("python.exe" if os.name == "nt" else "bin/python")


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
    root = Path(root) if root is not None else project_root()
    drivers = (env,) if env else ("cpu", "jax-cpu")
    conda = find_conda()
    if conda is None:
        pythons = [venv_python(root / VENV_DIRS[env]) for env in drivers]
        return str(next((python for python in pythons if python.exists()), pythons[0]))
    found = conda_envs(conda)
    prefix = next((found[kernel_name(env)] for env in drivers if kernel_name(env) in found), None)
    if prefix is None:
        raise EnvError(f"{conda} has no env {kernel_name(drivers[0])}; create it with "
                       f"{SETUP_COMMANDS.get(drivers[0], '`make setup`')}")
    return str(conda_python(prefix))
