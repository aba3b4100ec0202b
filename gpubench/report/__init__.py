"""The report: report.md and its charts from run directories, a module per topic over `inputs`
(reading, checking), `records` (queries) and `format` (words); `document` composes them."""

from gpubench.report import factors, scaling
from gpubench.report.document import build, compose, show
from gpubench.report.inputs import ReportWriteError, find_runs, load
