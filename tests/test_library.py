"""docs/library.md: its examples run as written (in a Python of their own, in an empty folder,
then `gpubench report` on what they recorded), and every name its table lists exists."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

PAGE = REPO / "docs" / "library.md"


def blocks(language: str) -> list[str]:
    """The page's fenced code blocks in `language`, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), re.M | re.S)


def run_examples(tmp_path, python: str = sys.executable, **env: str) -> str:
    """Each python block of the page in a fresh Python, then each `gpubench` command, in
    `tmp_path`; what they printed."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg", **env}
    printed = ""
    for number, code in enumerate(blocks("python")):
        proc = subprocess.run([python, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              env=env, timeout=900)
        assert proc.returncode == 0, f"example {number + 1}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        printed += proc.stdout
    for command in (line for block in blocks("bash") for line in block.splitlines()):
        assert command.startswith("gpubench "), command
        proc = subprocess.run([python, "-m", "gpubench", *command.split()[1:]], cwd=tmp_path,
                              capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, f"{command}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        printed += proc.stdout
    return printed


def check_output(printed: str, tmp_path) -> None:
    """What the examples must have done: timed a product, recorded a train record, reported it."""
    assert re.search(r"^cpu: \d+ µs a product \([\d.]+ GFLOP/s, blocks of \d+", printed, re.M)
    assert "tiny_mlp on cpu" in printed and "SYNTHETIC DATA" in printed
    from gpubench import rundir

    (record,) = (r for r in rundir.read_records(tmp_path / "runs" / "mine")
                 if r["benchmark"] == "train")
    assert (record["model"], record["status"], record["epochs"]) == ("tiny_mlp", "ok", 2)
    report = (tmp_path / "runs" / "mine" / "report.md").read_text(encoding="utf-8")
    assert "tiny_mlp" in report


@pytest.mark.slow  # trains and starts Pythons: in `make test`, not in `make check`
def test_the_examples_run_as_written(tmp_path):
    check_output(run_examples(tmp_path), tmp_path)


@pytest.mark.jax
def test_the_examples_run_on_jax(tmp_path):
    check_output(run_examples(tmp_path, KERAS_BACKEND="jax"), tmp_path)


@pytest.mark.torch
def test_the_examples_run_on_torch(tmp_path):
    check_output(run_examples(tmp_path, KERAS_BACKEND="torch"), tmp_path)


def test_every_name_in_the_table_exists():
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \|", PAGE.read_text(encoding="utf-8"), re.M)
    assert len(rows) > 30
    missing = [f"{module}.{name}" for module, names in rows
               for name in re.findall(r"`(\w+)`", names)
               if not hasattr(importlib.import_module(f"gpubench.{module}"), name)]
    assert missing == [], f"docs/library.md names what gpubench lacks: {missing}"
