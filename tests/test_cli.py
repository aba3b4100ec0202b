"""The CLI and the runner without a kernel: usage errors, run.json and disk faults, the
run directory's lock, job bookkeeping, doctor, help. Faults are injected in-process."""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from conftest import REPO, python_env, read_only_below
from gpubench import backends, cli, envs, machine, params, results, rundir, runner

QUICK = ["run", "--profile", "quick", "--envs", "cpu", "--notebooks", "performanceTest"]


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _run_dir(path: Path, jobs: list[dict] | None = None) -> Path:
    """A run directory as `gpubench run` leaves it, with the given jobs."""
    path.mkdir(parents=True, exist_ok=True)
    jobs = jobs or [{"env": "cpu", "notebook": "performanceTest", "status": "pending"}]
    (path / rundir.MANIFEST).write_text(json.dumps({
        "schema": 2, "run_id": "r1", "profile": "quick", "created": "now",
        "params": {"*": {"sizes": [64], "repeats": 1}}, "jobs": jobs,
        "envs": {j["env"]: {"how": "env", "kernel": f"gpubench-{j['env']}"} for j in jobs}}))
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
    assert "results_path" not in err  # the runner's own: -p refuses them, so none is offered


def test_p_is_checked_against_the_notebook_file_that_will_run(tmp_path, monkeypatch):
    """A notebook whose own parameters cell declares a name the book's does not (a learner's
    copy): the runner reads the .ipynb it runs, so -p of that name is accepted and passed on."""
    copy = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", copy)
    path = copy / "Mnist_MLP_h1000.ipynb"
    notebook = json.loads(path.read_text())
    cell = next(c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", []))
    cell["source"] = "".join(cell["source"]) + '\nrun_note = "none"\n'
    path.write_text(json.dumps(notebook))
    monkeypatch.setattr(params, "notebooks_dir", lambda: copy)
    given = runner.targets.parse_params(["Mnist_MLP_h1000:run_note=tried"])
    runner.targets.check_params(given, ["Mnist_MLP_h1000"])
    job = runner.targets.Job("cpu", "Mnist_MLP_h1000")
    manifest = {"profile": "quick", "params": given, "envs": {"cpu": {"kernel": "gpubench-cpu"}}}
    assert runner.loop.job_parameters(job, tmp_path, manifest)["run_note"] == "tried"


def test_parameter_of_one_notebook_is_checked_against_it(capsys, tmp_path):
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path / "r"), "-p", "Mnist_CNN:sizes=[1]")
    assert code == 2 and "unknown parameter -p sizes: Mnist_CNN takes" in err


@pytest.mark.parametrize("item,words", [("epochs=abc", "'abc'"), ("Mnist_CNN:epochs=-1", "-1"),
                                        ("sizes=[0]", "0")])
def test_bad_value_exits_2_naming_it(capsys, tmp_path, monkeypatch, item, words):
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    code, _, err = _main(capsys, "run", "--profile", "quick", "--envs", "cpu", "--notebooks",
                         "performanceTest,Mnist_CNN,Mnist_MLP_h1000", "--out", str(tmp_path / "r"),
                         "-p", item)
    name = item.split("=")[0].split(":")[-1]
    assert code == 2 and name in err and words in err, err
    assert not (tmp_path / "r").exists()


def test_typo_exits_2_without_loading_tensorflow():
    """`-p epoch=1` (for epochs): the whole CLI, a fresh process, no kernel, no TensorFlow."""
    code = ("import sys, runpy; sys.argv = ['gpubench', 'run', '--notebooks', "
            "'performanceTest,Mnist_CNN', '-p', 'epoch=1']\n"
            "try:\n    runpy.run_module('gpubench', run_name='__main__')\n"
            "except SystemExit as e:\n    print('TF' if 'tensorflow' in sys.modules else 'noTF');"
            " sys.exit(e.code)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=python_env())
    assert proc.returncode == 2 and "unknown parameter -p epoch" in proc.stderr
    assert "epochs" in proc.stderr and proc.stdout.strip() == "noTF"


def test_a_missing_notebook_is_refused_before_anything_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(params, "notebooks_dir", lambda: tmp_path)
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path / "r"))
    assert code == 2 and f"performanceTest missing from {tmp_path}" in err and "git checkout" in err
    assert not (tmp_path / "r").exists()


def test_p_with_resume_is_refused(capsys, tmp_path):
    code, _, err = _main(capsys, "run", "--resume", str(_run_dir(tmp_path / "r")), "-p", "repeats=2")
    assert code == 2 and "-p goes with a new run" in err


# ---- run.json, --out and the disk

@pytest.mark.parametrize("text", ["", "{not json"])
def test_empty_or_damaged_run_json_names_the_file(capsys, tmp_path, text):
    (tmp_path / "run.json").write_text(text)
    code, _, err = _main(capsys, "run", "--resume", str(tmp_path))
    assert code == 2 and f"{tmp_path / 'run.json'} is empty or damaged" in err
    assert "start a new run with `gpubench run`" in err and "Traceback" not in err


GOOD_JOB = {"env": "cpu", "notebook": "performanceTest", "status": "pending", "attempt": 0}


