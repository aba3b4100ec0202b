"""Create the envs (one per Keras backend and device), register their Jupyter kernels, list them.

Env NAME runs in kernel "gpubench-NAME": `cpu` and `gpu` run Keras on TensorFlow (the book's),
`jax-cpu` and `jax-gpu` on JAX, each kernel's spec setting KERAS_BACKEND. An env is a conda env
of that name from environment-NAME.yml when mamba, conda or micromamba is on PATH, else a venv
(VENV_DIRS). Each kernel is registered in this checkout's .jupyter (with PYTHONPATH=CHECKOUT;
`gpubench run`, `make lab` and `make test` put it first on JUPYTER_PATH), and with --user for
Jupyter started by hand. Stdlib-only at import: a bare `python3 -m gpubench setup` runs it
before anything is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from gpubench import backends, machine  # both stdlib-only at import
from gpubench.machine import project_root
from gpubench.rundir import locked  # stdlib-only at import, like results

KERNEL_PREFIX = "gpubench-"
STANDARD_ENVS = ("cpu", "gpu")  # the book's TensorFlow envs
ENVS = ("cpu", "gpu", "jax-cpu", "jax-gpu")  # every env setup can make
DEFAULT_BACKENDS = ("tensorflow",)
CONDA_TOOLS = ("mamba", "conda", "micromamba")
VENV_DIRS = {"cpu": ".venv", "gpu": ".venv-gpu", "jax-cpu": ".venv-jax", "jax-gpu": ".venv-jax-gpu"}
EXTRAS = {"cpu": "cpu", "gpu": "gpu", "jax-cpu": "jax", "jax-gpu": "jax-gpu"}  # pyproject extras
CONDA_PYTHON = (3, 11)  # python=3.11 in the yml files
# Pythons a venv can use: TensorFlow 2.21, JAX 0.10 and numpy 2.4 all have wheels for them
# (requires-python in pyproject.toml).
VENV_PYTHONS = ((3, 11), (3, 12), (3, 13))
_JAX = "BACKENDS=tensorflow,jax` (or `gpubench setup"
SETUP_COMMANDS = {
    "cpu": "`make setup` (or `gpubench setup`)",
    "gpu": "`make setup GPU=1` (or `gpubench setup --gpu`)",
    "jax-cpu": f"`make setup {_JAX} --backends tensorflow,jax`)",
    "jax-gpu": f"`make setup GPU=1 {_JAX} --gpu --backends tensorflow,jax`)",
}


class EnvError(RuntimeError):
    """An environment or kernel problem; the message says what to do."""


def kernel_name(env: str) -> str:
    """The Jupyter kernel of env `env` ("cpu" -> "gpubench-cpu")."""
    return KERNEL_PREFIX + env


def display_name(env: str) -> str:
    """The kernel's display name: the same in every checkout and Python, as notebooks store it."""
    return f"Python 3 ({kernel_name(env)})"


def backend_of(env: str) -> str:
    """The Keras backend env `env` runs: "jax" for jax-cpu/jax-gpu/jax-..., else "tensorflow"."""
    return next((name for name, prefix in backends.LABEL_PREFIX.items()
                 if prefix and env.startswith(prefix)), "tensorflow")


def env_name(backend: str, gpu: bool) -> str:
    """The env of a backend and a device kind: ("tensorflow", False) -> "cpu", ("jax", True)
    -> "jax-gpu"."""
    return backends.LABEL_PREFIX[backend] + ("gpu" if gpu else "cpu")


