"""MNIST, Fashion-MNIST and CIFAR-10 for the training benchmark: real, or synthetic and labelled.

`load(name, source)` returns a `Dataset` of uint8 images and int64 labels from "keras" (the
Keras cache, filled and hash-checked by `keras.utils.get_file`, with the files and names of
`keras.datasets.*.load_data`), "dir" (the official files in a folder: IDX raw or gzipped,
mnist.npz, CIFAR-10's python batches or cifar-10-python.tar.gz), "synthetic", or "auto" (keras,
then dir when data_dir is given, then synthetic with a warning). Keras loads only for "keras".
The files read are identified by their SHA-256 (checksums.OFFICIAL_SHA256): another dataset's
official files are an error, files that match nothing are loaded and marked unverified.

Modules: `datasets` (the datasets' facts, `Dataset`, the errors), `checksums` (the official
sums and identifying files by them), `formats` (the IDX, npz and CIFAR-10 readers), `sources`
(the Keras cache, a folder, synthetic images), `loading` (`load` and the lines it prints). A
test that points a download elsewhere patches `sources` (URLs) or `checksums` (sums).
"""

from __future__ import annotations

from gpubench.data.datasets import (
    CIFAR10_ARCHIVE,
    CIFAR10_BATCHES,
    CIFAR10_FOLDER,
    CLASS_NAMES,
    IDX_FILES,
    IMAGE_SHAPES,
    NUM_CLASSES,
    TITLES,
    DataError,
    Dataset,
    DataUnavailable,
    WrongDataset,
)
from gpubench.data.loading import load
from gpubench.params import DATASETS, SOURCES, check_source
from gpubench.params import check_dataset as check_name  # the names' rules: params

__all__ = [
    "CIFAR10_ARCHIVE", "CIFAR10_BATCHES", "CIFAR10_FOLDER", "CLASS_NAMES", "DATASETS",
    "IDX_FILES", "IMAGE_SHAPES", "NUM_CLASSES", "SOURCES", "TITLES", "DataError",
    "DataUnavailable", "Dataset", "WrongDataset", "check_name", "check_source", "load",
]
