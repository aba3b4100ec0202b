"""`gpubench run` from start to end: the checks before the run directory exists, each job (its
attempt claimed in run.json, its notebook run by papermill in its env's kernel) after a progress
line, the summary, the report, and the exit code (0 all ok, 1 a job not ok, 2 no report, 130)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path

from gpubench import backends, chapter, envs, results, rundir
from gpubench import params as nb_params
from gpubench.rundir import LOCK, MANIFEST, Stop, UsageError
from gpubench.runner import kernels
from gpubench.runner import targets as where
from gpubench.runner.targets import NEW_RUN, Job, Target
from gpubench.scaling import rules  # as targets does: Multi_GPU_Scaling's rule

# papermill -> nbformat -> jsonschema builds rfc3987_syntax's URI grammar at import: ~3.5 s of
# CPU before the first notebook, for a format check neither of them uses.
sys.modules.setdefault("rfc3987_syntax", None)

# papermill's own lines that the run's log leaves out
PAPERMILL_CHATTER = ("Executing notebook", "Executing Cell", "Ending Cell", "Input Notebook",
                     "Output Notebook", "Working directory:", "<Figure size",
                     "<IPython.core.display.")


class CellOutput(logging.Formatter):
    """Papermill's cell output as "  env/notebook| line", ANSI escapes removed."""

    prefix = ""

    def format(self, record: logging.LogRecord) -> str:
        """Prefix every line of the message."""
        text = chapter.ANSI.sub("", record.getMessage()).rstrip()
        return "\n".join(f"  {self.prefix}| {line}" for line in text.splitlines())

    def filter(self, record: logging.LogRecord) -> bool:
        """Drop papermill's own chatter and empty lines."""
        message = record.getMessage().strip()
        return bool(message) and not message.startswith(PAPERMILL_CHATTER)


def run(args) -> int:
    """`gpubench run ARGS`: the notebooks across envs (or --here, or --kernel), then the report."""
    params = where.parse_params(args.param)
    new = [option for option, value in (("--out", args.out), ("-p", params), ("--envs", args.envs),
                                        ("--here", args.here), ("--kernel", args.kernel)) if value]
    if args.resume and new:
        raise UsageError(f"{new[0]} goes with a new run; --resume finishes the run as it "
                         "started (its envs, parameters and folder)")
    envs.use_checkout_kernels()
    with contextlib.ExitStack() as stack:
        if args.resume:
            run_dir, manifest, jobs = load_run(args.resume, args.profile, stack)
            targets, problems = where.for_resume(manifest, jobs, run_dir / MANIFEST)
        else:
            chosen = where.check_notebooks(args.notebooks)
            where.check_params(params, chosen)
            targets = (where.probed(args.kernel) if args.here or args.kernel
                       else where.standard(args.envs))
            problems = where.find_problems(targets, chosen, params, named=args.envs is not None)
            run_dir, manifest, jobs = new_run(
                args.out, nb_params.resolve_profile(args.profile) if args.profile else "full",
                targets, chosen, params, stack, named=args.notebooks is not None)
        return _run_jobs(run_dir, manifest, jobs, targets, problems, bool(args.resume))


