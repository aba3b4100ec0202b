"""What every notebook does first: check its parameters, apply the profile, open the results.

`check_params` holds every parameter's rule, for the runner (before any kernel starts) and for
`start`; it loads no TensorFlow: it checks device names' syntax, `start` resolves them.
"""

from __future__ import annotations

import ast
import importlib
import os
from pathlib import Path
from types import SimpleNamespace

from gpubench import __version__, checks, devices, profiles, results  # devices: no TensorFlow yet

_POSITIVE = ("repeats", "epochs", "batch_size", "max_train_samples", "per_replica_batch_size",
             "virtual_devices")
_INT_LISTS = ("sizes", "batch_sizes", "steps_per_execution", "replicas")
_LISTS_OF = {"precisions": "precision", "xla_modes": "xla", "input_pipelines": "input_pipeline",
             "dtype": "dtype"}
# Notebooks with rules beyond one value at a time (Speed_Factors needs two epochs or more).
_OWN_RULES = {"Speed_Factors": "gpubench.factors", "Multi_GPU_Scaling": "gpubench.scaling"}

class Config(SimpleNamespace):
    """A notebook's resolved parameters (one attribute each), its results store and machine."""

    @property
    def params(self) -> dict:
        """This notebook's parameters, in the parameters cell's order."""
        return {n: getattr(self, n) for n in profiles.parameter_names(self.notebook)}

    @property
    def recording(self) -> dict:
        """store/env/notebook keyword arguments for a record."""
        return {"store": self.store, "env": self.env_name, "notebook": self.notebook}


def _hint(name: str) -> str:
    """How to pass list parameter `name`: in the notebook, to papermill, to gpubench run."""
    items = (["cpu", "gpu:0"] if name == "devices" else ["100", "1000"] if name in _INT_LISTS
             else list(profiles.CHOICES[_LISTS_OF[name]][:2]))
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
            raise ValueError(f"{name}={value!r} is not a list; {_hint(name)}") from None
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    if not value:
        raise ValueError(f"{name} is empty; {_hint(name)}")
    return value


def _positive_item(name: str, item) -> int:
    try:
        number = int(item) if isinstance(item, str) and item.isdigit() else item
        return checks.positive_int(name, number)
    except ValueError:
        raise ValueError(f"{name}: {item!r} is not a positive integer; {_hint(name)}") from None


def _one_of(name: str, value, kind: str) -> str:
    if value not in profiles.CHOICES[kind]:
        where = f" in {name}; {_hint(name)}" if name != kind else ""
        raise ValueError(f"unknown {kind} {value!r}; use one of "
                         f"{', '.join(profiles.CHOICES[kind])}{where}")
    return value


def check_value(name: str, value, *, virtual_cpus: bool = False):
    """Return `value` checked (a list parameter as a list), or raise naming it and what to do."""
    if value is None:
        return None
    if name in _POSITIVE:
        return checks.positive_int(name, value)
    if name in _INT_LISTS:
        return [_positive_item(name, item) for item in _as_list(name, value)]
    if name == "dtype" and isinstance(value, str) and "," not in value:
        return _one_of(name, value.strip(), "dtype")
    if name in _LISTS_OF:
        return [_one_of(name, item, _LISTS_OF[name]) for item in _as_list(name, value)]
    if name in profiles.CHOICES:
        return _one_of(name, value, name)
    if name == "device":
        return devices.check_name(value)
    if name == "devices":  # "cpu:N" where virtual_devices splits the CPU (Multi_GPU_Scaling)
        return [devices.check_name(d, virtual_cpus=virtual_cpus) for d in _as_list(name, value)]
    if name == "profile":
        return profiles.resolve_profile(value)
    if name in ("dataset", "data_source"):
        from gpubench import data  # noqa: PLC0415 - numpy, no TensorFlow

        return data.check_name(value) if name == "dataset" else data.check_source(value)
    if not isinstance(value, (str, os.PathLike)):  # results_path, env_name, data_dir
        raise ValueError(f"{name} must be a path or a name (a string), got {value!r}")
    return value


def check_params(notebook: str, given: dict) -> dict:
    """Check names against `notebook`'s parameters and each value by its rule; return them
    checked."""
    profiles.check_names(notebook, given)
    cpus = "virtual_devices" in profiles.PARAMS[notebook]  # devices "cpu:N" name virtual CPUs
    checked = {name: check_value(name, value, virtual_cpus=cpus) for name, value in given.items()}
    if notebook in _OWN_RULES:  # the notebook's own rules, on the given values over the defaults
        own = importlib.import_module(_OWN_RULES[notebook]).check_params
        merged = own({**profiles.DEFAULTS["full"][notebook],
                      **{k: v for k, v in checked.items() if v is not None}})
        checked = {k: None if v is None else merged.get(k, v) for k, v in checked.items()}
    return checked


