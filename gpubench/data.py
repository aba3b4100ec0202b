"""Datasets for the training benchmark: MNIST, Fashion-MNIST and CIFAR-10, real or synthetic.

`load(name, source)` returns a `Dataset` of uint8 images and int64 labels from one of:

- "keras": the Keras dataset cache ($KERAS_HOME/datasets or ~/.keras/datasets),
  downloading into it when a file is missing. Files with a published hash are
  checked against it before they are trusted.
- "dir": the official files in a local directory (IDX files, mnist.npz, the
  CIFAR-10 python batches or their tar.gz archive).
- "synthetic": seeded, learnable class-conditional images of the right shape.
- "auto": keras, then dir (when data_dir is given), then synthetic with a WARNING.

Only the standard library and numpy are used, so importing this module is fast.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import pickle
import struct
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

DATASETS = ("mnist", "fashion_mnist", "cifar10")
SOURCES = ("auto", "keras", "dir", "synthetic")

# Download locations and hashes, the same ones Keras uses. Module-level so tests
# can point them at a local server.
KERAS_BASE_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
MNIST_URL = KERAS_BASE_URL + "mnist.npz"
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
FASHION_MNIST_BASE_URL = KERAS_BASE_URL
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"

IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCH = "test_batch"
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_FOLDER = "cifar-10-batches-py"
# Where Keras 3 keeps CIFAR-10: get_file("cifar-10-batches-py-target", extract=True)
# stores the archive as "<fname>_archive" and extracts it into "<fname>/".
KERAS_CIFAR10_TARGET = "cifar-10-batches-py-target"
KERAS_CIFAR10_ARCHIVE = KERAS_CIFAR10_TARGET + "_archive"

IMAGE_SHAPES = {"mnist": (28, 28), "fashion_mnist": (28, 28), "cifar10": (32, 32, 3)}
SYNTHETIC_SIZES = {  # (train, test) images, as in the real datasets
    "mnist": (60_000, 10_000),
    "fashion_mnist": (60_000, 10_000),
    "cifar10": (50_000, 10_000),
}
NUM_CLASSES = 10
CLASS_NAMES = {
    "mnist": [str(digit) for digit in range(10)],
    "fashion_mnist": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                      "Sneaker", "Bag", "Ankle boot"],
    "cifar10": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                "truck"],
}

# Sub-folders of data_dir searched for each dataset (data_dir itself comes first).
DIR_SUBFOLDERS = {
    "mnist": ("mnist", "MNIST"),
    "fashion_mnist": ("fashion-mnist", "fashion_mnist", "FashionMNIST"),
    "cifar10": ("cifar10", "cifar-10"),
}

_IDX_MAGIC = {"images": 0x00000803, "labels": 0x00000801}
_GZIP_MAGIC = b"\x1f\x8b"
_SYNTHETIC_CHUNK = 2000  # images per seeded chunk; a multiple of NUM_CLASSES
# Synthetic images: a grey prototype per class with a uniform +-30 per-pixel
# pattern, blended with up to 30% of another class's prototype, plus per-pixel
# uniform noise of standard deviation 80. Tuned so that the reference MLP
# (784-1000-10, Adam 1e-3, batch 100, 10,000 images) is near chance after 5
# batches, at 0.7-0.9 test accuracy after 20, and at about 0.97 after 3 epochs.
# CIFAR-10 prototypes use 2x2-pixel blocks, so a small CNN learns them too
# (about 0.9 after 3 epochs on 10,000 images).
_SYNTHETIC_CONTRAST = 60.0
_SYNTHETIC_NOISE_STD = 80.0
_SYNTHETIC_MIX = 0.3
_SYNTHETIC_BLOCK = {"mnist": 1, "fashion_mnist": 1, "cifar10": 2}


class DataError(ValueError):
    """A data file is missing, truncated or malformed; the message names the file and the fix."""


class DataUnavailable(RuntimeError):
    """A source cannot provide the data (e.g. offline download); `auto` falls through to the next source."""


@dataclass
class Dataset:
    """Train and test arrays of one dataset, with where they came from."""

    name: str
    source: str
    origin: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    note: str | None = None

    @property
    def synthetic(self) -> bool:
        """True when the images are generated, not the real dataset."""
        return self.source == "synthetic"

    def describe(self) -> str:
        """One line saying what the data is, where it came from and how many images it has."""
        counts = f"{len(self.x_train):,} train / {len(self.x_test):,} test images"
        if self.synthetic:
            return f"SYNTHETIC DATA, not the real {self.name} dataset: {counts} from {self.origin}"
        where = {"keras": "keras cache", "dir": "directory"}.get(self.source, self.source)
        return f"{self.name} from {where} {self.origin}: {counts}"


def load(
    name: str,
    source: str | None = "auto",
    data_dir: str | os.PathLike | None = None,
    max_train_samples: int | None = None,
    *,
    seed: int = 0,
    verbose: bool = True,
    timeout: float = 15.0,
) -> Dataset:
    """Load dataset `name` from `source` ("auto", "keras", "dir" or "synthetic")."""
    name = check_name(name)
    source = check_source(source)
    _check_max_train_samples(max_train_samples)
    _check_seed(seed)
    _check_timeout(timeout)
    if source == "dir" and data_dir is None:
        raise ValueError(
            'source="dir" needs a data directory: pass data_dir=... '
            "(or set GPUBENCH_DATA_DIR when using the command line)"
        )
    if source == "auto":
        dataset = _load_auto(name, data_dir, max_train_samples, seed, verbose, timeout)
    else:
        dataset = _load_source(name, source, data_dir, max_train_samples, seed, timeout)
    if verbose:
        print(f"Data: {dataset.describe()}")
    return dataset


# ---------------------------------------------------------------- argument checks


def check_name(name: object) -> str:
    """The canonical dataset name ("Fashion-MNIST" -> "fashion_mnist"), or a ValueError naming it."""
    if isinstance(name, str):
        normalized = name.strip().lower().replace("-", "_")
        if normalized in DATASETS:
            return normalized
    raise ValueError(f"unknown dataset {name!r}; use one of {', '.join(DATASETS)}")


def check_source(source: object) -> str:
    """The canonical data source (None -> "auto"), or a ValueError naming it."""
    if source is None:
        return "auto"
    if isinstance(source, str) and source.strip().lower() in SOURCES:
        return source.strip().lower()
    raise ValueError(f"unknown data source {source!r}; use one of {', '.join(SOURCES)} (or None for auto)")


def _check_max_train_samples(value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"max_train_samples must be a positive integer or None, got {value!r}")


def _check_seed(seed: object) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def _check_timeout(timeout: object) -> None:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")


# ---------------------------------------------------------------- source selection


def _load_source(
    name: str,
    source: str,
    data_dir: str | os.PathLike | None,
    max_train_samples: int | None,
    seed: int,
    timeout: float,
) -> Dataset:
    if source == "synthetic":
        return _load_synthetic(name, max_train_samples, seed)
    if source == "keras":
        dataset = _load_keras(name, timeout)
    else:
        dataset = _load_dir(name, Path(data_dir).expanduser())
    return _keep_first(dataset, max_train_samples)


def _load_auto(
    name: str,
    data_dir: str | os.PathLike | None,
    max_train_samples: int | None,
    seed: int,
    verbose: bool,
    timeout: float,
) -> Dataset:
    reasons = []
    broken = False  # a present but unusable file: shown even when a later source works
    for source in ("keras", "dir"):
        if source == "dir" and data_dir is None:
            reasons.append("dir: not tried (no data_dir given)")
            continue
        try:
            dataset = _load_source(name, source, data_dir, max_train_samples, seed, timeout)
        except DataUnavailable as exc:
            reasons.append(f"{source}: {exc}")
            continue
        except DataError as exc:
            reasons.append(f"{source}: {exc}")
            broken = True
            continue
        dataset.note = "; ".join(reasons) or None
        if broken and verbose:
            print(f"WARNING: {name}: using the {source} source because another failed: {dataset.note}")
        return dataset
    dataset = _load_synthetic(name, max_train_samples, seed)
    dataset.note = "; ".join(reasons)
    if verbose:
        print(f"WARNING: using SYNTHETIC DATA for {name}, not the real dataset, because {dataset.note}")
    return dataset


def _keep_first(dataset: Dataset, max_train_samples: int | None) -> Dataset:
    if max_train_samples is not None and max_train_samples < len(dataset.x_train):
        dataset.x_train = dataset.x_train[:max_train_samples].copy()
        dataset.y_train = dataset.y_train[:max_train_samples].copy()
    return dataset


def _make_dataset(name: str, source: str, origin: Path | str, arrays: dict[str, np.ndarray]) -> Dataset:
    """Check shapes, dtypes and labels of the four arrays and wrap them in a Dataset."""
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.dtype != np.uint8 or x.shape[1:] != IMAGE_SHAPES[name]:
            expected = ", ".join(map(str, IMAGE_SHAPES[name]))
            raise DataError(
                f"{origin}: {split} images are {x.dtype} {x.shape}, expected uint8 (N, {expected}) "
                f"for {name}; check that the files are the real {name}"
            )
        if y.ndim != 1 or len(y) != len(x):
            raise DataError(
                f"{origin}: {len(x)} {split} images but labels of shape {y.shape}; "
                "the files do not belong together: re-download them"
            )
        _check_labels(y, origin)
    return Dataset(
        name=name,
        source=source,
        origin=str(origin),
        x_train=arrays["x_train"],
        y_train=arrays["y_train"].astype(np.int64),
        x_test=arrays["x_test"],
        y_test=arrays["y_test"].astype(np.int64),
    )


def _check_labels(labels: np.ndarray, origin: Path | str) -> None:
    if labels.size == 0:
        return
    if not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{origin}: labels are {labels.dtype}, expected integers 0..9; re-download it")
    bad = np.flatnonzero((labels < 0) | (labels >= NUM_CLASSES))
    if bad.size:
        raise DataError(
            f"{origin}: label {labels[bad[0]]} at index {bad[0]} is outside 0..{NUM_CLASSES - 1} "
            f"({bad.size} bad labels); the file is corrupt: re-download it"
        )


# ---------------------------------------------------------------- keras cache and download


def _keras_cache_dir() -> Path:
    """The Keras dataset cache: $KERAS_HOME/datasets, else ~/.keras/datasets."""
    home = os.environ.get("KERAS_HOME")
    base = Path(home).expanduser() if home else Path.home() / ".keras"
    return base / "datasets"


def _load_keras(name: str, timeout: float) -> Dataset:
    cache = _keras_cache_dir()
    if name == "mnist":
        return _keras_mnist(cache, timeout)
    if name == "fashion_mnist":
        return _keras_fashion_mnist(cache, timeout)
    return _keras_cifar10(cache, timeout)


def _keras_mnist(cache: Path, timeout: float) -> Dataset:
    path = cache / "mnist.npz"
    if path.exists():
        _verify_cached(path, MNIST_SHA256)
    else:
        _download(MNIST_URL, path, MNIST_SHA256, timeout)
    return _make_dataset("mnist", "keras", path, _read_mnist_npz(path))


def _keras_fashion_mnist(cache: Path, timeout: float) -> Dataset:
    folder = cache / "fashion-mnist"
    paths = {key: folder / f"{base}.gz" for key, base in IDX_FILES.items()}
    for path in paths.values():
        if not path.exists():
            _download(FASHION_MNIST_BASE_URL + path.name, path, None, timeout)
    return _make_dataset("fashion_mnist", "keras", folder, _read_idx_set(paths))


def _keras_cifar10(cache: Path, timeout: float) -> Dataset:
    for folder in (cache / KERAS_CIFAR10_TARGET / CIFAR10_FOLDER, cache / CIFAR10_FOLDER):
        if folder.is_dir():
            return _make_dataset("cifar10", "keras", folder, _read_cifar_folder(folder))
    for archive_name in (KERAS_CIFAR10_ARCHIVE, CIFAR10_ARCHIVE, f"{CIFAR10_FOLDER}.tar.gz"):
        archive = cache / archive_name
        if archive.exists():
            _verify_cached(archive, CIFAR10_SHA256)
            return _make_dataset("cifar10", "keras", archive, _read_cifar_archive(archive))
    # Stored under Keras's own name, so keras.datasets.cifar10 reuses it too.
    archive = cache / KERAS_CIFAR10_ARCHIVE
    _download(CIFAR10_URL, archive, CIFAR10_SHA256, timeout)
    return _make_dataset("cifar10", "keras", archive, _read_cifar_archive(archive))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify_cached(path: Path, expected: str) -> None:
    try:
        actual = _sha256(path)
    except OSError as exc:
        raise DataError(f"cached file {path} cannot be read ({exc}); fix its permissions or delete it") from exc
    if actual != expected:
        raise DataError(
            f"cached file {path} has sha256 {actual}, expected {expected}: it is incomplete or "
            "corrupt; delete it and run again to re-download it"
        )


def _download(url: str, dest: Path, sha256: str | None, timeout: float) -> None:
    """Download `url` to `dest` via a temporary file in the same folder, checked, then renamed."""
    tmp = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        print(f"Downloading {url} into {dest.parent} ...", flush=True)
        with os.fdopen(fd, "wb") as out:
            _fetch(url, out, timeout)
        if sha256 is not None and _sha256(Path(tmp)) != sha256:
            raise DataError(
                f"downloaded {url} does not have the expected sha256 {sha256}: the download was "
                f"corrupted or the file changed; try again, or put a good copy at {dest}"
            )
        os.replace(tmp, dest)
        tmp = None
    except (OSError, http.client.HTTPException) as exc:
        raise DataUnavailable(
            f"cannot download {url} into {dest.parent} ({_reason(exc)}); if offline, copy the files "
            'into a folder and use source="dir", or use source="synthetic"'
        ) from exc
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def _fetch(url: str, out: BinaryIO, timeout: float) -> None:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        expected = response.headers.get("Content-Length")
        received = 0
        for block in iter(lambda: response.read(1 << 20), b""):
            out.write(block)
            received += len(block)
    if expected is not None and received != int(expected):
        raise OSError(f"connection closed after {received:,} of {int(expected):,} bytes")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    reason = getattr(exc, "reason", None)  # urllib.error.URLError wraps the real error
    return f"{type(exc).__name__}: {reason if reason is not None else exc}"


# ---------------------------------------------------------------- local directory


def _search_dirs(name: str, data_dir: Path) -> list[Path]:
    return [data_dir] + [data_dir / sub for sub in DIR_SUBFOLDERS[name]]


def _load_dir(name: str, data_dir: Path) -> Dataset:
    if not data_dir.is_dir():
        raise DataError(f"data_dir {data_dir} is not a directory; pass the folder holding the {name} files")
    if name == "cifar10":
        return _dir_cifar10(data_dir)
    return _dir_idx(name, data_dir)


def _find_idx(folder: Path, base: str) -> Path | None:
    dotted = base.replace("-idx", ".idx")
    for candidate in (base, f"{base}.gz", dotted, f"{dotted}.gz"):
        if (folder / candidate).is_file():
            return folder / candidate
    return None


def _dir_idx(name: str, data_dir: Path) -> Dataset:
    best_missing = list(IDX_FILES.values())
    for folder in _search_dirs(name, data_dir):
        found = {key: _find_idx(folder, base) for key, base in IDX_FILES.items()}
        missing = [IDX_FILES[key] for key, path in found.items() if path is None]
        if not missing:
            return _make_dataset(name, "dir", folder, _read_idx_set(found))
        if name == "mnist" and (folder / "mnist.npz").is_file():
            return _make_dataset(name, "dir", folder / "mnist.npz", _read_mnist_npz(folder / "mnist.npz"))
        if len(missing) < len(best_missing):
            best_missing = missing
    searched = ", ".join(str(d) for d in _search_dirs(name, data_dir))
    npz = " (or mnist.npz)" if name == "mnist" else ""
    raise DataError(
        f"{name} files not found: missing {', '.join(best_missing)} (raw or .gz); searched {searched}. "
        f"Expected layout: <data_dir>[/{DIR_SUBFOLDERS[name][0]}]/ holding "
        f"{', '.join(IDX_FILES.values())}, each raw or gzipped (.gz){npz}"
    )


def _read_mnist_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in IDX_FILES}
    except KeyError as exc:
        raise DataError(f"{path} lacks the array {exc}; expected x_train, y_train, x_test, y_test") from exc
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise DataError(f"{path} is not a readable .npz file ({exc}); re-download it") from exc


# ---------------------------------------------------------------- IDX format


def _read_idx_set(paths: dict[str, Path]) -> dict[str, np.ndarray]:
    arrays = {}
    for split in ("train", "test"):
        images = _read_idx(paths[f"x_{split}"], "images")
        labels = _read_idx(paths[f"y_{split}"], "labels")
        if len(images) != len(labels):
            raise DataError(
                f"{paths[f'x_{split}']} has {len(images):,} images but {paths[f'y_{split}']} has "
                f"{len(labels):,} labels; they must come from the same release: re-download both"
            )
        _check_labels(labels, paths[f"y_{split}"])
        arrays[f"x_{split}"], arrays[f"y_{split}"] = images, labels
    return arrays


def _read_bytes(path: Path) -> bytes:
    """The file's content, gunzipped when it is gzip (by name or by its first bytes)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if path.name.endswith(".gz") or data[:2] == _GZIP_MAGIC:
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} cannot be read or un-gzipped ({exc}); it is corrupt: re-download it") from exc
    return data


