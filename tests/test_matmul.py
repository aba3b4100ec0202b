"""matmul: both methods, the peak probe, the sweep, aligned sizes, OOM handling, bad input that
writes nothing, older schemas' records, and a resumed run's peak."""

from __future__ import annotations

import contextlib
import itertools
import json

import pytest

from gpubench import backends, chapter, devices, matmul, peaks, plots, results, rundir, timing
from gpubench.report import format as report_format


def test_book_method_record(tmp_path):
    record = matmul.performance_test("/cpu:0", 64, method="book")
    results.validate(record)
    assert record["status"] == "ok" and record["method"] == "book" and record["repeats"] == 1
    assert record["seconds"] == record["seconds_min"] == record["seconds_max"] > 0
    assert record["gflops"] == pytest.approx(2 * 64**3 / record["seconds"] / 1e9)
    assert record["warm_seconds"] > 0  # the same shape again, right after
    assert record["call_seconds"] is None and record["products_per_block"] is None


def test_rigorous_method_record():
    record = matmul.performance_test("cpu", 128, method="rigorous", repeats=4)
    assert record["status"] == "ok" and record["repeats"] >= 4  # more while noisy (the cap)
    assert record["tf32"] is False and record["load_average"] is not None
    assert record["relative_spread"] == pytest.approx(record["seconds_iqr"] / record["seconds"],
                                                      abs=1e-4)
    assert record["noisy"] is (record["relative_spread"] > timing.NOISE_THRESHOLD)
    assert record["seconds_min"] <= record["seconds"] <= record["seconds_max"]
    assert record["first_seconds"] > 0 and record["call_seconds"] > 0
    assert record["products_per_block"] > 1  # a 128 x 128 product is far shorter than a block
    assert record["gflops"] == pytest.approx(2 * 128**3 / record["seconds"] / 1e9)
    assert record["warm_seconds"] is None and record["aligned_from"] is None
    assert record["device"] == "cpu" and record["size"] == 128 and record["dtype"] == "float32"


@pytest.mark.parametrize("dtype", ["float64", "bfloat16"])
def test_other_dtypes(dtype):
    record = matmul.performance_test("cpu", 32, method="rigorous", repeats=1, dtype=dtype)
    assert record["status"] == "ok" and record["dtype"] == dtype


def test_sweep_appends_each_record_as_it_goes(tmp_path):
    store = results.ResultsStore(tmp_path / "r.jsonl")
    seen_on_disk = []

    def progress(record):
        seen_on_disk.append(len(store.read()))

    records = matmul.sweep([32, 64], ["cpu"], repeats=2, store=store, env="test",
                           progress=progress)
    assert [(r["size"], r["method"]) for r in records] == [
        (32, "book"), (32, "rigorous"), (64, "book"), (64, "rigorous")]
    assert seen_on_disk == [1, 2, 3, 4]  # on disk before the next measurement starts
    assert [r["size"] for r in store.read()] == [32, 32, 64, 64]


def test_oom_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    real = matmul.rigorous_test
    monkeypatch.setattr(backends.current(), "is_oom", lambda exc: "OOM when" in str(exc))

    def fake(device, size, dtype, repeats):
        if size == 64:
            raise RuntimeError("OOM when allocating tensor")
        return real(device, size, dtype, repeats)

    monkeypatch.setattr(matmul, "rigorous_test", fake)  # the chapter's function: the seam
    store = results.ResultsStore(tmp_path / "r.jsonl")
    records = matmul.sweep([64, 96], ["cpu"], methods=["rigorous"], repeats=1, store=store)
    assert [r["status"] for r in records] == ["oom", "ok"]
    assert "OOM" in records[0]["error"] and records[0]["seconds"] is None
    assert len(store.read()) == 2


@pytest.mark.parametrize("sizes", [[0], [-500], [1.5], ["big"], [True], [], [500, None]])
def test_bad_sizes_are_named_and_nothing_is_written(tmp_path, sizes):
    path = tmp_path / "run" / "results.jsonl"
    with pytest.raises(ValueError) as info:
        chapter.start("performanceTest", sizes=sizes, results_path=str(path), profile="quick")
    if sizes:
        assert repr(sizes[-1]) in str(info.value) or repr(sizes[0]) in str(info.value)
    assert not path.exists()


