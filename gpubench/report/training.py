"""Training in the report: the book's table, the answer in words, the chart; backends compared."""

from __future__ import annotations

from collections import defaultdict

from gpubench import backends, params, plots, timing
from gpubench.backends import backend_title
from gpubench.fmt import MISSING, NOT_A_NUMBER, dtype_label, fmt, fmt_range, fmt_ratio, fmt_seconds
from gpubench.report import inputs
from gpubench.report.format import capped, explained_table, new_figure, prose
from gpubench.report.inputs import backend_of, book_train, columns, loaded, model_rank, model_title
from gpubench.results import ok_records

MODE_FIELDS = ("jit_compile", "precision", "batch_size", "steps_per_execution", "input_pipeline")
TRAINING_HEADERS = ["model", "machine · env", "device", "mode", "epochs", "training images",
                    "total time", "steady epoch", "first epoch", "time saved vs CPU env",
                    "speedup", "test accuracy", "data"]
BACKEND_HEADERS = ["model", "machine", "device", "backend", "env", "mode", "steady epoch",
                   "images/s", "ratio", "like for like?"]
TIMES = ("total_seconds", "steady_epoch_seconds", "first_epoch_seconds")  # the answer's figures
UNSTABLE_SPREAD = 0.20  # steady-epoch IQR over median above which timings are flagged


def mode(record: dict) -> dict[str, str]:
    """The mode a train record ran in, each field in words ("XLA off", "float32 (TF32)", ...)."""
    compiled = {True: "on", False: "off"}.get(record.get("jit_compile"), "?")
    return {"jit_compile": f"{backends.COMPILER.get(backend_of(record), 'XLA')} {compiled}",
            "precision": dtype_label(record.get("precision"), record.get("tf32")),
            "batch_size": f"batch {fmt(record.get('batch_size'), '')}",
            "steps_per_execution": f"steps/exec {fmt(record.get('steps_per_execution'), '')}",
            "input_pipeline": str(record.get("input_pipeline") or "?")}


def mode_differences(record: dict, other: dict) -> list[str]:
    """The mode fields in which two runs differ by what ran (eager PyTorch = TF with XLA off)."""
    return [name for name in MODE_FIELDS if record.get(name) != other.get(name) or name ==
            "precision" and bool(record.get("tf32")) != bool(other.get("tf32"))]


def compared(records: list[dict]) -> list[tuple[dict, str | None, dict | None]]:
    """Each book train record in the table's order, its baseline column and that one's run."""
    runs = {(r["model"], r["_column"]): r for r in book_train(records)}
    bases, order = inputs.baselines(records), columns(records)
    return [(r, bases.get(column), runs.get((model, bases.get(column))))
            for (model, column), r in sorted(runs.items(), key=lambda item: (
                model_rank(item[0][0]), order.index(item[0][1])))]


def rows(records: list[dict]) -> list[list]:
    """The book's table: per model and column, its mode, times, time saved and speedup."""
    found = []
    for r, base, b in compared(records):
        first = [model_title(r["model"]), r["_column"], r["device"], ", ".join(mode(r).values()),
                 fmt(r["epochs"], ""), fmt(r["train_samples"], ",")]
        last = f"{r['dataset'] or '?'} " + ("**(synthetic)**" if r["data_source"] == "synthetic"
                                            else f"({r['data_source'] or '?'})")
        if r["status"] != "ok":
            found.append(first + [r["status"].upper()] + [MISSING] * 5 + [last])
            continue
        if base is None:  # % time saved and speedup against the baseline's run `b`
            cpu = inputs.cpu_env(backend_of(r))
            versus = ("baseline", "1.00x") if r["env"] == cpu else (
                f"{NOT_A_NUMBER} (no {cpu} env)", MISSING)
        elif b is None:
            versus = f"{NOT_A_NUMBER} (no {model_title(r['model'])} run in {base})", MISSING
        elif b["status"] != "ok" or not b["total_seconds"] or not r["total_seconds"]:
            versus = MISSING, MISSING
        elif (b["epochs"], b["train_samples"]) != (r["epochs"], r["train_samples"]):
            versus = f"{NOT_A_NUMBER} (different settings)", MISSING
        else:
            versus = (fmt(1 - r["total_seconds"] / b["total_seconds"], ".0%"),
                      f"{fmt_ratio(b['total_seconds'] / r['total_seconds'])}x")
        found.append(first + [
            fmt_seconds(r["total_seconds"]) + (f" (**loaded**: {loaded(r)})" if loaded(r) else ""),
            fmt_seconds(r["steady_epoch_seconds"]), fmt_seconds(r["first_epoch_seconds"]),
            *versus, fmt(r["test_accuracy"], ".3f"), last])
    return found


