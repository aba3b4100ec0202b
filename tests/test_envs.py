"""Tests for gpubench.envs: setup's commands (fake conda, micromamba, venv python), the kernels it
registers, the probe (`gpubench doctor --json` of a kernel's Python) and the envs report."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from gpubench import backends, envs, machine
from gpubench.envs import create

ROOT = Path(__file__).resolve().parent.parent

ENVS_ABSENT = {"envs": ["/opt/conda"]}
ENVS_PRESENT = {"envs": ["/opt/conda", "/opt/conda/envs/gpubench-cpu"]}


JDD = "${JUPYTER_DATA_DIR:+ @$JUPYTER_DATA_DIR}"  # fakes log where --user installs go


def write_script(path: Path, body: str) -> Path:
    """Write an executable bash script."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return path


def fake_conda(bin_dir: Path, name: str, log: Path, envs_json: dict,
               fail_on: str | None = None) -> Path:
    """A conda/mamba/micromamba stand-in: logs "cwd<TAB>argv", answers `env list --json`, can
    fail one step."""
    body = f'printf "%s\\t%s%s\\n" "$PWD" "$*" "{JDD}" >> {shlex.quote(str(log))}\n'
    answer = shlex.quote(json.dumps(envs_json))
    body += f'if [ "$1 $2 $3" = "env list --json" ]; then printf "%s\\n" {answer}; exit 0; fi\n'
    if fail_on:
        body += (f'if [[ "$*" == *{shlex.quote(fail_on)}* ]]; then echo "fake failure" >&2; '
                 'exit 1; fi\n')
    return write_script(bin_dir / name, body + "exit 0\n")


def fake_nvidia_smi(bin_dir: Path, kind: str) -> None:
    """nvidia-smi that lists a GPU ("gpu"), fails ("fail"), or is absent ("missing")."""
    if kind == "gpu":
        write_script(bin_dir / "nvidia-smi",
                     'echo "GPU 0: NVIDIA H200 (UUID: GPU-0f3c9a7e-1234)"\n')
    elif kind == "fail":
        write_script(bin_dir / "nvidia-smi", 'echo "NVIDIA-SMI has failed" >&2\nexit 1\n')


def calls(log: Path) -> list[tuple[str, str]]:
    """The logged (cwd, argv) of every call of a fake tool."""
    if not log.exists():
        return []
    return [tuple(line.split("\t", 1)) for line in log.read_text().splitlines()]


def argvs(log: Path) -> list[str]:
    """The logged argv lines only."""
    return [args for _, args in calls(log)]


@pytest.fixture
def bin_dir(tmp_path, monkeypatch) -> Path:
    """An empty PATH of fake tools: no real conda or nvidia-smi can be found."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.delenv("GPUBENCH_CONDA", raising=False)
    return path


@pytest.fixture
def root(tmp_path) -> Path:
    """A project root with copies of pyproject.toml and the environment yml files."""
    path = tmp_path / "project"
    path.mkdir()
    for name in ("pyproject.toml", *(f"environment-{env}.yml" for env in backends.ENVS)):
        shutil.copy(ROOT / name, path / name)
    return path


def registered(kernel: str, root: Path, python: str = "python",
               backend: str = "tensorflow") -> list[str]:
    """What setup runs in an env's Python once it is installed: the check that its backend and
    Keras import, then the two registrations: this checkout's (PYTHONPATH, its .jupyter), then
    --user; both with the same display name everywhere and the env's KERAS_BACKEND."""
    python = f"{python} " if python else ""
    install = python + (
        f"-m ipykernel install --user --name {kernel} --display-name Python 3 ({kernel}) "
        f"--env KERAS_BACKEND {backend}")
    return [f"{python}-c import {backend}, keras",
            f"{install} --env PYTHONPATH {root} @{root / '.jupyter'}", install]


def conda_registered(kernel: str, root: Path, backend: str = "tensorflow") -> list[str]:
    return [f"run -n {kernel} {line}" for line in registered(kernel, root, backend=backend)]


# ---- conda / mamba / micromamba ------------------------------------------------------------

@pytest.mark.parametrize(
    ("tool", "envs_json", "expected"),
    [
        ("conda", ENVS_ABSENT, "env create -f environment-cpu.yml"),
        ("conda", ENVS_PRESENT, "env update -n gpubench-cpu -f environment-cpu.yml --prune"),
        ("micromamba", ENVS_ABSENT, "create -y -f environment-cpu.yml"),
        ("micromamba", ENVS_PRESENT, "update -y -n gpubench-cpu -f environment-cpu.yml"),
    ],
    ids=["conda-create", "conda-update", "micromamba-create", "micromamba-update"],
)
def test_conda_creates_or_updates_cpu_env_and_registers_kernel(bin_dir, root, tmp_path, tool,
                                                               envs_json, expected):
    log = tmp_path / "conda.log"
    fake_conda(bin_dir, tool, log, envs_json)
    fake_nvidia_smi(bin_dir, "fail")
    assert create.find_conda() == str(bin_dir / tool)
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 0
    assert argvs(log) == ["env list --json", expected, *conda_registered("gpubench-cpu", root)]
    # the yml's `-e .[cpu,test]` is relative to root
    assert [cwd for cwd, argv in calls(log)[1:] if " -c " not in argv] == [str(root)] * 3
    printed = "\n".join(out)
    assert f"$ {bin_dir / tool} {expected}" in printed
    assert "Kernels registered: gpubench-cpu" in printed
    assert "make run" in printed


