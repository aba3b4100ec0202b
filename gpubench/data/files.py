"""The official files: the checked readers (IDX raw or gzipped, mnist.npz, CIFAR-10's pickled
batches or its tar.gz), their SHA-256 sums (tables/datasets.json) and the two sources that read
them, the Keras cache and a folder. Each source returns (origin, arrays, verified)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pickle
import socket
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

# The four IDX files in the order x_train, y_train, x_test, y_test.
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")
CIFAR10_BATCHES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
CIFAR10_ARCHIVE, CIFAR10_FOLDER = "cifar-10-python.tar.gz", "cifar-10-batches-py"
_TABLES = json.loads((Path(__file__).parents[1] / "tables" / "datasets.json").read_text("utf-8"))
TITLES = {name: facts["title"] for name, facts in _TABLES["datasets"].items()}
# What keras.datasets downloads, per dataset (tests point them at local files), and its file_hash.
URL, KERAS_SHA256 = _TABLES["keras"]["url"], _TABLES["keras"]["sha256"]
DOWNLOAD_TIMEOUT = 30.0  # seconds without a byte before a download gives up
# Every known official file: SHA-256 -> (dataset, file name without .gz).
OFFICIAL_SHA256 = {
    **{sha: (name, base) for name, sums in _TABLES["idx_sha256"].items()
       for base, sha in zip(IDX_FILES, sums, strict=True)},
    KERAS_SHA256["mnist"]: ("mnist", "mnist.npz"),
    KERAS_SHA256["cifar10"]: ("cifar10", CIFAR10_ARCHIVE)}
IDX_MAGIC = {"images": 0x00000803, "labels": 0x00000801}
# A CIFAR-10 batch holds a dict of bytes, lists, ints and one array: only the globals that
# rebuild an array are unpickled (numpy 1 and 2 names), as a pickle could run any code.
_RECONSTRUCT = np._core.multiarray._reconstruct
PICKLE_ALLOWED = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
                  ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
                  ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT}


class DataError(ValueError):
    """A data file is missing, truncated or malformed; the message names the file and the fix."""


class WrongDataset(DataError):
    """The files are another dataset's official files; the message names both datasets."""


class DataUnavailable(RuntimeError):
    """A source cannot provide the data (e.g. offline download); `auto` falls through."""


def verified(name: str, where: Path, sums: dict[str, set[str]],
             paths: list[Path] | None = None) -> bool:
    """Whether every file (name -> SHA-256s) is `name`'s official one; another's: WrongDataset."""
    known = {base: {OFFICIAL_SHA256[s] for s in found if s in OFFICIAL_SHA256}
             for base, found in sums.items()}
    others = sorted({dataset for matches in known.values() for dataset, _ in matches} - {name})
    if others:
        files = [path for path, matches in zip(paths or [where], known.values(), strict=True)
                 if any(dataset == others[0] for dataset, _ in matches)]
        what = (f"the files in {where} are" if paths and len(files) == len(paths)
                else f"{', '.join(map(str, files))} {'is' if len(files) == 1 else 'are'}")
        raise WrongDataset(f"dataset {name!r} asked for, but {what} {TITLES[others[0]]}'s; use "
                           f'dataset="{others[0]}" (or GPUBENCH_DATASET={others[0]})')
    return all((name, base) in matches for base, matches in known.items())


def checked(arrays: tuple, files: tuple, shape: tuple) -> tuple:
    """(images, labels, ...) pairs, labels as int64, once shapes, counts and values are right."""
    out = []
    for x, y, x_file, y_file in zip(arrays[::2], arrays[1::2], files[::2], files[1::2],
                                    strict=True):
        if x.dtype != np.uint8 or x.shape[1:] != shape:
            raise DataError(f"{x_file} holds {'x'.join(map(str, x.shape[1:]))} {x.dtype} images, "
                            f"expected {'x'.join(map(str, shape))} uint8; use the real files")
        if y.shape != (len(x),):
            raise DataError(f"{x_file} has {len(x):,} images but {y_file} has {y.size:,} labels; "
                            "they must come from the same release: re-download both")
        bad = (np.flatnonzero((y < 0) | (y >= 10))  # ten classes in all three
               if np.issubdtype(y.dtype, np.integer) else [0])
        if len(bad):
            raise DataError(f"{y_file}: label {y[bad[0]]} at index {bad[0]} is not an integer 0..9 "
                            f"({len(bad)} bad labels); the file is corrupt: re-download it")
        out += [x, y.astype(np.int64)]
    return tuple(out)


