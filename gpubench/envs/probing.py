"""Asking an env's Python what it runs: `PYTHON -m gpubench doctor --json` (its backend,
versions, devices and checkout), run outside any checkout with the kernel spec's environment.
Stdlib-only at import."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile

from gpubench.envs import kernels
from gpubench.envs.names import kernel_name, setup_command


def _first_json(text: str) -> dict | None:
    """The first JSON object in `text` that starts a line (a library may print before it)."""
    decoder = json.JSONDecoder()
    for at in [0] + [i + 1 for i, char in enumerate(text) if char == "\n"]:
        if text.startswith("{", at):
            try:
                doc = decoder.raw_decode(text, at)[0]
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None


def probe_python(argv: list[str], env: dict | None = None, timeout: float = 120) -> dict:
    """Run `ARGV -m gpubench doctor --json` (outside any checkout) and return its JSON with
    "error": None; on failure a dict whose "error" says why."""
    cmd = [*argv, "-m", "gpubench", "doctor", "--json"]
    try:  # cwd: a neutral folder, so only what that Python itself imports is found
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=tempfile.gettempdir(), stdin=subprocess.DEVNULL)
    except OSError as exc:
        return {"error": f"{argv[0] if argv else 'an empty command'} does not run ({exc})"}
    except subprocess.TimeoutExpired:
        return {"error": f"`{shlex.join(cmd)}` gave no answer within {timeout:g} s"}
    doc = _first_json(done.stdout)
    if doc is not None:
        return {**doc, "error": None}
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    if any("No module named gpubench" in line for line in said):
        return {"error": f"gpubench is not installed in {argv[0]}; install it there "
                         f"({setup_command()})"}
    tail = " | ".join(said[-3:]) or "no output"
    return {"error": f"`{shlex.join(cmd)}` exited with code {done.returncode} and printed no "
                     f"JSON: {tail}"}


def probe_env(env: str, timeout: float = 120) -> dict:
    """Ask env's kernel Python (with the spec's env) for its backend, versions, devices and
    checkout, through `gpubench doctor --json`; failures go in "error"."""
    kernel = kernel_name(env)
    result = {"kernel": kernel, "env": env, "executable": None, "python": None,
              "backend": None, "backend_version": None, "tensorflow": None, "jax": None,
              "cuda_build": None, "devices": [], "gpus": [], "gpubench": None, "checkout": None,
              "diagnosis": None, "error": None}
    spec = kernels.kernel_specs().get(env)
    if spec is None:
        result["error"] = (f"no Jupyter kernel named {kernel!r}; create it with "
                           f"{setup_command(env)}")
        return result
    argv = spec["argv"][:spec["argv"].index("-m")] if "-m" in spec["argv"] else spec["argv"][:1]
    result["executable"] = argv[0] if argv else None
    info = probe_python(argv, env={**os.environ, **spec["env"]}, timeout=timeout)
    if info["error"]:
        result["error"] = (f"its Python does not run gpubench: {info['error']}. Re-create the env "
                           f"with {setup_command(env)}, or remove it with `jupyter kernelspec "
                           f"remove {kernel}` (its spec: {spec['resource_dir']}/kernel.json)")
        return result
    result.update({key: info[key] for key in result if key in info and key not in ("env", "gpus")})
    result["backend_version"] = info.get("backend_version") or info.get(str(info.get("backend")))
    result["devices"] = [str(d) for d in info.get("devices") or []]
    result["gpus"] = [d for d in result["devices"] if d.startswith("gpu")]
    return result

