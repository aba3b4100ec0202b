"""Matrix multiplication in the report and in performanceTest: three timings, each named for what
it is (product time, call latency, the book's single timing), the GPU against the CPU of the same
machine and backend, the crossover in words, the alignment penalty, the peak probe, and the
charts."""

from __future__ import annotations

from gpubench import plots
from gpubench.backends import backend_title
from gpubench.fmt import fmt, fmt_rate, fmt_ratio, fmt_time
from gpubench.plots import (
    BOOK,
    CALL,
    PRODUCT,
    QUANTITY_TITLES,
    column_of,
    plot,
    plot_book,
    plot_speedup,
    sweep_records,
)
from gpubench.plots import speedup_series as _pairs
from gpubench.report import charts
from gpubench.report.format import explained_table
from gpubench.report.records import backend_of, baseline, columns, cpu_pairing, crossover
from gpubench.results import PEAK_METHOD, dtype_of, ok_records, peak_record

# How each timing is named in a crossover sentence ("the GPU wins from n = 1000 when ...").
_WHEN = {PRODUCT: "when products stream (product time)",
         CALL: "for one product called alone (call latency)",
         BOOK: "by the book's single timing (set-up included)"}
ALIGN_MULTIPLE = 8  # tensor cores' fast path wants dimensions that are multiples of 8 (16 bytes)

MATMUL_NOTES = {
    "size": "n, for the product of two n x n matrices",
    "product time": "per product, products queued back to back with one sync per block, the "
                    "median of the blocks: what the arithmetic costs",
    "GFLOP/s": "2n³ over the product time",
    "% of datasheet peak": "that GFLOP/s over the device's datasheet figure at this dtype",
    "call latency": "one product from the call to its result on the host, the median of the "
                    "calls: what a program that multiplies once pays",
    "launch and sync per call": "call latency minus product time: the cost of launching one "
                                "product and waiting for it; \"none\": no more than the noise "
                                "between the two (zero or below)",
    "book's single timing": "one timing as the book took it: creating the matrices and the "
                            "first call's set-up included (on JAX, compiling each new shape)",
    "of which set-up": "the book's timing minus a second book-way call of the same shape; "
                       "\"none\": the second call took as long or longer",
}
NO_PRODUCT_NOTE = ("> These records hold no product time: gpubench before record schema 4 timed "
                   "one product per sync, which is the call latency. Their rigorous timings are "
                   "shown as call latency, and no GFLOP/s, % of peak or streaming crossover is "
                   "derived from them.")


