"""Measuring the Speed_Factors variants and their records (`run`): on each device all variants in
interleaved rounds (round r of every one, then round r+1: a machine that slows for a while slows
them alike), a round an epoch from its first step to its last; then each factor's fastest value
combined, beside a fresh baseline; on a GPU, last, the busy regions (`factors.trainer`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gpubench import backends, devices, results, telemetry, timing
from gpubench.factors.rules import (
    BASELINE,
    COMPUTE_DTYPE,
    FACTORS,
    Variant,
    compare,
    for_backend,
    round_rates,
    variants,
)
from gpubench.factors.trainer import BUSY_REGION_SECONDS, Trainer
from gpubench.params import SPEED_FACTORS_MODELS, positive_int


def devices_to_measure(names: Sequence[str] | None = None) -> list[str]:
    """The canonical names of `names`; None: every device of this environment, GPUs first."""
    return [devices.resolve(name) for name in (devices.gpus_first() if names is None else names)]


def matmul_peaks(device_names: Sequence[str], precisions: Sequence[str], *, store=None,
                 env: str | None = None, notebook: str = "Speed_Factors",
                 progress: Callable[[dict], None] | None = None) -> list[dict]:
    """The matmul peak record of every device at every compute dtype of `precisions`: the one
    this env stored already (performanceTest's, say), else a probe run now and stored."""
    from gpubench import matmul  # noqa: PLC0415 - importing it loads the framework

    return matmul.peaks_for(device_names, sorted({COMPUTE_DTYPE[p] for p in precisions}),
                            store=store, env=env, notebook=notebook, progress=progress)


def best_settings(trainers: Sequence[Trainer]) -> dict:
    """Each factor's value of best speedup in the rounds over trainers[0] (the baseline's unless one
    beats it), time-boxed and failed ones left out; its own rounds then show what it is worth."""
    settings, best = BASELINE.settings(), dict.fromkeys(FACTORS, 1.0)
    for t in trainers:
        if t.variant.factor in FACTORS and t.status == "ok" and t.boxed_steps is None:
            speedup = compare(trainers[0].rates(), t.rates())["speedup"]
            if speedup is not None and speedup > best[t.variant.factor]:
                best[t.variant.factor] = speedup
                settings[t.variant.factor] = getattr(t.variant, t.variant.factor)
    return settings


def rounds(trainers: Sequence[Trainer], epochs: int, baseline_epoch: float,
           say: Callable[[str], None]) -> None:
    """Time-box the slow variants, then train every working one in `epochs` interleaved rounds."""
    for t in trainers:
        if t.status != "ok":
            say(f"{t.device}: {t.variant.label}: {t.status}: {t.error}")
            continue
        t.decide_box(baseline_epoch)
        if t.boxed_steps is not None:
            say(f"{t.device}: {t.variant.label} projects {t.projected_epoch():,.0f} s per epoch "
                f"({t.projected_epoch() / baseline_epoch:,.0f}x the baseline): time-boxed to "
                f"{t.boxed_steps} steps per round")
    for index in range(epochs):
        start = time.perf_counter()
        for t in (t for t in trainers if t.status == "ok"):
            try:
                with devices.scope(t.device):
                    t.round_seconds.append(t.timed(t.boxed_steps, monitor=True))
            except Exception as exc:  # noqa: BLE001 - an OOM is a result; the rest go on
                t.fail(exc)
                continue
            if index > 0:
                t.steps_done += t.boxed_steps or t.steps_per_epoch
        say(f"{trainers[0].device}: round {index + 1}/{epochs} done "
            f"({time.perf_counter() - start:.1f} s)")


def busy_regions(trainers: Sequence[Trainer], say: Callable[[str], None]) -> None:
    """A busy region for each measured GPU variant whose rounds NVML read and one of whose steady
    rounds was under BUSY_REGION_SECONDS; one that fails keeps its rounds and says why."""
    for t in trainers:
        steady = timing.steady(t.round_seconds)
        if not (t.status == "ok" and t.device.startswith("gpu") and steady
                and min(steady) < BUSY_REGION_SECONDS
                and any((r or {}).get("source") == "nvml" for r in t.round_telemetry)):
            continue
        try:
            t.busy_region = t.measure_busy_region()
        except Exception as exc:  # noqa: BLE001 - the rounds stand; the region says why not
            t.busy_region = results.unmeasured(
                f"the busy region failed: {backends.failure(exc)[1]}")
        if t.busy_region.get("gpu_util_percent_mean") is None:
            why = t.busy_region.get("reason") or "NVML gave no utilisation figure for this GPU"
            say(f"{t.device}: {t.variant.label}: no GPU busy figure: {why}")
        else:
            say(f"{t.device}: {t.variant.label}: GPU busy "
                f"{t.busy_region['gpu_util_percent_mean']:.0f} % over "
                f"{t.busy_region['seconds']:.1f} s of its rounds back to back (a round: "
                f"{min(steady):.2f} s, under {BUSY_REGION_SECONDS:g} s)")


def measure_device(model_name: str, split, device: str, values: dict[str, Sequence], *,
                   epochs: int, learning_rate: float | None = None,
                   progress: Callable[[str], None] | None = None,
                   trainer: type[Trainer] = Trainer) -> list[Trainer]:
    """The one-factor variants, then their fastest values combined beside a fresh baseline, each
    in interleaved rounds; on a GPU, the busy regions. `trainer`: the class of each variant."""
    say = progress or (lambda text: None)

    def prepared(found: Sequence[Variant]) -> list[Trainer]:
        made = []
        for variant in found:
            start = time.perf_counter()
            made.append(trainer.prepared(variant, model_name, device, split, learning_rate))
            rate = variant.batch_size / made[-1].probe_step_seconds
            say(f"{device}: probed {variant.label}: {rate:,.0f} images/s "
                f"({time.perf_counter() - start:.1f} s)")
        return made

    trainers = prepared(variants(values))
    baseline_epoch = trainers[0].projected_epoch()
    rounds(trainers, epochs, baseline_epoch, say)
    for t in trainers:  # evaluated now: every variant after the same number of epochs
        t.evaluate(split)
    combined = Variant("combined", **best_settings(trainers))
    say(f"{device}: each factor's fastest value in the rounds: {combined.label}")
    pair = prepared([BASELINE, combined])
    rounds(pair, epochs, baseline_epoch, say)
    pair[1].evaluate(split)
    if pair[0].status == "ok":
        pair[1].paired_baseline_seconds = pair[0].round_seconds
    busy_regions([*trainers, pair[1]], say)  # after evaluate: they train further
    return [*trainers, pair[1]]


def record(t: Trainer, split, *, data, model_name: str, epochs: int, env: str,
           notebook: str) -> dict:
    """The train record of a measured variant; on a GPU where neither its steady rounds nor a busy
    region gave a busy %, `busy_region` is its steady rounds' telemetry: epoch 1 (compiling)
    left out, and the `reason` why."""
    from gpubench import training  # noqa: PLC0415 - loads Keras

    v, steady, busy = t.variant, timing.steady(t.round_seconds), t.busy_region
    parts = timing.steady(t.round_telemetry)
    if (busy is None and t.status == "ok" and t.device.startswith("gpu") and parts
            and all((p or {}).get("gpu_util_percent_mean") is None for p in parts)):
        busy = telemetry.combine(parts)
    fields = dict(
        notebook=notebook, env=env, device=t.device, model=model_name, dataset=data.name,
        data_source=data.source, data_verified=data.verified, epochs=epochs,
        batch_size=v.batch_size, train_samples=len(split.x_train), factor=v.factor,
        precision=v.precision, steps_per_execution=v.steps_per_execution,
        input_pipeline=v.input_pipeline, busy_region=busy,
        jit_compile=backends.current().jit_compile(v.xla) is True,
        telemetry=telemetry.combine(t.round_telemetry) if t.round_telemetry else None,
        **telemetry.epoch_fields(t.round_telemetry))
    if t.status != "ok" or not steady:
        return results.make_record("train", status="error" if t.status == "ok" else t.status,
                                   error=t.error or "no steady round",
                                   epoch_seconds=list(t.round_seconds), **fields)
    fields.update(training.mode_fields(t.model, input_pipeline=v.input_pipeline, device=t.device))
    made = results.make_record(
        "train", **timing.train_fields(t.round_seconds, len(split.x_train),
                                       fields["flops_per_sample"]),
        steady_epoch_min=min(steady), test_accuracy=t.test_accuracy, test_loss=t.test_loss,
        paired_baseline_seconds=t.paired_baseline_seconds, steps_measured=t.steps_done,
        time_boxed=t.boxed_steps is not None, **fields)
    # This chapter's rate: the fastest steady round, of the steps a time-boxed round measured.
    made["samples_per_second"] = max(round_rates(made))
    if made.get("flops_per_sample"):
        made["achieved_gflops"] = made["flops_per_sample"] * made["samples_per_second"] / 1e9
    return made


def run(model_name: str, data, device_names: Sequence[str] | None, values: dict[str, Sequence],
        *, epochs: int, store=None, env: str | None = None, notebook: str = "Speed_Factors",
        progress: Callable[[str], None] | None = None,
        trainer: type[Trainer] = Trainer) -> list[dict]:
    """Measure every variant on every device (None: all, GPUs first); store and return a train
    record each. The values are those `for_backend` keeps (its notes go to `progress`), tf.data
    refused before anything trains where it cannot run. `trainer`: the class of each variant (a
    hook: a subclass may decide the time box or the busy region its own way)."""
    from gpubench import training  # noqa: PLC0415 - loads Keras

    if model_name not in SPEED_FACTORS_MODELS:
        raise ValueError(f"model {model_name!r} is not one Speed_Factors trains; "
                         f"use one of {', '.join(SPEED_FACTORS_MODELS)}")
    positive_int("epochs", epochs, minimum=2)
    values, notes = for_backend(values)
    for note in notes:
        (progress or (lambda text: None))(note)
    env = env or results.default_env_name()
    split = training.split(model_name, data)
    made = []
    for device in devices_to_measure(device_names):
        for t in measure_device(model_name, split, device, values, epochs=epochs,
                                progress=progress, trainer=trainer):
            made.append(record(t, split, data=data, model_name=model_name, epochs=epochs,
                               env=env, notebook=notebook))
            if store is not None:
                store.append(made[-1])
    return made
