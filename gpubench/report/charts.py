"""How many columns a report chart draws, so that it stays readable at any number of run dirs;
the tables hold every column."""

from __future__ import annotations

from gpubench.plots import column_of
from gpubench.report.records import columns

MAX_COLUMNS = 6  # columns (machine · env) one report chart draws


def capped(records: list[dict], what: str = "This chart") -> tuple[list[dict], str]:
    """The records of the first MAX_COLUMNS columns in the tables' order, and `capped_text`."""
    names = columns(records)
    shown = set(names[:MAX_COLUMNS])
    return ([r for r in records if column_of(r) in shown],
            capped_text(names[:MAX_COLUMNS], len(names), what))


def capped_text(drawn: list[str], of: int, what: str = "This chart") -> str:
    """A sentence saying that `what` draws only the columns `drawn` of `of`; "" for all."""
    if len(drawn) >= of:
        return ""
    verb = "draw" if what.startswith("These") else "draws"
    return (f"{what} {verb} the first {len(drawn)} of the {of} columns, in the tables' order "
            f"({drawn[0]} to {drawn[-1]}), to stay readable; the tables hold all of them.")