@pytest.mark.parametrize("change,field", [
    ({"profile": "fast"}, "profile is 'fast'"),
    ({"schema": 9}, "schema is 9"),
    ({"run_id": ""}, "run_id is ''"),
    ({"params": []}, "params is []"),
    ({"params": {"*": {"sizes": [0]}}}, "sizes"),
    ({"params": {"Mnist_RNN": {"epochs": 1}}}, "Mnist_RNN"),
    ({"jobs": []}, "jobs is []"),
    ({"jobs": [{**GOOD_JOB, "attempt": "one"}]}, "jobs[0].attempt is 'one'"),
    ({"jobs": [{**GOOD_JOB, "attempt": True}]}, "jobs[0].attempt is true"),
    ({"jobs": [{**GOOD_JOB, "attempt": -1}]}, "jobs[0].attempt is -1"),
    ({"jobs": [{**GOOD_JOB, "status": "done"}]}, "jobs[0].status is 'done'"),
    ({"jobs": [{**GOOD_JOB, "notebook": "Mnist_RNN"}]}, "jobs[0].notebook is 'Mnist_RNN'"),
    ({"jobs": [{"envv": "cpu", "notebook": "performanceTest"}]}, "jobs[0].envv"),
    ({"jobs": ["cpu"]}, "jobs[0] is "),
    ({"envs": {"cpu": {"how": "ssh", "kernel": "x"}}}, "envs.cpu.how is 'ssh'"),
    ({"envs": {"cpu": {"how": "here", "python": None}}}, "envs.cpu.python is null"),
    ({"envs": {"cpu": {"how": "here", "python": "/gone/bin/python"}}},
     "envs.cpu.python '/gone/bin/python' no longer exists"),
    ({"envs": {"cpu": {"how": "kernel", "kernel": "gone-kernel"}}},
     "envs.cpu.kernel 'gone-kernel' is no longer a Jupyter kernel"),
])
def test_resume_checks_run_json_field_by_field(capsys, tmp_path, monkeypatch, change, field):
    """A run.json from an older gpubench or a hand edit: exit 2 naming the field, before any
    kernel, and saying to start a new run."""
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    run_dir = _run_dir(tmp_path / "r")
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    (run_dir / rundir.MANIFEST).write_text(json.dumps({**manifest, **change}))
    code, _, err = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 2 and field in err, err
    assert "start a new run with `gpubench run`" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_resume_of_a_run_json_without_envs_names_the_field(capsys, tmp_path, monkeypatch):
    """An older run.json (schema 1, without "envs") is not resumed: exit 2 naming envs.ENV."""
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    run_dir = _run_dir(tmp_path / "r")
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    del manifest["envs"]
    (run_dir / rundir.MANIFEST).write_text(json.dumps({**manifest, "schema": 1}))
    code, _, err = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 2 and "run.json: envs.cpu is null: it must say how the env is reached" in err
    assert "start a new run with `gpubench run`" in err and "Traceback" not in err


def test_resume_of_a_missing_notebook_names_it(capsys, tmp_path, monkeypatch):
    """A run dir made when a notebook existed that no longer does."""
    (tmp_path / "nb").mkdir()
    monkeypatch.setattr(params, "notebooks_dir", lambda: tmp_path / "nb")
    code, _, err = _main(capsys, "run", "--resume", str(_run_dir(tmp_path / "r")))
    assert code == 2 and "performanceTest missing from" in err and "start a new run" in err


def test_read_only_out_is_a_clear_error(capsys, tmp_path, monkeypatch):
    """An existing empty --out on a read-only mount: the lock file cannot be created."""
    read_only_below(monkeypatch, tmp_path)
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path))
    assert code == 2 and f"cannot write in {tmp_path}" in err and "read-only" in err, err


def test_full_disk_when_writing_run_json(capsys, tmp_path, monkeypatch):
    real_write_text = Path.write_text

    def full(self, *args, **kwargs):
        if self.name.startswith(f".{rundir.MANIFEST}.") and self.name.endswith(".tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path / "r"))
    assert code == 2 and f"cannot write {tmp_path / 'r' / 'run.json'}: the disk is full" in err
    assert not [p.name for p in (tmp_path / "r").iterdir() if p.name.endswith(".tmp")]


def test_report_on_a_full_disk_is_a_clear_error(capsys, tmp_path, monkeypatch):
    from gpubench import report

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "report.md"))

    monkeypatch.setattr(report, "build", full)
    monkeypatch.setattr(report, "find_runs", lambda dirs: [Path(d) for d in dirs])
    code, _, err = _main(capsys, "report", str(tmp_path))
    assert code == 2 and f"cannot write {tmp_path / 'report.md'}: the disk is full" in err


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "RUN/report.md"),
    "report_write_error", FileNotFoundError("no results at 'RUN/results.jsonl'")])
def test_a_run_whose_report_fails_says_how_to_write_it_later(capsys, tmp_path, monkeypatch,
                                                               error):
    """The report is built even with no record; when it fails, the run says so and names
    `gpubench report RUN_DIR`, never --out (which would start a new run)."""
    from gpubench import report

    if error == "report_write_error":
        error = report.ReportWriteError("cannot write the report to 'RUN': the disk is full; "
                                        "free some space or pass --out with a writable folder")
    calls = []

    def build(run_dirs, out=None):
        calls.append(run_dirs)
        raise error

    monkeypatch.setattr(report, "build", build)
    assert not (tmp_path / "results.jsonl").exists()
    assert runner.loop.finish_report(tmp_path) is False and calls == [[tmp_path]]
    err = capsys.readouterr().err
    assert f"`gpubench report {tmp_path}`" in err and "--out" not in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ---- one process per run directory

