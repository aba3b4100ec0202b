"""The book's matrix-multiplication test, done the book's way and the rigorous way, and the peak.

book:      build two random-normal matrices on the device, multiply, sum, and time
           one run that includes all of that set-up (what the chapter's
           `performanceTest` timed with one `sess.run`); then the same again, the shape now
           known (`warm_seconds`: on JAX the first run also compiled each new shape's ops).
rigorous:  the matrices exist on the device beforehand; the product runs compiled
           (`tf.function` or `jax.jit`). Two figures (gpubench.timing): the product time,
           products queued back to back with one sync per block of at least 20 ms, the median
           of `repeats` blocks' per-product times (`seconds`, `gflops`); and the call latency,
           one product from the call to its result on the host (`call_seconds`).
peak:      the rigorous product at one large n, the fastest block: each env's reference for
           every "% of peak" (gpubench.results.peak_record finds it).
aligned:   on a GPU, for 16-bit dtypes, each swept n that is not a multiple of 8 is also timed
           at the next multiple (`aligned_size`), a rigorous record with `aligned_from` = n.
All report seconds and GFLOP/s, counting 2*n^3 floating-point operations.

`performanceTest` and `rigorous_test` are written in notebooks/performanceTest.ipynb and
copied here by `python tools/export_chapters.py` (tests/test_training.py fails when the two
differ); this module turns their timings into records.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

from gpubench import backends, devices, peaks, results, telemetry, timing
from gpubench.params import check_value, positive_int
from gpubench.peaks import BOOK_LABEL, BOOK_SECONDS  # noqa: F401 - the chapter reads them here

keras = backends.keras()  # Keras on the env's backend, its start-up chatter held back
ops = keras.ops
backend = backends.current()  # the seam: device placement, sync and compiling, per backend

METHODS = ("book", "rigorous")  # the sweep's methods; the peak probe is `peak` alone
# The smallest compute capability whose GPUs run a dtype's matmul natively (bfloat16: Ampere).
GPU_MIN_CAPABILITY = {"bfloat16": (8, 0)}
# The peak probe's n per kind of device: large enough to keep the device busy, small enough
# that the probe (a warm-up and PEAK_REPEATS products) takes a few seconds. Not a power of two
# on a CPU: rows 2^k bytes apart fall into the same cache sets, and TensorFlow's CPU matmul
# ran at half speed at n=4096 (83 GFLOP/s) where n=4000 ran at 163 on the same 2-core EPYC.
PEAK_SIZE = {"gpu": 8192, "cpu": 4000}
PEAK_REPEATS = 5
# Tensor cores take a GEMM on their fast path when its rows start 16 bytes apart (cuBLAS and
# XLA pad or fall back otherwise): n a multiple of 16 bytes / itemsize, 8 for 16-bit dtypes.
ALIGN_BYTES = 16
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
ALIGNED_DTYPES = ("float16", "bfloat16")  # the tensor-core dtypes the sweep adds aligned n for


def check_dtypes(dtypes) -> list[str]:
    """One dtype or a list of them as a list of supported dtypes, or raise naming the bad one."""
    checked = check_value("dtype", [None] if dtypes is None else dtypes)
    return [checked] if isinstance(checked, str) else checked


def check_method(method: str) -> str:
    """Return `method` if known, or raise naming it and the accepted ones."""
    if method == results.PEAK_METHOD:
        raise ValueError(f"method {method!r} is the peak probe, not a sweep method: call "
                         f"gb.matmul.peak or peaks_for; use one of {', '.join(METHODS)}")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    return method


def unsupported_reason(device: str, dtype: str) -> str | None:
    """Why `device` cannot run a `dtype` matmul natively (None when it can); CPUs run them all."""
    minimum = GPU_MIN_CAPABILITY.get(dtype)
    if device.startswith("cpu") or minimum is None:
        return None
    capability = backend.compute_capability(int(device.split(":")[1])) or minimum
    if capability < minimum:  # unknown capability: let it try
        return (f"{device} has compute capability {capability[0]}.{capability[1]}; {dtype} needs "
                f"{minimum[0]}.{minimum[1]} or newer")
    return None


def aligned_size(size: int, dtype: str) -> int:
    """`size` rounded up to a multiple of ALIGN_BYTES / itemsize (8 for 16-bit dtypes)."""
    multiple = ALIGN_BYTES // ITEMSIZE[dtype]
    return -(-size // multiple) * multiple


def aligned_companion(size: int, device: str, dtype: str) -> int | None:
    """The aligned n the sweep also times beside `size`: on a GPU, at a 16-bit dtype, where
    `size` is not aligned; None elsewhere."""
    if not device.startswith("gpu") or dtype not in ALIGNED_DTYPES:
        return None
    aligned = aligned_size(size, dtype)
    return aligned if aligned != size else None


def spec_peak(device: str, dtype: str) -> float | None:
    """The datasheet peak GFLOP/s of `device` at `dtype` (gpubench.peaks; None for CPUs and
    unknown GPUs)."""
    if device.startswith("cpu"):
        return None
    index = int(device.split(":")[1])
    gpus = results.environment_snapshot()["gpus"]
    if index >= len(gpus):
        return None
    tf32 = dtype == "float32" and backend.tf32_enabled()
    return peaks.spec_peak_gflops(gpus[index]["name"], dtype, tf32=tf32)


# Written by tools/export_chapters.py from the chapter's #@save cells: edit those.
# BEGIN CHAPTER CODE from performanceTest


def performanceTest(device_name, size, dtype="float32"):
    """The book's measurement: random W and X made on the device, W @ X, the sum fetched;
    the seconds of that one run, set-up included."""
    device = devices.resolve(device_name)  # "/gpu:0" as the book writes it, or "gpu:0"
    start = time.perf_counter()
    with backend.scope(device):
        w = keras.random.normal((size, size), dtype=dtype, seed=1)
        x = keras.random.normal((size, size), dtype=dtype, seed=2)
        total = ops.sum(ops.matmul(w, x))
    float(total)  # fetching the sum waits for the device, as the book's sess.run did
    return time.perf_counter() - start


def rigorous_product(device_name, size, dtype="float32"):
    """A function to time: the compiled W @ X on W and X made on the device beforehand; call it
    inside `backend.scope` of that device, which places the product there."""
    device = devices.resolve(device_name)
    with backend.scope(device):
        w = keras.random.normal((size, size), dtype=dtype, seed=1)
        x = keras.random.normal((size, size), dtype=dtype, seed=2)
    backend.sync(w, x)  # the operands exist before any clock starts
    product = backend.compiled(ops.matmul)  # tf.function on TensorFlow, jax.jit on JAX
    return lambda: product(w, x)


def rigorous_test(device_name, size, dtype="float32", repeats=5):
    """The rigorous measurement: the first call (it compiles) alone, then `repeats` blocks of
    products, one sync per block (product time), and `repeats` single calls (call latency)."""
    device = devices.resolve(device_name)
    run = rigorous_product(device, size, dtype)
    with backend.scope(device):  # once around every call: no per-call cost in the blocks
        return timing.measure_blocks(run, repeats=repeats, device=device)


# END CHAPTER CODE


def gflops(size: int, seconds: float) -> float:
    """GFLOP/s of one size x size product that took `seconds`: 2 n^3 / seconds / 10^9."""
    return 2 * size**3 / seconds / 1e9


def _book(device: str, size: int, dtype: str) -> dict:
    """The chapter's performanceTest timed once (set-up included), then once more at the same
    shape (`warm_seconds`: what remains without the first run's one-off set-up and compiling)."""
    with telemetry.Monitor(device) as monitor:
        seconds = performanceTest(device, size, dtype)
    warm = performanceTest(device, size, dtype)
    return dict(seconds=seconds, seconds_min=seconds, seconds_max=seconds, seconds_iqr=0.0,
                first_seconds=seconds, repeats=1, gflops=gflops(size, seconds),
                warm_seconds=warm, telemetry=monitor.result)


def _rigorous(device: str, size: int, dtype: str, repeats: int) -> timing.Blocks:
    """Product time over `repeats` blocks and call latency of compiled products on operands
    already on the device."""
    return rigorous_test(device, size, dtype, repeats)


def _peak(device: str, size: int, dtype: str, repeats: int) -> timing.Blocks:
    """The peak probe's timings: the rigorous test's, at the probe's n and repeats."""
    return rigorous_test(device, size, dtype, repeats)


def _product_fields(m: timing.Blocks, size: int, figure: str) -> dict:
    """A rigorous or peak record's timing fields; `figure` ("median" or "min") of the blocks'
    per-product times is its `seconds`."""
    s = m.stats
    seconds = getattr(s, figure)
    return dict(seconds=seconds, seconds_min=s.min, seconds_max=s.max, seconds_iqr=s.iqr,
                first_seconds=m.first, repeats=s.n, gflops=gflops(size, seconds),
                products_per_block=m.per_block, call_seconds=m.call_stats.median,
                telemetry=m.telemetry)


def _record(measure: Callable[[], dict], **common) -> dict:
    """The record of one measurement: "skipped" for a dtype the device cannot run, "oom" when it
    runs out of memory, else the timing fields `measure` returns."""
    reason = unsupported_reason(common["device"], common["dtype"])
    if reason is not None:
        return results.make_record("matmul", status="skipped", error=reason, repeats=0, **common)
    try:
        fields = measure()
    except Exception as exc:
        if not backends.is_oom(exc):
            raise
        status, error = backends.failure(exc)
        return results.make_record("matmul", status=status, error=error, repeats=0, **common)
    return results.make_record("matmul", **fields, **common)


def performance_test(
    device_name: str,
    size: int,
    method: str = "book",
    repeats: int = 5,
    dtype: str = "float32",
    *,
    notebook: str = "performanceTest",
    env: str | None = None,
    aligned_from: int | None = None,
) -> dict:
    """Multiply two size x size matrices on `device_name`; return its record ("oom" if too big).
    `aligned_from`: the swept n this aligned size stands beside (recorded as given)."""
    device = devices.resolve(device_name)
    positive_int("size", size)
    check_method(method)
    (dtype,) = check_dtypes([dtype])
    positive_int("repeats", repeats)
    common = dict(notebook=notebook, env=env or results.default_env_name(), device=device,
                  size=size, dtype=dtype, method=method, spec_peak_gflops=spec_peak(device, dtype),
                  aligned_from=aligned_from)
    if method == "book":
        return _record(lambda: _book(device, size, dtype), **common)
    return _record(lambda: _product_fields(_rigorous(device, size, dtype, repeats), size,
                                           "median"), **common)


def peak(device_name: str, dtype: str = "float32", *, notebook: str,
         env: str | None = None) -> dict:
    """The peak probe of `device_name` at `dtype`: the compiled product at n = PEAK_SIZE of the
    device's kind, warm, the fastest of PEAK_REPEATS blocks; its record (method "peak", seconds
    the fastest block's per-product time) is the reference of every "% of peak" ("skipped" and
    "oom" as performance_test)."""
    device = devices.resolve(device_name)
    (dtype,) = check_dtypes([dtype])
    size = PEAK_SIZE["cpu" if device.startswith("cpu") else "gpu"]
    common = dict(notebook=notebook, env=env or results.default_env_name(), device=device,
                  size=size, dtype=dtype, method=results.PEAK_METHOD,
                  spec_peak_gflops=spec_peak(device, dtype))
    return _record(lambda: _product_fields(_peak(device, size, dtype, PEAK_REPEATS), size, "min"),
                   **common)


def peaks_for(
    device_names: Sequence[str],
    dtypes: str | Sequence[str],
    *,
    store: results.ResultsStore | None = None,
    env: str | None = None,
    notebook: str,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """The peak record of this env for every device and dtype: the one already in the store's
    file, else a fresh `peak`, appended to the store as made (one probe per env and dtype).
    A peak that an earlier attempt of this same job measured is appended again for this attempt
    (`reused_from_attempt`), since a report keeps only each job's latest attempt."""
    resolved = [devices.resolve(name) for name in device_names]
    if not resolved:
        raise ValueError("devices is empty; pass at least one, e.g. [\"cpu\"]")
    dtypes = check_dtypes(dtypes)
    env = env or results.default_env_name()
    stored = store.read() if store is not None else []
    found = []
    for device, dtype in itertools.product(resolved, dtypes):
        record = (results.peak_record(results.latest_attempts(stored), env, device, dtype)
                  or results.peak_record(stored, env, device, dtype))
        if record is None:
            record = peak(device, dtype, notebook=notebook, env=env)
            if store is not None:
                store.append(record)
        elif record["notebook"] == notebook and record["attempt"] < results.current_attempt():
            record = store.append(reused(record))
        found.append(record)
        if progress is not None:
            progress(record)
    return found


def reused(record: dict) -> dict:
    """A copy of an earlier attempt's peak `record` that counts for the current attempt (its
    timings and `timestamp` stay the measurement's own)."""
    return record | {"schema": results.SCHEMA, "run_id": results.current_run_id(),
                     "attempt": results.current_attempt(),
                     "reused_from_attempt": record["attempt"]}


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
    method, storing each record as made; a rigorous record is followed by its aligned size's
    where `aligned_companion` gives one. Input is checked first, so bad input writes nothing."""
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
        jobs = [(size, None)]
        aligned = aligned_companion(size, device, one_dtype) if method == "rigorous" else None
        if aligned is not None and aligned not in sizes:
            jobs.append((aligned, size))
        for n, aligned_from in jobs:
            record = performance_test(device, n, method, repeats, one_dtype, notebook=notebook,
                                      env=env, aligned_from=aligned_from)
            if store is not None:
                store.append(record)
            records.append(record)
            if progress is not None:
                progress(record)
    return records


def describe(record: dict) -> str:
    """One line for a matmul record, for progress output (times in ms, one unit down a sweep)."""
    if record.get("method") == results.PEAK_METHOD:
        head = f"peak probe n={record['size']} {record['device']} {record['dtype']}:"
        if record["status"] != "ok":
            return f"{head} {record['status'].upper()}: {record['error']}"
        return (f"{head} {record['gflops']:.1f} GFLOP/s (fastest of {record['repeats']} blocks of "
                f"{record['products_per_block']})")
    head = (f"{record['size']:>5} x {record['size']:<5} {record['device']:<6} "
            f"{record['dtype']:<8} {record['method']:<9}")
    if record["status"] != "ok":
        return f"{head} {record['status'].upper()}: {record['error']}"
    line = f"{head} {1e3 * record['seconds']:9.4g} ms {record['gflops']:9.1f} GFLOP/s"
    if record.get("spec_peak_gflops"):
        line += f" ({100 * record['gflops'] / record['spec_peak_gflops']:.0f}% of datasheet peak)"
    if record.get("call_seconds") is not None:
        line += f"  one call {1e3 * record['call_seconds']:.4g} ms"
    if record.get("warm_seconds") is not None:
        line += f"  again {1e3 * record['warm_seconds']:.4g} ms"
    if record.get("aligned_from") is not None:
        line += f"  (n={record['aligned_from']} aligned)"
    return line
