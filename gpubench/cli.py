"""The `gpubench` command: run, report, setup, envs, doctor, scaling.

Exit codes: 0 all ok, 1 some notebook (or check) failed, 2 bad usage or input. The modules
imported at the top need only the standard library, so a bare `python3 -m gpubench setup`
can bootstrap everything else.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from gpubench import __version__, envs, results, runner


def _command(sub, name: str, summary: str, *examples: str, **kw) -> argparse.ArgumentParser:
    """A subcommand whose help ends with its examples."""
    return sub.add_parser(name, help=summary, formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="examples:\n" + "\n".join(f"  {e}" for e in examples), **kw)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpubench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="How much faster does TensorFlow run on your GPU than on your CPU?",
        epilog="examples:\n"
               "  gpubench setup                      # the CPU env (and the GPU env if a GPU is found)\n"
               "  gpubench run --profile quick        # every notebook in every env, then the report\n"
               "  gpubench report runs/20260101-120000\n"
               "exit codes: 0 all ok, 1 some notebook failed, 2 bad usage or input",
    )
    parser.add_argument("--version", action="version", version=f"gpubench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = _command(sub, "run", "run every notebook in every env, then write the report",
                   "gpubench run --profile quick --envs cpu",
                   "gpubench run --notebooks performanceTest -p 'sizes=[500, 1000]' --out runs/mm",
                   "gpubench run --resume runs/mm   # finish an interrupted or failed run")
    run.add_argument("--profile", choices=("full", "quick"),
                     help="full = the book's settings (default), quick = a smoke run")
    run.add_argument("--envs", help="comma-separated envs, e.g. cpu,gpu (default: all set up)")
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
                   description="Read RUN_DIR/results.jsonl of each RUN_DIR (a folder written by\n"
                               "`gpubench run`; several of them compare machines) and write\n"
                               "report.md and its PNG charts into the first RUN_DIR, or into --out.")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                     help="a run directory (holds results.jsonl)")
    rep.add_argument("--out", help="folder for report.md and the PNGs (default: the first RUN_DIR)")

    setup = _command(sub, "setup", "create the envs and register their Jupyter kernels",
                     "python3 -m gpubench setup", "python3 -m gpubench setup --gpu")
    setup.add_argument("--gpu", action="store_true",
                       help="also create the GPU env even if nvidia-smi lists no GPU")

    envs = _command(sub, "envs", "list the envs: TensorFlow, GPU, and the checkout each runs",
                    "gpubench envs")
    envs.add_argument("--driver", action="store_true",
                      help="print only the Python that runs gpubench itself (for the Makefile)")

    doctor = _command(sub, "doctor", "print this environment and check the GPU",
                      "gpubench doctor", "gpubench doctor --gpu   # exit 1 unless a GPU is usable")
    doctor.add_argument("--gpu", action="store_true", help="exit 1 unless a GPU is usable")
    doctor.add_argument("--json", action="store_true", help="print the snapshot as JSON")

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
    args = _parser().parse_args(argv)
    # a skipped results line: "warning: PATH:LINE: skipped: why", without Python's source line
    warnings.formatwarning = lambda message, *rest, **kw: f"warning: {message}\n"
    try:
        return _COMMANDS[args.command](args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"gpubench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a read-only or full disk: say which file, never a traceback
        print(f"gpubench {args.command}: error: cannot write {exc.filename or 'a file'}: "
              f"{results.write_problem(exc)}; free some space or choose a writable folder",
              file=sys.stderr)
        return 2
    except RuntimeError as exc:  # envs.EnvError and the GPU guard: a setup problem, said plainly
        print(f"gpubench {args.command}: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    return runner.run(
        profile=args.profile, env_names=runner.split_names(args.envs),
        notebooks=runner.split_names(args.notebooks), out=args.out, resume=args.resume,
        params=runner.parse_params(args.param),
    )


def _report(args: argparse.Namespace) -> int:
    from gpubench import report  # noqa: PLC0415

    print(f"Report: {report.build(report.find_runs(args.run_dirs), args.out)}")
    return 0


def _envs(args: argparse.Namespace) -> int:
    if not args.driver:
        envs.use_checkout_kernels()
    print(envs.driver_python() if args.driver else envs.envs_report())
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from gpubench import devices, notebook  # noqa: PLC0415

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


def _scaling(args: argparse.Namespace) -> int:
    from gpubench import scaling  # noqa: PLC0415

    return scaling.cli_main(args)


_COMMANDS = {"run": _run, "report": _report, "setup": lambda args: envs.setup(gpu=args.gpu),
             "envs": _envs, "doctor": _doctor, "scaling": _scaling}
