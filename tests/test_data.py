"""Tests for gpubench.data: the IDX, npz and CIFAR readers, the Keras cache and download, auto and synthetic."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import os
import pickle
import socket
import struct
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from gpubench import data
from gpubench.data import DataError, DataUnavailable

REAL_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
URL_CONSTANTS = ("MNIST_URL", "FASHION_MNIST_BASE_URL", "CIFAR10_URL")


# ---------------------------------------------------------------- fixtures and writers


def free_port() -> int:
    """A local port with nothing listening on it (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """Every test gets its own empty Keras cache and URLs that cannot reach the internet."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    dead = f"http://127.0.0.1:{free_port()}/"
    monkeypatch.setattr(data, "MNIST_URL", dead + "mnist.npz")
    monkeypatch.setattr(data, "FASHION_MNIST_BASE_URL", dead)
    monkeypatch.setattr(data, "CIFAR10_URL", dead + "cifar-10-python.tar.gz")


def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "keras_home" / "datasets"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def http_root(tmp_path):
    """A local HTTP server serving tmp_path/www; yields (folder, base URL)."""
    root = tmp_path / "www"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_server():
    """A server that accepts connections (via the listen backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/"


def idx_bytes(array: np.ndarray, magic: int | None = None) -> bytes:
    """An IDX file of unsigned bytes holding `array`."""
    if magic is None:
        magic = 0x800 + array.ndim
    return struct.pack(f">I{array.ndim}I", magic, *array.shape) + array.astype(np.uint8).tobytes()


def write_file(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(content) if path.name.endswith(".gz") else content)
    return path


def make_arrays(n_train: int = 50, n_test: int = 20, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, n_train).astype(np.uint8),
        "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, n_test).astype(np.uint8),
    }


def idx_name(key: str, gz: bool = True, dotted: bool = False) -> str:
    name = data.IDX_FILES[key]
    if dotted:
        name = name.replace("-idx", ".idx")
    return name + (".gz" if gz else "")


def write_idx_dir(folder: Path, gz: bool = True, dotted: bool = False, **kwargs) -> dict[str, np.ndarray]:
    arrays = make_arrays(**kwargs)
    for key, array in arrays.items():
        write_file(folder / idx_name(key, gz, dotted), idx_bytes(array))
    return arrays


def assert_same(dataset: data.Dataset, arrays: dict[str, np.ndarray]) -> None:
    for key, expected in arrays.items():
        actual = getattr(dataset, key)
        np.testing.assert_array_equal(actual, expected)
    assert dataset.x_train.dtype == np.uint8 and dataset.x_test.dtype == np.uint8
    assert dataset.y_train.dtype == np.int64 and dataset.y_test.dtype == np.int64


def cifar_batches(n: int = 10) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Six small batches: each image i of batch b has a known pixel per channel."""
    rng = np.random.default_rng(1)
    batches = {}
    for b, batch in enumerate((*data.CIFAR10_TRAIN_BATCHES, data.CIFAR10_TEST_BATCH)):
        pixels = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        batches[batch] = (pixels, [int(v) for v in rng.integers(0, 10, n)])
    return batches


class Py2Pickler(pickle._Pickler):
    """Writes str and bytes as Python 2 byte strings, as in the real CIFAR-10 batches."""

    def save_str8(self, obj):
        raw = obj.encode("latin1") if isinstance(obj, str) else obj
        if len(raw) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(raw)) + raw)
        self.memoize(obj)

    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[bytes] = save_str8
    dispatch[str] = save_str8


def cifar_pickle(pixels: np.ndarray, labels: list[int], style: str = "py2") -> bytes:
    """A batch pickled like the real files (Python 2, numpy 1 names), or by today's pickle (protocol 4)."""
    batch = {b"batch_label": b"test batch", b"labels": labels, b"data": pixels, b"filenames": [b"x.png"] * len(labels)}
    if style == "py3":
        return pickle.dumps(batch, protocol=4)
    buffer = io.BytesIO()
    Py2Pickler(buffer, protocol=2).dump(batch)
    content = buffer.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
    assert b"cnumpy.core.multiarray\n_reconstruct\n" in content
    return content


def write_cifar_folder(folder: Path, n: int = 10, style: str = "py2") -> dict:
    batches = cifar_batches(n)
    for name, (pixels, labels) in batches.items():
        write_file(folder / name, cifar_pickle(pixels, labels, style))
    return batches


def write_cifar_archive(path: Path, n: int = 10) -> dict:
    batches = cifar_batches(n)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, (pixels, labels) in batches.items():
            content = cifar_pickle(pixels, labels)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return batches


def assert_cifar(dataset: data.Dataset, batches: dict) -> None:
    train = [batches[b] for b in data.CIFAR10_TRAIN_BATCHES]
    test = batches[data.CIFAR10_TEST_BATCH]
    n = len(test[1])
    assert dataset.x_train.shape == (5 * n, 32, 32, 3) and dataset.x_test.shape == (n, 32, 32, 3)
    assert dataset.x_train.dtype == np.uint8 and dataset.y_train.dtype == np.int64
    np.testing.assert_array_equal(dataset.y_train, np.concatenate([labels for _, labels in train]))
    np.testing.assert_array_equal(dataset.y_test, test[1])
    # Row layout: 1024 red, 1024 green, 1024 blue, each row-major 32x32.
    pixels = test[0]
    for i, row, col, channel in [(0, 0, 0, 0), (3, 5, 7, 1), (9, 31, 30, 2), (4, 12, 0, 2)]:
        assert dataset.x_test[i, row, col, channel] == pixels[i, channel * 1024 + row * 32 + col]
    second_batch_first_image = train[1][0][0]
    assert dataset.x_train[n, 2, 3, 1] == second_batch_first_image[1024 + 2 * 32 + 3]
    expected = pixels.reshape(n, 3, 32, 32).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(dataset.x_test, expected)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path


# ---------------------------------------------------------------- IDX via source="dir"


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "raw"])
@pytest.mark.parametrize("dotted", [False, True], ids=["dash", "dotted"])
def test_idx_dir_loads_exact_content(tmp_path, gz, dotted):
    arrays = write_idx_dir(tmp_path / "d", gz=gz, dotted=dotted)
    dataset = data.load("mnist", "dir", data_dir=tmp_path / "d", verbose=False)
    assert_same(dataset, arrays)
    assert dataset.x_train.shape == (50, 28, 28) and dataset.x_test.shape == (20, 28, 28)
    assert dataset.source == "dir" and dataset.origin == str(tmp_path / "d")
    assert not dataset.synthetic and dataset.note is None


