"""Build a model in a recorded mode and record a training run the chapter did itself.

The chapter shows the training, as the book did: it prepares the data with `models.prepare`
(its own `#@save` cell), calls `model.fit` with `timing.epoch_timer` as a callback and
`model.evaluate`, and then `record` writes one `train` record from the model, its history
and the timer. Speed_Factors, Multi_GPU_Scaling and the benchmarks prepare the book's
models' data with the same exported `models.prepare` (`split`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gpubench import backends, devices, fmt, models, results, telemetry, timing
from gpubench.data import Dataset
from gpubench.params import check_value, positive_int

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


@functools.cache
def input_shape(model_name: str) -> tuple:
    """The input shape of one of the book's models, as its chapter builds it."""
    return tuple(models.build(check_value("model", model_name)).input_shape[1:])


def split(model_name: str, data: Dataset) -> Split:
    """`data` prepared for one of the book's models by the chapters' `models.prepare`."""
    (x_train, y_train), (x_val, y_val), (x_test, y_test) = models.prepare(
        data, input_shape(model_name))
    return Split(x_train, y_train, x_val, y_val, x_test, y_test)


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


def record(model, history, timer, data: Dataset, *, batch_size: int,
           samples: tuple[int, int], test: tuple[float, float] | None = None,
           error: BaseException | None = None, store: results.ResultsStore | None = None,
           env: str | None = None, notebook: str = "") -> dict:
    """The `train` record of a `model.fit` the caller ran: its epochs from `history` (None if fit
    failed), epoch times and telemetry from `timer` (timing.epoch_timer, made with the device),
    `samples` = (training, validation) images, `test` = evaluate's (loss, accuracy). With
    `error`, the record says how it failed and keeps the epochs measured. Stored in `store`."""
    positive_int("batch_size", batch_size)
    if timer.device is None:
        raise ValueError("record() needs the epoch timer of the device it trained on: "
                         "timing.epoch_timer(device)")
    if error is None and test is None:
        raise ValueError("record() needs test=(loss, accuracy), what model.evaluate returned, "
                         "or error=the exception that stopped the training")
    epochs = history.params["epochs"] if history is not None else len(timer.epoch_seconds)
    mode = mode_fields(model)
    fields = dict(
        notebook=notebook, env=env or results.default_env_name(),
        device=devices.resolve(timer.device), model=model.name, dataset=data.name,
        data_source=data.source, data_verified=data.verified, epochs=epochs,
        batch_size=batch_size, train_samples=samples[0], validation_samples=samples[1],
        **mode, **timing.train_fields(timer.epoch_seconds, samples[0], mode["flops_per_sample"]),
        telemetry=telemetry.combine(timer.epoch_telemetry) if timer.epoch_telemetry else None,
        **telemetry.epoch_fields(timer.epoch_telemetry))
    if error is not None:
        message = f"{type(error).__name__} after {len(timer.epoch_seconds)} epoch(s): {error}"
        made = results.make_record("train", status=backends.failure(error)[0],
                                   error=message.strip(), **fields)
    else:
        loss, accuracy = map(float, test)
        made = results.make_record("train", test_loss=loss, test_accuracy=accuracy, **fields)
    if store is not None:
        store.append(made)
    return made


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
        "  telemetry:    " + fmt.telemetry_line(record["telemetry"], record["epochs"],
                                                record.get("epoch_gpu_util_percent")),
    ])
