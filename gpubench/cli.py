"""The `gpubench` command: run, report, setup, envs, doctor, scaling.

Exit codes: 0 all ok, 1 some notebook (or check) failed, 2 bad usage or input. The modules
imported at the top need only the standard library, so a bare `python3 -m gpubench setup`
can bootstrap everything else.
"""

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

from gpubench import __version__, envs, machine, results, runner


def _command(sub, name: str, summary: str, *examples: str, **kw) -> argparse.ArgumentParser:
    """A subcommand whose help ends with its examples."""
    return sub.add_parser(name, help=summary, formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="examples:\n" + "\n".join(f"  {e}" for e in examples), **kw)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpubench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="How much faster does Keras run on your GPU than on your CPU? On TensorFlow "
                    "(the book's) or JAX,\nthe backend each env's KERAS_BACKEND names.",
        epilog="examples:\n"
               "  gpubench setup                # the CPU env (and the GPU env if a GPU is found)\n"
               "  gpubench run --profile quick  # every notebook in every env, then the report\n"
               "  gpubench run --here           # in this Python, creating no env\n"
               "  gpubench report runs/20260101-120000\n"
               "exit codes: 0 all ok, 1 some notebook failed, 2 bad usage or input",
    )
    parser.add_argument("--version", action="version", version=f"gpubench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = _command(sub, "run", "run every notebook in every env, then write the report",
                   "gpubench run --profile quick --envs cpu",
                   "gpubench run --notebooks performanceTest -p 'sizes=[500, 1000]' --out runs/mm",
                   "gpubench run --resume runs/mm   # finish an interrupted or failed run",
                   "KERAS_BACKEND=jax gpubench run --here --profile quick   # in this Python",
                   "gpubench run --kernel my-env   # in a Jupyter kernel of your own")
    run.add_argument("--profile", choices=("full", "quick"),
                     help="full = the book's settings (default), quick = a smoke run")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--envs", help="comma-separated envs, e.g. cpu,gpu,jax-cpu (default: "
                       "every env `gpubench envs` lists)")
    where.add_argument("--here", action="store_true",
                       help="run in a kernel of the Python that runs gpubench, creating no env; "
                            "labelled cpu, gpu, jax-cpu or jax-gpu by its backend and devices")
    where.add_argument("--kernel", metavar="NAME",
                       help="run in an existing Jupyter kernel (`jupyter kernelspec list`), "
                            "labelled as --here is")
    run.add_argument("--notebooks", help="comma-separated notebooks (default: all)")
    run.add_argument("--out", help="new run directory (default: runs/<timestamp>)")
    run.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted or failed run "
                     "(one process per RUN_DIR: it holds RUN_DIR/run.lock)")
    run.add_argument("--param", "-p", action="append", metavar="[NOTEBOOK:]NAME=VALUE",
                     help="extra notebook parameter, e.g. -p data_dir=/data or "
                          "-p Mnist_CNN:epochs=5 (repeatable; values parsed as JSON; checked "
                          "against the notebook's parameters cell before anything runs)")

    rep = _command(sub, "report", "write report.md and charts from run directories",
                   "gpubench report runs/20260101-120000",
                   "gpubench report runs/laptop runs/gpu-box --out runs/compared",
                   description="Read RUN_DIR/results.jsonl of each RUN_DIR (a folder written\n"
                               "by `gpubench run`; several of them compare machines) and write\n"
                               "report.md and its PNG charts into the first RUN_DIR, or into\n"
                               "--out.")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                     help="a run directory (holds results.jsonl)")
    rep.add_argument("--out", help="folder for report.md and the PNGs (default: the first RUN_DIR)")

    setup = _command(sub, "setup", "create the envs and register their Jupyter kernels",
                     "python3 -m gpubench setup", "python3 -m gpubench setup --gpu")
    setup.add_argument("--backends", default="tensorflow", metavar="NAMES",
                       help="Keras backends to set up, comma-separated: tensorflow (default), jax, "
                            "torch")
    setup.add_argument("--gpu", action="store_true",
                       help="also create the GPU env even if nvidia-smi lists no GPU")

    envs = _command(sub, "envs", "list the envs: backend, GPU, and the gpubench each runs",
                    "gpubench envs")
    envs.add_argument("--driver", nargs="?", const="", metavar="ENV",
                      help="print only the Python that runs gpubench itself (for the Makefile)")

    doctor = _command(sub, "doctor", "print this environment and check the GPU",
                      "gpubench doctor", "gpubench doctor --gpu   # exit 1 unless a GPU is usable")
    doctor.add_argument("--gpu", action="store_true", help="exit 1 unless a GPU is usable")
    doctor.add_argument("--json", action="store_true",
                        help="print one JSON document (the snapshot, devices, env label, "
                             "diagnosis) and nothing else")

    cluster = "gpubench scaling --cluster 10.0.0.1:12345,10.0.0.2:12345"
    scaling = _command(sub, "scaling", "multi-worker training with tf.distribute: local workers "
                       "or one machine of a cluster",
                       "gpubench scaling --local-workers 2 --profile quick",
                       "# on each machine of a cluster, the same list and its own index:",
                       f"{cluster} --index 0 --out runs/s1", f"{cluster} --index 1",
                       description="Worker 0 writes the records to RUN_DIR/results.jsonl;\n"
                                   "then: gpubench report RUN_DIR")
    where = scaling.add_mutually_exclusive_group(required=True)
    where.add_argument("--local-workers", type=int, metavar="N",
                       help="start N workers on 127.0.0.1 (free ports), one machine as a cluster")
    where.add_argument("--cluster", metavar="HOST:PORT,...",
                       help="every worker's address, the same list on every machine")
    scaling.add_argument("--index", type=int, metavar="I",
                         help="this machine's position in --cluster (0 = the one writing records)")
    scaling.add_argument("--profile", choices=("full", "quick"),
                         help="Multi_GPU_Scaling's settings: full (default) or quick")
    scaling.add_argument("--replicas", type=int, metavar="N",
                         help="devices each worker trains on (default: every GPU, else the CPU)")
    scaling.add_argument("--out", help="run directory for the records (default: runs/scaling-<id>)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gpubench` console script."""
    try:
        args = _parser().parse_args(argv)
    except KeyboardInterrupt:
        print("gpubench: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    # a skipped results line: "warning: PATH:LINE: skipped: why", without Python's source line
    warnings.formatwarning = lambda message, *rest, **kw: f"warning: {message}\n"
    try:
        return _COMMANDS[args.command](args)
    except KeyboardInterrupt:  # a run says how to resume it itself; anything else stops here
        print(f"gpubench {args.command}: interrupted by {runner._Stop.reason or 'Ctrl-C'}",
              file=sys.stderr)
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
        print(f"gpubench {args.command}: error: {os_problem(exc)}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # envs.EnvError and the GPU guard: a setup problem, said plainly
        print(f"gpubench {args.command}: {exc}", file=sys.stderr)
        return 1


def os_problem(exc: OSError) -> str:
    """An OSError in words, naming the file and whether writing it failed."""
    path = exc.filename or "a file"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return (f"cannot write {path}: {results.write_problem(exc)}; free some space or choose "
                "a writable folder")
    if exc.errno == errno.EISDIR:
        return f"{path} is a folder, where gpubench expects a file; move it away"
    return f"{path}: {exc.strerror or exc}"


# Modules gpubench's commands need, and what to install for them.
_PACKAGES = {"tensorflow": "TensorFlow", "keras": "Keras", "jax": "JAX", "jaxlib": "JAX",
             "torch": "PyTorch"}


def _use_instead(name: str, command: str) -> str:
    """What to do about module `name` missing here: in a checkout, its env's Python or `make
    setup`; outside one (a wheel), pip install into this Python."""
    python = sys.executable
    if machine.checkout() is None:
        extra = {"tensorflow": "gpubench[cpu]", "jax": "gpubench[jax]", "jaxlib": "gpubench[jax]",
                 "torch": "gpubench[torch]"}
        return f"install it: `{python} -m pip install '{extra.get(name, name)}'`"
    try:
        driver = envs.driver_python()
    except Exception:  # noqa: BLE001 - no env yet, or conda broken: `make setup` is the way
        driver = None
    if driver and os.path.exists(driver) and os.path.abspath(driver) != python:
        return f"run it with the env `make setup` created: `{driver} -m gpubench {command}`"
    return "run `make setup`, then use `make run` or .venv/bin/gpubench"


def missing_module(exc: ModuleNotFoundError, command: str) -> str:
    """One line for a module this Python lacks: which env to use, `make setup`, or pip."""
    name = (exc.name or str(exc)).split(".")[0]
    python = sys.executable
    use = _use_instead(name, command)
    if name == "tensorflow":
        backend = os.environ.get("KERAS_BACKEND") or "tensorflow (the default)"
        jax = ("JAX is installed here: set KERAS_BACKEND=jax to use it" if
               importlib.util.find_spec("jax") else "or set KERAS_BACKEND=jax where JAX is")
        return (f"TensorFlow is not installed in {python}, and KERAS_BACKEND is {backend}; "
                f"{use}; {jax}")
    if name in ("jax", "jaxlib"):
        return (f"JAX is not installed in {python}, and KERAS_BACKEND=jax asks for it; "
                + (f"{envs.setup_command('jax-cpu')} makes a JAX env (kernel gpubench-jax-cpu), "
                   f"or `{python} -m pip install jax`" if machine.checkout() else use)
                + ", or unset KERAS_BACKEND to use TensorFlow")
    if name == "torch":
        return (f"PyTorch is not installed in {python}, and KERAS_BACKEND=torch asks for it; "
                + (f"{envs.setup_command('torch-cpu')} makes a PyTorch env (kernel "
                   f"gpubench-torch-cpu), or `{python} -m pip install torch==2.13.0`"
                   if machine.checkout() else use)
                + ", or unset KERAS_BACKEND to use TensorFlow")
    return f"{_PACKAGES.get(name, name)} is not installed in {python}; {use}"


def _run(args: argparse.Namespace) -> int:
    return runner.run(
        profile=args.profile, env_names=runner.split_names(args.envs),
        notebooks=runner.split_names(args.notebooks), out=args.out, resume=args.resume,
        params=runner.parse_params(args.param), here=args.here, kernel=args.kernel,
    )


def _report(args: argparse.Namespace) -> int:
    from gpubench import report  # noqa: PLC0415

    print(f"Report: {report.build(report.find_runs(args.run_dirs), args.out)}")
    return 0


def _envs(args: argparse.Namespace) -> int:
    if args.driver is None:
        envs.use_checkout_kernels()
    print(envs.driver_python(env=args.driver or None) if args.driver is not None
          else envs.envs_report())
    return 0


def doctor_report() -> dict:
    """What `doctor --json` prints: the environment snapshot, the devices the backend sees, the
    env label, gpubench's version and checkout, whether TensorFlow can be imported, and the
    diagnosis when no GPU is seen."""
    from gpubench import devices  # noqa: PLC0415

    found = {**results.environment_snapshot(), "devices": devices.list_devices(),
             "env": results.default_env_name(), "gpubench": __version__,
             "checkout": str(machine.project_root()),
             "tensorflow_importable": importlib.util.find_spec("tensorflow") is not None}
    try:
        devices.check_gpu()
    except devices.GPUNotAvailableError as exc:
        found["diagnosis"] = str(exc)
    return found


def _doctor(args: argparse.Namespace) -> int:
    runner.check_backend(os.environ.get("KERAS_BACKEND"))
    from gpubench import chapter  # noqa: PLC0415

    # a framework's print must not get into the JSON document
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
        found = doctor_report()
    gpus = [d for d in found["devices"] if d.startswith("gpu")]
    if args.json:
        print(json.dumps(found, indent=1, default=str))
        return 1 if args.gpu and not gpus else 0
    snapshot = {k: v for k, v in found.items()
                if k not in ("devices", "env", "tensorflow_importable", "diagnosis", "gpubench",
                             "checkout")}
    print(chapter.describe_environment(snapshot))
    backend = found.get("backend") or "the backend"
    print(f"Devices {backend} sees: {', '.join(found['devices'])} (env label {found['env']})")
    if "diagnosis" in found:
        print(f"GPU check: no usable GPU.\n{found['diagnosis']}")
        return 1 if args.gpu else 0
    print(f"GPU check: OK, {backend} uses {', '.join(gpus)}")
    return 0


def _scaling(args: argparse.Namespace) -> int:
    from gpubench import scaling  # noqa: PLC0415

    args.out = args.out or str(scaling.default_out())  # one folder for the workers and the table
    code = scaling.cli_main(args)
    if code == 0 and (args.local_workers is not None or args.index == 0):
        from gpubench.report import scaling as scaling_report  # noqa: PLC0415

        found = [r for r in results.read_records(Path(args.out) / "results.jsonl")
                 if r.get("benchmark") == "scaling"]
        if found:
            print(scaling_report.table(found))
    return code


_COMMANDS = {"run": _run, "report": _report,
             "setup": lambda args: envs.setup(gpu=args.gpu, backends=args.backends),
             "envs": _envs, "doctor": _doctor, "scaling": _scaling}
