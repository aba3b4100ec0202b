"""report: known records in, the numbers a reader sees in report.md out."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from gpubench import report, results


def _env(host: str = "vm") -> dict:
    env = {k: None for k in results.ENVIRONMENT_FIELDS}
    env.update(hostname=host, gpus=[], cuda_build=False, cpu_model="Test CPU", cpu_count=2,
               ram_gb=4.0, tensorflow="2.21", keras="3.15", python="3.11")
    return env


def matmul(env: str, device: str, size: int, seconds: float, *, method: str = "rigorous",
           host: str = "vm", **fields) -> dict:
    """A matmul record of one size."""
    return results.make_record(
        "matmul", notebook="performanceTest", env=env, device=device, size=size,
        dtype="float32", method=method, seconds=seconds, gflops=2 * size**3 / seconds / 1e9,
        repeats=3, environment=_env(host), **fields)


def train(env: str, total: float, *, model: str = "mlp_h1000", host: str = "vm",
          notebook: str = "Mnist_MLP_h1000", **fields) -> dict:
    """A train record: 15 epochs of the book's MLP taking `total` seconds."""
    fields = {"dataset": "mnist", "data_source": "keras", "epochs": 15, "batch_size": 100,
              "train_samples": 55000, "total_seconds": total, "first_epoch_seconds": total / 10,
              "steady_epoch_seconds": total / 16, "epoch_seconds": [total / 15] * 15,
              "test_accuracy": 0.95, "jit_compile": False, "precision": "float32",
              "steps_per_execution": 1, "input_pipeline": "arrays", **fields}
    return results.make_record("train", notebook=notebook, env=env, device=env, model=model,
                               environment=_env(host), **fields)


def write_run(run_dir: Path, records: list[dict], jobs: list[dict] | None = None) -> Path:
    """A run directory holding `records` (and run.json with `jobs`)."""
    store = results.ResultsStore(run_dir / "results.jsonl")
    for record in records:
        store.append(record)
    if jobs is not None:
        (run_dir / "run.json").write_text(json.dumps({"jobs": jobs}))
    return run_dir


def build_text(*run_dirs: Path) -> str:
    """report.md's text for `run_dirs`."""
    return report.build(list(run_dirs)).read_text()


