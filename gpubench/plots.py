"""The chapters' charts, which the report draws too: matrix-multiplication timings against size
(product time, call latency, the book's single timing), the GPU's speedup over the CPU, training
curves and a confusion matrix. Each chart draws on the Axes or Figure it is given, else on a new
pyplot figure (shown inline in Jupyter); matplotlib loads only when a chart is drawn.
"""

from __future__ import annotations

from collections import defaultdict

from gpubench.fmt import fmt, fmt_time, md_table
from gpubench.peaks import BOOK_LABEL, BOOK_SECONDS
from gpubench.results import dtype_of, ok_records

# The columns of a matmul table, in order (the report's glossary explains each).
MATMUL_COLUMNS = ("size", "product time", "GFLOP/s", "% of datasheet peak", "call latency",
                  "launch and sync per call", "book's single timing", "of which set-up")


def column_of(record: dict) -> str:
    """A record's column: its "machine · env" label where the report set one, else its env."""
    return record.get("_column") or record["env"]


# The three timings of a matmul sweep, one definition each (docs/records.md): the product time
# (products queued back to back, per product), the call latency (one product from the call to
# its result on the host) and the book's single timing (set-up included).
PRODUCT, CALL, BOOK = "product", "call", "book"
QUANTITIES = (PRODUCT, CALL, BOOK)


def matmul_seconds(record: dict, quantity: str) -> float | None:
    """A matmul record's seconds of `quantity` (PRODUCT, CALL or BOOK); None where it has none."""
    method = record.get("method")
    if quantity == BOOK:
        return record.get("seconds") if method == "book" else None
    if method != "rigorous":
        return None
    return record.get("seconds") if quantity == PRODUCT else record.get("call_seconds")


def sweep_records(records: list[dict]) -> list[dict]:
    """Ok matmul records of the size sweeps: the book's and the rigorous method, neither the peak
    probe nor the aligned sizes timed beside a book size (`aligned_from`)."""
    return [r for r in ok_records(records, "matmul")
            if r.get("method") in ("book", "rigorous") and r.get("aligned_from") is None]


def matmul_series(records: list[dict]) -> dict:
    """(column, device, quantity, dtype) -> sorted [(size, seconds, gflops)] of the sweeps; gflops
    only for the product time (every GFLOP/s divides by it), else None."""
    series = defaultdict(list)
    for r in sweep_records(records):
        for quantity in QUANTITIES:
            if (seconds := matmul_seconds(r, quantity)) is not None:
                gflops = r.get("gflops") if quantity == PRODUCT else None
                series[(column_of(r), r["device"], quantity, dtype_of(r))].append(
                    (r["size"], seconds, gflops))
    return {k: sorted(v) for k, v in sorted(series.items())}


QUANTITY_TITLES = {PRODUCT: "product time", CALL: "call latency", BOOK: "book's single timing"}
_STYLE = {PRODUCT: "-", CALL: "--", BOOK: ":"}


def speedup_series(records: list[dict], pairing=None) -> list[dict]:
    """Every GPU series of the sweeps set against its CPU pair (`cpu_pairing`), the CPU at the same
    dtype where it was timed at it, else at float32: a dict of column, device, dtype, quantity,
    cpu_column, cpu_dtype and points [(size, CPU seconds / GPU seconds)]; those with no size in
    common are left out."""
    series = matmul_series(records)
    found = []
    for (column, device, quantity, dtype), points in series.items():
        cpu_column = pairing(records, column) if pairing else column
        if not device.startswith("gpu") or cpu_column is None:
            continue
        cpu_dtype = dtype if (cpu_column, "cpu", quantity, dtype) in series else "float32"
        cpu = {size: seconds for size, seconds, _ in
               series.get((cpu_column, "cpu", quantity, cpu_dtype), [])}
        pairs = [(size, cpu[size] / seconds) for size, seconds, _ in points if size in cpu]
        if pairs:
            found.append({"column": column, "device": device, "dtype": dtype,
                          "quantity": quantity, "cpu_column": cpu_column, "cpu_dtype": cpu_dtype,
                          "points": pairs})
    return found


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


