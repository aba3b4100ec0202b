"""The parameters' rules as data, by name whatever the notebook: values, bounds, the profiles.

Stdlib only: the runner checks `-p` with these before any kernel starts, `gb.chapter.start` in
the kernel. A parameters cell declares the names and defaults; a name with no rule keeps its
value. None takes the profile's value, or GPUBENCH_PROFILE, _DATA_SOURCE, _DATA_DIR, _DATASET.
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

from gpubench import machine  # stdlib only: the one rule for the project root

PROFILES = ("full", "quick")
NOTEBOOKS = ("performanceTest", "Mnist_MLP_h1000", "Mnist_CNN", "Keras_Cifar_CNN",
             "Speed_Factors", "Multi_GPU_Scaling")
TRAINING_NOTEBOOKS = {"Mnist_MLP_h1000": "mlp_h1000", "Mnist_CNN": "mnist_cnn",
                      "Keras_Cifar_CNN": "cifar_cnn"}
SPEED_FACTORS_MODELS = ("mlp_h1000", "mnist_cnn")
DATASETS = ("mnist", "fashion_mnist", "cifar10")
SOURCES = ("auto", "keras", "dir", "synthetic")
SHAPES = {"mnist": "28x28 grey", "fashion_mnist": "28x28 grey", "cifar10": "32x32 colour"}
MODEL_SHAPES = {"mlp_h1000": "28x28 grey", "mnist_cnn": "28x28 grey", "cifar_cnn": "32x32 colour"}
CHOICES = {"model": tuple(TRAINING_NOTEBOOKS.values()),
           "dtype": ("float32", "float64", "float16", "bfloat16"), "xla": ("off", "on", "auto"),
           "precision": ("float32", "mixed_float16", "mixed_bfloat16"),
           "input_pipeline": ("arrays", "tf.data", "on_device"), "scaling": ("weak", "strong"),
           "dataset": DATASETS, "data_source": SOURCES}
CANONICAL = ("dataset", "data_source")  # read in any case, with "-" for "_" ("Fashion-MNIST")
COMMON = ("profile", "results_path", "env_name")  # every cell declares them; the runner sets them
# The most a count may be: more than any machine would finish.
LIMITS = {"repeats": 1000, "epochs": 10_000, "batch_size": 2**20, "max_train_samples": 10**7,
          "per_replica_batch_size": 2**20, "virtual_devices": 1024, "sizes": 65_536,
          "batch_sizes": 2**20, "steps_per_execution": 100_000, "replicas": 1024}
INT_LISTS = ("sizes", "batch_sizes", "steps_per_execution", "replicas")
LISTS_OF = {"precisions": "precision", "xla_modes": "xla", "input_pipelines": "input_pipeline",
            "dtype": "dtype"}  # a list of CHOICES[kind] (dtype: one, or a list)
FOLDERS = ("data_dir",)  # a folder that must exist when given
TEXT = ("results_path", "env_name")  # a path or a label: any string
QUICK = {  # what the quick profile changes in the book's notebooks
    "performanceTest": {"sizes": [500, 1000, 1500, 2000], "repeats": 3, "dtype": "float32"},
    "Mnist_MLP_h1000": {"epochs": 3, "max_train_samples": 12000},
    "Mnist_CNN": {"epochs": 3, "max_train_samples": 10000},
    "Keras_Cifar_CNN": {"epochs": 3, "max_train_samples": 3000},
    "Speed_Factors": {"epochs": 3, "max_train_samples": 3000, "batch_sizes": [100, 1000],
                      "precisions": ["float32", "mixed_bfloat16"]},
    "Multi_GPU_Scaling": {"epochs": 3, "max_train_samples": 6000},
}
# Rough wall time of each notebook on a 2-core CPU, kernel start included (the runner's ETA).
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
    """A notebook parameter that is unknown or has a bad value; the message says what to do."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for this error: its message, no traceback."""
        return [f"{type(self).__name__}: {self}"]


def positive_int(name: str, value: Any, *, minimum: int = 1, allow_none: bool = False,
                 maximum: int | None = None) -> Any:
    """`value` if it is an int from `minimum` to `maximum` (or None when allowed), else raise."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ParameterError(f"{name} must be {what}{' or None' if allow_none else ''}, "
                             f"got {value!r}")
    if maximum is not None and value > maximum:
        raise ParameterError(f"{name}={value!r} is above {maximum:,}, the most gpubench takes "
                             f"(no machine would finish it); use at most {maximum:,}")
    return value


def check_device(name: object, *, virtual_cpus: bool = False) -> str:
    """`name` stripped if its syntax is a device's ("cpu:N" only if virtual_cpus)."""
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
    return one_of("dataset", name, "dataset")


