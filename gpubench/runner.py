"""`gpubench run`: every notebook, in every env's kernel, with papermill; then the report.

RUN_DIR/run.json holds the jobs (`--resume` reads it); RUN_DIR/run.lock is flock-ed by the
running process. Kernels die with the runner; a first Ctrl-C or SIGTERM interrupts the kernel,
so the notebook keeps what it measured; a second one stops at once.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import re
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gpubench import envs, profiles, results

# papermill -> nbformat -> jsonschema builds rfc3987_syntax's URI grammar at import: ~3.5 s of
# CPU before the first notebook, for a format check neither of them uses.
sys.modules.setdefault("rfc3987_syntax", None)

MANIFEST = "run.json"
LOCK = "run.lock"
# Parameters the runner sets itself, and the option a user gives instead.
RUNNER_PARAMS = {"profile": "--profile", "results_path": "--out", "env_name": "--envs"}
# Colours and cursor moves (Keras's model summary goes through rich); kept out of logs.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


class UsageError(ValueError):
    """Bad usage of `gpubench run`: the CLI exits with code 2."""


@dataclass
class Job:
    """One notebook in one env."""

    env: str
    notebook: str
    status: str = "pending"  # pending | ok | failed | skipped | interrupted
    seconds: float | None = None
    error: str | None = None
    attempt: int = 0  # how many times the job was executed; its records carry this number
    extra: dict | None = None  # parameters the runner adds (Multi_GPU_Scaling's virtual devices)


def notebooks_dir() -> Path:
    """The folder of the source notebooks."""
    return envs.project_root() / "notebooks"


# ---------------------------------------------------------------- arguments

def split_names(text: str | None) -> list[str] | None:
    """"a,b" -> ["a", "b"]; None stays None."""
    if text is None:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError(f"empty list {text!r}; give comma-separated names")
    return names


def check_notebooks(names: list[str] | None) -> list[str]:
    """The notebooks to run, in the canonical order; unknown or missing ones are a usage error."""
    unknown = [n for n in names or [] if n not in profiles.NOTEBOOKS]
    if unknown:
        raise UsageError(f"unknown notebook(s) {', '.join(unknown)}; "
                         f"use some of {', '.join(profiles.NOTEBOOKS)}")
    chosen = [n for n in profiles.NOTEBOOKS if names is None or n in names]
    if missing := [n for n in chosen if not (notebooks_dir() / f"{n}.ipynb").is_file()]:
        raise UsageError(f"notebook(s) {', '.join(missing)} missing from {notebooks_dir()}; "
                         "restore them (git checkout notebooks) or leave them out with --notebooks")
    return chosen


def check_envs(names: list[str] | None) -> list[str]:
    """The envs to run: the standard ones plus registered variants; unknown names are an error."""
    known = list(dict.fromkeys([*envs.STANDARD_ENVS, *sorted(envs.kernel_specs())]))
    if names is None:
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown env(s) {', '.join(unknown)}; use some of {', '.join(known)} "
                         f"(an env is a Jupyter kernel named {envs.kernel_name('ENV')})")
    return list(dict.fromkeys(names))


def parse_params(items: list[str] | None) -> dict[str, dict]:
    """--param [NOTEBOOK:]NAME=VALUE items -> {notebook or "*": {name: value}}; values parsed as JSON."""
    parsed: dict[str, dict] = {}
    for item in items or []:
        head, sep, value = item.partition("=")
        target, _, name = head.rpartition(":")
        target = target or "*"
        if not sep or not name:
            raise UsageError(f"bad --param {item!r}; write NAME=VALUE or NOTEBOOK:NAME=VALUE")
        if target != "*":
            check_notebooks([target])
        if name in RUNNER_PARAMS:
            raise UsageError(f"-p {name} belongs to the runner; use {RUNNER_PARAMS[name]} instead")
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
        parsed.setdefault(target, {})[name] = value
    return parsed


def check_params(params: dict[str, dict], notebooks: list[str]) -> None:
    """Refuse a -p name no notebook it targets declares, or a value its notebook would reject."""
    from gpubench import notebook as nb_rules  # noqa: PLC0415

    # profiles.parameter_names is each parameters cell (test_notebooks checks it with papermill)
    targets = {scope: notebooks if scope == "*" else [scope] for scope in params}
    for scope, values in params.items():
        for name in values:
            if not any(name in profiles.parameter_names(nb) for nb in targets[scope]):
                takes = "; ".join(f"{nb} takes {', '.join(profiles.parameter_names(nb))}"
                                  for nb in targets[scope])
                raise UsageError(f"unknown parameter -p {name}: {takes}")
    for nb in dict.fromkeys(nb for scope in targets for nb in targets[scope]):
        given = {name: value for scope in ("*", nb) for name, value in params.get(scope, {}).items()
                 if name in profiles.parameter_names(nb)}
        try:
            nb_rules.check_params(nb, given)
        except ValueError as exc:
            raise UsageError(f"-p for {nb}: {exc}") from None


# ---------------------------------------------------------------- run directory

def is_run_dir(path: Path) -> bool:
    """Whether `path` holds a run started by `gpubench run`."""
    return (path / MANIFEST).is_file()


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Save run.json atomically; a full or read-only disk is a UsageError naming the file."""
    tmp = run_dir / (MANIFEST + ".tmp")
    try:
        tmp.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        tmp.replace(run_dir / MANIFEST)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UsageError(f"cannot write {run_dir / MANIFEST}: {results.write_problem(exc)}; free "
                         f"some space or make {run_dir} writable, then "
                         f"`gpubench run --resume {run_dir}`") from None


