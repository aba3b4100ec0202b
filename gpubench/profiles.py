"""Each notebook's parameters, their accepted values, and their defaults in the `full` (the book's)
and `quick` (a smoke run) profiles; no TensorFlow or numpy. None takes the profile's default (so
does the book's value in the quick profile); None for profile, data_source, data_dir reads
GPUBENCH_PROFILE (else "full"), GPUBENCH_DATA_SOURCE (else "auto"), GPUBENCH_DATA_DIR.
"""

from __future__ import annotations

import os

PROFILES = ("full", "quick")
NOTEBOOKS = ("performanceTest", "Mnist_MLP_h1000", "Mnist_CNN", "Keras_Cifar_CNN", "Speed_Factors",
             "Multi_GPU_Scaling")
TRAINING_NOTEBOOKS = {"Mnist_MLP_h1000": "mlp_h1000", "Mnist_CNN": "mnist_cnn",
                      "Keras_Cifar_CNN": "cifar_cnn"}

# The values a parameter (or each item of a list parameter) may take.
CHOICES = {
    "model": tuple(TRAINING_NOTEBOOKS.values()),
    "dtype": ("float32", "float64", "float16", "bfloat16"),
    "xla": ("off", "on", "auto"),
    "precision": ("float32", "mixed_float16", "mixed_bfloat16"),
    "input_pipeline": ("arrays", "tf.data", "on_device"),
    "scaling": ("weak", "strong"),
}

COMMON = ("profile", "results_path", "env_name")  # the runner sets these
_DATA = ("dataset", "data_source", "data_dir")
PARAMS = {  # each notebook's own parameters, in its parameters cell's order
    "performanceTest": ("sizes", "devices", "repeats", "dtype"),
    **{name: ("device", "epochs", "batch_size", "max_train_samples", *_DATA, "xla", "precision")
       for name in TRAINING_NOTEBOOKS},
    "Speed_Factors": ("model", "devices", "epochs", "max_train_samples", *_DATA, "batch_sizes",
                      "precisions", "xla_modes", "steps_per_execution", "input_pipelines"),
    "Multi_GPU_Scaling": ("model", "devices", "replicas", "per_replica_batch_size", "scaling",
                          "epochs", "max_train_samples", *_DATA, "virtual_devices"),
}


def _chapter(epochs: int, batch_size: int, dataset: str) -> dict:
    """A training chapter's defaults; XLA off and float32 in every env: like for like (issue 9)."""
    return {"device": "auto", "epochs": epochs, "batch_size": batch_size,
            "max_train_samples": None, "dataset": dataset, "xla": "off", "precision": "float32"}


_FULL = {  # the book's settings
    "performanceTest": {"sizes": list(range(500, 5001, 500)), "devices": None, "repeats": 5,
                        "dtype": ["float32", "bfloat16", "float16"]},
    "Mnist_MLP_h1000": _chapter(15, 100, "mnist"),
    "Mnist_CNN": _chapter(15, 100, "mnist"),
    "Keras_Cifar_CNN": _chapter(15, 128, "cifar10"),
    "Speed_Factors": {"model": "mlp_h1000", "devices": None, "dataset": "mnist",
                      "steps_per_execution": [1, 32],
                      "input_pipelines": list(CHOICES["input_pipeline"]), "epochs": 5,
                      "max_train_samples": None, "batch_sizes": [32, 100, 256, 1024, 4096],
                      "precisions": list(CHOICES["precision"]), "xla_modes": ["off", "on"]},
    "Multi_GPU_Scaling": {"model": "mlp_h1000", "devices": None, "replicas": None,
                          "per_replica_batch_size": 100, "scaling": "weak", "dataset": "mnist",
                          "virtual_devices": None, "epochs": 5, "max_train_samples": None},
}
_QUICK = {  # what the quick profile changes
    "performanceTest": {"sizes": [500, 1000, 1500, 2000], "repeats": 3, "dtype": "float32"},
    "Mnist_MLP_h1000": {"epochs": 3, "max_train_samples": 12000},
    "Mnist_CNN": {"epochs": 3, "max_train_samples": 10000},
    "Keras_Cifar_CNN": {"epochs": 3, "max_train_samples": 3000},
    "Speed_Factors": {"epochs": 3, "max_train_samples": 3000, "batch_sizes": [100, 1000],
                      "precisions": ["float32", "mixed_bfloat16"]},
    "Multi_GPU_Scaling": {"epochs": 3, "max_train_samples": 6000},
}
DEFAULTS = {"full": _FULL, "quick": {nb: {**_FULL[nb], **_QUICK[nb]} for nb in NOTEBOOKS}}

# Rough wall time of each notebook on a 2-core CPU, kernel start included (seconds);
# the runner weighs its progress bar and ETA with these.
EXPECTED_SECONDS = {
    "full": {"performanceTest": 120, "Mnist_MLP_h1000": 90, "Mnist_CNN": 300,
             "Keras_Cifar_CNN": 700, "Speed_Factors": 360, "Multi_GPU_Scaling": 240},
    "quick": {"performanceTest": 30, "Mnist_MLP_h1000": 30, "Mnist_CNN": 45,
              "Keras_Cifar_CNN": 40, "Speed_Factors": 75, "Multi_GPU_Scaling": 45},
}


def resolve_profile(profile: str | None) -> str:
    """The profile to use: `profile`, else GPUBENCH_PROFILE, else "full"."""
    chosen = profile if profile is not None else os.environ.get("GPUBENCH_PROFILE") or "full"
    if chosen not in PROFILES:
        where = "" if profile is not None else " (from GPUBENCH_PROFILE)"
        raise ValueError(f"unknown profile {chosen!r}{where}; use one of {', '.join(PROFILES)}")
    return chosen


def parameter_names(notebook: str) -> list[str]:
    """The parameters a notebook takes, in the order of its parameters cell; or raise naming it."""
    if notebook not in NOTEBOOKS:
        raise ValueError(f"unknown notebook {notebook!r}; use one of {', '.join(NOTEBOOKS)}")
    return [*COMMON, *PARAMS[notebook]]


def check_names(notebook: str, given: dict) -> None:
    """Raise naming every parameter in `given` that `notebook` does not take."""
    unknown = sorted(set(given) - set(parameter_names(notebook)))
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for {notebook}; "
                         f"it takes {', '.join(parameter_names(notebook))}")


def resolve(notebook: str, **given) -> tuple[dict, dict]:
    """(parameters with the profile's values filled in, {name: (book, quick)} for those replaced)."""
    check_names(notebook, given)
    params = {name: given.get(name) for name in parameter_names(notebook)}
    params["profile"] = profile = resolve_profile(given.get("profile"))
    changed = {}
    book = DEFAULTS["full"][notebook]
    for name, default in DEFAULTS[profile][notebook].items():
        if params[name] is None or params[name] == book[name]:
            params[name] = default
            if default != book[name]:
                changed[name] = (book[name], default)
    if "data_source" in params:
        params["data_source"] = params["data_source"] or os.environ.get("GPUBENCH_DATA_SOURCE") or "auto"
        params["data_dir"] = params["data_dir"] or os.environ.get("GPUBENCH_DATA_DIR") or None
    return params, changed
