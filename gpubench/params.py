"""The rules of the notebooks' parameters: accepted values, checks, what the quick profile changes.

The ground layer (stdlib only, no gpubench import): the runner checks `-p` values with
these rules before any kernel starts, and `gb.chapter.start` checks the same values in the
kernel. Each notebook's parameters cell is the one declaration of its names and defaults (the
book's values, the `full` profile); `declared` reads it from the .ipynb, and this module holds
only what a cell cannot: the rules and `_QUICK`, what a smoke run changes. None takes the
profile's default (so does the book's value in the quick profile). None for `profile`,
`data_source` and `data_dir` reads GPUBENCH_PROFILE (else "full"), GPUBENCH_DATA_SOURCE (else
"auto") and GPUBENCH_DATA_DIR; GPUBENCH_DATASET replaces the book's `dataset` where it has the
same image shape (MNIST and Fashion-MNIST, 28x28 grey; CIFAR-10 is 32x32 colour).
"""

from __future__ import annotations

import ast
import errno
import functools
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

PROFILES = ("full", "quick")
NOTEBOOKS = ("performanceTest", "Mnist_MLP_h1000", "Mnist_CNN", "Keras_Cifar_CNN",
             "Speed_Factors", "Multi_GPU_Scaling")
TRAINING_NOTEBOOKS = {"Mnist_MLP_h1000": "mlp_h1000", "Mnist_CNN": "mnist_cnn",
                      "Keras_Cifar_CNN": "cifar_cnn"}
SPEED_FACTORS_MODELS = ("mlp_h1000", "mnist_cnn")  # the models Speed_Factors trains
# The datasets whose images each model takes (28 x 28 grey, or 32 x 32 colour).
MODEL_DATASETS = {"mlp_h1000": ("mnist", "fashion_mnist"), "mnist_cnn": ("mnist", "fashion_mnist"),
                  "cifar_cnn": ("cifar10",)}

DATASETS = ("mnist", "fashion_mnist", "cifar10")
SOURCES = ("auto", "keras", "dir", "synthetic")
# Datasets a chapter's model can take in place of its own: the same image shape.
_SHAPE = {"mnist": "28x28 grey", "fashion_mnist": "28x28 grey", "cifar10": "32x32 colour"}

# The values a parameter (or each item of a list parameter) may take.
CHOICES = {
    "model": tuple(TRAINING_NOTEBOOKS.values()),
    "dtype": ("float32", "float64", "float16", "bfloat16"),
    "xla": ("off", "on", "auto"),
    "precision": ("float32", "mixed_float16", "mixed_bfloat16"),
    "input_pipeline": ("arrays", "tf.data", "on_device"),
    "scaling": ("weak", "strong"),
}

COMMON = ("profile", "results_path", "env_name")  # every cell declares them; the runner sets them
_QUICK = {  # what the quick profile changes
    "performanceTest": {"sizes": [500, 1000, 1500, 2000], "repeats": 3, "dtype": "float32"},
    "Mnist_MLP_h1000": {"epochs": 3, "max_train_samples": 12000},
    "Mnist_CNN": {"epochs": 3, "max_train_samples": 10000},
    "Keras_Cifar_CNN": {"epochs": 3, "max_train_samples": 3000},
    "Speed_Factors": {"epochs": 3, "max_train_samples": 3000, "batch_sizes": [100, 1000],
                      "precisions": ["float32", "mixed_bfloat16"]},
    "Multi_GPU_Scaling": {"epochs": 3, "max_train_samples": 6000},
}

# Rough wall time of each notebook on a 2-core CPU, kernel start included (seconds);
# the runner weighs its progress bar and ETA with these.
EXPECTED_SECONDS = {
    "full": {"performanceTest": 120, "Mnist_MLP_h1000": 90, "Mnist_CNN": 300,
             "Keras_Cifar_CNN": 700, "Speed_Factors": 360, "Multi_GPU_Scaling": 240},
    "quick": {"performanceTest": 30, "Mnist_MLP_h1000": 30, "Mnist_CNN": 45,
              "Keras_Cifar_CNN": 40, "Speed_Factors": 75, "Multi_GPU_Scaling": 45},
}