def _read_idx(path: Path, kind: str) -> np.ndarray:
    """Parse an IDX file of unsigned bytes: 3-D 28x28 images, or 1-D labels."""
    data = _read_bytes(path)
    expected_magic = _IDX_MAGIC[kind]
    ndim = expected_magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < 4:
        raise DataError(f"{path} is {len(data)} bytes, too short for an IDX header; re-download it")
    magic = int.from_bytes(data[:4], "big")
    if magic != expected_magic:
        raise DataError(
            f"{path} has IDX magic number 0x{magic:08x}, expected 0x{expected_magic:08x} for an "
            f"{kind} file ({_magic_hint(magic, kind)}); check which file is which, or re-download it"
        )
    if len(data) < header:
        raise DataError(f"{path} is {len(data)} bytes, shorter than its {header}-byte header; re-download it")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    expected = int(np.prod(dims, dtype=np.int64))
    actual = len(data) - header
    if actual != expected:
        raise DataError(
            f"{path} holds {actual:,} data bytes but its header (dims {'x'.join(map(str, dims))}) "
            f"needs {expected:,}; the file is truncated or corrupt: re-download it"
        )
    if kind == "images" and dims[1:] != (28, 28):
        raise DataError(f"{path} holds {dims[1]}x{dims[2]} images, expected 28x28; use the real {path.name}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims).copy()


def _magic_hint(magic: int, kind: str) -> str:
    if kind == "images" and magic == _IDX_MAGIC["labels"]:
        return "this is a label file: is a label file used as an image file?"
    if kind == "labels" and magic == _IDX_MAGIC["images"]:
        return "this is an image file: is an image file used as a label file?"
    return "not an IDX file of unsigned bytes"


# ---------------------------------------------------------------- CIFAR-10 python batches

# Pickles can run arbitrary code when loaded. The CIFAR-10 batches hold only a
# dict of bytes, lists, ints and one numpy array, so the unpickler below allows
# exactly the globals that rebuild a numpy array (ndarray, dtype and the
# _reconstruct helper, under numpy 1 and numpy 2 module names) and refuses every
# other global, builtins included.
_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """An unpickler that can rebuild numpy arrays and nothing else that needs a global."""

    def find_class(self, module: str, name: str):
        """Return an allowed numpy global; refuse all others."""
        allowed = _PICKLE_ALLOWED.get((module, name))
        if allowed is None:
            raise pickle.UnpicklingError(
                f"refused to load the global {module}.{name}, which a CIFAR-10 batch never holds"
            )
        return allowed


def _read_cifar_folder(folder: Path) -> dict[str, np.ndarray]:
    missing = [b for b in (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH) if not (folder / b).is_file()]
    if missing:
        raise DataError(
            f"{folder} lacks {', '.join(missing)}; it must hold {', '.join(CIFAR10_TRAIN_BATCHES)} and "
            f"{CIFAR10_TEST_BATCH}: delete the folder and re-download or re-extract {CIFAR10_ARCHIVE}"
        )
    train = [_read_cifar_file(folder / batch) for batch in CIFAR10_TRAIN_BATCHES]
    return _cifar_arrays(train, _read_cifar_file(folder / CIFAR10_TEST_BATCH))


def _read_cifar_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            return _read_cifar_batch(f, str(path))
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc}); fix its permissions or re-download it") from exc


