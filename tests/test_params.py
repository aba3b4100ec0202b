"""gpubench.params, the one home of the notebooks' parameter rules, and what `chapter.start`
adds in the kernel: names papermill injected that no parameters cell declares."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from conftest import NOTEBOOKS, REPO, python_env
from gpubench import chapter, devices, params
from gpubench.factors import rules as factor_rules
from gpubench.params import ParameterError
from gpubench.scaling import rules as scaling_rules


@pytest.fixture(autouse=True)
def _no_gpubench_variables(monkeypatch):
    for name in ("GPUBENCH_PROFILE", "GPUBENCH_DATASET", "GPUBENCH_DATA_SOURCE",
                 "GPUBENCH_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)


# ---- one value at a time

@pytest.mark.parametrize("value,minimum,allow_none,ok", [
    (1, 1, False, True), (0, 1, False, False), (0, 0, False, True), (True, 1, False, False),
    (2.0, 1, False, False), ("3", 1, False, False), (None, 1, True, True), (None, 1, False, False),
])
def test_positive_int(value, minimum, allow_none, ok):
    if ok:
        assert params.positive_int("n", value, minimum=minimum, allow_none=allow_none) == value
    else:
        with pytest.raises(ParameterError, match=rf"n must be .*got {value!r}"):
            params.positive_int("n", value, minimum=minimum, allow_none=allow_none)


def test_every_check_raises_the_parameter_error():
    """One class for every parameter problem; still a ValueError for callers that catch those."""
    bad = [lambda: params.check_value("epochs", 0), lambda: params.check_value("xla", "yes"),
           lambda: params.check_value("sizes", "[1,"), lambda: params.check_value("device", 3),
           lambda: params.check_value("dataset", "imagenet"),
           lambda: params.check_value("data_source", "s3"),
           lambda: params.check_value("profile", "fast"),
           lambda: params.check_params("Mnist_CNN", {"sizes": [1]}),
           lambda: list(params.declared("Mnist"))]
    for call in bad:
        with pytest.raises(ParameterError):
            call()
    assert issubclass(ParameterError, ValueError)


def test_the_error_shows_as_one_line_in_jupyter():
    exc = ParameterError("unknown parameter(s) epoch for Mnist_CNN; it takes epochs")
    assert exc._render_traceback_() == [
        "ParameterError: unknown parameter(s) epoch for Mnist_CNN; it takes epochs"]


@pytest.mark.parametrize("name,canonical", [("auto", "auto"), (" gpu:1 ", "gpu:1"),
                                            ("/GPU:0", "/GPU:0"), ("/device:CPU:0", "/device:CPU:0")])
def test_device_syntax(name, canonical):
    assert params.check_device(name) == canonical


def test_device_syntax_refuses_by_name_and_devices_keeps_its_error():
    with pytest.raises(ParameterError, match=r"unknown device 'tpu'.*\"gpu:N\""):
        params.check_device("tpu")
    with pytest.raises(ParameterError, match="one CPU device"):
        params.check_device("cpu:1")
    assert params.check_device("cpu:1", virtual_cpus=True) == "cpu:1"
    with pytest.raises(devices.DeviceError, match="unknown device 'tpu'"):
        devices.check_name("tpu")


def test_dataset_and_source_names():
    assert params.check_dataset("Fashion-MNIST") == "fashion_mnist"
    assert params.check_source(None) == "auto" and params.check_source(" Dir ") == "dir"
    with pytest.raises(ParameterError, match="unknown data source 's3'"):
        params.check_source("s3")


@pytest.mark.parametrize("given,expected", [(True, True), (False, False), ("True", True),
                                            ("false", False), ("TRUE", True)])
def test_true_float32_takes_a_bool_or_its_word_in_any_case(given, expected):
    """`-p performanceTest:true_float32=True` passes the text; the kernel gets the bool."""
    checked = params.check_params("performanceTest", {"true_float32": given})
    assert checked == {"true_float32": expected} and type(checked["true_float32"]) is bool


@pytest.mark.parametrize("given", ["yes", "1", 1, 0, [True]])
def test_true_float32_refuses_anything_else_by_name(given):
    with pytest.raises(ParameterError) as info:
        params.check_value("true_float32", given)
    assert str(info.value) == f"true_float32 must be True or False, got {given!r}"


# ---- a notebook's own rules, here and nowhere else

@pytest.mark.parametrize("given,message", [
    ({"model": "cifar_cnn"}, "not one Speed_Factors trains"), ({"epochs": 1}, "epochs"),
    ({"xla_modes": "off,auto"}, "xla_modes: 'auto'"),
])
def test_speed_factors_rules_apply_to_the_given_values(given, message):
    with pytest.raises(ParameterError, match=message):
        params.check_params("Speed_Factors", given, rules=factor_rules.check_parameters)


def test_scaling_rules_and_lists():
    own = scaling_rules.check_parameters  # the chapter gives its own rules to start
    checked = params.check_params("Multi_GPU_Scaling", {"replicas": "1,2", "scaling": "strong"},
                                  rules=own)
    assert checked == {"replicas": [1, 2], "scaling": "strong"}
    with pytest.raises(ParameterError, match="linear"):
        params.check_params("Multi_GPU_Scaling", {"scaling": "linear"}, rules=own)


def test_check_for_backend_refuses_tf_data_without_tensorflow():
    given = {"input_pipelines": ["arrays", "tf.data"]}
    assert factor_rules.check_for_backend("Speed_Factors", given, "tensorflow", True) is given
    with pytest.raises(ParameterError, match="tf.data.*jax env"):
        factor_rules.check_for_backend("Speed_Factors", given, "jax", False)


# ---- profiles and environment variables

def test_quick_profile_only_overrides_what_it_names():
    for nb in params.NOTEBOOKS:
        quick, full = params.DEFAULTS["quick"][nb], params.DEFAULTS["full"][nb]
        assert list(quick) == list(full) == [n for n in list(params.declared(nb))
                                             if n not in params.COMMON]
        assert {k for k in full if quick[k] != full[k]} <= set(params.QUICK[nb])
        assert quick["epochs" if "epochs" in quick else "repeats"] < \
            full["epochs" if "epochs" in full else "repeats"]


# ---- the parameters cell is the one declaration; params holds the rules

def _needs_rule(default) -> bool:
    """A str or a list (from a closed set, or of positive ints), an int (positive), or None (no
    type to go by) needs a rule; a bool or a float may go without."""
    return default is None or isinstance(default, (str, int, list)) and not isinstance(default,
                                                                                       bool)


def _disagreements(cells: dict[str, dict], quick: dict[str, dict]) -> list[str]:
    """Where the notebooks' parameters cells and the rules in params disagree, one line each."""
    found = []
    for nb, cell in cells.items():
        found += [f"{nb}: {name} = {default!r} has no rule in params"
                  for name, default in cell.items() if _needs_rule(default)
                  and name not in params.RULED]
        found += [f"{nb} does not declare {name} (COMMON)" for name in params.COMMON
                  if name not in cell]
        found += [f"_QUICK[{nb!r}] changes {name}, which {nb}'s cell does not declare"
                  for name in quick.get(nb, {}) if name not in cell]
        for name, value in [*cell.items(), *quick.get(nb, {}).items()]:
            try:
                params.check_value(name, value, virtual_cpus=True)
            except ParameterError as exc:
                found.append(f"{nb}: {name} = {value!r} breaks its rule: {exc}")
    declared = {name for cell in cells.values() for name in cell}
    kinds = set(params.LISTS_OF.values()) - set(params.LISTS_OF)  # item kinds, not parameters
    found += [f"a rule names {name}, which no parameters cell declares"
              for name in sorted(set(params.RULED) - declared - kinds)]
    return found + [f"_QUICK names {nb}, not a notebook" for nb in quick if nb not in cells]


