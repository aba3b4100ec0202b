"""MNIST, Fashion-MNIST and CIFAR-10, real or synthetic: `load(name, source)` returns a `Dataset`
from "keras" (the Keras cache), "dir" (a folder of the official files; both read by `files`),
"synthetic", or "auto" (keras, then dir when data_dir is given, then synthetic with a warning)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpubench.params import DATASETS, SOURCES, check_source, positive_int
from gpubench.params import check_dataset as check_name  # the names' rules: params

FACTS = json.loads((Path(__file__).parents[1] / "tables" / "datasets.json").read_text())["datasets"]
CLASS_NAMES = {name: facts["classes"] for name, facts in FACTS.items()}
# Synthetic images: a class prototype (grey levels on block x block pixels, +-contrast/2) blended
# with up to `mix` of another class's, plus uniform noise of std `noise`. Blocks survive
# convolution and pooling, so every book model learns the classes in the quick profile.
SYNTHETIC = {"contrast": 60.0, "noise": 80.0, "mix": 0.3, "block": 4, "chunk": 2000}
WARNED: set[str] = set()  # datasets whose synthetic-data warning this process has shown


def shown(text: str) -> str:
    """`text` with the home folder written as ~, so notebook outputs carry no user's path."""
    return text.replace(str(Path.home()) + os.sep, "~" + os.sep)


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
    verified: bool | None = None  # official files (True), unknown files (False), synthetic

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
        if candidate == "synthetic":
            origin, arrays, verified = synthetic(name, max_train_samples, seed)
        else:
            from gpubench.data import files  # noqa: PLC0415 - the official files: real data
            try:  # only "auto" goes on to the next source, after noting why this one failed
                origin, arrays, verified = (files.load_keras(name) if candidate == "keras"
                                            else files.load_dir(name, data_dir))
            except (files.DataUnavailable, files.DataError) as exc:
                if source != "auto" or isinstance(exc, files.WrongDataset):  # never hidden
                    raise
                reasons.append(f"{candidate}: {exc}")
                continue
        x_train, y_train, x_test, y_test = arrays
        if max_train_samples is not None:  # a copy, so the full arrays are freed
            x_train, y_train = (a[:max_train_samples].copy() for a in (x_train, y_train))
        dataset = Dataset(name, candidate, str(origin), x_train, y_train, x_test, y_test,
                          "; ".join(reasons) or None, verified)
        if verbose:
            announce(dataset)
        return dataset
    raise AssertionError("unreachable: the synthetic source never fails")


def announce(dataset: Dataset) -> None:
    """Print the data line, after a warning (synthetic data: once per dataset, in a box)."""
    ipython = sys.modules.get("IPython")  # only when already loaded: never import it here
    first = dataset.name not in WARNED
    if dataset.synthetic:
        WARNED.add(dataset.name)
    if first and dataset.synthetic and getattr(ipython and ipython.get_ipython(), "kernel", None):
        from IPython.display import Markdown, display  # noqa: PLC0415
        why = shown(dataset.note or 'source="synthetic" was asked for')
        display(Markdown(
            f"> **⚠ Synthetic data** — generated images, not the real {dataset.name}: "
            "timings are valid, accuracy says nothing about the real dataset.\n>\n> Why: "
            f"{why}.\n>\n> For the real data: go online once (Keras caches the files), or "
            "pass `data_dir` a folder holding the official files."))
    elif dataset.note and (first or not dataset.synthetic):
        using = ("SYNTHETIC DATA, not the real dataset" if dataset.synthetic
                 else f"the {dataset.source} source")
        print(f"WARNING: {dataset.name}: using {using}, because {shown(dataset.note)}")
    print(f"Data: {dataset.describe()}")


def synthetic(name: str, max_train_samples: int | None, seed: int) -> tuple[str, tuple, None]:
    """(origin, arrays, None): seeded images, one block pattern per class, blended and noisy."""
    rng = np.random.default_rng([seed, 2, DATASETS.index(name)])
    facts, block = FACTS[name], SYNTHETIC["block"]
    height, width, *channels = facts["image"]
    size = (len(facts["classes"]), height // block, width // block, *channels)
    pattern = rng.uniform(-0.5, 0.5, size=size).repeat(block, axis=1).repeat(block, axis=2)
    prototypes = (127.5 + SYNTHETIC["contrast"] * pattern).astype(np.float32)
    n_train = min(facts["train"], max_train_samples or facts["train"])
    arrays = (*_synthetic_split(name, prototypes, n_train, seed, 0),
              *_synthetic_split(name, prototypes, facts["test"], seed, 1))
    return f"synthetic (seed {seed}), class-conditional prototypes plus noise", arrays, None


def _synthetic_split(name: str, prototypes: np.ndarray, n: int, seed: int, split: int):
    """`n` labelled images, seeded per chunk so that the first N are the same whatever `n`."""
    chunk, shape, classes = SYNTHETIC["chunk"], prototypes.shape[1:], len(prototypes)
    x, y = np.empty((n, *shape), dtype=np.uint8), np.empty(n, dtype=np.int64)
    for start in range(0, n, chunk):
        rng = np.random.default_rng([seed, split, start // chunk, DATASETS.index(name)])
        labels = rng.permuted(np.tile(np.arange(classes), (chunk // classes, 1)), axis=1).ravel()
        others = (labels + rng.integers(1, classes, size=chunk)) % classes
        mix = rng.uniform(0, SYNTHETIC["mix"], size=(chunk, *[1] * len(shape))).astype(np.float32)
        noise = rng.random((chunk, *shape), dtype=np.float32) - 0.5  # uniform: 7x faster
        noise *= SYNTHETIC["noise"] * np.sqrt(12.0)  # a uniform of this width has that std
        images = noise + (prototypes[labels] + mix * (prototypes[others] - prototypes[labels]))
        stop = min(n, start + chunk)
        x[start:stop] = np.clip(images[: stop - start], 0, 255)
        y[start:stop] = labels[: stop - start]
    return x, y
