"""models and training: the book's architectures, honest epoch records, and learning checks."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import FASHION_DIR, REPO, chapter_fit
from gpubench import chapter, data, devices, models, params, results, rundir, timing, training
from gpubench.backends import tensorflow as tf_backend


@pytest.mark.parametrize("name,params", [("mlp_h1000", 795_010), ("mnist_cnn", 242_062),
                                         ("cifar_cnn", 4_224_970)])
def test_parameter_counts_match_the_book(name, params):
    assert models.build(name).count_params() == params


def test_mnist_models_output_logits_and_the_loss_knows():
    for name in ("mlp_h1000", "mnist_cnn"):
        model = models.build(name)
        assert model.layers[-1].activation.__name__ == "linear"
        assert model.loss.get_config()["from_logits"] is True


def test_book_learning_rates_and_dropout():
    rates = {name: float(models.build(name).optimizer.learning_rate.numpy())
             for name in models.MODELS}
    assert rates == pytest.approx({"mlp_h1000": 1e-3, "mnist_cnn": 1e-4, "cifar_cnn": 1e-3})
    cnn = models.build("mnist_cnn")
    assert [layer.rate for layer in cnn.layers if layer.__class__.__name__ == "Dropout"] == [0.2]
    assert [layer.output.shape[-1] for layer in cnn.layers if layer.__class__.__name__ == "Flatten"] == [1764]
    cifar = models.build("cifar_cnn")
    assert [layer.rate for layer in cifar.layers if layer.__class__.__name__ == "Dropout"] == [0.25] * 4


def test_every_exporting_module_holds_exactly_its_chapters_saved_cells(tmp_path):
    """Chapter code has one source, its chapter's #@save cells; the library holds the export
    (tools/export_chapters.py), a cell marked `#@save NAME` in gpubench/NAME.py alone, and an
    edit in a chapter shows as a difference."""
    import shutil

    import nbformat

    from tools import export_chapters

    assert export_chapters.stale() == []
    modules = {p.relative_to(REPO).as_posix(): export_chapters.chapters_of(p.read_text("utf-8"))
               for p in export_chapters.exporting_modules()}
    assert modules["gpubench/models.py"] == [list(params.TRAINING_NOTEBOOKS)]
    assert modules["gpubench/training.py"] == [["Mnist_MLP_h1000"]]
    chapters = [export_chapters.saved_code(REPO / "notebooks" / f"{nb}.ipynb", "models")
                for nb in params.TRAINING_NOTEBOOKS]
    assert [c.split("(")[0] for c in chapters] == [f"def {m}" for m in models.MODELS]
    assert "def prepare(" not in "".join(chapters)  # the data's preparation: training.py's
    prepared = export_chapters.saved_code(REPO / "notebooks" / "Mnist_MLP_h1000.ipynb", "training")
    assert "def prepare(" in prepared and "def mlp_h1000(" not in prepared
    for name in params.TRAINING_NOTEBOOKS:
        shutil.copy(REPO / "notebooks" / f"{name}.ipynb", tmp_path)
    edited = tmp_path / "Mnist_MLP_h1000.ipynb"
    nb = nbformat.read(edited, as_version=4)
    cell = next(c for c in nb.cells if "#@save models\n" in c.source)
    cell.source = cell.source.replace("Dense(1000", "Dense(999")
    nbformat.write(nb, edited)
    models_py = (REPO / "gpubench" / "models.py").read_text(encoding="utf-8")
    assert "Dense(999" in export_chapters.render(models_py, tmp_path, "models")
    assert "Dense(999" not in models_py


def test_a_chapters_own_model_loads_no_book_models():
    """A chapter that defines its own model, as the CPU chapters do, builds, prepares and
    counts it without loading gpubench.models (the book's builders load only by name)."""
    import subprocess
    import sys

    code = ("import sys\nfrom gpubench import backends, data, training\n"
            "keras = backends.keras()\n"
            "def mine(**options):\n"
            "    model = keras.Sequential([keras.Input(shape=(784,)), keras.layers.Dense(10)])\n"
            "    model.compile(loss='mse', **options)\n"
            "    return model\n"
            "model = training.build_model(mine, 'cpu')\n"
            "dataset = data.load('mnist', 'synthetic', max_train_samples=10, verbose=False)\n"
            "training.prepare(dataset, model.input_shape[1:])\n"
            "assert training.mode_fields(model, device='cpu')['flops_per_sample'] == 6 * 7840\n"
            "sys.exit('gpubench.models' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_flops_per_sample_counts_dense_and_conv_multiply_adds():
    """3 (forward + backward) x 2 (multiply + add) x the MACs, written out from the layer shapes."""
    mlp = 784 * 1000 + 1000 * 10
    mnist_cnn = (28 * 28 * 5 * 5 * 1 * 16      # conv 5x5, 1 -> 16 channels, same padding
                 + 14 * 14 * 5 * 5 * 16 * 36   # conv 5x5, 16 -> 36 after the 2x2 pool
                 + 1764 * 128 + 128 * 10)      # dense 7*7*36 -> 128 -> 10
    cifar_cnn = (32 * 32 * 3 * 3 * 3 * 32      # conv 3x3, 3 -> 32
                 + 16 * 16 * 3 * 3 * 32 * 64   # conv 3x3, 32 -> 64 after the pool
                 + 8 * 8 * 64 * 1024 + 1024 * 10)
    found = {name: training.flops_per_sample(models.build(name)) for name in models.MODELS}
    assert found == {"mlp_h1000": 6 * mlp, "mnist_cnn": 6 * mnist_cnn, "cifar_cnn": 6 * cifar_cnn}
    assert found["mlp_h1000"] == 4_764_000  # DESIGN.md's worked example


def _keras_sees_a_gpu(monkeypatch):
    """Make Keras's jit_compile="auto" resolve as on a GPU machine (it asks tf.config)."""
    tf = tf_backend.tf()
    real = tf.config.list_physical_devices
    gpu = type("FakeDevice", (), {"device_type": "GPU", "name": "/physical_device:GPU:0"})()
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: real(kind) + ([gpu] if kind in (None, "GPU") else []))


def test_xla_off_is_what_the_record_says_even_where_keras_would_turn_it_on(fake_machine,
                                                                           monkeypatch):
    fake_machine(gpus=1, cuda_build=True)
    _keras_sees_a_gpu(monkeypatch)
    auto = training.build_model("mlp_h1000", "cpu", xla="auto")
    assert training.mode_fields(auto)["jit_compile"] is True  # Keras's default on a GPU machine
    off = training.build_model("mlp_h1000", "cpu")  # gpubench's default: like for like
    assert training.mode_fields(off)["jit_compile"] is False


def test_mode_fields_are_the_resolved_ones():
    model = training.build_model("mnist_cnn", "cpu", precision="mixed_bfloat16", xla="on",
                                 steps_per_execution=8, learning_rate=0.5)
    assert training.mode_fields(model, input_pipeline="tf.data") == {
        "jit_compile": True, "precision": "mixed_bfloat16", "steps_per_execution": 8,
        "input_pipeline": "tf.data", "flops_per_sample": training.flops_per_sample(model)}
    assert model.layers[0].compute_dtype == "bfloat16"
    assert model.layers[-1].compute_dtype == "float32"  # the logits stay float32
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.5)
    assert models.keras.mixed_precision.global_policy().name == "float32"  # restored
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        training.build_model("mlp_h1000", "cpu", precision="fp8")
    with pytest.raises(ValueError, match="unknown xla 'yes'"):
        training.build_model("mlp_h1000", "cpu", xla="yes")


