"""What every chapter does first: check its parameters, apply the profile, open the results. The
declaration is the parameters cell the kernel ran (IPython's `In`), else the book notebook's."""

import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from gpubench import __version__, backends, devices, machine, params, results  # no backend yet
from gpubench.params import COMMON

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")  # rich's colours, cursor moves


def _literal(source: object) -> dict | None:
    try:  # {name: value} of a cell of `NAME = literal` lines only, else None
        return params.literal_cell(source) or None
    except (SyntaxError, TypeError, ValueError):  # ParameterError too
        return None


def _injected(source: object) -> bool:  # papermill's cell: "# Parameters", then literals
    return (isinstance(source, str) and source.lstrip().startswith("# Parameters")
            and _literal(source) is not None)


def injected_names(values: dict, since: int = 0) -> list[str]:
    """The names papermill's injected cells assigned, among the cells of `In` from `since`."""
    history = values.get("In") or []
    return list(dict.fromkeys(n for s in history[since:] if _injected(s) for n in _literal(s)))


def declaration(notebook: str, values: dict) -> tuple[dict, int]:
    """(names and defaults of the parameters cell the kernel ran last, the index in `In` after
    it): the latest cell of literals that declares COMMON or precedes papermill's cell."""
    history = values.get("In") or []
    for i in reversed(range(len(history))):
        cell = None if _injected(history[i]) else _literal(history[i])
        if cell and (set(COMMON) <= set(cell) or _injected((history + [None])[i + 1])):
            return {**dict.fromkeys(COMMON), **cell}, i + 1
    return (dict(params.declared(notebook)) if notebook in params.NOTEBOOKS else {}), 0


def start(notebook: str, values: dict | None = None, rules=None, **given) -> SimpleNamespace:
    """The notebook's config (from `values`, e.g. `globals()`; keywords win): its parameters
    checked, by `rules` too (its own), the profile applied, the results store open (`recording`)."""
    values = values or {}
    cell, since = declaration(notebook, values)
    cell = cell or {**dict.fromkeys(COMMON), **given}
    params.check_names(notebook, injected_names(values, since), cell,
                       how=f"passed to {notebook} (papermill -p)")
    store_rich_text_plain()
    given = {**{n: values[n] for n in cell if n in values}, **given}
    chosen, changed = params.resolve(notebook, cell, **given)
    chosen = params.check_params(notebook, chosen, cell, rules)  # GPUBENCH_* too
    names = chosen.get("devices")
    if names is None and "sizes" in chosen:  # a matmul sweep: every device, GPUs first
        names = devices.gpus_first()
    if "device" in chosen:
        chosen["device"] = devices.resolve(chosen["device"])
    if names is not None and "virtual_devices" not in chosen:  # Multi_GPU_Scaling: its own
        chosen["devices"] = [devices.resolve(name) for name in names]
    chosen["env_name"] = chosen["env_name"] or results.default_env_name()
    chosen["results_path"] = str(chosen["results_path"] or os.environ.get("GPUBENCH_RESULTS_PATH")
                                 or results.runs_dir() / "interactive" / results.RESULTS_FILE)
    store = results.ResultsStore(chosen["results_path"])
    config = SimpleNamespace(notebook=notebook, changed=changed, store=store,
                             params={name: chosen[name] for name in cell},
                             recording={"store": store, "env": chosen["env_name"],
                                        "notebook": notebook},
                             environment=results.environment_snapshot(), **chosen)
    print(describe(config))
    return config


def describe_environment(env: dict) -> str:
    """Two lines: the machine, and the software with the backend and the kind of its build."""
    gpus = ", ".join(g["name"] + (f" ({g['memory_gb']} GB, driver {g['driver']})"
                                  if g.get("driver") else "") for g in env["gpus"] or [])
    build = "CUDA build" if env["cuda_build"] else "CPU-only build"
    if env["cuda_build"] and env.get("cuda_version"):
        build += f", CUDA {env['cuda_version']}, cuDNN {env['cudnn_version']}"
    title = backends.backend_title(env.get("backend") or "tensorflow")
    warned = (env.get("backend_settings") or {}).get("fallback_warning")
    return (f"Machine:  {env['cpu_model']}, {env['cpu_count']} CPU cores, {env['ram_gb']} GB "
            f"RAM; GPU: {gpus or 'none'}\nSoftware: Python {env['python']}, Keras {env['keras']}"
            f" on {title} {env['backend_version']} "
            f"({build}), {env['os']}" + (f"\nWARNING:  {warned}" if warned else ""))


def shown_path(path: str | os.PathLike) -> str:
    """`path` from the current folder: relative below it or within the checkout, else absolute."""
    path, here, root = Path(path).resolve(), Path.cwd().resolve(), machine.checkout()
    inside = root is not None and path.is_relative_to(root) and here.is_relative_to(root)
    return os.path.relpath(path, here) if inside or path.is_relative_to(here) else str(path)


def describe(config: SimpleNamespace) -> str:
    """The block a notebook prints first: what runs, where, with which parameters."""
    shown = ", ".join(f"{k}={v!r}" for k, v in config.params.items() if k not in COMMON)
    changes = ", ".join(f"{k} {book!r} -> {quick!r}" for k, (book, quick) in config.changed.items())
    return "\n".join([
        f"gpubench {__version__} | {config.notebook} | profile {config.profile} "
        f"| env {config.env_name}",
        describe_environment(config.environment), f"Parameters: {shown}",
        *([f"Quick profile, instead of the book's values: {changes}"] if changes else []),
        f"Results:  {shown_path(config.results_path)}",
    ])


def store_rich_text_plain() -> None:
    """In Jupyter, keep rich's text copy (Keras's model summary) free of ANSI colour codes."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if shell is not None and hasattr(shell, "display_formatter"):
        shell.display_formatter.formatters["text/plain"].for_type_by_name(
            "rich.jupyter", "JupyterRenderable",
            lambda obj, printer, cycle: printer.text(ANSI.sub("", obj.text)))
