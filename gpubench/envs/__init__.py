"""The envs, one per Keras backend and device (`backends.ENVS`), each run in Jupyter kernel
gpubench-ENV: what a name means, the kernels, what each one's Python runs, the `gpubench envs`
report (`create` makes them). Stdlib-only at import: a bare `python3 -m gpubench setup` runs."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shlex
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

from gpubench import backends, machine  # stdlib-only at import

EXTRAS = {env: env.removesuffix("-cpu") for env in backends.ENVS}  # pyproject.toml's extras


class EnvError(RuntimeError):
    """An environment or kernel problem; the message says what to do."""


def display_name(env: str) -> str:
    """The kernel's display name: the same in every checkout and Python, as notebooks store it."""
    return f"Python 3 ({backends.kernel_name(env)})"


def install_source() -> str:
    """Where pip installed gpubench from (PEP 610's direct_url.json), else "gpubench"."""
    for dist in importlib.metadata.distributions(name="gpubench"):  # a build's egg-info has none
        with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
            url = json.loads(dist.read_text("direct_url.json"))["url"]
            path = urllib.parse.unquote(urllib.parse.urlparse(url).path)
            if url.startswith("file:") and Path(path).exists():
                return path
    return "gpubench"


def pip_install(extra: str) -> str:
    """`pip install 'SOURCE[extra]'`: gpubench with `extra`, from where it was installed from."""
    return f"pip install '{install_source()}[{extra}]'"


def setup_command(env: str = "cpu") -> str:
    """The command that makes env `env`: `make setup ...` in a checkout, else pip and --here."""
    backend, gpu = backends.env_backend(env), backends.is_gpu_env(env)
    more = "" if backend == "tensorflow" else f"tensorflow,{backend}"
    if machine.checkout() is not None:
        make = "make setup" + (" GPU=1" if gpu else "") + (f" BACKENDS={more}" if more else "")
        cli = "gpubench setup" + (" --gpu" if gpu else "") + (f" --backends {more}" if more else "")
        return f"`{make}` (or `{cli}`)"
    chosen = "" if backend == "tensorflow" else f"KERAS_BACKEND={backend} "
    own = " in a Python of its own" if gpu else ""
    return (f"`{pip_install(EXTRAS.get(env, 'cpu'))}`{own}, then `{chosen}gpubench run --here` "
            "in that Python")


def checkout_kernels_dir(root: Path | None = None) -> Path:
    """This checkout's own Jupyter data folder (its kernels/ holds this checkout's kernels)."""
    return (Path(root) if root is not None else machine.project_root()) / ".jupyter"


def use_checkout_kernels() -> None:
    """Put this checkout's kernels first on JUPYTER_PATH (in os.environ), ahead of --user ones."""
    first = str(checkout_kernels_dir())
    rest = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p and p != first]
    os.environ["JUPYTER_PATH"] = os.pathsep.join([first, *rest])


def kernel_specs(prefix: str | None = None) -> dict[str, dict]:
    """Kernels named `prefix`... (gpubench-) by the rest: kernel.json, "kernel", "resource_dir"."""
    prefix = backends.kernel_name("") if prefix is None else prefix
    try:
        from jupyter_client.kernelspec import KernelSpecManager  # noqa: PLC0415 - not in bare python3
    except ImportError as exc:
        raise EnvError(f"jupyter_client is not installed in {sys.executable}; run this with the "
                       "gpubench env's python (`python3 -m gpubench envs --driver` prints it), or "
                       f"create that env first with {setup_command()}") from exc
    return {name.removeprefix(prefix): {**info["spec"], "kernel": name,
                                        "resource_dir": info["resource_dir"]}
            for name, info in sorted(KernelSpecManager().get_all_specs().items())
            if name.startswith(prefix)}


def foreign_kernel(spec: dict) -> str | None:
    """Why a kernel (of kernel_specs) would run another checkout's gpubench; None if ours."""
    root = machine.project_root()
    python = os.path.abspath(spec["argv"][0]) if spec["argv"] else ""
    if (Path(spec["resource_dir"]).resolve().is_relative_to(checkout_kernels_dir().resolve())
            or spec["env"].get("PYTHONPATH") == str(root) or Path(python).is_relative_to(root)):
        return None
    return (f"kernel {spec['kernel']} ({spec['resource_dir']}) is not this checkout's: it runs "
            f"{python or 'nothing'}, which may import another clone's gpubench; run `make setup` "
            f"in {root} to register this checkout's kernels")


