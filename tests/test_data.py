"""gpubench.data: the official file formats, the Keras source, auto and synthetic data, the warnings."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import socket
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from conftest import FASHION_DIR, REPO
from gpubench import data
from gpubench.data import files
from gpubench.data.files import DataError, DataUnavailable, WrongDataset

# ---------------------------------------------------------------- fixtures and writers


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """Every test gets its own empty Keras cache, and download URLs that point at nothing."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    www = tmp_path / "www"
    www.mkdir()
    monkeypatch.setattr(files, "URL", {"mnist": www.as_uri() + "/mnist.npz",
                                       "fashion_mnist": www.as_uri() + "/",
                                       "cifar10": www.as_uri() + "/cifar-10-python.tar.gz"})
    monkeypatch.setattr(data, "WARNED", set())  # each test starts as a fresh process would
    return www  # files put here can be "downloaded"


def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "keras_home" / "datasets"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def idx_bytes(array: np.ndarray, magic: int | None = None) -> bytes:
    """An IDX file of unsigned bytes holding `array`."""
    magic = 0x800 + array.ndim if magic is None else magic
    return struct.pack(f">I{array.ndim}I", magic, *array.shape) + array.astype(np.uint8).tobytes()


def write_file(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(content) if path.name.endswith(".gz") else content)
    return path


def make_arrays(n_train: int = 50, n_test: int = 20, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
            "y_train": rng.integers(0, 10, n_train).astype(np.uint8),
            "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
            "y_test": rng.integers(0, 10, n_test).astype(np.uint8)}


IDX = dict(zip(("x_train", "y_train", "x_test", "y_test"), files.IDX_FILES, strict=True))


def idx_name(key: str, gz: bool = True) -> str:
    return IDX[key] + (".gz" if gz else "")


def write_idx_dir(folder: Path, gz: bool = True, **kwargs) -> dict[str, np.ndarray]:
    arrays = make_arrays(**kwargs)
    for key, array in arrays.items():
        write_file(folder / idx_name(key, gz), idx_bytes(array))
    return arrays


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path


def assert_same(dataset: data.Dataset, arrays: dict[str, np.ndarray]) -> None:
    for key, expected in arrays.items():
        np.testing.assert_array_equal(getattr(dataset, key), expected)
    assert dataset.x_train.dtype == np.uint8 and dataset.y_train.dtype == np.int64
    assert dataset.y_test.dtype == np.int64


class Py2Pickler(pickle._Pickler):
    """Writes str and bytes as Python 2 byte strings, as in the real CIFAR-10 batches."""

    def save_str8(self, obj):
        raw = obj.encode("latin1") if isinstance(obj, str) else obj
        self.write(pickle.BINSTRING + struct.pack("<i", len(raw)) + raw)
        self.memoize(obj)

    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[bytes] = save_str8
    dispatch[str] = save_str8


def cifar_batches(n: int = 10) -> dict[str, tuple[np.ndarray, list[int]]]:
    rng = np.random.default_rng(1)
    return {b: (rng.integers(0, 256, (n, 3072), dtype=np.uint8), [int(v) for v in rng.integers(0, 10, n)])
            for b in files.CIFAR10_BATCHES}


def cifar_pickle(pixels: np.ndarray, labels: list[int], style: str = "py2") -> bytes:
    """A batch pickled like the real files (Python 2, numpy 1 names), or by today's pickle."""
    batch = {b"batch_label": b"x", b"labels": labels, b"data": pixels, b"filenames": [b"x.png"] * len(labels)}
    if style == "py3":
        return pickle.dumps(batch, protocol=4)
    buffer = io.BytesIO()
    Py2Pickler(buffer, protocol=2).dump(batch)
    content = buffer.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
    assert b"cnumpy.core.multiarray\n_reconstruct\n" in content
    return content


def write_cifar_folder(folder: Path, style: str = "py2") -> dict:
    batches = cifar_batches()
    for name, (pixels, labels) in batches.items():
        write_file(folder / name, cifar_pickle(pixels, labels, style))
    return batches


