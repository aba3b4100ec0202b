"""The notebooks: clean stored outputs, papermill runs in the gpubench-cpu kernel, and nbval."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from conftest import NOTEBOOKS, REPO, python_env
from gpubench import notebook, profiles, results

ALL = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
NOISE = re.compile(r"^[IWE]\d{4} |oneDNN custom operations|absl::InitializeLog|cpu_feature_guard"
                   r"|WARNING:tensorflow|This TensorFlow binary is optimized", re.M)


def test_every_notebook_is_there():
    assert ALL == sorted([*profiles.NOTEBOOKS, "Compare_CPU_GPU"])


@pytest.mark.parametrize("name", ALL)
def test_stored_notebook_is_clean(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "gpubench-cpu"
    assert set(nb.metadata) <= {"kernelspec", "language_info"}, "stray notebook metadata"
    assert nb.cells[0].cell_type == "markdown" and "How long it takes" in nb.cells[0].source
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].metadata.get("tags") == ["parameters"], "first code cell must be `parameters`"
    assert sum("parameters" in c.metadata.get("tags", []) for c in code) == 1
    for cell in code:
        assert set(cell.metadata) <= {"tags"}, f"stray cell metadata {set(cell.metadata)}"
        assert "injected-parameters" not in cell.metadata.get("tags", [])
        for out in cell.outputs:
            assert out.output_type != "error", f"{name}: stored error output"
            text = out.get("text", "") if out.output_type == "stream" else ""
            assert not NOISE.search(text), f"{name}: TensorFlow log noise: {text[:200]}"
            assert not (out.output_type == "stream" and out.name == "stderr"), \
                f"{name}: stray stderr output: {out.text[:200]}"
    executed = [c for c in code[1:] if c.execution_count is not None]
    assert len(executed) == len(code) - 1, f"{name}: stored outputs are not from a complete run"


@pytest.mark.parametrize("name", [n for n in ALL if n != "Compare_CPU_GPU"])
def test_stored_outputs_come_from_a_full_run(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "| profile full |" in text
    assert "Machine:" in text and "TensorFlow 2.21" in text
    if name != "performanceTest":
        assert "Data: " in text, "the data-source line is missing"
        assert "epochs=15" in text


@pytest.mark.parametrize("name", ALL)
def test_parameters_cell_is_the_contract_and_papermill_reads_it(name):
    import papermill

    found = list(papermill.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb")))
    expected = (["run_dirs", "out"] if name == "Compare_CPU_GPU"
                else profiles.parameter_names(name))
    assert found == expected
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    assert all(line.split("=")[1].split("#")[0].strip() == "None"
               for line in cell.source.splitlines() if line.strip())


@pytest.mark.parametrize("given,expected", [
    ({"sizes": "[500, 1000]"}, {"sizes": [500, 1000]}),   # papermill -p passes a string
    ({"sizes": "500,1000"}, {"sizes": [500, 1000]}),
    ({"sizes": 1500, "devices": "/gpu:0"}, {"sizes": [1500], "devices": ["/gpu:0"]}),
    ({"dtype": "float32,bfloat16"}, {"dtype": ["float32", "bfloat16"]}),
    ({"dtype": "float16", "repeats": None}, {"dtype": "float16", "repeats": None}),
])
def test_check_params_reads_lists_as_papermill_passes_them(given, expected):
    assert notebook.check_params("performanceTest", given) == expected


@pytest.mark.parametrize("name,given,message", [
    ("performanceTest", {"sizes": "500,big"}, r"sizes: 'big' is not a positive integer.*-y \"sizes: \["),
    ("performanceTest", {"sizes": "[500,"}, r"not a list.*-y \"sizes: \[500, 1000\]\""),
    ("performanceTest", {"devices": "cpu,tpu"}, r"unknown device 'tpu'"),
    ("Mnist_CNN", {"xla": "yes"}, r"unknown xla 'yes'; use one of off, on, auto"),
    ("Mnist_CNN", {"precision": "float16"}, r"unknown precision 'float16'.*mixed_float16"),
    ("Mnist_CNN", {"epochs": 0}, r"epochs must be a positive integer, got 0"),
    ("Mnist_CNN", {"device": "/TPU:0"}, r"unknown device '/TPU:0'"),
    ("Mnist_CNN", {"dataset": "imagenet"}, r"unknown dataset 'imagenet'"),
    ("Mnist_CNN", {"sizes": [500]}, r"unknown parameter\(s\) sizes for Mnist_CNN; it takes"),
])
def test_check_params_names_the_bad_value(name, given, message):
    with pytest.raises(ValueError, match=message):
        notebook.check_params(name, given)


def test_check_params_loads_no_tensorflow():
    script = ("import sys; from gpubench import notebook\n"
              "notebook.check_params('Mnist_CNN', {'device': 'gpu:1', 'dataset': 'mnist', "
              "'data_source': 'synthetic', 'xla': 'on'})\n"
              "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", script], cwd=REPO).returncode == 0


def test_quick_profile_replaces_the_book_values_and_says_so():
    book = profiles.DEFAULTS["full"]["Mnist_CNN"]
    params, changed = profiles.resolve("Mnist_CNN", profile="quick", **book)
    quick = profiles.DEFAULTS["quick"]["Mnist_CNN"]
    assert params["epochs"] == quick["epochs"] < book["epochs"]
    assert changed["epochs"] == (book["epochs"], quick["epochs"])
    assert changed["max_train_samples"] == (None, quick["max_train_samples"])
    own, changed = profiles.resolve("Mnist_CNN", profile="quick", epochs=2)  # not the book's: kept
    assert own["epochs"] == 2 and "epochs" not in changed
    full, changed = profiles.resolve("Mnist_CNN", profile="full", **book)
    assert full["epochs"] == book["epochs"] and changed == {}


def test_results_line_shows_no_machine_path(tmp_path):
    assert notebook.shown_path(tmp_path / "run" / "results.jsonl") == "run/results.jsonl"
    assert notebook.shown_path(REPO / "runs" / "interactive" / "results.jsonl") == \
        "runs/interactive/results.jsonl"


def _papermill(name: str, tmp_path, kernel: str, *params: str) -> tuple[str, list[dict]]:
    out = tmp_path / f"{name}.ipynb"
    results_path = tmp_path / "results.jsonl"
    cmd = [sys.executable, "-m", "papermill", str(NOTEBOOKS / f"{name}.ipynb"), str(out),
           "-k", kernel, "-p", "profile", "quick", "-p", "results_path", str(results_path),
           *params]
    proc = subprocess.run(cmd, cwd=NOTEBOOKS, capture_output=True, text=True, timeout=600,
                          env=python_env(GPUBENCH_RUN_ID="test-run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = nbformat.read(out, as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    return text, results.read_records(results_path)


@pytest.mark.slow
def test_performance_test_notebook_records_every_measurement(tmp_path, cpu_kernel):
    text, records = _papermill("performanceTest", tmp_path, cpu_kernel)
    sizes = profiles.DEFAULTS["quick"]["performanceTest"]["sizes"]
    devices_seen = sorted({r["device"] for r in records})
    assert sorted((r["size"], r["device"], r["method"]) for r in records) == sorted(
        (s, d, m) for s in sizes for d in devices_seen for m in ("book", "rigorous"))
    for record in records:
        results.validate(record)
        assert record["status"] == "ok" and record["run_id"] == "test-run"
        assert record["benchmark"] == "matmul" and record["notebook"] == "performanceTest"
    assert "Why" not in text  # markdown, not printed
    assert "GFLOP/s" in text


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Mnist_MLP_h1000", "Mnist_CNN", "Keras_Cifar_CNN"])
def test_training_notebook_writes_its_train_record(tmp_path, cpu_kernel, name):
    text, records = _papermill(name, tmp_path, cpu_kernel, "-p", "data_source", "synthetic")
    (record,) = records
    results.validate(record)
    quick = profiles.DEFAULTS["quick"][name]
    assert record["status"] == "ok" and record["benchmark"] == "train"
    assert record["model"] == profiles.TRAINING_NOTEBOOKS[name]
    assert record["data_source"] == "synthetic" and "SYNTHETIC DATA" in text
    assert record["epochs"] == quick["epochs"] == len(record["epoch_seconds"])
    assert record["batch_size"] == quick["batch_size"]
    assert record["device"] == "cpu" and record["env"] in ("cpu", "gpu")
    assert 0.0 <= record["test_accuracy"] <= 1.0 and record["total_seconds"] > 0


@pytest.mark.slow
def test_nbval_lax_passes_on_every_notebook(tmp_path, cpu_kernel, quick_run):
    env = python_env(GPUBENCH_PROFILE="quick", GPUBENCH_DATA_SOURCE="synthetic",
                     GPUBENCH_RESULTS_PATH=str(tmp_path / "results.jsonl"),
                     GPUBENCH_RUN_DIRS=str(quick_run), MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider",
                           "-q", str(NOTEBOOKS)], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"\d+ passed", proc.stdout)
    checked = sum(c.source.startswith("# NBVAL_CHECK_OUTPUT")
                  for p in NOTEBOOKS.glob("*.ipynb")
                  for c in nbformat.read(p, as_version=4).cells if c.cell_type == "code")
    assert checked >= 4  # schema fields + three parameter counts are compared, not just run
