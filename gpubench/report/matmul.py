"""Matrix multiplication in the report: three named timings, crossovers, peaks, the charts."""

from __future__ import annotations

from gpubench import plots
from gpubench.backends import backend_title
from gpubench.fmt import fmt_rate, fmt_time
from gpubench.plots import BOOK, CALL, PRODUCT, column_of, label_of, sweep_records
from gpubench.report.format import capped, explained_table, new_axes, new_figure, prose
from gpubench.report.inputs import backend_of, baselines, columns, crossover, loaded, pairings
from gpubench.results import PEAK_METHOD, dtype_of, peak_record


def crossover_words(points: list[tuple[int, float]], unsure=(), noisy=()) -> str:
    """Where the GPU wins over the paired sizes, those whose spread could reverse who wins left
    out (`plots.could_reverse`), in words; the noisy sizes kept are named."""
    kept = sorted(p for p in points if p[0] not in unsure)
    left = f" ({', '.join(map(str, sorted(unsure)))} left out: noisy)" if unsure else ""
    if also := sorted(set(noisy) - set(unsure)):
        sizes = ("every paired size" if len(also) == len(points)
                 else f"n = {', '.join(map(str, also))}")
        left += f" ({sizes} noisy, kept: the spread there cannot reverse who wins)"
    if not kept:
        return f"at no size read: the spread could reverse who wins at every paired size{left}"
    span = f"n = {kept[0][0]}" + (f"–{kept[-1][0]}" if len(kept) > 1 else "")
    if (size := crossover(kept)) is not None:
        return (f"at every paired size ({span}){left}" if size == kept[0][0]
                else f"from n = {size} ({span} paired){left}")
    if wins := [str(n) for n, speedup in kept if speedup > 1]:
        return f"only at n = {', '.join(wins)}, not at the largest paired (n = {kept[-1][0]}){left}"
    return f"at no paired size ({span}){left}"


def crossover_lines(records: list[dict]) -> list[str]:
    """Per GPU column its pairing, then per device and dtype where the GPU wins by each timing."""
    pairs, bases, sweep = pairings(records), baselines(records), sweep_records(records)
    series = plots.speedup_series(records, pairs)
    lines = []
    for column in [c for c in columns(records) if any(
            column_of(r) == c and r["device"].startswith("gpu") for r in sweep)]:
        cpu, base = pairs.get(column), bases.get(column)
        title = backend_title(backend_of(next(r for r in sweep if column_of(r) == column)))
        how = "same env" if cpu == column else "baseline" if cpu else "none" if base else "no CPU"
        lines.append(prose(f"pairing {how}", column=column, cpu=cpu, base=base, title=title))
        mine = [s for s in series if s["column"] == column]
        for device, dtype in sorted({(s["device"], s["dtype"]) for s in mine}):
            found = {s["quantity"]: s for s in mine if (s["device"], s["dtype"]) == (device, dtype)}
            cpu_dtype = next(iter(found.values()))["cpu_dtype"]
            paired = {p[0] for s in found.values() for p in s["points"]}
            alone = ", ".join(str(n) for n in sorted({r["size"] for r in sweep if (
                column_of(r), r["device"], label_of(r)) == (column, device, dtype)} - paired))
            unlike = f" (not like for like: {dtype} against the CPU's {cpu_dtype})"
            parts = [crossover_words(*(found[q][k] for k in ("points", "unsure", "noisy")))
                     + " " + prose(f"wins by {q}") for q in (PRODUCT, CALL, BOOK) if q in found]
            lines.append(prose("gpu wins", device=device, dtype=dtype, cpu=cpu_dtype,
                               unlike=unlike * (dtype != cpu_dtype), paired=len(paired),
                               alone=f", no CPU partner at n = {alone}" * bool(alone),
                               parts="; ".join(parts)))
    return lines


def table(records: list[dict]) -> str:
    """Per device and dtype, a table by size (`plots.matmul_tables`), loaded sizes flagged."""
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


def _charts(matmul: list[dict], charts: dict) -> list[str]:  # each where it has data, else why
    matmul, cap = capped(matmul, "These charts draw")
    left, right = new_figure((14, 7)).subplots(1, 2)
    plots.plot(matmul, "seconds", left)
    plots.plot_book(matmul, right)
    for ax in (left, right):  # each panel's legend below it, clear of the lines
        if ax.get_legend():
            ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12))
    charts["matmul_time.png"] = left.figure
    lines = ["![Measured timings and the book's single timing against matrix size]"
             "(matmul_time.png)", ""]
    if (ax := plots.plot(matmul, "gflops", new_axes())) is not None:
        charts["matmul_gflops.png"] = ax.figure
        lines += ["![GFLOP/s against matrix size](matmul_gflops.png)", ""]
    else:
        lines += [prose("no gflops chart"), ""]
    if (ax := plots.plot_speedup(matmul, new_axes(), pairings(matmul))) is not None:
        charts["matmul_speedup.png"] = ax.figure
        lines += ["![GPU speedup](matmul_speedup.png)", ""]
    elif any(r["device"].startswith("gpu") for r in sweep_records(matmul)):
        lines += [prose("no speedup chart"), ""]
    return lines + [cap, ""] * bool(cap)


def section(records: list[dict], charts: dict | None) -> list[str]:
    """The timings, the GPU against its CPU, the tables, peaks, the book's timing, the charts."""
    if not (matmul := [r for r in records if r["benchmark"] == "matmul"]):
        return []
    lines = ["## Matrix multiplication", "", prose("matmul"), ""]
    rigorous = [r for r in sweep_records(matmul) if r["method"] == "rigorous"]
    if rigorous and all(r.get("seconds") is None for r in rigorous):
        lines += [prose("no product time"), ""]
    if found := crossover_lines(matmul):
        lines += ["### The GPU against the CPU", "", *found, ""]
    for column in columns(matmul):
        col = [r for r in matmul if column_of(r) == column]
        peaks = filter(None, (peak_record(col, *key) for key in sorted({
            (r["env"], r["device"], dtype_of(r)) for r in col if r.get("method") == PEAK_METHOD})))
        lines += [f"### {column}", "", *([table(col), ""] if sweep_records(col) else []),
                  *(prose("peak", size=r["size"], device=r["device"], dtype=label_of(r),
                          rate=fmt_rate(r["gflops"])) + "\n" for r in peaks)]
    gpu = [r for r in sweep_records(matmul) if r["device"] != "cpu"]
    if book := sorted(r["seconds"] for r in gpu if r["method"] == "book"):
        call = sorted(r["call_seconds"] for r in gpu if r.get("call_seconds"))
        alone = (f", while one product called alone takes {fmt_time(call[0])}–"
                 f"{fmt_time(call[-1])}" if call else "")
        lines += [prose("book timing", gpu=plots.BOOK_DEVICES["gpu"], alone=alone,
                        book=f"{fmt_time(book[0])}–{fmt_time(book[-1])}"), ""]
    return lines + (_charts(matmul, charts) if charts is not None and sweep_records(matmul) else [])