@pytest.mark.parametrize("smi", ["gpu", "fail", "missing"])
@pytest.mark.parametrize("gpu", [False, True], ids=["auto", "asked"])
def test_conda_gpu_env_only_when_gpu_found_or_asked(bin_dir, root, tmp_path, smi, gpu):
    log = tmp_path / "conda.log"
    fake_conda(bin_dir, "conda", log, ENVS_ABSENT)
    fake_nvidia_smi(bin_dir, smi)
    assert create.setup(gpu, root=root, echo=lambda line: None) == 0
    lines = argvs(log)
    assert "env create -f environment-cpu.yml" in lines
    register_cpu = conda_registered("gpubench-cpu", root)
    assert set(register_cpu) <= set(lines)
    if gpu or smi == "gpu":
        assert "env create -f environment-gpu.yml" in lines
        assert set(conda_registered("gpubench-gpu", root)) <= set(lines)
        assert lines.index(register_cpu[-1]) < lines.index("env create -f environment-gpu.yml")
    else:
        assert not any("gpu" in line.replace("gpubench-cpu", "").replace(str(root), "")
                       for line in lines), lines


def test_conda_failing_step_stops_with_message(bin_dir, root, tmp_path):
    log = tmp_path / "conda.log"
    fake_conda(bin_dir, "conda", log, ENVS_ABSENT, fail_on="env create")
    fake_nvidia_smi(bin_dir, "gpu")
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 1
    # nothing after the failure
    assert argvs(log) == ["env list --json", "env create -f environment-cpu.yml"]
    printed = "\n".join(out)
    assert ("setup failed at step: create conda env gpubench-cpu from environment-cpu.yml "
            "(exit code 1)") in printed
    assert "env remove -y -n gpubench-cpu" in printed
    assert "Kernels registered" not in printed


def test_conda_failing_kernel_registration_names_the_step(bin_dir, root, tmp_path):
    log = tmp_path / "conda.log"
    fake_conda(bin_dir, "conda", log, ENVS_PRESENT, fail_on="ipykernel install")
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 1
    assert "setup failed at step: register the Jupyter kernel gpubench-cpu" in "\n".join(out)


@pytest.mark.parametrize(("body", "why"), [
    ("echo boom >&2; exit 3", "failed with exit code 3: boom"),
    ("echo notjson", "printed no JSON with an \"envs\" list"),
])
def test_conda_env_list_failure_says_why(bin_dir, root, body, why):
    write_script(bin_dir / "conda", body + "\n")
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 1
    printed = "\n".join(out)
    assert "setup failed at step: list the conda envs" in printed and why in printed
    assert "GPUBENCH_CONDA=none" in printed


def test_conda_missing_yml_fails_clearly(bin_dir, root, tmp_path):
    fake_conda(bin_dir, "conda", tmp_path / "conda.log", ENVS_ABSENT)
    (root / "environment-cpu.yml").unlink()
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 1
    assert "environment-cpu.yml is missing" in "\n".join(out)


def test_mamba_preferred_over_conda_and_micromamba(bin_dir, root, tmp_path):
    for name in ("conda", "micromamba"):
        fake_conda(bin_dir, name, tmp_path / f"{name}.log", ENVS_ABSENT)
    fake_conda(bin_dir, "mamba", tmp_path / "mamba.log", ENVS_ABSENT)
    assert create.setup(root=root, echo=lambda line: None) == 0
    assert argvs(tmp_path / "mamba.log") == ["env list --json", "env create -f environment-cpu.yml",
                                             *conda_registered("gpubench-cpu", root)]
    assert argvs(tmp_path / "conda.log") == []
    assert argvs(tmp_path / "micromamba.log") == []


def test_gpubench_conda_env_var(bin_dir, tmp_path, monkeypatch):
    for name in ("mamba", "micromamba"):
        fake_conda(bin_dir, name, tmp_path / f"{name}.log", ENVS_ABSENT)
    assert create.find_conda() == str(bin_dir / "mamba")
    monkeypatch.setenv("GPUBENCH_CONDA", "micromamba")
    assert create.find_conda() == str(bin_dir / "micromamba")
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    assert create.find_conda() is None
    monkeypatch.setenv("GPUBENCH_CONDA", "nosuchconda")
    with pytest.raises(envs.EnvError, match="GPUBENCH_CONDA='nosuchconda'.*none"):
        create.find_conda()
    out: list[str] = []
    assert create.setup(root=tmp_path, echo=out.append) == 1
    assert "nosuchconda" in "\n".join(out)


def test_no_conda_found(bin_dir):
    assert create.find_conda() is None


@pytest.mark.parametrize(("smi", "expected"), [("gpu", True), ("fail", False), ("missing", False)])
def test_gpu_requested(bin_dir, smi, expected):
    fake_nvidia_smi(bin_dir, smi)
    assert create.gpu_requested(False) is expected
    assert create.gpu_requested(True) is True


def test_nvidia_smi_without_gpu_lines(bin_dir):
    write_script(bin_dir / "nvidia-smi", 'echo "No devices were found"\n')
    assert create.gpu_requested(False) is False


# ---- venvs -------------------------------------------------------------------------------

def fake_venv(root: Path, dirname: str, log: Path, pip_rc: int = 0) -> Path:
    """A venv whose python logs its argv (cwd<TAB>argv) and fails `-m pip` with pip_rc."""
    body = f'printf "%s\\t%s%s\\n" "$PWD" "$*" "{JDD}" >> {shlex.quote(str(log))}\n'
    body += f'if [ "$1 $2" = "-m pip" ]; then exit {pip_rc}; fi\nexit 0\n'
    return write_script(root / dirname / "bin" / "python", body)