def _label(key: tuple, series: dict) -> str:
    """A line's label: device, dtype where several, timing, and column where several."""
    column, device, quantity, dtype = key
    several_dtypes = len({k[3] for k in series}) > 1
    return (f"{device}{' ' + dtype if several_dtypes else ''} ({QUANTITY_TITLES[quantity]})"
            + (f" — {column}" if len({k[0] for k in series}) > 1 else ""))


def _lines(ax, series: dict, index: int, colours: dict) -> list[float]:
    """Draw each series on `ax` (one colour per column, device and dtype; the timing sets the
    line style); the values drawn."""
    values = []
    for key, points in series.items():
        colour = colours.setdefault((key[0], key[1], key[3]), f"C{len(colours) % 10}")
        ax.plot([p[0] for p in points], [p[index] for p in points], color=colour, marker="o",
                linestyle=_STYLE[key[2]], label=_label(key, series))
        values += [p[index] for p in points]
    return values


def plot(records: list[dict], metric: str = "seconds", ax=None, title: str | None = None,
         book: bool = True):
    """The measured timings against matrix size: "seconds" (product time solid, call latency
    dashed) or "gflops" (from the product time); log axis where the values span over a decade.
    With "seconds", `book` and no `ax`, the book's single timing gets a panel of its own beside
    (`plot_book`). Returns the Axes of the measured timings, None where there is nothing."""
    series = {k: v for k, v in matmul_series(records).items() if k[2] != BOOK
              and (metric == "seconds" or (k[2] == PRODUCT and any(p[2] for p in v)))}
    if not series:
        return None
    if ax is None:
        fig = figure(None, (14, 5) if metric == "seconds" and book else (8, 5))
        axes = fig.subplots(1, 2 if metric == "seconds" and book else 1, squeeze=False)[0]
        ax = axes[0]
        if len(axes) > 1:
            plot_book(records, axes[1])
    index = 1 if metric == "seconds" else 2
    values = _lines(ax, {k: [p for p in v if p[index]] for k, v in series.items()}, index, {})
    log_if_wide(ax, values)
    shown = [f"{QUANTITY_TITLES[q]} ({'solid' if q == PRODUCT else 'dashed'})"
             for q in (PRODUCT, CALL) if any(k[2] == q for k in series)]
    return size_axis(ax, ylabel="seconds" if index == 1 else "GFLOP/s (product time)",
                            title=title or ("Measured: " + ", ".join(shown) if index == 1
                                            else "Throughput from the product time"))


def plot_book(records: list[dict], ax, stored: bool = True):
    """The book's single timing against size, apart from the measured timings (set-up and, on
    JAX, compiling each new shape included); `stored`: the book's own GT 720 figures too."""
    series = {k: v for k, v in matmul_series(records).items() if k[2] == BOOK}
    values = _lines(ax, series, 1, {})
    if stored:
        for device, shade in (("gpu", "0.35"), ("cpu", "0.65")):
            points = sorted(BOOK_SECONDS[device].items())
            ax.plot([p[0] for p in points], [p[1] for p in points], color=shade,
                    linestyle="--", marker="x", label=f"{BOOK_LABEL} (single run): {device}")
            values += [p[1] for p in points]
    log_if_wide(ax, values)
    return size_axis(ax, ylabel="seconds (one timing, set-up included)",
                            title="The book's single timing (matrices and set-up included)")


def plot_speedup(records: list[dict], ax=None, pairing=None):
    """CPU time over GPU time against size, a line per GPU device, dtype and timing, each paired
    with the CPU of the same machine and backend (`speedup_series`); None where nothing pairs."""
    found = speedup_series(records, pairing)
    if not found:
        return None
    ax = axes(ax, (8, 5))
    several = len({s["column"] for s in found}) > 1
    colours: dict = {}
    values = []
    for s in found:
        colour = colours.setdefault((s["column"], s["device"], s["dtype"]),
                                    f"C{len(colours) % 10}")
        label = (f"{s['device']} {s['dtype']} vs CPU {s['cpu_dtype']}, "
                 f"{QUANTITY_TITLES[s['quantity']]}" + (f" — {s['column']}" if several else ""))
        ax.plot([p[0] for p in s["points"]], [p[1] for p in s["points"]], color=colour,
                marker="o", linestyle=_STYLE[s["quantity"]], label=label)
        values += [p[1] for p in s["points"]]
    ax.axhline(1.0, color="black", linewidth=0.8)
    log_if_wide(ax, values + [1.0])
    size_axis(ax, ylabel="speedup (CPU time / GPU time)",
                     title="GPU speedup over the CPU of the same machine and backend "
                           "(above 1: GPU faster)")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))  # clear of the lines
    return ax


