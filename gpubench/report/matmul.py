"""Matrix multiplication in the report: three timings, each named for what it is, the GPU against
the CPU of the same machine and backend (crossovers over paired sizes, noisy ones left out), the
alignment penalty, the peak probe, the book's single timing explained, and the charts."""

from __future__ import annotations

from gpubench import plots
from gpubench.backends import backend_title
from gpubench.fmt import fmt_rate, fmt_ratio, fmt_time
from gpubench.plots import BOOK, CALL, PRODUCT, column_of, label_of, sweep_records
from gpubench.report import charts
from gpubench.report.format import explained_table
from gpubench.report.records import backend_of, baselines, columns, crossover, loaded, pairings
from gpubench.results import PEAK_METHOD, dtype_of, ok_records, peak_record

# How each timing is named in a crossover sentence ("the GPU wins from n = 1000 when ...").
_WHEN = {PRODUCT: "when products stream (product time: the streaming crossover)",
         CALL: "for one product called alone (call latency)",
         BOOK: "by the book's single timing (set-up included)"}
INTRO = ("Three timings, each named for what it is: the **product time** (what the arithmetic "
         "costs; GFLOP/s and the % of peak use it), the **call latency** (one product from the "
         "call until its result is ready on the device (a sync): what a program that multiplies "
         "once pays) and the **book's single timing** (set-up included). The glossary defines "
         "each.")
NO_PRODUCT_NOTE = ("> These records hold no product time: gpubench before record schema 4 timed "
                   "one product per sync, which is the call latency. Their rigorous timings are "
                   "shown as call latency, and no GFLOP/s, % of peak or streaming crossover is "
                   "derived from them.")


def speedup_series(records: list[dict]) -> list[dict]:
    """Every GPU series set against the CPU of the same machine and backend (`pairings`)."""
    pairs = pairings(records)
    return plots.speedup_series(records, lambda _, column: pairs.get(column))


def crossover_words(points: list[tuple[int, float]], noisy=()) -> str:
    """Where the GPU wins over the paired sizes that are not noisy, in words."""
    kept = sorted(p for p in points if p[0] not in noisy)
    left = f" ({', '.join(map(str, sorted(noisy)))} left out: noisy)" if noisy else ""
    if not kept:
        return f"at no size read: every paired size was noisy{left}"
    span = f"n = {kept[0][0]}" + (f"–{kept[-1][0]}" if len(kept) > 1 else "")
    if (size := crossover(kept)) is not None:
        return (f"at every paired size ({span}){left}" if size == kept[0][0]
                else f"from n = {size} ({span} paired){left}")
    if wins := [str(n) for n, speedup in kept if speedup > 1]:
        return f"only at n = {', '.join(wins)}, not at the largest paired (n = {kept[-1][0]}){left}"
    return f"at no paired size ({span}){left}"


def pairing_text(records: list[dict], column: str, cpu: str | None) -> str:
    """Which CPU timings `column`'s GPU timings are set against, and why those."""
    if cpu == column:
        return f"{column}'s GPU timings against the CPU timings of the same env, as the book did"
    if cpu is not None:
        title = backend_title(backend_of(next(r for r in records if column_of(r) == column)))
        return (f"{column}'s GPU timings against the CPU timings of {cpu}, the same machine's "
                f"{title} CPU env ({column} timed no CPU)")
    other = baselines(records).get(column)
    return (f"{column} timed no CPU, and " + (f"{other} timed no matmul on the CPU" if other
            else "this machine has no CPU env of the same backend in these runs")
            + ": no speedup and no crossover to give")