def write_cifar_archive(path: Path, damage: str | None = None) -> dict:
    batches = cifar_batches()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, (pixels, labels) in batches.items():
            content = cifar_pickle(pixels, labels)
            if name == damage:
                content = b"garbage" + content[7:]
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return batches


def assert_cifar(dataset: data.Dataset, batches: dict) -> None:
    (train_pixels, train_labels), (pixels, labels) = batches["data_batch_2"], batches["test_batch"]
    assert dataset.x_train.shape == (50, 32, 32, 3) and dataset.x_test.shape == (10, 32, 32, 3)
    assert dataset.x_train.dtype == np.uint8 and dataset.y_train.dtype == np.int64
    np.testing.assert_array_equal(dataset.y_train[10:20], train_labels)
    np.testing.assert_array_equal(dataset.y_test, labels)
    # Row layout: 1024 red, 1024 green, 1024 blue, each row-major 32x32.
    for i, row, col, channel in [(0, 0, 0, 0), (3, 5, 7, 1), (9, 31, 30, 2)]:
        assert dataset.x_test[i, row, col, channel] == pixels[i, channel * 1024 + row * 32 + col]
    assert dataset.x_train[10, 2, 3, 1] == train_pixels[0, 1024 + 2 * 32 + 3]


def error(name: str, source: str, data_dir: Path | None = None) -> str:
    """The DataError message of loading `name` from `source`."""
    with pytest.raises(DataError) as info:
        data.load(name, source, data_dir=data_dir, verbose=False)
    return str(info.value)


# ---------------------------------------------------------------- IDX files and mnist.npz (source="dir")


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "raw"])
def test_idx_dir_loads_exact_content(tmp_path, gz):
    arrays = write_idx_dir(tmp_path / "d", gz=gz)
    dataset = data.load("mnist", "dir", data_dir=tmp_path / "d", verbose=False)
    assert_same(dataset, arrays)
    assert dataset.source == "dir" and dataset.origin == str(tmp_path / "d") and dataset.note is None


@pytest.mark.parametrize(("name", "sub"), [("mnist", "mnist"), ("Fashion-MNIST", "fashion-mnist")])
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
def test_idx_truncated_file_is_named(tmp_path, extra):
    write_idx_dir(tmp_path)
    content = idx_bytes(make_arrays()["x_train"])
    damaged = content[:extra] if extra < 0 else content + bytes(extra)
    path = write_file(tmp_path / idx_name("x_train"), damaged)
    message = error("mnist", "dir", tmp_path)
    assert str(path) in message and "truncated" in message and "re-download" in message
    assert f"{50 * 784 + extra:,}" in message and f"{50 * 784:,}" in message


