"""Packaging: one source of truth for versions, the two commands, CI, and the CLI contract."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from conftest import PYTHON, READING_ORDER, REPO

ENV_EXTRAS = {"cpu": "cpu", "gpu": "gpu", "jax-cpu": "jax", "jax-gpu": "jax-gpu",  # env -> extra
              "torch-cpu": "torch", "torch-gpu": "torch-gpu"}
# The one pip option an env file may carry: PyTorch's CPU index, so that the torch-cpu env gets
# the CPU build of torch and not PyPI's CUDA build.
TORCH_CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"
YML_FILES = [f"environment-{env}.yml" for env in ENV_EXTRAS]
REQUIRED_CONDA = {"python", "numpy", "matplotlib", "jupyterlab", "papermill", "nbval",
                  "ipykernel", "pytest"}


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _pip_pins() -> dict[str, str]:
    """name -> "X.Y" (or "X") for every `name==X.Y.*` requirement in pyproject.toml."""
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    pins = {}
    for req in reqs:
        match = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\d+(?:\.\d+)?)\.\*", req)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _conda_deps(name: str) -> tuple[dict[str, str], list[str], list[str]]:
    """(conda pins, pip lines, dependency lines without a comment) of an environment file."""
    pins, pip_lines, uncommented, in_pip, in_deps = {}, [], [], False, False
    for line in (REPO / name).read_text().splitlines():
        stripped = line.strip()
        if not line.startswith((" ", "#")):
            in_deps = line.startswith("dependencies:")
        if not in_deps or not stripped.startswith("- "):
            continue
        body = stripped[2:].split("#")[0].strip()
        if body == "pip:":
            in_pip = True
            continue
        if "#" not in stripped:
            uncommented.append(stripped)
        if in_pip and line.startswith("      "):
            pip_lines.append(body)
            continue
        match = re.match(r"^([A-Za-z0-9_.-]+)=(\d+(?:\.\d+)?)$", body)
        if match:
            pins[match.group(1).lower()] = match.group(2)
        elif body != "pip":
            pins[body] = ""
    return pins, pip_lines, uncommented


@pytest.mark.parametrize("name", YML_FILES)
def test_env_files_agree_with_pyproject(name):
    pins, _, _ = _conda_deps(name)
    pip = _pip_pins()
    assert REQUIRED_CONDA <= set(pins), f"{name} lacks {REQUIRED_CONDA - set(pins)}"
    shared = (set(pins) & set(pip)) - {"python"}
    assert {"numpy", "matplotlib", "jupyterlab", "papermill", "nbval", "ipykernel",
            "pytest"} <= shared
    mismatched = {k: (pins[k], pip[k]) for k in shared if pins[k] != pip[k]}
    assert not mismatched, f"{name} and pyproject.toml disagree (yml, pyproject): {mismatched}"


def test_python_version_agrees():
    assert {_conda_deps(name)[0]["python"] for name in YML_FILES} == {"3.11"}


@pytest.mark.parametrize(("env", "extra"), ENV_EXTRAS.items())
def test_env_file_installs_the_project_with_its_extra(env, extra):
    name = f"environment-{env}.yml"
    _, pip_lines, uncommented = _conda_deps(name)
    index = [TORCH_CPU_INDEX] if env == "torch-cpu" else []
    assert pip_lines == [*index, f"-e .[{extra},test]"]
    assert not uncommented, f"dependencies without a comment saying why: {uncommented}"
    text = (REPO / name).read_text()
    assert f"name: gpubench-{env}" in text and "- conda-forge" in text


def test_envs_module_and_env_files_agree():
    """setup installs each env with the extra its yml file names, and every env has a yml."""
    from gpubench import backends, envs

    assert envs.EXTRAS == ENV_EXTRAS and set(backends.ENVS) == set(ENV_EXTRAS)
    assert sorted(p.name for p in REPO.glob("environment-*.yml")) == sorted(YML_FILES)


def _extra(name: str) -> list:
    from packaging.requirements import Requirement

    return [Requirement(r) for r in _pyproject()["project"]["optional-dependencies"][name]]


def test_base_and_jax_extras_pull_no_tensorflow_and_the_gpu_envs_stay_apart():
    """`pip install '.[jax]'` is TensorFlow-free; jax[cuda12] never shares an extra (an env)
    with tensorflow[and-cuda], whose CUDA wheel pins conflict with it."""
    from packaging.requirements import Requirement

    base = [Requirement(r) for r in _pyproject()["project"]["dependencies"]]
    names = {r.name for r in base}
    assert {"keras", "nvidia-ml-py", "ipykernel", "papermill"} <= names
    assert not names & {"tensorflow", "tensorflow-cpu", "jax", "jaxlib"}
    (jax,) = _extra("jax")
    assert jax.name == "jax" and not jax.extras
    (jax_gpu,) = _extra("jax-gpu")
    assert jax_gpu.name == "jax" and jax_gpu.extras == {"cuda12"}
    assert jax.specifier == jax_gpu.specifier, "the JAX CPU and GPU envs must run the same JAX"
    for extra in ("jax", "jax-gpu"):
        assert not {r.name for r in _extra(extra)} & {"tensorflow", "tensorflow-cpu"}
    assert not {r.name for r in _extra("gpu")} & {"jax", "jaxlib"}


def test_the_torch_extras_pull_no_tensorflow_and_the_cpu_one_is_pinned_exactly():
    """`pip install '.[torch]'` is TensorFlow-free, pinned to the one release whose CPU build is
    taken (a range would admit a newer CUDA build of several GB); the GPU extra runs the same
    minor version; torch shares no extra (an env) with another backend's CUDA wheels."""
    (torch,) = _extra("torch")
    (torch_gpu,) = _extra("torch-gpu")
    assert torch.name == torch_gpu.name == "torch" and not torch.extras
    assert str(torch.specifier) == "==2.13.0" and str(torch_gpu.specifier) == "==2.13.*"
    for extra in ("torch", "torch-gpu"):
        assert not {r.name for r in _extra(extra)} & {"tensorflow", "tensorflow-cpu", "jax"}
    for extra in ("cpu", "gpu", "jax", "jax-gpu"):
        assert "torch" not in {r.name for r in _extra(extra)}


