"""Telemetry in the report: how busy each run kept the GPU, its power and energy, CPU use, and
what those numbers say in words (`gpubench.telemetry.text` writes the cells and findings)."""

from __future__ import annotations

from gpubench.records import book_train, columns, model_title, ok_records
from gpubench.report.checks import TELEMETRY_NUMBERS
from gpubench.report.format import COLUMN_NOTES, explained_table
from gpubench.report.training import model_rank
from gpubench.telemetry import text as telemetry_text

TELEMETRY_HEADERS = ["machine · env", "run", "device", "GPU busy", "GPU mean power",
                     "GPU energy per epoch", "images per joule (GPU)", "CPU use (one core = 100 %)",
                     "CPU energy per epoch", "images per joule (CPU)"]

# GPU busy is one figure per run: this table, the lines under it and the chapters' line.
TELEMETRY_NOTES = {**COLUMN_NOTES, "GPU busy": telemetry_text.BUSY_DEFINITION
                   + " (the same figure in the lines below and in each chapter's telemetry line)"}


def _telemetry_records(records: list[dict]) -> list[dict]:
    """Ok book train and scaling records whose telemetry measured anything, in the book's table's
    order (its models in the book's order, each in column order), the scaling runs after."""
    order = {column: i for i, column in enumerate(columns(records))}
    found = [r for r in book_train(ok_records(records, "train")) + ok_records(records, "scaling")
             if any((r.get("telemetry") or {}).get(name) is not None
                    for name in TELEMETRY_NUMBERS)]
    return sorted(found, key=lambda r: (r["benchmark"] != "train", model_rank(r["model"]),
                                        order[r["_column"]], r.get("replicas") or 0))


def _run_name(record: dict) -> str:
    name = model_title(record["model"])
    if record["benchmark"] == "scaling":
        name += f", {record.get('replicas')} replica(s)"
    return name


def rows(records: list[dict]) -> list[list]:
    """Per run: GPU busy %, mean W, joules per epoch, images per joule and CPU use."""
    found = []
    for r in _telemetry_records(records):
        cells = telemetry_text.energy_cells(r)
        found.append([r["_column"], _run_name(r), r["device"], cells["gpu_busy"],
                     cells["watts_mean"], cells["joules_per_epoch"], cells["images_per_joule"],
                     cells["cpu_util"], cells["cpu_joules_per_epoch"],
                     cells["cpu_images_per_joule"]])
    return found


def diagnosis_lines(records: list[dict]) -> list[str]:
    """What each run's telemetry says, one finding a line ("GPU busy 23 % of the epoch: ...")."""
    return [f"- {r['_column']} {_run_name(r)} on {r['device']}: {finding}."
            for r in _telemetry_records(records) for finding in telemetry_text.diagnosis(r)]


def section(records: list[dict]) -> list[str]:
    """The "Telemetry" section: how busy the GPU was, its power and energy, and CPU use."""
    if not (found := rows(records)):
        return []
    lines = ["## Telemetry: how busy, how much power, how much energy", "",
             "Measured while each epoch ran. GPU energy comes from the driver's counter, or "
             "power x time where the GPU has none; GPU and CPU energy are kept apart, never "
             "added.", "",
             *explained_table(TELEMETRY_HEADERS, found, TELEMETRY_NOTES)]
    if findings := diagnosis_lines(records):
        lines += ["What the numbers say:", "", *findings, ""]
    return lines

