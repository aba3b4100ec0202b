"""A pytest plugin for the nbval subprocess the tests start: it keeps what nbval executed.

nbval runs every cell of a notebook and compares the outputs with the stored ones, but throws
the new outputs away. With `-p nbval_keep` and GPUBENCH_NBVAL_KEEP=DIR, each notebook nbval ran
is written to DIR/<name>.ipynb with the outputs of that run, so the tests that read a chapter's
executed outputs share nbval's one execution instead of running the notebook again.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import nbformat

_RAN: dict[Path, dict[int, list]] = defaultdict(dict)


def pytest_runtest_teardown(item) -> None:
    """Note the outputs of a code cell nbval executed (nbval 0.11 keeps them on the item as
    `test_outputs`, the cell's number among the code cells as `cell_num`)."""
    outputs = getattr(item, "test_outputs", None)
    if outputs is not None and hasattr(item, "cell_num"):
        _RAN[Path(str(item.fspath))][item.cell_num] = outputs


def pytest_sessionfinish(session) -> None:
    """Write each executed notebook, its code cells numbered and holding this run's outputs."""
    keep = os.environ.get("GPUBENCH_NBVAL_KEEP")
    if not keep:
        return
    Path(keep).mkdir(parents=True, exist_ok=True)
    for path, cells in _RAN.items():
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        for cell in code:
            cell.outputs, cell.execution_count = [], None
        for number, outputs in cells.items():  # nbval numbers the code cells from 0
            cell = code[number]
            cell.outputs = [nbformat.from_dict(dict(o)) for o in outputs]
            cell.execution_count = number + 1
        nbformat.write(nb, Path(keep) / path.name)