def _holder(run_dir: Path) -> str:
    """The PID written in run.lock by the process holding it (it may still be writing it)."""
    for _ in range(20):
        if pid := (run_dir / LOCK).read_text().strip():
            return pid
        time.sleep(0.05)
    return "unknown"


def lock_run_dir(run_dir: Path, stack: contextlib.ExitStack) -> None:
    """Hold run.lock in `run_dir` until `stack` closes; a second process gets a UsageError naming the holder."""
    try:
        fd = stack.enter_context(envs.locked(run_dir / LOCK, wait=False))
    except BlockingIOError:
        raise UsageError(f"{run_dir} is in use by another gpubench run (PID {_holder(run_dir)}); "
                         "wait for it to end, or stop it first") from None
    except OSError as exc:
        raise UsageError(f"cannot write in {run_dir}: {results.write_problem(exc)}; "
                         "choose a writable --out") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())


def check_new_out(run_dir: Path) -> None:
    """Refuse an --out that holds a run or anything else (a lone run.lock is nothing)."""
    if is_run_dir(run_dir):
        raise UsageError(f"--out {str(run_dir)!r} already holds a run; finish it with "
                         f"--resume {run_dir}, or choose a new --out")
    if run_dir.exists() and (not run_dir.is_dir()
                             or any(p.name != LOCK for p in run_dir.iterdir())):
        raise UsageError(f"--out {str(run_dir)!r} exists and is not a run directory; "
                         "choose a new or empty folder")


