"""A GPU's facts beside a measured matmul: its datasheet peaks and the tensor cores' alignment.

Peaks: dense TFLOP/s as the vendor publishes them (a figure given only with 2:4 sparsity, marked
* there, is halved); "fp16"/"bf16": tensor cores with FP32 accumulate; "tf32": float32 matmuls
that may use TF32. A GPU or dtype not listed gets None. Alignment: tensor cores take a
product's fast path when its rows start ALIGN_BYTES apart.
"""

from __future__ import annotations

import re

_SPARSE = "(* with sparsity; dense = half)"
_GA10X = ("derived from NVIDIA's RTX 3060 specifications (3584 CUDA cores, 112 tensor cores, "
          "boost 1.777 GHz) at the GA10x per-clock rates of the GA102 whitepaper")
# (name pattern, {dtype: TFLOP/s}, source): the first pattern that matches wins, so a variant
# (PCIe, NVL, Ti, Laptop) comes before its plain name or is excluded by it.
TABLE: list[tuple[str, dict[str, float], str]] = [
    (r"\bT4\b", {"fp32": 8.1, "fp16": 65.0},
     "NVIDIA T4 datasheet: FP32 8.1, mixed precision 65 TFLOPS; no BF16 or TF32"),
    (r"\bV100.*PCIE", {"fp32": 14.0, "fp16": 112.0},
     "NVIDIA V100 datasheet, PCIe: FP32 14, tensor 112 TFLOPS; no BF16 or TF32"),
    (r"\bV100\b", {"fp32": 15.7, "fp16": 125.0},
     "NVIDIA V100 datasheet, SXM2: FP32 15.7, tensor 125 TFLOPS; no BF16 or TF32"),
    (r"RTX 3060(?!\s*(Ti|Laptop))\b", {"fp32": 12.7, "tf32": 12.7, "fp16": 25.5, "bf16": 25.5},
     _GA10X),
    (r"RTX 3090(?!\s*Ti)\b", {"fp32": 35.6, "tf32": 35.6, "fp16": 71.0, "bf16": 71.0},
     "NVIDIA GA102 whitepaper, RTX 3090: FP32 35.6, TF32 35.6, FP16/BF16 71 TFLOPS"),
    (r"RTX 4090(?!\s*(D|Laptop))\b", {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2},
     "NVIDIA Ada whitepaper, RTX 4090: FP32 82.6, TF32 82.6, FP16/BF16 165.2 TFLOPS"),
    (r"\bA10\b(?!0)", {"fp32": 31.2, "tf32": 62.5, "fp16": 125.0, "bf16": 125.0},
     "NVIDIA A10 datasheet: FP32 31.2, TF32 62.5, BF16/FP16 125 TFLOPS"),
    (r"\bA100\b", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
     "NVIDIA A100 datasheet (2021): FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS"),
    (r"\bL4\b", {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0},
     f"NVIDIA L4 datasheet: FP32 30.3, TF32 120*, BF16/FP16 242* TFLOPS {_SPARSE}"),
    (r"\bH100\b.*PCIE", {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0},
     f"NVIDIA H100 datasheet, PCIe: FP32 51, TF32 756*, BF16/FP16 1,513* TFLOPS {_SPARSE}"),
    (r"\bH100\b.*NVL", {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
     f"NVIDIA H100 datasheet, NVL: FP32 60, TF32 835*, BF16/FP16 1,671* TFLOPS {_SPARSE}"),
    (r"\bH100\b", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
     f"NVIDIA H100 datasheet, SXM: FP32 67, TF32 989*, BF16/FP16 1,979* TFLOPS {_SPARSE}"),
    (r"\bH200\b.*NVL", {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
     f"NVIDIA H200 datasheet, NVL: FP32 60, TF32 835*, BF16/FP16 1,671* TFLOPS {_SPARSE}"),
    (r"\bH200\b", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
     f"NVIDIA H200 datasheet, SXM: FP32 67, TF32 989*, BF16/FP16 1,979* TFLOPS {_SPARSE}"),
]
_KEYS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
ALIGN_BYTES = 16
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def aligned_size(size: int, dtype: str) -> int:
    """`size` rounded up to a multiple of ALIGN_BYTES / itemsize (8 for 16-bit dtypes)."""
    multiple = ALIGN_BYTES // ITEMSIZE[dtype]
    return -(-size // multiple) * multiple


def lookup(gpu_name: str | None) -> tuple[dict[str, float], str] | None:
    """The table's (peaks in TFLOP/s, source) for a GPU name as nvidia-smi or a backend gives it."""
    for pattern, peaks, source in TABLE if gpu_name else []:
        if re.search(pattern, gpu_name, flags=re.IGNORECASE):
            return peaks, source
    return None


def spec_peak_gflops(gpu_name: str | None, dtype: str, *, tf32: bool = False) -> float | None:
    """Datasheet peak GFLOP/s of `gpu_name` at `dtype` (float32 with `tf32`: the TF32 peak where
    the GPU has one); None when the GPU or the dtype is not listed."""
    found, key = lookup(gpu_name), _KEYS.get(dtype)
    if found is None or key is None:
        return None
    if key == "fp32" and tf32 and "tf32" in found[0]:
        key = "tf32"
    tflops = found[0].get(key)
    return None if tflops is None else tflops * 1000.0