def test_dropout_is_off_when_evaluating():
    model = models.build("mnist_cnn")
    x = np.random.default_rng(0).random((8, 28, 28, 1)).astype("float32")
    a, b = model(x, training=False), model(x, training=False)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(model(x, training=True)), np.asarray(a))


def test_prepare_splits_like_the_book():
    ds = data.load("mnist", source="synthetic", max_train_samples=1200, verbose=False)
    (x_train, _), (x_val, _), (x_test, _) = training.prepare(ds, (784,))
    assert x_train.shape == (1100, 784) and x_val.shape == (100, 784)
    assert x_test.shape == (len(ds.x_test), 784)
    assert x_train.dtype == np.float32 and 0.0 <= x_train.min() <= x_train.max() <= 1.0
    assert training.split("mlp_h1000", ds).x_train.shape == (1100, 784)  # the same, by name
    cifar = data.load("cifar10", source="synthetic", max_train_samples=500, verbose=False)
    assert training.split("cifar_cnn", cifar).x_val.shape == (100, 32, 32, 3)
    assert training.prepare(cifar, (32, 32, 3), validation_fraction=0.5)[1][0].shape[0] == 250
    with pytest.raises(ValueError, match=r"mnist images are \(28, 28\), but the model takes "
                                         r"\(32, 32, 3\)"):
        training.prepare(ds, (32, 32, 3))


