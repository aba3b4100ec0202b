"""Train one of the book's models in a recorded mode, with honest epoch timing, and write its
record.

Arrays are prepared once and stay in memory, so the data is never the bottleneck.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpubench import backends, devices, models, results, telemetry, timing
from gpubench.data import Dataset
from gpubench.params import check_value, positive_int
from gpubench.telemetry import text as telemetry_text

# Which input shape each model takes, and the share of the training images held
# out for validation (the book: 5,000 of MNIST's 60,000; validation_split=0.2 for CIFAR-10).
INPUT_SHAPES = {"mlp_h1000": (784,), "mnist_cnn": (28, 28, 1), "cifar_cnn": (32, 32, 3)}
IMAGE_SHAPES = {"mlp_h1000": (28, 28), "mnist_cnn": (28, 28), "cifar_cnn": (32, 32, 3)}
VALIDATION_FRACTION = {"mlp_h1000": 1 / 12, "mnist_cnn": 1 / 12, "cifar_cnn": 0.2}
CHANCE = 0.1  # ten classes


@dataclass
class Split:
    """Model-ready float32 arrays: train, validation and test."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@dataclass
class TrainRun:
    """The outcome of `train`: model, timer, per-epoch history, test metrics and the record."""

    model: object
    timer: object  # timing.epoch_timer()
    history: dict
    test_loss: float
    test_accuracy: float
    record: dict


def prepare(model_name: str, data: Dataset) -> Split:
    """Scale images to [0, 1], shape them for `model_name`, and hold out the validation set."""
    check_value("model", model_name)
    if data.x_train.shape[1:] != IMAGE_SHAPES[model_name]:
        raise ValueError(
            f"dataset {data.name!r} has images of shape {data.x_train.shape[1:]}, but "
            f"{model_name} needs {IMAGE_SHAPES[model_name]}; use "
            + ("cifar10" if model_name == "cifar_cnn" else "mnist or fashion_mnist")
        )
    n_val = int(round(len(data.x_train) * VALIDATION_FRACTION[model_name]))
    if len(data.x_train) - n_val < 1:
        raise ValueError(f"only {len(data.x_train)} training images; use max_train_samples >= 10")
    x, y, cut = scale(model_name, data.x_train), data.y_train, len(data.x_train) - n_val
    return Split(x[:cut], y[:cut], x[cut:], y[cut:], scale(model_name, data.x_test), data.y_test)


def scale(model_name: str, images: np.ndarray) -> np.ndarray:
    """uint8 images -> float32 in [0, 1], shaped as `model_name` takes them."""
    shape = INPUT_SHAPES[model_name]
    return images.reshape((len(images), *shape)).astype(np.float32) / 255.0


def build_model(model_name, device: str, *, precision: str = "float32",
                learning_rate: float | None = None, xla: str = "off", steps_per_execution: int = 1):
    """Build and compile `model_name` (or a builder) on `device` under the dtype policy `precision`,
    with `xla` ("off", "on", "auto") as jit_compile; `learning_rate` None keeps the book's."""
    builder = (model_name if callable(model_name)
               else models.BUILDERS[check_value("model", model_name)])
    options = dict(jit_compile=backends.current().jit_compile(check_value("xla", xla)),
                   steps_per_execution=positive_int("steps_per_execution",
                                                    steps_per_execution))
    if learning_rate is not None:
        options["learning_rate"] = learning_rate
    mixed_precision = models.keras.mixed_precision
    previous = mixed_precision.global_policy()
    mixed_precision.set_global_policy(check_value("precision", precision))
    try:
        with devices.scope(device):
            return builder(**options)
    finally:
        mixed_precision.set_global_policy(previous)


def mode_fields(model, *, input_pipeline: str = "arrays") -> dict:
    """The mode a compiled model trains in, as Keras resolved it, for a train record."""
    return dict(
        jit_compile=bool(model.jit_compile),
        precision=model.dtype_policy.name,
        steps_per_execution=int(model.steps_per_execution),
        input_pipeline=check_value("input_pipeline", input_pipeline),
        flops_per_sample=models.flops_per_sample(model),
    )


