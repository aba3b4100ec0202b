"""results: the record schema, the environment snapshot and the crash-safe store."""

from __future__ import annotations

import errno
import json
import os
import platform
import subprocess

import pytest

from conftest import PYTHON, REPO
from gpubench import machine, results, rundir


def _record(**fields):
    fields.setdefault("environment", {k: None for k in results.ENVIRONMENT_FIELDS})
    fields = {"size": 10, "dtype": "float32", "method": "book", "seconds": 1.0, **fields}
    return results.make_record("matmul", notebook="nb", env="cpu", device="cpu", **fields)


def test_record_has_every_schema_field():
    record = _record()
    for name in results.FIELDS["matmul"]:
        assert name in record
    assert record["schema"] == results.SCHEMA and record["status"] == "ok"


def test_unknown_field_and_status_are_rejected():
    with pytest.raises(ValueError, match="'sezi'"):
        _record(sezi=3)
    with pytest.raises(ValueError, match="'great'"):
        _record(status="great")


def test_validate_names_the_missing_field():
    record = _record()
    del record["gflops"]
    with pytest.raises(ValueError, match="'gflops'"):
        results.validate(record)


def test_nan_is_stored_as_null(tmp_path):
    store = results.ResultsStore(tmp_path / "r.jsonl")
    store.append(_record(gflops=float("nan")))
    assert json.loads((tmp_path / "r.jsonl").read_text())["gflops"] is None


