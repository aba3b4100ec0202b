"""`make lab`: JupyterLab opens every notebook without changing it, autosave and news off.

JupyterLab marks a freshly opened notebook modified when, once its kernel starts, the
`kernelspec` or `language_info` it writes into the metadata differ from the stored ones (it
compares them as JSON and writes only on a difference). The tests below replay that
comparison against a real server started by `make lab`, with this checkout's kernels.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import NOTEBOOKS, REPO, python_env

TOKEN = "gpubench-test-token"
DOCMANAGER = "@jupyterlab/docmanager-extension:plugin"
NOTIFICATION = "@jupyterlab/apputils-extension:notification"


def lab_rewrites(notebook: dict, kernel: str, spec: dict,
                 language_info: dict | None = None) -> list[str]:
    """What JupyterLab would change in `notebook`'s metadata once `kernel` (with kernel.json
    `spec` and kernel_info's `language_info`) is running: one line per changed key."""
    metadata = notebook.get("metadata", {})
    stored = metadata.get("kernelspec") or {}
    same_kernel = stored if stored.get("name") == kernel else {}
    # As JupyterLab 4's notebook context builds it from the running kernel's spec.
    written = {"name": kernel,
               "display_name": spec.get("display_name") or same_kernel.get("display_name")
               or kernel,
               "language": spec.get("language") or same_kernel.get("language")}
    changes = [f"kernelspec.{key}: stored {stored.get(key)!r}, Lab writes {written.get(key)!r}"
               for key in sorted(set(stored) | set(written)) if stored.get(key) != written.get(key)]
    if language_info is not None:
        stored_info = metadata.get("language_info") or {}
        changes += [f"language_info.{key}: stored {stored_info.get(key)!r}, "
                    f"Lab writes {language_info.get(key)!r}"
                    for key in sorted(set(stored_info) | set(language_info))
                    if stored_info.get(key) != language_info.get(key)]
    return changes


def _kernel_json(kernel: str) -> dict:
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager().get_kernel_spec(kernel).to_dict()


def test_a_notebook_with_another_display_name_is_flagged(tmp_path, cpu_kernel):
    """A copy of a notebook whose stored display name differs from the registered kernel's is
    reported as one Lab would rewrite; the stored one is not."""
    spec = _kernel_json(cpu_kernel)
    original = json.loads((NOTEBOOKS / "Mnist_MLP_h1000.ipynb").read_text())
    original["metadata"]["kernelspec"] = {"name": cpu_kernel,
                                          "display_name": spec["display_name"],
                                          "language": spec["language"]}
    assert lab_rewrites(original, cpu_kernel, spec) == []

    planted = json.loads(json.dumps(original))
    planted["metadata"]["kernelspec"]["display_name"] = f"{spec['display_name']} {REPO}"
    copy = tmp_path / "Mnist_MLP_h1000.ipynb"
    copy.write_text(json.dumps(planted))
    changes = lab_rewrites(json.loads(copy.read_text()), cpu_kernel, spec)
    assert changes == [f"kernelspec.display_name: stored '{spec['display_name']} {REPO}', "
                       f"Lab writes '{spec['display_name']}'"]

    other_kernel = json.loads(json.dumps(original))
    other_kernel["metadata"]["kernelspec"]["name"] = "python3"
    assert [c.split(":")[0] for c in lab_rewrites(other_kernel, cpu_kernel, spec)] == [
        "kernelspec.name"]

    info = {"name": "python", "version": "3.11.7"}
    planted["metadata"]["language_info"] = dict(info, version="3.11.9")
    assert "language_info.version: stored '3.11.9', Lab writes '3.11.7'" in lab_rewrites(
        planted, cpu_kernel, spec, info)


def _request(port: int, path: str, method: str = "GET", body: dict | None = None) -> dict | None:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Authorization": f"token {TOKEN}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        text = response.read()
    return json.loads(text) if text else None


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def _effective(settings: dict, key: str):
    """A setting's value as Lab uses it: the user's, else the schema's (overridden) default."""
    assert settings.get("warning") is None, settings["warning"]  # invalid files are dropped
    if key in settings["settings"]:
        return settings["settings"][key]
    return settings["schema"]["properties"][key]["default"]


