"""The notebooks' parameter rules by name (the data: tables/params.json), stdlib only; None takes
the profile's value, or GPUBENCH_PROFILE, _DATA_SOURCE, _DATA_DIR, _DATASET."""

import ast
import errno
import functools
import json
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpubench import machine  # stdlib only: the one rule for the project root

TABLES = json.loads((Path(__file__).parent / "tables" / "params.json").read_text("utf-8"))
PROFILES = tuple(TABLES["profiles"])
QUICK, EXPECTED_SECONDS = TABLES["quick"], TABLES["expected_seconds"]
NOTEBOOKS = tuple(QUICK)  # the book's notebooks, in reading order
TRAINING_NOTEBOOKS = TABLES["training_notebooks"]
SHAPES = TABLES["shapes"]  # the images of each dataset, and those each model takes
CHOICES = {"model": tuple(TRAINING_NOTEBOOKS.values()),
           **{kind: tuple(names) for kind, names in TABLES["choices"].items()}}
DATASETS, SOURCES = CHOICES["dataset"], CHOICES["data_source"]
COMMON = ("profile", "results_path", "env_name")  # every cell declares them; the runner sets them
LIMITS, INT_LISTS = TABLES["limits"], tuple(TABLES["int_lists"])  # the most a count may be
LISTS_OF = TABLES["lists_of"]  # a list of CHOICES[kind] (dtype: one, or a list)
FOLDERS, TEXT = ("data_dir",), ("results_path", "env_name")  # a folder that must exist; a string
DEVICE_PATTERN = re.compile(r"^(?:auto|/?(?:device:)?(cpu|gpu)(?::(\d+))?)$", re.IGNORECASE)


class ParameterError(ValueError):
    """A notebook parameter that is unknown or has a bad value; the message says what to do."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for this error: its message, no traceback."""
        return [f"{type(self).__name__}: {self}"]


class DeviceError(ParameterError):
    """A device name gpubench does not understand, or a device that does not exist."""


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
    """`name` stripped if its syntax is a device's ("cpu:N" only if virtual_cpus); DeviceError."""
    if not (isinstance(name, str) and (match := DEVICE_PATTERN.match(name.strip()))):
        raise DeviceError(f"unknown device {name!r}; use one of \"auto\", \"cpu\", \"gpu\", "
                          "\"gpu:N\", or TensorFlow's \"/CPU:0\", \"/GPU:N\", \"/device:GPU:N\"")
    if str(match[1]).lower() == "cpu" and int(match[2] or 0) != 0 and not virtual_cpus:
        raise DeviceError(f"unknown device {name!r}: there is one CPU device, use \"cpu\" "
                          "(Multi_GPU_Scaling's virtual_devices=N splits it into cpu:0..cpu:N-1)")
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


def _folder(name: str, value: str | os.PathLike) -> str | os.PathLike:
    text = str(value)
    try:
        if stat.S_ISDIR(os.stat(os.path.expanduser(text)).st_mode):
            return value
        why = "is a file, not a folder"
    except ValueError:
        why = "holds a NUL character"
    except OSError as exc:
        why = ("is too long for this system" if exc.errno == errno.ENAMETOOLONG
               else "does not exist" if exc.errno in (errno.ENOENT, errno.ENOTDIR)
               else f"cannot be read ({exc.strerror})")
    shown = repr(text) if len(text) <= 80 else f"{text[:40]!r}... ({len(text)} characters)"
    raise ParameterError(f"{name} {shown} {why}; give the folder holding the dataset's files")


def _hint(name: str) -> str:
    items = (["cpu", "gpu:0"] if name == "devices" else ["100", "1000"] if name in INT_LISTS
             else list(CHOICES[LISTS_OF[name]][:2]))
    python = json.dumps([int(i) if i.isdigit() else i for i in items])
    return (f"pass a list such as {python} (papermill: -y \"{name}: [{', '.join(items)}]\"; "
            f"gpubench run: -p {name}={','.join(items)})")


def _as_list(name: str, value: Any) -> list:
    if isinstance(value, str):  # "[a, b]" or "a,b", as papermill -p passes a list
        try:
            value = (ast.literal_eval(value) if value.strip().startswith("[")
                     else [item.strip().strip("'\"") for item in value.split(",")])
        except (ValueError, SyntaxError):
            raise ParameterError(f"{name}={value!r} is not a list; {_hint(name)}") from None
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    if not value:
        raise ParameterError(f"{name} is empty; {_hint(name)}")
    return value


def one_of(name: str, value: Any, kind: str) -> str:
    """`value` (a dataset or source in any case) if it is one of CHOICES[kind], else raise."""
    canonical = kind in ("dataset", "data_source") and isinstance(value, str)  # "Fashion-MNIST"
    found = value.strip().lower().replace("-", "_") if canonical else value
    if found not in CHOICES[kind]:
        where = f" in {name}; {_hint(name)}" if name != kind else ""
        raise ParameterError(f"unknown {kind.replace('_', ' ')} {value!r}; use one of "
                             f"{', '.join(CHOICES[kind])}{where}")
    return found