def test_a_held_run_directory_is_refused_naming_the_pid(capsys, tmp_path):
    run_dir = _run_dir(tmp_path / "r")
    holder = subprocess.Popen([sys.executable, "-c",
                               "import contextlib, os, sys, time\n"
                               "from pathlib import Path\nfrom gpubench import rundir\n"
                               "with contextlib.ExitStack() as s:\n"
                               f"    rundir.lock_run_dir(Path({str(run_dir)!r}), s)\n"
                               "    print('locked', flush=True); time.sleep(60)\n"],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        # refused, not queued: had it waited for the lock, it would run once the holder ends
        code, _, err = _main(capsys, "run", "--resume", str(run_dir))
        assert code == 2 and f"in use by another gpubench run (PID {holder.pid})" in err
        code, _, err = _main(capsys, *QUICK, "--out", str(run_dir))
        assert code == 2 and "already holds a run" in err
    finally:
        holder.kill()  # kill -9: the OS drops the lock with the process
        holder.wait()
    with rundir.locked(run_dir / rundir.LOCK, wait=False):
        pass


def test_simultaneous_new_runs_cannot_both_create_it(tmp_path, monkeypatch):
    """The second `run --out X` looked before the first locked; it must not take X."""
    run_dir = tmp_path / "r"
    first, second = contextlib.ExitStack(), contextlib.ExitStack()
    with first, second:
        targets = {"cpu": runner.targets.Target(kernel="gpubench-cpu")}
        runner.loop.new_run(str(run_dir), "quick", targets, ["performanceTest"], {}, first)
        monkeypatch.setattr(runner.loop, "check_new_out", lambda path: None)  # it looked too early
        with pytest.raises(rundir.UsageError,
                           match=f"in use by another gpubench run \\(PID {os.getpid()}\\)"):
            runner.loop.new_run(str(run_dir), "quick", targets, ["performanceTest"], {}, second)


# ---- a job: attempt, records on disk, errors

def _fake_papermill(monkeypatch, write=None, raise_error=None) -> list[dict]:
    """papermill.execute_notebook replaced: no kernel, but the runner's kernel manager and its
    provisioner go through their launch, whose environment is recorded; may write a record."""
    import asyncio

    import papermill
    from jupyter_client.provisioning import LocalProvisioner

    seen: list[dict] = []

    async def launch(self, kernel_cmd, **kw):
        seen.append({**kw["env"], "manager": type(self.parent).__name__})

    async def start(manager):  # the manager's start, up to its provisioner's Popen
        kernel_cmd, kw = await manager.pre_start_kernel(env={"FROM_SPEC": "1"})
        await manager.provisioner.launch_kernel(kernel_cmd, **kw)
        await manager.cleanup_resources()

    def execute_notebook(source, output, parameters, kernel_manager_class, kernel_name, **kwargs):
        manager = kernel_manager_class(kernel_name=kernel_name)
        asyncio.run(start(manager))
        seen[-1].update(kernel=kernel_name, argv=manager.kernel_spec.argv, params=parameters,
                        claimed=json.loads((Path(parameters["results_path"]).parent
                                            / rundir.MANIFEST).read_text())["jobs"])
        if write is not None:
            write(parameters["results_path"], int(seen[-1]["GPUBENCH_ATTEMPT"]),
                  parameters["env_name"])
        if raise_error is not None:
            raise raise_error

    monkeypatch.setattr(LocalProvisioner, "launch_kernel", launch)
    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    return seen


def _record(path: str, attempt: int, env: str = "cpu", notebook: str = "performanceTest") -> None:
    """Append a valid matmul record of `attempt` (attempt 0: none of the runner's)."""
    record = results.make_record("matmul", notebook=notebook, env=env, device="cpu",
                                 environment=dict.fromkeys(results.ENVIRONMENT_FIELDS), size=64,
                                 dtype="float32", method="book",
                                 seconds=0.1, seconds_min=0.1, seconds_max=0.1, repeats=1, gflops=1.0)
    record["attempt"] = attempt
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


MANIFEST = {"run_id": "r1", "profile": "quick", "params": {},
            "envs": {"cpu": {"kernel": "gpubench-cpu"}}}


def _execute(job: runner.targets.Job, run_dir: Path, manifest: dict | None = None) -> None:
    runner.loop.execute(job, run_dir, dict(manifest or MANIFEST), [job])


def test_each_execution_is_a_new_attempt_in_the_kernels_environment(tmp_path, monkeypatch):
    seen = _fake_papermill(monkeypatch, write=_record)
    job = runner.targets.Job("cpu", "performanceTest")
    for attempt in (1, 2):
        _execute(job, tmp_path)
        assert (job.status, job.attempt) == ("ok", attempt)
    assert [s["GPUBENCH_ATTEMPT"] for s in seen] == ["1", "2"] and seen[0]["GPUBENCH_RUN_ID"] == "r1"
    # claimed in run.json before papermill started: attempt and "running" on disk
    assert [(s["claimed"][0]["status"], s["claimed"][0]["attempt"]) for s in seen] == [
        ("running", 1), ("running", 2)]
    assert seen[0]["kernel"] == "gpubench-cpu"
    assert seen[0]["NO_COLOR"] == "1" and seen[0]["FROM_SPEC"] == "1"  # added to the kernel's own
    assert "GPUBENCH_ATTEMPT" not in os.environ and seen[0]["manager"] == "RunnerKernelManager"


def test_a_notebook_without_records_on_disk_fails(tmp_path, monkeypatch):
    _fake_papermill(monkeypatch, write=lambda path, attempt, env: _record(path, attempt - 1))
    job = runner.targets.Job("cpu", "performanceTest", attempt=1)
    _execute(job, tmp_path)
    assert job.status == "failed" and job.attempt == 2
    assert "holds no readable record of it (attempt 2)" in job.error


def test_a_cut_off_record_does_not_count(tmp_path, monkeypatch):
    def cut(path, attempt, env):
        with open(path, "a") as fh:
            fh.write('{"env": "cpu", "notebook": "performanceTest", "attem')

    _fake_papermill(monkeypatch, write=cut)
    job = runner.targets.Job("cpu", "performanceTest")
    with warnings.catch_warnings():  # the report warns of a skipped line, once; the job does not
        warnings.simplefilter("error")
        _execute(job, tmp_path)
    assert job.status == "failed"


def test_a_full_disk_in_the_notebook_fails_the_job_saying_so(tmp_path, monkeypatch):
    import papermill

    store_error = (f"cannot append a record to '{tmp_path}/results.jsonl': the disk is full; "
                   "free some space (or make it writable) and resume the run")
    _fake_papermill(monkeypatch, raise_error=papermill.PapermillExecutionError(
        3, 1, "store.append(record)", "ResultsWriteError", store_error, []))
    job = runner.targets.Job("cpu", "performanceTest")
    _execute(job, tmp_path)
    assert job.status == "failed" and "the disk is full" in job.error
    assert f"{tmp_path}/results.jsonl" in job.error


def test_a_kernel_of_another_checkout_is_skipped(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "jupyter" / "kernels" / "gpubench-cpu-elsewhere"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps({
        "argv": ["/other/clone/.venv/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "x", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("another checkout's kernel ran"))
    code, out, _ = _main(capsys, "run", "--profile", "quick", "--envs", "cpu-elsewhere",
                         "--notebooks", "performanceTest", "--out", str(tmp_path / "r"))
    assert code == 1 and "SKIPPED env cpu-elsewhere: kernel gpubench-cpu-elsewhere" in out
    assert "is not this checkout's" in out and "make setup` in" in out
    job = json.loads((tmp_path / "r" / "run.json").read_text())["jobs"][0]
    assert job["status"] == "skipped" and set(job) >= {"env", "notebook", "error", "seconds", "attempt"}


def test_cell_output_has_no_ansi_escapes():
    formatter = runner.loop.CellOutput()
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


def _help(capsys, *command: str) -> str:
    with pytest.raises(SystemExit):
        cli.main([*command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["", "run", "report", "setup", "envs", "doctor", "scaling"])
def test_every_help_has_an_example(capsys, command):
    text = _help(capsys, *([command] if command else []))
    assert "example" in text and f"gpubench {command}".strip() in text.split("example")[1]


def test_report_help_says_what_it_reads_and_writes(capsys):
    text = _help(capsys, "report")
    assert "results.jsonl" in text and "report.md" in text and "PNG" in text and "--out" in text


@pytest.mark.parametrize("profile,named,expected", [
    ("quick", [], {"virtual_devices": 2}), ("full", [], None),
    ("full", ["Multi_GPU_Scaling"], {"virtual_devices": 2})])
def test_multi_gpu_scaling_rule_in_a_cpu_env(profile, named, expected, tmp_path):
    job = runner.targets.Job("cpu", "Multi_GPU_Scaling")
    targets = {"cpu": runner.targets.Target(kernel="gpubench-cpu", devices=["cpu"])}
    runner.loop.plan([job], {"profile": profile, "named": named}, targets, {})
    assert job.extra == expected
    assert job.status == ("skipped" if expected is None else "pending")
    if expected:
        manifest = {"profile": profile, "params": {}, "envs": {"cpu": {"kernel": "gpubench-cpu"}}}
        assert runner.loop.job_parameters(job, tmp_path, manifest)["virtual_devices"] == 2
        manifest["params"] = {"Multi_GPU_Scaling": {"virtual_devices": 4}}  # the user's -p wins
        assert runner.loop.job_parameters(job, tmp_path, manifest)["virtual_devices"] == 4
    else:
        assert "needs 2 or more GPUs" in job.error


# ---- where the notebooks run: --here, --kernel, the envs set up

def _fake_probe(monkeypatch, backend="tensorflow", seen=("cpu",), tensorflow=True,
                diagnosis=None, error=None) -> list[tuple]:
    """envs.probe_python replaced: what `PYTHON -m gpubench doctor --json` would say."""
    calls: list[tuple] = []

    def probe(argv, env=None, timeout=120):
        calls.append((list(argv), dict(env or {})))
        if error:
            return {"error": error}
        return {"backend": backend, "devices": list(seen), "tensorflow_importable": tensorflow,
                "diagnosis": diagnosis, "env": "ignored", "error": None}

    monkeypatch.setattr(envs, "probe_python", probe)
    return calls


@pytest.fixture
def no_report(monkeypatch):
    """report.build replaced by a stub that writes report.md (the report has tests of its own)."""
    from gpubench import report

    def build(run_dirs, out=None):
        path = Path(run_dirs[0]) / "report.md"
        path.write_text("report\n")
        return path

    monkeypatch.setattr(report, "build", build)


def test_here_runs_in_a_kernel_of_this_python(capsys, tmp_path, monkeypatch, no_report):
    """--here: a kernel spec made on the fly for sys.executable, the label from the probe,
    KERAS_BACKEND and this gpubench given to the kernel, and run.json saying how it was reached."""
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    probes = _fake_probe(monkeypatch, backend="jax", tensorflow=False)
    seen = _fake_papermill(monkeypatch, write=_record)
    out = tmp_path / "r"
    code, stdout, _ = _main(capsys, "run", "--here", "--profile", "quick", "--notebooks",
                            "performanceTest", "--out", str(out))
    assert code == 0, stdout
    assert probes[0][0] == [sys.executable]
    assert seen[0]["kernel"] == runner.kernels.HERE_KERNEL
    assert seen[0]["argv"][:3] == [sys.executable, "-m", "ipykernel_launcher"]
    assert seen[0]["KERAS_BACKEND"] == "jax" and seen[0]["params"]["env_name"] == "jax-cpu"
    assert str(REPO) in seen[0]["PYTHONPATH"].split(os.pathsep)
    manifest = json.loads((out / rundir.MANIFEST).read_text())
    assert manifest["schema"] == runner.targets.MANIFEST_SCHEMA
    assert manifest["envs"]["jax-cpu"] == {
        "how": "here", "kernel": None, "python": sys.executable, "backend": "jax",
        "devices": ["cpu"], "tensorflow_importable": False, "diagnosis": None}
    assert [(j["env"], j["status"], j["attempt"]) for j in manifest["jobs"]] == [
        ("jax-cpu", "ok", 1)]
    # --resume reaches the env the same way, without probing again
    manifest["jobs"][0]["status"] = "failed"
    (out / rundir.MANIFEST).write_text(json.dumps(manifest))
    code, _, _ = _main(capsys, "run", "--resume", str(out))
    assert code == 0 and len(probes) == 1 and seen[1]["kernel"] == runner.kernels.HERE_KERNEL
    assert seen[1]["GPUBENCH_ATTEMPT"] == "2"


def test_here_from_a_relative_path_runs_that_python_by_its_absolute_path(
        capsys, tmp_path, monkeypatch, no_report):
    """`PATH=.venv-jax/bin:$PATH` (tools/gpu_check.sh's rehearsal) makes sys.executable relative;
    the probe and the kernel start in other folders, so both get the absolute path."""
    python = sys.executable
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "executable", os.path.relpath(python))
    probes = _fake_probe(monkeypatch, backend="jax", tensorflow=False)
    seen = _fake_papermill(monkeypatch, write=_record)
    code, stdout, _ = _main(capsys, "run", "--here", "--profile", "quick", "--notebooks",
                            "performanceTest", "--out", str(tmp_path / "r"))
    assert code == 0, stdout
    assert probes[0][0] == [python] and seen[0]["argv"][0] == python


@pytest.mark.parametrize("module", ["ipykernel", "keras", "papermill"])
def test_here_without_a_package_names_it(capsys, tmp_path, monkeypatch, module):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == module else real(name, *a))
    monkeypatch.setattr(envs, "probe_python", lambda *a, **k: pytest.fail("probed"))
    code, _, err = _main(capsys, "run", "--here", "--out", str(tmp_path / "r"))
    assert code == 2 and f"{module} is not installed in {sys.executable}" in err
    assert f"pip install {module}" in err and "make setup" in err
    assert not (tmp_path / "r").exists()


def test_here_in_a_python_that_cannot_run_gpubench(capsys, tmp_path, monkeypatch):
    _fake_probe(monkeypatch, error="TensorFlow is not installed in /x/python")
    code, _, err = _main(capsys, "run", "--here", "--out", str(tmp_path / "r"))
    assert code == 2 and "--here" in err and "TensorFlow is not installed in /x/python" in err
    assert not (tmp_path / "r").exists()


def _kernel(tmp_path, monkeypatch, name: str, **spec) -> Path:
    """Register kernel `name` (running this Python) on a temporary JUPYTER_PATH."""
    folder = tmp_path / "jupyter" / "kernels" / name
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": name, "language": "python", **spec}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return folder


def test_kernel_runs_in_an_existing_kernel_labelled_by_its_probe(capsys, tmp_path, monkeypatch,
                                                                 no_report):
    _kernel(tmp_path, monkeypatch, "my-jax", env={"KERAS_BACKEND": "jax", "MINE": "1"})
    probes = _fake_probe(monkeypatch, backend="jax", tensorflow=False)
    seen = _fake_papermill(monkeypatch, write=_record)
    out = tmp_path / "r"
    code, stdout, _ = _main(capsys, "run", "--kernel", "my-jax", "--profile", "quick",
                            "--notebooks", "performanceTest", "--out", str(out))
    assert code == 0, stdout
    argv, env = probes[0]
    assert argv == [sys.executable] and env["KERAS_BACKEND"] == "jax" and env["MINE"] == "1"
    assert seen[0]["kernel"] == "my-jax" and seen[0]["params"]["env_name"] == "jax-cpu"
    target = json.loads((out / rundir.MANIFEST).read_text())["envs"]["jax-cpu"]
    assert (target["how"], target["kernel"], target["python"]) == ("kernel", "my-jax",
                                                                  sys.executable)


def test_kernel_that_does_not_exist_lists_those_that_do(capsys, tmp_path, monkeypatch):
    _kernel(tmp_path, monkeypatch, "mine")
    code, _, err = _main(capsys, "run", "--kernel", "nope", "--out", str(tmp_path / "r"))
    assert code == 2 and "--kernel 'nope': no such Jupyter kernel" in err
    assert "mine" in err and "gpubench-cpu" in err and not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv", [["--here", "--envs", "cpu"], ["--here", "--kernel", "x"],
                                  ["--envs", "cpu", "--kernel", "x"]])
def test_here_kernel_and_envs_exclude_each_other(capsys, argv):
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", *argv])
    assert stop.value.code == 2 and "not allowed with" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--here"], ["--kernel", "x"], ["--envs", "cpu"]])
def test_resume_reaches_the_envs_it_started_with(capsys, tmp_path, option):
    code, _, err = _main(capsys, "run", "--resume", str(_run_dir(tmp_path / "r")), *option)
    assert code == 2 and f"{option[0]} goes with a new run" in err


@pytest.mark.parametrize("value,words", [("numpy", "numpy cannot train"),
                                         ("tensorfloww", "unknown Keras backend")])
@pytest.mark.parametrize("how", ["envs", "here", "kernel", "doctor"])
def test_an_unsupported_keras_backend_exits_2(capsys, tmp_path, monkeypatch, value, words, how):
    monkeypatch.setattr(envs, "probe_python", lambda *a, **k: pytest.fail("probed"))
    argv = {"envs": ["run", "--envs", "cpu-mine"], "here": ["run", "--here"],
            "kernel": ["run", "--kernel", "k"], "doctor": ["doctor"]}[how]
    if how == "kernel":
        _kernel(tmp_path, monkeypatch, "k", env={"KERAS_BACKEND": value})
    elif how == "envs":  # a gpubench-ENV kernel pins its backend in its spec: that one counts
        _kernel(tmp_path, monkeypatch, "gpubench-cpu-mine", env={"KERAS_BACKEND": value})
    else:
        monkeypatch.setenv("KERAS_BACKEND", value)
    out = ["--out", str(tmp_path / "r")] if how != "doctor" else []
    code, _, err = _main(capsys, *argv, *out)
    assert code == 2 and f"KERAS_BACKEND={value!r}: {words}" in err and "tensorflow, jax" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_a_kernel_pins_its_backend_whatever_the_shell_says(capsys, tmp_path, monkeypatch):
    """KERAS_BACKEND in the shell does not reach a gpubench-ENV kernel: its spec sets it."""
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    _kernel(tmp_path, monkeypatch, "gpubench-cpu", env={"KERAS_BACKEND": "tensorflow"})
    targets = runner.targets.standard(["cpu"])
    runner.targets.find_problems(targets, ["performanceTest"], {}, named=True)
    assert targets["cpu"].backend == "tensorflow"


def test_default_envs_are_those_set_up(capsys, tmp_path, monkeypatch, no_report):
    """No gpu job where no gpu env was set up; no env set up at all is a usage error."""
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    seen = _fake_papermill(monkeypatch, write=_record)
    code, stdout, _ = _main(capsys, "run", "--profile", "quick", "--notebooks",
                            "performanceTest", "--out", str(tmp_path / "r"))
    jobs = json.loads((tmp_path / "r" / rundir.MANIFEST).read_text())["jobs"]
    book = sorted(e for e in envs.kernel_specs() if backends.env_backend(e) == "tensorflow")
    assert code == 0 and sorted(j["env"] for j in jobs) == book  # other backends when named
    assert "SKIPPED" not in stdout and len(seen) == len(jobs)
    monkeypatch.setattr(envs, "kernel_specs", dict)
    code, _, err = _main(capsys, "run", "--out", str(tmp_path / "r2"))
    assert code == 2 and "no env is set up" in err and "make setup" in err and "--here" in err


def test_envs_gpu_on_a_machine_without_a_gpu_exits_2(capsys, tmp_path, monkeypatch):
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    monkeypatch.setenv("PATH", f"{fakebin}{os.pathsep}/usr/bin:/bin")  # no nvidia-smi
    code, _, err = _main(capsys, *QUICK[:3], "--envs", "gpu", "--out", str(tmp_path / "r"))
    assert code == 2 and "--envs gpu: this machine has no NVIDIA GPU (nvidia-smi not found)" in err
    assert "make setup GPU=1" not in err and not (tmp_path / "r").exists()


def test_a_gpu_env_that_sees_no_gpu(capsys, tmp_path, monkeypatch, no_report):
    """Named: exit 2 with the diagnosis, before anything. By default: its jobs fail with it, the
    others run, and the report is written."""
    from jupyter_client.kernelspec import KernelSpecManager

    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    cpu = KernelSpecManager().get_kernel_spec("gpubench-cpu")
    _kernel(tmp_path, monkeypatch, "gpubench-gpu", env={"PYTHONPATH": str(REPO)})
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join([str(tmp_path / "jupyter"),
                                                        str(Path(cpu.resource_dir).parents[1])]))
    _fake_probe(monkeypatch, diagnosis="Diagnosis: the driver is broken.\nFix: reinstall it.")
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    code, _, err = _main(capsys, *QUICK[:3], "--envs", "gpu", "--out", str(tmp_path / "r"))
    assert code == 2 and "--envs gpu: tensorflow in this env sees no GPU" in err
    assert "Diagnosis: the driver is broken. Fix: reinstall it." in err
    assert not (tmp_path / "r").exists()
    monkeypatch.undo()  # the real execute again, with a fake papermill
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    _kernel(tmp_path / "2", monkeypatch, "gpubench-gpu", env={"PYTHONPATH": str(REPO)})
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join([str(tmp_path / "2" / "jupyter"),
                                                        str(Path(cpu.resource_dir).parents[1])]))
    _fake_probe(monkeypatch, diagnosis="Diagnosis: the driver is broken.")
    seen = _fake_papermill(monkeypatch, write=_record)
    from gpubench import report

    monkeypatch.setattr(report, "build", lambda dirs, out=None: Path(dirs[0]) / "report.md")
    code, stdout, _ = _main(capsys, "run", "--profile", "quick", "--notebooks",
                            "performanceTest", "--out", str(tmp_path / "r"))
    jobs = {j["env"]: j for j in json.loads((tmp_path / "r" / rundir.MANIFEST).read_text())["jobs"]}
    assert code == 1 and jobs["gpu"]["status"] == "failed" and jobs["cpu"]["status"] == "ok"
    assert "FAILED env gpu: Diagnosis: the driver is broken." in stdout and len(seen) == 1


