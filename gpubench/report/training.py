"""Training in the report and the book's chapters: the book's table (mode, times, time saved,
speedup, energy), the mode warnings, the unstable flags, and the training charts."""

from __future__ import annotations

import math

from gpubench import factors, params, plots, timing
from gpubench.fmt import fmt, fmt_range, fmt_ratio, fmt_seconds
from gpubench.report import charts
from gpubench.report import telemetry as telemetry_text
from gpubench.report.format import explained_table
from gpubench.report.records import (
    backend_of,
    baseline,
    book_train,
    by_model_and_column,
    columns,
    cpu_env,
    model_rank,
    model_title,
)
from gpubench.results import ok_records

_MODE = (("jit_compile", "XLA ", lambda v: "on" if v else "off"), ("precision", "", str),
         ("batch_size", "batch ", str), ("steps_per_execution", "steps/exec ", str),
         ("input_pipeline", "", str))


# What compiling is called on each backend (jit_compile): XLA on TensorFlow and JAX.
COMPILER = {"torch": "torch.compile "}


def mode(record: dict) -> dict[str, str]:
    """The mode a train record ran in, each field in words ("XLA off", "batch 100", ...;
    "torch.compile off" on PyTorch)."""
    labels = {"jit_compile": COMPILER.get(backend_of(record), "XLA ")}
    return {name: labels.get(name, label)
            + ("?" if record.get(name) is None else show(record[name]))
            for name, label, show in _MODE}


def rows(records: list[dict]) -> list[list]:
    """The book's table: per model and column, total time, % saved and speedup vs the CPU env
    of the same machine and backend, and the energy of all epochs where it was measured."""
    by_key = by_model_and_column(records)
    found = []
    for model in sorted({model for model, _ in by_key}, key=model_rank):
        for column in columns(records):
            if (r := by_key.get((model, column))) is None:
                continue
            source = r["data_source"] or "?"
            data = (r["dataset"] or "?") + (" **(synthetic)**" if source == "synthetic"
                                            else f" ({source})")
            first = [model_title(model), column, r["device"], ", ".join(mode(r).values()),
                     fmt(r["epochs"], ""), fmt(r["train_samples"], ",")]
            if r["status"] != "ok":
                found.append(first + [r["status"].upper()] + ["–"] * 6 + [data])
                continue
            base = baseline(records, column)
            if base is not None and (model, base) not in by_key:  # the CPU env lacks this model
                saved, speedup = f"n/a (no {model_title(model)} run in {base})", "–"
            else:
                saved, speedup = _versus(by_key.get((model, base)), r, base is None
                                         and r["env"] != cpu_env(backend_of(r)))
            found.append(first + [
                fmt_seconds(r["total_seconds"]), fmt_seconds(r["steady_epoch_seconds"]),
                fmt_seconds(r["first_epoch_seconds"]), saved, speedup, energy_text(r),
                fmt(r["test_accuracy"], ".3f"), data])
    return found


def profile_of(record: dict) -> str:
    """The profile a book train record ran: "full" (the book's epochs, more images than the quick
    profile's cap), "quick" (its epochs and cap), else "custom"."""
    full, quick = (params.DEFAULTS[name].get(record["notebook"]) for name in ("full", "quick"))
    samples = record.get("train_samples") or 0
    if quick and record.get("epochs") == quick["epochs"] and samples <= quick["max_train_samples"]:
        return "quick"
    if full and record.get("epochs") == full["epochs"] and not (
            quick and samples <= quick["max_train_samples"]):
        return "full"
    return "custom"


_PROFILE_WORDS = {"full": "the book's {epochs} epochs on all the training images",
                  "quick": "a smoke run, not the book's 15 epochs on all the images: its times do "
                           "not compare with the book's",
                  "custom": "epochs or images set by hand"}


