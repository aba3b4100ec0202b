"""Speed factors: the numbers the chapter and the report print, the time box, the backends' feeds,
and a papermill run."""

from __future__ import annotations

import importlib
import math
import subprocess
import sys

import pytest

from gpubench import backends, factors, results
from gpubench.factors import measure, rules
from gpubench.factors import trainer as factor_trainer


def _record(device="cpu", factor="baseline", seconds=(9.0, 1.0, 1.0, 1.0), *, env="cpu",
            batch_size=100, samples=1000, time_boxed=False, steps=None, accuracy=0.9,
            precision="float32", jit=False, status="ok", **extra) -> dict:
    """A Speed_Factors train record with the given round times (round 1 first)."""
    fields = dict(
        model="mlp_h1000", dataset="mnist", data_source="synthetic", epochs=len(seconds),
        batch_size=batch_size, train_samples=samples, epoch_seconds=list(seconds),
        test_accuracy=None if time_boxed else accuracy, factor=factor, time_boxed=time_boxed,
        steps_measured=steps, precision=precision, jit_compile=jit, steps_per_execution=1,
        input_pipeline="arrays", flops_per_sample=4_764_000,
    )
    fields.update(extra)
    record = results.make_record("train", notebook="Speed_Factors", env=env, device=device,
                                 status=status, environment={}, **fields)
    rates = factors.round_rates(record)
    record["samples_per_second"] = max(rates) if rates else None
    record["achieved_gflops"] = (4_764_000 * max(rates) / 1e9) if rates else None
    return record


def _report():
    """gpubench.report.factors, the tables and text written from these numbers (the submodule
    itself, imported by the tests that read it)."""
    return importlib.import_module("gpubench.report.factors")


def _report_telemetry():
    """gpubench.report.telemetry (the report's GPU busy rule), imported by the tests that read it."""
    return importlib.import_module("gpubench.report.telemetry")


def _effect(rows, device, factor):
    (row,) = [r for r in rows if r["device"] == device and r["factor"] == factor]
    return row


def test_speedup_is_baseline_time_over_variant_time_not_inverted():
    report = _report()

    rows = factors.effects([
        _record(),
        _record(factor="batch_size", batch_size=1000, seconds=(5.0, 0.5, 0.55, 0.52)),
        _record(factor="xla", jit=True, seconds=(5.0, 2.0, 2.1, 2.2)),
    ])
    batch, xla = _effect(rows, "cpu", "batch_size"), _effect(rows, "cpu", "xla")
    assert batch["speedup"] == pytest.approx(2.0) and batch["verdict"] == "faster"
    assert batch["clear"]
    assert batch["value"] == "batch 1000" and report.describe(batch) == "2.00x faster"
    assert xla["speedup"] == pytest.approx(0.5) and xla["verdict"] == "slower"
    assert xla["value"] == "XLA on" and report.describe(xla) == "2.00x slower"
    assert _effect(rows, "cpu", "baseline")["speedup"] == pytest.approx(1.0)


def test_no_clear_effect_when_the_rounds_straddle_one():
    report = _report()

    base = _record(seconds=(9.0, 1.0, 1.0, 1.0))
    noisy = _record(factor="steps_per_execution", seconds=(9.0, 0.8, 1.25, 0.9))
    steady = _record(factor="input_pipeline", seconds=(9.0, 0.9, 0.92, 0.91))
    rows = factors.effects([base, noisy, steady])
    n = _effect(rows, "cpu", "steps_per_execution")
    assert n["speedup"] == pytest.approx(1.25)  # the best round alone would call it faster
    assert (n["low"], n["high"]) == (pytest.approx(0.8), pytest.approx(1.25))
    assert n["verdict"] == "no clear effect" and not n["clear"]
    assert report.describe(n) == "no clear effect"
    s = _effect(rows, "cpu", "input_pipeline")
    assert s["low"] > 1.0 and s["verdict"] == "faster"


@pytest.mark.parametrize("low, high, expected", [
    (0.9, 1.1, "no clear effect"), (1.0, 1.3, "no clear effect"), (0.5, 1.0, "no clear effect"),
    (1.01, 1.3, "faster"), (0.2, 0.99, "slower")])
def test_verdict_rule(low, high, expected):
    # two rounds at these rates against a baseline's two of 1: the interval is [low, high]
    assert rules.compare([1.0, 1.0], [low, high])["verdict"] == expected


def test_each_device_is_compared_with_its_own_baseline():
    rows = factors.effects([
        _record("gpu:0", seconds=(9, 0.1, 0.1, 0.1), env="gpu"),
        _record("cpu", seconds=(9, 1.0, 1.0, 1.0), env="gpu"),
        _record("gpu:0", "batch_size", (9, 0.05, 0.05, 0.05), env="gpu", batch_size=1000),
        _record("cpu", "batch_size", (9, 0.5, 0.5, 0.5), env="gpu", batch_size=1000),
    ])
    assert _effect(rows, "gpu:0", "batch_size")["speedup"] == pytest.approx(2.0)
    assert _effect(rows, "cpu", "batch_size")["speedup"] == pytest.approx(2.0)


