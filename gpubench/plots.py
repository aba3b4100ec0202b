"""The chapters' charts and matmul tables, which the report draws too: each on the Axes or Figure
given, else on a new pyplot figure (matplotlib loads only to draw). A float32 that may use TF32
is "float32 (TF32)" (`fmt.dtype_label`) in every series key, legend and title."""

from __future__ import annotations

from collections import defaultdict

from gpubench.fmt import MISSING, dtype_label, fmt, fmt_time, md_table
from gpubench.results import dtype_of, ok_records, peak_record
from gpubench.timing import NOISE_THRESHOLD

# The book's performanceTest figures (BOOK.md): one run at each size on its GeForce GT 720 and
# on its CPU, timed the book's way (set-up included).
BOOK_SECONDS = {
    "gpu": {500: 0.169, 1000: 0.138, 2000: 0.216, 3000: 0.528, 4000: 1.130, 5000: 2.049},
    "cpu": {500: 0.185, 1000: 0.132, 2000: 0.435, 3000: 0.977, 4000: 2.030, 5000: 3.656},
}
BOOK_DEVICES = {"gpu": "GeForce GT 720", "cpu": "its CPU"}
# A sweep's three timings (docs/records.md): product time (per product, queued back to back),
# call latency (one product from the call until its result is ready on the device (a sync)) and
# the book's single timing (set-up included).
PRODUCT, CALL, BOOK = "product", "call", "book"
QUANTITY_TITLES = {PRODUCT: "product time", CALL: "call latency", BOOK: "book's single timing"}
_STYLE = {PRODUCT: "-", CALL: "--", BOOK: ":"}
# The columns of a matmul table, in order (the report's glossary explains each).
MATMUL_COLUMNS = ("size", "product time", "spread", "GFLOP/s", "% of datasheet peak",
                  "% of achievable", "call latency", "call spread", "launch and sync per call",
                  "book's single timing", "of which set-up")
NOISY = f"noisy: spread (IQR / median) above {NOISE_THRESHOLD:.0%}"


def column_of(record: dict) -> str:
    """A record's column: its "machine · env" label where the report set one, else its env."""
    return record.get("_column") or record["env"]


def label_of(record: dict) -> str:
    """A matmul record's dtype as it ran: "float32 (TF32)" where it may have used TF32."""
    return dtype_label(dtype_of(record), record.get("tf32"))


def sweep_records(records: list[dict]) -> list[dict]:
    """Ok matmul records of the size sweeps: neither the peak probe nor the aligned sizes."""
    return [r for r in ok_records(records, "matmul")
            if r.get("method") in ("book", "rigorous") and r.get("aligned_from") is None]


def noise(r: dict, quantity: str) -> tuple[bool, float | None]:
    """(noisy, spread: IQR / median) of a record's `quantity`: the spread above NOISE_THRESHOLD,
    or the blocks noisy at the time cap (a single call measured then is as unsure)."""
    iqr, call = r.get("call_seconds_iqr"), r.get("call_seconds")
    spread = {PRODUCT: r.get("relative_spread"),
              CALL: iqr / call if iqr is not None and call else None}.get(quantity)
    return (quantity != BOOK and bool(r.get("noisy"))) or (spread or 0) > NOISE_THRESHOLD, spread


def matmul_series(records: list[dict]) -> dict:
    """(column, device, quantity, dtype label) -> [(size, seconds, gflops, noisy, spread)]."""
    series = defaultdict(list)
    for r in sweep_records(records):
        seconds = ({BOOK: r.get("seconds")} if r["method"] == "book"
                   else {PRODUCT: r.get("seconds"), CALL: r.get("call_seconds")})
        for quantity, value in seconds.items():
            if value is not None:
                series[(column_of(r), r["device"], quantity, label_of(r))].append(
                    (r["size"], value, r.get("gflops") if quantity == PRODUCT else None,
                     *noise(r, quantity)))
    return {k: sorted(v) for k, v in sorted(series.items())}


