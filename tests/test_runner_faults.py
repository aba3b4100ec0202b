"""Faults of `gpubench run` found by fault injection, each checked without running a notebook:
a stop at the wrong moment, a damaged run.json, a kernel whose Python is gone, a KERAS_BACKEND
with spaces, a kernel that dies saying why, a temp folder a killed runner would leave."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from gpubench import cli, report, rundir, runner


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _run_dir(path: Path, notebooks=("performanceTest", "Mnist_MLP_h1000"), **fields) -> Path:
    """A run directory as `gpubench run` leaves it before its first notebook."""
    path.mkdir(parents=True, exist_ok=True)
    (path / rundir.MANIFEST).write_text(json.dumps({
        "schema": 2, "run_id": "r1", "profile": "quick", "created": "now", "params": {},
        "jobs": [{"env": "cpu", "notebook": nb, "status": "pending", "attempt": 0}
                 for nb in notebooks], "envs": {"cpu": {"how": "env", "kernel": "gpubench-cpu"}},
        **fields}))
    return path


# ---- a stop at the wrong moment prints each line once

def test_ctrl_c_right_after_the_count_line_prints_no_blank_count(capsys, tmp_path, monkeypatch,
                                                                 cpu_kernel):
    """Ctrl-C between "[1/2]" and the job's claim: the summary counts the jobs not begun."""
    def execute(*args):
        os.kill(os.getpid(), signal.SIGINT)  # no kernel yet: the handler stops the run
        time.sleep(1)
        pytest.fail("not interrupted")

    monkeypatch.setattr(runner.loop, "execute", execute)
    code, out, err = _main(capsys, "run", "--resume", str(_run_dir(tmp_path / "r")))
    assert code == 130 and "[1/2]" in out + err
    summary = out[out.index("Summary"):].splitlines()
    assert summary[-1] == "  2 pending", summary
    assert all(line.strip() for line in summary)


