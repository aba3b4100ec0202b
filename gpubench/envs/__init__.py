"""Create the envs (one per Keras backend and device), register their Jupyter kernels, list them.

Env NAME (a label of `backends.ENVS`) runs in kernel gpubench-NAME, whose spec sets
KERAS_BACKEND: a conda env from environment-NAME.yml when mamba, conda or micromamba is on PATH,
else a venv (VENV_DIRS). Each kernel is registered in this checkout's .jupyter (PYTHONPATH=the
checkout; `gpubench run`, `make lab` and `make test` put it first on JUPYTER_PATH), and with
--user. Stdlib-only at import: a bare `python3 -m gpubench setup` runs before anything is
installed. Modules: names (a name's venv, extra, setup command, Python), kernels (specs, probes,
the `gpubench envs` report), create (setup).
"""

from gpubench.envs.create import gpu_requested, setup
from gpubench.envs.kernels import (
    envs_report,
    foreign_kernel,
    kernel_specs,
    probe_env,
    probe_python,
    use_checkout_kernels,
)
from gpubench.envs.names import (
    EXTRAS,
    VENV_DIRS,
    EnvError,
    display_name,
    driver_python,
    find_conda,
    install_source,
    parse_backends,
    pip_install,
    setup_command,
)
