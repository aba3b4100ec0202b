"""Data-parallel training and its scaling efficiency (Multi_GPU_Scaling, `gpubench scaling`) on
TensorFlow, JAX and PyTorch, each in its `<backend>_parallel`. Importing it loads no framework."""

from gpubench.scaling.cluster import cli_main, local_devices, split_cpu, strategy, sweep
from gpubench.scaling.rules import check_parameters, check_replicas, parallel
from gpubench.scaling.step import train