def _no_answer(records: list[dict], jobs: list[dict], r: dict, base: str | None,
               b: dict | None) -> str | None:  # why `r` has no answer against `base`, if so
    if base is None:
        return f"no {inputs.cpu_env(backend_of(r))} env in these runs"
    if b is not None:
        if b["status"] != "ok":
            return f"its run there {b['status']}: {b.get('error') or ''}".rstrip(": ")
        return None if all(x[k] for x in (r, b) for k in TIMES) else "a time was not recorded"
    ran = {(x["_run_dir"], x["env"], r["notebook"]) for x in records if x["_column"] == base}
    job = next((j for j in jobs if (j["dir"], j["env"], j["notebook"]) in ran), None)
    if job is None or job["status"] in ("ok", "pending"):
        return f"{base} did not run {r['notebook']}"
    status = job["status"] if job["status"] == "failed" else f"was {job['status']}"
    return f"{base}'s {r['notebook']} job {status}" + (f" ({job['error']})" if job["error"] else "")


def answer_lines(records: list[dict], jobs: list[dict]) -> list[str]:
    """The answer in words per compared run: the total, the steady epochs and epoch 1's share."""
    lines = []
    for r, base, b in compared(records):
        if r["status"] != "ok" or base is None and r["env"] == inputs.cpu_env(backend_of(r)):
            continue
        head = f"- **{model_title(r['model'])}**, {r['_column']} against {base or 'a CPU env'}: "
        if why := _no_answer(records, jobs, r, base, b):
            lines.append(f"{head}no answer: {why}.")
            continue
        total, steady = (b[k] / r[k] for k in TIMES[:2])
        faster = f"{fmt_ratio(max(steady, 1 / steady))}x {'faster' if steady >= 1 else 'slower'}"
        lines.append(head + prose(
            "answer", who="the GPU" if r["device"] != b["device"] else "this run", faster=faster,
            ours={k: fmt_seconds(r[k]) for k in TIMES}, epochs=r["epochs"],
            theirs={k: fmt_seconds(b[k]) for k in TIMES}, total=fmt_ratio(total),
            how="because" if total < steady else "while",
            share=fmt(r["first_epoch_seconds"] / r["total_seconds"], ".0%")))
    return lines


def profile_lines(records: list[dict]) -> list[str]:
    """The report's first line on training: each book model's profile (full, quick, custom)."""
    runs: dict[tuple, str] = {}
    for r in sorted(book_train(records), key=lambda r: model_rank(r["model"])):
        full, quick = (params.DEFAULTS[name].get(r["notebook"]) for name in ("full", "quick"))
        small = quick and (r.get("train_samples") or 0) <= quick["max_train_samples"]
        profile = ("quick" if small and r.get("epochs") == quick["epochs"]
                   else "full" if full and r.get("epochs") == full["epochs"] and not small
                   else "custom")
        runs.setdefault((r["model"], r["epochs"], r["train_samples"]), profile)
    if not runs:
        return []
    profiles = sorted(set(runs.values()))
    words = (prose(f"profile {profiles[0]}", epochs=next(iter(runs))[1]) if len(profiles) == 1
             else "the models ran in different profiles")
    return [f"Profile: **{', '.join(profiles)}** ({words}) · " + "; ".join(
        f"{model_title(m)}: {fmt(e, '')} epochs on {fmt(n, ',')} images" for m, e, n in runs)
        + ".", ""]


def unstable(records: list[dict], how: tuple[str, str] | None = None, name=None) -> list[str]:
    """A line per ok train record whose steady epochs spread over UNSTABLE_SPREAD, named so."""
    lines, how = [], how or ("steady epochs", prose("unstable epochs"))
    for r in ok_records(records, "train"):
        spread = (r.get("steady_epoch_iqr") or 0) / (r["steady_epoch_seconds"] or float("inf"))
        if spread > UNSTABLE_SPREAD:
            steady = timing.steady(r["epoch_seconds"] or []) or [r["steady_epoch_seconds"]]
            lines.append(f"- **unstable**: {r['_column']} "
                         f"{name(r) if name else model_title(r['model'])} on {r['device']}: "
                         f"{how[0]} {fmt_range(min(steady), max(steady))} (IQR "
                         f"{fmt(spread, '.0%')} of the median); {how[1]}.")
    return lines


