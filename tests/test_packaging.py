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


def test_tensorflow_extras():
    extras = _pyproject()["project"]["optional-dependencies"]
    assert any(r.startswith("tensorflow-cpu==2.21.*") for r in extras["cpu"])
    assert any(r.startswith("tensorflow==2.21.*") and "platform_machine" in r for r in extras["cpu"])
    assert extras["gpu"] == ["tensorflow[and-cuda]==2.21.*"]
    assert _pyproject()["project"]["scripts"]["gpubench"] == "gpubench.cli:main"


def test_ci_calls_make_test():
    assert re.search(r"^make test$", (REPO / ".ci" / "run").read_text(), re.M)


def test_readme_states_the_two_commands():
    readme = (REPO / "README.md").read_text()
    for needle in ("make run", "make test", "conda", "WSL2", "2.10", "make setup GPU=1"):
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
