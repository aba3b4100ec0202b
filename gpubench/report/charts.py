"""The shared matplotlib helpers of every chart in the report and the chapters.

Each chart draws on the Axes or Figure it is given, else on a new pyplot figure (shown inline in
Jupyter). The report passes Figures of its own (`new_axes`, `new_figure`), so it never touches
pyplot or the backend. matplotlib loads only when a chart is drawn.
"""

from __future__ import annotations

from gpubench.plots import column_of
from gpubench.report.records import columns

MAX_COLUMNS = 6  # columns (machine · env) one report chart draws; the tables hold every column


def capped(records: list[dict], what: str = "This chart") -> tuple[list[dict], str]:
    """The records of the first MAX_COLUMNS columns in the tables' order (`records.columns`), so
    that a chart stays readable at any number of run dirs, and `capped_text` of what it leaves."""
    names = columns(records)
    shown = set(names[:MAX_COLUMNS])
    return ([r for r in records if column_of(r) in shown],
            capped_text(names[:MAX_COLUMNS], len(names), what))


def capped_text(drawn: list[str], of: int, what: str = "This chart") -> str:
    """A sentence saying that `what` ("This chart", "These charts") draws only the columns
    `drawn` (the first, in the tables' order) of `of` columns; "" where it draws them all."""
    if len(drawn) >= of:
        return ""
    verb = "draw" if what.startswith("These") else "draws"
    return (f"{what} {verb} the first {len(drawn)} of the {of} columns, in the tables' order "
            f"({drawn[0]} to {drawn[-1]}), to stay readable; the tables hold all of them.")