def test_time_boxed_record_rates_use_the_steps_measured():
    report = _report()

    boxed = _record(factor="precision", precision="mixed_float16", time_boxed=True,
                    steps=6, seconds=(50.0, 2.0, 2.0, 2.0))  # 2 steps of 100 per round
    assert factors.round_rates(boxed) == [pytest.approx(100.0)] * 3
    rows = factors.effects([_record(), boxed])  # baseline: 1000 images/s
    row = _effect(rows, "cpu", "precision")
    assert row["speedup"] == pytest.approx(0.1) and report.describe(row) == "10x slower"
    assert report.accuracy_text(row) == "accuracy not measured (time-boxed)"
    table = report.table(rows)
    assert "accuracy not measured (time-boxed)" in table and "6 (time-boxed)" in table
    assert "10x slower" in table and "(the reference)" in table


def test_the_chapters_chart_draws_rows_without_a_column_label():
    """The chapter's `effects` rows name no machine · env column (the report's do): the chart
    labels each by device and value alone, and a second column adds the column's label."""
    import matplotlib

    matplotlib.use("Agg")
    rows = factors.effects([_record(), _record(factor="batch_size", batch_size=1000)])
    assert all("column" not in row for row in rows)
    labels = [t.get_text() for t in _report().plot(rows).get_yticklabels()]
    assert labels and all(label.startswith("cpu: ") for label in labels)
    two = [row | {"column": f"m · {i}"} for i, row in enumerate(rows)]
    assert [t.get_text() for t in _report().plot(two).get_yticklabels()][0].startswith("m · ")


def test_the_table_shows_each_variants_gpu_busy_share():
    report = _report()

    busy = dict(results.unmeasured(None), source="nvml", gpu_util_percent_mean=23.4)
    rows = factors.effects([_record("gpu:0", env="gpu"),
                            _record("gpu:0", "input_pipeline", (9, 0.5, 0.5, 0.5), env="gpu",
                                    input_pipeline="on_device", telemetry=busy,
                                    epoch_gpu_util_percent=[1.0, 23.4, 22.0, 23.9]),
                            _record("gpu:0", "batch_size", (9, 0.5, 0.5, 0.5), env="gpu",
                                    batch_size=256, telemetry=busy)])
    lines = report.table(rows).splitlines()
    assert "| GPU busy |" in lines[0]
    column = lines[0].split("|").index(" GPU busy ")
    # the steady rounds' median (round 1 left out); the run's mean only where no round has one
    assert [line.split("|")[column].strip() for line in lines[2:]] == [
        "n/a", "23 %", "23 % (run mean)"]


def test_crossover_batch_size():
    report = _report()

    def pair(batch, gpu_s, cpu_s):
        factor = "baseline" if batch == 100 else "batch_size"
        return [_record("gpu:0", factor, (9, gpu_s, gpu_s), env="gpu", batch_size=batch),
                _record("cpu", factor, (9, cpu_s, cpu_s), env="gpu", batch_size=batch)]
    records = pair(32, 3.0, 2.0) + pair(100, 1.5, 1.0) + pair(256, 0.8, 0.9) + pair(1024, 0.2, 0.7)
    assert factors.crossover_batch_size(records) == 256
    assert factors.crossover_batch_size([r for r in records if r["device"] == "cpu"]) is None
    assert "No GPU" in report.crossover_text([r for r in records if r["device"] == "cpu"])
    assert "**256**" in report.crossover_text(records)


def test_percent_of_peak_divides_by_the_newest_peak_record_of_the_same_device_and_dtype():
    def matmul(device, dtype, gflops, method="peak", when="2026-01-01T00:00:00", env="cpu"):
        return {"benchmark": "matmul", "status": "ok", "env": env, "device": device,
                "dtype": dtype, "method": method, "size": 4096, "gflops": gflops,
                "seconds": 2 * 4096 ** 3 / gflops / 1e9, "timestamp": when}
    record = _record(seconds=(9, 1.0, 1.0))  # 1000 images/s x 4.764 MFLOP = 4.764 GFLOP/s
    mm = [matmul("cpu", "float32", 10.0, when="2025-12-01T00:00:00"),  # an older probe
          matmul("cpu", "float32", 47.64),  # the newest probe: the reference
          matmul("cpu", "float32", 4.764, method="rigorous"),  # a sweep record: never one
          matmul("cpu", "float32", 1.0, env="other"),  # another env's probe
          matmul("cpu", "bfloat16", 500.0), matmul("gpu:0", "float32", 9000.0)]
    assert factors.percent_of_matmul_peak(record, mm) == pytest.approx(10.0)
    bf16 = _record(seconds=(9, 1.0, 1.0), precision="mixed_bfloat16")
    assert factors.percent_of_matmul_peak(bf16, mm) == pytest.approx(100 * 4.764 / 500)
    assert factors.percent_of_matmul_peak(record, mm[4:]) is None  # no float32 probe on cpu
    assert factors.percent_of_matmul_peak(record, mm[2:3]) is None  # a sweep is not a peak