def test_train_record_is_complete_and_consistent(tmp_path):
    """The chapter's fit, evaluate and one `record` call: a complete train record."""
    store = results.ResultsStore(tmp_path / "r.jsonl")
    ds = data.load("mnist", source="synthetic", max_train_samples=1200, verbose=False)
    model = training.build_model("mlp_h1000", "cpu")
    made, history = chapter_fit(model, ds, epochs=3, batch_size=100, store=store)
    (record,) = store.read()
    assert record == made
    results.validate(record)
    assert record["status"] == "ok" and record["data_source"] == "synthetic"
    assert record["model"] == "mlp_h1000" and record["train_samples"] == 1100
    assert record["validation_samples"] == 100 and record["epochs"] == 3
    assert record["device"] == "cpu" and record["batch_size"] == 100
    assert len(record["epoch_seconds"]) == 3
    assert record["first_epoch_seconds"] == record["epoch_seconds"][0]
    assert record["steady_epoch_seconds"] == pytest.approx(np.median(record["epoch_seconds"][1:]))
    assert record["total_seconds"] == pytest.approx(sum(record["epoch_seconds"]))
    assert record["samples_per_second"] == pytest.approx(1100 / record["steady_epoch_seconds"])
    assert record["jit_compile"] is False and record["precision"] == "float32"
    assert record["steps_per_execution"] == 1 and record["input_pipeline"] == "arrays"
    assert record["tf32"] is False  # a CPU has no TF32
    assert len(record["epoch_load_average"]) == 3
    assert record["load_average"] == max(record["epoch_load_average"])
    assert record["telemetry"]["reason"] == "the device is the CPU"
    assert len(record["epoch_cpu_util_percent"]) == 3
    assert record["telemetry"]["cpu_util_percent_mean"] is not None
    assert record["flops_per_sample"] == 4_764_000
    assert record["achieved_gflops"] == pytest.approx(4_764_000 * record["samples_per_second"] / 1e9)
    assert record["test_accuracy"] == pytest.approx(history.model.evaluate(
        *training.prepare(ds, (784,))[2], batch_size=100, verbose=0)[1])
    assert len(history.history["loss"]) == 3
    assert "synthetic" in training.summary(record) and "NOT the real dataset" in training.summary(record)


def test_a_record_needs_a_device_timer_and_the_evaluation_or_the_error():
    ds = data.load("mnist", source="synthetic", max_train_samples=200, verbose=False)
    model = training.build_model("mlp_h1000", "cpu")
    with pytest.raises(ValueError, match=r"epoch timer of the device.*epoch_timer\(device\)"):
        training.record(model, None, timing.epoch_timer(), ds, batch_size=100, samples=(1, 1))
    with pytest.raises(ValueError, match=r"needs test=\(loss, accuracy\).*or error="):
        training.record(model, None, timing.epoch_timer("cpu"), ds, batch_size=100,
                        samples=(1, 1))


def test_interrupted_training_keeps_the_epochs_measured(tmp_path):
    """A fit stopped after two epochs: `record(..., error=)` keeps the two epochs it measured."""
    import keras

    class StopAfterTwo(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise KeyboardInterrupt

    store = results.ResultsStore(tmp_path / "r.jsonl")
    ds = data.load("mnist", source="synthetic", max_train_samples=600, verbose=False)
    model = training.build_model("mlp_h1000", "cpu")
    timer = timing.epoch_timer("cpu")
    (x_train, y_train), _, _ = training.prepare(ds, (784,))
    with pytest.raises(KeyboardInterrupt) as stopped:
        model.fit(x_train, y_train, batch_size=100, epochs=5, callbacks=[timer, StopAfterTwo()],
                  verbose=0)
    training.record(model, None, timer, ds, batch_size=100, samples=(len(x_train), 50),
                    error=stopped.value, store=store)
    (record,) = store.read()
    assert record["status"] == "error" and "KeyboardInterrupt after 2 epoch(s)" in record["error"]
    assert len(record["epoch_seconds"]) == 2


@pytest.mark.parametrize("field,value", [("epochs", 0), ("epochs", -3), ("batch_size", 0),
                                         ("batch_size", 2.5), ("max_train_samples", -1)])
def test_bad_training_values_are_named_and_nothing_is_written(tmp_path, field, value):
    path = tmp_path / "results.jsonl"
    with pytest.raises(ValueError, match=f"{field}.*{value}"):
        chapter.start("Mnist_MLP_h1000", results_path=str(path), data_source="synthetic",
                       **{field: value})
    assert not path.exists()


@pytest.mark.parametrize("field,value", [("dataset", "imagenet"), ("data_source", "s3")])
def test_bad_data_choices_are_named(tmp_path, field, value):
    with pytest.raises(ValueError, match=value):
        chapter.start("Mnist_CNN", results_path=str(tmp_path / "r.jsonl"), **{field: value})


def test_gpu_request_without_gpu_stops(fake_machine, tmp_path):
    fake_machine(gpus=0, cuda_build=False)
    with pytest.raises(devices.GPUNotAvailableError, match="asked for a GPU, but TensorFlow sees none"):
        chapter.start("Keras_Cifar_CNN", device="gpu", results_path=str(tmp_path / "r.jsonl"))


def test_confusion_matrix_counts_pairs():
    matrix = training.confusion_matrix([0, 0, 1, 2, 2, 2], [0, 1, 1, 2, 2, 0], classes=3)
    assert matrix.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]