def parse_backends(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """"tensorflow,jax" (or a list) -> ("tensorflow", "jax"); ValueError naming a bad one."""
    names = value.split(",") if isinstance(value, str) else list(value or [])
    chosen = tuple(dict.fromkeys(name.strip() for name in names if name.strip()))
    for name in chosen:
        if name not in backends.SUPPORTED:
            why = backends.NOT_YET.get(name, "not a Keras backend gpubench knows")
            raise ValueError(f"backend {name!r}: {why}; use {', '.join(backends.SUPPORTED)} or "
                             "both (BACKENDS=tensorflow,jax, or --backends tensorflow,jax)")
    if not chosen:
        raise ValueError(f"no backend given; use {', '.join(backends.SUPPORTED)} or both "
                         "(BACKENDS=tensorflow,jax, or --backends tensorflow,jax)")
    return chosen


def notebooks_dir() -> Path:
    """The source notebooks: this checkout's notebooks/, else those a wheel installed."""
    here = project_root() / "notebooks"
    installed = Path(sys.prefix) / "share" / "gpubench" / "notebooks"
    return here if here.is_dir() or not installed.is_dir() else installed


def checkout_kernels_dir(root: Path | None = None) -> Path:
    """This checkout's own Jupyter data folder; its kernels/ holds the kernels of this checkout."""
    return (Path(root) if root is not None else project_root()) / ".jupyter"


def use_checkout_kernels() -> None:
    """Put this checkout's kernels first on JUPYTER_PATH (in os.environ), ahead of --user ones."""
    first = str(checkout_kernels_dir())
    rest = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p and p != first]
    os.environ["JUPYTER_PATH"] = os.pathsep.join([first, *rest])


def find_conda() -> str | None:
    """Path of mamba, conda or micromamba, or None for venvs; GPUBENCH_CONDA=TOOL|PATH|none
    decides."""
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
    return bool(gpu) or bool(machine.nvidia_smi_gpus())


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
    """Print and run one setup step with its output streaming; on failure say which step and
    what to do."""
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
        echo(f"\nsetup failed: {root / yml} is missing; restore it (git checkout {yml}) and run "
             "setup again")
        return False
    echo("$ " + shlex.join([conda, "env", "list", "--json"]))
    try:
        exists = kernel in conda_envs(conda)
    except EnvError as exc:
        echo(f"\nsetup failed at step: list the conda envs\n{exc}")
        return False
    action = "update" if exists else "create"
    remove = shlex.join([conda, "env", "remove", "-y", "-n", kernel])
    ok = _run(
        _conda_create_cmd(conda, kernel, yml, exists),
        f"{action} conda env {kernel} from {yml}",
        "Read the output above and fix its cause (network, disk space, a package conflict), then "
        f"run setup again. To start from scratch: `{remove}`.",
        cwd=root, echo=echo, env=_conda_env(),
    )
    python = [conda, "run", "-n", kernel, "python"]
    return ok and _register(
        python, name, root, f"ipykernel comes from {yml}; check "
        f"`{shlex.join([*python, '-m', 'ipykernel', '--version'])}`, then run setup again.",
        echo, _conda_env(),
    )


