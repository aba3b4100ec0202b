"""`make lab`: Jupyter Server on loopback lists the gpubench-cpu kernel and every notebook."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import NOTEBOOKS, REPO, python_env

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(port: int, path: str, token: str) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_jupyter_server_lists_kernel_and_notebooks(tmp_path, cpu_kernel):
    port, token = _free_port(), "gpubench-test-token"
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "server", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={NOTEBOOKS}",
         "--ServerApp.port_retries=0", "--allow-root"],  # CI runs as root; harmless otherwise
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=python_env(JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime")))
    try:
        deadline = time.time() + 120
        while True:
            try:
                specs = _get(port, "/api/kernelspecs", token)
                break
            except (urllib.error.URLError, ConnectionError):
                if server.poll() is not None or time.time() > deadline:
                    pytest.fail("Jupyter Server did not start: " + server.stderr.read()[-2000:])
                time.sleep(0.5)
        assert cpu_kernel in specs["kernelspecs"]
        listed = {item["name"] for item in _get(port, "/api/contents/", token)["content"]}
        expected = {p.name for p in NOTEBOOKS.glob("*.ipynb")}
        assert "Compare_CPU_GPU.ipynb" in expected and expected <= listed
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_make_puts_this_checkouts_kernels_first():
    """`make lab` and `make test` run Jupyter with CHECKOUT/.jupyter first on JUPYTER_PATH, so a
    kernel name another clone registered with --user never runs that clone's code here."""
    show = "show:\n\t@echo $$JUPYTER_PATH\n"
    proc = subprocess.run(["make", "--no-print-directory", "-s", "-f", "Makefile", "-f", "-",
                           "show"], input=show, cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=python_env(JUPYTER_PATH="/elsewhere"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().split(":") == [str(REPO / ".jupyter"), "/elsewhere"]


def test_the_server_runs_this_checkouts_kernel(tmp_path, cpu_kernel):
    """The kernel Jupyter finds under the name is the one `make setup` registered for this
    checkout."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(cpu_kernel)
    assert spec.resource_dir == str(REPO / ".jupyter" / "kernels" / cpu_kernel)
    assert spec.env["PYTHONPATH"] == str(REPO)


def test_make_lab_passes_args_to_jupyterlab():
    """`make lab ARGS=...` hands its flags to JupyterLab (a port, no browser)."""
    proc = subprocess.run(["make", "-n", "--no-print-directory", "lab",
                           "ARGS=--port=8890 --no-browser"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lab = proc.stdout.splitlines()[-1]
    assert lab.startswith("cd notebooks && ") and " -m jupyter lab" in lab
    assert lab.endswith(" --port=8890 --no-browser")
