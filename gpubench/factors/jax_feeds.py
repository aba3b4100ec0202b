"""Speed_Factors' input feeds on JAX: the training set on the device, and tf.data where it exists.

The same functions as `gpubench.factors.tensorflow_feeds` (its docstring lists them).

on_device: the training set is put on the device once (`jax.device_put`); each compiled
call runs `steps_per_execution` training steps on the device (a `lax.fori_loop` over
Keras's stateless `model.train_step(state, batch)`, the batches gathered there from a
permutation made there), as Keras's own JAX `fit` carries its state: the trainable,
non-trainable, optimizer and metrics variables. The state stays on the device between
calls and is written back into the model's variables at the end of every `steps(...)`,
as `fit` does at the end of an epoch, so that `evaluate` and the sync see the trained
weights.

tf.data: Keras's JAX `fit` accepts a tf.data.Dataset, so it runs where TensorFlow can be
imported (its CPU side only: TensorFlow is kept off the GPUs, which belong to JAX).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from gpubench.backends.jax import device as jax_device
from gpubench.backends.jax import jax
from gpubench.factors import tf_data

# tf.data beside this backend: TensorFlow's CPU side, where it imports (backends/tf_data.py).
tf_data_available = tf_data.available
make_dataset = tf_data.dataset_beside


def _state(model) -> tuple:
    """Keras's JAX training state: (trainable, non-trainable, optimizer, metrics) values."""
    return ([v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in model.optimizer.variables],
            [v.value for v in model.metrics_variables])


def _write_back(model, state: tuple) -> None:
    """Put the state's arrays back into the model's variables (what `fit` does per epoch)."""
    owners = (model.trainable_variables, model.non_trainable_variables,
              model.optimizer.variables, model.metrics_variables)
    for variables, values in zip(owners, state, strict=True):
        for variable, value in zip(variables, values, strict=True):
            variable.assign(value)


def on_device_feed(model, x, y, batch_size: int, steps_per_execution: int, jit_compile: bool,
                   device: str) -> Callable[[int | None], None]:
    """Training steps on a training set put on `device` once: batches sliced there, no host copy.

    One compiled call runs up to `steps_per_execution` steps on the device (JAX always
    compiles; `jit_compile` is accepted for the same signature as TensorFlow's). The model
    must be built and its optimizer too (one `fit` step does both). `count` steps walk
    through the shuffled set and wrap at its end; None is one epoch, reshuffled on the
    device; a batch larger than the set trains on the whole set each step.
    """
    del jit_compile  # JAX runs compiled
    module = jax()
    jnp, lax = module.numpy, module.lax
    target = jax_device(device)
    x_dev, y_dev = module.device_put(x, target), module.device_put(y, target)
    n = int(x_dev.shape[0])
    full, rest = divmod(n, batch_size)
    train_step = model.train_step  # Keras's stateless JAX step: (state, data) -> (logs, state)

    def step_at(state, perm, start, size: int):
        idx = lax.dynamic_slice(perm, (start,), (size,))
        _, state = train_step(state, (jnp.take(x_dev, idx, axis=0), jnp.take(y_dev, idx, axis=0)))
        return state

    @functools.partial(module.jit, donate_argnums=0)
    def run(state, perm, first, count):
        return lax.fori_loop(0, count, lambda j, s: step_at(s, perm, (first + j) * batch_size,
                                                              batch_size), state)

    @functools.partial(module.jit, donate_argnums=0)
    def run_rest(state, perm):
        return step_at(state, perm, full * batch_size, rest)

    def shuffled():
        keys["key"], sub = module.random.split(keys["key"])
        return module.random.permutation(sub, identity)

    with module.default_device(target):
        keys = {"key": module.device_put(module.random.key(0), target)}
        identity = module.device_put(jnp.arange(n, dtype=jnp.int32), target)
        shuffled()  # compiled now, not in the first epoch
    current = {"perm": identity}

    def steps(count: int | None) -> None:
        # The same default device at every call (it is part of jit's cache key), and the state
        # committed to the device, as the compiled calls return it: one compilation each.
        with module.default_device(target):
            _steps(count, module.device_put(_state(model), target))

    def _steps(count: int | None, state: tuple) -> None:
        try:
            if count is None:  # one epoch, reshuffled on the device
                current["perm"] = shuffled()
                done = 0
                while done < full:
                    chunk = min(steps_per_execution, full - done)
                    state = run(state, current["perm"], done, chunk)
                    done += chunk
                if rest:
                    state = run_rest(state, current["perm"])
                return
            done = 0
            while done < count:
                if not full:  # a batch larger than the training set: the whole set each step
                    state = run_rest(state, current["perm"])
                    done += 1
                    continue
                first = done % full
                chunk = min(steps_per_execution, count - done, full - first)
                state = run(state, current["perm"], first, chunk)
                done += chunk
        finally:
            _write_back(model, state)

    return steps