def test_tf_data_where_tensorflow_cannot_be_imported_exits_2(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    _fake_probe(monkeypatch, backend="jax", tensorflow=False)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    code, _, err = _main(capsys, "run", "--here", "--notebooks", "Speed_Factors", "--out",
                         str(tmp_path / "r"), "-p", 'input_pipelines=["arrays","tf.data"]')
    assert code == 2 and "tf.data" in err and "Speed_Factors" in err and "jax-cpu" in err
    assert "tensorflow" in err and not (tmp_path / "r").exists()


# ---- attempts claimed before they run

def test_a_resumed_crash_runs_a_higher_attempt_and_needs_its_own_records(capsys, tmp_path,
                                                                         monkeypatch, no_report):
    """run.json of a runner killed mid-job: "running", attempt 1, with attempt-1 records on
    disk. The resume runs attempt 2; a notebook that writes nothing is not ok."""
    run_dir = _run_dir(tmp_path / "r", [{**GOOD_JOB, "status": "running", "attempt": 1}])
    _record(str(run_dir / "results.jsonl"), 1)
    seen = _fake_papermill(monkeypatch)  # writes no record
    code, _, _ = _main(capsys, "run", "--resume", str(run_dir))
    job = json.loads((run_dir / rundir.MANIFEST).read_text())["jobs"][0]
    assert seen[0]["GPUBENCH_ATTEMPT"] == "2" and seen[0]["claimed"][0]["status"] == "running"
    assert code == 1 and (job["status"], job["attempt"]) == ("failed", 2)
    assert "attempt 2" in job["error"]


def test_a_claim_that_cannot_be_saved_starts_nothing(capsys, tmp_path, monkeypatch):
    from gpubench import report

    run_dir = _run_dir(tmp_path / "r")
    real_write_text = Path.write_text
    monkeypatch.setattr(report, "build", lambda *a, **k: pytest.fail("reported"))

    def full(self, *args, **kwargs):
        if self.name.startswith(f".{rundir.MANIFEST}.") and self.name.endswith(".tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write_text(self, *args, **kwargs)

    seen = _fake_papermill(monkeypatch)
    monkeypatch.setattr(Path, "write_text", full)
    code, _, err = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 2 and f"cannot write {run_dir / 'run.json'}: the disk is full" in err
    assert seen == []  # no kernel for an attempt that is not on disk
    assert json.loads((run_dir / rundir.MANIFEST).read_text())["jobs"][0].get("attempt", 0) == 0


# ---- Ctrl-C anywhere: exit 130, one line

@pytest.mark.parametrize("command", ["report", "envs", "doctor", "setup"])
def test_ctrl_c_in_any_command_is_one_line(capsys, monkeypatch, command):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, command, interrupted)
    code, out, err = _main(capsys, command, *(["x"] if command == "report" else []))
    assert code == 130 and err == f"gpubench {command}: interrupted by Ctrl-C\n" and out == ""


def test_ctrl_c_before_the_run_directory_exists(capsys, tmp_path, monkeypatch):
    def probe(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # the run's own handler is installed by now
        time.sleep(1)
        pytest.fail("not interrupted")

    monkeypatch.setattr(envs, "probe_python", probe)
    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN in a background job
    code, _, err = _main(capsys, "run", "--here", "--out", str(tmp_path / "r"))
    assert code == 130 and err == "gpubench run: interrupted by Ctrl-C\n"
    assert not (tmp_path / "r").exists()
    assert signal.getsignal(signal.SIGINT) is before  # put back, whatever it was


def test_ctrl_c_before_the_first_notebook_says_how_to_resume(capsys, tmp_path, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.loop, "execute", interrupted)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path / "r"))
    assert code == 130 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"Finish the run with: gpubench run --resume {tmp_path / 'r'}" in err


