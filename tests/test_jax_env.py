"""The JAX env for real: gpubench installed from a wheel folder with --no-index into a fresh
venv that has JAX and no TensorFlow, then every notebook once through `gpubench run --here`."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpubench import envs
from jax_env import jax_env, jax_run, report_in  # noqa: F401 - session fixtures used by name

pytestmark = pytest.mark.slow

# The chapters that write records (Compare_CPU_GPU only reads them).
RECORDING = {"performanceTest", "Mnist_MLP_h1000", "Mnist_CNN", "Keras_Cifar_CNN",
             "Speed_Factors", "Multi_GPU_Scaling"}


def test_the_jax_env_has_jax_and_no_tensorflow(jax_env):  # noqa: F811
    no_tf = jax_env.run("-c", "import tensorflow")
    assert no_tf.returncode != 0 and "No module named 'tensorflow'" in no_tf.stderr
    found = jax_env.run("-c", "import json, gpubench, jax, keras; print(json.dumps("
                              "[gpubench.__file__, jax.__version__, keras.__version__]))")
    assert found.returncode == 0, found.stderr
    where, jax_version, keras_version = json.loads(found.stdout)
    assert where.startswith(str(jax_env.venv)), "gpubench must come from the wheel, not the repo"
    assert jax_version.startswith("0.10.") and keras_version.startswith("3.15.")
    check = jax_env.run("-m", "pip", "check")
    assert check.returncode == 0, check.stdout + check.stderr


def test_doctor_in_the_jax_env_names_jax_and_no_tensorflow(jax_env):  # noqa: F811
    info = envs.probe_python([str(jax_env.python)], env=jax_env.env)
    assert info["error"] is None, info["error"]
    assert (info["backend"], info["env"], info["tensorflow"]) == ("jax", "jax-cpu", None)
    assert info["backend_version"].startswith("0.10.") and info["jax"] == info["backend_version"]
    assert info["tensorflow_importable"] is False
    assert info["devices"] and all(not d.startswith("gpu") for d in info["devices"])
    assert info["diagnosis"]  # no GPU seen: it says why


def test_doctor_json_is_one_document_when_jax_cannot_start_its_platform(jax_env):  # noqa: F811
    """JAX_PLATFORMS=cuda on a machine without CUDA: doctor --json still prints one JSON
    document, whose error names the platform (the runner and `gpubench envs` read it)."""
    done = subprocess.run([str(jax_env.python), "-m", "gpubench", "doctor", "--json"],
                          env={**jax_env.env, "JAX_PLATFORMS": "cuda"}, cwd=jax_env.venv,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    found = json.loads(done.stdout)  # nothing before or after it
    assert done.returncode == 1 and "cuda" in found["error"].lower(), found


def test_every_notebook_runs_here_on_jax(jax_run):  # noqa: F811
    assert jax_run.returncode == 0, jax_run.output[-6000:]
    assert jax_run.records, "the run wrote no records"
    assert {r.get("backend") for r in jax_run.records} == {"jax"}
    assert {r.get("env") for r in jax_run.records} == {"jax-cpu"}
    assert all((r.get("environment") or {}).get("tensorflow") is None for r in jax_run.records)
    assert RECORDING <= {r.get("notebook") for r in jax_run.records}
    jobs = jax_run.manifest().get("jobs", [])
    assert jobs and {job["status"] for job in jobs} == {"ok"}, jobs


def test_compare_cpu_gpu_reports_that_run_on_jax(jax_env, jax_run, tmp_path):  # noqa: F811
    """The report chapter, in the same TensorFlow-free env, over the run's records."""
    text = report_in(jax_env, jax_run.run_dir, tmp_path)  # exit 0, no error output
    assert "jax-cpu" in text and "JAX 0.10" in text  # the env table names the backend
