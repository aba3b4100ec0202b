"""`gpubench run`'s arguments before anything runs: env and notebook lists, the Keras backend,
and the `-p` values (parsed, named right, and valid for the notebooks they reach)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from gpubench import backends, envs
from gpubench import params as nb_params  # `params` names -p values here
from gpubench.rundir import UsageError

# Parameters the runner sets itself, and the option a user gives instead.
RUNNER_PARAMS = {"profile": "--profile", "results_path": "--out", "env_name": "--envs"}
NEW_RUN = "start a new run with `gpubench run`"


def notebooks_dir() -> Path:
    """The folder of the source notebooks (the checkout's, else the ones a wheel installed)."""
    return envs.notebooks_dir()


def split_names(text: str | None) -> list[str] | None:
    """"a,b" -> ["a", "b"]; None stays None."""
    if text is None:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError(f"empty list {text!r}; give comma-separated names")
    return names


def check_notebooks(names: list[str] | None) -> list[str]:
    """The notebooks to run, in the canonical order; unknown or missing ones are a usage error."""
    unknown = [n for n in names or [] if n not in nb_params.NOTEBOOKS]
    if unknown:
        raise UsageError(f"unknown notebook(s) {', '.join(unknown)}; "
                         f"use some of {', '.join(nb_params.NOTEBOOKS)}")
    chosen = [n for n in nb_params.NOTEBOOKS if names is None or n in names]
    if missing := [n for n in chosen if not (notebooks_dir() / f"{n}.ipynb").is_file()]:
        raise UsageError(f"notebook(s) {', '.join(missing)} missing from {notebooks_dir()}; "
                         "restore them (git checkout notebooks) or leave them out with --notebooks")
    return chosen


def check_backend(value: str | None, where: str = "") -> str:
    """The Keras backend a kernel will load (`value`, its KERAS_BACKEND, else Keras's own rule);
    UsageError naming `where` for one gpubench cannot run (torch, a typo)."""
    try:
        return backends.check_name(value) if value else backends.requested()
    except backends.BackendError as exc:
        raise UsageError(f"{where}: {exc}" if where else str(exc)) from None


def parse_params(items: list[str] | None) -> dict[str, dict]:
    """--param [NOTEBOOK:]NAME=VALUE items -> {notebook or "*": {name: value}}; values as JSON."""
    parsed: dict[str, dict] = {}
    for item in items or []:
        head, sep, value = item.partition("=")
        target, _, name = head.rpartition(":")
        target = target or "*"
        if not sep or not name:
            raise UsageError(f"bad --param {item!r}; write NAME=VALUE or NOTEBOOK:NAME=VALUE")
        if target != "*":
            check_notebooks([target])
        if name in RUNNER_PARAMS:
            raise UsageError(f"-p {name} belongs to the runner; use {RUNNER_PARAMS[name]} instead")
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
        if name in nb_params.FOLDERS and isinstance(value, str):  # kernels run in notebooks/
            value = os.path.abspath(os.path.expanduser(value))
        parsed.setdefault(target, {})[name] = value
    return parsed


def given(params: dict[str, dict], notebook: str) -> dict:
    """The -p values that reach `notebook` ("NOTEBOOK:" ones over the others)."""
    names = nb_params.parameter_names(notebook)
    return {name: value for scope in ("*", notebook)
            for name, value in params.get(scope, {}).items() if name in names}


def check_params(params: dict[str, dict], notebooks: list[str]) -> None:
    """Refuse a -p name no notebook it targets declares, or a value its notebook would reject."""
    # nb_params.parameter_names is each parameters cell (test_notebooks checks it with papermill)
    targets = {scope: notebooks if scope == "*" else [scope] for scope in params}
    for scope, values in params.items():
        for name in values:
            if not any(name in nb_params.parameter_names(nb) for nb in targets[scope]):
                takes = "; ".join(f"{nb} takes {', '.join(nb_params.parameter_names(nb))}"
                                  for nb in targets[scope])
                raise UsageError(f"unknown parameter -p {name}: {takes}")
    if outside := [scope for scope in params if scope not in ("*", *notebooks)]:
        raise UsageError(f"-p {outside[0]}:{','.join(params[outside[0]])}: {outside[0]} is not in "
                         f"this run ({', '.join(notebooks)}); add it to --notebooks or drop the -p")
    for nb in dict.fromkeys(nb for scope in targets for nb in targets[scope]):
        try:
            nb_params.check_params(nb, given(params, nb))
        except ValueError as exc:
            raise UsageError(f"-p for {nb}: {exc}") from None


def gpu_asked(name: object) -> str | None:
    """"gpu:N" when a device name asks for a GPU ("gpu", "/GPU:1", ...), else None."""
    match = re.fullmatch(r"/?(?:device:)?gpu(?::(\d+))?", str(name).strip().lower())
    return None if match is None else f"gpu:{int(match[1] or 0)}"


def check_scaling_backends(targets: dict, named: list[str] | None) -> None:
    """Refuse, before any kernel, Multi_GPU_Scaling named for an env whose backend has no
    data-parallel path (PyTorch); not named, the run leaves it out there."""
    from gpubench.scaling.rules import NOTEBOOK, backend_refusal  # noqa: PLC0415 - stdlib-only

    if NOTEBOOK not in (named or []):
        return
    for env, target in targets.items():
        if target.backend and (why := backend_refusal(target.backend)):
            raise UsageError(f"--notebooks {NOTEBOOK} in env {env}: {why}")
