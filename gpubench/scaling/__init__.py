"""Data-parallel training on a machine's devices, or across processes and machines, and its
scaling efficiency: Multi_GPU_Scaling and `gpubench scaling`, on TensorFlow, JAX and PyTorch.

`rules` (no framework), `step` (the loop, from the chapter), `sweep` (the chapter's sweep and the
record), `cluster` (worker processes). Each backend's `<backend>_parallel` module has the same
names: STRATEGY, JIT_COMPILE, INPUT_PIPELINE (what a record says), PROCESSES (a process per
device, even on one machine), EVERY_WORKER_LISTENS (else worker 0 alone); split_cpu, cpu_count;
strategy(devices) and join(cluster, index, replicas, device) -> (a distribution with a scope(),
its record's fields); all_reduce, leave, distributed_input, make_step, run_epoch (-> the summed
loss), sync. Importing this package loads no framework.
"""

from __future__ import annotations

from gpubench.scaling.cluster import cli_main, default_out
from gpubench.scaling.rules import (
    backend_refusal,
    canonical,
    check_index,
    check_replicas,
    global_batch,
    include_in_run,
    parallel,
    parse_cluster,
)
from gpubench.scaling.step import train
from gpubench.scaling.sweep import local_devices, split_cpu, strategy, sweep
