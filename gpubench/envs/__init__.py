"""Create the envs (one per Keras backend and device), register their Jupyter kernels, list them.

Env NAME runs in kernel "gpubench-NAME": `cpu` and `gpu` run Keras on TensorFlow (the book's),
`jax-cpu` and `jax-gpu` on JAX, each kernel's spec setting KERAS_BACKEND. An env is a conda env
of that name from environment-NAME.yml when mamba, conda or micromamba is on PATH, else a venv
(VENV_DIRS). Each kernel is registered in this checkout's .jupyter (with PYTHONPATH=CHECKOUT;
`gpubench run`, `make lab` and `make test` put it first on JUPYTER_PATH), and with --user for
Jupyter started by hand. Stdlib-only at import: a bare `python3 -m gpubench setup` runs it
before anything is installed.

Modules: `names` (env names, kernels, backends, setup commands), `kernels` (kernel folders and
specs), `pythons` (conda, venvs, the driver python), `create` (setup), `probing` (`gpubench
doctor --json` in an env), `listing` (the `gpubench envs` report). A test that replaces a
function patches it in the module that calls it (e.g. `envs.probing.probe_env` for the report).
"""

from __future__ import annotations

from gpubench.envs.create import gpu_requested, setup
from gpubench.envs.kernels import foreign_kernel, kernel_specs, use_checkout_kernels
from gpubench.envs.listing import envs_report
from gpubench.envs.names import (
    ENVS,
    EXTRAS,
    SETUP_COMMANDS,
    STANDARD_ENVS,
    VENV_DIRS,
    EnvError,
    display_name,
    env_backend,
    is_gpu_env,
    kernel_name,
    no_gpu_hint,
    parse_backends,
    setup_command,
)
from gpubench.envs.probing import probe_env, probe_python
from gpubench.envs.pythons import driver_python, find_conda
from gpubench.params import notebooks_dir  # the notebooks the kernels run: params' rule
from gpubench.rundir import locked  # tests hold the run lock through envs.locked
