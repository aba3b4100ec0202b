"""The report read as a user of the stored NVIDIA H200 run (reference/h200-jax) reads it: the
GPU paired with the same machine's CPU, crossovers over paired sizes, TF32 named, the training
answer in words, log axes, one GPU busy figure, no "None" and no chart or bar for what did not
run. Plus known records whose speedup, crossover, labels, pairing of machines and runs, noise,
load and throttling flags could not pass inverted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO
from gpubench import fmt, plots, report, results

REFERENCE = REPO / "reference" / "h200-jax" / "results.jsonl"
STORED_REPORT = REFERENCE.parent / "report.md"


def _write(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def _reference_lines(keep=lambda record: True) -> str:
    """The stored lines as they are (the reader turns their schema-3 rigorous timings, one call
    per sync, into call latency), those `keep` accepts."""
    return "".join(line + "\n" for line in REFERENCE.read_text().splitlines()
                   if line.strip() and keep(json.loads(line)))


def _speedups(records: list[dict]) -> list[dict]:
    """The report's speedup series: each GPU column against its machine's CPU (`pairings`)."""
    return plots.speedup_series(records, report.inputs.pairings(records))


@pytest.fixture(scope="module")
def h200(tmp_path_factory) -> tuple[str, dict, list[dict]]:
    """report.md's text, its charts and the loaded records of the H200 reference."""
    run = tmp_path_factory.mktemp("h200-jax", numbered=False)
    (run / "results.jsonl").write_text(_reference_lines())
    (run / "run.json").write_bytes((REFERENCE.parent / "run.json").read_bytes())
    text, charts = report.compose([run])
    return text, charts, report.load([run])


def test_the_speedup_pairs_every_gpu_dtype_and_timing_with_the_jax_cpu_env(h200):
    series = _speedups(h200[2])
    keys = {(s["dtype"], s["quantity"]) for s in series}
    assert keys == {(d, q) for d in ("bfloat16", "float16", "float32 (TF32)")  # as it ran
                    for q in ("call", "book")}
    assert {(s["column"], s["cpu_column"], s["cpu_dtype"]) for s in series} == {
        ("vm · jax-gpu", "vm · jax-cpu", "float32")}
    by = {(s["dtype"], s["quantity"]): dict(s["points"]) for s in series}
    # CPU over GPU, from the stored numbers: 0.2275 s / 0.00100 s, and 0.344 s / 2.058 s
    assert by[("float32 (TF32)", "call")][5000] == pytest.approx(0.2274681 / 0.0009998, rel=1e-4)
    assert by[("float32 (TF32)", "book")][500] == pytest.approx(0.3440296 / 2.0579299, rel=1e-4)
    assert sorted(by[("bfloat16", "call")]) == [500, 1000, 2000, 3000, 4000, 5000]  # 8192: no CPU


def test_the_crossover_sentences_name_the_pairing_and_the_sizes(h200):
    text = h200[0]
    assert ("- Pairing: vm · jax-gpu's GPU timings against the CPU timings of vm · jax-cpu, the "
            "same machine's JAX CPU env (vm · jax-gpu timed no CPU).") in text
    assert ("- **gpu:0 bfloat16 vs CPU float32** (not like for like: bfloat16 against the CPU's "
            "float32): 6 sizes paired, no CPU partner at n = 1500, 2500, 3500, 4500, 8192; the "
            "GPU wins at every paired size (n = 500–5000) (every paired size noisy, kept: the "
            "spread there cannot reverse who wins) for one product called alone (call "
            "latency); at no paired size (n = 500–5000) by the book's single timing (set-up "
            "included).") in text
    assert "- **gpu:0 float32 (TF32) vs CPU float32** (not like for like: float32 (TF32) " in text
    assert "no CPU measured" not in text and "every size measured" not in text


