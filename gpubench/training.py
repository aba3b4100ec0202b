"""Train one of the book's models with honest epoch timing and write its `train` record.

Arrays are prepared once and stay in memory; Keras feeds them to the device
with no Python work per batch, so the data is never the bottleneck.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpubench import devices, models, results, timing
from gpubench.data import Dataset

# Which input shape each model takes, and the share of the training images held
# out for validation (the book: 5,000 of MNIST's 60,000; validation_split=0.2 for CIFAR-10).
INPUT_SHAPES = {"mlp_h1000": (784,), "mnist_cnn": (28, 28, 1), "cifar_cnn": (32, 32, 3)}
IMAGE_SHAPES = {"mlp_h1000": (28, 28), "mnist_cnn": (28, 28), "cifar_cnn": (32, 32, 3)}
VALIDATION_FRACTION = {"mlp_h1000": 1 / 12, "mnist_cnn": 1 / 12, "cifar_cnn": 0.2}


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
    timer: timing.EpochTimer
    history: dict = field(default_factory=dict)
    test_loss: float | None = None
    test_accuracy: float | None = None
    record: dict = field(default_factory=dict)


def check_positive(name: str, value) -> int:
    """Return `value` if it is a positive int, else raise naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def prepare(model_name: str, data: Dataset) -> Split:
    """Scale images to [0, 1], shape them for `model_name`, and hold out the validation set."""
    if model_name not in INPUT_SHAPES:
        raise ValueError(f"unknown model {model_name!r}; use one of {', '.join(models.MODELS)}")
    if data.x_train.shape[1:] != IMAGE_SHAPES[model_name]:
        raise ValueError(
            f"dataset {data.name!r} has images of shape {data.x_train.shape[1:]}, but "
            f"{model_name} needs {IMAGE_SHAPES[model_name]}; use "
            + ("cifar10" if model_name == "cifar_cnn" else "mnist or fashion_mnist")
        )
    n_val = int(round(len(data.x_train) * VALIDATION_FRACTION[model_name]))
    if len(data.x_train) - n_val < 1:
        raise ValueError(f"only {len(data.x_train)} training images; use max_train_samples >= 10")
    x, y = scale(model_name, data.x_train), data.y_train.astype(np.int64)
    cut = len(x) - n_val
    return Split(x[:cut], y[:cut], x[cut:], y[cut:],
                 scale(model_name, data.x_test), data.y_test.astype(np.int64))


def scale(model_name: str, images: np.ndarray) -> np.ndarray:
    """uint8 images -> float32 in [0, 1], shaped as `model_name` takes them."""
    shape = INPUT_SHAPES[model_name]
    return images.reshape((len(images), *shape)).astype(np.float32) / 255.0


def build_model(model_name: str, device: str):
    """Build `model_name` with its variables on `device`."""
    with devices.scope(device):
        return models.build(model_name)


def train(
    model,
    data: Dataset,
    *,
    epochs: int,
    batch_size: int,
    device: str,
    store: results.ResultsStore | None = None,
    env: str | None = None,
    notebook: str = "",
    verbose: int = 2,
) -> TrainRun:
    """Fit `model` on `data` for `epochs` on `device`, evaluate it, and store one `train` record.

    If training stops with an error or Ctrl-C, a record with the epochs measured so
    far is stored (status "oom" or "error") before the exception goes on.
    """
    check_positive("epochs", epochs)
    check_positive("batch_size", batch_size)
    device = devices.resolve(device)
    split = prepare(model.name, data)
    timer = timing.EpochTimer()
    run = TrainRun(model=model, timer=timer)
    fields = dict(
        notebook=notebook, env=env or results.default_env_name(), device=device, model=model.name,
        dataset=data.name, data_source=data.source, epochs=epochs, batch_size=batch_size,
        train_samples=len(split.x_train), validation_samples=len(split.x_val),
    )
    try:
        with devices.scope(device):
            history = model.fit(
                split.x_train, split.y_train, batch_size=batch_size, epochs=epochs,
                validation_data=(split.x_val, split.y_val) if len(split.x_val) else None,
                callbacks=[timer], verbose=verbose,
            )
            run.history = dict(history.history)
            loss, accuracy = model.evaluate(split.x_test, split.y_test,
                                            batch_size=batch_size, verbose=0)
    except BaseException as exc:
        status = "oom" if _is_oom(exc) else "error"
        message = f"{type(exc).__name__} after {len(timer.epoch_seconds)} epoch(s): {exc}"
        record = results.make_record("train", status=status, error=message.strip(),
                                     **fields, **_timing_fields(timer, fields["train_samples"]))
        if store is not None:
            store.append(record)
        raise
    run.test_loss, run.test_accuracy = float(loss), float(accuracy)
    run.record = results.make_record(
        "train", test_loss=run.test_loss, test_accuracy=run.test_accuracy,
        **fields, **_timing_fields(timer, fields["train_samples"]),
    )
    if store is not None:
        store.append(run.record)
    return run


def _timing_fields(timer: timing.EpochTimer, train_samples: int) -> dict:
    """Epoch times, epoch 1 on its own, the steady-state median of epochs 2..n, and throughput."""
    steady = timer.steady
    per_epoch = steady.median if steady else timer.first_epoch_seconds
    return dict(
        epoch_seconds=list(timer.epoch_seconds),
        first_epoch_seconds=timer.first_epoch_seconds,
        steady_epoch_seconds=steady.median if steady else None,
        steady_epoch_iqr=steady.iqr if steady else None,
        total_seconds=timer.total_seconds if timer.epoch_seconds else None,
        samples_per_second=train_samples / per_epoch if per_epoch else None,
    )


def _is_oom(exc: BaseException) -> bool:
    tf = devices.tensorflow()
    return isinstance(exc, (MemoryError, tf.errors.ResourceExhaustedError))


def predict_classes(model, data: Dataset, batch_size: int = 256) -> np.ndarray:
    """Predicted class of every test image (for the confusion matrix)."""
    x_test = scale(model.name, data.x_test)
    return np.argmax(model.predict(x_test, batch_size=batch_size, verbose=0), axis=1)


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, classes: int = 10) -> np.ndarray:
    """Counts of (true, predicted) label pairs, rows = true labels."""
    matrix = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)), 1)
    return matrix


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
        f"{record['epochs']} epochs x {record['train_samples']:,} images, batch {record['batch_size']}",
        f"  total:        {record['total_seconds']:.1f} s   <- the book's table compares this",
        f"  epoch 1:      {record['first_epoch_seconds']:.2f} s (includes tracing and compilation)",
        f"  steady epoch: {steady_text}",
        f"  throughput:   {record['samples_per_second']:,.0f} images/s",
        f"  test:         accuracy {record['test_accuracy']:.4f}, loss {record['test_loss']:.4f}",
        f"  data:         {record['dataset']} from {source}",
    ])