# ---- messages name the operation and the path

def test_a_full_disk_at_the_start_names_the_lock_file(capsys, tmp_path, monkeypatch):
    real_write = os.write

    def full(fd, data):
        if data == f"{os.getpid()}\n".encode():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    code, _, err = _main(capsys, *QUICK, "--out", str(tmp_path / "r"))
    assert code == 2 and f"cannot write {tmp_path / 'r' / 'run.lock'}: the disk is full" in err


@pytest.mark.parametrize("error,words", [
    (IsADirectoryError(errno.EISDIR, "Is a directory", "RUN/results.jsonl"),
     "RUN/results.jsonl is a folder, where gpubench expects a file"),
    (PermissionError(errno.EACCES, "Permission denied", "RUN/results.jsonl"),
     "RUN/results.jsonl: Permission denied"),
    (OSError(errno.EROFS, os.strerror(errno.EROFS), "RUN/report.md"),
     "cannot write RUN/report.md: the file system is read-only")])
def test_an_os_error_names_the_path_and_the_operation(capsys, monkeypatch, error, words):
    def fail(args):
        raise error

    monkeypatch.setitem(cli.COMMANDS, "report", fail)
    code, _, err = _main(capsys, "report", "RUN")
    assert code == 2 and words in err
    if error.errno != errno.EROFS:
        assert "cannot write" not in err and "free some space" not in err


