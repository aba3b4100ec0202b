"""Speed_Factors' measurement (`run`): on each device the variants in interleaved rounds (round r of
each, then r+1: a slow spell slows them alike), then their best combined; a record each."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gpubench import backends, devices, results, timing
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
        elif t.decide_box(baseline_epoch) is not None:
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
        if not (t.status == "ok" and steady and min(steady) < BUSY_REGION_SECONDS
                and any(r.get("source") == "nvml" for r in t.round_telemetry)):
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


def record(t: Trainer, common: dict) -> dict:
    """A variant's train record (`common`: its run's fields), with a GPU's busy region."""
    from gpubench import training  # noqa: PLC0415 - loads Keras

    steady, parts, busy = (timing.steady(t.round_seconds), timing.steady(t.round_telemetry),
                           t.busy_region)
    if (busy is None and t.status == "ok" and t.device.startswith("gpu") and parts
            and all(p.get("gpu_util_percent_mean") is None for p in parts)):
        busy = timing.run_telemetry(parts, t.device)["telemetry"]  # saying why: no busy %
    fields = dict(
        common, device=t.device, busy_region=busy,
        jit_compile=backends.current().jit_compile(t.variant.xla) is True,
        factor=t.variant.factor, **{k: v for k, v in t.variant.settings().items() if k != "xla"},
        **timing.run_telemetry(t.round_telemetry, t.device))
    if t.status != "ok" or not steady:
        return results.make_record("train", status="error" if t.status == "ok" else t.status,
                                   error=t.error or "no steady round",
                                   epoch_seconds=list(t.round_seconds), **fields)
    fields.update(training.mode_fields(t.model, input_pipeline=t.variant.input_pipeline,
                                       device=t.device))
    rate, flops = max(t.rates()), fields["flops_per_sample"]  # the fastest steady round's rate
    timed = timing.train_fields(t.round_seconds, common["train_samples"], flops) | dict(
        samples_per_second=rate, achieved_gflops=flops and flops * rate / 1e9)
    return results.make_record(
        "train", **timed, steady_epoch_min=min(steady), test_accuracy=t.test_accuracy,
        test_loss=t.test_loss, paired_baseline_seconds=t.paired_baseline_seconds,
        time_boxed=t.boxed_steps is not None,
        steps_measured=len(steady) * (t.boxed_steps or t.steps_per_epoch), **fields)


def run(model_name: str, data, device_names: Sequence[str] | None, values: dict[str, Sequence],
        *, epochs: int, store=None, env: str | None = None, notebook: str = "Speed_Factors",
        progress: Callable[[str], None] | None = None,
        trainer: type[Trainer] = Trainer) -> list[dict]:
    """A stored train record of each variant (`rules.for_backend`'s) on each device (None: all)."""
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
        trainers = [trainer.prepared(variant, model_name, device, split, say)
                    for variant in rules.variants(values)]
        baseline_epoch = trainers[0].projected_epoch()
        rounds(trainers, epochs, baseline_epoch, say)
        for t in trainers:  # evaluated now: every variant after the same number of epochs
            t.evaluate(split)
        combined = rules.Variant("combined", **best_settings(trainers))
        say(f"{device}: each factor's fastest value in the rounds: {combined.label}")
        pair = [trainer.prepared(variant, model_name, device, split, say)
                for variant in (rules.BASELINE, combined)]  # the combination beside a baseline
        rounds(pair, epochs, baseline_epoch, say)
        pair[1].evaluate(split)
        pair[1].paired_baseline_seconds = pair[0].round_seconds if pair[0].status == "ok" else None
        busy_regions([*trainers, pair[1]], say)  # after evaluate: they train further
        for t in [*trainers, pair[1]]:
            made.append(record(t, common))
            if store is not None:
                store.append(made[-1])
    return made