def could_reverse(gpu: tuple, cpu: tuple) -> bool:
    """Whether a noisy pair's spreads could decide who wins: median x (1 +- spread) of the two
    overlap; an unknown spread of a noisy side counts as could."""
    if any(p[3] and p[4] is None for p in (gpu, cpu)):
        return True
    (g, gs), (c, cs) = (gpu[1], gpu[4] or 0), (cpu[1], cpu[4] or 0)
    return (gpu[3] or cpu[3]) and g * (1 - gs) <= c * (1 + cs) and c * (1 - cs) <= g * (1 + gs)


def speedup_series(records: list[dict], pairing: dict | None = None) -> list[dict]:
    """Each GPU series over its CPU pair's (same dtype, else float32): points, noisy sizes and
    those whose spread could reverse who wins; `pairing`: {column: its CPU's}, else its own."""
    series = matmul_series(records)
    found = []
    for (column, device, quantity, dtype), points in series.items():
        cpu_column = pairing.get(column) if pairing is not None else column
        if not device.startswith("gpu") or cpu_column is None:
            continue
        cpu_dtype = dtype if (cpu_column, "cpu", quantity, dtype) in series else "float32"
        cpu = {p[0]: p for p in series.get((cpu_column, "cpu", quantity, cpu_dtype), [])}
        pairs = [(p[0], cpu[p[0]][1] / p[1]) for p in points if p[0] in cpu]
        if pairs:
            paired = [(p, cpu[p[0]]) for p in points if p[0] in cpu]
            found.append({"column": column, "device": device, "dtype": dtype,
                          "quantity": quantity, "cpu_column": cpu_column, "cpu_dtype": cpu_dtype,
                          "points": pairs, "noisy": [g[0] for g, c in paired if g[3] or c[3]],
                          "unsure": [g[0] for g, c in paired if could_reverse(g, c)]})
    return found


def figure(fig, figsize: tuple[float, float]):
    """`fig` resized to `figsize`, else a new pyplot figure of that size."""
    if fig is None:
        import matplotlib.pyplot as plt  # noqa: PLC0415 - only for a caller without a figure
        return plt.figure(figsize=figsize)
    fig.set_size_inches(figsize)
    return fig


def axes(ax, figsize: tuple[float, float]):
    """`ax`, else Axes on a new pyplot figure of `figsize`."""
    return ax if ax is not None else figure(None, figsize).subplots()


def size_axis(ax, **labels):
    """Label a chart against matrix size, with grid and legend (when a line has a label)."""
    ax.set(xlabel="matrix size n (n x n)", **labels)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[1]:  # an empty legend only warns on stderr
        ax.legend(fontsize="small")
    return ax


def log_if_wide(ax, values: list[float], axis: str = "y"):
    """A log scale on `axis` where the positive `values` span more than a factor of 10."""
    positive = [v for v in values if v and v > 0]
    if positive and max(positive) / min(positive) > 10:
        getattr(ax, f"set_{axis}scale")("log")
    return ax


def _lines(ax, series: dict, index: int, dtypes: bool = False) -> list[float]:
    """Draw each series: a colour per column, device and dtype, hollow markers where noisy."""
    colours: dict = {}
    values = []
    dtypes = dtypes or len({k[3] for k in series}) > 1
    for (column, device, quantity, dtype), points in series.items():
        colour = colours.setdefault((column, device, dtype), f"C{len(colours) % 10}")
        label = (f"{device}{' ' + dtype if dtypes else ''} ({QUANTITY_TITLES[quantity]})"
                 + (f" — {column}" if len({k[0] for k in series}) > 1 else ""))
        ax.plot([p[0] for p in points], [p[index] for p in points], color=colour, marker="o",
                linestyle=_STYLE[quantity], label=label)
        if noisy := [(p[0], p[index]) for p in points if p[3]]:
            ax.plot(*zip(*noisy, strict=True), linestyle="none", marker="o", color=colour,
                    markerfacecolor="white")
        values += [p[index] for p in points]
    if any(p[3] for points in series.values() for p in points):  # its key last in the legend
        ax.plot([], [], linestyle="none", marker="o", color="grey", markerfacecolor="none",
                label=NOISY)
    return values


