"""The book's three models as Keras 3 builders, compiled with the book's optimiser settings.

Two bugs of the book's low-level TensorFlow CNN are fixed here:
- it applied softmax and then a loss that applies softmax again (the loss expected
  logits): our MNIST models output logits and the loss is told so;
- its dropout stayed on while evaluating: Keras turns dropout off outside training.
"""

from __future__ import annotations

from gpubench._tf import tensorflow

MODELS = ("mlp_h1000", "mnist_cnn", "cifar_cnn")

# What the book used for each model: optimiser learning rate and batch size.
BOOK_SETTINGS = {
    "mlp_h1000": {"learning_rate": 1e-3, "batch_size": 100, "dataset": "mnist"},
    "mnist_cnn": {"learning_rate": 1e-4, "batch_size": 100, "dataset": "mnist"},
    "cifar_cnn": {"learning_rate": 1e-3, "batch_size": 128, "dataset": "cifar10"},
}


def _keras():
    tensorflow()
    import keras  # noqa: PLC0415 - loaded quietly by tensorflow()

    return keras


def _compile(model, learning_rate: float, from_logits: bool):
    keras = _keras()
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits),
        metrics=["accuracy"],
    )
    return model


def mlp_h1000(learning_rate: float = 1e-3):
    """784 inputs -> Dense 1000 ReLU -> Dense 10 logits (795,010 parameters); Adam 1e-3."""
    layers = _keras().layers
    model = _keras().Sequential(
        [
            layers.Input(shape=(784,)),
            layers.Dense(1000, activation="relu"),
            layers.Dense(10),
        ],
        name="mlp_h1000",
    )
    return _compile(model, learning_rate, from_logits=True)


def mnist_cnn(learning_rate: float = 1e-4):
    """Conv 5x5x16, pool, conv 5x5x36, pool, dense 128, dropout 0.2, dense 10 (242,062 parameters)."""
    layers = _keras().layers
    model = _keras().Sequential(
        [
            layers.Input(shape=(28, 28, 1)),
            layers.Conv2D(16, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(36, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),  # 7 * 7 * 36 = 1764
            layers.Dense(128, activation="relu"),
            layers.Dropout(0.2),  # the book's keep_prob 0.8
            layers.Dense(10),
        ],
        name="mnist_cnn",
    )
    return _compile(model, learning_rate, from_logits=True)


def cifar_cnn(learning_rate: float = 1e-3):
    """The book's Keras CIFAR-10 CNN: two conv blocks, dense 1024, softmax (4,224,970 parameters)."""
    layers = _keras().layers
    model = _keras().Sequential(
        [
            layers.Input(shape=(32, 32, 3)),
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.Dropout(0.25),
            layers.MaxPooling2D(2),
            layers.Conv2D(64, 3, padding="same", activation="relu"),
            layers.Dropout(0.25),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dropout(0.25),
            layers.Dense(1024, activation="relu"),
            layers.Dropout(0.25),
            layers.Dense(10, activation="softmax"),
        ],
        name="cifar_cnn",
    )
    return _compile(model, learning_rate, from_logits=False)


def build(name: str):
    """Build one of MODELS by name."""
    builders = {"mlp_h1000": mlp_h1000, "mnist_cnn": mnist_cnn, "cifar_cnn": cifar_cnn}
    if name not in builders:
        raise ValueError(f"unknown model {name!r}; use one of {', '.join(MODELS)}")
    return builders[name]()