@pytest.mark.slow  # trains or starts a Python: in `make test`, not in `make check`
def test_mlp_learns_synthetic_data_in_the_quick_profile():
    """A broken pipeline (labels shuffled, inputs unscaled, wrong loss) would miss this."""
    quick = params.DEFAULTS["quick"]["Mnist_MLP_h1000"]
    ds = data.load("mnist", source="synthetic", max_train_samples=quick["max_train_samples"],
                   verbose=False)
    model = training.build_model("mlp_h1000", "cpu")
    record, _ = chapter_fit(model, ds, epochs=quick["epochs"], batch_size=quick["batch_size"])
    assert record["test_accuracy"] >= 0.90


@pytest.mark.slow  # trains or starts a Python: in `make test`, not in `make check`
def test_mlp_learns_real_fashion_mnist_in_one_epoch():
    if not (FASHION_DIR / "train-images-idx3-ubyte.gz").exists():
        pytest.skip(f"real Fashion-MNIST files absent from {FASHION_DIR}: "
                    "`apt install dataset-fashion-mnist` (.ci/run does) to run this check")
    ds = data.load("fashion_mnist", source="dir", data_dir=FASHION_DIR, verbose=False)
    assert ds.source == "dir" and len(ds.x_train) == 60_000
    model = training.build_model("mlp_h1000", "cpu")
    record, _ = chapter_fit(model, ds, epochs=1, batch_size=100)
    assert record["train_samples"] == 55_000
    assert record["test_accuracy"] >= 0.80


@pytest.mark.parametrize("seconds, text", [
    (None, "–"), (0.0123, "0.0123 s"), (12.34, "12.3 s"), (402.4, "402 s"), (99.96, "100 s"),
    (float("inf"), "n/a"), (float("nan"), "n/a"), (-0.0, "0 s")])
def test_the_training_tables_seconds_have_one_format(seconds, text):
    from gpubench.fmt import fmt_seconds

    assert fmt_seconds(seconds) == text


@pytest.mark.slow  # runs the chapter in a kernel: in `make test`, not in `make check`
def test_a_learners_own_model_trains_in_the_chapter_and_is_reported(tmp_path, cpu_kernel):
    """The MLP chapter as a learner edits it: their own model, under a name gpubench has never
    seen, built and trained by the chapter's cells; its record is in the report's table and
    charts, by its own name."""
    import nbformat
    import papermill

    from gpubench import report

    nb = nbformat.read(REPO / "notebooks" / "Mnist_MLP_h1000.ipynb", as_version=4)
    for cell in nb.cells:
        if "def mlp_h1000(" in cell.source:
            cell.source = (cell.source.replace("def mlp_h1000(", "def tiny_net(")
                           .replace("Dense(1000,", "Dense(32,").replace('"mlp_h1000"', '"tiny_net"'))
        cell.source = cell.source.replace("build_model(mlp_h1000,", "build_model(tiny_net,")
    assert sum("tiny_net" in c.source for c in nb.cells) == 2
    edited = tmp_path / "Mine.ipynb"
    nbformat.write(nb, edited)
    run_dir = tmp_path / "run"
    papermill.execute_notebook(
        str(edited), str(tmp_path / "out.ipynb"), kernel_name=cpu_kernel, progress_bar=False,
        cwd=str(REPO / "notebooks"),
        parameters=dict(profile="quick", epochs=2, max_train_samples=600, data_source="synthetic",
                        results_path=str(run_dir / "results.jsonl"), env_name="cpu"))
    (record,) = rundir.read_records(run_dir)
    assert (record["model"], record["status"], record["epochs"]) == ("tiny_net", "ok", 2)
    assert record["flops_per_sample"] == 6 * (784 * 32 + 32 * 10)
    assert record["train_samples"] == 550 and record["notebook"] == "Mnist_MLP_h1000"
    text = report.build([run_dir]).read_text()
    assert any(line.startswith("| tiny_net |") for line in text.splitlines()), text
    assert (run_dir / "epoch_times.png").exists()