def table_rows(text: str, first_cell: str) -> list[list[str]]:
    """Cells of every Markdown table row whose first cell is `first_cell`."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith(f"| {first_cell} |")]


def cell(row: list[str], header: str) -> str:
    """The cell of a training-table row under `header`."""
    return row[report.TRAINING_HEADERS.index(header)]


def job(env: str, notebook: str, status: str, error: str | None = None) -> dict:
    """One job of run.json as the runner writes it."""
    return {"env": env, "notebook": notebook, "status": status, "error": error,
            "seconds": 1.0, "attempt": 1}


# ---------------------------------------------------------------- issue 7: attempts, problems

def test_only_each_jobs_latest_attempt_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBENCH_ATTEMPT", "1")
    first = [train("cpu", 500.0), matmul("cpu", "cpu", 500, 9.0), train("gpu", 50.0)]
    monkeypatch.setenv("GPUBENCH_ATTEMPT", "2")
    second = [train("cpu", 100.0), matmul("cpu", "cpu", 1000, 2.0)]
    text = build_text(write_run(tmp_path, first + second))
    cpu, gpu = table_rows(text, "MNIST MLP h1000")
    # attempt 1 of the cpu job is ignored
    assert cell(cpu, "total time") == "100 s" and cell(gpu, "total time") == "50 s"
    assert table_rows(text, "500") == [] and table_rows(text, "1000") != []


def test_failed_and_skipped_jobs_are_listed_with_the_first_line_of_their_error(tmp_path):
    jobs = [job("cpu", "Mnist_MLP_h1000", "ok"),
            job("cpu", "Mnist_CNN", "failed", "ValueError: epochs must be positive\nTraceback"),
            job("gpu", "performanceTest", "skipped", "no GPU env")]
    text = build_text(write_run(tmp_path, [train("cpu", 10.0)], jobs))
    assert "## What went wrong" in text
    assert table_rows(text, tmp_path.name) == [
        [tmp_path.name, "cpu", "Mnist_CNN", "failed", "ValueError: epochs must be positive"],
        [tmp_path.name, "gpu", "performanceTest", "skipped", "no GPU env"]]
    assert "Traceback" not in text


def test_a_clean_run_has_no_problems_section(tmp_path):
    text = build_text(write_run(tmp_path, [train("cpu", 10.0)], [job("cpu", "Mnist_MLP_h1000",
                                                                      "ok")]))
    assert "What went wrong" not in text


@pytest.mark.parametrize("content", ["", "{not json", '{"jobs": [{"env": "cpu"}]}'])
def test_an_unreadable_run_json_is_named_and_the_report_still_written(tmp_path, content):
    write_run(tmp_path, [train("cpu", 10.0)])
    (tmp_path / "run.json").write_text(content)
    with pytest.warns(UserWarning, match="run.json: unreadable job list"):
        text = build_text(tmp_path)
    assert f"{tmp_path / 'run.json'}: unreadable job list" in text
    assert table_rows(text, "MNIST MLP h1000")


def test_skipped_lines_are_listed_and_the_rest_reported(tmp_path):
    write_run(tmp_path, [train("cpu", 10.0)])
    with open(tmp_path / "results.jsonl", "a") as fh:
        fh.write('{"schema": 99}\n' + json.dumps({**train("gpu", 5.0), "size": "500"})[:-1]
                 + ', "epochs": "15"}\n{"sche')
    with pytest.warns(UserWarning):
        text = build_text(tmp_path)
    assert "results.jsonl:2: skipped: unknown schema version 99" in text
    assert "results.jsonl:3: skipped: train field 'epochs' has the wrong type: '15'" in text
    assert "results.jsonl:4: skipped: not a JSON record" in text
    assert [row[1] for row in table_rows(text, "MNIST MLP h1000")] == ["vm · cpu"]


@pytest.mark.parametrize("code,words", [(errno.ENOSPC, "the disk is full"),
                                        (errno.EROFS, "the file system is read-only")])
def test_a_failed_report_write_is_a_clear_error_and_leaves_the_old_report(
        tmp_path, monkeypatch, code, words):
    write_run(tmp_path, [train("cpu", 10.0)])
    (tmp_path / "report.md").write_text("old report")
    real = Path.write_text

    def failing(self, text, *args, **kwargs):
        real(self, text[:10], *args, **kwargs)  # part of it reached the disk
        raise OSError(code, "fault injected")

    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(report.ReportWriteError, match=words) as caught:
        report.build([tmp_path])
    assert str(tmp_path) in str(caught.value)
    assert (tmp_path / "report.md").read_text() == "old report"
    assert not (tmp_path / "report.md.tmp").exists()


# ---------------------------------------------------------------- issue 8: the numbers

def test_one_machine_cpu_env_against_gpu_env(tmp_path):
    text = build_text(write_run(tmp_path, [train("cpu", 100.0), train("gpu", 70.0)]))
    cpu, gpu = table_rows(text, "MNIST MLP h1000")
    headers = report.TRAINING_HEADERS
    saved, speedup = headers.index("time saved vs CPU env"), headers.index("speedup")
    assert (cpu[1], cpu[saved], cpu[speedup]) == ("vm · cpu", "baseline", "1.00x")
    assert (gpu[1], gpu[saved], gpu[speedup]) == ("vm · gpu", "30%", "1.43x")


def test_two_machines_each_compare_with_their_own_cpu_env(tmp_path):
    a = write_run(tmp_path / "a", [train("cpu", 100.0, host="a"), train("gpu", 80.0, host="a")])
    b = write_run(tmp_path / "b", [train("cpu", 200.0, host="b"), train("gpu", 50.0, host="b")])
    rows = table_rows(build_text(a, b), "MNIST MLP h1000")
    saved, speedup = (report.TRAINING_HEADERS.index(h)
                      for h in ("time saved vs CPU env", "speedup"))
    assert [(r[1], r[saved], r[speedup]) for r in rows] == [
        ("a · cpu", "baseline", "1.00x"), ("a · gpu", "20%", "1.25x"),
        ("b · cpu", "baseline", "1.00x"), ("b · gpu", "75%", "4.00x")]


def test_a_slower_gpu_shows_negative_savings(tmp_path):
    rows = table_rows(build_text(write_run(tmp_path, [train("cpu", 100.0), train("gpu", 125.0)])),
                      "MNIST MLP h1000")
    assert [cell(rows[1], "time saved vs CPU env"), cell(rows[1], "speedup")] == ["-25%", "0.80x"]


def _sweep(gpu_seconds: float) -> list[dict]:
    """CPU time grows with size (size/1000 s), the GPU's stays flat: they cross where equal."""
    records = []
    for size in range(500, 3001, 500):
        records.append(matmul("gpu", "cpu", size, size / 1000))
        records.append(matmul("gpu", "gpu", size, gpu_seconds))
    return records