@pytest.mark.parametrize("damage", ["bad_crc", "not_gzip", "truncated_stream"])
def test_corrupt_gzip_is_named(tmp_path, damage):
    write_idx_dir(tmp_path)
    path = tmp_path / idx_name("y_test")
    good = path.read_bytes()
    bad = {"bad_crc": good[:-8] + bytes([good[-8] ^ 0xFF]) + good[-7:],
           "not_gzip": b"this is not gzip at all, just text" * 3,
           "truncated_stream": good[: len(good) // 2]}[damage]
    path.write_bytes(bad)
    message = error("mnist", "dir", tmp_path)
    assert str(path) in message and "corrupt" in message


def test_label_file_used_as_image_file(tmp_path):
    arrays = write_idx_dir(tmp_path)
    path = write_file(tmp_path / idx_name("x_test"), idx_bytes(arrays["y_test"]))
    message = error("mnist", "dir", tmp_path)
    assert str(path) in message and "label file used as an image file" in message
    assert "0x00000801" in message and "0x00000803" in message


def test_image_and_label_count_mismatch_names_both_files(tmp_path):
    arrays = write_idx_dir(tmp_path)
    labels = write_file(tmp_path / idx_name("y_train"), idx_bytes(arrays["y_train"][:49]))
    message = error("mnist", "dir", tmp_path)
    assert str(labels) in message and str(tmp_path / idx_name("x_train")) in message
    assert "50 images" in message and "49 labels" in message


@pytest.mark.parametrize(("bad", "expected"), [(np.full(20, 10), "label 10 at index 0"),
                                               (np.zeros((20, 27, 28)), "27x28")])
def test_bad_labels_and_image_sizes_are_named(tmp_path, bad, expected):
    write_idx_dir(tmp_path)
    path = write_file(tmp_path / idx_name("y_test" if bad.ndim == 1 else "x_test"), idx_bytes(bad))
    message = error("mnist", "dir", tmp_path)
    assert str(path) in message and expected in message


def test_missing_files_are_named_with_the_expected_layout(tmp_path):
    write_idx_dir(tmp_path)
    (tmp_path / idx_name("y_test")).unlink()
    message = error("fashion_mnist", "dir", tmp_path)
    missing, layout = message.split("Expected layout")
    assert IDX["y_test"] in missing and IDX["x_test"] not in missing
    assert str(tmp_path / "fashion-mnist") in missing and "train-images-idx3-ubyte" in layout
    empty = tmp_path / "empty"
    empty.mkdir()
    message = error("mnist", "dir", empty)
    assert all(base in message for base in files.IDX_FILES) and "mnist.npz" in message


def test_data_dir_that_does_not_exist(tmp_path):
    assert "not a directory" in error("mnist", "dir", tmp_path / "nowhere")


def test_bad_npz_is_named(tmp_path):
    path = write_npz(tmp_path / "mnist.npz", {"x_train": np.zeros((2, 28, 28), np.uint8)})
    message = error("mnist", "dir", tmp_path)
    assert str(path) in message and "y_train" in message


def need_fashion_mnist() -> None:
    if not (FASHION_DIR / "train-images-idx3-ubyte.gz").exists():
        pytest.skip(f"no Fashion-MNIST in {FASHION_DIR}: `apt install dataset-fashion-mnist` (.ci/run does)")


def test_real_fashion_mnist_idx_files():
    need_fashion_mnist()
    dataset = data.load("fashion_mnist", source="dir", data_dir=FASHION_DIR, verbose=False)
    assert dataset.source == "dir" and dataset.name == "fashion_mnist" and dataset.origin == str(FASHION_DIR)
    assert dataset.x_train.shape == (60_000, 28, 28) and dataset.x_test.shape == (10_000, 28, 28)
    assert np.bincount(dataset.y_train).tolist() == [6000] * 10
    assert np.bincount(dataset.y_test).tolist() == [1000] * 10
    assert 50 < dataset.x_test.mean() < 100  # mostly black background, not noise
    assert dataset.verified is True
    assert dataset.describe() == (f"fashion_mnist from directory {FASHION_DIR}: "
                                  "60,000 train / 10,000 test images "
                                  "(official files, checksums verified)")


# ---------------------------------------------------------------- which dataset the files are


def fashion_files(folder: Path, form: str) -> Path:
    """The real Fashion-MNIST files in `folder`: as installed ("gz"), or decompressed ("raw")."""
    folder.mkdir(parents=True, exist_ok=True)
    for base in files.IDX_FILES:
        source = FASHION_DIR / f"{base}.gz"
        if form == "gz":
            (folder / source.name).symlink_to(source)
        else:
            (folder / base).write_bytes(gzip.decompress(source.read_bytes()))
    return folder


@pytest.mark.parametrize("form", ["gz", "raw"])
def test_fashion_mnist_files_asked_as_mnist_is_an_error_naming_both(tmp_path, form):
    need_fashion_mnist()
    folder = fashion_files(tmp_path / "data", form)
    for source in ("dir", "auto"):  # auto must not fall back to synthetic data here
        with pytest.raises(WrongDataset) as info:
            data.load("mnist", source, data_dir=folder, verbose=False)
        assert str(info.value) == (f"dataset 'mnist' asked for, but the files in {folder} are "
                                   "Fashion-MNIST's; use dataset=\"fashion_mnist\" "
                                   "(or GPUBENCH_DATASET=fashion_mnist)")


@pytest.mark.parametrize("form", ["gz", "raw"])
def test_fashion_mnist_files_asked_as_fashion_mnist_are_verified(tmp_path, form, capsys):
    need_fashion_mnist()
    folder = fashion_files(tmp_path / "data", form)
    dataset = data.load("fashion_mnist", "dir", data_dir=folder, max_train_samples=100)
    assert dataset.verified is True and dataset.x_test.shape == (10_000, 28, 28)
    assert capsys.readouterr().out == (f"Data: fashion_mnist from directory {folder}: 100 train / "
                                       "10,000 test images (official files, checksums verified)\n")


def test_fashion_mnist_gzipped_again_is_recognised_by_its_content(tmp_path):
    need_fashion_mnist()
    folder = fashion_files(tmp_path / "raw", "raw")
    for path in list(folder.iterdir()):  # another level and time than Debian's: new .gz bytes
        (folder / f"{path.name}.gz").write_bytes(gzip.compress(path.read_bytes(), compresslevel=1))
        path.unlink()
    assert sha256(folder / idx_name("y_test")) != sha256(FASHION_DIR / idx_name("y_test"))
    assert data.load("fashion_mnist", "dir", data_dir=folder, verbose=False).verified is True


def test_one_changed_file_is_not_verified(tmp_path):
    need_fashion_mnist()
    folder = fashion_files(tmp_path / "data", "gz")
    labels = np.frombuffer(gzip.decompress((FASHION_DIR / idx_name("y_test")).read_bytes())[8:],
                           dtype=np.uint8)
    (folder / idx_name("y_test")).unlink()
    write_file(folder / idx_name("y_test"), idx_bytes(np.roll(labels, 1)))
    dataset = data.load("fashion_mnist", "dir", data_dir=folder, verbose=False)
    assert dataset.verified is False and "checksums not recognised" in dataset.describe()


def test_the_other_dataset_in_data_dir_is_passed_over_for_a_subfolder(tmp_path):
    need_fashion_mnist()
    fashion_files(tmp_path, "gz")  # data_dir itself holds Fashion-MNIST
    arrays = write_idx_dir(tmp_path / "mnist")  # unknown files where MNIST's would be
    dataset = data.load("mnist", "dir", data_dir=tmp_path, verbose=False)
    assert dataset.origin == str(tmp_path / "mnist") and dataset.verified is False
    assert_same(dataset, arrays)


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "raw"])
def test_unknown_files_are_loaded_and_said_unverified(tmp_path, gz, capsys):
    arrays = write_idx_dir(tmp_path / "d", gz=gz)
    dataset = data.load("fashion_mnist", "dir", data_dir=tmp_path / "d")
    assert_same(dataset, arrays)
    assert dataset.verified is False
    assert capsys.readouterr().out.endswith(
        "50 train / 20 test images (checksums not recognised: not verified to be the official "
        "files)\n")


