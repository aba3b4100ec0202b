"""What every chapter does first: check its parameters, apply the profile, open the results.

The names and defaults are the notebook's parameters cell (read from its .ipynb by
`gpubench.params.declared`) and the rules for each value live in `gpubench.params`; `start`
applies them in the kernel, as the runner does before any kernel starts, and also refuses a name
that papermill injected and the parameters cell does not declare (papermill itself only warns).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from types import SimpleNamespace

from gpubench import __version__, devices, machine, params, results  # devices: no backend yet
from gpubench.backends import BACKEND_TITLES
from gpubench.params import ParameterError

# Colours and cursor moves, as rich (Keras's model summary) writes them.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")

INJECTED_HEADER = "# Parameters"  # the first line of the cell papermill injects


class Config(SimpleNamespace):
    """A notebook's resolved parameters (one attribute each), its results store and machine."""

    @property
    def params(self) -> dict:
        """This notebook's parameters, in the parameters cell's order."""
        return {n: getattr(self, n) for n in params.parameter_names(self.notebook)}

    @property
    def recording(self) -> dict:
        """store/env/notebook keyword arguments for a record."""
        return {"store": self.store, "env": self.env_name, "notebook": self.notebook}


class DeviceParameterError(ParameterError, devices.DeviceError):
    """A device parameter this machine does not have (shown as one line, like the others)."""


def injected_names(values: dict) -> list[str]:
    """The names that papermill's injected-parameters cells assigned, among the cells the kernel
    ran so far (IPython's `In`, found in `values` when it is the kernel's globals)."""
    found: list[str] = []
    for source in values.get("In") or []:
        if not (isinstance(source, str) and source.lstrip().startswith(INJECTED_HEADER)):
            continue
        try:
            body = ast.parse(source).body
        except SyntaxError:
            continue
        if all(isinstance(node, ast.Assign) for node in body):  # papermill writes only these
            found += [t.id for node in body for t in node.targets if isinstance(t, ast.Name)]
    return list(dict.fromkeys(found))


def check_injected(notebook: str, values: dict) -> None:
    """Refuse names papermill injected (`-p NAME VALUE`) that `notebook` does not declare."""
    names = params.parameter_names(notebook)
    unknown = [name for name in injected_names(values) if name not in names]
    if unknown:
        raise ParameterError(f"unknown parameter(s) {', '.join(unknown)} passed to {notebook} "
                             f"(papermill -p); it takes {', '.join(names)}")


def start(notebook: str, values: dict | None = None, **given) -> Config:
    """Check the parameters (read from `values`, e.g. `globals()`; keywords win), apply the
    profile, open the results store and describe the machine; bad input fails before anything
    runs, with one line that names it."""
    names = params.parameter_names(notebook)
    check_injected(notebook, values or {})
    store_rich_text_plain()
    given = {**{n: values[n] for n in names if n in (values or {})}, **given}
    chosen, changed = params.resolve(notebook, **params.check_params(notebook, given))
    chosen = _resolve_devices(params.check_params(notebook, chosen))  # env variables' values too
    chosen["env_name"] = chosen["env_name"] or results.default_env_name()
    chosen["results_path"] = str(chosen["results_path"] or results.default_results_path())
    config = Config(notebook=notebook, store=results.ResultsStore(chosen["results_path"]),
                    environment=results.environment_snapshot(), changed=changed, **chosen)
    print(describe(config))
    return config


def _resolve(name: str) -> str:
    try:
        return devices.resolve(name)
    except devices.DeviceError as exc:
        raise DeviceParameterError(str(exc)) from None


def _resolve_devices(chosen: dict) -> dict:
    """`device`/`devices` resolved (Multi_GPU_Scaling resolves its own, after virtual devices)."""
    if "device" in chosen:
        chosen["device"] = _resolve(chosen["device"])
    names = chosen.get("devices")
    if names is None and "sizes" in chosen:  # performanceTest: every device, GPUs first
        names = devices.gpus_first()
    if names is not None and "virtual_devices" not in chosen:
        chosen["devices"] = [_resolve(name) for name in names]
    return chosen


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


def shown_path(path: str | os.PathLike) -> str:
    """`path` as a reader can open it: relative to the checkout inside one (no machine paths in
    the stored outputs), else absolute (the kernel's folder is not the user's)."""
    path = Path(path).resolve()
    root = machine.checkout()
    return str(path.relative_to(root)) if root and path.is_relative_to(root) else str(path)


def describe(config: Config) -> str:
    """The block a notebook prints first: what runs, where, with which parameters."""
    shown = {k: v for k, v in config.params.items() if k not in params.COMMON}
    changes = ", ".join(f"{k} {book!r} -> {quick!r}" for k, (book, quick) in config.changed.items())
    return "\n".join([
        f"gpubench {__version__} | {config.notebook} | profile {config.profile} "
        f"| env {config.env_name}",
        describe_environment(config.environment),
        "Parameters: " + ", ".join(f"{k}={v!r}" for k, v in shown.items()),
        *([f"Quick profile, instead of the book's values: {changes}"] if changes else []),
        f"Results:  {shown_path(config.results_path)}",
    ])


def plain_rich_text(obj, printer, cycle) -> None:
    """IPython's text/plain form of a rich renderable: its text without ANSI codes."""
    printer.text(ANSI.sub("", obj.text))


def store_rich_text_plain() -> None:
    """In Jupyter, store rich's text copy (Keras's model summary) without ANSI colour codes, so
    no notebook output carries them; outside IPython, nothing."""
    try:
        from IPython import get_ipython  # noqa: PLC0415 - only inside a kernel
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "display_formatter"):
        shell.display_formatter.formatters["text/plain"].for_type_by_name(
            "rich.jupyter", "JupyterRenderable", plain_rich_text)
