"""What every notebook does first: check its parameters, apply the profile, open the results.

`check_params` holds the rules for every notebook parameter. The runner calls it
before any kernel starts and `start` calls it in the notebook, so a bad value
fails the same way in both places. It imports no TensorFlow (device names are
checked for their syntax only; `start` then resolves them with TensorFlow).
"""

from __future__ import annotations

import ast
import importlib
import os
from dataclasses import dataclass, fields
from pathlib import Path

from gpubench import __version__, checks, profiles, results

_POSITIVE = ("repeats", "epochs", "batch_size", "max_train_samples", "per_replica_batch_size",
             "virtual_devices")
_INT_LISTS = ("sizes", "batch_sizes", "steps_per_execution", "replicas")
_CHOICE_LISTS = {"precisions": "precision", "xla_modes": "xla", "input_pipelines": "input_pipeline"}
_TEXT = ("results_path", "env_name", "data_dir")
_EXAMPLES = {"sizes": "[500, 1000]", "batch_sizes": "[100, 1000]", "steps_per_execution": "[1, 32]",
             "replicas": "[1, 2]", "devices": '["cpu", "gpu:0"]', "dtype": '["float32", "bfloat16"]',
             "precisions": '["float32", "mixed_bfloat16"]', "xla_modes": '["off", "on"]',
             "input_pipelines": '["arrays", "tf.data"]'}


@dataclass
class Config:
    """A notebook's resolved parameters (one field each), its results store and its machine."""

    notebook: str
    store: results.ResultsStore
    environment: dict
    profile: str = "full"
    results_path: str | None = None
    env_name: str | None = None
    changed: dict | None = None  # {name: (book value, quick value)} replaced by the quick profile
    # performanceTest
    sizes: list[int] | None = None
    devices: list[str] | None = None
    repeats: int | None = None
    dtype: str | list[str] | None = None
    # the training chapters, Speed_Factors, Multi_GPU_Scaling
    model: str | None = None
    device: str | None = None
    epochs: int | None = None
    batch_size: int | None = None
    max_train_samples: int | None = None
    dataset: str | None = None
    data_source: str | None = None
    data_dir: str | None = None
    xla: str | None = None
    precision: str | None = None
    batch_sizes: list[int] | None = None
    precisions: list[str] | None = None
    xla_modes: list[str] | None = None
    steps_per_execution: list[int] | None = None
    input_pipelines: list[str] | None = None
    replicas: list[int] | None = None
    per_replica_batch_size: int | None = None
    scaling: str | None = None
    virtual_devices: int | None = None

    @property
    def params(self) -> dict:
        """This notebook's parameters and their values, in the parameters cell's order."""
        return {name: getattr(self, name) for name in profiles.parameter_names(self.notebook)}

    @property
    def recording(self) -> dict:
        """Where a measurement's record goes: `store`, `env` and `notebook` keyword arguments."""
        return {"store": self.store, "env": self.env_name, "notebook": self.notebook}


CONFIG_FIELDS = {f.name for f in fields(Config)}