def test_findings_name_what_matters():
    report = _report()

    rows = factors.effects([
        _record(), _record(factor="batch_size", batch_size=1000, seconds=(9, 0.4, 0.4, 0.4)),
        _record(factor="xla", jit=True, seconds=(9, 0.95, 1.1, 1.0)),
    ])
    text = report.findings(rows)
    assert "most here is **batch 1000**" in text and "2.50x" in text
    assert "no clear effect: XLA on" in text


def _trainer(factor, seconds, probe_seconds=1.0, boxed=None, kind=factors.Trainer, **settings):
    """A measured variant (no model) of class `kind`: 1000 images per round, these seconds."""
    variant = rules.Variant(factor, **settings)
    return kind(variant, "cpu", None, [0] * 1000, None, round_seconds=list(seconds),
                probe_step_seconds=probe_seconds, boxed_steps=boxed)


@pytest.mark.parametrize("second_probe, boxed", [(0.02, None), (0.25, 4), (5.0, 1)])
def test_a_variant_is_time_boxed_only_when_a_second_probe_agrees(second_probe, boxed):
    class Reprobed(factors.Trainer):
        def probe(self):  # the second probe finds `second_probe` s a step
            self.probe_step_seconds = min(self.probe_step_seconds, second_probe)

    slow = _trainer("precision", (), probe_seconds=1.0, precision="mixed_float16", kind=Reprobed)
    slow.steps_per_epoch = 50  # 50 s projected against a 1 s baseline epoch
    slow.decide_box(baseline_epoch=1.0)
    assert slow.boxed_steps == boxed  # steps that last about one baseline epoch (the faster probe)


def test_the_combination_takes_each_factors_fastest_value_in_the_rounds():
    trainers = [
        _trainer("baseline", (9, 1.0, 1.0, 1.0)),
        # The probe favours batch 256; the rounds say batch 1024.
        _trainer("batch_size", (9, 0.8, 0.8, 0.8), probe_seconds=0.01, batch_size=256),
        _trainer("batch_size", (9, 0.4, 0.5, 0.45), batch_size=1024),
        _trainer("precision", (9, 1.05, 1.1, 1.2), precision="mixed_bfloat16"),  # best round 0.95x
        _trainer("precision", (9, 0.1, 0.1, 0.1), boxed=2, precision="mixed_float16"),  # boxed
        _trainer("xla", (9, 1.5, 1.5, 1.5), xla="on"),  # slower
        _trainer("input_pipeline", (9, 0.9, 0.9, 0.9), input_pipeline="tf.data"),  # clear 1.11x
        _trainer("input_pipeline", (9, 0.7, 1.3, 0.75), input_pipeline="on_device"),  # 1.43x?
    ]
    assert factors.best_settings(trainers) == {
        "batch_size": 1024, "precision": "float32", "xla": "off", "steps_per_execution": 1,
        "input_pipeline": "on_device"}
    trainers[2].status = "oom"  # a failed variant never counts
    assert factors.best_settings(trainers)["batch_size"] == 256


def test_the_combination_is_compared_with_the_baseline_rounds_it_ran_beside():
    report = _report()

    combined = _record(factor="combined", batch_size=1000, seconds=(9, 0.5, 0.5, 0.5),
                       paired_baseline_seconds=[9, 2.0, 2.0, 2.0])
    rows = factors.effects([_record(seconds=(9, 1.0, 1.0, 1.0)), combined])
    # against its own baseline's rounds (500 images/s), not the baseline row's (1000)
    assert _effect(rows, "cpu", "combined")["speedup"] == pytest.approx(4.0)
    table = report.table(rows)  # and the report says so: a dagger on its row, a note under it
    assert "| 4.00x † |" in table and "| 1.00x |" in table
    assert "† combined (batch 1000): against its own paired baseline rounds" in table
    del combined["paired_baseline_seconds"]  # a record without them: against the baseline row
    rows = factors.effects([_record(seconds=(9, 1.0, 1.0, 1.0)), combined])
    assert _effect(rows, "cpu", "combined")["speedup"] == pytest.approx(2.0)
    assert "†" not in report.table(rows)


