"""One Speed_Factors variant on one device: its model and feed (`Trainer`), its warm-up probes,
and the time box of a variant far slower than the baseline.

A variant whose warm-up probe projects an epoch more than BOX_FACTOR x the baseline's (a
precision with no fast path on a CPU, say) is time-boxed: each of its rounds measures a bounded
number of steps, and its accuracy is not measured.

On a GPU, a variant whose rounds are too short for NVML's utilisation figure trains once more in
a busy region (`Trainer.measure_busy_region`): its round repeated with no pause, monitored over
at least BUSY_REGION_SECONDS after a lead-in of NVML_WINDOW_SECONDS. Keras is loaded by
`gpubench.training`, imported inside the function that builds a model; the feeds
(tf.data, and the training set kept on the device) live in `feeds()`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpubench import backends, devices, telemetry, timing
from gpubench.factors import rules as factor_rules  # these load no framework
from gpubench.factors.rules import NO_TF_DATA, TF_DATA_FIX, Variant
from gpubench.factors.stats import steady_rates

# A variant whose probe projects an epoch more than BOX_FACTOR x the baseline's is time-boxed.
BOX_FACTOR = 8.0
# Probes grow until one lasts PROBE_SECONDS (or covers an epoch).
PROBE_SECONDS = 0.3
# NVML's utilisation is the share of its last sample period in which a kernel ran; that period
# is 1/6 s to 1 s depending on the GPU. A busy region first trains this long unmonitored, so that
# the period behind its first reading holds the variant's own work, not the pause before it.
NVML_WINDOW_SECONDS = 1.0
# A GPU busy % comes from at least this much steady training: two of NVML's longest periods, and
# 20 of the Monitor's 0.1 s samples. Rounds shorter than this get a busy region of this length.
BUSY_REGION_SECONDS = 2.0


@dataclass
class Trainer:
    """One variant on one device: its model, its feed, and the rounds measured so far."""

    variant: Variant
    device: str
    model: object
    x: object
    y: object
    dataset: object = None
    on_device: object = None
    steps_per_epoch: int = 0
    probe_step_seconds: float = math.inf
    boxed_steps: int | None = None
    round_seconds: list = None
    round_telemetry: list = field(default_factory=list)
    steps_done: int = 0
    status: str = "ok"
    error: str | None = None
    paired_baseline_seconds: list | None = None
    busy_region: dict | None = None
    test_loss: float | None = None
    test_accuracy: float | None = None

    def fail(self, exc: BaseException) -> None:
        """Mark this variant failed ("oom" or "error"); the other variants go on."""
        self.status, self.error = backends.failure(exc)

    def timed(self, steps: int | None, *, monitor: bool = False) -> float:
        """Seconds to train `steps` steps (None: one epoch), ended with a sync on the model's
        variables; with `monitor`, the round's telemetry is kept in `round_telemetry`.

        With `fit`, an epoch clock times the steps themselves, as in a long training
        run, not the set-up that each short `fit` call adds.
        """
        v = self.variant
        if v.input_pipeline == "on_device":
            watch = telemetry.Monitor(self.device).start() if monitor else None
            start = time.perf_counter()
            self.on_device(steps)
            timing.sync(list(self.model.variables))
            seconds = time.perf_counter() - start
            if watch is not None:
                self.round_telemetry.append(watch.stop())
            return seconds
        clock = timing.epoch_timer(self.device if monitor else None)
        self._fit(steps, clock)
        if monitor:
            self.round_telemetry += clock.epoch_telemetry
        return clock.epoch_seconds[0]

    def _fit(self, steps: int | None, callback, epochs: int = 1) -> None:
        """`fit` for `epochs` rounds of `steps` steps (None: an epoch) on the variant's feed."""
        v = self.variant
        if v.input_pipeline == "tf.data":
            feed = self.dataset if steps is None else self.dataset.take(steps)
            self.model.fit(feed, epochs=epochs, verbose=0, shuffle=False,  # the dataset shuffles
                           callbacks=[callback])
        else:
            n = len(self.x) if steps is None else min(len(self.x), steps * v.batch_size)
            self.model.fit(self.x[:n], self.y[:n], batch_size=v.batch_size, epochs=epochs,
                           verbose=0, callbacks=[callback])

    def _on_device_region(self, region: _Region, rounds: int) -> None:
        """Up to `rounds` on-device rounds, a sync after each, until `region` is complete."""
        for _ in range(rounds):
            region.round_began()
            self.on_device(self.boxed_steps)
            timing.sync(list(self.model.variables))
            if region.round_ended():
                return

    def measure_busy_region(self, least: float = BUSY_REGION_SECONDS,
                            lead: float = NVML_WINDOW_SECONDS,
                            clock: Callable[[], float] = time.perf_counter) -> dict:
        """The telemetry of one busy region: this variant's round trained again and again with
        no pause (one `fit` call, or the on-device loop), a sync after each, monitored over whole
        rounds lasting at least `least` seconds once `lead` seconds of them have run.

        For a GPU variant whose rounds are too short for NVML; run it after `evaluate` (it trains
        the model further). The region stops early, and says so in its `seconds`, only if it
        ran out of rounds (four times those its steady rounds' pace needs).
        """
        region = _Region(telemetry.Monitor(self.device, clock=clock), least, lead, clock)
        pace = max(min(timing.steady(self.round_seconds) or [1.0]), 1e-3)
        rounds = math.ceil(4 * (least + lead) / pace) + 2
        try:
            with devices.scope(self.device):
                if self.variant.input_pipeline == "on_device":
                    self._on_device_region(region, rounds)
                else:
                    self._fit(self.boxed_steps, _region_callback(region), epochs=rounds)
        finally:
            result = region.close()
        return result

    def evaluate(self, split) -> None:
        """Test loss and accuracy after the rounds (not for a failed or time-boxed variant)."""
        if self.status != "ok" or self.boxed_steps is not None or len(self.round_seconds) < 2:
            return
        with devices.scope(self.device):
            loss, accuracy = self.model.evaluate(split.x_test, split.y_test, verbose=0,
                                                 batch_size=max(self.variant.batch_size, 256))
        self.test_loss, self.test_accuracy = float(loss), float(accuracy)

    def rates(self) -> list[float]:
        """Samples per second of each steady round so far."""
        per_round = (self.boxed_steps * self.variant.batch_size if self.boxed_steps
                     else len(self.x))
        return steady_rates(self.round_seconds, per_round)

    def projected_epoch(self) -> float:
        """Seconds an epoch would take at the probed cost of a step."""
        return self.probe_step_seconds * self.steps_per_epoch

    def probe_rate(self) -> float:
        """Samples per second at the probed cost of a step."""
        return self.variant.batch_size / self.probe_step_seconds