def plot(records: list[dict], metric: str = "seconds", ax=None):
    """The timings ("seconds") or GFLOP/s against size; on a new figure, the book's beside."""
    series = {k: v for k, v in matmul_series(records).items() if k[2] != BOOK
              and (metric == "seconds" or (k[2] == PRODUCT and any(p[2] for p in v)))}
    if not series:
        return None
    if ax is None:
        two = metric == "seconds"
        ax, *rest = figure(None, (14, 5) if two else (8, 5)).subplots(1, 2 if two else 1,
                                                                      squeeze=False)[0]
        if rest:
            plot_book(records, rest[0])
    index = 1 if metric == "seconds" else 2
    log_if_wide(ax, _lines(ax, {k: [p for p in v if p[index]] for k, v in series.items()}, index))
    shown = [f"{QUANTITY_TITLES[q]} ({'solid' if q == PRODUCT else 'dashed'})"
             for q in (PRODUCT, CALL) if any(k[2] == q for k in series)]
    return size_axis(ax, ylabel="seconds" if index == 1 else "GFLOP/s (product time)",
                     title=("Measured: " + ", ".join(shown) if index == 1
                            else "Throughput from the product time"))


def plot_book(records: list[dict], ax):
    """The book's single timing against size, beside the book's own GT 720 figures."""
    values = _lines(ax, {k: v for k, v in matmul_series(records).items() if k[2] == BOOK}, 1)
    for device, shade in (("gpu", "0.35"), ("cpu", "0.65")):
        book = BOOK_SECONDS[device]  # its sizes in order
        ax.plot(list(book), list(book.values()), color=shade, linestyle="--", marker="x",
                label=f"the book: {BOOK_DEVICES[device]}, one run each, set-up included")
        values += book.values()
    ax.plot([], [], " ", label="a JAX or compiled first call sits above them: compiling "
                               "each new shape is inside this one timing")
    log_if_wide(ax, values)
    return size_axis(ax, ylabel="seconds (one timing, set-up included)",
                     title="The book's single timing (matrices and set-up included)")


def plot_speedup(records: list[dict], ax=None, pairing: dict | None = None):
    """CPU time over GPU time against size (`speedup_series`); None where nothing pairs."""
    found = speedup_series(records, pairing)
    if not found:
        return None
    ax = axes(ax, (8, 5))
    series = {(s["column"], s["device"], s["quantity"], f"{s['dtype']} vs CPU {s['cpu_dtype']}"):
              [(n, ratio, None, n in s["noisy"]) for n, ratio in s["points"]] for s in found}
    log_if_wide(ax, [1.0, *_lines(ax, series, 1, dtypes=True)])
    ax.axhline(1.0, color="black", linewidth=0.8)
    size_axis(ax, ylabel="speedup (CPU time / GPU time)",
              title="GPU speedup over the CPU of the same machine and backend (above 1: GPU "
                    "faster)")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))  # clear of the lines
    return ax


