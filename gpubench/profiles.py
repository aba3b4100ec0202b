"""Profiles: the parameter defaults of each notebook, `full` (the book's settings) and `quick`.

A notebook parameter left as None takes the profile's default. `profile=None`
reads GPUBENCH_PROFILE (else "full"), `data_source=None` reads
GPUBENCH_DATA_SOURCE (else "auto"), `data_dir=None` reads GPUBENCH_DATA_DIR.
"""

from __future__ import annotations

import os

PROFILES = ("full", "quick")
NOTEBOOKS = ("performanceTest", "Mnist_MLP_h1000", "Mnist_CNN", "Keras_Cifar_CNN")
TRAINING_NOTEBOOKS = {"Mnist_MLP_h1000": "mlp_h1000", "Mnist_CNN": "mnist_cnn",
                      "Keras_Cifar_CNN": "cifar_cnn"}

COMMON = {"profile": None, "results_path": None, "env_name": None}
MATMUL_PARAMS = {"sizes": None, "devices": None, "repeats": None, "dtype": None}
TRAIN_PARAMS = {"device": None, "epochs": None, "batch_size": None, "max_train_samples": None,
                "dataset": None, "data_source": None, "data_dir": None}

_BOOK_SIZES = list(range(500, 5001, 500))
DEFAULTS = {
    "full": {
        "performanceTest": {"sizes": _BOOK_SIZES, "devices": None, "repeats": 5,
                            "dtype": "float32"},
        "Mnist_MLP_h1000": {"device": "auto", "epochs": 15, "batch_size": 100,
                            "max_train_samples": None, "dataset": "mnist"},
        "Mnist_CNN": {"device": "auto", "epochs": 15, "batch_size": 100,
                      "max_train_samples": None, "dataset": "mnist"},
        "Keras_Cifar_CNN": {"device": "auto", "epochs": 15, "batch_size": 128,
                            "max_train_samples": None, "dataset": "cifar10"},
    },
    "quick": {
        "performanceTest": {"sizes": [500, 1000, 1500, 2000], "devices": None, "repeats": 3,
                            "dtype": "float32"},
        "Mnist_MLP_h1000": {"device": "auto", "epochs": 3, "batch_size": 100,
                            "max_train_samples": 12000, "dataset": "mnist"},
        "Mnist_CNN": {"device": "auto", "epochs": 3, "batch_size": 100,
                      "max_train_samples": 10000, "dataset": "mnist"},
        "Keras_Cifar_CNN": {"device": "auto", "epochs": 3, "batch_size": 128,
                            "max_train_samples": 5000, "dataset": "cifar10"},
    },
}

# Rough wall time of each notebook on a 2-core CPU, kernel start included (seconds);
# the runner weighs its progress bar and ETA with these.
EXPECTED_SECONDS = {
    "full": {"performanceTest": 120, "Mnist_MLP_h1000": 90, "Mnist_CNN": 300,
             "Keras_Cifar_CNN": 700, "Compare_CPU_GPU": 10},
    "quick": {"performanceTest": 30, "Mnist_MLP_h1000": 30, "Mnist_CNN": 30,
              "Keras_Cifar_CNN": 40, "Compare_CPU_GPU": 10},
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
    specific = MATMUL_PARAMS if check_notebook(notebook) == "performanceTest" else TRAIN_PARAMS
    return [*COMMON, *specific]


def resolve(notebook: str, **given) -> dict:
    """Fill the parameters left as None from the profile and the environment variables."""
    unknown = sorted(set(given) - set(parameter_names(notebook)))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for {notebook}; "
            f"it takes {', '.join(parameter_names(notebook))}"
        )
    profile = resolve_profile(given.get("profile"))
    params = {name: given.get(name) for name in parameter_names(notebook)}
    params["profile"] = profile
    for name, default in DEFAULTS[profile][notebook].items():
        if params[name] is None:
            params[name] = default
    if notebook != "performanceTest":
        if params["data_source"] is None:
            params["data_source"] = os.environ.get("GPUBENCH_DATA_SOURCE") or "auto"
        if params["data_dir"] is None:
            params["data_dir"] = os.environ.get("GPUBENCH_DATA_DIR") or None
    return params
