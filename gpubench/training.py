"""Prepare the data (the MLP chapter's `#@save training` cell), build a model in a recorded mode,
count its FLOPs, and record a training run the chapter did itself (its `model.fit` with
`timing.epoch_timer` as a callback, then `model.evaluate`) as one train record."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from gpubench import backends, devices, fmt, matmul, results, timing
from gpubench.data import Dataset
from gpubench.params import check_value, positive_int

Split = namedtuple("Split", "x_train y_train x_val y_val x_test y_test")
Split.__doc__ = "Model-ready float32 arrays: train, validation and test."

# Written by tools/export_chapters.py from the chapters' #@save cells: edit those.
# BEGIN CHAPTER CODE from Mnist_MLP_h1000


# The book's validation sets: the last 5,000 of MNIST's 60,000 training images; 0.2 of CIFAR-10's.
VALIDATION_FRACTION = {"mnist": 5_000 / 60_000, "fashion_mnist": 5_000 / 60_000, "cifar10": 0.2}


def prepare(data, input_shape, validation_fraction=None):
    """(x, y) of train, validation (the last `validation_fraction`) and test, scaled and shaped."""
    if math.prod(input_shape) != math.prod(data.x_train.shape[1:]):
        raise ValueError(f"{data.name} images are {data.x_train.shape[1:]}, but the model takes "
                         f"{tuple(input_shape)}: choose a dataset or a model that fits the other")

    def scaled(images):
        return images.reshape((len(images), *input_shape)).astype("float32") / 255

    if validation_fraction is None:  # the book's
        validation_fraction = VALIDATION_FRACTION[data.name]
    x, y = scaled(data.x_train), data.y_train
    cut = len(x) - round(len(x) * validation_fraction)
    return (x[:cut], y[:cut]), (x[cut:], y[cut:]), (scaled(data.x_test), data.y_test)


# END CHAPTER CODE


def _builder(model_name: str):
    from gpubench import models  # noqa: PLC0415 - the book's models, not a chapter's own
    return models.BUILDERS[check_value("model", model_name)]


def split(model_name: str, data: Dataset) -> Split:
    """`data` prepared by `prepare` for one of the book's models, by name."""
    return Split(*sum(prepare(data, _builder(model_name)().input_shape[1:]), ()))


def build_model(model_name, device: str, *, precision: str = "float32",
                learning_rate: float | None = None, xla: str = "off", steps_per_execution: int = 1):
    """A book model (by name) or a builder's, compiled on `device` in the mode given."""
    builder = model_name if callable(model_name) else _builder(model_name)
    options = dict(jit_compile=backends.current().jit_compile(check_value("xla", xla)),
                   steps_per_execution=positive_int("steps_per_execution", steps_per_execution))
    if learning_rate is not None:
        options["learning_rate"] = learning_rate
    policy = backends.keras().mixed_precision
    previous = policy.global_policy()
    policy.set_global_policy(check_value("precision", precision))
    try:
        with devices.scope(device):
            return builder(**options)
    finally:
        policy.set_global_policy(previous)


def flops_per_sample(model) -> int:
    """Training FLOPs of one image: 3 x 2 x the multiply-adds of the Dense and Conv2D layers."""
    layers = backends.keras().layers
    return 3 * 2 * sum(math.prod(layer.kernel.shape) * math.prod(layer.output.shape[1:-1])
                       for layer in model.layers  # output positions: 1, or H x W for Conv2D
                       if isinstance(layer, (layers.Dense, layers.Conv2D)))


def mode_fields(model, *, input_pipeline: str = "arrays", device: str | None = None) -> dict:
    """The mode a compiled model trains in, as Keras resolved it; with `device`, `tf32` too."""
    fields = dict(jit_compile=bool(model.jit_compile), precision=model.dtype_policy.name,
                  steps_per_execution=int(model.steps_per_execution),
                  input_pipeline=check_value("input_pipeline", input_pipeline),
                  flops_per_sample=flops_per_sample(model))
    if device is not None:
        fields["tf32"] = matmul.tf32_of(devices.resolve(device), model.dtype_policy.compute_dtype)
    return fields


