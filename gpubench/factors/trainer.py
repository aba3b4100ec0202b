"""One Speed_Factors variant on one device (`Trainer`): its model and feed, warm-up probes, time
box, timed rounds and busy region; and the stepping of the on-device feeds (`feed_steps`). A busy
region exists because NVML's busy % is the share of its last period (1/6 s to 1 s) in which a
kernel ran: a round shorter than that says nothing of itself.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpubench import backends, devices, results, telemetry, timing
from gpubench.factors.rules import Variant, feeds, steady_rates

BOX_FACTOR = 8.0  # a probe projecting an epoch over this x the baseline's boxes the variant
PROBE_SECONDS = 0.3  # probes grow until one lasts this long (or covers an epoch)
NVML_WINDOW_SECONDS = 1.0  # a busy region's unmonitored lead-in: NVML's longest period
BUSY_REGION_SECONDS = 2.0  # two of those periods, 20 samples: rounds shorter get a busy region


@dataclass
class Trainer:
    """One variant on one device: its model, its feed (a tf.data dataset or on-device steps) and
    its rounds so far."""

    variant: Variant
    device: str
    model: Any = None
    x: Any = None
    y: Any = None
    feed: Any = None
    steps_per_epoch: int = 0
    probe_step_seconds: float = math.inf
    boxed_steps: int | None = None
    round_seconds: list = field(default_factory=list)
    round_telemetry: list = field(default_factory=list)
    steps_done: int = 0
    status: str = "ok"
    error: str | None = None
    paired_baseline_seconds: list | None = None
    busy_region: dict | None = None
    test_loss: float | None = None
    test_accuracy: float | None = None

    @classmethod
    def build(cls, variant: Variant, model_name: str, device: str, split,
              learning_rate: float | None = None) -> Trainer:
        """The variant's model, compiled, and its feed, on `device`."""
        from gpubench import training  # noqa: PLC0415 - loads Keras

        with devices.scope(device):
            model = training.build_model(model_name, device, precision=variant.precision,
                                         learning_rate=learning_rate, xla=variant.xla,
                                         steps_per_execution=variant.steps_per_execution)
            trainer = cls(variant, device, model, split.x_train, split.y_train,
                          steps_per_epoch=math.ceil(len(split.x_train) / variant.batch_size))
            if variant.input_pipeline == "tf.data":
                trainer.feed = tf_dataset(split.x_train, split.y_train, variant.batch_size)
            elif variant.input_pipeline == "on_device":
                # One fit step builds the optimizer and the metrics before the compiled loop runs.
                n = min(len(split.x_train), variant.batch_size)
                model.fit(split.x_train[:n], split.y_train[:n], batch_size=n, epochs=1, verbose=0)
                trainer.feed = feeds().on_device_feed(
                    model, split.x_train, split.y_train, variant.batch_size,
                    variant.steps_per_execution, bool(getattr(model, "jit_compile", False)),
                    device)
        return trainer

    @classmethod
    def prepared(cls, variant: Variant, model_name: str, device: str, split,
                 learning_rate: float | None = None) -> Trainer:
        """A built and probed trainer, or a failed one that says why (an OOM at batch 4096)."""
        try:
            trainer = cls.build(variant, model_name, device, split, learning_rate)
            trainer.probe()
        except Exception as exc:  # noqa: BLE001 - recorded as the variant's status
            trainer = cls(variant, device)
            trainer.fail(exc)
        return trainer

    def fail(self, exc: BaseException) -> None:
        """Mark this variant failed ("oom" or "error"); the other variants go on."""
        self.status, self.error = backends.failure(exc)

    def timed(self, steps: int | None, *, monitor: bool = False) -> float:
        """Seconds of `steps` steps (None: an epoch) up to a sync (with `fit`: its epoch's, not its
        set-up); with `monitor`, the round's telemetry goes to `round_telemetry`."""
        if self.variant.input_pipeline != "on_device":
            clock = timing.epoch_timer(self.device if monitor else None)
            self.fit(steps, clock)
            self.round_telemetry += clock.epoch_telemetry
            return clock.epoch_seconds[0]
        watch = timing.monitor(self.device).start() if monitor else None
        start = time.perf_counter()
        self.feed(steps)
        timing.sync(list(self.model.variables))
        seconds = time.perf_counter() - start
        if watch is not None:
            self.round_telemetry.append(watch.stop())
        return seconds

    def fit(self, steps: int | None, callback, epochs: int = 1) -> None:
        """`fit` for `epochs` rounds of `steps` steps (None: an epoch) on the variant's feed."""
        if self.variant.input_pipeline == "tf.data":  # the dataset shuffles
            self.model.fit(self.feed if steps is None else self.feed.take(steps), epochs=epochs,
                           verbose=0, shuffle=False, callbacks=[callback])
        else:
            n = len(self.x) if steps is None else min(len(self.x), steps * self.variant.batch_size)
            self.model.fit(self.x[:n], self.y[:n], batch_size=self.variant.batch_size,
                           epochs=epochs, verbose=0, callbacks=[callback])

    def probe(self) -> None:
        """Compile, then time growing step counts until one lasts PROBE_SECONDS (or an epoch); a
        step's cost: the last two probes' difference over theirs in steps (the lower of two)."""
        spe = self.variant.steps_per_execution
        with devices.scope(self.device):
            self.timed(spe)  # tracing and compilation
            steps, seconds = spe, self.timed(spe)
            previous = None
            while seconds < PROBE_SECONDS and steps < self.steps_per_epoch:
                previous = (steps, seconds)
                steps = min(self.steps_per_epoch, steps * 4)
                seconds = self.timed(steps)
        per_step = seconds / steps
        if previous is not None and seconds > previous[1]:
            per_step = (seconds - previous[1]) / (steps - previous[0])
        self.probe_step_seconds = min(self.probe_step_seconds, per_step)

    def decide_box(self, baseline_epoch: float) -> None:
        """Box the steps of a round to about `baseline_epoch` if two probes (one may meet a busy
        machine) project an epoch over BOX_FACTOR x it; its accuracy is then not measured."""
        if self.projected_epoch() <= BOX_FACTOR * baseline_epoch:
            return
        self.probe()
        if self.projected_epoch() <= BOX_FACTOR * baseline_epoch:
            return
        spe = self.variant.steps_per_execution
        steps = int(baseline_epoch / self.probe_step_seconds) // spe * spe
        self.boxed_steps = max(spe, min(steps, self.steps_per_epoch - 1))

    def measure_busy_region(self, least: float = BUSY_REGION_SECONDS,
                            lead: float = NVML_WINDOW_SECONDS,
                            clock: Callable[[], float] = time.perf_counter) -> dict:
        """The telemetry of this variant's round repeated with no pause (one `fit` call, or the
        on-device loop), a sync after each, monitored over whole rounds lasting `least` s once
        `lead` s of them have run; it stops early, its `seconds` saying so, only after four times
        the rounds its steady pace needs. It trains the model further: run it after `evaluate`."""
        monitor = telemetry.Monitor(self.device, clock=clock)
        region = {"began": None, "watching": False, "result": None}
        pace = max(min(timing.steady(self.round_seconds) or [1.0]), 1e-3)
        rounds = math.ceil(4 * (least + lead) / pace) + 2

        def began(*_: Any) -> None:  # the lead-in starts with the first round, not fit's set-up
            region["began"] = clock() if region["began"] is None else region["began"]

        def ended() -> bool:  # after a synced round: whether the region is complete
            now = clock()
            if not region["watching"] and now - region["began"] >= lead:
                monitor.start()
                region.update(watching=True, began=now)
            elif region["watching"] and now - region["began"] >= least:
                region["result"] = region["result"] or monitor.stop()
            return region["result"] is not None

        def epoch_end(*_: Any) -> None:
            timing.sync(list(callback.model.variables))
            callback.model.stop_training = ended()

        try:
            with devices.scope(self.device):
                if self.variant.input_pipeline != "on_device":
                    callback = backends.keras().callbacks.LambdaCallback(
                        on_epoch_begin=began, on_epoch_end=epoch_end)
                    self.fit(self.boxed_steps, callback, epochs=rounds)
                for _ in range(rounds if self.variant.input_pipeline == "on_device" else 0):
                    began()
                    self.feed(self.boxed_steps)
                    timing.sync(list(self.model.variables))
                    if ended():
                        break
        finally:
            if region["result"] is None:  # the rounds ran out first
                region["result"] = monitor.stop() if region["watching"] else results.unmeasured(
                    f"the busy region ended within its {lead:g} s lead-in")
        return region["result"]

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
        per_round = self.boxed_steps * self.variant.batch_size if self.boxed_steps else len(self.x)
        return steady_rates(self.round_seconds, per_round)

    def projected_epoch(self) -> float:
        """Seconds an epoch would take at the probed cost of a step."""
        return self.probe_step_seconds * self.steps_per_epoch


