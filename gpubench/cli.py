"""The `gpubench` command: run, report, setup, envs, doctor, scaling (options and help: tables/
cli.json). Exit codes: 0 all ok, 1 a notebook (or check) failed, 2 bad usage or input, 130
interrupted. Stdlib-only at import, so a bare `python3 -m gpubench setup` can start."""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path

from gpubench import __version__, backends, envs, machine, results, rundir, runner
from gpubench.envs import create  # stdlib-only at import, as this module is
from gpubench.rundir import Stop, signals_stop_the_run


def names(text: str) -> list[str]:
    """"a,b" -> ["a", "b"]: an option's comma-separated names."""
    if found := [part.strip() for part in text.split(",") if part.strip()]:
        return found
    raise argparse.ArgumentTypeError(f"empty list {text!r}; give comma-separated names")


def parser() -> argparse.ArgumentParser:
    """The argument parser of `gpubench` and its commands."""
    spec = json.loads((Path(__file__).parent / "tables" / "cli.json").read_text(encoding="utf-8"))
    titles = ", ".join(backends.BACKEND_TITLES.values())  # "TensorFlow, JAX, PyTorch"

    def text(part: dict) -> dict:
        return {"description": part.get("description"), "epilog": "examples:\n" + "".join(
            f"  {e}\n" for e in part["examples"]) + part.get("after", ""),
                "formatter_class": argparse.RawDescriptionHelpFormatter}

    main = argparse.ArgumentParser(prog="gpubench", **text(spec))
    main.add_argument("--version", action="version", version=f"gpubench {__version__}")
    sub = main.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in spec["commands"].items():
        made = sub.add_parser(name, help=command["help"].format(titles=titles), **text(command))
        groups: dict = {}
        for *flags, options in command["arguments"]:
            if (group := options.pop("group", None)) and group not in groups:
                groups[group] = made.add_mutually_exclusive_group(required=group == "required")
            options["help"] = options["help"].format(titles=titles)
            if "type" in options:
                options["type"] = {"int": int, "names": names}[options["type"]]
            (groups[group] if group else made).add_argument(*flags, **options)
    return main


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gpubench` console script."""
    try:
        args = parser().parse_args(argv)
    except KeyboardInterrupt:
        print("gpubench: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    # a skipped results line: "warning: PATH:LINE: skipped: why", without Python's source line
    warnings.formatwarning = lambda message, *rest, **kw: f"warning: {message}\n"
    try:
        with signals_stop_the_run():
            return COMMANDS[args.command](args)
    except KeyboardInterrupt:  # a run says how to resume it itself; anything else stops here
        print(f"gpubench {args.command}: interrupted by {Stop.reason or 'Ctrl-C'}", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:  # started by a Python without gpubench's dependencies
        if (exc.name or "gpubench").split(".")[0] == "gpubench":
            raise  # gpubench's own module: a bug, not a missing dependency
        print(f"gpubench {args.command}: {missing_module(exc, args.command)}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as exc:
        print(f"gpubench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a read-only or full disk, a folder where a file should be
        path = exc.filename or "a file"
        why = f"{path}: {exc.strerror or exc}"
        if exc.errno == errno.EISDIR:
            why = f"{path} is a folder, where gpubench expects a file; move it away"
        elif exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            why = (f"cannot write {path}: {results.write_problem(exc)}; free some space or "
                   "choose a writable folder")
        print(f"gpubench {args.command}: error: {why}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # envs.EnvError and the GPU guard: a setup problem, said plainly
        print(f"gpubench {args.command}: {exc}", file=sys.stderr)
        return 1


def _report(args: argparse.Namespace) -> int:
    from gpubench import report  # noqa: PLC0415

    runs = report.find_runs(args.run_dirs)
    for run_dir in runs:
        rundir.tidy(run_dir)
    out = Path(args.out) if args.out else runs[0]
    try:
        print(f"Report: {report.build(runs, args.out)}")
    except KeyboardInterrupt:
        print(f"gpubench report: interrupted by {Stop.reason or 'Ctrl-C'}; "
              f"{out / 'report.md'} was not written (charts made so far may be in {out}); run "
              "the same command again", file=sys.stderr)
        return 130
    return 0


def _envs(args: argparse.Namespace) -> int:
    if args.driver is not None:
        print(create.driver_python(env=args.driver or None))
    else:
        envs.use_checkout_kernels()
        print(envs.envs_report())
    return 0


def doctor(gpu: bool, as_json: bool) -> int:
    """`gpubench doctor` (`as_json`: one line of JSON, whatever fails); 1 for `gpu` and none."""
    try:  # as JSON, a framework's print must not get into the document
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            backends.requested()
            from gpubench import devices  # noqa: PLC0415 - loads Keras

            info = {**results.environment_snapshot(), "devices": devices.list_devices(),
                    "env": results.default_env_name(), "gpubench": __version__,
                    "checkout": str(machine.project_root()),
                    "tensorflow_importable": importlib.util.find_spec("tensorflow") is not None}
            try:
                devices.check_gpu()
            except devices.GPUNotAvailableError as exc:
                info["diagnosis"] = str(exc)
    except Exception as exc:  # as JSON: one document, whatever fails
        if not as_json:
            raise
        why = (missing_module(exc, "doctor") if isinstance(exc, ModuleNotFoundError)
               else f"{type(exc).__name__}: {exc}")
        print(json.dumps({"error": why, "gpubench": __version__, "python": sys.executable,
                          "checkout": str(machine.project_root())}))
        return 2 if isinstance(exc, ValueError) else 1
    if as_json:
        print(json.dumps(info, default=str))
        return 1 if gpu and "diagnosis" in info else 0
    from gpubench import chapter  # noqa: PLC0415

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
            driver = create.driver_python()
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


COMMANDS = {"run": lambda args: runner.loop.run(args), "report": _report, "envs": _envs,
            "setup": lambda args: create.setup(gpu=args.gpu, backends=args.backends),
            "scaling": lambda args: importlib.import_module("gpubench.scaling").cli_main(args),
            "doctor": lambda args: doctor(args.gpu, args.json)}
