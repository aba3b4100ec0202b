"""One job of `gpubench run`: its papermill parameters, its attempt claimed in run.json before
it starts, and its notebook run in its env's kernel, ending with the job's status, time and
error."""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

from gpubench import envs, results
from gpubench import params as nb_params
from gpubench.runner.arguments import given, notebooks_dir
from gpubench.runner.kernels import (
    HERE_KERNEL,
    _Stop,
    kernel_config,
    kernel_manager_class,
    last_words,
)
from gpubench.runner.manifest import Job, save_jobs, target_of
from gpubench.runner.targets import here_env

# papermill -> nbformat -> jsonschema builds rfc3987_syntax's URI grammar at import: ~3.5 s of
# CPU before the first notebook, for a format check neither of them uses.
sys.modules.setdefault("rfc3987_syntax", None)


def job_parameters(job: Job, run_dir: Path, manifest: dict) -> dict:
    """The papermill parameters of one job: profile, env, results path, device, -p values."""
    names = nb_params.parameter_names(job.notebook)
    params = {"profile": manifest["profile"], "env_name": job.env,
              "results_path": str((run_dir / "results.jsonl").resolve()), **(job.extra or {})}
    if "device" in names:
        target = target_of(manifest, job.env)
        gpu = bool(target.gpus) if target.devices is not None else envs.is_gpu_env(job.env)
        params["device"] = "gpu" if gpu else "cpu"
    params.update(given(manifest["params"], job.notebook))
    return params


def _records_written(run_dir: Path, job: Job) -> bool:
    """Whether results.jsonl holds a readable record of this job's current attempt."""
    try:  # unreadable lines are skipped; the report warns of them, once
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            records = results.read_records(run_dir)
    except OSError:
        return False
    this = (job.env, job.notebook, job.attempt)
    return any((r["env"], r["notebook"], r.get("attempt", 1)) == this for r in records)


def claim(job: Job, run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    """Take the job's next attempt and save it in run.json as "running" before it starts, so that
    after any crash the next resume uses a higher attempt than any record on disk."""
    job.attempt += 1
    job.status, job.error, job.seconds = "running", None, None
    save_jobs(run_dir, manifest, jobs)


def execute(job: Job, run_dir: Path, manifest: dict, jobs: list[Job]) -> None:
    """Claim the job's next attempt (saved in run.json with all the run's `jobs`), run its
    notebook with papermill, and set its status, time and error."""
    import papermill  # noqa: PLC0415 - only the driver env has it

    claim(job, run_dir, manifest, jobs)
    output = run_dir / job.env / f"{job.notebook}.ipynb"
    target = target_of(manifest, job.env)
    env = {"GPUBENCH_RUN_ID": manifest["run_id"], "GPUBENCH_ATTEMPT": str(job.attempt),
           "NO_COLOR": "1", "TERM": "dumb"}  # for the kernel
    start = time.perf_counter()
    here = target.python if target.how == "here" else None
    if here:
        env = {**here_env(target), **env}
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        papermill.execute_notebook(
            str(notebooks_dir() / f"{job.notebook}.ipynb"), str(output),
            parameters=job_parameters(job, run_dir, manifest), log_output=True,
            kernel_name=HERE_KERNEL if here else target.kernel,
            kernel_manager_class=kernel_manager_class(env, here),
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
        if words := last_words():  # a kernel that died says why on its stderr, if anywhere
            job.error += f"; its stderr ended: {words[-1]}" + "".join(
                f"\n  kernel stderr| {line}" for line in words)
        if isinstance(exc, OSError) and exc.errno in results.WRITE_ERRORS:  # say which file
            job.error = (f"cannot write {exc.filename or output}: {results.write_problem(exc)}; "
                         f"free some space (or make it writable), then "
                         f"`gpubench run --resume {run_dir}`")
    finally:
        job.seconds = time.perf_counter() - start
        _Stop.kernels.clear()
    if _Stop.reason is not None and job.status != "ok":  # the interrupted cell failed it
        job.status, job.error = "interrupted", f"stopped by {_Stop.reason}"
