"""gpubench: how much faster Keras deep learning runs on your GPU than on your CPU.

`import gpubench as gb` loads no ML framework: the backend loads when something first needs it.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

__version__ = "0.1.0"

importlib.import_module(f"{__name__}.backends").prepare_environment()  # before any framework
# Every module and subpackage, found on disk (no list kept by hand).
SUBMODULES = tuple(sorted(info.name for info in pkgutil.iter_modules([str(Path(__file__).parent)])
                          if not info.name.startswith("_")))
__all__ = ["__version__", *SUBMODULES]


def __getattr__(name: str):
    """Import submodules on first use (`gb.devices`, `gb.matmul`, ...)."""
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'gpubench' has no attribute {name!r}")
