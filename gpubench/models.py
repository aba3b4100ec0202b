"""The book's three models, exported from the chapters' `#@save models` cells (with two of the
book's bugs fixed: softmax applied twice, dropout on while evaluating), built by name. The CPU
chapters define their own model and never load this module."""

from __future__ import annotations

from gpubench import backends, params

keras = backends.keras()  # Keras on the env's backend, its start-up chatter held back
layers = keras.layers

MODELS = tuple(params.TRAINING_NOTEBOOKS.values())

# Written by tools/export_chapters.py from the chapters' #@save cells: edit those.
# BEGIN CHAPTER CODE from Mnist_MLP_h1000, Mnist_CNN, Keras_Cifar_CNN


def mlp_h1000(learning_rate=1e-3, **compile_options):
    """The book's MLP: 784 inputs, Dense 1000 ReLU, Dense 10 logits (795,010 parameters)."""
    model = keras.Sequential([
        keras.Input(shape=(784,)),
        layers.Dense(1000, activation="relu"),
        layers.Dense(10, dtype="float32"),  # logits; float32 under mixed precision too
    ], name="mlp_h1000")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], **compile_options)  # gpubench passes XLA and steps here
    return model


def mnist_cnn(learning_rate=1e-4, **compile_options):
    """The book's MNIST CNN (242,062 parameters), with logits out."""
    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(16, 5, padding="same", activation="relu"),
        layers.MaxPooling2D(2),
        layers.Conv2D(36, 5, padding="same", activation="relu"),
        layers.MaxPooling2D(2),
        layers.Flatten(),  # 7 x 7 x 36 = 1764
        layers.Dense(128, activation="relu"),
        layers.Dropout(0.2),  # the book's keep_prob 0.8
        layers.Dense(10, dtype="float32"),  # logits; float32 under mixed precision too
    ], name="mnist_cnn")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], **compile_options)  # gpubench passes XLA and steps here
    return model


def cifar_cnn(learning_rate=1e-3, **compile_options):
    """The book's Keras CIFAR-10 CNN (4,224,970 parameters)."""
    model = keras.Sequential([
        keras.Input(shape=(32, 32, 3)),
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
        layers.Dense(10, activation="softmax", dtype="float32"),  # float32 under mixed precision
    ], name="cifar_cnn")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"], **compile_options)  # gpubench passes XLA and steps here
    return model


# END CHAPTER CODE

BUILDERS = {"mlp_h1000": mlp_h1000, "mnist_cnn": mnist_cnn, "cifar_cnn": cifar_cnn}


def build(name: str, **options):
    """Build and compile one of MODELS by name; `options` go to its builder."""
    return BUILDERS[params.check_value("model", name)](**options)