def check_source(source: object) -> str:
    """The canonical data source (None -> "auto"), or raise naming it."""
    return one_of("data_source", "auto" if source is None else source, "data_source")


def resolve_profile(profile: str | None) -> str:
    """The profile to use: `profile`, else GPUBENCH_PROFILE, else "full"."""
    chosen = profile if profile is not None else os.environ.get("GPUBENCH_PROFILE") or "full"
    if chosen not in PROFILES:
        where = "" if profile is not None else " (from GPUBENCH_PROFILE)"
        raise ParameterError(f"unknown profile {chosen!r}{where}; use one of "
                             f"{', '.join(PROFILES)}")
    return chosen


def check_folder(name: str, value: str | os.PathLike) -> str | os.PathLike:
    """A folder parameter naming an existing folder (a path the OS takes), else raise."""
    text = str(value)
    shown = repr(text) if len(text) <= 80 else f"{text[:40]!r}... ({len(text)} characters)"
    try:
        folder = stat.S_ISDIR(os.stat(os.path.expanduser(text)).st_mode)
        why = "" if folder else "is a file, not a folder"
    except ValueError:
        why = "holds a NUL character"
    except OSError as exc:
        why = ("is too long for this system" if exc.errno == errno.ENAMETOOLONG
               else "does not exist" if exc.errno in (errno.ENOENT, errno.ENOTDIR)
               else f"cannot be read ({exc.strerror})")
    if why:
        raise ParameterError(f"{name} {shown} {why}; give the folder holding the dataset's files")
    return value


def hint(name: str) -> str:
    """How to pass list parameter `name`: in the notebook, to papermill, to gpubench run."""
    items = (["cpu", "gpu:0"] if name == "devices" else ["100", "1000"] if name in INT_LISTS
             else list(CHOICES[LISTS_OF[name]][:2]))
    python = str([int(i) if i.isdigit() else i for i in items]).replace("'", '"')
    return (f"pass a list such as {python} (papermill: -y \"{name}: [{', '.join(items)}]\"; "
            f"gpubench run: -p {name}={','.join(items)})")


def as_list(name: str, value: Any) -> list:
    """A list as it is, "[a, b]" or "a,b" (as papermill -p passes it) parsed, one value wrapped."""
    if isinstance(value, str):
        try:
            value = (ast.literal_eval(value) if value.strip().startswith("[")
                     else [item.strip().strip("'\"") for item in value.split(",")])
        except (ValueError, SyntaxError):
            raise ParameterError(f"{name}={value!r} is not a list; {hint(name)}") from None
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    if not value:
        raise ParameterError(f"{name} is empty; {hint(name)}")
    return value


def one_of(name: str, value: Any, kind: str) -> str:
    """`value` (CANONICAL kinds canonical) if it is one of CHOICES[kind], else raise naming it
    (and how to pass list parameter `name`)."""
    canonical = kind in CANONICAL and isinstance(value, str)
    found = value.strip().lower().replace("-", "_") if canonical else value
    if found not in CHOICES[kind]:
        where = f" in {name}; {hint(name)}" if name != kind else ""
        raise ParameterError(f"unknown {kind.replace('_', ' ')} {value!r}; use one of "
                             f"{', '.join(CHOICES[kind])}{where}")
    return found


def count_item(name: str, item: Any) -> int:
    """One count of list parameter `name` ("500" as papermill passes it), checked."""
    number = int(item) if isinstance(item, str) and item.strip().isdigit() else item
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise ParameterError(f"{name}: {item!r} is not a positive integer; {hint(name)}")
    return positive_int(name, number, maximum=LIMITS[name])


def check_value(name: str, value: Any, *, virtual_cpus: bool = False) -> Any:
    """`value` checked by the rule of `name` (a list parameter as a list), or raise naming it;
    a name with no rule keeps its value."""
    if value is None:
        return None
    if name in INT_LISTS:
        return [count_item(name, item) for item in as_list(name, value)]
    if name in LIMITS:
        return positive_int(name, value, maximum=LIMITS[name])
    if name == "dtype" and isinstance(value, str) and "," not in value:
        return one_of(name, value.strip(), "dtype")
    if name in LISTS_OF:
        return [one_of(name, item, LISTS_OF[name]) for item in as_list(name, value)]
    if name in CHOICES:
        return one_of(name, value, name)
    if name == "devices":  # "cpu:N" where virtual_devices splits the CPU (Multi_GPU_Scaling)
        return [check_device(d, virtual_cpus=virtual_cpus) for d in as_list(name, value)]
    if name in CHECKS:
        return CHECKS[name](value)
    if name in TEXT + FOLDERS and not isinstance(value, (str, os.PathLike)):
        raise ParameterError(f"{name} must be a path or a name (a string), got {value!r}")
    return check_folder(name, value) if name in FOLDERS else value