def test_keras_cache_is_identified_by_checksum(tmp_path):
    need_fashion_mnist()
    fashion_files(cache_dir(tmp_path) / "fashion-mnist", "gz")  # as keras.datasets leaves them
    dataset = data.load("fashion_mnist", "keras", max_train_samples=10, verbose=False)
    assert dataset.source == "keras" and dataset.verified is True
    assert "(official files, checksums verified)" in dataset.describe()


def test_keras_cache_holding_the_other_dataset_is_an_error(tmp_path, monkeypatch):
    folder = cache_dir(tmp_path) / "fashion-mnist"
    write_idx_dir(folder)
    table = dict(files.OFFICIAL_SHA256)
    fake = {sha256(folder / f"{base}.gz"): ("mnist", base) for base in files.IDX_FILES}
    monkeypatch.setattr(files, "OFFICIAL_SHA256", table | fake)  # these files are "MNIST's" now
    for source in ("keras", "auto"):
        with pytest.raises(WrongDataset) as info:
            data.load("fashion_mnist", source, verbose=False)
        assert str(info.value) == (f"dataset 'fashion_mnist' asked for, but the files in {folder} "
                                   "are MNIST's; use dataset=\"mnist\" (or GPUBENCH_DATASET=mnist)")
    # One file of the other dataset among unknown ones: that file is named.
    label_file = folder / idx_name("y_test")
    one = {sha256(label_file): ("mnist", IDX["y_test"])}
    monkeypatch.setattr(files, "OFFICIAL_SHA256", table | one)
    with pytest.raises(WrongDataset) as info:
        data.load("fashion_mnist", "keras", verbose=False)
    assert f"but {label_file} is MNIST's" in str(info.value)


