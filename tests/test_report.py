"""report: known records in, the numbers a reader sees in report.md out."""

from __future__ import annotations

import errno
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from conftest import REPO
from gpubench import fmt, machine, plots, report, results, rundir


def _env(host: str = "vm", backend: str = "tensorflow") -> dict:
    env = {k: None for k in results.ENVIRONMENT_FIELDS}
    env.update(hostname=host, gpus=[], cuda_build=False, cpu_model="Test CPU", cpu_count=2,
               ram_gb=4.0, tensorflow="2.21", keras="3.15", python="3.11", backend=backend)
    if backend == "jax":
        env.update(tensorflow=None, jax="0.10.0", backend_version="0.10.0")
    return env


def matmul(env: str, device: str, size: int, seconds: float, *, method: str = "rigorous",
           host: str = "vm", **fields) -> dict:
    """A matmul record of one size."""
    return results.make_record(
        "matmul", notebook="performanceTest", env=env, device=device, size=size,
        dtype="float32", method=method, seconds=seconds, gflops=2 * size**3 / seconds / 1e9,
        repeats=3, environment=_env(host), **fields)


def train(env: str, total: float, *, model: str = "mlp_h1000", host: str = "vm",
          notebook: str = "Mnist_MLP_h1000", device: str | None = None,
          backend: str | None = None, **fields) -> dict:
    """A train record: 15 epochs of the book's MLP taking `total` seconds (on device `env`, or
    cpu/gpu:0 for a JAX env; the backend from the env's name unless given)."""
    fields = {"dataset": "mnist", "data_source": "keras", "epochs": 15, "batch_size": 100,
              "train_samples": 55000, "total_seconds": total, "first_epoch_seconds": total / 10,
              "steady_epoch_seconds": total / 16, "epoch_seconds": [total / 15] * 15,
              "test_accuracy": 0.95, "jit_compile": False, "precision": "float32",
              "steps_per_execution": 1, "input_pipeline": "arrays", **fields}
    backend = backend or ("jax" if env.startswith("jax-") else "tensorflow")
    device = device or {"jax-cpu": "cpu", "jax-gpu": "gpu:0"}.get(env, env)
    return results.make_record("train", notebook=notebook, env=env, device=device, model=model,
                               environment=_env(host, backend), **fields)


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
    return row[report.training.TRAINING_HEADERS.index(header)]


def job(env: str, notebook: str, status: str, error: str | None = None) -> dict:
    """One job of run.json as the runner writes it."""
    return {"env": env, "notebook": notebook, "status": status, "error": error,
            "seconds": 1.0, "attempt": 1}


# ---------------------------------------------------------------- attempts, problems

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


@pytest.mark.parametrize("content,words", [
    ("", "unreadable job list"), ("{not json", "unreadable job list"),
    ('{"jobs": {"env": "cpu"}}', "unreadable job list"),
    ('{"jobs": [{"env": "cpu"}]}', "job 1 is not as gpubench writes it"),
    ('{"jobs": [{"env": "cpu", "notebook": "Mnist_CNN", "status": 3}]}',
     "job 1 is not as gpubench writes it")])
def test_an_unreadable_run_json_is_named_and_the_report_still_written(tmp_path, content, words):
    write_run(tmp_path, [train("cpu", 10.0)])
    (tmp_path / "run.json").write_text(content)
    with pytest.warns(UserWarning, match=f"run.json: {words}"):
        text = build_text(tmp_path)
    assert f"{tmp_path / 'run.json'}: {words}" in text
    assert table_rows(text, "MNIST MLP h1000")


def test_skipped_lines_are_listed_and_the_rest_reported(tmp_path):
    write_run(tmp_path, [train("cpu", 10.0)])
    with open(tmp_path / "results.jsonl", "a") as fh:
        fh.write('{"schema": 99}\n' + json.dumps({**train("gpu", 5.0), "size": "500"})[:-1]
                 + ', "epochs": "15"}\n{"sche')
    with pytest.warns(UserWarning):
        text = build_text(tmp_path)
    assert "results.jsonl:2: skipped: unknown schema version 99" in text
    assert "results.jsonl:3: skipped: train field 'epochs' is '15'; expected a whole number" in text
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
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------- the numbers

def test_one_machine_cpu_env_against_gpu_env(tmp_path):
    text = build_text(write_run(tmp_path, [train("cpu", 100.0), train("gpu", 70.0)]))
    cpu, gpu = table_rows(text, "MNIST MLP h1000")
    headers = report.training.TRAINING_HEADERS
    saved, speedup = headers.index("time saved vs CPU env"), headers.index("speedup")
    assert (cpu[1], cpu[saved], cpu[speedup]) == ("vm · cpu", "baseline", "1.00x")
    assert (gpu[1], gpu[saved], gpu[speedup]) == ("vm · gpu", "30%", "1.43x")


def test_two_machines_each_compare_with_their_own_cpu_env(tmp_path):
    a = write_run(tmp_path / "a", [train("cpu", 100.0, host="a"), train("gpu", 80.0, host="a")])
    b = write_run(tmp_path / "b", [train("cpu", 200.0, host="b"), train("gpu", 50.0, host="b")])
    rows = table_rows(build_text(a, b), "MNIST MLP h1000")
    saved, speedup = (report.training.TRAINING_HEADERS.index(h)
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
    (1.6, "the GPU wins from n = 2000 (n = 500–3000 paired) when products stream"),
    (0.1, "the GPU wins at every paired size (n = 500–3000) when products stream"),
    (9.0, "the GPU wins at no paired size (n = 500–3000) when products stream"),
])
def test_matmul_crossover_is_where_the_lines_cross(tmp_path, gpu_seconds, words):
    text = build_text(write_run(tmp_path, _sweep(gpu_seconds)))
    assert (f"- **gpu float32 vs CPU float32**: 6 sizes paired; {words} (product time: the "
            "streaming crossover).") in text
    assert "- Pairing: vm · gpu's GPU timings against the CPU timings of the same env" in text


def test_the_crossover_is_where_the_gpu_wins_from_then_on_not_a_lucky_size():
    from gpubench.report.inputs import crossover

    assert crossover([(500, 0.5), (1000, 1.2), (1500, 0.9), (2000, 1.5), (2500, 3.0)]) == 2000
    assert crossover([(500, 2.0), (1000, 0.5)]) is None
    assert report.matmul.crossover_words([(500, 2.0), (1000, 0.5)]) == (
        "only at n = 500, not at the largest paired (n = 1000)")


