"""`gpubench run` from start to end: the arguments checked before the run directory exists, the
jobs run one after another with a progress line (elapsed, time left) before each, the summary,
the report, and the exit code (0 all ok, 1 a job not ok, 2 no report, 130 interrupted)."""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpubench import chapter, envs, results
from gpubench import params as nb_params
from gpubench.rundir import UsageError
from gpubench.runner.arguments import (
    NEW_RUN,
    check_notebooks,
    check_params,
    check_scaling_backends,
)
from gpubench.runner.jobs import execute
from gpubench.runner.kernels import _Stop, register_provisioner, signals_stop_the_run
from gpubench.runner.manifest import MANIFEST, Job, load_run, new_run, save_jobs, target_of
from gpubench.runner.targets import (
    Target,
    check_envs,
    check_reachable,
    check_runnable,
    env_problems,
    here_target,
    kernel_environ,
    kernel_spec,
    kernel_target,
)

_ANSI = chapter.ANSI  # colours and cursor moves (Keras's summary, via rich): kept out of logs
_PAPERMILL_CHATTER = ("Executing notebook with kernel", "Executing Cell", "Ending Cell",
                      "Input Notebook", "Output Notebook", "Executing notebook",
                      "Working directory:", "<Figure size", "<IPython.core.display.")


class _CellOutput(logging.Formatter):
    """Papermill's cell output as "  env/notebook| line", ANSI escapes removed."""

    prefix = ""

    def format(self, record: logging.LogRecord) -> str:
        """Prefix every line of the message."""
        text = _ANSI.sub("", record.getMessage()).rstrip()
        return "\n".join(f"  {self.prefix}| {line}" for line in text.splitlines())


def _worth_showing(record: logging.LogRecord) -> bool:
    """Drop papermill's own chatter and empty lines."""
    message = record.getMessage().strip()
    return bool(message) and not message.startswith(_PAPERMILL_CHATTER)


def run(profile: str | None = None, env_names: list[str] | None = None,
        notebooks: list[str] | None = None, out: str | None = None, resume: str | None = None,
        params: dict | None = None, here: bool = False, kernel: str | None = None) -> int:
    """Run the notebooks across envs (or `here`, or in `kernel`) and build the report; return
    the CLI exit code. Every check that can be made is made before the run directory exists."""
    with signals_stop_the_run():  # from the start: a Ctrl-C at any point ends in one line
        if resume and out:
            raise UsageError("give either --out (a new run) or --resume (an unfinished one), "
                             "not both")
        if resume and params:
            raise UsageError("-p goes with a new run; --resume runs with the parameters it "
                             "started with")
        chosen = [o for o, v in (("--envs", env_names), ("--here", here), ("--kernel", kernel))
                  if v]
        if resume and chosen:
            raise UsageError(f"{chosen[0]} goes with a new run; --resume reaches the envs the "
                             "run started with")
        if len(chosen) > 1:
            raise UsageError(f"give one of --envs, --here and --kernel, not {' and '.join(chosen)}")
        register_provisioner()
        envs.use_checkout_kernels()
        with contextlib.ExitStack() as stack:
            problems = None
            if resume:
                run_dir, manifest, jobs = load_run(resume, profile, stack)
                targets = {env: target_of(manifest, env) for env in manifest["envs"]}
                check_reachable(targets, run_dir / MANIFEST)
                waiting = {e: t for e, t in targets.items()
                           if any(j.env == e and j.status != "ok" for j in jobs)}
                check_kernels_start(waiting, run_dir / MANIFEST)
                check_xla_flags(waiting)
            else:
                profile = nb_params.resolve_profile(profile) if profile else "full"
                notebook_list = check_notebooks(notebooks)
                check_params(params or {}, notebook_list)
                if here:
                    targets = dict([here_target()])
                elif kernel:
                    targets = dict([kernel_target(kernel)])
                else:
                    targets = check_envs(env_names)
                problems = env_problems(targets)
                check_runnable(targets, notebook_list, params or {}, problems)
                check_scaling_backends(targets, notebooks)
                check_xla_flags({e: t for e, t in targets.items() if e not in problems})
                run_dir, manifest, jobs = new_run(out, profile, targets, notebook_list,
                                                  params or {}, stack, named=notebooks is not None)
            try:
                return _run_jobs(run_dir, manifest, jobs, targets, problems)
            except KeyboardInterrupt:  # before the first notebook: run.json is as it was
                _interrupted(run_dir)
                return 130