def test_official_checksum_table():
    sums = files.OFFICIAL_SHA256
    assert all(len(s) == 64 and int(s, 16) >= 0 for s in sums)
    for name in ("mnist", "fashion_mnist"):  # each IDX file by its decompressed bytes
        assert sorted(base for dataset, base in sums.values() if dataset == name) == sorted(
            [*files.IDX_FILES] + (["mnist.npz"] if name == "mnist" else []))
    assert sums[files.KERAS_SHA256["mnist"]] == ("mnist", "mnist.npz")
    assert sums[files.KERAS_SHA256["cifar10"]] == ("cifar10", files.CIFAR10_ARCHIVE)


# ---------------------------------------------------------------- CIFAR-10 (source="dir")


@pytest.mark.parametrize("style", ["py2", "py3"])
@pytest.mark.parametrize("where", ["cifar10/cifar-10-batches-py", "cifar-10-batches-py"])
def test_cifar_batches_folder(tmp_path, style, where):
    batches = write_cifar_folder(tmp_path / where, style)
    dataset = data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert_cifar(dataset, batches)
    assert dataset.origin == str(tmp_path / where)


def test_cifar_archive_is_read_without_extracting(tmp_path):
    batches = write_cifar_archive(tmp_path / "cifar-10-python.tar.gz")
    dataset = data.load("cifar10", "dir", data_dir=tmp_path, verbose=False)
    assert_cifar(dataset, batches)
    assert dataset.origin == str(tmp_path / "cifar-10-python.tar.gz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar-10-python.tar.gz", "www"]


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
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": RunsCommand(f"touch {marker}")}, protocol=4))
    message = error("cifar10", "dir", tmp_path)
    assert str(folder / "test_batch") in message and "refused" in message and "system" in message
    assert not marker.exists()


