"""The three datasets' facts (titles, image shapes, classes, the official files' names), the
`Dataset` that `load` returns, and the errors a source raises."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The four IDX files in the order x_train, y_train, x_test, y_test.
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")
CIFAR10_BATCHES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
CIFAR10_ARCHIVE, CIFAR10_FOLDER = "cifar-10-python.tar.gz", "cifar-10-batches-py"

TITLES = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST", "cifar10": "CIFAR-10"}

IMAGE_SHAPES = {"mnist": (28, 28), "fashion_mnist": (28, 28), "cifar10": (32, 32, 3)}
NUM_CLASSES = 10
CLASS_NAMES = {
    "mnist": [str(digit) for digit in range(10)],
    "fashion_mnist": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                      "Sneaker", "Bag", "Ankle boot"],
    "cifar10": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                "truck"],
}


class DataError(ValueError):
    """A data file is missing, truncated or malformed; the message names the file and the fix."""


class WrongDataset(DataError):
    """The files are another dataset's official files; the message names both datasets."""


class DataUnavailable(RuntimeError):
    """A source cannot provide the data (e.g. offline download); `auto` falls through to the
    next."""


@dataclass
class Dataset:
    """Train and test arrays of one dataset, with where they came from."""

    name: str
    source: str  # "keras" | "dir" | "synthetic"
    origin: str  # the file or folder read, or how the images were generated
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    note: str | None = None  # why earlier sources of source="auto" were not used
    # True: the files' SHA-256 are the official ones of this dataset; False: files that match
    # no known checksum; None: synthetic (or not checked).
    verified: bool | None = None

    @property
    def synthetic(self) -> bool:
        """True when the images are generated, not the real dataset."""
        return self.source == "synthetic"

    def describe(self) -> str:
        """One line saying what the data is, where it came from and how many images it has."""
        counts = f"{len(self.x_train):,} train / {len(self.x_test):,} test images"
        if self.synthetic:
            return f"SYNTHETIC DATA, not the real {self.name} dataset: {counts} from {self.origin}"
        where = {"keras": "keras cache", "dir": "directory"}[self.source]
        checked = {True: " (official files, checksums verified)", None: "",
                   False: " (checksums not recognised: not verified to be the official files)"}
        return f"{self.name} from {where} {shown(self.origin)}: {counts}{checked[self.verified]}"


def shown(text: str) -> str:
    """`text` with the home folder written as ~, so notebook outputs carry no user's path."""
    return text.replace(str(Path.home()) + os.sep, "~" + os.sep)