class _Region:
    """A busy region's clock: rounds run unmonitored for `lead` seconds, then whole rounds
    under `monitor` until `least` seconds have passed."""

    def __init__(self, monitor: telemetry.Monitor, least: float, lead: float,
                 clock: Callable[[], float]) -> None:
        self.monitor, self.least, self.lead, self.clock = monitor, least, lead, clock
        self.began: float | None = None
        self.watching = False
        self.result: dict | None = None

    def round_began(self) -> None:
        """The lead-in starts with the first round (not with `fit`'s set-up)."""
        if self.began is None:
            self.began = self.clock()

    def round_ended(self) -> bool:
        """After a round, synced: start the Monitor once the lead-in is over; True (done) once
        the monitored rounds have lasted `least` seconds."""
        now = self.clock()
        if not self.watching:
            if now - self.began >= self.lead:
                self.monitor.start()
                self.watching, self.began = True, now
            return False
        if self.result is None and now - self.began >= self.least:
            self.result = self.monitor.stop()
        return self.result is not None

    def close(self) -> dict:
        """The region's telemetry; the Monitor stopped if the rounds ran out first."""
        if self.result is None:
            self.result = (self.monitor.stop() if self.watching else telemetry.unmeasured(
                f"the busy region ended within its {self.lead:g} s lead-in"))
        return self.result