def test_bad_sizes_in_sweep_write_nothing(tmp_path):
    store = results.ResultsStore(tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match="-3"):
        matmul.sweep([64, -3], ["cpu"], store=store)
    assert store.read() == []


def test_unknown_device_is_named(tmp_path):
    path = tmp_path / "results.jsonl"
    with pytest.raises(ValueError, match="'tpu'"):
        chapter.start("performanceTest", devices=["tpu"], results_path=str(path))
    assert not path.exists()


def test_missing_gpu_index_is_named(fake_machine, tmp_path):
    fake_machine(gpus=1, cuda_build=True)
    path = tmp_path / "results.jsonl"
    with pytest.raises(devices.DeviceError, match="'gpu:7'.*gpu:0"):
        chapter.start("performanceTest", devices=["gpu:7", "cpu"], results_path=str(path))
    assert not path.exists()


def test_gpu_without_gpu_fails_loudly(fake_machine, tmp_path):
    fake_machine(gpus=0, cuda_build=False)
    with pytest.raises(devices.GPUNotAvailableError):
        chapter.start("performanceTest", devices=["gpu"], results_path=str(tmp_path / "r.jsonl"))


def test_unsupported_dtype_is_named(tmp_path):
    path = tmp_path / "results.jsonl"
    with pytest.raises(ValueError, match="'int8'.*float32"):
        chapter.start("performanceTest", dtype="int8", results_path=str(path))
    assert not path.exists()


