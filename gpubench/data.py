"""MNIST, Fashion-MNIST and CIFAR-10 for the training benchmark: real, or synthetic and labelled.

`load(name, source)` returns a `Dataset` of uint8 images and int64 labels from "keras" (the
Keras cache, filled and hash-checked by `keras.utils.get_file`, with the files and names of
`keras.datasets.*.load_data`), "dir" (the official files in a folder: IDX raw or gzipped,
mnist.npz, CIFAR-10's python batches or cifar-10-python.tar.gz), "synthetic", or "auto" (keras,
then dir when data_dir is given, then synthetic with a warning). Keras loads only for "keras".
The files read are identified by their SHA-256 (OFFICIAL_SHA256): another dataset's official
files are an error, files that match nothing are loaded and marked unverified.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import socket
import sys
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpubench.params import DATASETS, SOURCES, check_source, positive_int  # noqa: F401 - data.SOURCES
from gpubench.params import check_dataset as check_name  # the names' rules: params

# What keras.datasets downloads; module-level so tests can point them at local files.
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
FASHION_MNIST_BASE_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
DOWNLOAD_TIMEOUT = 30.0  # seconds without a byte before a download gives up

# The four IDX files in the order x_train, y_train, x_test, y_test.
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")
IDX_MAGIC = {"images": 0x00000803, "labels": 0x00000801}
CIFAR10_BATCHES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
CIFAR10_ARCHIVE, CIFAR10_FOLDER = "cifar-10-python.tar.gz", "cifar-10-batches-py"
# Sub-folders of data_dir searched for each dataset (data_dir itself comes first).
DIR_SUBFOLDERS = {"mnist": ("mnist", "MNIST"), "cifar10": ("cifar10", "cifar-10"),
                  "fashion_mnist": ("fashion-mnist", "fashion_mnist", "FashionMNIST")}

# SHA-256 of the official IDX files, in IDX_FILES order: gzipped as published, and decompressed.
# A gzipped file is also looked up by its decompressed bytes, so a copy gzipped again (Debian's
# dataset-fashion-mnist package ships one) is recognised. Where each sum comes from:
# - ".gz": TensorFlow Datasets' tensorflow_datasets/url_checksums/mnist.txt and fashion_mnist.txt
#   (the files it downloads from the publishers' mirrors; Fashion-MNIST's sizes there are those
#   of Zalando's README, whose MD5s are for the same files).
# - MNIST decompressed: the sums that several public projects pin next to those .gz sums.
# - Fashion-MNIST decompressed: computed from /usr/share/datasets/fashion-mnist (Debian's package
#   of Zalando's repository); public projects that check Zalando's files against its published
#   MD5s pin the same sums.
IDX_SHA256 = {
    ("mnist", "gz"): (  # TensorFlow Datasets
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
    ("mnist", "raw"): (  # pinned by public projects
        "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
    ("fashion_mnist", "gz"): (  # TensorFlow Datasets
        "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"),
    ("fashion_mnist", "raw"): (  # computed here; pinned by public projects
        "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
}
# Every known official file: SHA-256 -> (dataset, file name without .gz). mnist.npz and
# cifar-10-python.tar.gz: the file_hash that keras.datasets.mnist and .cifar10 check.
OFFICIAL_SHA256 = {
    **{sha: (name, base) for (name, _), sums in IDX_SHA256.items()
       for base, sha in zip(IDX_FILES, sums, strict=True)},
    MNIST_SHA256: ("mnist", "mnist.npz"),
    CIFAR10_SHA256: ("cifar10", CIFAR10_ARCHIVE),
}
TITLES = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST", "cifar10": "CIFAR-10"}

IMAGE_SHAPES = {"mnist": (28, 28), "fashion_mnist": (28, 28), "cifar10": (32, 32, 3)}
SYNTHETIC_SIZES = {"mnist": 60_000, "fashion_mnist": 60_000, "cifar10": 50_000}  # train; test: 10,000
NUM_CLASSES = 10
CLASS_NAMES = {
    "mnist": [str(digit) for digit in range(10)],
    "fashion_mnist": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                      "Sneaker", "Bag", "Ankle boot"],
    "cifar10": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"],
}
# Synthetic images: a class prototype (grey levels on block x block pixels, +-contrast/2) blended
# with up to `mix` of another class's, plus uniform noise (std `noise`). Blocks survive convolution
# and pooling, so every book model learns the classes in the quick profile (tests/test_data.py).
_SYNTHETIC = {"contrast": 60.0, "noise": 80.0, "mix": 0.3, "block": 4, "chunk": 2000}


class DataError(ValueError):
    """A data file is missing, truncated or malformed; the message names the file and the fix."""


class WrongDataset(DataError):
    """The files are another dataset's official files; the message names both datasets."""


