"""Speed_Factors' tf.data feed, one definition for every backend: TensorFlow's pipeline.

On TensorFlow it is that backend's own. Beside JAX or PyTorch it runs where TensorFlow can be
imported, on TensorFlow's CPU side only: TensorFlow is kept off the GPUs, which belong to the
other backend.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from types import ModuleType

NOT_IMPORTABLE = ("input pipeline 'tf.data' needs TensorFlow, which cannot be imported in this "
                  "env; drop it (e.g. input_pipelines=arrays,on_device) or "
                  "`pip install tensorflow-cpu` into this env")


def available() -> bool:
    """Whether TensorFlow can be imported here, beside the env's own backend."""
    return importlib.util.find_spec("tensorflow") is not None


def dataset(module: ModuleType, x, y, batch_size: int):
    """A tf.data.Dataset of TensorFlow `module` over (x, y) batches, reshuffled every epoch and
    prefetched (for `fit`)."""
    return (module.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x))
            .batch(batch_size).prefetch(module.data.AUTOTUNE))


@functools.cache
def _cpu_tensorflow() -> ModuleType:
    """TensorFlow for tf.data only, kept off the GPUs; ValueError naming the fix if absent."""
    if not available():
        raise ValueError(NOT_IMPORTABLE)
    from gpubench.backends.tensorflow import tf  # noqa: PLC0415 - only for tf.data

    module = tf()
    with contextlib.suppress(RuntimeError, ValueError):  # already initialised: as it was
        module.config.set_visible_devices([], "GPU")
    return module


def dataset_beside(x, y, batch_size: int):
    """`dataset` of TensorFlow's CPU side, beside JAX or PyTorch."""
    return dataset(_cpu_tensorflow(), x, y, batch_size)