def stamp_digest(root: Path) -> str:
    return hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()


def test_venv_with_current_stamp_only_registers_kernel(bin_dir, root, tmp_path, monkeypatch):
    fake_conda(bin_dir, "conda", tmp_path / "conda.log", ENVS_ABSENT)
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    log = tmp_path / "python.log"
    python = fake_venv(root, ".venv", log)
    (root / ".venv" / ".gpubench-installed").write_text(stamp_digest(root) + "\n")
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 0
    assert argvs(log) == registered("gpubench-cpu", root, python="")
    assert argvs(tmp_path / "conda.log") == []
    printed = "\n".join(out)
    assert "skipping pip" in printed
    assert "-m venv" not in printed
    assert f"$ {python} -m ipykernel install" in printed


@pytest.mark.parametrize("stamp", [None, "0" * 64], ids=["no-stamp", "stale-stamp"])
def test_venv_with_stale_stamp_runs_pip_and_writes_stamp(bin_dir, root, tmp_path, monkeypatch,
                                                         stamp):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    log = tmp_path / "python.log"
    python = fake_venv(root, ".venv", log)
    stamp_file = root / ".venv" / ".gpubench-installed"
    if stamp:
        stamp_file.write_text(stamp)
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 0
    assert argvs(log) == ["-m pip install -e .[cpu,test]",
                          *registered("gpubench-cpu", root, python="")]
    assert calls(log)[0][0] == str(root)
    assert f"$ {python} -m pip install -e '.[cpu,test]'" in out
    assert stamp_file.read_text().strip() == stamp_digest(root)


def _checked_python(root: Path, dirname: str, log: Path, imports: str) -> Path:
    """A venv python that logs its argv and fails the backend's import check unless `imports`
    ("always", "after pip": once `-m pip` has run, "never")."""
    done = log.with_suffix(".pip-ran")
    fails = {"never": "true", "after pip": f"[ ! -e {shlex.quote(str(done))} ]",
             "always": "false"}[imports]
    return write_script(root / dirname / "bin" / "python",
                        f'printf "%s\\t%s%s\\n" "$PWD" "$*" "{JDD}" >> {shlex.quote(str(log))}\n'
                        f'if [ "$1 $2" = "-m pip" ]; then : > {shlex.quote(str(done))}; exit 0; fi\n'
                        f'if [ "$1" = -c ] && {fails}; then\n'
                        '  echo "ModuleNotFoundError: No module named \'torch\'" >&2; exit 1\nfi\n')


def test_a_stamped_venv_whose_backend_does_not_import_is_repaired(bin_dir, root, tmp_path,
                                                                  monkeypatch):
    """Torch removed from a torch venv whose stamp is current: setup checks the import,
    says why, runs pip again, checks again, and registers the kernel."""
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    log = tmp_path / "python.log"
    _checked_python(root, ".venv-torch", log, "after pip")
    (root / ".venv-torch" / ".gpubench-installed").write_text(stamp_digest(root) + "\n")
    out: list[str] = []
    assert create.setup(backends="torch", root=root, echo=out.append) == 0, "\n".join(out)
    assert argvs(log) == ["-c import torch, keras", "-m pip install -e .[torch,test]",
                          *registered("gpubench-torch-cpu", root, python="", backend="torch")]
    assert (".venv-torch: its stamp says gpubench[torch,test] is installed, but `import torch, "
            "keras` fails there (ModuleNotFoundError: No module named 'torch'): running pip "
            "again") in "\n".join(out)
    assert (root / ".venv-torch" / ".gpubench-installed").read_text().strip() == stamp_digest(root)


