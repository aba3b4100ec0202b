"""Shared fixtures: fake GPU machines, paths, and the registered kernel."""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from gpubench import envs, params, rundir

envs.use_checkout_kernels()  # as `make test` does: this checkout's kernels first

pytest_plugins = ("jax_env",)  # the JAX env built from wheels, and its quick run

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
# The notebooks in the reading order (notebooks/README.md): the chapters, then the report.
READING_ORDER = (*params.NOTEBOOKS, "Compare_CPU_GPU")


# `make test` runs the suite in two pytest-xdist workers, a test file each at a time (--dist
# loadfile): the tests that share a session run (the nbval pass, the runner's quick run, the JAX
# env, the torch env) each live in one file, so no run is made twice. The files that take
# longest go first, so the two workers end at about the same time; the rest keep their order.
LONGEST_FIRST = ("test_runner.py", "test_jax_env.py", "test_torch_env.py", "test_notebooks.py",
                 "test_scaling.py", "test_runner_crashes.py", "test_factors.py", "test_chapter.py",
                 "test_library.py")


def pytest_collection_modifyitems(items) -> None:
    """Put the test files of LONGEST_FIRST first, in that order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture
def fake_machine(monkeypatch):
    """Return a function that fakes the GPUs the backend sees and its build type, through the
    backend module's public functions (gpu_count, is_cuda_build, compute_capability, gpu_name)."""
    from gpubench import backends

    def fake(gpus: int = 0, cuda_build: bool = False,
             capability: tuple[int, int] | None = None) -> list[str]:
        backend = backends.current()
        monkeypatch.setattr(backend, "gpu_count", lambda: gpus)
        monkeypatch.setattr(backend, "is_cuda_build", lambda: cuda_build)
        monkeypatch.setattr(backend, "compute_capability", lambda index: capability)
        monkeypatch.setattr(backend, "gpu_name", lambda index: f"Fake GPU {index}")
        return [f"gpu:{i}" for i in range(gpus)]

    return fake