def save_jobs(run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    """Save the jobs in run.json atomically; a full or read-only disk is a UsageError naming it."""
    manifest["jobs"] = [asdict(j) for j in jobs]
    text = json.dumps(manifest, indent=1)
    try:
        rundir.write_atomic(run_dir / MANIFEST, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot write {run_dir / MANIFEST}: {results.write_problem(exc)}; free "
                         f"some space or make {run_dir} writable, then "
                         f"`{rundir.resume_command(run_dir)}`") from None


def check_new_out(run_dir: Path) -> None:
    """Refuse an --out that holds a run or anything else (a lone run.lock is nothing)."""
    if (run_dir / MANIFEST).is_file():
        raise UsageError(f"--out {str(run_dir)!r} already holds a run; finish it with "
                         f"`{rundir.resume_command(run_dir)}`, or choose a new --out")
    if run_dir.exists() and (not run_dir.is_dir()
                             or any(p.name != LOCK for p in run_dir.iterdir())):
        raise UsageError(f"--out {str(run_dir)!r} exists and is not a run directory; "
                         "choose a new or empty folder")


def new_run(out: str | None, profile: str, targets: dict[str, Target], notebooks: list[str],
            params: dict, stack: contextlib.ExitStack,
            named: bool = False) -> tuple[Path, dict, list[Job]]:
    """Create and lock the run directory and its manifest; refuse an --out holding anything."""
    run_id = results.new_run_id()
    run_dir = Path(out) if out else results.runs_dir() / run_id
    check_new_out(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --out {str(run_dir)!r}: {results.write_problem(exc)}; "
                         "choose a writable folder") from None
    rundir.lock_run_dir(run_dir, stack)
    if (run_dir / MANIFEST).is_file():  # another process made it between our look and our lock
        raise UsageError(f"--out {str(run_dir)!r} was just created by another gpubench run; "
                         "choose a new --out")
    manifest = {"schema": where.MANIFEST_SCHEMA, "run_id": run_id, "profile": profile,
                "params": params, "named": notebooks if named else [],
                "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "envs": {env: asdict(target) for env, target in targets.items()}}
    jobs = [Job(env, nb) for env in targets for nb in notebooks]
    save_jobs(run_dir, manifest, jobs)
    return run_dir, manifest, jobs


def load_run(resume: str, profile: str | None,
             stack: contextlib.ExitStack) -> tuple[Path, dict, list[Job]]:
    """Lock a run directory and read its manifest, to finish the run."""
    run_dir = Path(resume)
    path = run_dir / MANIFEST
    if not path.is_symlink() and not path.is_file():
        raise UsageError(f"--resume {str(run_dir)!r} is not a run directory (no {MANIFEST}); "
                         "give a folder written by `gpubench run`")
    rundir.lock_run_dir(run_dir, stack)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:  # a symlink loop, a folder, no permission
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}; {NEW_RUN}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise UsageError(f"{path} is empty or damaged ({type(exc).__name__}: {exc}); it is not "
                         f"a job list written by `gpubench run`: {NEW_RUN}") from None
    jobs = where.check_manifest(manifest, path)
    if profile is not None and profile != manifest["profile"]:
        raise UsageError(f"--profile {profile} differs from the run's profile "
                         f"{manifest['profile']}; resume without --profile")
    return run_dir, manifest, jobs


def _run_jobs(run_dir: Path, manifest: dict, jobs: list[Job], targets: dict[str, Target],
              problems: where.Problems, resumed: bool) -> int:
    from tqdm import tqdm  # noqa: PLC0415
    from tqdm.contrib.logging import logging_redirect_tqdm  # noqa: PLC0415

    todo = [j for j in jobs if j.status != "ok"]
    logger, cell_output = logging.getLogger("papermill"), CellOutput()
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(cell_output)
    bar = code = None  # code: the summary's exit code, once it is printed
    try:
        print(f"gpubench run {run_dir}  (profile {manifest['profile']}, "
              f"run id {manifest['run_id']})")
        for env, target in ((e, t) for e, t in targets.items() if t.how != "env"):
            print(f"env {env}: " + (f"this Python, {target.python}" if target.how == "here"
                                    else f"kernel {target.kernel} ({target.python})")
                  + f"; {target.backend} sees {', '.join(target.devices or ['?'])}")
        if resumed:
            print(f"resuming: {len(jobs) - len(todo)} notebook(s) already done, {len(todo)} to run")
        plan(todo, manifest, targets, problems)
        expected = nb_params.EXPECTED_SECONDS[manifest["profile"]]
        runnable = [j for j in todo if j.status == "pending"]
        total, done, started = sum(expected[j.notebook] for j in runnable), 0.0, time.perf_counter()
        bar = tqdm(total=total, unit="s", file=sys.stderr, dynamic_ncols=True,
                   bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]",
                   disable=not sys.stderr.isatty())  # a log file gets the start lines instead
        logger.addHandler(handler)
        logger.addFilter(cell_output)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        with logging_redirect_tqdm(loggers=[logger], tqdm_class=tqdm):
            for number, job in enumerate(runnable, start=1):
                cell_output.prefix = f"{job.env}/{job.notebook}"
                label = f"[{number}/{len(runnable)}] {cell_output.prefix}"
                bar.set_description(label)
                bar.write(f"{label}  {eta(time.perf_counter() - started, done, total)}")
                execute(job, run_dir, manifest, jobs)
                done += expected[job.notebook]
                bar.update(expected[job.notebook])
                bar.write(f"{job.env}/{job.notebook}: {job.status} in {job.seconds:.0f} s"
                          + (f" — {job.error}" if job.error else ""))
                save_jobs(run_dir, manifest, jobs)
                if Stop.reason is not None:
                    raise KeyboardInterrupt
        save_jobs(run_dir, manifest, jobs)
        code = summary(jobs)
        return code if finish_report(run_dir) else 2
    except KeyboardInterrupt:
        for job in (j for j in jobs if j.status == "running"):  # stopped at once, or before
            job.status, job.error = "interrupted", f"stopped by {Stop.reason or 'Ctrl-C'}"
        save_jobs(run_dir, manifest, jobs)
        if code is None:  # a stop while the report is written: the summary is out already
            summary(jobs)
        sys.stdout.flush()
        print(f"Interrupted by {Stop.reason or 'Ctrl-C'}; every measurement so far is in "
              f"{run_dir / results.RESULTS_FILE}. Finish the run with: "
              f"{rundir.resume_command(run_dir)}", file=sys.stderr, flush=True)
        return 130
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(cell_output)
        if bar is not None:
            bar.close()


