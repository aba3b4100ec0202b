"""`gpubench run`: every notebook, in every env's kernel, with papermill; then the report.

Run directory (DESIGN.md): RUN_DIR/<env>/<notebook>.ipynb, RUN_DIR/results.jsonl,
RUN_DIR/report.md, RUN_DIR/*.png, plus RUN_DIR/run.json, the job list that
`--resume` reads.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gpubench import envs, profiles, results

MANIFEST = "run.json"


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

    @property
    def kernel(self) -> str:
        """The Jupyter kernel of this job's env."""
        return f"gpubench-{self.env}"

    def output(self, run_dir: Path) -> Path:
        """Where papermill writes the executed notebook."""
        return run_dir / self.env / f"{self.notebook}.ipynb"


def env_device(env: str) -> str:
    """The device a training notebook uses in an env: "gpu" in GPU envs, else "cpu"."""
    return "gpu" if envs.is_gpu_env(env) else "cpu"


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
    """The notebooks to run, in the canonical order; unknown names are a usage error."""
    if names is None:
        return list(profiles.NOTEBOOKS)
    unknown = [n for n in names if n not in profiles.NOTEBOOKS]
    if unknown:
        raise UsageError(f"unknown notebook(s) {', '.join(unknown)}; "
                         f"use some of {', '.join(profiles.NOTEBOOKS)}")
    return [n for n in profiles.NOTEBOOKS if n in names]


def available_envs() -> list[str]:
    """Envs with a registered gpubench-* kernel."""
    return sorted(name.removeprefix("gpubench-") for name in envs.kernel_specs())


def check_envs(names: list[str] | None) -> list[str]:
    """The envs to run: the standard ones plus registered variants; unknown names are an error."""
    registered = available_envs()
    if names is None:
        return list(envs.STANDARD_ENVS) + [e for e in registered if e not in envs.STANDARD_ENVS]
    unknown = [n for n in names if n not in envs.STANDARD_ENVS and n not in registered]
    if unknown:
        known = list(envs.STANDARD_ENVS) + [e for e in registered if e not in envs.STANDARD_ENVS]
        raise UsageError(f"unknown env(s) {', '.join(unknown)}; use some of {', '.join(known)} "
                         "(an env is a Jupyter kernel named gpubench-<env>)")
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
        try:
            parsed.setdefault(target, {})[name] = json.loads(value)
        except json.JSONDecodeError:
            parsed.setdefault(target, {})[name] = value
    return parsed


# ---------------------------------------------------------------- run directory

def is_run_dir(path: Path) -> bool:
    """Whether `path` holds a run started by `gpubench run`."""
    return (path / MANIFEST).is_file()


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Save run.json atomically."""
    tmp = run_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    tmp.replace(run_dir / MANIFEST)


def new_run(out: str | None, profile: str, env_names: list[str], notebooks: list[str],
            params: dict) -> tuple[Path, dict]:
    """Create the run directory and its manifest; refuse an --out that holds something else."""
    run_id = results.new_run_id()
    run_dir = Path(out) if out else results.runs_dir() / run_id
    if run_dir.exists():
        if is_run_dir(run_dir):
            raise UsageError(f"--out {str(run_dir)!r} already holds a run; finish it with "
                             f"--resume {run_dir}, or choose a new --out")
        if not run_dir.is_dir() or any(run_dir.iterdir()):
            raise UsageError(f"--out {str(run_dir)!r} exists and is not a run directory; "
                             "choose a new or empty folder")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --out {str(run_dir)!r}: {exc.strerror or exc}") from None
    manifest = {
        "schema": 1, "run_id": run_id, "profile": profile, "params": params,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "jobs": [asdict(Job(env, nb)) for env in env_names for nb in notebooks],
    }
    write_manifest(run_dir, manifest)
    return run_dir, manifest


def load_run(resume: str, profile: str | None) -> tuple[Path, dict]:
    """Open a run directory to finish it."""
    run_dir = Path(resume)
    if not is_run_dir(run_dir):
        raise UsageError(f"--resume {str(run_dir)!r} is not a run directory (no {MANIFEST}); "
                         "give a folder written by `gpubench run`")
    manifest = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8"))
    if profile is not None and profile != manifest["profile"]:
        raise UsageError(f"--profile {profile} differs from the run's profile "
                         f"{manifest['profile']}; resume without --profile")
    return run_dir, manifest


# ---------------------------------------------------------------- execution

_PAPERMILL_CHATTER = ("Executing notebook with kernel", "Executing Cell", "Ending Cell",
                      "Input Notebook", "Output Notebook", "Executing notebook",
                      "Working directory:", "<Figure size", "<IPython.core.display.")


class _TqdmHandler(logging.Handler):
    """Stream papermill's cell output above the progress bar, prefixed with env/notebook."""

    def __init__(self, bar) -> None:
        super().__init__()
        self.bar, self.prefix = bar, ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().rstrip()
        if message and not message.startswith(_PAPERMILL_CHATTER):
            self.bar.write("\n".join(f"  {self.prefix}| {line}" for line in message.splitlines()))