def _read_cifar_archive(archive: Path) -> dict[str, np.ndarray]:
    """Read the batches straight out of the tar.gz, without extracting it to disk."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            missing = [b for b in (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH) if b not in members]
            if missing:
                raise DataError(
                    f"{archive} lacks {', '.join(missing)}; it is not the CIFAR-10 python archive: "
                    "re-download it"
                )
            batches = [
                _read_cifar_batch(tar.extractfile(members[b]), f"{archive}:{members[b].name}")
                for b in (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH)
            ]
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{archive} is not a readable tar.gz archive ({exc}); re-download it") from exc
    return _cifar_arrays(batches[:-1], batches[-1])


def _read_cifar_batch(f: BinaryIO, label: str) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch as (N, 32, 32, 3) uint8 images and int64 labels; `label` names it in errors."""
    try:
        batch = _ArrayOnlyUnpickler(f, encoding="bytes").load()
    except Exception as exc:  # a corrupt pickle can fail in many ways; all mean "bad file"
        raise DataError(f"{label} is not a valid CIFAR-10 batch pickle ({exc}); re-download it") from exc
    if not isinstance(batch, dict):
        raise DataError(f"{label} holds a {type(batch).__name__}, expected a dict; re-download it")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        keys = sorted(map(repr, batch))
        raise DataError(f"{label} lacks the b'data' or b'labels' entry (has {keys}); re-download it")
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(f"{label}: data is {data.dtype} {data.shape}, expected uint8 (N, 3072); re-download it")
    labels = np.asarray(labels)
    if labels.shape != (len(data),):
        raise DataError(f"{label}: {len(data)} images but labels of shape {labels.shape}; re-download it")
    _check_labels(labels, label)
    # Each row is 1024 red, then 1024 green, then 1024 blue values, row-major.
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels.astype(np.int64)


