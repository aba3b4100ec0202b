"""Reading the official file formats, checked: IDX (raw or gzipped), mnist.npz, CIFAR-10's
pickled batches (in a folder or the tar.gz, through an unpickler that builds arrays only)."""

from __future__ import annotations

import gzip
import io
import pickle
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

from gpubench.data import checksums
from gpubench.data.datasets import (
    CIFAR10_ARCHIVE,
    CIFAR10_BATCHES,
    IDX_FILES,
    NUM_CLASSES,
    DataError,
)

IDX_MAGIC = {"images": 0x00000803, "labels": 0x00000801}


def checked(arrays: tuple, files: tuple, shape: tuple) -> tuple:
    """(images, labels, ...) pairs, labels as int64, once shapes, counts and values are right."""
    out = []
    pairs = zip(arrays[::2], arrays[1::2], files[::2], files[1::2], strict=True)
    for x, y, x_file, y_file in pairs:
        if x.dtype != np.uint8 or x.shape[1:] != shape:
            raise DataError(f"{x_file} holds {'x'.join(map(str, x.shape[1:]))} {x.dtype} images, "
                            f"expected {'x'.join(map(str, shape))} uint8; use the real files")
        if y.shape != (len(x),):
            raise DataError(f"{x_file} has {len(x):,} images but {y_file} has {y.size:,} labels; "
                            "they must come from the same release: re-download both")
        bad = (np.flatnonzero((y < 0) | (y >= NUM_CLASSES))
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
    arrays = checked(arrays, (path,) * 4, (28, 28))
    sums = {"mnist.npz": {checksums.sha256(path.read_bytes())}}
    return arrays, checksums.verified("mnist", path, sums)


def read_idx_set(name: str, paths: list[Path]) -> tuple[tuple, bool]:
    """(train images and labels, test images and labels; verified) from the four IDX files in
    IDX_FILES order, checked to be `name`'s official files or no known dataset's."""
    read = [read_idx(p, k) for p, k in zip(paths, ["images", "labels"] * 2, strict=True)]
    arrays = checked(tuple(array for array, _ in read), paths, (28, 28))
    sums = {base: sums for base, (_, sums) in zip(IDX_FILES, read, strict=True)}
    return arrays, checksums.verified(name, paths[0].parent, sums, paths)



def read_idx(path: Path, kind: str) -> tuple[np.ndarray, set[str]]:
    """Parse an IDX file of unsigned bytes, gzipped or not: images (3-D) or labels (1-D); with
    the SHA-256 of the file and, when gzipped, of its decompressed bytes."""
    try:
        data = path.read_bytes()
        sums = {checksums.sha256(data)}
        if path.name.endswith(".gz") or data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
            sums.add(checksums.sha256(data))
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} cannot be read or un-gzipped ({exc}); it is corrupt: "
                        "re-download") from exc
    expected, magic = IDX_MAGIC[kind], int.from_bytes(data[:4], "big")
    if magic != expected:
        hint = "a label file used as an image file?" if magic == IDX_MAGIC["labels"] else (
            "an image file used as a label file?" if magic == IDX_MAGIC["images"]
            else "not an IDX file")
        raise DataError(f"{path} has IDX magic number 0x{magic:08x}, expected 0x{expected:08x} for "
                        f"{kind} ({hint}); check which file is which, or re-download it")
    header = 4 + 4 * (magic & 0xFF)
    dims = tuple(int.from_bytes(data[i:i + 4], "big") for i in range(4, header, 4))
    needed = int(np.prod(dims, dtype=np.int64))
    if len(data) - header != needed:  # also when the file is shorter than its header
        raise DataError(f"{path} holds {max(len(data) - header, 0):,} data bytes but its header "
                        f"(dims {'x'.join(map(str, dims))}) needs {needed:,}; the file is "
                        "truncated or corrupt: re-download it")
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


def read_cifar(path: Path) -> tuple[tuple, bool]:
    """(arrays, verified) from the six batches of a folder (which no published checksum
    verifies), or of the tar.gz archive read without extracting it."""
    try:
        if path.is_dir():
            files = {b: (path / b).read_bytes() for b in CIFAR10_BATCHES if (path / b).is_file()}
            sums = {}
        else:
            sums = {CIFAR10_ARCHIVE: {checksums.sha256(path.read_bytes())}}
            with tarfile.open(path, "r:*") as tar:
                files = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers()
                         if m.isfile() and Path(m.name).name in CIFAR10_BATCHES}
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} cannot be read ({exc}); it is corrupt: re-download it") from exc
    missing = [b for b in CIFAR10_BATCHES if b not in files]
    if missing:
        raise DataError(f"{path} lacks {', '.join(missing)}; it must hold "
                        f"{', '.join(CIFAR10_BATCHES)}: "
                        f"re-download (and re-extract) {CIFAR10_ARCHIVE}")
    batches = [read_cifar_batch(files[b], path / b if path.is_dir() else f"{path}:{b}")
               for b in CIFAR10_BATCHES]
    arrays = (np.concatenate([x for x, _ in batches[:-1]]),
              np.concatenate([y for _, y in batches[:-1]]), *batches[-1])
    return arrays, bool(sums) and checksums.verified("cifar10", path, sums)


def read_cifar_batch(raw: bytes, label: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch as (N, 32, 32, 3) uint8 images and int64 labels; `label` names it in
    errors."""
    try:
        batch = _ArrayOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
        data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
        # Each row is 1024 red, then 1024 green, then 1024 blue values, row-major.
        images = np.ascontiguousarray(data.reshape(len(data), 3, 32, 32).transpose(0, 2, 3, 1))
    except Exception as exc:  # a corrupt pickle fails in many ways; all mean "bad file"
        raise DataError(f"{label} is not a valid CIFAR-10 batch ({exc!r}); re-download it") from exc
    return checked((images, labels), (label, label), (32, 32, 3))