def _as_list(name: str, value) -> list:
    """A list parameter as a list: lists as they are, "[a, b]" or "a,b" parsed, one value wrapped."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise ValueError(f"{name}={value!r} is not a list; {_list_hint(name)}") from None
        else:
            value = [item.strip().strip("'\"") for item in text.split(",")]
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{name} is empty; {_list_hint(name)}")
        return list(value)
    return [value]


def _list_hint(name: str) -> str:
    """How to pass a list parameter from the command line."""
    example = _EXAMPLES.get(name, "[...]")
    return (f"pass a list such as {example} (papermill: -y \"{name}: {example}\"; "
            f"gpubench run: -p '{name}={example}')")


def _int_item(name: str, item) -> int:
    if isinstance(item, str) and item.strip().isdigit():
        item = int(item)
    try:
        return checks.positive_int(name, item)
    except ValueError:
        raise ValueError(f"{name}: {item!r} is not a positive integer; {_list_hint(name)}") from None


def _choice(name: str, value, kind: str | None = None) -> str:
    accepted = profiles.CHOICES[kind or name]
    if value not in accepted:
        where = f" in {name}; {_list_hint(name)}" if kind else ""
        raise ValueError(f"unknown {kind or name} {value!r}; use one of {', '.join(accepted)}{where}")
    return value


def _device_name(name: str, value) -> str:
    from gpubench import devices  # noqa: PLC0415 - stdlib-only at import; TensorFlow stays unloaded

    if not isinstance(value, str) or not (value.strip().lower() == "auto"
                                          or devices._PATTERN.match(value.strip())):
        raise ValueError(f"unknown device {value!r} in {name}; use one of {devices.ACCEPTED}")
    return value.strip()


def check_value(name: str, value):
    """Return `value` checked (and a list parameter as a list), or raise naming it and what to do."""
    if value is None:
        return None
    if name in _POSITIVE:
        return checks.positive_int(name, value)
    if name in _INT_LISTS:
        return [_int_item(name, item) for item in _as_list(name, value)]
    if name in _CHOICE_LISTS:
        return [_choice(name, item, _CHOICE_LISTS[name]) for item in _as_list(name, value)]
    if name in profiles.CHOICES and name != "dtype":
        return _choice(name, value)
    if name == "dtype":
        items = [_choice(name, item, "dtype") for item in _as_list(name, value)]
        return items[0] if isinstance(value, str) and len(items) == 1 else items
    if name == "device":
        return _device_name(name, value)
    if name == "devices":
        return [_device_name(name, item) for item in _as_list(name, value)]
    if name == "profile":
        return profiles.resolve_profile(value)
    if name in ("dataset", "data_source"):
        from gpubench import data  # noqa: PLC0415 - numpy, no TensorFlow

        return data.check_name(value) if name == "dataset" else data.check_source(value)
    if name in _TEXT:
        if not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"{name} must be a path or a name (a string), got {value!r}")
        return value
    raise ValueError(f"no rule for parameter {name!r}")


# Notebooks with rules of their own beyond one value at a time (e.g. Speed_Factors needs two
# epochs or more); their modules check without TensorFlow.
_OWN_RULES = {"Speed_Factors": "gpubench.factors", "Multi_GPU_Scaling": "gpubench.scaling"}


def check_params(notebook: str, given: dict) -> dict:
    """Check parameter names against `notebook`'s and each value by its rule; return them checked.

    No TensorFlow is imported: the runner calls this before any kernel starts.
    """
    profiles.check_names(profiles.check_notebook(notebook), given)
    checked = {name: check_value(name, value) for name, value in given.items()}
    if notebook in _OWN_RULES:  # the notebook's own rules, on the given values over the defaults
        own = importlib.import_module(_OWN_RULES[notebook]).check_params
        merged = own({**profiles.DEFAULTS["full"][notebook],
                      **{k: v for k, v in checked.items() if v is not None}})
        checked = {name: merged.get(name, value) if value is not None else None
                   for name, value in checked.items()}
    return checked


def start(notebook: str, values: dict | None = None, **given) -> Config:
    """Check the parameters, apply the profile, open the results store, and describe the machine.

    `values` is the notebook's namespace (`globals()`): the parameters cell's
    names are read from it; keyword arguments override them. Everything that
    can be wrong with the input fails here, before anything is measured or written.
    """
    names = profiles.parameter_names(profiles.check_notebook(notebook))
    given = {**{n: values[n] for n in names if n in (values or {})}, **given}
    params, changed = profiles.resolve(notebook, **check_params(notebook, given))
    params = check_params(notebook, params)  # the environment's values too
    params.update(_resolve_devices(params))
    params["env_name"] = params["env_name"] or results.default_env_name()
    params["results_path"] = str(params["results_path"] or results.default_results_path())
    store = results.ResultsStore(params["results_path"])
    config = Config(notebook, store, results.environment_snapshot(), changed=changed, **params)
    print(describe(config))
    return config


def _resolve_devices(params: dict) -> dict:
    """`device` / `devices` in canonical form (Multi_GPU_Scaling resolves its own, after it
    sets up virtual devices); performanceTest's None `devices`: every GPU, then the CPU."""
    from gpubench import devices  # noqa: PLC0415 - imports TensorFlow when resolving

    resolved = {}
    if "device" in params:
        resolved["device"] = devices.resolve(params["device"])
    if "devices" in params and "virtual_devices" not in params:  # Multi_GPU_Scaling: its own
        names = params["devices"]
        if names is None and "sizes" in params:  # performanceTest: every device, GPUs first
            names = devices.list_devices()[1:] + ["cpu"]
        if names is not None:
            resolved["devices"] = [devices.resolve(name) for name in names]
    return resolved


def describe_environment(env: dict) -> str:
    """Two lines: the machine, and the software with the kind of TensorFlow build."""
    gpus = ", ".join(f"{g['name']}" + (f" ({g['memory_gb']} GB, driver {g['driver']})"
                                       if g.get("driver") else "") for g in env["gpus"])
    build = "CUDA build" if env["cuda_build"] else "CPU-only build"
    if env["cuda_build"] and env.get("cuda_version"):
        build += f", CUDA {env['cuda_version']}, cuDNN {env['cudnn_version']}"
    return (
        f"Machine:  {env['cpu_model']}, {env['cpu_count']} CPU cores, {env['ram_gb']} GB RAM; "
        f"GPU: {gpus or 'none'}\n"
        f"Software: Python {env['python']}, TensorFlow {env['tensorflow']} ({build}), "
        f"Keras {env['keras']} ({env['backend']} backend), {env['os']}"
    )


def shown_path(path: str | os.PathLike) -> str:
    """`path` relative to the project when inside it, else its folder and name: no machine paths."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(results.runs_dir().parent))
    except ValueError:
        return str(Path(path.parent.name) / path.name)


def describe(config: Config) -> str:
    """The block a notebook prints first: what runs, where, with which parameters."""
    shown = {k: v for k, v in config.params.items()
             if k not in ("profile", "results_path", "env_name")}
    lines = [
        f"gpubench {__version__} | {config.notebook} | profile {config.profile} "
        f"| env {config.env_name}",
        describe_environment(config.environment),
        "Parameters: " + ", ".join(f"{k}={v!r}" for k, v in shown.items()),
    ]
    if config.changed:
        lines.append("Quick profile, instead of the book's values: " + ", ".join(
            f"{k} {book!r} -> {quick!r}" for k, (book, quick) in config.changed.items()))
    lines.append(f"Results:  {shown_path(config.results_path)}")
    return "\n".join(lines)