def start(notebook: str, values: dict | None = None, **given) -> Config:
    """Check the parameters (read from `values`, e.g. `globals()`; keywords win), apply the
    profile, open the results store and describe the machine; bad input fails before anything
    runs."""
    names = profiles.parameter_names(notebook)
    given = {**{n: values[n] for n in names if n in (values or {})}, **given}
    params, changed = profiles.resolve(notebook, **check_params(notebook, given))
    params = _resolve_devices(check_params(notebook, params))  # env variables' values too
    params["env_name"] = params["env_name"] or results.default_env_name()
    params["results_path"] = str(params["results_path"] or results.default_results_path())
    config = Config(notebook=notebook, store=results.ResultsStore(params["results_path"]),
                    environment=results.environment_snapshot(), changed=changed, **params)
    print(describe(config))
    return config


def _resolve_devices(params: dict) -> dict:
    """`device`/`devices` resolved (Multi_GPU_Scaling resolves its own, after virtual devices)."""
    if "device" in params:
        params["device"] = devices.resolve(params["device"])
    names = params.get("devices")
    if names is None and "sizes" in params:  # performanceTest: every device, GPUs first
        names = devices.list_devices()[1:] + ["cpu"]
    if names is not None and "virtual_devices" not in params:
        params["devices"] = [devices.resolve(name) for name in names]
    return params


BACKEND_TITLES = {"tensorflow": "TensorFlow", "jax": "JAX"}


def describe_environment(env: dict) -> str:
    """Two lines: the machine, and the software with the backend and the kind of its build."""
    gpus = ", ".join(f"{g['name']}" + (f" ({g['memory_gb']} GB, driver {g['driver']})"
                                       if g.get("driver") else "") for g in env["gpus"])
    build = "CUDA build" if env["cuda_build"] else "CPU-only build"
    if env["cuda_build"] and env.get("cuda_version"):
        build += f", CUDA {env['cuda_version']}, cuDNN {env['cudnn_version']}"
    backend = env.get("backend") or "tensorflow"
    version = env.get("backend_version") or env.get(backend)
    warned = (env.get("backend_settings") or {}).get("fallback_warning")
    return (
        f"Machine:  {env['cpu_model']}, {env['cpu_count']} CPU cores, {env['ram_gb']} GB RAM; "
        f"GPU: {gpus or 'none'}\n"
        f"Software: Python {env['python']}, Keras {env['keras']} on "
        f"{BACKEND_TITLES.get(backend, backend)} {version} ({build}), {env['os']}"
        + (f"\nWARNING:  {warned}" if warned else "")
    )


def check_for_backend(notebook: str, params: dict, backend: str,
                      tensorflow_importable: bool) -> dict:
    """`params` checked against what `backend` can run (before any kernel starts); ValueError
    names the value and what to use instead. Returns them unchanged."""
    pipelines = params.get("input_pipelines") or []
    if "tf.data" in pipelines and not tensorflow_importable:
        raise ValueError(
            f"{notebook}: input_pipelines includes 'tf.data', but TensorFlow cannot be imported "
            f"in this {backend} env; drop it (e.g. -p input_pipelines=arrays,on_device) or "
            "`pip install tensorflow-cpu` into that env")
    return params


def shown_path(path: str | os.PathLike) -> str:
    """`path` relative to the project when inside it, else its folder and name: no machine paths."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(results.runs_dir().parent))
    except ValueError:
        return str(Path(path.parent.name) / path.name)


def describe(config: Config) -> str:
    """The block a notebook prints first: what runs, where, with which parameters."""
    shown = {k: v for k, v in config.params.items() if k not in profiles.COMMON}
    changes = ", ".join(f"{k} {book!r} -> {quick!r}" for k, (book, quick) in config.changed.items())
    return "\n".join([
        f"gpubench {__version__} | {config.notebook} | profile {config.profile} "
        f"| env {config.env_name}",
        describe_environment(config.environment),
        "Parameters: " + ", ".join(f"{k}={v!r}" for k, v in shown.items()),
        *([f"Quick profile, instead of the book's values: {changes}"] if changes else []),
        f"Results:  {shown_path(config.results_path)}",
    ])
