"""One Speed_Factors variant on one device (`Trainer`): its model and feed (arrays, tf.data, or the
set kept on the device, per backend), its probes, time box, rounds and busy region."""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpubench import backends, devices, results, telemetry, timing
from gpubench.backends import tensorflow as tf_backend
from gpubench.factors.rules import Variant, check_for_backend, steady_rates

BOX_FACTOR = 8.0  # a probe projecting an epoch over this x the baseline's boxes the variant
PROBE_SECONDS = 0.3  # probes grow until one lasts this long (or covers an epoch)
NVML_WINDOW_SECONDS = 1.0  # NVML's busy %: of its last 1/6 s to 1 s; a region's unwatched lead-in
BUSY_REGION_SECONDS = 2.0  # two of those periods, 20 samples: rounds shorter get a busy region


@dataclass
class Trainer:
    """One variant on one device: its model, its feed and its rounds so far."""

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
    status: str = "ok"
    error: str | None = None
    paired_baseline_seconds: list | None = None
    busy_region: dict | None = None
    test_loss: float | None = None
    test_accuracy: float | None = None

    @classmethod
    def prepared(cls, variant: Variant, model_name: str, device: str, split,
                 say: Callable[[str], None] = lambda text: None) -> Trainer:
        """Its model compiled, its feed on `device`, probed; or failed, saying why (an OOM)."""
        from gpubench import training  # noqa: PLC0415 - loads Keras

        x, y, batch, start = split.x_train, split.y_train, variant.batch_size, time.perf_counter()
        trainer = cls(variant, device, None, x, y, steps_per_epoch=math.ceil(len(x) / batch))
        try:
            with devices.scope(device):
                trainer.model = model = training.build_model(
                    model_name, device, precision=variant.precision, xla=variant.xla,
                    steps_per_execution=variant.steps_per_execution)
                if variant.input_pipeline == "tf.data":
                    trainer.feed = tf_dataset(x, y, batch)
                elif variant.input_pipeline == "on_device":
                    trainer.feed = on_device_feed(model, x, y, batch, variant.steps_per_execution,
                                                  device)
            trainer.probe()
        except Exception as exc:  # noqa: BLE001 - recorded as the variant's status
            trainer.model = trainer.feed = None  # its memory let go
            trainer.status, trainer.error = backends.failure(exc)
        say(f"{device}: probed {variant.label}: {batch / trainer.probe_step_seconds:,.0f} images/s "
            f"({time.perf_counter() - start:.1f} s)")
        return trainer

    def timed(self, steps: int | None, *, monitor: bool = False) -> float:
        """Seconds of `steps` steps (None: an epoch) to a sync; `monitor`: to `round_telemetry`."""
        clock = timing.epoch_timer(self.device if monitor else None)
        self.fit(steps, clock)  # its epoch, not fit's set-up
        self.round_telemetry += clock.epoch_telemetry
        return clock.epoch_seconds[0]

    def fit(self, steps: int | None, callback, epochs: int = 1) -> None:
        """`epochs` rounds of `steps` steps (None: an epoch); `callback` called as by `fit`."""
        if self.variant.input_pipeline == "on_device":  # fit's calls of `callback`, by hand
            callback.set_model(self.model)
            for epoch in range(epochs):
                callback.on_epoch_begin(epoch)
                self.feed(steps)
                callback.on_epoch_end(epoch)
                if self.model.stop_training:  # as `fit` stops
                    break
            return
        n = len(self.x) if steps is None else min(len(self.x), steps * self.variant.batch_size)
        data = (dict(x=self.feed if steps is None else self.feed.take(steps), shuffle=False)
                if self.variant.input_pipeline == "tf.data"  # the dataset shuffles
                else dict(x=self.x[:n], y=self.y[:n], batch_size=self.variant.batch_size))
        self.model.fit(**data, epochs=epochs, verbose=0, callbacks=[callback])

    def probe(self) -> None:
        """A step's cost (the lower of two probes): the last two of growing step counts timed."""
        steps = self.variant.steps_per_execution
        with devices.scope(self.device):
            self.timed(steps)  # tracing and compilation
            seconds, previous = self.timed(steps), None
            while seconds < PROBE_SECONDS and steps < self.steps_per_epoch:
                previous = (steps, seconds)
                steps = min(self.steps_per_epoch, steps * 4)
                seconds = self.timed(steps)
        per_step = seconds / steps
        if previous is not None and seconds > previous[1]:
            per_step = (seconds - previous[1]) / (steps - previous[0])
        self.probe_step_seconds = min(self.probe_step_seconds, per_step)

    def decide_box(self, baseline_epoch: float) -> int | None:
        """Box a round's steps to about `baseline_epoch` if two probes project BOX_FACTOR x it."""
        if self.projected_epoch() > BOX_FACTOR * baseline_epoch:
            self.probe()  # the first probe may have met a busy machine
        if self.projected_epoch() > BOX_FACTOR * baseline_epoch:
            spe = self.variant.steps_per_execution
            steps = int(baseline_epoch / self.probe_step_seconds) // spe * spe
            self.boxed_steps = max(spe, min(steps, self.steps_per_epoch - 1))
        return self.boxed_steps

    def measure_busy_region(self, least: float = BUSY_REGION_SECONDS,
                            lead: float = NVML_WINDOW_SECONDS,
                            clock: Callable[[], float] = time.perf_counter) -> dict:
        """Telemetry of its rounds back to back: `least` s after a `lead` s lead-in, or less."""
        pace = max(min(timing.steady(self.round_seconds) or [1.0]), 1e-3)  # s a steady round
        monitor, region = telemetry.Monitor(self.device, clock=clock), {}

        def began(*_: Any) -> None:  # the lead-in starts with the first round, not fit's set-up
            region.setdefault("began", clock())

        def ended(*_: Any) -> None:  # after a round: synced; the last once the region is whole
            timing.sync(list(self.model.variables))
            now = clock()
            if "watched" not in region and now - region["began"] >= lead:
                monitor.start()
                region["watched"] = now
            elif "watched" in region and now - region["watched"] >= least:
                region["result"] = monitor.stop()
            self.model.stop_training = "result" in region

        try:
            with devices.scope(self.device):
                self.fit(self.boxed_steps, backends.keras().callbacks.LambdaCallback(
                    on_epoch_begin=began, on_epoch_end=ended), math.ceil(4 * (least + lead) / pace)
                    + 2)
        finally:
            if "result" not in region:  # the rounds ran out first
                region["result"] = monitor.stop() if "watched" in region else results.unmeasured(
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
    """A tf.data.Dataset of (x, y) batches, reshuffled, prefetched, kept off JAX's/torch's GPUs."""
    module = tf_backend.tf()
    if backends.current().NAME != "tensorflow":
        with contextlib.suppress(RuntimeError, ValueError):  # already initialised: as it was
            module.config.set_visible_devices([], "GPU")
    return (module.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).batch(batch_size)
            .prefetch(module.data.AUTOTUNE))


