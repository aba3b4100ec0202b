"""Speed_Factors' on-device feed on JAX: the training set put on the device once; a compiled call
runs up to `steps_per_execution` of Keras's stateless `model.train_step(state, batch)` there (a
`lax.fori_loop`, batches gathered by a permutation made there), carrying Keras's JAX state as `fit`
does and writing it back into the model's variables after each `steps` call, as `fit` does."""

from __future__ import annotations

import functools
from collections.abc import Callable

from gpubench.backends.jax import device as jax_device
from gpubench.backends.jax import jax
from gpubench.factors.trainer import feed_steps


def _owners(model) -> tuple:
    """The variables of Keras's JAX training state, in its order."""
    return (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
            model.metrics_variables)


def on_device_feed(model, x, y, batch_size: int, steps_per_execution: int, jit_compile: bool,
                   device: str) -> Callable[[int | None], None]:
    """`steps(count)`: train `count` steps (None: an epoch, reshuffled) of the set on `device`
    (`feed_steps`); the model and its optimizer built first (one `fit` step does both). JAX
    always compiles: `jit_compile` is there for the signature TensorFlow's has."""
    module = jax()
    jnp, lax = module.numpy, module.lax
    target = jax_device(device)
    x_dev, y_dev = module.device_put(x, target), module.device_put(y, target)
    n = int(x_dev.shape[0])

    def step_at(state, perm, start, size: int):
        idx = lax.dynamic_slice(perm, (start,), (size,))
        return model.train_step(state, (jnp.take(x_dev, idx, axis=0),
                                        jnp.take(y_dev, idx, axis=0)))[1]

    @functools.partial(module.jit, donate_argnums=0)
    def run(state, perm, first, count):
        return lax.fori_loop(0, count, lambda j, s: step_at(s, perm, (first + j) * batch_size,
                                                              batch_size), state)

    @functools.partial(module.jit, donate_argnums=0)
    def run_rest(state, perm):
        return step_at(state, perm, n // batch_size * batch_size, n % batch_size)

    def shuffled():
        now["key"], sub = module.random.split(now["key"])
        return module.random.permutation(sub, identity)

    with module.default_device(target):
        now = {"key": module.device_put(module.random.key(0), target)}
        identity = module.device_put(jnp.arange(n, dtype=jnp.int32), target)
        now["perm"] = identity
        shuffled()  # compiled now, not in the first epoch

    def steps(count: int | None) -> None:
        # The same default device at every call (part of jit's cache key), and the state committed
        # to the device as the compiled calls return it: one compilation each.
        with module.default_device(target):
            now["state"] = module.device_put(
                tuple([v.value for v in variables] for variables in _owners(model)), target)
            try:
                if count is None:
                    now["perm"] = shuffled()
                feed_steps(count, n, batch_size, steps_per_execution, chunk, rest)
            finally:
                for variables, values in zip(_owners(model), now["state"], strict=True):
                    for variable, value in zip(variables, values, strict=True):
                        variable.assign(value)

    def chunk(first: int, size: int) -> None:
        now["state"] = run(now["state"], now["perm"], first, size)

    def rest() -> None:
        now["state"] = run_rest(now["state"], now["perm"])

    return steps
