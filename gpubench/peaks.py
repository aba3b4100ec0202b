"""A GPU's facts beside a measured matmul, loaded only for a GPU: its datasheet peaks
(tables/peaks.json says what they are), the dtypes it runs natively, and the tensor cores'
alignment: a product takes their fast path when its rows start ALIGN_BYTES apart."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpubench import backends, results

PEAKS_FILE = Path(__file__).parent / "tables" / "peaks.json"
TABLE = json.loads(PEAKS_FILE.read_text(encoding="utf-8"))["gpus"]  # [pattern, TFLOP/s, source]
_KEYS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
GPU_MIN_CAPABILITY = {"bfloat16": (8, 0)}  # the oldest GPUs that run a dtype's matmul natively
ALIGN_BYTES = 16
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def aligned_size(size: int, dtype: str) -> int:
    """`size` rounded up to a multiple of ALIGN_BYTES / itemsize (8 for 16-bit dtypes)."""
    multiple = ALIGN_BYTES // ITEMSIZE[dtype]
    return -(-size // multiple) * multiple


def aligned_companion(size: int, device: str, dtype: str) -> int | None:
    """The aligned n timed beside `size` on a GPU at a 16-bit dtype (None: `size` is aligned)."""
    if not device.startswith("gpu") or dtype not in ("float16", "bfloat16"):
        return None
    return aligned_size(size, dtype) if aligned_size(size, dtype) != size else None


def spec_peak_gflops(gpu_name: str | None, dtype: str, *, tf32: bool = False) -> float | None:
    """Datasheet peak GFLOP/s of `gpu_name` at `dtype` (`tf32`: its TF32 peak where it has one)."""
    found = next((peaks for pattern, peaks, _ in TABLE
                  if gpu_name and re.search(pattern, gpu_name, flags=re.IGNORECASE)), {})
    key = "tf32" if dtype == "float32" and tf32 and "tf32" in found else _KEYS.get(dtype)
    return found[key] * 1000.0 if key in found else None


def spec_peak(device: str, dtype: str, tf32: bool = False) -> float | None:
    """The datasheet peak GFLOP/s of `device` at `dtype` as it runs (None: CPU, unknown GPU)."""
    gpus = results.environment_snapshot()["gpus"] if device.startswith("gpu") else []
    index = int(device.split(":")[1]) if gpus else 0
    return spec_peak_gflops(gpus[index]["name"], dtype, tf32=tf32) if index < len(gpus) else None


def unsupported_reason(device: str, dtype: str) -> str | None:
    """Why `device` cannot run a `dtype` matmul natively (None when it can); CPUs run them all."""
    minimum = GPU_MIN_CAPABILITY.get(dtype)
    if device.startswith("cpu") or minimum is None:
        return None
    capability = backends.current().compute_capability(int(device.split(":")[1])) or minimum
    if capability < minimum:  # unknown capability: let it try
        return (f"{device} has compute capability {capability[0]}.{capability[1]}; {dtype} needs "
                f"{minimum[0]}.{minimum[1]} or newer")
    return None