def test_sigterm_while_the_report_is_written_prints_the_summary_once(capsys, tmp_path,
                                                                    monkeypatch, cpu_kernel):
    def execute(job, *args):
        job.status, job.seconds = "ok", 1.0

    def build(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
        pytest.fail("not interrupted")

    monkeypatch.setattr(runner.loop, "execute", execute)
    monkeypatch.setattr(report, "build", build)
    code, out, err = _main(capsys, "run", "--resume", str(_run_dir(tmp_path / "r")))
    assert code == 130 and out.count("Summary") == 1, out
    assert "Interrupted by SIGTERM" in err


# ---- run.json is read with the same rules as every other input

CPU_ENV = {"how": "kernel", "kernel": "gpubench-cpu", "python": "python", "backend": "tensorflow",
           "devices": ["cpu"]}
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("change,field", [
    ({"envs": {"cpu": {**CPU_ENV, "devices": ["cpu", 5]}}}, 'envs.cpu.devices is ["cpu", 5]'),
    ({"envs": {"cpu": {**CPU_ENV, "tensorflow_importable": "yes"}}},
     "envs.cpu.tensorflow_importable is 'yes': expected true or false or null"),
    ({"envs": {"cpu": {**CPU_ENV, "how": 5}}}, "envs.cpu.how is 5: expected one of env, kernel, here"),
    ({"envs": {"cpu": CPU_ENV, "gpu": ["x"]}}, 'envs.gpu is ["x"]'),
])
def test_resume_names_each_wrong_type_in_run_json(capsys, tmp_path, monkeypatch, change, field):
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    code, _, err = _main(capsys, "run", "--resume", str(_run_dir(tmp_path / "r", **change)))
    assert code == 2 and f"{tmp_path / 'r' / 'run.json'}: {field}" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_run_json_schema_is_valid_and_declares_what_the_runner_writes():
    """gpubench/schemas/run.schema.json is a draft 2020-12 schema whose job and env entries are
    the fields of runner.targets.Job and of Target, and whose statuses are the runner's."""
    from dataclasses import asdict, fields

    import jsonschema

    from gpubench.runner.targets import MANIFEST_SCHEMA, RUN_SCHEMA, Job, Target

    jsonschema.Draft202012Validator.check_schema(RUN_SCHEMA)
    job, target = RUN_SCHEMA["$defs"]["job"], RUN_SCHEMA["$defs"]["target"]
    assert [f.name for f in fields(Job)] == list(job["properties"])
    assert list(asdict(Target())) == list(target["properties"])
    assert tuple(job["properties"]["status"]["enum"]) == (
        "pending", "running", "ok", "failed", "skipped", "interrupted")
    assert MANIFEST_SCHEMA == 2


def test_run_json_nested_too_deep_is_bad_input_for_resume_and_report(capsys, tmp_path,
                                                                    monkeypatch):
    """100,000 nested lists: --resume exits 2 naming the file; the report names it among its
    problems and is still written."""
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    (tmp_path / "run.json").write_text(DEEP)
    code, _, err = _main(capsys, "run", "--resume", str(tmp_path))
    assert code == 2 and f"{tmp_path / 'run.json'} is empty or damaged (RecursionError" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1

    with pytest.warns(UserWarning, match="unreadable job list"):
        code, out, err = _main(capsys, "report", str(tmp_path))
    assert code == 0 and "Traceback" not in err
    text = (tmp_path / "report.md").read_text()
    assert f"{tmp_path / 'run.json'}: unreadable job list (RecursionError" in text


# ---- a resume whose kernel cannot start uses no attempt

def test_resume_of_a_kernel_whose_python_is_gone_exits_2_using_no_attempt(capsys, tmp_path,
                                                                          monkeypatch):
    gone = tmp_path / "gone" / "bin" / "python"
    spec = tmp_path / "jupyter" / "kernels" / "my-kernel"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(gone), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "mine", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    run_dir = _run_dir(tmp_path / "r", envs={"cpu": {**CPU_ENV, "kernel": "my-kernel",
                                                     "python": str(gone)}})
    code, _, err = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert (f"envs.cpu.kernel 'my-kernel' cannot start: its Python '{gone}' no longer exists; "
            "register that kernel again") in err
    jobs = json.loads((run_dir / "run.json").read_text())["jobs"]
    assert [(j["status"], j["attempt"]) for j in jobs] == [("pending", 0)] * 2


# ---- KERAS_BACKEND is read as Keras reads it: no spaces stripped

def test_keras_backend_with_spaces_is_refused_up_front_naming_the_value(capsys, tmp_path,
                                                                        monkeypatch):
    from gpubench import backends, envs

    monkeypatch.setenv("KERAS_BACKEND", " tensorflow ")
    monkeypatch.setattr(envs, "probe_python", lambda *a, **k: pytest.fail("probed"))
    with pytest.raises(backends.BackendError, match="KERAS_BACKEND=' tensorflow '"):
        backends.requested()
    code, _, err = _main(capsys, "run", "--here", "--out", str(tmp_path / "r"))
    assert code == 2 and "KERAS_BACKEND=' tensorflow ': unknown Keras backend; use one of " \
                         "tensorflow, jax" in err, err
    assert not (tmp_path / "r").exists()


# ---- a kernel that dies: its last words, and no folder left behind

def test_forward_stderr_keeps_the_last_lines_for_the_jobs_error():
    from collections import deque

    kernel_read, kernel_write = os.pipe()
    ours_read, ours_write = os.pipe()
    lines = [f"line {n}\n".encode() for n in range(12)]
    os.write(kernel_write, b"".join([*lines, b"  \n", b"F0000 Unknown flag in XLA_FLAGS: --x=1"]))
    os.close(kernel_write)
    tail = deque(maxlen=runner.kernels.LAST_WORDS)
    runner.kernels.forward_stderr(kernel_read, ours_write, tail)
    os.close(ours_write)
    with open(ours_read, "rb") as stream:
        assert stream.read().endswith(b"line 11\n  \nF0000 Unknown flag in XLA_FLAGS: --x=1")
    assert list(tail) == [f"line {n}" for n in range(3, 12)] + [
        "F0000 Unknown flag in XLA_FLAGS: --x=1"]


def test_a_job_makes_no_temp_folder_a_killed_runner_would_leave(tmp_path, monkeypatch):
    """While a notebook runs (when a kill -9 may come) the system temp dir holds no folder of
    the job's: the `--here` kernel spec lives in memory."""
    import sys
    import tempfile

    import papermill

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    seen = []

    def execute_notebook(source, output, parameters, kernel_manager_class, kernel_name, **kw):
        manager = kernel_manager_class(kernel_name=kernel_name)
        seen.append((kernel_name, manager.kernel_spec.argv[0], os.listdir(tmp_path / "tmp")))
        raise RuntimeError("Kernel died")

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    run_dir = _run_dir(tmp_path / "r", envs={"cpu": {
        "how": "here", "python": sys.executable, "backend": "tensorflow", "devices": ["cpu"]}})
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    jobs = runner.targets.check_manifest(manifest, run_dir / rundir.MANIFEST)
    runner.loop.execute(jobs[0], run_dir, manifest, jobs)
    assert seen == [(runner.kernels.HERE_KERNEL, sys.executable, [])]
    assert (jobs[0].status, jobs[0].error) == ("failed", "RuntimeError: Kernel died")


# ---- run.json that is a symlink loop or nested too deep is bad input

def test_run_json_that_is_a_symlink_loop_names_the_file(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "run.json").symlink_to("run.json")  # a loop: it points at itself
    code, _, err = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"cannot read {run_dir / 'run.json'}: Too many levels of symbolic links" in err, err


@pytest.mark.parametrize("depth", [500, 900])
def test_run_json_nested_hundreds_deep_names_the_field(capsys, tmp_path, monkeypatch, depth):
    """jobs[0].extra nested 500-900 deep: json reads it, but its check recursed past Python's
    limit (exit 1, naming no file); now exit 2 naming file and field."""
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    run_dir = _run_dir(tmp_path / "r")
    text = (run_dir / "run.json").read_text().replace(
        '"attempt": 0}', '"attempt": 0, "extra": ' + "[" * depth + "]" * depth + "}", 1)
    (run_dir / "run.json").write_text(text)
    code, _, err = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{run_dir / 'run.json'}: jobs[0].extra is nested deeper than" in err, err


# ---- an attempt is always new

def test_a_stale_run_json_attempt_never_reuses_an_attempt_on_disk(capsys, tmp_path, monkeypatch):
    """run.json says attempt 0 while results.jsonl holds records of attempt 1: the resume runs
    attempt 2, so no record is doubled under one attempt."""
    from gpubench import results

    run_dir = _run_dir(tmp_path / "r", notebooks=("performanceTest",))
    record = results.make_record("matmul", notebook="performanceTest", env="cpu", device="cpu",
                                 environment=dict.fromkeys(results.ENVIRONMENT_FIELDS), size=64,
                                 dtype="float32", method="book", seconds=0.1, seconds_min=0.1,
                                 seconds_max=0.1, repeats=1, gflops=1.0)
    (run_dir / "results.jsonl").write_text(json.dumps({**record, "attempt": 1}) + "\n")
    claimed = []

    def execute_notebook(*args, **kwargs):
        claimed.append(json.loads((run_dir / "run.json").read_text())["jobs"][0]["attempt"])
        raise RuntimeError("Kernel died")

    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    monkeypatch.setattr(report, "build", lambda dirs, out=None: Path(dirs[0]) / "report.md")
    code, _, _ = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 1 and claimed == [2]


# ---- a kernel's connection file never outlives its job or its runner

def test_a_jobs_connection_file_is_in_the_run_dir_and_removed_however_the_job_ends(tmp_path,
                                                                                   monkeypatch):
    """The kernel dies without jupyter_client's clean-up: its connection file (key and ports)
    is in the run directory, named for this runner's PID, while it runs, not in the temp
    folder; and it is removed when the job ends."""
    import asyncio
    import tempfile

    import papermill

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    seen = {}

    def execute_notebook(source, output, parameters, kernel_manager_class, kernel_name, **kw):
        manager = kernel_manager_class(kernel_name=kernel_name)
        asyncio.run(manager.pre_start_kernel())  # writes the connection file, as a start does
        seen["file"] = Path(manager.connection_file)
        seen["there"] = seen["file"].is_file() and json.loads(seen["file"].read_text())["key"]
        seen["tmp"] = os.listdir(tmp_path / "tmp")
        raise RuntimeError("Kernel died")

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    run_dir = _run_dir(tmp_path / "r")
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    jobs = runner.targets.check_manifest(manifest, run_dir / rundir.MANIFEST)
    runner.loop.execute(jobs[0], run_dir, manifest, jobs)
    assert seen["file"].parent == run_dir.resolve() and seen["there"] and seen["tmp"] == []
    assert seen["file"].name.startswith(".kernel-")
    assert seen["file"].name.endswith(f".json.{os.getpid()}.tmp")
    assert jobs[0].status == "failed" and not seen["file"].exists()


def _dead_pid() -> int:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.parametrize("command", ["resume", "report"])
def test_resume_and_report_remove_the_connection_files_of_dead_kernels(capsys, tmp_path,
                                                                      monkeypatch, command):
    """What kill -9 of a runner leaves: its kernels' connection files in the run directory,
    named for its PID. The next --resume or report removes those of dead runners, naming them;
    a live one's stay."""
    run_dir = _run_dir(tmp_path / "r")
    dead = run_dir / f".kernel-1a2b.json.{_dead_pid()}.tmp"
    live = run_dir / f".kernel-3c4d.json.{os.getppid()}.tmp"
    for path in (dead, live):
        path.write_text('{"key": "secret"}')
    monkeypatch.setattr(runner.loop, "execute", lambda job, *a: setattr(job, "status", "ok")
                        or setattr(job, "seconds", 1.0))
    monkeypatch.setattr(report, "build", lambda dirs, out=None: Path(dirs[0]) / "report.md")
    argv = ["run", "--resume", str(run_dir)] if command == "resume" else ["report", str(run_dir)]
    code, out, _ = _main(capsys, *argv)
    assert code == 0 and not dead.exists() and live.exists()
    assert (f"Removed 1 connection file(s) of dead kernels of {run_dir} (each held a kernel's "
            f"key and ports): {dead}") in out
    assert "temp file(s)" not in out


# ---- advice that can be followed

def test_the_resume_command_printed_is_shell_quoted(capsys, tmp_path, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.loop, "execute", interrupted)
    run_dir = _run_dir(tmp_path / "my runs" / "r 1")
    code, _, err = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 130 and f"Finish the run with: gpubench run --resume '{run_dir}'" in err


def test_a_deleted_kernel_of_the_users_own_is_registered_again_by_the_advice(capsys, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    run_dir = _run_dir(tmp_path / "r", envs={"cpu": {**CPU_ENV, "kernel": "my-gone-kernel",
                                                     "python": "/opt/my env/bin/python"}})
    code, _, err = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert ("envs.cpu.kernel 'my-gone-kernel' is no longer a Jupyter kernel; register it again "
            "(`'/opt/my env/bin/python' -m ipykernel install --user --name my-gone-kernel`)") \
        in err and "make setup" not in err


def test_a_read_only_run_dir_is_resumed_from_a_copy(capsys, tmp_path, monkeypatch):
    """"choose a writable --out" cannot be followed with --resume: the advice says to copy."""
    from conftest import read_only_below

    run_dir = _run_dir(tmp_path / "r")
    read_only_below(monkeypatch, run_dir)
    code, _, err = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 2 and f"cannot write in {run_dir}: the file system is read-only" in err
    assert (f"copy it to a writable folder and resume the copy (`cp -r {run_dir} COPY && "
            "gpubench run --resume COPY`)") in err and "--out" not in err


def test_sigterm_of_report_says_what_was_written(capsys, tmp_path, monkeypatch):
    def build(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
        pytest.fail("not interrupted")

    monkeypatch.setattr(report, "build", build)
    code, _, err = _main(capsys, "report", str(_run_dir(tmp_path / "r")))
    assert code == 130 and len(err.strip().splitlines()) == 1
    assert (f"gpubench report: interrupted by SIGTERM; {tmp_path / 'r' / 'report.md'} was not "
            "written") in err


# ---- -p refused before any kernel

@pytest.mark.parametrize("item,words", [
    (":epochs=3", "bad --param ':epochs=3'"),
    ("performanceTest:repeats=100000000000000000000000", "repeats=100000000000000000000000 is "
                                                         "above"),
    ("Mnist_MLP_h1000:epochs=1000000000", "epochs=1000000000 is above"),
])
def test_an_empty_notebook_name_or_a_count_no_machine_finishes_is_refused(capsys, tmp_path,
                                                                        monkeypatch, item, words):
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    code, _, err = _main(capsys, "run", "--envs", "cpu", "--notebooks",
                         "performanceTest,Mnist_MLP_h1000", "--out", str(tmp_path / "r"),
                         "-p", item)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()
