"""Where the envs' Jupyter kernels live and what they are: this checkout's kernel folder (first
on JUPYTER_PATH), the gpubench-* kernel specs, and whether a kernel runs another checkout's
code. Stdlib-only at import."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpubench.envs.names import KERNEL_PREFIX, EnvError, setup_command
from gpubench.machine import project_root


def checkout_kernels_dir(root: Path | None = None) -> Path:
    """This checkout's own Jupyter data folder; its kernels/ holds the kernels of this checkout."""
    return (Path(root) if root is not None else project_root()) / ".jupyter"


def use_checkout_kernels() -> None:
    """Put this checkout's kernels first on JUPYTER_PATH (in os.environ), ahead of --user ones."""
    first = str(checkout_kernels_dir())
    rest = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p and p != first]
    os.environ["JUPYTER_PATH"] = os.pathsep.join([first, *rest])


def kernel_specs() -> dict[str, dict]:
    """Env name -> its gpubench-ENV kernel: jupyter_client's spec dict plus kernel and
    resource_dir."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager  # noqa: PLC0415 - not in bare python3
    except ImportError as exc:
        raise EnvError(
            f"jupyter_client is not installed in {sys.executable}; run this with the gpubench "
            "env's python (`python3 -m gpubench envs --driver` prints it), or create that env "
            f"first with {setup_command()}"
        ) from exc
    return {name.removeprefix(KERNEL_PREFIX): {**info["spec"], "kernel": name,
                                              "resource_dir": info["resource_dir"]}
            for name, info in sorted(KernelSpecManager().get_all_specs().items())
            if name.startswith(KERNEL_PREFIX)}


def foreign_kernel(spec: dict) -> str | None:
    """Why a kernel (from kernel_specs) would run another checkout's code, or None when it is ours:
    registered in this checkout's folder, given PYTHONPATH=this checkout, or a python inside it."""
    root = project_root()
    python = os.path.abspath(spec["argv"][0]) if spec["argv"] else ""
    if (Path(spec["resource_dir"]).resolve().is_relative_to(checkout_kernels_dir().resolve())
            or spec["env"].get("PYTHONPATH") == str(root) or Path(python).is_relative_to(root)):
        return None
    return (f"kernel {spec['kernel']} ({spec['resource_dir']}) is not this checkout's: it runs "
            f"{python or 'nothing'}, which may import another clone's gpubench; run `make setup` "
            f"in {root} to register this checkout's kernels")
