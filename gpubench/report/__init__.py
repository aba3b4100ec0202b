"""The report: report.md and its charts from run directories; `document` composes the topics."""

from gpubench.report import factors, scaling
from gpubench.report.document import build, compose, show
from gpubench.report.inputs import ReportWriteError, find_runs, load
