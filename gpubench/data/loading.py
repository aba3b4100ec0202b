"""`load`: a dataset from the source asked for ("auto" tries keras, then dir, then synthetic),
then the data line it prints, after a warning when an earlier source failed or the data is
synthetic (a Markdown box in a Jupyter kernel, once per process and dataset)."""

from __future__ import annotations

import os
import sys

from gpubench.data import sources
from gpubench.data.datasets import DataError, Dataset, DataUnavailable, WrongDataset, shown
from gpubench.params import check_dataset as check_name  # the names' rules: params
from gpubench.params import check_source, positive_int


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
                sources.synthetic(name, max_train_samples, seed) if candidate == "synthetic"
                else sources.load_keras(name) if candidate == "keras"
                else sources.load_dir(name, data_dir))
        except (DataUnavailable, DataError) as exc:
            if source != "auto" or isinstance(exc, WrongDataset):  # another dataset: never hidden
                raise
            reasons.append(f"{candidate}: {exc}")
            continue
        if max_train_samples is not None:  # a copy, so the full arrays are freed
            x_train = x_train[:max_train_samples].copy()
            y_train = y_train[:max_train_samples].copy()
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
                      f"because {shown(dataset.note)}")
    elif dataset.note:
        print(f"WARNING: {dataset.name}: using the {dataset.source} source, because "
              f"{shown(dataset.note)}")
    print(f"Data: {dataset.describe()}")


def _synthetic_box(dataset: Dataset) -> None:
    """The synthetic-data warning as a Markdown box, with why the real data was not used."""
    from IPython.display import Markdown, display  # noqa: PLC0415

    why = shown(dataset.note or 'source="synthetic" was asked for')
    display(Markdown(f"> **⚠ Synthetic data** — generated images, not the real {dataset.name}: "
                     "timings are valid, accuracy says nothing about the real dataset.\n>\n> Why: "
                     f"{why}.\n>\n> For the real data: go online once (Keras caches the files), or "
                     "pass `data_dir` a folder holding the official files."))