@pytest.mark.parametrize(
    ("name", "sub"), [("mnist", "mnist"), ("fashion_mnist", "fashion-mnist"), ("fashion-mnist", "fashion_mnist")]
)
def test_idx_dir_finds_dataset_subfolder(tmp_path, name, sub):
    arrays = write_idx_dir(tmp_path / sub)
    dataset = data.load(name, "dir", data_dir=str(tmp_path), verbose=False)
    assert_same(dataset, arrays)
    assert dataset.origin == str(tmp_path / sub)


def test_mnist_npz_in_dir(tmp_path):
    arrays = make_arrays()
    write_npz(tmp_path / "mnist.npz", arrays)
    dataset = data.load("mnist", "dir", data_dir=tmp_path, verbose=False)
    assert_same(dataset, arrays)
    assert dataset.origin == str(tmp_path / "mnist.npz")


def test_max_train_samples_keeps_first_train_images_and_all_test(tmp_path):
    arrays = write_idx_dir(tmp_path)
    dataset = data.load("mnist", "dir", data_dir=tmp_path, max_train_samples=7, verbose=False)
    np.testing.assert_array_equal(dataset.x_train, arrays["x_train"][:7])
    np.testing.assert_array_equal(dataset.y_train, arrays["y_train"][:7])
    np.testing.assert_array_equal(dataset.x_test, arrays["x_test"])


