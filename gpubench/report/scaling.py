"""Scaling in Multi_GPU_Scaling and the report: one table for every backend's scaling records
(TensorFlow's, JAX's and PyTorch's side by side), the chapter's chart, and its reading."""

from __future__ import annotations

from collections.abc import Sequence

from gpubench import plots
from gpubench.fmt import MISSING, fmt, fmt_time, md_table
from gpubench.report.format import explained_table

HEADERS = ["engine", "strategy", "workers", "replicas", "devices", "global batch", "samples/s",
           "ideal samples/s", "scaling efficiency", "step time", "all-reduce", "test accuracy"]


def row(r: dict) -> list:
    """One record's cells: how it ran, its speed against ideal, its step time and accuracy."""
    devices = (f"virtual ({r['virtual_devices']} on one CPU)" if r.get("virtual_devices")
               else ", ".join(r.get("devices") or []) or r["device"])
    cells = [r.get("engine") or MISSING, r["strategy"], r["workers"], r["replicas"], devices,
             r["global_batch_size"]]
    if r["status"] != "ok":
        return cells + [f"{r['status'].upper()}: {r['error']}"] + [MISSING] * 5
    rate, eff = r["samples_per_second"], r["scaling_efficiency"]
    return cells + [fmt(rate, ",.0f"), fmt(rate / eff if rate and eff else None, ",.0f"),
                    fmt(eff, ".0%"), fmt_time(r.get("step_seconds")),
                    r.get("all_reduce") or MISSING, fmt(r["test_accuracy"], ".3f")]


def table(records: Sequence[dict]) -> str:
    """The chapter's Markdown table of `records`, one row each."""
    return md_table(HEADERS, [row(r) for r in records], right=HEADERS[2:4] + HEADERS[5:10])


def section(records: list[dict]) -> list[str]:
    """The report's "Scaling" section (every machine, env and backend), when there are records."""
    found = sorted((r for r in records if r["benchmark"] == "scaling"), key=lambda r: (
        r["_column"], str(r.get("engine")), str(r["strategy"]), r["workers"] or 1,
        r["replicas"] or 0))
    if not found:
        return []
    lines = ["## Scaling", "", "Data-parallel training, the same model on 1, 2, ... devices or "
             "processes at once: tf.distribute on TensorFlow, keras.distribution and "
             "jax.distributed on JAX, torch.distributed (DDP) on PyTorch.", ""]
    if any(r.get("virtual_devices") for r in found):
        lines += ["> **Virtual devices**: one CPU split into logical devices (on PyTorch, "
                  "processes). These rows show that the mechanics work, not how devices scale.",
                  ""]
    rows = [[r["_column"], *row(r)] for r in found]
    return lines + explained_table(["machine · env", *HEADERS], rows)


def plot(records: Sequence[dict], fig=None):
    """Samples/s and efficiency against replicas, each with its ideal line, on `fig` (a Figure;
    None: a pyplot one, which a chapter shows inline)."""
    fig = plots.figure(fig, (10, 4))
    fig.set_layout_engine("constrained")
    ok = [r for r in records if r["status"] == "ok" and r["scaling_efficiency"]]
    reps = [r["replicas"] for r in ok]
    speed, eff = fig.subplots(1, 2)
    speed.plot(reps, [r["samples_per_second"] for r in ok], "o-", label="measured")
    speed.plot(reps, [r["samples_per_second"] / r["scaling_efficiency"] for r in ok], "--",
               color="grey", label="ideal (linear)")
    speed.set(xlabel="replicas", ylabel="training images per second", title="Throughput",
              xticks=reps)
    eff.plot(reps, [r["scaling_efficiency"] for r in ok], "o-", label="measured")
    eff.axhline(1.0, linestyle="--", color="grey", label="ideal")
    eff.set(xlabel="replicas", ylabel="scaling efficiency", title="Efficiency", xticks=reps,
            ylim=(0, max(1.1, *[r["scaling_efficiency"] + 0.1 for r in ok])))
    for ax in (speed, eff):
        ax.legend()
    virtual = " (virtual CPU devices: mechanics, not scaling)" * any(
        r.get("virtual_devices") for r in ok)
    fig.suptitle(f"{ok[0]['model']}, {ok[0]['scaling']} scaling{virtual}" if ok
                 else "no successful runs")
    return fig


def reading(records: Sequence[dict]) -> str:
    """A few sentences written from the numbers: where efficiency drops and what that suggests."""
    ok = [r for r in records if r["status"] == "ok" and r["scaling_efficiency"] is not None]
    if len(ok) < 2:
        return "Only one replica count ran, so there is no scaling to read."
    first, last = ok[0], ok[-1]
    drop = next((r for r in ok if r["scaling_efficiency"] < 0.9), None)
    virtual = any(r.get("virtual_devices") for r in ok)
    text = [f"From {first['replicas']} to {last['replicas']} replicas, throughput went from "
            f"{fmt(first['samples_per_second'], ',.0f')} to "
            f"{fmt(last['samples_per_second'], ',.0f')} images/s: efficiency "
            f"{fmt(last['scaling_efficiency'], '.1%')} of linear."]
    if drop is None:
        text.append("Efficiency stays at 90% or above throughout: the work per step hides the "
                    f"all-reduce ({last['all_reduce']}).")
    else:
        text.append(f"Efficiency first falls below 90% at {drop['replicas']} replicas "
                    f"({fmt(drop['scaling_efficiency'], '.1%')})" + (
                        ", as expected here: the replicas share the same cores, so adding one "
                        "adds no compute, only the all-reduce." if virtual else
                        f". Each step then spends a visible share of its time adding up "
                        f"gradients ({drop['all_reduce']}) or waiting for input; larger "
                        "per-replica batches (weak scaling), a bigger model per step or faster "
                        "links between devices raise it."))
    text.append(f"Test accuracy: {fmt(first['test_accuracy'], '.4f')} with a global batch of "
                f"{first['global_batch_size']}, {fmt(last['test_accuracy'], '.4f')} with "
                f"{last['global_batch_size']}; a larger global batch takes fewer optimiser steps "
                "per epoch, so compare accuracy before counting a speed-up as a gain.")
    return ("These replicas are virtual devices carved out of one CPU (on PyTorch, processes): "
            "they share its cores, so the numbers show that the distributed mechanics work, not "
            "how the machine scales.\n\n") * virtual + " ".join(text)
