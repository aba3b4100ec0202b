"""The notebooks: clean stored outputs, papermill runs in the gpubench-cpu kernel, and nbval."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from conftest import NOTEBOOKS, READING_ORDER, REPO, run_nbval
from gpubench import chapter, factors, params, results
from gpubench.scaling import rules as scaling_rules

ALL = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
MACHINE_PATHS = {str(REPO), tempfile.gettempdir() + os.sep, *([str(Path.home())] if len(Path.home().parts) > 1 else [])}
NOISE = re.compile(r"^[IWE]\d{4} |oneDNN custom operations|absl::InitializeLog|cpu_feature_guard"
                   r"|WARNING:tensorflow|This TensorFlow binary is optimized", re.M)


def test_every_notebook_is_there():
    assert ALL == sorted(READING_ORDER)


@pytest.mark.parametrize("name", ALL)
def test_stored_notebook_is_clean(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "gpubench-cpu"
    assert set(nb.metadata) <= {"kernelspec", "language_info", "gpubench"}, "stray metadata"
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
            shown = text + "".join(str(v) for v in out.get("data", {}).values())
            for machine_path in MACHINE_PATHS:
                assert machine_path not in shown, f"{name}: a machine path in the outputs: {machine_path}"
            for path in re.findall(r"^Results: +(\S+)", shown, re.M):  # a run outside the checkout
                assert not os.path.isabs(path), f"{name}: the stored results path {path} is absolute"
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), \
        f"{name}: stored outputs are not one complete run numbered 1, 2, ...: {counts}"


def _provenance(name: str) -> dict:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).metadata.get("gpubench", {})


@pytest.mark.parametrize("name", [n for n in ALL if n != "Compare_CPU_GPU"])
def test_stored_outputs_come_from_one_full_run_whose_data_is_recorded(name):
    """Every chapter stores the full profile (the book's settings), from the run the report
    notebook shows; its metadata names the run, the CPU and the data, as its outputs do."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    profile = re.search(r"\| profile (\w+) \|", text)
    assert profile, f"{name}: the stored outputs do not say which profile ran"
    assert profile[1] == "full", f"{name}: stored a {profile[1]} run"
    assert "Machine:" in text and "TensorFlow 2.21" in text
    meta = _provenance(name)
    assert meta.get("profile") == "full" and meta.get("env") == "cpu", meta
    assert meta["run"] == _provenance("Compare_CPU_GPU")["run"], "not the run the report shows"
    assert meta["cpu"] and all(cpu in text for cpu in meta["cpu"])
    if name != "performanceTest":
        assert "Data: " in text, "the data-source line is missing"
        assert f"epochs={params.DEFAULTS['full'][name]['epochs']}" in text
        assert meta["data"], f"{name}: the data it trained on is not recorded"
        for data in meta["data"]:
            line = next(li for li in text.splitlines() if li.startswith("Data: "))
            if data["source"] == "synthetic":
                assert "SYNTHETIC DATA" in line, line
            else:
                assert line.startswith(f"Data: {data['dataset']} from "), line
                assert ("checksums verified" in line) == bool(data["verified"]), line


def test_the_report_notebook_shows_one_complete_run():
    """Compare_CPU_GPU's stored report: the chapters' run, every job ok, nothing unfinished."""
    nb = nbformat.read(NOTEBOOKS / "Compare_CPU_GPU.ipynb", as_version=4)
    text = "".join(str(o.get("text", "")) + "".join(map(str, o.get("data", {}).values()))
                   for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    meta = _provenance("Compare_CPU_GPU")
    assert meta.get("profile") == "full" and meta.get("run"), meta
    assert f"Reporting on: {meta['run']}" in text
    for bad in ("interrupted", "pending", "What went wrong", "Quick profile"):
        assert bad not in text, f"the stored report shows {bad!r}"


@pytest.mark.parametrize("name", ALL)
def test_parameters_cell_is_the_contract_and_papermill_reads_it(name):
    import papermill

    found = list(papermill.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb")))
    expected = (["run_dirs", "out"] if name == "Compare_CPU_GPU"
                else list(params.declared(name)))
    assert found == expected
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    values = {line.split("=")[0].strip(): ast.literal_eval(line.split("=", 1)[1].split("#")[0].strip())
              for line in cell.source.splitlines() if line.strip()}
    book = params.DEFAULTS["full"].get(name, {})
    shown = {k: v for k, v in values.items() if v is not None}
    assert shown == {k: book[k] for k in shown}, "a value that is not the book's (full profile's)"
    if name in params.TRAINING_NOTEBOOKS:  # the chapter shows the book's numbers, not None
        assert {"epochs", "batch_size", "dataset", "device", "xla", "precision"} <= set(shown)


JUPYTERLAB_LANGUAGE_INFO = {  # what JupyterLab writes for an ipykernel kernel once it has run
    "codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
    "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3"}


@pytest.mark.parametrize("name", [*params.TRAINING_NOTEBOOKS, "performanceTest", "Speed_Factors"])
def test_opening_the_notebook_changes_nothing(name):
    """nbformat 4.5 with cell ids and JupyterLab's language_info: opening and saving is a no-op."""
    path = NOTEBOOKS / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5)
    assert all(cell.get("id") for cell in nb.cells)
    info = nb.metadata["language_info"]
    assert {k: info.get(k) for k in JUPYTERLAB_LANGUAGE_INFO} == JUPYTERLAB_LANGUAGE_INFO
    assert re.fullmatch(r"3\.\d+\.\d+", info["version"])
    assert nbformat.writes(nb) + "\n" == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("given,expected", [
    ({"sizes": "[500, 1000]"}, {"sizes": [500, 1000]}),   # papermill -p passes a string
    ({"sizes": "500,1000"}, {"sizes": [500, 1000]}),
    ({"sizes": 1500, "devices": "/gpu:0"}, {"sizes": [1500], "devices": ["/gpu:0"]}),
    ({"dtype": "float32,bfloat16"}, {"dtype": ["float32", "bfloat16"]}),
    ({"dtype": "float16", "repeats": None}, {"dtype": "float16", "repeats": None}),
])
def test_check_params_reads_lists_as_papermill_passes_them(given, expected):
    assert params.check_params("performanceTest", given) == expected


@pytest.mark.parametrize("name,given,message", [
    ("performanceTest", {"sizes": "500,big"}, r"sizes: 'big' is not a positive integer.*-y \"sizes: \["),
    ("performanceTest", {"sizes": "[500,"}, r"not a list.*-y \"sizes: \[100, 1000\]\"; gpubench run: -p sizes=100,1000"),
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
        params.check_params(name, given)


def test_only_multi_gpu_scaling_takes_virtual_cpu_devices():
    """virtual_devices=N splits the CPU into cpu:0..cpu:N-1; elsewhere there is one CPU."""
    given = {"devices": "cpu:0,cpu:1", "virtual_devices": 2}
    own = scaling_rules.check_parameters
    assert params.check_params("Multi_GPU_Scaling", given, rules=own) == {
        "devices": ["cpu:0", "cpu:1"], "virtual_devices": 2}
    with pytest.raises(ValueError, match=r"'cpu:1'.*one CPU device.*virtual_devices"):
        params.check_params("performanceTest", {"devices": "cpu,cpu:1"})
    with pytest.raises(ValueError, match=r"unknown device 'cpu:x'"):
        params.check_params("Multi_GPU_Scaling", {"devices": "cpu:x"}, rules=own)


def test_check_params_loads_no_tensorflow():
    script = ("import sys; from gpubench import params\n"
              "params.check_params('Mnist_CNN', {'device': 'gpu:1', 'dataset': 'mnist', "
              "'data_source': 'synthetic', 'xla': 'on'})\n"
              "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", script], cwd=REPO).returncode == 0


def test_quick_profile_replaces_the_book_values_and_says_so():
    book = params.DEFAULTS["full"]["Mnist_CNN"]
    chosen, changed = params.resolve("Mnist_CNN", profile="quick", **book)
    quick = params.DEFAULTS["quick"]["Mnist_CNN"]
    assert chosen["epochs"] == quick["epochs"] < book["epochs"]
    assert changed["epochs"] == (book["epochs"], quick["epochs"])
    assert changed["max_train_samples"] == (None, quick["max_train_samples"])
    own, changed = params.resolve("Mnist_CNN", profile="quick", epochs=2)  # not the book's: kept
    assert own["epochs"] == 2 and "epochs" not in changed
    full, changed = params.resolve("Mnist_CNN", profile="full", **book)
    assert full["epochs"] == book["epochs"] and changed == {}


def test_results_line_is_relative_in_the_checkout_and_absolute_outside(tmp_path):
    """In the checkout no machine path reaches a stored output; outside it, the kernel's folder
    is not the user's, so only an absolute path can be opened."""
    outside = tmp_path / "run" / "results.jsonl"
    assert chapter.shown_path(outside) == str(outside.resolve())
    assert chapter.shown_path(REPO / "runs" / "interactive" / "results.jsonl") == \
        "runs/interactive/results.jsonl"


@pytest.mark.slow
def test_performance_test_notebook_records_every_measurement(nbval_run):
    records = [r for r in nbval_run.records if r["notebook"] == "performanceTest"]
    text = nbval_run.text("performanceTest")
    sizes = params.DEFAULTS["quick"]["performanceTest"]["sizes"]
    sweep = [r for r in records if r["method"] != "peak"]
    devices_seen = sorted({r["device"] for r in sweep})
    assert sorted((r["size"], r["device"], r["method"]) for r in sweep) == sorted(
        (s, d, m) for s in sizes for d in devices_seen for m in ("book", "rigorous"))
    # The % of peak reference: one peak probe per env, device and dtype in the run, measured by
    # whichever chapter ran first (nbval runs them in the reading order) and reused.
    peaks = {(r["device"], r["dtype"]): r for r in nbval_run.records if r.get("method") == "peak"}
    assert {(d, "float32") for d in devices_seen} <= set(peaks)
    from gpubench import matmul

    for device in devices_seen:  # performanceTest shows the peak it divides by
        assert matmul.describe(peaks[(device, "float32")]) in text
    for record in records:
        results.validate(record)
        assert record["status"] == "ok" and record["run_id"] == "nbval-run"
        assert record["benchmark"] == "matmul" and record["notebook"] == "performanceTest"
    for record in records:  # each measurement is printed as it is stored
        assert matmul.describe(record) in text


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Mnist_MLP_h1000", "Mnist_CNN", "Keras_Cifar_CNN"])
def test_training_notebook_writes_its_train_record(nbval_run, name):
    (record,) = [r for r in nbval_run.records if r["notebook"] == name]
    text = nbval_run.text(name)
    results.validate(record)
    quick = params.DEFAULTS["quick"][name]
    assert record["status"] == "ok" and record["benchmark"] == "train"
    assert record["model"] == params.TRAINING_NOTEBOOKS[name]
    assert record["data_source"] == "synthetic" and "SYNTHETIC DATA" in text
    assert record["epochs"] == quick["epochs"] == len(record["epoch_seconds"])
    assert record["batch_size"] == quick["batch_size"]
    assert record["device"] == "cpu" and record["env"] in ("cpu", "gpu")
    assert record["total_seconds"] > 0
    assert record["jit_compile"] is False and record["precision"] == "float32"  # like for like
    assert "Quick profile, instead of the book's values: epochs 15 -> " in text
    # the results file lies outside the checkout: the Results line gives the path that opens
    # from anywhere (stored notebooks, written under the checkout, show none: test above)
    assert f"Results:  {(nbval_run.folder / 'results.jsonl').resolve()}" in text
    if record["test_accuracy"] < 0.2:  # below twice chance: the chapter must say so
        assert "quick-profile accuracy is not meaningful" in text


@pytest.mark.slow
def test_speed_factors_notebook_quick_covers_every_factor(nbval_run):
    """Speed_Factors as the session's nbval pass ran it: quick profile, synthetic data."""
    records = [r for r in nbval_run.records if r["notebook"] == "Speed_Factors"]
    train = [r for r in records if r["benchmark"] == "train"]
    assert {r["factor"] for r in train} == set(factors.FACTOR_NAMES)
    assert [(r["factor"], r["error"]) for r in train if r["status"] != "ok"] == []
    # The matmul peak probe, once per env and compute dtype of the quick profile's precisions,
    # is the reference of every "% of matmul": a peak another chapter of the same run already
    # measured (performanceTest's float32, which runs first) is reused, not measured again.
    peaks = [r for r in nbval_run.records if r["benchmark"] == "matmul" and r["method"] == "peak"]
    assert sorted((r["device"], r["dtype"], r["notebook"]) for r in peaks) == [
        ("cpu", "bfloat16", "Speed_Factors"), ("cpu", "float32", "performanceTest")]
    float32 = [r for r in train if r["precision"] == "float32"]
    assert all(factors.percent_of_matmul_peak(r, peaks) is not None for r in float32)
    text = nbval_run.text("Speed_Factors")
    assert "x vs baseline" in text and "No GPU in this environment" in text
    assert "**cpu**:" in text  # the findings, written from the numbers


@pytest.mark.slow
def test_nbval_lax_passes_on_every_notebook(nbval_run):
    proc = nbval_run.proc
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    cells = sum(c.cell_type == "code" for name in ALL
                for c in nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells)
    assert re.search(rf"\b{cells} passed", proc.stdout), proc.stdout[-2000:]
    assert sorted(p.stem for p in (nbval_run.folder / "executed").glob("*.ipynb")) == ALL


@pytest.mark.slow
def test_a_strict_nbval_repeat_of_a_run_passes_with_the_sanitize_file(tmp_path, nbval_run):
    """What differs by nature between two runs with the same settings (timings, rates,
    accuracies and losses, paths, dates) is masked by nbval_sanitize.cfg: strict nbval, which
    compares every output, passes on a repeat of the session's run of a chapter."""
    import shutil

    stored = tmp_path / "Mnist_MLP_h1000.ipynb"
    shutil.copy(nbval_run.folder / "executed" / stored.name, stored)
    proc = run_nbval(tmp_path, stored, strict=True)
    assert proc.returncode == 0, proc.stdout[-6000:]
    cells = sum(c.cell_type == "code" for c in nbformat.read(stored, as_version=4).cells)
    assert re.search(rf"\b{cells} passed", proc.stdout), proc.stdout[-2000:]


@pytest.mark.slow
def test_nbval_fails_when_a_checked_output_changes(tmp_path, cpu_kernel):
    """The NBVAL_CHECK_OUTPUT cells are compared: an altered stored output makes nbval fail."""
    nb = nbformat.read(NOTEBOOKS / "Mnist_MLP_h1000.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.source.startswith("# NBVAL_CHECK_OUTPUT")
                and "count_params" in c.source)
    right = "mlp_h1000: 795,010 parameters, 4,764,000 FLOPs to train on one image\n"
    nb.cells = [c for c in nb.cells if c.cell_type == "markdown" or "#@save" in c.source
                or "parameters" in c.metadata.get("tags", []) or "start(" in c.source
                or "build_model" in c.source or c is cell]
    for other in nb.cells:  # only `cell` is compared
        if other is not cell:
            other.source = other.source.replace("# NBVAL_CHECK_OUTPUT\n", "")
    for text, name in ((right, "right"), (right.replace("795,010", "795,011"), "altered")):
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    proc = run_nbval(tmp_path, tmp_path / "right.ipynb", tmp_path / "altered.ipynb")
    assert proc.returncode == 1, proc.stdout[-3000:]
    # the right copy passes all its cells; the altered one fails on the checked cell alone
    cells = sum(c.cell_type == "code" for c in nb.cells)
    assert re.search(rf"\b1 failed, {2 * cells - 1} passed", proc.stdout), proc.stdout[-3000:]
    assert "795,011" in proc.stdout


BOOK_CHAPTERS = ("performanceTest", "Mnist_MLP_h1000", "Mnist_CNN", "Keras_Cifar_CNN")
CHAPTER_LINES = 2500  # the four book chapters, run whole on a CPU, load at most this


def lines_of(modules: dict[str, str | None]) -> dict[str, int]:
    """{module: its file's line count} of the modules that have a file."""
    return {name: len(Path(file).read_text(encoding="utf-8").splitlines())
            for name, file in modules.items() if file}


@pytest.mark.slow
def test_the_book_chapters_load_the_chapter_tier_only_and_few_lines(nbval_run):
    """The four book chapters as the session's nbval pass ran them (quick, synthetic data, the
    gpubench-cpu kernel; tests/nbval_modules.py asked each kernel after its last cell): no module
    of the tools tier, and at most CHAPTER_LINES lines of gpubench between them."""
    from test_layers import declared_tiers, tier_of

    tiers, union = declared_tiers(), {}
    for name in BOOK_CHAPTERS:
        loaded = json.loads((nbval_run.folder / "modules" / f"{name}.json").read_text())
        tools = sorted(m for m in loaded if tier_of(m, tiers) == "tools")
        assert not tools, f"{name} loads the tools tier: {', '.join(tools)}"
        union.update(lines_of(loaded))
    total = sum(union.values())
    largest = ", ".join(f"{m} {n}" for m, n in sorted(union.items(), key=lambda x: -x[1])[:12])
    print(f"\nthe four book chapters load {len(union)} gpubench modules, {total:,} lines: {largest}")
    assert total <= CHAPTER_LINES, f"{total:,} lines in {len(union)} modules: {largest}"


@pytest.mark.slow
def test_gpu_telemetry_adds_what_a_gpu_region_loads(nbval_run):
    """The closing note's figure with GPU telemetry active: the chapters' modules, plus what a GPU
    region loads (telemetry's Monitor on tests/fake_pynvml's fake NVML, and the datasheet peaks),
    imported in one Python, since a CPU kernel cannot run a chapter on a GPU. Printed only."""
    folder = nbval_run.folder / "modules"
    if not folder.is_dir():
        pytest.skip("the session's nbval pass recorded no modules")
    chapters = sorted({m for name in BOOK_CHAPTERS
                       for m in json.loads((folder / f"{name}.json").read_text())})
    script = ("import importlib, json, sys\n"
              f"for m in {chapters!r}: importlib.import_module(m)\n"
              "from fake_pynvml import FakeGPU, FakeNVML\n"
              "from gpubench import peaks, telemetry\n"
              "telemetry.Monitor('gpu:0', nvml=FakeNVML(gpus=[FakeGPU()])).start().stop()\n"
              "print(json.dumps({n: getattr(m, '__file__', None) for n, m in sys.modules.items()"
              " if n.startswith('gpubench')}))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "tests")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    union = lines_of(json.loads(proc.stdout.splitlines()[-1]))
    print(f"\nwith GPU telemetry: {len(union)} gpubench modules, {sum(union.values()):,} lines")
