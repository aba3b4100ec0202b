"""timing: statistics, measure() with warm-up, sync and repeats, and the EpochTimer."""

from __future__ import annotations

import time

import numpy as np
import pytest

from gpubench import backends, timing


def test_summarize_known_values():
    stats = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (stats.median, stats.min, stats.max, stats.iqr, stats.n) == (3.0, 1.0, 5.0, 2.0, 5)


def test_summarize_single_value_has_zero_iqr():
    assert timing.summarize([0.5]).iqr == 0.0


def test_summarize_needs_values():
    with pytest.raises(ValueError):
        timing.summarize([])


def test_measure_calls_warmup_plus_repeats_and_syncs_on_each_result(monkeypatch):
    calls, synced = [], []
    monkeypatch.setattr(timing, "sync", lambda *values: synced.extend(values))
    m = timing.measure(lambda: calls.append(1) or len(calls), warmup=3, repeats=4)
    assert len(calls) == 7 and synced == [1, 2, 3, 4, 5, 6, 7]  # what each call returned
    assert len(m.times) == 4 and m.stats.n == 4 and m.telemetry is None


def test_measure_with_a_device_has_telemetry_over_the_repeats():
    m = timing.measure(lambda: sum(range(10_000)), warmup=1, repeats=3, device="cpu")
    assert m.telemetry["source"] is None and m.telemetry["reason"] == "the device is the CPU"
    assert m.telemetry["cpu_util_percent_mean"] is not None


def test_first_call_is_reported_apart_from_the_median():
    state = {"first": True}

    def fn():
        if state["first"]:
            state["first"] = False
            time.sleep(0.3)

    m = timing.measure(fn, warmup=1, repeats=5)
    assert m.first >= 0.3
    assert m.stats.max < 0.3  # the slow first call is not among the repeats


@pytest.mark.parametrize("warmup,repeats", [(0, 3), (1, 0), (1, -2), (1.5, 3), (True, 3)])
def test_measure_rejects_bad_counts(warmup, repeats):
    with pytest.raises(ValueError, match="must be a positive integer"):
        timing.measure(lambda: None, warmup=warmup, repeats=repeats)


def test_epoch_timer_times_every_epoch_with_its_telemetry():
    keras = backends.keras()
    model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    timer = timing.epoch_timer("cpu")
    x, y = np.ones((64, 4), "float32"), np.zeros((64, 2), "float32")
    model.fit(x, y, epochs=3, batch_size=16, verbose=0, callbacks=[timer])
    assert len(timer.epoch_seconds) == 3
    assert all(s > 0 for s in timer.epoch_seconds)
    assert len(timer.epoch_telemetry) == 3
    assert all(t["reason"] == "the device is the CPU" for t in timer.epoch_telemetry)


def test_epoch_timer_syncs_on_the_variables_once_per_epoch_before_stopping_the_clock(monkeypatch):
    keras = backends.keras()
    timer = timing.epoch_timer()
    syncs = []  # (epochs already recorded, variables synced on) at each sync
    monkeypatch.setattr(timing, "sync",
                        lambda variables: syncs.append((len(timer.epoch_seconds), len(variables))))
    model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((8, 4), "float32"), np.zeros((8, 2), "float32"), epochs=3, batch_size=8,
              verbose=0, callbacks=[timer])
    # one per epoch, each before that epoch's time is taken, on every variable (kernel, bias)
    assert syncs == [(0, 2), (1, 2), (2, 2)]