@pytest.mark.parametrize("gpu_seconds,words", [
    (1.6, "the GPU wins from 2000 x 2000 up"),
    (0.1, "the GPU wins at every size measured (from 500)"),
    (9.0, "the GPU never beat the CPU at the sizes measured"),
])
def test_matmul_crossover_is_where_the_lines_cross(tmp_path, gpu_seconds, words):
    text = build_text(write_run(tmp_path, _sweep(gpu_seconds)))
    assert f"Crossover (rigorous): {words};" in text


# ---------------------------------------------------------------- no side effects on the caller

def test_build_leaves_the_callers_matplotlib_backend_and_pyplot_alone(tmp_path):
    write_run(tmp_path, [train("cpu", 100.0), train("gpu", 70.0)] + _sweep(1.6))
    script = ("import sys, matplotlib; from gpubench import report; "
              f"report.build([{str(tmp_path)!r}]); "
              "plt = sys.modules.get('matplotlib.pyplot'); "
              "print(matplotlib.get_backend(), len(plt.get_fignums()) if plt else 0)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "MPLBACKEND": "svg"}, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["svg", "0"]  # no pyplot figure left open either
    assert {"epoch_times.png", "matmul_time.png", "matmul_speedup.png"} <= {
        p.name for p in tmp_path.iterdir()}


# ---------------------------------------------------------------- issue 9: modes, noise, factors

def test_each_row_shows_its_mode_and_columns_in_the_same_mode_pass(tmp_path):
    text = build_text(write_run(tmp_path, [train("cpu", 100.0), train("gpu", 70.0)]))
    for row in table_rows(text, "MNIST MLP h1000"):
        assert cell(row, "mode") == "XLA off, float32, batch 100, steps/exec 1, arrays"
    assert "Not like for like" not in text


def test_columns_in_different_modes_are_named(tmp_path):
    records = [train("cpu", 100.0),
               train("gpu", 70.0, jit_compile=True, precision="mixed_float16")]
    text = build_text(write_run(tmp_path, records))
    lines = [line for line in text.splitlines() if line.startswith("**Not like for like:**")]
    assert lines == ["**Not like for like:** MNIST MLP h1000: gpu: XLA on, mixed_float16, "
                     "cpu: XLA off, float32."]
    assert cell(table_rows(text, "MNIST MLP h1000")[1], "mode").startswith("XLA on, mixed_float16")


@pytest.mark.parametrize("iqr,flagged", [(0.25, True), (0.2, False), (0.05, False)])
def test_unstable_epoch_times_are_flagged_with_their_range(tmp_path, iqr, flagged):
    epochs = [3.0, 0.9, 1.0, 1.0, 1.4, 1.0]
    record = train("cpu", 100.0, epoch_seconds=epochs, steady_epoch_seconds=1.0,
                   steady_epoch_iqr=iqr)
    text = build_text(write_run(tmp_path, [record]))
    line = ("- **unstable**: vm · cpu MNIST MLP h1000 on cpu: steady epochs 0.9..1.4 s "
            f"(IQR {100 * iqr:.0f}% of the median); compare the minima")
    assert (line in text) is flagged
    assert ("**unstable**" in text) is flagged


def test_matmul_shows_percent_of_datasheet_peak_where_known(tmp_path):
    records = [matmul("gpu", "gpu", 1000, 0.01, spec_peak_gflops=800.0),
               matmul("gpu", "cpu", 1000, 0.1)]
    row = table_rows(build_text(write_run(tmp_path, records)), "1000")[0]
    assert row[1:] == ["0.1 s (20 GFLOP/s)", "0.01 s (200 GFLOP/s, 25% of datasheet peak)"]


def test_the_matmul_time_chart_shows_the_books_figures_dashed():
    from matplotlib.figure import Figure

    from gpubench import plots

    ax = plots.plot_matmul(_sweep(1.6), "seconds", Figure().subplots())
    book = [line for line in ax.get_lines() if line.get_label().startswith(
        "book: GT 720 / its CPU (single run)")]
    assert len(book) == 2 and all(line.get_linestyle() == "--" for line in book)
    assert list(book[0].get_xdata()) == [500, 1000, 2000, 3000, 4000, 5000]


def _factor(factor: str, rounds: list[float], **fields) -> dict:
    return train("cpu", sum(rounds), notebook="Speed_Factors", factor=factor,
                 epochs=len(rounds), train_samples=1000, epoch_seconds=rounds, **fields)


def test_speed_factors_section_reads_the_factor_records(tmp_path):
    records = [_factor("baseline", [3.0, 1.0, 1.0, 1.0]),
               _factor("batch_size", [2.0, 0.5, 0.5, 0.5], batch_size=1000),
               _factor("xla", [2.0, 1.1, 0.9, 1.0], jit_compile=True),
               train("cpu", 100.0)]
    text = build_text(write_run(tmp_path, records))
    section = text[text.index("## Speed factors"):]
    rows = {row[1]: row for row in table_rows(section, "cpu")}  # factors.table's rows by variant
    assert rows["batch 1000"][2] == "2.00x" and "faster" in " ".join(rows["batch 1000"])
    assert "no clear effect" in rows["XLA on"]
    assert (tmp_path / "speed_factors.png").exists()
    assert len(table_rows(text, "MNIST MLP h1000")) == 1  # variants stay out of the book's table


# ---------------------------------------------------------------- issue 10: scaling

def _scaling(replicas: int, rate: float, efficiency: float, **fields) -> dict:
    fields = {"strategy": "mirrored", "workers": 1, "replicas": replicas,
              "per_replica_batch_size": 100, "global_batch_size": 100 * replicas,
              "scaling": "weak", "samples_per_second": rate, "scaling_efficiency": efficiency,
              "all_reduce": "ring", "test_accuracy": 0.9, "model": "mlp_h1000", **fields}
    return results.make_record("scaling", notebook="Multi_GPU_Scaling", env="cpu",
                               device="cpu", environment=_env(), **fields)


def test_scaling_section_shows_replicas_workers_speed_and_efficiency(tmp_path):
    records = [_scaling(1, 1000.0, 1.0, virtual_devices=2), _scaling(2, 1500.0, 0.75,
                                                                      virtual_devices=2),
               _scaling(2, 1800.0, 0.9, strategy="multi_worker", workers=2,
                        all_reduce="AUTO (collective ring)")]
    text = build_text(write_run(tmp_path, records))
    assert "## Scaling" in text and "**Virtual devices**" in text
    assert table_rows(text, "vm · cpu") [:3] == [
        ["vm · cpu", "mirrored", "1", "1", "virtual (2 on one CPU)", "100", "1,000", "100%",
         "ring", "0.900"],
        ["vm · cpu", "mirrored", "1", "2", "virtual (2 on one CPU)", "200", "1,500", "75%",
         "ring", "0.900"],
        ["vm · cpu", "multi_worker", "2", "2", "cpu", "200", "1,800", "90%",
         "AUTO (collective ring)", "0.900"]]


def test_no_scaling_section_without_scaling_records(tmp_path):
    assert "## Scaling" not in build_text(write_run(tmp_path, [train("cpu", 1.0)]))


def test_show_displays_the_text_and_each_chart_where_report_md_has_it(tmp_path, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    write_run(tmp_path, [train("cpu", 100.0), train("gpu", 70.0)] + _sweep(1.6))
    report.show(report.build([tmp_path]))
    kinds = [type(item).__name__ for item in shown]
    assert kinds == ["Markdown", "Image", "Markdown", "Image", "Markdown", "Image", "Markdown",
                     "Image", "Markdown"]
    assert [Path(item.filename).name for item in shown[1::2]] == [
        "epoch_times.png", "matmul_time.png", "matmul_gflops.png", "matmul_speedup.png"]
    text = "".join(item.data for item in shown[::2])
    assert "## Matrix multiplication" in text and "![" not in text