ACCEPTED_DEVICES = ('"auto", "cpu", "gpu", "gpu:N", or TensorFlow\'s "/CPU:0", "/GPU:N", '
                    '"/device:GPU:N"')
DEVICE_PATTERN = re.compile(r"^/?(?:device:)?(cpu|gpu)(?::(\d+))?$", re.IGNORECASE)


class ParameterError(ValueError):
    """A notebook parameter that is unknown or has a bad value; the message names it and what
    to use instead. Jupyter and papermill show only the message, not a traceback."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for this error: its message, no traceback."""
        return [f"{type(self).__name__}: {self}"]


# ---------------------------------------------------------------- one value at a time


def positive_int(name: str, value: Any, *, minimum: int = 1, allow_none: bool = False) -> Any:
    """Return `value` if it is an int >= `minimum` (or None when allowed), else raise naming it."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ParameterError(f"{name} must be {what}{' or None' if allow_none else ''}, "
                             f"got {value!r}")
    return value


def check_device(name: object, *, virtual_cpus: bool = False) -> str:
    """`name` stripped if its syntax is a device's ("cpu:N" only if virtual_cpus); it does not
    look at the machine (`devices.resolve` does)."""
    if not isinstance(name, str):
        raise ParameterError(f"device must be a string, got {name!r}; use one of "
                             f"{ACCEPTED_DEVICES}")
    match = DEVICE_PATTERN.match(name.strip())
    if name.strip().lower() != "auto" and not match:
        raise ParameterError(f"unknown device {name!r}; use one of {ACCEPTED_DEVICES}")
    if match and match[1].lower() == "cpu" and int(match[2] or 0) != 0 and not virtual_cpus:
        raise ParameterError(f"unknown device {name!r}: there is one CPU device, use \"cpu\" "
                             "(Multi_GPU_Scaling's virtual_devices=N splits it into "
                             "cpu:0..cpu:N-1)")
    return name.strip()


def check_dataset(name: object) -> str:
    """The canonical dataset name ("Fashion-MNIST" -> "fashion_mnist"), or raise naming it."""
    if isinstance(name, str) and name.strip().lower().replace("-", "_") in DATASETS:
        return name.strip().lower().replace("-", "_")
    raise ParameterError(f"unknown dataset {name!r}; use one of {', '.join(DATASETS)}")


def check_source(source: object) -> str:
    """The canonical data source (None -> "auto"), or raise naming it."""
    text = ("auto" if source is None else source.strip().lower() if isinstance(source, str)
            else None)
    if text in SOURCES:
        return text
    raise ParameterError(f"unknown data source {source!r}; use one of {', '.join(SOURCES)} "
                         "(or None for auto)")


def resolve_profile(profile: str | None) -> str:
    """The profile to use: `profile`, else GPUBENCH_PROFILE, else "full"."""
    chosen = profile if profile is not None else os.environ.get("GPUBENCH_PROFILE") or "full"
    if chosen not in PROFILES:
        where = "" if profile is not None else " (from GPUBENCH_PROFILE)"
        raise ParameterError(f"unknown profile {chosen!r}{where}; use one of "
                             f"{', '.join(PROFILES)}")
    return chosen


_POSITIVE = ("repeats", "epochs", "batch_size", "max_train_samples", "per_replica_batch_size",
             "virtual_devices")
_INT_LISTS = ("sizes", "batch_sizes", "steps_per_execution", "replicas")
_LISTS_OF = {"precisions": "precision", "xla_modes": "xla", "input_pipelines": "input_pipeline",
             "dtype": "dtype"}


def _hint(name: str) -> str:
    """How to pass list parameter `name`: in the notebook, to papermill, to gpubench run."""
    items = (["cpu", "gpu:0"] if name == "devices" else ["100", "1000"] if name in _INT_LISTS
             else list(CHOICES[_LISTS_OF[name]][:2]))
    python = str([int(i) if i.isdigit() else i for i in items]).replace("'", '"')
    return (f"pass a list such as {python} (papermill: -y \"{name}: [{', '.join(items)}]\"; "
            f"gpubench run: -p {name}={','.join(items)})")


def _as_list(name: str, value) -> list:
    """Lists as they are, "[a, b]" or "a,b" (as papermill -p passes them) parsed, one value
    wrapped."""
    if isinstance(value, str):
        try:
            value = (ast.literal_eval(value) if value.strip().startswith("[")
                     else [item.strip().strip("'\"") for item in value.split(",")])
        except (ValueError, SyntaxError):
            raise ParameterError(f"{name}={value!r} is not a list; {_hint(name)}") from None
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    if not value:
        raise ParameterError(f"{name} is empty; {_hint(name)}")
    return value


def _positive_item(name: str, item) -> int:
    try:
        number = int(item) if isinstance(item, str) and item.isdigit() else item
        return positive_int(name, number)
    except ValueError:
        raise ParameterError(f"{name}: {item!r} is not a positive integer; "
                             f"{_hint(name)}") from None


def _one_of(name: str, value, kind: str) -> str:
    if value not in CHOICES[kind]:
        where = f" in {name}; {_hint(name)}" if name != kind else ""
        raise ParameterError(f"unknown {kind} {value!r}; use one of "
                             f"{', '.join(CHOICES[kind])}{where}")
    return value


def check_value(name: str, value, *, virtual_cpus: bool = False):
    """Return `value` checked (a list parameter as a list), or raise naming it and what to do;
    a name with no rule (a bool, a float) keeps its value."""
    if value is None:
        return None
    if name in _POSITIVE:
        return positive_int(name, value)
    if name in _INT_LISTS:
        return [_positive_item(name, item) for item in _as_list(name, value)]
    if name == "dtype" and isinstance(value, str) and "," not in value:
        return _one_of(name, value.strip(), "dtype")
    if name in _LISTS_OF:
        return [_one_of(name, item, _LISTS_OF[name]) for item in _as_list(name, value)]
    if name in CHOICES:
        return _one_of(name, value, name)
    if name in _CHECKS:
        return _CHECKS[name](value)
    if name == "devices":  # "cpu:N" where virtual_devices splits the CPU (Multi_GPU_Scaling)
        return [check_device(d, virtual_cpus=virtual_cpus) for d in _as_list(name, value)]
    if name not in _TEXT:
        return value
    if not isinstance(value, (str, os.PathLike)):
        raise ParameterError(f"{name} must be a path or a name (a string), got {value!r}")
    return check_folder(name, value) if name in FOLDERS else value


FOLDERS = ("data_dir",)  # parameters naming a folder that must exist when given
_TEXT = ("results_path", "env_name", *FOLDERS)  # a path or a label: any string
_CHECKS = {"device": check_device, "profile": resolve_profile, "dataset": check_dataset,
           "data_source": check_source}


def rule_names() -> dict[str, set[str]]:
    """The parameter names each kind of rule in `check_value` names (CHOICES' item kinds, e.g.
    "input_pipeline", only where no list parameter uses them)."""
    return {"_POSITIVE": set(_POSITIVE), "_INT_LISTS": set(_INT_LISTS),
            "_LISTS_OF": set(_LISTS_OF), "CHOICES": set(CHOICES) - set(_LISTS_OF.values()),
            "_CHECKS": set(_CHECKS), "_TEXT": set(_TEXT), "devices": {"devices"}}


def has_rule(name: str) -> bool:
    """Whether `check_value` checks parameter `name` by a rule of its own."""
    return name in CHOICES or any(name in names for names in rule_names().values())


def check_folder(name: str, value: str | os.PathLike) -> str | os.PathLike:
    """A folder parameter as the OS takes it (not too long) and naming an existing folder; else
    a ParameterError naming it, before anything runs."""
    text = str(value)
    shown = repr(text) if len(text) <= 80 else f"{text[:40]!r}... ({len(text)} characters)"
    try:
        mode = os.stat(os.path.expanduser(text)).st_mode
    except ValueError:  # a NUL character
        raise ParameterError(f"{name} {shown} holds a NUL character; give a folder") from None
    except OSError as exc:
        why = ("is too long for this system" if exc.errno == errno.ENAMETOOLONG
               else "does not exist" if exc.errno in (errno.ENOENT, errno.ENOTDIR)
               else f"cannot be read ({exc.strerror})")
        raise ParameterError(f"{name} {shown} {why}; give the folder holding the dataset's "
                             "files") from None
    if not stat.S_ISDIR(mode):
        raise ParameterError(f"{name} {shown} is a file, not a folder; give the folder holding "
                             "the dataset's files")
    return value


# ---------------------------------------------------------------- a notebook's own rules


def check_speed_factors(params: dict) -> dict:
    """Speed_Factors' rules beyond each value's own: its two models, two rounds or more, XLA off
    or on. Returns `params`; raises naming the bad value."""
    if params.get("model") not in SPEED_FACTORS_MODELS:
        raise ParameterError(f"model {params.get('model')!r} is not one Speed_Factors trains; "
                             f"use one of {', '.join(SPEED_FACTORS_MODELS)}")
    positive_int("epochs", params.get("epochs"), minimum=2)
    if "auto" in (params.get("xla_modes") or ()):
        raise ParameterError("xla_modes: 'auto' lets Keras choose, which differs by device; "
                             "list the modes to compare: off, on")
    return params


def check_scaling(params: dict) -> dict:
    """Multi_GPU_Scaling's parameters checked together; `devices` and `replicas` become lists
    (or stay None). Device names are checked against the machine later."""
    if params.get("model") not in CHOICES["model"]:
        raise ParameterError(f"unknown model {params.get('model')!r}; use one of "
                             f"{', '.join(CHOICES['model'])}")
    positive_int("per_replica_batch_size", params.get("per_replica_batch_size"))
    positive_int("epochs", params.get("epochs"))
    params = {**params, **{name: check_value(name, params.get(name), virtual_cpus=True) for name in
                           ("devices", "replicas", "max_train_samples", "virtual_devices")}}
    if params.get("scaling") not in CHOICES["scaling"]:
        raise ParameterError(f"unknown scaling {params.get('scaling')!r}; use \"weak\" (fixed "
                             "batch per replica) or \"strong\" (fixed global batch)")
    return params


_OWN_RULES = {"Speed_Factors": check_speed_factors, "Multi_GPU_Scaling": check_scaling}


# ---------------------------------------------------------------- names and whole notebooks


def notebooks_dir() -> Path:
    """The source notebooks: this checkout's notebooks/, else those a wheel installed."""
    here = Path(__file__).resolve().parents[1] / "notebooks"
    installed = Path(sys.prefix) / "share" / "gpubench" / "notebooks"
    return here if here.is_dir() or not installed.is_dir() else installed