def test_test_extra_has_the_linter_and_hypothesis():
    assert {r.name for r in _extra("test")} >= {"pytest", "nbval", "hypothesis", "ruff"}
    ruff = _pyproject()["tool"]["ruff"]
    assert ruff["line-length"] == 100
    assert {"E", "F", "W", "I", "PLC0415"} <= set(ruff["lint"]["select"])


def test_wheel_ships_the_notebooks_where_envs_finds_them():
    """A wheel installs the notebooks into <prefix>/share/gpubench/notebooks, the folder
    params.notebooks_dir() uses outside a checkout."""
    data = _pyproject()["tool"]["setuptools"]["data-files"]
    assert "notebooks/*.ipynb" in data["share/gpubench/notebooks"]


def _applies(requirement: str, machine: str) -> bool:
    from packaging.requirements import Requirement

    marker = Requirement(requirement).marker
    return marker is None or marker.evaluate({"platform_machine": machine, "sys_platform": "linux"})


@pytest.mark.parametrize("machine,wheel", [
    ("x86_64", "tensorflow-cpu"), ("AMD64", "tensorflow-cpu"), ("aarch64", "tensorflow"),
    ("arm64", "tensorflow"),
])
def test_cpu_extra_picks_one_cpu_only_tensorflow_per_platform(machine, wheel):
    from packaging.requirements import Requirement

    chosen = [Requirement(r) for r in _pyproject()["project"]["optional-dependencies"]["cpu"]
              if _applies(r, machine)]
    assert [r.name for r in chosen] == [wheel]
    (gpu,) = (Requirement(r) for r in _pyproject()["project"]["optional-dependencies"]["gpu"])
    assert gpu.name == "tensorflow" and "and-cuda" in gpu.extras
    assert chosen[0].specifier == gpu.specifier, "the CPU and GPU envs must run the same TensorFlow"


def test_installed_versions_satisfy_the_pins():
    """The environment the tests run in is the one pyproject.toml describes."""
    from importlib.metadata import version

    from packaging.requirements import Requirement

    project = _pyproject()["project"]
    for req in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        requirement = Requirement(req.split("#")[0])
        assert requirement.specifier.contains(version(requirement.name)), req


def test_console_script_is_the_cli():
    import importlib

    module, _, func = _pyproject()["project"]["scripts"]["gpubench"].partition(":")
    cli = importlib.import_module("gpubench.cli")
    assert getattr(importlib.import_module(module), func) is cli.main


