"""The Speed_Factors variants and their rules: the factors, the book's baseline, a variant's
label, and which factor values a backend can run. Loads no ML framework."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import ModuleType

from gpubench import backends  # light: loads no framework
from gpubench.backends import BACKEND_TITLES
from gpubench.params import DEFAULTS, SPEED_FACTORS_MODELS

MODELS = SPEED_FACTORS_MODELS
FACTORS = ("batch_size", "precision", "xla", "steps_per_execution", "input_pipeline")
FACTOR_NAMES = ("baseline", *FACTORS, "combined")
# Notebook parameter -> the factor whose values it lists.
LIST_PARAMS = {"batch_sizes": "batch_size", "precisions": "precision", "xla_modes": "xla",
               "steps_per_execution": "steps_per_execution", "input_pipelines": "input_pipeline"}
# A dtype policy's compute dtype: the matmul dtype its speed is compared with.
COMPUTE_DTYPE = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
# Backends that always compile: XLA is no factor there.
ALWAYS_COMPILED = ("jax",)
XLA_NOTE = ("XLA: always on with JAX (JAX compiles every training step), so it is not a factor "
            "here: xla_modes {modes} run as one compiled baseline, and no XLA variant.")
NO_TF_DATA = ("input pipeline 'tf.data' needs TensorFlow, which cannot be imported in this "
              "{backend} env")
# Backends whose Keras trainer runs one step per call: steps_per_execution is no factor there.
ONE_STEP_PER_CALL = ("torch",)
STEPS_NOTE = ("steps per execution: Keras's {backend} trainer runs one step per call "
              "(steps_per_execution must be 1), so it is not a factor here: values {values} "
              "not measured.")
TF_DATA_FIX = ("drop it (e.g. -p input_pipelines=arrays,on_device) or `pip install tensorflow-cpu` "
               "into this env")


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
    parts = {
        "batch_size": f"batch {settings['batch_size']}",
        "precision": str(settings["precision"]),
        "xla": f"XLA {settings['xla']}",
        "steps_per_execution": f"steps/exec {settings['steps_per_execution']}",
        "input_pipeline": str(settings["input_pipeline"]),
    }
    if factor == "baseline":
        return "baseline (book)"
    if factor == "combined":
        changed = [parts[name] for name in FACTORS if settings[name] != getattr(BASELINE, name)]
        return "combined (" + (", ".join(changed) or "= baseline") + ")"
    return parts[factor]


def variants(values: dict[str, Sequence]) -> list[Variant]:
    """The baseline and one variant per factor value that differs from the baseline's."""
    found = [BASELINE]
    for factor in FACTORS:
        for value in values.get(factor, ()):
            if value != getattr(BASELINE, factor):
                found.append(replace(BASELINE, factor=factor, **{factor: value}))
    return found


def factor_values(params: dict) -> dict[str, list]:
    """The values of each factor, from checked notebook parameters."""
    return {factor: list(params[name]) for name, factor in LIST_PARAMS.items()}


def for_backend(values: dict[str, Sequence], backend: str, tf_data: bool, *,
                drop_tf_data: bool = False) -> tuple[dict[str, list], list[str]]:
    """The factor values `backend` can run, and notes on what it changed.

    On a backend that always compiles (JAX) the xla values collapse into the one compiled
    baseline; on one whose trainer runs one step per call (PyTorch) steps_per_execution values
    other than 1 are left out, with a note (`params.check_for_backend` refuses them from `-p`).
    Where `tf_data` is False (TensorFlow not importable), "tf.data" is dropped with
    a note when `drop_tf_data` (the chapter's default list), else refused: ValueError naming
    the value and the fix.
    """
    checked = {factor: list(found) for factor, found in values.items()}
    notes = []
    if backend in ALWAYS_COMPILED and checked.get("xla"):
        notes.append(XLA_NOTE.format(modes=checked["xla"]))
        checked["xla"] = []
    if backend in ONE_STEP_PER_CALL and (more := [v for v in checked.get("steps_per_execution")
                                               or [] if v != 1]):
        notes.append(STEPS_NOTE.format(backend=BACKEND_TITLES.get(backend, backend), values=more))
        checked["steps_per_execution"] = [v for v in checked["steps_per_execution"] if v == 1]
    pipelines = checked.get("input_pipeline") or []
    if "tf.data" in pipelines and not tf_data:
        why = NO_TF_DATA.format(backend=backend)
        if not drop_tf_data:
            raise ValueError(f"input_pipelines {pipelines}: {why}; {TF_DATA_FIX}")
        checked["input_pipeline"] = [p for p in pipelines if p != "tf.data"]
        notes.append(f"tf.data: not measured: {why} (`pip install tensorflow-cpu` into this "
                     "env to add it).")
    return checked, notes


def for_this_backend(values: dict[str, Sequence], *, drop_tf_data: bool = False
         ) -> tuple[dict[str, list], list[str]]:
    """`for_backend` for the backend Keras runs here."""
    return for_backend(values, backends.current().NAME,
                       feeds().tf_data_available(), drop_tf_data=drop_tf_data)


def chapter_values(params: dict) -> tuple[dict[str, list], list[str]]:
    """The chapter's factor values on the backend Keras runs here, and notes on what it changed;
    the default input_pipelines list drops tf.data where TensorFlow is absent, a list given
    by hand that asks for it is refused."""
    default = DEFAULTS["full"]["Speed_Factors"]["input_pipelines"]
    return for_this_backend(factor_values(params),
                drop_tf_data=list(params["input_pipelines"]) == list(default))


def feeds() -> ModuleType:
    """The input feeds of the backend Keras runs on (gpubench.factors.<backend>_feeds)."""
    return importlib.import_module(f"gpubench.factors.{backends.current().NAME}_feeds")