def user_jupyter_dir(env: dict | None = None) -> Path:
    """Where `ipykernel install --user` writes: JUPYTER_DATA_DIR, else Jupyter's per-user folder."""
    env = os.environ if env is None else env
    if env.get("JUPYTER_DATA_DIR"):
        return Path(env["JUPYTER_DATA_DIR"])
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Jupyter"
    if os.name == "nt":
        return Path(env.get("APPDATA") or Path.home()) / "jupyter"
    return Path(env.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "jupyter"


def _mark_checkout(root: Path, name: str, echo: Callable) -> None:
    """Say in this checkout's kernel.json (its metadata) which checkout, env and backend it is."""
    path = checkout_kernels_dir(root) / "kernels" / kernel_name(name) / "kernel.json"
    try:
        spec = json.loads(path.read_text())
        spec.setdefault("metadata", {})["gpubench"] = {
            "checkout": str(root), "env": name, "backend": backend_of(name)}
        tmp = path.with_name(f"kernel.json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(spec, indent=1) + "\n")
        os.replace(tmp, path)
    except (OSError, ValueError, AttributeError) as exc:
        echo(f"warning: could not note the checkout in {path} ({exc}); `gpubench envs` may not "
             "name it")


def _register(python: list[str], name: str, root: Path, hint: str, echo: Callable,
              env: dict | None = None) -> bool:
    """Register env `name`'s kernel in this checkout's folder, then (a warning if it fails)
    with --user. Both specs set KERAS_BACKEND, so no Keras config can pick another backend."""
    kernel = kernel_name(name)
    base = [*python, "-m", "ipykernel", "install", "--user", "--name", kernel,
            "--display-name", display_name(name), "--env", "KERAS_BACKEND", backend_of(name)]
    env = dict(env if env is not None else os.environ)
    step = f"register the Jupyter kernel {kernel}"
    here = {**env, "JUPYTER_DATA_DIR": str(checkout_kernels_dir(root))}
    if not _run(base + ["--env", "PYTHONPATH", str(root)], step + " for this checkout", hint,
                cwd=root, echo=echo, env=here):
        return False
    _mark_checkout(root, name, echo)
    # `ipykernel install --user` deletes and re-copies the kernel folder: two at once crash one
    # of them (its logo-svg.svg vanishes), so they take turns under a per-user lock.
    user = os.getuid() if hasattr(os, "getuid") else 0
    echo("$ " + shlex.join(base))
    with locked(Path(tempfile.gettempdir()) / f"gpubench-kernels-{user}.lock"):
        try:
            done = subprocess.run(base, cwd=root, env=env, capture_output=True, text=True)
            code, said = done.returncode, (done.stderr.strip() or done.stdout.strip())
        except OSError as exc:
            code, said = None, str(exc)
    if code == 0:
        if done.stdout.strip():
            echo(done.stdout.strip())  # "Installed kernelspec ... in ..."
        return True
    last = said.splitlines()[-1] if said else f"exit code {code}"
    echo(f"warning: could not register {kernel} for Jupyter started by hand in "
         f"{user_jupyter_dir(env) / 'kernels'} ({last}). This checkout's kernel is registered, "
         "and `gpubench run`, `make lab` and `make test` use it; for Jupyter started by hand, "
         f"make that folder writable or set JUPYTER_PATH={checkout_kernels_dir(root)}")
    return True


def _create_venv(root: Path, dirname: str, echo: Callable) -> bool:
    """Make the venv `dirname` at root with this Python; remove a half-made one on failure."""
    if sys.version_info[:2] not in VENV_PYTHONS:
        want = ", ".join(".".join(map(str, v)) for v in VENV_PYTHONS)
        echo(
            f"\nsetup failed: the venv needs Python {want} (TensorFlow 2.21, JAX 0.10, numpy 2.4), "
            f"but this is Python {sys.version.split()[0]} at {sys.executable}.\nRun "
            "`python3.11 -m gpubench setup`, or install conda/micromamba (its envs bring their own "
            "Python)."
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
    """Make the venv of `name`, pip install gpubench with its extra (unless stamped), register
    its kernel."""
    dirname = VENV_DIRS[name]
    python = _venv_python(root / dirname)
    if not python.exists() and not _create_venv(root, dirname, echo):
        return False
    # The stamp holds pyproject.toml's sha256 when the venv's pip install is current.
    stamp = root / dirname / ".gpubench-installed"
    digest = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()
    spec = f".[{EXTRAS[name]},test]"
    if stamp.is_file() and stamp.read_text().strip() == digest:
        echo(f"{dirname}: gpubench{spec[1:]} is installed for this pyproject.toml; skipping pip")
    else:
        ok = _run(
            [str(python), "-m", "pip", "install", "-e", spec],
            f"pip install gpubench{spec[1:]} into {dirname}",
            "Read pip's output above and fix its cause (network, disk space; the GPU extras need "
            f"Linux or WSL2), then run setup again. To start from scratch: delete {dirname} and "
            "run setup again.",
            cwd=root, echo=echo,
        )
        if not ok:
            return False
        stamp.write_text(digest + "\n")
    return _register(
        [str(python)], name, root,
        f"ipykernel comes with gpubench's dependencies; check `{python} -m ipykernel --version`, "
        f"or delete {dirname} and run setup again.",
        echo,
    )


def setup(gpu: bool = False, backends: str | Iterable[str] = DEFAULT_BACKENDS, *,
          root: Path | None = None, echo: Callable = print) -> int:
    """Make each backend's CPU env (its GPU env too if asked or a GPU is found) and register
    the kernels; 0 ok, 1 failed; ValueError for a backend gpubench does not support."""
    chosen = parse_backends(backends)
    root = Path(root) if root is not None else project_root()
    try:  # one setup per checkout at a time: a second one waits, then finds the work done
        with locked(checkout_kernels_dir(root) / "setup.lock"):
            return _setup(gpu, chosen, root, echo)
    except OSError as exc:
        echo(f"setup failed: cannot write in {root} ({exc.strerror or exc}); run it in a writable "
             "clone")
        return 1


def _setup(gpu: bool, chosen: tuple[str, ...], root: Path, echo: Callable) -> int:
    """setup's steps, under the checkout's lock."""
    try:
        conda = find_conda()
    except EnvError as exc:
        echo(f"setup failed: {exc}")
        return 1
    with_gpu = gpu_requested(gpu)
    names = [env_name(b, False) for b in chosen] + [env_name(b, True) for b in chosen if with_gpu]
    if conda:
        echo(f"gpubench setup: conda envs with {conda} (GPUBENCH_CONDA=none uses venvs instead)")
    else:
        echo("gpubench setup: no mamba, conda or micromamba on PATH; using venvs and pip")
    echo(f"Backends: {', '.join(chosen)} (BACKENDS=tensorflow,jax adds JAX)")
    if with_gpu:
        echo("GPU envs: yes (" + ("asked for" if gpu else "nvidia-smi lists a GPU") + ")")
    else:
        echo("GPU envs: no (nvidia-smi lists no GPU); `make setup GPU=1` builds them anyway")
    for name in names:
        ok = _setup_conda_env(conda, name, root, echo) if conda else _setup_venv(name, root, echo)
        if not ok:
            return 1
    echo("\nKernels registered: " + ", ".join(kernel_name(name) for name in names))
    echo("Next: `make run` runs the benchmarks (`make lab` to step through the notebooks).")
    return 0


def driver_python(root: Path | None = None, env: str | None = None) -> str:
    """The python that runs gpubench's own commands: the cpu env's, else the jax-cpu env's
    (with `env`, that env's only)."""
    root = Path(root) if root is not None else project_root()
    drivers = (env,) if env else ("cpu", "jax-cpu")
    conda = find_conda()
    if conda is None:
        pythons = [_venv_python(root / VENV_DIRS[env]) for env in drivers]
        return str(next((python for python in pythons if python.exists()), pythons[0]))
    found = conda_envs(conda)
    prefix = next((found[kernel_name(env)] for env in drivers if kernel_name(env) in found), None)
    if prefix is None:
        raise EnvError(f"{conda} has no env {kernel_name(drivers[0])}; create it with "
                       f"{SETUP_COMMANDS.get(drivers[0], '`make setup`')}")
    return str(_conda_python(prefix))


def kernel_specs() -> dict[str, dict]:
    """Env name -> its gpubench-ENV kernel: jupyter_client's spec dict plus kernel and
    resource_dir."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager  # noqa: PLC0415 - not in bare python3
    except ImportError as exc:
        raise EnvError(
            f"jupyter_client is not installed in {sys.executable}; run this with the gpubench "
            "env's python (`python3 -m gpubench envs --driver` prints it), or run `make setup` "
            "first"
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
        return {"error": f"gpubench is not installed in {argv[0]}; `make setup` installs it in "
                         "the envs it makes (elsewhere: `pip install` gpubench there)"}
    tail = " | ".join(said[-3:]) or "no output"
    return {"error": f"`{shlex.join(cmd)}` exited with code {done.returncode} and printed no "
                     f"JSON: {tail}"}


def probe(env: str, timeout: float = 120) -> dict:
    """Ask env's kernel Python (with the spec's env) for its backend, versions, devices and
    checkout, through `gpubench doctor --json`; failures go in "error"."""
    kernel = kernel_name(env)
    result = {"kernel": kernel, "env": env, "executable": None, "python": None,
              "backend": None, "backend_version": None, "tensorflow": None, "jax": None,
              "cuda_build": None, "devices": [], "gpus": [], "gpubench": None, "checkout": None,
              "diagnosis": None, "error": None}
    spec = kernel_specs().get(env)
    if spec is None:
        result["error"] = (f"no Jupyter kernel named {kernel!r}; create it with "
                           f"{SETUP_COMMANDS.get(env, SETUP_COMMANDS['cpu'])}")
        return result
    argv = spec["argv"][:spec["argv"].index("-m")] if "-m" in spec["argv"] else spec["argv"][:1]
    result["executable"] = argv[0] if argv else None
    info = probe_python(argv, env={**os.environ, **spec["env"]}, timeout=timeout)
    if info["error"]:
        result["error"] = (f"its Python does not run gpubench: {info['error']}. Re-create the env "
                           f"with `make setup`, or remove it with `jupyter kernelspec remove "
                           f"{kernel}` (its spec: {spec['resource_dir']}/kernel.json)")
        return result
    result.update({key: info[key] for key in result if key in info and key not in ("env", "gpus")})
    result["backend_version"] = info.get("backend_version") or info.get(str(info.get("backend")))
    result["devices"] = [str(d) for d in info.get("devices") or []]
    result["gpus"] = [d for d in result["devices"] if d.startswith("gpu")]
    return result


def is_gpu_env(env: str) -> bool:
    """Whether env `env` is meant to use a GPU: gpu, jax-gpu, and variants gpu-..., jax-gpu-..."""
    kind = env.removeprefix(backends.LABEL_PREFIX.get(backend_of(env), ""))
    return kind == "gpu" or kind.startswith("gpu-")


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
    expected = backend_of(info["env"])
    if info["backend"] and info["backend"] != expected:
        lines.append(warning + f"runs Keras on {info['backend']}, not {expected}; register it "
                     f"again with {SETUP_COMMANDS.get(info['env'], SETUP_COMMANDS['cpu'])}")
    if is_gpu_env(info["env"]) and not info["gpus"]:
        lines.append(warning + f"GPU env, but {info['backend'] or expected} sees no GPU: "
                     f"{(info['diagnosis'] or '').strip() or 'run `gpubench doctor` in that env'} "
                     f"(`{info['executable']} -m gpubench doctor`)")
    if info["checkout"] and Path(info["checkout"]) != project_root():
        lines.append(warning + f"runs the gpubench of {info['checkout']}, not of this checkout; "
                     "run `make setup` here")
    return lines


def envs_report() -> str:
    """A plain-text table of the gpubench-* kernels (backend, its version, GPUs, Python and the
    checkout each runs), with the fix for each missing or broken env."""
    specs = kernel_specs()
    probes = [probe(env) for env in specs]
    lines = [f"gpubench environments (Jupyter kernels named {kernel_name('ENV')}; "
             f"this checkout: {project_root()}):", ""]
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
        optional = " (optional: Keras on JAX)" if backend_of(env) == "jax" else ""
        notes.append(f"{env}: not set up{optional} (no kernel {kernel_name(env)}); " + (
            "this machine has no NVIDIA GPU (nvidia-smi not found or lists none)"
            if is_gpu_env(env) and not smi else f"create it with {SETUP_COMMANDS[env]}"))
    for info in probes:
        notes += _problems(info)
    if notes:
        lines += [""] + notes
    return "\n".join(lines) + "\n"