def record(model, history, timer, data: Dataset, *, batch_size: int,
           samples: tuple[int, int], test: tuple[float, float] | None = None,
           error: BaseException | None = None, store: results.ResultsStore | None = None,
           env: str | None = None, notebook: str = "") -> dict:
    """The train record of a `model.fit` with `timer`, and `test` (evaluate's) or its `error`."""
    positive_int("batch_size", batch_size)
    if timer.device is None:
        raise ValueError("record() needs the epoch timer of the device it trained on: "
                         "timing.epoch_timer(device)")
    if error is None and test is None:
        raise ValueError("record() needs test=(loss, accuracy), what model.evaluate returned, "
                         "or error=the exception that stopped the training")
    device = devices.resolve(timer.device)
    mode = mode_fields(model, device=device)
    fields = dict(
        notebook=notebook, env=env or results.default_env_name(), device=device,
        model=model.name, dataset=data.name, data_source=data.source,
        data_verified=data.verified, batch_size=batch_size, train_samples=samples[0],
        epochs=history.params["epochs"] if history is not None else len(timer.epoch_seconds),
        validation_samples=samples[1], **mode,
        **timing.run_telemetry(timer.epoch_telemetry, device),
        **timing.train_fields(timer.epoch_seconds, samples[0], mode["flops_per_sample"]),
        load_average=timing.highest(*timer.epoch_load_average),
        epoch_load_average=timer.epoch_load_average)
    if error is not None:
        message = f"{type(error).__name__} after {len(timer.epoch_seconds)} epoch(s): {error}"
        fields.update(status=backends.failure(error)[0], error=message.strip())
    else:
        fields.update(test_loss=float(test[0]), test_accuracy=float(test[1]))
    made = results.make_record("train", **fields)
    return store.append(made) if store is not None else made


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, classes: int = 10) -> np.ndarray:
    """Counts of (true, predicted) label pairs, rows = true labels."""
    pairs = classes * np.asarray(y_true, dtype=np.int64) + np.asarray(y_pred, dtype=np.int64)
    return np.bincount(pairs, minlength=classes * classes).reshape(classes, classes)


def summary(record: dict) -> str:
    """A few lines that say what a train record measured."""
    r = record
    if r["status"] != "ok":
        return f"{r['model']} on {r['device']}: {r['status']}: {r['error']}"
    steady = (f"{r['steady_epoch_seconds']:.2f} s median of epochs 2..{r['epochs']} "
              f"(IQR {r['steady_epoch_iqr']:.2f} s)" if r["steady_epoch_seconds"] is not None
              else "n/a (one epoch)")
    backend = r.get("backend") or "tensorflow"
    compiling = (f"{backends.COMPILER[backend]} {'on' if r['jit_compile'] else 'off'}"
                 + (" (JAX always compiles)" if backend == "jax" else ""))
    return "\n".join([
        f"{r['model']} on {r['device']} ({r['env']} env), {r['epochs']} epochs x "
        f"{r['train_samples']:,} images, batch {r['batch_size']}",
        f"  total:        {r['total_seconds']:.1f} s   <- the book's table compares this",
        f"  epoch 1:      {r['first_epoch_seconds']:.2f} s (includes tracing and compilation)",
        f"  steady epoch: {steady}",
        f"  throughput:   {r['samples_per_second']:,.0f} images/s",
        f"  mode:         {backends.backend_title(backend)}, "
        f"{fmt.dtype_label(r['precision'], r.get('tf32'))}, {compiling}, "
        f"{r['achieved_gflops']:.1f} GFLOP/s achieved ({r['flops_per_sample']:,} FLOPs per image)",
        f"  test:         accuracy {r['test_accuracy']:.4f}, loss {r['test_loss']:.4f}"
        + (" (near chance, 0.10: too little training to learn; quick-profile accuracy is not "
           "meaningful)" if r["test_accuracy"] < 0.2 else ""),
        f"  data:         {r['dataset']} from {r['data_source']}"
        + (" — NOT the real dataset" if r["data_source"] == "synthetic" else ""),
        "  telemetry:    " + fmt.telemetry_line(r["telemetry"], r["epochs"],
                                                r.get("epoch_gpu_util_percent"),
                                                r.get("epoch_energy_joules")),
    ])