@pytest.mark.parametrize("problem", ["truncated", "wrong_shape", "bad_label", "no_labels"])
def test_cifar_bad_batch_is_named(tmp_path, problem):
    folder = tmp_path / "cifar-10-batches-py"
    pixels, labels = write_cifar_folder(folder)["data_batch_3"]
    batch = {b"data": pixels, b"labels": labels}
    if problem == "wrong_shape":
        batch[b"data"] = pixels[:, :3000]
    elif problem == "bad_label":
        batch[b"labels"] = [*labels[:-1], 12]
    elif problem == "no_labels":
        del batch[b"labels"]
    content = pickle.dumps(batch, protocol=4)
    (folder / "data_batch_3").write_bytes(content[: len(content) // 2] if problem == "truncated" else content)
    assert str(folder / "data_batch_3") in error("cifar10", "dir", tmp_path)


def test_cifar_damaged_archive_is_named(tmp_path):
    archive = tmp_path / "cifar-10-python.tar.gz"
    write_cifar_archive(archive, damage="data_batch_2")
    message = error("cifar10", "dir", tmp_path)
    assert str(archive) in message and "data_batch_2" in message
    write_cifar_archive(archive)
    archive.write_bytes(archive.read_bytes()[:-200])
    assert str(archive) in error("cifar10", "dir", tmp_path)


def test_cifar_missing_batch_or_nothing_found(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar_folder(folder)
    (folder / "data_batch_5").unlink()
    message = error("cifar10", "dir", tmp_path)
    assert str(folder) in message and "data_batch_5" in message
    message = error("cifar10", "dir", folder / "data_batch_1")  # a file, not a folder
    assert "not a directory" in message
    (tmp_path / "empty").mkdir()
    message = error("cifar10", "dir", tmp_path / "empty")
    assert "Expected layout" in message and "cifar-10-python.tar.gz" in message


# ---------------------------------------------------------------- source="keras": get_file, cache and hash


def test_keras_download_lands_in_the_keras_cache_and_is_reused(tmp_path, monkeypatch, offline):
    arrays = make_arrays()
    served = write_npz(offline / "mnist.npz", arrays)
    monkeypatch.setitem(files.KERAS_SHA256, "mnist", sha256(served))
    dataset = data.load("mnist", "keras", verbose=False)
    cached = cache_dir(tmp_path) / "mnist.npz"
    assert_same(dataset, arrays)
    assert dataset.source == "keras" and dataset.origin == str(cached) and sha256(cached) == sha256(served)
    assert dataset.verified is False  # the served file is not the official mnist.npz
    assert dataset.describe() == (f"mnist from keras cache {cached}: 50 train / 20 test images "
                                  "(checksums not recognised: not verified to be the official "
                                  "files)")
    served.unlink()  # now the cache alone must do
    assert_same(data.load("mnist", "keras", verbose=False), arrays)


def test_keras_download_with_wrong_hash_is_an_error_and_kept_nowhere(tmp_path, offline):
    write_npz(offline / "mnist.npz", make_arrays())
    message = error("mnist", "keras")
    assert files.URL["mnist"] in message and "sha256" in message and files.KERAS_SHA256["mnist"] in message
    assert list(cache_dir(tmp_path).iterdir()) == []


def test_keras_cached_file_with_wrong_hash_is_not_trusted(tmp_path, monkeypatch, offline):
    write_npz(cache_dir(tmp_path) / "mnist.npz", make_arrays(seed=1))  # stale or damaged copy
    good = make_arrays(seed=2)
    monkeypatch.setitem(files.KERAS_SHA256, "mnist", sha256(write_npz(offline / "mnist.npz", good)))
    assert_same(data.load("mnist", "keras", verbose=False), good)  # downloaded again


def test_keras_download_failure_names_the_url(tmp_path):
    with pytest.raises(DataUnavailable) as info:
        data.load("mnist", "keras", verbose=False)
    assert files.URL["mnist"] in str(info.value) and 'source="dir"' in str(info.value)
    assert list(cache_dir(tmp_path).iterdir()) == []


def test_keras_download_times_out(monkeypatch):
    with socket.socket() as server:  # accepts connections (via the backlog), never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/cifar-10-python.tar.gz"
        monkeypatch.setitem(files.URL, "cifar10", url)
        monkeypatch.setattr(files, "DOWNLOAD_TIMEOUT", 1.0)
        with pytest.raises(DataUnavailable, match="timed out") as info:
            data.load("cifar10", "keras", verbose=False)
    assert url in str(info.value) and socket.getdefaulttimeout() is None


def test_keras_fashion_mnist_and_cifar10_use_keras_file_names(tmp_path, monkeypatch, offline):
    arrays = write_idx_dir(offline)
    dataset = data.load("fashion_mnist", "keras", verbose=False)
    assert_same(dataset, arrays)
    assert dataset.origin == str(cache_dir(tmp_path) / "fashion-mnist")
    batches = write_cifar_archive(offline / "cifar-10-python.tar.gz")
    monkeypatch.setitem(files.KERAS_SHA256, "cifar10", sha256(offline / "cifar-10-python.tar.gz"))
    assert_cifar(data.load("cifar10", "keras", verbose=False), batches)
    assert (cache_dir(tmp_path) / "cifar-10-batches-py-target_archive").is_file()


def test_keras_cached_truncated_idx_is_named(tmp_path):
    folder = cache_dir(tmp_path) / "fashion-mnist"
    write_idx_dir(folder)
    path = folder / idx_name("x_train")
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:-1]))
    message = error("fashion_mnist", "keras")
    assert str(path) in message and "truncated" in message


# ---------------------------------------------------------------- source="auto"


def test_auto_offline_falls_back_to_synthetic_with_a_warning_once(capsys):
    dataset = data.load("cifar10", max_train_samples=100)
    assert dataset.source == "synthetic" and dataset.synthetic and dataset.verified is None
    assert files.URL["cifar10"] in dataset.note and "dir: not tried" in dataset.note
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("Downloading")]
    assert len(lines) == 2 and lines[0].startswith("WARNING:") and "SYNTHETIC DATA" in lines[0]
    assert lines[1] == f"Data: {dataset.describe()}" and "SYNTHETIC DATA" in lines[1]
    # The same dataset again in this process: the data line alone, which still says SYNTHETIC.
    again = data.load("cifar10", max_train_samples=100)
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if not line.startswith("Downloading")] == [
        f"Data: {again.describe()}"]
    data.load("mnist", max_train_samples=100)  # another dataset: its own warning
    assert "WARNING: mnist: using SYNTHETIC DATA" in capsys.readouterr().out