def test_a_crash_loses_nothing_already_appended(tmp_path):
    path = tmp_path / "r.jsonl"
    script = f"""
import os
from gpubench import results
store = results.ResultsStore({str(path)!r})
env = {{k: None for k in results.ENVIRONMENT_FIELDS}}
for size in (1, 2, 3):
    store.append(results.make_record("matmul", notebook="nb", env="cpu", device="cpu",
                 size=size, environment=env))
os._exit(9)  # no clean-up, no buffers flushed at exit
"""
    out = subprocess.run([PYTHON, "-c", script], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 9, out.stderr
    assert [r["size"] for r in rundir.read_records(path)] == [1, 2, 3]


def _lines(path):
    return path.read_text().splitlines()


def test_append_ends_a_cut_off_last_line_first(tmp_path):
    path = tmp_path / "results.jsonl"
    good = json.dumps(_record())
    path.write_text(good + "\n" + good[:40])  # a crash or a full disk cut the last write
    store = results.ResultsStore(path)
    store.append(_record(size=20))
    lines = _lines(path)
    assert lines[1] == good[:40] and json.loads(lines[2])["size"] == 20
    with pytest.warns(UserWarning, match=r"results.jsonl:2: skipped: not a JSON record"):
        assert [r["size"] for r in rundir.read_records(tmp_path)] == [10, 20]


def test_a_full_disk_midway_names_the_path_and_the_next_append_repairs(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    store = results.ResultsStore(path)
    store.append(_record(size=1))
    real_write = os.write

    def full_disk(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(results.ResultsWriteError, match="disk is full") as caught:
        store.append(_record(size=2))
    assert str(path) in str(caught.value)
    monkeypatch.setattr(os, "write", real_write)
    store.append(_record(size=3))
    problems = []
    with pytest.warns(UserWarning, match=":2: skipped"):
        records = rundir.read_records(path, problems)
    assert [r["size"] for r in records] == [1, 3]
    assert len(_lines(path)) == 3 and problems == [f"{path}:2: skipped: not a JSON record "
                                                    "(cut off by a crash or a full disk?)"]


def test_a_read_only_disk_says_so(tmp_path, monkeypatch):
    store = results.ResultsStore(tmp_path / "r.jsonl")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(results.ResultsWriteError, match="read-only.*r.jsonl|r.jsonl.*read-only"):
        store.append(_record())


@pytest.mark.parametrize("line,reason", [
    ("{}", "lacks the field 'schema'"),
    ('{"schema": 99}', "unknown schema version 99"),
    ('{"schema": "3"}', "unknown schema version '3'"),
    ('{"schema": true}', "unknown schema version True"),
    ("[1, 2]", "JSON object, not list"),
    ('{"schema": 4, "benchmark": "matmul"}', "matmul field 'run_id' is (missing); expected a "
                                             "string"),
    ('{"schema": 2, "benchmark": "matmul"}', "schema version 2, older than the 4 this gpubench "
                                             "reads; convert the file once: python "
                                             "tools/convert_records.py FILE"),
    ("SIZE500", "matmul field 'size' is '500'; expected a whole number"),
    ("ENVNULL", "matmul field 'environment' is null; expected a JSON object"),
])
def test_unreadable_records_are_skipped_naming_the_line(tmp_path, line, reason):
    good = _record()
    if line == "SIZE500":
        line = json.dumps({**good, "size": "500"})
    if line == "ENVNULL":
        line = json.dumps({**good, "environment": None})
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(good) + "\n" + line + "\n" + json.dumps(good) + "\n")
    problems = []
    with pytest.warns(UserWarning) as warned:
        assert len(rundir.read_records(path, problems)) == 2
    assert len(problems) == 1 and problems[0].startswith(f"{path}:2: skipped: ")
    assert reason in problems[0] and str(warned[0].message) == problems[0]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_older_schema_is_skipped_naming_its_version_and_the_converter(tmp_path, version):
    """One schema version lives in the code: an older line is skipped, and the warning says
    which version it is and how to convert the file."""
    old = {k: v for k, v in _record().items() if k not in ("attempt", "backend", "telemetry")}
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({**old, "schema": version}) + "\n" + json.dumps(_record()) + "\n")
    problems = []
    with pytest.warns(UserWarning, match=f"schema version {version}, older than"):
        assert [r["schema"] for r in rundir.read_records(path, problems)] == [results.SCHEMA]
    assert problems == [f"{path}:1: skipped: schema version {version}, older than the "
                        f"{results.SCHEMA} this gpubench reads; convert the file once: python "
                        "tools/convert_records.py FILE"]
    assert (REPO / "tools" / "convert_records.py").is_file()


def test_a_bad_or_missing_environment_detail_costs_nothing(tmp_path):
    """Every environment field is droppable: a record with git_commit true or without hostname
    is written and read whole; the report alone drops the bad field."""
    environment = {k: None for k in results.ENVIRONMENT_FIELDS}
    store = results.ResultsStore(tmp_path / "results.jsonl")
    store.append(_record(environment={**environment, "git_commit": True}, size=1))
    store.append(_record(environment={k: v for k, v in environment.items() if k != "hostname"},
                         size=2))
    records = rundir.read_records(tmp_path)
    assert [r["size"] for r in records] == [1, 2]
    assert records[0]["environment"]["git_commit"] is True
    assert "hostname" not in records[1]["environment"]
    with pytest.raises(ValueError, match="'size'"):  # a measured field still costs the record
        store.append(_record(size="big"))


def test_missing_results_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="gpubench run"):
        rundir.read_records(tmp_path)


def test_environment_snapshot_has_every_field():
    from gpubench import backends

    snapshot = results.environment_snapshot()
    assert set(results.RECORD["properties"]["environment"]["properties"]) <= set(snapshot)
    assert snapshot["python"] == platform.python_version()
    assert snapshot["backend"] == backends.current().NAME
    assert snapshot["backend_version"] == backends.current().version()
    assert snapshot["cpu_count"] >= 1 and snapshot["ram_gb"] > 0
    assert isinstance(snapshot["gpus"], list)


@pytest.fixture
def fresh_snapshot():
    """The machine looked at anew in the test, and after it (`machine.facts` is cached)."""
    machine.facts.cache_clear()
    yield
    machine.facts.cache_clear()


def test_gpus_come_from_nvidia_smi(fake_command, fresh_snapshot):
    fake_command("nvidia-smi", 'echo "NVIDIA H200, 143771, 570.86.15"')
    assert results.environment_snapshot()["gpus"] == [
        {"name": "NVIDIA H200", "memory_gb": 140.4, "driver": "570.86.15"}]


