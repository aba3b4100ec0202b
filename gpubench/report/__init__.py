"""The report: report.md and its charts from run directories, a module per chapter topic
(training, backends, telemetry, matmul, factors, scaling) over `inputs` (reading, checking),
`records` (shared queries), `format` (the glossary) and `charts`; `document` composes them.
Every name loads its module on first use, so importing the package loads none of them."""

from __future__ import annotations

import importlib

NAMES = {"ENVIRONMENT_HEADERS": "document", "JOB_WHY": "document", "build": "document",
         "compose": "document", "show": "document", "ReportWriteError": "inputs",
         "find_runs": "inputs", "load": "inputs", "reportable": "inputs",
         "BACKEND_HEADERS": "backends", "TELEMETRY_HEADERS": "telemetry",
         "TRAINING_HEADERS": "training"}
MODULES = ("backends", "charts", "document", "factors", "format", "inputs", "matmul", "records",
           "scaling", "telemetry", "training")
__all__ = [*NAMES, *MODULES]


def __getattr__(name: str):
    """A topic module (`report.matmul`) or a name of one (`report.build`), loaded on first use."""
    if name in NAMES:
        return getattr(importlib.import_module(f"gpubench.report.{NAMES[name]}"), name)
    if name in MODULES:
        return importlib.import_module(f"gpubench.report.{name}")
    raise AttributeError(f"module 'gpubench.report' has no attribute {name!r}")