def test_old_rigorous_timings_read_as_call_latency_and_no_gflops_chart_is_drawn(h200):
    text, charts, _ = h200
    assert "These records hold no product time" in text
    assert "matmul_gflops.png" not in charts and "No GFLOP/s chart: no product time" in text
    gpu_bf16 = text.split("**gpu:0 at bfloat16**")[1].split("**gpu:0 at float16**")[0]
    assert ("| [size](#glossary) | [call latency](#glossary) | [call spread](#glossary) | "
            "[book's single timing](#glossary) |" in gpu_bf16)
    # the call spread: the converted records' IQR of the single calls, 73.5 µs over 126 µs
    assert "| 500 | 126 µs | 58% noisy | 990 ms |" in gpu_bf16
    assert "| 8192 | 1.64 ms | 4% | 1.64 s |" in gpu_bf16  # 68 µs over 1.64 ms: not noisy


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
    energy = next(line for line in text.splitlines()
                  if line.startswith("- **GPU energy per steady epoch**"))
    assert "the epochs of GPU busy" in energy  # one set of epochs for both


def test_no_none_nan_or_inf_reaches_the_reader(h200):
    text = h200[0]
    assert not re.search(r"\b(None|nan|NaN|inf|Infinity)\b", text)


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
    assert ("- **gpu:0 float32 vs CPU float32**: 3 sizes paired; the GPU wins from n = 1000 "
            "(n = 500–2000 paired) when products stream (product time: the streaming "
            "crossover); from n = 2000 (n = 500–2000 paired) for one product called alone (call "
            "latency).") in text
    assert "against the CPU timings of the same env, as the book did" in text
    row = next(line for line in text.split("**gpu:0 at float32**")[1].splitlines()
               if line.startswith("| 1000 |"))
    assert row == "| 1000 | 500 µs | 4,000 | 1.1 ms | 600 µs |"  # product, GFLOP/s, call, overhead


def test_a_16_bit_gpu_dtype_pairs_with_the_cpus_float32_and_says_so(tmp_path):
    records = [_rigorous("jax-cpu", "cpu", 1000, 0.01, 0.01)]
    records += [_rigorous("jax-gpu", "gpu:0", 1000, 1e-4, 2e-4, dtype="bfloat16")]
    series = _speedups(report.load([_write(tmp_path, records)]))
    assert [(s["dtype"], s["cpu_dtype"], s["quantity"], s["points"]) for s in series] == [
        ("bfloat16", "float32", "call", [(1000, pytest.approx(50.0))]),
        ("bfloat16", "float32", "product", [(1000, pytest.approx(100.0))])]


def test_aligned_sizes_stay_beside_their_book_size_and_off_the_lines(tmp_path):
    records = [_rigorous("jax-gpu", "cpu", 2500, 1.0, 1.0, dtype="bfloat16"),
               _rigorous("jax-gpu", "gpu:0", 2500, 2 * 2500**3 / 72e12, 1e-3, dtype="bfloat16"),
               _rigorous("jax-gpu", "gpu:0", 2504, 2 * 2504**3 / 300e12, 1e-3, dtype="bfloat16",
                         aligned_from=2500)]
    run = _write(tmp_path, records)
    text = report.compose([run], draw=False)[0]
    assert "| 2504 (aligned, beside 2500) |" in text
    assert all(size == 2500 for s in _speedups(report.load([run]))
               for size, _ in s["points"])


def test_the_books_set_up_is_stated_where_a_second_call_was_timed(tmp_path):
    records = [_matmul("jax-gpu", "gpu:0", 500, method="book", seconds=1.2, warm_seconds=0.2),
               _rigorous("jax-gpu", "gpu:0", 500, 1e-5, 1e-4)]
    text = report.compose([_write(tmp_path, records)], draw=False)[0]
    assert "| 500 | 10 µs | 25,000 | 100 µs | 90 µs | 1.2 s | 1 s |" in text  # of which set-up


def test_a_difference_within_the_noise_reads_none_never_a_negative_time(tmp_path):
    # the second book-way call took longer than the first, and one call came out faster than a
    # product streamed: both differences are noise, not a negative set-up or overhead
    records = [_matmul("cpu", "cpu", 500, method="book", backend="tensorflow", seconds=0.02,
                       warm_seconds=0.03),
               _rigorous("cpu", "cpu", 500, 0.005, 0.004, backend="tensorflow")]
    text = report.compose([_write(tmp_path, records)], draw=False)[0]
    assert "| 500 | 5 ms | 50 | 4 ms | none | 20 ms | none |" in text
    assert "-1" not in text.split("**cpu at float32**")[1].split("##")[0]


