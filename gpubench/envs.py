"""Create the CPU and GPU environments, register their Jupyter kernels, and list them.

Env NAME runs in kernel "gpubench-NAME": a conda env of that name from environment-NAME.yml
when mamba, conda or micromamba is on PATH, else a venv (.venv, .venv-gpu). Each kernel is
registered in this checkout's .jupyter (with PYTHONPATH=CHECKOUT; `gpubench run`, `make lab`
and `make test` put it first on JUPYTER_PATH) and with --user, for Jupyter started by hand.
Stdlib-only at import: a bare `python3 -m gpubench setup` runs it before anything is installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: gpubench runs in WSL2 there; no locks
    fcntl = None

from gpubench import devices  # stdlib-only at import; TensorFlow loads on first use

KERNEL_PREFIX = "gpubench-"
STANDARD_ENVS = ("cpu", "gpu")
CONDA_TOOLS = ("mamba", "conda", "micromamba")
VENV_DIRS = {"cpu": ".venv", "gpu": ".venv-gpu"}
CONDA_PYTHON = (3, 11)  # python=3.11 in the yml files
# Pythons a venv can use: TensorFlow 2.21 and numpy 2.4 both have wheels for them
# (requires-python in pyproject.toml).
VENV_PYTHONS = ((3, 11), (3, 12), (3, 13))
SETUP_COMMANDS = {
    "cpu": "`make setup` (or `gpubench setup`)",
    "gpu": "`make setup GPU=1` (or `gpubench setup --gpu`)",
}

# Run in the kernel itself by `probe`; its last stdout line is the JSON report.
_PROBE_SCRIPT = """\
import json, os, platform, sys
sys.path = [p for p in sys.path if p not in ("", ".")]  # only what the kernel itself can import
out = {"python": platform.python_version(), "executable": sys.executable}
try:
    import tensorflow as tf
    out.update(tensorflow=tf.__version__, cuda_build=bool(tf.test.is_built_with_cuda()),
               gpus=[d.name for d in tf.config.list_physical_devices("GPU")])
except Exception as exc:
    out["error"] = "TensorFlow does not import: %s: %s" % (type(exc).__name__, exc)
try:
    import gpubench
    out["gpubench"] = gpubench.__version__
    out["checkout"] = os.path.dirname(os.path.dirname(os.path.abspath(gpubench.__file__)))
    if "tensorflow" in out and not out["gpus"]:
        from gpubench import devices
        out["diagnosis"] = devices.diagnose()
except Exception:
    pass
print(json.dumps(out))
"""


class EnvError(RuntimeError):
    """An environment or kernel problem; the message says what to do."""


def kernel_name(env: str) -> str:
    """The Jupyter kernel of env `env` ("cpu" -> "gpubench-cpu")."""
    return KERNEL_PREFIX + env


def project_root() -> Path:
    """The folder holding pyproject.toml and the environment-*.yml files."""
    return Path(__file__).resolve().parent.parent


def checkout_kernels_dir(root: Path | None = None) -> Path:
    """This checkout's own Jupyter data folder; its kernels/ holds the kernels of this checkout."""
    return (Path(root) if root is not None else project_root()) / ".jupyter"


def use_checkout_kernels() -> None:
    """Put this checkout's kernels first on JUPYTER_PATH (in os.environ), ahead of --user ones."""
    first = str(checkout_kernels_dir())
    rest = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p and p != first]
    os.environ["JUPYTER_PATH"] = os.pathsep.join([first, *rest])


