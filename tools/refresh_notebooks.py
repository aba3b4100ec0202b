"""Store the outputs of a real run in notebooks/: `python tools/refresh_notebooks.py RUN_DIR [ENV]`.

The stored notebooks must come from real runs (nbval and the README rely on
them). This copies RUN_DIR/<ENV>/<notebook>.ipynb over notebooks/<notebook>.ipynb,
keeping every output but dropping what papermill adds (the injected-parameters
cell, timing metadata), so the source cells stay exactly as written. It then
executes Compare_CPU_GPU on RUN_DIR in place. The parameters a run used are
printed by each notebook's first cell, so they stay visible in the outputs, and
each notebook's metadata says which run, profile, machine and data they are from
(`gpubench`: run, env, profile, cpu, and per dataset loaded its name, source and
whether the official checksums matched). Execution counts are renumbered 1, 2, ...
in cell order, as a Run All from a fresh kernel numbers them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import papermill

from gpubench import envs, results

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def clean(nb: nbformat.NotebookNode, source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Outputs of `nb` on the cells of `source`: the same code cells (else it refuses), the
    source's prose, ids and cell metadata, no papermill metadata."""
    executed = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    code = [(c.cell_type, c.source if c.cell_type == "code" else "") for c in executed]
    if code != [(c.cell_type, c.source if c.cell_type == "code" else "") for c in source.cells]:
        raise SystemExit("the run's notebook differs from notebooks/: rerun it with this source")
    for cell, original in zip(executed, source.cells, strict=True):
        cell.id = original.id
        cell.metadata = original.metadata
        if cell.cell_type == "markdown":  # prose edited since the run: it has no outputs
            cell.source = original.source
        if cell.cell_type == "code" and cell.outputs and not cell.execution_count:
            raise SystemExit(f"cell {cell.id} has outputs but was not executed")
    nb.cells = executed
    nb.metadata = {k: v for k, v in source.metadata.items() if k != "gpubench"}
    return nb


def renumber(nb: nbformat.NotebookNode) -> None:
    """Execution counts 1, 2, ... over the code cells, outputs' counts alike."""
    for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
        cell.execution_count = count
        for out in cell.outputs:
            if "execution_count" in out:
                out.execution_count = count


def provenance(run_dir: Path, records: list[dict], env: str, notebook: str | None) -> dict:
    """What the stored outputs come from: the run, env, profile, CPU and data of `notebook`'s
    records in the run (every notebook's when None)."""
    manifest = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    mine = [r for r in records if r["env"] == env and notebook in (None, r["notebook"])]
    cpu = sorted({r["environment"].get("cpu_model") or "?" for r in mine})
    data = sorted({(r["dataset"], r["data_source"], r.get("data_verified"))
                   for r in mine if r.get("dataset")}, key=str)
    return {"run": run_dir.name, "env": env, "profile": manifest["profile"], "cpu": cpu,
            "data": [{"dataset": d, "source": s, "verified": v} for d, s, v in data]}


def main() -> None:
    """Copy the run's executed notebooks into notebooks/ and refresh the report notebook."""
    envs.use_checkout_kernels()  # this checkout's gpubench-cpu, not a --user one of another
    run_dir = Path(sys.argv[1]).resolve()
    env = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    records = results.read_records(run_dir)  # gpubench's reader: a bad line is skipped, named
    for executed in sorted((run_dir / env).glob("*.ipynb")):
        target = NOTEBOOKS / executed.name
        source = nbformat.read(target, as_version=4)
        nb = clean(nbformat.read(executed, as_version=4), source)
        renumber(nb)
        nb.metadata["gpubench"] = provenance(run_dir, records, env, executed.stem)
        nbformat.write(nb, target)
        print(f"stored {executed} -> {target}")
    report = NOTEBOOKS / "Compare_CPU_GPU.ipynb"
    tmp = run_dir / "Compare_CPU_GPU.ipynb"
    papermill.execute_notebook(str(report), str(tmp), parameters={"run_dirs": [str(run_dir)]},
                               cwd=str(NOTEBOOKS), progress_bar=False)
    nb = clean(nbformat.read(tmp, as_version=4), nbformat.read(report, as_version=4))
    renumber(nb)
    nb.metadata["gpubench"] = provenance(run_dir, records, env, None)
    nbformat.write(nb, report)
    print(f"stored {tmp} -> {report}")


if __name__ == "__main__":
    main()