def new_run(out: str | None, profile: str, env_names: list[str], notebooks: list[str],
            params: dict, stack: contextlib.ExitStack,
            named: bool = False) -> tuple[Path, dict, list[Job]]:
    """Create and lock the run directory and its manifest; refuse an --out that holds something else."""
    run_id = results.new_run_id()
    run_dir = Path(out) if out else results.runs_dir() / run_id
    check_new_out(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --out {str(run_dir)!r}: {results.write_problem(exc)}; "
                         "choose a writable folder") from None
    lock_run_dir(run_dir, stack)
    if is_run_dir(run_dir):  # another process made it between our look and our lock
        raise UsageError(f"--out {str(run_dir)!r} was just created by another gpubench run; "
                         "choose a new --out")
    manifest = {"schema": 1, "run_id": run_id, "profile": profile, "params": params,
                "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "named": notebooks if named else []}
    jobs = [Job(env, nb) for env in env_names for nb in notebooks]
    _save_jobs(run_dir, manifest, jobs)
    return run_dir, manifest, jobs


def load_run(resume: str, profile: str | None,
             stack: contextlib.ExitStack) -> tuple[Path, dict, list[Job]]:
    """Lock a run directory and read its manifest, to finish the run."""
    run_dir = Path(resume)
    if not is_run_dir(run_dir):
        raise UsageError(f"--resume {str(run_dir)!r} is not a run directory (no {MANIFEST}); "
                         "give a folder written by `gpubench run`")
    lock_run_dir(run_dir, stack)
    path = run_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        jobs = [Job(**job) for job in manifest["jobs"]]
        str(manifest["run_id"]), manifest["profile"], dict(manifest["params"])
    except OSError as exc:
        raise UsageError(f"cannot read {path} ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path} is empty or damaged ({type(exc).__name__}: {exc}); it is not "
                         "a job list written by `gpubench run`: start a new run with --out") from None
    if profile is not None and profile != manifest["profile"]:
        raise UsageError(f"--profile {profile} differs from the run's profile "
                         f"{manifest['profile']}; resume without --profile")
    return run_dir, manifest, jobs


# ---------------------------------------------------------------- execution

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


class _Stop:
    """What the runner's Ctrl-C / SIGTERM handler saw, and the kernels it can interrupt."""

    reason: str | None = None
    kernels: list = []


def _die_with_parent() -> object:
    """A Popen preexec_fn (Linux) that kills the kernel when the runner dies, even by kill -9."""
    import ctypes  # noqa: PLC0415

    parent, prctl = os.getpid(), ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the runner died before prctl took effect
            os._exit(1)

    return preexec


def kernel_manager_class(env: dict[str, str] | None = None) -> type:
    """jupyter_client's AsyncKernelManager: kernels that die with the runner, can be interrupted,
    and get `env` on top of their own environment."""
    from jupyter_client.manager import AsyncKernelManager  # noqa: PLC0415

    class RunnerKernelManager(AsyncKernelManager):
        """A kernel tied to the runner's life, listed in _Stop.kernels while it runs."""

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
            kw["env"] = {**kw.get("env", os.environ), **(env or {})}
            if sys.platform.startswith("linux"):
                kw["preexec_fn"] = _die_with_parent()
            await super()._async_launch_kernel(kernel_cmd, **kw)
            _Stop.kernels.append(self)

    return RunnerKernelManager


def _interrupt_kernels() -> bool:
    """SIGINT to each running kernel, as KernelManager.interrupt_kernel sends; whether there was one."""
    pids = [m.provisioner.pid for m in _Stop.kernels if getattr(m.provisioner, "pid", None)]
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGINT)
    return bool(pids)


def _on_signal(signum: int, frame) -> None:
    """First Ctrl-C / SIGTERM: interrupt the kernel and stop after it; a second one: stop now."""
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    if _Stop.reason is not None or not _interrupt_kernels():
        _Stop.reason = _Stop.reason or name
        raise KeyboardInterrupt
    _Stop.reason = name
    os.write(sys.stderr.fileno(), f"\n{name}: interrupting the notebook so it keeps what it "
             f"measured; {name} again stops at once\n".encode())


@contextlib.contextmanager
def _signals_stop_the_run():
    """Route SIGINT and SIGTERM to _on_signal while the run goes on (main thread only)."""
    _Stop.reason, _Stop.kernels = None, []
    saved = {}
    with contextlib.suppress(ValueError):  # not the main thread: keep Python's defaults
        for signum in (signal.SIGINT, signal.SIGTERM):
            saved[signum] = signal.signal(signum, _on_signal)
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def job_parameters(job: Job, run_dir: Path, manifest: dict) -> dict:
    """The papermill parameters of one job: profile, env, results path, device, and --param values."""
    names = profiles.parameter_names(job.notebook)
    params = {"profile": manifest["profile"], "env_name": job.env,
              "results_path": str((run_dir / "results.jsonl").resolve()), **(job.extra or {})}
    if "device" in names:
        params["device"] = "gpu" if envs.is_gpu_env(job.env) else "cpu"
    params.update({name: value for scope in ("*", job.notebook)
                   for name, value in manifest["params"].get(scope, {}).items() if name in names})
    return params


def kernel_config() -> dict:
    """papermill's (or a KernelManager's) keywords that encrypt the kernel's channels, if it can."""
    from jupyter_client.manager import KernelManager  # noqa: PLC0415
    from traitlets.config import Config  # noqa: PLC0415

    if "transport_encryption" not in KernelManager.class_trait_names():
        return {}
    return {"config": Config({"KernelManager": {"transport_encryption": "auto"}})}


def _records_written(run_dir: Path, job: Job) -> bool:
    """Whether results.jsonl holds a readable record of this job's current attempt."""
    try:  # unreadable lines are skipped (with a warning), so only whole records count
        records = results.read_records(run_dir)
    except OSError:
        return False
    return any((r["env"], r["notebook"], r.get("attempt", 1)) == (job.env, job.notebook, job.attempt)
               for r in records)