def on_device_feed(model, x, y, batch_size: int, per_call: int,
                   device: str) -> Callable[[int | None], None]:
    """`steps(count)`: `count` steps (None: an epoch, reshuffled) on the set kept on `device`."""
    backend = backends.current()
    check_for_backend("Speed_Factors", {"steps_per_execution": per_call}, backend.NAME, True)
    n = min(len(x), batch_size)  # one fit step builds the optimizer and metrics first
    model.fit(x[:n], y[:n], batch_size=n, epochs=1, verbose=0)
    make = {"tensorflow": _tensorflow_feed, "jax": _jax_feed, "torch": _torch_feed}[backend.NAME]
    with backend.scope(device):
        shuffle, run, around = make(backend, model, x, y, per_call, device)
    full, rest = divmod(len(x), batch_size)

    def steps(count: int | None) -> None:
        with backend.scope(device), around():
            if count is None:  # an epoch: every full batch, then the rest
                shuffle()
            done, total = 0, full if count is None else count
            while full and done < total:  # `count` wraps at the last full batch
                size = min(per_call, total - done, full - done % full)
                run(done % full * batch_size, size, batch_size)
                done += size
            for _ in range(int(rest > 0) if count is None else 0 if full else count):
                run(full * batch_size, 1, rest)  # with no full batch: the whole set each step

    return steps