def check_value(name: str, value: Any, *, virtual_cpus: bool = False) -> Any:
    """`value` by the rule of `name` (a list parameter as a list), or raise; no rule: as it is."""
    if value is None:
        return None
    if name in INT_LISTS:  # "100,1000" as `-p` passes it, too
        counts = [int(i) if str(i).strip().isdigit() else i for i in _as_list(name, value)]
        if bad := [i for i in counts if isinstance(i, bool) or not isinstance(i, int) or i < 1]:
            raise ParameterError(f"{name}: {bad[0]!r} is not a positive integer; {_hint(name)}")
        return [positive_int(name, count, maximum=LIMITS[name]) for count in counts]
    if name in LIMITS:
        return positive_int(name, value, maximum=LIMITS[name])
    if name == "dtype" and isinstance(value, str) and "," not in value:
        return one_of(name, value.strip(), "dtype")
    if name in LISTS_OF:
        return [one_of(name, item, LISTS_OF[name]) for item in _as_list(name, value)]
    if name in CHOICES:
        return one_of(name, value, name)
    if name == "devices":  # "cpu:N" where virtual_devices splits the CPU (Multi_GPU_Scaling)
        return [check_device(d, virtual_cpus=virtual_cpus) for d in _as_list(name, value)]
    if name in CHECKS:
        return CHECKS[name](value)
    if name == "true_float32" and str(value).lower() in ("true", "false"):  # as `-p` passes it
        return str(value).lower() == "true"
    if name == "true_float32":
        raise ParameterError(f"{name} must be True or False, got {value!r}")
    if name in TEXT + FOLDERS and not isinstance(value, (str, os.PathLike)):
        raise ParameterError(f"{name} must be a path or a name (a string), got {value!r}")
    return _folder(name, value) if name in FOLDERS else value


CHECKS = {"device": check_device, "profile": resolve_profile}
RULED = (*LIMITS, *LISTS_OF, *CHOICES, "devices", "true_float32", *CHECKS, *TEXT, *FOLDERS)


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


def check_names(notebook: str, given: dict | list, cell: dict | None, how: str = "") -> dict:
    """`cell` (names and defaults; None: the book notebook's), after raising naming every name
    in `given` it does not declare."""
    cell = declared(notebook) if cell is None else cell
    if unknown := [name for name in given if name not in cell]:
        takes = ", ".join(name for name in cell if name not in COMMON) or "no parameter of its own"
        raise ParameterError(f"unknown parameter(s) {', '.join(unknown)} "
                             f"{how or 'for ' + notebook}; it takes {takes} (and "
                             f"{', '.join(COMMON)}, which `gpubench run` sets itself)")
    return cell


def check_params(notebook: str, given: dict, declared: dict | None = None,
                 rules: Callable[[dict], dict] | None = None) -> dict:
    """`given` checked: names against `declared` (None: the book notebook's cell), values by
    their rules, then by `rules`, the notebook's own (e.g. factors.rules.check_parameters)."""
    cell = check_names(notebook, given, declared)
    cpus = "virtual_devices" in cell  # devices "cpu:N" name virtual CPUs
    checked = {name: check_value(name, value, virtual_cpus=cpus) for name, value in given.items()}
    if rules is not None:
        merged = rules({**cell, **{k: v for k, v in checked.items() if v is not None}})
        checked = {k: None if v is None else merged.get(k, v) for k, v in checked.items()}
    model = checked.get("model") or TRAINING_NOTEBOOKS.get(notebook) or cell.get("model")
    dataset = checked.get("dataset")
    if dataset and model in SHAPES and SHAPES[dataset] != SHAPES[model]:
        fits = " or ".join(d for d in DATASETS if SHAPES[d] == SHAPES[model])
        raise ParameterError(f"dataset {dataset!r} does not fit {model} ({notebook}): its images "
                             f"are not the shape the model takes; use {fits}")
    return checked


def resolve(notebook: str, cell: dict | None = None, /, **given) -> tuple[dict, dict]:
    """(parameters with the profile's values and the GPUBENCH_* variables filled in,
    {name: (cell's, quick)} for those the quick profile replaced); `cell` as in check_params."""
    cell = check_names(notebook, given, cell)
    params = {name: given.get(name) for name in cell}
    params["profile"] = profile = resolve_profile(given.get("profile"))
    quick = QUICK.get(notebook, {}) if profile == "quick" else {}
    changed = {}
    for name, book in cell.items():
        if name not in COMMON and (params[name] is None or params[name] == book):
            params[name] = quick.get(name, book)
            if params[name] != book:
                changed[name] = (book, params[name])
    dataset = params.get("dataset")
    if (text := os.environ.get("GPUBENCH_DATASET")) and dataset and dataset == cell["dataset"]:
        try:
            name = check_dataset(text)
        except ParameterError as exc:
            raise ParameterError(f"{exc} (from GPUBENCH_DATASET)") from None
        params["dataset"] = name if SHAPES[name] == SHAPES[dataset] else dataset
    for name, default in (("data_source", "auto"), ("data_dir", None)):
        if name in params:
            params[name] = params[name] or os.environ.get(f"GPUBENCH_{name.upper()}") or default
    return params, changed
