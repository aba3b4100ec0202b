"""The shared matplotlib helpers of every chart in the report and the chapters.

Each chart draws on the Axes or Figure it is given, else on a new pyplot figure (shown inline in
Jupyter). The report passes Figures of its own (`new_axes`, `new_figure`), so it never touches
pyplot or the backend. matplotlib loads only when a chart is drawn.
"""

from __future__ import annotations

from gpubench.records import column_of, columns


def axes(ax, figsize: tuple[float, float]):
    """`ax`, else Axes on a new pyplot figure of `figsize`."""
    return ax if ax is not None else figure(None, figsize).subplots()


def figure(fig, figsize: tuple[float, float]):
    """`fig` resized to `figsize`, else a new pyplot figure of that size."""
    if fig is None:
        import matplotlib.pyplot as plt  # noqa: PLC0415 - only for a caller without a figure

        return plt.figure(figsize=figsize)
    fig.set_size_inches(figsize)
    return fig


def new_figure():
    """A new Figure of the report's own, outside pyplot."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - matplotlib only when drawing

    return Figure()


def new_axes(figsize: tuple[float, float] = (8, 5)):
    """Axes on a new Figure of the report's own, outside pyplot."""
    figure_ = new_figure()
    figure_.set_size_inches(figsize)
    return figure_.subplots()


def size_axis(ax, **labels):
    """Label a chart against matrix size, with grid and legend (when a line has a label)."""
    ax.set(xlabel="matrix size n (n x n)", **labels)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[1]:  # an empty legend only warns on stderr
        ax.legend(fontsize="small")
    return ax


DECADE = 10.0  # values spanning more than this factor get a log axis


def log_if_wide(ax, values: list[float], axis: str = "y"):
    """A log scale on `axis` where the positive `values` span more than a decade (max over min
    above DECADE), so that small values do not lie flat on zero; linear otherwise."""
    positive = [v for v in values if v and v > 0]
    if positive and max(positive) / min(positive) > DECADE:
        getattr(ax, f"set_{axis}scale")("log")
    return ax


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
