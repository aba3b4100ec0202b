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
from gpubench.backends import backend_title
from gpubench.plots import column_of, sweep_records

MODEL_TITLES = {"mlp_h1000": "MNIST MLP h1000", "mnist_cnn": "MNIST CNN",
                "cifar_cnn": "CIFAR-10 CNN"}
MODEL_ORDER = ("mlp_h1000", "mnist_cnn", "cifar_cnn")


def model_title(model: str) -> str:
    """A model's name for a reader: the book's models by title, a learner's own by its name."""
    return MODEL_TITLES.get(model, model)


def model_rank(model: str) -> tuple[int, str]:
    """A model's place in the book's order (unknown models after, by name)."""
    return (MODEL_ORDER.index(model) if model in MODEL_ORDER else len(MODEL_ORDER)), model


# What makes one measurement: a later record with the same values replaces it (hand re-runs).
_IDENTITY = ("_column", "benchmark", "notebook", "device", "size", "method", "dtype", "model",
             "factor", "batch_size", "precision", "jit_compile", "steps_per_execution",
             "input_pipeline", "strategy", "replicas", "workers")


def machine_of(record: dict) -> str:
    """The machine that made a record (its hostname)."""
    return record["environment"].get("hostname") or "machine"


def backend_of(record: dict) -> str:
    """The backend that made a record (older records: TensorFlow)."""
    return record.get("backend") or "tensorflow"


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


def cpu_pairing(records: list[dict], column: str) -> str | None:
    """The column whose CPU matmul timings pair with `column`'s GPU ones: the same column where it
    timed the CPU too (as the book did), else its machine's CPU env of the same backend
    (`baseline`) where that one timed the CPU; None where neither did."""
    index = _index(records)
    if column in index["timed_cpu"]:
        return column
    other = index["baselines"].get(column)
    return other if other in index["timed_cpu"] else None


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

