"""gpubench: how much faster Keras deep learning runs on your GPU than on your CPU.
`import gpubench as gb` loads no ML framework: the backend loads when something first needs it."""

import importlib
import os
import pkgutil

__version__ = "0.1.0"

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before any framework: TF's C++ info logs off
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # and JAX's grab of GPU memory
SUBMODULES = tuple(sorted(info.name for info in pkgutil.iter_modules(__path__)
                          if not info.name.startswith("_")))  # found on disk: no list by hand
__all__ = ["__version__", *SUBMODULES]


def __getattr__(name: str):
    """Import submodules on first use (`gb.devices`, `gb.matmul`, ...)."""
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'gpubench' has no attribute {name!r}")