def gpu_problem(env: str) -> str | None:
    """For a GPU env: None if its TensorFlow sees a GPU, else the guard's diagnosis."""
    spec = envs.kernel_specs()[f"gpubench-{env}"]
    child_env = envs.kernel_environ(spec)
    script = ("from gpubench import devices\n"
              "try:\n    devices.check_gpu()\n"
              "except devices.GPUNotAvailableError as e:\n    print(e)\n")
    try:
        out = subprocess.run([spec["argv"][0], "-c", script], capture_output=True, text=True,
                             env=child_env, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot start the kernel's Python {spec['argv'][0]}: {exc}"
    if out.returncode != 0:
        return f"the kernel's Python failed: {out.stderr.strip().splitlines()[-1:]}"
    return out.stdout.strip() or None


def job_parameters(job: Job, run_dir: Path, manifest: dict) -> dict:
    """The papermill parameters of one job: profile, env, results path, device, and --param values."""
    params = {"profile": manifest["profile"], "env_name": job.env,
              "results_path": str((run_dir / "results.jsonl").resolve())}
    if job.notebook != "performanceTest":
        params["device"] = env_device(job.env)
    for scope in ("*", job.notebook):
        for name, value in manifest["params"].get(scope, {}).items():
            if name in profiles.parameter_names(job.notebook):
                params[name] = value
    return params


def kernel_config() -> dict:
    """Keyword arguments for papermill (or a KernelManager) that encrypt the kernel's channels.

    ipykernel 7 warns on every start that its loopback TCP channels are not
    encrypted. Recent jupyter_client (8.10 here) provisions CurveZMQ keys when asked and the
    kernelspec declares support, which `ipykernel install` does; elsewhere this
    asks for nothing and the kernel starts as before.
    """
    from jupyter_client.manager import KernelManager  # noqa: PLC0415
    from traitlets.config import Config  # noqa: PLC0415

    if "transport_encryption" not in KernelManager.class_trait_names():
        return {}
    return {"config": Config({"KernelManager": {"transport_encryption": "auto"}})}


def execute(job: Job, run_dir: Path, manifest: dict) -> None:
    """Run one notebook with papermill; set the job's status, time and error."""
    import papermill  # noqa: PLC0415 - only the driver env has it

    output = job.output(run_dir)
    output.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(notebooks_dir() / f"{job.notebook}.ipynb"), str(output),
            parameters=job_parameters(job, run_dir, manifest), kernel_name=job.kernel,
            log_output=True, progress_bar=False, cwd=str(notebooks_dir()), **kernel_config(),
            # Every record is already on disk when a notebook ends or Ctrl-C stops it, so the
            # kernel is stopped at once: a graceful stop of a busy kernel took ~3 s and made
            # it print a zmq traceback.
            shutdown_kernel="immediate",
        )
        job.status, job.error = "ok", None
    except papermill.PapermillExecutionError as exc:
        job.status, job.error = "failed", f"{exc.ename}: {exc.evalue}".strip()[:2000]
    except KeyboardInterrupt:
        job.status, job.error = "interrupted", "stopped by Ctrl-C"
        raise
    except Exception as exc:  # noqa: BLE001 - a dead kernel or a bad notebook fails this job only
        job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        job.seconds = time.perf_counter() - start