@pytest.mark.parametrize("module,words", [
    ("tensorflow", "TensorFlow is not installed in"), ("keras", "Keras is not installed in"),
    ("jax", "make setup BACKENDS=tensorflow,jax"),
    ("torch", "PyTorch is not installed in"), ("torch", "make setup BACKENDS=tensorflow,torch")])
def test_a_missing_framework_says_which_env_to_use(capsys, monkeypatch, module, words):
    def fail(args):
        raise ModuleNotFoundError(f"No module named '{module}'", name=module)

    monkeypatch.setitem(cli.COMMANDS, "doctor", fail)
    code, _, err = _main(capsys, "doctor")
    assert code == 2 and words in err and sys.executable in err
    assert "make setup" in err and len(err.strip().splitlines()) == 1


def test_a_missing_gpubench_module_is_a_bug_not_a_missing_package(monkeypatch):
    def fail(args):
        raise ModuleNotFoundError("No module named 'gpubench.gone'", name="gpubench.gone")

    monkeypatch.setitem(cli.COMMANDS, "doctor", fail)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["doctor"])


def test_doctor_json_prints_one_json_document_only(capsys, monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    code, out, _ = _main(capsys, "doctor", "--json")
    found = json.loads(out)  # nothing before or after it
    assert code == 0 and found["devices"][0] == "cpu" and found["env"]
    assert found["tensorflow_importable"] is True and found["backend"] == "tensorflow"
    assert set(results.ENVIRONMENT_FIELDS) <= set(found)
    assert ("diagnosis" in found) == (len(found["devices"]) == 1)
    if "diagnosis" in found:
        assert _main(capsys, "doctor", "--json", "--gpu")[0] == 1


def test_a_run_that_records_nothing_still_has_a_report(capsys, tmp_path, monkeypatch):
    """No results.jsonl at all: the runner still builds report.md, and it lists the job."""
    run_dir = _run_dir(tmp_path / "r")
    _fake_papermill(monkeypatch)  # the notebook "ends" without a record
    code, stdout, _ = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 1 and not (run_dir / "results.jsonl").exists()
    assert f"Report: {run_dir / 'report.md'}" in stdout
    report = (run_dir / "report.md").read_text()
    assert "performanceTest" in report and "failed" in report


# ---- nothing accepted silently

def _refused(capsys, tmp_path, monkeypatch, *argv: str) -> str:
    """Run `gpubench run ... --out tmp/r` that must exit 2 with one line, no kernel, no folder."""
    monkeypatch.setattr(runner.loop, "execute", lambda *a: pytest.fail("a kernel was started"))
    code, out, err = _main(capsys, "run", "--envs", "cpu", "--out", str(tmp_path / "r"), *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "r").exists()
    return err


def test_p_for_a_notebook_not_in_the_run_is_refused(capsys, tmp_path, monkeypatch):
    err = _refused(capsys, tmp_path, monkeypatch, "--notebooks", "performanceTest",
                   "-p", "Mnist_CNN:epochs=5")
    assert "-p Mnist_CNN:epochs: Mnist_CNN is not in this run (performanceTest)" in err


@pytest.mark.parametrize("value,words", [
    ("x" * 3000, "is too long for this system"),
    ("nope/data", "does not exist"),
    ("runs\0x", "NUL character"),
])
def test_a_bad_data_dir_is_refused_before_any_kernel(capsys, tmp_path, monkeypatch, value, words):
    monkeypatch.chdir(tmp_path)
    err = _refused(capsys, tmp_path, monkeypatch, "--notebooks", "Mnist_CNN", "-p",
                   f"data_dir={value}")
    assert "data_dir" in err and words in err and "Mnist_CNN" in err
    assert len(err) < 300  # a long value is shortened, not printed whole


def test_a_data_dir_that_is_a_file_is_refused(capsys, tmp_path, monkeypatch):
    (tmp_path / "mnist.npz").write_text("")
    err = _refused(capsys, tmp_path, monkeypatch, "--notebooks", "Mnist_CNN", "-p",
                   f"data_dir={tmp_path / 'mnist.npz'}")
    assert "is a file, not a folder" in err


def test_a_relative_data_dir_reaches_the_kernel_as_an_absolute_path(tmp_path, monkeypatch):
    """Kernels run in notebooks/, so `-p data_dir=data` from the user's folder is made absolute."""
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    assert runner.targets.parse_params(["data_dir=data"]) == {"*": {"data_dir": str(tmp_path / "data")}}
    runner.targets.check_params(runner.targets.parse_params(["data_dir=data"]), ["Mnist_CNN"])


def test_report_of_a_missing_path_says_it_does_not_exist(capsys, tmp_path):
    code, _, err = _main(capsys, "report", str(tmp_path / "runs" / "x"))
    assert code == 2 and f"{tmp_path / 'runs' / 'x'} does not exist" in err
    assert "not a run directory" not in err and len(err.strip().splitlines()) == 1


def test_a_run_dir_given_twice_is_read_once_with_a_note(capsys, tmp_path, monkeypatch):
    run_dir = _run_dir(tmp_path / "r", [{**GOOD_JOB, "status": "failed", "error": "boom"}])
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning) as seen:
        code, _, _ = _main(capsys, "report", "r", str(run_dir), "r/", "--out", "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert code == 0 and text.count("boom") == 1, text
    assert "Runs: `r`" in text and "`r`, `r`" not in text
    assert [str(w.message) for w in seen] == [f"{run_dir} and r are the same folder; it is read "
                                              "once", "r is given twice; it is read once"]


def test_two_runs_in_one_results_file_name_the_replaced_one(tmp_path):
    from gpubench import report

    path = tmp_path / "results.jsonl"
    for run_id in ("first", "second"):
        _record(str(path), 1)
        lines = path.read_text().splitlines()
        lines[-1] = json.dumps({**json.loads(lines[-1]), "run_id": run_id})
        path.write_text("\n".join(lines) + "\n")
    problems: list[str] = []
    with pytest.warns(UserWarning, match="holds runs first, second"):
        records = report.load([tmp_path], problems)
    assert [r["run_id"] for r in records] == ["second"]
    assert problems == [f"{path}: cpu/performanceTest holds runs first, second; shown: run "
                        "second, whose records replace the others'"]


# ---- no temp file survives a resume

_WRITER = """
import sys, time
from pathlib import Path
from gpubench import rundir

def save(tmp):
    tmp.write_bytes(b"half a chart")
    print("writing", flush=True)
    time.sleep(60)

rundir.write_atomic(Path(sys.argv[1]) / "matmul_time.png", save)
"""


def test_a_writer_killed_mid_write_leaves_no_temp_file_after_resume(capsys, tmp_path,
                                                                    monkeypatch, no_report):
    run_dir = _run_dir(tmp_path / "r", [{**GOOD_JOB, "status": "ok", "attempt": 1}])
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(run_dir)], env=python_env(),
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    left = run_dir / f".matmul_time.png.{writer.pid}.tmp"
    assert left.exists()  # what kill -9 leaves
    live = run_dir / f".report.md.{os.getppid()}.tmp"  # a live writer's: not ours to remove
    live.write_text("")
    code, out, _ = _main(capsys, "run", "--resume", str(run_dir))
    assert code == 0 and not left.exists() and live.exists()
    assert f"Removed 1 temp file(s) that an interrupted writer left in {run_dir}: {left.name}" \
        in out


