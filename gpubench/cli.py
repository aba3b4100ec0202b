"""The `gpubench` command: run, report, setup, envs, doctor, scaling.

Exit codes: 0 all ok, 1 some notebook (or check) failed, 2 bad usage or input. The modules
imported at the top need only the standard library, so a bare `python3 -m gpubench setup`
can bootstrap everything else. SIGTERM stops every command as Ctrl-C does.
"""

from __future__ import annotations

import argparse
import errno
import sys
import warnings
from pathlib import Path

from gpubench import __version__, backends, doctor, envs, results, rundir, runner

TITLES = ", ".join(backends.BACKEND_TITLES.values())  # "TensorFlow, JAX, PyTorch"


def _command(sub, name: str, summary: str, *examples: str, **kw) -> argparse.ArgumentParser:
    """A subcommand whose help ends with its examples."""
    return sub.add_parser(name, help=summary, formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="examples:\n" + "\n".join(f"  {e}" for e in examples), **kw)


def parser() -> argparse.ArgumentParser:
    """The argument parser of `gpubench` and its commands."""
    main = argparse.ArgumentParser(
        prog="gpubench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="How much faster does Keras run on your GPU than on your CPU? On TensorFlow "
                    "(the book's),\nJAX or PyTorch: the backend each env's KERAS_BACKEND names.",
        epilog="examples:\n"
               "  gpubench setup                # the CPU env (and the GPU env if a GPU is found)\n"
               "  gpubench run --profile quick  # every notebook in every env, then the report\n"
               "  gpubench run --here           # in this Python, creating no env\n"
               "  gpubench report runs/20260101-120000\n"
               "exit codes: 0 all ok, 1 some notebook failed, 2 bad usage or input")
    main.add_argument("--version", action="version", version=f"gpubench {__version__}")
    sub = main.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = _command(sub, "run", f"run every notebook in every env ({TITLES}), then the report",
                   "gpubench run --profile quick --envs cpu",
                   "gpubench run --notebooks performanceTest -p 'sizes=[500, 1000]' --out runs/mm",
                   "gpubench run --resume runs/mm   # finish an interrupted or failed run",
                   "KERAS_BACKEND=jax gpubench run --here --profile quick   # in this Python",
                   "gpubench run --kernel my-env   # in a Jupyter kernel of your own")
    run.add_argument("--profile", choices=("full", "quick"),
                     help="full = the book's settings (default), quick = a smoke run")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--envs", help="comma-separated envs, e.g. cpu,gpu,jax-cpu,torch-cpu "
                       "(default: the TensorFlow envs `gpubench envs` lists)")
    where.add_argument("--here", action="store_true",
                       help="run in a kernel of the Python that runs gpubench, creating no env; "
                            "labelled cpu, gpu, jax-cpu, ..., torch-gpu by its backend "
                            f"({TITLES}) and devices")
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

    env_list = _command(sub, "envs", "list the envs: backend, GPU, and the Python and checkout "
                        "each runs", "gpubench envs")
    env_list.add_argument("--driver", nargs="?", const="", metavar="ENV",
                          help="print only the Python that runs gpubench itself (for the Makefile)")

    check = _command(sub, "doctor", "print this environment and check the GPU",
                     "gpubench doctor", "gpubench doctor --gpu   # exit 1 unless a GPU is usable")
    check.add_argument("--gpu", action="store_true", help="exit 1 unless a GPU is usable")
    check.add_argument("--json", action="store_true",
                       help="print one JSON document (the snapshot, devices, env label, "
                            "diagnosis; or the error) and nothing else")

    cluster = "gpubench scaling --cluster 10.0.0.1:12345,10.0.0.2:12345"
    scaling = _command(sub, "scaling", "multi-worker training across processes: local workers "
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
        with runner.signals_stop_the_run():
            return COMMANDS[args.command](args)
    except KeyboardInterrupt:  # a run says how to resume it itself; anything else stops here
        print(f"gpubench {args.command}: interrupted by {runner.Stop.reason or 'Ctrl-C'}",
              file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:  # started by a Python without gpubench's dependencies
        if (exc.name or "gpubench").split(".")[0] == "gpubench":
            raise  # gpubench's own module: a bug, not a missing dependency
        print(f"gpubench {args.command}: {doctor.missing_module(exc, args.command)}",
              file=sys.stderr)
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


def split_names(text: str | None) -> list[str] | None:
    """"a,b" -> ["a", "b"]; None stays None."""
    if text is None:
        return None
    if names := [part.strip() for part in text.split(",") if part.strip()]:
        return names
    raise runner.UsageError(f"empty list {text!r}; give comma-separated names")


def _run(args: argparse.Namespace) -> int:
    return runner.run(profile=args.profile, env_names=split_names(args.envs),
                      notebooks=split_names(args.notebooks), out=args.out, resume=args.resume,
                      params=runner.parse_params(args.param), here=args.here, kernel=args.kernel)


def _report(args: argparse.Namespace) -> int:
    from gpubench import report  # noqa: PLC0415

    runs = report.find_runs(args.run_dirs)
    for run_dir in runs:
        rundir.tidy(run_dir)
    out = Path(args.out) if args.out else runs[0]
    try:
        print(f"Report: {report.build(runs, args.out)}")
    except KeyboardInterrupt:
        print(f"gpubench report: interrupted by {runner.Stop.reason or 'Ctrl-C'}; "
              f"{out / 'report.md'} was not written (charts made so far may be in {out}); run "
              "the same command again", file=sys.stderr)
        return 130
    return 0


def _envs(args: argparse.Namespace) -> int:
    if args.driver is not None:
        print(envs.driver_python(env=args.driver or None))
        return 0
    envs.use_checkout_kernels()
    print(envs.envs_report())
    return 0


def _scaling(args: argparse.Namespace) -> int:
    from gpubench import scaling  # noqa: PLC0415

    args.out = args.out or str(scaling.default_out())  # one folder for the workers and the table
    code = scaling.cli_main(args)
    if code == 0 and (args.local_workers is not None or args.index == 0):
        from gpubench.report import scaling as scaling_report  # noqa: PLC0415

        found = [r for r in results.read_records(Path(args.out) / results.RESULTS_FILE)
                 if r.get("benchmark") == "scaling"]
        if found:
            print(scaling_report.table(found))
    return code


COMMANDS = {"run": _run, "report": _report, "envs": _envs, "scaling": _scaling,
            "setup": lambda args: envs.setup(gpu=args.gpu, backends=args.backends),
            "doctor": lambda args: doctor.main(args.gpu, args.json)}