def test_tf_env_vars_are_recorded(monkeypatch, fresh_snapshot):
    results.environment_snapshot()
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert "TF_ENABLE_ONEDNN_OPTS" not in results.environment_snapshot()["tf_env"]  # cached
    machine.facts.cache_clear()
    assert results.environment_snapshot()["tf_env"]["TF_ENABLE_ONEDNN_OPTS"] == "0"


def test_run_id_comes_from_the_runner(monkeypatch):
    monkeypatch.setenv("GPUBENCH_RUN_ID", "run-42")
    assert _record()["run_id"] == "run-42"


def test_records_carry_their_backend(tmp_path):
    record = _record(environment={k: None for k in results.ENVIRONMENT_FIELDS} | {"backend": "jax"})
    assert record["backend"] == "jax" and record["schema"] == results.SCHEMA
    assert _record()["backend"] == "tensorflow"  # an environment that names none
    (tmp_path / "results.jsonl").write_text(json.dumps(record) + "\n")
    assert rundir.read_records(tmp_path)[0]["backend"] == "jax"


@pytest.mark.parametrize("field,value", [
    ("benchmark", []), ("benchmark", {}), ("benchmark", None), ("status", []), ("status", {}),
    ("environment", []), ("size", [500]), ("attempt", True)])
def test_validate_raises_only_value_errors(field, value):
    with pytest.raises(ValueError, match=repr(field)):
        results.validate({**_record(), field: value})
    with pytest.raises(ValueError, match="JSON object, not list"):
        results.validate([])


def test_lines_are_read_as_bytes_a_bad_byte_costs_one_line_and_a_bom_none(tmp_path):
    good = json.dumps(_record()).encode()
    path = tmp_path / "results.jsonl"
    path.write_bytes(rundir.BOM + good + b"\r\n" + good[:30] + b"\xd4\xff" + good[30:] + b"\n"
                     + good + b"\n")
    problems = []
    with pytest.warns(UserWarning, match=r"results.jsonl:2: skipped: not UTF-8 text \(byte 0xd4 "
                                         r"at column 31\)"):
        records = rundir.read_records(path, problems, origin=True)
    assert [r["_origin"] for r in records] == [f"{path}:1", f"{path}:3"]
    assert len(problems) == 1
    with pytest.warns(UserWarning):
        assert "_origin" not in rundir.read_records(tmp_path, [])[0]


def test_a_results_file_that_is_a_directory_is_a_read_error_naming_it(tmp_path):
    (tmp_path / "results.jsonl").mkdir()
    with pytest.raises(results.ResultsPathError, match="cannot read results from .*results.jsonl"
                                                       ".*: it is a directory"):
        rundir.read_records(tmp_path)