# ---- hints that fit where the user is

@pytest.mark.parametrize("module,words", [
    ("tensorflow", "-m pip install 'gpubench[cpu]'"), ("jax", "-m pip install 'gpubench[jax]'"),
    ("jupyter_client", "-m pip install 'jupyter_client'")])
def test_outside_a_checkout_a_missing_module_names_pip(capsys, monkeypatch, module, words):
    def fail(args):
        raise ModuleNotFoundError(f"No module named '{module}'", name=module)

    monkeypatch.setattr(machine, "checkout", lambda: None)
    monkeypatch.setattr(envs, "install_source", lambda: "gpubench")  # from an index
    monkeypatch.setitem(cli.COMMANDS, "doctor", fail)
    code, _, err = _main(capsys, "doctor")
    assert code == 2 and words in err and sys.executable in err
    rest = err.replace(sys.executable, "PYTHON")
    assert "make " not in rest and ".venv" not in rest and len(err.strip().splitlines()) == 1


def test_outside_a_checkout_no_env_set_up_points_to_here(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "checkout", lambda: None)
    monkeypatch.setattr(params, "notebooks_dir", lambda: REPO / "notebooks")  # a wheel's copy
    monkeypatch.setattr(envs, "kernel_specs", lambda: {})
    code, _, err = _main(capsys, "run", "--out", str(tmp_path / "r"))
    assert code == 2 and "gpubench run --here" in err and "make " not in err