@contextlib.contextmanager
def locked(path: Path, *, wait: bool = True) -> Iterator[int]:
    """Hold an exclusive flock on `path` (the OS drops it if we die); wait=False: BlockingIOError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def find_conda() -> str | None:
    """Path of mamba, conda or micromamba, or None for venvs; GPUBENCH_CONDA=TOOL|PATH|none decides."""
    choice = os.environ.get("GPUBENCH_CONDA", "").strip()
    if choice.lower() == "none":
        return None
    found = next(filter(None, map(shutil.which, [choice] if choice else CONDA_TOOLS)), None)
    if choice and found is None:
        raise EnvError(f"GPUBENCH_CONDA={choice!r} is not a command on PATH; set it to mamba, "
                       "conda, micromamba or the full path of one, or to none to use venvs")
    return found


def gpu_requested(gpu: bool) -> bool:
    """Whether setup builds the GPU env: asked for, or `nvidia-smi -L` lists a GPU."""
    return bool(gpu) or bool(devices.nvidia_smi_gpus())


def _venv_python(venv: Path) -> Path:
    """The python of a venv: bin/python, or Scripts/python.exe on Windows."""
    return venv / "Scripts" / "python.exe" if os.name == "nt" else venv / "bin" / "python"


def _conda_python(prefix: str) -> Path:
    """The python of a conda env: bin/python, or python.exe at the prefix on Windows."""
    return Path(prefix) / ("python.exe" if os.name == "nt" else "bin/python")


def _conda_env() -> dict[str, str]:
    """os.environ for conda commands, answering yes to any prompt (mamba 2 asks before creating)."""
    return {**os.environ, "CONDA_ALWAYS_YES": "true", "MAMBA_ALWAYS_YES": "true"}


def conda_envs(conda: str) -> dict[str, str]:
    """Conda env name -> prefix, from `<conda> env list --json`."""
    cmd = [conda, "env", "list", "--json"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_conda_env(),
                             check=True)
        return {Path(prefix).name: prefix for prefix in json.loads(out.stdout)["envs"]}
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = f"did not run ({exc})"
    except subprocess.CalledProcessError as exc:
        why = f"failed with exit code {exc.returncode}: {exc.stderr.strip()[-500:]}"
    except (ValueError, KeyError, TypeError):
        why = f"printed no JSON with an \"envs\" list: {out.stdout.strip()[:300]!r}"
    raise EnvError(f"`{shlex.join(cmd)}` {why}\nCheck that {conda} works (or update it), or set "
                   "GPUBENCH_CONDA=none to use venvs instead")


def _run(cmd: list[str], step: str, hint: str, *, cwd: Path, echo: Callable,
         env: dict | None = None) -> bool:
    """Print and run one setup step with its output streaming; on failure say which step and what to do."""
    echo("$ " + shlex.join(cmd))
    sys.stdout.flush()  # keep our lines in order with the child's when output is piped
    try:
        code = subprocess.run(cmd, cwd=cwd, env=env).returncode
        why = f" (exit code {code})"
    except OSError as exc:
        code, why = None, f"\n{cmd[0]} could not run: {exc}"
    if code != 0:
        echo(f"\nsetup failed at step: {step}{why}\n{hint}")
    return code == 0


def _conda_create_cmd(conda: str, env: str, yml: str, exists: bool) -> list[str]:
    """The command that creates conda env `env` from `yml`, or updates it when it exists."""
    if Path(conda).name.lower().startswith("micromamba"):  # its create/update spelling differs
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
    python = [conda, "run", "-n", kernel, "python"]
    return ok and _register(
        python, name, CONDA_PYTHON, root, f"ipykernel comes from {yml}; check "
        f"`{shlex.join([*python, '-m', 'ipykernel', '--version'])}`, then run setup again.",
        echo, _conda_env(),
    )


def _register(python: list[str], name: str, version: tuple[int, int], root: Path, hint: str,
              echo: Callable, env: dict | None = None) -> bool:
    """Register env `name`'s kernel in this checkout's folder, then with --user."""
    kernel = kernel_name(name)
    base = [*python, "-m", "ipykernel", "install", "--user", "--name", kernel]
    display = f"Python {version[0]}.{version[1]} ({kernel})"  # as Jupyter's launcher shows it
    here = base + ["--display-name", f"{display} {root}", "--env", "PYTHONPATH", str(root)]
    env = dict(env if env is not None else os.environ)
    step = f"register the Jupyter kernel {kernel}"
    if not _run(here, step + " for this checkout", hint, cwd=root, echo=echo,
                env={**env, "JUPYTER_DATA_DIR": str(checkout_kernels_dir(root))}):
        return False
    # `ipykernel install --user` deletes and re-copies the kernel folder: two at once crash one
    # of them (its logo-svg.svg vanishes), so they take turns under a per-user lock.
    user = os.getuid() if hasattr(os, "getuid") else 0
    with locked(Path(tempfile.gettempdir()) / f"gpubench-kernels-{user}.lock"):
        return _run(base + ["--display-name", display], step + " (--user)", hint, cwd=root,
                    echo=echo, env=env)


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
    python = _venv_python(root / dirname)
    if not python.exists() and not _create_venv(root, dirname, echo):
        return False
    # The stamp holds pyproject.toml's sha256 when the venv's pip install is current.
    stamp = root / dirname / ".gpubench-installed"
    digest = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()
    spec = f".[{name},test]"
    if stamp.is_file() and stamp.read_text().strip() == digest:
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
    return _register(
        [str(python)], name, sys.version_info[:2], root,
        f"ipykernel comes with gpubench's dependencies; check `{python} -m ipykernel --version`, "
        f"or delete {dirname} and run setup again.",
        echo,
    )


def setup(gpu: bool = False, *, root: Path | None = None, echo: Callable = print) -> int:
    """Make the cpu env (gpu too if asked or a GPU is found), register the kernels; 0 ok, 1 failed."""
    root = Path(root) if root is not None else project_root()
    try:  # one setup per checkout at a time: a second one waits, then finds the work done
        with locked(checkout_kernels_dir(root) / "setup.lock"):
            return _setup(gpu, root, echo)
    except OSError as exc:
        echo(f"setup failed: cannot write in {root} ({exc.strerror or exc}); run it in a writable clone")
        return 1


def _setup(gpu: bool, root: Path, echo: Callable) -> int:
    """setup's steps, under the checkout's lock."""
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
        raise EnvError(f"{conda} has no env {kernel_name('cpu')}; create it with "
                       f"{SETUP_COMMANDS['cpu']}")
    return str(_conda_python(prefix))


def kernel_specs() -> dict[str, dict]:
    """Env name -> its gpubench-ENV kernel: jupyter_client's spec dict plus kernel and resource_dir."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager  # noqa: PLC0415 - not in bare python3
    except ImportError as exc:
        raise EnvError(
            f"jupyter_client is not installed in {sys.executable}; run this with the gpubench env's "
            "python (`make envs`, or `python3 -m gpubench envs --driver` names it), or `make setup` first"
        ) from exc
    return {name.removeprefix(KERNEL_PREFIX): {**info["spec"], "kernel": name,
                                              "resource_dir": info["resource_dir"]}
            for name, info in sorted(KernelSpecManager().get_all_specs().items())
            if name.startswith(KERNEL_PREFIX)}