def probe_python(argv: list[str], env: dict | None = None, timeout: float = 120) -> dict:
    """`ARGV -m gpubench doctor --json`, run outside any checkout; "error" says why it failed."""
    cmd = [*argv, "-m", "gpubench", "doctor", "--json"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=tempfile.gettempdir(), stdin=subprocess.DEVNULL)
    except OSError as exc:
        return {"error": f"{argv[0] if argv else 'an empty command'} does not run ({exc})"}
    except subprocess.TimeoutExpired:
        return {"error": f"`{shlex.join(cmd)}` gave no answer within {timeout:g} s"}
    for line in done.stdout.splitlines():  # its one line; a library may print before it
        with contextlib.suppress(ValueError):
            if isinstance(doc := json.loads(line), dict):
                return {"error": None, **doc}
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    if any("No module named gpubench" in line for line in said):
        return {"error": f"gpubench is not installed in {argv[0]}; install it there "
                         f"({setup_command()})"}
    return {"error": f"`{shlex.join(cmd)}` exited with code {done.returncode} and printed no "
                     f"JSON: {' | '.join(said[-3:]) or 'no output'}"}


def probe_env(env: str, timeout: float = 120) -> dict:
    """probe_python of env's kernel, with "kernel", "env", "executable", "devices", "gpus"."""
    kernel, spec = backends.kernel_name(env), kernel_specs().get(env)
    found = {"kernel": kernel, "env": env, "executable": None, "devices": [], "gpus": []}
    if spec is None:
        return {**found, "error": f"no Jupyter kernel named {kernel!r}; create it with "
                                  f"{setup_command(env)}"}
    argv = spec["argv"][:spec["argv"].index("-m")] if "-m" in spec["argv"] else spec["argv"][:1]
    found["executable"] = argv[0] if argv else None
    info = probe_python(argv, env={**os.environ, **spec["env"]}, timeout=timeout)
    if info["error"]:
        return {**found, "error": f"its Python does not run gpubench: {info['error']}. Re-create "
                f"the env with {setup_command(env)}, or remove it with `jupyter kernelspec "
                f"remove {kernel}` (its spec: {spec['resource_dir']}/kernel.json)"}
    devices = [str(d) for d in info.get("devices") or []]
    return {**info, **found, "devices": devices, "gpus": [d for d in devices if d[:3] == "gpu"],
            "backend_version": info.get("backend_version") or info.get(str(info.get("backend")))}


def envs_report() -> str:
    """The `gpubench envs` table of the gpubench kernels, then how to fix each missing one."""
    specs = kernel_specs()
    probes = [probe_env(env) for env in specs]
    ours = machine.checkout()
    where = f"this checkout: {ours}" if ours else f"gpubench installed in {machine.project_root()}"
    lines = [f"gpubench environments (Jupyter kernels named {backends.kernel_name('ENV')}; "
             f"{where}):", ""]
    rows = [["env", "kernel", "backend", "version", "GPU", "python", "checkout (gpubench it runs)"]]
    rows += [[info["env"], info["kernel"], info.get("backend") or "-",
              info.get("backend_version") or "-",
              f"GPU: yes ({', '.join(info['gpus'])})" if info["gpus"] else
              "GPU: unknown" if info["error"] else "GPU: no",
              info["executable"] or "-", info.get("checkout") or "-"] for info in probes]
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
        if info["error"]:
            notes.append(f"ERROR: {info['kernel']}: {info['error']}")
            continue
        warning, expected = f"WARNING: {info['kernel']}: ", backends.env_backend(info["env"])
        if (backend := info.get("backend")) and backend != expected:
            notes.append(warning + f"runs Keras on {backend}, not {expected}; register it "
                         f"again with {setup_command(info['env'])}")
        if backends.is_gpu_env(info["env"]) and not info["gpus"]:
            why = (info.get("diagnosis") or "").strip() or "run `gpubench doctor` in that env"
            notes.append(warning + f"GPU env, but {backend or expected} sees no GPU: {why} "
                         f"(`{info['executable']} -m gpubench doctor`)")
        if (theirs := info.get("checkout")) and Path(theirs) != machine.project_root():
            fix = (f"run `make setup` in {ours}" if ours
                   else "`gpubench run --here` runs in this Python instead")
            notes.append(warning + f"runs the gpubench of {theirs}, not this one "
                         f"({machine.project_root()}); {fix}")
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"
