"""timing: statistics, measure() with warm-up, sync and repeats, measure_blocks() (product time
in blocks of calls, one sync each), and the EpochTimer."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import REPO
from gpubench import backends, machine, results, timing


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
@pytest.mark.parametrize("measure", [timing.measure, timing.measure_blocks])
def test_measure_rejects_bad_counts(measure, warmup, repeats):
    calls = []
    with pytest.raises(ValueError, match="must be a positive integer"):
        measure(lambda: calls.append(1), warmup=warmup, repeats=repeats)
    assert calls == []  # checked before the first call


class FakeDevice:
    """A fake clock and a function queued on it: each call costs `call_s`, a sync `sync_s`; it
    notes how many calls were made by each sync and what each sync waited on."""

    def __init__(self, call_s: float, sync_s: float) -> None:
        self.call_s, self.sync_s, self.now, self.calls = call_s, sync_s, 0.0, 0
        self.syncs: list[tuple[int, tuple]] = []

    def fn(self) -> int:
        self.calls += 1
        self.now += self.call_s
        return self.calls

    def sync(self, *values) -> None:
        self.syncs.append((self.calls, values))
        self.now += self.sync_s

    def per_sync(self) -> list[int]:
        """Calls made between one sync and the next (the first: since the start)."""
        return [b - a for a, b in itertools.pairwise([0] + [c for c, _ in self.syncs])]


@pytest.fixture
def fake_device(monkeypatch):
    """Make a FakeDevice whose clock and sync gpubench.timing uses."""
    def make(call_s: float, sync_s: float = 1e-4) -> FakeDevice:
        device = FakeDevice(call_s, sync_s)
        monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: device.now))
        monkeypatch.setattr(timing, "sync", device.sync)
        return device
    return make


def test_product_time_queues_many_calls_per_sync(fake_device):
    device = fake_device(call_s=1e-3)  # 1 ms a call, 0.1 ms a sync, target 20 ms
    m = timing.measure_blocks(device.fn, warmup=1, repeats=5, target=0.02)
    # sized 1, 2, 4, 8, 16 (16.1 ms < 20), 32 (32.1 ms): blocks of 32
    assert m.per_block == 32
    # the first call, the sizing blocks, the single calls, the timed blocks
    assert device.per_sync() == [1, 1, 2, 4, 8, 16, 32] + [1] * 5 + [32] * 5
    assert all(values == (calls,) for calls, values in device.syncs)  # each on its last result
    assert m.times == [pytest.approx((32 * 1e-3 + 1e-4) / 32)] * 5  # the sync spread over 32
    assert m.calls == [pytest.approx(1.1e-3)] * 5  # a call alone pays the whole sync
    assert m.first == pytest.approx(1.1e-3) and m.stats.n == 5
    assert m.call_stats.median > m.stats.median


def test_a_call_as_long_as_the_target_is_a_block_of_one_and_its_own_latency(fake_device):
    device = fake_device(call_s=0.05)
    m = timing.measure_blocks(device.fn, warmup=2, repeats=4, target=0.02)
    assert m.per_block == 1 and m.calls == m.times == [pytest.approx(0.0501)] * 4
    assert device.calls == 2 + 1 + 4  # warm-up, one sizing call, the repeats: none twice


def test_blocks_stop_growing_at_the_cap(fake_device):
    device = fake_device(call_s=1e-6)
    m = timing.measure_blocks(device.fn, repeats=2, most=64)
    assert m.per_block == 64 and device.per_sync()[-2:] == [64, 64]


def test_a_block_keeps_only_the_last_result_alive(fake_device, monkeypatch):
    device = fake_device(call_s=1e-3)
    monkeypatch.setattr(timing, "sync", lambda *values: device.sync())  # holding none of them
    live = {"now": 0, "most": 0}

    class Result:
        def __init__(self) -> None:
            live["now"] += 1
            live["most"] = max(live["most"], live["now"])

        def __del__(self) -> None:
            live["now"] -= 1

    def fn():
        device.fn()
        return Result()

    m = timing.measure_blocks(fn, repeats=2, target=0.02)
    assert m.per_block == 32 and live["most"] <= 2  # the new result and the one it replaces


def test_measure_blocks_with_a_device_has_telemetry_over_the_blocks():
    m = timing.measure_blocks(lambda: sum(range(1000)), repeats=2, device="cpu")
    assert m.telemetry["reason"] == "the device is the CPU" and m.per_block > 1


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
    assert len(timer.epoch_load_average) == 3 and None not in timer.epoch_load_average


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


# ---- the steady epochs: one rule (`timing.steady`), every steady figure follows it

def test_steady_is_every_epoch_after_the_first():
    assert timing.steady([9.0, 2.0, 3.0]) == [2.0, 3.0]
    assert timing.steady((9.0, 2.0)) == [2.0]  # any sequence; a list back
    assert timing.steady([9.0]) == [] and timing.steady([]) == []
    assert timing.STEADY_EPOCHS == "epochs 2..n"


def test_train_fields_take_the_steady_epochs_median_and_iqr():
    fields = timing.train_fields([10.0, 2.0, 4.0, 3.0], 600, 1000)
    assert fields["epoch_seconds"] == [10.0, 2.0, 4.0, 3.0]
    assert fields["first_epoch_seconds"] == 10.0 and fields["total_seconds"] == 19.0
    assert fields["steady_epoch_seconds"] == 3.0  # the median of 2, 4, 3: epoch 1 left out
    assert fields["steady_epoch_iqr"] == pytest.approx(1.0)  # 3.5 - 2.5
    assert fields["samples_per_second"] == pytest.approx(200.0)  # 600 images / 3 s
    assert fields["achieved_gflops"] == pytest.approx(1000 * 200 / 1e9)


def test_train_fields_of_one_epoch_and_of_none():
    one = timing.train_fields([4.0], 100, 10)
    assert one["steady_epoch_seconds"] is None and one["steady_epoch_iqr"] is None
    assert one["samples_per_second"] == pytest.approx(25.0)  # epoch 1's pace, all there is
    none = timing.train_fields([], 100, 10)
    assert none["epoch_seconds"] == [] and none["total_seconds"] is None
    assert none["first_epoch_seconds"] is none["samples_per_second"] is None


def test_every_steady_figure_follows_the_one_rule(monkeypatch):
    """Change the rule in its one home and every steady figure changes with it: the record's
    median and IQR, Speed_Factors' round rates, the GPU busy % and the report's unstable flag."""
    from gpubench import factors
    from gpubench.report import training as report_training

    epochs = [100.0, 50.0, 1.0, 3.0]
    record = {"epoch_seconds": epochs, "train_samples": 6, "time_boxed": False}
    util = [5.0, 10.0, 70.0, 90.0]
    flagged = {"benchmark": "train", "status": "ok", "factor": None, "model": "mlp_h1000",
               "device": "cpu", "_column": "vm · cpu", "epoch_seconds": epochs,
               "steady_epoch_seconds": 2.0, "steady_epoch_iqr": 1.0}

    def figures() -> tuple:
        return (timing.train_fields(epochs, 6, None)["steady_epoch_seconds"],
                factors.round_rates(record), timing.busy_percent(util, None),
                "\n".join(report_training.unstable([flagged])))

    median, rates, busy, text = figures()
    assert (median, rates, busy) == (3.0, [6 / 50, 6 / 1, 6 / 3], (70.0, False))
    assert "steady epochs 1.0–50 s" in text
    monkeypatch.setattr(timing, "steady", lambda per_epoch: list(per_epoch[2:]))
    median, rates, busy, text = figures()
    assert (median, rates, busy) == (2.0, [6 / 1, 6 / 3], (80.0, False))
    assert "steady epochs 1.0–3.0 s" in text


# ---- the stopping rule: blocks repeat while noisy, up to the time cap

def test_steady_blocks_stop_at_the_minimum_and_are_not_noisy(fake_device):
    device = fake_device(call_s=1e-3)
    m = timing.measure_blocks(device.fn, repeats=5, target=0.02)
    assert len(m.times) == 5 and m.noisy is False and m.stats.spread == 0.0


def test_noisy_blocks_repeat_until_the_time_cap_and_say_so(fake_device, monkeypatch):
    device = fake_device(call_s=1e-3)
    real_fn, state = device.fn, {"n": 0}

    def jittery():  # every other call 3x slower: blocks of one call, spread far above 5 %
        state["n"] += 1
        device.now += 2e-3 * (state["n"] % 2)
        return real_fn()

    m = timing.measure_blocks(jittery, repeats=3, target=1e-4, most=1, cap=0.1)
    assert len(m.times) > 3 and m.noisy is True  # more than the minimum, and flagged
    assert sum(m.times) == pytest.approx(0.1, abs=0.01)  # stopped by the cap
    assert m.stats.spread > timing.NOISE_THRESHOLD
    quiet = timing.measure_blocks(jittery, repeats=3, target=1e-4, most=1, cap=0.1, threshold=10)
    assert len(quiet.times) == 3 and quiet.noisy is False  # under a looser threshold


def test_a_region_records_its_highest_load_average(monkeypatch):
    loads = iter([0.5, 3.0])
    monkeypatch.setattr(machine, "load_average", lambda: next(loads))
    m = timing.measure(lambda: None, repeats=2)
    assert m.load_average == 3.0 and m.telemetry is None


# ---- the CPU meter: CPU use and RAPL, with no thread (telemetry stays unloaded)

def rapl_tree(root, counters: dict[str, tuple[str, int, int]]):
    """A powercap folder: domain -> (name, energy_uj, max_energy_range_uj)."""
    for domain, (name, energy, wrap) in counters.items():
        (root / domain).mkdir(parents=True, exist_ok=True)
        (root / domain / "name").write_text(name + "\n")
        (root / domain / "energy_uj").write_text(f"{energy}\n")
        (root / domain / "max_energy_range_uj").write_text(f"{wrap}\n")
    return root


def test_rapl_packages_are_the_package_domains_only(tmp_path):
    root = rapl_tree(tmp_path, {"intel-rapl:0": ("package-0", 5, 100),
                                "intel-rapl:0:0": ("core", 1, 100),
                                "intel-rapl:1": ("psys", 7, 100)})
    assert machine.rapl_packages(root) == [(root / "intel-rapl:0" / "energy_uj", 100)]
    assert machine.rapl_packages(tmp_path / "nowhere") == []
    (root / "intel-rapl:0" / "energy_uj").chmod(0)
    if os.geteuid() != 0:  # root reads it anyway
        assert machine.rapl_packages(root) == []


def test_rapl_joules_count_wrap_arounds():
    packages = [("a", 1_000_000), ("b", 10_000_000)]
    readings = [(900_000, 5_000_000), (100_000, 6_000_000), (300_000, 6_500_000)]
    # a: 0.9 -> 0.1 wraps (+0.2 J), then +0.2 J; b: +1 J, then +0.5 J
    assert machine.rapl_joules(packages, readings) == pytest.approx(0.2 + 0.2 + 1.0 + 0.5)
    assert machine.rapl_joules(packages, [readings[0], None]) is None
    assert machine.rapl_joules([], readings) is None and machine.rapl_joules(packages, []) is None


def test_the_cpu_meter_gives_cpu_use_and_rapl_energy(tmp_path, monkeypatch):
    root = rapl_tree(tmp_path, {"intel-rapl:0": ("package-0", 1_000_000, 2**32)})
    monkeypatch.setattr(machine, "RAPL_ROOT", root)
    meter = timing.CpuMeter().start()
    sum(i * i for i in range(300_000))  # busy on this process's CPU
    (root / "intel-rapl:0" / "energy_uj").write_text("3500000\n")
    result = meter.stop()
    assert set(result) == set(results.TELEMETRY_FIELDS)
    assert result["reason"] == machine.CPU_REASON and result["source"] is None
    assert result["cpu_util_percent_mean"] > 20 and result["seconds"] > 0
    assert (result["cpu_energy_joules"], result["cpu_energy_method"]) == (2.5, "rapl")
    combined = timing.run_telemetry([result, result], "cpu")["telemetry"]
    assert combined["cpu_energy_joules"] == 5.0
    assert combined["cpu_util_percent_mean"] == pytest.approx(result["cpu_util_percent_mean"],
                                                              abs=0.1)


def test_a_cpu_region_loads_no_telemetry_module():
    code = ("import sys; from gpubench import timing\n"
            "m = timing.measure(lambda: None, repeats=2, device='cpu')\n"
            "assert m.telemetry['cpu_util_percent_mean'] is not None\n"
            "sys.exit(any(n.startswith('gpubench.telemetry') for n in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0
