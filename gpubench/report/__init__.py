"""The report and every chapter's presentation: tables, charts and the text written from the
numbers, one module per chapter topic (matmul, training, backends, telemetry, factors, scaling).

`document` composes report.md from the topics' sections; `inputs` reads the run directories and
`checks` keeps out the records the report cannot use; `format` and `charts` are what every topic
shares. The names below are the ones the CLI, the runner and the notebooks call as
`gpubench.report.<name>`; the rest is `gpubench.report.<topic>.<name>`.
"""

from __future__ import annotations

from gpubench.fmt import fmt, fmt_range, md_table
from gpubench.report import (
    backends,
    charts,
    checks,
    document,
    factors,
    format,
    inputs,
    matmul,
    scaling,
    telemetry,
    training,
)
from gpubench.report.backends import BACKEND_HEADERS
from gpubench.report.document import (
    ENVIRONMENT_HEADERS,
    JOB_WHY,
    build,
    compose,
    show,
)
from gpubench.report.inputs import ReportWriteError, find_runs, load, reportable
from gpubench.report.telemetry import TELEMETRY_HEADERS
from gpubench.report.training import TRAINING_HEADERS

__all__ = [
    "BACKEND_HEADERS", "ENVIRONMENT_HEADERS", "JOB_WHY", "TELEMETRY_HEADERS", "TRAINING_HEADERS",
    "ReportWriteError", "backends", "build", "charts", "checks", "compose", "document",
    "factors", "find_runs", "fmt", "fmt_range", "format", "inputs", "load",
    "matmul", "md_table", "reportable", "scaling", "show", "telemetry", "training",
]
