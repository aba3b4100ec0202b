"""Scaling in the report and Multi_GPU_Scaling: the chapter's table, chart and reading of the
numbers, and the report's section of every scaling record."""

from __future__ import annotations

from collections.abc import Sequence

from gpubench import plots
from gpubench.fmt import fmt, md_table
from gpubench.report.format import explained_table

TABLE_HEADERS = ["strategy", "replicas", "workers", "global batch", "samples/s",
                 "ideal samples/s", "efficiency", "test accuracy", "final loss"]


def table(records: Sequence[dict]) -> str:
    """A Markdown table: replicas, workers, batch, samples/s against ideal, efficiency, accuracy."""
    base = next((r["samples_per_second"] for r in records if r["replicas"] == 1
                 and r["status"] == "ok"), None)
    found = []
    for r in records:
        first = [r["strategy"], r["replicas"], r["workers"], r["global_batch_size"]]
        if r["status"] != "ok":
            found.append(first + [f"{r['status']}: {r['error']}", "", "", "", ""])
            continue
        ideal = fmt(base * r["replicas"], ",.0f") if base and r["replicas"] else "n/a"
        found.append(first + [fmt(r["samples_per_second"], ",.0f"), ideal,
                              fmt(r["scaling_efficiency"], ".2f"), fmt(r["test_accuracy"], ".4f"),
                              fmt(r.get("final_loss"), ".4f")])
    return md_table(TABLE_HEADERS, found, right=TABLE_HEADERS[1:])


def plot(records: Sequence[dict], fig=None):
    """Samples/s and efficiency against replicas, each with its ideal line, on `fig` (a Figure).

    Given no figure, it makes a pyplot one, so that a chapter shows it inline.
    """
    fig = plots.figure(fig, (10, 4))
    fig.set_layout_engine("constrained")
    ok = [r for r in records if r["status"] == "ok"]
    reps = [r["replicas"] for r in ok]
    base = next((r["samples_per_second"] for r in ok if r["replicas"] == 1), None)
    speed, eff = fig.subplots(1, 2)
    speed.plot(reps, [r["samples_per_second"] for r in ok], "o-", label="measured")
    if base:
        speed.plot(reps, [base * n for n in reps], "--", color="grey", label="ideal (linear)")
    speed.set(xlabel="replicas", ylabel="training images per second",
              title="Throughput", xticks=reps)
    speed.legend()
    eff.plot(reps, [r["scaling_efficiency"] for r in ok], "o-", label="measured")
    eff.axhline(1.0, linestyle="--", color="grey", label="ideal")
    eff.set(xlabel="replicas", ylabel="scaling efficiency", title="Efficiency", xticks=reps,
            ylim=(0, max(1.1, *[(r["scaling_efficiency"] or 0) + 0.1 for r in ok])))
    eff.legend()
    virtual = any(r.get("virtual_devices") for r in ok)
    fig.suptitle(f"{ok[0]['model']}, {ok[0]['scaling']} scaling"
                 + (" (virtual CPU devices: mechanics, not scaling)" if virtual else "")
                 if ok else "no successful runs")
    return fig


def reading(records: Sequence[dict]) -> str:
    """A few sentences written from the numbers: where efficiency drops and what that suggests."""
    ok = [r for r in records if r["status"] == "ok" and r["scaling_efficiency"] is not None]
    if len(ok) < 2:
        return "Only one replica count ran, so there is no scaling to read."
    lines = []
    if any(r.get("virtual_devices") for r in ok):
        lines.append(
            "These replicas are virtual devices carved out of one CPU: they share the same cores, "
            "so the numbers show that the distributed mechanics work, not how the machine scales.")
    first, last = ok[0], ok[-1]
    lines.append(
        f"From {first['replicas']} to {last['replicas']} replicas, throughput went from "
        f"{fmt(first['samples_per_second'], ',.0f')} to "
        f"{fmt(last['samples_per_second'], ',.0f')} images/s: "
        f"efficiency {fmt(last['scaling_efficiency'], '.1%')} of linear.")
    drop = next((r for r in ok if r["scaling_efficiency"] < 0.9), None)
    if drop is not None and drop.get("virtual_devices"):
        lines.append(f"Efficiency falls below 90% at {drop['replicas']} replicas "
                     f"({fmt(drop['scaling_efficiency'], '.1%')}), as expected here: the "
                     "replicas share the same cores, so adding one adds no compute, only the "
                     "all-reduce.")
    elif drop is None:
        lines.append("Efficiency stays at 90% or above throughout: the work per step hides the "
                     f"all-reduce ({last['all_reduce']}).")
    else:
        lines.append(
            f"Efficiency first falls below 90% at {drop['replicas']} replicas "
            f"({fmt(drop['scaling_efficiency'], '.1%')}). Each step then spends a visible share "
            f"of its time synchronising gradients ({drop['all_reduce']}) or waiting for input; "
            "larger per-replica batches (weak scaling), a bigger model per step or faster links "
            "between devices raise it.")
    lines.append(
        f"Test accuracy: {fmt(first['test_accuracy'], '.4f')} with a global batch of "
        f"{first['global_batch_size']}, {fmt(last['test_accuracy'], '.4f')} with "
        f"{last['global_batch_size']}; a larger global batch takes fewer optimiser steps per "
        "epoch, so compare accuracy before counting a speed-up as a gain.")
    return lines[0] + "\n\n" + " ".join(lines[1:])


SCALING_HEADERS = ["machine · env", "strategy", "workers", "replicas", "devices", "global batch",
                   "samples/s", "scaling efficiency", "all-reduce", "test accuracy"]


def rows(records: list[dict]) -> list[list]:
    """One row per scaling record: replicas, workers, speed, efficiency, and the devices used."""
    found = []
    scaling = [r for r in records if r["benchmark"] == "scaling"]
    for r in sorted(scaling, key=lambda r: (r["_column"], str(r["strategy"]),
                                            r["workers"] or 1, r["replicas"] or 0)):
        devices = (f"virtual ({r['virtual_devices']} on one CPU)" if r.get("virtual_devices")
                   else ", ".join(r.get("devices") or []) or r["device"])
        ok = r["status"] == "ok"
        found.append([r["_column"], r["strategy"], r["workers"], r["replicas"], devices,
                     r["global_batch_size"],
                     fmt(r["samples_per_second"], ",.0f") if ok else r["status"].upper(),
                     fmt(r["scaling_efficiency"], ".0%") if ok else "–",
                     r.get("all_reduce") or "–", fmt(r["test_accuracy"], ".3f") if ok else "–"])
    return found


def section(records: list[dict]) -> list[str]:
    """The "Scaling" section, when there are scaling records."""
    if not (found := rows(records)):
        return []
    lines = ["## Scaling", "",
             "Data-parallel training (tf.distribute on TensorFlow, keras.distribution on "
             "JAX): the same model trained on 1, 2, ... devices at once.", ""]
    if any(r.get("virtual_devices") for r in records):
        lines += ["> **Virtual devices**: one CPU split into logical devices. These rows show "
                  "that the mechanics work, not how real devices scale.", ""]
    return lines + explained_table(SCALING_HEADERS, found)