@functools.cache
def declared(notebook: str) -> dict[str, Any]:
    """{name: default} as `notebook`'s parameters cell declares them, in its order (the book's
    values: the full profile); or raise naming the notebook and what is wrong."""
    if notebook not in NOTEBOOKS:
        raise ParameterError(f"unknown notebook {notebook!r}; use one of {', '.join(NOTEBOOKS)}")
    path = notebooks_dir() / f"{notebook}.ipynb"
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        source = next("".join(c["source"]) for c in cells
                      if "parameters" in c.get("metadata", {}).get("tags", []))
        body = ast.parse(source).body
    except (OSError, ValueError, KeyError, TypeError, StopIteration, SyntaxError) as exc:
        raise ParameterError(f"cannot read the parameters cell of {path} ({type(exc).__name__}: "
                             f"{exc}); restore it: git checkout notebooks") from None
    found = {}
    for node in body:
        try:
            [target] = node.targets  # a name = a literal, as papermill reads it
            found[target.id] = ast.literal_eval(node.value)
        except (AttributeError, ValueError, TypeError):
            raise ParameterError(f"{path}, parameters cell line {node.lineno}: write NAME = "
                                 "a literal value (str, number, list, None)") from None
    return found


@functools.cache
def defaults() -> dict[str, dict[str, dict]]:
    """{profile: {notebook: {name: default}}}: the parameters cells' values (but the runner's
    COMMON), and in `quick` what `_QUICK` changes."""
    full = {nb: {k: v for k, v in declared(nb).items() if k not in COMMON} for nb in NOTEBOOKS}
    return {"full": full, "quick": {nb: {**full[nb], **_QUICK[nb]} for nb in NOTEBOOKS}}