def _region_callback(region: _Region):
    """A Keras callback that drives `region` by epochs (a round each) and stops `fit` when done."""
    keras = backends.keras()

    class RegionRounds(keras.callbacks.Callback):
        """Syncs after every epoch and stops training when the busy region is complete."""

        def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
            region.round_began()

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            timing.sync(list(self.model.variables))
            if region.round_ended():
                self.model.stop_training = True

    return RegionRounds()


def make_trainer(variant: Variant, model_name: str, device: str, split, learning_rate) -> Trainer:
    """Build and compile the variant's model and its feed on `device`."""
    from gpubench import training  # noqa: PLC0415 - loads Keras

    feeds = factor_rules.feeds()
    with devices.scope(device):
        model = training.build_model(model_name, device, precision=variant.precision,
                                     learning_rate=learning_rate, xla=variant.xla,
                                     steps_per_execution=variant.steps_per_execution)
        trainer = Trainer(variant, device, model, split.x_train, split.y_train, round_seconds=[])
        trainer.steps_per_epoch = math.ceil(len(split.x_train) / variant.batch_size)
        if variant.input_pipeline == "tf.data":
            if not feeds.tf_data_available():
                raise ValueError(f"{NO_TF_DATA.format(backend=backends.current().NAME)}; "
                                 f"{TF_DATA_FIX}")
            trainer.dataset = feeds.make_dataset(split.x_train, split.y_train,
                                                 variant.batch_size)
        elif variant.input_pipeline == "on_device":
            # One fit step builds the optimizer and the metrics before the compiled loop runs.
            n = min(len(split.x_train), variant.batch_size)
            model.fit(split.x_train[:n], split.y_train[:n], batch_size=n, epochs=1, verbose=0)
            trainer.on_device = feeds.on_device_feed(
                model, split.x_train, split.y_train, variant.batch_size,
                variant.steps_per_execution, bool(getattr(model, "jit_compile", False)), device)
    return trainer


def probe(trainer: Trainer) -> None:
    """Compile, then time growing step counts until one lasts PROBE_SECONDS (or covers an epoch).

    The cost of a step is the difference between the last two probes over their
    difference in steps, so that the fixed cost of an epoch does not count; a
    second probe of the same trainer keeps the lower cost of the two.
    """
    spe = trainer.variant.steps_per_execution
    with devices.scope(trainer.device):
        trainer.timed(spe)  # tracing and compilation
        steps, seconds = spe, trainer.timed(spe)
        previous = None
        while seconds < PROBE_SECONDS and steps < trainer.steps_per_epoch:
            previous = (steps, seconds)
            steps = min(trainer.steps_per_epoch, steps * 4)
            seconds = trainer.timed(steps)
    per_step = seconds / steps
    if previous is not None and seconds > previous[1]:
        per_step = (seconds - previous[1]) / (steps - previous[0])
    trainer.probe_step_seconds = min(trainer.probe_step_seconds, per_step)


def decide_box(trainer: Trainer, baseline_epoch: float) -> None:
    """Time-box a variant whose probe projects an epoch BOX_FACTOR x the baseline's or more,
    twice: one probe slowed by a busy machine does not box a variant."""
    if trainer.projected_epoch() <= BOX_FACTOR * baseline_epoch:
        return
    probe(trainer)
    if trainer.projected_epoch() <= BOX_FACTOR * baseline_epoch:
        return
    spe = trainer.variant.steps_per_execution
    steps = int(baseline_epoch / trainer.probe_step_seconds) // spe * spe
    trainer.boxed_steps = max(spe, min(steps, trainer.steps_per_epoch - 1))


def prepared(variant: Variant, model_name: str, device: str, split, learning_rate) -> Trainer:
    """A built and probed trainer, or a failed one that says why (an OOM at batch 4096, say)."""
    try:
        trainer = make_trainer(variant, model_name, device, split, learning_rate)
        probe(trainer)
    except Exception as exc:  # noqa: BLE001 - recorded as the variant's status
        trainer = Trainer(variant, device, None, None, None, round_seconds=[])
        trainer.fail(exc)
    return trainer
