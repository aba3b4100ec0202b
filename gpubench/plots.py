"""Charts of results, for the notebooks and the report.

Each function draws on the Axes or Figure it is given, else on a new pyplot figure (shown inline
in Jupyter). The report passes Figures of its own, so it never touches pyplot or the backend.
"""

from __future__ import annotations

from gpubench.peaks import BOOK_LABEL, BOOK_SECONDS
from gpubench.records import (
    MODEL_ORDER,
    MODEL_TITLES,
    book_train,
    columns,
    fmt_seconds,
    matmul_series,
    ok_records,
)


def _axes(ax, figsize: tuple[float, float]):
    return ax if ax is not None else _figure(None, figsize).subplots()


def _figure(fig, figsize: tuple[float, float]):
    if fig is None:
        import matplotlib.pyplot as plt  # noqa: PLC0415 - only for a caller without a figure

        return plt.figure(figsize=figsize)
    fig.set_size_inches(figsize)
    return fig


def _size_axis(ax, **labels):
    """Label a chart against matrix size, with grid and legend."""
    ax.set(xlabel="matrix size n (n x n)", **labels)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def _book_line(ax) -> None:
    """The book's stored single-run seconds (GT 720 and its CPU) as dashed grey lines."""
    for device, shade in (("gpu", "0.35"), ("cpu", "0.65")):
        points = sorted(BOOK_SECONDS[device].items())
        ax.plot([p[0] for p in points], [p[1] for p in points], color=shade, linestyle="--",
                marker="x", label=f"{BOOK_LABEL} (single run): {device}")


def plot_matmul(records: list[dict], metric: str = "seconds", ax=None, title: str | None = None,
                book: bool = True):
    """Time or GFLOP/s against matrix size per device, method, dtype; `book`: the book's, dashed."""
    ax = _axes(ax, (8, 5))
    index = 1 if metric == "seconds" else 2
    series = matmul_series(records)
    multi = len({k[0] for k in series}) > 1
    dtypes = len({k[3] for k in series}) > 1
    colours: dict = {}  # one colour per column, device and dtype; the method sets the line style
    for (column, device, method, dtype), points in series.items():
        colour = colours.setdefault((column, device, dtype), f"C{len(colours) % 10}")
        label = (f"{device}{' ' + dtype if dtypes else ''} ({method})"
                 + (f" — {column}" if multi else ""))
        ax.plot([p[0] for p in points], [p[index] for p in points], color=colour,
                marker="o", linestyle="-" if method == "rigorous" else "--", label=label)
    if book and metric == "seconds":
        _book_line(ax)
    return _size_axis(ax, ylabel="seconds per product" if index == 1 else "GFLOP/s",
                      title=title or ("Matrix multiplication "
                                      + ("time" if index == 1 else "throughput")))


def plot_speedup(records: list[dict], ax=None):
    """GPU-over-CPU speedup against size for each method, crossover marked; None without a GPU."""
    series = matmul_series(records)
    pairs = [(k, v) for k, v in series.items() if k[1].startswith("gpu")]
    if not pairs:
        return None
    ax = _axes(ax, (8, 5))
    for (column, device, method, dtype), gpu_points in pairs:
        cpu = {s: sec for s, sec, _ in series.get((column, "cpu", method, dtype), [])}
        points = [(s, cpu[s] / sec) for s, sec, _ in gpu_points if s in cpu]
        if not points:
            continue
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                label=f"{device} vs cpu ({method}, {dtype})")
        if (size := next((s for s, speedup in points if speedup > 1), None)) is not None:
            ax.axvline(size, linestyle=":", color="grey")
            ax.annotate(f"crossover {size}", (size, 1), textcoords="offset points",
                        xytext=(4, 8), fontsize="small")
    ax.axhline(1.0, color="black", linewidth=0.8)
    return _size_axis(ax, ylabel="speedup (CPU time / GPU time)",
                      title="GPU speedup over CPU (above 1: GPU faster)")