CHECKS = {"device": check_device, "profile": resolve_profile}
RULED = (*LIMITS, *LISTS_OF, *CHOICES, "devices", *CHECKS, *TEXT, *FOLDERS)  # names with a rule


def check_speed_factors(params: dict) -> dict:
    """Speed_Factors' own rules: its two models, two rounds or more, XLA off or on."""
    if params.get("model") not in SPEED_FACTORS_MODELS:
        raise ParameterError(f"model {params.get('model')!r} is not one Speed_Factors trains; "
                             f"use one of {', '.join(SPEED_FACTORS_MODELS)}")
    positive_int("epochs", params.get("epochs"), minimum=2)
    if "auto" in (params.get("xla_modes") or ()):
        raise ParameterError("xla_modes: 'auto' lets Keras choose, which differs by device; "
                             "list the modes to compare: off, on")
    return params


def check_scaling(params: dict) -> dict:
    """Multi_GPU_Scaling's parameters checked together; `devices`, `replicas` become lists."""
    if params.get("model") not in CHOICES["model"]:
        raise ParameterError(f"unknown model {params.get('model')!r}; use one of "
                             f"{', '.join(CHOICES['model'])}")
    for name in ("per_replica_batch_size", "epochs"):
        positive_int(name, params.get(name), maximum=LIMITS[name])
    params = {**params, **{name: check_value(name, params.get(name), virtual_cpus=True) for name in
                           ("devices", "replicas", "max_train_samples", "virtual_devices")}}
    if params.get("scaling") not in CHOICES["scaling"]:
        raise ParameterError(f"unknown scaling {params.get('scaling')!r}; use \"weak\" (fixed "
                             "batch per replica) or \"strong\" (fixed global batch)")
    return params


OWN_RULES = {"Speed_Factors": check_speed_factors, "Multi_GPU_Scaling": check_scaling}


def notebooks_dir() -> Path:
    """The source notebooks: this checkout's notebooks/, else those a wheel installed."""
    root = machine.checkout()
    return root / "notebooks" if root else Path(sys.prefix) / "share" / "gpubench" / "notebooks"


def literal_cell(source: str) -> dict[str, Any]:
    """{name: value} of a cell of `NAME = literal` lines, as papermill reads one; else raise."""
    found = {}
    for node in ast.parse(source).body:
        try:
            [target] = node.targets
            found[target.id] = ast.literal_eval(node.value)
        except (AttributeError, ValueError, TypeError):
            raise ParameterError(f"parameters cell line {node.lineno}: write NAME = a literal "
                                 "value (str, number, list, None)") from None
    return found


def declared_in(path: str | os.PathLike) -> dict[str, Any]:
    """{name: default} of the tagged parameters cell of the .ipynb at `path`; or raise."""
    try:
        cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
        return literal_cell(next("".join(c["source"]) for c in cells
                                 if "parameters" in c.get("metadata", {}).get("tags", [])))
    except (OSError, ValueError, KeyError, TypeError, StopIteration, SyntaxError) as exc:
        raise ParameterError(f"cannot read the parameters cell of {path}: {type(exc).__name__}"
                             f" {exc}".rstrip()) from None


@functools.cache
def declared(notebook: str) -> dict[str, Any]:
    """{name: default} as book notebook `notebook`'s parameters cell declares them."""
    if notebook not in NOTEBOOKS:
        raise ParameterError(f"unknown notebook {notebook!r}; use one of {', '.join(NOTEBOOKS)}")
    return declared_in(notebooks_dir() / f"{notebook}.ipynb")


@functools.cache
def defaults() -> dict[str, dict[str, dict]]:
    """{profile: {notebook: {name: default}}} of the book's notebooks (but COMMON)."""
    full = {nb: {k: v for k, v in declared(nb).items() if k not in COMMON} for nb in NOTEBOOKS}
    return {"full": full, "quick": {nb: {**full[nb], **QUICK[nb]} for nb in NOTEBOOKS}}


def __getattr__(name: str) -> Any:
    """`DEFAULTS` is `defaults()`, read from the notebooks on first use."""
    if name == "DEFAULTS":
        return defaults()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parameter_names(notebook: str) -> list[str]:
    """The parameters a book notebook takes, in the order of its parameters cell."""
    return list(declared(notebook))