def test_ci_runs_make_test(fake_command, tmp_path):
    """.ci/run ends in `make test` (a fake make records what it was asked)."""
    log = tmp_path / "make.log"
    fake_command("make", f'echo "$@" >> {log}')
    fake_command("apt-get", "exit 0")
    fake_command("sudo", '"$@"')
    proc = subprocess.run(["bash", str(REPO / ".ci" / "run")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().split("\n")[-2] == "test"


def test_cli_help_and_bad_usage():
    ok = subprocess.run([PYTHON, "-m", "gpubench", "--help"], capture_output=True, text=True,
                        cwd=REPO)
    assert ok.returncode == 0 and "doctor" in ok.stdout
    bad = subprocess.run([PYTHON, "-m", "gpubench", "frobnicate"], capture_output=True,
                         text=True, cwd=REPO)
    assert bad.returncode == 2 and "frobnicate" in bad.stderr


def test_setup_needs_only_the_standard_library():
    """`python3 -m gpubench setup` bootstraps a bare machine: no third-party import at start."""
    script = ("import sys, gpubench.cli, gpubench.envs, gpubench.runner\n"
              "bad = [m for m in ('numpy', 'tensorflow', 'papermill', 'jupyter_client', 'tqdm')"
              " if m in sys.modules]\n"
              "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


_MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTEST_ARGS", "PROFILE", "ENVS", "GPU",
                   "BACKENDS", "ARGS", "PYTHON", "JOBS")


def _make_n(*args: str) -> list[str]:
    """The commands `make -n ARGS` would run, as from a plain shell: without the variables of a
    `make test PYTEST_ARGS=...` that runs this test (make passes them down in MAKEFLAGS)."""
    env = {k: v for k, v in os.environ.items() if k not in _MAKE_VARIABLES}
    proc = subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.replace("\\\n", " ").splitlines()


@pytest.mark.parametrize(("args", "backends", "envs"), [
    ((), "tensorflow", None),
    (("BACKENDS=tensorflow,jax",), "tensorflow,jax", None),
    (("ENVS=cpu,jax-cpu",), "tensorflow,jax", "cpu,jax-cpu"),
    (("ENVS=jax-cpu", "BACKENDS=jax"), "jax", "jax-cpu"),
    (("ENVS=cpu,torch-cpu",), "tensorflow,torch", "cpu,torch-cpu"),
    (("ENVS=cpu,jax-cpu,torch-cpu",), "tensorflow,jax,torch", "cpu,jax-cpu,torch-cpu"),
])
def test_make_run_sets_up_the_backends_its_envs_need(args, backends, envs):
    setup, run = _make_n("run", *args)
    assert setup.endswith(f"-m gpubench setup --backends {backends}")
    assert " -m gpubench run --profile full" in run
    assert (f"--envs {envs}" in run) if envs else ("--envs" not in run)


def test_make_test_sets_up_the_three_cpu_envs_then_lints_and_tests():
    setup, lint, tf_line, jax_line, torch_line = _make_n("test")
    assert setup.endswith("-m gpubench setup --backends tensorflow,jax,torch")
    assert lint.endswith("-m ruff check .")
    # all but the JAX and the torch ones
    assert '-m pytest -m "not jax and not torch"' in tf_line and "slow" not in tf_line
    assert "-n 2 --dist loadfile" in tf_line  # two workers, a test file each at a time
    assert jax_line.startswith("KERAS_BACKEND=jax ") and "-m pytest -m jax" in jax_line
    assert ".venv-jax" in jax_line or "gpubench-jax-cpu" in jax_line  # in the JAX env
    assert torch_line.startswith("KERAS_BACKEND=torch ") and "-m pytest -m torch" in torch_line
    assert ".venv-torch" in torch_line or "gpubench-torch-cpu" in torch_line  # in the torch env


def test_make_check_lint_and_nbval():
    check = _make_n("check")[-1]
    assert '-m pytest -m "not slow and not jax and not torch" -n 2' in check
    assert _make_n("lint")[-1].endswith("-m ruff check .")
    nbval = _make_n("nbval")[-1]
    assert nbval.startswith("GPUBENCH_PROFILE=quick ") and "--nbval-lax" in nbval
    sanitize = re.search(r"--nbval-sanitize-with (\S+)", nbval).group(1)
    assert (REPO / sanitize).is_file()
    # the reading order, the report last and on this pass's records (a fresh clone has no run)
    assert tuple(re.findall(r"notebooks/(\w+)\.ipynb", nbval)) == READING_ORDER
    out = re.search(r'GPUBENCH_RUN_DIRS="([^"]+)"', nbval).group(1)
    assert f'GPUBENCH_RESULTS_PATH="{out}/results.jsonl"' in nbval and out == f"{REPO}/.nbval"


def test_setup_cli_takes_the_makefiles_backends():
    """The Makefile passes --backends to `gpubench setup`; the CLI must accept it."""
    out = subprocess.run([PYTHON, "-m", "gpubench", "setup", "--help"], capture_output=True,
                         text=True, cwd=REPO)
    assert out.returncode == 0 and "--backends" in out.stdout


def test_each_shared_run_is_read_from_one_test_file():
    """make test's workers take a test file at a time (--dist loadfile): a session run that
    tests of two files read would be made in both workers."""
    import ast

    shared = {"nbval_run": "nbval", "quick_run": "quick", "quick_run_output": "quick",
              "jax_env": "jax", "jax_run": "jax", "torch_env": "torch", "torch_run": "torch"}
    files: dict[str, set[str]] = {}
    for path in sorted((REPO / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                for arg in node.args.args:
                    if arg.arg in shared:
                        files.setdefault(shared[arg.arg], set()).add(path.name)
    assert files == {"nbval": {"test_notebooks.py"}, "quick": {"test_runner.py"},
                     "jax": {"test_jax_env.py"}, "torch": {"test_torch_env.py"}}


def _wheel_venv(base: Path) -> Path:
    """A fresh venv with gpubench's wheel (built from a copy of this tree, so a concurrent build
    here cannot collide) installed with --no-deps; a .pth file lends it the test env's
    packages, so nothing is downloaded. Returns its bin folder."""
    src = base / "src"
    for name in ("pyproject.toml", "README.md"):
        src.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, src / name)
    for folder in ("gpubench", "notebooks"):
        shutil.copytree(REPO / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    subprocess.run([PYTHON, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(base / "dist"), str(src)], check=True, timeout=300)
    (wheel,) = (base / "dist").glob("gpubench-*.whl")
    venv = base / "venv"
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    paths = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    ours, lent = (subprocess.run([p, "-c", paths], capture_output=True, text=True,
                                 check=True).stdout.strip() for p in (str(python), PYTHON))
    (Path(ours) / "zz_test_env.pth").write_text(lent + "\n")  # after the venv's own packages
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    str(wheel)], check=True, timeout=300)
    return venv / "bin"


@pytest.mark.slow
def test_a_wheel_outside_the_checkout_runs_here_into_the_users_folder(tmp_path):
    """`gpubench run --here` of an installed wheel, from a folder of the user's: the run dir is
    ./runs/<id> there (not site-packages), and every path it prints opens from there."""
    bin_dir = _wheel_venv(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUBENCH_") and k not in (
               "PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_PATH", "KERAS_BACKEND", "MPLBACKEND")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    where = subprocess.run(["python", "-c", "import gpubench; print(gpubench.__file__)"],
                           cwd=user, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout  # the wheel's, not ours
    done = subprocess.run(
        ["gpubench", "run", "--here", "--notebooks", "performanceTest", "-p", "sizes=[64]",
         "-p", "repeats=1", "-p", "dtype=float32", "-p", "devices=cpu"],
        cwd=user, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    (run_dir,) = (user / "runs").iterdir()
    assert (run_dir / "results.jsonl").is_file() and (run_dir / "report.md").is_file()
    assert not list((tmp_path / "venv").rglob("results.jsonl"))
    printed = re.findall(r"(?:^gpubench run |\| Results: +|^Report: )(\S+)", output, re.M)
    assert len(printed) == 3, output[-3000:]
    for path in printed:
        assert (user / path).exists(), f"{path} does not open from {user}"
    assert "make " not in output
    # The hint to make an env installs the wheel gpubench came from (a bare
    # `pip install 'gpubench[cpu]'` cannot resolve for a package installed from a wheel file)
    listed = subprocess.run(["gpubench", "envs"], cwd=user, capture_output=True, text=True,
                            env={**env, "JUPYTER_DATA_DIR": str(tmp_path / "no-kernels")},
                            timeout=300, stdin=subprocess.DEVNULL)
    (wheel,) = (tmp_path / "dist").glob("gpubench-*.whl")
    assert f"pip install '{wheel}[cpu]'" in listed.stdout, listed.stdout + listed.stderr
