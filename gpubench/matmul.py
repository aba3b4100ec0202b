"""The book's matrix-multiplication test, done the book's way and the rigorous way.

book:      build two random-normal matrices on the device, multiply, sum, and time
           one run that includes all of that set-up (what the chapter's
           `performanceTest` timed with one `sess.run`).
rigorous:  the matrices exist on the device beforehand; the product runs as a
           compiled `tf.function`; warm-up, device sync, the median of repeats.
Both report seconds and GFLOP/s, counting 2*n^3 floating-point operations.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from gpubench import backends, devices, peaks, results, telemetry, timing
from gpubench.params import check_value, positive_int
from gpubench.peaks import BOOK_LABEL, BOOK_SECONDS  # noqa: F401 - the chapter reads them here

METHODS = ("book", "rigorous")
# The smallest compute capability whose GPUs run a dtype's matmul natively (bfloat16: Ampere).
GPU_MIN_CAPABILITY = {"bfloat16": (8, 0)}


def check_dtypes(dtypes) -> list[str]:
    """One dtype or a list of them as a list of supported dtypes, or raise naming the bad one."""
    checked = check_value("dtype", [None] if dtypes is None else dtypes)
    return [checked] if isinstance(checked, str) else checked


def check_method(method: str) -> str:
    """Return `method` if known, or raise naming it and the accepted ones."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    return method


def unsupported_reason(device: str, dtype: str) -> str | None:
    """Why `device` cannot run a `dtype` matmul natively (None when it can); CPUs run them all."""
    minimum = GPU_MIN_CAPABILITY.get(dtype)
    if device == "cpu" or minimum is None:
        return None
    capability = backends.current().compute_capability(int(device.split(":")[1])) or minimum
    if capability < minimum:  # unknown capability: let it try
        return (f"{device} has compute capability {capability[0]}.{capability[1]}; {dtype} needs "
                f"{minimum[0]}.{minimum[1]} or newer")
    return None


def spec_peak(device: str, dtype: str) -> float | None:
    """The datasheet peak GFLOP/s of `device` at `dtype` (gpubench.peaks; None for CPUs and
    unknown GPUs)."""
    if device == "cpu":
        return None
    index = int(device.split(":")[1])
    gpus = results.environment_snapshot()["gpus"]
    if index >= len(gpus):
        return None
    tf32 = dtype == "float32" and backends.current().tf32_enabled()
    return peaks.spec_peak_gflops(gpus[index]["name"], dtype, tf32=tf32)


def _book(device: str, size: int, dtype: str) -> timing.Measurement:
    """One timed run including the set-up, as the chapter's performanceTest does."""
    with telemetry.Monitor(device) as monitor:
        seconds = backends.current().book_matmul(device, size, dtype)
    return timing.Measurement(first=seconds, times=[seconds], telemetry=monitor.result)


def _rigorous(device: str, size: int, dtype: str, repeats: int) -> timing.Measurement:
    """Median of `repeats` compiled products on operands already on the device."""
    product = backends.current().rigorous_matmul(device, size, dtype)
    return timing.measure(product, warmup=2, repeats=repeats, device=device)


def performance_test(
    device_name: str,
    size: int,
    method: str = "book",
    repeats: int = 5,
    dtype: str = "float32",
    *,
    notebook: str = "performanceTest",
    env: str | None = None,
) -> dict:
    """Multiply two size x size matrices on `device_name`; return its record ("oom" if too big)."""
    device = devices.resolve(device_name)
    positive_int("size", size)
    check_method(method)
    (dtype,) = check_dtypes([dtype])
    positive_int("repeats", repeats)
    common = dict(notebook=notebook, env=env or results.default_env_name(), device=device,
                  size=size, dtype=dtype, method=method, spec_peak_gflops=spec_peak(device, dtype))
    reason = unsupported_reason(device, dtype)
    if reason is not None:
        return results.make_record("matmul", status="skipped", error=reason, repeats=0, **common)
    try:
        m = (_book(device, size, dtype) if method == "book"
             else _rigorous(device, size, dtype, repeats))
    except Exception as exc:
        if not backends.is_oom(exc):
            raise
        status, error = backends.failure(exc)
        return results.make_record("matmul", status=status, error=error, repeats=0, **common)
    s = m.stats
    return results.make_record("matmul", seconds=s.median, seconds_min=s.min, seconds_max=s.max,
                               seconds_iqr=s.iqr, first_seconds=m.first, repeats=s.n,
                               gflops=2 * size**3 / s.median / 1e9, telemetry=m.telemetry,
                               **common)


def sweep(
    sizes: Sequence[int],
    device_names: Sequence[str],
    methods: Sequence[str] = METHODS,
    repeats: int = 5,
    dtype: str | Sequence[str] = "float32",
    *,
    store: results.ResultsStore | None = None,
    env: str | None = None,
    notebook: str = "performanceTest",
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """`performance_test` for every size, device (in the order given), dtype (one or a list) and
    method, storing each record as made; input is checked first, so bad input writes nothing."""
    sizes = check_value("sizes", sizes)
    resolved = [devices.resolve(name) for name in device_names]
    if not resolved:
        raise ValueError("devices is empty; pass at least one, e.g. [\"cpu\"]")
    for method in methods:
        check_method(method)
    dtypes = check_dtypes(dtype)
    positive_int("repeats", repeats)
    records = []
    for size, device, one_dtype, method in itertools.product(sizes, resolved, dtypes, methods):
        record = performance_test(device, size, method, repeats, one_dtype, notebook=notebook,
                                  env=env)
        if store is not None:
            store.append(record)
        records.append(record)
        if progress is not None:
            progress(record)
    return records


def describe(record: dict) -> str:
    """One line for a matmul record, for progress output."""
    head = (f"{record['size']:>5} x {record['size']:<5} {record['device']:<6} "
            f"{record['dtype']:<8} {record['method']:<9}")
    if record["status"] != "ok":
        return f"{head} {record['status'].upper()}: {record['error']}"
    line = f"{head} {record['seconds']:9.4f} s  {record['gflops']:9.1f} GFLOP/s"
    if record.get("spec_peak_gflops"):
        line += f"  ({100 * record['gflops'] / record['spec_peak_gflops']:.0f}% of datasheet peak)"
    return line
