"""Create the CPU and GPU environments, register their Jupyter kernels, and list them.

Env NAME runs in the Jupyter kernel "gpubench-NAME" (cpu -> gpubench-cpu,
gpu -> gpubench-gpu); with conda the conda env has the kernel's name. With
mamba, conda or micromamba on PATH the envs come from environment-NAME.yml;
without, from venvs (.venv, .venv-gpu) and pip. Kernels are registered with
`--user`, so every Jupyter (JupyterLab, papermill) finds them.

This module runs from a bare `python3 -m gpubench setup` before anything is
installed: it imports only the standard library at module level.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import string
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpubench import devices  # stdlib-only at import; TensorFlow loads on first use

KERNEL_PREFIX = "gpubench-"
STANDARD_ENVS = ("cpu", "gpu")
CONDA_TOOLS = ("mamba", "conda", "micromamba")
STAMP_NAME = ".gpubench-installed"
VENV_DIRS = {"cpu": ".venv", "gpu": ".venv-gpu"}
CONDA_PYTHON = (3, 11)  # python=3.11 in the yml files
# Pythons a venv can use: TensorFlow 2.21 and numpy 2.4 both have wheels for them
# (requires-python in pyproject.toml).
VENV_PYTHONS = ((3, 11), (3, 12), (3, 13))
SETUP_COMMANDS = {
    "cpu": "`make setup` (or `gpubench setup`)",
    "gpu": "`make setup GPU=1` (or `gpubench setup --gpu`)",
}

# Printed by the kernel's own Python in `probe`; its last stdout line is the JSON report.
_PROBE_SCRIPT = """\
import json, platform, sys
sys.path = [p for p in sys.path if p not in ("", ".")]  # only what the kernel itself can import
out = {"python": platform.python_version(), "executable": sys.executable, "tensorflow": None,
       "cuda_build": None, "gpus": [], "gpubench": None, "error": None}