def _cifar_arrays(train: list[tuple[np.ndarray, np.ndarray]], test: tuple[np.ndarray, np.ndarray]) -> dict:
    return {
        "x_train": np.concatenate([x for x, _ in train]),
        "y_train": np.concatenate([y for _, y in train]),
        "x_test": test[0],
        "y_test": test[1],
    }


def _dir_cifar10(data_dir: Path) -> Dataset:
    for folder in _search_dirs("cifar10", data_dir):
        batches, archive = folder / CIFAR10_FOLDER, folder / CIFAR10_ARCHIVE
        if batches.is_dir():
            return _make_dataset("cifar10", "dir", batches, _read_cifar_folder(batches))
        if (folder / "data_batch_1").is_file() or (folder / CIFAR10_TEST_BATCH).is_file():
            return _make_dataset("cifar10", "dir", folder, _read_cifar_folder(folder))
        if archive.is_file():
            return _make_dataset("cifar10", "dir", archive, _read_cifar_archive(archive))
    searched = ", ".join(str(d) for d in _search_dirs("cifar10", data_dir))
    raise DataError(
        f"cifar10 files not found: no {CIFAR10_FOLDER}/ folder, data_batch_1 or {CIFAR10_ARCHIVE} "
        f"in {searched}. "
        f"Expected layout: <data_dir>[/cifar10]/{CIFAR10_FOLDER}/ holding data_batch_1..data_batch_5 and "
        f"test_batch, or those batches in <data_dir> itself, or <data_dir>/{CIFAR10_ARCHIVE}"
    )