def read_mnist_npz(path: Path) -> tuple[tuple, bool]:
    """(arrays, verified) of a mnist.npz as keras.datasets.mnist writes it."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = tuple(npz[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    except (KeyError, OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise DataError(f"{path} is not a readable .npz of x_train, y_train, x_test, y_test "
                        f"({exc}); re-download it") from exc
    sums = {"mnist.npz": {hashlib.sha256(path.read_bytes()).hexdigest()}}
    return checked(arrays, (path,) * 4, (28, 28)), verified("mnist", path, sums)


def read_idx(path: Path, kind: str) -> tuple[np.ndarray, set[str]]:
    """An IDX file's array, gzipped or not, and the SHA-256s of its bytes and decompressed bytes."""
    try:
        data = path.read_bytes()
        sums = {hashlib.sha256(data).hexdigest()}
        if path.name.endswith(".gz") or data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
            sums.add(hashlib.sha256(data).hexdigest())
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} cannot be read or un-gzipped ({exc}); it is corrupt: "
                        "re-download") from exc
    expected, magic = IDX_MAGIC[kind], int.from_bytes(data[:4], "big")
    if magic != expected:
        hint = {IDX_MAGIC["labels"]: "a label file used as an image file?",
                IDX_MAGIC["images"]: "an image file used as a label file?"}
        raise DataError(f"{path} has IDX magic number 0x{magic:08x}, expected 0x{expected:08x} for "
                        f"{kind} ({hint.get(magic, 'not an IDX file')}); check which file is "
                        "which, or re-download it")
    header = 4 + 4 * (magic & 0xFF)
    dims = tuple(int.from_bytes(data[i:i + 4], "big") for i in range(4, header, 4))
    needed = int(np.prod(dims, dtype=np.int64))
    if len(data) - header != needed:  # also when the file is shorter than its header
        raise DataError(f"{path} holds {max(len(data) - header, 0):,} data bytes but its header "
                        f"(dims {'x'.join(map(str, dims))}) needs {needed:,}; the file is "
                        "truncated or corrupt: re-download it")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims).copy(), sums


def read_idx_set(name: str, paths: list[Path]) -> tuple[tuple, bool]:
    """(arrays, verified) of the four IDX files in IDX_FILES order."""
    read = [read_idx(p, k) for p, k in zip(paths, ["images", "labels"] * 2, strict=True)]
    arrays = checked(tuple(array for array, _ in read), paths, (28, 28))
    sums = {base: found for base, (_, found) in zip(IDX_FILES, read, strict=True)}
    return arrays, verified(name, paths[0].parent, sums, paths)


class ArrayOnlyUnpickler(pickle.Unpickler):
    """An unpickler that rebuilds numpy arrays and nothing else that needs a global."""

    def find_class(self, module: str, name: str):
        """The allowed global, or refuse it."""
        if (module, name) not in PICKLE_ALLOWED:
            raise pickle.UnpicklingError(f"refused to load the global {module}.{name}, "
                                         "which a CIFAR-10 batch never holds")
        return PICKLE_ALLOWED[module, name]


def read_cifar(path: Path) -> tuple[tuple, bool]:
    """(arrays, verified) of the six batches in a folder, or in the tar.gz, not extracted."""
    try:
        if path.is_dir():
            files = {b: (path / b).read_bytes() for b in CIFAR10_BATCHES if (path / b).is_file()}
            sums = {}
        else:
            sums = {CIFAR10_ARCHIVE: {hashlib.sha256(path.read_bytes()).hexdigest()}}
            with tarfile.open(path, "r:*") as tar:
                files = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers()
                         if m.isfile() and Path(m.name).name in CIFAR10_BATCHES}
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} cannot be read ({exc}); it is corrupt: re-download it") from exc
    if missing := [b for b in CIFAR10_BATCHES if b not in files]:
        raise DataError(f"{path} lacks {', '.join(missing)}; it must hold "
                        f"{', '.join(CIFAR10_BATCHES)}: re-download (and re-extract) "
                        f"{CIFAR10_ARCHIVE}")
    batches = []
    for name in CIFAR10_BATCHES:
        label = path / name if path.is_dir() else f"{path}:{name}"
        try:
            batch = ArrayOnlyUnpickler(io.BytesIO(files[name]), encoding="bytes").load()
            data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
            # Each row is 1024 red, then 1024 green, then 1024 blue values, row-major.
            images = np.ascontiguousarray(data.reshape(len(data), 3, 32, 32).transpose(0, 2, 3, 1))
        except Exception as exc:  # a corrupt pickle fails in many ways; all mean "bad file"
            raise DataError(f"{label} is not a valid CIFAR-10 batch ({exc!r}); re-download "
                            "it") from exc
        batches.append(checked((images, labels), (label, label), (32, 32, 3)))
    arrays = (np.concatenate([x for x, _ in batches[:-1]]),
              np.concatenate([y for _, y in batches[:-1]]), *batches[-1])
    return arrays, bool(sums) and verified("cifar10", path, sums)


