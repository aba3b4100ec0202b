"""Speed_Factors' input feeds on PyTorch: the training set on the device; tf.data where it exists.

The same functions as `gpubench.factors.tensorflow_feeds` (its docstring lists them).

on_device: the training set is put on the device once (torch tensors there); each step
takes its batch from it by a permutation made there, and runs Keras's own torch
`model.train_step` (under `torch.compile` when `jit_compile`, as Keras's `fit` does). Keras's
torch trainer runs one step per call (`steps_per_execution` must be 1 there), so the feed
does too.

tf.data: Keras's torch `fit` accepts a tf.data.Dataset, so it runs where TensorFlow can be
imported (its CPU side only: TensorFlow is kept off the GPUs, which belong to torch).
"""

from __future__ import annotations

from collections.abc import Callable

from gpubench.backends.torch import keras_device, scope, torch
from gpubench.factors import tf_data

# tf.data beside this backend: TensorFlow's CPU side, where it imports (backends/tf_data.py).
tf_data_available = tf_data.available
make_dataset = tf_data.dataset_beside


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
