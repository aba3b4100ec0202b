"""Datasheet peak throughput of common GPUs, for "% of datasheet peak" beside a measured matmul.

Numbers are dense (no structured sparsity) TFLOP/s as the vendor publishes them;
where a datasheet gives only the 2:4-sparsity figure (marked * there), the dense
figure is half of it. "fp16"/"bf16" are tensor-core throughput with FP32
accumulate (what Keras mixed precision and TensorFlow's half matmuls use).
"tf32" is the tensor-core float32 path that TensorFlow uses for float32 matmuls
on Ampere and newer unless `tf.config.experimental.enable_tensor_float_32_execution(False)`.
A GPU not listed here, a dtype it does not list, and every CPU get None: never a guess.
"""

from __future__ import annotations

import re

# The book's stored performanceTest figures (BOOK.md): seconds of one run at each size,
# on its GeForce GT 720 and on its CPU, timed the book's way (single run, set-up included).
BOOK_SECONDS = {
    "gpu": {500: 0.169, 1000: 0.138, 2000: 0.216, 3000: 0.528, 4000: 1.130, 5000: 2.049},
    "cpu": {500: 0.185, 1000: 0.132, 2000: 0.435, 3000: 0.977, 4000: 2.030, 5000: 3.656},
}
BOOK_LABEL = "book: GT 720 / its CPU"

_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS (dense)"
_H100_SXM = ("NVIDIA H100 Tensor Core GPU datasheet, SXM: FP32 67, TF32 989*, BF16/FP16 1,979* "
             "TFLOPS (* with sparsity; dense = half)")
_H200 = ("NVIDIA H200 Tensor Core GPU datasheet, SXM: FP32 67, TF32 989*, BF16/FP16 1,979* "
         "TFLOPS (* with sparsity; dense = half)")
_GA102 = ("NVIDIA Ampere GA102 GPU architecture whitepaper, appendix table for the RTX 3090: FP32 35.6, "
          "TF32 tensor 35.6, FP16/BF16 tensor with FP32 accumulate 71 TFLOPS (dense)")
_GA106 = ("derived from NVIDIA's RTX 3060 specifications (3584 CUDA cores, 112 tensor cores, boost "
          "1.777 GHz) with the GA10x per-clock rates of the GA102 whitepaper (2 FP32 FLOPs per core; "
          "per tensor core 64 TF32, 128 FP16/BF16 FLOPs with FP32 accumulate)")
_ADA = ("NVIDIA Ada Lovelace architecture whitepaper, RTX 4090: FP32 82.6, TF32 tensor 82.6, "
        "FP16/BF16 tensor with FP32 accumulate 165.2 TFLOPS (dense)")

# (name pattern, {dtype: TFLOP/s}, source). The first pattern that matches the name wins,
# so a variant (PCIe, NVL, Ti, Laptop) comes before its plain name or is excluded by it.
TABLE: list[tuple[str, dict[str, float], str]] = [
    (r"\bT4\b", {"fp32": 8.1, "fp16": 65.0},
     "NVIDIA T4 Tensor Core GPU datasheet: FP32 8.1, mixed precision FP16/FP32 65 TFLOPS; "
     "Turing has no BF16 or TF32"),
    (r"\bV100.*PCIE", {"fp32": 14.0, "fp16": 112.0},
     "NVIDIA V100 Tensor Core GPU datasheet, PCIe: FP32 14, tensor 112 TFLOPS; no BF16 or TF32"),
    (r"\bV100\b", {"fp32": 15.7, "fp16": 125.0},
     "NVIDIA V100 Tensor Core GPU datasheet, SXM2: FP32 15.7, tensor 125 TFLOPS; no BF16 or TF32"),
    (r"RTX 3060(?!\s*(Ti|Laptop))\b", {"fp32": 12.7, "tf32": 12.7, "fp16": 25.5, "bf16": 25.5},
     _GA106),
    (r"RTX 3090(?!\s*Ti)\b", {"fp32": 35.6, "tf32": 35.6, "fp16": 71.0, "bf16": 71.0}, _GA102),
    (r"RTX 4090(?!\s*(D|Laptop))\b", {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2},
     _ADA),
    (r"\bA10\b(?!0)", {"fp32": 31.2, "tf32": 62.5, "fp16": 125.0, "bf16": 125.0},
     "NVIDIA A10 Tensor Core GPU datasheet: FP32 31.2, TF32 62.5, BF16/FP16 125 TFLOPS (dense)"),
    (r"\bA100\b", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}, _A100),
    (r"\bL4\b", {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0},
     "NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3, TF32 120*, BF16/FP16 242* TFLOPS "
     "(* with sparsity; dense = half)"),
    (r"\bH100\b.*PCIE", {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0},
     "NVIDIA H100 Tensor Core GPU datasheet, PCIe: FP32 51, TF32 756*, BF16/FP16 1,513* TFLOPS "
     "(* with sparsity; dense = half)"),
    (r"\bH100\b.*NVL", {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
     "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL: FP32 60, TF32 835*, BF16/FP16 1,671* "
     "TFLOPS (* with sparsity; dense = half)"),
    (r"\bH100\b", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5}, _H100_SXM),
    (r"\bH200\b.*NVL", {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
     "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL: FP32 60, TF32 835*, BF16/FP16 1,671* "
     "TFLOPS (* with sparsity; dense = half)"),
    (r"\bH200\b", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5}, _H200),
]

_DTYPE_KEYS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def lookup(gpu_name: str | None) -> tuple[dict[str, float], str] | None:
    """The table's (peaks in TFLOP/s, source) for a GPU name as nvidia-smi or TensorFlow gives it."""
    if not gpu_name:
        return None
    for pattern, peaks, source in TABLE:
        if re.search(pattern, gpu_name, flags=re.IGNORECASE):
            return peaks, source
    return None


def spec_peak_gflops(gpu_name: str | None, dtype: str, *, tf32: bool = False) -> float | None:
    """Datasheet peak GFLOP/s of `gpu_name` at `dtype`; None when the GPU or the dtype is not listed.

    With `tf32=True` a float32 matmul is compared with the TF32 tensor-core peak,
    where the GPU has one (TensorFlow's default on Ampere and newer).
    """
    found = lookup(gpu_name)
    key = _DTYPE_KEYS.get(dtype)
    if found is None or key is None:
        return None
    peaks = found[0]
    if key == "fp32" and tf32 and "tf32" in peaks:
        key = "tf32"
    tflops = peaks.get(key)
    return None if tflops is None else tflops * 1000.0
