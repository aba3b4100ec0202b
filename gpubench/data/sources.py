"""The three sources of a dataset: the Keras cache (downloaded and hash-checked by
`keras.utils.get_file`, with keras.datasets' files and names), a folder of the official files,
and seeded synthetic images. Each returns (origin, arrays, verified)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np

from gpubench.data import checksums, formats
from gpubench.data.datasets import (
    CIFAR10_ARCHIVE,
    CIFAR10_BATCHES,
    CIFAR10_FOLDER,
    IDX_FILES,
    IMAGE_SHAPES,
    NUM_CLASSES,
    DataError,
    DataUnavailable,
    WrongDataset,
)
from gpubench.params import DATASETS

# What keras.datasets downloads; module-level so tests can point them at local files (their
# SHA-256: checksums.MNIST_SHA256 and checksums.CIFAR10_SHA256).
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
FASHION_MNIST_BASE_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
DOWNLOAD_TIMEOUT = 30.0  # seconds without a byte before a download gives up

# Sub-folders of data_dir searched for each dataset (data_dir itself comes first).
DIR_SUBFOLDERS = {"mnist": ("mnist", "MNIST"), "cifar10": ("cifar10", "cifar-10"),
                  "fashion_mnist": ("fashion-mnist", "fashion_mnist", "FashionMNIST")}

# Synthetic training images per dataset (the test split has 10,000).
SYNTHETIC_SIZES = {"mnist": 60_000, "fashion_mnist": 60_000, "cifar10": 50_000}
# Synthetic images: a class prototype (grey levels on block x block pixels, +-contrast/2) blended
# with up to `mix` of another class's, plus uniform noise (std `noise`). Blocks survive convolution
# and pooling, so every book model learns the classes in the quick profile (tests/test_data.py).
_SYNTHETIC = {"contrast": 60.0, "noise": 80.0, "mix": 0.3, "block": 4, "chunk": 2000}


def keras_file(fname: str, url: str, sha256: str | None, subdir: str = "datasets") -> Path:
    """The cached file `fname`, downloaded (and hash-checked) by keras.utils.get_file if needed."""
    from gpubench import backends  # noqa: PLC0415 - Keras loads only for this source

    # Keras reads KERAS_HOME once, at import; read it per call so the cache follows it.
    cache = Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras").expanduser()
    target = cache / subdir / fname
    saved = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT)  # get_file has no timeout of its own
    try:
        target.parent.mkdir(parents=True, exist_ok=True)  # else get_file falls back to /tmp/.keras
        return Path(backends.keras().utils.get_file(fname, url, file_hash=sha256,
                                                      cache_subdir=subdir, cache_dir=str(cache)))
    except Exception as exc:  # get_file wraps URL and HTTP errors in a bare Exception
        if isinstance(exc, ValueError) and "hash" in str(exc):  # its check after a download
            target.unlink(missing_ok=True)
            raise DataError(f"{url} downloaded into {target} does not have the sha256 {sha256}: "
                            "it was corrupted or changed and is deleted: try again, or put a good "
                            "copy there") from exc
        raise DataUnavailable(f"cannot download {url} into {target.parent} ({exc}); if offline, "
                              'copy the files into a folder and use source="dir", or use '
                              'source="synthetic"') from exc
    finally:
        socket.setdefaulttimeout(saved)


def load_keras(name: str) -> tuple[Path, tuple, bool]:
    """(origin, arrays, verified) from the Keras cache, downloading what is missing."""
    if name == "mnist":
        path = keras_file("mnist.npz", MNIST_URL, checksums.MNIST_SHA256)
        return path, *formats.read_mnist_npz(path)
    if name == "fashion_mnist":  # Keras publishes no hash for these files: OFFICIAL_SHA256 has
        subdir = os.path.join("datasets", "fashion-mnist")
        paths = [keras_file(f"{base}.gz", f"{FASHION_MNIST_BASE_URL}{base}.gz", None, subdir)
                 for base in IDX_FILES]
        return paths[0].parent, *formats.read_idx_set(name, paths)
    # keras.datasets.cifar10 keeps the archive under this name; read it without extracting.
    archive = keras_file("cifar-10-batches-py-target_archive", CIFAR10_URL,
                         checksums.CIFAR10_SHA256)
    return archive, *formats.read_cifar(archive)


def load_dir(name: str, data_dir: str | os.PathLike | None) -> tuple[Path, tuple, bool]:
    """(origin, arrays, verified) from the first of data_dir and its DIR_SUBFOLDERS that holds
    the files; a folder holding another dataset's official files is passed over, and named in the
    error when no later one holds `name`'s."""
    if data_dir is None:  # only source="auto" gets here without one
        raise DataUnavailable("not tried (no data_dir given)")
    data_dir = Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise DataError(f"data_dir {data_dir} is not a directory; pass the folder holding the "
                        f"{name} files")
    folders = [data_dir] + [data_dir / sub for sub in DIR_SUBFOLDERS[name]]
    missing, wrong = IDX_FILES, None
    for folder in folders:
        if name == "cifar10":
            for path in (folder / CIFAR10_FOLDER, folder, folder / CIFAR10_ARCHIVE):
                if (path.is_file() or (path / "data_batch_1").is_file()
                        or (path / "test_batch").is_file()):
                    return path, *formats.read_cifar(path)
            continue
        found = [next((folder / f for f in (base, f"{base}.gz") if (folder / f).is_file()), None)
                 for base in IDX_FILES]
        if None not in found:
            try:
                return folder, *formats.read_idx_set(name, found)
            except WrongDataset as exc:  # e.g. Fashion-MNIST in data_dir, MNIST in data_dir/mnist
                wrong = wrong or exc
                continue
        if name == "mnist" and (folder / "mnist.npz").is_file():
            return folder / "mnist.npz", *formats.read_mnist_npz(folder / "mnist.npz")
        absent = [base for base, path in zip(IDX_FILES, found, strict=True) if path is None]
        missing = min(missing, absent, key=len)
    if wrong is not None:
        raise wrong
    searched = ", ".join(map(str, folders))
    if name == "cifar10":
        raise DataError(f"cifar10 files not found in {searched}. Expected layout: "
                        f"<data_dir>[/cifar10]/{CIFAR10_FOLDER}/ holding "
                        f"{', '.join(CIFAR10_BATCHES)}, or those in "
                        f"<data_dir> itself, or <data_dir>/{CIFAR10_ARCHIVE}")
    npz = " (or mnist.npz)" if name == "mnist" else ""
    raise DataError(f"{name} files not found: missing {', '.join(missing)} (raw or .gz); searched "
                    f"{searched}. Expected layout: <data_dir>[/{DIR_SUBFOLDERS[name][0]}]/ holding "
                    f"{', '.join(IDX_FILES)}, each raw or gzipped{npz}")


