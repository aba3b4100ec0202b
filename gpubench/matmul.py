"""The book's matmul test, the book's way ("book": one timing, set-up included) and the rigorous
way (product time and call latency of a compiled product), and each env's peak probe. `tf32`:
whether a float32 product may use TF32. Its chapter code is exported from performanceTest.
"""
from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Sequence

from gpubench import backends, devices, fmt, results, timing
from gpubench.params import check_value, positive_int

keras = backends.keras()  # Keras on the env's backend, its start-up chatter held back
ops = keras.ops
backend = backends.current()  # the seam: device placement, sync and compiling, per backend

METHODS = ("book", "rigorous")  # the sweep's methods; the peak probe is `peak` alone
GPU_MIN_CAPABILITY = {"bfloat16": (8, 0)}  # the oldest GPUs that run a dtype's matmul natively
# The peak probe's n: big enough to keep the device busy. Not a power of two on a CPU: rows 2^k
# bytes apart share cache sets (TensorFlow ran n=4096 at half n=4000's speed on a 2-core EPYC).
PEAK_SIZE = {"gpu": 8192, "cpu": 4000}
PEAK_REPEATS = 5


def check_dtypes(dtypes) -> list[str]:
    """One dtype or a list of them as a list of supported dtypes, or raise naming the bad one."""
    checked = check_value("dtype", [None] if dtypes is None else dtypes)
    return [checked] if isinstance(checked, str) else checked


def check_method(method: str) -> str:
    """Return `method` if known, or raise naming it and the accepted ones."""
    if method not in METHODS:
        peak = " is the peak probe (gb.matmul.peak or peaks_for)" if method == "peak" else ""
        raise ValueError(f"unknown method {method!r}{peak}; use one of {', '.join(METHODS)}")
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


def aligned_companion(size: int, device: str, dtype: str) -> int | None:
    """The aligned n timed beside `size` on a GPU at a 16-bit dtype (peaks.aligned_size)."""
    if not device.startswith("gpu") or dtype not in ("float16", "bfloat16"):
        return None
    from gpubench import peaks  # noqa: PLC0415 - the GPU's facts, only for a GPU

    return peaks.aligned_size(size, dtype) if peaks.aligned_size(size, dtype) != size else None


def tf32_of(device: str, dtype: str) -> bool | None:
    """Whether a `dtype` product on `device` may use TF32 now: None but for float32; CPU: False."""
    if dtype != "float32":
        return None
    return device.startswith("gpu") and backend.tf32_enabled()


def spec_peak(device: str, dtype: str) -> float | None:
    """The datasheet peak GFLOP/s of `device` at `dtype` as it runs (None: CPU, unknown GPU)."""
    gpus = results.environment_snapshot()["gpus"] if device.startswith("gpu") else []
    index = int(device.split(":")[1]) if gpus else 0
    if index >= len(gpus):
        return None
    from gpubench import peaks  # noqa: PLC0415 - the datasheet table, only for a GPU

    return peaks.spec_peak_gflops(gpus[index]["name"], dtype, tf32=bool(tf32_of(device, dtype)))


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
    """The rigorous measurement: the first call (it compiles) alone, then at least `repeats`
    blocks of products, one sync per block (product time), and single calls (call latency)."""
    device = devices.resolve(device_name)
    run = rigorous_product(device, size, dtype)
    with backend.scope(device):  # once around every call: no per-call cost in the blocks
        return timing.measure_blocks(run, repeats=repeats, device=device)


# END CHAPTER CODE


def gflops(size: int, seconds: float) -> float:
    """GFLOP/s of one size x size product that took `seconds`: 2 n^3 / seconds / 10^9."""
    return 2 * size**3 / seconds / 1e9


def _book(device: str, size: int, dtype: str) -> dict:
    """The chapter's performanceTest once (set-up included), then again at the same shape."""
    with timing.region(device) as found:
        seconds = performanceTest(device, size, dtype)
    return dict(seconds=seconds, seconds_min=seconds, seconds_max=seconds, seconds_iqr=0.0,
                first_seconds=seconds, repeats=1, gflops=gflops(size, seconds),
                warm_seconds=performanceTest(device, size, dtype), **found)


def _product_fields(m: timing.Measurement, size: int, figure: str) -> dict:
    """A rigorous or peak record's timing fields, `seconds` the blocks' median or min."""
    s = m.stats
    return dict(seconds=getattr(s, figure), seconds_min=s.min, seconds_max=s.max,
                seconds_iqr=s.iqr, first_seconds=m.first, repeats=s.n,
                gflops=gflops(size, getattr(s, figure)), products_per_block=m.per_block,
                call_seconds=m.call_stats.median, relative_spread=round(s.spread, 4),
                noisy=m.noisy, telemetry=m.telemetry, load_average=m.load_average)


def _record(measure: Callable[[], dict], **common) -> dict:
    """One measurement's record: "skipped" where the device cannot run it, "oom", or measured."""
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


