"""The official files' SHA-256 sums, and identifying files by them: this dataset's official
files (verified), no known files (unverified), or another dataset's (WrongDataset)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from gpubench.data.datasets import CIFAR10_ARCHIVE, IDX_FILES, TITLES, WrongDataset

# What keras.datasets.mnist and .cifar10 check their downloads against.
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
CIFAR10_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"

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


def sha256(content: bytes) -> str:
    """The SHA-256 of `content`, in hex."""
    return hashlib.sha256(content).hexdigest()


def verified(name: str, where: Path, sums: dict[str, set[str]],
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