def run(profile: str | None = None, env_names: list[str] | None = None,
        notebooks: list[str] | None = None, out: str | None = None, resume: str | None = None,
        params: dict | None = None) -> int:
    """Run the notebooks across envs and build the report; return the CLI exit code."""
    from tqdm import tqdm  # noqa: PLC0415

    if resume and out:
        raise UsageError("give either --out (a new run) or --resume (an unfinished one), not both")
    if resume:
        run_dir, manifest = load_run(resume, profile)
    else:
        profile = profiles.resolve_profile(profile) if profile else "full"
        run_dir, manifest = new_run(out, profile, check_envs(env_names),
                                    check_notebooks(notebooks), params or {})
    jobs = [Job(**j) for j in manifest["jobs"]]
    todo = [j for j in jobs if j.status != "ok"]
    print(f"gpubench run {run_dir}  (profile {manifest['profile']}, run id {manifest['run_id']})")
    if resume:
        print(f"resuming: {len(jobs) - len(todo)} notebook(s) already done, {len(todo)} to run")
    os.environ["GPUBENCH_RUN_ID"] = manifest["run_id"]
    _mark_unavailable(todo)

    expected = profiles.EXPECTED_SECONDS[manifest["profile"]]
    runnable = [j for j in todo if j.status == "pending"]
    total = sum(expected[j.notebook] for j in runnable)
    bar = tqdm(total=total, unit="s", file=sys.stderr, dynamic_ncols=True,
               bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]",
               disable=not sys.stderr.isatty())  # a log file gets the start lines below instead
    started, done = time.perf_counter(), 0.0  # bar.n stays 0 when the bar is disabled
    handler = _TqdmHandler(bar)
    logger = logging.getLogger("papermill")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        for number, job in enumerate(runnable, start=1):
            handler.prefix = f"{job.env}/{job.notebook}"
            bar.set_description(f"[{number}/{len(runnable)}] {job.env}/{job.notebook}")
            bar.write(_start_line(number, len(runnable), job, time.perf_counter() - started,
                                  done, total))
            execute(job, run_dir, manifest)
            done += expected[job.notebook]
            bar.update(expected[job.notebook])
            bar.write(f"{job.env}/{job.notebook}: {job.status} in {job.seconds:.0f} s"
                      + (f" — {job.error}" if job.error else ""))
            _save_jobs(run_dir, manifest, jobs)
    except KeyboardInterrupt:
        _save_jobs(run_dir, manifest, jobs)
        bar.close()
        print(f"\nInterrupted. Every measurement made so far is in {run_dir / 'results.jsonl'}.")
        print(f"Finish the run with: gpubench run --resume {run_dir}")
        _summary(jobs)
        return 130
    finally:
        logger.removeHandler(handler)
        bar.close()
    _save_jobs(run_dir, manifest, jobs)
    _finish_report(run_dir)
    return _summary(jobs)


def _start_line(number: int, count: int, job: Job, elapsed: float, done: float,
                total: float) -> str:
    """"[2/8] cpu/Mnist_CNN  (elapsed 1:05, about 3:20 left)": progress for logs and terminals."""
    def clock(seconds: float) -> str:
        return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"

    left = elapsed / done * (total - done) if done else total
    return f"[{number}/{count}] {job.env}/{job.notebook}  (elapsed {clock(elapsed)}, about {clock(left)} left)"


def _mark_unavailable(jobs: list[Job]) -> None:
    """Skip envs without a kernel; fail GPU envs whose TensorFlow sees no GPU, before running."""
    registered = set(available_envs())
    gpu_checked: dict[str, str | None] = {}
    for job in jobs:
        job.status, job.error = "pending", None
        if job.env not in registered:
            job.status = "skipped"
            job.error = (f"env {job.env!r} is not set up (no kernel {job.kernel}); "
                         f"create it with {envs.SETUP_COMMANDS.get(job.env, '`make setup`')}")
        elif env_device(job.env) == "gpu":
            if job.env not in gpu_checked:
                gpu_checked[job.env] = gpu_problem(job.env)
            if gpu_checked[job.env]:
                job.status, job.error = "failed", gpu_checked[job.env]
    for env in dict.fromkeys(j.env for j in jobs if j.status != "pending"):
        job = next(j for j in jobs if j.env == env)
        print(f"{job.status.upper()} env {env}: {job.error}")


def _save_jobs(run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    manifest["jobs"] = [asdict(j) for j in jobs]
    write_manifest(run_dir, manifest)


def _finish_report(run_dir: Path) -> None:
    from gpubench import report  # noqa: PLC0415

    if not (run_dir / "results.jsonl").exists():
        print("No results were recorded, so there is no report.")
        return
    path = report.build([run_dir])
    print(f"Report: {path}")


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
    if counts["failed"] or counts["interrupted"] or not counts["ok"]:
        return 1
    return 0
