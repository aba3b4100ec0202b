"""Packaging: one source of truth for versions, the two commands, CI, and the CLI contract."""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from conftest import PYTHON, REPO

YML_FILES = ["environment-cpu.yml", "environment-gpu.yml"]
REQUIRED_CONDA = {"python", "numpy", "matplotlib", "jupyterlab", "papermill", "nbval",
                  "ipykernel", "pytest"}


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _pip_pins() -> dict[str, str]:
    """name -> "X.Y" for every `name==X.Y.*` requirement in pyproject.toml."""
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    pins = {}
    for req in reqs:
        match = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\d+\.\d+)\.\*", req)
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
        match = re.match(r"^([A-Za-z0-9_.-]+)=(\d+\.\d+)$", body)
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
    assert {"numpy", "matplotlib", "jupyterlab", "papermill", "nbval", "ipykernel", "pytest"} <= shared
    mismatched = {k: (pins[k], pip[k]) for k in shared if pins[k] != pip[k]}
    assert not mismatched, f"{name} and pyproject.toml disagree (yml, pyproject): {mismatched}"


def test_python_version_agrees():
    cpu, _, _ = _conda_deps("environment-cpu.yml")
    gpu, _, _ = _conda_deps("environment-gpu.yml")
    assert cpu["python"] == gpu["python"] == "3.11"


@pytest.mark.parametrize("name,extra", [("environment-cpu.yml", "cpu"), ("environment-gpu.yml", "gpu")])
def test_env_file_installs_the_project_with_its_extra(name, extra):
    _, pip_lines, uncommented = _conda_deps(name)
    assert pip_lines == [f"-e .[{extra}]"]
    assert not uncommented, f"dependencies without a comment saying why: {uncommented}"
    text = (REPO / name).read_text()
    assert f"name: gpubench-{extra}" in text and "- conda-forge" in text


def _applies(requirement: str, machine: str) -> bool:
    from packaging.requirements import Requirement

    marker = Requirement(requirement).marker
    return marker is None or marker.evaluate({"platform_machine": machine, "sys_platform": "linux"})


@pytest.mark.parametrize("machine,wheel", [("x86_64", "tensorflow-cpu"), ("AMD64", "tensorflow-cpu"),
                                           ("aarch64", "tensorflow"), ("arm64", "tensorflow")])
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
    assert getattr(importlib.import_module(module), func) is importlib.import_module("gpubench.cli").main


def test_ci_runs_make_test(fake_command, tmp_path):
    """.ci/run ends in `make test` (a fake make records what it was asked)."""
    log = tmp_path / "make.log"
    fake_command("make", f'echo "$@" >> {log}')
    fake_command("apt-get", "exit 0")
    fake_command("sudo", '"$@"')
    proc = subprocess.run(["bash", str(REPO / ".ci" / "run")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().split("\n")[-2] == "test"


def _quick_start() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]


def test_readme_quick_start_fits_on_one_screen_and_names_real_targets():
    quick = _quick_start()
    assert len(quick.strip().splitlines()) <= 24, "the quick start must fit on one screen"
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z-]+):", makefile, re.M))
    named = set(re.findall(r"^make (\w+)", quick, re.M))
    assert named == {"run", "test", "quick"} and named <= targets
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert set(re.findall(r"`make (\w+)", readme)) <= targets, "README names a make target that does not exist"


def test_readme_strict_nbval_command_uses_the_shipped_sanitize_file():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (command,) = re.findall(r"^pytest --nbval .*$", readme, re.M)
    sanitize = re.search(r"--nbval-sanitize-with (\S+)", command).group(1)
    assert (REPO / sanitize).is_file()
    for needle in ("conda", "WSL2", "TensorFlow 2.10", "make setup GPU=1"):  # GPU set-up facts
        assert needle in readme, needle


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
