"""Store the outputs of a real run in notebooks/.

    python tools/refresh_notebooks.py --run runs/full-cpu   # make the run, then store it
    python tools/refresh_notebooks.py RUN_DIR [ENV]          # store a run made before

The stored notebooks must come from real runs (nbval and the README rely on them). `--run`
makes the one the stored outputs come from: `gpubench run --profile full --envs cpu` of every
chapter, the 28x28 chapters on Fashion-MNIST's official files (GPUBENCH_DATA_SOURCE=dir,
GPUBENCH_DATA_DIR=FASHION_DIR, GPUBENCH_DATASET=fashion_mnist, as notebooks/README.md's strict
nbval command repeats it), CIFAR-10 synthetic (it cannot be downloaded here). Then this copies
RUN_DIR/<ENV>/<notebook>.ipynb over notebooks/<notebook>.ipynb, keeping every output but
dropping what papermill adds (the injected-parameters cell, timing metadata), so the source
cells stay exactly as written; it refuses outputs holding a download's progress line. It then
executes Compare_CPU_GPU on RUN_DIR in place. Each notebook's metadata says which run, profile,
machine and data its outputs are from (`gpubench`: run, env, profile, cpu, and per dataset its
name, source and whether the official checksums matched). Execution counts are renumbered
1, 2, ... in cell order, as a Run All from a fresh kernel numbers them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import papermill

from gpubench import envs, rundir

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
FASHION_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
CHAPTERS = ("performanceTest,Mnist_MLP_h1000,Mnist_CNN,Keras_Cifar_CNN,Speed_Factors,"
            "Multi_GPU_Scaling")
DATA_ENV = {"GPUBENCH_DATA_SOURCE": "dir", "GPUBENCH_DATA_DIR": FASHION_DIR,
            "GPUBENCH_DATASET": "fashion_mnist"}
DOWNLOADING = "Downloading data"  # Keras's download progress: a run that did not use the files


def run(run_dir: Path) -> None:
    """The full CPU run whose outputs are stored: Fashion-MNIST's files, CIFAR-10 synthetic."""
    command = [sys.executable, "-m", "gpubench", "run", "--profile", "full", "--envs", "cpu",
               "--notebooks", CHAPTERS, "--out", str(run_dir),
               "-p", "Keras_Cifar_CNN:data_source=synthetic"]
    print("running", " ".join(command), "with", " ".join(f"{k}={v}" for k, v in DATA_ENV.items()))
    if subprocess.run(command, env={**os.environ, **DATA_ENV}).returncode != 0:
        raise SystemExit(f"the run failed: see {run_dir}; nothing is stored")


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
        if cell.cell_type == "code" and DOWNLOADING in json.dumps(cell.outputs):
            raise SystemExit(f"cell {cell.id} holds a download's progress: make the run with "
                             "the data files (--run)")
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
    args = sys.argv[1:]
    if args[:1] == ["--run"]:
        args = args[1:]
        run(Path(args[0]).resolve())
    run_dir = Path(args[0]).resolve()
    env = args[1] if len(args) > 1 else "cpu"
    records = rundir.read_records(run_dir)  # gpubench's reader: a bad line is skipped, named
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