def execute(job: Job, run_dir: Path, manifest: dict) -> None:
    """Run one notebook with papermill; set the job's attempt, status, time and error."""
    import papermill  # noqa: PLC0415 - only the driver env has it

    output = run_dir / job.env / f"{job.notebook}.ipynb"
    output.parent.mkdir(parents=True, exist_ok=True)
    job.attempt += 1
    env = {"GPUBENCH_RUN_ID": manifest["run_id"], "GPUBENCH_ATTEMPT": str(job.attempt),
           "NO_COLOR": "1", "TERM": "dumb"}  # for the kernel
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(notebooks_dir() / f"{job.notebook}.ipynb"), str(output),
            parameters=job_parameters(job, run_dir, manifest), log_output=True,
            kernel_name=envs.kernel_name(job.env), kernel_manager_class=kernel_manager_class(env),
            progress_bar=False, cwd=str(notebooks_dir()), **kernel_config(),
            # Every record is already on disk when a notebook ends or is interrupted, so the
            # kernel is stopped at once: a graceful stop of a busy kernel took ~3 s and made
            # it print a zmq traceback.
            shutdown_kernel="immediate",
        )
        if _records_written(run_dir, job):
            job.status, job.error = "ok", None
        else:
            job.status = "failed"
            job.error = (f"the notebook ended but {run_dir / 'results.jsonl'} holds no readable "
                         f"record of it (attempt {job.attempt})")
    except papermill.PapermillExecutionError as exc:
        job.status, job.error = "failed", f"{exc.ename}: {exc.evalue}"[:2000]
    except KeyboardInterrupt:
        job.status, job.error = "interrupted", f"stopped by {_Stop.reason or 'Ctrl-C'}"
        raise
    except Exception as exc:  # noqa: BLE001 - a dead kernel or a bad notebook fails this job only
        job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        job.seconds = time.perf_counter() - start
        _Stop.kernels.clear()
    if _Stop.reason is not None and job.status != "ok":  # the interrupted cell failed it
        job.status, job.error = "interrupted", f"stopped by {_Stop.reason}"


def run(profile: str | None = None, env_names: list[str] | None = None,
        notebooks: list[str] | None = None, out: str | None = None, resume: str | None = None,
        params: dict | None = None) -> int:
    """Run the notebooks across envs and build the report; return the CLI exit code."""
    if resume and out:
        raise UsageError("give either --out (a new run) or --resume (an unfinished one), not both")
    if resume and params:
        raise UsageError("-p goes with a new run; --resume runs with the parameters it started with")
    envs.use_checkout_kernels()
    with contextlib.ExitStack() as stack:
        if resume:
            run_dir, manifest, jobs = load_run(resume, profile, stack)
        else:
            profile = profiles.resolve_profile(profile) if profile else "full"
            env_list, notebook_list = check_envs(env_names), check_notebooks(notebooks)
            check_params(params or {}, notebook_list)
            run_dir, manifest, jobs = new_run(out, profile, env_list, notebook_list, params or {},
                                              stack, named=notebooks is not None)
        with _signals_stop_the_run():
            return _run_jobs(run_dir, manifest, jobs, resumed=bool(resume))


def _run_jobs(run_dir: Path, manifest: dict, jobs: list[Job], resumed: bool) -> int:
    """Run the jobs not yet ok, save run.json after each, then write the report."""
    from tqdm import tqdm  # noqa: PLC0415
    from tqdm.contrib.logging import logging_redirect_tqdm  # noqa: PLC0415

    todo = [j for j in jobs if j.status != "ok"]
    print(f"gpubench run {run_dir}  (profile {manifest['profile']}, run id {manifest['run_id']})")
    if resumed:
        print(f"resuming: {len(jobs) - len(todo)} notebook(s) already done, {len(todo)} to run")
    _mark_unavailable(todo, manifest)

    expected = profiles.EXPECTED_SECONDS[manifest["profile"]]
    runnable = [j for j in todo if j.status == "pending"]
    total = sum(expected[j.notebook] for j in runnable)
    bar = tqdm(total=total, unit="s", file=sys.stderr, dynamic_ncols=True,
               bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]",
               disable=not sys.stderr.isatty())  # a log file gets the start lines below instead
    started, done = time.perf_counter(), 0.0  # bar.n stays 0 when the bar is disabled
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
                execute(job, run_dir, manifest)
                done += expected[job.notebook]
                bar.update(expected[job.notebook])
                bar.write(f"{job.env}/{job.notebook}: {job.status} in {job.seconds:.0f} s"
                          + (f" — {job.error}" if job.error else ""))
                _save_jobs(run_dir, manifest, jobs)
                if _Stop.reason is not None:
                    raise KeyboardInterrupt
        _save_jobs(run_dir, manifest, jobs)
        code = _summary(jobs)
        _finish_report(run_dir)  # a full disk: report.ReportWriteError, said by the CLI (exit 2)
    except KeyboardInterrupt:
        bar.close()
        _save_jobs(run_dir, manifest, jobs)
        print(f"\nInterrupted ({_Stop.reason or 'Ctrl-C'}). Every measurement made so far is in "
              f"{run_dir / 'results.jsonl'}.")
        print(f"Finish the run with: gpubench run --resume {run_dir}")
        _summary(jobs)
        return 130
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(_worth_showing)
        bar.close()
    return code