def crossover_lines(records: list[dict]) -> list[str]:
    """Per GPU column: the pairing, then per device and dtype how many sizes paired, which had no
    CPU partner, and where the GPU wins by each timing, noisy sizes left out."""
    series, pairs, sweep = speedup_series(records), pairings(records), sweep_records(records)
    lines = []
    for column in [c for c in columns(records) if any(
            column_of(r) == c and r["device"].startswith("gpu") for r in sweep)]:
        lines.append(f"- Pairing: {pairing_text(records, column, pairs.get(column))}.")
        mine = [s for s in series if s["column"] == column]
        for device, dtype in sorted({(s["device"], s["dtype"]) for s in mine}):
            found = {s["quantity"]: s for s in mine if (s["device"], s["dtype"]) == (device, dtype)}
            cpu_dtype = next(iter(found.values()))["cpu_dtype"]
            paired = {p[0] for s in found.values() for p in s["points"]}
            alone = sorted({r["size"] for r in sweep if column_of(r) == column
                            and (r["device"], label_of(r)) == (device, dtype)} - paired)
            parts = [f"{crossover_words(found[q]['points'], found[q]['noisy'])} {_WHEN[q]}"
                     for q in (PRODUCT, CALL, BOOK) if q in found]
            lines.append(
                f"- **{device} {dtype} vs CPU {cpu_dtype}**"
                + (f" (not like for like: {dtype} against the CPU's {cpu_dtype})"
                   if dtype != cpu_dtype else "") + f": {len(paired)} sizes paired"
                + (f", no CPU partner at n = {', '.join(map(str, alone))}" if alone else "")
                + "; the GPU wins " + "; ".join(parts) + ".")
    return lines


def table(records: list[dict]) -> str:
    """Per device and dtype, a table by size (`plots.matmul_tables`), its headers linked to the
    glossary, a size measured on a loaded machine flagged."""
    blocks: list[str] = []
    flagged = {(r["device"], label_of(r), r["size"]): loaded(r)
               for r in records if r["benchmark"] == "matmul" and loaded(r)}
    for title, headers, body in plots.matmul_tables(records):
        device, _, dtype = title.partition(" at ")
        for row in body:
            if why := flagged.get((device, dtype, int(row[0].split()[0]))):
                row[0] += f" (**loaded**: {why})"
        blocks += [f"**{title}**", "", *explained_table(headers, body)]
    return "\n".join(blocks).rstrip()


def alignment_lines(records: list[dict]) -> list[str]:
    """The alignment penalty: each aligned size's product GFLOP/s beside its book size's."""
    ok = [r for r in ok_records(records, "matmul")
          if r["method"] == "rigorous" and r.get("gflops") and r.get("seconds") is not None]
    by_key = {(column_of(r), r["device"], label_of(r), r["size"]): r for r in ok}
    lines = []
    for r in sorted((r for r in ok if r.get("aligned_from") is not None), key=lambda r: (
            column_of(r), r["device"], label_of(r), r["size"])):
        if book := by_key.get((column_of(r), r["device"], label_of(r), r["aligned_from"])):
            ratio = r["gflops"] / book["gflops"]
            lines.append(f"- {r['device']} {label_of(r)}: n = {book['size']} ran at "
                         f"{fmt_rate(book['gflops'])}, n = {r['size']} (aligned) at "
                         f"{fmt_rate(r['gflops'])} ({fmt_ratio(ratio)}x): " + (
                             "sizes that are not a multiple of 8 leave the tensor cores' fast "
                             "path." if ratio > 1.1 else "alignment made no clear difference."))
    return lines


def book_lines(records: list[dict]) -> list[str]:
    """Why the book's single timing, and the book's own GT 720 lines, mislead at small sizes,
    with this run's figures."""
    gpu = [r for r in sweep_records(records) if r["device"] != "cpu"]
    book = sorted(r["seconds"] for r in gpu if r["method"] == "book")
    call = sorted(r["call_seconds"] for r in gpu if r.get("call_seconds"))
    if not book:
        return []
    return ["**The book's single timing and its GT 720 lines.** The grey dashed lines of the time "
            f"chart are the book's own: its {plots.BOOK_DEVICES['gpu']} and its CPU, one "
            "TensorFlow 1 `sess.run` per size, session creation and random matrices included "
            "but no compiling. The book-way timing here includes the same set-up and, on JAX or a "
            "compiled backend, compiling each new shape: costs that grow like n² or not at all, "
            "so a JAX or compiled first call sits above the GT 720 at small sizes, which says "
            "nothing about the arithmetic. Here the GPU's book-way timings are "
            f"{fmt_time(book[0])}–{fmt_time(book[-1])}" + (
                f", while one product called alone takes {fmt_time(call[0])}–{fmt_time(call[-1])}"
                if call else "") + ".", ""]