def test_every_parameters_cell_and_the_rules_agree():
    cells = {nb: params.declared(nb) for nb in params.NOTEBOOKS}
    assert _disagreements(cells, params.QUICK) == []
    for nb in params.NOTEBOOKS:  # and a notebook's own rules (Speed_Factors: epochs >= 2)
        for profile in params.PROFILES:
            params.check_params(nb, params.DEFAULTS[profile][nb])


def test_a_cell_and_rules_that_disagree_are_found():
    """What the test above finds: a new name with no rule, a rule or a quick value for a name
    no cell declares, and a default its own rule refuses."""
    cells = {nb: dict(params.declared(nb)) for nb in params.NOTEBOOKS}
    cells["Mnist_CNN"]["optimizer"] = "adam"
    cells["Mnist_CNN"]["seed"] = 1
    cells["Mnist_CNN"]["shuffle"] = True  # a bool needs no rule
    cells["Mnist_CNN"]["xla"] = "sometimes"
    del cells["Multi_GPU_Scaling"]["virtual_devices"], cells["performanceTest"]["env_name"]
    quick = {**params.QUICK, "Keras_Cifar_CNN": {"epochs": 0, "epoch": 2}}
    assert sorted(_disagreements(cells, quick)) == sorted([
        "Mnist_CNN: optimizer = 'adam' has no rule in params",
        "Mnist_CNN: seed = 1 has no rule in params",
        "Mnist_CNN: xla = 'sometimes' breaks its rule: unknown xla 'sometimes'; use one of off, "
        "on, auto",
        "Keras_Cifar_CNN: epochs = 0 breaks its rule: epochs must be a positive integer, got 0",
        "performanceTest does not declare env_name (COMMON)",
        "_QUICK['Keras_Cifar_CNN'] changes epoch, which Keras_Cifar_CNN's cell does not declare",
        "a rule names virtual_devices, which no parameters cell declares"])


