"""The backends in the report: one model on one device of one machine, trained by several Keras
backends (TensorFlow, JAX, PyTorch), with whether each pair ran like for like."""

from __future__ import annotations

from collections import defaultdict

from gpubench.backends import backend_title
from gpubench.fmt import MISSING, fmt, fmt_ratio, fmt_seconds
from gpubench.report.format import explained_table
from gpubench.report.records import (
    backend_of,
    backend_rank,
    book_train,
    columns,
    loaded,
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


def like_for_like(record: dict, reference: dict) -> str:
    """"yes", or what differs between two runs by what ran (`mode_differences`), data size too."""
    differ = mode_differences(record, reference)
    ours, theirs = mode(record), mode(reference)
    if record.get("train_samples") != reference.get("train_samples"):
        differ.append("train_samples")
        ours["train_samples"], theirs["train_samples"] = (
            f"{fmt(r.get('train_samples'), ',')} images" for r in (record, reference))
    if not differ:
        return "yes"
    text = ("**not like for like**: " + ", ".join(ours[n] for n in differ) + " against "
            + ", ".join(theirs[n] for n in differ))
    if "jit_compile" in differ and "jax" in (backend_of(record), backend_of(reference)):
        text += " (JAX always compiles; run TensorFlow with `-p xla=on` for the like-for-like pair)"
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


def rows(records: list[dict]) -> list[list]:
    """One row per run of a model on a device of a machine that ran on several backends: steady
    epoch, images/s, its ratio to the first backend's run in the same mode (else its first run),
    and whether the modes match."""
    found = []
    for group in backend_groups(records):
        first = [r for r in group if backend_of(r) == backend_of(group[0])]
        for r in group:
            reference = next((x for x in first if not mode_differences(x, r)), first[0])
            rate, theirs = images_per_second(r), images_per_second(reference)
            env = r["environment"]
            version = env.get("backend_version") or env.get(backend_of(r))
            ratio = (f"{fmt_ratio(rate / theirs)}x" if rate and theirs else MISSING)
            found.append([model_title(r["model"]), machine_of(r), r["device"],
                          backend_title(backend_of(r)) + (f" {version}" if version else ""),
                          r["env"], ", ".join(mode(r).values()),
                          fmt_seconds(r["steady_epoch_seconds"]),
                          fmt(rate, ",.0f") + (" (**loaded**)" if loaded(r) else ""),
                          "1.00x (reference)" if r is reference else ratio,
                          MISSING if r is reference else like_for_like(r, reference)])
    return found


def section(records: list[dict]) -> list[str]:
    """The "Backends" section: one model on one device across backends."""
    if not (found := rows(records)):
        return []
    names = sorted({backend_of(r) for group in backend_groups(records) for r in group},
                   key=backend_rank)
    first = backend_title(names[0])
    return [f"## Backends: {' vs '.join(backend_title(n) for n in names)}", "",
            "The same model on the same device of the same machine, trained by different Keras "
            f"backends. Ratio: images/s against {first}'s run (above 1: faster than {first}). "
            "Like for like compares what ran: compiled or not (XLA; on PyTorch, torch.compile), "
            "precision and TF32, batch, steps per execution, input pipeline and data size. JAX "
            "always compiles, while gpubench runs TensorFlow with XLA off unless `xla=on`.", "",
            *explained_table(BACKEND_HEADERS, found)]
