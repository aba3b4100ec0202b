"""Numbers and text in words, one rule each; the chapters and the report write with these."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from gpubench.timing import busy_percent

MISSING, NOT_A_NUMBER = "–", "n/a"  # a value not measured; one that is no finite number
TEXT_CAP = 300  # characters of a record's text (an error, a reason) that a reader is shown
ENERGY_METHODS = {"counter": " (counter)", "power_integral": " (power x time)"}  # GPU energy
_NEGATIVE_ZERO = re.compile(r"^-(?=[0.,]*(?:$|[^0-9.,]))")  # "-0", "-0.0 s", "-0%"


def fmt(value, spec: str) -> str:
    """`value` formatted with `spec`: MISSING for None, NOT_A_NUMBER for inf or NaN, never "-0"."""
    if value is None:
        return MISSING
    if isinstance(value, float) and not math.isfinite(value * (100 if spec.endswith("%") else 1)):
        return NOT_A_NUMBER
    text = format(value, spec)
    if not isinstance(value, str) and sum(c.isdigit() for c in text) > 15:  # 1.2e+308, not 309
        text = f"{value * 100:.3g}%" if spec.endswith("%") else f"{value:.3g}"
    return _NEGATIVE_ZERO.sub("", text)


def _with(text: str, unit: str) -> str:  # `text` and its unit, or the mark alone
    return text if text in (MISSING, NOT_A_NUMBER) else f"{text} {unit}"


def fmt_seconds(value: float | None) -> str:
    """Seconds to three significant figures, whole from 100 up: "0.0123 s", "12.3 s", "402 s"."""
    return _with(fmt(value, ".0f" if value is not None and value >= 100 else ".3g"), "s")


def fmt_ratio(value: float | None) -> str:
    """A ratio: two decimals ("1.45"), two significant figures below 0.1 ("0.0045")."""
    return fmt(value, ".2g" if value is not None and abs(value) < 0.1 and value != 0 else ".2f")


def fmt_time(seconds: float | None) -> str:
    """A duration in the unit that reads best: "126 µs", "344 ms", "1.2 s"."""
    for scale, unit in ((1e6, "µs"), (1e3, "ms")):
        if seconds is not None and math.isfinite(seconds) and abs(seconds) * scale < 999.5:
            return fmt_seconds(seconds * scale)[:-1] + unit
    return fmt_seconds(seconds)


def fmt_rate(gflops: float | None) -> str:
    """A throughput: "551 GFLOP/s", "72 TFLOP/s"."""
    big = gflops is not None and gflops >= 1e4
    return _with(fmt(gflops / 1e3 if big else gflops, ",.0f"), "TFLOP/s" if big else "GFLOP/s")


def number(value: float | None, digits: int = 0) -> str:
    """1930.4 -> "1,930"; digits after the point as asked."""
    return fmt(value, f",.{digits}f")


def joules(value: float | None) -> str:
    """Energy in joules: "12.3 J", "1,930 J"."""
    return _with(number(value, 1 if value is not None and abs(value) < 10 else 0), "J")


def fmt_range(low: float, high: float, unit: str = "s") -> str:
    """A range as "0.64–1.0 s": two significant figures, or more where two tell the ends apart."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return NOT_A_NUMBER
    for digits in (2, 3, 4):
        ends = [f"{v:.0f}" if 10 ** digits <= v < 1e15 else f"{v + 0.0:#.{digits}g}".rstrip(".")
                for v in (low, high)]  # + 0.0: -0.0 prints as 0
        if ends[0] != ends[1] or low == high:
            break
    return f"{ends[0]}–{ends[1]}{f' {unit}' if unit else ''}"


def clip(text: str | None, limit: int = TEXT_CAP) -> str:
    """A record's text on one line, cut at `limit` characters with a count of what was cut."""
    text = " ".join(str(text or "").split())
    cut = len(text) - limit
    return text if cut <= 0 else f"{text[:limit]}… ({cut:,} more characters)"


def md_table(headers: list[str], rows: list[list], right: Sequence[str] = ()) -> str:
    """A GitHub-flavoured Markdown table, each cell capped (`clip`); `right`: right-aligned."""
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("--:" if header in right else "---" for header in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(
        clip(fmt(c, "") if c is None or isinstance(c, float) else c).replace("|", "\\|")
        for c in row) + " |" for row in rows])


def busy_text(busy: float | None, run_mean: bool) -> str:
    """"6 %", "4 % (run mean)", or NOT_A_NUMBER."""
    return NOT_A_NUMBER if busy is None else f"{number(busy)} %" + " (run mean)" * run_mean


def telemetry_line(telemetry: dict | None, epochs: int | None = None,
                   epoch_gpu_util: Sequence | None = (), epoch_energy: Sequence | None = ()) -> str:
    """A chapter's line: "GPU: busy 91 %, 287 W mean, 107 J per steady epoch; CPU: 104 % ..."."""
    if not (t := telemetry):
        return "telemetry: not recorded"
    gpu = [
        f"busy {busy_text(*busy_percent(epoch_gpu_util, t.get('gpu_util_percent_mean')))}",
        f"{number(t.get('power_watts_mean'))} W mean", f"{number(t.get('sm_clock_mhz_mean'))} MHz",
        "throttled (SM clock below 75 % of its max)" * bool(t.get("throttled")),
        f"{joules(energy)} per steady epoch" if (energy := busy_percent(epoch_energy, None)[0])
        is not None else f"{joules(t.get('energy_joules'))} in all"
        + ENERGY_METHODS.get(t.get("energy_method"), ""),
        "partial: NVML failed during the run" * bool(t.get("partial"))]
    cpu = [f"{number(t.get('cpu_util_percent_mean'))} % of one core",
           f"{joules((t.get('cpu_energy_joules') or math.nan) / (epochs or 1))}"
           f"{' per epoch' * bool(epochs)} (RAPL)"]
    gpu, cpu = ([p for p in parts if p and MISSING not in p and NOT_A_NUMBER not in p]
                for parts in (gpu, cpu))  # the parts that hold a figure
    if t.get("source") != "nvml":
        gpu = [f"none ({clip(t.get('reason')) or 'not measured'})"]
    return f"GPU: {', '.join(gpu) or 'no figures'}; CPU: {', '.join(cpu) or 'not measured'}"


def dtype_label(dtype: str | None, tf32: bool | None = None) -> str:
    """A float type as it ran: "float32 (TF32)" where float32 matmuls could use TF32."""
    return f"{dtype} (TF32)" if dtype == "float32" and tf32 else str(dtype or MISSING)
