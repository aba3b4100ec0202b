"""results: the record schema, the environment snapshot and the crash-safe store."""

from __future__ import annotations

import json
import platform
import subprocess

import pytest

from conftest import PYTHON, REPO
from gpubench import results


def _record(**fields):
    fields.setdefault("environment", {k: None for k in results.ENVIRONMENT_FIELDS})
    return results.make_record("matmul", notebook="nb", env="cpu", device="cpu", size=10,
                               dtype="float32", method="book", seconds=1.0, **fields)


def test_record_has_every_schema_field():
    record = _record()
    for name in results.COMMON_FIELDS + results.MATMUL_FIELDS:
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
    assert [r["size"] for r in results.read_records(path)] == [1, 2, 3]


def test_truncated_last_line_is_skipped_but_damage_elsewhere_is_an_error(tmp_path):
    path = tmp_path / "results.jsonl"
    good = json.dumps(_record())
    path.write_text(good + "\n" + good[:40])
    assert len(results.read_records(tmp_path)) == 1
    path.write_text(good[:40] + "\n" + good + "\n")
    with pytest.raises(ValueError, match=":1 is not a JSON record"):
        results.read_records(path)


def test_missing_results_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="gpubench run"):
        results.read_records(tmp_path)


def test_environment_snapshot_has_every_field():
    import tensorflow as tf

    snapshot = results.environment_snapshot()
    assert set(results.ENVIRONMENT_FIELDS) <= set(snapshot)
    assert snapshot["python"] == platform.python_version()
    assert snapshot["tensorflow"] == tf.__version__
    assert snapshot["backend"] == "tensorflow"
    assert snapshot["cpu_count"] >= 1 and snapshot["ram_gb"] > 0
    assert isinstance(snapshot["gpus"], list)


def test_gpus_come_from_nvidia_smi(fake_command):
    fake_command("nvidia-smi", 'echo "NVIDIA H200, 143771, 570.86.15"')
    from gpubench import devices

    assert results._gpus(devices) == [
        {"name": "NVIDIA H200", "memory_gb": 140.4, "driver": "570.86.15"}]


def test_tf_env_vars_are_recorded(monkeypatch):
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    results._snapshot.cache_clear()
    try:
        assert results.environment_snapshot()["tf_env"]["TF_ENABLE_ONEDNN_OPTS"] == "0"
    finally:
        results._snapshot.cache_clear()


def test_run_id_comes_from_the_runner(monkeypatch):
    monkeypatch.setenv("GPUBENCH_RUN_ID", "run-42")
    assert _record()["run_id"] == "run-42"
