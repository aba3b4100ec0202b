"""Training in the report: the book's table (mode, times, time saved, speedup, energy), the
answer in words per model, the mode warnings, the unstable flags and the epoch-time chart."""

from __future__ import annotations

import math

from gpubench import backends, params, plots, timing
from gpubench.fmt import MISSING, NOT_A_NUMBER, dtype_label, fmt, fmt_range, fmt_ratio, fmt_seconds
from gpubench.fmt import joules as _joules
from gpubench.report import charts
from gpubench.report.format import explained_table
from gpubench.report.records import (
    backend_of,
    baselines,
    book_train,
    by_model_and_column,
    columns,
    cpu_env,
    loaded,
    model_rank,
    model_title,
)
from gpubench.report.telemetry import NO_RAPL
from gpubench.results import ok_records

MODE_FIELDS = ("jit_compile", "precision", "batch_size", "steps_per_execution", "input_pipeline")
TRAINING_HEADERS = ["model", "machine · env", "device", "mode", "epochs", "training images",
                    "total time", "steady epoch", "first epoch", "time saved vs CPU env",
                    "speedup", "energy (all epochs)", "test accuracy", "data"]
TIMES = ("total_seconds", "steady_epoch_seconds", "first_epoch_seconds")  # the answer's figures
UNSTABLE_SPREAD = 0.20  # steady-epoch IQR over median above which timings are flagged
BOOK_UNSTABLE = ("steady epochs", "the table's steady epoch is their median: read differences "
                 "between rows smaller than this spread as noise, or rerun on a quieter machine")
_PROFILE_WORDS = {"full": "the book's {epochs} epochs on all the training images",
                  "quick": "a smoke run, not the book's 15 epochs on all the images: its times do "
                           "not compare with the book's",
                  "custom": "epochs or images set by hand"}


def mode(record: dict) -> dict[str, str]:
    """The mode a train record ran in, each field in words ("XLA off", "float32 (TF32)", ...)."""
    compiled = {True: "on", False: "off"}.get(record.get("jit_compile"), "?")
    words = {"jit_compile": f"{backends.COMPILER.get(backend_of(record), 'XLA')} {compiled}",
             "precision": dtype_label(record.get("precision"), record.get("tf32")),
             "batch_size": f"batch {fmt(record.get('batch_size'), '')}",
             "steps_per_execution": f"steps/exec {fmt(record.get('steps_per_execution'), '')}",
             "input_pipeline": str(record.get("input_pipeline") or "?")}
    return {name: words[name] for name in MODE_FIELDS}


def mode_differences(record: dict, other: dict) -> list[str]:
    """The mode fields in which two runs differ, by what ran (compiled or not, TF32 or not),
    never by their labels: eager PyTorch and TensorFlow with XLA off are alike."""
    def key(r: dict, name: str):
        return (r.get(name), bool(r.get("tf32"))) if name == "precision" else r.get(name)
    return [name for name in MODE_FIELDS if key(record, name) != key(other, name)]


def compared(records: list[dict]) -> list[tuple[dict, str | None, dict | None]]:
    """Each book train record in the table's order, with its baseline column and that column's
    run of the same model (None where there is none)."""
    by_key, bases, order = by_model_and_column(records), baselines(records), columns(records)
    return [(r, bases.get(column), by_key.get((model, bases.get(column))))
            for (model, column), r in sorted(by_key.items(), key=lambda item: (
                model_rank(item[0][0]), order.index(item[0][1])))]


def _versus(r: dict, base: str | None, b: dict | None) -> tuple[str, str]:
    """'% time saved' and 'speedup' of `r` against its baseline's run `b`."""
    if base is None:
        cpu = cpu_env(backend_of(r))
        return ("baseline", "1.00x") if r["env"] == cpu else (f"{NOT_A_NUMBER} (no {cpu} env)",
                                                               MISSING)
    if b is None:
        return f"{NOT_A_NUMBER} (no {model_title(r['model'])} run in {base})", MISSING
    if b["status"] != "ok" or not b["total_seconds"] or not r["total_seconds"]:
        return MISSING, MISSING
    if (b["epochs"], b["train_samples"]) != (r["epochs"], r["train_samples"]):
        return f"{NOT_A_NUMBER} (different settings)", MISSING
    return (fmt(1 - r["total_seconds"] / b["total_seconds"], ".0%"),
            f"{fmt_ratio(b['total_seconds'] / r['total_seconds'])}x")


def energy_text(record: dict) -> str:
    """Energy of all a train record's epochs: the GPU's (NVML) on a GPU, and the CPU package's
    (RAPL) or why there is none; MISSING where the record has no telemetry."""
    if not (telemetry := record.get("telemetry")):
        return MISSING
    gpu, cpu = telemetry.get("energy_joules"), telemetry.get("cpu_energy_joules")
    how = {"counter": " (counter)", "power_integral": " (power x time)"}.get(
        telemetry.get("energy_method"), "")
    parts = [f"CPU {_joules(cpu)} (RAPL)" if cpu is not None else f"CPU {NO_RAPL}"]
    if record["device"].startswith("gpu"):
        parts.insert(0, f"GPU {_joules(gpu)}{how}" if gpu is not None
                     else f"GPU {NOT_A_NUMBER} ({telemetry.get('reason') or 'not measured'})")
    return "; ".join(parts)