def profile_lines(records: list[dict]) -> list[str]:
    """The report's first lines on training: the profile each book model ran in and its data
    size (training images), in the book's order; [] without book train records."""
    found = sorted(book_train(records), key=lambda r: model_rank(r["model"]))
    if not found:
        return []
    runs = {}
    for r in found:
        runs.setdefault((r["model"], r["epochs"], r["train_samples"]), r)
    profiles = sorted({profile_of(r) for r in runs.values()})
    words = _PROFILE_WORDS[profiles[0]].format(epochs=found[0]["epochs"]) if len(profiles) == 1 \
        else "the models ran in different profiles"
    parts = [f"{model_title(m)}: {fmt(e, '')} epochs on {fmt(n, ',')} images"
             for m, e, n in runs]
    return [f"Profile: **{', '.join(profiles)}** ({words}) · " + "; ".join(parts) + ".", ""]


def _versus(base: dict | None, other: dict, no_cpu_env: bool = False) -> tuple[str, str]:
    """'% time saved' and 'speedup' of `other` against `base` ('baseline' for the base itself;
    with `no_cpu_env`, `other` is no CPU env and its backend has none on its machine)."""
    if no_cpu_env:
        return f"n/a (no {cpu_env(backend_of(other))} env)", "–"
    if base is None:
        return "baseline", "1.00x"
    if base["status"] != "ok" or not base["total_seconds"] or not other["total_seconds"]:
        return "–", "–"
    if base["epochs"] != other["epochs"] or base["train_samples"] != other["train_samples"]:
        return "n/a (different settings)", "–"
    saved = 1 - other["total_seconds"] / base["total_seconds"]
    return fmt(saved, ".0%"), f"{fmt_ratio(base['total_seconds'] / other['total_seconds'])}x"


def _joules(value: float) -> str:
    return f"{fmt(value, ',.1f' if value < 10 else ',.0f')} J"


def energy_text(record: dict) -> str:
    """Energy of all a train record's epochs: the GPU's (NVML) on a GPU, and the CPU package's
    (RAPL) or why there is none; "–" where the record has no telemetry (older gpubench)."""
    telemetry = record.get("telemetry")
    if not telemetry:
        return "–"
    parts = []
    if record["device"].startswith("gpu"):
        gpu = telemetry.get("energy_joules")
        method = {"counter": "counter", "power_integral": "power x time"}.get(
            telemetry.get("energy_method"), "")
        parts.append(f"GPU {_joules(gpu)}" + (f" ({method})" if method else "") if gpu is not None
                     else f"GPU n/a ({telemetry.get('reason') or 'not measured'})")
    cpu = telemetry.get("cpu_energy_joules")
    parts.append(f"CPU {_joules(cpu)} (RAPL)" if cpu is not None
                 else f"CPU {telemetry_text.NO_RAPL}")
    return "; ".join(parts)


TRAINING_HEADERS = ["model", "machine · env", "device", "mode", "epochs", "training images",
                    "total time",
                    "steady epoch", "first epoch", "time saved vs CPU env", "speedup",
                    "energy (all epochs)", "test accuracy", "data"]


def mode_differences(ours: dict, theirs: dict) -> list[str]:
    """The names of the mode fields (`mode`) in which two runs differ."""
    return [name for name in ours if ours[name] != theirs[name]]


def not_like_for_like(records: list[dict]) -> list[str]:
    """A "**Not like for like:**" line per model whose compared columns ran in different modes."""
    by_key = by_model_and_column(records)
    lines = []
    for (model, column), record in by_key.items():
        if (base := by_key.get((model, baseline(records, column)))) is None:
            continue
        theirs, ours = mode(base), mode(record)
        if differ := mode_differences(ours, theirs):
            lines.append(
                f"**Not like for like:** {model_title(model)}: "
                f"{record['env']}: {', '.join(ours[n] for n in differ)}, "
                f"{base['env']}: {', '.join(theirs[n] for n in differ)}.")
    return lines


UNSTABLE_SPREAD = 0.20  # steady-epoch IQR over median above which timings are flagged


