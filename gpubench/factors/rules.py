"""Speed_Factors' rules and numbers (no framework): the factors and the book's baseline, the
variants, what a backend runs, and what the chapter and the report read from the records: the
fastest steady round per sample against the baseline's, with the median beside it, and the range
of the per-round ratios (paired by interleaving); a range that includes 1.0 is "no clear effect".
"""

from __future__ import annotations

import importlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import ModuleType

from gpubench import backends, params, timing
from gpubench.results import peak_gflops

FACTORS = ("batch_size", "precision", "xla", "steps_per_execution", "input_pipeline")
FACTOR_NAMES = ("baseline", *FACTORS, "combined")
# Notebook parameter -> the factor whose values it lists.
LIST_PARAMS = {"batch_sizes": "batch_size", "precisions": "precision", "xla_modes": "xla",
               "steps_per_execution": "steps_per_execution", "input_pipelines": "input_pipeline"}
# A dtype policy's compute dtype: the matmul dtype its speed is compared with.
COMPUTE_DTYPE = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
ALWAYS_COMPILED = ("jax",)  # XLA is no factor there
ONE_STEP_PER_CALL = ("torch",)  # Keras's trainer runs one step per call: no steps/exec factor
XLA_NOTE = ("XLA: always on with JAX (JAX compiles every training step), so it is not a factor "
            "here: xla_modes {modes} run as one compiled baseline, and no XLA variant.")
STEPS_NOTE = ("steps per execution: Keras's {backend} trainer runs one step per call "
              "(steps_per_execution must be 1), so it is not a factor here: values {values} "
              "not measured.")
NO_TF_DATA = ("tf.data: not measured: TensorFlow cannot be imported in this {backend} env "
              "(`pip install tensorflow-cpu` into this env to add it).")
PARTS = {"batch_size": "batch {}", "precision": "{}", "xla": "XLA {}",
         "steps_per_execution": "steps/exec {}", "input_pipeline": "{}"}


@dataclass(frozen=True)
class Variant:
    """One training set-up: the factor it varies and the value of every factor."""

    factor: str
    batch_size: int = 100
    precision: str = "float32"
    xla: str = "off"
    steps_per_execution: int = 1
    input_pipeline: str = "arrays"

    @property
    def label(self) -> str:
        """A short name for tables and charts: "batch 1024", "XLA on", "combined (...)"."""
        return label(self.factor, self.settings())

    def settings(self) -> dict:
        """The five factor values."""
        return {name: getattr(self, name) for name in FACTORS}


BASELINE = Variant("baseline")


def label(factor: str, settings: dict) -> str:
    """The name of the variant that varies `factor`, with these factor values."""
    if factor == "baseline":
        return "baseline (book)"
    if factor != "combined":
        return PARTS[factor].format(settings[factor])
    changed = [PARTS[name].format(settings[name]) for name in FACTORS
               if settings[name] != getattr(BASELINE, name)]
    return "combined (" + (", ".join(changed) or "= baseline") + ")"


def variants(values: dict[str, Sequence]) -> list[Variant]:
    """The baseline and one variant per factor value that differs from the baseline's."""
    return [BASELINE] + [replace(BASELINE, factor=factor, **{factor: value})
                         for factor in FACTORS for value in values.get(factor, ())
                         if value != getattr(BASELINE, factor)]


def for_backend(values: dict[str, Sequence], backend: str | None = None,
                tf_data: bool | None = None, *, drop_tf_data: bool = False
                ) -> tuple[dict[str, list], list[str]]:
    """The factor values `backend` (None: Keras's here) can run, and notes on what it left out: XLA
    on JAX (always compiled), steps_per_execution other than 1 on PyTorch, "tf.data" where
    TensorFlow cannot be imported (`tf_data` False) if `drop_tf_data`, else refused."""
    if backend is None:
        backend, tf_data = backends.current().NAME, backends.current().tensorflow_importable()
    checked = {factor: list(found) for factor, found in values.items()}
    notes = []
    if backend in ALWAYS_COMPILED and checked.get("xla"):
        notes.append(XLA_NOTE.format(modes=checked["xla"]))
        checked["xla"] = []
    steps = checked.get("steps_per_execution") or []
    if backend in ONE_STEP_PER_CALL and (more := [v for v in steps if v != 1]):
        notes.append(STEPS_NOTE.format(backend=backends.backend_title(backend), values=more))
        checked["steps_per_execution"] = [v for v in steps if v == 1]
    pipelines = checked.get("input_pipeline") or []
    if "tf.data" in pipelines and not tf_data:
        if not drop_tf_data:
            params.check_for_backend("Speed_Factors", {"input_pipelines": pipelines}, backend,
                                     tensorflow_importable=False)
        checked["input_pipeline"] = [p for p in pipelines if p != "tf.data"]
        notes.append(NO_TF_DATA.format(backend=backend))
    return checked, notes


