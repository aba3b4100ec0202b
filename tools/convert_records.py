"""Convert a results.jsonl written by an older gpubench (record schemas 1 to 3) to schema 4, the
one gpubench reads, in place; used once on reference/h200-jax (its README says what changed).

    python tools/convert_records.py reference/h200-jax/results.jsonl

What changes, by the rules the old readers applied when they read such lines:
- schema 1 lacked `attempt` (now 1) and the training mode fields (now null);
- schemas 1 and 2 lacked `backend` (now "tensorflow", the only one then) and `telemetry` (null);
- up to schema 3 a rigorous or peak matmul's `seconds` was one product up to its sync: it
  becomes `call_seconds` (its `seconds_iqr`, the spread of those calls, `call_seconds_iqr`),
  and the product-time fields become null (never measured);
- `tf32` is added from what the record's environment says of its backend (JAX's default matmul
  precision, TensorFlow's and PyTorch's TF32 setting): on a GPU, whether float32 matmuls could
  run on TF32 tensor cores; false on a CPU; null for a matmul at another dtype.
Every other field is kept as written.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

MODE_FIELDS = ("jit_compile", "precision", "steps_per_execution", "input_pipeline",
               "flops_per_sample", "achieved_gflops")
PRODUCT_TIME_FIELDS = ("seconds", "seconds_min", "seconds_max", "seconds_iqr", "gflops",
                       "products_per_block")
JAX_TF32 = (None, "default", "tensorfloat32", "bfloat16_3x")  # JAX's precisions that allow it


def tf32(record: dict) -> bool | None:
    """Whether the record's float32 matmuls could use TF32, from its environment."""
    if record["benchmark"] == "matmul" and record.get("dtype", "float32") != "float32":
        return None
    if not str(record.get("device", "")).startswith("gpu"):
        return False
    settings = record["environment"].get("backend_settings") or {}
    if "tf32" in settings:
        return settings["tf32"]
    if record.get("backend") == "jax":
        return settings.get("default_matmul_precision") in JAX_TF32
    return None


def converted(record: dict) -> dict:
    """`record` (schema 1 to 4) in schema 4's terms."""
    schema = record["schema"]
    if schema == 1:
        record = {"attempt": 1, **dict.fromkeys(MODE_FIELDS), **record}
    if schema <= 2:
        record = {"backend": "tensorflow", "telemetry": None, **record}
    if schema <= 3 and record["benchmark"] == "matmul":
        if record.get("method") in ("rigorous", "peak"):
            record = record | {"call_seconds": record.get("seconds"),
                               "call_seconds_iqr": record.get("seconds_iqr"),
                               **dict.fromkeys(PRODUCT_TIME_FIELDS)}
        else:
            record = {"call_seconds": None, **record}
    if record["benchmark"] in ("matmul", "train", "scaling") and "tf32" not in record:
        record = record | {"tf32": tf32(record)}
    return record | {"schema": 4}


def main(path: str) -> int:
    """Convert the file at `path` in place (through a temp file: never half-written)."""
    target = Path(path)
    lines = [converted(json.loads(line)) for line in target.read_text().splitlines() if line]
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(json.dumps(r, allow_nan=False) + "\n" for r in lines))
    os.replace(tmp, target)
    print(f"{target}: {len(lines)} records now in schema 4")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]) if len(sys.argv) == 2 else
             "usage: python tools/convert_records.py RESULTS.jsonl")
