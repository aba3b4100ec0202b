"""The PyTorch env for real: gpubench[torch] in the torch-cpu env `make setup` builds, with torch
and no TensorFlow, then every notebook once through `gpubench run --here`."""

from __future__ import annotations

import json

import pytest

from gpubench import envs
from jax_env import report_in
from torch_env import torch_env, torch_run  # noqa: F401 - session fixtures used by name

pytestmark = pytest.mark.slow

# The chapters that write records on torch (Multi_GPU_Scaling through torch.distributed;
# Compare_CPU_GPU only reads them).
RECORDING = {"performanceTest", "Mnist_MLP_h1000", "Mnist_CNN", "Keras_Cifar_CNN",
             "Speed_Factors", "Multi_GPU_Scaling"}


def test_the_torch_env_has_the_cpu_build_of_torch_and_no_tensorflow(torch_env):  # noqa: F811
    no_tf = torch_env.run("-c", "import tensorflow")
    assert no_tf.returncode != 0 and "No module named 'tensorflow'" in no_tf.stderr
    found = torch_env.run("-c", "import json, torch, keras; print(json.dumps("
                                "[torch.__version__, torch.version.cuda, keras.__version__]))")
    assert found.returncode == 0, found.stderr
    torch_version, cuda, keras_version = json.loads(found.stdout)
    assert torch_version.startswith("2.13.0") and cuda is None  # the CPU build: no CUDA libraries
    assert keras_version.startswith("3.15.")
    check = torch_env.run("-m", "pip", "check")
    assert check.returncode == 0, check.stdout + check.stderr


def test_doctor_in_the_torch_env_names_torch_and_no_tensorflow(torch_env):  # noqa: F811
    info = envs.probe_python([str(torch_env.python)], env=torch_env.env)
    assert info["error"] is None, info["error"]
    assert (info["backend"], info["env"], info["tensorflow"]) == ("torch", "torch-cpu", None)
    assert info["backend_version"] == "2.13.0" and info["jax"] is None
    assert info["tensorflow_importable"] is False
    assert info["devices"] == ["cpu"]
    assert info["diagnosis"]  # no GPU seen: it says why


def test_every_notebook_runs_here_on_torch(torch_run):  # noqa: F811
    assert torch_run.returncode == 0, torch_run.output[-6000:]
    assert torch_run.records, "the run wrote no records"
    assert {r.get("backend") for r in torch_run.records} == {"torch"}
    assert {r.get("env") for r in torch_run.records} == {"torch-cpu"}
    environments = [r.get("environment") or {} for r in torch_run.records]
    assert {(e.get("tensorflow"), e.get("jax"), e.get("backend_version")) for e in
            environments} == {(None, None, "2.13.0")}
    assert all(e["backend_settings"]["tf32"] is False for e in environments)
    assert RECORDING == {r.get("notebook") for r in torch_run.records}
    jobs = {job["notebook"]: job for job in torch_run.manifest().get("jobs", [])}
    assert {job["status"] for job in jobs.values()} == {"ok"}, jobs


def test_speed_factors_on_torch_vary_what_torch_has(torch_run):  # noqa: F811
    """XLA on is torch.compile (recorded as jit_compile), the on-device feed runs, and steps per
    execution (one step per call in Keras's torch trainer) is no factor."""
    factors = [r for r in torch_run.records if r.get("notebook") == "Speed_Factors"
               and r.get("benchmark") == "train" and r.get("status") == "ok"]
    by_factor = {r["factor"]: r for r in factors}
    assert by_factor["xla"]["jit_compile"] is True and by_factor["baseline"]["jit_compile"] is False
    assert by_factor["input_pipeline"]["input_pipeline"] == "on_device"
    assert "steps_per_execution" not in by_factor
    assert {r["steps_per_execution"] for r in factors} == {1}
    assert "steps per execution: Keras's PyTorch trainer runs one step per call" in (
        torch_run.output)


@pytest.mark.parametrize("args, words", [
    (["--notebooks", "Speed_Factors", "-p", "steps_per_execution=[1,10]"],
     "steps_per_execution=[1, 10]: Keras's PyTorch trainer runs one step per call")])
def test_what_torch_cannot_run_exits_2_before_any_kernel(torch_env, tmp_path, args,  # noqa: F811
                                                         words):
    done = torch_env.run("-m", "gpubench", "run", "--here", "--out", str(tmp_path / "r"), *args)
    assert done.returncode == 2 and words in done.stderr, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_compare_cpu_gpu_reports_that_run_on_torch(torch_env, torch_run, tmp_path):  # noqa: F811
    """The report chapter, in the same TensorFlow-free env, over the run's records."""
    text = report_in(torch_env, torch_run.run_dir, tmp_path)  # exit 0, no error output
    assert "torch-cpu" in text and "PyTorch 2.13" in text  # the env table names the backend
