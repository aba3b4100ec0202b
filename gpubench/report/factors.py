"""Speed_Factors in the report and the chapter: the table of variants, the findings and the
crossover in words, and the chart. The numbers (effects, compare, crossover_batch_size,
percent_of_matmul_peak) are `gpubench.factors`'; this module only shows them."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpubench import backends, factors, plots
from gpubench.fmt import busy_text, fmt, fmt_ratio, md_table
from gpubench.machine import ENVS_HINT
from gpubench.report import charts
from gpubench.report import telemetry as telemetry_text
from gpubench.report.format import FACTOR_NOTES, column_note, table_headers
from gpubench.report.records import columns
from gpubench.results import ok_records


def describe(effect: dict) -> str:
    """An effect in words: "1.90x faster", "196x slower", "no clear effect", "not measured"."""
    speedup = effect.get("speedup")
    if speedup is None or effect.get("verdict") == "not measured":
        return "not measured"
    if effect["verdict"] == "no clear effect":
        return "no clear effect"
    if speedup >= 1:
        return f"{fmt_ratio(speedup)}x faster"
    slower = 1 / speedup if speedup else math.inf
    return f"{fmt(slower, '.0f' if slower >= 10 else '.2f')}x slower"



def _fmt_x(value: float | None) -> str:
    return "n/a" if value is None else f"{fmt_ratio(value)}x"


def accuracy_text(row: dict) -> str:
    """Test accuracy, or why there is none."""
    if row["time_boxed"]:
        return "accuracy not measured (time-boxed)"
    if row["test_accuracy"] is None:
        return "n/a"
    return fmt(row["test_accuracy"], ".4f")


def _effect_text(row: dict) -> str:
    if row["status"] != "ok":
        return f"{row['status']}: {row['record'].get('error') or ''}"
    return "(the reference)" if row["factor"] == "baseline" else describe(row)


def _cells(row: dict, matmul_records: Sequence[dict]) -> list[str]:
    """One variant's cells of `table`."""
    interval = ("n/a" if row["low"] is None
                else f"{fmt_ratio(row['low'])}–{fmt_ratio(row['high'])}")
    pct = factors.percent_of_matmul_peak(row["record"], matmul_records)
    rate, gflops, steps = row["samples_per_second"], row["achieved_gflops"], row["steps_measured"]
    return [row["device"], row["label"], _fmt_x(row["speedup"]), _fmt_x(row["median_speedup"]),
            interval, _effect_text(row), "n/a" if rate is None else fmt(rate, ",.0f"),
            f"{'n/a' if steps is None else steps}{' (time-boxed)' if row['time_boxed'] else ''}",
            "n/a" if gflops is None else fmt(gflops, ".1f"),
            "n/a" if pct is None else fmt(pct / 100, ".0%") + ("*" if pct > 100 else ""),
            _busy_text(row["record"]), accuracy_text(row)]


HEADERS = ["device", "variant", "x vs baseline (min)", "median x", "interval", "effect",
           "images/s", "steps", "GFLOP/s", "% of matmul", "GPU busy", "test accuracy"]


def _table_only(rows: Sequence[dict], matmul_records: Sequence[dict]) -> str:
    return md_table(HEADERS, [_cells(row, matmul_records) for row in rows])


def peak_note(rows: Sequence[dict], matmul_records: Sequence[dict] = ()) -> str:
    """Why a "% of matmul" is over 100 % (marked "*" in `table`), "" when none is."""
    over = [f"{row['device']} {row['label']} ({fmt(pct, '.0f')} %)" for row in rows
            if (pct := factors.percent_of_matmul_peak(row["record"], matmul_records) or 0) > 100]
    if not over:
        return ""
    return ("\\* Over 100 % of the matmul peak: " + ", ".join(over) + ". The model's GFLOP/s "
            "counts 3 x 2 x the multiply-adds of its Dense and Conv2D layers, an estimate of "
            "the work, while the peak is one measured matrix product; an estimate above what "
            "the kernels do, or a probe that met a slower device (clocks, a busy machine), puts "
            "the share over 100 %. Read it as \"at the peak\", not beyond it.")


def table(rows: Sequence[dict], matmul_records: Sequence[dict] = ()) -> str:
    """A Markdown table, a line per variant and device: x vs baseline, effect, GPU busy %,
    accuracy; with the note saying why where a share of the matmul peak is over 100 %."""
    note = peak_note(rows, matmul_records)
    return _table_only(rows, matmul_records) + (f"\n\n{note}" if note else "")


def _busy_text(record: dict) -> str:
    """A variant's GPU busy % by the report's one definition, "n/a" on a CPU or without NVML."""
    return busy_text(*telemetry_text.gpu_busy(record))


