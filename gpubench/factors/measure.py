"""Speed_Factors' measurement (`run`): on each device the variants in interleaved rounds (round r of
each, then r+1: a slow spell slows them alike), then their best combined; a record each."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from gpubench import backends, devices, results, telemetry, timing
from gpubench.factors import rules
from gpubench.factors.trainer import BUSY_REGION_SECONDS, Trainer


def devices_to_measure(names: Sequence[str] | None = None) -> list[str]:
    """The canonical names of `names`; None: every device of this environment, GPUs first."""
    return [devices.resolve(name) for name in (devices.gpus_first() if names is None else names)]


def best_settings(trainers: Sequence[Trainer]) -> dict:
    """Each factor's fastest value in the rounds against trainers[0] (not boxed, not failed)."""
    settings, best = rules.BASELINE.settings(), dict.fromkeys(rules.FACTORS, 1.0)
    for t in [t for t in trainers if t.status == "ok" and t.boxed_steps is None]:
        factor, speedup = t.variant.factor, rules.compare(trainers[0].rates(), t.rates())["speedup"]
        if factor in best and speedup is not None and speedup > best[factor]:
            best[factor], settings[factor] = speedup, getattr(t.variant, factor)
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
                t.status, t.error = backends.failure(exc)
        say(f"{trainers[0].device}: round {index + 1}/{epochs} done "
            f"({time.perf_counter() - start:.1f} s)")


def busy_regions(trainers: Sequence[Trainer], say: Callable[[str], None]) -> None:
    """A busy region for each variant NVML read with a steady round under BUSY_REGION_SECONDS."""
    for t in trainers:
        steady = timing.steady(t.round_seconds)
        if not (t.status == "ok" and t.device.startswith("gpu") and steady
                and min(steady) < BUSY_REGION_SECONDS
                and any((r or {}).get("source") == "nvml" for r in t.round_telemetry)):
            continue
        try:
            t.busy_region = t.measure_busy_region()
        except Exception as exc:  # noqa: BLE001 - its rounds stand; the region says why not
            t.busy_region = results.unmeasured(
                f"the busy region failed: {backends.failure(exc)[1]}")
        if (busy := t.busy_region.get("gpu_util_percent_mean")) is None:
            why = t.busy_region.get("reason") or "NVML gave no utilisation figure for this GPU"
            say(f"{t.device}: {t.variant.label}: no GPU busy figure: {why}")
        else:
            say(f"{t.device}: {t.variant.label}: GPU busy {busy:.0f} % over "
                f"{t.busy_region['seconds']:.1f} s of its rounds back to back (a round: "
                f"{min(steady):.2f} s, under {BUSY_REGION_SECONDS:g} s)")


def measure_device(model_name: str, split, device: str, values: dict[str, Sequence], *,
                   epochs: int, say: Callable[[str], None],
                   trainer: type[Trainer]) -> list[Trainer]:
    """The variants in interleaved rounds, then the combination beside a fresh baseline."""

    def prepared(found: Sequence[rules.Variant]) -> list[Trainer]:
        made = []
        for variant in found:
            start = time.perf_counter()
            made.append(trainer.prepared(variant, model_name, device, split))
            say(f"{device}: probed {variant.label}: "
                f"{variant.batch_size / made[-1].probe_step_seconds:,.0f} images/s "
                f"({time.perf_counter() - start:.1f} s)")
        return made

    trainers = prepared(rules.variants(values))
    baseline_epoch = trainers[0].projected_epoch()
    rounds(trainers, epochs, baseline_epoch, say)
    for t in trainers:  # evaluated now: every variant after the same number of epochs
        t.evaluate(split)
    combined = rules.Variant("combined", **best_settings(trainers))
    say(f"{device}: each factor's fastest value in the rounds: {combined.label}")
    pair = prepared([rules.BASELINE, combined])
    rounds(pair, epochs, baseline_epoch, say)
    pair[1].evaluate(split)
    if pair[0].status == "ok":
        pair[1].paired_baseline_seconds = pair[0].round_seconds
    busy_regions([*trainers, pair[1]], say)  # after evaluate: they train further
    return [*trainers, pair[1]]


def record(t: Trainer, common: dict) -> dict:
    """A variant's train record (`common`: its run's fields); with no busy % on a GPU, its
    `busy_region` is its steady rounds' telemetry (epoch 1, compiling, left out), saying why."""
    from gpubench import training  # noqa: PLC0415 - loads Keras

    steady, parts, busy = (timing.steady(t.round_seconds), timing.steady(t.round_telemetry),
                           t.busy_region)
    if (busy is None and t.status == "ok" and t.device.startswith("gpu") and parts
            and all((p or {}).get("gpu_util_percent_mean") is None for p in parts)):
        busy = telemetry.combine(parts)
    fields = dict(
        common, device=t.device, busy_region=busy,
        jit_compile=backends.current().jit_compile(t.variant.xla) is True,
        telemetry=telemetry.combine(t.round_telemetry) if t.round_telemetry else None,
        **{k: v for k, v in dataclasses.asdict(t.variant).items() if k != "xla"},
        **telemetry.epoch_fields(t.round_telemetry))
    if t.status != "ok" or not steady:
        return results.make_record("train", status="error" if t.status == "ok" else t.status,
                                   error=t.error or "no steady round",
                                   epoch_seconds=list(t.round_seconds), **fields)
    fields.update(training.mode_fields(t.model, input_pipeline=t.variant.input_pipeline,
                                       device=t.device))
    made = results.make_record(
        "train", **timing.train_fields(t.round_seconds, common["train_samples"],
                                       fields["flops_per_sample"]),
        steady_epoch_min=min(steady), test_accuracy=t.test_accuracy, test_loss=t.test_loss,
        paired_baseline_seconds=t.paired_baseline_seconds, time_boxed=t.boxed_steps is not None,
        steps_measured=len(steady) * (t.boxed_steps or t.steps_per_epoch), **fields)
    # This chapter's rate: the fastest steady round, of the steps a time-boxed round measured.
    made["samples_per_second"] = max(rules.round_rates(made))
    if made.get("flops_per_sample"):
        made["achieved_gflops"] = made["flops_per_sample"] * made["samples_per_second"] / 1e9
    return made


def run(model_name: str, data, device_names: Sequence[str] | None, values: dict[str, Sequence],
        *, epochs: int, store=None, env: str | None = None, notebook: str = "Speed_Factors",
        progress: Callable[[str], None] | None = None,
        trainer: type[Trainer] = Trainer) -> list[dict]:
    """Store and return a train record of every variant (`rules.for_backend`'s, its notes said)
    on every device (None: all, GPUs first); `trainer`: a hook, the class of each variant."""
    from gpubench import training  # noqa: PLC0415 - loads Keras

    rules.check_parameters({"model": model_name, "epochs": epochs})
    values, notes = rules.for_backend(values)  # tf.data refused before anything trains
    say, split, made = progress or (lambda text: None), training.split(model_name, data), []
    for note in notes:
        say(note)
    common = dict(notebook=notebook, env=env or results.default_env_name(), model=model_name,
                  dataset=data.name, data_source=data.source, data_verified=data.verified,
                  epochs=epochs, train_samples=len(split.x_train))
    for device in devices_to_measure(device_names):
        for t in measure_device(model_name, split, device, values, epochs=epochs, say=say,
                                trainer=trainer):
            made.append(record(t, common))
            if store is not None:
                store.append(made[-1])
    return made