def peak_lines(records: list[dict]) -> list[str]:
    """A line per peak-probe record: the GFLOP/s "% of matmul" and "% of achievable" divide by."""
    keys = sorted({(r["env"], r["device"], dtype_of(r)) for r in ok_records(records, "matmul")
                   if r.get("method") == PEAK_METHOD})
    return [f"Peak (the peak probe, n = {r['size']}): {r['device']} at {label_of(r)}: "
            f"{fmt_rate(r['gflops'])}; every \"% of matmul\" and \"% of achievable\" of this "
            "device and dtype divides by it.\n" for r in filter(None, (
                peak_record(records, *key) for key in keys))]


def _charts(matmul: list[dict], charts_: dict) -> list[str]:
    """The time, GFLOP/s and speedup charts of the first columns (`charts.capped`), each only
    where it has data (else a sentence why)."""
    matmul, cap = charts.capped(matmul, "These charts")
    fig = plots.new_figure()
    fig.set_size_inches(14, 7)
    left, right = fig.subplots(1, 2)
    plots.plot(matmul, "seconds", left)
    plots.plot_book(matmul, right)
    for ax in (left, right):  # each panel's legend below it, clear of the lines
        if ax.get_legend():
            ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12))
    charts_["matmul_time.png"] = fig
    lines = ["![Measured timings and the book's single timing against matrix size]"
             "(matmul_time.png)", ""]
    if (ax := plots.plot(matmul, "gflops", plots.new_axes())) is not None:
        charts_["matmul_gflops.png"] = ax.figure
        lines += ["![GFLOP/s against matrix size](matmul_gflops.png)", ""]
    else:
        lines += ["No GFLOP/s chart: no product time was measured, and a GFLOP/s from the call "
                  "latency or the book's timing would measure overheads, not arithmetic.", ""]
    pairs = pairings(matmul)
    if (ax := plots.plot_speedup(matmul, plots.new_axes(), lambda _, c: pairs.get(c))) is not None:
        charts_["matmul_speedup.png"] = ax.figure
        lines += ["![GPU speedup](matmul_speedup.png)", ""]
    elif any(r["device"].startswith("gpu") for r in sweep_records(matmul)):
        lines += ["No speedup chart: no GPU timing pairs with a CPU timing of the same machine "
                  "and backend (see the pairing above).", ""]
    return lines + ([f"_{cap}_", ""] if cap else [])


def section(records: list[dict], charts_: dict | None) -> list[str]:
    """The three timings, the GPU against its CPU pair, the alignment penalty, per column the
    tables and the peak probe, why the book's timing misleads; then the charts."""
    if not (matmul := [r for r in records if r["benchmark"] == "matmul"]):
        return []
    lines = ["## Matrix multiplication", "", INTRO, ""]
    rigorous = [r for r in sweep_records(matmul) if r["method"] == "rigorous"]
    if rigorous and all(r.get("seconds") is None for r in rigorous):
        lines += [NO_PRODUCT_NOTE, ""]
    if crossings := crossover_lines(matmul):
        lines += ["### The GPU against the CPU", "", *crossings, ""]
    if aligned := alignment_lines(matmul):
        lines += ["### Alignment", "", *aligned, ""]
    for column in columns(matmul):
        col = [r for r in matmul if column_of(r) == column]
        lines += [f"### {column}", "", *([table(col), ""] if sweep_records(col) else []),
                  *peak_lines(col)]
    lines += book_lines(matmul)
    return lines + (_charts(matmul, charts_) if charts_ is not None and sweep_records(matmul)
                    else [])