def test_auto_uses_data_dir_when_keras_fails(tmp_path, capsys):
    arrays = write_idx_dir(tmp_path / "data" / "mnist")
    dataset = data.load("mnist", None, data_dir=tmp_path / "data")
    assert dataset.source == "dir" and "keras" in dataset.note
    assert_same(dataset, arrays)
    assert capsys.readouterr().out.splitlines()[-1] == f"Data: {dataset.describe()}"


def test_printed_lines_show_the_home_folder_as_tilde(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))  # the Keras cache and the data are under "home" now
    write_idx_dir(tmp_path / "data" / "mnist")
    dataset = data.load("mnist", data_dir=tmp_path / "data")
    out = capsys.readouterr().out
    assert dataset.origin == str(tmp_path / "data" / "mnist")  # the record keeps the full path
    assert "into ~/keras_home/datasets" in out and "from directory ~/data/mnist:" in out
    assert str(tmp_path) not in out.replace(files.URL["mnist"], "")  # (the test's URL is a file:// URL)


def test_auto_prefers_the_keras_cache(tmp_path, monkeypatch, capsys):
    arrays = make_arrays(seed=5)
    monkeypatch.setitem(files.KERAS_SHA256, "mnist", sha256(write_npz(cache_dir(tmp_path) / "mnist.npz", arrays)))
    write_idx_dir(tmp_path / "data")
    dataset = data.load("mnist", "auto", data_dir=tmp_path / "data", verbose=False)
    assert dataset.source == "keras" and dataset.note is None
    assert_same(dataset, arrays)
    assert capsys.readouterr().out == ""


def test_auto_broken_file_is_shown_even_when_a_later_source_works(tmp_path, capsys):
    write_idx_dir(tmp_path / "data")
    bad = tmp_path / "data" / idx_name("x_test")
    bad.write_bytes(b"junk")
    dataset = data.load("mnist", "auto", data_dir=tmp_path / "data", max_train_samples=10)
    assert dataset.source == "synthetic" and str(bad) in dataset.note
    assert str(bad) in capsys.readouterr().out


# ---------------------------------------------------------------- source="synthetic"


@pytest.mark.parametrize(("name", "shape", "n_train"),
                         [("mnist", (28, 28), 60_000), ("cifar10", (32, 32, 3), 50_000)])