class DataUnavailable(RuntimeError):
    """A source cannot provide the data (e.g. offline download); `auto` falls through to the next."""


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
        return f"{self.name} from {where} {_shown(self.origin)}: {counts}{checked[self.verified]}"


def load(name: str, source: str | None = "auto", data_dir: str | os.PathLike | None = None,
         max_train_samples: int | None = None, *, seed: int = 0, verbose: bool = True) -> Dataset:
    """Load dataset `name` from `source` ("auto", "keras", "dir" or "synthetic")."""
    name, source = check_name(name), check_source(source)
    positive_int("max_train_samples", max_train_samples, allow_none=True)
    positive_int("seed", seed, minimum=0)
    if source == "dir" and data_dir is None:
        raise ValueError('source="dir" needs a data directory: pass data_dir=... '
                         "(or set GPUBENCH_DATA_DIR when using the command line)")
    reasons = []
    for candidate in ("keras", "dir", "synthetic") if source == "auto" else (source,):
        try:  # only "auto" goes on to the next source, after noting why this one failed
            origin, (x_train, y_train, x_test, y_test), verified = (
                _synthetic(name, max_train_samples, seed) if candidate == "synthetic"
                else _load_keras(name) if candidate == "keras" else _load_dir(name, data_dir))
        except (DataUnavailable, DataError) as exc:
            if source != "auto" or isinstance(exc, WrongDataset):  # another dataset: never hidden
                raise
            reasons.append(f"{candidate}: {exc}")
            continue
        if max_train_samples is not None:  # a copy, so the full arrays are freed
            x_train, y_train = x_train[:max_train_samples].copy(), y_train[:max_train_samples].copy()
        dataset = Dataset(name, candidate, str(origin), x_train, y_train, x_test, y_test,
                          "; ".join(reasons) or None, verified)
        if verbose:
            _announce(dataset)
        return dataset
    raise AssertionError("unreachable: the synthetic source never fails")


_WARNED: set[str] = set()  # datasets whose synthetic-data warning this process has shown


def _announce(dataset: Dataset) -> None:
    """Print the data line, after a warning when an earlier source failed; the synthetic-data
    warning (a Markdown box in a Jupyter kernel) comes once per process and dataset."""
    if dataset.synthetic:
        if dataset.name not in _WARNED:
            _WARNED.add(dataset.name)
            ipython = sys.modules.get("IPython")  # only when already loaded: never import it here
            if getattr(ipython and ipython.get_ipython(), "kernel", None) is not None:
                _synthetic_box(dataset)
            elif dataset.note:
                print(f"WARNING: {dataset.name}: using SYNTHETIC DATA, not the real dataset, "
                      f"because {_shown(dataset.note)}")
    elif dataset.note:
        print(f"WARNING: {dataset.name}: using the {dataset.source} source, because "
              f"{_shown(dataset.note)}")
    print(f"Data: {dataset.describe()}")


def _synthetic_box(dataset: Dataset) -> None:
    """The synthetic-data warning as a Markdown box, with why the real data was not used."""
    from IPython.display import Markdown, display  # noqa: PLC0415

    why = _shown(dataset.note or 'source="synthetic" was asked for')
    display(Markdown(f"> **⚠ Synthetic data** — generated images, not the real {dataset.name}: "
                     "timings are valid, accuracy says nothing about the real dataset.\n>\n> Why: "
                     f"{why}.\n>\n> For the real data: go online once (Keras caches the files), or "
                     "pass `data_dir` a folder holding the official files."))


def _shown(text: str) -> str:
    """`text` with the home folder written as ~, so notebook outputs carry no user's path."""
    return text.replace(str(Path.home()) + os.sep, "~" + os.sep)


