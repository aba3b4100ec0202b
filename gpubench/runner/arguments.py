"""`gpubench run`'s arguments before anything runs: the notebooks, the Keras backend, and the
`-p` values, parsed and checked against the parameters cell of the .ipynb file that will run."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from gpubench import params as nb_params  # `params` names -p values here
from gpubench.rundir import UsageError

# Parameters the runner sets itself, and the option a user gives instead.
RUNNER_PARAMS = {"profile": "--profile", "results_path": "--out", "env_name": "--envs"}
NEW_RUN = "start a new run with `gpubench run`"


def notebook_path(notebook: str) -> Path:
    """The .ipynb file a job of `notebook` runs."""
    return nb_params.notebooks_dir() / f"{notebook}.ipynb"


def declared(notebook: str) -> dict:
    """{name: default} of the parameters cell of the .ipynb file that will run."""
    return nb_params.declared_in(notebook_path(notebook))


def check_notebooks(names: list[str] | None) -> list[str]:
    """The notebooks to run, in the canonical order; unknown or missing ones are a usage error."""
    if unknown := [n for n in names or [] if n not in nb_params.NOTEBOOKS]:
        raise UsageError(f"unknown notebook(s) {', '.join(unknown)}; "
                         f"use some of {', '.join(nb_params.NOTEBOOKS)}")
    chosen = [n for n in nb_params.NOTEBOOKS if names is None or n in names]
    if missing := [n for n in chosen if not notebook_path(n).is_file()]:
        raise UsageError(f"notebook(s) {', '.join(missing)} missing from "
                         f"{nb_params.notebooks_dir()}; restore them (git checkout notebooks) or "
                         "leave them out with --notebooks")
    return chosen


def parse_params(items: list[str] | None) -> dict[str, dict]:
    """-p [NOTEBOOK:]NAME=VALUE items -> {notebook or "*": {name: value}}; values as JSON."""
    parsed: dict[str, dict] = {}
    for item in items or []:
        head, sep, value = item.partition("=")
        target, colon, name = head.rpartition(":")
        if not sep or not name or (colon and not target):
            raise UsageError(f"bad --param {item!r}; write NAME=VALUE or NOTEBOOK:NAME=VALUE")
        if target:
            check_notebooks([target])
        if name in RUNNER_PARAMS:
            raise UsageError(f"-p {name} belongs to the runner; use {RUNNER_PARAMS[name]} instead")
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
        if name in nb_params.FOLDERS and isinstance(value, str):  # kernels run in notebooks/
            value = os.path.abspath(os.path.expanduser(value))
        parsed.setdefault(target or "*", {})[name] = value
    return parsed


def given(params: dict[str, dict], notebook: str) -> dict:
    """The -p values that reach `notebook` ("NOTEBOOK:" ones over the others)."""
    names = declared(notebook)
    return {name: value for scope in ("*", notebook)
            for name, value in params.get(scope, {}).items() if name in names}


def check_params(params: dict[str, dict], notebooks: list[str]) -> None:
    """Refuse a -p name no notebook it targets declares, or a value its notebook would reject."""
    for scope, values in params.items():
        reached = notebooks if scope == "*" else [scope]
        for name in values:
            if not any(name in declared(nb) for nb in reached):
                takes = "; ".join(f"{nb} takes " + ", ".join(n for n in declared(nb)
                                                           if n not in RUNNER_PARAMS)
                                  for nb in reached)
                raise UsageError(f"unknown parameter -p {name}: {takes}")
    if outside := [scope for scope in params if scope not in ("*", *notebooks)]:
        raise UsageError(f"-p {outside[0]}:{','.join(params[outside[0]])}: {outside[0]} is not in "
                         f"this run ({', '.join(notebooks)}); add it to --notebooks or drop the -p")
    for nb in [nb for nb in notebooks if "*" in params or nb in params]:
        try:
            nb_params.check_params(nb, given(params, nb), declared=declared(nb))
        except ValueError as exc:
            raise UsageError(f"-p for {nb}: {exc}") from None