def rows(records: list[dict]) -> list[list]:
    """The book's table: per model and column, total time (flagged where the machine was
    loaded), % saved and speedup against the baseline, and the energy of all epochs."""
    found = []
    for r, base, b in compared(records):
        source = r["data_source"] or "?"
        first = [model_title(r["model"]), r["_column"], r["device"], ", ".join(mode(r).values()),
                 fmt(r["epochs"], ""), fmt(r["train_samples"], ",")]
        last = (r["dataset"] or "?") + (" **(synthetic)**" if source == "synthetic"
                                        else f" ({source})")
        if r["status"] != "ok":
            found.append(first + [r["status"].upper()] + [MISSING] * 6 + [last])
            continue
        found.append(first + [
            fmt_seconds(r["total_seconds"]) + (f" (**loaded**: {loaded(r)})" if loaded(r) else ""),
            fmt_seconds(r["steady_epoch_seconds"]), fmt_seconds(r["first_epoch_seconds"]),
            *_versus(r, base, b), energy_text(r), fmt(r["test_accuracy"], ".3f"), last])
    return found


def _missing(records: list[dict], jobs: list[dict], r: dict, base: str) -> str:
    """Why the baseline column `base` has no run of `r`'s notebook: its job's status in
    run.json (failed, skipped, stopped), else that it did not run it."""
    mine = [x for x in records if x["_column"] == base]
    job = next((j for j in jobs if (j["dir"], j["env"], j["notebook"]) in {
        (x["_run_dir"], x["env"], r["notebook"]) for x in mine}), None)
    if job is None or job["status"] in ("ok", "pending"):
        return f"{base} did not run {r['notebook']}"
    status = job["status"] if job["status"] == "failed" else f"was {job['status']}"
    return f"{base}'s {r['notebook']} job {status}" + (f" ({job['error']})" if job["error"] else "")


def answer_lines(records: list[dict], jobs: list[dict]) -> list[str]:
    """The training answer in words, per compared run: the total (the book's figure), the
    steady-epoch ratio and the first epoch's share; or why a side is missing."""
    lines = []
    for r, base, b in compared(records):
        if r["status"] != "ok" or base is None and r["env"] == cpu_env(backend_of(r)):
            continue
        head = f"- **{model_title(r['model'])}**, {r['_column']} against {base or 'a CPU env'}: "
        if base is None or b is None or b["status"] != "ok":
            why = (f"no {cpu_env(backend_of(r))} env in these runs" if base is None
                   else _missing(records, jobs, r, base) if b is None
                   else f"its run there {b['status']}: {b.get('error') or ''}".rstrip(": "))
            lines.append(f"{head}no answer: {why}.")
            continue
        if not all(x[k] for x in (r, b) for k in TIMES):
            lines.append(f"{head}no answer: a time was not recorded.")
            continue
        steady = b["steady_epoch_seconds"] / r["steady_epoch_seconds"]
        total = b["total_seconds"] / r["total_seconds"]
        faster = (f"{fmt_ratio(steady)}x faster" if steady >= 1
                  else f"{fmt_ratio(1 / steady)}x slower")
        lines.append(
            f"{head}per steady epoch {'the GPU' if r['device'] != b['device'] else 'this run'} "
            f"is {faster} ({fmt_seconds(r['steady_epoch_seconds'])} against "
            f"{fmt_seconds(b['steady_epoch_seconds'])}); over {r['epochs']} epochs "
            f"{fmt_ratio(total)}x ({fmt_seconds(r['total_seconds'])} against "
            f"{fmt_seconds(b['total_seconds'])}), {'because' if total < steady else 'while'} "
            f"epoch 1 (compiling) took {fmt_seconds(r['first_epoch_seconds'])} "
            f"({fmt(r['first_epoch_seconds'] / r['total_seconds'], '.0%')} of the total) against "
            f"{fmt_seconds(b['first_epoch_seconds'])}.")
    return lines


def not_like_for_like(records: list[dict]) -> list[str]:
    """A "**Not like for like:**" line per compared run whose mode differs from its baseline's,
    saying which is the baseline."""
    return [f"**Not like for like:** {model_title(r['model'])}: {r['_column']} ran "
            f"{', '.join(mode(r)[n] for n in differ)}; its baseline {b['_column']}: "
            f"{', '.join(mode(b)[n] for n in differ)}."
            for r, _, b in compared(records) if b and (differ := mode_differences(r, b))]