def aligned_size(size: int, multiple: int = ALIGN_MULTIPLE) -> int:
    """The nearest multiple of `multiple` at or above `size` (the size itself where aligned)."""
    return -(-size // multiple) * multiple


def _sweep(records: list[dict]) -> list[dict]:
    """The matmul records of the size sweeps (book and rigorous, aligned sizes included), the
    peak probe's left out."""
    return [r for r in records if r["benchmark"] == "matmul" and r.get("method") != PEAK_METHOD]


def no_product_time(records: list[dict]) -> bool:
    """Whether rigorous records were timed but none holds a product time (older gpubench)."""
    rigorous = [r for r in sweep_records(records) if r["method"] == "rigorous"]
    return bool(rigorous) and all(r.get("seconds") is None for r in rigorous)


def _span(points: list[tuple]) -> str:
    sizes = sorted(p[0] for p in points)
    return f"n = {sizes[0]}–{sizes[-1]}" if len(sizes) > 1 else f"n = {sizes[0]}"


def crossover_words(points: list[tuple[int, float]]) -> str:
    """Where the GPU wins, in words: "from n = 2000", "at every size measured (n = 500–5000)"."""
    size, sizes = crossover(points), sorted(p[0] for p in points)
    if size is not None:
        return (f"at every size measured ({_span(points)})" if size == sizes[0]
                else f"from n = {size} ({_span(points)} measured)")
    wins = [n for n, speedup in sorted(points) if speedup > 1]
    if wins:
        return (f"only at n = {', '.join(map(str, wins))}, not at the largest measured "
                f"(n = {sizes[-1]})")
    return f"at no size measured ({_span(points)})"


def pairing_text(records: list[dict], column: str) -> str:
    """Which CPU timings `column`'s GPU timings are set against, and why those."""
    cpu = cpu_pairing(records, column)
    if cpu == column:
        return f"{column}'s GPU timings against the CPU timings of the same env, as the book did"
    if cpu is not None:
        return (f"{column}'s GPU timings against the CPU timings of {cpu}, the same machine's "
                f"{backend_title(backend_of(_first(records, column)))} CPU env ({column} timed "
                "no CPU)")
    other = baseline(records, column)
    return (f"{column} timed no CPU, and " + (f"{other} timed no matmul on the CPU"
            if other else "this machine has no CPU env of the same backend in these runs")
            + ": no speedup and no crossover to give")


def _first(records: list[dict], column: str) -> dict:
    return next(r for r in records if column_of(r) == column)


def crossover_lines(records: list[dict]) -> list[str]:
    """Per GPU column: the pairing, then per device and dtype where the GPU wins by each timing
    ("the GPU wins from n = 1000 when products stream, ...")."""
    series = speedup_series(records)
    gpu_columns = sorted({column_of(r) for r in sweep_records(records)
                          if r["device"].startswith("gpu")}, key=columns(records).index)
    lines = []
    for column in gpu_columns:
        lines.append(f"- Pairing: {pairing_text(records, column)}.")
        mine = [s for s in series if s["column"] == column]
        for device, dtype in sorted({(s["device"], s["dtype"]) for s in mine}):
            found = {s["quantity"]: s for s in mine if (s["device"], s["dtype"]) == (device, dtype)}
            cpu_dtype = next(iter(found.values()))["cpu_dtype"]
            parts = [f"{crossover_words(found[q]['points'])} {_WHEN[q]}"
                     for q in (PRODUCT, CALL, BOOK) if q in found]
            lines.append(f"- **{device} {dtype} vs CPU {cpu_dtype}**: the GPU wins "
                         + "; ".join(parts) + ".")
    return lines


def crossover_text(records: list[dict], quantity: str = CALL, dtype: str = "float32") -> str:
    """The crossover of one timing at one GPU dtype in words, or why there is none."""
    if not any(r["device"].startswith("gpu") for r in sweep_records(records)):
        return "no GPU measured"
    found = [s for s in speedup_series(records)
             if s["quantity"] == quantity and s["dtype"] == dtype]
    if not found:
        return f"no CPU {QUANTITY_TITLES[quantity]} of the same machine and backend to pair with"
    return "the GPU wins " + crossover_words(found[0]["points"])


def table(records: list[dict]) -> str:
    """Per device and dtype of the records, a table by size (`plots.matmul_tables`), each with
    the line explaining its columns."""
    blocks: list[str] = []
    for title, headers, body in plots.matmul_tables(_sweep(records)):
        notes = MATMUL_NOTES
        if any("aligned" in row[0] for row in body):
            notes = {**notes, "size": notes["size"] + "; \"aligned\": the next multiple of "
                     f"{ALIGN_MULTIPLE} timed beside a book size that is not one"}
        blocks += [f"**{title}**", "", *explained_table(headers, body, notes)]
    return "\n".join(blocks).rstrip()


def alignment_lines(records: list[dict]) -> list[str]:
    """The alignment penalty in numbers: each aligned size's product GFLOP/s beside its book
    size's ("n = 2500 ran at 72 TFLOP/s, n = 2504 at ...")."""
    ok = [r for r in ok_records(records, "matmul")
          if r["method"] == "rigorous" and r.get("gflops") and r.get("seconds") is not None]
    by_key = {(column_of(r), r["device"], dtype_of(r), r["size"]): r for r in ok
              if r.get("aligned_from") is None}
    lines = []
    for r in sorted((r for r in ok if r.get("aligned_from") is not None),
                    key=lambda r: (column_of(r), r["device"], dtype_of(r), r["size"])):
        book = by_key.get((column_of(r), r["device"], dtype_of(r), r["aligned_from"]))
        if book is None:
            continue
        ratio = r["gflops"] / book["gflops"]
        verdict = ("sizes that are not a multiple of 8 leave the tensor cores' fast path"
                   if ratio > 1.1 else "alignment made no clear difference here")
        which = (f"the next multiple of {ALIGN_MULTIPLE}"
                 if r["size"] == aligned_size(book["size"]) else "aligned")
        lines.append(f"- {r['device']} {dtype_of(r)}: n = {book['size']} ran at "
                     f"{fmt_rate(book['gflops'])}, n = {r['size']} ({which}) at "
                     f"{fmt_rate(r['gflops'])} ({fmt_ratio(ratio)}x): {verdict}.")
    return lines


def _rigorous_reference(r: dict) -> tuple[float | None, str]:
    """A rigorous record's figure to set a book timing against: the product time, else (older
    records) the call latency, with its name."""
    if r.get("seconds") is not None:
        return r["seconds"], "the product itself takes"
    return r.get("call_seconds"), "one product called alone takes"


def _at(size: int, book: dict, rig: dict) -> tuple[str, bool]:
    """The book's timing against the rigorous one at one size, and whether the run was noisy
    there (the book's timing, which does more work, came out below the rigorous median)."""
    ref, words = _rigorous_reference(rig)
    says = f"at {size} x {size} the book's single timing says {fmt_time(book['seconds'])}"
    if ref is None:
        return says, False
    if book["seconds"] < ref:
        iqr = rig.get("seconds_iqr")
        return (f"at {size} x {size} **the run was noisy**: the book's single timing "
                f"({fmt_time(book['seconds'])}) came out below the rigorous median "
                f"({fmt_time(ref)}" + (f", IQR {fmt_time(iqr)}" if iqr is not None else "")
                + f" over {rig.get('repeats')} repeats), which a timing that does more work can "
                "only do by noise; rerun on a quieter machine before reading a ratio here"), True
    ratio = book["seconds"] / ref
    return f"{says}, {words} {fmt_time(ref)}: the book measures {ratio:,.1f}x that", False


def book_vs_rigorous(records: list[dict]) -> str:
    """Why the book's single timing misleads at small sizes, told with the numbers just measured;
    a noisy run is named as such instead of a ratio that contradicts the method."""
    ok = sweep_records(records)
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
        parts = [_at(size, book[size], rig[size])[0] for size in dict.fromkeys((small, large))]
        text = f"- **{what}**: " + "; ".join(parts) + "."
        if (warm := book[small].get("warm_seconds")) is not None:
            text += (f" Of the book's {fmt_time(book[small]['seconds'])} at {small}, "
                     f"{fmt_time(max(book[small]['seconds'] - warm, 0))} is set-up (against a "
                     f"second book-way call of the same shape, {fmt_time(warm)}).")
        elif backend_of(book[small]) == "jax":
            text += " On JAX the book's timing includes compiling each new shape."
        lines.append(text)
    if not lines:
        return "No size was measured with both methods, so there is nothing to compare."
    text = [
        "The book times one run that includes creating the two random matrices, the "
        "first-call set-up of each operation (on JAX, compiling each new shape) and, on a GPU, "
        "its start-up. Those costs grow like n^2 or not at all, while the product grows like "
        "n^3, so at small sizes they dominate and the chart compares overheads, not arithmetic:",
        "", *lines]
    if crossings := crossover_lines(records):
        text += ["", "Where the GPU wins:", "", *crossings]
    return "\n".join(text)


def peak_lines(records: list[dict]) -> list[str]:
    """A line per peak-probe record: the GFLOP/s every "% of matmul" in the report divides by."""
    keys = sorted({(r["env"], r["device"], dtype_of(r)) for r in ok_records(records, "matmul")
                   if r.get("method") == PEAK_METHOD})
    found = [peak_record(records, *key) for key in keys]
    return [f"Peak (the peak probe, n = {r['size']}): {r['device']} at {dtype_of(r)}: "
            f"{fmt(r['gflops'], ',.0f')} GFLOP/s; every \"% of matmul\" of this device and "
            "dtype divides by it." for r in found if r is not None]


INTRO = ("Three timings, each named for what it is: the **product time** (products queued back "
         "to back, one sync per block: what the arithmetic costs; GFLOP/s and % of peak use "
         "it), the **call latency** (one product from the call to its result on the host: what "
         "a program that multiplies once pays) and the **book's single timing** (one timing "
         "as the book took it: creating the matrices and the first call's set-up included; on "
         "JAX, compiling each new shape).")


def _charts(matmul: list[dict], charts_: dict) -> list[str]:
    """The time, GFLOP/s and speedup charts, each only where it has data (else one sentence), of
    the first columns (`charts.capped`)."""
    matmul, cap = charts.capped(matmul, "These charts")
    fig = plots.new_figure()
    fig.set_size_inches(14, 5)
    left, right = fig.subplots(1, 2)
    plot(matmul, "seconds", left)
    plot_book(matmul, right)
    charts_["matmul_time.png"] = fig
    lines = ["![Measured timings and the book's single timing against matrix size]"
             "(matmul_time.png)", ""]
    if (ax := plot(matmul, "gflops", plots.new_axes())) is not None:
        charts_["matmul_gflops.png"] = ax.figure
        lines += ["![GFLOP/s against matrix size](matmul_gflops.png)", ""]
    else:
        lines += ["No GFLOP/s chart: no product time was measured, and a GFLOP/s from the call "
                  "latency or the book's timing would measure overheads, not arithmetic.", ""]
    if (ax := plot_speedup(matmul, plots.new_axes(), cpu_pairing)) is not None:
        charts_["matmul_speedup.png"] = ax.figure
        lines += ["![GPU speedup](matmul_speedup.png)", ""]
    elif any(r["device"].startswith("gpu") for r in sweep_records(matmul)):
        lines += ["No speedup chart: no GPU timing pairs with a CPU timing of the same machine "
                  "and backend (see the pairing above).", ""]
    return lines + ([f"_{cap}_", ""] if cap else [])


def section(records: list[dict], charts_: dict | None) -> list[str]:
    """The three timings, the GPU against its CPU pair, the alignment penalty, per column the
    tables and the peak probe; then the time, GFLOP/s and speedup charts."""
    matmul = [r for r in records if r["benchmark"] == "matmul"]
    if not matmul:
        return []
    lines = ["## Matrix multiplication", "", INTRO, ""]
    if no_product_time(matmul):
        lines += [NO_PRODUCT_NOTE, ""]
    if crossings := crossover_lines(matmul):
        lines += ["### The GPU against the CPU", "", *crossings, ""]
    if aligned := alignment_lines(matmul):
        lines += ["### Alignment", "", *aligned, ""]
    by_column: dict[str, list[dict]] = {}  # one pass, not one per column
    for r in matmul:
        by_column.setdefault(column_of(r), []).append(r)
    for column in columns(matmul):
        col = by_column[column]
        lines += [f"### {column}", ""]
        if _sweep(col):
            lines += [table(col), ""]
        lines += [line + "\n" for line in peak_lines(col)]
    if charts_ is not None and sweep_records(matmul):
        lines += _charts(matmul, charts_)
    return lines


def speedup_series(records: list[dict]) -> list[dict]:
    """Every GPU series set against the CPU of the same machine and backend (`cpu_pairing`)."""
    return _pairs(records, cpu_pairing)