@pytest.mark.parametrize("extra", [-100, 3], ids=["truncated", "trailing_bytes"])
def test_idx_payload_length_must_match_header(tmp_path, extra):
    write_idx_dir(tmp_path)
    path = tmp_path / idx_name("x_train")
    content = idx_bytes(make_arrays()["x_train"])
    write_file(path, content[:extra] if extra < 0 else content + bytes(extra))
    with pytest.raises(DataError, match="re-download") as info:
        data.load("mnist", "dir", data_dir=tmp_path, verbose=False)
    assert str(path) in str(info.value)
    assert f"{50 * 784 + extra:,}" in str(info.value) and f"{50 * 784:,}" in str(info.value)


def test_label_file_used_as_image_file(tmp_path):
    arrays = write_idx_dir(tmp_path)
    path = write_file(tmp_path / idx_name("x_test"), idx_bytes(arrays["y_test"]))
    with pytest.raises(DataError, match="label file used as an image file") as info:
        data.load("mnist", "dir", data_dir=tmp_path, verbose=False)
    assert str(path) in str(info.value)
    assert "0x00000801" in str(info.value) and "0x00000803" in str(info.value)


def test_image_and_label_count_mismatch(tmp_path):
    arrays = write_idx_dir(tmp_path)
    labels = write_file(tmp_path / idx_name("y_train"), idx_bytes(arrays["y_train"][:49]))
    with pytest.raises(DataError) as info:
        data.load("mnist", "dir", data_dir=tmp_path, verbose=False)
    message = str(info.value)
    assert str(labels) in message and str(tmp_path / idx_name("x_train")) in message
    assert "50" in message and "49" in message