def test_a_broken_parameters_cell_is_one_line_naming_the_file(tmp_path):
    """The runner reads the .ipynb it is about to run, by path (`declared_in`)."""
    def cell(source: str) -> str:
        return json.dumps({"cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]},
                                      "source": source}]})

    path = tmp_path / "Mnist_CNN.ipynb"
    for source, message in [("epochs = 15\nsizes = list(range(5))\n", "line 2: write NAME = "),
                            ("epochs = \n", "SyntaxError"), (None, "No such file")]:
        if source is not None:
            path.write_text(cell(source))
        else:
            path.unlink()
        with pytest.raises(ParameterError, match=message) as info:
            params.declared_in(path)
        assert str(path) in str(info.value) and "\n" not in str(info.value)
    path.write_text(cell("profile = None\nepochs = 2\n"))
    assert params.declared_in(path) == {"profile": None, "epochs": 2}
    assert params.declared_in(NOTEBOOKS / "Mnist_CNN.ipynb") == params.declared("Mnist_CNN")


def test_check_params_takes_the_cell_that_will_run():
    """A copied notebook's own name passes, by its cell; the book's names keep their rules."""
    copied = {**params.declared("Mnist_MLP_h1000"), "run_note": "none"}
    assert params.check_params("Mnist_MLP_h1000", {"run_note": "tried", "epochs": 3}, copied) \
        == {"run_note": "tried", "epochs": 3}
    with pytest.raises(ParameterError, match="epochs must be a positive integer, got 0"):
        params.check_params("Mnist_MLP_h1000", {"epochs": 0}, copied)
    with pytest.raises(ParameterError, match="unknown parameter.*run_note"):
        params.check_params("Mnist_MLP_h1000", {"run_note": "tried"})


COUNTS = ("repeats", "epochs", "batch_size", "sizes", "replicas", "per_replica_batch_size",
          "max_train_samples", "virtual_devices", "steps_per_execution", "batch_sizes")


@pytest.mark.parametrize("name", COUNTS)
def test_every_count_has_an_upper_bound_refused_in_one_line(name):
    bound = params.LIMITS[name]
    listed = name in params.INT_LISTS
    assert params.check_value(name, bound) == ([bound] if listed else bound)
    for too_many in (bound + 1, 10**23):
        with pytest.raises(ParameterError) as info:
            params.check_value(name, str(too_many) if listed else too_many)
        message = str(info.value)
        assert message == (f"{name}={too_many!r} is above {bound:,}, the most gpubench takes (no "
                           f"machine would finish it); use at most {bound:,}")