def foreign_kernel(spec: dict) -> str | None:
    """Why a kernel (from kernel_specs) would run another checkout's code, or None when it is ours:
    registered in this checkout's folder, given PYTHONPATH=this checkout, or a python inside it."""
    root = project_root()
    python = os.path.abspath(spec["argv"][0]) if spec["argv"] else ""
    if (Path(spec["resource_dir"]).resolve().is_relative_to(checkout_kernels_dir().resolve())
            or spec["env"].get("PYTHONPATH") == str(root) or Path(python).is_relative_to(root)):
        return None
    return (f"kernel {spec['kernel']} ({spec['resource_dir']}) is not this checkout's: it runs "
            f"{python or 'nothing'}, which may import another clone's gpubench; run `make setup` "
            f"in {root} to register this checkout's kernels")


def probe(env: str, timeout: float = 120) -> dict:
    """Start env's kernel with jupyter_client and ask it for its Python, TensorFlow, GPUs and
    gpubench checkout (with the GPU diagnosis when it sees none); failures go in "error"."""
    from jupyter_client.manager import KernelManager  # noqa: PLC0415 - not in bare python3

    kernel = kernel_name(env)
    result = {"kernel": kernel, "env": env, "python": None, "executable": None,
              "tensorflow": None, "cuda_build": None, "gpus": [], "gpubench": None,
              "checkout": None, "diagnosis": None, "error": None}
    spec = kernel_specs().get(env)
    if spec is None:
        result["error"] = f"no Jupyter kernel named {kernel!r}; `make setup` registers {kernel_name('cpu')}"
        return result
    result["executable"] = spec["argv"][0] if spec["argv"] else None
    manager = KernelManager(kernel_name=kernel)
    with tempfile.TemporaryFile("w+") as errors:
        try:
            manager.start_kernel(stdout=subprocess.DEVNULL, stderr=errors)
        except Exception as exc:  # noqa: BLE001 - a missing python, an empty argv, a bad kernel.json
            result["error"] = (f"its kernel does not start ({exc}); see {spec['resource_dir']}/kernel.json: "
                               "re-create the env with `make setup`, or remove it with "
                               f"`jupyter kernelspec remove {kernel}`")
            return result
        output: list[str] = []
        client = manager.client()
        try:
            client.start_channels()
            client.wait_for_ready(timeout=timeout)
            client.execute_interactive(
                _PROBE_SCRIPT, timeout=timeout, store_history=False,
                output_hook=lambda msg: output.append(msg["content"].get("text", "")),
            )
        except Exception as exc:  # noqa: BLE001 - the kernel died or hung: say how
            process = getattr(manager.provisioner, "process", None)
            code = process.poll() if process is not None else None
            errors.seek(0)
            tail = " | ".join(errors.read().strip().splitlines()[-5:]) or "no output"
            result["error"] = (f"its kernel exited with code {code}: {tail}" if code is not None
                               else f"its kernel gave no answer within {timeout:g} s ({exc})")
            return result
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
    try:  # the script's last line is its report; TensorFlow may print before it
        return {**result, **json.loads("".join(output).strip().splitlines()[-1])}
    except (ValueError, IndexError):
        result["error"] = "its kernel printed no probe report: " + "".join(output)[-300:]
        return result