def test_a_venv_whose_backend_still_does_not_import_after_pip_fails_saying_how_to_start_again(
        bin_dir, root, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    log = tmp_path / "python.log"
    _checked_python(root, ".venv-torch", log, "never")
    out: list[str] = []
    assert create.setup(backends="torch", root=root, echo=out.append) == 1
    printed = "\n".join(out)
    assert "setup failed: .venv-torch is broken after pip install: `import torch, keras` fails" \
        in printed
    assert f"rm -rf {root / '.venv-torch'} && python3 -m gpubench setup" in printed
    assert not (root / ".venv-torch" / ".gpubench-installed").exists()
    assert "ipykernel install" not in " ".join(argvs(log))


def test_a_conda_env_whose_backend_does_not_import_is_named(bin_dir, root, tmp_path):
    log = tmp_path / "conda.log"
    fake_conda(bin_dir, "conda", log, ENVS_PRESENT, fail_on="-c import tensorflow")
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 1
    printed = "\n".join(out)
    assert "setup failed: conda env gpubench-cpu is broken: `import tensorflow, keras` fails " \
           "there (fake failure)" in printed
    assert "env remove -y -n gpubench-cpu" in printed and "ipykernel" not in argvs(log)[-1]


def test_venv_pip_failure_stops_and_leaves_no_stamp(bin_dir, root, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    log = tmp_path / "python.log"
    fake_venv(root, ".venv", log, pip_rc=2)
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 1
    assert argvs(log) == ["-m pip install -e .[cpu,test]"]
    assert ("setup failed at step: pip install gpubench[cpu,test] into .venv (exit code 2)"
            in "\n".join(out))
    assert not (root / ".venv" / ".gpubench-installed").exists()


def test_venv_gpu_env_when_gpu_found(bin_dir, root, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    fake_nvidia_smi(bin_dir, "gpu")
    cpu_log, gpu_log = tmp_path / "cpu.log", tmp_path / "gpu.log"
    fake_venv(root, ".venv", cpu_log)
    fake_venv(root, ".venv-gpu", gpu_log)
    assert create.setup(root=root, echo=lambda line: None) == 0
    assert argvs(cpu_log)[0] == "-m pip install -e .[cpu,test]"
    assert argvs(gpu_log) == ["-m pip install -e .[gpu,test]",
                              *registered("gpubench-gpu", root, python="")]
    assert (root / ".venv-gpu" / ".gpubench-installed").read_text().strip() == stamp_digest(root)


def test_venv_creation_failure_explains_python3_venv(bin_dir, root, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    # A python whose `-m venv .venv` half-makes the venv and fails, as Debian's does without
    # python3-venv.
    broken = write_script(
        tmp_path / "python3",
        '/bin/mkdir -p "$3/bin"\necho "ensurepip is not available" >&2\nexit 1\n',
    )
    monkeypatch.setattr(sys, "executable", str(broken))
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 1
    printed = "\n".join(out)
    assert f"$ {broken} -m venv .venv" in printed
    assert "setup failed at step: create the venv .venv" in printed
    assert "sudo apt install python3-venv" in printed
    # a rerun must not mistake the half-made venv for a good one
    assert not (root / ".venv").exists()


def test_driver_python_venv(bin_dir, root, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    assert create.driver_python(root) == str(root / ".venv" / "bin" / "python")


def test_driver_python_conda(bin_dir, root, tmp_path):
    fake_conda(bin_dir, "conda", tmp_path / "conda.log", ENVS_PRESENT)
    assert create.driver_python(root) == "/opt/conda/envs/gpubench-cpu/bin/python"


def test_driver_python_conda_without_env(bin_dir, root, tmp_path):
    fake_conda(bin_dir, "conda", tmp_path / "conda.log", ENVS_ABSENT)
    with pytest.raises(envs.EnvError, match="gpubench-cpu.*make setup"):
        create.driver_python(root)


# ---- backends: the JAX envs ------------------------------------------------------------

def test_venv_jax_backend_makes_the_jax_envs_never_the_tensorflow_gpu_env(bin_dir, root, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    fake_nvidia_smi(bin_dir, "gpu")
    logs = {env: tmp_path / f"{env}.log" for env in backends.ENVS}
    for env, log in logs.items():
        fake_venv(root, create.VENV_DIRS[env], log)
    out: list[str] = []
    assert create.setup(backends="jax", root=root, echo=out.append) == 0
    assert argvs(logs["jax-cpu"]) == ["-m pip install -e .[jax,test]",
                                      *registered("gpubench-jax-cpu", root, "", backend="jax")]
    assert argvs(logs["jax-gpu"]) == ["-m pip install -e .[jax-gpu,test]",
                                      *registered("gpubench-jax-gpu", root, "", backend="jax")]
    assert argvs(logs["cpu"]) == [] and argvs(logs["gpu"]) == []
    assert create.VENV_DIRS["jax-gpu"] != create.VENV_DIRS["gpu"]
    assert "Kernels registered: gpubench-jax-cpu, gpubench-jax-gpu" in "\n".join(out)


def test_venv_both_backends_cpu_envs_first(bin_dir, root, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    fake_nvidia_smi(bin_dir, "missing")
    log = tmp_path / "all.log"  # one log: the order of the steps across envs
    for env in backends.ENVS:
        fake_venv(root, create.VENV_DIRS[env], log)
    out: list[str] = []
    assert create.setup(False, "tensorflow,jax", root=root, echo=out.append) == 0
    assert [line for line in argvs(log) if "pip" in line] == ["-m pip install -e .[cpu,test]",
                                                             "-m pip install -e .[jax,test]"]
    assert "Kernels registered: gpubench-cpu, gpubench-jax-cpu" in "\n".join(out)


def test_conda_jax_envs_come_from_their_yml_files(bin_dir, root, tmp_path):
    log = tmp_path / "conda.log"
    fake_conda(bin_dir, "conda", log, ENVS_ABSENT)
    assert create.setup(True, ("tensorflow", "jax"), root=root, echo=lambda line: None) == 0
    lines = argvs(log)
    creates = [line for line in lines if line.startswith("env create")]
    assert creates == [f"env create -f environment-{env}.yml"
                       for env in ("cpu", "jax-cpu", "gpu", "jax-gpu")]
    assert set(conda_registered("gpubench-jax-gpu", root, backend="jax")) <= set(lines)
    assert set(conda_registered("gpubench-gpu", root)) <= set(lines)


@pytest.mark.parametrize("value", ["numpy", "tensorflow,pytorch", "", " , "])
def test_unsupported_backend_is_refused_before_anything_runs(bin_dir, root, tmp_path, value):
    log = tmp_path / "conda.log"
    fake_conda(bin_dir, "conda", log, ENVS_ABSENT)
    with pytest.raises(ValueError, match="use some of tensorflow, jax, torch") as caught:
        create.setup(backends=value, root=root, echo=lambda line: None)
    assert "\n" not in str(caught.value)
    if value.strip(" ,"):
        assert repr(value.split(",")[-1]) in str(caught.value)
    assert argvs(log) == []


def test_env_names_backends_and_gpu_envs():
    assert [backends.env_label(b, g) for b in ("tensorflow", "jax", "torch")
            for g in (False, True)] == ["cpu", "gpu", "jax-cpu", "jax-gpu", "torch-cpu", "torch-gpu"]
    assert [backends.env_backend(e) for e in backends.ENVS] == ["tensorflow", "tensorflow", "jax", "jax",
                                                       "torch", "torch"]
    assert backends.env_backend("cpu-noonednn") == "tensorflow"
    gpu_envs = ["gpu", "gpu-2", "jax-gpu", "jax-gpu-a100", "torch-gpu"]
    assert all(backends.is_gpu_env(e) for e in gpu_envs)
    assert not any(backends.is_gpu_env(e) for e in ["cpu", "jax-cpu", "cpu-gpuless", "jax-cpugpu",
                                                "torch-cpu"])
    assert create.parse_backends(" jax , tensorflow,jax") == ("jax", "tensorflow")
    assert all(envs.setup_command(e).startswith("`make setup") for e in backends.ENVS)
    assert set(create.VENV_DIRS) == set(envs.EXTRAS) == set(backends.ENVS)


def test_display_names_are_the_same_in_every_checkout(root, tmp_path):
    names = {envs.display_name(env) for env in backends.ENVS}
    assert len(names) == len(backends.ENVS)
    assert not any(str(root) in name or str(ROOT) in name for name in names)
    assert envs.display_name("cpu") == "Python 3 (gpubench-cpu)"


def test_driver_python_falls_back_to_the_jax_env(bin_dir, root, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    write_script(root / ".venv-jax" / "bin" / "python", "exit 0\n")
    assert create.driver_python(root) == str(root / ".venv-jax" / "bin" / "python")
    write_script(root / ".venv" / "bin" / "python", "exit 0\n")
    assert create.driver_python(root) == str(root / ".venv" / "bin" / "python")


def real_venv(clone: Path, dirname: str = ".venv") -> None:
    """A venv whose pip install is done (setup only registers its kernel), running this Python."""
    write_script(clone / dirname / "bin" / "python",  # its import check passes: no pip needed
                 f'if [ "$1" = -c ] && [[ "$2" == import* ]]; then exit 0; fi\n'
                 f'exec {sys.executable} "$@"\n')
    (clone / dirname / ".gpubench-installed").write_text(stamp_digest(clone))


def test_real_registration_sets_backend_display_name_and_checkout(root, tmp_path, monkeypatch,
                                                                  bin_dir):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "user-jupyter"))
    for env in ("cpu", "jax-cpu"):
        real_venv(root, create.VENV_DIRS[env])
    assert create.setup(backends="tensorflow,jax", root=root, echo=lambda line: None) == 0
    for env, backend in (("cpu", "tensorflow"), ("jax-cpu", "jax")):
        kernel = backends.kernel_name(env)
        mine = json.loads((root / ".jupyter" / "kernels" / kernel / "kernel.json").read_text())
        user_spec = tmp_path / "user-jupyter" / "kernels" / kernel / "kernel.json"
        user = json.loads(user_spec.read_text())
        assert mine["display_name"] == user["display_name"] == envs.display_name(env)
        assert mine["env"] == {"KERAS_BACKEND": backend, "PYTHONPATH": str(root)}
        assert user["env"] == {"KERAS_BACKEND": backend}


def test_unwritable_user_jupyter_dir_is_a_warning(root, tmp_path, monkeypatch, bin_dir):
    """The --user registration fails (its folder cannot be made; root ignores modes, so a file
    stands where a folder must go): setup warns, naming the folder, and succeeds."""
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    (tmp_path / "blocked").write_text("a file, not a folder")
    user_dir = tmp_path / "blocked" / "jupyter"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(user_dir))
    real_venv(root)
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 0
    printed = "\n".join(out)
    assert "warning: could not register gpubench-cpu for Jupyter started by hand" in printed
    assert str(user_dir) in printed  # ipykernel's own error names the folder
    assert "Traceback" not in printed and "delete .venv" not in printed
    assert "Kernels registered: gpubench-cpu" in printed
    assert (root / ".jupyter" / "kernels" / "gpubench-cpu" / "kernel.json").is_file()


def test_names_and_root():
    assert backends.kernel_name("cpu") == "gpubench-cpu"
    assert (machine.project_root() / "pyproject.toml").is_file()
    assert (machine.project_root() / "environment-gpu.yml").is_file()


def test_envs_module_imports_only_the_standard_library():
    code = (
        "import sys; import gpubench.envs; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'jupyter_client', 'numpy', 'ipykernel', 'traitlets')]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_setup_and_its_cli_import_with_no_site_packages():
    """A bare `python3 -m gpubench setup` (and `envs --driver`, which make runs first) comes before
    anything is installed: the CLI and gpubench.envs import with no site-packages at all (-S)."""
    out = subprocess.run([sys.executable, "-S", "-c", "import gpubench.cli, gpubench.envs"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]


# ---- the probe: `gpubench doctor --json` of a kernel's Python -----------------------------

@pytest.fixture
def jupyter_dir(tmp_path, monkeypatch) -> Path:
    """An isolated Jupyter data dir: kernels registered with --user land here."""
    path = tmp_path / "jupyter"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(path))
    monkeypatch.delenv("JUPYTER_PATH", raising=False)
    monkeypatch.delenv("GPUBENCH_CONDA", raising=False)
    return path


def write_kernel(jupyter_dir: Path, name: str, argv0: str, env: dict | None = None) -> None:
    """A hand-written kernel.json."""
    spec = {"argv": [argv0, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": name, "language": "python", "env": env or {}}
    folder = jupyter_dir / "kernels" / name
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(spec))


def fake_doctor(path: Path, doc: dict, before: str = "", after: str = "GPU check: OK") -> Path:
    """A "python" whose `-m gpubench doctor --json` prints `doc` (with the KERAS_BACKEND it was
    given, its cwd and argv) between some noise."""
    body = json.dumps(doc)[:-1] + ', "seen_backend": "$KERAS_BACKEND", "cwd": "$PWD", "argv": "$*"}'
    return write_script(path, f"echo {shlex.quote(before)}\ncat <<EOF\n{body}\nEOF\n"
                              f"echo {shlex.quote(after)}\n")


JAX_GPU = {"python": "3.11.9", "keras": "3.15.1", "backend": "jax", "backend_version": "0.10.2",
           "jax": "0.10.2", "tensorflow": None, "cuda_build": True, "devices": ["cpu", "gpu:0"],
           "gpus": [{"name": "NVIDIA H200", "memory_gb": 139.8, "driver": "580.1"}],
           "env": "jax-gpu", "tensorflow_importable": False}


def test_probe_python_runs_doctor_json_outside_the_checkout(tmp_path):
    python = fake_doctor(tmp_path / "python", JAX_GPU, before="noise {not json")
    info = envs.probe_python([str(python), "-Xfrozen_modules=off"],
                             env={**os.environ, "KERAS_BACKEND": "jax"})
    assert info["error"] is None, info
    assert info["argv"] == "-Xfrozen_modules=off -m gpubench doctor --json"
    assert info["seen_backend"] == "jax"
    assert Path(info["cwd"]).resolve() == Path(tempfile.gettempdir()).resolve()
    assert (info["backend"], info["devices"], info["tensorflow"]) == ("jax", ["cpu", "gpu:0"], None)


@pytest.mark.parametrize(("body", "expected"), [
    ('echo "ModuleNotFoundError: No module named gpubench" >&2; exit 1',
     "gpubench is not installed in"),
    ('echo "Segmentation fault" >&2; exit 3',
     "exited with code 3 and printed no JSON: Segmentation"),
    ('echo "{broken"; exit 0', "exited with code 0 and printed no JSON: {broken"),
])
def test_probe_python_failures_say_why(tmp_path, body, expected):
    python = write_script(tmp_path / "python", body + "\n")
    info = envs.probe_python([str(python)])
    assert expected in info["error"], info


def test_probe_python_of_a_missing_or_hanging_python(tmp_path):
    assert "does not run" in envs.probe_python([str(tmp_path / "nosuch")])["error"]
    slow = write_script(tmp_path / "slow", "sleep 10\n")
    assert "gave no answer within 0.5 s" in envs.probe_python([str(slow)], timeout=0.5)["error"]


def test_probe_and_report_of_a_jax_gpu_kernel(jupyter_dir, tmp_path, monkeypatch):
    python = fake_doctor(tmp_path / "python", {**JAX_GPU, "checkout": str(ROOT)})
    write_kernel(jupyter_dir, "gpubench-jax-gpu", str(python), env={"KERAS_BACKEND": "jax"})
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")  # the spec's env wins over ours
    info = envs.probe_env("jax-gpu")
    assert info["error"] is None, info
    assert (info["backend"], info["backend_version"], info["gpus"]) == ("jax", "0.10.2", ["gpu:0"])
    assert (info["kernel"], info["executable"], info["checkout"]) == (
        "gpubench-jax-gpu", str(python), str(ROOT))
    report = envs.envs_report()
    row = next(line for line in report.splitlines() if line.startswith("jax-gpu "))
    assert re.search(r"gpubench-jax-gpu +jax +0\.10\.2 +GPU: yes \(gpu:0\) ", row), row
    assert row.endswith(f"{python}  {ROOT}")
    assert "WARNING" not in report and "ERROR" not in report


def test_report_warns_about_a_gpu_env_without_gpu_and_the_wrong_backend(jupyter_dir, tmp_path):
    doc = {**JAX_GPU, "backend": "tensorflow", "backend_version": "2.21.0", "tensorflow": "2.21.0",
           "devices": ["cpu"], "diagnosis": "no NVIDIA GPU on this machine"}
    write_kernel(jupyter_dir, "gpubench-jax-gpu", str(fake_doctor(tmp_path / "python", doc)))
    report = envs.envs_report()
    assert "WARNING: gpubench-jax-gpu: runs Keras on tensorflow, not jax" in report
    assert "GPU env, but tensorflow sees no GPU: no NVIDIA GPU on this machine" in report
    assert "GPU: no" in report


def test_report_names_broken_kernels_and_missing_envs(jupyter_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "nvidia_smi_gpus", lambda: [])
    write_kernel(jupyter_dir, "gpubench-cpu-noonednn", "/nonexistent/bin/python")
    crash = write_script(tmp_path / "crash", 'echo "Segmentation fault" >&2\nexit 3\n')
    write_kernel(jupyter_dir, "gpubench-jax-cpu", str(crash), env={"KERAS_BACKEND": "jax"})
    info = envs.probe_env("cpu-noonednn")
    assert "/nonexistent/bin/python does not run" in info["error"]
    assert "jupyter kernelspec remove gpubench-cpu-noonednn" in info["error"]
    report = envs.envs_report()
    assert "ERROR: gpubench-cpu-noonednn:" in report
    assert "ERROR: gpubench-jax-cpu:" in report and "Segmentation fault" in report
    assert "GPU: unknown" in report
    assert "cpu: not set up" in report and "`make setup`" in report
    assert "jax-cpu: not set up" not in report
    assert "jax-gpu: not set up (optional: Keras on JAX)" in report


def test_probe_of_unknown_kernel(jupyter_dir):
    info = envs.probe_env("jax-cpu")
    assert "no Jupyter kernel named 'gpubench-jax-cpu'" in info["error"]
    assert "BACKENDS=tensorflow,jax" in info["error"]


@pytest.mark.parametrize("smi", [None, [], ["GPU 0: NVIDIA H200 (UUID: GPU-1)"]])
def test_report_with_no_kernels(jupyter_dir, monkeypatch, smi):
    """The GPU envs' fix is offered only where nvidia-smi lists a GPU; no hint names a make
    target that does not exist."""
    monkeypatch.setattr(machine, "nvidia_smi_gpus", lambda: smi)
    report = envs.envs_report()
    assert "no gpubench kernels are registered" in report
    for env in backends.ENVS:
        assert f"{env}: not set up" in report
    assert ("make setup GPU=1" in report) == bool(smi)
    assert ("make setup GPU=1 BACKENDS=tensorflow,jax" in report) == bool(smi)
    assert ("this machine has no NVIDIA GPU" in report) == (not smi)
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z-]+):", makefile, re.M))
    assert set(re.findall(r"`make (\w+)", report)) <= targets


@pytest.mark.slow
def test_real_kernel_probe_and_report(jupyter_dir, monkeypatch):
    """This test's own Python as gpubench-cpu: the probe runs its real `gpubench doctor --json`."""
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--user", "--name",
                    "gpubench-cpu", "--env", "KERAS_BACKEND", "tensorflow", "--env", "PYTHONPATH",
                    str(ROOT)], check=True, capture_output=True)
    specs = envs.kernel_specs()
    assert list(specs) == ["cpu"] and specs["cpu"]["kernel"] == "gpubench-cpu"
    assert Path(specs["cpu"]["resource_dir"]).parent == jupyter_dir / "kernels"
    info = envs.probe_env("cpu")
    assert info["error"] is None, info
    assert info["backend"] == "tensorflow" and info["backend_version"].startswith("2.21")
    assert info["tensorflow"].startswith("2.21")
    assert info["cuda_build"] is False and info["gpus"] == []
    assert info["python"].startswith("3.11") and info["executable"] == sys.executable
    monkeypatch.setattr(envs, "probe_env", lambda env, timeout=120: info)  # TensorFlow loads once
    report = envs.envs_report()
    row = next(line for line in report.splitlines() if line.startswith("cpu "))
    assert re.search(r"gpubench-cpu +tensorflow +2\.21\.\d+ +GPU: no ", row), row
    assert f"this checkout: {ROOT}" in report and "ERROR" not in report


def test_a_kernel_of_another_checkout_is_foreign(jupyter_dir, tmp_path):
    """A --user kernel whose python lives outside this checkout (another clone's .venv, or a
    shared conda env) is refused; this checkout's .venv python or its own folder is not."""
    write_kernel(jupyter_dir, "gpubench-cpu", str(tmp_path / "clone2" / ".venv" / "bin" / "python"))
    write_kernel(jupyter_dir, "gpubench-mine", str(ROOT / ".venv" / "bin" / "python"))
    write_kernel(jupyter_dir, "gpubench-conda", "/opt/conda/envs/gpubench-cpu/bin/python",
                 env={"PYTHONPATH": str(ROOT)})
    specs = envs.kernel_specs()
    assert "is not this checkout's" in envs.foreign_kernel(specs["cpu"])
    assert f"make setup` in {ROOT}" in envs.foreign_kernel(specs["cpu"])
    assert envs.foreign_kernel(specs["mine"]) is None
    assert envs.foreign_kernel(specs["conda"]) is None


def test_checkout_kernels_come_first_on_jupyter_path(monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", f"/elsewhere{os.pathsep}{ROOT / '.jupyter'}")
    envs.use_checkout_kernels()
    assert os.environ["JUPYTER_PATH"].split(os.pathsep) == [str(ROOT / ".jupyter"), "/elsewhere"]


def test_two_setups_at_once_both_succeed(root, tmp_path, monkeypatch, bin_dir):
    """Setups racing, with real `ipykernel install --user`: without the locks one of them
    crashed (FileNotFoundError: logo-svg.svg). Two clones, two setups each, at the same moment."""
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "user-jupyter"))
    clones = [root, tmp_path / "clone2"]
    shutil.copytree(root, clones[1])
    for clone in clones:
        real_venv(clone)
    outcomes, printed = [], []

    def setup_in(clone: Path) -> None:
        outcomes.append(create.setup(root=clone, echo=printed.append))

    threads = [threading.Thread(target=setup_in, args=(clone,)) for clone in clones * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == [0] * 4, "\n".join(printed)
    assert "warning" not in "\n".join(printed)
    for clone in clones:
        spec_path = clone / ".jupyter" / "kernels" / "gpubench-cpu" / "kernel.json"
        spec = json.loads(spec_path.read_text())
        assert spec["env"]["PYTHONPATH"] == str(clone)
        assert spec["display_name"] == envs.display_name("cpu")
    assert (tmp_path / "user-jupyter" / "kernels" / "gpubench-cpu" / "logo-svg.svg").exists()


def test_setup_rebuilds_a_venv_an_interrupted_setup_left_without_pip(bin_dir, root, tmp_path,
                                                                       monkeypatch):
    """A set-up killed during ensurepip leaves a venv whose python runs but has no pip: the next
    setup says so and rebuilds it (`venv --clear`), then installs into it."""
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / ".venv")],
                   check=True, timeout=120)
    log = tmp_path / "python.log"
    new_python = fake_venv(tmp_path / "made", ".venv", log)  # what the rebuild puts in place
    maker = write_script(tmp_path / "python3",
                         f'printf "%s\\t%s%s\\n" "$PWD" "$*" "{JDD}" >> {shlex.quote(str(log))}\n'
                         'dir="${@: -1}"; /bin/rm -rf "$dir"; /bin/mkdir -p "$dir/bin"\n'
                         f'/bin/cp {shlex.quote(str(new_python))} "$dir/bin/python"\n')
    monkeypatch.setattr(sys, "executable", str(maker))
    out: list[str] = []
    assert create.setup(root=root, echo=out.append) == 0, "\n".join(out)
    printed = "\n".join(out)
    assert (".venv is broken (its pip is missing or half-installed; an interrupted set-up "
            "leaves it so): rebuilding it") in printed
    assert f"$ {maker} -m venv --clear .venv" in printed
    assert argvs(log)[:2] == ["-m venv --clear .venv", "-m pip install -e .[cpu,test]"]
    assert (root / ".venv" / ".gpubench-installed").read_text().strip() == stamp_digest(root)


