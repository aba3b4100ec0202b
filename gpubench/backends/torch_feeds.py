"""Speed_Factors' input feeds on PyTorch: the training set on the device; tf.data where it exists.

The same functions as `gpubench.backends.tensorflow_feeds` (its docstring lists them).

on_device: the training set is put on the device once (torch tensors there); each step
takes its batch from it by a permutation made there, and runs Keras's own torch
`model.train_step` (under `torch.compile` when `jit_compile`, as Keras's `fit` does). Keras's
torch trainer runs one step per call (`steps_per_execution` must be 1 there), so the feed
does too.

tf.data: Keras's torch `fit` accepts a tf.data.Dataset, so it runs where TensorFlow can be
imported (its CPU side only: TensorFlow is kept off the GPUs, which belong to torch).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Callable

from gpubench.backends.torch import keras_device, scope, torch

NO_TF_DATA = ("input pipeline 'tf.data' needs TensorFlow, which cannot be imported in this "
              "PyTorch env; drop it (e.g. input_pipelines=arrays,on_device) or "
              "`pip install tensorflow-cpu` into this env")


def tf_data_available() -> bool:
    """Whether the tf.data feed can run here: TensorFlow importable beside torch."""
    return importlib.util.find_spec("tensorflow") is not None


@functools.cache
def _tensorflow():
    """TensorFlow for tf.data only, kept off the GPUs; ValueError naming the fix if absent."""
    if not tf_data_available():
        raise ValueError(NO_TF_DATA)
    from gpubench.backends.tensorflow import tf  # noqa: PLC0415 - only for tf.data

    module = tf()
    with contextlib.suppress(RuntimeError, ValueError):  # already initialised: as it was
        module.config.set_visible_devices([], "GPU")
    return module


def make_dataset(x, y, batch_size: int):
    """A tf.data.Dataset of (x, y) batches, reshuffled every epoch and prefetched (for `fit`)."""
    module = _tensorflow()
    return (module.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x))
            .batch(batch_size).prefetch(module.data.AUTOTUNE))


def on_device_feed(model, x, y, batch_size: int, steps_per_execution: int, jit_compile: bool,
                   device: str) -> Callable[[int | None], None]:
    """Training steps on a training set put on `device` once: batches sliced there, no host copy.

    One step per call (Keras's torch trainer allows no more: `steps_per_execution` other than 1
    is a ValueError); the step is torch.compile'd when `jit_compile`. `count` steps walk through
    the shuffled set and wrap at its end; None is one epoch, reshuffled on the device; a batch
    larger than the set trains on the whole set each step.
    """
    if steps_per_execution != 1:
        raise ValueError(f"steps_per_execution={steps_per_execution}: Keras's PyTorch trainer "
                         "runs one step per call; use steps_per_execution=1 on PyTorch")
    module = torch()
    target = module.device("cpu" if device.startswith("cpu") else
                           f"cuda:{keras_device(device).split(':')[1]}")
    x_dev, y_dev = module.as_tensor(x, device=target), module.as_tensor(y, device=target)
    n = int(x_dev.shape[0])
    step = module.compile(model.train_step) if jit_compile else model.train_step
    current = {"perm": module.arange(n, device=target)}

    def one(start: int, size: int) -> None:
        idx = current["perm"][start:start + size]
        step((x_dev[idx], y_dev[idx]))

    def steps(count: int | None) -> None:
        with scope(device):
            if count is None:  # one epoch, reshuffled on the device
                current["perm"] = module.randperm(n, device=target)
                for start in range(0, n, batch_size):
                    one(start, batch_size)
                return
            for done in range(count):
                start = (done * batch_size) % n if batch_size < n else 0
                one(start, min(batch_size, n - start))

    return steps