def test_environment_variables_fill_what_is_none(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUBENCH_PROFILE", "quick")
    monkeypatch.setenv("GPUBENCH_DATA_SOURCE", "synthetic")
    monkeypatch.setenv("GPUBENCH_DATA_DIR", str(tmp_path))
    chosen, _ = params.resolve("Mnist_CNN")
    assert (chosen["profile"], chosen["data_source"], chosen["data_dir"]) == \
        ("quick", "synthetic", str(tmp_path))
    chosen, _ = params.resolve("Mnist_CNN", profile="full", data_source="keras")
    assert (chosen["profile"], chosen["data_source"]) == ("full", "keras")
    monkeypatch.setenv("GPUBENCH_PROFILE", "fast")
    with pytest.raises(ParameterError, match="'fast' \\(from GPUBENCH_PROFILE\\)"):
        params.resolve("Mnist_CNN")


def test_gpubench_dataset_names_the_dataset_where_the_shape_fits(monkeypatch):
    monkeypatch.setenv("GPUBENCH_DATASET", "Fashion-MNIST")
    for nb in ("Mnist_MLP_h1000", "Mnist_CNN", "Speed_Factors", "Multi_GPU_Scaling"):
        assert params.resolve(nb)[0]["dataset"] == "fashion_mnist", nb
        assert params.resolve(nb, dataset="mnist")[0]["dataset"] == "fashion_mnist", nb
    assert params.resolve("Keras_Cifar_CNN")[0]["dataset"] == "cifar10"  # 32x32 colour images
    monkeypatch.setenv("GPUBENCH_DATASET", "mnist")
    assert params.resolve("Mnist_CNN", dataset="fashion_mnist")[0]["dataset"] == "fashion_mnist"
    monkeypatch.setenv("GPUBENCH_DATASET", "imagenet")
    with pytest.raises(ParameterError, match="'imagenet'.*from GPUBENCH_DATASET"):
        params.resolve("Mnist_CNN")


# ---- names papermill injected

def _kernel_globals(*cells: str, **defined) -> dict:
    """What a kernel's globals() hold after running `cells` (IPython keeps them in `In`)."""
    return {"In": ["", *cells], "Out": {}, "get_ipython": print, "gb": chapter, **defined}


def test_injected_names_are_read_from_papermills_cell():
    values = _kernel_globals("profile = None\nepochs = 15\n", "# Parameters\nepoch = 2\nxla = \"on\"\n",
                             "import gpubench as gb")
    assert chapter.injected_names(values) == ["epoch", "xla"]
    # a cell of the user's own that starts with the same comment but does more: not papermill's
    assert chapter.injected_names(_kernel_globals("# Parameters\nprint(1)\nx = 2\n")) == []
    assert chapter.injected_names({"epochs": 3}) == []  # a plain dict: nothing injected


def test_start_refuses_an_undeclared_injected_name_before_anything_runs(tmp_path):
    path = tmp_path / "results.jsonl"
    cell = "".join(f"{k} = {v!r}\n" for k, v in params.declared("Mnist_MLP_h1000").items())
    values = _kernel_globals(cell, "# Parameters\nepoch = 2\n", epochs=15, epoch=2,
                             results_path=str(path), model="not a parameter of this notebook")
    with pytest.raises(ParameterError) as info:
        chapter.start("Mnist_MLP_h1000", values)
    message = str(info.value)
    assert "epoch passed to Mnist_MLP_h1000" in message and "model" not in message
    own = [n for n in list(params.declared("Mnist_MLP_h1000")) if n not in params.COMMON]
    # the runner's names are not offered as settable: papermill may set them, `-p` may not
    assert message.endswith(f"it takes {', '.join(own)} (and profile, results_path, env_name, "
                            "which `gpubench run` sets itself)")
    assert not path.exists()


def test_start_loads_no_framework_before_refusing():
    script = ("import sys\nfrom gpubench import chapter\n"
              "values = {'In': ['# Parameters\\nepoch = 2\\n'], 'epoch': 2}\n"
              "try:\n    chapter.start('Mnist_CNN', values)\nexcept ValueError:\n    pass\n"
              "sys.exit(1 if {'tensorflow', 'jax', 'keras'} & set(sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", script], cwd=REPO).returncode == 0


@pytest.mark.slow
def test_papermill_with_a_misspelt_parameter_stops_in_the_first_cell(tmp_path, cpu_kernel):
    """`papermill -p epoch 2` (for epochs): papermill only warns; the chapter's first cell stops
    with one line naming it and the names it takes, and nothing trains."""
    out, results_path = tmp_path / "out.ipynb", tmp_path / "results.jsonl"
    cmd = [sys.executable, "-m", "papermill", str(NOTEBOOKS / "Mnist_MLP_h1000.ipynb"), str(out),
           "-k", cpu_kernel, "-p", "profile", "quick", "-p", "data_source", "synthetic",
           "-p", "results_path", str(results_path), "-p", "epoch", "2"]
    proc = subprocess.run(cmd, cwd=NOTEBOOKS, capture_output=True, text=True, timeout=300,
                          env=python_env())
    assert proc.returncode != 0
    nb = nbformat.read(out, as_version=4)
    errors = [(i, o) for i, c in enumerate(c for c in nb.cells if c.cell_type == "code")
              for o in c.outputs if o.output_type == "error"]
    assert len(errors) == 1
    index, error = errors[0]
    assert index == 2  # after the parameters cell and papermill's own: the chapter's first
    assert error.ename == "ParameterError" and len(error.traceback) == 1
    assert "epoch passed to Mnist_MLP_h1000" in error.traceback[0]
    assert "epochs, batch_size" in error.traceback[0]
    assert not results_path.exists()
    assert json.loads(json.dumps(nb.metadata.papermill.parameters))["epoch"] == 2


@pytest.mark.parametrize("notebook,given,fits", [
    ("Mnist_MLP_h1000", {"dataset": "cifar10"}, "mnist or fashion_mnist"),
    ("Keras_Cifar_CNN", {"dataset": "fashion_mnist"}, "cifar10"),
    ("Speed_Factors", {"model": "mnist_cnn", "dataset": "cifar10"}, "mnist or fashion_mnist"),
])
def test_a_dataset_that_does_not_fit_the_model_is_refused_up_front(notebook, given, fits):
    with pytest.raises(params.ParameterError, match=rf"dataset 'cifar10|fashion_mnist'.*{fits}"):
        params.check_params(notebook, given)
    params.check_params("Mnist_MLP_h1000", {"dataset": "fashion_mnist"})  # fits: no error