def performance_test(device_name: str, size: int, method: str = "book", repeats: int = 5,
                     dtype: str = "float32", *, notebook: str = "performanceTest",
                     env: str | None = None, aligned_from: int | None = None,
                     true_float32: bool = False) -> dict:
    """Multiply two size x size matrices on `device_name`: the measurement's record."""
    device = devices.resolve(device_name)
    positive_int("size", size)
    check_method(method)
    (dtype,) = check_dtypes([dtype])
    positive_int("repeats", repeats)
    with backend.float32_precision(False) if true_float32 else contextlib.nullcontext():
        common = dict(notebook=notebook, env=env or results.default_env_name(), device=device,
                      size=size, dtype=dtype, method=method, tf32=tf32_of(device, dtype),
                      spec_peak_gflops=spec_peak(device, dtype), aligned_from=aligned_from)
        if method == "book":
            return _record(lambda: _book(device, size, dtype), **common)
        return _record(lambda: _product_fields(rigorous_test(device, size, dtype, repeats), size,
                                               "median"), **common)


def peak(device_name: str, dtype: str = "float32", *, notebook: str,
         env: str | None = None) -> dict:
    """The peak probe's record: the fastest block at PEAK_SIZE, each "% of achievable"'s base."""
    device = devices.resolve(device_name)
    (dtype,) = check_dtypes([dtype])
    size = PEAK_SIZE["cpu" if device.startswith("cpu") else "gpu"]
    common = dict(notebook=notebook, env=env or results.default_env_name(), device=device,
                  size=size, dtype=dtype, method=results.PEAK_METHOD, tf32=tf32_of(device, dtype),
                  spec_peak_gflops=spec_peak(device, dtype))
    return _record(lambda: _product_fields(rigorous_test(device, size, dtype, PEAK_REPEATS),
                                           size, "min"), **common)


def _devices(device_names: Sequence[str]) -> list[str]:
    """The devices resolved, at least one."""
    if not device_names:
        raise ValueError("devices is empty; pass at least one, e.g. [\"cpu\"]")
    return [devices.resolve(name) for name in device_names]


def peaks_for(device_names: Sequence[str], dtypes: str | Sequence[str], *,
              store: results.ResultsStore | None = None, env: str | None = None,
              notebook: str, progress: Callable[[dict], None] | None = None) -> list[dict]:
    """This env's peak record per device and dtype: the stored one, else a new `peak`, stored."""
    resolved, dtypes = _devices(device_names), check_dtypes(dtypes)
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
            record = store.append(record | {  # counted for this attempt, timings its own
                "schema": results.SCHEMA, "run_id": results.current_run_id(),
                "attempt": results.current_attempt(), "reused_from_attempt": record["attempt"]})
        found.append(record)
        if progress is not None:
            progress(record)
    return found


def sweep(sizes: Sequence[int], device_names: Sequence[str], methods: Sequence[str] = METHODS,
          repeats: int = 5, dtype: str | Sequence[str] = "float32", *,
          store: results.ResultsStore | None = None, env: str | None = None,
          notebook: str = "performanceTest", progress: Callable[[dict], None] | None = None,
          true_float32: bool = False) -> list[dict]:
    """`performance_test` of every size, device, dtype (and true float32) and method, stored."""
    sizes, resolved = check_value("sizes", sizes), _devices(device_names)
    for method in methods:
        check_method(method)
    dtypes = check_dtypes(dtype)
    positive_int("repeats", repeats)
    if not isinstance(true_float32 := check_value("true_float32", true_float32), bool):
        raise ValueError(f"true_float32 must be True or False, got {true_float32!r}")
    records = []
    for size, device, one_dtype in itertools.product(sizes, resolved, dtypes):
        strict = [False, True] if true_float32 and tf32_of(device, one_dtype) else [False]
        for off, method in itertools.product(strict, methods):
            jobs = [(size, None)]
            aligned = aligned_companion(size, device, one_dtype) if method == "rigorous" else None
            if aligned is not None and aligned not in sizes:
                jobs.append((aligned, size))
            for n, aligned_from in jobs:
                record = performance_test(device, n, method, repeats, one_dtype,
                                          notebook=notebook, env=env, aligned_from=aligned_from,
                                          true_float32=off)
                if store is not None:
                    store.append(record)
                records.append(record)
                if progress is not None:
                    progress(record)
    return records


def describe(record: dict) -> str:
    """One line for a matmul record, for progress output (times in ms)."""
    dtype = fmt.dtype_label(record["dtype"], record.get("tf32"))
    if record.get("method") == results.PEAK_METHOD:
        head = f"peak probe n={record['size']} {record['device']} {dtype}:"
        if record["status"] != "ok":
            return f"{head} {record['status'].upper()}: {record['error']}"
        return (f"{head} {record['gflops']:.1f} GFLOP/s (fastest of {record['repeats']} blocks of "
                f"{record['products_per_block']})")
    head = (f"{record['size']:>5} x {record['size']:<5} {record['device']:<6} {dtype:<8} "
            f"{record['method']:<9}")
    if record["status"] != "ok":
        return f"{head} {record['status'].upper()}: {record['error']}"
    line = f"{head} {1e3 * record['seconds']:9.4g} ms {record['gflops']:9.1f} GFLOP/s"
    if record.get("spec_peak_gflops"):
        line += f" ({100 * record['gflops'] / record['spec_peak_gflops']:.0f}% of datasheet peak)"
    if record.get("call_seconds") is not None:
        line += f"  one call {1e3 * record['call_seconds']:.4g} ms"
    if record.get("noisy"):
        line += f"  NOISY (spread {100 * record['relative_spread']:.0f}%)"
    if record.get("warm_seconds") is not None:
        line += f"  again {1e3 * record['warm_seconds']:.4g} ms"
    if record.get("aligned_from") is not None:
        line += f"  (n={record['aligned_from']} aligned)"
    return line
