"""The `gpubench envs` report: a table of the gpubench-* kernels (backend, its version, GPUs,
Python and the checkout each runs), with the fix for each missing or broken env."""

from __future__ import annotations

from pathlib import Path

from gpubench import machine  # stdlib-only at import
from gpubench.backends import BACKEND_TITLES
from gpubench.envs import kernels, probing
from gpubench.envs.names import ENVS, env_backend, is_gpu_env, kernel_name, setup_command


def _gpu_cell(info: dict) -> str:
    """The GPU column of the report: "GPU: yes (gpu:0)", "GPU: no" or "GPU: unknown"."""
    if info["gpus"]:
        return f"GPU: yes ({', '.join(info['gpus'])})"
    return "GPU: unknown" if info["error"] else "GPU: no"


def _table(rows: list[list[str]]) -> list[str]:
    """Rows as left-aligned columns, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def _problems(info: dict) -> list[str]:
    """The warnings the report prints under the table for one probed kernel."""
    if info["error"]:
        return [f"ERROR: {info['kernel']}: {info['error']}"]
    warning, lines = f"WARNING: {info['kernel']}: ", []
    expected = env_backend(info["env"])
    if info["backend"] and info["backend"] != expected:
        lines.append(warning + f"runs Keras on {info['backend']}, not {expected}; register it "
                     f"again with {setup_command(info['env'])}")
    if is_gpu_env(info["env"]) and not info["gpus"]:
        lines.append(warning + f"GPU env, but {info['backend'] or expected} sees no GPU: "
                     f"{(info['diagnosis'] or '').strip() or 'run `gpubench doctor` in that env'} "
                     f"(`{info['executable']} -m gpubench doctor`)")
    ours = machine.checkout()
    if ours and info["checkout"] and Path(info["checkout"]) != ours:
        lines.append(warning + f"runs the gpubench of {info['checkout']}, not of this checkout; "
                     f"run `make setup` in {ours}")
    return lines


def envs_report() -> str:
    """A plain-text table of the gpubench-* kernels (backend, its version, GPUs, Python and the
    checkout each runs), with the fix for each missing or broken env."""
    specs = kernels.kernel_specs()
    probes = [probing.probe_env(env) for env in specs]
    ours = machine.checkout()
    where = f"this checkout: {ours}" if ours else f"gpubench installed in {machine.project_root()}"
    lines = [f"gpubench environments (Jupyter kernels named {kernel_name('ENV')}; {where}):", ""]
    if probes:
        rows = [["env", "kernel", "backend", "version", "GPU", "python",
                 "checkout (gpubench it runs)"]]
        rows += [[info["env"], info["kernel"], info["backend"] or "-",
                  info["backend_version"] or "-", _gpu_cell(info), info["executable"] or "-",
                  info["checkout"] or "-"] for info in probes]
        lines += _table(rows)
    else:
        lines.append("no gpubench kernels are registered")
    notes = []
    smi = machine.nvidia_smi_gpus()
    for env in ENVS:
        if env in specs:
            continue
        backend = env_backend(env)
        optional = (f" (optional: Keras on {BACKEND_TITLES[backend]})"
                    if backend != "tensorflow" else "")
        notes.append(f"{env}: not set up{optional} (no kernel {kernel_name(env)}); " + (
            "this machine has no NVIDIA GPU (nvidia-smi not found or lists none)"
            if is_gpu_env(env) and not smi else f"create it with {setup_command(env)}"))
    for info in probes:
        notes += _problems(info)
    if notes:
        lines += [""] + notes
    return "\n".join(lines) + "\n"
