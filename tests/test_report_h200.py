"""The report read as a user of the stored NVIDIA H200 run (reference/h200-jax) reads it: the
GPU paired with the same machine's CPU, crossovers that name sizes, log axes, one GPU busy
figure, no "None" and no chart or bar for what did not run. Plus known records whose speedup,
crossover, alignment penalty and noise flag could not pass inverted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO
from gpubench import fmt, report, results

REFERENCE = REPO / "reference" / "h200-jax" / "results.jsonl"


def _write(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def _reference_lines(keep=lambda record: True) -> str:
    """The stored lines as they are (the reader turns their schema-3 rigorous timings, one call
    per sync, into call latency), those `keep` accepts."""
    return "".join(line + "\n" for line in REFERENCE.read_text().splitlines()
                   if line.strip() and keep(json.loads(line)))


@pytest.fixture(scope="module")
def h200(tmp_path_factory) -> tuple[str, dict, list[dict]]:
    """report.md's text, its charts and the loaded records of the H200 reference."""
    run = tmp_path_factory.mktemp("h200")
    (run / "results.jsonl").write_text(_reference_lines())
    text, charts = report.compose([run])
    return text, charts, report.load([run])


def test_the_speedup_pairs_every_gpu_dtype_and_timing_with_the_jax_cpu_env(h200):
    series = report.matmul.speedup_series(h200[2])
    keys = {(s["dtype"], s["quantity"]) for s in series}
    assert keys == {(d, q) for d in ("bfloat16", "float16", "float32") for q in ("call", "book")}
    assert {(s["column"], s["cpu_column"], s["cpu_dtype"]) for s in series} == {
        ("vm · jax-gpu", "vm · jax-cpu", "float32")}
    by = {(s["dtype"], s["quantity"]): dict(s["points"]) for s in series}
    # CPU over GPU, from the stored numbers: 0.2275 s / 0.00100 s, and 0.344 s / 2.058 s
    assert by[("float32", "call")][5000] == pytest.approx(0.2274681 / 0.0009998, rel=1e-4)
    assert by[("float32", "book")][500] == pytest.approx(0.3440296 / 2.0579299, rel=1e-4)
    assert sorted(by[("bfloat16", "call")]) == [500, 1000, 2000, 3000, 4000, 5000]  # 8192: no CPU


def test_the_crossover_sentences_name_the_pairing_and_the_sizes(h200):
    text = h200[0]
    assert ("- Pairing: vm · jax-gpu's GPU timings against the CPU timings of vm · jax-cpu, the "
            "same machine's JAX CPU env (vm · jax-gpu timed no CPU).") in text
    assert ("- **gpu:0 bfloat16 vs CPU float32**: the GPU wins at every size measured "
            "(n = 500–5000) for one product called alone (call latency); at no size measured "
            "(n = 500–5000) by the book's single timing (set-up included).") in text
    assert "no CPU measured" not in text


def test_old_rigorous_timings_read_as_call_latency_and_no_gflops_chart_is_drawn(h200):
    text, charts, _ = h200
    assert "These records hold no product time" in text
    assert "matmul_gflops.png" not in charts and "No GFLOP/s chart: no product time" in text
    gpu_bf16 = text.split("**gpu:0 at bfloat16**")[1].split("Columns:")[0]
    assert "| size | call latency | book's single timing |" in gpu_bf16
    assert "| 500 | 126 µs | 990 ms |" in gpu_bf16


def test_charts_spanning_more_than_a_decade_use_log_axes(h200):
    charts = h200[1]
    assert charts["matmul_speedup.png"].axes[0].get_yscale() == "log"
    measured, book = charts["matmul_time.png"].axes
    assert measured.get_yscale() == "log" and book.get_yscale() == "log"
    assert all("book" not in line.get_label() for line in measured.get_lines())


def test_gpu_busy_is_one_figure_in_the_table_the_text_and_the_chapters_line(h200):
    text, _, loaded = h200
    for model, busy in (("MNIST MLP h1000", "6 %"), ("MNIST CNN", "17 %"),
                        ("CIFAR-10 CNN", "28 %")):
        row = next(line for line in text.splitlines()
                   if line.startswith(f"| vm · jax-gpu | {model} | gpu:0 |"))
        assert row.split(" | ")[3] == busy
        assert f"- vm · jax-gpu {model} on gpu:0: GPU busy {busy} of the epoch" in text
    mlp = next(r for r in loaded if r.get("model") == "mlp_h1000" and r["env"] == "jax-gpu"
               and r["notebook"] == "Mnist_MLP_h1000")
    chapter = fmt.telemetry_line(mlp["telemetry"], mlp["epochs"], mlp["epoch_gpu_util_percent"])
    assert "busy 6 %" in chapter
    assert "the median over the steady epochs" in text


