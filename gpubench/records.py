"""Queries over loaded records, shared by the report's tables and the charts.

Which attempt of a job counts (the latest), the report's columns ("machine · env", in a
stable order) and each column's baseline (its machine's CPU env of the same backend), the
matmul timings (product time, call latency, the book's), their series, the GPU-CPU pairing (one
rule for the speedup and the crossover) and the crossover, the book's training records, and the
models' titles and order.
Pure functions over the dicts `gpubench.results` reads; no ML framework, no matplotlib.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from gpubench import backends  # light: loads no framework

MODEL_TITLES = {"mlp_h1000": "MNIST MLP h1000", "mnist_cnn": "MNIST CNN",
                "cifar_cnn": "CIFAR-10 CNN"}
MODEL_ORDER = ("mlp_h1000", "mnist_cnn", "cifar_cnn")


def model_title(model: str) -> str:
    """A model's name for a reader: the book's models by title, a learner's own by its name."""
    return MODEL_TITLES.get(model, model)


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
    return backends.env_label(backend, False) if backend in backends.LABEL_PREFIX else (
        f"{backend}-cpu")  # a backend this version does not know, in an old or foreign record


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
    return list({identity(r): r for r in records}.values())


def identity(record: dict) -> tuple:
    """What makes one measurement (`_IDENTITY`'s fields, as text)."""
    return tuple(str(record.get(k)) for k in _IDENTITY)


def backend_rank(name: str) -> tuple[int, str]:
    """Sort key of a backend: the supported ones in their order, then the others by name."""
    return (backends.SUPPORTED.index(name) if name in backends.SUPPORTED
            else len(backends.SUPPORTED)), name


def columns(records: list[dict]) -> list[str]:
    """Column labels in a stable order: by machine and backend, each CPU env before the others."""
    keys = {column_of(r): (machine_of(r), backend_rank(backend_of(r)),
                           r["env"] != cpu_env(backend_of(r)), r["env"], column_of(r))
            for r in records}
    return sorted(keys, key=keys.get)


def column_of(record: dict) -> str:
    """A record's column: its "machine · env" label where the report set one, else its env."""
    return record.get("_column") or record["env"]


# The last records list `_index` was asked about and its index: the report asks `baseline` and
# `cpu_pairing` once per column and row of the same list, so each list is scanned once, not
# once per question. The list is held (so its id cannot be reused) and its length compared.
_LAST_INDEX: list = [None, -1, {}]


def _index(records: list[dict]) -> dict:
    """Each column's baseline (`baselines`) and the columns whose sweeps timed the CPU
    (`timed_cpu`), from one pass over `records`."""
    if _LAST_INDEX[0] is records and _LAST_INDEX[1] == len(records):
        return _LAST_INDEX[2]
    kind: dict[str, tuple] = {}  # column -> (machine, backend, is its backend's CPU env)
    for r in records:
        if (column := column_of(r)) not in kind:
            kind[column] = (machine_of(r), backend_of(r), r["env"] == cpu_env(backend_of(r)))
    cpu_columns: dict[tuple, list[str]] = defaultdict(list)  # (machine, backend) -> CPU envs
    for column, (machine, backend, is_cpu) in sorted(kind.items()):
        if is_cpu:
            cpu_columns[(machine, backend)].append(column)
    baselines = {column: next((c for c in cpu_columns.get((machine, backend), []) if c != column),
                              None) for column, (machine, backend, _) in kind.items()}
    index = {"baselines": baselines, "timed_cpu": {column_of(r) for r in sweep_records(records)
                                                   if r["device"] == "cpu"}}
    _LAST_INDEX[:] = [records, len(records), index]
    return index


def baseline(records: list[dict], column: str) -> str | None:
    """The column a column is compared with: the CPU env of the same machine and backend."""
    return _index(records)["baselines"].get(column)


def ok_records(records: list[dict], benchmark: str) -> list[dict]:
    """The records of `benchmark` whose status is "ok"."""
    return [r for r in records if r["benchmark"] == benchmark and r["status"] == "ok"]


