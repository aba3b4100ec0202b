"""The runner's own cost: kernel start and papermill per notebook, against the code run directly.

For each notebook (quick profile, synthetic data), alternating for a few rounds:
- papermill: `gpubench run`'s own job execution, the notebook in the gpubench-cpu kernel;
- direct: the notebook's code cells, with the same parameters, as one plain
  `python` script in a fresh process.
Also times a bare kernel start (start, run `1`, shut down). Prints medians and
the overhead per notebook.

    python benchmarks/runner_overhead.py [--rounds 2] [--notebooks performanceTest,Mnist_MLP_h1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager

from gpubench import backends, envs, runner

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
KERNEL = backends.kernel_name("cpu")
# what `gpubench run --profile quick` stores
MANIFEST = {"run_id": "runner-overhead", "profile": "quick", "params": {}}


def via_runner(name: str, work: Path) -> float:
    """Wall time of the runner executing the notebook in the kernel, as `gpubench run` does."""
    job = runner.targets.Job("cpu", name)
    work = Path(tempfile.mkdtemp(dir=work))  # a fresh results.jsonl: the job's records are checked
    runner.loop.execute(job, work, dict(MANIFEST), [job])  # claims its attempt in work/run.json
    if job.status != "ok":
        raise SystemExit(f"{name} failed under the runner: {job.error}")
    return job.seconds


def as_script(name: str, work: Path) -> str:
    """The notebook's code cells as one script, the runner's parameters after its parameters."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    params = runner.loop.job_parameters(runner.targets.Job("cpu", name), work, MANIFEST)
    lines = ["from IPython.display import display"]
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines.append(cell.source)
        if "parameters" in cell.metadata.get("tags", []):
            lines += [f"{key} = {value!r}" for key, value in params.items()]
    return "\n".join(lines) + "\n"


def direct(name: str, work: Path) -> float:
    """Wall time of the same code as a plain Python process."""
    script = work / f"{name}.py"
    script.write_text(as_script(name, work))
    start = time.perf_counter()
    subprocess.run([sys.executable, str(script)], cwd=NOTEBOOKS, check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "MPLBACKEND": "Agg"})
    return time.perf_counter() - start


def kernel_start() -> float:
    """Start the gpubench-cpu kernel, run `1`, shut it down."""
    start = time.perf_counter()
    manager = KernelManager(kernel_name=KERNEL, config=runner.kernels.ENCRYPTED)
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    client.execute_interactive("1", timeout=60, output_hook=lambda msg: None)
    client.stop_channels()
    manager.shutdown_kernel(now=True)
    return time.perf_counter() - start


def main() -> None:
    """Alternate papermill and direct runs per notebook; print medians and overheads."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--notebooks",
                        default="performanceTest,Mnist_MLP_h1000,Mnist_CNN,Keras_Cifar_CNN")
    args = parser.parse_args()
    os.environ.setdefault("GPUBENCH_DATA_SOURCE", "synthetic")
    envs.use_checkout_kernels()  # as `gpubench run` does
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        starts = [kernel_start() for _ in range(3)]
        print(f"kernel start + `1` + shutdown: median {statistics.median(starts):.2f} s of 3")
        print(f"{'notebook':<18} {'papermill':>10} {'direct':>10} {'overhead':>10}")
        totals = {"papermill": 0.0, "direct": 0.0}
        for name in args.notebooks.split(","):
            times = {"papermill": [], "direct": []}
            for i in range(args.rounds):
                order = ("papermill", "direct") if i % 2 == 0 else ("direct", "papermill")
                for how in order:
                    run = via_runner if how == "papermill" else direct
                    times[how].append(run(name, work))
            pm, dr = statistics.median(times["papermill"]), statistics.median(times["direct"])
            totals["papermill"] += pm
            totals["direct"] += dr
            print(f"{name:<18} {pm:>8.1f} s {dr:>8.1f} s {pm - dr:>+8.1f} s")
        pm, dr = totals["papermill"], totals["direct"]
        share = f"{100 * (pm / dr - 1):+.0f}%"
        print(f"{'all':<18} {pm:>8.1f} s {dr:>8.1f} s {pm - dr:>+8.1f} s ({share})")


if __name__ == "__main__":
    main()