def profile_of(record: dict) -> str:
    """The profile a book train record ran: "full", "quick", else "custom"."""
    full, quick = (params.DEFAULTS[name].get(record["notebook"]) for name in ("full", "quick"))
    small = quick and (record.get("train_samples") or 0) <= quick["max_train_samples"]
    if small and record.get("epochs") == quick["epochs"]:
        return "quick"
    return "full" if full and record.get("epochs") == full["epochs"] and not small else "custom"


def profile_lines(records: list[dict]) -> list[str]:
    """The report's first line on training: each book model's profile and data size."""
    runs: dict[tuple, dict] = {}
    for r in sorted(book_train(records), key=lambda r: model_rank(r["model"])):
        runs.setdefault((r["model"], r["epochs"], r["train_samples"]), r)
    if not runs:
        return []
    profiles = sorted({profile_of(r) for r in runs.values()})
    words = (_PROFILE_WORDS[profiles[0]].format(epochs=next(iter(runs))[1])
             if len(profiles) == 1 else "the models ran in different profiles")
    return [f"Profile: **{', '.join(profiles)}** ({words}) · " + "; ".join(
        f"{model_title(m)}: {fmt(e, '')} epochs on {fmt(n, ',')} images" for m, e, n in runs)
        + ".", ""]


def unstable(records: list[dict], how: tuple[str, str] = BOOK_UNSTABLE, name=None) -> list[str]:
    """A line per ok train record whose steady epochs spread more than UNSTABLE_SPREAD: `how`
    names them and says how to read them, `name(record)` names a record (default: its model)."""
    lines = []
    for r in ok_records(records, "train"):
        spread = (r.get("steady_epoch_iqr") or 0) / (r["steady_epoch_seconds"] or math.inf)
        if spread > UNSTABLE_SPREAD:
            steady = timing.steady(r["epoch_seconds"] or []) or [r["steady_epoch_seconds"]]
            lines.append(f"- **unstable**: {r['_column']} "
                         f"{name(r) if name else model_title(r['model'])} on {r['device']}: "
                         f"{how[0]} {fmt_range(min(steady), max(steady))} (IQR "
                         f"{fmt(spread, '.0%')} of the median); {how[1]}.")
    return lines


def plot_epoch_bars(records: list[dict], fig=None):
    """Grouped bars: steady-state epoch time (and epoch 1) per model, one bar per column."""
    import numpy as np  # noqa: PLC0415

    by_key = by_model_and_column(book_train(ok_records(records, "train")))
    models = sorted({model for model, _ in by_key}, key=model_rank)
    fig = plots.figure(fig, (4.5 * max(len(models), 1), 4.5))
    axes = fig.subplots(1, max(len(models), 1), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=False):
        ran = [c for c in columns(records) if (model, c) in by_key]  # no bar for a missing run
        runs = [by_key[(model, c)] for c in ran]
        steady = [r.get("steady_epoch_seconds") or r.get("first_epoch_seconds") for r in runs]
        x = np.arange(len(ran))
        ax.bar(x - 0.2, [v or 0 for v in steady], width=0.4,
               label=f"steady epoch (median of {timing.STEADY_EPOCHS})")
        ax.bar(x + 0.2, [r.get("first_epoch_seconds") or 0 for r in runs], width=0.4,
               label="epoch 1 (incl. compiling)", alpha=0.6)
        for xi, value in zip(x, steady, strict=True):
            ax.annotate(fmt_seconds(value), (xi - 0.2, value or 0), ha="center", va="bottom",
                        fontsize="small")
        ax.set_xticks(x, ran, rotation=15, fontsize="small")
        ax.set(title=model_title(model), ylabel="seconds per epoch")
        ax.grid(True, axis="y", alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=2,
               fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))  # room below for the legend, clear of the bars
    return fig


def section(records: list[dict], charts_: dict | None, jobs: list[dict] = ()) -> list[str]:
    """The book's table, the answer in words, the mode warnings, the chart, the unstable flags."""
    if not book_train(records):
        return []
    lines = ["## Training: the book's table", "",
             "Each model on each machine and env (the book's three first, then any model of "
             "your own), trained as the book does (15 epochs in the full profile), in the mode "
             "each row shows.", "", *explained_table(TRAINING_HEADERS, rows(records))]
    if answers := answer_lines(records, list(jobs)):
        lines += ["In words:", "", *answers, ""]
    lines += [line + "\n" for line in not_like_for_like(records)]
    if charts_ is not None and (ok := book_train(ok_records(records, "train"))):
        shown, cap = charts.capped(ok)
        charts_["epoch_times.png"] = plot_epoch_bars(shown, fig=plots.new_figure())
        lines += ["![Epoch times](epoch_times.png)", "", *([f"_{cap}_", ""] if cap else [])]
    if flagged := unstable(book_train(records)):
        lines += [f"Timings that varied a lot between epochs (IQR over median above "
                  f"{UNSTABLE_SPREAD:.0%}):", "", *flagged, ""]
    return lines