def test_a_gpu_sweep_without_a_cpu_sweep_claims_no_crossover_and_draws_no_speedup(tmp_path):
    gpu_only = [r for r in _sweep(0.1) if r["device"] != "cpu"]
    text = build_text(write_run(tmp_path, gpu_only))
    assert "vm · gpu timed no CPU, and this machine has no CPU env of the same backend" in text
    assert "no speedup and no crossover to give" in text
    assert "wins" not in _section(text, "## Matrix multiplication")
    assert "No speedup chart: no GPU timing pairs with a CPU timing" in text
    assert not (tmp_path / "matmul_speedup.png").exists()
    assert (tmp_path / "matmul_time.png").exists()


def test_a_model_the_cpu_env_did_not_train_is_not_its_own_baseline(tmp_path):
    text = build_text(write_run(tmp_path, [train("cpu", 100.0),
                                           train("gpu", 70.0, model="mnist_cnn")]))
    row = next(line for line in text.splitlines() if line.startswith("| MNIST CNN"))
    assert "n/a (no MNIST CNN run in vm · cpu)" in row and "baseline" not in row


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


# ---------------------------------------------------------------- modes, noise, factors

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
    assert lines == ["**Not like for like:** MNIST MLP h1000: vm · gpu ran XLA on, "
                     "mixed_float16; its baseline vm · cpu: XLA off, float32."]
    assert cell(table_rows(text, "MNIST MLP h1000")[1], "mode").startswith("XLA on, mixed_float16")


@pytest.mark.parametrize("iqr,flagged", [(0.25, True), (0.2, False), (0.05, False)])
def test_unstable_epoch_times_are_flagged_with_their_range(tmp_path, iqr, flagged):
    epochs = [3.0, 0.9, 1.0, 1.0, 1.4, 1.0]
    record = train("cpu", 100.0, epoch_seconds=epochs, steady_epoch_seconds=1.0,
                   steady_epoch_iqr=iqr)
    text = build_text(write_run(tmp_path, [record]))
    line = ("- **unstable**: vm · cpu MNIST MLP h1000 on cpu: steady epochs 0.90–1.4 s "
            f"(IQR {100 * iqr:.0f}% of the median); the table's steady epoch is their median")
    assert (line in text) is flagged
    assert ("**unstable**" in text) is flagged
    assert "steady_epoch_min" not in text  # advice names only what the report shows


@pytest.mark.parametrize("low,high,shown", [
    (0.638, 1.0, "0.64–1.0 s"), (6.2, 11.4, "6.2–11 s"), (39.1, 118.0, "39–118 s"),
    (0.991, 0.994, "0.991–0.994 s"), (0.0123, 0.05, "0.012–0.050 s")])
def test_ranges_read_with_an_en_dash_and_two_significant_figures(low, high, shown):
    assert fmt.fmt_range(low, high) == shown


def test_unstable_speed_factors_variants_are_named_as_the_factors_table_names_them(tmp_path):
    noisy = {"steady_epoch_seconds": 0.8, "steady_epoch_iqr": 0.25}
    records = [_factor("baseline", [3.0, 1.0, 1.0, 1.0]),
               _factor("input_pipeline", [3.0, 0.638, 1.0, 0.7], input_pipeline="tf.data",
                       **noisy),
               _factor("input_pipeline", [3.0, 0.5, 0.9, 0.6], input_pipeline="on_device",
                       **noisy),
               _factor("batch_size", [2.0, 0.4, 0.8, 0.5], batch_size=1024, **noisy)]
    text = build_text(write_run(tmp_path, records))
    variants = {row[1] for row in table_rows(_section(text, "## Speed factors"), "cpu")}
    lines = [line for line in text.splitlines() if line.startswith("- **unstable**")]
    named = [line.partition(", variant ")[2].partition(" on cpu:")[0] for line in lines]
    assert named == ["tf.data", "on_device", "batch 1024"] and set(named) <= variants
    assert lines[0].startswith("- **unstable**: vm · cpu Speed_Factors MNIST MLP h1000, variant "
                               "tf.data on cpu: steady rounds 0.64–1.0 s (IQR 31% of the median)")
    # the advice points at a column the report prints, never at a field it does not show
    assert all('"x vs baseline (min)" in the factors table' in line for line in lines)
    assert "| [x vs baseline (min)](#glossary) |" in text and "steady_epoch_min" not in text


def test_matmul_shows_percent_of_datasheet_peak_where_known(tmp_path):
    records = [matmul("gpu", "gpu", 1000, 0.01, spec_peak_gflops=800.0),
               matmul("gpu", "cpu", 1000, 0.1)]
    cpu, gpu = table_rows(build_text(write_run(tmp_path, records)), "1000")
    assert cpu[1:] == ["100 ms", "20"] and gpu[1:] == ["10 ms", "200", "25%"]


def test_the_books_timing_has_its_own_panel_with_the_books_figures_dashed():
    from matplotlib.figure import Figure

    records = _sweep(1.6) + [matmul("gpu", "gpu", 500, 2.0, method="book")]
    measured, book_ax = Figure().subplots(1, 2)
    plots.plot(records, "seconds", measured)
    plots.plot_book(records, book_ax)
    assert not any("book" in line.get_label() for line in measured.get_lines())
    book = [line for line in book_ax.get_lines() if line.get_label().startswith(
        "the book: GeForce GT 720") or line.get_label().startswith("the book: its CPU")]
    assert len(book) == 2 and all(line.get_linestyle() == "--" for line in book)
    assert list(book[0].get_xdata()) == [500, 1000, 2000, 3000, 4000, 5000]
    assert [line.get_label() for line in book_ax.get_lines()][0] == (
        "gpu (book's single timing)")


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
    rows = {row[1]: row for row in table_rows(section, "cpu")}  # report.factors.table's rows by variant
    assert rows["batch 1000"][2] == "2.00x" and "faster" in " ".join(rows["batch 1000"])
    assert "no clear effect" in rows["XLA on"]
    assert (tmp_path / "speed_factors.png").exists()
    assert len(table_rows(text, "MNIST MLP h1000")) == 1  # variants stay out of the book's table


