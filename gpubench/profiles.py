"""Profiles: the parameters of each notebook, their accepted choices, and their defaults.

`full` is the book's settings, `quick` a smoke run. A training chapter's
parameters cell shows the book's values (`epochs = 15`); in the quick profile,
every value still equal to the book's is replaced by the quick one, and the
notebook prints what it changed. A parameter left as None takes the profile's
default. `profile=None` reads GPUBENCH_PROFILE (else "full"), `data_source=None`
reads GPUBENCH_DATA_SOURCE (else "auto"), `data_dir=None` reads GPUBENCH_DATA_DIR.

No TensorFlow and no numpy here: the runner checks parameters with these
tables before any kernel starts.
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

COMMON = {"profile": None, "results_path": None, "env_name": None}
MATMUL_PARAMS = {"sizes": None, "devices": None, "repeats": None, "dtype": None}
TRAIN_PARAMS = {"device": None, "epochs": None, "batch_size": None, "max_train_samples": None,
                "dataset": None, "data_source": None, "data_dir": None, "xla": None,
                "precision": None}
_DATA = ("dataset", "data_source", "data_dir")
PARAMS = {
    "performanceTest": MATMUL_PARAMS,
    **{name: TRAIN_PARAMS for name in TRAINING_NOTEBOOKS},
    "Speed_Factors": dict.fromkeys(("model", "devices", "epochs", "max_train_samples", *_DATA,
                                    "batch_sizes", "precisions", "xla_modes", "steps_per_execution",
                                    "input_pipelines")),
    "Multi_GPU_Scaling": dict.fromkeys(("model", "devices", "replicas", "per_replica_batch_size",
                                        "scaling", "epochs", "max_train_samples", *_DATA,
                                        "virtual_devices")),
}

_BOOK_SIZES = list(range(500, 5001, 500))
_FACTORS = {"model": "mlp_h1000", "devices": None, "dataset": "mnist",
            "steps_per_execution": [1, 32], "input_pipelines": list(CHOICES["input_pipeline"])}
_SCALING = {"model": "mlp_h1000", "devices": None, "replicas": None, "per_replica_batch_size": 100,
            "scaling": "weak", "dataset": "mnist", "virtual_devices": None}
_LIKE_FOR_LIKE = {"xla": "off", "precision": "float32"}  # the same mode in every env (issue 9)
DEFAULTS = {
    "full": {
        "performanceTest": {"sizes": _BOOK_SIZES, "devices": None, "repeats": 5,
                            "dtype": ["float32", "bfloat16", "float16"]},
        "Mnist_MLP_h1000": {"device": "auto", "epochs": 15, "batch_size": 100,
                            "max_train_samples": None, "dataset": "mnist", **_LIKE_FOR_LIKE},
        "Mnist_CNN": {"device": "auto", "epochs": 15, "batch_size": 100,
                      "max_train_samples": None, "dataset": "mnist", **_LIKE_FOR_LIKE},
        "Keras_Cifar_CNN": {"device": "auto", "epochs": 15, "batch_size": 128,
                            "max_train_samples": None, "dataset": "cifar10", **_LIKE_FOR_LIKE},
        "Speed_Factors": {**_FACTORS, "epochs": 5, "max_train_samples": None,
                          "batch_sizes": [32, 100, 256, 1024, 4096],
                          "precisions": list(CHOICES["precision"]), "xla_modes": ["off", "on"]},
        "Multi_GPU_Scaling": {**_SCALING, "epochs": 5, "max_train_samples": None},
    },
    "quick": {
        "performanceTest": {"sizes": [500, 1000, 1500, 2000], "devices": None, "repeats": 3,
                            "dtype": "float32"},
        "Mnist_MLP_h1000": {"device": "auto", "epochs": 3, "batch_size": 100,
                            "max_train_samples": 12000, "dataset": "mnist", **_LIKE_FOR_LIKE},
        "Mnist_CNN": {"device": "auto", "epochs": 3, "batch_size": 100,
                      "max_train_samples": 10000, "dataset": "mnist", **_LIKE_FOR_LIKE},
        "Keras_Cifar_CNN": {"device": "auto", "epochs": 3, "batch_size": 128,
                            "max_train_samples": 3000, "dataset": "cifar10", **_LIKE_FOR_LIKE},
        "Speed_Factors": {**_FACTORS, "epochs": 3, "max_train_samples": 3000,
                          "batch_sizes": [100, 1000], "precisions": ["float32", "mixed_bfloat16"],
                          "xla_modes": ["off", "on"]},
        "Multi_GPU_Scaling": {**_SCALING, "epochs": 3, "max_train_samples": 6000},
    },
}

# Rough wall time of each notebook on a 2-core CPU, kernel start included (seconds);
# the runner weighs its progress bar and ETA with these.
EXPECTED_SECONDS = {
    "full": {"performanceTest": 120, "Mnist_MLP_h1000": 90, "Mnist_CNN": 300,
             "Keras_Cifar_CNN": 700, "Speed_Factors": 360, "Multi_GPU_Scaling": 240},
    "quick": {"performanceTest": 30, "Mnist_MLP_h1000": 30, "Mnist_CNN": 45,
              "Keras_Cifar_CNN": 40, "Speed_Factors": 75, "Multi_GPU_Scaling": 45},
}


def check_notebook(notebook: str) -> str:
    """Return `notebook` if it is one of NOTEBOOKS, else raise naming it and the accepted ones."""
    if notebook not in NOTEBOOKS:
        raise ValueError(f"unknown notebook {notebook!r}; use one of {', '.join(NOTEBOOKS)}")
    return notebook


def resolve_profile(profile: str | None) -> str:
    """The profile to use: `profile`, else GPUBENCH_PROFILE, else "full"."""
    chosen = profile if profile is not None else os.environ.get("GPUBENCH_PROFILE") or "full"
    if chosen not in PROFILES:
        where = "" if profile is not None else " (from GPUBENCH_PROFILE)"
        raise ValueError(f"unknown profile {chosen!r}{where}; use one of {', '.join(PROFILES)}")
    return chosen


def parameter_names(notebook: str) -> list[str]:
    """The parameters a notebook takes, in the order of its parameters cell."""
    return [*COMMON, *PARAMS[check_notebook(notebook)]]


def check_names(notebook: str, given: dict) -> None:
    """Raise naming every parameter in `given` that `notebook` does not take."""
    unknown = sorted(set(given) - set(parameter_names(notebook)))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for {notebook}; "
            f"it takes {', '.join(parameter_names(notebook))}"
        )


def resolve(notebook: str, **given) -> tuple[dict, dict]:
    """Fill in the profile's values: (parameters, {name: (book value, quick value)} changed).

    A parameter given as None takes the profile's default. In the quick profile, a
    value still equal to the book's (the full profile's) takes the quick default.
    """
    check_names(notebook, given)
    profile = resolve_profile(given.get("profile"))
    params = {name: given.get(name) for name in parameter_names(notebook)}
    params["profile"] = profile
    changed = {}
    book = DEFAULTS["full"][notebook]
    for name, default in DEFAULTS[profile][notebook].items():
        if params[name] is None or params[name] == book[name]:
            params[name] = default
            if default != book[name]:
                changed[name] = (book[name], default)
    if "data_source" in params:
        if params["data_source"] is None:
            params["data_source"] = os.environ.get("GPUBENCH_DATA_SOURCE") or "auto"
        if params["data_dir"] is None:
            params["data_dir"] = os.environ.get("GPUBENCH_DATA_DIR") or None
    return params, changed
