"""Data parallelism on JAX: Keras's `keras.distribution.DataParallel` over the chosen devices.

The same functions as `gpubench.scaling.tensorflow_parallel` (its docstring lists them).
The model is built in the distribution's scope, so its variables are replicated on every
device of the mesh. The training step is one jitted function of the model's state and a
global batch sharded along the mesh's batch axis: the loss is the mean over the global
batch, so XLA adds the replicas' gradients (an all-reduce) and every replica applies the
same update. The state stays on the devices during an epoch and is written back into the
model's variables at its end; the epoch's clock stops once those are ready (`sync`).

The CPU is split into N devices by `XLA_FLAGS=--xla_force_host_platform_device_count=N`,
which JAX reads once, when it first sets up its devices: `split_cpu` sets it if that has
not happened yet in this process, else it needs a fresh process (a kernel restart).
Several machines (`gpubench scaling --cluster`) are TensorFlow's only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence

from gpubench import backends
from gpubench.backends import jax as _backend

STRATEGY = "data_parallel"
JIT_COMPILE = True  # JAX runs the step compiled
INPUT_PIPELINE = "arrays"
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
_virtual: int | None = None  # the CPU devices split_cpu asked for


def xla_flags(count: int, flags: str | None = None) -> str:
    """`flags` (XLA_FLAGS) with the host device count set to `count`, any earlier count dropped."""
    kept = [f for f in (flags or "").split() if not f.startswith(DEVICE_COUNT_FLAG + "=")]
    return " ".join([*kept, f"{DEVICE_COUNT_FLAG}={count}"])


def _initialised() -> bool:
    """Whether JAX has set up its devices in this process (then XLA_FLAGS is read already)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge  # noqa: PLC0415 - private; absent: assume it has

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return True


def split_cpu(count: int) -> None:
    """Split the CPU into `count` JAX devices; must run before JAX sets up its devices."""
    global _virtual
    if not _initialised():
        os.environ["XLA_FLAGS"] = xla_flags(count, os.environ.get("XLA_FLAGS"))
    have = len(_backend.jax().devices("cpu"))
    if have < count:
        raise RuntimeError(
            f"virtual_devices={count}: JAX has already set up its devices in this process "
            f"({have} CPU device(s)); restart the kernel with "
            f"XLA_FLAGS={DEVICE_COUNT_FLAG}={count} in its environment, or call "
            f"gb.scaling.split_cpu({count}) before anything loads JAX")
    _virtual = count


def cpu_count() -> int:
    """How many CPU devices JAX has (the split asked for, else all it was started with)."""
    return _virtual or len(_backend.jax().devices("cpu"))


def strategy(devices: Sequence[str]):
    """(DataParallel over the canonical `devices`, the all-reduce it uses)."""
    keras = backends.keras()
    found = keras.distribution.DataParallel(devices=list(devices))
    if len(devices) == 1:
        name = "none (one replica)"
    elif all(d.startswith("gpu") for d in devices):
        name = "XLA all-reduce (NCCL)"
    else:
        name = "XLA all-reduce (host)"
    return found, name


def scope(found):
    """The context in which the model's variables are created, replicated on every device."""
    return found.scope()


class Batches:
    """Global batches of `x`, `y` placed on the devices, sharded along the batch axis;
    a new order each pass when shuffled (the same on every run with the same seed)."""

    def __init__(self, found, x, y, batch: int, *, seed: int = 0, shuffle: bool = True) -> None:
        import numpy as np  # noqa: PLC0415

        self.x, self.y, self.batch, self.shuffle = x, y, batch, shuffle
        self.rng = np.random.default_rng(seed)
        self.x_sharding = found.get_data_layout((batch, *x.shape[1:])).backend_layout
        self.y_sharding = found.get_data_layout((batch, *y.shape[1:])).backend_layout

    def __iter__(self) -> Iterator[tuple]:
        import numpy as np  # noqa: PLC0415

        jax = _backend.jax()
        order = self.rng.permutation(len(self.x)) if self.shuffle else np.arange(len(self.x))
        for start in range(0, len(self.x) - self.batch + 1, self.batch):
            chosen = order[start:start + self.batch]
            # placed while the previous step runs: JAX dispatches the step without waiting
            yield (jax.device_put(self.x[chosen], self.x_sharding),
                   jax.device_put(self.y[chosen], self.y_sharding))


def distributed_input(found, x, y, batch: int, *, seed: int = 0, shuffle: bool = True) -> Batches:
    """The global batches of `x`, `y` (whole batches of `batch`), sharded over the replicas."""
    return Batches(found, x, y, batch, seed=seed, shuffle=shuffle)


class Step:
    """A compiled step and the model's state it updates; `write_back` puts it in the model."""

    def __init__(self, model, compiled) -> None:
        self.model, self.compiled = model, compiled
        self.state = ([v.value for v in model.trainable_variables],
                      [v.value for v in model.non_trainable_variables],
                      [v.value for v in model.optimizer.variables])

    def __call__(self, x, y):
        loss, self.state = self.compiled(self.state, x, y)
        return loss

    def write_back(self) -> None:
        """Assign the state to the model's variables (no copy, no wait)."""
        model = self.model
        for variables, values in zip((model.trainable_variables, model.non_trainable_variables,
                                      model.optimizer.variables), self.state, strict=True):
            for variable, value in zip(variables, values, strict=True):
                variable.assign(value)


def make_step(found, model, batch: int) -> Step:
    """The compiled training step: one global batch of `batch`, sharded over the replicas; the
    loss is its mean, so XLA adds the replicas' gradients (the all-reduce) before the update."""
    jax = _backend.jax()

    def loss_of(trainable, non_trainable, x, y):
        out, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return model.loss(y, out), non_trainable  # the mean over the global batch

    gradient = jax.value_and_grad(loss_of, has_aux=True)

    def step(state, x, y):
        trainable, non_trainable, optimizer = state
        (loss, non_trainable), grads = gradient(trainable, non_trainable, x, y)
        trainable, optimizer = model.optimizer.stateless_apply(optimizer, grads, trainable)
        return loss, (trainable, non_trainable, optimizer)

    return Step(model, jax.jit(step, donate_argnums=0))


def run_epoch(step: Step, data: Batches, steps: int):
    """Run `steps` steps over one pass of `data`, write the state back; the summed loss."""
    jnp = _backend.jax().numpy
    losses = [step(x, y) for _, (x, y) in zip(range(steps), data, strict=True)]
    step.write_back()
    return jnp.sum(jnp.stack(losses))


def sync(model) -> None:
    """Wait until the epoch's updates are computed: block on the model's variables."""
    _backend.sync(list(model.variables))
