"""The numbers the chapter and the report read from Speed_Factors records: each round's rate,
a variant against its baseline with its interval and verdict, the CPU-GPU crossover batch size,
the share of the matmul peak, and the GPU's busy %. Loads no ML framework.

Statistic: the fastest steady round (`timing.steady`: rounds 2..n) per sample, the same for
baseline and variant, with the median beside it. Uncertainty: the range of the per-round ratios
variant/baseline (rounds are paired by interleaving); a factor whose range includes 1.0 has
"no clear effect".
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gpubench import timing
from gpubench.factors.rules import (
    ALWAYS_COMPILED,
    BASELINE,
    COMPUTE_DTYPE,
    FACTOR_NAMES,
    FACTORS,
    label,
)
from gpubench.results import peak_gflops


def steady_rates(seconds: Sequence[float], samples: float) -> list[float]:
    """Samples per second of each steady round (`timing.steady`), `samples` per round."""
    return [samples / s for s in timing.steady(seconds) if s and s > 0]


def round_rates(record: dict) -> list[float]:
    """Samples per second of each steady round (`timing.steady`) of a Speed_Factors record."""
    seconds = record.get("epoch_seconds") or []
    rounds = len(timing.steady(seconds))
    if not rounds:
        return []
    if record.get("time_boxed"):
        return steady_rates(seconds, record["steps_measured"] / rounds * record["batch_size"])
    return steady_rates(seconds, record["train_samples"])


def verdict(low: float, high: float) -> str:
    """"faster" / "slower", or "no clear effect" when the interval [low, high] includes 1.0."""
    if low <= 1.0 <= high:
        return "no clear effect"
    return "faster" if low > 1.0 else "slower"


def compare(baseline_rates: Sequence[float], rates: Sequence[float]) -> dict:
    """Speedup (best rate over best rate), its median twin, and the paired rounds' interval."""
    if not baseline_rates or not rates:
        return {"speedup": None, "median_speedup": None, "low": None, "high": None,
                "verdict": "not measured"}
    pairs = [r / b for b, r in zip(baseline_rates, rates, strict=False)]  # rounds so far
    speedup = max(rates) / max(baseline_rates)
    low, high = min(pairs + [speedup]), max(pairs + [speedup])
    return {"speedup": speedup,
            "median_speedup": statistics.median(rates) / statistics.median(baseline_rates),
            "low": low, "high": high, "verdict": verdict(low, high)}


def is_factor_record(record: dict) -> bool:
    """Whether `record` is one of Speed_Factors' train records (a variant's)."""
    return record.get("benchmark") == "train" and record.get("factor") in FACTOR_NAMES


def _xla(record: dict) -> str:
    """The xla factor's value of a record: what ran, and the baseline's on a backend that
    always compiles (there it is no factor)."""
    if record.get("backend") in ALWAYS_COMPILED:
        return BASELINE.xla
    return "on" if record.get("jit_compile") else "off"


def effects(records: Sequence[dict]) -> list[dict]:
    """Each Speed_Factors record against the baseline of its env and device, in record order."""
    rows = []
    factor_records = [r for r in records if is_factor_record(r)]
    baselines = {(r["env"], r["device"]): r for r in factor_records
                 if r["factor"] == "baseline" and r["status"] == "ok"}
    for record in factor_records:
        base = baselines.get((record["env"], record["device"]))
        ok = record["status"] == "ok" and base is not None
        if ok and record.get("paired_baseline_seconds"):  # the combination's own baseline rounds
            base_rates = steady_rates(record["paired_baseline_seconds"], base["train_samples"])
        else:
            base_rates = round_rates(base) if ok else []
        row = compare(base_rates, round_rates(record)) if ok else compare([], [])
        name = label(record["factor"], {k: record.get(k) if k != "xla" else _xla(record)
                                        for k in FACTORS})
        rows.append({
            "env": record["env"], "device": record["device"], "factor": record["factor"],
            "label": name, "value": name, **row,
            "clear": row["verdict"] in ("faster", "slower"), "status": record["status"],
            "time_boxed": bool(record.get("time_boxed")),
            "steps_measured": record.get("steps_measured"),
            "samples_per_second": record.get("samples_per_second"),
            "test_accuracy": record.get("test_accuracy"),
            "achieved_gflops": record.get("achieved_gflops"), "record": record,
        })
    return rows


def crossover_batch_size(records: Sequence[dict]) -> int | None:
    """The smallest batch size at which a GPU trains faster than the CPU of the same env, or None.

    Uses the baseline and the batch-size variants (the other factors at the book's values).
    """
    rates: dict[tuple[str, str], dict[int, float]] = {}
    for record in records:
        if (is_factor_record(record) and record["status"] == "ok"
                and record["factor"] in ("baseline", "batch_size")
                and record.get("samples_per_second")):
            per = rates.setdefault((record["env"], record["device"]), {})
            per[record["batch_size"]] = record["samples_per_second"]
    found = []
    for (env, device), gpu in rates.items():
        cpu = rates.get((env, "cpu"))
        if device == "cpu" or not cpu:
            continue
        wins = [size for size in sorted(set(gpu) & set(cpu)) if gpu[size] > cpu[size]]
        if wins:
            found.append(wins[0])
    return min(found) if found else None


def percent_of_matmul_peak(record: dict, records: Sequence[dict]) -> float | None:
    """A train record's achieved GFLOP/s as % of the matmul peak-probe record
    (`gpubench.results.peak_gflops`) of its env and device at its compute dtype; None when
    that env has no peak record at that dtype."""
    dtype = COMPUTE_DTYPE.get(record.get("precision") or "float32")
    peak = peak_gflops(list(records), record["env"], record["device"], dtype or "")
    if not peak or not record.get("achieved_gflops"):
        return None
    return 100.0 * record["achieved_gflops"] / peak