try:
    import tensorflow as tf
    out["tensorflow"] = tf.__version__
    out["cuda_build"] = bool(tf.test.is_built_with_cuda())
    out["gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
except Exception as exc:
    out["error"] = "TensorFlow does not import: %s: %s" % (type(exc).__name__, exc)
try:
    import gpubench
    out["gpubench"] = gpubench.__version__
except Exception:
    pass
print(json.dumps(out))
"""


class EnvError(RuntimeError):
    """An environment or kernel problem; the message says what to do."""


def kernel_name(env: str) -> str:
    """The Jupyter kernel of env `env` ("cpu" -> "gpubench-cpu")."""
    return KERNEL_PREFIX + env


def env_name(kernel: str) -> str:
    """The env of Jupyter kernel `kernel` ("gpubench-cpu" -> "cpu")."""
    if not kernel.startswith(KERNEL_PREFIX):
        raise EnvError(
            f"kernel {kernel!r} is not a gpubench kernel; use a name of the form {KERNEL_PREFIX}ENV"
        )
    return kernel[len(KERNEL_PREFIX):]


def project_root() -> Path:
    """The folder holding pyproject.toml and the environment-*.yml files."""
    return Path(__file__).resolve().parent.parent


def find_conda() -> str | None:
    """Path of mamba, conda or micromamba (in that order), or None to use venvs.

    The env var GPUBENCH_CONDA picks the tool (a command name or path);
    GPUBENCH_CONDA=none forces venvs.
    """
    choice = os.environ.get("GPUBENCH_CONDA", "").strip()
    if choice.lower() == "none":
        return None
    if choice:
        found = shutil.which(choice)
        if found is None:
            raise EnvError(
                f"GPUBENCH_CONDA={choice!r} is not a command on PATH; set it to mamba, conda, "
                "micromamba or the full path of one, or to none to use venvs"
            )
        return found
    for tool in CONDA_TOOLS:
        found = shutil.which(tool)
        if found is not None:
            return found
    return None


def gpu_requested(gpu: bool) -> bool:
    """Whether setup builds the GPU env: asked for, or `nvidia-smi -L` lists a GPU."""
    return bool(gpu) or bool(devices.nvidia_smi_gpus())


def _is_micromamba(conda: str) -> bool:
    """Whether `conda` is micromamba (whose create/update/run spelling differs)."""
    return Path(conda).name.lower().startswith("micromamba")


def _venv_python(venv: Path) -> Path:
    """The python of a venv: bin/python, or Scripts/python.exe on Windows."""
    if os.name == "nt":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def _conda_python(prefix: str) -> Path:
    """The python of a conda env: bin/python, or python.exe at the prefix on Windows."""
    if os.name == "nt":
        return Path(prefix) / "python.exe"
    return Path(prefix) / "bin" / "python"


def _conda_env() -> dict[str, str]:
    """os.environ for conda commands, answering yes to any prompt (mamba 2 asks before creating)."""
    return {**os.environ, "CONDA_ALWAYS_YES": "true", "MAMBA_ALWAYS_YES": "true"}


def conda_envs(conda: str) -> dict[str, str]:
    """Conda env name -> prefix, from `<conda> env list --json`."""
    cmd = [conda, "env", "list", "--json"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_conda_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"`{shlex.join(cmd)}` did not run ({exc}); check that {conda} works") from exc
    if out.returncode != 0:
        raise EnvError(
            f"`{shlex.join(cmd)}` failed with exit code {out.returncode}: {out.stderr.strip()[-500:]}\n"
            f"Check that {conda} works, or set GPUBENCH_CONDA=none to use venvs instead"
        )
    try:
        prefixes = json.loads(out.stdout)["envs"]
    except (ValueError, KeyError, TypeError) as exc:
        raise EnvError(
            f"`{shlex.join(cmd)}` printed no JSON with an \"envs\" list: {out.stdout.strip()[:300]!r}; "
            f"update {conda}, or set GPUBENCH_CONDA=none to use venvs instead"
        ) from exc
    return {Path(prefix).name: prefix for prefix in prefixes}


def _display_name(kernel: str, version: tuple[int, int]) -> str:
    """The kernel's name in Jupyter's launcher: "Python 3.11 (gpubench-cpu)"."""
    return f"Python {version[0]}.{version[1]} ({kernel})"


def _run(
    cmd: list[str], step: str, hint: str, *, cwd: Path, echo: Callable, env: dict | None = None
) -> bool:
    """Print and run one setup step with its output streaming; on failure say which step and what to do."""
    echo("$ " + shlex.join(cmd))
    sys.stdout.flush()  # keep our lines in order with the child's when output is piped
    try:
        code = subprocess.run(cmd, cwd=cwd, env=env).returncode
    except OSError as exc:
        echo(f"\nsetup failed at step: {step}\n{cmd[0]} could not run: {exc}\n{hint}")
        return False
    if code != 0:
        echo(f"\nsetup failed at step: {step} (exit code {code})\n{hint}")
        return False
    return True


def _conda_create_cmd(conda: str, env: str, yml: str, exists: bool) -> list[str]:
    """The command that creates conda env `env` from `yml`, or updates it when it exists."""
    if _is_micromamba(conda):
        if exists:
            return [conda, "update", "-y", "-n", env, "-f", yml]
        return [conda, "create", "-y", "-f", yml]
    if exists:
        return [conda, "env", "update", "-n", env, "-f", yml, "--prune"]
    return [conda, "env", "create", "-f", yml]


def _setup_conda_env(conda: str, name: str, root: Path, echo: Callable) -> bool:
    """Create or update the conda env of `name` from its yml file, then register its kernel."""
    kernel = kernel_name(name)
    yml = f"environment-{name}.yml"
    if not (root / yml).is_file():
        echo(f"\nsetup failed: {root / yml} is missing; restore it (git checkout {yml}) and run setup again")
        return False
    echo("$ " + shlex.join([conda, "env", "list", "--json"]))
    try:
        exists = kernel in conda_envs(conda)
    except EnvError as exc:
        echo(f"\nsetup failed at step: list the conda envs\n{exc}")
        return False
    action = "update" if exists else "create"
    ok = _run(
        _conda_create_cmd(conda, kernel, yml, exists),
        f"{action} conda env {kernel} from {yml}",
        f"Read the output above and fix its cause (network, disk space, a package conflict), then run "
        f"setup again. To start from scratch: `{shlex.join([conda, 'env', 'remove', '-y', '-n', kernel])}`.",
        cwd=root, echo=echo, env=_conda_env(),
    )
    if not ok:
        return False
    register = [
        conda, "run", "-n", kernel, "python", "-m", "ipykernel", "install", "--user",
        "--name", kernel, "--display-name", _display_name(kernel, CONDA_PYTHON),
    ]
    check = [conda, "run", "-n", kernel, "python", "-m", "ipykernel", "--version"]
    return _run(
        register,
        f"register the Jupyter kernel {kernel}",
        f"ipykernel comes from {yml}; check `{shlex.join(check)}`, then run setup again.",
        cwd=root, echo=echo, env=_conda_env(),
    )


def _pyproject_digest(root: Path) -> str:
    """sha256 of pyproject.toml: the stamp that says a venv's pip install is current."""
    return hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()


def _stamp_matches(stamp: Path, digest: str) -> bool:
    """Whether the stamp file holds `digest`."""
    try:
        return stamp.read_text().strip() == digest
    except OSError:
        return False


def _create_venv(root: Path, dirname: str, echo: Callable) -> bool:
    """Make the venv `dirname` at root with this Python; remove a half-made one on failure."""
    if sys.version_info[:2] not in VENV_PYTHONS:
        want = ", ".join(".".join(map(str, v)) for v in VENV_PYTHONS)
        echo(
            f"\nsetup failed: the venv needs Python {want} (TensorFlow 2.21 and numpy 2.4), but this is "
            f"Python {sys.version.split()[0]} at {sys.executable}.\nRun `python3.11 -m gpubench setup`, "
            "or install conda/micromamba (its envs bring their own Python)."
        )
        return False
    venv = root / dirname
    existed = venv.exists()
    ok = _run(
        [sys.executable, "-m", "venv", dirname],
        f"create the venv {dirname}",
        "If the output above says ensurepip is not available: `sudo apt install python3-venv` "
        "(Debian/Ubuntu), or install conda/micromamba; then run setup again.",
        cwd=root, echo=echo,
    )
    if not ok and not existed:
        shutil.rmtree(venv, ignore_errors=True)
    return ok


def _setup_venv(name: str, root: Path, echo: Callable) -> bool:
    """Make the venv of `name`, pip install gpubench with its extra (unless stamped), register its kernel."""
    dirname = VENV_DIRS[name]
    kernel = kernel_name(name)
    python = _venv_python(root / dirname)
    if not python.exists() and not _create_venv(root, dirname, echo):
        return False
    stamp = root / dirname / STAMP_NAME
    digest = _pyproject_digest(root)
    spec = f".[{name},test]"
    if _stamp_matches(stamp, digest):
        echo(f"{dirname}: gpubench{spec[1:]} is installed for this pyproject.toml; skipping pip")
    else:
        ok = _run(
            [str(python), "-m", "pip", "install", "-e", spec],
            f"pip install gpubench{spec[1:]} into {dirname}",
            "Read pip's output above and fix its cause (network, disk space; the gpu extra needs Linux or "
            f"WSL2), then run setup again. To start from scratch: delete {dirname} and run setup again.",
            cwd=root, echo=echo,
        )
        if not ok:
            return False
        stamp.write_text(digest + "\n")
    return _run(
        [str(python), "-m", "ipykernel", "install", "--user", "--name", kernel,
         "--display-name", _display_name(kernel, sys.version_info[:2])],
        f"register the Jupyter kernel {kernel}",
        f"ipykernel comes with gpubench's dependencies; check `{python} -m ipykernel --version`, "
        f"or delete {dirname} and run setup again.",
        cwd=root, echo=echo,
    )


def setup(gpu: bool = False, *, root: Path | None = None, echo: Callable = print) -> int:
    """Create the cpu env (and gpu env if asked or a GPU is found), register their kernels; 0 ok, 1 failed."""
    root = Path(root) if root is not None else project_root()
    try:
        conda = find_conda()
    except EnvError as exc:
        echo(f"setup failed: {exc}")
        return 1
    names = ["cpu", "gpu"] if gpu_requested(gpu) else ["cpu"]
    if conda:
        echo(f"gpubench setup: conda envs with {conda} (GPUBENCH_CONDA=none uses venvs instead)")
    else:
        echo("gpubench setup: no mamba, conda or micromamba on PATH; using venvs and pip")
    if "gpu" in names:
        echo("GPU env: yes (" + ("asked for" if gpu else "nvidia-smi lists a GPU") + ")")
    else:
        echo("GPU env: no (nvidia-smi lists no GPU); `make setup GPU=1` builds it anyway")
    for name in names:
        ok = _setup_conda_env(conda, name, root, echo) if conda else _setup_venv(name, root, echo)
        if not ok:
            return 1
    echo("\nKernels registered: " + ", ".join(kernel_name(name) for name in names))
    echo("Next: `make run` runs the benchmarks (`make lab` to step through the notebooks).")
    return 0


def driver_python(root: Path | None = None) -> str:
    """The python that runs gpubench's own commands: the gpubench-cpu env's, or .venv's."""
    root = Path(root) if root is not None else project_root()
    conda = find_conda()
    if conda is None:
        return str(_venv_python(root / VENV_DIRS["cpu"]))
    prefix = conda_envs(conda).get(kernel_name("cpu"))
    if prefix is None:
        raise EnvError(
            f"{conda} has no env {kernel_name('cpu')}; create it with `make setup` (or `gpubench setup`)"
        )
    return str(_conda_python(prefix))


def kernel_specs() -> dict[str, dict]:
    """Installed gpubench-* kernelspecs: name -> {argv, env, display_name, resource_dir}."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager  # noqa: PLC0415 - not in bare python3
    except ImportError as exc:
        raise EnvError(
            f"jupyter_client is not installed in {sys.executable}; run this with the gpubench env's "
            "python (`make envs`, or `python3 -m gpubench envs --driver` names it), or `make setup` first"
        ) from exc
    specs = {}
    for name, info in sorted(KernelSpecManager().get_all_specs().items()):
        if not name.startswith(KERNEL_PREFIX):
            continue
        spec = info["spec"]
        specs[name] = {
            "argv": list(spec.get("argv") or []),
            "env": dict(spec.get("env") or {}),
            "display_name": spec.get("display_name", name),
            "resource_dir": info["resource_dir"],
        }
    return specs


def kernel_exists(name: str) -> bool:
    """Whether a Jupyter kernel named `name` is installed (gpubench-* kernels only)."""
    return name in kernel_specs()


def kernel_environ(spec: dict) -> dict[str, str]:
    """os.environ with the kernelspec's env merged in (${VAR} expanded, as Jupyter does)."""
    env = dict(os.environ)
    for key, value in spec["env"].items():
        env[key] = string.Template(str(value)).safe_substitute(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def _last_json_line(text: str) -> dict | None:
    """The last line of `text` that parses as a JSON object, or None."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def probe(kernel_name: str, timeout: float = 120) -> dict:
    """Ask a kernel's own Python for its Python, TensorFlow and GPUs; failures go in "error"."""
    result = {
        "kernel": kernel_name, "env": kernel_name.removeprefix(KERNEL_PREFIX), "python": None,
        "executable": None, "tensorflow": None, "cuda_build": None, "gpus": [], "gpubench": None,
        "error": None,
    }
    spec = kernel_specs().get(kernel_name)
    if spec is None:
        result["error"] = f"no Jupyter kernel named {kernel_name!r}; `make setup` registers gpubench-cpu"
        return result
    if not spec["argv"]:
        result["error"] = f"its kernel.json in {spec['resource_dir']} has an empty argv"
        return result
    env = kernel_environ(spec)
    exe = shutil.which(spec["argv"][0], path=env.get("PATH")) or spec["argv"][0]
    result["executable"] = exe
    if not Path(exe).is_file():
        result["error"] = (
            f"its python {exe} does not exist (argv[0] of "
            f"{Path(spec['resource_dir']) / 'kernel.json'}); re-create the env with `make setup`, "
            f"or remove the kernel with `jupyter kernelspec remove {kernel_name}`"
        )
        return result
    try:
        out = subprocess.run(
            [exe, "-c", _PROBE_SCRIPT], capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        result["error"] = f"{exe} gave no answer within {timeout:g} s"
        return result
    except OSError as exc:
        result["error"] = f"{exe} does not run: {exc}"
        return result
    report = _last_json_line(out.stdout)
    if report is None:
        tail = " | ".join(out.stderr.strip().splitlines()[-5:]) or "no output"
        result["error"] = f"{exe} exited with code {out.returncode} without a report: {tail}"
        return result
    result.update({key: report.get(key) for key in
                   ("python", "executable", "tensorflow", "cuda_build", "gpubench", "error")})
    result["gpus"] = list(report.get("gpus") or [])
    return result


def is_gpu_env(env: str) -> bool:
    """Whether env `env` is meant to use a GPU ("gpu" and variants "gpu-...")."""
    return env == "gpu" or env.startswith("gpu-")


def _gpu_cell(info: dict) -> str:
    """The GPU column of the report: "GPU: yes (GPU:0)", "GPU: no" or "GPU: unknown"."""
    if info["gpus"]:
        names = ", ".join(name.removeprefix("/physical_device:") for name in info["gpus"])
        return f"GPU: yes ({names})"
    if info["tensorflow"] is None:
        return "GPU: unknown"
    return "GPU: no"


def _table(rows: list[list[str]]) -> list[str]:
    """Rows as left-aligned columns, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def _problems(info: dict) -> list[str]:
    """The warnings the report prints under the table for one probed kernel."""
    if info["error"]:
        return [f"ERROR: {info['kernel']}: {info['error']}"]
    lines = []
    if is_gpu_env(info["env"]) and not info["gpus"]:
        lines.append(
            f"WARNING: {info['kernel']}: GPU env, but TensorFlow sees no GPU: run `gpubench doctor` "
            f"in that env (`{info['executable']} -m gpubench doctor`)"
        )
    if info["gpubench"] is None:
        lines.append(
            f"WARNING: {info['kernel']}: gpubench does not import in this kernel, so the notebooks "
            "will fail there; run `make setup` (it installs gpubench into the env)"
        )
    return lines


def envs_report() -> str:
    """A plain-text table of the gpubench-* kernels, with the fix for each missing or broken env."""
    specs = kernel_specs()
    with ThreadPoolExecutor(max_workers=4) as pool:
        probes = list(pool.map(probe, sorted(specs)))
    lines = ["gpubench environments (Jupyter kernels named gpubench-ENV):", ""]
    if probes:
        rows = [["env", "kernel", "TensorFlow", "GPU", "python"]]
        for info in probes:
            rows.append([
                info["env"], info["kernel"], info["tensorflow"] or "-", _gpu_cell(info),
                info["executable"] or "-",
            ])
        lines += _table(rows)
    else:
        lines.append("no gpubench kernels are registered")
    notes = []
    for env in STANDARD_ENVS:
        if kernel_name(env) not in specs:
            kernel = kernel_name(env)
            notes.append(f"{env}: not set up (no kernel {kernel}); create it with {SETUP_COMMANDS[env]}")
    for info in probes:
        notes += _problems(info)
    if notes:
        lines += [""] + notes
    return "\n".join(lines) + "\n"
