"""Speed_Factors in the report and the chapter: the variants' table, findings, crossover, chart."""

from __future__ import annotations

from collections.abc import Sequence

from gpubench import backends, factors, plots
from gpubench.fmt import MISSING, NOT_A_NUMBER, fmt, fmt_ratio, md_table
from gpubench.report.format import capped_text, explained_table, new_axes, prose
from gpubench.report.inputs import columns, model_title
from gpubench.report.telemetry import busy_cell
from gpubench.report.training import unstable
from gpubench.results import ok_records

HEADERS = ["device", "variant", "x vs baseline (min)", "median x", "interval", "effect",
           "images/s", "steps", "GFLOP/s", "% of matmul", "GPU busy", "test accuracy"]
MAX_CHART_ROWS = 40  # bars the report's chart draws (whole columns), so it stays under ~2000 px
OUTLIER_GAP = 30.0  # a bar this many times beyond the others is drawn apart, at the axis' edge


def describe(effect: dict) -> str:
    """An effect in words: "1.90x faster", "196x slower", "no clear effect", "not measured"."""
    speedup = effect.get("speedup")
    if speedup is None or effect.get("verdict") in ("not measured", "no clear effect"):
        return "not measured" if speedup is None else effect["verdict"]
    if speedup >= 1:
        return f"{fmt_ratio(speedup)}x faster"
    slower = 1 / speedup if speedup else float("inf")
    return f"{fmt(slower, '.0f' if slower >= 10 else '.2f')}x slower"


def _x(value: float | None) -> str:
    return MISSING if value is None else f"{fmt_ratio(value)}x"


def accuracy_text(row: dict) -> str:
    """Test accuracy, or why there is none."""
    return "accuracy not measured (time-boxed)" if row["time_boxed"] else fmt(
        row["test_accuracy"], ".4f")


def _cells(row: dict, matmul_records: Sequence[dict]) -> list[str]:
    record = row["record"]
    pct = factors.percent_of_matmul_peak(record, matmul_records)
    own = " †" if record.get("paired_baseline_seconds") and row["speedup"] is not None else ""
    effect = (f"{row['status']}: {record.get('error') or ''}" if row["status"] != "ok"
              else "(the reference)" if row["factor"] == "baseline" else describe(row))
    return [row["device"], row["label"], _x(row["speedup"]) + own, _x(row["median_speedup"]),
            MISSING if row["low"] is None else f"{fmt_ratio(row['low'])}–{fmt_ratio(row['high'])}",
            effect, fmt(row["samples_per_second"], ",.0f"),
            fmt(row["steps_measured"], "") + " (time-boxed)" * row["time_boxed"],
            fmt(row["achieved_gflops"], ".1f"),
            NOT_A_NUMBER if pct is None else fmt(pct / 100, ".0%") + "*" * (pct > 100),
            busy_cell(record), accuracy_text(row)]


def table(rows: Sequence[dict], matmul_records: Sequence[dict] = (), linked: bool = False) -> str:
    """A Markdown table of the variants, its notes under it (`linked`: headers to the glossary)."""
    body = [_cells(row, matmul_records) for row in rows]
    text = explained_table(HEADERS, body)[0] if linked else md_table(HEADERS, body)
    over = [f"{row['device']} {row['label']} ({fmt(pct, '.0f')} %)" for row in rows
            if (pct := factors.percent_of_matmul_peak(row["record"], matmul_records) or 0) > 100]
    own = [row["label"] for row in rows if row["record"].get("paired_baseline_seconds")]
    return "\n\n".join([text, *[prose("own baseline", own=", ".join(own))] * bool(own),
                        *[prose("over the peak", over=", ".join(over))] * bool(over)])


def findings(rows: Sequence[dict]) -> str:
    """A few sentences, from the measured rows, saying which factors matter on each device."""
    out = []
    for device in dict.fromkeys(row["device"] for row in rows):
        mine = [r for r in rows if r["device"] == device and r["factor"] != "baseline"
                and r["speedup"] is not None]
        faster = sorted((r for r in mine if r["verdict"] == "faster" and r["factor"] != "combined"),
                        key=lambda r: -r["speedup"])
        slower = sorted((r for r in mine if r["verdict"] == "slower"), key=lambda r: r["speedup"])
        unclear = ", ".join(r["label"] for r in mine if r["verdict"] == "no clear effect")
        parts = [faster and "faster: " + ", ".join(f"{r['label']} {_x(r['speedup'])}"
                                                   for r in faster),
                 slower and "slower: " + ", ".join(f"{r['label']} " + (
                     describe(r) if r["speedup"] < 0.2 else _x(r["speedup"])) for r in slower),
                 unclear and f"no clear effect: {unclear}"]
        said = "; ".join(filter(None, parts)) if mine else "nothing measured against a baseline"
        text = f"- **{device}**: {said}."
        if faster:
            text += f" The factor that matters most here is **{faster[0]['label']}**."
        if c := next((r for r in mine if r["factor"] == "combined"), None):
            base = " against its own paired baseline rounds" * bool(
                c["record"].get("paired_baseline_seconds"))
            text += " " + prose("combined", label=c["label"], x=_x(c["speedup"]), base=base,
                                verdict=c["verdict"])
            if faster and c["speedup"] < faster[0]["speedup"]:
                text += " " + prose("not additive", label=faster[0]["label"])
        out.append(text)
    if compiled := {r["record"].get("backend") for r in rows} & set(factors.ALWAYS_COMPILED):
        out.append(prose("always compiled", names=", ".join(n.upper() for n in sorted(compiled))))
    return "\n".join(out)


