"""gpubench: measure how much faster TensorFlow runs on your GPU than on your CPU.

`import gpubench as gb` is cheap: TensorFlow is imported only when a module that
needs it (devices, timing, matmul, models, training) is first used.
"""

from __future__ import annotations

import importlib
import os

__version__ = "0.1.0"

# TensorFlow reads these when it loads; set them before any submodule imports it,
# so notebooks stay free of C++ info logs. A user's own setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

_SUBMODULES = (
    "checks", "cli", "data", "devices", "envs", "factors", "matmul", "models", "notebook",
    "plots", "profiles", "report", "results", "runner", "scaling", "timing", "training",
)


def __getattr__(name: str):
    """Import submodules on first use (`gb.devices`, `gb.matmul`, ...)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'gpubench' has no attribute {name!r}")


__all__ = ["__version__", *_SUBMODULES]
