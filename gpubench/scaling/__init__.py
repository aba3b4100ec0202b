"""Data-parallel training over a machine's devices, or several machines, and its scaling
efficiency: the engine of Multi_GPU_Scaling and of `gpubench scaling`.

- `rules`: what needs no framework (when `gpubench run` includes the chapter, the --cluster
  list, the global batch of weak and strong scaling);
- `placement`: the backend's data-parallel module, the devices and the distribution over them;
- `step`: the training loop every replica count shares (written in the chapter, exported);
- `sweep`: the chapter's sweep over replica counts and the `scaling` record of a run;
- `cluster` and `workers`: `gpubench scaling`, TensorFlow's several-machine mode, and its
  local worker processes.
The tables, the chart and the text written from the records are gpubench.report.scaling's.
Importing this package loads no framework.
"""

from __future__ import annotations

from gpubench.scaling.cluster import cli_main, default_out
from gpubench.scaling.placement import (
    backend_name,
    canonical,
    check_replicas,
    local_devices,
    parallel,
    split_cpu,
    strategy,
)
from gpubench.scaling.rules import (
    backend_refusal,
    check_index,
    global_batch,
    include_in_run,
    parse_cluster,
)
from gpubench.scaling.step import train
from gpubench.scaling.sweep import sweep