def chapter_values(checked: dict) -> tuple[dict[str, list], list[str]]:
    """`for_backend` of the chapter's checked parameters; tf.data where TensorFlow is absent is
    dropped from the default input_pipelines list, and refused from one given by hand."""
    default = params.DEFAULTS["full"]["Speed_Factors"]["input_pipelines"]
    return for_backend({factor: list(checked[name]) for name, factor in LIST_PARAMS.items()},
                       drop_tf_data=list(checked["input_pipelines"]) == list(default))


def feeds() -> ModuleType:
    """The input feeds of the backend Keras runs on (gpubench.factors.<backend>_feeds)."""
    return importlib.import_module(f"gpubench.factors.{backends.current().NAME}_feeds")


def steady_rates(seconds: Sequence[float], samples: float) -> list[float]:
    """Samples per second of each steady round (`timing.steady`), `samples` per round."""
    return [samples / s for s in timing.steady(seconds) if s and s > 0]


def round_rates(record: dict) -> list[float]:
    """Samples per second of each steady round of a record (time-boxed: of the steps measured)."""
    seconds = record.get("epoch_seconds") or []
    rounds = len(timing.steady(seconds))
    if record.get("time_boxed") and rounds:
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


def effects(records: Sequence[dict]) -> list[dict]:
    """Each Speed_Factors record against the baseline of its env and device, in record order;
    `paired_baseline`: against its own baseline rounds (`paired_baseline_seconds`, the
    combination's), not the baseline row's; `baseline_samples_per_second`: the rate divided by."""
    rows = []
    factor_records = [r for r in records if is_factor_record(r)]
    baselines = {(r["env"], r["device"]): r for r in factor_records
                 if r["factor"] == "baseline" and r["status"] == "ok"}
    for record in factor_records:
        base = baselines.get((record["env"], record["device"]))
        ok = record["status"] == "ok" and base is not None
        paired = ok and bool(record.get("paired_baseline_seconds"))
        base_rates = (steady_rates(record["paired_baseline_seconds"], base["train_samples"])
                      if paired else round_rates(base) if ok else [])
        row = compare(base_rates, round_rates(record) if ok else [])
        xla = (BASELINE.xla if record.get("backend") in ALWAYS_COMPILED  # no factor there
               else "on" if record.get("jit_compile") else "off")
        name = label(record["factor"], {k: record.get(k) for k in FACTORS} | {"xla": xla})
        rows.append({
            "env": record["env"], "device": record["device"], "factor": record["factor"],
            "label": name, "value": name, **row, "paired_baseline": paired,
            "baseline_samples_per_second": max(base_rates, default=None),
            "clear": row["verdict"] in ("faster", "slower"), "status": record["status"],
            "time_boxed": bool(record.get("time_boxed")),
            "steps_measured": record.get("steps_measured"),
            "samples_per_second": record.get("samples_per_second"),
            "test_accuracy": record.get("test_accuracy"),
            "achieved_gflops": record.get("achieved_gflops"), "record": record,
        })
    return rows


def crossover_batch_size(records: Sequence[dict]) -> int | None:
    """The smallest batch size (baseline and batch-size variants) at which a GPU trains faster
    than the CPU of the same env, or None."""
    rates: dict[tuple[str, str], dict[int, float]] = {}
    for r in records:
        if (is_factor_record(r) and r["status"] == "ok" and r.get("samples_per_second")
                and r["factor"] in ("baseline", "batch_size")):
            rates.setdefault((r["env"], r["device"]), {})[r["batch_size"]] = r["samples_per_second"]
    found = []
    for (env, device), gpu in rates.items():
        cpu = rates.get((env, "cpu"))
        if device != "cpu" and cpu:
            found += [size for size in sorted(set(gpu) & set(cpu)) if gpu[size] > cpu[size]][:1]
    return min(found, default=None)


def percent_of_matmul_peak(record: dict, records: Sequence[dict]) -> float | None:
    """A train record's achieved GFLOP/s as % of its env and device's matmul peak-probe record
    (`results.peak_gflops`) at its compute dtype; None without one."""
    dtype = COMPUTE_DTYPE.get(record.get("precision") or "float32")
    peak = peak_gflops(list(records), record["env"], record["device"], dtype or "")
    if not peak or not record.get("achieved_gflops"):
        return None
    return 100.0 * record["achieved_gflops"] / peak