def check_kernels_start(targets: dict[str, Target], path: Path) -> None:
    """On resume, before any attempt is claimed: the kernel of each env with work left can start
    (the Python its kernel spec runs exists), else a UsageError naming the kernel and the fix."""
    for env, target in targets.items():
        if target.how == "here":
            continue  # check_reachable looked for its Python
        argv = kernel_spec(target.kernel).argv
        python = argv[0] if argv else ""
        if not shutil.which(python):
            fix = (f"re-create the env with {envs.setup_command(env)}"
                   if target.how == "env" else "register that kernel again with a Python that "
                   "exists (`jupyter kernelspec list` shows where it is)")
            raise UsageError(f"{path}: envs.{env}.kernel {target.kernel!r} cannot start: its "
                             f"Python {python!r} no longer exists; {fix}, then resume, or "
                             f"{NEW_RUN}")


def check_xla_flags(targets: dict[str, Target]) -> None:
    """Before any kernel: a TensorFlow env given XLA_FLAGS compiles one small XLA function in its
    own Python (TensorFlow reads the flags only then, and aborts on one it does not know, as
    JAX's probe does at start); a refusal is a UsageError quoting TensorFlow's line."""
    for env, target in targets.items():
        if target.backend != "tensorflow" or not target.python:
            continue
        environ = kernel_environ(target)
        if not (flags := environ.get("XLA_FLAGS")):
            continue
        check = "from gpubench.backends import tensorflow; tensorflow.check_xla_flags()"
        try:
            done = subprocess.run([target.python, "-c", check], env=environ, timeout=600,
                                  capture_output=True, text=True, cwd=tempfile.gettempdir())
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"env {env}: cannot check XLA_FLAGS={flags!r} in {target.python} "
                             f"({exc}); unset XLA_FLAGS, or fix that env") from None
        if done.returncode != 0:
            said = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
            line = next((s for s in reversed(said) if "XLA_FLAGS" in s), said[-1])
            raise UsageError(f"env {env}: TensorFlow refuses XLA_FLAGS={flags!r} ("
                             f"{line.strip()[:300]}); fix or unset XLA_FLAGS")


def _interrupted(run_dir: Path) -> None:
    """The one line of an interrupted run: what stopped it and the command that finishes it."""
    sys.stdout.flush()
    print(f"Interrupted by {_Stop.reason or 'Ctrl-C'}; every measurement so far is in "
          f"{run_dir / 'results.jsonl'}. Finish the run with: gpubench run --resume {run_dir}",
          file=sys.stderr, flush=True)


def _run_jobs(run_dir: Path, manifest: dict, jobs: list[Job], targets: dict[str, Target],
              problems: dict[str, tuple[str, str]] | None) -> int:
    """Run the jobs not yet ok (each claimed in run.json first), then write the report."""
    from tqdm import tqdm  # noqa: PLC0415
    from tqdm.contrib.logging import logging_redirect_tqdm  # noqa: PLC0415

    todo = [j for j in jobs if j.status != "ok"]
    print(f"gpubench run {run_dir}  (profile {manifest['profile']}, run id {manifest['run_id']})")
    for env, target in targets.items():
        if target.how != "env":
            print(f"env {env}: " + (f"this Python, {target.python}" if target.how == "here"
                                    else f"kernel {target.kernel} ({target.python})")
                  + f"; {target.backend} sees {', '.join(target.devices or ['?'])}")
    resumed = problems is None
    if resumed:
        print(f"resuming: {len(jobs) - len(todo)} notebook(s) already done, {len(todo)} to run")
        waiting = {e: t for e, t in targets.items() if any(j.env == e for j in todo)}
        problems = env_problems(waiting)
        check_runnable(waiting, list(dict.fromkeys(j.notebook for j in todo)),
                       manifest["params"], problems)
    _mark_unavailable(todo, manifest, targets, problems)

    expected = nb_params.EXPECTED_SECONDS[manifest["profile"]]
    runnable = [j for j in todo if j.status == "pending"]
    total = sum(expected[j.notebook] for j in runnable)
    bar = tqdm(total=total, unit="s", file=sys.stderr, dynamic_ncols=True,
               bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]",
               disable=not sys.stderr.isatty())  # a log file gets the start lines below instead
    started, done = time.perf_counter(), 0.0  # bar.n stays 0 when the bar is disabled
    code = None  # the summary's exit code, once it is printed
    logger, cell_output = logging.getLogger("papermill"), _CellOutput()
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(cell_output)
    logger.addHandler(handler)
    logger.addFilter(_worth_showing)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        with logging_redirect_tqdm(loggers=[logger], tqdm_class=tqdm):
            for number, job in enumerate(runnable, start=1):
                cell_output.prefix = f"{job.env}/{job.notebook}"
                label = f"[{number}/{len(runnable)}] {cell_output.prefix}"
                bar.set_description(label)
                bar.write(f"{label}  {_eta(time.perf_counter() - started, done, total)}")
                execute(job, run_dir, manifest, jobs)
                done += expected[job.notebook]
                bar.update(expected[job.notebook])
                bar.write(f"{job.env}/{job.notebook}: {job.status} in {job.seconds:.0f} s"
                          + (f" — {job.error}" if job.error else ""))
                save_jobs(run_dir, manifest, jobs)
                if _Stop.reason is not None:
                    raise KeyboardInterrupt
        save_jobs(run_dir, manifest, jobs)
        code = _summary(jobs)
        if not _finish_report(run_dir):
            return 2
    except KeyboardInterrupt:
        bar.close()
        for job in jobs:
            if job.status == "running":  # a Ctrl-C between its claim and its start
                job.status, job.error = "interrupted", f"stopped by {_Stop.reason or 'Ctrl-C'}"
        save_jobs(run_dir, manifest, jobs)
        if code is None:  # a stop while the report is written: the summary is out already
            _summary(jobs)
        _interrupted(run_dir)
        return 130
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(_worth_showing)
        bar.close()
    return code


