"""Speed_Factors' on-device feed on PyTorch: the training set put on the device once, batches
taken by a permutation made there, each step Keras's own torch `model.train_step` (under
`torch.compile` when `jit_compile`, as `fit` does), one step per call as Keras's trainer allows."""

from __future__ import annotations

from collections.abc import Callable

from gpubench.backends.torch import keras_device, scope, torch
from gpubench.factors.trainer import feed_steps


def on_device_feed(model, x, y, batch_size: int, steps_per_execution: int, jit_compile: bool,
                   device: str) -> Callable[[int | None], None]:
    """`steps(count)`: train `count` steps (None: an epoch, reshuffled) of the set on `device`
    (`feed_steps`); steps_per_execution other than 1 is a ValueError, as in Keras's trainer."""
    if steps_per_execution != 1:
        raise ValueError(f"steps_per_execution={steps_per_execution}: Keras's PyTorch trainer "
                         "runs one step per call; use steps_per_execution=1 on PyTorch")
    module = torch()
    target = module.device("cpu" if device.startswith("cpu") else
                           f"cuda:{keras_device(device).split(':')[1]}")
    x_dev, y_dev = module.as_tensor(x, device=target), module.as_tensor(y, device=target)
    n = int(x_dev.shape[0])
    step = module.compile(model.train_step) if jit_compile else model.train_step
    perm = [module.arange(n, device=target)]

    def batch(start: int, stop: int) -> None:
        idx = perm[0][start:stop]
        step((x_dev[idx], y_dev[idx]))

    def steps(count: int | None) -> None:
        with scope(device):
            if count is None:
                perm[0] = module.randperm(n, device=target)
            feed_steps(count, n, batch_size, 1,
                       lambda first, size: batch(first * batch_size, (first + 1) * batch_size),
                       lambda: batch(n // batch_size * batch_size, n))

    return steps
