"""gpubench run when things go wrong: kill -9, signals, a second process, a cut-off results
file, a full disk; and `run --here`. Each with a real kernel and small sizes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, python_env
from gpubench import params, rundir
from gpubench_cli import RUN, kernel_like, run_gpubench

pytestmark = pytest.mark.slow

# Minutes of work on two cores: SIGTERM must land mid-sweep, even when starting the second
# process takes many seconds under CI's load (2,048 and 3 repeats once finished first).
SLOW_SWEEP = {"sizes": list(range(64, 4096, 32)), "repeats": 9}


def _prepared_run(path: Path, params: dict, notebook: str = "performanceTest") -> Path:
    """A run directory whose one job has not run yet, as `gpubench run` leaves it after a crash."""
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({
        "schema": 2, "run_id": "20261203T000000Z-test00", "profile": "quick", "created": "now",
        "params": {"*": params}, "envs": {"cpu": {"how": "env", "kernel": "gpubench-cpu"}},
        "jobs": [{"env": "cpu", "notebook": notebook, "status": "pending", "seconds": None,
                  "error": None, "attempt": 0}]}))
    return path


def _start(args: list[str], **env: str) -> subprocess.Popen:
    return subprocess.Popen(RUN + args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=python_env(GPUBENCH_DATA_SOURCE="synthetic", **env))


def _wait_for_records(path: Path, count: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() or len(path.read_bytes().splitlines()) < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no records came: " + proc.stdout.read()[-3000:])
        time.sleep(0.2)


def _processes_of_run(run_id: str) -> list[int]:
    """PIDs whose environment carries this run id (the runner's kernels)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"GPUBENCH_RUN_ID={run_id}".encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_kill_9_mid_sweep_then_resume_counts_nothing_twice(tmp_path):
    """kill -9 of the runner mid-sweep (the quick profile's sizes): no record is written after
    it, no kernel is left, the run directory is not left locked, and run.json holds the claimed
    attempt 1 as "running", and no gpubench-kernel-* folder or connection file is left in the
    temp dir; the kernel's connection file, which kill -9 leaves, is in the run dir. The resume
    removes it (naming it) and runs attempt 2: no (attempt, device, dtype, size, method) is
    recorded twice."""
    run_dir = _prepared_run(tmp_path / "r", {})
    (tmp_path / "tmp").mkdir()
    runner_proc = _start(["--resume", str(run_dir)], TMPDIR=str(tmp_path / "tmp"))
    results_file = run_dir / "results.jsonl"
    _wait_for_records(results_file, 2, runner_proc)
    assert _processes_of_run("20261203T000000Z-test00")  # the kernel, with the run id it was given
    runner_proc.kill()
    runner_proc.wait()
    size = results_file.stat().st_size
    time.sleep(3)  # ipykernel's own parent polling alone would let it write for up to a second
    assert results_file.stat().st_size == size
    assert _processes_of_run("20261203T000000Z-test00") == []
    assert not list((tmp_path / "tmp").glob("gpubench-kernel-*"))
    assert not list((tmp_path / "tmp").glob("*.json"))
    left = list(run_dir.glob(f".kernel-*.json.{runner_proc.pid}.tmp"))  # its key and ports
    assert left
    from gpubench import rundir

    with rundir.locked(run_dir / rundir.LOCK, wait=False):
        pass
    job = json.loads((run_dir / "run.json").read_text())["jobs"][0]
    assert (job["status"], job["attempt"]) == ("running", 1)
    killed = rundir.read_records(run_dir)
    # book and rigorous at each size, and the peak probe: each attempt records its own
    sweep = len(params.DEFAULTS["quick"]["performanceTest"]["sizes"]) * 2 + 1
    assert 2 <= len(killed) < sweep and {r["attempt"] for r in killed} == {1}

    resumed = run_gpubench(["--resume", str(run_dir)], timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert not [p for p in left if p.exists() or str(p) not in resumed.stdout]
    job = json.loads((run_dir / "run.json").read_text())["jobs"][0]
    assert (job["status"], job["attempt"]) == ("ok", 2)
    records = rundir.read_records(run_dir)
    keys = [(r["attempt"], r["device"], r["dtype"], r["size"], r["method"]) for r in records]
    assert len(keys) == len(set(keys)) and len(keys) == len(killed) + sweep
    assert {r["attempt"] for r in records[len(killed):]} == {2}


def test_here_runs_in_this_python_without_an_env(tmp_path):
    """`gpubench run --here` in a Python not registered as any kernel's: the kernel spec is made
    on the fly, the label comes from the probe, and run.json says how the env was reached."""
    out = tmp_path / "r"
    env = python_env(GPUBENCH_DATA_SOURCE="synthetic", KERAS_BACKEND="tensorflow")
    proc = run_gpubench(["--here", "--profile", "quick", "--notebooks", "performanceTest",
                         "-p", "sizes=[64]", "-p", "repeats=1", "--out", str(out)],
                        env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = json.loads((out / "run.json").read_text())
    assert list(manifest["envs"]) == ["cpu"]
    assert manifest["envs"]["cpu"]["how"] == "here"
    assert manifest["envs"]["cpu"]["python"] == sys.executable
    records = rundir.read_records(out)
    assert records and {(r["env"], r["backend"], r["attempt"]) for r in records} == {
        ("cpu", "tensorflow", 1)}
    assert (out / "cpu" / "performanceTest.ipynb").exists() and (out / "report.md").exists()


def test_a_second_process_is_refused_and_sigterm_keeps_what_was_measured(tmp_path):
    """Two `run --resume X`: the second exits 2 naming the first's PID. SIGTERM to the first
    interrupts its kernel, keeps the records, marks the job interrupted, prints the resume
    command and exits 130."""
    run_dir = _prepared_run(tmp_path / "r", SLOW_SWEEP)
    first = _start(["--resume", str(run_dir)])
    _wait_for_records(run_dir / "results.jsonl", 1, first)
    second = run_gpubench(["--resume", str(run_dir)], timeout=60)  # refused at once, never queued
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"in use by another gpubench run (PID {first.pid})" in second.stderr
    first.send_signal(signal.SIGTERM)
    output = first.communicate(timeout=120)[0]
    assert first.returncode == 130, output[-3000:]
    assert "SIGTERM: interrupting the notebook" in output
    assert f"gpubench run --resume {run_dir}" in output
    job = json.loads((run_dir / "run.json").read_text())["jobs"][0]
    assert (job["status"], job["attempt"], job["error"]) == ("interrupted", 1, "stopped by SIGTERM")
    kept = rundir.read_records(run_dir)
    assert kept and {r["attempt"] for r in kept} == {1}


def test_resume_after_a_cut_off_line(tmp_path):
    """A crash left results.jsonl ending in half a record: the resumed job's records start on
    their own line, every one of them parses, and the report is written (exit 0)."""
    run_dir = _prepared_run(tmp_path / "r", {"sizes": [64, 128], "repeats": 1})
    cut = '{"schema": 2, "run_id": "20261203T000000Z-test00", "env": "cpu", "noteb'
    (run_dir / "results.jsonl").write_text(cut)
    proc = run_gpubench(["--resume", str(run_dir)], timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    assert lines[0] == cut
    records = [json.loads(line) for line in lines[1:]]  # 2 sizes x 2 methods, and the peak
    assert sorted((r["method"], r["size"]) for r in records if r["method"] != "peak") == [
        ("book", 64), ("book", 128), ("rigorous", 64), ("rigorous", 128)]
    assert [r["dtype"] for r in records if r["method"] == "peak"] == ["float32"]
    assert [r["attempt"] for r in records] == [1] * 5
    report = subprocess.run([sys.executable, "-m", "gpubench", "report", str(run_dir)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert (run_dir / "report.md").exists()


def _sweep_in_a_kernel_with(sitecustomize: str, name: str, tmp_path: Path, monkeypatch,
                            cpu_kernel) -> tuple[subprocess.CompletedProcess, dict]:
    """A one-size performanceTest in a copy of the cpu kernel (env label `name`) whose Python
    first runs `sitecustomize`; the gpubench process and the job of its run.json."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(sitecustomize)
    kernel_like(cpu_kernel, f"gpubench-{name}", tmp_path, monkeypatch,
                env={"PYTHONPATH": str(site)})
    out = tmp_path / "r"
    proc = run_gpubench(["--profile", "quick", "--envs", name, "--notebooks",
                         "performanceTest", "-p", "sizes=[64]", "-p", "repeats=1",
                         "--out", str(out)], timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads((out / "run.json").read_text())["jobs"][0]


def test_a_full_disk_in_the_kernel_fails_the_job_naming_the_path(tmp_path, monkeypatch, cpu_kernel):
    """The kernel's writes to results.jsonl fail with ENOSPC (patched in the kernel's Python by
    a sitecustomize): the job fails, saying the disk is full and where."""
    _, job = _sweep_in_a_kernel_with(
        "import errno, os\n_write = os.write\n"
        "def write(fd, data):\n"
        "    try:\n        target = os.readlink(f'/proc/self/fd/{fd}')\n"
        "    except OSError:\n        target = ''\n"
        "    if target.endswith('results.jsonl'):\n"
        "        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n"
        "    return _write(fd, data)\nos.write = write\n",
        "cpu-diskfull", tmp_path, monkeypatch, cpu_kernel)
    assert job["status"] == "failed" and "disk is full" in job["error"]
    assert str((tmp_path / "r" / "results.jsonl").resolve()) in job["error"]


def test_a_kernel_killed_by_a_fatal_c_level_message_names_it_in_the_jobs_error(
        tmp_path, monkeypatch, cpu_kernel):
    """Mid-notebook, as its first record is written, the kernel writes a fatal line to its file
    descriptor 2 and aborts (as TensorFlow does on a bad XLA_FLAGS): the line is in the job's
    error and in the log."""
    proc, job = _sweep_in_a_kernel_with(
        "import os, sys\n"
        "def _abort(event, args):\n"
        "    if event == 'open' and str(args[0]).endswith('results.jsonl'):\n"
        "        os.write(2, b'F0000 fatal.cc:1] the C library gave up\\n')\n"
        "        os.abort()\n"
        "sys.addaudithook(_abort)\n",
        "cpu-abort", tmp_path, monkeypatch, cpu_kernel)
    assert job["status"] == "failed" and job["error"].startswith("DeadKernelError"), job
    assert "its stderr ended: F0000 fatal.cc:1] the C library gave up" in job["error"]
    assert "the C library gave up" in proc.stdout + proc.stderr


def test_an_xla_flag_tensorflow_refuses_exits_2_before_any_kernel(tmp_path):
    """XLA_FLAGS with a flag TensorFlow does not know: it would abort the kernel at its first
    XLA compile; the env's Python is asked first, and the run exits 2 quoting TensorFlow."""
    out = tmp_path / "r"
    proc = run_gpubench(["--profile", "quick", "--envs", "cpu", "--notebooks", "Mnist_MLP_h1000",
                         "-p", "xla=on", "--out", str(out)], timeout=600,
                        env=python_env(GPUBENCH_DATA_SOURCE="synthetic",
                                       XLA_FLAGS="--xla_garbage_flag=1"))
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "env cpu: TensorFlow refuses XLA_FLAGS='--xla_garbage_flag=1' (" in proc.stderr
    assert "Unknown flag in XLA_FLAGS: --xla_garbage_flag=1); fix or unset XLA_FLAGS" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
