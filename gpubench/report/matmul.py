"""Matrix multiplication in the report and in performanceTest: the crossover in words, the table
per size, the book's timing against the rigorous one, the peak probe, and the charts."""

from __future__ import annotations

from gpubench.peaks import BOOK_LABEL, BOOK_SECONDS
from gpubench.records import (
    PEAK_METHOD,
    columns,
    crossover,
    dtype_of,
    fmt_seconds,
    matmul_series,
    ok_records,
    peak_record,
)
from gpubench.report import charts
from gpubench.report.format import MATMUL_NOTE, fmt, md_table


def _sweep(records: list[dict]) -> list[dict]:
    """The matmul records of the size sweeps (book and rigorous), the peak probe's left out."""
    return [r for r in records if r["benchmark"] == "matmul" and r.get("method") != PEAK_METHOD]


def crossover_text(records: list[dict], method: str, dtype: str = "float32") -> str:
    """Crossover in words, including the cases with no GPU or no win."""
    ok = [r for r in ok_records(_sweep(records), "matmul") if dtype_of(r) == dtype]
    if not any(r["device"].startswith("gpu") for r in ok):
        return "no GPU measured"
    if not any(r["device"] == "cpu" and r["method"] == method for r in ok):
        return "no CPU measured in this env to compare with"
    size = crossover(records, method, dtype)
    if size is None:
        return "the GPU never beat the CPU at the sizes measured"
    if size == min(r["size"] for r in ok if r["method"] == method):
        return f"the GPU wins at every size measured (from {size})"
    return f"the GPU wins from {size} x {size} up"


def table(records: list[dict]) -> str:
    """Per size: seconds, GFLOP/s and % of datasheet peak (where known) per device, method and
    dtype; the peak probe is left out (`peak_lines` tells it)."""
    matmul = _sweep(records)
    several = len({dtype_of(r) for r in matmul}) > 1
    keys = sorted({(r["device"], r["method"], dtype_of(r)) for r in matmul})
    cells = {}
    for r in matmul:
        text = r["status"].upper()
        if r["status"] == "ok":
            text = f"{fmt_seconds(r['seconds'])} ({fmt(r['gflops'], ',.0f')} GFLOP/s"
            if r.get("spec_peak_gflops") and r["gflops"] is not None:
                share = 100 * r["gflops"] / r["spec_peak_gflops"]
                text += f", {share:.0f}% of datasheet peak"
                if share > 100:
                    text += " (over 100 %: above the datasheet figure; check gpubench/peaks.py)"
            text += ")"
        cells[(r["device"], r["method"], dtype_of(r), r["size"])] = text
    rows = [[size] + [cells.get(k + (size,), "–") for k in keys]
            for size in sorted({r["size"] for r in matmul})]
    return md_table(["size"] + [" ".join(k if several else k[:2]) for k in keys], rows)


def book_vs_rigorous(records: list[dict]) -> str:
    """Why the book's single timing misleads at small sizes, told with the numbers just measured."""
    ok = ok_records(_sweep(records), "matmul")
    lines = []
    pairs = sorted({(r["device"], dtype_of(r)) for r in ok}, key=lambda p: (p[0] == "cpu", p))
    for device, dtype in pairs:
        mine = [r for r in ok if r["device"] == device and dtype_of(r) == dtype]
        book = {r["size"]: r for r in mine if r["method"] == "book"}
        rig = {r["size"]: r for r in mine if r["method"] == "rigorous"}
        if not (sizes := sorted(set(book) & set(rig))):
            continue
        small, large = sizes[0], sizes[-1]
        what = device + (f" ({dtype})" if len({p[1] for p in pairs}) > 1 else "")
        lines.append(
            f"- **{what}**: at {small} x {small} the book's single timing says "
            f"{fmt_seconds(book[small]['seconds'])}, the product itself takes "
            f"{fmt_seconds(rig[small]['seconds'])} (median of {rig[small]['repeats']}): the book "
            f"measures {book[small]['seconds'] / rig[small]['seconds']:.1f}x the real cost. "
            f"At {large} x {large} it is {fmt_seconds(book[large]['seconds'])} against "
            f"{fmt_seconds(rig[large]['seconds'])} "
            f"({book[large]['seconds'] / rig[large]['seconds']:.1f}x). The first compiled call "
            f"at {small} took {fmt_seconds(rig[small]['first_seconds'])} (tracing), which the "
            "rigorous method reports apart and keeps out of the median.")
    if not lines:
        return "No size was measured with both methods, so there is nothing to compare."
    text = [
        "The book times one run that includes creating the two random matrices, the "
        "first-call set-up of each operation and, on a GPU, its start-up. Those costs grow "
        "like n^2 or not at all, while the product grows like n^3, so at small sizes they "
        "dominate and the chart compares overheads, not arithmetic:", "", *lines,
    ]
    if any(r["device"] != "cpu" for r in ok):
        text += [f"- Crossover by the {method} method at {dtype}: "
                 f"{crossover_text(records, method, dtype)}."
                 for dtype in sorted({dtype_of(r) for r in ok}) for method in ("book", "rigorous")]
    return "\n".join(text)