def train(model, data: Dataset, *, epochs: int, batch_size: int, device: str,
          store: results.ResultsStore | None = None, env: str | None = None, notebook: str = "",
          verbose: int = 2) -> TrainRun:
    """Fit `model` on `data` for `epochs` on `device`, evaluate it, and store one `train` record
    (on an error or Ctrl-C as well: status "oom" or "error", with the epochs measured so far)."""
    positive_int("epochs", epochs)
    positive_int("batch_size", batch_size)
    device = devices.resolve(device)
    split = prepare(model.name, data)
    timer = timing.epoch_timer(device)
    fields = dict(
        notebook=notebook, env=env or results.default_env_name(), device=device, model=model.name,
        dataset=data.name, data_source=data.source, data_verified=data.verified, epochs=epochs,
        batch_size=batch_size,
        train_samples=len(split.x_train), validation_samples=len(split.x_val),
        **mode_fields(model),
    )

    def record(**outcome) -> dict:
        made = results.make_record(
            "train", **outcome, **fields,
            **timing.train_fields(timer.epoch_seconds, fields["train_samples"],
                                  fields["flops_per_sample"]),
            telemetry=telemetry.combine(timer.epoch_telemetry) if timer.epoch_telemetry else None,
            **telemetry.epoch_fields(timer.epoch_telemetry))
        if store is not None:
            store.append(made)
        return made

    try:
        with devices.scope(device):
            history = model.fit(
                split.x_train, split.y_train, batch_size=batch_size, epochs=epochs,
                validation_data=(split.x_val, split.y_val) if len(split.x_val) else None,
                callbacks=[timer], verbose=verbose,
            )
            loss, accuracy = map(float, model.evaluate(split.x_test, split.y_test,
                                                       batch_size=batch_size, verbose=0))
    except BaseException as exc:
        message = f"{type(exc).__name__} after {len(timer.epoch_seconds)} epoch(s): {exc}"
        record(status=backends.failure(exc)[0], error=message.strip())
        raise
    return TrainRun(model, timer, dict(history.history), loss, accuracy,
                    record(test_loss=loss, test_accuracy=accuracy))


def predict_classes(model, data: Dataset, batch_size: int = 256) -> np.ndarray:
    """Predicted class of every test image (for the confusion matrix)."""
    x_test = scale(model.name, data.x_test)
    return np.argmax(model.predict(x_test, batch_size=batch_size, verbose=0), axis=1)


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, classes: int = 10) -> np.ndarray:
    """Counts of (true, predicted) label pairs, rows = true labels."""
    pairs = classes * np.asarray(y_true, dtype=np.int64) + np.asarray(y_pred, dtype=np.int64)
    return np.bincount(pairs, minlength=classes * classes).reshape(classes, classes)


def summary(record: dict) -> str:
    """A few lines that say what a train record measured."""
    if record["status"] != "ok":
        return f"{record['model']} on {record['device']}: {record['status']}: {record['error']}"
    steady = record["steady_epoch_seconds"]
    steady_text = (f"{steady:.2f} s median of epochs 2..{record['epochs']} "
                   f"(IQR {record['steady_epoch_iqr']:.2f} s)" if steady is not None
                   else "n/a (one epoch)")
    source = record["data_source"] + (" — NOT the real dataset" if record["data_source"]
                                      == "synthetic" else "")
    return "\n".join([
        f"{record['model']} on {record['device']} ({record['env']} env), "
        f"{record['epochs']} epochs x {record['train_samples']:,} images, "
        f"batch {record['batch_size']}",
        f"  total:        {record['total_seconds']:.1f} s   <- the book's table compares this",
        f"  epoch 1:      {record['first_epoch_seconds']:.2f} s (includes tracing and compilation)",
        f"  steady epoch: {steady_text}",
        f"  throughput:   {record['samples_per_second']:,.0f} images/s",
        f"  mode:         {record.get('backend', 'tensorflow')}, {record['precision']}, "
        f"XLA {'on' if record['jit_compile'] else 'off'}"
        + (" (JAX always compiles)" if record.get("backend") == "jax" else "") + ", "
        f"{record['achieved_gflops']:.1f} GFLOP/s achieved ({record['flops_per_sample']:,} FLOPs "
        "per image)",
        f"  test:         accuracy {record['test_accuracy']:.4f}, loss {record['test_loss']:.4f}"
        + (" (near chance, 0.10: too little training to learn; quick-profile accuracy is not "
           "meaningful)" if record["test_accuracy"] < 2 * CHANCE else ""),
        f"  data:         {record['dataset']} from {source}",
        "  telemetry:    " + telemetry_text.line(record["telemetry"], record["epochs"],
                                                record.get("epoch_gpu_util_percent")),
    ])