def crossover_text(records: Sequence[dict]) -> str:
    """One sentence on the CPU-GPU crossover batch size, or why there is none."""
    devices = {r["device"] for r in records if factors.is_factor_record(r)}
    if not any(d != "cpu" for d in devices):
        backend = next((r.get("backend") for r in records if factors.is_factor_record(r)),
                       None) or "tensorflow"
        env = backends.env_label(backend, True) if backend in backends.SUPPORTED else "gpu"
        return prose("no gpu crossover", env=env, hint=prose("no gpu hint"))
    if "cpu" not in devices:
        return "The CPU was not measured here (devices), so there is no crossover to show."
    if (size := factors.crossover_batch_size(records)) is None:
        return "The GPU beat the CPU at none of the batch sizes measured."
    return f"CPU-GPU crossover: the GPU trains faster than the CPU from batch size **{size}** on."


def plot(effects: list[dict], ax=None):
    """Each variant's speed against its baseline (`factors.effects` rows), on a log axis."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: PLC0415

    rows = [e for e in effects if e["speedup"] is not None]
    ax = plots.axes(ax, (8, 0.35 * len(rows) + 1.5))
    values = sorted(e["speedup"] for e in rows) or [1.0]
    middle = len(values) // 2  # the values that no gap of OUTLIER_GAP parts from the middle
    low = next((values[i] for i in range(middle, 0, -1)
                if values[i] / max(values[i - 1], 1e-300) > OUTLIER_GAP), values[0])
    high = next((values[i] for i in range(middle, len(values) - 1)
                 if values[i + 1] / max(values[i], 1e-300) > OUTLIER_GAP), values[-1])
    shown = [min(max(e["speedup"], low / 2), high * 2) for e in rows]
    ax.barh(range(len(rows)), shown, capsize=2,
            xerr=[[max(s - e["low"], 0) for s, e in zip(shown, rows, strict=True)],
                  [max(min(e["high"], high * 2) - s, 0) for s, e in zip(shown, rows, strict=True)]],
            color=["tab:blue" if e["clear"] else "lightgrey" for e in rows])
    cut = [(y, s, e) for y, (s, e) in enumerate(zip(shown, rows, strict=True)) if s != e["speedup"]]
    for y, s, e in cut:
        ax.annotate(f"{describe(e)}, cut", (s * (0.95 if s > 1 else 1.05), y), va="center",
                    fontsize="small", ha="right" if s > 1 else "left", color="darkred")
    several = len({e.get("column") for e in rows}) > 1
    ax.set_yticks(range(len(rows)), [(f"{e['column']} · " if several else "")
                                     + f"{e['device']}: {e['value']}"
                                     + " †" * bool(e["record"].get("paired_baseline_seconds"))
                                     for e in rows], fontsize="small")
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set(xscale="log", xlim=(min(low / 3, 0.5), max(high * 3, 2)))
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    cut_words = "; \"cut\": drawn to the edge, far beyond the others" * bool(cut)
    ax.set(xlabel=f"x the baseline's speed (log scale; grey: no clear effect; †: against its own "
                  f"paired baseline rounds{cut_words})", title="Speed factors")
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def _variant(record: dict) -> str:  # as the factors table names it
    label = next((row["label"] for row in factors.effects([record])), record["factor"])
    return f"Speed_Factors {model_title(record['model'])}, variant {label}"


def section(records: list[dict], charts: dict | None) -> list[str]:
    """The "Speed factors" section from Speed_Factors records (gpubench.factors' numbers)."""
    if not any(factors.is_factor_record(r) for r in records):
        return []
    lines = ["## Speed factors", "", prose("factors"), ""]
    all_rows, drawn, tabled = [], [], 0  # the chart: whole columns, the first MAX_CHART_ROWS rows
    for column in columns(records):
        mine = [r for r in records if r["_column"] == column]
        if not (rows := factors.effects(mine)):
            continue
        tabled += 1
        if len(drawn) == tabled - 1 and (not drawn or len(all_rows) + len(rows) <= MAX_CHART_ROWS):
            all_rows += [row | {"column": column} for row in rows]
            drawn.append(column)
        lines += [f"### {column}", "", table(rows, ok_records(mine, "matmul"), linked=True), "",
                  findings(rows), ""]
        if (size := factors.crossover_batch_size(mine)) is not None:
            lines += [f"CPU–GPU crossover batch size: the GPU trains faster from batch {size}.", ""]
    if flagged := unstable([r for r in records if factors.is_factor_record(r)],
                           ("steady rounds", prose("unstable rounds")), _variant):
        lines += [prose("varied rounds"), "", *flagged, ""]
    if charts is None:
        return lines
    charts["speed_factors.png"] = plot(all_rows, new_axes((8, 0.35 * len(all_rows) + 1.5))).figure
    cap = capped_text(drawn, tabled)
    return lines + ["![Speed factors](speed_factors.png)", "", *[cap, ""] * bool(cap)]
