"""chapter.start: the cell that ran is the declaration, in a copied, renamed or new notebook."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from conftest import NOTEBOOKS, REPO, python_env
from gpubench import chapter, params
from gpubench.params import ParameterError

CELL = "profile = None\nresults_path = None\nenv_name = None\n"


def _kernel(*cells: str, **defined) -> dict:
    """A kernel's globals() after it ran `cells` (IPython keeps their sources in `In`)."""
    return {"In": ["", *cells], "Out": {}, **defined}


def test_the_declaration_is_the_parameters_cell_that_ran():
    mine = CELL + "epochs = 2\nnote = 'hi'\n"
    values = _kernel(mine, "# Parameters\nnote = \"tried\"\n", "import gpubench as gb")
    cell, since = chapter.declaration("MyChapter", values)
    assert cell == {"profile": None, "results_path": None, "env_name": None, "epochs": 2,
                    "note": "hi"} and since == 2
    assert chapter.injected_names(values, since) == ["note"]
    # run again by hand after papermill's run: the latest cell counts, nothing injected after it
    values["In"] += [CELL + "epochs = 5\n", "cfg = gb.chapter.start('MyChapter', globals())"]
    cell, since = chapter.declaration("MyChapter", values)
    assert cell["epochs"] == 5 and "note" not in cell and chapter.injected_names(values, since) == []
    # a cell without the common names counts when papermill's cell follows it
    cell, _ = chapter.declaration("X", _kernel("epochs = 3\n", "# Parameters\nepochs = 4\n"))
    assert cell == {"profile": None, "results_path": None, "env_name": None, "epochs": 3}
    # outside IPython: a book notebook's own cell, else nothing declared
    assert chapter.declaration("Mnist_CNN", {})[0] == params.declared("Mnist_CNN")
    assert chapter.declaration("MyChapter", {"epochs": 3})[0] == {}


def test_rules_apply_by_name_and_the_quick_profile_to_the_book_notebooks_only():
    cell = {**dict.fromkeys(params.COMMON), "epochs": 15, "note": "none", "sizes": [500]}
    with pytest.raises(ParameterError, match=r"epochs=20000 is above 10,000"):
        params.check_params("MyChapter", {"epochs": 20_000}, cell)
    assert params.check_params("MyChapter", {"note": 7, "sizes": "500,600"}, cell) == {
        "note": 7, "sizes": [500, 600]}  # no rule for note: kept as it is
    chosen, changed = params.resolve("MyChapter", cell, profile="quick")
    assert chosen["epochs"] == 15 and changed == {}
    copied = {**params.declared("Mnist_MLP_h1000"), "run_note": "none"}
    chosen, changed = params.resolve("Mnist_MLP_h1000", copied, profile="quick", run_note="x")
    assert chosen["epochs"] == params.QUICK["Mnist_MLP_h1000"]["epochs"] and "epochs" in changed
    assert chosen["run_note"] == "x"
    with pytest.raises(ParameterError, match="unknown parameter.*run_note for Mnist_MLP_h1000"):
        params.check_params("Mnist_MLP_h1000", {"run_note": "x"})  # the book's own cell


def _papermill(source, out, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "papermill", str(source), str(out),
                           "-k", "gpubench-cpu", *args], cwd=NOTEBOOKS, capture_output=True,
                          text=True, timeout=600,
                          env=python_env(GPUBENCH_PROFILE="quick", GPUBENCH_DATA_SOURCE="synthetic"))


def _printed(path) -> str:
    cells = nbformat.read(path, as_version=4).cells
    return "".join(o.get("text", "") for c in cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.slow
def test_a_copied_notebook_takes_a_parameter_only_its_cell_declares(tmp_path, cpu_kernel):
    nb = nbformat.read(NOTEBOOKS / "Mnist_MLP_h1000.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source += '\nrun_note = "none"  # a note of the learner\'s own'
    copy, out, results = tmp_path / "copy.ipynb", tmp_path / "out.ipynb", tmp_path / "r.jsonl"
    nbformat.write(nb, copy)
    done = _papermill(copy, out, "-p", "run_note", "tried", "-p", "epochs", "2",
                      "-p", "max_train_samples", "600", "-p", "results_path", str(results))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "run_note='tried'" in _printed(out)
    [record] = [json.loads(line) for line in results.read_text().splitlines()]
    assert record["benchmark"] == "train" and record["epochs"] == 2


@pytest.mark.slow
def test_a_notebook_of_a_new_name_calls_start(tmp_path, cpu_kernel):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(CELL + "epochs = 2\nnote = 'hi'\n",
                                  metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import gpubench as gb\n\n"
                                  "cfg = gb.chapter.start('MyChapter', globals())\n"
                                  "print('chosen', cfg.epochs, cfg.note, cfg.profile)")],
        metadata={"language_info": {"name": "python"}})
    source, out = tmp_path / "MyChapter.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, source)
    done = _papermill(source, out, "-p", "note", "tried", "-p", "epochs", "3",
                      "-p", "results_path", str(tmp_path / "r.jsonl"))
    assert done.returncode == 0, done.stderr[-3000:]
    printed = _printed(out)
    assert "gpubench 0.1.0 | MyChapter | profile quick" in printed
    assert "chosen 3 tried quick" in printed


def test_the_results_path_opens_from_the_current_folder(tmp_path, monkeypatch):
    """Relative where the kernel's folder and the file both lie in the checkout (no machine path
    in stored outputs), or the file lies below that folder; else absolute."""
    inside = REPO / "runs" / "interactive" / "results.jsonl"
    monkeypatch.chdir(NOTEBOOKS)  # where the runner and nbval start kernels
    assert chapter.shown_path(inside) == "../runs/interactive/results.jsonl"
    monkeypatch.chdir(tmp_path)  # papermill run from another folder
    assert chapter.shown_path(inside) == str(inside)
    assert chapter.shown_path(tmp_path / "r.jsonl") == "r.jsonl"


def test_a_bool_passed_as_text_reaches_the_chapter_as_a_bool(tmp_path):
    """The runner passes `-p true_float32=True` as text; the chapter's config holds the bool."""
    cell = "".join(f"{k} = {v!r}\n" for k, v in params.declared("performanceTest").items())
    values = _kernel(cell, '# Parameters\ntrue_float32 = "True"\n', true_float32="True",
                     results_path=str(tmp_path / "r.jsonl"), sizes=[64], profile="quick")
    assert chapter.start("performanceTest", values).true_float32 is True
