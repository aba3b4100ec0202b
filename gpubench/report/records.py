"""Queries over loaded records that every topic of the report shares: machines and "machine ·
env" columns, each column's baseline and CPU pairing, the crossover, the load flag."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from gpubench import backends
from gpubench.fmt import fmt
from gpubench.plots import column_of, sweep_records

MODEL_TITLES = {"mlp_h1000": "MNIST MLP h1000", "mnist_cnn": "MNIST CNN",
                "cifar_cnn": "CIFAR-10 CNN"}
# What makes one measurement: a later record with the same values replaces it (hand re-runs).
IDENTITY = ("_column", "benchmark", "notebook", "device", "size", "method", "dtype", "tf32",
            "model", "factor", "batch_size", "precision", "jit_compile", "steps_per_execution",
            "input_pipeline", "strategy", "replicas", "workers")
_VENDOR = re.compile(r"\((R|TM)\)|\b(Intel|AMD|NVIDIA|Processor|CPU|\d+-Core)\b|@.*", re.I)


def model_title(model: str) -> str:
    """A model's name for a reader: the book's models by title, a learner's own by its name."""
    return MODEL_TITLES.get(model, model)


def model_rank(model: str) -> tuple[int, str]:
    """A model's place in the book's order (unknown models after, by name)."""
    order = list(MODEL_TITLES)
    return (order.index(model) if model in order else len(order)), model


def backend_of(record: dict) -> str:
    """The backend that made a record."""
    return record.get("backend") or "tensorflow"


def backend_rank(name: str) -> tuple[int, str]:
    """Sort key of a backend: the supported ones in their order, then the others by name."""
    known = backends.SUPPORTED
    return (known.index(name) if name in known else len(known)), name


def cpu_env(backend: str) -> str:
    """The label of `backend`'s CPU env: "cpu" for TensorFlow, "jax-cpu" for JAX."""
    return backends.LABEL_PREFIX.get(backend, f"{backend}-") + "cpu"


def machine_of(record: dict) -> str:
    """The machine that made a record, as `label_columns` named it."""
    return record.get("_machine") or record["environment"].get("hostname") or "machine"


def label_columns(records: list[dict]) -> None:
    """Label each record's `_machine` (told apart by hardware, then OS) and `_column`."""
    def kind(r: dict) -> tuple[str, str]:  # "16-core Xeon, H200" and the OS
        env = r["environment"]
        cpu = " ".join(_VENDOR.sub(" ", str(env.get("cpu_model") or "")).split()) or "CPU"
        gpus = [_VENDOR.sub("", str(g.get("name") or "GPU")).strip()
                for g in env.get("gpus") or [] if isinstance(g, dict)]
        return (", ".join([f"{fmt(env.get('cpu_count'), '')}-core {cpu}", *gpus]),
                env.get("os") or "OS unknown")

    kinds: dict[str, set] = defaultdict(set)
    for r in records:
        kinds[r["environment"].get("hostname") or "machine"].add(kind(r))
    pairs: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        host = r["environment"].get("hostname") or "machine"
        same = kinds[host]
        told = kind(r)[:1] if len({k[0] for k in same}) == len(same) else kind(r)
        r["_machine"] = host if len(same) == 1 else f"{host} ({', '.join(told)})"
        pairs[(r["_machine"], r["env"])].append(r)
    for (machine, env), mine in pairs.items():
        names, runs = {backend_of(r) for r in mine}, {r["_run_dir"] for r in mine}
        for r in mine:
            r["_column"] = (f"{machine} · {env}"
                            + f" ({backends.backend_title(backend_of(r))})" * (len(names) > 1)
                            + f" ({Path(r['_run_dir']).name})" * (len(runs) > 1))


def identity(record: dict) -> tuple:
    """What makes one measurement (IDENTITY's fields, as text)."""
    return tuple(str(record.get(k)) for k in IDENTITY)


def columns(records: list[dict]) -> list[str]:
    """Column labels in a stable order: by machine and backend, each CPU env before the others."""
    keys = {column_of(r): (machine_of(r), backend_rank(backend_of(r)),
                           r["env"] != cpu_env(backend_of(r)), r["env"], column_of(r))
            for r in records}
    return sorted(keys, key=keys.get)


def baselines(records: list[dict]) -> dict[str, str | None]:
    """Each column's baseline: its machine's CPU env of its backend (in the book's mode first)."""
    other_mode = {column_of(r) for r in book_train(records) if r.get("precision") not in (
        None, "float32") or r.get("jit_compile") and backend_of(r) != "jax"}
    first: dict[tuple, tuple] = {}  # (machine, backend) -> the best CPU column's rank
    for r in records:
        if r["env"] == cpu_env(backend_of(r)):
            rank = (column_of(r) in other_mode, str(r.get("timestamp")), column_of(r))
            key = (machine_of(r), backend_of(r))
            first[key] = min(first.get(key, rank), rank)
    bases = {column_of(r): first.get((machine_of(r), backend_of(r)), (None,) * 3)[2]
             for r in records}
    return {column: None if base == column else base for column, base in bases.items()}


def pairings(records: list[dict]) -> dict[str, str | None]:
    """The column whose CPU matmul timings pair with each column's: its own, else its baseline."""
    timed = {column_of(r) for r in sweep_records(records) if r["device"] == "cpu"}
    return {column: column if column in timed else base if base in timed else None
            for column, base in baselines(records).items()}


def crossover(points: list[tuple[int, float]]) -> int | None:
    """The size from which the GPU wins (speedup above 1) at every larger size, if any."""
    size = None
    for n, speedup in sorted(points, reverse=True):
        if speedup <= 1:
            break
        size = n
    return size


def loaded(record: dict) -> str:
    """"load 6.5 on 2 cores" where a load average of the record exceeded the cores; else ""."""
    loads = [x for x in [record.get("load_average"), *(record.get("epoch_load_average") or [])]
             if isinstance(x, (int, float))]
    cores = record["environment"].get("cpu_count")
    if not loads or not cores or max(loads) <= cores:
        return ""
    return f"load {fmt(max(loads), '.1f')} on {cores} cores"


def book_train(records: list[dict]) -> list[dict]:
    """Train records of the book's chapters (not Speed_Factors variants)."""
    return [r for r in records if r["benchmark"] == "train" and r.get("factor") is None]
