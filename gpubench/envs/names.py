"""The envs' names and what follows from a name: its kernel, backend, GPU or not, and the
command that creates it. Stdlib-only at import."""

from __future__ import annotations

from collections.abc import Iterable

from gpubench import backends, machine  # stdlib-only at import
from gpubench.backends import BACKEND_TITLES

KERNEL_PREFIX = "gpubench-"
STANDARD_ENVS = ("cpu", "gpu")  # the book's TensorFlow envs
# every env setup can make: cpu, gpu, jax-cpu, jax-gpu, torch-cpu, torch-gpu
ENVS = tuple(backends.env_label(b, gpu) for b in backends.SUPPORTED for gpu in (False, True))
DEFAULT_BACKENDS = ("tensorflow",)
CONDA_TOOLS = ("mamba", "conda", "micromamba")
VENV_DIRS = {"cpu": ".venv", "gpu": ".venv-gpu", "jax-cpu": ".venv-jax", "jax-gpu": ".venv-jax-gpu",
             "torch-cpu": ".venv-torch", "torch-gpu": ".venv-torch-gpu"}
EXTRAS = {"cpu": "cpu", "gpu": "gpu", "jax-cpu": "jax", "jax-gpu": "jax-gpu",  # pyproject extras
          "torch-cpu": "torch", "torch-gpu": "torch-gpu"}
CONDA_PYTHON = (3, 11)  # python=3.11 in the yml files
# Pythons a venv can use: TensorFlow 2.21, JAX 0.10 and numpy 2.4 all have wheels for them
# (requires-python in pyproject.toml).
VENV_PYTHONS = ((3, 11), (3, 12), (3, 13))
_JAX = "BACKENDS=tensorflow,jax` (or `gpubench setup"
_TORCH = "BACKENDS=tensorflow,torch` (or `gpubench setup"
SETUP_COMMANDS = {
    "cpu": "`make setup` (or `gpubench setup`)",
    "gpu": "`make setup GPU=1` (or `gpubench setup --gpu`)",
    "jax-cpu": f"`make setup {_JAX} --backends tensorflow,jax`)",
    "jax-gpu": f"`make setup GPU=1 {_JAX} --gpu --backends tensorflow,jax`)",
    "torch-cpu": f"`make setup {_TORCH} --backends tensorflow,torch`)",
    "torch-gpu": f"`make setup GPU=1 {_TORCH} --gpu --backends tensorflow,torch`)",
}


def setup_command(env: str = "cpu") -> str:
    """The command that makes env `env` where the user is: the checkout's `make setup ...`, else
    (a wheel, no Makefile) pip's extra of gpubench, then `gpubench run --here` in that Python."""
    if machine.checkout() is not None:
        return SETUP_COMMANDS.get(env, SETUP_COMMANDS["cpu"])
    backend = env_backend(env)
    chosen = "" if backend == "tensorflow" else f"KERAS_BACKEND={backend} "
    own = " in a Python of its own" if is_gpu_env(env) else ""
    return (f"`pip install 'gpubench[{EXTRAS.get(env, 'cpu')}]'`{own}, then "
            f"`{chosen}gpubench run --here` in that Python")


def no_gpu_hint(backend: str) -> str:
    """Where a chapter that saw no GPU on `backend` gets one: that backend's GPU env, and the
    command that makes it where the user is."""
    env = backends.env_label(backend, True)
    where = (f"in the {kernel_name(env)} kernel" if machine.checkout() is not None
             else f"where {BACKEND_TITLES.get(backend, backend)} sees a GPU")
    return f"Run this notebook {where}: {setup_command(env)}. Or see `gpubench doctor`."


class EnvError(RuntimeError):
    """An environment or kernel problem; the message says what to do."""


def kernel_name(env: str) -> str:
    """The Jupyter kernel of env `env` ("cpu" -> "gpubench-cpu")."""
    return KERNEL_PREFIX + env


def display_name(env: str) -> str:
    """The kernel's display name: the same in every checkout and Python, as notebooks store it."""
    return f"Python 3 ({kernel_name(env)})"


def env_backend(env: str) -> str:
    """The Keras backend env `env` runs: "jax" for jax-cpu/jax-gpu/jax-..., "torch" for
    torch-..., else "tensorflow"."""
    return next((name for name, prefix in backends.LABEL_PREFIX.items()
                 if prefix and env.startswith(prefix)), "tensorflow")


def is_gpu_env(env: str) -> bool:
    """Whether env `env` is meant to use a GPU: gpu, jax-gpu, torch-gpu, and variants gpu-..."""
    kind = env.removeprefix(backends.LABEL_PREFIX.get(env_backend(env), ""))
    return kind == "gpu" or kind.startswith("gpu-")


def parse_backends(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """"tensorflow,jax,torch" (or a list) -> ("tensorflow", "jax", "torch"); ValueError naming a
    bad one."""
    names = value.split(",") if isinstance(value, str) else list(value or [])
    chosen = tuple(dict.fromkeys(name.strip() for name in names if name.strip()))
    for name in chosen:
        if name not in backends.SUPPORTED:
            why = backends.NOT_YET.get(name, "not a Keras backend gpubench knows")
            raise ValueError(f"backend {name!r}: {why}; use some of "
                             f"{', '.join(backends.SUPPORTED)} (BACKENDS=tensorflow,jax, or "
                             "--backends tensorflow,jax)")
    if not chosen:
        raise ValueError(f"no backend given; use some of {', '.join(backends.SUPPORTED)} "
                         "(BACKENDS=tensorflow,jax, or --backends tensorflow,jax)")
    return chosen