def _checked(arrays: tuple, files: tuple, shape: tuple) -> tuple:
    """(images, labels, ...) pairs, labels as int64, once shapes, counts and values are right."""
    out = []
    for x, y, x_file, y_file in zip(arrays[::2], arrays[1::2], files[::2], files[1::2], strict=True):
        if x.dtype != np.uint8 or x.shape[1:] != shape:
            raise DataError(f"{x_file} holds {'x'.join(map(str, x.shape[1:]))} {x.dtype} images, "
                            f"expected {'x'.join(map(str, shape))} uint8; use the real files")
        if y.shape != (len(x),):
            raise DataError(f"{x_file} has {len(x):,} images but {y_file} has {y.size:,} labels; they "
                            "must come from the same release: re-download both")
        bad = np.flatnonzero((y < 0) | (y >= NUM_CLASSES)) if np.issubdtype(y.dtype, np.integer) else [0]
        if len(bad):
            raise DataError(f"{y_file}: label {y[bad[0]]} at index {bad[0]} is not an integer 0..9 "
                            f"({len(bad)} bad labels); the file is corrupt: re-download it")
        out += [x, y.astype(np.int64)]
    return tuple(out)


def _keras_file(fname: str, url: str, sha256: str | None, subdir: str = "datasets") -> Path:
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
            raise DataError(f"{url} downloaded into {target} does not have the sha256 {sha256}: it was "
                            "corrupted or changed and is deleted: try again, or put a good copy "
                            "there") from exc
        raise DataUnavailable(f"cannot download {url} into {target.parent} ({exc}); if offline, copy the "
                              'files into a folder and use source="dir", or use source="synthetic"') from exc
    finally:
        socket.setdefaulttimeout(saved)


def _load_keras(name: str) -> tuple[Path, tuple, bool]:
    """(origin, arrays, verified) from the Keras cache, downloading what is missing."""
    if name == "mnist":
        path = _keras_file("mnist.npz", MNIST_URL, MNIST_SHA256)
        return path, *_read_mnist_npz(path)
    if name == "fashion_mnist":  # Keras publishes no hash for these files: OFFICIAL_SHA256 has
        subdir = os.path.join("datasets", "fashion-mnist")
        paths = [_keras_file(f"{base}.gz", f"{FASHION_MNIST_BASE_URL}{base}.gz", None, subdir)
                 for base in IDX_FILES]
        return paths[0].parent, *_read_idx_set(name, paths)
    # keras.datasets.cifar10 keeps the archive under this name; read it without extracting.
    archive = _keras_file("cifar-10-batches-py-target_archive", CIFAR10_URL, CIFAR10_SHA256)
    return archive, *_read_cifar(archive)


def _load_dir(name: str, data_dir: str | os.PathLike | None) -> tuple[Path, tuple, bool]:
    """(origin, arrays, verified) from the first of data_dir and its DIR_SUBFOLDERS that holds
    the files; a folder holding another dataset's official files is passed over, and named in the
    error when no later one holds `name`'s."""
    if data_dir is None:  # only source="auto" gets here without one
        raise DataUnavailable("not tried (no data_dir given)")
    data_dir = Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise DataError(f"data_dir {data_dir} is not a directory; pass the folder holding the {name} files")
    folders = [data_dir] + [data_dir / sub for sub in DIR_SUBFOLDERS[name]]
    missing, wrong = IDX_FILES, None
    for folder in folders:
        if name == "cifar10":
            for path in (folder / CIFAR10_FOLDER, folder, folder / CIFAR10_ARCHIVE):
                if path.is_file() or (path / "data_batch_1").is_file() or (path / "test_batch").is_file():
                    return path, *_read_cifar(path)
            continue
        found = [next((folder / f for f in (base, f"{base}.gz") if (folder / f).is_file()), None)
                 for base in IDX_FILES]
        if None not in found:
            try:
                return folder, *_read_idx_set(name, found)
            except WrongDataset as exc:  # e.g. Fashion-MNIST in data_dir, MNIST in data_dir/mnist
                wrong = wrong or exc
                continue
        if name == "mnist" and (folder / "mnist.npz").is_file():
            return folder / "mnist.npz", *_read_mnist_npz(folder / "mnist.npz")
        missing = min(missing, [base for base, path in zip(IDX_FILES, found, strict=True) if path is None], key=len)
    if wrong is not None:
        raise wrong
    searched = ", ".join(map(str, folders))
    if name == "cifar10":
        raise DataError(f"cifar10 files not found in {searched}. Expected layout: <data_dir>[/cifar10]/"
                        f"{CIFAR10_FOLDER}/ holding {', '.join(CIFAR10_BATCHES)}, or those in "
                        f"<data_dir> itself, or <data_dir>/{CIFAR10_ARCHIVE}")
    npz = " (or mnist.npz)" if name == "mnist" else ""
    raise DataError(f"{name} files not found: missing {', '.join(missing)} (raw or .gz); searched "
                    f"{searched}. Expected layout: <data_dir>[/{DIR_SUBFOLDERS[name][0]}]/ holding "
                    f"{', '.join(IDX_FILES)}, each raw or gzipped{npz}")