# ---- outside a checkout (a wheel): hints that exist there

@pytest.mark.parametrize("env,inside,outside", [
    ("cpu", "`make setup` (or `gpubench setup`)",
     "`pip install 'gpubench[cpu]'`, then `gpubench run --here` in that Python"),
    ("jax-gpu", "`make setup GPU=1 BACKENDS=tensorflow,jax`",
     "`pip install 'gpubench[jax-gpu]'` in a Python of its own, then "
     "`KERAS_BACKEND=jax gpubench run --here` in that Python"),
])
def test_setup_command_fits_where_gpubench_runs(monkeypatch, env, inside, outside):
    assert envs.setup_command(env).startswith(inside)
    monkeypatch.setattr(machine, "checkout", lambda: None)
    monkeypatch.setattr(envs, "install_source", lambda: "gpubench")  # from an index
    assert envs.setup_command(env) == outside


def test_outside_a_checkout_the_hint_installs_from_where_gpubench_came_from(monkeypatch,
                                                                           tmp_path):
    """A wheel file is what pip must be given (`gpubench[gpu]` alone cannot resolve from it):
    the source is the one PEP 610's direct_url.json records, here this editable checkout."""
    assert envs.install_source() == str(ROOT)
    wheel = tmp_path / "gpubench-1.0-py3-none-any.whl"
    monkeypatch.setattr(machine, "checkout", lambda: None)
    monkeypatch.setattr(envs, "install_source", lambda: str(wheel))
    assert envs.setup_command("gpu") == (f"`pip install '{wheel}[gpu]'` in a Python of its own, "
                                         "then `gpubench run --here` in that Python")