# ---------------------------------------------------------------- the stored report, as written

def test_the_stored_report_answers_in_words_defines_its_figures_and_says_where_they_came_from():
    text = STORED_REPORT.read_text(encoding="utf-8")
    # point 2: the training answer per model, both sides or why one is missing
    assert ("- **MNIST MLP h1000**, vm · jax-gpu against vm · jax-cpu: per steady epoch the GPU "
            "is 1.14x faster (0.69 s against 0.787 s); over 15 epochs 0.99x (12.6 s against "
            "12.4 s), because epoch 1 (compiling) took 3.11 s (25% of the total) against "
            "1.28 s.") in text
    assert ("- **MNIST CNN**, vm · jax-gpu against vm · jax-cpu: no answer: vm · jax-cpu's "
            "Mnist_CNN job was interrupted (stopped by the time limit after 13 of its 15 "
            "epochs") in text
    assert "vm · jax-cpu did not run Keras_Cifar_CNN" in text
    # point 4: one definition per quantity, as the code measures it
    assert ("- **call latency**: one product from the call until its result is ready on the "
            "device (a sync)") in text and "on the host" not in text
    assert "| [GPU energy per steady epoch](#glossary) |" in text and "Columns:" not in text
    # point 8: the book's GT 720 lines explained
    assert ("The grey dashed lines of the time chart are the book's own: its GeForce GT 720 and "
            "its CPU") in text and "so a JAX or compiled first call sits above the GT 720" in text
    # point 9: the pairing counted, the unpaired sizes named
    assert "6 sizes paired, no CPU partner at n = 1500, 2500, 3500, 4500, 8192" in text
    # point 10: provenance in full
    assert "753b5979d67935344ad259b3472f9aadaed7a194-dirty" in text
    assert "NVIDIA H200 (140.4 GB, driver 580.159.04)" in text
    assert "JAX 0.11.2 (CUDA 13.0, cuDNN 9.19)" in text
    assert ("JAX 0.11.2 (CUDA build, run on the CPU: no CUDA version read; vm · jax-gpu, the same "
            "machine and JAX, read CUDA 13.0, cuDNN 9.19)") in text
    assert "not recorded" not in text
    # point 1: TF32 named wherever the H200's float32 ran on it
    assert "**gpu:0 at float32 (TF32)**" in text and "XLA on, float32 (TF32), batch 100" in text


def test_the_stored_report_is_what_this_code_writes(h200):
    stored = STORED_REPORT.read_text(encoding="utf-8")
    assert h200[0].split("\n", 3)[3] == stored.split("\n", 3)[3]  # all but the run dir's name


# ---------------------------------------------------------------- TF32 named, each backend

@pytest.mark.parametrize("backend,cpu,gpu", [("tensorflow", "cpu", "gpu"),
                                             ("jax", "jax-cpu", "jax-gpu"),
                                             ("torch", "torch-cpu", "torch-gpu")])
@pytest.mark.parametrize("tf32", [True, False])
def test_a_gpu_float32_on_tf32_is_labelled_so_in_every_place(tmp_path, backend, cpu, gpu, tf32):
    from test_report import train

    records = [_rigorous(cpu, "cpu", n, n / 1e6, n / 1e6, backend=backend, tf32=False)
               for n in (1000, 2000)]
    records += [_rigorous(gpu, "gpu:0", n, 1e-4, 2e-4, backend=backend, tf32=tf32)
                for n in (1000, 2000)]
    records += [train(cpu, 100.0, backend=backend, tf32=False),
                train(gpu, 50.0, backend=backend, tf32=tf32)]
    text, charts = report.compose([_write(tmp_path, records)])
    labels = [t.get_text() for fig in charts.values() for ax in fig.axes
              for t in (ax.get_legend().get_texts() if ax.get_legend() else [])]
    places = ["float32" + text.split("**gpu:0 at float32")[1][:8],  # the table's title
              next(line for line in text.splitlines() if line.startswith("- **gpu:0 float32")),
              next(line for line in text.splitlines()
                   if line.startswith(f"| MNIST MLP h1000 | vm · {gpu} |")),  # its mode
              next(label for label in labels if label.startswith("gpu:0 float32"))]
    assert all(("float32 (TF32)" in place) is tf32 for place in places), places
    assert ("not like for like: float32 (TF32) against the CPU's float32" in text) is tf32
    assert ("TF32" in text.split("## Glossary")[0]) is tf32


