"""Speed factors: the numbers the chapter and the report print, the time box, the backends' feeds,
and a papermill run."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from gpubench import factors, results, telemetry
from gpubench.factors import measure
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
    assert factors.verdict(low, high) == expected


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


def test_the_table_shows_each_variants_gpu_busy_share():
    report = _report()

    busy = dict(telemetry.unmeasured(None), source="nvml", gpu_util_percent_mean=23.4)
    rows = factors.effects([_record("gpu:0", env="gpu"),
                            _record("gpu:0", "input_pipeline", (9, 0.5, 0.5, 0.5), env="gpu",
                                    input_pipeline="on_device", telemetry=busy)])
    lines = report.table(rows).splitlines()
    assert "| GPU busy |" in lines[0]
    column = lines[0].split("|").index(" GPU busy ")
    assert [line.split("|")[column].strip() for line in lines[2:]] == ["n/a", "23 %"]


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


def _trainer(factor, seconds, probe_seconds=1.0, boxed=None, **settings):
    """A measured variant (no model): 1000 images per round, the given round seconds."""
    variant = factors.Variant(factor, **settings)
    return factor_trainer.Trainer(variant, "cpu", None, [0] * 1000, None,
                                  round_seconds=list(seconds),
                                  probe_step_seconds=probe_seconds, boxed_steps=boxed)


@pytest.mark.parametrize("second_probe, boxed", [(0.02, None), (0.25, 4), (5.0, 1)])
def test_a_variant_is_time_boxed_only_when_a_second_probe_agrees(monkeypatch, second_probe, boxed):
    monkeypatch.setattr(factor_trainer, "probe", lambda t: setattr(
        t, "probe_step_seconds", min(t.probe_step_seconds, second_probe)))
    slow = _trainer("precision", (), probe_seconds=1.0, precision="mixed_float16")
    slow.steps_per_epoch = 50  # 50 s projected against a 1 s baseline epoch
    factor_trainer.decide_box(slow, baseline_epoch=1.0)
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
    combined = _record(factor="combined", batch_size=1000, seconds=(9, 0.5, 0.5, 0.5),
                       paired_baseline_seconds=[9, 2.0, 2.0, 2.0])
    rows = factors.effects([_record(seconds=(9, 1.0, 1.0, 1.0)), combined])
    assert _effect(rows, "cpu", "combined")["speedup"] == pytest.approx(4.0)
    del combined["paired_baseline_seconds"]  # a schema-2 record from before: the first baseline
    rows = factors.effects([_record(seconds=(9, 1.0, 1.0, 1.0)), combined])
    assert _effect(rows, "cpu", "combined")["speedup"] == pytest.approx(2.0)


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
                   if value != factors.BASELINE.settings()[k]]
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
    assert check_params("Speed_Factors", params)["batch_sizes"] == [100, 1000]
    with pytest.raises(ValueError, match=message):
        check_params("Speed_Factors", {**params, **change})


def test_factors_module_loads_no_tensorflow():
    code = ("import sys, gpubench.factors as f; f.effects([]); "
            "assert 'tensorflow' not in sys.modules, 'tensorflow loaded'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.slow  # trains or starts a Python: in `make test`, not in `make check`
def test_measured_variants_make_complete_records(tmp_path, monkeypatch):
    from gpubench import data

    # Box the precision variant whatever its speed, to exercise the time-boxed path.
    def box(trainer, baseline_epoch):
        if trainer.variant.factor == "precision":
            trainer.boxed_steps = 2
    monkeypatch.setattr(measure, "decide_box", box)  # where `_rounds` looks it up
    store = results.ResultsStore(tmp_path / "r.jsonl")
    dataset = data.load("mnist", source="synthetic", max_train_samples=660, verbose=False)
    values = {"batch_size": [50], "precision": ["mixed_bfloat16"], "xla": ["on"],
              "steps_per_execution": [4], "input_pipeline": ["tf.data", "on_device"]}
    records = factors.run("mlp_h1000", dataset, ["cpu"], values, epochs=2, store=store, env="t")
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


def _on_device_trainer():
    """(A built on_device trainer, steps/exec 4, batch 100 on 605 images: 6 full batches;
    its split)."""
    from gpubench import data, training

    split = training.prepare("mlp_h1000", data.load("mnist", source="synthetic",
                                                    max_train_samples=660, verbose=False))
    variant = factors.Variant("combined", batch_size=100, steps_per_execution=4,
                              input_pipeline="on_device")
    trainer = factor_trainer.prepared(variant, "mlp_h1000", "cpu", split, None)
    assert trainer.status == "ok", trainer.error
    return trainer, split


@pytest.mark.slow  # trains: in `make test`, not in `make check`
def test_on_device_steps_wrap_at_the_end_of_the_training_set():
    trainer, split = _on_device_trainer()
    trainer.timed(13)  # 6 + 6 + 1: two passes and one step into a third
    trainer.timed(None)  # one epoch, the last 5 images in a batch of their own
    variant = factors.Variant("batch_size", batch_size=1000, input_pipeline="on_device")
    trainer = factor_trainer.prepared(variant, "mlp_h1000", "cpu", split, None)  # batch > set
    assert trainer.status == "ok", trainer.error
    trainer.timed(3)


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
    assert notes == [factors.XLA_NOTE.format(modes=["off", "on"])]
    assert "XLA: always on with JAX" in notes[0]
    with pytest.raises(ValueError, match=r"'tf.data'.*pip install tensorflow-cpu"):
        factors.for_backend(values, "jax", False)  # asked for by hand: refused, naming the fix
    kept, notes = factors.for_backend(values, "jax", False, drop_tf_data=True)  # the default list
    assert kept["input_pipeline"] == ["arrays", "on_device"]
    assert any(n.startswith("tf.data: not measured") for n in notes)


def test_chapter_drops_tf_data_only_from_the_default_list(monkeypatch):
    from gpubench import backends
    from gpubench.params import DEFAULTS

    defaults = DEFAULTS["full"]["Speed_Factors"]
    params = {name: defaults[name] for name in factors.LIST_PARAMS}
    monkeypatch.setattr(backends.part("feeds"), "tf_data_available", lambda: False)
    kept, notes = factors.chapter_values(params)
    assert "tf.data" not in kept["input_pipeline"] and "on_device" in kept["input_pipeline"]
    assert any("tf.data" in n for n in notes)
    with pytest.raises(ValueError, match="input_pipelines"):
        factors.chapter_values({**params, "input_pipelines": ["arrays", "tf.data"]})


def test_run_refuses_tf_data_where_tensorflow_cannot_be_imported(monkeypatch):
    from gpubench import backends, data

    monkeypatch.setattr(backends.part("feeds"), "tf_data_available", lambda: False)
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
    assert "gpubench-jax-gpu kernel" in report.crossover_text([base])
    assert "gpubench-gpu kernel" in report.crossover_text([_record()])


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


@pytest.mark.jax
def test_jax_on_device_feed_trains_the_models_own_variables():
    from gpubench import backends

    assert backends.current().NAME == "jax", "run this test with KERAS_BACKEND=jax"
    trainer, split = _on_device_trainer()
    before = trainer.model.evaluate(split.x_test, split.y_test, verbose=0)[0]
    iterations = int(trainer.model.optimizer.iterations.value)
    trainer.timed(13)  # 6 + 6 + 1: two passes and one step into a third
    assert int(trainer.model.optimizer.iterations.value) == iterations + 13
    trainer.timed(None)  # one epoch: 6 steps of 100, then the last 5 images
    assert int(trainer.model.optimizer.iterations.value) == iterations + 20
    assert trainer.model.evaluate(split.x_test, split.y_test, verbose=0)[0] < before
    variant = factors.Variant("batch_size", batch_size=1000, input_pipeline="on_device")
    trainer = factor_trainer.prepared(variant, "mlp_h1000", "cpu", split, None)  # batch > set
    assert trainer.status == "ok", trainer.error
    iterations = int(trainer.model.optimizer.iterations.value)
    trainer.timed(3)
    assert int(trainer.model.optimizer.iterations.value) == iterations + 3
