"""`gpubench run`: every notebook, in every env's kernel, with papermill; then the report. Modules:
targets (what runs where, checked first), kernels (the kernels it starts), loop (the run, its
run.json, each job)."""

import importlib


def __getattr__(name: str):  # `runner.loop` and the others, imported on first use
    if name in ("kernels", "loop", "targets"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'gpubench.runner' has no attribute {name!r}")