def unstable(records: list[dict]) -> list[str]:
    """A line per train record whose steady epochs (Speed_Factors: rounds) spread more than
    UNSTABLE_SPREAD, naming a variant as the factors table does and saying how to read it."""
    lines = []
    for r in ok_records(records, "train"):
        spread = (r.get("steady_epoch_iqr") or 0) / (r["steady_epoch_seconds"] or math.inf)
        if spread <= UNSTABLE_SPREAD:
            continue
        steady = timing.steady(r["epoch_seconds"] or []) or [r["steady_epoch_seconds"]]
        what = model_title(r["model"])
        if r.get("factor"):
            labels = [row["label"] for row in factors.effects([r])]
            what = f"Speed_Factors {what}, variant {labels[0] if labels else r['factor']}"
            how = ("steady rounds", "its \"x vs baseline (min)\" in the factors table compares "
                   "the fastest rounds, which noise slows least; trust an effect only where its "
                   "interval leaves out 1.0, or rerun on a quieter machine")
        else:
            how = ("steady epochs", "the table's steady epoch is their median: read differences "
                   "between rows smaller than this spread as noise, or rerun on a quieter machine")
        lines.append(f"- **unstable**: {r['_column']} {what} on {r['device']}: {how[0]} "
                     f"{fmt_range(min(steady), max(steady))} (IQR {fmt(spread, '.0%')} of the "
                     "median); "
                     f"{how[1]}.")
    return lines



def plot_epoch_bars(records: list[dict], fig=None):
    """Grouped bars: steady-state epoch time (and epoch 1) per model, one bar per column."""
    import numpy as np  # noqa: PLC0415

    train = book_train(ok_records(records, "train"))
    models = sorted({r["model"] for r in train}, key=model_rank)
    cols = columns(train)
    by_key = {(r["model"], r["_column"]): r for r in train}
    fig = plots.figure(fig, (4.5 * max(len(models), 1), 4.5))
    axes = fig.subplots(1, max(len(models), 1), squeeze=False)
    for ax, model in zip(axes[0], models, strict=False):
        ran = [column for column in cols if (model, column) in by_key]  # no bar for a missing run
        runs = [by_key[(model, column)] for column in ran]
        steady = [r.get("steady_epoch_seconds") or r.get("first_epoch_seconds") for r in runs]
        first = [r.get("first_epoch_seconds") for r in runs]
        x = np.arange(len(ran))
        ax.bar(x - 0.2, [v or 0 for v in steady], width=0.4,
               label=f"steady epoch (median of {timing.STEADY_EPOCHS})")
        ax.bar(x + 0.2, [v or 0 for v in first], width=0.4, label="epoch 1 (incl. tracing)",
               alpha=0.6)
        for xi, value in zip(x, steady, strict=True):
            if value is not None:
                ax.annotate(fmt_seconds(value), (xi - 0.2, value), ha="center", va="bottom",
                            fontsize="small")
        ax.set_xticks(x, ran, rotation=15, fontsize="small")
        ax.set(title=model_title(model), ylabel="seconds per epoch")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))  # room below for the legend, clear of the bars
    return fig


def section(records: list[dict], charts_: dict | None) -> list[str]:
    """The book's table, its mode warnings, the epoch-time chart and the unstable flags."""
    lines = []
    if book_train(records):
        lines += ["## Training: the book's table", "",
                  "Each model on each machine and env (the book's three first, then any model "
                  "of your own by its name), trained as the book does (15 epochs in the full "
                  "profile), in the mode each row shows.", "",
                  *explained_table(TRAINING_HEADERS, rows(records))]
        lines += [line + "\n" for line in not_like_for_like(records)]
    if charts_ is not None and book_train(ok_records(records, "train")):
        shown, cap = charts.capped(book_train(ok_records(records, "train")))
        charts_["epoch_times.png"] = plot_epoch_bars(shown, fig=plots.new_figure())
        lines += ["![Epoch times](epoch_times.png)", "", *([f"_{cap}_", ""] if cap else [])]
    if flagged := unstable(records):
        lines += [f"Timings that varied a lot between epochs (IQR over median above "
                  f"{UNSTABLE_SPREAD:.0%}):", "", *flagged, ""]
    return lines