# ---------------------------------------------------------------- synthetic


def _load_synthetic(name: str, max_train_samples: int | None, seed: int) -> Dataset:
    n_train, n_test = SYNTHETIC_SIZES[name]
    if max_train_samples is not None:
        n_train = min(n_train, max_train_samples)
    prototypes = _prototypes(name, seed)
    x_train, y_train = _synthetic_split(name, prototypes, n_train, seed, split=0)
    x_test, y_test = _synthetic_split(name, prototypes, n_test, seed, split=1)
    origin = f"synthetic (seed {seed}), class-conditional prototypes plus noise"
    return Dataset(name, "synthetic", origin, x_train, y_train, x_test, y_test)


def _prototypes(name: str, seed: int) -> np.ndarray:
    """One fixed random pattern per class: mid-grey plus a random offset per block of pixels."""
    rng = np.random.default_rng([seed, 2, DATASETS.index(name)])
    block = _SYNTHETIC_BLOCK[name]
    height, width, *channels = IMAGE_SHAPES[name]
    pattern = rng.uniform(-0.5, 0.5, size=(NUM_CLASSES, height // block, width // block, *channels))
    pattern = pattern.repeat(block, axis=1).repeat(block, axis=2)
    return (127.5 + _SYNTHETIC_CONTRAST * pattern).astype(np.float32)


def _synthetic_split(
    name: str, prototypes: np.ndarray, n: int, seed: int, split: int
) -> tuple[np.ndarray, np.ndarray]:
    """`n` images: own prototype blended with up to 30% of another class's, plus uniform noise.

    Each chunk of images has its own seed, so the first N images are the same
    whatever `n` is, and every run of 10 images holds each class once.
    """
    shape = prototypes.shape[1:]
    noise_width = _SYNTHETIC_NOISE_STD * np.sqrt(12.0)  # a uniform of this width has that std
    x = np.empty((n, *shape), dtype=np.uint8)
    y = np.empty(n, dtype=np.int64)
    for start in range(0, n, _SYNTHETIC_CHUNK):
        rng = np.random.default_rng([seed, split, start // _SYNTHETIC_CHUNK, DATASETS.index(name)])
        blocks = np.tile(np.arange(NUM_CLASSES), (_SYNTHETIC_CHUNK // NUM_CLASSES, 1))
        labels = rng.permuted(blocks, axis=1).ravel()
        others = (labels + rng.integers(1, NUM_CLASSES, size=_SYNTHETIC_CHUNK)) % NUM_CLASSES
        mix = rng.uniform(0, _SYNTHETIC_MIX, size=_SYNTHETIC_CHUNK).astype(np.float32)
        mix = mix.reshape(-1, *[1] * len(shape))
        images = rng.random((_SYNTHETIC_CHUNK, *shape), dtype=np.float32)  # uniform: 7x faster than normal
        images -= 0.5
        images *= noise_width
        images += prototypes[labels]
        images += mix * (prototypes[others] - prototypes[labels])
        stop = min(n, start + _SYNTHETIC_CHUNK)
        np.clip(images[: stop - start], 0, 255, out=images[: stop - start])
        x[start:stop] = images[: stop - start]
        y[start:stop] = labels[: stop - start]
    return x, y