def test_percent_of_matmul_divides_by_the_peak_probe_and_explains_a_share_over_100(tmp_path):
    # 2 * 1000**3 / 0.01 s: a peak of 200 GFLOP/s; the sweep's faster product is no reference
    records = [_factor("baseline", [3.0, 1.0, 1.0, 1.0], achieved_gflops=100.0),
               _factor("batch_size", [2.0, 0.5, 0.5, 0.5], batch_size=1000,
                       achieved_gflops=300.0),
               matmul("cpu", "cpu", 1000, 0.01, method="peak"),
               matmul("cpu", "cpu", 1000, 0.001)]
    text = build_text(write_run(tmp_path, records))
    section = text[text.index("## Speed factors"):]
    rows = {row[1]: row for row in table_rows(section, "cpu")}
    pct = report.factors.HEADERS.index("% of matmul")
    assert rows["baseline (book)"][pct] == "50%" and rows["batch 1000"][pct] == "150%*"
    assert "\\* Over 100 % of the matmul peak: cpu batch 1000 (150 %)." in section
    assert "Peak (the peak probe, n = 1000): cpu at float32: 200 GFLOP/s" in text
    matmul_table = text[text.index("## Matrix multiplication"):text.index("## Speed factors")]
    assert "peak" not in table_rows(matmul_table, "[size](#glossary)")[0]  # no sweep column
    # without the probe: n/a, no note, and the columns' note says the probe did not run
    text = build_text(write_run(tmp_path / "no_probe", records[:2] + records[3:]))
    section = text[text.index("## Speed factors"):]
    assert {row[pct] for row in table_rows(section, "cpu")} == {"n/a"}
    assert "Over 100 %" not in section
    assert "n/a: the probe did not run there" in _section(text, "## Glossary")