def _read_mnist_npz(path: Path) -> tuple[tuple, bool]:
    """(arrays, verified) of a mnist.npz as keras.datasets.mnist writes it."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = tuple(npz[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    except (KeyError, OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise DataError(f"{path} is not a readable .npz of x_train, y_train, x_test, y_test ({exc}); "
                        "re-download it") from exc
    arrays = _checked(arrays, (path,) * 4, (28, 28))
    return arrays, _verified("mnist", path, {"mnist.npz": {_sha256(path.read_bytes())}})


def _read_idx_set(name: str, paths: list[Path]) -> tuple[tuple, bool]:
    """(train images and labels, test images and labels; verified) from the four IDX files in
    IDX_FILES order, checked to be `name`'s official files or no known dataset's."""
    read = [_read_idx(p, k) for p, k in zip(paths, ["images", "labels"] * 2, strict=True)]
    arrays = _checked(tuple(array for array, _ in read), paths, (28, 28))
    sums = {base: sums for base, (_, sums) in zip(IDX_FILES, read, strict=True)}
    return arrays, _verified(name, paths[0].parent, sums, paths)


def _sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _verified(name: str, where: Path, sums: dict[str, set[str]],
              paths: list[Path] | None = None) -> bool:
    """True when every file (expected name -> its SHA-256s) is `name`'s official one, False when
    some match no official file; WrongDataset when they are another dataset's official files."""
    known = {base: {OFFICIAL_SHA256[s] for s in found if s in OFFICIAL_SHA256}
             for base, found in sums.items()}
    others = sorted({dataset for matches in known.values() for dataset, _ in matches} - {name})
    if others:
        other = others[0]
        files = [path for path, matches in zip(paths or [where], known.values(), strict=True)
                 if any(dataset == other for dataset, _ in matches)]
        what = (f"the files in {where} are" if paths and len(files) == len(paths)
                else f"{', '.join(map(str, files))} {'is' if len(files) == 1 else 'are'}")
        raise WrongDataset(f"dataset {name!r} asked for, but {what} {TITLES[other]}'s; use "
                           f'dataset="{other}" (or GPUBENCH_DATASET={other})')
    return all((name, base) in matches for base, matches in known.items())


def _read_idx(path: Path, kind: str) -> tuple[np.ndarray, set[str]]:
    """Parse an IDX file of unsigned bytes, gzipped or not: images (3-D) or labels (1-D); with
    the SHA-256 of the file and, when gzipped, of its decompressed bytes."""
    try:
        data = path.read_bytes()
        sums = {_sha256(data)}
        if path.name.endswith(".gz") or data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
            sums.add(_sha256(data))
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} cannot be read or un-gzipped ({exc}); it is corrupt: re-download") from exc
    expected, magic = IDX_MAGIC[kind], int.from_bytes(data[:4], "big")
    if magic != expected:
        hint = "a label file used as an image file?" if magic == IDX_MAGIC["labels"] else (
            "an image file used as a label file?" if magic == IDX_MAGIC["images"] else "not an IDX file")
        raise DataError(f"{path} has IDX magic number 0x{magic:08x}, expected 0x{expected:08x} for {kind} "
                        f"({hint}); check which file is which, or re-download it")
    header = 4 + 4 * (magic & 0xFF)
    dims = tuple(int.from_bytes(data[i:i + 4], "big") for i in range(4, header, 4))
    needed = int(np.prod(dims, dtype=np.int64))
    if len(data) - header != needed:  # also when the file is shorter than its header
        raise DataError(f"{path} holds {max(len(data) - header, 0):,} data bytes but its header (dims "
                        f"{'x'.join(map(str, dims))}) needs {needed:,}; the file is truncated or corrupt: "
                        "re-download it")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims).copy(), sums