@pytest.mark.parametrize("damage", ["bad_crc", "not_gzip", "truncated_stream"])
def test_corrupt_gzip(tmp_path, damage):
    arrays = write_idx_dir(tmp_path)
    path = tmp_path / idx_name("y_test")
    good = gzip.compress(idx_bytes(arrays["y_test"]))
    if damage == "bad_crc":
        bad = good[:-8] + bytes([good[-8] ^ 0xFF]) + good[-7:]
    elif damage == "not_gzip":
        bad = b"this is not gzip at all, just text" * 3
    else:
        bad = good[: len(good) // 2]
    path.write_bytes(bad)
    with pytest.raises(DataError, match="corrupt") as info:
        data.load("mnist", "dir", data_dir=tmp_path, verbose=False)
    assert str(path) in str(info.value)


def test_missing_idx_file_is_named(tmp_path):
    write_idx_dir(tmp_path)
    (tmp_path / idx_name("y_test")).unlink()
    with pytest.raises(DataError) as info:
        data.load("fashion_mnist", "dir", data_dir=tmp_path, verbose=False)
    message = str(info.value)
    assert data.IDX_FILES["y_test"] in message
    assert data.IDX_FILES["x_test"] not in message.split("Expected layout")[0]
    assert str(tmp_path) in message and str(tmp_path / "fashion-mnist") in message
    assert "Expected layout" in message


def test_empty_dir_names_all_files(tmp_path):
    with pytest.raises(DataError) as info:
        data.load("mnist", "dir", data_dir=tmp_path, verbose=False)
    for base in data.IDX_FILES.values():
        assert base in str(info.value)
    assert "mnist.npz" in str(info.value)


def test_label_out_of_range(tmp_path):
    arrays = write_idx_dir(tmp_path)
    labels = arrays["y_test"].copy()
    labels[3] = 10
    path = write_file(tmp_path / idx_name("y_test"), idx_bytes(labels))
    with pytest.raises(DataError, match="label 10 at index 3") as info:
        data.load("mnist", "dir", data_dir=tmp_path, verbose=False)
    assert str(path) in str(info.value)


def test_images_not_28x28(tmp_path):
    write_idx_dir(tmp_path)
    path = write_file(tmp_path / idx_name("x_test"), idx_bytes(np.zeros((20, 27, 28), np.uint8)))
    with pytest.raises(DataError, match="27x28") as info:
        data.load("mnist", "dir", data_dir=tmp_path, verbose=False)
    assert str(path) in str(info.value)


def test_data_dir_that_does_not_exist(tmp_path):
    with pytest.raises(DataError, match="not a directory") as info:
        data.load("mnist", "dir", data_dir=tmp_path / "nowhere", verbose=False)
    assert str(tmp_path / "nowhere") in str(info.value)


def test_npz_missing_array(tmp_path):
    arrays = make_arrays()
    del arrays["y_test"]
    path = write_npz(tmp_path / "mnist.npz", arrays)
    with pytest.raises(DataError, match="y_test") as info:
        data.load("mnist", "dir", data_dir=tmp_path, verbose=False)
    assert str(path) in str(info.value)


# ---------------------------------------------------------------- CIFAR-10 via source="dir"


@pytest.mark.parametrize("layout", ["batches_folder", "batches_in_data_dir", "cifar10_subfolder"])
def test_cifar_batches(tmp_path, layout):
    folder = {
        "batches_folder": tmp_path / "cifar-10-batches-py",
        "batches_in_data_dir": tmp_path,
        "cifar10_subfolder": tmp_path / "cifar10" / "cifar-10-batches-py",
    }[layout]
    batches = write_cifar_folder(folder)
    dataset = data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert_cifar(dataset, batches)
    assert dataset.source == "dir" and dataset.origin == str(folder)


def test_cifar_batches_pickled_by_python3(tmp_path):
    batches = write_cifar_folder(tmp_path / "cifar-10-batches-py", style="py3")
    assert_cifar(data.load("cifar10", "dir", data_dir=tmp_path, verbose=False), batches)


def test_cifar_archive_in_data_dir(tmp_path):
    archive = tmp_path / "cifar-10-python.tar.gz"
    batches = write_cifar_archive(archive)
    dataset = data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert_cifar(dataset, batches)
    assert dataset.origin == str(archive)
    assert not (tmp_path / "cifar-10-batches-py").exists()  # read without extracting


def test_cifar_corrupt_pickle(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    batches = write_cifar_folder(folder)
    good = cifar_pickle(*batches["data_batch_3"])
    (folder / "data_batch_3").write_bytes(good[: len(good) // 2])
    with pytest.raises(DataError, match="not a valid CIFAR-10 batch") as info:
        data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert str(folder / "data_batch_3") in str(info.value)


class RunsCommand:
    """Unpickling this calls os.system: what a malicious batch would do."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_cifar_pickle_with_forbidden_global_is_refused(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar_folder(folder)
    marker = tmp_path / "pwned"
    evil = {b"data": RunsCommand(f"touch {marker}"), b"labels": [0]}
    (folder / "test_batch").write_bytes(pickle.dumps(evil, protocol=4))
    with pytest.raises(DataError, match="refused") as info:
        data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert str(folder / "test_batch") in str(info.value)
    assert "system" in str(info.value)
    assert not marker.exists()


def test_cifar_corrupt_pickle_inside_archive(tmp_path):
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, (pixels, labels) in cifar_batches().items():
            content = cifar_pickle(pixels, labels)
            if name == "data_batch_2":
                content = b"garbage" + content[7:]
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    with pytest.raises(DataError) as info:
        data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert str(archive) in str(info.value) and "data_batch_2" in str(info.value)


def test_cifar_truncated_archive(tmp_path):
    archive = tmp_path / "cifar-10-python.tar.gz"
    write_cifar_archive(archive)
    archive.write_bytes(archive.read_bytes()[:-200])
    with pytest.raises(DataError) as info:
        data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert str(archive) in str(info.value)


def test_cifar_missing_batch(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar_folder(folder)
    (folder / "data_batch_5").unlink()
    with pytest.raises(DataError, match="data_batch_5") as info:
        data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert str(folder) in str(info.value)


def test_cifar_nothing_found(tmp_path):
    with pytest.raises(DataError, match="Expected layout") as info:
        data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert "cifar-10-python.tar.gz" in str(info.value) and str(tmp_path) in str(info.value)


@pytest.mark.parametrize("problem", ["wrong_shape", "bad_label", "no_labels"])
def test_cifar_malformed_batch(tmp_path, problem):
    folder = tmp_path / "cifar-10-batches-py"
    batches = write_cifar_folder(folder)
    pixels, labels = batches["data_batch_1"]
    batch = {b"data": pixels, b"labels": labels}
    if problem == "wrong_shape":
        batch[b"data"] = pixels[:, :3000]
    elif problem == "bad_label":
        batch[b"labels"] = [*labels[:-1], 12]
    else:
        del batch[b"labels"]
    (folder / "data_batch_1").write_bytes(pickle.dumps(batch, protocol=4))
    with pytest.raises(DataError) as info:
        data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert str(folder / "data_batch_1") in str(info.value)


# ---------------------------------------------------------------- source="keras": cache and download


def test_keras_cache_dir_follows_keras_home(tmp_path, monkeypatch):
    assert data._keras_cache_dir() == tmp_path / "keras_home" / "datasets"
    monkeypatch.delenv("KERAS_HOME")
    assert data._keras_cache_dir() == Path.home() / ".keras" / "datasets"


def test_keras_cached_mnist_with_wrong_hash(tmp_path):
    path = write_npz(cache_dir(tmp_path) / "mnist.npz", make_arrays())
    with pytest.raises(DataError, match="delete it") as info:
        data.load("mnist", "keras", verbose=False)
    assert str(path) in str(info.value) and data.MNIST_SHA256 in str(info.value)


def test_keras_cached_mnist_with_right_hash(tmp_path, monkeypatch):
    arrays = make_arrays()
    path = write_npz(cache_dir(tmp_path) / "mnist.npz", arrays)
    monkeypatch.setattr(data, "MNIST_SHA256", sha256(path))
    dataset = data.load("mnist", "keras", verbose=False)
    assert_same(dataset, arrays)
    assert dataset.source == "keras" and dataset.origin == str(path)
    assert dataset.describe() == f"mnist from keras cache {path}: 50 train / 20 test images"


def test_keras_download_lands_in_cache(tmp_path, monkeypatch, http_root):
    root, base = http_root
    arrays = make_arrays()
    served = write_npz(root / "mnist.npz", arrays)
    monkeypatch.setattr(data, "MNIST_URL", base + "mnist.npz")
    monkeypatch.setattr(data, "MNIST_SHA256", sha256(served))
    dataset = data.load("mnist", "keras", verbose=False)
    assert_same(dataset, arrays)
    cached = cache_dir(tmp_path) / "mnist.npz"
    assert dataset.origin == str(cached)
    assert sorted(p.name for p in cache_dir(tmp_path).iterdir()) == ["mnist.npz"]
    assert sha256(cached) == sha256(served)
    root.joinpath("mnist.npz").unlink()  # now the cache alone must do
    assert_same(data.load("mnist", "keras", verbose=False), arrays)


def test_keras_download_with_wrong_hash_keeps_nothing(tmp_path, monkeypatch, http_root):
    root, base = http_root
    write_npz(root / "mnist.npz", make_arrays())
    monkeypatch.setattr(data, "MNIST_URL", base + "mnist.npz")
    with pytest.raises(DataError, match="sha256") as info:
        data.load("mnist", "keras", verbose=False)
    assert base + "mnist.npz" in str(info.value)
    assert list(cache_dir(tmp_path).iterdir()) == []


def test_keras_download_http_error(tmp_path, monkeypatch, http_root):
    _, base = http_root
    monkeypatch.setattr(data, "MNIST_URL", base + "missing.npz")
    with pytest.raises(DataUnavailable, match="404") as info:
        data.load("mnist", "keras", verbose=False)
    assert base + "missing.npz" in str(info.value)
    assert list(cache_dir(tmp_path).iterdir()) == []


def test_keras_download_refused_connection(tmp_path):
    with pytest.raises(DataUnavailable) as info:
        data.load("mnist", "keras", verbose=False)
    assert data.MNIST_URL in str(info.value)
    assert list(cache_dir(tmp_path).iterdir()) == []


def test_keras_download_times_out(tmp_path, monkeypatch, silent_server):
    monkeypatch.setattr(data, "CIFAR10_URL", silent_server + "cifar-10-python.tar.gz")
    with pytest.raises(DataUnavailable) as info:
        data.load("cifar10", "keras", timeout=1, verbose=False)
    assert silent_server in str(info.value) and "timed out" in str(info.value)
    assert list(cache_dir(tmp_path).iterdir()) == []


def test_keras_fashion_mnist_download(tmp_path, monkeypatch, http_root):
    root, base = http_root
    arrays = write_idx_dir(root)
    monkeypatch.setattr(data, "FASHION_MNIST_BASE_URL", base)
    dataset = data.load("fashion_mnist", "keras", verbose=False)
    assert_same(dataset, arrays)
    folder = cache_dir(tmp_path) / "fashion-mnist"
    assert dataset.origin == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{b}.gz" for b in data.IDX_FILES.values())


def test_keras_fashion_mnist_cached_but_truncated(tmp_path):
    folder = cache_dir(tmp_path) / "fashion-mnist"
    write_idx_dir(folder)
    path = folder / idx_name("x_train")
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:-1]))
    with pytest.raises(DataError, match="truncated") as info:
        data.load("fashion_mnist", "keras", verbose=False)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "folder", ["cifar-10-batches-py-target/cifar-10-batches-py", "cifar-10-batches-py"], ids=["keras3", "classic"]
)
def test_keras_cifar_extracted_folders(tmp_path, folder):
    batches = write_cifar_folder(cache_dir(tmp_path) / folder)
    dataset = data.load("cifar10", "keras", verbose=False)
    assert_cifar(dataset, batches)
    assert dataset.source == "keras" and dataset.origin == str(cache_dir(tmp_path) / folder)


@pytest.mark.parametrize("archive_name", ["cifar-10-batches-py-target_archive", "cifar-10-python.tar.gz"])
def test_keras_cifar_cached_archive_is_hash_checked(tmp_path, monkeypatch, archive_name):
    archive = cache_dir(tmp_path) / archive_name
    batches = write_cifar_archive(archive)
    with pytest.raises(DataError, match="delete it") as info:
        data.load("cifar10", "keras", verbose=False)
    assert str(archive) in str(info.value)
    monkeypatch.setattr(data, "CIFAR10_SHA256", sha256(archive))
    assert_cifar(data.load("cifar10", "keras", verbose=False), batches)


def test_keras_cifar_download_uses_keras_archive_name(tmp_path, monkeypatch, http_root):
    root, base = http_root
    batches = write_cifar_archive(root / "cifar-10-python.tar.gz")
    monkeypatch.setattr(data, "CIFAR10_URL", base + "cifar-10-python.tar.gz")
    monkeypatch.setattr(data, "CIFAR10_SHA256", sha256(root / "cifar-10-python.tar.gz"))
    dataset = data.load("cifar10", "keras", verbose=False)
    assert_cifar(dataset, batches)
    assert sorted(p.name for p in cache_dir(tmp_path).iterdir()) == ["cifar-10-batches-py-target_archive"]


# ---------------------------------------------------------------- source="auto"


@pytest.mark.parametrize("name", data.DATASETS)
def test_auto_offline_falls_back_to_synthetic(name, capsys):
    dataset = data.load(name, max_train_samples=100)
    assert dataset.source == "synthetic" and dataset.synthetic
    assert "keras" in dataset.note and "dir: not tried" in dataset.note
    out = capsys.readouterr().out
    assert "WARNING" in out and "SYNTHETIC DATA" in out
    lines = out.splitlines()
    assert lines[0].startswith("Downloading http://127.0.0.1:")  # the attempt is visible
    lines = [line for line in lines if not line.startswith("Downloading ")]
    assert lines[0].startswith("WARNING:") and lines[-1] == f"Data: {dataset.describe()}" and len(lines) == 2


def test_auto_uses_data_dir_when_keras_fails(tmp_path, capsys):
    arrays = write_idx_dir(tmp_path / "data" / "mnist")
    dataset = data.load("mnist", None, data_dir=tmp_path / "data")
    assert dataset.source == "dir"
    assert_same(dataset, arrays)
    assert "keras" in dataset.note
    downloading, data_line = capsys.readouterr().out.splitlines()
    assert downloading.startswith("Downloading ") and "mnist.npz" in downloading
    assert data_line == f"Data: {dataset.describe()}"


def test_auto_prefers_keras_cache(tmp_path, monkeypatch, capsys):
    arrays = make_arrays(seed=5)
    path = write_npz(cache_dir(tmp_path) / "mnist.npz", arrays)
    monkeypatch.setattr(data, "MNIST_SHA256", sha256(path))
    write_idx_dir(tmp_path / "data")
    dataset = data.load("mnist", "auto", data_dir=tmp_path / "data", verbose=False)
    assert dataset.source == "keras" and dataset.note is None
    assert_same(dataset, arrays)
    assert capsys.readouterr().out == ""


def test_auto_broken_cache_falls_through_visibly(tmp_path, capsys):
    path = write_npz(cache_dir(tmp_path) / "mnist.npz", make_arrays())
    dataset = data.load("mnist", "auto", max_train_samples=10)
    assert dataset.source == "synthetic"
    assert "delete it" in dataset.note and str(path) in dataset.note
    out = capsys.readouterr().out
    assert out.startswith("WARNING:") and str(path) in out and "SYNTHETIC DATA" in out


def test_auto_broken_cache_then_good_data_dir_warns(tmp_path, capsys):
    path = write_npz(cache_dir(tmp_path) / "mnist.npz", make_arrays())
    write_idx_dir(tmp_path / "data")
    dataset = data.load("mnist", "auto", data_dir=tmp_path / "data")
    assert dataset.source == "dir" and str(path) in dataset.note
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("WARNING:") and str(path) in lines[0]
    assert lines[1] == f"Data: {dataset.describe()}"


def test_auto_broken_data_dir_falls_through_visibly(tmp_path, capsys):
    write_idx_dir(tmp_path)
    (tmp_path / idx_name("x_test")).write_bytes(b"junk")
    dataset = data.load("mnist", "auto", data_dir=tmp_path, max_train_samples=10)
    assert dataset.source == "synthetic"
    assert str(tmp_path / idx_name("x_test")) in dataset.note
    assert "WARNING:" in capsys.readouterr().out


# ---------------------------------------------------------------- source="synthetic"


@pytest.mark.parametrize(
    ("name", "shape", "n_train"),
    [("mnist", (28, 28), 60_000), ("fashion_mnist", (28, 28), 60_000), ("cifar10", (32, 32, 3), 50_000)],
)
def test_synthetic_shapes_dtypes_and_balance(name, shape, n_train):
    dataset = data.load(name, "synthetic", verbose=False)
    assert dataset.x_train.shape == (n_train, *shape) and dataset.x_test.shape == (10_000, *shape)
    assert dataset.x_train.dtype == np.uint8 and dataset.y_train.dtype == np.int64
    assert dataset.y_train.shape == (n_train,) and dataset.y_test.shape == (10_000,)
    assert np.bincount(dataset.y_train).tolist() == [n_train // 10] * 10
    assert np.bincount(dataset.y_test).tolist() == [1000] * 10
    assert dataset.synthetic and dataset.source == "synthetic" and dataset.note is None
    assert dataset.describe().startswith("SYNTHETIC DATA") and "not the real" in dataset.describe()
    assert "seed 0" in dataset.origin
    sample = dataset.x_train[:1000].astype(np.float32)
    assert 100 < sample.mean() < 155 and sample.std() > 40


def test_synthetic_is_deterministic_and_seeded():
    a = data.load("mnist", "synthetic", max_train_samples=500, seed=3, verbose=False)
    b = data.load("mnist", "synthetic", max_train_samples=500, seed=3, verbose=False)
    c = data.load("mnist", "synthetic", max_train_samples=500, seed=4, verbose=False)
    for key in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.x_train, c.x_train) and not np.array_equal(a.x_test, c.x_test)


def test_synthetic_max_train_samples_is_a_prefix_of_the_full_set():
    full = data.load("mnist", "synthetic", verbose=False)
    part = data.load("mnist", "synthetic", max_train_samples=2345, verbose=False)
    assert part.x_train.shape == (2345, 28, 28) and part.y_train.shape == (2345,)
    np.testing.assert_array_equal(part.x_train, full.x_train[:2345])
    np.testing.assert_array_equal(part.y_train, full.y_train[:2345])
    np.testing.assert_array_equal(part.x_test, full.x_test)
    assert np.bincount(part.y_train[:2340]).tolist() == [234] * 10


def nearest_mean_accuracy(dataset: data.Dataset, n_train: int) -> float:
    """Test accuracy of classifying by the nearest class mean of the first n_train training images."""
    x = dataset.x_train[:n_train].reshape(n_train, -1).astype(np.float32)
    means = np.stack([x[dataset.y_train[:n_train] == k].mean(axis=0) for k in range(10)])
    x_test = dataset.x_test[:2000].reshape(2000, -1).astype(np.float32)
    predicted = np.argmin(((x_test[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    return float((predicted == dataset.y_test[:2000]).mean())


def test_synthetic_is_learnable_but_noisy():
    dataset = data.load("mnist", "synthetic", max_train_samples=2000, verbose=False)
    assert nearest_mean_accuracy(dataset, 2000) > 0.9  # the classes are learnable from data
    assert nearest_mean_accuracy(dataset, 10) < 0.6  # one image per class is not enough: real noise


# ---------------------------------------------------------------- arguments, printing, import


@pytest.mark.parametrize("name", ["imagenet", "", "mnist2", None, 3])
def test_unknown_name(name):
    with pytest.raises(ValueError, match="unknown dataset") as info:
        data.load(name, "synthetic", verbose=False)
    assert repr(name) in str(info.value) and "fashion_mnist" in str(info.value)


@pytest.mark.parametrize("source", ["internet", "", "cache"])
def test_unknown_source(source):
    with pytest.raises(ValueError, match="unknown data source") as info:
        data.load("mnist", source, verbose=False)
    assert repr(source) in str(info.value) and "synthetic" in str(info.value)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "10"])
def test_bad_max_train_samples(value):
    with pytest.raises(ValueError, match="max_train_samples") as info:
        data.load("mnist", "synthetic", max_train_samples=value, verbose=False)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("seed", [-1, 1.0, None])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed") as info:
        data.load("mnist", "synthetic", max_train_samples=10, seed=seed, verbose=False)
    assert repr(seed) in str(info.value)


@pytest.mark.parametrize("timeout", [0, -1.0, None, "5", float("inf")])
def test_bad_timeout(timeout):
    with pytest.raises(ValueError, match="timeout") as info:
        data.load("mnist", "synthetic", max_train_samples=10, timeout=timeout, verbose=False)
    assert repr(timeout) in str(info.value)


def test_dir_source_needs_data_dir():
    with pytest.raises(ValueError, match="GPUBENCH_DATA_DIR"):
        data.load("mnist", "dir", verbose=False)


@pytest.mark.parametrize(("given", "expected"), [("Fashion-MNIST", "fashion_mnist"), ("MNIST", "mnist"), ("cifar10", "cifar10")])
def test_name_spellings(given, expected):
    assert data.load(given, "SYNTHETIC", max_train_samples=10, verbose=False).name == expected


def test_verbose_prints_one_data_line(capsys):
    dataset = data.load("mnist", "synthetic", max_train_samples=10)
    assert capsys.readouterr().out == f"Data: {dataset.describe()}\n"
    data.load("mnist", "synthetic", max_train_samples=10, verbose=False)
    assert capsys.readouterr().out == ""


def test_import_is_light():
    code = "import sys, gpubench.data; assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


# ---------------------------------------------------------------- real data


def test_real_fashion_mnist_from_debian_files():
    if not (REAL_FASHION_DIR / "train-images-idx3-ubyte.gz").exists():
        pytest.skip(f"no Fashion-MNIST in {REAL_FASHION_DIR}: `apt install dataset-fashion-mnist` to run this test")
    dataset = data.load("fashion_mnist", source="dir", data_dir=REAL_FASHION_DIR, verbose=False)
    assert dataset.source == "dir" and dataset.name == "fashion_mnist"
    assert dataset.x_train.shape == (60_000, 28, 28) and dataset.x_test.shape == (10_000, 28, 28)
    assert dataset.x_train.dtype == np.uint8 and dataset.y_train.dtype == np.int64
    assert dataset.y_train.min() == 0 and dataset.y_train.max() == 9
    assert np.bincount(dataset.y_train).tolist() == [6000] * 10
    assert np.bincount(dataset.y_test).tolist() == [1000] * 10
    assert dataset.describe() == f"fashion_mnist from directory {REAL_FASHION_DIR}: 60,000 train / 10,000 test images"
