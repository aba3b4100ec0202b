"""The backends in the report: one model on one device of one machine, trained by several Keras
backends (TensorFlow, JAX, PyTorch), with whether each pair ran like for like."""

from __future__ import annotations

from collections import defaultdict

from gpubench.backends import backend_title
from gpubench.fmt import fmt, fmt_ratio, fmt_seconds
from gpubench.report.format import explained_table
from gpubench.report.records import (
    backend_of,
    backend_rank,
    book_train,
    columns,
    machine_of,
    model_rank,
    model_title,
)
from gpubench.report.training import mode, mode_differences
from gpubench.results import ok_records

BACKEND_HEADERS = ["model", "machine", "device", "backend", "env", "mode", "steady epoch",
                   "images/s", "ratio", "like for like?"]


def images_per_second(record: dict) -> float | None:
    """A train record's images per second: its own rate, else train images over the steady epoch."""
    if record.get("samples_per_second"):
        return record["samples_per_second"]
    steady = record.get("steady_epoch_seconds")
    return record["train_samples"] / steady if steady else None


def tf32(record: dict) -> bool | None:
    """Whether a float32 GPU run's matmuls could use TF32 (the backend's setting, recorded);
    None where it does not apply (a CPU, another precision) or was not recorded."""
    if not str(record.get("device", "")).startswith("gpu") or record.get("precision") != "float32":
        return None
    found = ((record.get("environment") or {}).get("backend_settings") or {}).get("tf32")
    return found if isinstance(found, bool) else None


def _like_for_like(record: dict, reference: dict) -> str:
    """"yes", or what differs between two backends' runs, XLA spelled out (JAX always compiles;
    on PyTorch, compiling is torch.compile), and TF32 where the backends' settings differ."""
    differ = mode_differences(mode(record), mode(reference))
    ours_tf32, theirs_tf32 = tf32(record), tf32(reference)
    tf32_differs = None not in (ours_tf32, theirs_tf32) and ours_tf32 != theirs_tf32
    if record.get("train_samples") != reference.get("train_samples"):
        differ.append("train_samples")
    if not differ and not tf32_differs:
        return "yes"
    ours = {n: mode(record).get(n, f"{record.get(n)} images") for n in differ}
    theirs = {n: mode(reference).get(n, f"{reference.get(n)} images") for n in differ}
    if tf32_differs:
        differ.append("tf32")
        ours["tf32"], theirs["tf32"] = (f"TF32 {'on' if v else 'off'}"
                                        for v in (ours_tf32, theirs_tf32))
    text = ("**not like for like**: " + ", ".join(ours[n] for n in differ) + " against "
            + ", ".join(theirs[n] for n in differ))
    pair = (backend_of(record), backend_of(reference))
    if "jit_compile" in differ and "jax" in pair:
        text += (" (JAX always compiles with XLA; run TensorFlow with `-p xla=on` for the "
                 "like-for-like pair)")
    if tf32_differs:
        text += (" (float32 matmuls may use TF32 by JAX's default, not by PyTorch's; "
                 "TensorFlow's is recorded)")
    return text


def backend_groups(records: list[dict]) -> list[list[dict]]:
    """Ok book train records grouped by machine, model and device, where the group holds more
    than one backend; each group's rows in backend order."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in book_train(ok_records(records, "train")):
        groups[(machine_of(r), r["model"], r["device"])].append(r)
    order = {column: i for i, column in enumerate(columns(records))}
    return [sorted(group, key=lambda r: (backend_rank(backend_of(r)), order[r["_column"]]))
            for key, group in sorted(groups.items(), key=lambda item: (
                item[0][0], model_rank(item[0][1]), item[0][2]))
            if len({backend_of(r) for r in group}) > 1]


def _reference(record: dict, group: list[dict]) -> dict:
    """The run `record` is compared with: the first backend's run in the same mode, else its
    first run."""
    first = backend_of(group[0])
    candidates = [r for r in group if backend_of(r) == first]
    return next((r for r in candidates if mode(r) == mode(record)), candidates[0])


def rows(records: list[dict]) -> list[list]:
    """One row per run of a model on a device of a machine that ran on several backends: steady
    epoch, images/s, the ratio of images/s to the first backend's run, and whether the modes
    match."""
    found = []
    for group in backend_groups(records):
        for r in group:
            reference = _reference(r, group)
            rate, theirs = images_per_second(r), images_per_second(reference)
            version = r["environment"].get("backend_version") or r["environment"].get(backend_of(r))
            if r is reference:
                ratio, like = "1.00x (reference)", "–"
            else:
                ratio = f"{fmt_ratio(rate / theirs)}x" if rate and theirs else "–"
                like = _like_for_like(r, reference)
            found.append([model_title(r["model"]), machine_of(r), r["device"],
                         backend_title(backend_of(r)) + (f" {version}" if version else ""),
                         r["env"], ", ".join(mode(r).values()),
                         fmt_seconds(r["steady_epoch_seconds"]), fmt(rate, ",.0f"), ratio, like])
    return found


def section(records: list[dict]) -> list[str]:
    """The "Backends: TensorFlow vs JAX vs PyTorch" section: one model on one device across
    backends."""
    if not (found := rows(records)):
        return []
    names = sorted({backend_of(r) for group in backend_groups(records) for r in group},
                   key=backend_rank)
    first = backend_title(names[0])
    return [f"## Backends: {' vs '.join(backend_title(n) for n in names)}", "",
            "The same model on the same device of the same machine, trained by different Keras "
            f"backends. Ratio: images/s against {first}'s run (above 1: faster than {first}). "
            "Rows whose mode differs (XLA, precision, batch, steps per execution, input "
            "pipeline, data size, TF32 on a GPU) are not like for like. JAX always compiles with "
            "XLA, while gpubench runs TensorFlow with XLA off unless `xla=on`: TensorFlow with "
            "XLA off against JAX compares the modes as much as the backends. On PyTorch, XLA "
            "on means `torch.compile` and off means eager.", "",
            *explained_table(BACKEND_HEADERS, found)]