# Pickles can run code when loaded. A CIFAR-10 batch holds only a dict of bytes, lists, ints and
# one numpy array, so only the globals that rebuild an array are allowed (numpy 1 and 2 names).
_PICKLE_ALLOWED = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
                   ("numpy.core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
                   ("numpy._core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct}


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """An unpickler that can rebuild numpy arrays and nothing else that needs a global."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _PICKLE_ALLOWED:
            raise pickle.UnpicklingError(f"refused to load the global {module}.{name}, "
                                         "which a CIFAR-10 batch never holds")
        return _PICKLE_ALLOWED[module, name]


def _read_cifar(path: Path) -> tuple[tuple, bool]:
    """(arrays, verified) from the six batches of a folder (which no published checksum
    verifies), or of the tar.gz archive read without extracting it."""
    try:
        if path.is_dir():
            files = {b: (path / b).read_bytes() for b in CIFAR10_BATCHES if (path / b).is_file()}
            sums = {}
        else:
            sums = {CIFAR10_ARCHIVE: {_sha256(path.read_bytes())}}
            with tarfile.open(path, "r:*") as tar:
                files = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers()
                         if m.isfile() and Path(m.name).name in CIFAR10_BATCHES}
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} cannot be read ({exc}); it is corrupt: re-download it") from exc
    missing = [b for b in CIFAR10_BATCHES if b not in files]
    if missing:
        raise DataError(f"{path} lacks {', '.join(missing)}; it must hold {', '.join(CIFAR10_BATCHES)}: "
                        f"re-download (and re-extract) {CIFAR10_ARCHIVE}")
    batches = [_read_cifar_batch(files[b], path / b if path.is_dir() else f"{path}:{b}")
               for b in CIFAR10_BATCHES]
    arrays = (np.concatenate([x for x, _ in batches[:-1]]),
              np.concatenate([y for _, y in batches[:-1]]), *batches[-1])
    return arrays, bool(sums) and _verified("cifar10", path, sums)


def _read_cifar_batch(raw: bytes, label: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch as (N, 32, 32, 3) uint8 images and int64 labels; `label` names it in errors."""
    try:
        batch = _ArrayOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
        data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
        # Each row is 1024 red, then 1024 green, then 1024 blue values, row-major.
        images = np.ascontiguousarray(data.reshape(len(data), 3, 32, 32).transpose(0, 2, 3, 1))
    except Exception as exc:  # a corrupt pickle fails in many ways; all mean "bad file"
        raise DataError(f"{label} is not a valid CIFAR-10 batch ({exc!r}); re-download it") from exc
    return _checked((images, labels), (label, label), (32, 32, 3))


def _synthetic(name: str, max_train_samples: int | None, seed: int) -> tuple[str, tuple, None]:
    """Seeded images: one fixed pattern per class, mid-grey plus a random offset per block of pixels."""
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
    """`n` labelled images, seeded per chunk: the first N the same whatever `n`; each 10 hold all classes."""
    chunk, shape = _SYNTHETIC["chunk"], prototypes.shape[1:]
    x, y = np.empty((n, *shape), dtype=np.uint8), np.empty(n, dtype=np.int64)
    for start in range(0, n, chunk):
        rng = np.random.default_rng([seed, split, start // chunk, DATASETS.index(name)])
        labels = rng.permuted(np.tile(np.arange(NUM_CLASSES), (chunk // NUM_CLASSES, 1)), axis=1).ravel()
        others = (labels + rng.integers(1, NUM_CLASSES, size=chunk)) % NUM_CLASSES
        mix = rng.uniform(0, _SYNTHETIC["mix"], size=(chunk, *[1] * len(shape))).astype(np.float32)
        noise = rng.random((chunk, *shape), dtype=np.float32) - 0.5  # uniform: 7x faster than normal
        noise *= _SYNTHETIC["noise"] * np.sqrt(12.0)  # a uniform of this width has that std
        images = noise + (prototypes[labels] + mix * (prototypes[others] - prototypes[labels]))
        stop = min(n, start + chunk)
        x[start:stop] = np.clip(images[: stop - start], 0, 255)
        y[start:stop] = labels[: stop - start]
    return x, y
