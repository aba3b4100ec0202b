"""Queries over loaded records, shared by the report's tables and the charts.

Which attempt of a job counts (the latest), the report's columns ("machine · env", in a
stable order) and each column's baseline (its machine's CPU env of the same backend), the
matmul series and crossover, the book's training records, and the models' titles and order.
Pure functions over the dicts `gpubench.results` reads; no ML framework, no matplotlib.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from gpubench import backends  # light: loads no framework

MODEL_TITLES = {"mlp_h1000": "MNIST MLP h1000", "mnist_cnn": "MNIST CNN",
                "cifar_cnn": "CIFAR-10 CNN"}
MODEL_ORDER = ("mlp_h1000", "mnist_cnn", "cifar_cnn")
BACKEND_TITLES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}

# What makes one measurement: a later record with the same values replaces it (hand re-runs).
_IDENTITY = ("_column", "benchmark", "notebook", "device", "size", "method", "dtype", "model",
             "factor", "batch_size", "precision", "jit_compile", "steps_per_execution",
             "input_pipeline", "strategy", "replicas", "workers")


def job_of(record: dict) -> tuple:
    """The job a record belongs to: run dir, env and notebook."""
    return record.get("_run_dir"), record["env"], record["notebook"]


def latest_attempts(records: list[dict]) -> list[dict]:
    """Only the records of each job's latest attempt (a job: run dir, env and notebook)."""
    last: dict[tuple, int] = defaultdict(int)
    for r in records:
        last[job_of(r)] = max(last[job_of(r)], r["attempt"])
    return [r for r in records if r["attempt"] == last[job_of(r)]]


def machine_of(record: dict) -> str:
    """The machine that made a record (its hostname)."""
    return record["environment"].get("hostname") or "machine"


def backend_of(record: dict) -> str:
    """The backend that made a record (older records: TensorFlow)."""
    return record.get("backend") or "tensorflow"


def backend_title(name: str) -> str:
    """A backend's name as people write it ("TensorFlow", "JAX")."""
    return BACKEND_TITLES.get(name, name)


def cpu_env(backend: str) -> str:
    """The label of `backend`'s CPU env: "cpu" for TensorFlow, "jax-cpu" for JAX."""
    return backends.LABEL_PREFIX.get(backend, f"{backend}-") + "cpu"


def label_columns(records: list[dict]) -> None:
    """Label columns "machine · env" (`_column`); add the backend when an env label holds
    several, and the run directory when a pair repeats across runs."""
    dirs_per_pair, backends_per_pair = defaultdict(set), defaultdict(set)
    for r in records:
        dirs_per_pair[(machine_of(r), r["env"])].add(r["_run_dir"])
        backends_per_pair[(machine_of(r), r["env"])].add(backend_of(r))
    for r in records:
        pair = (machine_of(r), r["env"])
        label = f"{machine_of(r)} · {r['env']}"
        if len(backends_per_pair[pair]) > 1:
            label += f" ({backend_title(backend_of(r))})"
        if len(dirs_per_pair[pair]) > 1:
            label += f" ({Path(r['_run_dir']).name})"
        r["_column"] = label


def dedupe(records: list[dict]) -> list[dict]:
    """One record per measurement: the last of those with the same identity."""
    return list({tuple(str(r.get(k)) for k in _IDENTITY): r for r in records}.values())


def backend_rank(name: str) -> tuple[int, str]:
    """Sort key of a backend: the supported ones in their order, then the others by name."""
    return (backends.SUPPORTED.index(name) if name in backends.SUPPORTED
            else len(backends.SUPPORTED)), name


def columns(records: list[dict]) -> list[str]:
    """Column labels in a stable order: by machine and backend, each CPU env before the others."""
    keys = {r["_column"]: (machine_of(r), backend_rank(backend_of(r)),
                           r["env"] != cpu_env(backend_of(r)), r["env"], r["_column"])
            for r in records}
    return sorted(keys, key=keys.get)


def baseline(records: list[dict], column: str) -> str | None:
    """The column a column is compared with: the CPU env of the same machine and backend."""
    mine = next(r for r in records if r["_column"] == column)
    machine, backend = machine_of(mine), backend_of(mine)
    return min((r["_column"] for r in records
                if machine_of(r) == machine and backend_of(r) == backend
                and r["env"] == cpu_env(backend) and r["_column"] != column), default=None)


def ok_records(records: list[dict], benchmark: str) -> list[dict]:
    """The records of `benchmark` whose status is "ok"."""
    return [r for r in records if r["benchmark"] == benchmark and r["status"] == "ok"]


def dtype_of(record: dict) -> str:
    """A matmul record's dtype (older records: float32)."""
    return record.get("dtype") or "float32"


def crossover(records: list[dict], method: str = "rigorous", dtype: str = "float32") -> int | None:
    """Smallest size at which a GPU beats the CPU (same env, method, dtype); None if it never
    does."""
    ok = [r for r in ok_records(records, "matmul")
          if r["method"] == method and dtype_of(r) == dtype]
    cpu = {r["size"]: r["seconds"] for r in ok if r["device"] == "cpu"}
    gpu = {r["size"]: r["seconds"] for r in ok if r["device"].startswith("gpu")}
    return min((size for size in gpu if size in cpu and gpu[size] < cpu[size]), default=None)


PEAK_METHOD = "peak"  # the method of the matmul probe that every "% of peak" divides by


def peak_record(records: list[dict], env: str, device: str, dtype: str) -> dict | None:
    """The newest ok matmul peak-probe record (method "peak") of that env, device and dtype:
    the one reference of every "% of peak" (chapter, report and Compare_CPU_GPU alike)."""
    found = [r for r in ok_records(records, "matmul")
             if r.get("method") == PEAK_METHOD and r.get("env") == env
             and r.get("device") == device and dtype_of(r) == dtype and r.get("gflops")]
    return max(found, key=lambda r: str(r.get("timestamp") or ""), default=None)


def peak_gflops(records: list[dict], env: str, device: str, dtype: str) -> float | None:
    """The GFLOP/s of `peak_record` (None when that env never ran the probe at that dtype)."""
    found = peak_record(records, env, device, dtype)
    return found["gflops"] if found else None


def matmul_series(records: list[dict]) -> dict:
    """(column, device, method, dtype) -> sorted [(size, seconds, gflops)] of ok matmul records."""
    series = defaultdict(list)
    for r in ok_records(records, "matmul"):
        key = (r.get("_column", r["env"]), r["device"], r["method"], dtype_of(r))
        series[key].append((r["size"], r["seconds"], r["gflops"]))
    return {k: sorted(v) for k, v in sorted(series.items())}


def book_train(records: list[dict]) -> list[dict]:
    """Train records of the book's chapters (not Speed_Factors variants)."""
    return [r for r in records if r["benchmark"] == "train" and r.get("factor") is None]


def by_model_and_column(records: list[dict]) -> dict[tuple[str, str], dict]:
    """The book's train records by (model, column)."""
    return {(r["model"], r["_column"]): r for r in book_train(records)}


def fmt_seconds(value: float | None) -> str:
    """Seconds with three significant digits ("0.0123 s", "12.3 s", "402 s"); "–" for none."""
    if value is None:
        return "–"
    return f"{value:.0f} s" if value >= 100 else f"{value:.3g} s"