def _eta(elapsed: float, done: float, total: float) -> str:
    """"(elapsed 1:05, about 3:20 left)", the rest scaled by how fast the work done so far went."""
    def clock(seconds: float) -> str:
        return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"

    left = elapsed / done * (total - done) if done else total
    return f"(elapsed {clock(elapsed)}, about {clock(left)} left)"


def _mark_unavailable(jobs: list[Job], manifest: dict) -> None:
    """Skip envs without a kernel of this checkout, fail GPU envs whose TensorFlow sees no GPU;
    Multi_GPU_Scaling runs on 2+ GPUs, or on 2 virtual CPU devices when quick or named."""
    from gpubench import scaling  # noqa: PLC0415 - TensorFlow-free at import

    specs, named = envs.kernel_specs(), manifest.get("named", [])
    problems: dict[str, tuple[str, str]] = {}
    gpu_count: dict[str, int] = {}
    for env in dict.fromkeys(job.env for job in jobs):
        if env not in specs:
            problems[env] = ("skipped", f"env {env!r} is not set up (no kernel {envs.kernel_name(env)}); "
                                        f"create it with {envs.SETUP_COMMANDS.get(env, '`make setup`')}")
        elif (foreign := envs.foreign_kernel(specs[env])) is not None:
            problems[env] = ("skipped", foreign)
        elif envs.is_gpu_env(env):
            info = envs.probe(env)
            gpu_count[env] = len(info["gpus"])
            if info["error"] or not info["gpus"]:
                problems[env] = ("failed", info["error"] or info["diagnosis"]
                                 or "its TensorFlow sees no GPU")
    for job in jobs:
        job.status, job.error = problems.get(job.env, ("pending", None))
        if job.status == "pending" and job.notebook == "Multi_GPU_Scaling":
            job.extra = scaling.include_in_run(envs.is_gpu_env(job.env), gpu_count.get(job.env, 0),
                                               manifest["profile"], job.notebook in named)
            if job.extra is None:
                job.status = "skipped"
                job.error = ("Multi_GPU_Scaling needs 2 or more GPUs in the full profile; name it "
                             "(--notebooks Multi_GPU_Scaling) to run it on 2 virtual CPU devices")
    for env, (status, why) in problems.items():
        print(f"{status.upper()} env {env}: {why}")


def _save_jobs(run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    manifest["jobs"] = [asdict(j) for j in jobs]
    write_manifest(run_dir, manifest)


def _finish_report(run_dir: Path) -> None:
    """Write the run's report, if anything was recorded."""
    from gpubench import report  # noqa: PLC0415

    if not (run_dir / "results.jsonl").exists():
        print("No results were recorded, so there is no report.")
        return
    print(f"Report: {report.build([run_dir])}")


def _summary(jobs: list[Job]) -> int:
    """Print ok / failed / skipped and return the exit code (0 all ok, 1 otherwise)."""
    print("\nSummary")
    for job in jobs:
        took = f"{job.seconds:6.0f} s" if job.seconds is not None else "      -"
        print(f"  {job.status:<11} {job.env + '/' + job.notebook:<32} {took}"
              + (f"  {job.error.splitlines()[0]}" if job.error else ""))
    counts = {s: sum(j.status == s for j in jobs) for s in ("ok", "failed", "skipped",
                                                              "interrupted")}
    print("  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return 1 if counts["failed"] or counts["interrupted"] or not counts["ok"] else 0