# ---------------------------------------------------------------- scaling

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
    assert table_rows(text[text.index("## Scaling"):], "vm · cpu")[:3] == [
        ["vm · cpu", "–", "mirrored", "1", "1", "virtual (2 on one CPU)", "100", "1,000",
         "1,000", "100%", "–", "ring", "0.900"],
        ["vm · cpu", "–", "mirrored", "1", "2", "virtual (2 on one CPU)", "200", "1,500",
         "2,000", "75%", "–", "ring", "0.900"],
        ["vm · cpu", "–", "multi_worker", "2", "2", "cpu", "200", "1,800", "2,000", "90%", "–",
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


# ---------------------------------------------------------------- backends

def book_rows(text: str) -> list[list[str]]:
    """The MLP rows of the book's table."""
    return table_rows(_section(text, "## Training"), "MNIST MLP h1000")


def _saved_speedup(row: list[str]) -> tuple[str, str]:
    return cell(row, "time saved vs CPU env"), cell(row, "speedup")


def test_each_gpu_env_compares_with_the_cpu_env_of_its_own_backend(tmp_path):
    records = [train("cpu", 100.0), train("gpu", 50.0), train("jax-cpu", 80.0),
               train("jax-gpu", 20.0)]
    rows = {row[1]: row for row in book_rows(build_text(write_run(tmp_path, records)))}
    assert list(rows) == ["vm · cpu", "vm · gpu", "vm · jax-cpu", "vm · jax-gpu"]
    assert _saved_speedup(rows["vm · gpu"]) == ("50%", "2.00x")  # against cpu (100 s)
    assert _saved_speedup(rows["vm · jax-gpu"]) == ("75%", "4.00x")  # against jax-cpu (80 s)
    assert _saved_speedup(rows["vm · jax-cpu"]) == ("baseline", "1.00x")


def test_a_gpu_env_without_a_cpu_env_of_its_backend_is_never_compared_across_backends(tmp_path):
    rows = book_rows(build_text(write_run(tmp_path, [train("cpu", 100.0),
                                                     train("jax-gpu", 20.0)])))
    assert [row[1] for row in rows] == ["vm · cpu", "vm · jax-gpu"]
    assert _saved_speedup(rows[1]) == ("n/a (no jax-cpu env)", "–")


def _section(text: str, heading: str) -> str:
    """The text of the section starting at `heading`, up to the next "## " heading."""
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_backends_section_puts_one_model_on_one_device_side_by_side(tmp_path):
    # The book's MLP on one CPU: TensorFlow XLA off 5.7 s, XLA on (another machine label) and
    # JAX 3.9 s per steady epoch, 55,000 images.
    tf_off = train("cpu", 90.0, steady_epoch_seconds=5.7, samples_per_second=55000 / 5.7)
    jax = train("jax-cpu", 60.0, steady_epoch_seconds=3.9, samples_per_second=55000 / 3.9,
                jit_compile=True)
    text = build_text(write_run(tmp_path, [tf_off, jax]))
    section = _section(text, "## Backends: TensorFlow vs JAX")
    rows = table_rows(section, "MNIST MLP h1000")
    header = report.training.BACKEND_HEADERS
    assert [(r[header.index("backend")], r[header.index("steady epoch")],
             r[header.index("images/s")], r[header.index("ratio")]) for r in rows] == [
        ("TensorFlow 2.21", "5.7 s", "9,649", "1.00x (reference)"),
        ("JAX 0.10.0", "3.9 s", "14,103", "1.46x")]
    like = rows[1][header.index("like for like?")]
    assert like.startswith("**not like for like**: XLA on against XLA off")
    assert "JAX always compiles" in like and "xla=on" in like
    # The time saved stays within each backend: no JAX row is measured against TensorFlow's.
    assert _saved_speedup(book_rows(text)[1]) == ("baseline", "1.00x")


def test_backends_in_the_same_mode_are_like_for_like(tmp_path):
    records = [train("cpu", 70.0, steady_epoch_seconds=4.7, jit_compile=True),
               train("jax-cpu", 60.0, steady_epoch_seconds=3.9, jit_compile=True)]
    rows = table_rows(_section(build_text(write_run(tmp_path, records)), "## Backends"),
                      "MNIST MLP h1000")
    assert rows[1][report.training.BACKEND_HEADERS.index("like for like?")] == "yes"
    # images/s from the training images and the steady epoch when the record has no rate
    assert rows[1][report.training.BACKEND_HEADERS.index("images/s")] == "14,103"


def test_backends_on_different_devices_or_machines_are_not_put_side_by_side(tmp_path):
    records = [train("cpu", 70.0), train("jax-gpu", 10.0),
               train("jax-cpu", 60.0, host="other")]
    text = build_text(write_run(tmp_path, records))
    assert "## Backends" not in text


def test_the_environment_table_shows_each_backend_and_its_version(tmp_path):
    text = build_text(write_run(tmp_path, [train("cpu", 70.0), train("jax-cpu", 60.0)]))
    rows = {row[0]: row for row in table_rows(text, "vm · cpu") + table_rows(text, "vm · jax-cpu")
            if len(row) == len(report.document.ENVIRONMENT_HEADERS)}
    backend = report.document.ENVIRONMENT_HEADERS.index("backend")
    assert rows["vm · cpu"][backend] == "TensorFlow 2.21 (CPU-only build), Keras 3.15"
    assert rows["vm · jax-cpu"][backend] == "JAX 0.10.0 (CPU-only build), Keras 3.15"
    assert "| TF " not in text


def test_a_schema_2_line_is_skipped_naming_its_version(tmp_path):
    old = {k: v for k, v in train("cpu", 100.0).items() if k not in ("backend", "telemetry")}
    (tmp_path / "results.jsonl").write_text(json.dumps({**old, "schema": 2}) + "\n"
                                            + json.dumps(train("gpu", 50.0)) + "\n")
    with pytest.warns(UserWarning, match="results.jsonl:1: skipped: schema version 2, older"):
        text = build_text(tmp_path)
    assert "results.jsonl:1: skipped: schema version 2, older than the 4 this gpubench" in text
    [row] = table_rows(text, "MNIST MLP h1000")  # the schema-4 record alone, with no baseline
    assert _saved_speedup(row) == ("n/a (no cpu env)", "–")


# ---------------------------------------------------------------- telemetry

def _telemetry(**figures) -> dict:
    return {**results.unmeasured(None), **figures}


def _gpu_run(busy: float, **fields) -> dict:
    """A GPU train record of 15 epochs, 55,000 images each, busy `busy` % in the steady epochs."""
    telemetry = _telemetry(source="nvml", gpu_util_percent_mean=busy, power_watts_mean=150.0,
                           energy_joules=15 * 1100.0, energy_method="counter",
                           cpu_util_percent_mean=98.0, sm_clock_mhz_mean=1900.0,
                           **fields.pop("figures", {}))
    return train("gpu", 150.0, device="gpu:0", telemetry=telemetry,
                 epoch_gpu_util_percent=[5.0] + [busy] * 14, epoch_energy_joules=[1100.0] * 15,
                 epoch_cpu_util_percent=[98.0] * 15, **fields)


def test_a_gpu_busy_23_percent_is_diagnosed_and_its_energy_shown(tmp_path):
    cpu = train("cpu", 300.0, telemetry=_telemetry(cpu_util_percent_mean=196.0,
                                                  reason="no NVIDIA driver"))
    text = build_text(write_run(tmp_path, [cpu, _gpu_run(23.0)]))
    section = _section(text, "## Telemetry")
    headers = report.telemetry.TELEMETRY_HEADERS
    gpu = table_rows(section, "vm · gpu")[0]
    assert dict(zip(headers, gpu, strict=True)) == {
        "machine · env": "vm · gpu", "run": "MNIST MLP h1000", "device": "gpu:0",
        "GPU busy": "23 %", "GPU mean power": "150 W", "GPU energy per steady epoch": "1,100 J",
        "images per joule (GPU)": "50.0", "CPU use (one core = 100 %)": "98 %",
        "CPU energy per epoch": "n/a (no RAPL on this machine)", "images per joule (CPU)": "n/a"}
    cpu_row = table_rows(section, "vm · cpu")[0]
    assert cpu_row[headers.index("GPU busy")] == "n/a"
    assert cpu_row[headers.index("CPU use (one core = 100 %)")] == "196 %"
    assert ("- vm · gpu MNIST MLP h1000 on gpu:0: GPU busy 23 % of the epoch: it waits on the "
            "input feed or on Python between steps; see Speed_Factors' input pipelines and steps "
            "per execution.") in section
    assert "energy (all epochs)" not in text  # the telemetry table's per-epoch figure is the one


def test_a_busy_gpu_has_no_busy_finding_and_power_cap_epochs_are_counted(tmp_path):
    record = _gpu_run(91.0, figures={"cpu_energy_joules": 1500.0, "cpu_energy_method": "rapl",
                                     "clock_event_reasons": ["sw_power_cap"]},
                      epoch_clock_event_reasons=[[]] * 11 + [["sw_power_cap"]] * 4)
    text = build_text(write_run(tmp_path, [record]))
    section = _section(text, "## Telemetry")
    assert "GPU busy 91 %" not in section
    assert "clocks held back by the power cap in 4 of 15 epochs" in section
    assert table_rows(section, "vm · gpu")[0][
        report.telemetry.TELEMETRY_HEADERS.index("CPU energy per epoch")] == "100 J"


def test_no_telemetry_section_where_nothing_was_measured(tmp_path):
    assert "## Telemetry" not in build_text(write_run(tmp_path, [train("cpu", 10.0)]))


# ---------------------------------------------------------------- records that cannot be used

def _finite(value):
    """`value` with every NaN or infinity in it made null, as the writer stores them."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _lines_with(tmp_path: Path, records: list[dict]) -> Path:
    """A run dir whose results.jsonl has `records` as they are (no validation, NaN as null)."""
    (tmp_path / "results.jsonl").write_text(
        "".join(json.dumps(_finite(r)) + "\n" for r in records))
    return tmp_path


@pytest.mark.parametrize("field,value,words", [
    ("method", None, "matmul field 'method' is null; the report needs a non-empty string"),
    ("seconds", -1, "matmul field 'seconds' is -1; the report needs a finite number > 0"),
    ("call_seconds", 0, "matmul field 'call_seconds' is 0; the report needs a finite number > 0"),
    ("size", 10**30, "matmul field 'size' is 1000000000000000000000000000000; the report needs "
                     "a whole number >= 1"),
])
def test_a_matmul_record_the_report_cannot_use_is_skipped_naming_line_and_field(
        tmp_path, field, value, words):
    records = _sweep(1.6)[:4]
    records[2] = {**records[2], field: value}
    with pytest.warns(UserWarning, match="results.jsonl:3: skipped"):
        text = build_text(_lines_with(tmp_path, records))
    assert f"results.jsonl:3: skipped: {words}" in text
    assert "## Matrix multiplication" in text


def test_a_matmul_record_whose_gflops_is_null_is_shown_without_it(tmp_path):
    records = [{**matmul("gpu", "gpu", 1000, 0.01), "gflops": float("nan")},
               matmul("gpu", "cpu", 1000, 0.1)]
    cpu, gpu = table_rows(build_text(_lines_with(tmp_path, records)), "1000")
    assert cpu[1:] == ["100 ms", "20"] and gpu[1:] == ["10 ms"]  # no GFLOP/s column of dashes


@pytest.mark.parametrize("field,value,path", [
    ("model", None, "model"), ("dataset", [], "dataset"), ("epoch_seconds", -1, "epoch_seconds"),
    ("epoch_seconds", [1.0, "x"], "epoch_seconds"), ("total_seconds", "12", "total_seconds"),
    ("train_samples", 0, "train_samples"), ("jit_compile", "yes", "jit_compile"),
])
def test_a_train_record_the_report_cannot_use_is_skipped_and_the_rest_reported(
        tmp_path, field, value, path):
    records = [train("cpu", 100.0), {**train("gpu", 50.0), field: value}]
    with pytest.warns(UserWarning, match="results.jsonl:2: skipped") as warned:
        text = build_text(_lines_with(tmp_path, records))
    assert f"results.jsonl:2: skipped: train field {path!r} " in str(warned[0].message)
    assert str(warned[0].message) in text
    assert [row[1] for row in table_rows(text, "MNIST MLP h1000")] == ["vm · cpu"]


def test_a_bad_environment_field_costs_only_itself(tmp_path):
    bad = train("gpu", 50.0)
    bad["environment"] = {**bad["environment"], "hostname": 3}
    with pytest.warns(UserWarning, match="results.jsonl:2: train field 'environment.hostname' "
                                         "is 3, dropped"):
        text = build_text(_lines_with(tmp_path, [train("cpu", 100.0), bad]))
    assert len(table_rows(text, "MNIST MLP h1000")) == 2 and "skipped" not in text


def test_a_record_not_ok_keeps_its_row_whatever_its_measurements_say(tmp_path):
    failed = {**train("gpu", 50.0), "status": "oom", "error": "ResourceExhaustedError: OOM",
              "epoch_seconds": "x", "total_seconds": -1, "telemetry": "x"}
    text = build_text(_lines_with(tmp_path, [train("cpu", 100.0), failed]))
    assert cell(table_rows(text, "MNIST MLP h1000")[1], "total time") == "OOM"
    assert "**oom** ResourceExhaustedError: OOM" in text


def test_non_utf8_bytes_and_a_bom_cost_one_line_not_the_report(tmp_path):
    good = [json.dumps(train("cpu", 100.0)).encode(), json.dumps(train("gpu", 50.0)).encode()]
    (tmp_path / "results.jsonl").write_bytes(
        rundir.BOM + good[0] + b"\n" + b'{"schema": 3, "env": "\xd4\xff"}\n' + good[1] + b"\n")
    with pytest.warns(UserWarning, match=r"results.jsonl:2: skipped: not UTF-8 text \(byte 0xd4"):
        text = build_text(tmp_path)
    assert [row[1] for row in table_rows(text, "MNIST MLP h1000")] == ["vm · cpu", "vm · gpu"]
    assert "results.jsonl:2: skipped: not UTF-8" in text


def test_results_jsonl_that_is_a_directory_is_named_and_the_jobs_still_listed(tmp_path):
    (tmp_path / "results.jsonl").mkdir()
    (tmp_path / "run.json").write_text(json.dumps({"jobs": [job("cpu", "Mnist_CNN", "ok")]}))
    with pytest.warns(UserWarning, match="cannot read results from .*: it is a directory"):
        text = build_text(tmp_path)
    assert "it is a directory" in text and table_rows(text, tmp_path.name)


# ---------------------------------------------------------------- a run always has a report

@pytest.mark.parametrize("results_file", [None, ""])
def test_a_run_that_recorded_nothing_gets_a_report_listing_every_job(tmp_path, results_file):
    if results_file is not None:
        (tmp_path / "results.jsonl").write_text(results_file)
    jobs = [job("gpu", "Mnist_CNN", "failed", "GPUNotAvailableError: no GPU\nTraceback"),
            job("gpu", "performanceTest", "skipped", "env 'gpu' is not set up"),
            job("cpu", "Keras_Cifar_CNN", "running"), job("cpu", "Speed_Factors", "pending")]
    (tmp_path / "run.json").write_text(json.dumps({"jobs": jobs}))
    assert report.find_runs([str(tmp_path)]) == [tmp_path]
    text = build_text(tmp_path)
    assert "No results were recorded." in text
    assert table_rows(text, tmp_path.name) == [
        [tmp_path.name, "gpu", "Mnist_CNN", "failed", "GPUNotAvailableError: no GPU"],
        [tmp_path.name, "gpu", "performanceTest", "skipped", "env 'gpu' is not set up"],
        [tmp_path.name, "cpu", "Keras_Cifar_CNN", "running", report.document.JOB_WHY["running"]],
        [tmp_path.name, "cpu", "Speed_Factors", "pending", "not started yet"]]


def test_find_runs_takes_a_run_json_alone_and_refuses_a_folder_without_either(tmp_path,
                                                                              monkeypatch):
    (tmp_path / "runs" / "20260101T000000Z").mkdir(parents=True)
    (tmp_path / "runs" / "20260101T000000Z" / "run.json").write_text('{"jobs": []}')
    (tmp_path / "runs" / "empty").mkdir()
    monkeypatch.setattr(results, "runs_dir", lambda: tmp_path / "runs")
    monkeypatch.delenv("GPUBENCH_RUN_DIRS", raising=False)
    assert report.find_runs() == [tmp_path / "runs" / "20260101T000000Z"]
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        report.find_runs([str(tmp_path / "runs" / "empty")])


def test_a_report_of_a_live_run_says_which_jobs_are_still_running(tmp_path):
    jobs = [job("cpu", "Mnist_MLP_h1000", "ok"), job("cpu", "Mnist_CNN", "running"),
            job("gpu", "Mnist_CNN", "pending")]
    text = build_text(write_run(tmp_path, [train("cpu", 10.0)], jobs))
    assert ("> **This run has not finished** (running: cpu/Mnist_CNN; not started yet: "
            "gpu/Mnist_CNN).") in text
    assert f"gpubench run --resume {tmp_path}`" in text
    assert "What went wrong" not in text  # running is not wrong
    finished = build_text(write_run(tmp_path, [], [job("cpu", "Mnist_MLP_h1000", "ok")]))
    assert "not finished" not in finished


def test_two_processes_writing_reports_in_a_loop_never_fail(tmp_path):
    script = ("import sys; from pathlib import Path; from gpubench import report\n"
              "for i in range(150):\n"
              "    report.document.write(Path(sys.argv[1]), f'report {i}', {})\n")
    writers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=REPO,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [w.communicate(timeout=120)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    assert (tmp_path / "report.md").read_text().startswith("report ")
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_a_chart_that_cannot_be_drawn_costs_only_that_chart(tmp_path, monkeypatch):
    write_run(tmp_path, [train("cpu", 100.0), train("gpu", 70.0)])

    def cannot(self, *args, **kwargs):
        raise ValueError("Axis limits cannot be NaN or Inf")

    monkeypatch.setattr(Figure, "savefig", cannot)
    with pytest.warns(UserWarning, match="chart epoch_times.png not drawn"):
        text = build_text(tmp_path)
    assert "_Chart epoch_times.png not drawn: Axis limits cannot be NaN or Inf._" in text
    assert "![" not in text and table_rows(text, "MNIST MLP h1000")


# ---------------------------------------------------------------- no framework for a report

def test_gpubench_report_loads_neither_tensorflow_nor_jax(tmp_path):
    write_run(tmp_path, [train("cpu", 100.0), train("gpu", 70.0), train("jax-cpu", 60.0)]
              + _sweep(1.6))
    script = ("import sys; from gpubench import cli\n"
              f"code = cli.main(['report', {str(tmp_path)!r}])\n"
              "print(code, sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'jax', "
              "'keras', 'jaxlib'}))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "0 []"
    assert "## Backends: TensorFlow vs JAX" in (tmp_path / "report.md").read_text()


# ---------------------------------------------------------------- fuzzing single fields

def _fuzz_base() -> list[dict]:
    """Valid records of every kind the report shows: a sweep, the book's table with telemetry,
    two backends, Speed_Factors (one variant time-boxed) and scaling."""
    return [*_sweep(1.6)[:4], matmul("gpu", "gpu", 500, 0.4, method="book", first_seconds=0.2),
            matmul("gpu", "gpu", 500, 0.1, first_seconds=0.3, spec_peak_gflops=900.0),
            train("cpu", 100.0, telemetry=_telemetry(cpu_util_percent_mean=196.0)),
            _gpu_run(23.0, epoch_clock_event_reasons=[["sw_power_cap"]] * 15),
            train("jax-cpu", 60.0, jit_compile=True),
            _factor("baseline", [3.0, 1.0, 1.0, 1.0]),
            _factor("batch_size", [2.0, 0.5, 0.5, 0.5], batch_size=1000),
            _factor("precision", [9.0, 8.0, 8.0], precision="mixed_float16", time_boxed=True,
                    steps_measured=4),
            _factor("combined", [2.0, 0.5, 0.4], paired_baseline_seconds=[3.0, 1.0, 1.0]),
            _scaling(1, 1000.0, 1.0, virtual_devices=2, devices=["cpu:0"]),
            _scaling(2, 1500.0, 0.75, virtual_devices=2, epochs=3, train_samples=1000)]


_BAD_VALUES = [None, -1, -0.5, 0, float("nan"), float("inf"), [], {}, "x", "", True, 1e308,
               -1e308, 10**30, 2**53 + 1, [1, "x"], [None], [-1.0], {"a": []}, [[1]], "DELETE"]


def _paths(record: dict) -> list[str]:
    """Every field of `record`, and every field of its environment and telemetry objects."""
    paths = [k for k in record if not k.startswith("_")]
    for owner in ("environment", "telemetry"):
        paths += [f"{owner}.{k}" for k in (record.get(owner) or {})]
    return sorted(paths)


def _mutated(record: dict, path: str, value) -> dict:
    record = json.loads(json.dumps(record))  # a deep copy
    owner, _, name = path.rpartition(".")
    holder = record[owner] if owner else record
    if value == "DELETE":
        del holder[name]
    else:
        holder[name] = value
    return record


@pytest.mark.slow  # every field of every record kind, mutated: in `make test`, not `make check`
def test_any_single_field_mutation_is_reported_or_skipped_with_a_warning_never_raised(tmp_path):
    import tempfile
    import warnings

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    base = _fuzz_base()
    clean, _ = report.compose([_lines_with(tmp_path, base)], draw=False)

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def one(data):
        index = data.draw(st.integers(0, len(base) - 1), label="record")
        path = data.draw(st.sampled_from(_paths(base[index])), label="field")
        value = data.draw(st.sampled_from(_BAD_VALUES), label="value")
        charts = data.draw(st.integers(1, 20), label="charts if 13") == 13  # the slow part
        records = [*base[:index], _mutated(base[index], path, value), *base[index + 1:]]
        with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            text, _ = report.compose([_lines_with(Path(folder), records)], draw=charts)
        skips = [str(w.message) for w in seen if "skipped" in str(w.message)]
        assert all(f"results.jsonl:{index + 1}: skipped: " in s for s in skips), skips
        assert text.startswith("# gpubench report")
        assert all(s in text for s in skips)  # each skip is named in the report too

    one()
    assert "## Backends: TensorFlow vs JAX" in clean and "## Telemetry" in clean
    assert "## Speed factors" in clean and "## Scaling" in clean and "What went wrong" not in clean


@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:Tight layout not applied",
                            "ignore:chart .* not drawn")
@pytest.mark.parametrize("path,value", [("seconds", 1e308), ("total_seconds", 1e308),
                                        ("steady_epoch_seconds", 1e308), ("gflops", 1e308),
                                        ("first_epoch_seconds", 1e-300)])
def test_extreme_numbers_still_give_a_report_and_each_chart_or_why_not(tmp_path, path, value):
    records = [train("cpu", 100.0), train("gpu", 70.0), *_sweep(1.6)[:4]]
    records = [({**r, path: value} if path in r and r["status"] == "ok" else r) for r in records]
    text = build_text(_lines_with(tmp_path, records))
    assert "skipped" not in text and table_rows(text, "MNIST MLP h1000")
    for name in ("epoch_times.png", "matmul_time.png", "matmul_gflops.png", "matmul_speedup.png"):
        assert (tmp_path / name).exists() or f"_Chart {name} not drawn: " in text


# ---------------------------------------------------------------- every table explained

def _tables(text: str) -> list[list[str]]:
    """The headers of each Markdown table of `text`."""
    lines = text.splitlines()
    return [[c.strip() for c in line.strip("|").split("|")] for i, line in enumerate(lines)
            if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))]


# Headers a newcomer cannot read without a word of explanation.
NOT_OBVIOUS = ["mode", "steady epoch", "first epoch", "time saved vs CPU env", "speedup",
               "ratio", "like for like?", "GPU busy",
               "CPU use (one core = 100 %)", "images per joule (GPU)", "x vs baseline (min)",
               "median x", "interval", "steps", "% of matmul", "GFLOP/s", "variant",
               "scaling efficiency", "global batch", "replicas", "all-reduce", "status", "size"]


def test_every_header_that_needs_a_word_links_to_its_one_definition_in_the_glossary(tmp_path):
    jobs = [job("cpu", "Mnist_CNN", "failed", "ValueError: epochs must be positive")]
    write_run(_lines_with(tmp_path, _fuzz_base()), [], jobs)  # run.json beside the records
    text = build_text(tmp_path)
    tables, glossary = _tables(text), _section(text, "## Glossary")
    # book, backends, telemetry, matmul (cpu and gpu), factors, scaling, jobs, envs
    assert len(tables) == 9 and "Columns:" not in text
    explained = set()
    for headers in tables:
        for header in headers:
            plain = header.removeprefix("[").removesuffix("](#glossary)")
            if plain in NOT_OBVIOUS:
                assert header == f"[{plain}](#glossary)", header
                assert glossary.count(f"- **{plain}**: ") == 1, plain
                explained.add(plain)
    assert explained == set(NOT_OBVIOUS)
    variant = next(line for line in glossary.splitlines() if line.startswith("- **variant**"))
    assert "tf.data" in variant and "on_device" in variant  # the variants' names
    assert ("- **call latency**: one product from the call until its result is ready on the "
            "device (a sync)") in glossary and "on the host" not in text


def test_the_job_table_of_a_run_without_records_is_explained(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"jobs": [job("cpu", "Mnist_CNN", "failed",
                                                                "boom")]}))
    text = build_text(tmp_path)
    assert _tables(text) == [["run", "env", "notebook", "[status](#glossary)", "why"]]
    assert "- **status**: failed: the notebook raised an error" in text


# ---------------------------------------------------------------- nothing unreadable in a cell

def test_a_run_id_that_is_no_string_costs_its_line_not_the_report(tmp_path):
    records = [train("cpu", 100.0), train("gpu", 20.0)]
    records[1] = {**records[1], "run_id": []}
    with pytest.warns(UserWarning, match="results.jsonl:2: skipped"):
        text = build_text(_lines_with(tmp_path, records))
    assert "field 'run_id' is []; expected a string" in text
    assert [cell(row, "machine · env") for row in table_rows(text, "MNIST MLP h1000")] == ["vm · cpu"]


def test_records_the_checks_refuse_are_named_five_times_then_counted_once(tmp_path):
    good = train("cpu", 100.0)
    bad = [{**matmul("cpu", "cpu", 500 + n, 0.1), "method": None} for n in range(40)]
    with pytest.warns(UserWarning) as seen:
        text = build_text(_lines_with(tmp_path, [good, *bad]))
    said = [str(w.message) for w in seen if "skipped" in str(w.message)
            or "left out" in str(w.message)]
    assert len(said) == rundir.NAMED_UNREADABLE + 1, said
    assert [s.split(": skipped")[0].rsplit(":", 1)[1] for s in said[:-1]] == ["2", "3", "4", "5",
                                                                              "6"]
    assert said[-1].startswith("40 records or fields in all left out by the report's checks: "
                               "35 more after the 5 named")
    assert said[-1] in text and text.count("field 'method' is null") == 5


@pytest.mark.parametrize("path,value", [("dataset", "NaN"), ("data_source", "None"),
                                        ("env", "inf"), ("environment.hostname", " -0 ")])
def test_a_text_field_that_reads_as_a_broken_number_costs_its_record(tmp_path, path, value):
    from test_report_fuzz import _cells

    records = [train("cpu", 100.0), _mutated(train("gpu", 20.0), path, value)]
    with pytest.warns(UserWarning, match='results.jsonl:2: .*(skipped|dropped).*not "None", "nan"'):
        text = build_text(_lines_with(tmp_path, records))
    assert not [c for c in _cells(text) if value.strip() in c.split()]


def test_unknown_environment_details_show_the_missing_mark_not_none(tmp_path):
    record = train("cpu", 100.0)
    record["environment"].update(python=None, keras=1e308, cpu_count="x", ram_gb=-1,
                                 cpu_model="nan", gpus=[{"name": None, "memory_gb": None}])
    with pytest.warns(UserWarning, match="field .environment.keras. is 1e\\+308, dropped"):
        text = build_text(_lines_with(tmp_path, [{**record, "data_source": None}]))
    [row] = table_rows(text, "vm · cpu")
    assert row[1:6] == ["– (– cores, – GB)", "– (– GB, driver –)", "–",
                        "TensorFlow 2.21 (CPU-only build), Keras –", "Python –"]
    assert row[-1] == "mnist: –"


def test_the_no_gpu_note_names_a_command_that_exists_outside_a_checkout(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "checkout", lambda: None)  # gpubench installed from a wheel
    text = build_text(write_run(tmp_path, [train("cpu", 100.0)]))
    [note] = [line for line in text.splitlines() if line.startswith("> No GPU env")]
    assert "reference/h200-jax" in note and "`gpubench doctor --gpu`" in note
    assert "`make" not in note and "create it with" not in note


def test_the_mode_names_compiling_as_each_backend_calls_it():
    from gpubench.report import training as report_training

    record = {"jit_compile": False, "precision": "float32", "batch_size": 100,
              "steps_per_execution": 1, "input_pipeline": "arrays", "env": "torch-cpu",
              "backend": "torch"}
    assert report_training.mode(record)["jit_compile"] == "torch.compile off"
    record.update(backend="jax", env="jax-cpu", jit_compile=True)
    assert report_training.mode(record)["jit_compile"] == "XLA on"


# ---------------------------------------------------------------- damage and faults

def test_text_taken_from_a_record_is_capped_in_the_report_and_kept_whole_in_the_file(tmp_path):
    huge = "ValueError: " + "x" * 2_000_000
    failed = train("gpu", 50.0) | {"status": "error", "error": huge}
    text = build_text(write_run(tmp_path, [train("cpu", 100.0), failed]))
    assert len(text) < 50_000 and f"… ({len(huge) - fmt.TEXT_CAP:,} more characters)" in text
    assert huge in (tmp_path / "results.jsonl").read_text()


@pytest.mark.parametrize("name", ["results.jsonl", "run.json"])
def test_a_symlink_loop_is_named_and_the_report_goes_on(tmp_path, name):
    write_run(tmp_path, [train("cpu", 100.0)], [job("cpu", "Mnist_MLP_h1000", "ok")])
    (tmp_path / name).unlink()
    (tmp_path / name).symlink_to(tmp_path / name)  # a loop
    with pytest.warns(UserWarning, match=f"{name}: a symlink that leads nowhere"):
        text = build_text(tmp_path)
    assert f"{tmp_path / name}: a symlink that leads nowhere" in text


@pytest.mark.parametrize("depth", [500, 900, 100_000])
def test_a_run_json_nested_deep_is_named_and_the_report_goes_on(tmp_path, depth):
    write_run(tmp_path, [train("cpu", 100.0)])
    (tmp_path / "run.json").write_text('{"jobs": [{"env": "cpu", "notebook": "Mnist_CNN", '
                                       '"status": "ok", "extra": ' + "[" * depth + "]" * depth
                                       + "}]}")
    with pytest.warns(UserWarning, match="run.json: "):
        text = build_text(tmp_path)
    assert f"{tmp_path / 'run.json'}: " in text and table_rows(text, "MNIST MLP h1000")


def test_a_plain_report_removes_the_chart_temp_files_of_a_killed_writer(tmp_path):
    write_run(tmp_path, [train("cpu", 100.0)])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    leftover = tmp_path / f".epoch_times.png.{dead}.tmp"
    leftover.write_bytes(b"half a chart")
    build_text(tmp_path)
    assert not leftover.exists() and (tmp_path / "epoch_times.png").exists()


def test_a_full_disk_while_drawing_leaves_the_old_charts_and_no_part_of_the_new(
        tmp_path, monkeypatch):
    write_run(tmp_path, [train("cpu", 100.0), train("gpu", 70.0)] + _sweep(1.6))
    report.build([tmp_path])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".png", ".md")}
    saved = []

    def full(self, path, *args, **kwargs):
        if saved:
            raise OSError(errno.ENOSPC, "No space left on device")
        saved.append(path)
        Path(path).write_bytes(b"new")

    monkeypatch.setattr(Figure, "savefig", full)
    with pytest.raises(report.ReportWriteError, match="the disk is full"):
        report.build([tmp_path])
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".png", ".md")}
    assert after == before and not list(tmp_path.glob(".*.tmp"))


def test_a_record_at_1e308_lets_no_numpy_warning_reach_stderr(tmp_path):
    records = [train("cpu", 100.0), train("gpu", 70.0, total_seconds=1e308,
                                          steady_epoch_seconds=1e308), *_sweep(1.6)[:4]]
    _lines_with(tmp_path, records)
    out = subprocess.run([sys.executable, "-m", "gpubench", "report", str(tmp_path)],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "overflow" not in out.stderr and "RuntimeWarning" not in out.stderr


def test_speed_factors_chart_stays_readable_beside_a_variant_hundreds_of_times_slower(tmp_path):
    records = [_factor("baseline", [3.0, 1.0, 1.0, 1.0]),
               _factor("batch_size", [2.0, 0.5, 0.5, 0.5], batch_size=1000),
               _factor("xla", [2.0, 0.8, 0.8, 0.8], jit_compile=True),
               _factor("precision", [400.0, 368.0, 368.0, 368.0], precision="mixed_float16")]
    _, charts = report.compose([write_run(tmp_path, records)])
    ax = charts["speed_factors.png"].axes[0]
    low, high = ax.get_xlim()
    assert low > 0.05 and high < 20  # the 0.0027x bar does not squeeze the others
    assert any("368x slower, cut" in t.get_text() for t in ax.texts)
    assert "cut" in ax.get_xlabel()


def test_the_matmul_tables_put_float32_first(tmp_path):
    records = [{**matmul("gpu", "cpu", 1000, 0.1), "dtype": "bfloat16"},
               matmul("gpu", "cpu", 1000, 0.1)]
    text = build_text(write_run(tmp_path, records))
    assert text.index("**cpu at float32**") < text.index("**cpu at bfloat16**")


def test_an_intended_skip_is_not_listed_as_something_that_went_wrong(tmp_path):
    why = "Multi_GPU_Scaling needs 2 or more GPUs in the full profile"
    jobs = [job("cpu", "Mnist_MLP_h1000", "ok"), job("cpu", "Multi_GPU_Scaling", "skipped", why)]
    text = build_text(write_run(tmp_path, [train("cpu", 100.0)], jobs))
    assert "What went wrong" not in text
    assert f"Not run, on purpose: cpu/Multi_GPU_Scaling ({why})." in text


def test_a_run_json_job_whose_text_reads_as_a_broken_number_never_reaches_a_cell(tmp_path):
    from test_report_fuzz import FORBIDDEN, _cells

    jobs = [job("cpu", "NaN", "failed", "boom"), job("cpu", "Mnist_CNN", "failed", "None"),
            job("inf", "Mnist_CNN", "skipped", "-0")]
    with pytest.warns(UserWarning, match="run.json: job 1 is not as gpubench writes it"):
        text = build_text(write_run(tmp_path, [train("cpu", 100.0)], jobs))
    assert not [c for c in _cells(text) if FORBIDDEN.search(c)]
    assert table_rows(text, tmp_path.name) == [[tmp_path.name, "cpu", "Mnist_CNN", "failed", ""]]