def test_synthetic_shapes_dtypes_and_balance(name, shape, n_train):
    dataset = data.load(name, "synthetic", verbose=False)
    assert dataset.x_train.shape == (n_train, *shape) and dataset.x_test.shape == (10_000, *shape)
    assert dataset.x_train.dtype == np.uint8 and dataset.y_train.dtype == np.int64
    assert np.bincount(dataset.y_train).tolist() == [n_train // 10] * 10
    assert np.bincount(dataset.y_test).tolist() == [1000] * 10
    assert dataset.source == "synthetic" and dataset.note is None and "seed 0" in dataset.origin
    assert dataset.describe().startswith("SYNTHETIC DATA, not the real")


def test_synthetic_is_deterministic_per_seed_and_a_prefix_of_the_full_set():
    a = data.load("mnist", "synthetic", max_train_samples=2345, seed=3, verbose=False)
    full = data.load("mnist", "synthetic", seed=3, verbose=False)
    other = data.load("mnist", "synthetic", max_train_samples=2345, seed=4, verbose=False)
    np.testing.assert_array_equal(a.x_train, full.x_train[:2345])
    np.testing.assert_array_equal(a.y_train, full.y_train[:2345])
    np.testing.assert_array_equal(a.x_test, full.x_test)
    assert not np.array_equal(a.x_train, other.x_train) and not np.array_equal(a.x_test, other.x_test)
    assert np.bincount(a.y_train[:2340]).tolist() == [234] * 10


def nearest_mean_accuracy(dataset: data.Dataset, n_train: int, pool: int = 1) -> float:
    """Test accuracy of the nearest class mean of the first n_train training images (pool x pool averaged)."""
    def features(x: np.ndarray) -> np.ndarray:
        x = x.reshape(len(x), x.shape[1] // pool, pool, x.shape[2] // pool, pool, -1).astype(np.float32)
        return x.mean(axis=(2, 4)).reshape(len(x), -1)
    x, x_test = features(dataset.x_train[:n_train]), features(dataset.x_test[:2000])
    means = np.stack([x[dataset.y_train[:n_train] == k].mean(axis=0) for k in range(10)])
    predicted = np.argmin(((x_test[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    return float((predicted == dataset.y_test[:2000]).mean())


@pytest.mark.parametrize("name", ["mnist", "cifar10"])
def test_synthetic_labels_are_learnable_but_the_images_noisy(name):
    dataset = data.load(name, "synthetic", max_train_samples=2000, verbose=False)
    assert nearest_mean_accuracy(dataset, 2000) > 0.9  # the labels mean something
    assert nearest_mean_accuracy(dataset, 10) < 0.6  # one image per class is not enough
    # The classes survive 4x4 pooling, so the CNNs learn them in the quick profile too
    # (per-pixel patterns gave 0.35 here, and Mnist_CNN stayed at chance).
    assert nearest_mean_accuracy(dataset, 2000, pool=4) > 0.9
    shuffled = data.Dataset(name, "synthetic", "", dataset.x_train, np.roll(dataset.y_train, 1),
                            dataset.x_test, dataset.y_test)
    assert nearest_mean_accuracy(shuffled, 2000) < 0.2  # wrong labels learn nothing


# ---------------------------------------------------------------- the synthetic-data warning


def test_outside_ipython_the_warning_is_plain_text(capsys):
    dataset = data.load("mnist", "synthetic", max_train_samples=10)
    assert capsys.readouterr().out == f"Data: {dataset.describe()}\n"
    data.load("mnist", "synthetic", max_train_samples=10, verbose=False)
    assert capsys.readouterr().out == ""


def test_in_a_jupyter_kernel_the_warning_is_a_markdown_box(cpu_kernel):
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name=cpu_kernel, cwd=str(REPO))
    outputs = []
    try:
        code = "import gpubench.data\nd = gpubench.data.load('mnist', 'synthetic', max_train_samples=10)"
        for _ in range(2):  # a second load, or the cell run again: no second box
            client.execute_interactive(code, timeout=120,
                                       output_hook=lambda msg: outputs.append(msg))
        client.execute_interactive("gpubench.data.load('mnist', 'dir', data_dir='/nowhere')", timeout=60,
                                   output_hook=lambda msg: outputs.append(msg))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    boxes = [m["content"]["data"] for m in outputs if m["msg_type"] == "display_data"]
    text = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream")
    assert len(boxes) == 1 and boxes[0]["text/markdown"].startswith("> **⚠ Synthetic data**")
    assert "not the real mnist" in boxes[0]["text/markdown"]
    assert text.count("Data: SYNTHETIC DATA, not the real mnist dataset") == 2


# ---------------------------------------------------------------- arguments and import


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"name": "imagenet"}, "'imagenet'"), ({"name": None}, "None"), ({"source": "internet"}, "'internet'"),
    ({"max_train_samples": 0}, "max_train_samples"), ({"max_train_samples": "10"}, "'10'"),
    ({"seed": -1}, "seed"), ({"source": "dir"}, "GPUBENCH_DATA_DIR"),
])
def test_bad_arguments_are_named(kwargs, named):
    args = {"name": "mnist", "source": "synthetic", "max_train_samples": 10} | kwargs
    with pytest.raises(ValueError) as info:
        data.load(**args, verbose=False)
    assert named in str(info.value) and not isinstance(info.value, DataError)


def test_names_and_sources_are_normalised():
    assert data.check_name("Fashion-MNIST") == "fashion_mnist" and data.check_source(None) == "auto"
    assert data.load("MNIST", "SYNTHETIC", max_train_samples=10, verbose=False).name == "mnist"
    assert set(data.CLASS_NAMES) == set(data.DATASETS) and data.SOURCES[0] == "auto"


def test_import_is_light():
    code = "import sys, gpubench.data; assert not {'tensorflow', 'keras', 'IPython'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
