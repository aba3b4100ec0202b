"""Speed_Factors' input feeds on TensorFlow: a tf.data pipeline, and the training set on the device.

The same functions as `gpubench.factors.jax_feeds`:
  tf_data_available() -> bool, make_dataset(x, y, batch_size),
  on_device_feed(model, x, y, batch_size, steps_per_execution, jit_compile, device)
  -> steps(count) (count steps, or None: one epoch).
"""

from __future__ import annotations

from collections.abc import Callable

from gpubench.backends.tensorflow import scope, tf
from gpubench.factors import tf_data


def tf_data_available() -> bool:
    """Whether the tf.data feed can run here (always, on TensorFlow)."""
    return True


def make_dataset(x, y, batch_size: int):
    """A tf.data.Dataset of (x, y) batches, reshuffled every epoch and prefetched."""
    return tf_data.dataset(tf(), x, y, batch_size)


def on_device_feed(model, x, y, batch_size: int, steps_per_execution: int, jit_compile: bool,
                   device: str) -> Callable[[int | None], None]:
    """Training steps on a training set put on `device` once: batches sliced there, no host copy.

    Like `fit`, one compiled call runs `steps_per_execution` steps (the step itself
    compiled with XLA when `jit_compile`); an epoch reshuffles on the device. The
    model must be built and its optimizer too (one `fit` step does both). `count`
    steps walk through the shuffled set and wrap at its end; a batch larger than the
    set trains on the whole set each step.
    """
    module = tf()
    with scope(device):
        x_dev = module.identity(module.constant(x))
        y_dev = module.identity(module.constant(y))
        n = int(x_dev.shape[0])
        perm = module.Variable(module.range(n, dtype=module.int32), trainable=False)
    full, rest = divmod(n, batch_size)

    @module.function(jit_compile=jit_compile)
    def one_step(xb, yb):
        return model.train_step((xb, yb))

    @module.function
    def run(first, count):
        for j in module.range(count):
            idx = module.slice(perm, [(first + j) * batch_size], [batch_size])
            one_step(module.gather(x_dev, idx), module.gather(y_dev, idx))

    @module.function
    def run_rest():
        idx = perm[full * batch_size:]
        one_step(module.gather(x_dev, idx), module.gather(y_dev, idx))

    def steps(count: int | None) -> None:
        with scope(device):
            if count is None:  # one epoch
                perm.assign(module.random.shuffle(module.range(n, dtype=module.int32)))
                done = 0
                while done < full:
                    chunk = min(steps_per_execution, full - done)
                    run(module.constant(done), module.constant(chunk))
                    done += chunk
                if rest:
                    run_rest()
                return
            done = 0
            while done < count:
                if not full:  # a batch larger than the training set: the whole set each step
                    run_rest()
                    done += 1
                    continue
                first = done % full
                chunk = min(steps_per_execution, count - done, full - first)
                run(module.constant(first), module.constant(chunk))
                done += chunk

    return steps
