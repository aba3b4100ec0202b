"""`gpubench doctor`: this Python's environment, the devices its Keras backend sees and, when no
GPU is seen, why; `--json` prints one JSON document, whatever fails (the runner and `gpubench
envs` read it from each env's Python). Also the one line for a module this Python lacks."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys

from gpubench import __version__, backends, envs, machine, results


def found() -> dict:
    """What `doctor --json` prints: the environment snapshot, the devices the backend sees, the
    env label, gpubench's version and checkout, whether TensorFlow imports, and the diagnosis
    when no GPU is seen."""
    from gpubench import devices  # noqa: PLC0415 - loads Keras

    info = {**results.environment_snapshot(), "devices": devices.list_devices(),
            "env": results.default_env_name(), "gpubench": __version__,
            "checkout": str(machine.project_root()),
            "tensorflow_importable": importlib.util.find_spec("tensorflow") is not None}
    try:
        devices.check_gpu()
    except devices.GPUNotAvailableError as exc:
        info["diagnosis"] = str(exc)
    return info


def _failed(exc: Exception) -> dict:
    """The JSON document of a doctor that could not look: its error, said as the CLI says it."""
    why = (missing_module(exc, "doctor") if isinstance(exc, ModuleNotFoundError)
           else f"{type(exc).__name__}: {exc}")
    return {"error": why, "gpubench": __version__, "checkout": str(machine.project_root()),
            "python": sys.executable}


def main(gpu: bool, as_json: bool) -> int:
    """Print the environment and the GPU check; 1 with `gpu` when no GPU is usable."""
    if as_json:
        try:  # a framework's print must not get into the JSON document
            with contextlib.redirect_stdout(sys.stderr):
                backends.requested()
                info = found()
        except Exception as exc:  # noqa: BLE001 - one JSON document, whatever fails
            print(json.dumps(_failed(exc), indent=1))
            return 2 if isinstance(exc, ValueError) else 1
        print(json.dumps(info, indent=1, default=str))
        return 1 if gpu and "diagnosis" in info else 0
    backends.requested()
    from gpubench import chapter  # noqa: PLC0415

    info = found()
    shown = ("devices", "env", "tensorflow_importable", "diagnosis", "gpubench", "checkout")
    print(chapter.describe_environment({k: v for k, v in info.items() if k not in shown}))
    backend = info.get("backend") or "the backend"
    print(f"Devices {backend} sees: {', '.join(info['devices'])} (env label {info['env']})")
    if "diagnosis" in info:
        print(f"GPU check: no usable GPU.\n{info['diagnosis']}")
        return 1 if gpu else 0
    print(f"GPU check: OK, {backend} uses "
          f"{', '.join(d for d in info['devices'] if d.startswith('gpu'))}")
    return 0


def missing_module(exc: ModuleNotFoundError, command: str) -> str:
    """One line for a module this Python lacks: which env to use, `make setup`, or pip."""
    name, python = (exc.name or str(exc)).split(".")[0], sys.executable
    backend = {"jaxlib": "jax"}.get(name, name if name in backends.SUPPORTED else None)
    title = backends.backend_title(backend) if backend else {"keras": "Keras"}.get(name, name)
    env = backends.env_label(backend or "tensorflow", False)
    if machine.checkout() is None:
        pip = envs.pip_install(envs.EXTRAS[env]) if backend else f"pip install '{name}'"
        use = f"install it: `{python} -m {pip}`"
    elif backend not in (None, "tensorflow"):
        use = (f"{envs.setup_command(env)} makes a {title} env (kernel "
               f"{backends.kernel_name(env)})")
    else:
        try:
            driver = envs.driver_python()
        except Exception:  # noqa: BLE001 - no env yet, or conda broken: `make setup` is the way
            driver = None
        use = (f"run it with the env `make setup` created: `{driver} -m gpubench {command}`"
               if driver and os.path.exists(driver) and os.path.abspath(driver) != python
               else "run `make setup`, then use `make run` or .venv/bin/gpubench")
    if backend is None:
        return f"{title} is not installed in {python}; {use}"
    asked = os.environ.get("KERAS_BACKEND") or "tensorflow (the default)"
    other = ("unset KERAS_BACKEND to use TensorFlow" if backend != "tensorflow" else
             "set KERAS_BACKEND=jax or torch where that backend is installed")
    return f"{title} is not installed in {python}, and KERAS_BACKEND is {asked}; {use}; or {other}"
