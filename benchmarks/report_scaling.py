"""`gpubench report`'s cost against the size of its input: records in one file, and run dirs.

Builds, in a temp folder, run dirs whose records copy the shape of the stored H200 run
(reference/h200-jax/results.jsonl, 90 records): copy k is machine "host-k" with its own run
ids, so that every copy is a run of its own.
- one dir of 1, 20,000 and 100,000 records (the copies one after another in one file, as
  `cat */results.jsonl` would make it);
- 10, 50 and 200 dirs of one copy (90 records) each: machines compared side by side.
Runs `gpubench report` on each as a subprocess and prints its wall time, its peak memory
(its peak RSS, from getrusage(RUSAGE_CHILDREN) in a fresh parent per report) and the tallest
PNG it wrote.
Targets on 2 cores: 200 dirs in under 15 s; 100,000 records in under 30 s and under 1 GB.

    python benchmarks/report_scaling.py [--records 1,20000,100000] [--dirs 10,50,200]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

from gpubench import machine

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "reference" / "h200-jax" / "results.jsonl"


def copy_lines(template: list[dict], k: int) -> list[str]:
    """The template's records as machine "host-k", each run id suffixed with k: JSON lines."""
    lines = []
    for record in template:
        environment = record["environment"] | {"hostname": f"host-{k}"}
        lines.append(json.dumps(record | {"run_id": f"{record['run_id']}-{k}",
                                          "environment": environment}))
    return lines


def write_dir(path: Path, template: list[dict], count: int, first: int = 0) -> Path:
    """A run dir at `path` whose results.jsonl holds `count` records, copies from `first` on."""
    path.mkdir(parents=True)
    with (path / "results.jsonl").open("w", encoding="utf-8") as out:
        k, left = first, count
        while left > 0:
            lines = copy_lines(template, k)[:left]
            out.write("\n".join(lines) + "\n")
            k, left = k + 1, left - len(lines)
    return path


# Runs a command and prints its peak RSS (KB) last: a fresh process per report, so that
# RUSAGE_CHILDREN's peak is that report's alone (it keeps the largest child's otherwise).
PEAK = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")


def report(dirs: list[Path], out: Path) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB and the tallest PNG in pixels of `gpubench report` on `dirs`."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "gpubench", "report",
                           *map(str, dirs), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"gpubench report failed ({done.returncode}): {done.stderr[-2000:]}")
    peak_kb = int(done.stdout.split()[-1])
    tallest = max((Image.open(p).size[1] for p in out.glob("*.png")), default=0)
    return wall, peak_kb / 1024, tallest


def main() -> None:
    """Build each input, report it, print one line per input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default="1,20000,100000",
                        help="records in one dir, comma-separated")
    parser.add_argument("--dirs", default="10,50,200", help="numbers of run dirs, comma-separated")
    args = parser.parse_args()
    template = [json.loads(line) for line in TEMPLATE.read_text(encoding="utf-8").splitlines()]
    print(f"CPU: {machine.cpu_model()} ({machine.cpu_count()} cores), Python "
          f"{platform.python_version()}; template: {len(template)} records")
    print(f"{'input':<28} {'records':>8} {'wall s':>7} {'peak MB':>8} {'tallest PNG px':>15}")
    cases = [(f"1 dir, {int(n):,} record{'s' * (int(n) != 1)}", int(n), None) for n in args.records.split(",")]
    cases += [(f"{int(n)} dirs, {len(template)} records each", None, int(n))
              for n in args.dirs.split(",")]
    cases.sort(key=lambda c: c[1] if c[1] is not None else c[2] * len(template))
    with tempfile.TemporaryDirectory() as tmp:
        for number, (name, records, dirs) in enumerate(cases):
            base = Path(tmp) / f"case{number}"
            if records is not None:
                inputs = [write_dir(base / "run", template, records)]
            else:
                inputs = [write_dir(base / f"run{k:03d}", template, len(template), first=k)
                          for k in range(dirs)]
            total = records if records is not None else dirs * len(template)
            wall, peak, tallest = report(inputs, base / "report")
            print(f"{name:<28} {total:>8,} {wall:>7.1f} {peak:>8.0f} {tallest:>15}", flush=True)


if __name__ == "__main__":
    main()