@pytest.fixture
def fake_command(tmp_path, monkeypatch):
    """Put an executable shell script named `name` first on PATH."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def make(name: str, script: str) -> Path:
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + script + "\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return path

    return make


@pytest.fixture(scope="session")
def cpu_kernel() -> str:
    """The registered gpubench-cpu kernel; fails (never skips) when setup has not run."""
    from jupyter_client.kernelspec import KernelSpecManager

    from gpubench import backends

    kernel = backends.kernel_name("cpu")
    if kernel not in KernelSpecManager().find_kernel_specs():
        pytest.fail(f"the Jupyter kernel {kernel} is not registered: run `make setup`")
    return kernel


def read_only_below(monkeypatch, root: Path) -> None:
    """Make creating any file below `root` fail as on a read-only mount (EROFS)."""
    import errno

    real_open = os.open

    def read_only(path, flags, *args):
        if str(path).startswith(str(root)) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only)


def python_env(**extra: str) -> dict:
    """os.environ plus `extra`, for subprocesses."""
    return {**os.environ, **extra}


PYTHON = sys.executable


# The notebooks of the shared `gpubench run`: the runner's end-to-end check (a matmul chapter, a
# training chapter, the report). Every chapter runs once in the nbval session below.
QUICK_RUN_NOTEBOOKS = ("performanceTest", "Mnist_MLP_h1000")


@pytest.fixture(scope="session")
def _quick_run(tmp_path_factory, cpu_kernel):
    """One `gpubench run --profile quick --envs cpu`, shared by the tests that read its output."""
    import subprocess

    out = tmp_path_factory.mktemp("quick") / "run"
    proc = subprocess.run([PYTHON, "-m", "gpubench", "run", "--profile", "quick", "--envs", "cpu",
                           "--notebooks", ",".join(QUICK_RUN_NOTEBOOKS), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True,
                          timeout=1500, env=python_env(GPUBENCH_DATA_SOURCE="synthetic"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out, proc.stdout + proc.stderr


SANITIZE = NOTEBOOKS / "nbval_sanitize.cfg"


def run_nbval(folder: Path, *paths, run_dirs=None, keep: Path | None = None,
              strict: bool = False):
    """`pytest --nbval-lax` with the shipped sanitize rules, the quick profile and synthetic
    data, as `make nbval` runs it, in `folder`; with `keep`, the notebooks as executed are
    written there (tests/nbval_keep.py), and the gpubench modules each kernel loaded to
    folder/modules (tests/nbval_modules.py); with `strict`, `--nbval` (every output compared)."""
    import subprocess

    env = python_env(GPUBENCH_PROFILE="quick", GPUBENCH_DATA_SOURCE="synthetic",
                     GPUBENCH_RESULTS_PATH=str(folder / "results.jsonl"),
                     GPUBENCH_RUN_DIRS=str(run_dirs or ""), GPUBENCH_RUN_ID="nbval-run",
                     GPUBENCH_NBVAL_KEEP=str(keep or ""), MPLBACKEND="Agg",
                     GPUBENCH_NBVAL_MODULES=str(folder / "modules") if keep else "",
                     PYTHONPATH=os.pathsep.join([str(REPO / "tests"),
                                                 os.environ.get("PYTHONPATH", "")]).rstrip(":"))
    return subprocess.run([PYTHON, "-m", "pytest", "--nbval" if strict else "--nbval-lax",
                           "--nbval-sanitize-with",
                           str(SANITIZE), "-p", "no:cacheprovider", "-p", "nbval_keep",
                           "-p", "nbval_modules", "-q",
                           *map(str, paths)],
                          cwd=folder, capture_output=True, text=True, env=env, timeout=1800)


@dataclass
class NbvalRun:
    """The session's one nbval pass over notebooks/: its process, records and executed copies."""
    proc: object
    folder: Path
    records: list[dict]

    def executed(self, name: str):
        """Notebook `name` as nbval executed it (outputs of this run)."""
        import nbformat

        return nbformat.read(self.folder / "executed" / f"{name}.ipynb", as_version=4)

    def text(self, name: str) -> str:
        """Everything `name`'s code cells printed or displayed as text in this run."""
        return "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", ""))
                       + str(o.get("data", {}).get("text/plain", ""))
                       for c in self.executed(name).cells if c.cell_type == "code"
                       for o in c.outputs)


@pytest.fixture(scope="session")
def nbval_run(tmp_path_factory, cpu_kernel) -> NbvalRun:
    """Every notebook executed once, by nbval (lax, quick profile, synthetic data) in the
    reading order, Compare_CPU_GPU last, reporting on the records the chapters before it
    wrote; the chapters' tests read its records and outputs."""

    folder = tmp_path_factory.mktemp("nbval")
    order = [NOTEBOOKS / f"{name}.ipynb" for name in READING_ORDER]
    proc = run_nbval(folder, *order, run_dirs=folder, keep=folder / "executed")
    path = folder / "results.jsonl"
    return NbvalRun(proc=proc, folder=folder,
                    records=rundir.read_records(path) if path.exists() else [])


@pytest.fixture
def quick_run(_quick_run) -> Path:
    """The run directory of the shared quick run."""
    return _quick_run[0]


@pytest.fixture
def quick_run_output(_quick_run) -> str:
    """What the shared quick run printed."""
    return _quick_run[1]


def chapter_fit(model, data, *, epochs: int, batch_size: int, device: str = "cpu",
                store=None, callbacks=()):
    """The training chapters' cells: prepare, fit with the epoch timer, evaluate, record.
    Returns (record, history); `callbacks` go after the timer (a test's own)."""
    from gpubench import devices, timing, training

    (x_train, y_train), (x_val, y_val), (x_test, y_test) = training.prepare(
        data, model.input_shape[1:])
    timer = timing.epoch_timer(device)
    with devices.scope(device):
        history = model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs,
                            validation_data=(x_val, y_val), callbacks=[timer, *callbacks],
                            verbose=0)
        test = model.evaluate(x_test, y_test, batch_size=batch_size, verbose=0)
    record = training.record(model, history, timer, data, batch_size=batch_size,
                             samples=(len(x_train), len(x_val)), test=test, store=store,
                             env="test", notebook="Mnist_MLP_h1000")
    return record, history