def plot_epoch_bars(records: list[dict], fig=None):
    """Grouped bars: steady-state epoch time (and epoch 1) per model, one bar per column."""
    import numpy as np  # noqa: PLC0415

    train = book_train(ok_records(records, "train"))
    models = [m for m in MODEL_ORDER if any(r["model"] == m for r in train)]
    cols = columns(train)
    by_key = {(r["model"], r["_column"]): r for r in train}
    fig = _figure(fig, (4.5 * max(len(models), 1), 4.5))
    axes = fig.subplots(1, max(len(models), 1), squeeze=False)
    for ax, model in zip(axes[0], models, strict=False):
        runs = [by_key.get((model, column), {}) for column in cols]
        steady = [r.get("steady_epoch_seconds") or r.get("first_epoch_seconds") or 0 for r in runs]
        first = [r.get("first_epoch_seconds") or 0 for r in runs]
        x = np.arange(len(cols))
        ax.bar(x - 0.2, steady, width=0.4, label="steady epoch (median of 2..n)")
        ax.bar(x + 0.2, first, width=0.4, label="epoch 1 (incl. tracing)", alpha=0.6)
        for xi, value in zip(x, steady, strict=True):
            ax.annotate(fmt_seconds(value), (xi - 0.2, value), ha="center", va="bottom",
                        fontsize="small")
        ax.set_xticks(x, cols, rotation=15, fontsize="small")
        ax.set(title=MODEL_TITLES.get(model, model), ylabel="seconds per epoch")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))  # room below for the legend, clear of the bars
    return fig


def plot_history(history: dict, epoch_seconds: list[float] | None = None, fig=None):
    """Training curves (loss and accuracy per epoch, train and validation) and time per epoch."""
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    panels = 3 if epoch_seconds else 2
    fig = _figure(fig, (5 * panels, 4))
    axes = fig.subplots(1, panels)
    epochs = range(1, len(history.get("loss", [])) + 1)
    for ax, metric in zip(axes, ("loss", "accuracy"), strict=False):
        ax.plot(epochs, history.get(metric, []), marker="o", label="train")
        if f"val_{metric}" in history:
            ax.plot(epochs, history[f"val_{metric}"], marker="o", label="validation")
        ax.set(xlabel="epoch", title=metric)
        ax.grid(True, alpha=0.3)
        ax.legend()
    if epoch_seconds:
        ax = axes[2]
        ax.bar(range(1, len(epoch_seconds) + 1), epoch_seconds,
               color=["tab:orange"] + ["tab:blue"] * (len(epoch_seconds) - 1))
        ax.set(xlabel="epoch (orange: epoch 1, includes tracing)", ylabel="seconds",
               title="time per epoch")
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return fig


def plot_confusion(matrix, class_names: list[str] | None = None, fig=None):
    """Confusion matrix as a heat map with counts, rows = true class."""
    names = class_names or [str(i) for i in range(len(matrix))]
    fig = _figure(fig, (7, 6))
    ax = fig.subplots()
    image = ax.imshow(matrix, cmap="Blues")
    for i in range(len(matrix)):
        for j in range(len(matrix)):
            ax.text(j, i, int(matrix[i][j]), ha="center", va="center", fontsize="x-small",
                    color="white" if matrix[i][j] > matrix.max() / 2 else "black")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set(xlabel="predicted", ylabel="true")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


def plot_factors(effects: list[dict], ax=None):
    """Speed of each variant against its device's baseline (factors.effects rows), with interval."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: PLC0415

    rows = [e for e in effects if e["speedup"] is not None]
    ax = _axes(ax, (8, 0.35 * len(rows) + 1.5))
    y = range(len(rows))
    ax.barh(list(y), [e["speedup"] for e in rows],
            xerr=[[e["speedup"] - e["low"] for e in rows],
                  [e["high"] - e["speedup"] for e in rows]],
            color=["tab:blue" if e["clear"] else "lightgrey" for e in rows], capsize=2)
    ax.set_yticks(list(y), [f"{e['device']}: {e['value']}" for e in rows], fontsize="small")
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set(xlabel="x the baseline's speed (log scale; grey: no clear effect)",
           title="Speed factors")
    ax.grid(True, axis="x", alpha=0.3)
    return ax