def _book_line(ax) -> None:
    """The book's stored single-run seconds (GT 720 and its CPU) as dashed grey lines."""
    for device, shade in (("gpu", "0.35"), ("cpu", "0.65")):
        points = sorted(BOOK_SECONDS[device].items())
        ax.plot([p[0] for p in points], [p[1] for p in points], color=shade, linestyle="--",
                marker="x", label=f"{BOOK_LABEL} (single run): {device}")


def plot(records: list[dict], metric: str = "seconds", ax=None, title: str | None = None,
         book: bool = True):
    """Time or GFLOP/s against matrix size per device, method, dtype; `book`: the book's, dashed."""
    ax = charts.axes(ax, (8, 5))
    index = 1 if metric == "seconds" else 2
    series = matmul_series(_sweep(records))
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
    return charts.size_axis(ax, ylabel="seconds per product" if index == 1 else "GFLOP/s",
                            title=title or ("Matrix multiplication "
                                            + ("time" if index == 1 else "throughput")))


def plot_speedup(records: list[dict], ax=None):
    """GPU-over-CPU speedup against size for each method, crossover marked; None without a GPU."""
    series = matmul_series(_sweep(records))
    pairs = [(k, v) for k, v in series.items() if k[1].startswith("gpu")]
    if not pairs:
        return None
    ax = charts.axes(ax, (8, 5))
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
    return charts.size_axis(ax, ylabel="speedup (CPU time / GPU time)",
                            title="GPU speedup over CPU (above 1: GPU faster)")



def peak_lines(records: list[dict]) -> list[str]:
    """A line per peak-probe record: the GFLOP/s every "% of matmul" in the report divides by."""
    keys = sorted({(r["env"], r["device"], dtype_of(r)) for r in ok_records(records, "matmul")
                   if r.get("method") == PEAK_METHOD})
    found = [peak_record(records, *key) for key in keys]
    return [f"Peak (the peak probe, n = {r['size']}): {r['device']} at {dtype_of(r)}: "
            f"{fmt(r['gflops'], ',.0f')} GFLOP/s; every \"% of matmul\" of this device and "
            "dtype divides by it." for r in found if r is not None]


def section(records: list[dict], charts_: dict | None) -> list[str]:
    """Per column: crossover, table and the peak probe; then the time, GFLOP/s and speedup
    charts."""
    matmul = [r for r in records if r["benchmark"] == "matmul"]
    if not matmul:
        return []
    lines = ["## Matrix multiplication", ""]
    for column in columns(matmul):
        col = [r for r in matmul if r["_column"] == column]
        dtypes = sorted({dtype_of(r) for r in _sweep(col)})
        lines += [f"### {column}", ""]
        for dtype in dtypes:
            at = f" at {dtype}" if len(dtypes) > 1 else ""
            lines += [f"Crossover{at} (rigorous): {crossover_text(col, 'rigorous', dtype)}; "
                      f"(book's single timing): {crossover_text(col, 'book', dtype)}.", ""]
        if _sweep(col):
            lines += [table(col), "", MATMUL_NOTE, ""]
        lines += [line + "\n" for line in peak_lines(col)]
    if charts_ is None or not _sweep(matmul):
        return lines
    charts_["matmul_time.png"] = plot(matmul, "seconds", charts.new_axes()).figure
    charts_["matmul_gflops.png"] = plot(matmul, "gflops", charts.new_axes()).figure
    lines += ["![Time against matrix size](matmul_time.png)", "",
              "![GFLOP/s against matrix size](matmul_gflops.png)", ""]
    if (ax := plot_speedup(matmul, charts.new_axes())) is not None:
        charts_["matmul_speedup.png"] = ax.figure
        lines += ["![GPU speedup](matmul_speedup.png)", ""]
    return lines
