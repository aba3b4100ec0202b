"""The TensorFlow-free PyTorch env, as `make setup BACKENDS=torch` builds it, and one quick run in it.

`torch_env` (session-scoped) is the torch-cpu env of this checkout (`.venv-torch`, or the
conda env gpubench-torch-cpu): `make test` sets it up first; where it is missing the fixture
runs `gpubench setup --backends torch`, which pip-installs gpubench[torch] (torch==2.13.0, the
CPU build: docs/setup.md). `torch_run` runs every notebook there once, through
`gpubench run --here` in the quick profile (the CNNs on fewer images, as the JAX run) with
synthetic data; other tests read its records, so nothing runs twice.

Use the fixtures from a test module with `from torch_env import torch_env, torch_run`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpubench.envs import create
from jax_env import DROPPED, JAX_RUN_PARAMS, JaxEnv, JaxRun, run_here

REPO = Path(__file__).resolve().parents[1]
TorchEnv = JaxEnv  # the same shape: a venv's python and the environment to run it in
TorchRun = JaxRun


def _python() -> Path:
    """The torch-cpu env's python, set up first when it is missing."""
    python = Path(create.driver_python(REPO, env="torch-cpu"))
    if not python.exists():
        done = subprocess.run([sys.executable, "-m", "gpubench", "setup", "--backends", "torch"],
                              capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            pytest.fail("setting up the torch-cpu env failed:\n" + (done.stdout + done.stderr)
                        [-4000:])
        python = Path(create.driver_python(REPO, env="torch-cpu"))
    return python


def torch_environment(python: Path) -> TorchEnv:
    """The torch-cpu env with KERAS_BACKEND=torch and synthetic data, outside the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env.update(PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}", KERAS_BACKEND="torch",
               GPUBENCH_DATA_SOURCE="synthetic")
    return TorchEnv(venv=python.parent.parent, python=python, env=env)


_BUILT: dict[str, object] = {}  # one env and one run per session, whoever asks


@pytest.fixture(scope="session")
def torch_env() -> TorchEnv:
    """The torch-cpu env (set up once if missing)."""
    if "env" not in _BUILT:
        _BUILT["env"] = torch_environment(_python())
    return _BUILT["env"]


@pytest.fixture(scope="session")
def torch_run(torch_env, tmp_path_factory) -> TorchRun:
    """Every notebook run once in the torch env (quick profile, synthetic data); its records."""
    if "run" not in _BUILT:
        _BUILT["run"] = run_here(torch_env, tmp_path_factory.getbasetemp() / "torchrun")
    return _BUILT["run"]


__all__ = ["JAX_RUN_PARAMS", "TorchEnv", "TorchRun", "torch_env", "torch_run"]
