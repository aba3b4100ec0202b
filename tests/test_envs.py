"""Tests for gpubench.envs: setup's commands (fake conda, micromamba, venv python), and real kernels."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpubench import envs

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


def fake_conda(bin_dir: Path, name: str, log: Path, envs_json: dict, fail_on: str | None = None) -> Path:
    """A conda/mamba/micromamba stand-in: logs "cwd<TAB>argv", answers `env list --json`, can fail one step."""
    body = f'printf "%s\\t%s%s\\n" "$PWD" "$*" "{JDD}" >> {shlex.quote(str(log))}\n'
    answer = shlex.quote(json.dumps(envs_json))
    body += f'if [ "$1 $2 $3" = "env list --json" ]; then printf "%s\\n" {answer}; exit 0; fi\n'
    if fail_on:
        body += f'if [[ "$*" == *{shlex.quote(fail_on)}* ]]; then echo "fake failure" >&2; exit 1; fi\n'
    return write_script(bin_dir / name, body + "exit 0\n")


def fake_nvidia_smi(bin_dir: Path, kind: str) -> None:
    """nvidia-smi that lists a GPU ("gpu"), fails ("fail"), or is absent ("missing")."""
    if kind == "gpu":
        write_script(bin_dir / "nvidia-smi", 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0f3c9a7e-1234)"\n')
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
    for name in ("pyproject.toml", "environment-cpu.yml", "environment-gpu.yml"):
        shutil.copy(ROOT / name, path / name)
    return path


def registered(kernel: str, root: Path, python: str = "python") -> list[str]:
    """The two registrations setup makes: this checkout's (PYTHONPATH, its .jupyter), then --user."""
    install = (f"{python} " if python else "") + (
        f"-m ipykernel install --user --name {kernel} --display-name Python 3.11 ({kernel})")
    return [f"{install} {root} --env PYTHONPATH {root} @{root / '.jupyter'}", install]


def conda_registered(kernel: str, root: Path) -> list[str]:
    return [f"run -n {kernel} {line}" for line in registered(kernel, root)]


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
    assert envs.find_conda() == str(bin_dir / tool)
    out: list[str] = []
    assert envs.setup(root=root, echo=out.append) == 0
    assert argvs(log) == ["env list --json", expected, *conda_registered("gpubench-cpu", root)]
    assert [cwd for cwd, _ in calls(log)[1:]] == [str(root)] * 3  # the yml's `-e .[cpu]` is relative to root
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
    assert envs.setup(gpu, root=root, echo=lambda line: None) == 0
    lines = argvs(log)
    assert "env create -f environment-cpu.yml" in lines
    register_cpu = conda_registered("gpubench-cpu", root)
    assert set(register_cpu) <= set(lines)
    if gpu or smi == "gpu":
        assert "env create -f environment-gpu.yml" in lines
        assert set(conda_registered("gpubench-gpu", root)) <= set(lines)
        assert lines.index(register_cpu[1]) < lines.index("env create -f environment-gpu.yml")
    else:
        assert not any("gpu" in line.replace("gpubench-cpu", "").replace(str(root), "")
                       for line in lines), lines


def test_conda_failing_step_stops_with_message(bin_dir, root, tmp_path):
    log = tmp_path / "conda.log"
    fake_conda(bin_dir, "conda", log, ENVS_ABSENT, fail_on="env create")
    fake_nvidia_smi(bin_dir, "gpu")
    out: list[str] = []
    assert envs.setup(root=root, echo=out.append) == 1
    assert argvs(log) == ["env list --json", "env create -f environment-cpu.yml"]  # nothing after the failure
    printed = "\n".join(out)
    assert "setup failed at step: create conda env gpubench-cpu from environment-cpu.yml (exit code 1)" in printed
    assert "env remove -y -n gpubench-cpu" in printed
    assert "Kernels registered" not in printed