def findings(rows: Sequence[dict]) -> str:
    """A few sentences, from the measured rows, saying which factors matter on each device."""
    out = []
    for device in dict.fromkeys(row["device"] for row in rows):
        mine = [r for r in rows if r["device"] == device and r["factor"] != "baseline"
                and r["speedup"] is not None]
        if not mine:
            out.append(f"- **{device}**: nothing measured against a baseline.")
            continue
        faster = sorted((r for r in mine if r["verdict"] == "faster" and r["factor"] != "combined"),
                        key=lambda r: -r["speedup"])
        slower = sorted((r for r in mine if r["verdict"] == "slower"), key=lambda r: r["speedup"])
        neutral = [r["label"] for r in mine if r["verdict"] == "no clear effect"]
        parts = []
        if faster:
            parts.append("faster: " + ", ".join(f"{r['label']} {_fmt_x(r['speedup'])}"
                                                for r in faster))
        if slower:
            parts.append("slower: " + ", ".join(
                f"{r['label']} {describe(r)}" if r["speedup"] < 0.2
                else f"{r['label']} {_fmt_x(r['speedup'])}" for r in slower))
        if neutral:
            parts.append("no clear effect: " + ", ".join(neutral))
        combined = [r for r in mine if r["factor"] == "combined"]
        text = f"- **{device}**: " + "; ".join(parts) + "."
        if faster:
            text += f" The factor that matters most here is **{faster[0]['label']}**."
        if combined:
            c = combined[0]
            text += (f" Together, {c['label']} runs at {_fmt_x(c['speedup'])} the book's setting "
                     f"({c['verdict']}).")
            if faster and c["speedup"] < faster[0]["speedup"]:
                text += (f" That is less than {faster[0]['label']} alone: these factors do not "
                         "add up here.")
        out.append(text)
    compiled = sorted({r["record"].get("backend") for r in rows} & set(factors.ALWAYS_COMPILED))
    if compiled:
        out.append("- **XLA**: always on with " + ", ".join(n.upper() for n in compiled)
                   + ": every row ran compiled, so XLA is not a factor here.")
    return "\n".join(out)


def crossover_text(records: Sequence[dict]) -> str:
    """One sentence on the CPU-GPU crossover batch size, or why there is none."""
    devices = {r["device"] for r in records if factors.is_factor_record(r)}
    if not any(d != "cpu" for d in devices):
        backend = next((r.get("backend") for r in records if factors.is_factor_record(r)),
                       "tensorflow") or "tensorflow"
        env = f"{backends.LABEL_PREFIX.get(backend, '')}gpu"
        return ("No GPU in this environment: no CPU-GPU crossover batch size. Run this notebook "
                f"in the {env} env to get it (create it with {ENVS_HINT}).")
    if "cpu" not in devices:
        return "The CPU was not measured here (devices), so there is no crossover to show."
    size = factors.crossover_batch_size(records)
    if size is None:
        return "The GPU beat the CPU at none of the batch sizes measured."
    return f"CPU-GPU crossover: the GPU trains faster than the CPU from batch size **{size}** on."




MAX_CHART_ROWS = 40  # bars the report's chart draws (whole columns), so it stays under ~2000 px


def plot(effects: list[dict], ax=None):
    """Speed of each variant against its device's baseline (factors.effects rows), with interval."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: PLC0415

    rows = [e for e in effects if e["speedup"] is not None]
    ax = plots.axes(ax, (8, 0.35 * len(rows) + 1.5))
    y = range(len(rows))
    ax.barh(list(y), [e["speedup"] for e in rows],
            xerr=[[e["speedup"] - e["low"] for e in rows],
                  [e["high"] - e["speedup"] for e in rows]],
            color=["tab:blue" if e["clear"] else "lightgrey" for e in rows], capsize=2)
    several = len({e.get("column") for e in rows}) > 1
    labels = [(f"{e['column']} · " if several else "") + f"{e['device']}: {e['value']}"
              for e in rows]
    ax.set_yticks(list(y), labels, fontsize="small")
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


def section(records: list[dict], charts_: dict | None) -> list[str]:
    """The "Speed factors" section from Speed_Factors records (gpubench.factors' numbers)."""
    if not any(r["benchmark"] == "train" and r.get("factor") for r in records):
        return []
    lines = ["## Speed factors", "",
             "Each variant changes one factor of the book's setting on the same device, measured "
             "in interleaved rounds (round r of every variant, then round r+1), so that a machine "
             "that slows down for a while slows them all alike.", ""]
    all_rows, drawn, tabled = [], [], 0  # the chart: whole columns, the first MAX_CHART_ROWS rows
    by_column: dict[str, list[dict]] = {}
    for r in records:
        by_column.setdefault(r["_column"], []).append(r)
    for column in columns(records):
        mine = by_column[column]
        rows = factors.effects(mine)
        if not rows:
            continue
        tabled += 1
        if len(drawn) == tabled - 1 and (not drawn or len(all_rows) + len(rows) <= MAX_CHART_ROWS):
            all_rows += [row | {"column": column} for row in rows]
            drawn.append(column)
        size = factors.crossover_batch_size(mine)
        matmul = ok_records(mine, "matmul")
        text, note = _table_only(rows, matmul), peak_note(rows, matmul)
        lines += [f"### {column}", "", text, "", column_note(table_headers(text), FACTOR_NOTES),
                  "", *([note, ""] if note else []), findings(rows), ""]
        if size is not None:
            lines += [f"CPU–GPU crossover batch size: the GPU trains faster from batch {size}.", ""]
    if charts_ is None:
        return lines
    ax = plot(all_rows, ax=plots.new_axes((8, 0.35 * len(all_rows) + 1.5)))
    charts_["speed_factors.png"] = ax.figure
    cap = charts.capped_text(drawn, tabled)
    return lines + ["![Speed factors](speed_factors.png)", "", *([f"_{cap}_", ""] if cap else [])]
