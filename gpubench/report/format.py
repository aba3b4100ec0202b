"""The report's words: its prose and glossary (tables/report_text.md), linked tables, chart caps."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from gpubench.fmt import MISSING, NOT_A_NUMBER, md_table
from gpubench.plots import column_of
from gpubench.report.inputs import columns
from gpubench.timing import NOISE_THRESHOLD, STEADY_EPOCHS

TEXT = Path(__file__).parents[1] / "tables" / "report_text.md"
MAX_COLUMNS = 6  # columns (machine · env) one report chart draws; the tables hold every column


@functools.cache
def _paragraphs() -> dict[str, str]:
    text = re.sub(r"(?<!\n)\n(?!\n|- )[ \t]*", " ", TEXT.read_text(encoding="utf-8"))  # unwrap
    parts = re.split(r"^## (.+?) ?\n", text, flags=re.M)
    return {key: body.strip() for key, body in zip(parts[1::2], parts[2::2], strict=True)}


def prose(key: str, **fields) -> str:
    """The paragraph `key` of report_text.md, its {fields} filled in."""
    return _paragraphs()[key].format(**fields)


@functools.cache
def glossary_lines() -> dict[str, str]:
    """Each term of the glossary and its line, in the glossary's order."""
    text = prose("glossary", steady_epochs=STEADY_EPOCHS, noise=f"{NOISE_THRESHOLD:.0%}",
                 steady=f"the steady epochs ({STEADY_EPOCHS}: epoch 1, which compiles, left out)")
    return {m[1]: m[0] for m in re.finditer(r"^- \*\*(.+?)\*\*: .+$", text, re.M)}


def explained_table(headers: list[str], rows: list[list]) -> list[str]:
    """Markdown lines: the table, each header the glossary defines linked to it."""
    linked = [f"[{h}](#glossary)" if h in glossary_lines() else h for h in headers]
    return [md_table(linked, rows), ""]


def glossary(text: str) -> list[str]:
    """The glossary section: each term `text` uses, once."""
    return ["## Glossary", "", prose("marks", missing=MISSING, na=NOT_A_NUMBER), "",
            *(line for term, line in glossary_lines().items() if term in text), ""]


def capped(records: list[dict], what: str = "This chart draws") -> tuple[list[dict], str]:
    """The records of the first MAX_COLUMNS columns in the tables' order, and `capped_text`."""
    names = columns(records)
    return ([r for r in records if column_of(r) in names[:MAX_COLUMNS]],
            capped_text(names[:MAX_COLUMNS], len(names), what))


def capped_text(drawn: list[str], of: int, what: str = "This chart draws") -> str:
    """A sentence saying that `what` draws only the columns `drawn` of `of`; "" for all."""
    if len(drawn) >= of:
        return ""
    return prose("capped", what=what, n=len(drawn), of=of, first=drawn[0], last=drawn[-1])


def new_figure(figsize: tuple[float, float] = (8, 5)):
    """A new Figure of the report's own, outside pyplot."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - matplotlib only when drawing

    return Figure(figsize=figsize)


def new_axes(figsize: tuple[float, float] = (8, 5)):
    """Axes on a new Figure of the report's own, outside pyplot."""
    return new_figure(figsize).subplots()