def keras_file(fname: str, url: str, sha256_: str | None, subdir: str = "datasets") -> Path:
    """The cached file `fname`, downloaded (and hash-checked) by keras.utils.get_file if needed."""
    from gpubench import backends  # noqa: PLC0415 - Keras loads only for this source
    # Keras reads KERAS_HOME once, at import; read it per call so the cache follows it.
    cache = Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras").expanduser()
    target = cache / subdir / fname
    saved = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT)  # get_file has no timeout of its own
    try:
        target.parent.mkdir(parents=True, exist_ok=True)  # else get_file falls back to /tmp/.keras
        return Path(backends.keras().utils.get_file(fname, url, file_hash=sha256_,
                                                      cache_subdir=subdir, cache_dir=str(cache)))
    except Exception as exc:  # get_file wraps URL and HTTP errors in a bare Exception
        if isinstance(exc, ValueError) and "hash" in str(exc):  # its check after a download
            target.unlink(missing_ok=True)
            raise DataError(f"{url} downloaded into {target} does not have the sha256 {sha256_}: "
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
        path = keras_file("mnist.npz", URL[name], KERAS_SHA256[name])
        return path, *read_mnist_npz(path)
    if name == "fashion_mnist":  # Keras publishes no hash for these: OFFICIAL_SHA256 has them
        paths = [keras_file(f"{base}.gz", f"{URL[name]}{base}.gz", None,
                            os.path.join("datasets", "fashion-mnist")) for base in IDX_FILES]
        return paths[0].parent, *read_idx_set(name, paths)
    # keras.datasets.cifar10 keeps the archive under this name; read it without extracting.
    archive = keras_file("cifar-10-batches-py-target_archive", URL[name], KERAS_SHA256[name])
    return archive, *read_cifar(archive)


def load_dir(name: str, data_dir: str | os.PathLike | None) -> tuple[Path, tuple, bool]:
    """(origin, arrays, verified) from the first of data_dir and its subfolders holding them."""
    if data_dir is None:  # only source="auto" gets here without one
        raise DataUnavailable("not tried (no data_dir given)")
    data_dir = Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise DataError(f"data_dir {data_dir} is not a directory; pass the folder holding the "
                        f"{name} files")
    folders = [data_dir] + [data_dir / sub for sub in _TABLES["subfolders"][name]]
    searched = ", ".join(map(str, folders))
    if name == "cifar10":  # the extracted batches' folder, else the archive
        for path in [f / leaf for f in folders for leaf in (CIFAR10_FOLDER, CIFAR10_ARCHIVE)]:
            if path.exists():
                return path, *read_cifar(path)
        raise DataError(f"cifar10 files not found in {searched}. Expected layout: <data_dir>"
                        f"[/cifar10]/{CIFAR10_FOLDER}/ holding {', '.join(CIFAR10_BATCHES)}, or "
                        f"<data_dir>[/cifar10]/{CIFAR10_ARCHIVE}")
    missing, wrong = IDX_FILES, None
    for folder in folders:
        found = [next((folder / f for f in (base, f"{base}.gz") if (folder / f).is_file()), None)
                 for base in IDX_FILES]
        if None not in found:
            try:
                return folder, *read_idx_set(name, found)
            except WrongDataset as exc:  # e.g. Fashion-MNIST in data_dir, MNIST in data_dir/mnist
                wrong = wrong or exc
                continue
        if name == "mnist" and (folder / "mnist.npz").is_file():
            return folder / "mnist.npz", *read_mnist_npz(folder / "mnist.npz")
        missing = min(missing, [b for b, p in zip(IDX_FILES, found, strict=True) if p is None],
                      key=len)
    if wrong is not None:
        raise wrong
    raise DataError(f"{name} files not found: missing {', '.join(missing)} (raw or .gz); searched "
                    f"{searched}. Expected layout: <data_dir>[/{folders[1].name}]/ holding "
                    f"{', '.join(IDX_FILES)}, each raw or gzipped"
                    + (" (or mnist.npz)" if name == "mnist" else ""))