def __getattr__(name: str) -> Any:
    """`DEFAULTS` is `defaults()`, read from the notebooks on first use."""
    if name == "DEFAULTS":
        return defaults()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parameter_names(notebook: str) -> list[str]:
    """The parameters a notebook takes, in the order of its parameters cell; or raise naming it."""
    return list(declared(notebook))


def check_names(notebook: str, given: dict | list) -> None:
    """Raise naming every parameter in `given` that `notebook` does not take."""
    unknown = sorted(set(given) - set(parameter_names(notebook)))
    if unknown:
        raise ParameterError(f"unknown parameter(s) {', '.join(unknown)} for {notebook}; "
                             f"it takes {', '.join(parameter_names(notebook))}")


def check_params(notebook: str, given: dict) -> dict:
    """Check names against `notebook`'s parameters and each value by its rule (its own rules
    on the given values over the book's); return them checked."""
    check_names(notebook, given)
    cpus = "virtual_devices" in declared(notebook)  # devices "cpu:N" name virtual CPUs
    checked = {name: check_value(name, value, virtual_cpus=cpus) for name, value in given.items()}
    if notebook in _OWN_RULES:
        merged = _OWN_RULES[notebook]({**declared(notebook),
                                       **{k: v for k, v in checked.items() if v is not None}})
        checked = {k: None if v is None else merged.get(k, v) for k, v in checked.items()}
    _check_dataset_fits(notebook, checked)
    return checked