# ---------------------------------------------------------------- noise, machines, runs, load

def test_a_noisy_size_is_marked_and_no_crossover_is_read_from_it(tmp_path):
    # the GPU wins at 2000 only by noise (1.7 s +- 40 % against 2 s); read without it, from 2500
    gpu = {500: 1.0, 1000: 1.5, 1500: 2.0, 2000: 1.7, 2500: 1.0, 3000: 1.0}
    records = [_rigorous("jax-gpu", "cpu", n, n / 1000, n / 1000) for n in gpu]
    records += [_rigorous("jax-gpu", "gpu:0", n, s, s, relative_spread=0.4 if n == 2000 else 0.01,
                          noisy=n == 2000) for n, s in gpu.items()]
    text = report.compose([_write(tmp_path, records)], draw=False)[0]
    line = next(line for line in text.splitlines() if line.startswith("- **gpu:0 float32"))
    assert "from n = 2500 (n = 500–3000 paired) (2000 left out: noisy) when products stream" in line
    assert "from n = 2000" not in line
    assert "| 2000 (noisy) |" in text


def test_a_noisy_call_latency_is_shown_and_kept_only_where_it_cannot_reverse_who_wins(tmp_path):
    # call latencies of 1 ms on the GPU: at 1000 +- 60 % (still far below the CPU's 50 ms), at
    # 2000 +- 60 % against the CPU's 1.2 ms, where the spread could decide who wins
    cpu = {1000: 0.05, 2000: 1.2e-3, 3000: 0.5}
    records = [_rigorous("jax-cpu", "cpu", n, s, s, call_seconds_iqr=0.01 * s) for n, s in cpu.items()]
    records += [_rigorous("jax-gpu", "gpu:0", n, 1e-3, 1e-3, call_seconds_iqr=6e-4 if n < 3000
                          else 1e-5) for n in cpu]
    text = report.compose([_write(tmp_path, records)], draw=False)[0]
    line = next(line for line in text.splitlines() if line.startswith("- **gpu:0 float32"))
    assert ("at every paired size (n = 1000–3000) (2000 left out: noisy) (n = 1000 noisy, kept: "
            "the spread there cannot reverse who wins) for one product called alone") in line
    table = text.split("**gpu:0 at float32**")[1].split("\n\n")[1].splitlines()
    assert "| [call latency](#glossary) | [call spread](#glossary) |" in table[0]
    assert [row.split(" | ")[4] for row in table[2:]] == ["60% noisy", "60% noisy", "1%"]
    series = _speedups(report.load([_write(tmp_path, records)]))
    call = next(s for s in series if s["quantity"] == "call")
    assert call["noisy"] == [1000, 2000] and call["unsure"] == [2000]


def test_the_readmes_comparison_with_the_reference_keeps_two_machines_named_vm_apart(tmp_path):
    from test_report import train

    mine = train("cpu", 100.0, steady_epoch_seconds=5.38)  # hostname "vm", 2 cores, no GPU
    mine["environment"] |= {"cpu_model": "AMD EPYC", "os": "Linux-6.18-x86_64"}
    run = _write(tmp_path / "mine", [mine])
    (tmp_path / "h200").mkdir()
    (tmp_path / "h200" / "results.jsonl").write_text(_reference_lines())
    text = report.compose([run, tmp_path / "h200"], draw=False)[0]
    assert "vm (2-core EPYC) · cpu" in text and "vm (16-core Xeon, H200) · jax-cpu" in text
    assert "## Backends" not in text  # never one machine
    environments = [row for row in text.split("## Environments")[1].splitlines()
                    if row.startswith("| vm")]
    assert len({row.split(" · ")[0] for row in environments}) == 2