def synthetic(name: str, max_train_samples: int | None, seed: int) -> tuple[str, tuple, None]:
    """Seeded images: one fixed pattern per class, mid-grey plus a random offset per block of
    pixels."""
    rng = np.random.default_rng([seed, 2, DATASETS.index(name)])
    block, (height, width, *channels) = _SYNTHETIC["block"], IMAGE_SHAPES[name]
    pattern = rng.uniform(-0.5, 0.5, size=(NUM_CLASSES, height // block, width // block, *channels))
    pattern = pattern.repeat(block, axis=1).repeat(block, axis=2)
    prototypes = (127.5 + _SYNTHETIC["contrast"] * pattern).astype(np.float32)
    n_train = min(SYNTHETIC_SIZES[name], max_train_samples or SYNTHETIC_SIZES[name])
    arrays = (*_synthetic_split(name, prototypes, n_train, seed, 0),
              *_synthetic_split(name, prototypes, 10_000, seed, 1))
    return f"synthetic (seed {seed}), class-conditional prototypes plus noise", arrays, None


def _synthetic_split(name: str, prototypes: np.ndarray, n: int, seed: int, split: int):
    """`n` labelled images, seeded per chunk: the first N the same whatever `n`; each 10 hold all
    classes."""
    chunk, shape = _SYNTHETIC["chunk"], prototypes.shape[1:]
    x, y = np.empty((n, *shape), dtype=np.uint8), np.empty(n, dtype=np.int64)
    for start in range(0, n, chunk):
        rng = np.random.default_rng([seed, split, start // chunk, DATASETS.index(name)])
        ordered = np.tile(np.arange(NUM_CLASSES), (chunk // NUM_CLASSES, 1))
        labels = rng.permuted(ordered, axis=1).ravel()
        others = (labels + rng.integers(1, NUM_CLASSES, size=chunk)) % NUM_CLASSES
        mix = rng.uniform(0, _SYNTHETIC["mix"], size=(chunk, *[1] * len(shape))).astype(np.float32)
        # uniform: 7x faster than normal
        noise = rng.random((chunk, *shape), dtype=np.float32) - 0.5
        noise *= _SYNTHETIC["noise"] * np.sqrt(12.0)  # a uniform of this width has that std
        images = noise + (prototypes[labels] + mix * (prototypes[others] - prototypes[labels]))
        stop = min(n, start + chunk)
        x[start:stop] = np.clip(images[: stop - start], 0, 255)
        y[start:stop] = labels[: stop - start]
    return x, y