# A feed: shuffle() (a permutation made on the device), run(start, count, size) (`count` batches
# of it from `start`, up to `per_call` a call), a context around each call of `steps`.
def _tensorflow_feed(backend, model, x, y, per_call, device):  # steps looped in one tf.function
    tf, n = backend.tf(), len(x)
    x_dev, y_dev = tf.identity(tf.constant(x)), tf.identity(tf.constant(y))
    perm = tf.Variable(tf.range(n, dtype=tf.int32), trainable=False)
    one_step = tf.function(lambda xb, yb: model.train_step((xb, yb)),
                           jit_compile=bool(model.jit_compile))

    @tf.function
    def run(start, count, size: int):
        for j in tf.range(count):
            idx = tf.slice(perm, [start + j * size], [size])
            one_step(tf.gather(x_dev, idx), tf.gather(y_dev, idx))

    return (lambda: perm.assign(tf.random.shuffle(tf.range(n, dtype=tf.int32))),
            lambda start, count, size: run(tf.constant(start), tf.constant(count), size),
            contextlib.nullcontext)


def _jax_feed(backend, model, x, y, per_call, device):  # Keras's stateless step, in a fori_loop
    jax, target, n = backend.jax(), backend.device(device), len(x)
    x_dev, y_dev = jax.device_put(x, target), jax.device_put(y, target)
    owners = (model.trainable_variables, model.non_trainable_variables,
              model.optimizer.variables, model.metrics_variables)
    identity = jax.device_put(jax.numpy.arange(n, dtype=jax.numpy.int32), target)
    now = {"key": jax.device_put(jax.random.key(0), target), "perm": identity}

    @functools.partial(jax.jit, donate_argnums=0, static_argnums=4)
    def run(state, perm, start, count, size: int):
        def step(j, carried):
            idx = jax.lax.dynamic_slice(perm, (start + j * size,), (size,))
            batch = (jax.numpy.take(x_dev, idx, axis=0), jax.numpy.take(y_dev, idx, axis=0))
            return model.train_step(carried, batch)[1]

        return jax.lax.fori_loop(0, count, step, state)

    def shuffle() -> None:
        now["key"], sub = jax.random.split(now["key"])
        now["perm"] = jax.random.permutation(sub, identity)

    def advance(start: int, count: int, size: int) -> None:
        now["state"] = run(now["state"], now["perm"], start, count, size)

    @contextlib.contextmanager
    def state():  # Keras's JAX state, carried as `fit` does, then written back to the variables
        now["state"] = jax.device_put(tuple([v.value for v in vs] for vs in owners), target)
        yield  # (after an error the variant is failed: its variables are not read again)
        for variables, values in zip(owners, now["state"], strict=True):
            for variable, value in zip(variables, values, strict=True):
                variable.assign(value)

    shuffle()  # compiled now, not in the first epoch
    return shuffle, advance, state


def _torch_feed(backend, model, x, y, per_call, device):  # one step a call, as Keras's trainer
    torch, n = backend.torch(), len(x)
    target = torch.device("cuda:" + device.partition(":")[2] if device.startswith("gpu") else "cpu")
    x_dev, y_dev = torch.as_tensor(x, device=target), torch.as_tensor(y, device=target)
    step = torch.compile(model.train_step) if model.jit_compile else model.train_step
    perm = [torch.arange(n, device=target)]

    def run(start: int, count: int, size: int) -> None:
        for first in range(start, start + count * size, size):
            idx = perm[0][first:first + size]
            step((x_dev[idx], y_dev[idx]))

    def shuffle() -> None:
        perm[0] = torch.randperm(n, device=target)

    return shuffle, run, contextlib.nullcontext