def _check_dataset_fits(notebook: str, checked: dict) -> None:
    """A dataset given for a model whose input it does not fit: ParameterError, before any run."""
    dataset = checked.get("dataset")
    model = (checked.get("model") or TRAINING_NOTEBOOKS.get(notebook)
             or declared(notebook).get("model"))
    if dataset is None or model not in MODEL_DATASETS or dataset in MODEL_DATASETS[model]:
        return
    raise ParameterError(f"dataset {dataset!r} does not fit {model} ({notebook}): its images are "
                         f"not the shape the model takes; use {' or '.join(MODEL_DATASETS[model])}")


def check_for_backend(notebook: str, params: dict, backend: str,
                      tensorflow_importable: bool) -> dict:
    """`params` checked against what `backend` can run (before any kernel starts); raises naming
    the value and what to use instead. Returns them unchanged."""
    steps = params.get("steps_per_execution")
    if backend == "torch" and [v for v in (steps if isinstance(steps, list) else [steps]) if
                               v not in (None, 1)]:
        raise ParameterError(
            f"{notebook}: steps_per_execution={steps!r}: Keras's PyTorch trainer runs one step per "
            "call; use steps_per_execution=1 (or leave it out) in a torch env")
    pipelines = params.get("input_pipelines") or []
    if "tf.data" in pipelines and not tensorflow_importable:
        raise ParameterError(
            f"{notebook}: input_pipelines includes 'tf.data', but TensorFlow cannot be imported "
            f"in this {backend} env; drop it (e.g. -p input_pipelines=arrays,on_device) or "
            "`pip install tensorflow-cpu` into that env")
    return params


def _env_dataset(book: str) -> str | None:
    """GPUBENCH_DATASET checked, when it has the shape of `book` (the chapter's own dataset)."""
    text = os.environ.get("GPUBENCH_DATASET")
    if not text:
        return None
    try:
        name = check_dataset(text)
    except ParameterError as exc:
        raise ParameterError(f"{exc} (from GPUBENCH_DATASET)") from None
    return name if _SHAPE[name] == _SHAPE[book] else None


def resolve(notebook: str, **given) -> tuple[dict, dict]:
    """(parameters with the profile's values and the GPUBENCH_* variables filled in,
    {name: (book, quick)} for those the quick profile replaced)."""
    check_names(notebook, given)
    params = {name: given.get(name) for name in parameter_names(notebook)}
    params["profile"] = profile = resolve_profile(given.get("profile"))
    changed = {}
    book = declared(notebook)
    for name, default in defaults()[profile][notebook].items():
        if params[name] is None or params[name] == book[name]:
            params[name] = default
            if default != book[name]:
                changed[name] = (book[name], default)
    if "data_source" in params:
        if params["dataset"] == book["dataset"]:  # the book's: the variable may name another
            params["dataset"] = _env_dataset(book["dataset"]) or params["dataset"]
        params["data_source"] = (params["data_source"] or os.environ.get("GPUBENCH_DATA_SOURCE")
                                 or "auto")
        params["data_dir"] = params["data_dir"] or os.environ.get("GPUBENCH_DATA_DIR") or None
    return params, changed
