"""The report's formatting: numbers and ranges in words, Markdown tables, and the notes that
explain each table's columns (one place for every table of every chapter topic)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from gpubench.telemetry.text import BUSY_DEFINITION
from gpubench.timing import STEADY_EPOCHS

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


# What each column of the report's tables means, where its header does not say it; shown under
# every table that has the column (`column_note`).
COLUMN_NOTES = {
    "mode": "XLA on or off (on PyTorch: torch.compile), precision, batch size, steps per "
            "execution (steps per compiled call), input pipeline (arrays: NumPy arrays given "
            "to `fit`)",
    "total time": "all epochs, as the book times them",
    "steady epoch": f"the median of {STEADY_EPOCHS}",
    "first epoch": "epoch 1, which includes tracing and compilation",
    "time saved vs CPU env": "1 − total time / the total time of the CPU env of the same "
                             "machine and backend (gpu against cpu, jax-gpu against jax-cpu; "
                             "\"baseline\": that env)",
    "speedup": "that CPU env's total time over this row's (above 1: faster)",
    "energy (all epochs)": "the GPU's (NVML) on a GPU and the CPU package's (RAPL), kept apart",
    "data": "the dataset and where it came from (keras download, dir, or synthetic: random "
            "images, timings only)",
    "images/s": "training images per second in the steady epochs",
    "ratio": "images/s over the reference row's (the first backend's run in the same mode); "
             "above 1: faster",
    "like for like?": "whether mode and training-set size match the reference row's",
    "GPU busy": BUSY_DEFINITION,
    "GPU mean power": "the board's mean power draw while the epochs ran",
    "images per joule (GPU)": "training images per joule of GPU energy (higher: more efficient)",
    "CPU use (one core = 100 %)": "this process's CPU time over wall time",
    "CPU energy per epoch": "the CPU package's energy (RAPL), where the system lets it be read",
    "images per joule (CPU)": "training images per joule of CPU package energy",
    "strategy": "how the replicas are kept in step: mirrored on one machine, multi_worker "
                "across processes or machines",
    "workers": "processes (machines) taking part",
    "replicas": "copies of the model training in parallel, one per device",
    "global batch": "images per step over all replicas",
    "samples/s": f"training images per second, from the median of {STEADY_EPOCHS}",
    "scaling efficiency": "samples/s over replicas x the one-replica samples/s of the same run "
                          "(100%: perfect scaling)",
    "all-reduce": "how the replicas' gradients are added up",
    "status": "failed: the notebook raised an error; skipped: not run; interrupted: stopped by "
              "Ctrl-C or a signal",
    "commit": "the checkout's git commit",
}
FACTOR_NOTES = {
    "variant": "the factor changed from the baseline, the book's setting (batch 100, float32, "
               "XLA off, steps/exec 1, arrays: NumPy arrays given to `fit`); tf.data: a "
               "tf.data.Dataset; on_device: the training set kept on the device",
    "x vs baseline (min)": "images/s of the variant's fastest steady round over the baseline's "
                           "fastest (above 1: faster)",
    "median x": "the same with each one's median round",
    "interval": "the lowest and highest ratio of paired rounds (round r of the variant against "
                "round r of the baseline); one that includes 1.0 is \"no clear effect\"",
    "images/s": "training images per second in the variant's fastest steady round",
    "steps": "training steps timed in the steady rounds (time-boxed: a fixed number per round, "
             "a full epoch being far slower than the baseline's)",
    "GFLOP/s": "the model's arithmetic per second at that speed",
    "% of matmul": "that GFLOP/s as a share of the matmul peak of the same env, device and "
                   "compute dtype, as its peak probe measured it (one large warm product, "
                   "the fastest repeat); n/a: the probe did not run there",
    "GPU busy": BUSY_DEFINITION.replace("epochs", "rounds") + "; n/a on a CPU",
    "test accuracy": "after the rounds; not measured for a time-boxed variant",
}
MATMUL_NOTE = ("Columns: **size**: n, for the product of two n x n matrices; each other column "
               "is a device and method: **rigorous** is the median of repeated products after a "
               "warm-up call, **book** one timing that includes creating the matrices and the "
               "first call's set-up; each cell is the time, the GFLOP/s (2n³ / time) and, where "
               "the GPU's datasheet is known, the share of its peak.")


def column_note(headers: list[str], notes: dict[str, str] | None = None) -> str:
    """The line under a table explaining its columns: "Columns: **header**: meaning; ..." for
    each header in `notes` (default COLUMN_NOTES); "" when none needs it."""
    notes = COLUMN_NOTES if notes is None else notes
    parts = [f"**{header}**: {notes[header]}" for header in headers if header in notes]
    return ("Columns: " + "; ".join(parts) + ".") if parts else ""


def explained_table(headers: list[str], rows: list[list],
                    notes: dict[str, str] | None = None) -> list[str]:
    """Markdown lines: the table, then the line explaining its columns (`column_note`)."""
    note = column_note(headers, notes)
    return [md_table(headers, rows), ""] + ([note, ""] if note else [])


def table_headers(table: str) -> list[str]:
    """The headers of a Markdown table (its first line)."""
    return [cell.strip() for cell in table.partition("\n")[0].strip().strip("|").split("|")]



def code(text: str) -> str:
    """`text` safe inside one pair of backticks on one line."""
    return " ".join(text.split()).replace("`", "'")