def test_no_none_nan_or_inf_reaches_the_reader(h200):
    text = h200[0]
    assert not re.search(r"\b(None|nan|NaN|inf|Infinity)\b", text)
    assert "JAX 0.11.2 (CUDA build; CUDA and cuDNN versions not recorded)" in text
    assert "JAX 0.11.2 (CUDA 13.0, cuDNN 9.19)" in text


def test_the_epoch_chart_has_no_bar_for_a_run_that_did_not_happen(h200):
    fig = h200[1]["epoch_times.png"]
    by_title = {ax.get_title(): ax for ax in fig.axes}
    cnn = by_title["MNIST CNN"]
    assert [t.get_text() for t in cnn.get_xticklabels()] == ["vm · jax-gpu"]
    assert all(bar.get_height() > 0 for ax in fig.axes for bar in ax.patches)
    assert [t.get_text() for t in by_title["MNIST MLP h1000"].get_xticklabels()] == [
        "vm · jax-cpu", "vm · jax-gpu"]


def test_the_report_says_its_profile_and_data_size_first(h200):
    lines = h200[0].splitlines()
    assert lines[4].startswith("Profile: **full** (the book's 15 epochs on all the training "
                               "images) · MNIST MLP h1000: 15 epochs on 55,000 images")
    assert "| MNIST CNN | vm · jax-gpu | gpu:0 |" in h200[0]
    row = next(line for line in lines if line.startswith("| CIFAR-10 CNN | vm · jax-gpu |"))
    assert "| 15 | 40,000 |" in row


def test_no_speedup_chart_where_nothing_pairs(tmp_path):
    (tmp_path / "results.jsonl").write_text(_reference_lines(lambda r: r["env"] == "jax-gpu"))
    text, charts = report.compose([tmp_path])
    assert "matmul_speedup.png" not in charts and "matmul_time.png" in charts
    assert "No speedup chart: no GPU timing pairs" in text
    assert "this machine has no CPU env of the same backend in these runs" in text


# ---------------------------------------------------------------- known records, schema 4

def _matmul(env: str, device: str, size: int, *, method: str = "rigorous", dtype: str = "float32",
            backend: str = "jax", **fields) -> dict:
    environment = {k: None for k in results.ENVIRONMENT_FIELDS}
    environment.update(hostname="box", gpus=[], cuda_build=False, keras="3.15", python="3.12",
                       backend=backend, cpu_model="Test CPU", cpu_count=2, ram_gb=4.0)
    record = results.make_record("matmul", notebook="performanceTest", env=env, device=device,
                                 size=size, dtype=dtype, method=method, repeats=5,
                                 environment=environment, **fields)
    return record | {"backend": backend}


def _rigorous(env: str, device: str, size: int, product: float, call: float, **fields) -> dict:
    return _matmul(env, device, size, seconds=product, call_seconds=call,
                   gflops=2 * size**3 / product / 1e9, **fields)


def test_streaming_and_single_call_crossovers_differ_and_cannot_be_inverted(tmp_path):
    # the GPU streams products faster from 1000, but one call alone pays 600 µs of launch and
    # sync, so it wins from 2000 only; the CPU's own env pairs first, the jax-cpu env is ignored
    records = [_rigorous("jax-gpu", "cpu", n, n / 1e6, n / 1e6 + 1e-5) for n in (500, 1000, 2000)]
    records += [_rigorous("jax-gpu", "gpu:0", n, p, p + 6e-4)
                for n, p in ((500, 6e-4), (1000, 5e-4), (2000, 1e-3))]
    records += [_rigorous("jax-cpu", "cpu", n, 1.0, 1.0) for n in (500, 1000, 2000)]
    text = report.compose([_write(tmp_path, records)], draw=False)[0]
    assert ("- **gpu:0 float32 vs CPU float32**: the GPU wins from n = 1000 (n = 500–2000 "
            "measured) when products stream (product time); from n = 2000 (n = 500–2000 "
            "measured) for one product called alone (call latency).") in text
    assert "against the CPU timings of the same env, as the book did" in text
    row = next(line for line in text.split("**gpu:0 at float32**")[1].splitlines()
               if line.startswith("| 1000 |"))
    assert row == "| 1000 | 500 µs | 4,000 | 1.1 ms | 600 µs |"  # product, GFLOP/s, call, overhead


