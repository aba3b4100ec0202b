"""gpubench run / report end to end: run directory, two envs, failures, resume, bad usage."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading

import nbformat
import pytest

from conftest import QUICK_RUN_NOTEBOOKS, REPO, python_env
from gpubench import params, rundir
from gpubench_cli import RUN, kernel_like, run_gpubench

pytestmark = pytest.mark.slow


def test_quick_run_writes_the_whole_run_directory(quick_run):
    for nb in QUICK_RUN_NOTEBOOKS:
        out = quick_run / "cpu" / f"{nb}.ipynb"
        assert out.exists(), out
        assert not any(o.output_type == "error" for c in nbformat.read(out, 4).cells
                       if c.cell_type == "code" for o in c.outputs)
    records = rundir.read_records(quick_run)
    assert {r["notebook"] for r in records} == set(QUICK_RUN_NOTEBOOKS)
    assert {r["attempt"] for r in records} == {1}
    assert {r["env"] for r in records} == {"cpu"}
    assert len({r["run_id"] for r in records}) == 1
    for png in ("matmul_time.png", "matmul_gflops.png", "epoch_times.png"):
        assert (quick_run / png).stat().st_size > 1000, png
    report = (quick_run / "report.md").read_text()
    assert "## Training: the book's table" in report and "## Matrix multiplication" in report
    assert "reference/h200-jax" in report  # only the CPU env: says what a GPU would give
    assert "**(synthetic)**" in report
    assert re.search(r"^!\[[^]]+\]\(matmul_time\.png\)$", report, re.M)  # the chart, named


def test_quick_run_summary(quick_run_output):
    assert f"{len(QUICK_RUN_NOTEBOOKS)} ok" in quick_run_output
    assert "Report:" in quick_run_output
    # the kernels' channels are encrypted, so ipykernel's plain-TCP warning is gone
    assert "without encryption" not in quick_run_output
    assert "\x1b[" not in quick_run_output  # Keras's rich model summary: no ANSI escapes in logs


def test_quick_run_progress_lines_estimate_what_is_left(quick_run_output):
    """Without a terminal (CI, a log file) each job starts with "[k/N] env/nb (elapsed, left)"."""
    count = len(QUICK_RUN_NOTEBOOKS)
    lines = re.findall(rf"^\[(\d)/{count}\] cpu/(\w+)  \(elapsed (\d+):(\d\d), about (\d+):(\d\d) left\)$",
                       quick_run_output, re.M)
    assert [int(k) for k, *_ in lines] == list(range(1, count + 1))
    expected = params.EXPECTED_SECONDS["quick"]
    total = sum(expected[n] for n in QUICK_RUN_NOTEBOOKS)
    done = 0
    for _, name, em, es, lm, ls in lines:
        elapsed, left = int(em) * 60 + int(es), int(lm) * 60 + int(ls)
        if not done:
            assert left == total  # nothing measured yet: the profile's estimate
        else:  # then scaled by how fast the work done so far went (clock shows whole seconds)
            assert abs(left - elapsed * (total - done) / done) <= (total - done) / done + 1
        done += expected[name]


@pytest.fixture
def variant_kernel(tmp_path, monkeypatch, cpu_kernel):
    """A second CPU env: the gpubench-cpu kernel with oneDNN turned off, on JUPYTER_PATH."""
    kernel_like(cpu_kernel, "gpubench-cpu-noonednn", tmp_path, monkeypatch,
                display_name="gpubench-cpu without oneDNN", env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    return "cpu-noonednn"


def test_two_envs_are_compared(tmp_path, variant_kernel):
    out = tmp_path / "run"
    proc = run_gpubench(["--profile", "quick", "--envs", f"cpu,{variant_kernel}", "--notebooks",
                         "Mnist_MLP_h1000", "-p", "max_train_samples=2000", "-p", "epochs=2",
                         "--out", str(out)], env=python_env(GPUBENCH_DATA_SOURCE="synthetic"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = rundir.read_records(out)
    variant = [r for r in records if r["env"] == variant_kernel]
    assert variant and all(r["environment"]["tf_env"].get("TF_ENABLE_ONEDNN_OPTS") == "0"
                           for r in variant)
    assert (out / variant_kernel / "Mnist_MLP_h1000.ipynb").exists()
    report = (out / "report.md").read_text()
    host = records[0]["environment"]["hostname"]
    assert f"| {host} · cpu |" in report and f"| {host} · {variant_kernel} |" in report
    mlp_rows = [line for line in report.splitlines() if line.startswith("| MNIST MLP h1000")]
    assert len(mlp_rows) == 2 and "baseline" in mlp_rows[0] and "%" in mlp_rows[1]


def test_a_failing_notebook_leaves_the_others_done(tmp_path):
    """A data source the runner cannot check (it is the kernel's environment variable) fails the
    training notebook in the kernel; the matmul notebook is done and reported."""
    out = tmp_path / "run"
    proc = run_gpubench(["--profile", "quick", "--envs", "cpu", "--notebooks",
                         "performanceTest,Mnist_MLP_h1000", "-p", "performanceTest:sizes=[64,128]",
                         "--out", str(out)], env=python_env(GPUBENCH_DATA_SOURCE="nowhere"))
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "failed" in proc.stdout and "1 ok, 1 failed" in proc.stdout
    assert "nowhere" in proc.stdout
    kept = nbformat.read(out / "cpu" / "Mnist_MLP_h1000.ipynb", 4)
    assert any(o.output_type == "error" for c in kept.cells if c.cell_type == "code"
               for o in c.outputs)
    records = rundir.read_records(out)
    assert {r["notebook"] for r in records} == {"performanceTest"}
    assert (out / "report.md").exists()


def test_resume_after_an_interrupted_run(tmp_path):
    """Ctrl-C (SIGINT to the runner alone: kernels run in their own session) while the second
    notebook trains; then --resume runs only that notebook."""
    out = tmp_path / "run"
    proc = subprocess.Popen(RUN + ["--profile", "quick", "--envs", "cpu", "--notebooks",
                                   "Mnist_MLP_h1000,Mnist_CNN", "--out", str(out),
                                   "-p", "max_train_samples=1000",
                                   "-p", "Mnist_MLP_h1000:epochs=1",
                                   "-p", "Mnist_CNN:epochs=12"],  # long enough to be caught
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=python_env(GPUBENCH_DATA_SOURCE="synthetic"))
    lines: list[str] = []
    training = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("  cpu/Mnist_CNN| Epoch 2/12"):
                training.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not training.wait(timeout=600):
        proc.kill()
        pytest.fail("the second notebook never started training:\n" + "".join(lines)[-3000:])
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    reader.join(timeout=30)
    output = "".join(lines)
    assert proc.returncode == 130, output[-3000:]
    assert "--resume" in output and "Socket operation on non-socket" not in output
    assert "Ctrl-C: interrupting the notebook" in output and "\x1b[" not in output
    manifest = out / "run.json"
    jobs = json.loads(manifest.read_text())["jobs"]
    assert [j["status"] for j in jobs] == ["ok", "interrupted"]
    assert [j["attempt"] for j in jobs] == [1, 1] and jobs[1]["error"] == "stopped by Ctrl-C"
    first_output = out / "cpu" / "Mnist_MLP_h1000.ipynb"
    stamp = first_output.stat().st_mtime_ns
    done = [r for r in rundir.read_records(out) if r["notebook"] == "Mnist_MLP_h1000"]
    assert len(done) == 1

    resumed = run_gpubench(["--resume", str(out)])
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "1 notebook(s) already done, 1 to run" in resumed.stdout
    assert first_output.stat().st_mtime_ns == stamp  # not run again
    jobs = json.loads(manifest.read_text())["jobs"]
    assert [(j["status"], j["attempt"]) for j in jobs] == [("ok", 1), ("ok", 2)]
    records = rundir.read_records(out)
    cnn = [r for r in records if r["notebook"] == "Mnist_CNN" and r["attempt"] == 2]
    assert [(r["status"], r["epochs"]) for r in cnn] == [("ok", 12)]
    assert (out / "report.md").exists()


@pytest.mark.parametrize("args,message", [
    (["--envs", "tpu"], "unknown env(s) tpu"),
    (["--notebooks", "Mnist_RNN"], "unknown notebook(s) Mnist_RNN"),
    (["--profile", "fast"], "invalid choice: 'fast'"),
    (["--param", "sizes"], "bad --param 'sizes'"),
    (["--resume", "."], "is not a run directory"),
    (["--notebooks", "performanceTest,Mnist_CNN", "-p", "epoch=1"], "unknown parameter -p epoch"),
    (["-p", "results_path=/tmp/x.jsonl"], "use --out instead"),
    (["--kernel", "no-such-kernel"], "no such Jupyter kernel"),
])
def test_bad_usage_exits_2(args, message):
    proc = run_gpubench(args, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr


def test_out_that_is_not_a_run_directory_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    proc = run_gpubench(["--out", str(tmp_path)], timeout=120)
    assert proc.returncode == 2 and "not a run directory" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_gpu_env_whose_tensorflow_sees_no_gpu_exits_2_up_front(tmp_path, monkeypatch, cpu_kernel):
    """A gpubench-gpu kernel running a CPU-only TensorFlow is never timed on the CPU: its own
    Python's diagnosis (`gpubench doctor --json` there), exit 2, no run directory."""
    kernel_like(cpu_kernel, "gpubench-gpu", tmp_path, monkeypatch,
                display_name="gpubench-gpu (CPU-only TF)", env={"PYTHONPATH": str(REPO)})
    out = tmp_path / "r"
    proc = run_gpubench(["--profile", "quick", "--envs", "gpu", "--out", str(out)], timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--envs gpu: tensorflow in this env sees no GPU" in proc.stderr
    assert "Diagnosis:" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_report_merges_two_machines(tmp_path, quick_run):
    other = tmp_path / "other-machine"
    other.mkdir()
    lines = []
    for record in rundir.read_records(quick_run):
        record["environment"]["hostname"] = "lab-gpu-box"
        lines.append(json.dumps(record))
    (other / "results.jsonl").write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-m", "gpubench", "report", str(quick_run), str(other),
                           "--out", str(tmp_path / "merged")], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = (tmp_path / "merged" / "report.md").read_text()
    host = rundir.read_records(quick_run)[0]["environment"]["hostname"]
    assert f"{host} · cpu" in report and "lab-gpu-box · cpu" in report
    assert "### lab-gpu-box · cpu" in report


def test_report_of_a_missing_run_is_bad_input(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "gpubench", "report", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not a run directory" in proc.stderr


# ---------------------------------------------------------------- quiet kernels

def test_forward_stderr_drops_only_the_plain_tcp_notice():
    import os

    from gpubench import runner

    notice = (b"[IPKernelApp] WARNING | Kernel is running over TCP without encryption. All "
              b"communication (including code and outputs) is sent in plain text.\n")
    given = [b"[IPKernelApp] ERROR | a real error\n", notice, b"partial ", b"line\n", b"last"]
    kernel_read, kernel_write = os.pipe()
    ours_read, ours_write = os.pipe()
    for chunk in given:
        os.write(kernel_write, chunk)
    os.close(kernel_write)
    runner.kernels.forward_stderr(kernel_read, ours_write)
    os.close(ours_write)
    with open(ours_read, "rb") as stream:
        assert stream.read() == b"[IPKernelApp] ERROR | a real error\npartial line\nlast"


QUIET_SCRIPT = """
import sys, tempfile
from pathlib import Path
import nbformat, papermill
from traitlets.config import Config
from gpubench import runner

nb = nbformat.v4.new_notebook()
nb.cells = [nbformat.v4.new_code_cell(
    "import os\\nos.write(2, b'kernel stderr still shown\\\\n')\\n"
    "import keras\\nmodel = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])\\n"
    "model.summary()")]
folder = Path(sys.argv[1])
nbformat.write(nb, folder / "in.ipynb")
plain = Config({"KernelManager": {"transport_encryption": "disabled"}})  # ipykernel's notice
papermill.execute_notebook(
    str(folder / "in.ipynb"), str(folder / "out.ipynb"), kernel_name=runner.kernels.HERE_KERNEL,
    kernel_manager_class=runner.kernels.kernel_manager_class({"KERAS_BACKEND": "tensorflow"},
                                                     sys.executable),  # as --here makes it
    progress_bar=False, config=plain)
"""


def test_a_kernel_the_runner_starts_logs_no_tcp_notice_and_stores_no_colour_codes(tmp_path):
    """A real kernel of the runner's (unencrypted on purpose, so ipykernel logs its notice): the
    notice is not in the run's output while the kernel's own stderr is; Keras's rich model
    summary is stored without ANSI codes; the set-up line costs no execution count."""
    import inspect

    import ipykernel.kernelapp

    from gpubench import runner

    assert all(noise.decode() in inspect.getsource(ipykernel.kernelapp)
               for noise in runner.kernels.KERNEL_NOISE)  # the notice this ipykernel logs
    proc = subprocess.run([sys.executable, "-c", QUIET_SCRIPT, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env=python_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert "kernel stderr still shown" in output
    assert "without encryption" not in output
    [cell] = nbformat.read(tmp_path / "out.ipynb", 4).cells
    stored = json.dumps(cell.outputs, ensure_ascii=False)
    assert "Total params" in stored and "Model: \\\"sequential\\\"" in stored
    assert "\x1b[" not in stored
    assert cell.execution_count == 1


# ---------------------------------------------------------------- the kernel provisioner

def test_the_runners_kernel_specs_name_its_registered_provisioner(tmp_path):
    """Every kernel spec the runner's manager reads names gpubench's provisioner, registered as
    an entry point (pyproject.toml), which jupyter_client builds with the job's environment."""
    from jupyter_client.provisioning import KernelProvisionerFactory

    from gpubench import runner
    from gpubench.runner.kernels import RunnerProvisioner

    manager = runner.kernels.kernel_manager_class({"GPUBENCH_ATTEMPT": "3"}, sys.executable)(
        kernel_name=runner.kernels.HERE_KERNEL)
    assert manager.kernel_spec.metadata["kernel_provisioner"] == {
        "provisioner_name": runner.kernels.PROVISIONER, "config": {"extra_env": {"GPUBENCH_ATTEMPT": "3"}}}
    made = KernelProvisionerFactory.instance().create_provisioner_instance(
        "k", manager.kernel_spec, parent=manager)
    assert type(made) is RunnerProvisioner and made.extra_env == {"GPUBENCH_ATTEMPT": "3"}


def test_pre_launch_adds_the_env_the_parent_tie_and_plain_rich_text(tmp_path):
    import asyncio

    from gpubench import runner

    manager = runner.kernels.kernel_manager_class({"NO_COLOR": "1"}, sys.executable)(
        kernel_name=runner.kernels.HERE_KERNEL)

    async def prepare():
        try:
            return await manager.pre_start_kernel(env={"FROM_SPEC": "1", "NO_COLOR": "0"})
        finally:
            await manager.cleanup_resources()

    cmd, kw = asyncio.run(prepare())
    assert kw["env"]["FROM_SPEC"] == "1" and kw["env"]["NO_COLOR"] == "1"  # ours on top
    assert cmd[0] == sys.executable and cmd[-2:] == [
        f"--IPKernelApp.exec_lines={runner.kernels.PLAIN_RICH_TEXT}", "--IPKernelApp.capture_fd_output=False"]
    if sys.platform.startswith("linux"):
        assert callable(kw["preexec_fn"])  # rundir.die_with_parent, run between fork and exec


def test_a_checkout_on_sys_path_without_the_entry_point_still_gets_the_provisioner(
        monkeypatch):
    """gpubench on PYTHONPATH only (no install, no entry point): `run` registers the same
    provisioner in jupyter_client's registry, so its kernels start the same way."""
    import importlib.metadata

    from jupyter_client.provisioning import KernelProvisionerFactory

    from gpubench import runner
    from gpubench.runner.kernels import RunnerProvisioner

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])
    monkeypatch.setattr(KernelProvisionerFactory, "provisioners", {})
    runner.kernels.kernel_manager_class()  # registers it
    entry = KernelProvisionerFactory.provisioners[runner.kernels.PROVISIONER]
    assert entry.load() is RunnerProvisioner


def test_eta_is_tqdm_s_clock_scaled_by_the_work_done():
    from gpubench.runner import loop

    assert loop.eta(65, 0, 200) == "(elapsed 01:05, about 03:20 left)"  # nothing done: estimate
    assert loop.eta(60, 30, 90) == "(elapsed 01:00, about 02:00 left)"
