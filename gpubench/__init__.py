"""gpubench: measure how much faster Keras deep learning runs on your GPU than on your CPU.

`import gpubench as gb` is cheap: the Keras backend (TensorFlow or JAX) loads only when
something first needs it (`gpubench.backends` is the one place that loads it).
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

__version__ = "0.1.0"

_PACKAGE = Path(__file__).parent
_backends = importlib.import_module(f"{__name__}.backends")  # light: loads no framework
_backends.prepare_environment()  # before anything imports TensorFlow or JAX

# Every module and subpackage, found on disk (no list kept by hand).
_SUBMODULES = tuple(sorted(info.name for info in pkgutil.iter_modules([str(_PACKAGE)])
                           if not info.name.startswith("_")))


def __getattr__(name: str):
    """Import submodules on first use (`gb.devices`, `gb.matmul`, ...)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'gpubench' has no attribute {name!r}")


__all__ = ["__version__", *_SUBMODULES]