def is_gpu_env(env: str) -> bool:
    """Whether env `env` is meant to use a GPU ("gpu" and variants "gpu-...")."""
    return env == "gpu" or env.startswith("gpu-")


def _gpu_cell(info: dict) -> str:
    """The GPU column of the report: "GPU: yes (GPU:0)", "GPU: no" or "GPU: unknown"."""
    if info["gpus"]:
        return f"GPU: yes ({', '.join(n.removeprefix('/physical_device:') for n in info['gpus'])})"
    return "GPU: unknown" if info["tensorflow"] is None else "GPU: no"


def _table(rows: list[list[str]]) -> list[str]:
    """Rows as left-aligned columns, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def _problems(info: dict) -> list[str]:
    """The warnings the report prints under the table for one probed kernel."""
    if info["error"]:
        return [f"ERROR: {info['kernel']}: {info['error']}"]
    warning, lines = f"WARNING: {info['kernel']}: ", []
    if is_gpu_env(info["env"]) and not info["gpus"]:
        lines.append(warning + "GPU env, but TensorFlow sees no GPU: run `gpubench doctor` in that "
                     f"env (`{info['executable']} -m gpubench doctor`)")
    if info["gpubench"] is None:
        lines.append(warning + "gpubench does not import in this kernel, so the notebooks will "
                     "fail there; run `make setup` (it installs gpubench into the env)")
    elif Path(info["checkout"]) != project_root():
        lines.append(warning + f"runs the gpubench of {info['checkout']}, not of this checkout; "
                     "run `make setup` here")
    return lines


def envs_report() -> str:
    """A plain-text table of the gpubench-* kernels, with the fix for each missing or broken env."""
    specs = kernel_specs()
    probes = [probe(env) for env in specs]
    lines = [f"gpubench environments (Jupyter kernels named {kernel_name('ENV')}; "
             f"this checkout: {project_root()}):", ""]
    if probes:
        rows = [["env", "kernel", "TensorFlow", "GPU", "python", "checkout (gpubench it runs)"]]
        rows += [[info["env"], info["kernel"], info["tensorflow"] or "-", _gpu_cell(info),
                  info["executable"] or "-", info["checkout"] or "-"] for info in probes]
        lines += _table(rows)
    else:
        lines.append("no gpubench kernels are registered")
    notes = []
    for env in STANDARD_ENVS:
        if env not in specs:
            notes.append(f"{env}: not set up (no kernel {kernel_name(env)}); " + (
                "this machine has no NVIDIA GPU (nvidia-smi not found or lists none)"
                if env == "gpu" and not devices.nvidia_smi_gpus()
                else f"create it with {SETUP_COMMANDS[env]}"))
    for info in probes:
        notes += _problems(info)
    if notes:
        lines += [""] + notes
    return "\n".join(lines) + "\n"