def test_conda_failing_kernel_registration_names_the_step(bin_dir, root, tmp_path):
    log = tmp_path / "conda.log"
    fake_conda(bin_dir, "conda", log, ENVS_PRESENT, fail_on="ipykernel install")
    out: list[str] = []
    assert envs.setup(root=root, echo=out.append) == 1
    assert "setup failed at step: register the Jupyter kernel gpubench-cpu" in "\n".join(out)


@pytest.mark.parametrize(("body", "why"), [("echo boom >&2; exit 3", "failed with exit code 3: boom"),
                                           ("echo notjson", "printed no JSON with an \"envs\" list")])
def test_conda_env_list_failure_says_why(bin_dir, root, body, why):
    write_script(bin_dir / "conda", body + "\n")
    out: list[str] = []
    assert envs.setup(root=root, echo=out.append) == 1
    printed = "\n".join(out)
    assert "setup failed at step: list the conda envs" in printed and why in printed
    assert "GPUBENCH_CONDA=none" in printed


def test_conda_missing_yml_fails_clearly(bin_dir, root, tmp_path):
    fake_conda(bin_dir, "conda", tmp_path / "conda.log", ENVS_ABSENT)
    (root / "environment-cpu.yml").unlink()
    out: list[str] = []
    assert envs.setup(root=root, echo=out.append) == 1
    assert "environment-cpu.yml is missing" in "\n".join(out)


def test_mamba_preferred_over_conda_and_micromamba(bin_dir, root, tmp_path):
    for name in ("conda", "micromamba"):
        fake_conda(bin_dir, name, tmp_path / f"{name}.log", ENVS_ABSENT)
    fake_conda(bin_dir, "mamba", tmp_path / "mamba.log", ENVS_ABSENT)
    assert envs.setup(root=root, echo=lambda line: None) == 0
    assert argvs(tmp_path / "mamba.log") == ["env list --json", "env create -f environment-cpu.yml",
                                             *conda_registered("gpubench-cpu", root)]
    assert argvs(tmp_path / "conda.log") == []
    assert argvs(tmp_path / "micromamba.log") == []


def test_gpubench_conda_env_var(bin_dir, tmp_path, monkeypatch):
    for name in ("mamba", "micromamba"):
        fake_conda(bin_dir, name, tmp_path / f"{name}.log", ENVS_ABSENT)
    assert envs.find_conda() == str(bin_dir / "mamba")
    monkeypatch.setenv("GPUBENCH_CONDA", "micromamba")
    assert envs.find_conda() == str(bin_dir / "micromamba")
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    assert envs.find_conda() is None
    monkeypatch.setenv("GPUBENCH_CONDA", "nosuchconda")
    with pytest.raises(envs.EnvError, match="GPUBENCH_CONDA='nosuchconda'.*none"):
        envs.find_conda()
    out: list[str] = []
    assert envs.setup(root=tmp_path, echo=out.append) == 1
    assert "nosuchconda" in "\n".join(out)


def test_no_conda_found(bin_dir):
    assert envs.find_conda() is None


@pytest.mark.parametrize(("smi", "expected"), [("gpu", True), ("fail", False), ("missing", False)])
def test_gpu_requested(bin_dir, smi, expected):
    fake_nvidia_smi(bin_dir, smi)
    assert envs.gpu_requested(False) is expected
    assert envs.gpu_requested(True) is True


def test_nvidia_smi_without_gpu_lines(bin_dir):
    write_script(bin_dir / "nvidia-smi", 'echo "No devices were found"\n')
    assert envs.gpu_requested(False) is False


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
    assert envs.setup(root=root, echo=out.append) == 0
    assert argvs(log) == registered("gpubench-cpu", root, python="")
    assert argvs(tmp_path / "conda.log") == []
    printed = "\n".join(out)
    assert "skipping pip" in printed
    assert "-m venv" not in printed
    assert f"$ {python} -m ipykernel install" in printed