def test_unwritable_results_path_is_named(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    bad = blocker / "results.jsonl"
    with pytest.raises(results.ResultsPathError, match="a-file/results.jsonl"):
        chapter.start("performanceTest", results_path=str(bad), profile="quick")
    with pytest.raises(results.ResultsPathError, match="is a directory"):
        chapter.start("performanceTest", results_path=str(tmp_path), profile="quick")


def test_unknown_profile_is_named(tmp_path):
    with pytest.raises(ValueError, match="'fast'.*full, quick"):
        chapter.start("performanceTest", profile="fast", results_path=str(tmp_path / "r"))


def test_start_resolves_profile_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBENCH_PROFILE", "quick")
    cfg = chapter.start("performanceTest", results_path=str(tmp_path / "r.jsonl"))
    assert cfg.profile == "quick" and cfg.sizes == [500, 1000, 1500, 2000]
    assert cfg.devices == ["cpu"]  # this machine has no GPU
    assert json.loads(json.dumps(cfg.params)) == cfg.params  # plain, printable values


def test_default_devices_put_every_gpu_first(fake_machine, tmp_path):
    fake_machine(gpus=2, cuda_build=True)
    cfg = chapter.start("performanceTest", results_path=str(tmp_path / "r.jsonl"), profile="quick")
    assert cfg.devices == ["gpu:0", "gpu:1", "cpu"]


def test_sweep_takes_a_list_of_dtypes(tmp_path):
    store = results.ResultsStore(tmp_path / "r.jsonl")
    records = matmul.sweep([32], ["cpu"], methods=["rigorous"], repeats=1,
                           dtype=["float32", "bfloat16", "float16"], store=store)
    assert [(r["dtype"], r["status"]) for r in records] == [
        ("float32", "ok"), ("bfloat16", "ok"), ("float16", "ok")]
    assert [r["dtype"] for r in store.read()] == ["float32", "bfloat16", "float16"]
    assert all(r["spec_peak_gflops"] is None for r in records)  # a CPU is not in the table
    assert "bfloat16" in matmul.describe(records[1])


@pytest.mark.parametrize("bad", [[], ["float32", "int8"], 32])
def test_bad_dtype_lists_are_named_and_nothing_is_written(tmp_path, bad):
    store = results.ResultsStore(tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match="int8" if bad == ["float32", "int8"] else "dtype"):
        matmul.sweep([32], ["cpu"], dtype=bad, store=store)
    assert store.read() == []


@pytest.mark.parametrize("name, dtype, expected", [
    ("Tesla T4", "float16", 65_000), ("Tesla T4", "float32", 8_100), ("Tesla T4", "bfloat16", None),
    ("NVIDIA GeForce RTX 3090", "bfloat16", 71_000), ("NVIDIA GeForce RTX 3090 Ti", "float32", None),
    ("NVIDIA GeForce RTX 3060", "float32", 12_700), ("NVIDIA GeForce RTX 3060 Ti", "float32", None),
    ("NVIDIA GeForce RTX 4090", "float16", 165_200), ("NVIDIA A100-SXM4-80GB", "bfloat16", 312_000),
    ("NVIDIA A100-PCIE-40GB", "float32", 19_500), ("NVIDIA H100 80GB HBM3", "float16", 989_500),
    ("NVIDIA H100 PCIe", "float32", 51_000), ("NVIDIA H200", "bfloat16", 989_500),
    ("NVIDIA L4", "float16", 121_000), ("NVIDIA L40S", "float32", None),
    ("GeForce GT 720", "float32", None), ("NVIDIA A100-SXM4-80GB", "float64", None), (None, "float32", None),
])
def test_datasheet_peaks(name, dtype, expected):
    assert peaks.spec_peak_gflops(name, dtype) == (None if expected is None else pytest.approx(expected))


def test_every_table_entry_names_its_source():
    for pattern, values, source in peaks.TABLE:  # from tables/peaks.json
        assert values and len(source) > 30, pattern


def test_tf32_is_used_for_float32_where_the_gpu_has_it():
    assert peaks.spec_peak_gflops("NVIDIA A100-SXM4-80GB", "float32", tf32=True) == 156_000
    assert peaks.spec_peak_gflops("Tesla T4", "float32", tf32=True) == 8_100


def test_matmul_record_gets_the_table_peak_of_its_gpu(monkeypatch):
    snapshot = dict(results.environment_snapshot(), gpus=[
        {"name": "NVIDIA L4", "memory_gb": 22.0, "driver": "550"},
        {"name": "Some Future GPU", "memory_gb": 8.0, "driver": "550"}])
    monkeypatch.setattr(results, "environment_snapshot", lambda: snapshot)
    assert peaks.spec_peak("gpu:0", "bfloat16") == 121_000
    assert peaks.spec_peak("gpu:1", "bfloat16") is None
    assert peaks.spec_peak("cpu", "float32") is None
    record = matmul.performance_test("cpu", 32, method="book")
    assert record["spec_peak_gflops"] is None


def test_book_figures_are_the_books():
    assert plots.BOOK_SECONDS["gpu"][5000] == 2.049 and plots.BOOK_SECONDS["cpu"][5000] == 3.656
    assert sorted(plots.BOOK_SECONDS["gpu"]) == sorted(plots.BOOK_SECONDS["cpu"]) == [
        500, 1000, 2000, 3000, 4000, 5000]


def test_a_dtype_the_gpu_cannot_run_is_skipped_and_says_why(monkeypatch):
    capabilities = [(7, 5), (8, 0)]  # a Turing and an Ampere GPU
    monkeypatch.setattr(backends.current(), "compute_capability",
                        lambda i: capabilities[i] if i < len(capabilities) else None)
    assert peaks.unsupported_reason("gpu:0", "bfloat16") == (
        "gpu:0 has compute capability 7.5; bfloat16 needs 8.0 or newer")
    assert peaks.unsupported_reason("gpu:1", "bfloat16") is None
    assert peaks.unsupported_reason("gpu:0", "float16") is None  # no minimum for float16
    assert peaks.unsupported_reason("gpu:5", "bfloat16") is None  # unknown: let it try
    assert peaks.unsupported_reason("cpu", "bfloat16") is None


@pytest.fixture
def tiny_peak(monkeypatch):
    """The peak probe at n = 64 on every device: real runs, quick enough for a unit test."""
    monkeypatch.setitem(matmul.PEAK_SIZE, "cpu", 64)
    monkeypatch.setitem(matmul.PEAK_SIZE, "gpu", 64)


def test_peak_probe_record_is_the_fastest_of_its_repeats(tiny_peak):
    record = matmul.peak("cpu", notebook="performanceTest", env="test")
    results.validate(record)
    assert record["status"] == "ok" and record["method"] == results.PEAK_METHOD == "peak"
    assert record["size"] == 64 and record["dtype"] == "float32" and record["env"] == "test"
    assert record["repeats"] >= matmul.PEAK_REPEATS and record["notebook"] == "performanceTest"
    assert record["seconds"] == record["seconds_min"] <= record["seconds_max"]
    assert record["gflops"] == pytest.approx(2 * 64**3 / record["seconds_min"] / 1e9)
    assert record["first_seconds"] > 0 and isinstance(record["telemetry"], dict)
    assert results.peak_record([record], "test", "cpu", "float32") is record
    assert record["products_per_block"] >= 1 and record["call_seconds"] > 0
    line = matmul.describe(record)  # the progress line: the matmul table's cells
    assert line.startswith("peak n=64 cpu float32: product time ") and "; GFLOP/s " in line
    assert plots.cells(record, [record])["GFLOP/s"] in line


def test_peak_probe_that_runs_out_of_memory_is_recorded(tiny_peak, monkeypatch):
    monkeypatch.setattr(backends.current(), "is_oom", lambda exc: "OOM when" in str(exc))

    def fake(device, size, dtype, repeats):
        raise RuntimeError("OOM when allocating tensor")

    monkeypatch.setattr(matmul, "rigorous_test", fake)
    record = matmul.peak("cpu", "bfloat16", notebook="performanceTest", env="test")
    assert record["status"] == "oom" and record["method"] == "peak" and record["gflops"] is None
    assert results.peak_record([record], "test", "cpu", "bfloat16") is None
    assert matmul.describe(record).startswith("peak n=64 cpu bfloat16: OOM: RuntimeError")


def test_peaks_for_reuses_its_envs_peak_and_measures_a_missing_one(tiny_peak, tmp_path):
    store = results.ResultsStore(tmp_path / "r.jsonl")
    stored = store.append(results.make_record(
        "matmul", notebook="performanceTest", env="a", device="cpu", size=2048, dtype="float32",
        method="peak", seconds=0.5, seconds_min=0.5, repeats=5, gflops=123.0))
    seen = []
    found = matmul.peaks_for(["cpu"], ["float32", "bfloat16"], store=store, env="a",
                             notebook="Speed_Factors", progress=seen.append)
    assert found[0] == json.loads(json.dumps(stored)) and found[0]["gflops"] == 123.0
    assert (found[1]["status"], found[1]["dtype"], found[1]["size"]) == ("ok", "bfloat16", 64)
    assert found[1]["notebook"] == "Speed_Factors" and seen == found
    assert store.read()[1:] == [json.loads(json.dumps(found[1]))]  # only the new one appended

    again = matmul.peaks_for(["/cpu:0"], ["float32", "bfloat16"], store=store, env="a",
                             notebook="Speed_Factors")
    assert [r["gflops"] for r in again] == [r["gflops"] for r in found]
    assert len(store.read()) == 2  # nothing measured twice

    other = matmul.peaks_for(["cpu"], "float32", store=store, env="b", notebook="performanceTest")
    assert other[0]["env"] == "b" and other[0]["size"] == 64  # env b measures its own
    assert len(store.read()) == 3


def test_peaks_for_without_a_store_measures_and_keeps_nothing(tiny_peak):
    found = matmul.peaks_for(["cpu"], "float32", notebook="performanceTest", env="test")
    assert [(r["method"], r["status"]) for r in found] == [("peak", "ok")]


@pytest.mark.parametrize("devices_, dtypes, match", [
    ([], "float32", "devices is empty"), (["cpu"], ["float32", "int8"], "'int8'"),
    (["tpu"], "float32", "'tpu'")])
def test_bad_input_to_peaks_for_is_named_and_nothing_is_written(tmp_path, devices_, dtypes, match):
    store = results.ResultsStore(tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match=match):
        matmul.peaks_for(devices_, dtypes, store=store, notebook="performanceTest")
    assert store.read() == []


def test_the_sweep_refuses_the_peak_method(tmp_path):
    store = results.ResultsStore(tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match="'peak' is the peak probe.*book, rigorous"):
        matmul.sweep([32], ["cpu"], methods=["book", "peak"], store=store)
    with pytest.raises(ValueError, match="'peak'"):
        matmul.performance_test("cpu", 32, method="peak")
    assert store.read() == [] and "peak" not in matmul.METHODS


def test_the_chapters_functions_are_the_librarys():
    """performanceTest and rigorous_test are the chapter's #@save cells, exported here."""
    seconds = matmul.performanceTest("/cpu:0", 32, "float16")
    assert seconds > 0
    measured = matmul.rigorous_test("cpu", 32, repeats=3)
    assert len(measured.times) >= 3 and measured.first > 0
    with backends.current().scope("cpu"):
        assert float(backends.keras().ops.sum(matmul.rigorous_product("cpu", 4)())) != 0


def test_the_product_time_queues_products_and_syncs_once_per_block(monkeypatch):
    """The rigorous record's `seconds` comes from blocks: many products per sync."""
    products, syncs = [], []
    real = matmul.rigorous_product

    def counted(device_name, size, dtype="float32"):
        run = real(device_name, size, dtype)
        return lambda: products.append(1) or run()

    monkeypatch.setattr(matmul, "rigorous_product", counted)
    monkeypatch.setattr(timing, "sync", lambda *values: syncs.append(len(products)))
    record = matmul.performance_test("cpu", 16, method="rigorous", repeats=3)
    per_block = record["products_per_block"]
    blocks = [b - a for a, b in itertools.pairwise(syncs[-4:])]
    assert per_block > 1 and blocks == [per_block] * 3  # the 3 blocks: per_block products each
    assert len(products) > len(syncs)


@pytest.mark.parametrize("size, dtype, expected", [
    (2500, "bfloat16", 2504), (4500, "float16", 4504), (2560, "bfloat16", 2560),
    (500, "float16", 504), (3500, "float32", 3500), (3501, "float32", 3504),
    (3, "float64", 4), (1, "bfloat16", 8)])
def test_aligned_size_rounds_up_to_16_bytes_of_values(size, dtype, expected):
    assert peaks.aligned_size(size, dtype) == expected


def test_aligned_sizes_are_added_on_a_gpu_at_16_bit_dtypes_only():
    assert peaks.aligned_companion(2500, "gpu:0", "bfloat16") == 2504
    assert peaks.aligned_companion(3500, "gpu:1", "float16") == 3504
    assert peaks.aligned_companion(3000, "gpu:0", "bfloat16") is None  # a multiple of 8
    assert peaks.aligned_companion(2500, "gpu:0", "float32") is None
    assert peaks.aligned_companion(2500, "cpu", "bfloat16") is None


def test_the_sweep_times_the_aligned_size_beside_the_book_size(fake_machine, monkeypatch,
                                                              tmp_path):
    fake_machine(gpus=1, cuda_build=True, capability=(9, 0))

    def fake(device, size, method, repeats, dtype, *, notebook, env, aligned_from=None, **_):
        return results.make_record("matmul", notebook=notebook, env="test", device=device,
                                   size=size, dtype=dtype, method=method,
                                   aligned_from=aligned_from)

    monkeypatch.setattr(matmul, "performance_test", fake)
    store = results.ResultsStore(tmp_path / "r.jsonl")
    records = matmul.sweep([2500, 3000], ["gpu:0", "cpu"], dtype=["float32", "bfloat16"],
                           store=store)
    rows = [(r["size"], r["device"], r["dtype"], r["method"], r["aligned_from"]) for r in records]
    assert rows[:5] == [(2500, "gpu:0", "float32", "book", None),
                        (2500, "gpu:0", "float32", "rigorous", None),
                        (2500, "gpu:0", "bfloat16", "book", None),
                        (2500, "gpu:0", "bfloat16", "rigorous", None),
                        (2504, "gpu:0", "bfloat16", "rigorous", 2500)]
    assert [row for row in rows if row[4] is not None] == [
        (2504, "gpu:0", "bfloat16", "rigorous", 2500)]
    assert len(records) == 2 * 2 * 2 * 2 + 1 == len(store.read())


def test_the_converted_reference_keeps_call_latency_apart_from_product_time():
    """reference/h200-jax was timed before product time (schema 3): its conversion to schema 4
    reads each rigorous figure as a call latency, with no product time and no "% of peak", and
    keeps the book's figure as it was."""
    from conftest import REPO

    matmul_ = [r for r in rundir.read_records(REPO / "reference" / "h200-jax")
               if r["benchmark"] == "matmul"]
    rigorous = [r for r in matmul_ if r["method"] == "rigorous"]
    book = [r for r in matmul_ if r["method"] == "book"]
    assert rigorous and book
    for old in rigorous:  # one call per timed region: a call latency, no product time
        assert old["call_seconds"] > 0 and old["first_seconds"] is not None
        assert [old[k] for k in ("seconds", "seconds_min", "seconds_max", "seconds_iqr",
                                 "gflops", "products_per_block")] == [None] * 6
    assert all(results.peak_record(matmul_, r["env"], r["device"], r["dtype"]) is None
               for r in rigorous)  # no "% of peak" from them
    assert all(r["seconds"] > 0 and r["gflops"] > 0 and r["call_seconds"] is None for r in book)
    new = results.parse_line(json.dumps(results.make_record(
        "matmul", notebook="nb", env="cpu", device="cpu", size=8, method="rigorous", seconds=1.0,
        call_seconds=2.0, products_per_block=4)))
    assert (new["seconds"], new["call_seconds"], new["products_per_block"]) == (1.0, 2.0, 4)


@pytest.mark.parametrize("field, value", [("call_seconds", "fast"), ("products_per_block", 1.5),
                                          ("aligned_from", "2500"), ("warm_seconds", [1])])
def test_a_new_field_of_the_wrong_type_is_refused(field, value):
    record = results.make_record("matmul", notebook="nb", env="cpu", device="cpu", size=8,
                                 method="rigorous")
    with pytest.raises(ValueError, match=repr(field)):
        results.validate(record | {field: value})


def test_a_resumed_job_counts_the_peak_its_earlier_attempt_measured(tiny_peak, tmp_path,
                                                                   monkeypatch):
    """Attempt 1 measured the peak and was cut short; attempt 2 reuses it and the report, which
    keeps each job's latest attempt, still finds it."""
    store = results.ResultsStore(tmp_path / "results.jsonl")
    (first,) = matmul.peaks_for(["cpu"], "float32", store=store, env="cpu",
                                notebook="performanceTest")
    monkeypatch.setenv("GPUBENCH_ATTEMPT", "2")
    monkeypatch.setattr(matmul, "peak", lambda *a, **k: pytest.fail("the peak was measured again"))
    (again,) = matmul.peaks_for(["cpu"], "float32", store=store, env="cpu",
                                notebook="performanceTest")
    store.append(matmul.performance_test("cpu", 32, "rigorous", 1, env="cpu"))  # the sweep goes on
    latest = results.latest_attempts(store.read())
    found = results.peak_record(latest, "cpu", "cpu", "float32")
    assert found is not None and found["gflops"] == first["gflops"]
    assert (found["attempt"], found["reused_from_attempt"]) == (2, 1) and again == found
    (third,) = matmul.peaks_for(["cpu"], "float32", store=store, env="cpu",
                                notebook="performanceTest")
    assert third == found and len(store.read()) == 3  # attempt 2 again: nothing new to write
    monkeypatch.setenv("GPUBENCH_ATTEMPT", "1")
    matmul.peaks_for(["cpu"], "float32", store=store, env="cpu", notebook="Speed_Factors")
    assert len(store.read()) == 3  # another job reuses it as it stands


# ---- TF32: a GPU float32 that may use TF32 is told apart from true float32 everywhere

@pytest.fixture
def tf32_gpu(fake_machine, monkeypatch):
    """One fake GPU whose float32 matmuls use TF32 unless `float32_precision(False)` says not;
    the chapter's two timing functions answer at once (no device), noting the TF32 state."""
    fake_machine(gpus=1, cuda_build=True)
    backend, state, seen = backends.current(), {"tf32": True}, []

    @contextlib.contextmanager
    def float32_precision(tf32):
        before, state["tf32"] = state["tf32"], tf32
        try:
            yield
        finally:
            state["tf32"] = before

    monkeypatch.setattr(backend, "tf32_enabled", lambda: state["tf32"])
    monkeypatch.setattr(backend, "float32_precision", float32_precision)
    monkeypatch.setattr(matmul, "performanceTest", lambda device, size, dtype: 0.01)
    monkeypatch.setattr(matmul, "rigorous_test", lambda device, size, dtype, repeats: seen.append(
        state["tf32"]) or timing.Measurement(0.01, [1e-3] * repeats, per_block=4))
    return seen


def test_a_gpu_sweep_times_tf32_and_true_float32_and_labels_them_apart(tf32_gpu, tmp_path):
    store = results.ResultsStore(tmp_path / "r.jsonl")
    records = matmul.sweep([64], ["gpu:0", "cpu"], repeats=2, dtype=["float32", "float16"],
                           store=store, env="test", true_float32=True)
    gpu = [(r["dtype"], r["method"], r["tf32"]) for r in records if r["device"] == "gpu:0"]
    assert gpu == [("float32", "book", True), ("float32", "rigorous", True),
                   ("float32", "book", False), ("float32", "rigorous", False),
                   ("float16", "book", None), ("float16", "rigorous", None)]
    assert tf32_gpu[:2] == [True, False]  # the GPU float32 products ran as recorded
    assert [r["tf32"] for r in records if r["device"] == "cpu"] == [False, False, None, None]
    lines = [matmul.describe(r) for r in records if r["device"] == "gpu:0"]
    assert ["(TF32)" in line for line in lines] == [True, True, False, False, False, False]
    keys = {k for k in plots.matmul_series(records) if k[1] == "gpu:0" and k[2] == "product"}
    assert {k[3] for k in keys} == {"float32 (TF32)", "float32", "float16"}
    titles = [title for title, _, _ in plots.matmul_tables(records)]
    assert titles == ["cpu at float32", "gpu:0 at float32", "gpu:0 at float32 (TF32)",
                      "cpu at float16", "gpu:0 at float16"]  # float32 first, like for like
    pairs = {s["dtype"]: s["cpu_dtype"] for s in plots.speedup_series(records)}
    assert pairs == {"float32 (TF32)": "float32", "float32": "float32", "float16": "float16"}
    once = matmul.sweep([64], ["gpu:0"], methods=["rigorous"], repeats=2, env="test")
    assert [r["tf32"] for r in once] == [True]  # true float32 only when asked


def matmul_record(size: int, method: str = "rigorous", **fields) -> dict:
    """A made-up ok matmul record on the CPU of env "test"."""
    seconds = fields.pop("seconds", 1e-3)
    return results.make_record("matmul", notebook="performanceTest", env="test", device="cpu",
                               size=size, dtype="float32", method=method, seconds=seconds,
                               gflops=2 * size**3 / seconds / 1e9, tf32=False, **fields)


def test_the_table_shows_spread_noise_and_share_of_the_peak_probe():
    peak = matmul_record(4000, method="peak", seconds=0.5)
    records = [matmul_record(500, relative_spread=0.02, noisy=False, call_seconds=2e-3),
               matmul_record(1000, seconds=0.01, relative_spread=0.3, noisy=True,
                             call_seconds=0.02)]
    (title, headers, rows), = plots.matmul_tables([peak, *records])
    assert title == "cpu at float32" and headers[:3] == ["size", "product time", "spread"]
    cells = [dict(zip(headers, row, strict=True)) for row in rows]
    assert [c["size"] for c in cells] == ["500", "1000 (noisy)"]
    assert [c["spread"] for c in cells] == ["2%", "30% noisy"]
    share = records[1]["gflops"] / peak["gflops"]
    assert cells[1]["% of achievable"] == f"{share:.0%}"
    assert "% of datasheet peak" not in headers  # a CPU has no datasheet figure
    (_, headers, _), = plots.matmul_tables(records)  # no peak probe: no "% of achievable"
    assert "% of achievable" not in headers


def test_charts_mark_noisy_points_and_name_the_books_lines():
    import matplotlib

    matplotlib.use("Agg")
    records = [matmul_record(n, noisy=n == 1000, call_seconds=2e-3) for n in (500, 1000)]
    records += [matmul_record(n, method="book", seconds=0.1, warm_seconds=0.05)
                for n in (500, 1000)]
    ax = plots.plot(records, "seconds", report_format.new_axes())
    labels = ax.get_legend_handles_labels()[1]
    assert plots.NOISY in labels and labels.count(plots.NOISY) == 1
    hollow = [line for line in ax.get_lines() if line.get_markerfacecolor() == "white"]
    assert [list(line.get_xdata()) for line in hollow] == [[1000], [1000]]  # product and call
    book = plots.plot_book(records, report_format.new_axes())
    text = " ".join(book.get_legend_handles_labels()[1])
    assert "GeForce GT 720, one run each, set-up included" in text and "its CPU" in text
    assert "compiling each new shape is inside this one timing" in text