def test_outside_a_checkout_a_kernel_of_a_clone_is_named(jupyter_dir, tmp_path, monkeypatch):
    """`gpubench envs` of a wheel says which checkout each kernel runs, and that it is not this
    gpubench."""
    clone = tmp_path / "clone"
    python = fake_doctor(tmp_path / "python", {**JAX_GPU, "checkout": str(clone)})
    write_kernel(jupyter_dir, "gpubench-jax-gpu", str(python), env={"KERAS_BACKEND": "jax"})
    monkeypatch.setattr(machine, "checkout", lambda: None)
    report = envs.envs_report()
    assert (f"WARNING: gpubench-jax-gpu: runs the gpubench of {clone}, not this one "
            f"({machine.project_root()}); `gpubench run --here` runs in this Python instead") \
        in report, report
    assert "make " not in report


def test_report_outside_a_checkout_calls_nothing_this_checkout(jupyter_dir, tmp_path,
                                                              monkeypatch):
    """A kernel of a checkout, listed by a wheel's gpubench: no "this checkout", no make."""
    monkeypatch.setattr(machine, "nvidia_smi_gpus", lambda: [])
    python = fake_doctor(tmp_path / "python", {**JAX_GPU, "checkout": str(ROOT)})
    write_kernel(jupyter_dir, "gpubench-jax-cpu", str(python), env={"KERAS_BACKEND": "jax"})
    monkeypatch.setattr(machine, "checkout", lambda: None)
    report = envs.envs_report()
    assert "this checkout" not in report and "make " not in report, report
    assert f"gpubench installed in {machine.project_root()}" in report
    assert "cpu: not set up (no kernel gpubench-cpu); create it with `pip install " in report


def test_missing_jupyter_client_names_the_set_up_command_where_the_user_is(monkeypatch):

    monkeypatch.setitem(sys.modules, "jupyter_client.kernelspec", None)  # its import fails
    monkeypatch.setattr(machine, "checkout", lambda: None)
    monkeypatch.setattr(envs, "install_source", lambda: "gpubench")  # from an index
    with pytest.raises(envs.EnvError) as outside:
        envs.kernel_specs()
    monkeypatch.setattr(machine, "checkout", lambda: ROOT)
    with pytest.raises(envs.EnvError) as inside:
        envs.kernel_specs()
    assert "pip install 'gpubench[cpu]'" in str(outside.value)
    assert "`make" not in str(outside.value)
    assert "`make setup`" in str(inside.value)