def eta(elapsed: float, done: float, total: float) -> str:
    """"(elapsed 01:05, about 03:20 left)": the rest scaled by the pace of the work done."""
    from tqdm import tqdm  # noqa: PLC0415 - papermill's dependency, loaded by `gpubench run`

    left = elapsed / done * (total - done) if done else total
    return f"(elapsed {tqdm.format_interval(elapsed)}, about {tqdm.format_interval(left)} left)"


def finish_report(run_dir: Path) -> bool:
    """Write the run's report, or say why not and how to write it later; whether it was."""
    from gpubench import report  # noqa: PLC0415

    try:
        print(f"Report: {report.build([run_dir])}")
        return True
    except Exception as exc:  # noqa: BLE001 - the jobs are done; the report can be made later
        why = str(exc).split("; ")[0] if isinstance(exc, report.ReportWriteError) else (
            f"{type(exc).__name__}: {exc}")
        if isinstance(exc, OSError):
            why = f"cannot write {exc.filename or run_dir}: {results.write_problem(exc)}"
        print(f"gpubench run: error: the report was not written ({why}); every record is in "
              f"{run_dir / results.RESULTS_FILE}: fix that, then `gpubench report {run_dir}`",
              file=sys.stderr)
        return False


def summary(jobs: list[Job]) -> int:
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


def plan(jobs: list[Job], manifest: dict, targets: dict[str, Target],
         problems: where.Problems) -> None:
    """Set each job pending, or skipped/failed by its env's problem or by scaling's rule."""
    for job in jobs:
        job.status, job.error = problems.get(job.env, ("pending", None))
        if job.status == "pending" and job.notebook == rules.NOTEBOOK:
            gpus = targets[job.env].gpus
            job.extra = rules.include_in_run(
                bool(gpus) or backends.is_gpu_env(job.env), len(gpus), manifest["profile"],
                job.notebook in manifest.get("named", []))
            if job.extra is None:
                job.status, job.error = "skipped", (
                    f"{job.notebook} needs 2 or more GPUs in the full profile; name it "
                    f"(--notebooks {job.notebook}) to run it on 2 virtual CPU devices")
    for env, (status, why) in problems.items():
        print(f"{status.upper()} env {env}: {why}")


