"""The machine gpubench runs on, without any ML framework (stdlib only): nvidia-smi, the CPU and
its energy counters (RAPL), RAM, load, the checkout. `facts()`: a record's framework-free part."""

import contextlib
import functools
import os
import platform
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

# Environment variables that change what a backend does; a record keeps those that are set.
SPEED_ENV_VARS = ("KERAS_BACKEND", "TF_ENABLE_ONEDNN_OPTS", "TF_XLA_FLAGS", "CUDA_VISIBLE_DEVICES",
                  "TF_GPU_ALLOCATOR", "OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "XLA_FLAGS",
                  "TF_NUM_INTEROP_THREADS", "JAX_PLATFORMS", "XLA_PYTHON_CLIENT_PREALLOCATE",
                  "XLA_PYTHON_CLIENT_MEM_FRACTION", "JAX_DEFAULT_MATMUL_PRECISION")
CPU_REASON = "the device is the CPU"  # why a CPU region has no GPU figures
RAPL_ROOT = Path("/sys/class/powercap")  # the CPU packages' energy counters (RAPL)


def command_output(cmd: list[str], timeout: float = 20) -> str | None:
    """What `cmd` prints, stripped, or None when it is missing, fails or hangs."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def nvidia_smi_gpus() -> list[str] | None:
    """Lines of `nvidia-smi -L`, [] when it lists none, None when it is missing or fails."""
    out = command_output(["nvidia-smi", "-L"])
    return None if out is None else [line for line in out.splitlines()
                                     if line.strip().startswith("GPU")]


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC 7B13", ...)."""
    with contextlib.suppress(OSError):
        if found := re.search(r"^model name\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M):
            return found[1].strip()
    mac = platform.system() == "Darwin" and command_output(["sysctl", "-n",
                                                            "machdep.cpu.brand_string"])
    return mac or platform.processor() or platform.machine()


def cpu_count() -> int:
    """The CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average (os.getloadavg), None where the system has none."""
    with contextlib.suppress(AttributeError, OSError):
        return os.getloadavg()[0]
    return None


def project_root() -> Path:
    """The folder holding the gpubench package: the checkout, or site-packages for a wheel."""
    return Path(__file__).resolve().parents[1]


def checkout() -> Path | None:
    """The gpubench checkout (pyproject.toml beside gpubench/), None for an installed wheel."""
    root = project_root()
    return root if (root / "pyproject.toml").is_file() else None


@functools.cache
def facts() -> dict:
    """The framework-free part of a record's environment (cached: the machine does not change)."""
    gpus = []
    for line in (command_output(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                 "--format=csv,noheader,nounits"]) or "").splitlines():
        name, memory, driver = (part.strip() for part in (line.split(",") + ["", ""])[:3])
        memory_gb = round(int(memory) / 1024, 1) if memory.isdigit() else None  # or "[N/A]"
        gpus.append({"name": name, "memory_gb": memory_gb, "driver": driver or None})
    git = ["git", "-C", str(Path(__file__).resolve().parent)]
    if commit := command_output([*git, "rev-parse", "HEAD"]):
        dirty = command_output([*git, "status", "--porcelain", "--untracked-files=no"])
        commit += "-dirty" if dirty else ""
    ram_gb = None
    with contextlib.suppress(AttributeError, ValueError, OSError):
        ram_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {"python": platform.python_version(), "os": platform.platform(),
            "cpu_model": cpu_model(), "cpu_count": cpu_count(), "ram_gb": ram_gb,
            "gpus": gpus, "git_commit": commit, "hostname": platform.node(),
            "tf_env": {name: os.environ[name] for name in SPEED_ENV_VARS if name in os.environ}}


def rapl_packages(root: Path | None = None) -> list[tuple[Path, int]]:
    """(energy_uj path, wrap range in µJ) of each readable CPU package domain ([] if none)."""
    packages = []
    try:
        for domain in sorted((root or RAPL_ROOT).glob("intel-rapl:*")):
            if (re.fullmatch(r"intel-rapl:\d+", domain.name)
                    and (domain / "name").read_text().startswith("package")):  # not "psys"
                int((domain / "energy_uj").read_text())  # root-only on most kernels since 2020
                packages.append((domain / "energy_uj",
                                 int((domain / "max_energy_range_uj").read_text())))
    except (OSError, ValueError):
        return []
    return packages


def read_rapl(packages: Sequence[tuple[Path, int]]) -> tuple[int, ...] | None:
    """The packages' energy counters in µJ, None if one cannot be read."""
    with contextlib.suppress(OSError, ValueError):
        return tuple(int(path.read_text()) for path, _ in packages)
    return None


def rapl_joules(packages: Sequence[tuple[Path, int]],
                readings: Sequence[tuple[int, ...] | None]) -> float | None:
    """Joules of all packages over successive `read_rapl` readings, counting wrap-arounds."""
    if not packages or len(readings) < 2 or None in readings:
        return None
    total = 0
    for before, after in zip(readings, readings[1:], strict=False):
        for (_, wrap), b, a in zip(packages, before, after, strict=True):
            total += a - b if a >= b else a + wrap - b
    return total / 1e6
