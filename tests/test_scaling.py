"""Data-parallel training: the shared step on each backend, the chapter, `gpubench scaling`.

Tests marked `jax` run in the JAX env (KERAS_BACKEND=jax,
XLA_FLAGS=--xla_force_host_platform_device_count=2), those marked `torch` in the PyTorch env
(KERAS_BACKEND=torch), the others in the TensorFlow env.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest

from conftest import NOTEBOOKS, REPO, python_env
from gpubench import backends, params, results, rundir, scaling
from gpubench.scaling import rules

CLI = [sys.executable, "-m", "gpubench", "scaling"]
TWO_PORTS = "127.0.0.1:12345,127.0.0.1:12346"
on_jax = pytest.mark.skipif(backends.requested() != "jax", reason="needs KERAS_BACKEND=jax")
on_torch = pytest.mark.skipif(backends.requested() != "torch", reason="needs KERAS_BACKEND=torch")
# The workers' parameters over the quick profile's (the GPUBENCH_SCALING_PARAMS seam): few images.
SMALL = json.dumps({"max_train_samples": 1000, "epochs": 3})
ENGINES = {"tensorflow": ("tf.distribute", "grpc"), "jax": ("jax.distributed", "gloo"),
           "torch": ("torch.distributed", "gloo")}


def _cli(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=python_env(GPUBENCH_DATA_SOURCE="synthetic", **env))


# ---------------------------------------------------------------- rules without a framework


@pytest.mark.parametrize(("env_is_gpu", "gpus", "profile", "by_name", "expected"), [
    (True, 2, "full", False, {}),
    (True, 4, "quick", False, {}),
    (False, 0, "quick", False, {"virtual_devices": 2}),
    (False, 0, "full", False, None),
    (False, 0, "full", True, {"virtual_devices": 2}),
    (True, 1, "full", False, None),
    (True, 1, "quick", False, None),
    (True, 1, "full", True, {"virtual_devices": 2}),
])
def test_include_in_run(env_is_gpu, gpus, profile, by_name, expected):
    assert rules.include_in_run(env_is_gpu, gpus, profile, by_name) == expected


def test_every_backend_runs_the_chapter():
    """Each backend gpubench has, its data-parallel module: none is left out of the chapter."""
    for backend in backends.SUPPORTED:
        module = importlib.import_module(f"gpubench.scaling.{backend}_parallel")
        assert module.STRATEGY and callable(module.make_epoch), backend


GOOD = {"model": "mlp_h1000", "devices": None, "replicas": None, "per_replica_batch_size": 100,
        "scaling": "weak", "epochs": 3, "max_train_samples": None, "virtual_devices": None}


@pytest.mark.parametrize(("change", "named"), [
    ({"replicas": [1, 0]}, "replicas"), ({"replicas": 0}, "replicas"),
    ({"replicas": []}, "replicas"),
    ({"scaling": "linear"}, "linear"), ({"model": "resnet"}, "resnet"),
    ({"per_replica_batch_size": 0}, "per_replica_batch_size"), ({"epochs": 1.5}, "epochs"),
    ({"virtual_devices": 0}, "virtual_devices"), ({"devices": []}, "devices"),
    ({"devices": ["gpu:0", "tpu:0"]}, "tpu:0"),
])
def test_check_params_names_the_bad_value(change, named):
    with pytest.raises(ValueError, match=named):
        rules.check_parameters({**GOOD, **change})


def test_check_params_normalises_lists():
    checked = rules.check_parameters({**GOOD, "replicas": 2, "devices": "gpu:0"})
    assert checked["replicas"] == [2] and checked["devices"] == ["gpu:0"]
    checked = rules.check_parameters({**GOOD, "replicas": "1,2", "devices": "cpu:0,cpu:1"})
    assert checked["replicas"] == [1, 2] and checked["devices"] == ["cpu:0", "cpu:1"]


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", "host:port",
                                  "127.0.0.1:5000,", "127.0.0.1:5000,127.0.0.1:5000", ":5000"])
def test_parse_cluster_refuses_malformed_lists(text):
    with pytest.raises(ValueError, match="--cluster"):
        rules.parse_cluster(text)


def test_parse_cluster_and_index():
    assert rules.parse_cluster("10.0.0.1:2222, node-b:2222", 1) == ["10.0.0.1:2222",
                                                                     "node-b:2222"]
    for bad in (2, -1):
        with pytest.raises(ValueError, match=f"--index {bad} is out of range .* 0 to 1"):
            rules.parse_cluster("10.0.0.1:2222,node-b:2222", bad)


def test_global_batch_weak_and_strong():
    assert rules.global_batch("weak", 100, 4) == (400, 100)
    assert rules.global_batch("strong", 100, 4) == (100, 25)
    assert rules.global_batch("strong", 100, 3) == (99, 33)
    with pytest.raises(ValueError, match="less than one image"):
        rules.global_batch("strong", 2, 4)


def test_canonical_names():
    assert [rules.canonical(d) for d in ("/GPU:1", "/CPU:0", "cpu", "gpu:0", "/device:CPU:1")] \
        == ["gpu:1", "cpu:0", "cpu:0", "gpu:0", "cpu:1"]


# ---------------------------------------------------------------- the step, in this process


def _split(n_train: int = 300):
    from gpubench import data, training

    return training.split("mlp_h1000", data.load("mnist", source="synthetic",
                                                 max_train_samples=n_train, verbose=False))


def test_one_replica_step_matches_a_plain_single_device_step():
    """The distributed step computes what a plain GradientTape step computes."""
    import keras
    import tensorflow as tf

    from gpubench import models

    split = _split(330)  # 300 training images after the validation hold-out: 3 batches of 100
    strategy, fields = scaling.strategy(["/CPU:0"])
    measured = scaling.train(strategy, "mlp_h1000", split, batch=100, epochs=2, seed=7,
                             shuffle=False, verbose=False)
    assert measured.steps == 3 and fields["all_reduce"] == "none (one replica)"
    assert fields["engine"] == "tf.distribute" and fields["replicas"] == 1

    keras.utils.set_random_seed(7)
    model = models.build("mlp_h1000")
    plain = []
    for _ in range(2):
        losses = []
        for start in range(0, 300, 100):
            x, y = split.x_train[start:start + 100], split.y_train[start:start + 100]
            with tf.GradientTape() as tape:
                loss = model.loss(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            losses.append(float(loss))
        plain.append(np.mean(losses))
    assert plain[1] < plain[0]  # it trains
    np.testing.assert_allclose(measured.epoch_losses, plain, rtol=1e-5)


def test_sweep_refuses_bad_devices_and_replica_counts():
    from gpubench import devices

    data = None  # not reached: every call below fails before training
    with pytest.raises(ValueError, match="replicas 2 is more than the 1 device"):
        scaling.sweep("mlp_h1000", data, replicas=[1, 2])
    with pytest.raises(ValueError, match="replicas: 0 is not a positive integer"):
        scaling.sweep("mlp_h1000", data, replicas=[0])
    with pytest.raises(devices.DeviceError, match="cpu:3"):
        scaling.sweep("mlp_h1000", data, devices=["cpu:3"])
    with pytest.raises(params.ParameterError, match="tpu:0"):  # by its syntax, before devices
        scaling.sweep("mlp_h1000", data, devices=["tpu:0"])


def test_a_gpu_asked_for_and_not_there_raises_the_guard(fake_machine):
    from gpubench import devices

    fake_machine(gpus=0)
    with pytest.raises(devices.GPUNotAvailableError):
        scaling.local_devices(["gpu:0", "gpu:1"])


def _rec(replicas, sps, eff, acc, **fields):
    return {"status": "ok", "replicas": replicas, "samples_per_second": sps,
            "scaling_efficiency": eff, "test_accuracy": acc, "global_batch_size": 100 * replicas,
            "all_reduce": "NCCL", "virtual_devices": None, "strategy": "mirrored",
            "workers": 1, "final_loss": 0.1, "engine": "tf.distribute",
            "devices": [f"gpu:{i}" for i in range(replicas)], "step_seconds": 0.0125, **fields}


def test_the_table_says_where_efficiency_drops():
    from gpubench.report import scaling as shown

    records = [_rec(1, 1000, 1.0, 0.97), _rec(2, 1900, 0.95, 0.96), _rec(4, 3000, 0.75, 0.95)]
    text = shown.table(records)
    assert "below 90% at 4 replicas (75.0%)" in text and "virtual" not in text.lower()
    assert ("| tf.distribute | mirrored | 1 | 4 | gpu:0, gpu:1, gpu:2, gpu:3 | 400 | 3,000 | "
            "4,000 | 75% | 12.5 ms | NCCL | 0.950 |") in text
    virtual = shown.table([_rec(n, 1000, 1.0 / n, 0.9, virtual_devices=2) for n in (1, 2)])
    assert "not how the machine scales" in virtual and "below 90%" not in virtual


# ---------------------------------------------------------------- the chapter


@pytest.mark.slow
def test_chapter_with_two_virtual_devices_records_replicas_1_and_2(tmp_path, cpu_kernel):
    out, results_path = tmp_path / "out.ipynb", tmp_path / "results.jsonl"
    cmd = [sys.executable, "-m", "papermill", str(NOTEBOOKS / "Multi_GPU_Scaling.ipynb"), str(out),
           "-k", cpu_kernel, "-p", "profile", "quick", "-p", "virtual_devices", "2",
           "-p", "max_train_samples", "2000", "-p", "data_source", "synthetic",
           "-p", "results_path", str(results_path)]
    proc = subprocess.run(cmd, cwd=NOTEBOOKS, capture_output=True, text=True, timeout=600,
                          env=python_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = rundir.read_records(results_path)
    assert sorted(r["replicas"] for r in records) == [1, 2]
    for record in records:
        results.validate(record)
        assert record["benchmark"] == "scaling" and record["status"] == "ok"
        synthetic = record["data_source"] == "synthetic"  # data_verified: None, not checksummed
        one_process = ("collective",)  # the library between processes: none in one process
        for name in set(results.FIELDS["scaling"]) - set(results.COMMON_FIELDS):
            assert record[name] is not None or (name == "data_verified" and synthetic) or (
                name in one_process), name
        assert record["data_verified"] is (None if synthetic else record["data_verified"])
        assert record["strategy"] == "mirrored" and record["workers"] == 1
        assert record["engine"] == "tf.distribute" and record["tf32"] is False
        assert record["virtual_devices"] == 2 and record["scaling"] == "weak"
        assert record["per_replica_batch_size"] == 100
        assert record["global_batch_size"] == 100 * record["replicas"]
        assert len(record["epoch_seconds"]) == record["epochs"] == 3
        assert len(record["epoch_load_average"]) == 3
        assert record["step_seconds"] == pytest.approx(
            record["steady_epoch_seconds"] / (record["train_samples"] // record["batch_size"]))
    one, two = sorted(records, key=lambda r: r["replicas"])
    assert one["scaling_efficiency"] == 1.0 and one["devices"] == ["cpu:0"]
    assert two["devices"] == ["cpu:0", "cpu:1"]
    assert two["scaling_efficiency"] == pytest.approx(
        two["samples_per_second"] / (2 * one["samples_per_second"]))
    nb = nbformat.read(out, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    shown = "".join(str(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert "mechanics of data-parallel training, not scaling" in text
    assert "not how the machine scales" in shown
    assert "| tf.distribute | mirrored | 1 | 2 | virtual (2 on one CPU) | 200 |" in shown
    assert any("image/png" in o.get("data", {}) for o in outputs), "the chart is missing"


# ---------------------------------------------------------------- gpubench scaling, every backend


def _two_local_workers(tmp_path: Path, backend: str) -> None:
    """`gpubench scaling --local-workers 2 --profile quick`: both workers train in step; worker 0
    writes the one-process run and the two-process run; the report shows it beside TensorFlow's."""
    run_dir = tmp_path / "run"
    proc = _cli("--local-workers", "2", "--profile", "quick", "--out", str(run_dir), timeout=900,
                GPUBENCH_SCALING_PARAMS=SMALL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    losses = dict(re.findall(r"^\[worker (\d)\] final_loss (\S+)$", proc.stdout, re.M))
    assert set(losses) == {"0", "1"} and float(losses["0"]) == pytest.approx(float(losses["1"]))
    engine, collective = ENGINES[backend]
    assert f"worker 1: 2 replica(s), {engine} over {collective}; the all-reduce check passed" \
        in proc.stdout
    one, two = rundir.read_records(run_dir)
    for record in (one, two):
        results.validate(record)
        assert record["status"] == "ok" and record["backend"] == backend
        assert record["engine"] == engine and record["collective"] == collective
        assert record["step_seconds"] > 0 and record["test_accuracy"] > 0
    assert one["workers"] == one["replicas"] == 1 and one["scaling_efficiency"] == 1.0
    assert two["workers"] == 2 and two["replicas"] == 2 and two["global_batch_size"] == 200
    assert two["final_loss"] == pytest.approx(float(losses["0"]))
    assert two["scaling_efficiency"] == pytest.approx(
        two["samples_per_second"] / (2 * one["samples_per_second"]))
    # beside a TensorFlow run of the same command, in one report
    tf_dir = tmp_path / "tf"
    tf_dir.mkdir()
    tf = two | {"env": "cpu", "backend": "tensorflow", "engine": "tf.distribute",
                "strategy": "multi_worker", "collective": "grpc", "scaling_efficiency": 0.5}
    (tf_dir / "results.jsonl").write_text(json.dumps(tf) + "\n", encoding="utf-8")
    report = subprocess.run([sys.executable, "-m", "gpubench", "report", str(run_dir),
                             str(tf_dir)], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env=python_env())
    assert report.returncode == 0, report.stderr[-2000:]
    text = (run_dir / "report.md").read_text()
    section = text[text.index("## Scaling"):]
    efficiency = f"| {two['scaling_efficiency']:.0%} |"
    assert f"| {engine} | {two['strategy']} | 2 | 2 |" in section and efficiency in section
    assert "| tf.distribute | multi_worker | 2 | 2 |" in section and "| 50% |" in section


@pytest.mark.slow
def test_two_local_workers_on_tensorflow(tmp_path):
    _two_local_workers(tmp_path, "tensorflow")


@pytest.mark.jax
@on_jax
def test_two_local_workers_on_jax(tmp_path):
    _two_local_workers(tmp_path, "jax")


@pytest.mark.torch
@on_torch
def test_two_local_workers_on_torch(tmp_path):
    _two_local_workers(tmp_path, "torch")


def _left_in_groups(groups: set[int]) -> list[int]:
    """Processes still alive in the process groups `groups` (each worker leads its own)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in groups:
            left.append(int(stat.parent.name))
    return left


def _killed_worker(tmp_path: Path) -> None:
    """Worker 1 killed once it trains: the run fails at once naming it; no process is left."""
    proc = subprocess.Popen([*CLI, "--local-workers", "2", "--profile", "quick",
                             "--out", str(tmp_path / "run")], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=python_env(GPUBENCH_DATA_SOURCE="synthetic"))
    pids = {}
    try:
        for line in proc.stdout:  # kill worker 1 once it trains: worker 0 then waits on it
            if match := re.match(r"worker (\d): pid (\d+)", line):
                pids[int(match.group(1))] = int(match.group(2))
            if line.startswith("[worker 1]   epoch 1/"):
                break
        os.kill(pids[1], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=60)  # worker 0 must not wait forever
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr[-2000:]
    assert re.search(r"worker 1 \(pid \d+\) was killed by signal 9; its last output line: ", stderr)
    deadline = time.monotonic() + 10
    while _left_in_groups(set(pids.values())) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _left_in_groups(set(pids.values())), "a worker (or its child) outlived the run"
    assert not (tmp_path / "run" / "results.jsonl").exists()


@pytest.mark.slow
def test_a_killed_worker_fails_the_run_quickly_and_leaves_no_process(tmp_path):
    _killed_worker(tmp_path)


@pytest.mark.jax
@on_jax
def test_a_killed_worker_fails_the_run_on_jax(tmp_path):
    _killed_worker(tmp_path)


@pytest.mark.torch
@on_torch
def test_a_killed_worker_fails_the_run_on_torch(tmp_path):
    _killed_worker(tmp_path)


def _wrong_all_reduce_stops_before_training(tmp_path: Path, backend: str) -> None:
    proc = _cli("--local-workers", "2", "--profile", "quick", "--out", str(tmp_path / "run"),
                timeout=300, GPUBENCH_TEST_CORRUPT_ALLREDUCE="1")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    named = rf"worker \d \({backend}, {re.escape(ENGINES[backend][0])} over \w+\): the " \
            r"all-reduce check summed \[4\.0, 7\.0.*\] where \[3\.0, 6\.0.*\] was expected"
    assert re.search(rf"its last output line: gpubench scaling: {named}", proc.stderr)
    assert "epoch 1/" not in proc.stdout and "Data:" not in proc.stdout  # before training
    assert not (tmp_path / "run" / "results.jsonl").exists()


@pytest.mark.slow
def test_a_wrong_all_reduce_stops_the_run_before_training(tmp_path):
    _wrong_all_reduce_stops_before_training(tmp_path, "tensorflow")


@pytest.mark.jax
@on_jax
def test_a_wrong_all_reduce_stops_the_run_before_training_on_jax(tmp_path):
    _wrong_all_reduce_stops_before_training(tmp_path, "jax")


@pytest.mark.torch
@on_torch
def test_a_wrong_all_reduce_stops_the_run_before_training_on_torch(tmp_path):
    _wrong_all_reduce_stops_before_training(tmp_path, "torch")


def _port_in_use_and_no_coordinator(tmp_path: Path) -> None:
    """Worker 0's port taken: one line, exit 2; worker 0 never answering: one line, exit 1."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        start = time.monotonic()
        proc = _cli("--cluster", f"127.0.0.1:{port},127.0.0.1:1", "--index", "0",
                    "--out", str(tmp_path / "run"), timeout=30)
        assert time.monotonic() - start < 30
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr == (f"gpubench scaling: error: port {port} of --cluster entry 0 "
                               f"(127.0.0.1:{port}) is in use on this machine (Address already "
                               "in use); free it or pick another port\n")
    start = time.monotonic()
    proc = _cli("--cluster", f"127.0.0.1:{port},127.0.0.1:1", "--index", "1", timeout=60,
                GPUBENCH_SCALING_CONNECT_TIMEOUT="2")
    assert time.monotonic() - start < 60
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == (f"gpubench scaling: worker 1: worker 0 at 127.0.0.1:{port} did not "
                           "answer in 2 s; start it, check the address, and open the port "
                           "between the machines\n")


def test_a_port_in_use_or_no_coordinator_is_one_line(tmp_path):
    _port_in_use_and_no_coordinator(tmp_path)


@pytest.mark.jax
@on_jax
def test_a_port_in_use_or_no_coordinator_is_one_line_on_jax(tmp_path):
    _port_in_use_and_no_coordinator(tmp_path)


@pytest.mark.torch
@on_torch
def test_a_port_in_use_or_no_coordinator_is_one_line_on_torch(tmp_path):
    _port_in_use_and_no_coordinator(tmp_path)


@pytest.mark.parametrize(("args", "named"), [
    (["--local-workers", "2", "--replicas", "0"], "--replicas must be a positive integer"),
    (["--local-workers", "0"], "--local-workers must be a positive integer"),
    (["--cluster", "127.0.0.1", "--index", "0"], "malformed --cluster entry '127.0.0.1'"),
    (["--cluster", "127.0.0.1:1,127.0.0.1:x", "--index", "0"], "malformed --cluster entry"),
    (["--cluster", "127.0.0.1:12345,127.0.0.1:12346", "--index", "2"], "--index 2 is out of range"),
    (["--cluster", "127.0.0.1:12345"], "--cluster needs --index"),
])
def test_bad_input_exits_2_naming_it(args, named):
    proc = _cli(*args, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr


@pytest.mark.slow
def test_replicas_above_the_devices_exits_2(tmp_path):
    proc = _cli("--local-workers", "2", "--replicas", "2", "--profile", "quick",
                "--out", str(tmp_path / "run"), timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--replicas 2 is more than the 1 device(s) of this worker" in proc.stdout + proc.stderr


def _kill_groups(groups: set[int]) -> None:
    """SIGKILL what is left of the process groups `groups` (a failed test leaves nothing behind)."""
    for group in groups:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)


@pytest.mark.slow
def test_killing_the_launcher_ends_every_worker_and_the_lock_stops_a_second_run(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([*CLI, "--local-workers", "2", "--profile", "quick",
                             "--out", str(run_dir)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env=python_env(GPUBENCH_DATA_SOURCE="synthetic",
                                           GPUBENCH_SCALING_PARAMS=SMALL))
    guard = threading.Timer(600, proc.kill)  # never hang the suite on a launcher that stalls
    guard.start()
    launched, started, child = {}, {}, None
    try:
        for line in proc.stdout:
            if match := re.match(r"worker (\d): pid (\d+) on ", line):
                launched[int(match[1])] = int(match[2])
            if match := re.match(r"\[worker (\d)\] worker \d of 2: pid (\d+)$", line):
                started[int(match[1])] = int(match[2])
            if match := re.match(r"\[worker 0\] \[worker 0\] worker 0 of 1: pid (\d+)$", line):
                child = int(match[1])  # worker 0's one-process run, in a process of its own
            if len(started) == 2 and child:
                break
        assert started == launched and len(launched) == 2 and child, "the workers did not start"
        # while the launcher runs, a second run on its directory is refused, naming it
        second = _cli("--local-workers", "2", "--profile", "quick", "--out", str(run_dir),
                      timeout=120)
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"in use by another gpubench run (PID {proc.pid})" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1 and "Traceback" not in second.stderr

        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60  # generous: the workers die at once, the check is slow
        while _left_in_groups({*launched.values(), child}) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _left_in_groups(set(launched.values())), "a worker outlived its launcher"
        assert not _left_in_groups({child}), "worker 0's one-process run outlived it"
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
        _kill_groups({*launched.values(), *([child] if child else [])})


POLLED_CHILD = """
import os, subprocess, sys
code = ("import os, sys, time; sys.platform = 'darwin'; from gpubench import rundir; "
        "rundir.tie_to_parent(os.getppid()); print(os.getpid(), flush=True); time.sleep(120)")
child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
print(child.stdout.readline().strip(), flush=True)
"""


def test_where_there_is_no_pdeathsig_a_worker_polls_its_parent_and_dies_with_it():
    """The non-Linux way (sys.platform faked): the parent exits; its tied child follows it."""
    proc = subprocess.run([sys.executable, "-c", POLLED_CHILD], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=python_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    child = int(proc.stdout.strip())
    try:
        deadline = time.monotonic() + 30
        while _left_in_groups({child}) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _left_in_groups({child}), "the child outlived its parent"
    finally:
        _kill_groups({child})


def test_scaling_out_takes_the_run_directory_lock(tmp_path):
    from gpubench import rundir

    run_dir = tmp_path / "run"
    with contextlib.ExitStack() as stack:
        rundir.lock_run_dir(run_dir, stack)  # another gpubench process holding it: this one
        for where in (["--local-workers", "2"], ["--cluster", TWO_PORTS, "--index", "0"]):
            proc = _cli(*where, "--profile", "quick", "--out", str(run_dir), timeout=60)
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert f"{run_dir} is in use by another gpubench run (PID {os.getpid()})" in proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1 and "worker" not in proc.stdout
    assert not (run_dir / "results.jsonl").exists()


# ---------------------------------------------------------------- JAX: DataParallel and fit


def _jax_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh JAX process without XLA_FLAGS (unless given)."""
    clean = {k: v for k, v in python_env(KERAS_BACKEND="jax", **env).items()
             if k != "XLA_FLAGS" or "XLA_FLAGS" in env}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=clean)


@pytest.mark.jax
@on_jax
def test_split_cpu_on_jax_before_jax_starts_and_refused_after():
    proc = _jax_python("import gpubench as gb\n"
                       "gb.scaling.split_cpu(3)\n"
                       "print(gb.scaling.local_devices())")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["['cpu:0',", "'cpu:1',", "'cpu:2']"]
    proc = _jax_python("import jax; jax.devices()\n"
                       "import gpubench as gb\n"
                       "gb.scaling.split_cpu(2)")
    assert proc.returncode == 1
    assert ("RuntimeError: virtual_devices=2: JAX has already set up its devices in this process "
            "(1 CPU device(s)); restart the kernel and call gb.scaling.split_cpu(2) before "
            "anything runs on JAX") in proc.stderr


@pytest.mark.jax
@on_jax
def test_data_parallel_fit_on_two_devices_matches_plain_training():
    """Keras's fit with DataParallel over two devices computes what plain steps compute."""
    import keras

    from gpubench import models

    split = _split(330)  # 300 training images after the validation hold-out: 3 batches of 100
    found, fields = scaling.strategy(["cpu:0", "cpu:1"])
    measured = scaling.train(found, "mlp_h1000", split, batch=100, epochs=2, seed=7,
                             shuffle=False, verbose=False)
    assert measured.steps == 3 and fields["all_reduce"] == "XLA all-reduce (host)"
    assert fields["engine"] == "keras.distribution" and fields["replicas"] == 2
    assert len(measured.epoch_telemetry) == 2 and math.isfinite(measured.test_loss)

    keras.utils.set_random_seed(7)
    model = models.build("mlp_h1000")
    plain = []
    for _ in range(2):
        plain.append(np.mean([model.train_on_batch(split.x_train[i:i + 100],
                                                   split.y_train[i:i + 100], return_dict=True)
                              ["loss"] for i in range(0, 300, 100)]))
    assert plain[1] < plain[0]  # it trains
    np.testing.assert_allclose(measured.epoch_losses, plain, rtol=1e-5)


@pytest.mark.jax
@on_jax
def test_jax_sweep_on_two_virtual_devices_records_replicas_1_and_2(tmp_path):
    from gpubench import data
    from gpubench.report import scaling as shown

    store = results.ResultsStore(tmp_path / "results.jsonl")
    loaded = data.load("mnist", source="synthetic", max_train_samples=400, verbose=False)
    records = scaling.sweep("mlp_h1000", loaded, virtual_devices=2, epochs=2,
                            per_replica_batch_size=50, store=store, env="jax-cpu")
    assert records == rundir.read_records(tmp_path / "results.jsonl")
    assert [r["replicas"] for r in records] == [1, 2]
    for record in records:
        results.validate(record)
        assert record["status"] == "ok" and record["backend"] == "jax"
        assert record["strategy"] == "data_parallel" and record["jit_compile"] is True
        assert record["scaling_efficiency"] is not None and record["scaling_efficiency"] > 0
        assert math.isfinite(record["final_loss"]) and record["virtual_devices"] == 2
        assert len(record["epoch_seconds"]) == 2 == len(record["epoch_cpu_util_percent"])
        assert record["telemetry"]["samples"] and record["global_batch_size"] == 50 * record[
            "replicas"]
    assert records[0]["scaling_efficiency"] == 1.0 and records[1]["devices"] == ["cpu:0", "cpu:1"]
    assert "| keras.distribution | data_parallel | 1 | 2 | virtual (2 on one CPU) | 100 |" \
        in shown.table(records)


# ---------------------------------------------------------------- PyTorch: DDP, a process each


@pytest.mark.torch
@on_torch
def test_ddp_step_in_a_process_of_its_own_matches_plain_training():
    """The DDP step in a process group of one computes what a plain Keras-on-torch step does."""
    import keras
    import torch

    from gpubench import models

    split = _split(330)
    found, fields = scaling.strategy(["cpu:0"])
    try:
        measured = scaling.train(found, "mlp_h1000", split, batch=100, epochs=2, seed=7,
                                 shuffle=False, verbose=False)
    finally:
        scaling.parallel().leave(found)
    assert measured.steps == 3 and fields == {
        "strategy": "ddp", "engine": "torch.distributed", "collective": "gloo", "replicas": 1,
        "all_reduce": "none (one replica)"}

    keras.utils.set_random_seed(7)
    model = models.build("mlp_h1000")
    weights, plain = model.trainable_variables, []
    for _ in range(2):
        losses = []
        for i in range(0, 300, 100):
            model.zero_grad()
            loss = model.loss(torch.as_tensor(split.y_train[i:i + 100].astype("int64")),
                              model(torch.as_tensor(split.x_train[i:i + 100]), training=True))
            loss.backward()
            with torch.no_grad():
                model.optimizer.apply([w.value.grad for w in weights], weights)
            losses.append(float(loss.detach()))
        plain.append(np.mean(losses))
    assert plain[1] < plain[0]  # it trains
    np.testing.assert_allclose(measured.epoch_losses, plain, rtol=1e-5)


@pytest.mark.torch
@on_torch
def test_torch_sweep_runs_a_process_per_device(tmp_path):
    """The chapter's sweep on PyTorch: count 1 and 2 on the CPU, each in worker processes."""
    from gpubench import data
    from gpubench.report import scaling as shown

    store = results.ResultsStore(tmp_path / "results.jsonl")
    loaded = data.load("mnist", source="synthetic", max_train_samples=400, verbose=False)
    records = scaling.sweep("mlp_h1000", loaded, virtual_devices=2, epochs=2,
                            per_replica_batch_size=50, store=store, env="torch-cpu")
    assert records == rundir.read_records(tmp_path / "results.jsonl")
    assert [(r["replicas"], r["workers"]) for r in records] == [(1, 1), (2, 2)]
    for record in records:
        results.validate(record)
        assert record["status"] == "ok" and record["backend"] == "torch"
        assert record["notebook"] == "Multi_GPU_Scaling" and record["env"] == "torch-cpu"
        assert record["engine"] == "torch.distributed" and record["collective"] == "gloo"
        assert record["strategy"] == "ddp" and record["virtual_devices"] == 2
        assert record["train_samples"] % record["global_batch_size"] == 0
        assert math.isfinite(record["final_loss"])
    assert records[0]["scaling_efficiency"] == 1.0 and records[1]["devices"] == ["cpu:0", "cpu:1"]
    assert records[1]["scaling_efficiency"] == pytest.approx(
        records[1]["samples_per_second"] / (2 * records[0]["samples_per_second"]))
    assert "| torch.distributed | ddp | 2 | 2 | virtual (2 on one CPU) | 100 |" \
        in shown.table(records)


# ---------------------------------------------------------------- one source, no framework


def test_the_chapter_defines_its_training_loop_once_and_dumps_no_source():
    nb = nbformat.read(NOTEBOOKS / "Multi_GPU_Scaling.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    defining = [s for s in code if "def train(" in s]
    assert len(defining) == 1 and "#@save\ndef train(" in defining[0]
    assert not any("getsource" in s or "??" in s or "cfg.profile" in s for s in code)
    assert scaling.train.__module__ == "gpubench.scaling.step"


def test_importing_the_package_loads_no_framework():
    code = ("import sys, gpubench.scaling as s; s.rules.include_in_run(False, 0, 'quick', False); "
            "print(sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=python_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