def job_parameters(job: Job, run_dir: Path, manifest: dict) -> dict:
    """The papermill parameters of one job: profile, env, results path, device, -p values."""
    params = {"profile": manifest["profile"], "env_name": job.env,
              "results_path": str((run_dir / results.RESULTS_FILE).resolve()), **(job.extra or {})}
    if "device" in where.declared(job.notebook):
        target = Target(**manifest["envs"][job.env])
        gpu = bool(target.gpus) if target.devices is not None else backends.is_gpu_env(job.env)
        params["device"] = "gpu" if gpu else "cpu"
    return {**params, **where.given(manifest["params"], job.notebook)}


def recorded_attempts(run_dir: Path, job: Job) -> set[int]:
    """The attempts of `job` with a readable record in results.jsonl."""
    try:  # unreadable lines are skipped; the report warns of them, once
        with warnings.catch_warnings(action="ignore"):
            records = rundir.read_records(run_dir / results.RESULTS_FILE)
    except (OSError, ValueError):
        return set()
    return {r.get("attempt", 1) for r in records
            if (r["env"], r["notebook"]) == (job.env, job.notebook)}


def execute(job: Job, run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    """Claim the job's next attempt in run.json, run its notebook, set its status and error."""
    import papermill  # noqa: PLC0415 - only the driver env has it

    job.attempt = max([job.attempt, *recorded_attempts(run_dir, job)]) + 1
    job.status, job.error, job.seconds = "running", None, None
    save_jobs(run_dir, manifest, jobs)
    output = run_dir / job.env / f"{job.notebook}.ipynb"
    target = Target(**manifest["envs"][job.env])
    here = target.python if target.how == "here" else None
    env = {**(target.environ(None) if here else {}), "GPUBENCH_RUN_ID": manifest["run_id"],
           "GPUBENCH_ATTEMPT": str(job.attempt), "NO_COLOR": "1", "TERM": "dumb"}
    start = time.perf_counter()
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        papermill.execute_notebook(
            str(where.notebook_path(job.notebook)), str(output),
            parameters=job_parameters(job, run_dir, manifest), log_output=True,
            kernel_name=kernels.HERE_KERNEL if here else target.kernel,
            kernel_manager_class=kernels.kernel_manager_class(env, here, run_dir),
            progress_bar=False, cwd=str(nb_params.notebooks_dir()), config=kernels.ENCRYPTED,
            # every record is on disk: stop at once (a graceful stop printed a zmq traceback)
            shutdown_kernel="immediate")
        ok = job.attempt in recorded_attempts(run_dir, job)
        job.status, job.error = ("ok", None) if ok else ("failed", (
            f"the notebook ended but {run_dir / results.RESULTS_FILE} holds no readable record "
            f"of it (attempt {job.attempt})"))
    except papermill.PapermillExecutionError as exc:
        job.status, job.error = "failed", f"{exc.ename}: {exc.evalue}"[:2000]
    except Exception as exc:  # noqa: BLE001 - a dead kernel or a bad notebook fails this job only
        job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"[:2000]
        for kernel in Stop.kernels:  # a kernel that died says why on its stderr, if anywhere
            kernel.stderr_reader.join(2.0)  # its last lines, once it ended
            if words := list(kernel.stderr_tail):
                job.error += f"; its stderr ended: {words[-1]}" + "".join(
                    f"\n  kernel stderr| {line}" for line in words)
        if isinstance(exc, OSError) and exc.errno in results.WRITE_ERRORS:  # say which file
            job.error = (f"cannot write {exc.filename or output}: {results.write_problem(exc)}; "
                         "free some space (or make it writable), then "
                         f"`{rundir.resume_command(run_dir)}`")
    finally:
        job.seconds = time.perf_counter() - start
        Stop.kernels.clear()
        rundir.remove_leftovers(run_dir, ours=True)
    if Stop.reason is not None and job.status != "ok":  # the interrupted cell failed it
        job.status, job.error = "interrupted", f"stopped by {Stop.reason}"
