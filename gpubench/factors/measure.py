"""Measuring the Speed_Factors variants: interleaved rounds on each device, the combination of
the fastest values, and one train record per variant.

On every device all variants are trained in interleaved rounds (round r of every variant, then
round r+1), so that a machine that slows down for a while slows them all alike. A round is one
epoch, timed from its first step to its last (a `fit` call's set-up is not counted). Then the
combination: each factor's value that was fastest in the rounds (the baseline's where none beat
it), trained in a second set of rounds interleaved with a fresh baseline, against which it is
compared. On a GPU, last, each variant whose steady rounds were shorter than
BUSY_REGION_SECONDS trains once more in a busy region, whose NVML figure is its GPU busy %.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gpubench import backends, devices, results, telemetry, timing  # these load no framework
from gpubench.factors.rules import (
    BASELINE,
    COMPUTE_DTYPE,
    FACTORS,
    MODELS,
    Variant,
    for_this_backend,
    variants,
)
from gpubench.factors.stats import compare, round_rates
from gpubench.factors.trainer import BUSY_REGION_SECONDS, Trainer, decide_box, prepared
from gpubench.params import positive_int


def devices_to_measure(names: Sequence[str] | None = None) -> list[str]:
    """The canonical names of `names`; None: every device of this environment, GPUs first."""
    if names is None:
        names = devices.gpus_first()
    return [devices.resolve(name) for name in names]


def matmul_peaks(device_names: Sequence[str], precisions: Sequence[str], *, store=None,
                 env: str | None = None, notebook: str = "Speed_Factors",
                 progress: Callable[[dict], None] | None = None) -> list[dict]:
    """The matmul peak record of every device at every compute dtype of `precisions`: the one
    this env already stored (performanceTest's, say), else a probe run now and stored."""
    from gpubench import matmul  # noqa: PLC0415 - importing it loads the framework

    dtypes = sorted({COMPUTE_DTYPE[p] for p in precisions})
    return matmul.peaks_for(device_names, dtypes, store=store, env=env, notebook=notebook,
                            progress=progress)


def best_settings(trainers: Sequence[Trainer]) -> dict:
    """Each factor's value with the best speedup in the rounds (the chapter's statistic), where
    one beats the baseline; time-boxed and failed variants never count. A value whose effect
    is not clear may be chosen: the combination's own rounds then show what it is worth."""
    settings = BASELINE.settings()
    base = trainers[0].rates()
    for factor in FACTORS:
        best = 1.0
        for t in trainers:
            if t.variant.factor != factor or t.status != "ok" or t.boxed_steps is not None:
                continue
            speedup = compare(base, t.rates())["speedup"]
            if speedup is not None and speedup > best:
                best, settings[factor] = speedup, getattr(t.variant, factor)
    return settings


def _prepare_all(variants_: Sequence[Variant], model_name: str, device: str, split,
                 learning_rate, say: Callable[[str], None]) -> list[Trainer]:
    """Build and probe each variant, saying what each probe found."""
    trainers = []
    for variant in variants_:
        start = time.perf_counter()
        trainers.append(prepared(variant, model_name, device, split, learning_rate))
        say(f"{device}: probed {variant.label}: {trainers[-1].probe_rate():,.0f} images/s "
            f"({time.perf_counter() - start:.1f} s)")
    return trainers


def _rounds(trainers: Sequence[Trainer], device: str, epochs: int, baseline_epoch: float,
            say: Callable[[str], None]) -> None:
    """Time-box the slow variants, then train every working one in `epochs` interleaved rounds."""
    for t in trainers:
        if t.status != "ok":
            say(f"{device}: {t.variant.label}: {t.status}: {t.error}")
            continue
        decide_box(t, baseline_epoch)
        if t.boxed_steps is not None:
            say(f"{device}: {t.variant.label} projects {t.projected_epoch():,.0f} s per epoch "
                f"({t.projected_epoch() / baseline_epoch:,.0f}x the baseline): time-boxed to "
                f"{t.boxed_steps} steps per round")
    for round_index in range(epochs):
        start = time.perf_counter()
        for t in (t for t in trainers if t.status == "ok"):
            try:
                with devices.scope(device):
                    t.round_seconds.append(t.timed(t.boxed_steps, monitor=True))
            except Exception as exc:  # noqa: BLE001 - an OOM is a result; the rest go on
                t.fail(exc)
                continue
            if round_index > 0:
                t.steps_done += t.boxed_steps or t.steps_per_epoch
        say(f"{device}: round {round_index + 1}/{epochs} done "
            f"({time.perf_counter() - start:.1f} s)")


def needs_busy_region(trainer: Trainer) -> bool:
    """Whether a measured variant gets a busy region: on a GPU whose rounds NVML read, when a
    steady round was shorter than BUSY_REGION_SECONDS (never on a CPU)."""
    steady = timing.steady(trainer.round_seconds)
    return (trainer.status == "ok" and trainer.device.startswith("gpu") and bool(steady)
            and any((t or {}).get("source") == "nvml" for t in trainer.round_telemetry)
            and min(steady) < BUSY_REGION_SECONDS)


def _busy_regions(trainers: Sequence[Trainer], device: str, say: Callable[[str], None]) -> None:
    """A busy region for every variant that needs one; one that fails keeps its rounds, and the
    region's telemetry says why it has no figure."""
    for t in trainers:
        if not needs_busy_region(t):
            continue
        try:
            t.busy_region = t.measure_busy_region()
        except Exception as exc:  # noqa: BLE001 - the rounds stand; the region says why not
            t.busy_region = telemetry.unmeasured(
                f"the busy region failed: {backends.failure(exc)[1]}")
        region, pace = t.busy_region, min(timing.steady(t.round_seconds))
        if region.get("gpu_util_percent_mean") is None:
            why = region.get("reason") or "NVML gave no utilisation figure for this GPU"
            say(f"{device}: {t.variant.label}: no GPU busy figure: {why}")
        else:
            say(f"{device}: {t.variant.label}: GPU busy {region['gpu_util_percent_mean']:.0f} % "
                f"over {region['seconds']:.1f} s of its rounds back to back (a round: "
                f"{pace:.2f} s, under {BUSY_REGION_SECONDS:g} s)")


def measure_device(
    model_name: str,
    split,
    device: str,
    values: dict[str, Sequence],
    *,
    epochs: int,
    learning_rate: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Trainer]:
    """Probe and run the one-factor variants in interleaved rounds; then the combination of the
    values they found fastest, in rounds interleaved with a fresh baseline."""
    say = progress or (lambda text: None)
    values, _ = for_this_backend(values)
    trainers = _prepare_all(variants(values), model_name, device, split, learning_rate, say)
    baseline_epoch = trainers[0].projected_epoch()
    _rounds(trainers, device, epochs, baseline_epoch, say)
    for t in trainers:  # evaluated now: every variant after the same number of epochs
        t.evaluate(split)
    combined = Variant("combined", **best_settings(trainers))
    say(f"{device}: each factor's fastest value in the rounds: {combined.label}")
    pair = _prepare_all([BASELINE, combined], model_name, device, split, learning_rate, say)
    _rounds(pair, device, epochs, baseline_epoch, say)
    pair[1].evaluate(split)
    if pair[0].status == "ok":
        pair[1].paired_baseline_seconds = pair[0].round_seconds
    _busy_regions([*trainers, pair[1]], device, say)  # after evaluate: they train further
    return [*trainers, pair[1]]


def _record(trainer: Trainer, split, *, data, model_name: str, epochs: int, env: str,
            notebook: str) -> dict:
    """The train record of one measured variant, with the telemetry of its rounds."""
    from gpubench import training  # noqa: PLC0415 - loads Keras

    v = trainer.variant
    common = dict(notebook=notebook, env=env, device=trainer.device, model=model_name,
                  dataset=data.name, data_source=data.source, data_verified=data.verified,
                  epochs=epochs,
                  batch_size=v.batch_size, train_samples=len(split.x_train), factor=v.factor,
                  precision=v.precision, steps_per_execution=v.steps_per_execution,
                  input_pipeline=v.input_pipeline,
                  jit_compile=backends.current().jit_compile(v.xla) is True,
                  telemetry=(telemetry.combine(trainer.round_telemetry)
                             if trainer.round_telemetry else None),
                  **telemetry.epoch_fields(trainer.round_telemetry))
    steady = timing.steady(trainer.round_seconds)
    if trainer.status != "ok" or not steady:
        return results.make_record("train", status=trainer.status if trainer.status != "ok"
                                   else "error", error=trainer.error or "no steady round",
                                   epoch_seconds=list(trainer.round_seconds), **common)
    common.update(training.mode_fields(trainer.model, input_pipeline=v.input_pipeline))
    # Epoch statistics as every train record has them; the rate below is this chapter's own.
    times = timing.train_fields(trainer.round_seconds, len(split.x_train),
                                common["flops_per_sample"])
    record = results.make_record(
        "train", **times, steady_epoch_min=min(steady),
        test_accuracy=trainer.test_accuracy, test_loss=trainer.test_loss,
        paired_baseline_seconds=trainer.paired_baseline_seconds, busy_region=trainer.busy_region,
        steps_measured=trainer.steps_done, time_boxed=trainer.boxed_steps is not None, **common)
    # Its rate: the fastest steady round, counting only the steps a time-boxed round measured.
    record["samples_per_second"] = max(round_rates(record))
    if record.get("flops_per_sample"):
        record["achieved_gflops"] = record["flops_per_sample"] * record["samples_per_second"] / 1e9
    return record


def run(
    model_name: str,
    data,
    device_names: Sequence[str] | None,
    values: dict[str, Sequence],
    *,
    epochs: int,
    store=None,
    env: str | None = None,
    notebook: str = "Speed_Factors",
    progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Measure every variant on every device (None: `devices_to_measure`'s); store and return
    one train record per variant.

    The values are those `for_backend` keeps (on JAX no XLA variant, noted through
    `progress`); tf.data where TensorFlow cannot be imported is refused (ValueError) before
    anything trains."""
    from gpubench import training  # noqa: PLC0415 - loads Keras

    if model_name not in MODELS:
        raise ValueError(f"model {model_name!r} is not one Speed_Factors trains; "
                         f"use one of {', '.join(MODELS)}")
    positive_int("epochs", epochs, minimum=2)
    values, notes = for_this_backend(values)
    for note in notes:
        (progress or (lambda text: None))(note)
    chosen = devices_to_measure(device_names)
    env = env or results.default_env_name()
    split = training.split(model_name, data)
    records = []
    for device in chosen:
        trainers = measure_device(model_name, split, device, values, epochs=epochs,
                                  progress=progress)
        for trainer in trainers:
            record = _record(trainer, split, data=data, model_name=model_name, epochs=epochs,
                             env=env, notebook=notebook)
            if store is not None:
                store.append(record)
            records.append(record)
    return records
