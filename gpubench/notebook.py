"""What every notebook does first: resolve and check its parameters, open the results, say where it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpubench import __version__, profiles, results


@dataclass
class Config:
    """A notebook's resolved parameters, its results store and its environment snapshot."""

    notebook: str
    params: dict
    store: results.ResultsStore
    environment: dict = field(default_factory=dict)

    def __getattr__(self, name: str):
        """Parameters read as attributes: `cfg.epochs`, `cfg.sizes`, ..."""
        params = self.__dict__.get("params", {})
        if name in params:
            return params[name]
        raise AttributeError(name)


def _check_optional_positive(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


def check(notebook: str, params: dict) -> dict:
    """Validate resolved parameters and put device names in canonical form; raise on bad input."""
    from gpubench import devices, matmul, training  # noqa: PLC0415 - imports TensorFlow

    params = dict(params)
    if notebook == "performanceTest":
        params["sizes"] = matmul.check_sizes(params["sizes"])
        matmul.check_dtype(params["dtype"])
        training.check_positive("repeats", params["repeats"])
        names = params["devices"]
        if names is None:  # every visible device, GPUs first as in the book
            names = devices.list_devices()[1:] + ["cpu"]
        elif isinstance(names, str):
            names = [names]
        params["devices"] = [devices.resolve(name) for name in names]
        return params
    from gpubench import data  # noqa: PLC0415

    params["device"] = devices.resolve(params["device"])
    training.check_positive("epochs", params["epochs"])
    training.check_positive("batch_size", params["batch_size"])
    _check_optional_positive("max_train_samples", params["max_train_samples"])
    params["dataset"] = data.check_name(params["dataset"])
    data.check_source(params["data_source"])
    return params


def start(notebook: str, **given) -> Config:
    """Resolve, check and print the parameters, open the results store, and describe the machine.

    Everything that can be wrong with the input fails here, before anything is
    measured or written.
    """
    params = profiles.resolve(profiles.check_notebook(notebook), **given)
    params = check(notebook, params)
    if params["env_name"] is None:
        params["env_name"] = results.default_env_name()
    if params["results_path"] is None:
        params["results_path"] = str(results.default_results_path())
    store = results.ResultsStore(params["results_path"])
    config = Config(notebook, params, store, results.environment_snapshot())
    print(describe(config))
    return config


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


def describe(config: Config) -> str:
    """The block a notebook prints first: what runs, where, with which parameters."""
    shown = {k: v for k, v in config.params.items()
             if k not in ("profile", "results_path", "env_name")}
    return "\n".join([
        f"gpubench {__version__} | {config.notebook} | profile {config.profile} "
        f"| env {config.env_name}",
        describe_environment(config.environment),
        "Parameters: " + ", ".join(f"{k}={v!r}" for k, v in shown.items()),
        f"Results:  {Path(config.results_path)}",
    ])