def test_findings_say_when_the_combination_is_slower_than_one_factor_alone():
    report = _report()

    rows = factors.effects([
        _record(), _record(factor="batch_size", batch_size=1000, seconds=(9, 0.4, 0.4, 0.4)),
        _record(factor="combined", batch_size=1000, jit=True, seconds=(9, 0.5, 0.5, 0.5)),
    ])
    text = report.findings(rows)
    assert "runs at 2.00x the book's setting" in text
    assert "less than batch 1000 alone" in text
    faster = factors.effects([rows[0]["record"], rows[1]["record"],
                              _record(factor="combined", seconds=(9, 0.2, 0.2, 0.2))])
    assert "alone" not in report.findings(faster)


def test_variants_change_one_factor_at_a_time():
    found = factors.variants({"batch_size": [32, 100, 1024], "precision": ["float32"],
                              "xla": ["off", "on"]})
    assert [v.label for v in found] == ["baseline (book)", "batch 32", "batch 1024", "XLA on"]
    for v in found[1:]:
        changed = [k for k, value in v.settings().items()
                   if value != rules.BASELINE.settings()[k]]
        assert changed == [v.factor]


@pytest.mark.parametrize("change, message", [
    ({"model": "cifar_cnn"}, "cifar_cnn"), ({"epochs": 1}, "epochs"),
    ({"batch_sizes": [100, 0]}, "0"), ({"precisions": ["float8"]}, "float8"),
    ({"xla_modes": []}, "xla_modes"), ({"xla_modes": ["off", "auto"]}, "auto"),
    ({"input_pipelines": ["generator"]}, "generator")])
def test_check_params_names_the_bad_value(change, message):
    from gpubench.params import check_params

    params = dict(model="mlp_h1000", epochs=3, max_train_samples=None, batch_sizes="100,1000",
                  precisions=["float32"], xla_modes=["off"], steps_per_execution=[1],
                  input_pipelines=["arrays"])
    own = rules.check_parameters  # Speed_Factors' own rules, which the chapter gives to start
    assert check_params("Speed_Factors", params, rules=own)["batch_sizes"] == [100, 1000]
    with pytest.raises(ValueError, match=message):
        check_params("Speed_Factors", {**params, **change}, rules=own)


