"""The TensorFlow-free JAX env, built for real from a wheel folder, and one quick run in it.

`jax_env` (session-scoped) builds gpubench's wheel, fills WHEELS (git-ignored, reused while
pyproject.toml and this Python are unchanged) with the wheels of gpubench[jax] and everything
they need, and installs them with `--no-index` into a fresh venv: what docs/backends.md's offline
procedure does on a machine with no network. `jax_run` runs every notebook there once, through
`gpubench run --here` in the quick profile (the CNNs on fewer images) with synthetic data;
other tests read its records.

Use the fixtures from a test module with `from jax_env import jax_env, jax_run`. Each is built
once per session, however many modules import it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpubench import params

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / ".wheels"
STAMP = WHEELS / ".gpubench-wheels"
# A JAX run must never see these: they would let it import the checkout or another env.
DROPPED = ("PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "JUPYTER_PATH", "PYTHONHOME")


@dataclass
class JaxEnv:
    """A fresh venv with gpubench[jax] installed from wheels, and the environment to run it in."""

    venv: Path
    python: Path
    env: dict[str, str]
    log: str = ""

    def run(self, *args: str, timeout: float = 600, cwd: Path | None = None
            ) -> subprocess.CompletedProcess:
        """Run this venv's python with `args`, outside the checkout."""
        return subprocess.run([str(self.python), *args], capture_output=True, text=True,
                              env=self.env, cwd=cwd or self.venv, timeout=timeout,
                              stdin=subprocess.DEVNULL)


@dataclass
class JaxRun:
    """`gpubench run --here --profile quick` in the JAX env: its exit code, output and records."""

    env: JaxEnv
    run_dir: Path
    returncode: int
    output: str
    records: list[dict] = field(default_factory=list)

    def manifest(self) -> dict:
        """The run's run.json ({} when it wrote none)."""
        path = self.run_dir / "run.json"
        return json.loads(path.read_text()) if path.is_file() else {}


def _check(cmd: list[str], what: str, **kw) -> str:
    """Run `cmd`; pytest.fail with its output's tail if it fails; return that output."""
    done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        pytest.fail(f"{what} failed (exit code {done.returncode}): `{' '.join(cmd)}`\n"
                    + output[-4000:])
    return output


def _wheels_key() -> str:
    """What the wheel folder depends on: the pins, and this Python and platform."""
    text = (REPO / "pyproject.toml").read_bytes() + (
        f"{sys.version_info[:2]} {platform.machine()} {sys.platform}".encode())
    return hashlib.sha256(text).hexdigest()


def fill_wheels(gpubench_wheel: Path) -> Path:
    """WHEELS with every wheel gpubench[jax] needs (downloaded once per pyproject.toml)."""
    if STAMP.is_file() and STAMP.read_text().strip() == _wheels_key():
        return WHEELS
    WHEELS.mkdir(exist_ok=True)
    STAMP.unlink(missing_ok=True)
    _check([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
            "--dest", str(WHEELS), f"{gpubench_wheel}[jax]"],
           "downloading the wheels of gpubench[jax] (needs PyPI)")
    for old in WHEELS.glob("gpubench-*.whl"):  # gpubench's own wheel is built fresh each time
        old.unlink()
    STAMP.write_text(_wheels_key() + "\n")
    return WHEELS


def build_jax_env(base: Path) -> JaxEnv:
    """Build gpubench's wheel, fill the wheel folder and install both into a fresh venv at
    base/venv with --no-index (no network, no TensorFlow)."""
    dist = base / "dist"
    log = _check([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                  str(dist), str(REPO)], "building gpubench's wheel")
    (wheel,) = dist.glob("gpubench-*.whl")
    fill_wheels(wheel)
    venv = base / "venv"
    log += _check([sys.executable, "-m", "venv", str(venv)], "creating the venv")
    python = venv / "bin" / "python"
    log += _check([str(python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
                   str(WHEELS), f"{wheel}[jax]"], "installing gpubench[jax] with --no-index")
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", KERAS_BACKEND="jax",
               GPUBENCH_DATA_SOURCE="synthetic", PIP_NO_INDEX="1")
    return JaxEnv(venv=venv, python=python, env=env, log=log)


# What the JAX run changes from the quick profile: fewer images for the two CNNs, whose
# convolutions JAX runs several times slower than TensorFlow on a CPU. The test asks that every
# chapter runs and records on JAX, not how long it trains.
JAX_RUN_PARAMS = ("Mnist_CNN:max_train_samples=2000", "Keras_Cifar_CNN:max_train_samples=1000")


def report_in(env: JaxEnv, run_dir: Path, out: Path) -> str:
    """Compare_CPU_GPU run by papermill in `env`'s own Python over `run_dir`: its report.md,
    after checking that it exited 0 and stored no error output."""

    notebook = params.notebooks_dir() / "Compare_CPU_GPU.ipynb"
    executed = out / "Compare_CPU_GPU.ipynb"
    done = env.run("-m", "papermill", str(notebook), str(executed), "-k", "python3",
                   "-p", "run_dirs", str(run_dir), "-p", "out", str(out), cwd=out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shown = json.loads(executed.read_text())
    outputs = [o for c in shown["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    return (out / "report.md").read_text()


def run_here(jax: JaxEnv, run_dir: Path, timeout: float = 1800) -> JaxRun:
    """Every notebook, once, in the JAX env's own kernel: `gpubench run --here --profile quick`
    with JAX_RUN_PARAMS."""
    overrides = [arg for value in JAX_RUN_PARAMS for arg in ("-p", value)]
    done = jax.run("-m", "gpubench", "run", "--here", "--profile", "quick", *overrides,
                   "--out", str(run_dir), timeout=timeout)
    results = run_dir / "results.jsonl"
    records = []
    if results.is_file():
        for line in results.read_text(encoding="utf-8").splitlines():
            if line.strip():
                records.append(json.loads(line))
    return JaxRun(env=jax, run_dir=run_dir, returncode=done.returncode,
                  output=done.stdout + done.stderr, records=records)


_BUILT: dict[str, object] = {}  # one build and one run per session, whoever asks


@pytest.fixture(scope="session")
def jax_env(tmp_path_factory) -> JaxEnv:
    """The TensorFlow-free JAX env, installed from wheels with --no-index (built once)."""
    if "env" not in _BUILT:
        base = tmp_path_factory.getbasetemp() / "jax-env"
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir()
        _BUILT["env"] = build_jax_env(base)
    return _BUILT["env"]


@pytest.fixture(scope="session")
def jax_run(jax_env, tmp_path_factory) -> JaxRun:
    """Every notebook run once in the JAX env (quick profile, synthetic data); its records."""
    if "run" not in _BUILT:
        _BUILT["run"] = run_here(jax_env, tmp_path_factory.getbasetemp() / "jaxrun")
    return _BUILT["run"]