def _language_info(runtime: Path, kernel_id: str) -> dict:
    """The language_info of the running kernel's kernel_info reply (what Lab reads)."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient()
    client.load_connection_file(str(runtime / f"kernel-{kernel_id}.json"))
    client.start_channels(hb=False)  # no heartbeat: a slow start is not taken for a death
    try:
        reply = client.kernel_info(reply=True, timeout=90)  # queued until the kernel listens
        return reply["content"]["language_info"]
    finally:
        client.stop_channels()


@pytest.mark.slow
def test_make_lab_opens_every_notebook_unchanged(tmp_path, cpu_kernel):
    """`make lab` serves autosave off and news off; opening each notebook and starting its
    stored kernel (as Lab does) leaves nothing for Lab to rewrite and the file unchanged."""
    notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
    before = {path: path.read_bytes() for path in notebooks}
    runtime, settings_dir = tmp_path / "runtime", tmp_path / "user-settings"
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(
        ["make", "--no-print-directory", "-o", "setup", "lab", f"PYTHON={sys.executable}",
         f"LAB_SETTINGS_DIR={settings_dir}",
         f"ARGS=--no-browser --ip=127.0.0.1 --port=0 --IdentityProvider.token={TOKEN}"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # make, its shell and Jupyter: stopped together below
        env=python_env(JUPYTER_RUNTIME_DIR=str(runtime)))
    try:
        deadline = time.time() + 120
        while not list(runtime.glob("jpserver-*.json")):
            if server.poll() is not None or time.time() > deadline:
                pytest.fail("make lab did not start a server: " + _tail(tmp_path / "lab.log"))
            time.sleep(0.5)
        info = json.loads(next(runtime.glob("jpserver-*.json")).read_text())
        port = info["port"]
        assert Path(info["root_dir"]) == NOTEBOOKS

        docmanager = _request(port, "/lab/api/settings/" + DOCMANAGER)
        assert _effective(docmanager, "autosave") is False
        notification = _request(port, "/lab/api/settings/" + NOTIFICATION)
        assert _effective(notification, "fetchNews") == "false"
        assert _effective(notification, "checkForUpdates") is False

        specs = _request(port, "/api/kernelspecs")["kernelspecs"]
        assert cpu_kernel in specs
        listed = {item["name"] for item in _request(port, "/api/contents/")["content"]}
        assert {path.name for path in notebooks} <= listed

        rewrites = {}
        for path in notebooks:
            quoted = urllib.parse.quote(path.name)
            model = _request(port, f"/api/contents/{quoted}?type=notebook&content=1")
            kernel = model["content"]["metadata"].get("kernelspec", {}).get("name")
            assert kernel in specs, f"{path.name}: its stored kernel {kernel!r} is not registered"
            session = _request(port, "/api/sessions", "POST",
                               {"path": path.name, "name": path.name, "type": "notebook",
                                "kernel": {"name": kernel}})
            language_info = _language_info(runtime, session["kernel"]["id"])
            changes = lab_rewrites(model["content"], kernel, specs[kernel]["spec"],
                                   language_info)
            # The patch release of the env's Python is this machine's, not the notebook's.
            stored = model["content"]["metadata"].get("language_info", {}).get("version", "")
            if stored.rsplit(".", 1)[0] == language_info["version"].rsplit(".", 1)[0]:
                changes = [c for c in changes if not c.startswith("language_info.version:")]
            if changes:
                rewrites[path.name] = changes
            _request(port, f"/api/sessions/{session['id']}", "DELETE")
        assert rewrites == {}, "JupyterLab would mark these notebooks modified: " + json.dumps(
            rewrites, indent=1)
    except urllib.error.URLError as error:
        pytest.fail(f"the server stopped answering ({error}): " + _tail(tmp_path / "lab.log"))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()
    assert {path: path.read_bytes() for path in notebooks} == before
    assert (settings_dir / "@jupyterlab" / "docmanager-extension"
            / "plugin.jupyterlab-settings").is_file()  # make lab seeded the folder it was given


def test_make_puts_this_checkouts_kernels_first():
    """`make lab` and `make test` run Jupyter with CHECKOUT/.jupyter first on JUPYTER_PATH, so a
    kernel name another clone registered with --user never runs that clone's code here."""
    show = "show:\n\t@echo $$JUPYTER_PATH\n"
    proc = subprocess.run(["make", "--no-print-directory", "-s", "-f", "Makefile", "-f", "-",
                           "show"], input=show, cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=python_env(JUPYTER_PATH="/elsewhere"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().split(":") == [str(REPO / ".jupyter"), "/elsewhere"]


def test_the_server_runs_this_checkouts_kernel(cpu_kernel):
    """The kernel Jupyter finds under the name is the one `make setup` registered for this
    checkout."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(cpu_kernel)
    assert spec.resource_dir == str(REPO / ".jupyter" / "kernels" / cpu_kernel)
    assert spec.env["PYTHONPATH"] == str(REPO)


def test_make_lab_passes_args_and_uses_its_own_settings():
    """`make lab ARGS=...` hands its flags to JupyterLab (a port, no browser), and points Lab's
    user settings at this checkout's git-ignored folder, seeded from lab/user-settings."""
    proc = subprocess.run(["make", "-n", "--no-print-directory", "lab",
                           "ARGS=--port=8890 --no-browser"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout.replace("\\\n", "")
    lab = script.splitlines()[-1]
    settings = REPO / ".jupyter" / "lab" / "user-settings"
    assert f'cp -R lab/user-settings/. "{settings}/"' in script
    assert lab.startswith(f'cd notebooks && JUPYTERLAB_SETTINGS_DIR="{settings}" ')
    assert " -m jupyter lab" in lab and lab.endswith(" --port=8890 --no-browser")
    ignored = subprocess.run(["git", "check-ignore", "-q", str(settings)], cwd=REPO)
    assert ignored.returncode == 0, f"{settings} must be git-ignored"


def test_shipped_lab_settings_turn_off_autosave_and_news():
    """lab/user-settings holds the two files, valid against JupyterLab's own schemas."""
    json5 = pytest.importorskip("json5")
    jsonschema = pytest.importorskip("jsonschema")
    schemas = Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"
    if not schemas.is_dir():
        pytest.fail(f"JupyterLab's schemas are not at {schemas}: run `make setup`")
    expected = {DOCMANAGER: {"autosave": False},
                NOTIFICATION: {"fetchNews": "false", "checkForUpdates": False}}
    shipped = REPO / "lab" / "user-settings"
    found = {}
    for path in sorted(shipped.rglob("*.jupyterlab-settings")):
        package, plugin = path.relative_to(shipped).parent, path.stem
        plugin_id = f"{package.as_posix()}:{plugin}"
        found[plugin_id] = json5.loads(path.read_text())
        schema = json.loads((schemas / package / f"{plugin}.json").read_text())
        jsonschema.validate(found[plugin_id], schema)
    assert found == expected
