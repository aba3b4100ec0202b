"""`gpubench run`: every notebook, in every env's kernel, with papermill; then the report.

RUN_DIR/run.json holds the jobs and how each env is reached (`--resume` reads it); RUN_DIR/run.lock
is flock-ed by the running process. An env is a registered kernel (gpubench-ENV, or any kernel
with `--kernel`) or, with `--here`, a kernel of the Python that runs gpubench. A job's attempt is
claimed in run.json before its notebook starts. Kernels die with the runner; a first Ctrl-C or
SIGTERM interrupts the kernel, so the notebook keeps what it measured; a second one stops at once.

Modules: arguments (notebooks, backend, -p values), targets (how each env is reached: the one
place), manifest (run.json), kernels (the kernel manager, stderr, signals), provisioner (what
every kernel gets), loop (the run and each job, start to end).
"""

from gpubench.rundir import LOCK, MANIFEST, UsageError, lock_run_dir
from gpubench.runner.arguments import check_params, parse_params
from gpubench.runner.kernels import (
    HERE_KERNEL,
    KERNEL_NOISE,
    PLAIN_RICH_TEXT,
    PROVISIONER,
    Stop,
    forward_stderr,
    kernel_config,
    kernel_manager_class,
    signals_stop_the_run,
)
from gpubench.runner.loop import execute, job_parameters, run
from gpubench.runner.manifest import MANIFEST_SCHEMA, Job, check_manifest, new_run
from gpubench.runner.targets import Target