def _junk(count: int) -> bytes:
    """`count` (even) unreadable lines, half text and half binary (no newline inside)."""
    text = [f'junk {i} {{"schema": 3, cut off'.encode() for i in range(count // 2)]
    binary = [bytes([0xFF, 0xFE, 0x80 + i % 100, 0x00]) * (1 + i % 7) for i in range(count // 2)]
    return b"\n".join(line for pair in zip(text, binary, strict=True) for line in pair) + b"\n"


def test_a_file_of_junk_lines_is_counted_and_the_report_stays_its_size(tmp_path):
    """100,000 junk lines: a few named with file:line, one count, and report.md about the size
    of the clean one; the records around them all read."""
    from gpubench.report.document import compose

    path = tmp_path / "results.jsonl"
    good = [json.dumps(_record(size=size)) for size in (100, 200)]
    path.write_text("\n".join(good) + "\n")
    clean, _ = compose([tmp_path], draw=False)
    with path.open("ab") as handle:
        handle.write(_junk(100_000))
        handle.write((good[1] + "\n").encode())
    problems = []
    with pytest.warns(UserWarning) as warned:
        records = rundir.read_records(path, problems)
        text, _ = compose([tmp_path], draw=False)
    assert len(records) == 3
    shown = rundir.NAMED_UNREADABLE
    assert [p.split(": skipped")[0] for p in problems[:shown]] == [
        f"{path}:{n}" for n in range(3, 3 + shown)]
    assert len(problems) == shown + 1 and problems[-1] == (
        f"{path}: skipped 100000 unreadable lines in all: {100_000 - shown} more after the "
        f"{shown} named, the last at line 100002")
    assert len(warned) == 2 * (shown + 1)  # the read here, and the report's own
    assert "skipped 100000 unreadable lines" in text and f"{path}:{3 + shown}:" not in text
    assert len(text) - len(clean) < 2500, text[len(clean) - 200:]


def test_a_line_too_long_to_be_a_record_is_read_past_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(rundir, "MAX_LINE_BYTES", 10_000)
    seen = []
    real = results.parse_line
    monkeypatch.setattr(results, "parse_line", lambda line: seen.append(len(line)) or real(line))
    good = json.dumps(_record())
    assert len(good) < 10_000
    path = tmp_path / "results.jsonl"
    path.write_text(good + "\n" + "x" * 50_000 + "\n" + good + "\n")
    problems = []
    with pytest.warns(UserWarning):
        assert len(rundir.read_records(path, problems)) == 2
    assert problems == [f"{path}:2: skipped: a line longer than 10,000 bytes, not a record "
                        "gpubench writes"]
    assert max(seen) < 10_000  # the long line never reached the parser


def test_minus_zero_is_read_as_zero(tmp_path):
    (tmp_path / "results.jsonl").write_text(json.dumps(_record(seconds=-0.0, gflops=-0.0)) + "\n")
    record = rundir.read_records(tmp_path)[0]
    assert str(record["seconds"]) == "0.0" and str(record["gflops"]) == "0.0"


def test_nan_infinity_and_a_number_past_a_float_are_read_as_null(tmp_path):
    line = json.dumps(_record(seconds=float("nan"), gflops=float("inf"))).replace(
        '"seconds_min": null', '"seconds_min": 1e999')
    (tmp_path / "results.jsonl").write_text(line + "\n")
    assert "NaN" in line and "Infinity" in line and "1e999" in line
    record = rundir.read_records(tmp_path)[0]
    assert record["seconds"] is None and record["gflops"] is None
    assert record["seconds_min"] is None


# ---- the record schema: one declaration, a valid draft 2020-12 schema, compiled the same

def test_the_record_schema_is_a_valid_draft_2020_12_schema_and_declares_what_is_written():
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(results.RECORD)
    assert results.SCHEMA == 4 and results.RECORD["properties"]["schema"]["enum"] == [4]
    for benchmark in results.BENCHMARKS:  # make_record writes exactly the declared fields
        record = results.make_record(benchmark, notebook="nb", env="cpu", device="cpu",
                                     environment={k: None for k in results.ENVIRONMENT_FIELDS})
        assert tuple(record) == tuple(dict.fromkeys((*results.COMMON_FIELDS,
                                                     *results.FIELDS[benchmark]))), benchmark


def test_the_compiled_check_and_jsonschema_agree_on_mutated_records():
    """The fast path (fastjsonschema's compiled code) decides as jsonschema does, at both
    levels, for records with any field of any kind mutated."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from test_report import _fuzz_base, _mutated, _paths

    base = [results.parse_line(json.dumps(r)) for r in _fuzz_base()]
    values = st.sampled_from([None, -1, -0.5, 0, 1, 1.0, 2**53 + 1, 1e308, "", " ", "x", "None",
                              " -0 ", "nan", True, [], [None], [-1.0], [1, "x"], [[1]], {},
                              {"a": None}, "DELETE"])

    @settings(max_examples=400, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def one(data):
        record = data.draw(st.sampled_from(base))
        path = data.draw(st.sampled_from(_paths(record)))
        record = _mutated(record, path, data.draw(values))
        for ranges in (False, True):
            checker = results.checker(ranges)
            try:
                checker.compiled(record)
                fast = True
            except checker.failed:
                fast = False
            assert fast == (next(checker.errors(record), None) is None), (path, ranges, record)

    one()
