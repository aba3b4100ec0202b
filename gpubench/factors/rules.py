"""Speed_Factors' rules (no framework): the factors, variants, what a backend runs; from records,
the fastest steady round against the baseline's, the median's, the range of per-round ratios."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpubench import backends, params, timing
from gpubench.results import peak_record

FACTORS = ("batch_size", "precision", "xla", "steps_per_execution", "input_pipeline")
FACTOR_NAMES = ("baseline", *FACTORS, "combined")
LIST_PARAMS = dict(zip(("batch_sizes", "precisions", "xla_modes", "steps_per_execution",
                        "input_pipelines"), FACTORS, strict=True))  # parameter -> factor
# A dtype policy's compute dtype: the matmul dtype its speed is compared with.
COMPUTE_DTYPE = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
ALWAYS_COMPILED = ("jax",)  # XLA is no factor there
XLA_NOTE = ("XLA: always on with JAX (JAX compiles every training step), so it is not a factor "
            "here: xla_modes {values} run as one compiled baseline, and no XLA variant.")
STEPS_NOTE = ("steps per execution: Keras's PyTorch trainer runs one step per call "
              "(steps_per_execution must be 1), so it is not a factor here: values {values} "
              "not measured.")
NO_TF_DATA = ("tf.data: not measured: TensorFlow cannot be imported in this {backend} env "
              "(`pip install tensorflow-cpu` into this env to add it).")
PARTS = {"batch_size": "batch {}", "precision": "{}", "xla": "XLA {}",
         "steps_per_execution": "steps/exec {}", "input_pipeline": "{}"}
ROW_FIELDS = ("env", "device", "factor", "status", "steps_measured", "samples_per_second",
              "test_accuracy", "achieved_gflops")  # what an `effects` row copies from its record


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
        if self.factor in FACTORS:
            return PARTS[self.factor].format(getattr(self, self.factor))
        changed = [PARTS[name].format(value) for name, value in self.settings().items()
                   if value != getattr(BASELINE, name)]
        return "baseline (book)" if self.factor == "baseline" else (
            "combined (" + (", ".join(changed) or "= baseline") + ")")

    def settings(self) -> dict:
        """The five factor values."""
        return {name: getattr(self, name) for name in FACTORS}


BASELINE = Variant("baseline")


def variants(values: dict[str, Sequence]) -> list[Variant]:
    """The baseline and one variant per factor value that differs from the baseline's."""
    return [BASELINE] + [replace(BASELINE, factor=factor, **{factor: value})
                         for factor in FACTORS for value in values.get(factor, ())
                         if value != getattr(BASELINE, factor)]


def for_backend(values: dict[str, Sequence], backend: str | None = None,
                tf_data: bool | None = None, *, drop_tf_data: bool = False
                ) -> tuple[dict[str, list], list[str]]:
    """The values `backend` (None: Keras's) runs, notes on the rest; tf.data without TF: refused."""
    if backend is None:
        backend, tf_data = backends.current().NAME, backends.current().tensorflow_importable()
    if not drop_tf_data:
        check_for_backend("Speed_Factors", {"input_pipelines": values.get("input_pipeline")},
                          backend, bool(tf_data))
    drops = {"xla": (lambda v: backend in ALWAYS_COMPILED, XLA_NOTE),
             "steps_per_execution": (lambda v: backend == "torch" and v != 1, STEPS_NOTE),
             "input_pipeline": (lambda v: v == "tf.data" and not tf_data, NO_TF_DATA)}
    checked, notes = {factor: list(found) for factor, found in values.items()}, []
    for factor, (drop, note) in drops.items():
        if left_out := [v for v in checked.get(factor, []) if drop(v)]:
            checked[factor] = [v for v in checked[factor] if not drop(v)]
            notes.append(note.format(values=left_out, backend=backend))
    return checked, notes


def chapter_values(checked: dict) -> tuple[dict[str, list], list[str]]:
    """`for_backend` of the chapter's parameters: tf.data dropped from the default list only."""
    default = params.DEFAULTS["full"]["Speed_Factors"]["input_pipelines"]
    return for_backend({factor: list(checked[name]) for name, factor in LIST_PARAMS.items()},
                       drop_tf_data=list(checked["input_pipelines"]) == list(default))


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


