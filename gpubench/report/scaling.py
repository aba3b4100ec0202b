"""Scaling in Multi_GPU_Scaling and the report: one table for every backend's scaling records
(TensorFlow's, JAX's and PyTorch's side by side), what it says, and the chapter's chart."""

from __future__ import annotations

from collections.abc import Sequence

from gpubench import plots
from gpubench.fmt import MISSING, fmt, fmt_time, md_table
from gpubench.report.format import explained_table

HEADERS = ["engine", "strategy", "workers", "replicas", "devices", "global batch", "samples/s",
           "ideal samples/s", "scaling efficiency", "step time", "all-reduce", "test accuracy"]
VIRTUAL = ("**Virtual devices**, one CPU split in several (on PyTorch, processes), share its "
           "cores: their numbers show that the mechanics work, not how the machine scales.")


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
    """The Markdown table of `records`, a row each, then what it says (VIRTUAL, or the drop)."""
    said = [md_table(HEADERS, [row(r) for r in records], right=HEADERS[2:4] + HEADERS[5:10])]
    ok = [r for r in records if r["status"] == "ok" and r["scaling_efficiency"] is not None]
    drop = next((r for r in ok if r["scaling_efficiency"] < 0.9), None)
    if any(r.get("virtual_devices") for r in records):
        said.append(VIRTUAL)
    elif drop:
        said.append(f"Efficiency first falls below 90% at {drop['replicas']} replicas "
                    f"({fmt(drop['scaling_efficiency'], '.1%')}): a visible share of a step goes "
                    f"to adding up gradients ({drop['all_reduce']}), to input, or to replicas "
                    "sharing cores.")
    return "\n\n".join(said)


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
    lines += [f"> {VIRTUAL}", ""] * any(r.get("virtual_devices") for r in found)
    return lines + explained_table(["machine · env", *HEADERS], [[r["_column"], *row(r)]
                                                                 for r in found])


def plot(records: Sequence[dict], fig=None):
    """Samples/s and efficiency against replicas, with their ideal lines, on `fig` (or pyplot's)."""
    fig = plots.figure(fig, (10, 4))
    fig.set_layout_engine("constrained")
    ok = [r for r in records if r["status"] == "ok" and r["scaling_efficiency"]]
    reps = [r["replicas"] for r in ok]
    ideal = [r["samples_per_second"] / r["scaling_efficiency"] for r in ok], [1.0] * len(ok)
    for ax, key, line in zip(fig.subplots(1, 2), ("samples_per_second", "scaling_efficiency"),
                             ideal, strict=True):
        ax.plot(reps, [r[key] for r in ok], "o-", label="measured")
        ax.plot(reps, line, "--", color="grey", label="ideal (linear)")
        ax.set(xlabel="replicas", ylabel=key.replace("_", " "), xticks=reps, ylim=(0, None))
        ax.legend()
    virtual = " (virtual CPU devices: mechanics, not scaling)" * any(
        r.get("virtual_devices") for r in ok)
    fig.suptitle(f"{ok[0]['model']}, {ok[0]['scaling']} scaling{virtual}" if ok
                 else "no successful runs")
    return fig