def tf_dataset(x, y, batch_size: int):
    """A tf.data.Dataset of (x, y) batches, reshuffled and prefetched; beside JAX or PyTorch,
    TensorFlow is kept off their GPUs."""
    from gpubench.backends.tensorflow import tf  # noqa: PLC0415 - only for tf.data

    module = tf()
    if backends.current().NAME != "tensorflow":
        with contextlib.suppress(RuntimeError, ValueError):  # already initialised: as it was
            module.config.set_visible_devices([], "GPU")
    return (module.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).batch(batch_size)
            .prefetch(module.data.AUTOTUNE))


def feed_steps(count: int | None, n: int, batch_size: int, per_call: int,
               run: Callable[[int, int], None], run_rest: Callable[[], None]) -> None:
    """Drive an on-device feed of `n` shuffled samples: `run(first, size)` trains `size` (up to
    `per_call`) batches from batch `first` in one call, `run_rest()` the last, partial batch.
    None: one epoch, every full batch then the rest; `count`: that many steps over the full
    batches, wrapping at their end (a batch larger than the set: the whole set each step)."""
    full, rest = divmod(n, batch_size)
    if count is None:
        for first in range(0, full, per_call):
            run(first, min(per_call, full - first))
        if rest:
            run_rest()
        return
    for _ in range(count if not full else 0):  # a batch larger than the set: all of it
        run_rest()
    done = 0
    while full and done < count:
        size = min(per_call, count - done, full - done % full)
        run(done % full, size)
        done += size
