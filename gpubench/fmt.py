"""Numbers in words, one rule each: the marks for a missing value, seconds, ratios, ranges,
durations, rates, and Markdown tables; the chapters and the report both write with these."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from gpubench.timing import busy_percent

MISSING, NOT_A_NUMBER = "–", "n/a"  # a value not measured; one that is no finite number
_NEGATIVE_ZERO = re.compile(r"^-(?=[0.,]*(?:$|[^0-9.,]))")  # "-0", "-0.0 s", "-0%"


def fmt(value, spec: str) -> str:
    """`value` formatted with `spec`: "–" when it is missing, "n/a" when it is infinite or NaN,
    and never "-0" (a negative that rounds to zero prints as zero)."""
    if value is None:
        return MISSING
    if isinstance(value, float) and not math.isfinite(value * (100 if spec.endswith("%") else 1)):
        return NOT_A_NUMBER
    text = format(value, spec)
    if sum(c.isdigit() for c in text) > 15:  # no reader counts 16 digits: 1.2e+308
        text = f"{value * 100:.3g}%" if spec.endswith("%") else f"{value:.3g}"
    return _NEGATIVE_ZERO.sub("", text)


def fmt_seconds(value: float | None) -> str:
    """Seconds to three significant figures ("0.0123 s", "12.3 s", "402 s"); "–" for none, "n/a"
    for no finite number (`fmt`'s rule)."""
    text = _three_figures(value)
    return text if text in (MISSING, NOT_A_NUMBER) else f"{text} s"


def _three_figures(value: float | None) -> str:
    """`value` to three significant figures, whole from 100 up ("0.0123", "12.3", "402")."""
    return fmt(value, ".0f" if value is not None and value >= 100 else ".3g")


def fmt_ratio(value: float | None) -> str:
    """A ratio's figure: two decimals ("1.45", "0.41"), two significant figures below 0.1
    ("0.0045"), so a large slowdown never reads "0.00"; "–" / "n/a" as `fmt` has them."""
    spec = ".2g" if value is not None and abs(value) < 0.1 and value != 0 else ".2f"
    return fmt(value, spec)


def fmt_time(seconds: float | None) -> str:
    """A duration in the unit that reads best: "126 µs", "1.42 ms", "0.344 s"; "–" for none,
    "n/a" for no finite number (`fmt`'s rule)."""
    if seconds is None or not math.isfinite(seconds):
        return fmt(seconds, "")
    for scale, unit in ((1e6, "µs"), (1e3, "ms"), (1, "s")):
        value = seconds * scale
        if float(f"{value:.3g}") < 1000 or unit == "s":
            return f"{_three_figures(value)} {unit}"
    return "–"  # not reached


def fmt_rate(gflops: float | None) -> str:
    """A throughput: "551 GFLOP/s", "72 TFLOP/s"; "–" for none, "n/a" for no finite number."""
    if gflops is None or not math.isfinite(gflops):
        return fmt(gflops, "")
    return (f"{fmt(gflops / 1e3, ',.0f')} TFLOP/s" if gflops >= 1e4
            else f"{fmt(gflops, ',.0f')} GFLOP/s")


def first_line(text: str | None) -> str:
    """The first line of an error message ("" for none)."""
    return (text or "").strip().partition("\n")[0]


def md_table(headers: list[str], rows: list[list], right: Sequence[str] = ()) -> str:
    """A GitHub-flavoured Markdown table; the columns named in `right` aligned right."""
    rule = "|" + "|".join("--:" if header in right else "---" for header in headers) + "|"
    lines = ["| " + " | ".join(headers) + " |", rule]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    """A table cell's text on one line, its own "|" escaped; a number or None as `fmt` has it."""
    if value is None or isinstance(value, float):
        value = fmt(value, "")
    return " ".join(str(value).split()).replace("|", "\\|")


def _figure(value: float, digits: int) -> str:
    """`value` to `digits` significant figures, trailing zeros kept ("1.0", "0.64"); whole
    numbers from 100 up ("118")."""
    if not math.isfinite(value):
        return NOT_A_NUMBER
    value += 0.0  # -0.0 prints as 0
    if value >= 1e15:  # no reader counts 16 digits: 1.2e+308
        return f"{value:.{digits}g}"
    if value >= 10 ** digits:
        return f"{value:.0f}"
    text = f"{value:#.{digits}g}"
    return text.rstrip(".") if "e" not in text else f"{value:.{digits}g}"


def fmt_range(low: float, high: float, unit: str = "s") -> str:
    """A range as "0.64–1.0 s": two significant figures, more where two would not tell the
    ends apart, joined by an en dash."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return NOT_A_NUMBER
    for digits in (2, 3, 4):
        ends = _figure(low, digits), _figure(high, digits)
        if ends[0] != ends[1] or low == high:
            break
    return f"{ends[0]}–{ends[1]}{f' {unit}' if unit else ''}"


def code(text: str) -> str:
    """`text` safe inside one pair of backticks on one line."""
    return " ".join(text.split()).replace("`", "'")


def number(value: float, digits: int = 0) -> str:
    """1930.4 -> "1,930"; digits after the point as asked; "n/a" for no finite number, and
    never "-0"."""
    if not math.isfinite(value):
        return NOT_A_NUMBER
    text = f"{value:,.{digits}f}" if abs(value) < 1e15 else f"{value:.3g}"
    return text.removeprefix("-") if not text.strip("-0.,") else text


def joules(value: float) -> str:
    """Energy in joules: "12.3 J", "1,930 J"."""
    return number(value, 1 if abs(value) < 10 else 0) + " J"


def busy_text(busy: float | None, run_mean: bool) -> str:
    """"6 %", "4 % (run mean)", or "n/a"."""
    if busy is None:
        return NOT_A_NUMBER
    return f"{number(busy)} %" + (" (run mean)" if run_mean else "")


_METHOD_WORDS = {"counter": "counter", "power_integral": "power x time"}


def telemetry_line(telemetry: dict | None, epochs: int | None = None,
         epoch_gpu_util: Sequence[float | None] | None = None) -> str:
    """One line for a chapter, e.g. "GPU: busy 91 %, 287 W mean, ...; CPU: 104 % of one core".

    Energy is per epoch when `epochs` is given, else for the whole region; GPU busy by its one
    definition (`timing.busy_percent`, from `epoch_gpu_util` where given), as the report's table.
    """
    if not telemetry:
        return "telemetry: not recorded"
    per = " per epoch" if epochs else ""
    if telemetry.get("source") == "nvml":
        parts = []
        busy = busy_percent(epoch_gpu_util, telemetry.get("gpu_util_percent_mean"))
        if busy[0] is not None:
            parts.append(f"busy {busy_text(*busy)}")
        if telemetry.get("power_watts_mean") is not None:
            parts.append(f"{number(telemetry['power_watts_mean'])} W mean")
        if telemetry.get("sm_clock_mhz_mean") is not None:
            parts.append(f"{number(telemetry['sm_clock_mhz_mean'])} MHz")
        energy = telemetry.get("energy_joules")
        if energy is not None:
            method = _METHOD_WORDS.get(telemetry.get("energy_method"), "?")
            parts.append(f"{joules(energy / (epochs or 1))}{per} ({method})")
        if telemetry.get("partial"):
            parts.append("partial: NVML failed during the run")
        gpu = "GPU: " + (", ".join(parts) or "no figures")
    else:
        gpu = f"GPU: none ({telemetry.get('reason') or 'not measured'})"
    cpu_parts = []
    if telemetry.get("cpu_util_percent_mean") is not None:
        cpu_parts.append(f"{number(telemetry['cpu_util_percent_mean'])} % of one core")
    if telemetry.get("cpu_energy_joules") is not None:
        cpu_parts.append(f"{joules(telemetry['cpu_energy_joules'] / (epochs or 1))}{per}"
                         " (RAPL)")
    cpu = "CPU: " + (", ".join(cpu_parts) or "not measured")
    return f"{gpu}; {cpu}"


def dtype_label(dtype: str | None, tf32: bool | None = None) -> str:
    """A float type as it ran: "float32 (TF32)" where float32 matmuls could use TF32 tensor cores
    (every table, legend and line says it so; `tf32` is the record's field)."""
    return f"{dtype} (TF32)" if dtype == "float32" and tf32 else str(dtype or MISSING)