def test_eager_torch_against_tensorflow_with_xla_off_is_like_for_like(tmp_path):
    from test_report import train

    records = [train("cpu", 100.0, steady_epoch_seconds=5.0),
               train("torch-cpu", 90.0, backend="torch", device="cpu", steady_epoch_seconds=4.0)]
    text = report.compose([_write(tmp_path, records)], draw=False)[0]
    torch = next(line for line in text.split("## Backends")[1].splitlines()
                 if line.startswith("| MNIST MLP h1000") and "PyTorch" in line)
    assert "torch.compile off" in torch and torch.endswith("| yes |")
    assert "not like for like" not in text.lower()


def test_two_cpu_runs_of_one_machine_have_one_baseline_named_once(tmp_path):
    from test_report import cell, table_rows, train

    xla = train("cpu", 60.0, jit_compile=True) | {"timestamp": "2026-01-01T00:00:00+00:00"}
    book = train("cpu", 100.0) | {"timestamp": "2026-01-02T00:00:00+00:00"}
    runs = [_write(tmp_path / "a-xla", [xla]), _write(tmp_path / "b-book", [book])]
    text = report.compose(runs, draw=False)[0]
    rows = {row[1]: row for row in table_rows(text, "MNIST MLP h1000")}
    # the book's mode (XLA off) is the baseline, though the XLA run came first
    assert cell(rows["vm · cpu (b-book)"], "time saved vs CPU env") == "baseline"
    assert cell(rows["vm · cpu (a-xla)"], "speedup") == "1.67x"
    assert [line for line in text.splitlines() if "Not like for like" in line] == [
        "**Not like for like:** MNIST MLP h1000: vm · cpu (a-xla) ran XLA on; its baseline "
        "vm · cpu (b-book): XLA off."]


def test_a_figure_taken_at_a_load_above_the_cores_is_flagged(tmp_path):
    from test_report import cell, table_rows, train

    busy = train("cpu", 100.0, epoch_load_average=[1.0, 6.5, 1.2]) | {"load_average": 1.5}
    quiet = train("gpu", 50.0) | {"load_average": 1.9}  # 2 cores: not above
    product = _rigorous("cpu", "cpu", 1000, 0.1, 0.1, backend="tensorflow") | {"load_average": 3.0}
    text = report.compose([_write(tmp_path, [busy, quiet, product])], draw=False)[0]
    cpu, gpu = table_rows(text, "MNIST MLP h1000")
    assert cell(cpu, "total time") == "100 s (**loaded**: load 6.5 on 2 cores)"
    assert "loaded" not in cell(gpu, "total time")
    assert "| 1000 (**loaded**: load 3.0 on 2 cores) |" in text
    assert "> **Loaded machine**" in text and "- vm · cpu Mnist_MLP_h1000 cpu: load 6.5 on 2 cores" \
        in text


def test_a_throttled_region_is_flagged_in_the_telemetry_text(tmp_path):
    from test_report import _gpu_run

    hot = _gpu_run(91.0, figures={"sm_clock_mhz_min": 900.0, "sm_clock_mhz_max": 1980.0,
                                  "throttled": True})
    text = report.compose([_write(tmp_path, [hot])], draw=False)[0]
    assert ("- vm · gpu MNIST MLP h1000 on gpu:0: **throttled**: the SM clock fell to 900 MHz, "
            "below 75 % of its max (1,980 MHz)") in text
    cool = _gpu_run(91.0, figures={"sm_clock_mhz_min": 1900.0, "sm_clock_mhz_max": 1980.0,
                                   "throttled": False})
    assert "throttled" not in report.compose([_write(tmp_path / "cool", [cool])],
                                             draw=False)[0].split("## Glossary")[0]
