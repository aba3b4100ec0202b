"""The record-checking rules: every field a table or chart computes with is checked per record
first, and a record that fails is skipped with a warning naming its file, line and field. A
telemetry field that fails costs only itself: it is dropped (null), with a warning naming it,
and the record and its timings stay."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from gpubench import results

_LIMIT = 2**53  # an integer beyond this is no measurement (and not exact as a float)
Rule = tuple[Callable[[Any], bool], str]  # a test of a value, and what it wants in words


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= _LIMIT if isinstance(value, int) else math.isfinite(value)


def _optional(rule: Rule) -> Rule:
    test, words = rule
    return (lambda v: v is None or test(v)), f"{words} or null"


def _list_of(rule: Rule, *, nulls: bool = False) -> Rule:
    test, words = _optional(rule) if nulls else rule
    return (lambda v: isinstance(v, list) and all(test(x) for x in v)), f"a list of ({words})"


# A string that reads as a missing or impossible number ("None", "nan", "inf", "-0") is what a
# str() of one wrote, not a name: shown, it would tell a reader a number is broken.
_NUMBER_WORD = re.compile(r"(?i)\s*(?:[+-]?(?:none|null|nan|inf|infinity)|-0+(?:\.0*)?)\s*")


def _text(value: Any) -> bool:
    return isinstance(value, str) and not _NUMBER_WORD.fullmatch(value)


_NOT_WORDS = 'not "None", "nan", "inf" or "-0"'
NAME: Rule = (lambda v: _text(v) and bool(v.strip())), f"a non-empty string, {_NOT_WORDS}"
TEXT: Rule = _text, f"a string, {_NOT_WORDS}"
FLAG: Rule = (lambda v: isinstance(v, bool)), "true or false"
OBJECT: Rule = (lambda v: isinstance(v, dict)), "a JSON object"
COUNT: Rule = (lambda v: _finite(v) and isinstance(v, int) and v >= 0), "a whole number >= 0"
POSITIVE_COUNT: Rule = (lambda v: _finite(v) and isinstance(v, int) and v > 0,
                        "a whole number >= 1")
NUMBER: Rule = (lambda v: _finite(v) and v >= 0), "a finite number >= 0"
POSITIVE: Rule = (lambda v: _finite(v) and v > 0), "a finite number > 0"
PERCENT: Rule = (lambda v: _finite(v) and 0 <= v <= 100), "a number from 0 to 100"

# (field, rule, for every record or only "ok" ones). "a.b" is field b of the object a.
_ALL, _OK = "all", "ok"
_COMMON = [("env", NAME, _ALL), ("notebook", TEXT, _ALL), ("device", NAME, _ALL),
           ("backend", NAME, _ALL), ("error", _optional(TEXT), _ALL),
           ("environment.hostname", _optional(TEXT), _ALL),
           ("environment.gpus", _optional(_list_of(OBJECT)), _ALL),
           ("environment.git_commit", _optional(TEXT), _ALL)]
TELEMETRY_NUMBERS = ("interval_s", "samples", "seconds", "gpu_util_percent_mean",
                      "gpu_util_percent_max", "gpu_memory_used_mb_max", "sm_clock_mhz_mean",
                      "power_watts_mean", "power_watts_max", "energy_joules",
                      "cpu_util_percent_mean", "cpu_util_percent_max", "cpu_energy_joules")
_PERCENTS = ("gpu_util_percent_mean", "gpu_util_percent_max")
# Fields that describe rather than measure: one that fails is dropped (null), not the record,
# and shows as the report's missing mark. Telemetry of ok records; the environment of every
# record (the environments table shows the last record of each column).
DROPPABLE_RULES = (
    [("telemetry", _optional(OBJECT), _OK)]
    + [(f"telemetry.{name}", _optional(PERCENT if name in _PERCENTS else NUMBER), _OK)
       for name in TELEMETRY_NUMBERS]
    + [(f"telemetry.{name}", _optional(TEXT), _OK)
       for name in ("source", "reason", "energy_method", "cpu_energy_method")]
    + [("telemetry.partial", _optional(FLAG), _OK),
       ("telemetry.clock_event_reasons", _optional(_list_of(TEXT)), _OK),
       ("epoch_energy_joules", _optional(_list_of(NUMBER, nulls=True)), _OK),
       ("epoch_gpu_util_percent", _optional(_list_of(PERCENT, nulls=True)), _OK),
       ("epoch_cpu_util_percent", _optional(_list_of(NUMBER, nulls=True)), _OK),
       ("epoch_clock_event_reasons", _optional(_list_of(_list_of(TEXT), nulls=True)), _OK),
       ("busy_region", _optional(OBJECT), _OK),
       ("busy_region.gpu_util_percent_mean", _optional(PERCENT), _OK)]
    + [(f"environment.{name}", _optional(TEXT), _ALL)
       for name in ("python", "keras", "backend_version", "tensorflow", "jax", "cuda_version",
                    "cudnn_version", "cpu_model")]
    + [("environment.cpu_count", _optional(POSITIVE_COUNT), _ALL),
       ("environment.ram_gb", _optional(NUMBER), _ALL)])
_MATMUL = [("size", POSITIVE_COUNT, _ALL), ("method", NAME, _ALL), ("dtype", _optional(NAME), _ALL),
           ("seconds", _optional(POSITIVE), _OK), ("call_seconds", _optional(POSITIVE), _OK),
           ("gflops", _optional(NUMBER), _OK),
           *[(name, _optional(NUMBER), _OK) for name in (
               "seconds_min", "seconds_max", "seconds_iqr", "first_seconds", "spec_peak_gflops",
               "warm_seconds")],
           ("repeats", _optional(COUNT), _OK), ("products_per_block", _optional(COUNT), _OK),
           ("aligned_from", _optional(POSITIVE_COUNT), _ALL)]
_TRAIN = [("model", NAME, _ALL), ("dataset", _optional(TEXT), _ALL),
          ("data_source", _optional(TEXT), _ALL), ("factor", _optional(NAME), _ALL),
          ("epochs", _optional(COUNT), _ALL), ("batch_size", _optional(COUNT), _ALL),
          ("train_samples", _optional(COUNT), _ALL), ("jit_compile", _optional(FLAG), _ALL),
          ("precision", _optional(TEXT), _ALL), ("steps_per_execution", _optional(COUNT), _ALL),
          ("input_pipeline", _optional(TEXT), _ALL),
          ("epoch_seconds", _optional(_list_of(NUMBER)), _OK),
          ("paired_baseline_seconds", _optional(_list_of(NUMBER)), _OK),
          *[(name, _optional(NUMBER), _OK) for name in (
              "first_epoch_seconds", "steady_epoch_seconds", "steady_epoch_iqr", "total_seconds",
              "samples_per_second", "test_accuracy", "achieved_gflops")],
          ("steps_measured", _optional(POSITIVE_COUNT), _OK), ("time_boxed", _optional(FLAG), _OK)]
_SCALING = _TRAIN + [("strategy", _optional(TEXT), _ALL), ("replicas", _optional(COUNT), _ALL),
                     ("workers", _optional(COUNT), _ALL),
                     ("global_batch_size", _optional(COUNT), _ALL),
                     ("devices", _optional(_list_of(TEXT)), _ALL),
                     ("virtual_devices", _optional(COUNT), _ALL),
                     ("all_reduce", _optional(TEXT), _ALL),
                     ("scaling_efficiency", _optional(NUMBER), _OK)]
# The fields a Speed_Factors variant's name is made of (gpubench.factors.label).
FACTOR_FIELDS = ("batch_size", "precision", "steps_per_execution", "input_pipeline")
RULES = {"matmul": _COMMON + _MATMUL,
         "train": _COMMON + _TRAIN + [("train_samples", POSITIVE_COUNT, _OK)],
         "scaling": _COMMON + _SCALING}


def _value(record: dict, path: str) -> tuple[bool, Any]:
    """(whether there is anything to check, the value) of "field" or "object.field"."""
    owner, _, name = path.rpartition(".")
    holder = record.get(owner) if owner else record
    if not isinstance(holder, dict):
        return False, None  # an object that is null (or checked as wrong) itself
    return True, holder.get(name)


def _shown(value: Any) -> str:
    """`value` as a warning shows it: its repr, cut at 60 characters."""
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def without_bad_fields(record: dict) -> tuple[dict, list[str]]:
    """`record` with each field of DROPPABLE_RULES that fails set to null, and a message naming
    each one dropped: a bad description never costs the record or its timing."""
    ok, dropped = record["status"] == "ok", []
    for path, (test, words), when in DROPPABLE_RULES:
        present, value = _value(record, path)
        if present and not test(value) and (ok or when == _ALL):
            owner, _, name = path.rpartition(".")
            record = ({**record, owner: {**record[owner], name: None}} if owner
                      else {**record, name: None})
            dropped.append(f"{record.get('_origin', 'a record')}: {record['benchmark']} field "
                           f"{path!r} is {_shown(value)}, dropped; the report needs {words}")
    return record, dropped


def check(record: dict) -> None:
    """Raise ValueError naming the first field the report would compute with that is unusable."""
    ok = record["status"] == "ok"
    for path, (test, words), when in RULES[record["benchmark"]]:
        if when == _OK and not ok:
            continue
        present, value = _value(record, path)
        if present and not test(value):
            raise ValueError(f"{record['benchmark']} field {path!r} is {_shown(value)}; the "
                             f"report needs {words}")
    if record["benchmark"] == "train" and record.get("factor"):  # its variant's name holds them
        for name in FACTOR_FIELDS:
            if record.get(name) is None:
                raise ValueError(f"Speed_Factors field {name!r} is null; the report names the "
                                 "variant by it")
    if ok and record["benchmark"] != "matmul" and record.get("time_boxed"):
        for name in ("steps_measured", "batch_size"):
            if not POSITIVE_COUNT[0](record.get(name)):
                raise ValueError(f"time-boxed train field {name!r} is {record.get(name)!r}; the "
                                 f"report needs {POSITIVE_COUNT[1]}")


def usable(records: list[dict], problems: list[str] | None = None) -> list[dict]:
    """The records that pass `check`, each bad description dropped (`without_bad_fields`). The
    first results.NAMED_UNREADABLE records skipped or fields dropped get a warning each, naming
    origin (file:line) and field, the rest one warning with the total, as unreadable lines do;
    each warning is also added to `problems`."""
    kept, said = [], []
    for record in records:
        record, dropped = without_bad_fields(record)
        said += dropped
        try:
            check(record)
        except ValueError as exc:
            said.append(f"{record.get('_origin', 'a record')}: skipped: {exc}")
            continue
        kept.append(record)
    named = results.NAMED_UNREADABLE
    for message in said[:named]:
        results.skipped(message, problems)
    if len(said) > named:
        results.skipped(f"{len(said)} records or fields in all left out by the report's checks: "
                        f"{len(said) - named} more after the {named} named", problems)
    return kept