def test_factors_module_loads_no_tensorflow():
    code = ("import sys, gpubench.factors as f; f.effects([]); "
            "assert 'tensorflow' not in sys.modules, 'tensorflow loaded'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.slow  # trains or starts a Python: in `make test`, not in `make check`
def test_measured_variants_make_complete_records(tmp_path):
    from gpubench import data

    class BoxPrecision(factors.Trainer):  # the precision variant boxed whatever its speed
        def decide_box(self, baseline_epoch):
            if self.variant.factor == "precision":
                self.boxed_steps = 2

    store = results.ResultsStore(tmp_path / "r.jsonl")
    dataset = data.load("mnist", source="synthetic", max_train_samples=660, verbose=False)
    values = {"batch_size": [50], "precision": ["mixed_bfloat16"], "xla": ["on"],
              "steps_per_execution": [4], "input_pipeline": ["tf.data", "on_device"]}
    records = factors.run("mlp_h1000", dataset, ["cpu"], values, epochs=2, store=store, env="t",
                          trainer=BoxPrecision)
    assert [r["factor"] for r in records] == ["baseline", "batch_size", "precision", "xla",
                                              "steps_per_execution", "input_pipeline",
                                              "input_pipeline", "combined"]
    assert store.read() == records
    by = {(r["factor"], r["input_pipeline"]): r for r in records}
    boxed = by[("precision", "arrays")]
    assert boxed["time_boxed"] and boxed["steps_measured"] == 2 and boxed["test_accuracy"] is None
    assert boxed["precision"] == "mixed_bfloat16"
    assert by[("xla", "arrays")]["jit_compile"] is True
    assert by[("baseline", "arrays")]["jit_compile"] is False
    assert by[("steps_per_execution", "arrays")]["steps_per_execution"] == 4
    assert by[("input_pipeline", "on_device")]["test_accuracy"] is not None
    # The combination ran beside a fresh baseline, whose rounds its record keeps.
    assert len(by[("combined", records[-1]["input_pipeline"])]["paired_baseline_seconds"]) == 2
    for r in records:
        assert r["status"] == "ok", (r["factor"], r["error"])
        assert len(r["epoch_seconds"]) == 2 and r["epochs"] == 2
        assert r["samples_per_second"] == pytest.approx(max(factors.round_rates(r)))
        assert r["achieved_gflops"] == pytest.approx(4_764_000 * r["samples_per_second"] / 1e9)
        if not r["time_boxed"]:
            assert r["steps_measured"] == -(-605 // r["batch_size"])  # 660 - 55 held out
            assert 0 <= r["test_accuracy"] <= 1


def _on_device_trainer(steps_per_execution=4):
    """(A built on_device trainer, batch 100 on 605 images: 6 full batches; its split)."""
    from gpubench import data, training

    split = training.split("mlp_h1000", data.load("mnist", source="synthetic",
                                                  max_train_samples=660, verbose=False))
    variant = rules.Variant("combined", batch_size=100, steps_per_execution=steps_per_execution,
                            input_pipeline="on_device")
    trainer = factors.Trainer.prepared(variant, "mlp_h1000", "cpu", split)
    assert trainer.status == "ok", trainer.error
    return trainer, split


@pytest.mark.slow  # trains: in `make test`, not in `make check`
def test_on_device_steps_wrap_at_the_end_of_the_training_set():
    trainer, split = _on_device_trainer()
    trainer.timed(13)  # 6 + 6 + 1: two passes and one step into a third
    trainer.timed(None)  # one epoch, the last 5 images in a batch of their own
    variant = rules.Variant("batch_size", batch_size=1000, input_pipeline="on_device")
    trainer = factors.Trainer.prepared(variant, "mlp_h1000", "cpu", split)  # batch > set
    assert trainer.status == "ok", trainer.error
    trainer.timed(3)


# --- GPU busy on a GPU: the busy region; % of matmul: the peak probe --------------------------


@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU for the factors code on this CPU machine: NVML answers from tests/fake_pynvml (90 %
    busy), gpu:0 resolves, and placement on it is a no-op."""
    import contextlib

    from fake_pynvml import FakeNVML
    from gpubench import devices

    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(devices, "resolve", lambda name: name)
    monkeypatch.setattr(devices, "scope", lambda name: contextlib.nullcontext(name))


class _Clock:
    """A hand-moved clock (seconds)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _on_device_gpu_trainer(clock, round_seconds=0.125):
    """A GPU variant with on-device rounds of `round_seconds` on `clock` (no model, no
    framework): its rounds so far were that short, too short for NVML."""
    import types

    trainer = _trainer("input_pipeline", (3.0, round_seconds, round_seconds),
                       input_pipeline="on_device")
    trainer.device, trainer.model = "gpu:0", types.SimpleNamespace(variables=[])
    trainer.calls = 0

    def rounds(steps):
        trainer.calls += 1
        clock.now += round_seconds
    trainer.feed = rounds
    return trainer


def test_a_short_round_variant_gets_its_gpu_busy_from_a_long_enough_region(fake_gpu):
    clock = _Clock()
    trainer = _on_device_gpu_trainer(clock)
    region = trainer.measure_busy_region(clock=clock)
    # 1 s of lead-in (8 rounds) unmonitored, then whole rounds under the Monitor for 2 s (16).
    assert trainer.calls == 24
    assert region["source"] == "nvml" and region["seconds"] == pytest.approx(2.0)
    assert region["gpu_util_percent_mean"] == 90  # the fake GPU's figure, not null
    assert factor_trainer.BUSY_REGION_SECONDS >= 2 * factor_trainer.NVML_WINDOW_SECONDS


def test_a_busy_region_that_runs_out_of_rounds_says_so(fake_gpu):
    clock = _Clock()
    trainer = _on_device_gpu_trainer(clock)
    trainer.round_seconds = [3.0, 1.0, 1.0]  # its steady pace: 1 s; a round now takes 0.125 s
    region = trainer.measure_busy_region(clock=clock)
    assert trainer.calls == 14  # 4 x (2 + 1) / 1 + 2 rounds: all it may run
    assert region["seconds"] == pytest.approx(0.75)  # the 6 rounds after the lead-in's 8...
    trainer.calls, trainer.round_seconds = 0, [3.0, 1.0, 1.0]
    region = trainer.measure_busy_region(lead=5.0, clock=clock)  # ...or none at all
    assert region["gpu_util_percent_mean"] is None and "lead-in" in region["reason"]


def _measured(device, seconds, source="nvml", kind=factors.Trainer):
    """A measured variant on `device` whose rounds NVML read (`source`) or not (None)."""
    trainer = _trainer("batch_size", seconds, batch_size=1024, kind=kind)
    trainer.device = device
    trainer.round_telemetry = [dict(results.unmeasured(None), source=source)] * len(seconds)
    return trainer


def test_the_busy_region_runs_only_on_a_gpu_for_rounds_too_short():
    ran = []

    class Measured(factors.Trainer):
        def measure_busy_region(self):
            ran.append(self)
            return dict(results.unmeasured(None), source="nvml", seconds=2.1,
                        gpu_util_percent_mean=55.0)

    cpu = _measured("cpu", (3.0, 0.1, 0.1), source=None, kind=Measured)
    short = _measured("gpu:0", (3.0, 0.1, 0.1), kind=Measured)
    long = _measured("gpu:0", (3.0, 2.5, 2.4), kind=Measured)
    no_nvml = _measured("gpu:0", (3.0, 0.1, 0.1), source=None, kind=Measured)
    failed = _measured("gpu:0", (3.0, 0.1, 0.1), kind=Measured)
    failed.status = "oom"
    said = []
    measure.busy_regions([cpu, short, long, no_nvml, failed], said.append)
    assert ran == [short] and short.busy_region["gpu_util_percent_mean"] == 55.0
    assert [t.busy_region for t in (cpu, long, no_nvml, failed)] == [None] * 4
    assert said == ["gpu:0: batch 1024: GPU busy 55 % over 2.1 s of its rounds back to back "
                    "(a round: 0.10 s, under 2 s)"]


def test_a_failed_busy_region_keeps_the_rounds_and_says_why():
    class OutOfMemory(factors.Trainer):
        def measure_busy_region(self):
            raise MemoryError("RESOURCE_EXHAUSTED: out of memory")

    short = _measured("gpu:0", (3.0, 0.1, 0.1), kind=OutOfMemory)
    said = []
    measure.busy_regions([short], said.append)
    assert short.status == "ok" and short.round_seconds == [3.0, 0.1, 0.1]
    assert short.busy_region["gpu_util_percent_mean"] is None
    assert "the busy region failed" in said[0] and "out of memory" in said[0]


def test_a_variants_gpu_busy_is_its_regions_else_the_median_of_its_steady_rounds():
    region = dict(results.unmeasured(None), source="nvml", seconds=2.05,
                  gpu_util_percent_mean=61.0)
    short = _record("gpu:0", "combined", (3.3, 0.005, 0.005), env="jax-gpu", busy_region=region,
                    epoch_gpu_util_percent=[0.2, None, None])
    assert short["busy_region"] == region  # a field of the schema, kept in the record
    assert _report_telemetry().gpu_busy(short) == (61.0, False)
    rounds = _record("gpu:0", "batch_size", (4.2, 2.3, 2.7, 2.5), env="jax-gpu", batch_size=32,
                     epoch_gpu_util_percent=[0.5, 3.5, 3.0, 3.2])
    assert rounds["busy_region"] is None
    assert _report_telemetry().gpu_busy(rounds) == (3.2, False)  # round 1 (compiling) left out
    assert _report_telemetry().gpu_busy(_record()) == (None, False)  # a CPU: no figure, no guess


def test_the_chapter_runs_each_missing_gpu_peak_once_and_reuses_a_stored_one(tmp_path, fake_gpu,
                                                                             monkeypatch):
    from gpubench import matmul

    probed = []

    def peak(device, dtype, *, notebook, env):
        probed.append((device, dtype))
        return results.make_record("matmul", notebook=notebook, env=env, device=device,
                                   size=8192, dtype=dtype, method="peak", seconds=0.01,
                                   seconds_min=0.01, repeats=5, gflops=100_000.0)
    monkeypatch.setattr(matmul, "peak", peak)
    store = results.ResultsStore(tmp_path / "r.jsonl")
    store.append(peak("gpu:0", "float32", notebook="performanceTest", env="jax-gpu"))
    probed.clear()
    precisions = ["float32", "mixed_float16", "mixed_bfloat16"]
    dtypes = sorted({rules.COMPUTE_DTYPE[p] for p in precisions})  # as the chapter asks
    peaks = matmul.peaks_for(["gpu:0"], dtypes, store=store, env="jax-gpu",
                             notebook="Speed_Factors")
    assert probed == [("gpu:0", "bfloat16"), ("gpu:0", "float16")]  # float32: performanceTest's
    assert [r["notebook"] for r in peaks] == ["Speed_Factors", "Speed_Factors", "performanceTest"]
    assert len(store.read()) == 3
    again = matmul.peaks_for(["gpu:0"], dtypes, store=store, env="jax-gpu",
                             notebook="Speed_Factors")
    assert [(r["dtype"], r["timestamp"]) for r in again] == [
        (r["dtype"], r["timestamp"]) for r in peaks]  # the stored ones
    assert len(probed) == 2 and len(store.read()) == 3  # a second run measures nothing again
    for precision in precisions:  # so no variant's "% of matmul" is n/a on this GPU
        record = _record("gpu:0", env="jax-gpu", precision=precision)
        assert factors.percent_of_matmul_peak(record, peaks) == pytest.approx(
            100 * record["achieved_gflops"] / 100_000.0)


@pytest.mark.slow  # trains: in `make test`, not in `make check`
def test_a_fit_variants_busy_region_is_one_fit_call_stopped_when_long_enough(fake_gpu):
    from gpubench import data, training

    split = training.split("mlp_h1000", data.load("mnist", source="synthetic",
                                                  max_train_samples=660, verbose=False))
    variant = rules.Variant("batch_size", batch_size=200)
    trainer = factors.Trainer.prepared(variant, "mlp_h1000", "gpu:0", split)
    assert trainer.status == "ok", trainer.error
    trainer.round_seconds = [1.0, 0.01, 0.01]  # as if its rounds were far too short for NVML
    fits = []
    fit = trainer.model.fit
    trainer.model.fit = lambda *a, **k: fits.append(k["epochs"]) or fit(*a, **k)
    region = trainer.measure_busy_region(least=0.6, lead=0.1)
    assert fits == [math.ceil(4 * 0.7 / 0.01) + 2]  # one fit call, that many epochs at most
    assert region["source"] == "nvml" and region["gpu_util_percent_mean"] == 90
    assert region["seconds"] >= 0.6
    # It stopped once long enough: the optimizer took far fewer steps than the epochs allowed.
    steps = int(trainer.model.optimizer.iterations.numpy())
    assert steps < fits[0] * trainer.steps_per_epoch


@pytest.mark.slow  # trains: in `make test`, not in `make check`
def test_a_gpu_variant_with_no_busy_figure_records_its_steady_rounds_and_why(fake_gpu,
                                                                           monkeypatch):
    from gpubench import data, telemetry, training

    monkeypatch.setitem(sys.modules, "pynvml", None)  # NVML cannot be asked: no busy region
    dataset = data.load("mnist", source="synthetic", max_train_samples=660, verbose=False)
    split = training.split("mlp_h1000", dataset)
    trainer = factors.Trainer.prepared(rules.Variant("batch_size", batch_size=200),
                                       "mlp_h1000", "gpu:0", split)
    measure.rounds([trainer], 3, trainer.projected_epoch(), lambda text: None)
    measure.busy_regions([trainer], lambda text: None)
    common = dict(notebook="Speed_Factors", env="gpu", model="mlp_h1000", dataset=dataset.name,
                  data_source=dataset.source, data_verified=dataset.verified, epochs=3,
                  train_samples=len(split.x_train))
    made = measure.record(trainer, common)
    busy = made["busy_region"]  # not the run's mean: epoch 1 (compiling) left out, and why
    assert busy["gpu_util_percent_mean"] is None and busy["reason"] == telemetry.NO_PYNVML
    assert busy["samples"] < made["telemetry"]["samples"] and made["status"] == "ok"
    assert measure.record(trainer, common)["busy_region"] == busy


# --- backends: what each backend runs (pure), and the JAX feeds (in the JAX env) ----------


def test_jax_has_no_xla_factor_and_tf_data_needs_tensorflow():
    values = {"batch_size": [100, 1000], "xla": ["off", "on"],
              "input_pipeline": ["arrays", "tf.data", "on_device"]}
    kept, notes = factors.for_backend(values, "tensorflow", True)
    assert kept == values and notes == []
    kept, notes = factors.for_backend(values, "jax", True)  # TensorFlow beside JAX: tf.data runs
    assert kept["xla"] == [] and kept["input_pipeline"] == values["input_pipeline"]
    assert [v.factor for v in factors.variants(kept)] == ["baseline", "batch_size",
                                                          "input_pipeline", "input_pipeline"]
    assert notes == [rules.XLA_NOTE.format(values=["off", "on"])]
    assert "XLA: always on with JAX" in notes[0]
    with pytest.raises(ValueError, match=r"'tf.data'.*pip install tensorflow-cpu"):
        factors.for_backend(values, "jax", False)  # asked for by hand: refused, naming the fix
    kept, notes = factors.for_backend(values, "jax", False, drop_tf_data=True)  # the default list
    assert kept["input_pipeline"] == ["arrays", "on_device"]
    assert any(n.startswith("tf.data: not measured") for n in notes)


def test_chapter_drops_tf_data_only_from_the_default_list(monkeypatch):
    from gpubench.params import DEFAULTS

    defaults = DEFAULTS["full"]["Speed_Factors"]
    params = {name: defaults[name] for name in rules.LIST_PARAMS}
    monkeypatch.setattr(backends.current(), "tensorflow_importable", lambda: False)
    kept, notes = factors.chapter_values(params)
    assert "tf.data" not in kept["input_pipeline"] and "on_device" in kept["input_pipeline"]
    assert any("tf.data" in n for n in notes)
    with pytest.raises(ValueError, match="input_pipelines"):
        factors.chapter_values({**params, "input_pipelines": ["arrays", "tf.data"]})


def test_run_refuses_tf_data_where_tensorflow_cannot_be_imported(monkeypatch):
    from gpubench import data

    monkeypatch.setattr(backends.current(), "tensorflow_importable", lambda: False)
    dataset = data.load("mnist", source="synthetic", max_train_samples=60, verbose=False)
    with pytest.raises(ValueError, match=r"tf.data.*pip install tensorflow-cpu"):
        factors.run("mlp_h1000", dataset, ["cpu"], {"input_pipeline": ["tf.data"]}, epochs=2)


def test_jax_records_show_no_xla_change_and_the_findings_say_why():
    report = _report()

    base = {**_record(jit=True, env="jax-cpu"), "backend": "jax"}
    combined = {**_record(factor="combined", batch_size=1000, jit=True, env="jax-cpu",
                          seconds=(9, 0.5, 0.5, 0.5)), "backend": "jax"}
    rows = factors.effects([base, combined])
    assert _effect(rows, "cpu", "combined")["label"] == "combined (batch 1000)"
    assert "XLA: always on with JAX" in report.findings(rows).replace("**", "")
    assert "XLA" not in report.findings(factors.effects([_record(), _record(factor="combined")]))
    assert "in the jax-gpu env" in report.crossover_text([base])
    assert "in the gpu env" in report.crossover_text([_record()])
    hint = report.crossover_text([base])  # names no kernel or make, absent outside a checkout
    assert "`gpubench envs`" in hint and "kernel" not in hint and "`make" not in hint


@pytest.mark.jax
def test_jax_on_device_and_steps_per_execution_run_compiled_on_the_device(tmp_path):
    from gpubench import backends, data

    assert backends.current().NAME == "jax", "run this test with KERAS_BACKEND=jax"
    store = results.ResultsStore(tmp_path / "r.jsonl")
    dataset = data.load("mnist", source="synthetic", max_train_samples=600, verbose=False)
    values = {"xla": ["off", "on"], "steps_per_execution": [4], "input_pipeline": ["on_device"]}
    notes = []
    records = factors.run("mlp_h1000", dataset, ["cpu"], values, epochs=2, store=store,
                          env="jax-cpu", progress=notes.append)
    assert any("XLA: always on with JAX" in n for n in notes)
    assert [r["factor"] for r in records] == ["baseline", "steps_per_execution",
                                              "input_pipeline", "combined"]
    assert store.read() == records
    for r in records:
        assert r["status"] == "ok", (r["factor"], r["error"])
        assert r["backend"] == "jax" and r["jit_compile"] is True
        assert len(r["epoch_seconds"]) == 2 and len(r["epoch_cpu_util_percent"]) == 2
        assert r["telemetry"]["reason"] == "the device is the CPU"
    by = {r["factor"]: r for r in records}
    assert by["steps_per_execution"]["steps_per_execution"] == 4
    on_device = by["input_pipeline"]
    assert on_device["input_pipeline"] == "on_device"
    assert on_device["test_accuracy"] > 0.3  # chance is 0.1: the trained weights were kept


def _steps_and_an_epoch_train(trainer, split) -> None:
    """13 steps of the on-device feed (two passes of 6 and one step), then one epoch (6 steps of
    100 and the last 5 images): each step one optimizer iteration, and the test loss falls."""
    before = trainer.model.evaluate(split.x_test, split.y_test, verbose=0)[0]
    iterations = int(trainer.model.optimizer.iterations.value)
    trainer.timed(13)
    assert int(trainer.model.optimizer.iterations.value) == iterations + 13
    trainer.timed(None)
    assert int(trainer.model.optimizer.iterations.value) == iterations + 20
    assert trainer.model.evaluate(split.x_test, split.y_test, verbose=0)[0] < before


@pytest.mark.jax
def test_jax_on_device_feed_trains_the_models_own_variables():
    from gpubench import backends

    assert backends.current().NAME == "jax", "run this test with KERAS_BACKEND=jax"
    trainer, split = _on_device_trainer()
    _steps_and_an_epoch_train(trainer, split)
    variant = rules.Variant("batch_size", batch_size=1000, input_pipeline="on_device")
    trainer = factors.Trainer.prepared(variant, "mlp_h1000", "cpu", split)  # batch > set
    assert trainer.status == "ok", trainer.error
    iterations = int(trainer.model.optimizer.iterations.value)
    trainer.timed(3)
    assert int(trainer.model.optimizer.iterations.value) == iterations + 3


@pytest.mark.torch
def test_torch_on_device_feed_trains_the_models_own_variables():
    from gpubench import backends

    assert backends.current().NAME == "torch", "run this test with KERAS_BACKEND=torch"
    trainer, split = _on_device_trainer(steps_per_execution=1)  # Keras's torch trainer: 1 only
    _steps_and_an_epoch_train(trainer, split)
    with pytest.raises(ValueError, match="steps_per_execution=1"):
        factor_trainer.on_device_feed(trainer.model, split.x_train, split.y_train, 100, 4, "cpu")
