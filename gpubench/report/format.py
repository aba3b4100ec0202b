"""The notes that explain each report table's columns (one place for every table of every
chapter topic); the numbers' formats are gpubench.fmt's."""

from __future__ import annotations

from gpubench.fmt import md_table
from gpubench.timing import STEADY_EPOCHS

BUSY_DEFINITION = ("the median over the steady epochs (2..n; epoch 1, which compiles, left "
                   "out) of NVML's share of the time in which a GPU kernel ran (not how full the "
                   "GPU was); a Speed_Factors variant whose rounds were too short for NVML: the "
                   "mean over its busy region (its steady training repeated for at least 2 s); "
                   "\"(run mean)\": no per-epoch figure, the mean over the whole run")


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
