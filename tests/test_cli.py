"""The CLI and the runner without a kernel: usage errors, run.json and disk faults, the
run directory's lock, job bookkeeping, doctor, help. Faults are injected in-process."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, python_env
from gpubench import cli, envs, results, runner

QUICK = ["run", "--profile", "quick", "--envs", "cpu", "--notebooks", "performanceTest"]


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _run_dir(path: Path, jobs: list[dict] | None = None) -> Path:
    """A run directory as `gpubench run` leaves it, with the given jobs."""
    path.mkdir(parents=True, exist_ok=True)
    jobs = jobs or [{"env": "cpu", "notebook": "performanceTest", "status": "pending"}]
    (path / runner.MANIFEST).write_text(json.dumps({
        "schema": 1, "run_id": "r1", "profile": "quick", "created": "now",
        "params": {"*": {"sizes": [64], "repeats": 1}}, "jobs": jobs}))
    return path


# ---- parameters, before anything runs

@pytest.mark.parametrize("name,option", [("profile", "--profile"), ("results_path", "--out"),
                                         ("env_name", "--envs")])
def test_runner_parameters_are_refused_in_p(capsys, tmp_path, name, option):
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path / "r"), "-p", f"{name}=x")
    assert code == 2 and f"-p {name} belongs to the runner; use {option}" in err
    assert not (tmp_path / "r").exists()


def test_unknown_parameter_lists_the_notebooks_parameters(capsys, tmp_path):
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path / "r"), "-p", "size=500")
    assert code == 2 and "unknown parameter -p size: performanceTest takes" in err
    assert "sizes, devices, repeats" in err and not (tmp_path / "r").exists()


def test_parameter_of_one_notebook_is_checked_against_it(capsys, tmp_path):
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path / "r"), "-p", "Mnist_CNN:sizes=[1]")
    assert code == 2 and "unknown parameter -p sizes: Mnist_CNN takes" in err


@pytest.mark.parametrize("item,words", [("epochs=abc", "'abc'"), ("Mnist_CNN:epochs=-1", "-1"),
                                        ("sizes=[0]", "0")])
def test_bad_value_exits_2_naming_it(capsys, tmp_path, monkeypatch, item, words):
    monkeypatch.setattr(runner, "execute", lambda *a: pytest.fail("a kernel was started"))
    code, _, err = _main(capsys, "run", "--profile", "quick", "--envs", "cpu", "--notebooks",
                         "performanceTest,Mnist_CNN,Mnist_MLP_h1000", "--out", str(tmp_path / "r"),
                         "-p", item)
    name = item.split("=")[0].split(":")[-1]
    assert code == 2 and name in err and words in err, err
    assert not (tmp_path / "r").exists()


def test_typo_exits_2_within_10_s_without_tensorflow():
    """`-p epoch=1` (for epochs): the whole CLI, a fresh process, no kernel, no TensorFlow."""
    code = ("import sys, runpy; sys.argv = ['gpubench', 'run', '--notebooks', "
            "'performanceTest,Mnist_CNN', '-p', 'epoch=1']\n"
            "try:\n    runpy.run_module('gpubench', run_name='__main__')\n"
            "except SystemExit as e:\n    print('TF' if 'tensorflow' in sys.modules else 'noTF');"
            " sys.exit(e.code)\n")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=python_env())
    assert time.monotonic() - start < 10
    assert proc.returncode == 2 and "unknown parameter -p epoch" in proc.stderr
    assert "epochs" in proc.stderr and proc.stdout.strip() == "noTF"


def test_a_missing_notebook_is_refused_before_anything_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "notebooks_dir", lambda: tmp_path)
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path / "r"))
    assert code == 2 and f"performanceTest missing from {tmp_path}" in err and "git checkout" in err
    assert not (tmp_path / "r").exists()


def test_p_with_resume_is_refused(capsys, tmp_path):
    code, _, err = _main(capsys, "run", "--resume", str(_run_dir(tmp_path / "r")), "-p", "repeats=2")
    assert code == 2 and "-p goes with a new run" in err


# ---- run.json, --out and the disk

@pytest.mark.parametrize("text", ["", "{not json", "[]", '{"jobs": [{"envv": "cpu"}]}'])
def test_empty_or_damaged_run_json_names_the_file(capsys, tmp_path, text):
    (tmp_path / "run.json").write_text(text)
    code, _, err = _main(capsys, "run", "--resume", str(tmp_path))
    assert code == 2 and f"{tmp_path / 'run.json'} is empty or damaged" in err
    assert "Traceback" not in err


def test_read_only_out_is_a_clear_error(capsys, tmp_path, monkeypatch):
    """An existing empty --out on a read-only mount: the lock file cannot be created."""
    real_open = os.open

    def read_only(path, flags, *args):
        if str(path).startswith(str(tmp_path)) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only)
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path))
    assert code == 2 and f"cannot write in {tmp_path}" in err and "read-only" in err, err


def test_full_disk_when_writing_run_json(capsys, tmp_path, monkeypatch):
    real_write_text = Path.write_text

    def full(self, *args, **kwargs):
        if self.name == runner.MANIFEST + ".tmp":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path / "r"))
    assert code == 2 and f"cannot write {tmp_path / 'r' / 'run.json'}: the disk is full" in err
    assert not (tmp_path / "r" / "run.json.tmp").exists()


def test_report_on_a_full_disk_is_a_clear_error(capsys, tmp_path, monkeypatch):
    from gpubench import report

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "report.md"))

    monkeypatch.setattr(report, "build", full)
    monkeypatch.setattr(report, "find_runs", lambda dirs: [Path(d) for d in dirs])
    code, _, err = _main(capsys, "report", str(tmp_path))
    assert code == 2 and f"cannot write {tmp_path / 'report.md'}: the disk is full" in err
    (tmp_path / "results.jsonl").write_text("")
    with pytest.raises(OSError):  # the run's summary is printed first; the CLI says the error
        runner._finish_report(tmp_path)


# ---- one process per run directory

def test_a_held_run_directory_is_refused_naming_the_pid(capsys, tmp_path):
    run_dir = _run_dir(tmp_path / "r")
    holder = subprocess.Popen([sys.executable, "-c",
                               "import contextlib, os, sys, time\n"
                               "from pathlib import Path\nfrom gpubench import runner\n"
                               "with contextlib.ExitStack() as s:\n"
                               f"    runner.lock_run_dir(Path({str(run_dir)!r}), s)\n"
                               "    print('locked', flush=True); time.sleep(60)\n"],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        start = time.monotonic()
        code, _, err = _main(capsys, "run", "--resume", str(run_dir))
        assert time.monotonic() - start < 1
        assert code == 2 and f"in use by another gpubench run (PID {holder.pid})" in err
        code, _, err = _main(capsys, *QUICK, "--out", str(run_dir))
        assert code == 2 and "already holds a run" in err
    finally:
        holder.kill()  # kill -9: the OS drops the lock with the process
        holder.wait()
    with envs.locked(run_dir / runner.LOCK, wait=False):
        pass


def test_simultaneous_new_runs_cannot_both_create_it(tmp_path, monkeypatch):
    """The second `run --out X` looked before the first locked; it must not take X."""
    run_dir = tmp_path / "r"
    first, second = runner.contextlib.ExitStack(), runner.contextlib.ExitStack()
    with first, second:
        runner.new_run(str(run_dir), "quick", ["cpu"], ["performanceTest"], {}, first)
        monkeypatch.setattr(runner, "check_new_out", lambda path: None)  # it looked too early
        with pytest.raises(runner.UsageError, match=f"in use by another gpubench run \\(PID {os.getpid()}\\)"):
            runner.new_run(str(run_dir), "quick", ["cpu"], ["performanceTest"], {}, second)


# ---- a job: attempt, records on disk, errors

def _fake_papermill(monkeypatch, write=None, raise_error=None) -> list[dict]:
    """papermill.execute_notebook replaced: no kernel, but the runner's kernel manager goes through
    its launch, whose environment is recorded; may write a record."""
    import asyncio

    import papermill
    from jupyter_client.manager import AsyncKernelManager

    seen: list[dict] = []

    async def launch(self, kernel_cmd, **kw):
        seen.append({**kw["env"], "manager": type(self).__name__})

    def execute_notebook(source, output, parameters, kernel_manager_class, **kwargs):
        asyncio.run(kernel_manager_class()._async_launch_kernel(["python"], env={"FROM_SPEC": "1"}))
        if write is not None:
            write(parameters["results_path"], int(seen[-1]["GPUBENCH_ATTEMPT"]))
        if raise_error is not None:
            raise raise_error

    monkeypatch.setattr(AsyncKernelManager, "_async_launch_kernel", launch)
    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    return seen


def _record(path: str, attempt: int, notebook: str = "performanceTest") -> None:
    """Append a valid matmul record of `attempt` (attempt 0: none of the runner's)."""
    record = results.make_record("matmul", notebook=notebook, env="cpu", device="cpu",
                                 environment=dict.fromkeys(results.ENVIRONMENT_FIELDS), size=64,
                                 dtype="float32", method="book",
                                 seconds=0.1, seconds_min=0.1, seconds_max=0.1, repeats=1, gflops=1.0)
    record["attempt"] = attempt
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def test_each_execution_is_a_new_attempt_in_the_kernels_environment(tmp_path, monkeypatch):
    seen = _fake_papermill(monkeypatch, write=_record)
    job, manifest = runner.Job("cpu", "performanceTest"), {"run_id": "r1", "profile": "quick", "params": {}}
    for attempt in (1, 2):
        runner.execute(job, tmp_path, manifest)
        assert (job.status, job.attempt) == ("ok", attempt)
    assert [s["GPUBENCH_ATTEMPT"] for s in seen] == ["1", "2"] and seen[0]["GPUBENCH_RUN_ID"] == "r1"
    assert seen[0]["NO_COLOR"] == "1" and seen[0]["FROM_SPEC"] == "1"  # added to the kernel's own
    assert "GPUBENCH_ATTEMPT" not in os.environ and seen[0]["manager"] == "RunnerKernelManager"


def test_a_notebook_without_records_on_disk_fails(tmp_path, monkeypatch):
    _fake_papermill(monkeypatch, write=lambda path, attempt: _record(path, attempt - 1))
    job = runner.Job("cpu", "performanceTest", attempt=1)
    runner.execute(job, tmp_path, {"run_id": "r1", "profile": "quick", "params": {}})
    assert job.status == "failed" and job.attempt == 2
    assert "holds no readable record of it (attempt 2)" in job.error


def test_a_cut_off_record_does_not_count(tmp_path, monkeypatch):
    def cut(path, attempt):
        with open(path, "a") as fh:
            fh.write('{"env": "cpu", "notebook": "performanceTest", "attem')

    _fake_papermill(monkeypatch, write=cut)
    job = runner.Job("cpu", "performanceTest")
    with pytest.warns(UserWarning):
        runner.execute(job, tmp_path, {"run_id": "r1", "profile": "quick", "params": {}})
    assert job.status == "failed"


def test_a_full_disk_in_the_notebook_fails_the_job_saying_so(tmp_path, monkeypatch):
    import papermill

    store_error = (f"cannot append a record to '{tmp_path}/results.jsonl': the disk is full; "
                   "free some space (or make it writable) and resume the run")
    _fake_papermill(monkeypatch, raise_error=papermill.PapermillExecutionError(
        3, 1, "store.append(record)", "ResultsWriteError", store_error, []))
    job = runner.Job("cpu", "performanceTest")
    runner.execute(job, tmp_path, {"run_id": "r1", "profile": "quick", "params": {}})
    assert job.status == "failed" and "the disk is full" in job.error
    assert f"{tmp_path}/results.jsonl" in job.error


def test_a_kernel_of_another_checkout_is_skipped(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "jupyter" / "kernels" / "gpubench-cpu-elsewhere"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps({
        "argv": ["/other/clone/.venv/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "x", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setattr(runner, "execute", lambda *a: pytest.fail("another checkout's kernel ran"))
    code, out, _ = _main(capsys, "run", "--profile", "quick", "--envs", "cpu-elsewhere",
                         "--notebooks", "performanceTest", "--out", str(tmp_path / "r"))
    assert code == 1 and "SKIPPED env cpu-elsewhere: kernel gpubench-cpu-elsewhere" in out
    assert "is not this checkout's" in out and "make setup` in" in out
    job = json.loads((tmp_path / "r" / "run.json").read_text())["jobs"][0]
    assert job["status"] == "skipped" and set(job) >= {"env", "notebook", "error", "seconds", "attempt"}


def test_cell_output_has_no_ansi_escapes():
    formatter = runner._CellOutput()
    formatter.prefix = "cpu/Mnist_CNN"
    record = logging.LogRecord("papermill", logging.INFO, "", 0,
                               "\x1b[1mModel: \"sequential\"\x1b[0m\n\x1b[3m Layer \x1b[0m", None, None)
    assert formatter.format(record) == '  cpu/Mnist_CNN| Model: "sequential"\n  cpu/Mnist_CNN|  Layer'


# ---- doctor and help

@pytest.mark.parametrize("smi,why", [(None, "nvidia-smi not found"), ("", "nvidia-smi lists none")])
def test_doctor_on_a_machine_without_a_gpu(capsys, fake_command, monkeypatch, smi, why):
    fakebin = os.environ["PATH"].split(os.pathsep)[0]
    monkeypatch.setenv("PATH", f"{fakebin}{os.pathsep}/usr/bin:/bin")  # no real nvidia-smi
    if smi is not None:
        fake_command("nvidia-smi", "echo 'No devices were found'")
    code, out, _ = _main(capsys, "doctor")
    assert code == 0 and f"no NVIDIA GPU on this machine ({why})" in out
    assert "GPU=1" not in out and "--gpu" not in out
    assert _main(capsys, "doctor", "--gpu")[0] == 1


@pytest.mark.parametrize("command", ["", "run", "report", "setup", "envs", "doctor", "scaling"])
def test_every_help_has_an_example(command):
    parser = cli._parser()
    text = (parser._subparsers._group_actions[0].choices[command] if command else parser).format_help()
    assert "example" in text and f"gpubench {command}".strip() in text.split("example")[1]


def test_report_help_says_what_it_reads_and_writes():
    text = cli._parser()._subparsers._group_actions[0].choices["report"].format_help()
    assert "results.jsonl" in text and "report.md" in text and "PNG" in text and "--out" in text


@pytest.mark.parametrize("profile,named,expected", [
    ("quick", [], {"virtual_devices": 2}), ("full", [], None),
    ("full", ["Multi_GPU_Scaling"], {"virtual_devices": 2})])
def test_multi_gpu_scaling_rule_in_a_cpu_env(profile, named, expected, tmp_path):
    job = runner.Job("cpu", "Multi_GPU_Scaling")
    runner._mark_unavailable([job], {"profile": profile, "named": named})
    assert job.extra == expected
    assert job.status == ("skipped" if expected is None else "pending")
    if expected:
        manifest = {"profile": profile, "params": {}}
        assert runner.job_parameters(job, tmp_path, manifest)["virtual_devices"] == 2
        manifest["params"] = {"Multi_GPU_Scaling": {"virtual_devices": 4}}  # the user's -p wins
        assert runner.job_parameters(job, tmp_path, manifest)["virtual_devices"] == 4
    else:
        assert "needs 2 or more GPUs" in job.error