def compare(baseline_rates: Sequence[float], rates: Sequence[float]) -> dict:
    """Speedup (best rate over best), its median twin, the paired rounds' interval, a verdict."""
    if not baseline_rates or not rates:
        return {"speedup": None, "median_speedup": None, "low": None, "high": None,
                "verdict": "not measured"}
    pairs = [r / b for b, r in zip(baseline_rates, rates, strict=False)]  # rounds so far
    speedup = max(rates) / max(baseline_rates)
    low, high = min(pairs + [speedup]), max(pairs + [speedup])
    return {"speedup": speedup,
            "median_speedup": statistics.median(rates) / statistics.median(baseline_rates),
            "low": low, "high": high,
            "verdict": "no clear effect" if low <= 1.0 <= high else "faster" if low > 1.0
            else "slower"}


def is_factor_record(record: dict) -> bool:
    """Whether `record` is one of Speed_Factors' train records (a variant's)."""
    return record.get("benchmark") == "train" and record.get("factor") in FACTOR_NAMES


def effects(records: Sequence[dict]) -> list[dict]:
    """Each Speed_Factors record against its env and device's baseline (or its paired rounds)."""
    mine = [r for r in records if is_factor_record(r)]
    baselines = {(r["env"], r["device"]): r for r in mine
                 if r["factor"] == "baseline" and r["status"] == "ok"}
    rows = []
    for record in mine:
        base = baselines.get((record["env"], record["device"]))
        ok = record["status"] == "ok" and base is not None
        paired = ok and bool(record.get("paired_baseline_seconds"))
        base_rates = (steady_rates(record["paired_baseline_seconds"], base["train_samples"])
                      if paired else round_rates(base) if ok else [])
        row = compare(base_rates, round_rates(record) if ok else [])
        xla = (BASELINE.xla if record.get("backend") in ALWAYS_COMPILED  # no factor there
               else "on" if record.get("jit_compile") else "off")
        variant = Variant(record["factor"], **{k: record.get(k) for k in FACTORS} | {"xla": xla})
        rows.append({k: record.get(k) for k in ROW_FIELDS} | row | {
            "label": variant.label, "value": variant.label,
            "clear": row["verdict"] in ("faster", "slower"),
            "time_boxed": bool(record.get("time_boxed")), "record": record})
    return rows


def crossover_batch_size(records: Sequence[dict]) -> int | None:
    """The smallest batch size at which a GPU trains faster than its env's CPU, or None."""
    rates = {(r["env"], r["device"], r["batch_size"]): r["samples_per_second"] for r in records
             if is_factor_record(r) and r["status"] == "ok" and r.get("samples_per_second")
             and r["factor"] in ("baseline", "batch_size")}
    faster = [size for (env, device, size), rate in rates.items()
              if device != "cpu" and rate > rates.get((env, "cpu", size), math.inf)]
    return min(faster, default=None)


def percent_of_matmul_peak(record: dict, records: Sequence[dict]) -> float | None:
    """A train record's GFLOP/s as % of its env and device's matmul peak at its compute dtype."""
    dtype = COMPUTE_DTYPE.get(record.get("precision") or "float32")
    peak = (peak_record(list(records), record["env"], record["device"], dtype or "") or {}).get(
        "gflops")
    gflops = record.get("achieved_gflops")
    return 100.0 * gflops / peak if peak and gflops else None


def check_parameters(values: dict) -> dict:
    """Speed_Factors' own rules: its two models, two rounds or more, XLA off or on."""
    if values.get("model") not in (models := params.TABLES["speed_factors_models"]):
        raise params.ParameterError(f"model {values.get('model')!r} is not one Speed_Factors "
                                    f"trains; use one of {', '.join(models)}")
    params.positive_int("epochs", values.get("epochs"), minimum=2)
    if "auto" in (values.get("xla_modes") or ()):
        raise params.ParameterError("xla_modes: 'auto' lets Keras choose, which differs by device; "
                             "list the modes to compare: off, on")
    return values


def check_for_backend(notebook: str, values: dict, backend: str,
                      tensorflow_importable: bool) -> dict:
    """`values` unchanged if `backend` can run them, else raise naming the value and the fix."""
    steps = values.get("steps_per_execution")
    if backend == "torch" and set(steps if isinstance(steps, list) else [steps]) - {None, 1}:
        raise params.ParameterError(
            f"{notebook}: steps_per_execution={steps!r}: Keras's PyTorch trainer runs one step per "
            "call; use steps_per_execution=1 (or leave it out) in a torch env")
    if "tf.data" in (values.get("input_pipelines") or []) and not tensorflow_importable:
        raise params.ParameterError(
            f"{notebook}: input_pipelines includes 'tf.data', but TensorFlow cannot be imported "
            f"in this {backend} env; drop it (e.g. -p input_pipelines=arrays,on_device) or "
            "`pip install tensorflow-cpu` into that env")
    return values