def plot_history(history: dict, epoch_seconds: list[float] | None = None, fig=None):
    """Training curves (loss and accuracy per epoch, train and validation) and time per epoch."""
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    panels = 3 if epoch_seconds else 2
    fig = figure(fig, (5 * panels, 4))
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
    fig = figure(fig, (7, 6))
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


def _row(r: dict) -> dict[str, str]:
    """A table row's cells of one matmul record (rigorous or book)."""
    if r["status"] != "ok":
        return {"book's single timing" if r["method"] == "book" else "call latency":
                r["status"].upper()}
    if r["method"] == "book":
        setup = (r["seconds"] - r["warm_seconds"]) if r.get("warm_seconds") is not None else None
        return {"book's single timing": fmt_time(r["seconds"]),
                "of which set-up": _difference(setup, fmt_time)}
    product, call = r.get("seconds"), r.get("call_seconds")
    share = "–"
    if r.get("spec_peak_gflops") and r.get("gflops") is not None and product is not None:
        share = fmt(r["gflops"] / r["spec_peak_gflops"], ".0%")
        if r["gflops"] > r["spec_peak_gflops"]:
            share += " (above the datasheet figure; check gpubench/peaks.py)"
    overhead = (call - product) * 1e6 if product is not None and call is not None else None
    return {"product time": fmt_time(product),
            "GFLOP/s": fmt(r.get("gflops"), ",.0f") if product is not None else "–",
            "% of datasheet peak": share, "call latency": fmt_time(call),
            "launch and sync per call": _difference(overhead,
                                                    lambda us: f"{fmt(us, ',.0f')} µs")}


def _difference(value: float | None, show) -> str:
    """A difference of two timings in a cell: `show(value)` where it is positive, "none" where
    noise made it zero or negative, "–" where one side was not measured."""
    if value is None:
        return "–"
    return show(value) if value > 0 else "none"


def matmul_tables(records: list[dict]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per device and dtype of the sweep's records (the peak probe's left out), a table by size
    as (title, headers, rows): product time, GFLOP/s, % of datasheet peak, call latency, launch
    and sync per call, the book's single timing and its set-up; columns with nothing measured
    left out."""
    matmul = [r for r in records if r["benchmark"] == "matmul" and r.get("method") != "peak"]
    blocks = []
    for device, dtype in sorted({(r["device"], dtype_of(r)) for r in matmul},
                                key=lambda k: (k[0] != "cpu", k)):
        rows: dict[tuple, dict] = {}
        for r in matmul:
            if (r["device"], dtype_of(r)) == (device, dtype):
                label = (f"{r['size']} (aligned, beside {r['aligned_from']})"
                         if r.get("aligned_from") is not None else str(r["size"]))
                rows.setdefault((r.get("aligned_from") or r["size"], r["size"]), {"size": label})
                rows[(r.get("aligned_from") or r["size"], r["size"])].update(_row(r))
        headers = [h for h in MATMUL_COLUMNS
                   if h == "size" or any(row.get(h, "–") != "–" for row in rows.values())]
        body = [[row.get(h, "–") for h in headers] for _, row in sorted(rows.items())]
        blocks.append((f"{device} at {dtype}", headers, body))
    return blocks


def matmul_table(records: list[dict]) -> str:
    """`matmul_tables` in Markdown, for a chapter."""
    return "\n\n".join(f"**{title}**\n\n" + md_table(headers, body)
                         for title, headers, body in matmul_tables(records))
