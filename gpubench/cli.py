"""The `gpubench` command: run, report, setup, envs, doctor.

Exit codes: 0 all ok, 1 some notebook (or check) failed, 2 bad usage or input.
`setup` and `envs` need only the standard library, so a bare `python3 -m gpubench setup`
can bootstrap everything else.
"""

from __future__ import annotations

import argparse
import json
import sys

from gpubench import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpubench",
        description="How much faster does TensorFlow run on your GPU than on your CPU?",
    )
    parser.add_argument("--version", action="version", version=f"gpubench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run every notebook in every env, then write the report")
    run.add_argument("--profile", choices=("full", "quick"),
                     help="full = the book's settings (default), quick = a smoke run")
    run.add_argument("--envs", help="comma-separated envs, e.g. cpu,gpu (default: all set up)")
    run.add_argument("--notebooks", help="comma-separated notebooks (default: all four)")
    run.add_argument("--out", help="new run directory (default: runs/<timestamp>)")
    run.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted or failed run")
    run.add_argument("--param", "-p", action="append", metavar="[NOTEBOOK:]NAME=VALUE",
                     help="extra notebook parameter, e.g. -p data_dir=/data or "
                          "-p Mnist_CNN:epochs=5 (repeatable; values parsed as JSON)")

    rep = sub.add_parser("report", help="write report.md and charts from run directories")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    rep.add_argument("--out", help="output folder (default: the first RUN_DIR)")

    setup = sub.add_parser("setup", help="create the envs and register their Jupyter kernels")
    setup.add_argument("--gpu", action="store_true",
                       help="also create the GPU env even if nvidia-smi lists no GPU")

    envs = sub.add_parser("envs", help="list the envs, their TensorFlow and whether it sees a GPU")
    envs.add_argument("--driver", action="store_true",
                      help="print only the Python that runs gpubench itself (for the Makefile)")

    doctor = sub.add_parser("doctor", help="print this environment and check the GPU")
    doctor.add_argument("--gpu", action="store_true", help="exit 1 unless a GPU is usable")
    doctor.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gpubench` console script."""
    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"gpubench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # envs.EnvError and the GPU guard: a setup problem, said plainly
        print(f"gpubench {args.command}: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    from gpubench import runner  # noqa: PLC0415

    return runner.run(
        profile=args.profile, env_names=runner.split_names(args.envs),
        notebooks=runner.split_names(args.notebooks), out=args.out, resume=args.resume,
        params=runner.parse_params(args.param),
    )


def _report(args: argparse.Namespace) -> int:
    from gpubench import report  # noqa: PLC0415

    path = report.build(report.find_runs(args.run_dirs), args.out)
    print(f"Report: {path}")
    return 0


def _setup(args: argparse.Namespace) -> int:
    from gpubench import envs  # noqa: PLC0415

    return envs.setup(gpu=args.gpu)


def _envs(args: argparse.Namespace) -> int:
    from gpubench import envs  # noqa: PLC0415

    print(envs.driver_python() if args.driver else envs.envs_report())
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from gpubench import devices, notebook, results  # noqa: PLC0415

    snapshot = results.environment_snapshot()
    if args.json:
        print(json.dumps(snapshot, indent=1))
    else:
        print(notebook.describe_environment(snapshot))
        print(f"Devices TensorFlow sees: {', '.join(devices.list_devices())}")
    try:
        gpus = devices.check_gpu()
    except devices.GPUNotAvailableError as exc:
        print(f"GPU check: no usable GPU.\n{exc}")
        return 1 if args.gpu else 0
    print(f"GPU check: OK, TensorFlow uses {', '.join(gpus)}")
    return 0


_COMMANDS = {"run": _run, "report": _report, "setup": _setup, "envs": _envs, "doctor": _doctor}