def test_a_16_bit_gpu_dtype_pairs_with_the_cpus_float32_and_says_so(tmp_path):
    records = [_rigorous("jax-cpu", "cpu", 1000, 0.01, 0.01)]
    records += [_rigorous("jax-gpu", "gpu:0", 1000, 1e-4, 2e-4, dtype="bfloat16")]
    series = report.matmul.speedup_series(report.load([_write(tmp_path, records)]))
    assert [(s["dtype"], s["cpu_dtype"], s["quantity"], s["points"]) for s in series] == [
        ("bfloat16", "float32", "call", [(1000, pytest.approx(50.0))]),
        ("bfloat16", "float32", "product", [(1000, pytest.approx(100.0))])]


def test_the_alignment_penalty_is_stated_and_aligned_sizes_stay_off_the_lines(tmp_path):
    records = [_rigorous("jax-gpu", "cpu", 2500, 1.0, 1.0, dtype="bfloat16"),
               _rigorous("jax-gpu", "gpu:0", 2500, 2 * 2500**3 / 72e12, 1e-3, dtype="bfloat16"),
               _rigorous("jax-gpu", "gpu:0", 2504, 2 * 2504**3 / 300e12, 1e-3, dtype="bfloat16",
                         aligned_from=2500)]
    run = _write(tmp_path, records)
    text = report.compose([run], draw=False)[0]
    assert ("- gpu:0 bfloat16: n = 2500 ran at 72 TFLOP/s, n = 2504 (the next multiple of 8) at "
            "300 TFLOP/s (4.17x): sizes that are not a multiple of 8 leave the tensor cores' "
            "fast path.") in text
    assert "| 2504 (aligned, beside 2500) |" in text
    assert all(size == 2500 for s in report.matmul.speedup_series(report.load([run]))
               for size, _ in s["points"])
    assert report.matmul.aligned_size(2500) == 2504 and report.matmul.aligned_size(2504) == 2504


def test_a_noisy_run_is_flagged_instead_of_a_ratio_that_contradicts_the_method(tmp_path):
    records = [_matmul("cpu", "cpu", 500, method="book", backend="tensorflow", seconds=0.02),
               _rigorous("cpu", "cpu", 500, 0.005, 0.006, backend="tensorflow"),
               _matmul("cpu", "cpu", 5000, method="book", backend="tensorflow", seconds=6.44),
               _rigorous("cpu", "cpu", 5000, 12.4, 12.5, backend="tensorflow", seconds_iqr=3.1)]
    text = report.matmul.book_vs_rigorous(records)
    assert "at 500 x 500 the book's single timing says 20 ms, the product itself takes 5 ms: " \
           "the book measures 4.0x that" in text
    assert "at 5000 x 5000 **the run was noisy**: the book's single timing (6.44 s) came out " \
           "below the rigorous median (12.4 s, IQR 3.1 s over 5 repeats)" in text
    assert "0.5x" not in text


def test_the_books_set_up_is_stated_where_a_second_call_was_timed(tmp_path):
    records = [_matmul("jax-gpu", "gpu:0", 500, method="book", seconds=1.2, warm_seconds=0.2),
               _rigorous("jax-gpu", "gpu:0", 500, 1e-5, 1e-4)]
    text = report.compose([_write(tmp_path, records)], draw=False)[0]
    assert "| 500 | 10 µs | 25,000 | 100 µs | 90 µs | 1.2 s | 1 s |" in text
    assert "Of the book's 1.2 s at 500, 1 s is set-up" in report.matmul.book_vs_rigorous(records)


def test_a_difference_within_the_noise_reads_none_never_a_negative_time(tmp_path):
    # the second book-way call took longer than the first, and one call came out faster than a
    # product streamed: both differences are noise, not a negative set-up or overhead
    records = [_matmul("cpu", "cpu", 500, method="book", backend="tensorflow", seconds=0.02,
                       warm_seconds=0.03),
               _rigorous("cpu", "cpu", 500, 0.005, 0.004, backend="tensorflow")]
    text = report.compose([_write(tmp_path, records)], draw=False)[0]
    assert "| 500 | 5 ms | 50 | 4 ms | none | 20 ms | none |" in text
    assert "-1" not in text.split("**cpu at float32**")[1].split("Columns:")[0]