@pytest.mark.parametrize("stamp", [None, "0" * 64], ids=["no-stamp", "stale-stamp"])
def test_venv_with_stale_stamp_runs_pip_and_writes_stamp(bin_dir, root, tmp_path, monkeypatch, stamp):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    log = tmp_path / "python.log"
    python = fake_venv(root, ".venv", log)
    stamp_file = root / ".venv" / ".gpubench-installed"
    if stamp:
        stamp_file.write_text(stamp)
    out: list[str] = []
    assert envs.setup(root=root, echo=out.append) == 0
    assert argvs(log) == ["-m pip install -e .[cpu,test]", *registered("gpubench-cpu", root, python="")]
    assert calls(log)[0][0] == str(root)
    assert f"$ {python} -m pip install -e '.[cpu,test]'" in out
    assert stamp_file.read_text().strip() == stamp_digest(root)


def test_venv_pip_failure_stops_and_leaves_no_stamp(bin_dir, root, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    log = tmp_path / "python.log"
    fake_venv(root, ".venv", log, pip_rc=2)
    out: list[str] = []
    assert envs.setup(root=root, echo=out.append) == 1
    assert argvs(log) == ["-m pip install -e .[cpu,test]"]
    assert "setup failed at step: pip install gpubench[cpu,test] into .venv (exit code 2)" in "\n".join(out)
    assert not (root / ".venv" / ".gpubench-installed").exists()


def test_venv_gpu_env_when_gpu_found(bin_dir, root, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    fake_nvidia_smi(bin_dir, "gpu")
    cpu_log, gpu_log = tmp_path / "cpu.log", tmp_path / "gpu.log"
    fake_venv(root, ".venv", cpu_log)
    fake_venv(root, ".venv-gpu", gpu_log)
    assert envs.setup(root=root, echo=lambda line: None) == 0
    assert argvs(cpu_log)[0] == "-m pip install -e .[cpu,test]"
    assert argvs(gpu_log) == ["-m pip install -e .[gpu,test]", *registered("gpubench-gpu", root, python="")]
    assert (root / ".venv-gpu" / ".gpubench-installed").read_text().strip() == stamp_digest(root)


def test_venv_creation_failure_explains_python3_venv(bin_dir, root, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    # A python whose `-m venv .venv` half-makes the venv and fails, as Debian's does without python3-venv.
    broken = write_script(
        tmp_path / "python3",
        '/bin/mkdir -p "$3/bin"\necho "ensurepip is not available" >&2\nexit 1\n',
    )
    monkeypatch.setattr(sys, "executable", str(broken))
    out: list[str] = []
    assert envs.setup(root=root, echo=out.append) == 1
    printed = "\n".join(out)
    assert f"$ {broken} -m venv .venv" in printed
    assert "setup failed at step: create the venv .venv" in printed
    assert "sudo apt install python3-venv" in printed
    assert not (root / ".venv").exists()  # a rerun must not mistake the half-made venv for a good one


def test_driver_python_venv(bin_dir, root, monkeypatch):
    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    assert envs.driver_python(root) == str(root / ".venv" / "bin" / "python")


def test_driver_python_conda(bin_dir, root, tmp_path):
    fake_conda(bin_dir, "conda", tmp_path / "conda.log", ENVS_PRESENT)
    assert envs.driver_python(root) == "/opt/conda/envs/gpubench-cpu/bin/python"


def test_driver_python_conda_without_env(bin_dir, root, tmp_path):
    fake_conda(bin_dir, "conda", tmp_path / "conda.log", ENVS_ABSENT)
    with pytest.raises(envs.EnvError, match="gpubench-cpu.*make setup"):
        envs.driver_python(root)


def test_names_and_root():
    assert envs.kernel_name("cpu") == "gpubench-cpu"
    assert (envs.project_root() / "pyproject.toml").is_file()
    assert (envs.project_root() / "environment-gpu.yml").is_file()


def test_envs_module_imports_only_the_standard_library():
    code = (
        "import sys; import gpubench.envs; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'jupyter_client', 'numpy', 'ipykernel', 'traitlets')]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


# ---- real kernels (each TensorFlow probe takes a few seconds) ------------------------------

@pytest.fixture
def jupyter_dir(tmp_path, monkeypatch) -> Path:
    """An isolated Jupyter data dir: kernels registered with --user land here."""
    path = tmp_path / "jupyter"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(path))
    monkeypatch.delenv("JUPYTER_PATH", raising=False)
    monkeypatch.delenv("GPUBENCH_CONDA", raising=False)
    return path


def register(name: str) -> None:
    """Register this test Python as kernel `name`, the way setup does."""
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--user", "--name", name], check=True,
        capture_output=True,
    )


def write_kernel(jupyter_dir: Path, name: str, argv0: str, env: dict | None = None) -> None:
    """A hand-written kernel.json."""
    spec = {"argv": [argv0, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": name, "language": "python", "env": env or {}}
    folder = jupyter_dir / "kernels" / name
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(spec))


def test_real_kernel_specs_probe_and_report(jupyter_dir):
    register("gpubench-cpu")
    specs = envs.kernel_specs()
    assert list(specs) == ["cpu"] and specs["cpu"]["kernel"] == "gpubench-cpu"
    assert specs["cpu"]["argv"][0] == sys.executable
    assert Path(specs["cpu"]["resource_dir"]).parent == jupyter_dir / "kernels"

    info = envs.probe("cpu")
    assert info["error"] is None, info
    assert info["tensorflow"].startswith("2.21")
    assert info["cuda_build"] is False
    assert info["gpus"] == []
    assert info["python"].startswith("3.11")
    assert (info["kernel"], info["env"]) == ("gpubench-cpu", "cpu")
    assert info["checkout"] == str(ROOT) and info["diagnosis"]  # no GPU: devices.diagnose says why

    report = envs.envs_report()
    row = next(line for line in report.splitlines() if "gpubench-cpu" in line and "2.21" in line)
    assert row.startswith("cpu ")
    assert re.search(r"  GPU: no  ", row) and row.endswith(f"{sys.executable}  {ROOT}")
    assert f"this checkout: {ROOT}" in report
    assert "gpu: not set up" in report
    assert "cpu: not set up" not in report


def test_report_warns_about_gpu_env_without_gpu_and_broken_kernel(jupyter_dir):
    register("gpubench-gpu")
    write_kernel(jupyter_dir, "gpubench-cpu-noonednn", "/nonexistent/bin/python")
    info = envs.probe("cpu-noonednn")
    assert "its kernel does not start" in info["error"] and "/nonexistent/bin/python" in info["error"]
    assert info["tensorflow"] is None
    report = envs.envs_report()
    assert "GPU env, but TensorFlow sees no GPU: run `gpubench doctor` in that env" in report
    assert "ERROR: gpubench-cpu-noonednn:" in report
    assert "GPU: unknown" in report
    assert "cpu: not set up" in report and "`make setup`" in report
    assert "gpu: not set up" not in report


def test_probe_merges_kernel_env_and_skips_noise(jupyter_dir, tmp_path):
    fake_tf = tmp_path / "fake_tf"
    (fake_tf / "tensorflow").mkdir(parents=True)
    (fake_tf / "tensorflow" / "__init__.py").write_text(
        "import os, types\n"
        "print('noise {not json')\n"
        "__version__ = '9.9.' + os.environ.get('TF_CPP_MIN_LOG_LEVEL', 'unset')  # probe sets it to 2\n"
        "test = types.SimpleNamespace(is_built_with_cuda=lambda: True)\n"
        "config = types.SimpleNamespace(list_physical_devices=lambda kind: "
        "[types.SimpleNamespace(name='/physical_device:GPU:0')])\n"
    )
    write_kernel(jupyter_dir, "gpubench-gpu", sys.executable, env={"PYTHONPATH": str(fake_tf)})
    info = envs.probe("gpu")
    assert info["error"] is None, info
    assert (info["tensorflow"], info["cuda_build"], info["gpus"]) == ("9.9.2", True, ["/physical_device:GPU:0"])
    report = envs.envs_report()
    assert "GPU: yes (GPU:0)" in report
    assert "TensorFlow sees no GPU" not in report


def test_probe_reports_tensorflow_import_error(jupyter_dir, tmp_path):
    fake_tf = tmp_path / "fake_tf"
    fake_tf.mkdir()
    (fake_tf / "tensorflow.py").write_text("raise ImportError('libcudart.so.12: cannot open shared object file')\n")
    write_kernel(jupyter_dir, "gpubench-gpu", sys.executable, env={"PYTHONPATH": str(fake_tf)})
    info = envs.probe("gpu")
    assert info["tensorflow"] is None
    assert "TensorFlow does not import: ImportError: libcudart.so.12" in info["error"]
    assert info["python"].startswith("3.11")


def test_probe_of_crashing_python(jupyter_dir, tmp_path):
    crash = write_script(tmp_path / "crash", 'echo "Segmentation fault" >&2\nexit 3\n')
    write_kernel(jupyter_dir, "gpubench-cpu", str(crash))
    info = envs.probe("cpu")
    assert "exited with code 3" in info["error"] and "Segmentation fault" in info["error"]
    assert "ERROR: gpubench-cpu:" in envs.envs_report()


def test_probe_of_unknown_kernel(jupyter_dir):
    info = envs.probe("nosuch")
    assert "no Jupyter kernel named 'gpubench-nosuch'" in info["error"]


@pytest.mark.parametrize("smi", [None, [], ["GPU 0: NVIDIA H200 (UUID: GPU-1)"]])
def test_report_with_no_kernels(jupyter_dir, monkeypatch, smi):
    """The GPU env's fix is offered only where nvidia-smi lists a GPU."""
    monkeypatch.setattr(envs.devices, "nvidia_smi_gpus", lambda: smi)
    report = envs.envs_report()
    assert "no gpubench kernels are registered" in report
    assert "cpu: not set up" in report and "gpu: not set up" in report
    assert ("make setup GPU=1" in report) == bool(smi)
    assert ("this machine has no NVIDIA GPU" in report) == (not smi)


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
    assert envs.foreign_kernel(specs["mine"]) is None and envs.foreign_kernel(specs["conda"]) is None


def test_checkout_kernels_come_first_on_jupyter_path(monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", f"/elsewhere{os.pathsep}{ROOT / '.jupyter'}")
    envs.use_checkout_kernels()
    assert os.environ["JUPYTER_PATH"].split(os.pathsep) == [str(ROOT / ".jupyter"), "/elsewhere"]


def test_two_setups_at_once_both_succeed(root, tmp_path, monkeypatch, bin_dir):
    """Setups racing, with real `ipykernel install --user`: without the locks one of them
    crashed (FileNotFoundError: logo-svg.svg). Two clones, two setups each, at the same moment."""
    import threading

    monkeypatch.setenv("GPUBENCH_CONDA", "none")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "user-jupyter"))
    clones = [root, tmp_path / "clone2"]
    shutil.copytree(root, clones[1])
    for clone in clones:  # a venv whose pip install is done: setup only registers its kernel
        write_script(clone / ".venv" / "bin" / "python", f'exec {sys.executable} "$@"\n')
        (clone / ".venv" / ".gpubench-installed").write_text(stamp_digest(clone))
    outcomes, printed = [], []

    def setup_in(clone: Path) -> None:
        outcomes.append(envs.setup(root=clone, echo=printed.append))

    threads = [threading.Thread(target=setup_in, args=(clone,)) for clone in clones * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == [0] * 4, "\n".join(printed)
    for clone in clones:
        spec = json.loads((clone / ".jupyter" / "kernels" / "gpubench-cpu" / "kernel.json").read_text())
        assert spec["env"]["PYTHONPATH"] == str(clone) and str(clone) in spec["display_name"]
    assert (tmp_path / "user-jupyter" / "kernels" / "gpubench-cpu" / "logo-svg.svg").exists()