def test_help_names_every_backend(capsys):
    for command in ([], ["run"]):
        out = _help(capsys, *command)
        assert "TensorFlow" in out and "JAX" in out and "PyTorch" in out, command


def test_doctor_json_is_one_document_whatever_fails():
    """KERAS_BACKEND=jax where JAX is not installed: still one JSON document, saying why."""
    proc = subprocess.run([sys.executable, "-m", "gpubench", "doctor", "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env=python_env(KERAS_BACKEND="jax"))
    found = json.loads(proc.stdout)  # nothing before or after it
    assert proc.returncode == 1 and "JAX is not installed in" in found["error"], found
    assert found["gpubench"] and found["python"] == sys.executable


@pytest.mark.parametrize("how", ["here", "env"])
def test_multi_gpu_scaling_runs_on_every_backend_however_the_env_is_reached(tmp_path, how):
    """Each backend has a data-parallel path: on a PyTorch CPU env, reached by `--here` or as a
    gpubench-ENV kernel, a quick run plans Multi_GPU_Scaling on 2 virtual CPU devices."""
    job = runner.targets.Job("torch-cpu", "Multi_GPU_Scaling")
    targets = {"torch-cpu": runner.targets.Target(how=how, kernel="k", python="p", backend="torch",
                                          devices=["cpu"])}
    runner.loop.plan([job], {"profile": "quick"}, targets, {})
    assert (job.status, job.error, job.extra) == ("pending", None, {"virtual_devices": 2})