def dtype_of(record: dict) -> str:
    """A matmul record's dtype (older records: float32)."""
    return record.get("dtype") or "float32"


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


# The three timings of a matmul sweep, one definition each (docs/records.md): the product time
# (products queued back to back, per product), the call latency (one product from the call to
# its result on the host) and the book's single timing (set-up included).
PRODUCT, CALL, BOOK = "product", "call", "book"
QUANTITIES = (PRODUCT, CALL, BOOK)


def matmul_seconds(record: dict, quantity: str) -> float | None:
    """A matmul record's seconds of `quantity` (PRODUCT, CALL or BOOK); None where it has none."""
    method = record.get("method")
    if quantity == BOOK:
        return record.get("seconds") if method == "book" else None
    if method != "rigorous":
        return None
    return record.get("seconds") if quantity == PRODUCT else record.get("call_seconds")


def sweep_records(records: list[dict]) -> list[dict]:
    """Ok matmul records of the size sweeps: the book's and the rigorous method, neither the peak
    probe nor the aligned sizes timed beside a book size (`aligned_from`)."""
    return [r for r in ok_records(records, "matmul")
            if r.get("method") in ("book", "rigorous") and r.get("aligned_from") is None]


def matmul_series(records: list[dict]) -> dict:
    """(column, device, quantity, dtype) -> sorted [(size, seconds, gflops)] of the sweeps; gflops
    only for the product time (every GFLOP/s divides by it), else None."""
    series = defaultdict(list)
    for r in sweep_records(records):
        for quantity in QUANTITIES:
            if (seconds := matmul_seconds(r, quantity)) is not None:
                gflops = r.get("gflops") if quantity == PRODUCT else None
                series[(column_of(r), r["device"], quantity, dtype_of(r))].append(
                    (r["size"], seconds, gflops))
    return {k: sorted(v) for k, v in sorted(series.items())}


def cpu_pairing(records: list[dict], column: str) -> str | None:
    """The column whose CPU matmul timings pair with `column`'s GPU ones: the same column where it
    timed the CPU too (as the book did), else its machine's CPU env of the same backend
    (`baseline`) where that one timed the CPU; None where neither did."""
    index = _index(records)
    if column in index["timed_cpu"]:
        return column
    other = index["baselines"].get(column)
    return other if other in index["timed_cpu"] else None


def speedup_series(records: list[dict]) -> list[dict]:
    """Every GPU series of the sweeps set against its CPU pair (`cpu_pairing`), the CPU at the same
    dtype where it was timed at it, else at float32: a dict of column, device, dtype, quantity,
    cpu_column, cpu_dtype and points [(size, CPU seconds / GPU seconds)]; those with no size in
    common are left out."""
    series = matmul_series(records)
    found = []
    for (column, device, quantity, dtype), points in series.items():
        if not device.startswith("gpu") or (cpu_column := cpu_pairing(records, column)) is None:
            continue
        cpu_dtype = dtype if (cpu_column, "cpu", quantity, dtype) in series else "float32"
        cpu = {size: seconds for size, seconds, _ in
               series.get((cpu_column, "cpu", quantity, cpu_dtype), [])}
        pairs = [(size, cpu[size] / seconds) for size, seconds, _ in points if size in cpu]
        if pairs:
            found.append({"column": column, "device": device, "dtype": dtype,
                          "quantity": quantity, "cpu_column": cpu_column, "cpu_dtype": cpu_dtype,
                          "points": pairs})
    return found


def crossover(points: list[tuple[int, float]]) -> int | None:
    """The size from which the GPU wins (speedup above 1) at every larger size measured; None
    where it loses at the largest."""
    size = None
    for n, speedup in sorted(points, reverse=True):
        if speedup <= 1:
            break
        size = n
    return size


def book_train(records: list[dict]) -> list[dict]:
    """Train records of the book's chapters (not Speed_Factors variants)."""
    return [r for r in records if r["benchmark"] == "train" and r.get("factor") is None]


def by_model_and_column(records: list[dict]) -> dict[tuple[str, str], dict]:
    """The book's train records by (model, column)."""
    return {(r["model"], r["_column"]): r for r in book_train(records)}