def cell_of(notebook: str, cell: dict | None) -> dict[str, Any]:
    """`cell` (names and defaults), or when None the book notebook `notebook`'s own."""
    return declared(notebook) if cell is None else cell


def check_names(notebook: str, given: dict | list, cell: dict | None = None,
                how: str = "") -> None:
    """Raise naming every name in `given` that `cell` (None: the book's) does not declare."""
    cell = cell_of(notebook, cell)
    if unknown := [name for name in given if name not in cell]:
        takes = ", ".join(name for name in cell if name not in COMMON) or "no parameter of its own"
        raise ParameterError(f"unknown parameter(s) {', '.join(unknown)} "
                             f"{how or 'for ' + notebook}; it takes {takes} (and "
                             f"{', '.join(COMMON)}, which `gpubench run` sets itself)")


def check_params(notebook: str, given: dict, declared: dict | None = None) -> dict:
    """`given` checked: names against `declared` (None: the book notebook's cell), values by
    their rules, then the notebook's own rules; returned checked."""
    cell = cell_of(notebook, declared)
    check_names(notebook, given, cell)
    cpus = "virtual_devices" in cell  # devices "cpu:N" name virtual CPUs
    checked = {name: check_value(name, value, virtual_cpus=cpus) for name, value in given.items()}
    if notebook in OWN_RULES:
        merged = OWN_RULES[notebook]({**cell, **{k: v for k, v in checked.items()
                                                 if v is not None}})
        checked = {k: None if v is None else merged.get(k, v) for k, v in checked.items()}
    model = checked.get("model") or TRAINING_NOTEBOOKS.get(notebook) or cell.get("model")
    dataset = checked.get("dataset")
    if dataset and model in MODEL_SHAPES and SHAPES[dataset] != MODEL_SHAPES[model]:
        fits = " or ".join(d for d in DATASETS if SHAPES[d] == MODEL_SHAPES[model])
        raise ParameterError(f"dataset {dataset!r} does not fit {model} ({notebook}): its images "
                             f"are not the shape the model takes; use {fits}")
    return checked


def check_for_backend(notebook: str, params: dict, backend: str,
                      tensorflow_importable: bool) -> dict:
    """`params` unchanged if `backend` can run them, else raise naming the value and the fix."""
    steps = params.get("steps_per_execution")
    if backend == "torch" and [v for v in (steps if isinstance(steps, list) else [steps]) if
                               v not in (None, 1)]:
        raise ParameterError(
            f"{notebook}: steps_per_execution={steps!r}: Keras's PyTorch trainer runs one step per "
            "call; use steps_per_execution=1 (or leave it out) in a torch env")
    if "tf.data" in (params.get("input_pipelines") or []) and not tensorflow_importable:
        raise ParameterError(
            f"{notebook}: input_pipelines includes 'tf.data', but TensorFlow cannot be imported "
            f"in this {backend} env; drop it (e.g. -p input_pipelines=arrays,on_device) or "
            "`pip install tensorflow-cpu` into that env")
    return params


def env_dataset(book: str) -> str | None:
    """GPUBENCH_DATASET checked, when its images have the shape of dataset `book`'s."""
    if not (text := os.environ.get("GPUBENCH_DATASET")):
        return None
    try:
        name = check_dataset(text)
    except ParameterError as exc:
        raise ParameterError(f"{exc} (from GPUBENCH_DATASET)") from None
    return name if SHAPES[name] == SHAPES.get(book) else None


def resolve(notebook: str, declared: dict | None = None, /, **given) -> tuple[dict, dict]:
    """(parameters with the profile's values and the GPUBENCH_* variables filled in,
    {name: (cell's, quick)} for those the quick profile replaced); `declared` as in check_params."""
    cell = cell_of(notebook, declared)
    check_names(notebook, given, cell)
    params = {name: given.get(name) for name in cell}
    params["profile"] = profile = resolve_profile(given.get("profile"))
    quick = QUICK.get(notebook, {}) if profile == "quick" else {}
    changed = {}
    for name, book in cell.items():
        if name not in COMMON and (params[name] is None or params[name] == book):
            params[name] = quick.get(name, book)
            if params[name] != book:
                changed[name] = (book, params[name])
    if params.get("dataset") is not None and params["dataset"] == cell.get("dataset"):
        params["dataset"] = env_dataset(params["dataset"]) or params["dataset"]
    if "data_source" in params:
        params["data_source"] = (params["data_source"] or os.environ.get("GPUBENCH_DATA_SOURCE")
                                 or "auto")
    if "data_dir" in params:
        params["data_dir"] = params["data_dir"] or os.environ.get("GPUBENCH_DATA_DIR") or None
    return params, changed