def _eta(elapsed: float, done: float, total: float) -> str:
    """"(elapsed 01:05, about 03:20 left)", the rest scaled by how fast the work done so far
    went (tqdm's clock)."""
    from tqdm import tqdm  # noqa: PLC0415 - papermill's dependency, loaded by `gpubench run`

    left = elapsed / done * (total - done) if done else total
    return f"(elapsed {tqdm.format_interval(elapsed)}, about {tqdm.format_interval(left)} left)"


def _mark_unavailable(jobs: list[Job], manifest: dict, targets: dict[str, Target],
                      problems: dict[str, tuple[str, str]]) -> None:
    """Set each job pending, or skipped/failed by its env's problem; Multi_GPU_Scaling runs on
    2+ GPUs, or on 2 virtual CPU devices when quick or named."""
    named = manifest.get("named", [])
    for job in jobs:
        job.status, job.error = problems.get(job.env, ("pending", None))
        if job.status == "pending" and job.notebook == "Multi_GPU_Scaling":
            from gpubench import scaling  # noqa: PLC0415 - no ML framework at import

            gpus = targets[job.env].gpus
            if why := scaling.backend_refusal(targets[job.env].backend or "tensorflow"):
                job.status, job.error = "skipped", why
                continue
            job.extra = scaling.include_in_run(bool(gpus) or envs.is_gpu_env(job.env), len(gpus),
                                               manifest["profile"], job.notebook in named)
            if job.extra is None:
                job.status = "skipped"
                job.error = ("Multi_GPU_Scaling needs 2 or more GPUs in the full profile; name it "
                             "(--notebooks Multi_GPU_Scaling) to run it on 2 virtual CPU devices")
    for env, (status, why) in problems.items():
        print(f"{status.upper()} env {env}: {why}")


def _finish_report(run_dir: Path) -> bool:
    """Write the run's report, whatever was recorded (it lists every job); say why not if it
    cannot be written, with the command that writes it later. Whether it was written."""
    from gpubench import report  # noqa: PLC0415

    try:
        print(f"Report: {report.build([run_dir])}")
        return True
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - the jobs are done; the report can be made later
        why = str(exc).split("; ")[0] if isinstance(exc, report.ReportWriteError) else (
            f"{type(exc).__name__}: {exc}")
        if isinstance(exc, OSError):
            why = f"cannot write {exc.filename or run_dir}: {results.write_problem(exc)}"
        print(f"gpubench run: error: the report was not written ({why}); every record is in "
              f"{run_dir / 'results.jsonl'}: fix that, then `gpubench report {run_dir}`",
              file=sys.stderr)
        return False


def _summary(jobs: list[Job]) -> int:
    """Print ok / failed / skipped and return the exit code (0 all ok, 1 otherwise)."""
    print("\nSummary")
    for job in jobs:
        took = f"{job.seconds:6.0f} s" if job.seconds is not None else "      -"
        print(f"  {job.status:<11} {job.env + '/' + job.notebook:<32} {took}"
              + (f"  {job.error.splitlines()[0]}" if job.error else ""))
    order = ("ok", "failed", "skipped", "interrupted", "pending", "running")  # jobs not begun
    counts = {s: sum(j.status == s for j in jobs) for s in order}
    print("  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return 1 if counts["failed"] or counts["interrupted"] or not counts["ok"] else 0
