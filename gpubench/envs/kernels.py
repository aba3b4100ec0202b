"""The envs' Jupyter kernels: this checkout's kernel folder (first on JUPYTER_PATH), the
gpubench-* kernel specs, what a kernel's Python runs (`PYTHON -m gpubench doctor --json`, outside
any checkout), and the `gpubench envs` report of them."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from gpubench import backends, machine  # stdlib-only at import
from gpubench.envs.names import EnvError, setup_command


def checkout_kernels_dir(root: Path | None = None) -> Path:
    """This checkout's own Jupyter data folder; its kernels/ holds the kernels of this checkout."""
    return (Path(root) if root is not None else machine.project_root()) / ".jupyter"


def use_checkout_kernels() -> None:
    """Put this checkout's kernels first on JUPYTER_PATH (in os.environ), ahead of --user ones."""
    first = str(checkout_kernels_dir())
    rest = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p and p != first]
    os.environ["JUPYTER_PATH"] = os.pathsep.join([first, *rest])


def kernel_specs() -> dict[str, dict]:
    """Env name -> its gpubench-ENV kernel: jupyter_client's spec dict, kernel and resource_dir."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager  # noqa: PLC0415 - not in bare python3
    except ImportError as exc:
        raise EnvError(f"jupyter_client is not installed in {sys.executable}; run this with the "
                       "gpubench env's python (`python3 -m gpubench envs --driver` prints it), or "
                       f"create that env first with {setup_command()}") from exc
    prefix = backends.kernel_name("")
    return {name.removeprefix(prefix): {**info["spec"], "kernel": name,
                                        "resource_dir": info["resource_dir"]}
            for name, info in sorted(KernelSpecManager().get_all_specs().items())
            if name.startswith(prefix)}


def foreign_kernel(spec: dict) -> str | None:
    """Why a kernel (of kernel_specs) would run another checkout's code, or None when it is ours:
    registered in this checkout's folder, given PYTHONPATH=this checkout, or a python inside it."""
    root = machine.project_root()
    python = os.path.abspath(spec["argv"][0]) if spec["argv"] else ""
    if (Path(spec["resource_dir"]).resolve().is_relative_to(checkout_kernels_dir().resolve())
            or spec["env"].get("PYTHONPATH") == str(root) or Path(python).is_relative_to(root)):
        return None
    return (f"kernel {spec['kernel']} ({spec['resource_dir']}) is not this checkout's: it runs "
            f"{python or 'nothing'}, which may import another clone's gpubench; run `make setup` "
            f"in {root} to register this checkout's kernels")


def probe_python(argv: list[str], env: dict | None = None, timeout: float = 120) -> dict:
    """`ARGV -m gpubench doctor --json` (outside any checkout) as a dict whose "error" says why
    it failed, or is None."""
    cmd = [*argv, "-m", "gpubench", "doctor", "--json"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=tempfile.gettempdir(), stdin=subprocess.DEVNULL)
    except OSError as exc:
        return {"error": f"{argv[0] if argv else 'an empty command'} does not run ({exc})"}
    except subprocess.TimeoutExpired:
        return {"error": f"`{shlex.join(cmd)}` gave no answer within {timeout:g} s"}
    decoder, text = json.JSONDecoder(), done.stdout  # a library may print before the JSON
    for at in [0, *(i + 1 for i, char in enumerate(text) if char == "\n")]:
        if text.startswith("{", at):
            with contextlib.suppress(ValueError):
                if isinstance(doc := decoder.raw_decode(text, at)[0], dict):
                    return {"error": None, **doc}
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    if any("No module named gpubench" in line for line in said):
        return {"error": f"gpubench is not installed in {argv[0]}; install it there "
                         f"({setup_command()})"}
    return {"error": f"`{shlex.join(cmd)}` exited with code {done.returncode} and printed no "
                     f"JSON: {' | '.join(said[-3:]) or 'no output'}"}


def probe_env(env: str, timeout: float = 120) -> dict:
    """What env's kernel Python (with the spec's env) runs: backend, versions, devices and
    checkout, through `gpubench doctor --json`; failures go in "error"."""
    kernel, spec = backends.kernel_name(env), kernel_specs().get(env)
    result = dict.fromkeys(("executable", "python", "backend", "backend_version", "tensorflow",
                            "jax", "cuda_build", "gpubench", "checkout", "diagnosis", "error"))
    result.update(kernel=kernel, env=env, devices=[], gpus=[])
    if spec is None:
        result["error"] = f"no Jupyter kernel named {kernel!r}; create it with {setup_command(env)}"
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


def _problems(info: dict) -> list[str]:
    """The warnings under the `gpubench envs` table for one probed kernel."""
    if info["error"]:
        return [f"ERROR: {info['kernel']}: {info['error']}"]
    warning, lines = f"WARNING: {info['kernel']}: ", []
    expected = backends.env_backend(info["env"])
    if info["backend"] and info["backend"] != expected:
        lines.append(warning + f"runs Keras on {info['backend']}, not {expected}; register it "
                     f"again with {setup_command(info['env'])}")
    if backends.is_gpu_env(info["env"]) and not info["gpus"]:
        lines.append(warning + f"GPU env, but {info['backend'] or expected} sees no GPU: "
                     f"{(info['diagnosis'] or '').strip() or 'run `gpubench doctor` in that env'} "
                     f"(`{info['executable']} -m gpubench doctor`)")
    ours, root = machine.checkout(), machine.project_root()
    if info["checkout"] and Path(info["checkout"]) != root:
        lines.append(warning + f"runs the gpubench of {info['checkout']}, not this one ({root}); "
                     + (f"run `make setup` in {ours}" if ours else
                        "`gpubench run --here` runs in this Python instead"))
    return lines


def envs_report() -> str:
    """The `gpubench envs` table of the gpubench-* kernels (backend, its version, GPUs, Python
    and the checkout each runs), then the fix for each missing or broken env."""
    specs = kernel_specs()
    probes = [probe_env(env) for env in specs]
    ours = machine.checkout()
    where = f"this checkout: {ours}" if ours else f"gpubench installed in {machine.project_root()}"
    lines = [f"gpubench environments (Jupyter kernels named {backends.kernel_name('ENV')}; "
             f"{where}):", ""]
    rows = [["env", "kernel", "backend", "version", "GPU", "python", "checkout (gpubench it runs)"]]
    rows += [[info["env"], info["kernel"], info["backend"] or "-", info["backend_version"] or "-",
              f"GPU: yes ({', '.join(info['gpus'])})" if info["gpus"] else
              "GPU: unknown" if info["error"] else "GPU: no",
              info["executable"] or "-", info["checkout"] or "-"] for info in probes]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip() for row in rows] if probes else ["no gpubench kernels are registered"]
    notes, smi = [], machine.nvidia_smi_gpus()
    for env in (e for e in backends.ENVS if e not in specs):
        backend = backends.env_backend(env)
        optional = (f" (optional: Keras on {backends.backend_title(backend)})"
                    if backend != "tensorflow" else "")
        notes.append(f"{env}: not set up{optional} (no kernel {backends.kernel_name(env)}); " + (
            "this machine has no NVIDIA GPU (nvidia-smi not found or lists none)"
            if backends.is_gpu_env(env) and not smi else f"create it with {setup_command(env)}"))
    for info in probes:
        notes += _problems(info)
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"