def plot_history(history: dict, epoch_seconds: list[float] | None = None, fig=None):
    """Training curves (loss and accuracy per epoch, train and validation) and time per epoch."""
    fig = figure(fig, (15 if epoch_seconds else 10, 4))
    axes_ = fig.subplots(1, 3 if epoch_seconds else 2)
    for ax, metric in zip(axes_, ("loss", "accuracy"), strict=False):
        for key, label in ((metric, "train"), (f"val_{metric}", "validation")):
            values = history.get(key, [])
            ax.plot(range(1, len(values) + 1), values, marker="o", label=label)
        ax.set(xlabel="epoch", title=metric)
        ax.legend()
    if epoch_seconds:
        axes_[2].bar(range(1, len(epoch_seconds) + 1), epoch_seconds,
                     color=["tab:orange"] + ["tab:blue"] * (len(epoch_seconds) - 1))
        axes_[2].set(xlabel="epoch (orange: epoch 1, includes tracing)", ylabel="seconds",
                     title="time per epoch")
    for ax in axes_:
        ax.grid(True, alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    return fig


def plot_confusion(matrix, class_names: list[str] | None = None, fig=None):
    """Confusion matrix as a heat map with counts, rows = true class."""
    names = class_names or [str(i) for i in range(len(matrix))]
    ax = figure(fig, (7, 6)).subplots()
    image = ax.imshow(matrix, cmap="Blues")
    for i in range(len(matrix)):
        for j in range(len(matrix)):
            ax.text(j, i, int(matrix[i][j]), ha="center", va="center", fontsize="x-small",
                    color="white" if matrix[i][j] > matrix.max() / 2 else "black")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set(xlabel="predicted", ylabel="true")
    ax.figure.colorbar(image, ax=ax)
    ax.figure.tight_layout()
    return ax.figure


def _difference(value: float | None, show) -> str:
    """A difference of two timings: `show(value)`, "none" where not positive, or MISSING."""
    return MISSING if value is None else show(value) if value > 0 else "none"


def _share(gflops: float | None, peak: float | None, above: str) -> str:
    """`gflops` as a share of `peak`, saying so where it is above it."""
    if not peak or gflops is None:
        return MISSING
    return fmt(gflops / peak, ".0%") + (f" ({above})" if gflops > peak else "")


def cells(r: dict, records: list[dict]) -> dict[str, str]:
    """A matmul record's cells of its table row (book, rigorous or peak) but its size."""
    if r["status"] != "ok":
        return {"book's single timing" if r["method"] == "book" else "call latency":
                r["status"].upper()}
    if r["method"] == "book":
        setup = r["seconds"] - r["warm_seconds"] if r.get("warm_seconds") is not None else None
        return {"book's single timing": fmt_time(r["seconds"]),
                "of which set-up": _difference(setup, fmt_time)}
    product, call, (noisy, spread) = r.get("seconds"), r.get("call_seconds"), noise(r, CALL)
    peak = peak_record(records, r["env"], r["device"], dtype_of(r))
    achievable = peak["gflops"] if peak and peak.get("tf32") == r.get("tf32") else None
    return {"product time": fmt_time(product),
            "spread": fmt(r.get("relative_spread"), ".0%") + (" noisy" if r.get("noisy") else ""),
            "GFLOP/s": fmt(r.get("gflops"), ",.0f") if product is not None else MISSING,
            "% of datasheet peak": _share(r.get("gflops"), r.get("spec_peak_gflops"), "above the "
                                          "datasheet figure; check gpubench/tables/peaks.json"),
            "% of achievable": _share(r.get("gflops"), achievable, "above the peak probe"),
            "call latency": fmt_time(call),
            "call spread": fmt(spread, ".0%") + " noisy" * (spread is not None and noisy),
            "launch and sync per call": _difference(
                (call - product) * 1e6 if product is not None and call is not None else None,
                lambda us: f"{fmt(us, ',.0f')} µs")}


def matmul_tables(records: list[dict]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) per device and dtype as it ran, float32 first, rows by size."""
    matmul = [r for r in records if r["benchmark"] == "matmul" and r.get("method") != "peak"]
    blocks = []
    kinds = sorted({(dtype_of(r) != "float32", label_of(r), r["device"] != "cpu", r["device"])
                    for r in matmul})
    for _, label, _, device in kinds:
        rows: dict[tuple, dict] = {}
        for r in (r for r in matmul if (r["device"], label_of(r)) == (device, label)):
            key = (r.get("aligned_from") or r["size"], r["size"])
            size = (f"{r['size']} (aligned, beside {r['aligned_from']})"
                    if r.get("aligned_from") is not None else str(r["size"]))
            row = rows.setdefault(key, {"size": size})
            row.update(cells(r, records))
            if r.get("noisy"):
                row["size"] += " (noisy)"
        headers = [h for h in MATMUL_COLUMNS
                   if h == "size" or any(row.get(h, MISSING) != MISSING for row in rows.values())]
        body = [[row.get(h, MISSING) for h in headers] for _, row in sorted(rows.items())]
        blocks.append((f"{device} at {label}", headers, body))
    return blocks


def matmul_table(records: list[dict]) -> str:
    """`matmul_tables` in Markdown (with the peak records among them, "% of achievable")."""
    return "\n\n".join(f"**{title}**\n\n" + md_table(headers, body)
                       for title, headers, body in matmul_tables(records))
