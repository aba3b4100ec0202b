"""The record's `telemetry` object: its fields, the all-null one, one run's object combined
from per-region (per-epoch) ones, and the per-epoch lists a train record carries.
"""

from __future__ import annotations

import types
from collections.abc import Sequence

from gpubench import results

FIELDS = results.TELEMETRY_FIELDS
EMPTY: types.MappingProxyType = types.MappingProxyType(results.unmeasured(None))
"""The all-null telemetry object (read-only; `unmeasured` gives a dict to store)."""
unmeasured = results.unmeasured


def mean(values: Sequence[float]) -> float | None:
    """The mean, None for no values."""
    return sum(values) / len(values) if values else None


def rounded(value: float | None, digits: int) -> float | None:
    """`value` rounded to `digits`, None stays None."""
    return None if value is None else round(value, digits)


def _weighted_mean(results: Sequence[dict], field: str) -> float | None:
    """The mean of a per-region mean, weighted by each region's seconds (else samples)."""
    pairs = [(r[field], r.get("seconds") or r.get("samples") or 0) for r in results
             if r.get(field) is not None]
    total = sum(weight for _, weight in pairs)
    if not pairs:
        return None
    if total <= 0:
        return sum(value for value, _ in pairs) / len(pairs)
    return sum(value * weight for value, weight in pairs) / total


def _maximum(results: Sequence[dict], field: str) -> float | None:
    values = [r[field] for r in results if r.get(field) is not None]
    return max(values) if values else None


def _total(results: Sequence[dict], field: str) -> float | None:
    """The sum over regions, or None if one region lacks the figure (never a part-sum)."""
    values = [r.get(field) for r in results]
    return None if not values or None in values else round(sum(values), 3)


def combine(results: Sequence[dict]) -> dict:
    """One run-level telemetry object from per-region (per-epoch) ones."""
    results = [r for r in results if r is not None]
    if not results:
        return unmeasured("no region was measured")
    first = results[0]
    combined = unmeasured(first.get("reason"))
    reason = next((r["reason"] for r in results if r.get("partial")), first.get("reason"))
    methods = {r.get("energy_method") for r in results}
    cpu_methods = {r.get("cpu_energy_method") for r in results}
    reasons = [r.get("clock_event_reasons") for r in results]
    combined.update(
        source=first.get("source"), reason=reason,
        partial=any(r.get("partial") for r in results),
        interval_s=first.get("interval_s"),
        samples=sum(r.get("samples") or 0 for r in results),
        seconds=round(sum(r.get("seconds") or 0 for r in results), 6),
        gpu_util_percent_mean=rounded(_weighted_mean(results, "gpu_util_percent_mean"), 1),
        gpu_util_percent_max=_maximum(results, "gpu_util_percent_max"),
        gpu_memory_used_mb_max=_maximum(results, "gpu_memory_used_mb_max"),
        sm_clock_mhz_mean=rounded(_weighted_mean(results, "sm_clock_mhz_mean"), 1),
        power_watts_mean=rounded(_weighted_mean(results, "power_watts_mean"), 2),
        power_watts_max=_maximum(results, "power_watts_max"),
        energy_joules=_total(results, "energy_joules"),
        energy_method=(None if None in methods else
                       "counter" if methods == {"counter"} else "power_integral"),
        clock_event_reasons=(None if all(r is None for r in reasons) else
                             sorted({name for names in reasons for name in names or ()})),
        cpu_util_percent_mean=rounded(_weighted_mean(results, "cpu_util_percent_mean"), 1),
        cpu_util_percent_max=_maximum(results, "cpu_util_percent_max"),
        cpu_energy_joules=_total(results, "cpu_energy_joules"),
        cpu_energy_method="rapl" if cpu_methods == {"rapl"} else None,
    )
    return combined


def epoch_fields(results: Sequence[dict]) -> dict:
    """The per-epoch lists a train record carries, None where an epoch lacks the figure."""
    results = [r or {} for r in results]
    return {
        "epoch_energy_joules": [r.get("energy_joules") for r in results],
        "epoch_gpu_util_percent": [r.get("gpu_util_percent_mean") for r in results],
        "epoch_cpu_util_percent": [r.get("cpu_util_percent_mean") for r in results],
        "epoch_clock_event_reasons": [r.get("clock_event_reasons") for r in results],
    }