@pytest.mark.parametrize("ratio, text", [
    (None, "–"), (3.577, "3.58"), (0.41, "0.41"), (1.0, "1.00"), (0.00452, "0.0045"),
    (0.0999, "0.1"), (0.0, "0.00"), (float("nan"), "n/a")])
def test_a_ratio_never_reads_zero_for_a_large_slowdown(ratio, text):
    """Speed-ups and "x vs baseline": two decimals, two significant figures below 0.1 (a
    221x slowdown is 0.0045x, not 0.00x)."""
    from gpubench.fmt import fmt_ratio

    assert fmt_ratio(ratio) == text


def test_a_gpu_record_combines_its_epochs_telemetry_and_says_tf32(fake_machine, monkeypatch):
    """On a GPU, the epochs' NVML telemetry is combined by the tools tier (imported there only)
    and the record says whether its float32 matmuls could use TF32; on a CPU, neither."""
    from types import SimpleNamespace

    from gpubench import backends

    fake_machine(gpus=1, cuda_build=True)
    monkeypatch.setattr(backends.current(), "tf32_enabled", lambda: True)
    ds = data.load("mnist", source="synthetic", max_train_samples=200, verbose=False)
    model = training.build_model("mlp_h1000", "cpu")
    epochs = [results.unmeasured(None) | {"source": "nvml", "seconds": s, "samples": 10,
                                          "gpu_util_percent_mean": u, "energy_joules": 5.0}
              for s, u in ((2.0, 40.0), (1.0, 70.0))]
    timer = SimpleNamespace(device="gpu:0", epoch_seconds=[2.0, 1.0], epoch_telemetry=epochs,
                            epoch_load_average=[0.5, 1.5])
    record = training.record(model, None, timer, ds, batch_size=100, samples=(150, 50),
                             test=(0.3, 0.9))
    assert record["tf32"] is True and record["device"] == "gpu:0"
    assert record["telemetry"]["source"] == "nvml" and record["telemetry"]["energy_joules"] == 10
    assert record["epoch_gpu_util_percent"] == [40.0, 70.0]
    assert (record["load_average"], record["epoch_load_average"]) == (1.5, [0.5, 1.5])
    model = training.build_model("mlp_h1000", "cpu", precision="mixed_bfloat16")
    assert training.mode_fields(model, device="gpu:0")["tf32"] is None  # 16-bit matmuls
    assert training.mode_fields(model, device="cpu")["tf32"] is None
    assert training.mode_fields(training.build_model("mlp_h1000", "cpu"),
                                device="cpu")["tf32"] is False


@pytest.mark.parametrize("backend,jit,words", [
    ("torch", False, "PyTorch, float32, torch.compile off"),
    ("torch", True, "PyTorch, float32, torch.compile on"),
    ("tensorflow", False, "TensorFlow, float32, XLA off"),
    ("jax", True, "JAX, float32, XLA on (JAX always compiles)")])
def test_the_chapters_summary_names_compiling_as_each_backend_calls_it(backend, jit, words):
    record = {"status": "ok", "model": "mlp_h1000", "device": "cpu", "env": "x", "epochs": 3,
              "train_samples": 1000, "batch_size": 100, "total_seconds": 3.0,
              "first_epoch_seconds": 1.5, "steady_epoch_seconds": 0.75, "steady_epoch_iqr": 0.01,
              "samples_per_second": 1333.0, "backend": backend, "jit_compile": jit,
              "precision": "float32", "tf32": False, "achieved_gflops": 6.4,
              "flops_per_sample": 4_764_000, "test_accuracy": 0.9, "test_loss": 0.3,
              "dataset": "mnist", "data_source": "dir", "telemetry": None}
    mode = next(line for line in training.summary(record).splitlines() if "mode:" in line)
    assert words in mode and ("XLA" in mode) is (backend != "torch")
