"""The CPU side of a region: this process's CPU use and the CPU packages' energy (RAPL).

CPU use comes from the process clock (time.process_time) sampled with the wall clock; energy
from the powercap counters under RAPL_ROOT, in µJ, which wrap around at max_energy_range_uj.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from pathlib import Path

RAPL_ROOT = Path("/sys/class/powercap")
_RAPL_PACKAGE = re.compile(r"intel-rapl:\d+")  # top-level domains; subdomains have two colons


def rapl_packages(root: Path | None = None) -> list[tuple[Path, int]]:
    """(energy_uj path, wrap range in µJ) of each readable CPU package domain under `root`
    (RAPL_ROOT, looked up at each call, when None)."""
    root = RAPL_ROOT if root is None else root
    packages = []
    try:
        domains = sorted(root.glob("intel-rapl:*"))
    except OSError:
        return []
    for domain in domains:
        if not _RAPL_PACKAGE.fullmatch(domain.name):
            continue
        try:
            if not (domain / "name").read_text().strip().startswith("package"):
                continue  # "psys" (the whole platform) would count the package twice
            int((domain / "energy_uj").read_text())
            wrap = int((domain / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            return []  # unreadable (energy_uj is root-only on most kernels since 2020)
        packages.append((domain / "energy_uj", wrap))
    return packages


def read_rapl(packages: Sequence[tuple[Path, int]]) -> tuple[int, ...] | None:
    """The packages' energy counters in µJ, None if one cannot be read."""
    try:
        return tuple(int(path.read_text()) for path, _ in packages)
    except (OSError, ValueError):
        return None


def cpu_figures(times: Sequence[float], cpu: Sequence[float]) -> dict:
    """This process's CPU use in % of one core: over the region, and its busiest interval.

    `times` are the wall-clock samples and `cpu` the process clock's, taken together."""
    seconds = times[-1] - times[0]
    if seconds <= 0:
        return {}
    # Intervals shorter than half the longest (the last one, cut short by stop) are
    # too short for a meaningful peak; they still count in the mean.
    steps = list(itertools.pairwise(zip(times, cpu, strict=True)))
    longest = max(t1 - t0 for (t0, _), (t1, _) in steps)
    rates = [(c1 - c0) / (t1 - t0) * 100 for (t0, c0), (t1, c1) in steps
             if t1 - t0 >= longest / 2]
    mean = (cpu[-1] - cpu[0]) / seconds * 100
    return {"cpu_util_percent_mean": round(mean, 1),
            "cpu_util_percent_max": round(max(rates, default=mean), 1)}


def rapl_figures(packages: Sequence[tuple[Path, int]],
                 rapl: Sequence[tuple[int, ...] | None]) -> dict:
    """CPU package energy (all packages) from RAPL, counting each counter's wrap-around.

    `rapl` holds one `read_rapl(packages)` reading per sample."""
    if not packages or any(reading is None for reading in rapl) or len(rapl) < 2:
        return {}
    microjoules = 0
    for before, after in itertools.pairwise(rapl):
        for (_, wrap), b, a in zip(packages, before, after, strict=True):
            microjoules += a - b if a >= b else a + wrap - b
    return {"cpu_energy_joules": round(microjoules / 1e6, 3), "cpu_energy_method": "rapl"}
