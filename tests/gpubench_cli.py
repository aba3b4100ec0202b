"""The gpubench CLI in a subprocess, and kernels made like the gpubench-cpu one: what the
runner's tests (test_runner.py, test_runner_crashes.py) share."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO, python_env

RUN = [sys.executable, "-m", "gpubench", "run"]


def run_gpubench(args, env=None, timeout=1200):
    """`gpubench run ARGS` from the checkout, synthetic data unless `env` says otherwise."""
    return subprocess.run(RUN + args, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=env or python_env(GPUBENCH_DATA_SOURCE="synthetic"))


def kernel_like(cpu_kernel: str, name: str, tmp_path, monkeypatch, **extra) -> None:
    """Register kernel `name` on a temporary JUPYTER_PATH, running the gpubench-cpu kernel's
    Python."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(cpu_kernel)
    folder = tmp_path / "jupyter" / "kernels" / name
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps({"argv": spec.argv, "language": "python",
                                                    **extra}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
