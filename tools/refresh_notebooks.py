"""Store the outputs of a real run in notebooks/: `python tools/refresh_notebooks.py RUN_DIR [ENV]`.

The stored notebooks must come from real runs (nbval and the README rely on
them). This copies RUN_DIR/<ENV>/<notebook>.ipynb over notebooks/<notebook>.ipynb,
keeping every output but dropping what papermill adds (the injected-parameters
cell, timing metadata), so the source cells stay exactly as written. It then
executes Compare_CPU_GPU on RUN_DIR in place. The parameters a run used are
printed by each notebook's first cell, so they stay visible in the outputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import papermill

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def clean(nb: nbformat.NotebookNode, source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Outputs of `nb` on the cells of `source`: same cells, same ids, no papermill metadata."""
    executed = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    if [c.source for c in executed] != [c.source for c in source.cells]:
        raise SystemExit("the run's notebook differs from notebooks/: rerun it with this source")
    for cell, original in zip(executed, source.cells, strict=True):
        cell.id = original.id
        cell.metadata = original.metadata
        if cell.cell_type == "code" and cell.outputs and not cell.execution_count:
            raise SystemExit(f"cell {cell.id} has outputs but was not executed")
    nb.cells = executed
    nb.metadata = source.metadata
    return nb


def main() -> None:
    """Copy the run's executed notebooks into notebooks/ and refresh the report notebook."""
    run_dir = Path(sys.argv[1]).resolve()
    env = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    for executed in sorted((run_dir / env).glob("*.ipynb")):
        target = NOTEBOOKS / executed.name
        source = nbformat.read(target, as_version=4)
        nb = clean(nbformat.read(executed, as_version=4), source)
        nbformat.write(nb, target)
        print(f"stored {executed} -> {target}")
    report = NOTEBOOKS / "Compare_CPU_GPU.ipynb"
    tmp = run_dir / "Compare_CPU_GPU.ipynb"
    papermill.execute_notebook(str(report), str(tmp), parameters={"run_dirs": [str(run_dir)]},
                               cwd=str(NOTEBOOKS), progress_bar=False)
    nbformat.write(clean(nbformat.read(tmp, as_version=4), nbformat.read(report, as_version=4)),
                   report)
    print(f"stored {tmp} -> {report}")


if __name__ == "__main__":
    main()
