"""`gpubench run`: every notebook, in every env's kernel, with papermill; then the report.

RUN_DIR/run.json holds the jobs and how each env is reached (`--resume` reads it);
RUN_DIR/run.lock is flock-ed by the running process. An env is a registered kernel
(gpubench-ENV, or any kernel with `--kernel`) or, with `--here`, a kernel of the Python that
runs gpubench. A job's attempt is claimed in run.json before its notebook starts. Kernels die
with the runner; a first Ctrl-C or SIGTERM interrupts the kernel, so the notebook keeps what
it measured; a second one stops at once.

Modules: arguments (lists, backend, -p values), targets (how each env is reached, probes),
manifest (run.json), kernels (the kernel manager, stderr, signals), provisioner (what every
kernel gets, loaded by jupyter_client), jobs (one notebook run), loop (the run, start to end).
"""

from gpubench.rundir import LOCK, UsageError, lock_run_dir
from gpubench.runner.arguments import check_backend, check_params, parse_params, split_names
from gpubench.runner.jobs import execute, job_parameters
from gpubench.runner.kernels import (
    HERE_KERNEL,
    KERNEL_NOISE,
    PLAIN_RICH_TEXT,
    PROVISIONER,
    _Stop,
    forward_stderr,
    kernel_config,
    kernel_manager_class,
)
from gpubench.runner.loop import _CellOutput, _finish_report, _mark_unavailable, run
from gpubench.runner.manifest import (
    MANIFEST,
    MANIFEST_SCHEMA,
    Job,
    check_manifest,
    is_run_dir,
    new_run,
)
from gpubench.runner.targets import Target, check_envs
