"""Speed_Factors' on-device feed on TensorFlow: the training set put on the device once, batches
sliced there by a permutation made there; one compiled call runs up to `steps_per_execution`
steps, as `fit` does (the step compiled with XLA when `jit_compile`)."""

from __future__ import annotations

from collections.abc import Callable

from gpubench.backends.tensorflow import scope, tf
from gpubench.factors.trainer import feed_steps


def on_device_feed(model, x, y, batch_size: int, steps_per_execution: int, jit_compile: bool,
                   device: str) -> Callable[[int | None], None]:
    """`steps(count)`: train `count` steps (None: an epoch, reshuffled) of the set on `device`
    (`feed_steps`); the model and its optimizer built first (one `fit` step does both)."""
    module = tf()
    with scope(device):
        x_dev, y_dev = module.identity(module.constant(x)), module.identity(module.constant(y))
        n = int(x_dev.shape[0])
        perm = module.Variable(module.range(n, dtype=module.int32), trainable=False)

    @module.function(jit_compile=jit_compile)
    def one_step(xb, yb):
        return model.train_step((xb, yb))

    def gathered(idx) -> None:
        one_step(module.gather(x_dev, idx), module.gather(y_dev, idx))

    @module.function
    def run(first, count):
        for j in module.range(count):
            gathered(module.slice(perm, [(first + j) * batch_size], [batch_size]))

    @module.function
    def run_rest():
        gathered(perm[n // batch_size * batch_size:])

    def steps(count: int | None) -> None:
        with scope(device):
            if count is None:
                perm.assign(module.random.shuffle(module.range(n, dtype=module.int32)))
            feed_steps(count, n, batch_size, steps_per_execution,
                       lambda first, size: run(module.constant(first), module.constant(size)),
                       run_rest)

    return steps