def plot_epoch_bars(records: list[dict], fig=None):
    """Grouped bars: steady-state epoch time (and epoch 1) per model, one bar per column."""
    runs = {(r["model"], r["_column"]): r for r in book_train(ok_records(records, "train"))}
    models = sorted({model for model, _ in runs}, key=model_rank)
    fig = plots.figure(fig, (4.5 * max(len(models), 1), 4.5))
    axes = fig.subplots(1, max(len(models), 1), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=False):
        ran = [c for c in columns(records) if (model, c) in runs]  # no bar for a missing run
        steady = [runs[model, c].get("steady_epoch_seconds") or runs[model, c].get(
            "first_epoch_seconds") for c in ran]
        bars = ax.bar(ran, [v or 0 for v in steady], width=-0.4, align="edge",
                      label=f"steady epoch (median of {timing.STEADY_EPOCHS})")
        ax.bar(ran, [runs[model, c].get("first_epoch_seconds") or 0 for c in ran], width=0.4,
               align="edge", label="epoch 1 (incl. compiling)", alpha=0.6)
        ax.bar_label(bars, [fmt_seconds(v) for v in steady], fontsize="small")
        ax.tick_params(axis="x", labelrotation=15, labelsize="small")
        ax.set(title=model_title(model), ylabel="seconds per epoch")
        ax.grid(True, axis="y", alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=2,
               fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))  # room below for the legend, clear of the bars
    return fig


def section(records: list[dict], charts: dict | None, jobs: list[dict] = ()) -> list[str]:
    """The book's table, the answer in words, the mode warnings, the chart, the unstable flags."""
    if not book_train(records):
        return []
    lines = ["## Training: the book's table", "", prose("training"), "",
             *explained_table(TRAINING_HEADERS, rows(records))]
    if answers := answer_lines(records, list(jobs)):
        lines += ["In words:", "", *answers, ""]
    lines += [f"**Not like for like:** {model_title(r['model'])}: {r['_column']} ran "
              f"{', '.join(mode(r)[n] for n in differ)}; its baseline {b['_column']}: "
              f"{', '.join(mode(b)[n] for n in differ)}.\n"
              for r, _, b in compared(records) if b and (differ := mode_differences(r, b))]
    if charts is not None and (ok := book_train(ok_records(records, "train"))):
        shown, cap = capped(ok)
        charts["epoch_times.png"] = plot_epoch_bars(shown, fig=new_figure())
        lines += ["![Epoch times](epoch_times.png)", "", *[cap, ""] * bool(cap)]
    if flagged := unstable(book_train(records)):
        lines += [f"Timings that varied a lot between epochs (IQR over median above "
                  f"{UNSTABLE_SPREAD:.0%}):", "", *flagged, ""]
    return lines


def like_for_like(record: dict, reference: dict) -> str:
    """"yes", or what differs between two runs by what ran (`mode_differences`), data size too."""
    ours, theirs = ({**mode(r), "train_samples": f"{fmt(r.get('train_samples'), ',')} images"}
                    for r in (record, reference))
    differ = mode_differences(record, reference) + ["train_samples"] * (
        record.get("train_samples") != reference.get("train_samples"))
    if not differ:
        return "yes"
    text = ("**not like for like**: " + ", ".join(ours[n] for n in differ) + " against "
            + ", ".join(theirs[n] for n in differ))
    if "jit_compile" in differ and "jax" in (backend_of(record), backend_of(reference)):
        text += " (JAX always compiles; run TensorFlow with `-p xla=on` for the like-for-like pair)"
    return text


def backends_section(records: list[dict]) -> list[str]:
    """The "Backends" section: one model on one device of one machine across backends."""
    by_key: dict[tuple, list[dict]] = defaultdict(list)
    order = columns(records)
    for r in sorted(book_train(ok_records(records, "train")), key=lambda r: (
            inputs.backend_rank(backend_of(r)), order.index(r["_column"]))):
        by_key[(r["_machine"], model_rank(r["model"]), r["device"])].append(r)
    if not (groups := [g for _, g in sorted(by_key.items()) if len({*map(backend_of, g)}) > 1]):
        return []
    found = []
    for group in groups:
        first = [r for r in group if backend_of(r) == backend_of(group[0])]
        for r in group:
            reference = next((x for x in first if not mode_differences(x, r)), first[0])
            rate, theirs = (x.get("samples_per_second") or x["steady_epoch_seconds"] and  # images/s
                            x["train_samples"] / x["steady_epoch_seconds"] for x in (r, reference))
            version = r["environment"].get("backend_version") or r["environment"].get(backend_of(r))
            found.append([model_title(r["model"]), r["_machine"], r["device"],
                          backend_title(backend_of(r)) + (f" {version}" if version else ""),
                          r["env"], ", ".join(mode(r).values()),
                          fmt_seconds(r["steady_epoch_seconds"]),
                          fmt(rate, ",.0f") + " (**loaded**)" * bool(loaded(r)),
                          "1.00x (reference)" if r is reference
                          else f"{fmt_ratio(rate / theirs)}x" if rate and theirs else MISSING,
                          MISSING if r is reference else like_for_like(r, reference)])
    names = sorted({backend_of(r) for group in groups for r in group}, key=inputs.backend_rank)
    return [f"## Backends: {' vs '.join(backend_title(n) for n in names)}", "",
            prose("backends", first=backend_title(names[0])), "",
            *explained_table(BACKEND_HEADERS, found)]
