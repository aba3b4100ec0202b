"""The book's matmul test, the book's way ("book": one timing, set-up included) and the rigorous
way (product time and call latency of a compiled product), and each env's peak probe. Its chapter
code is exported from performanceTest; a GPU's facts come from gpubench.peaks."""
from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Sequence

from gpubench import backends, devices, plots, results, timing
from gpubench.fmt import MISSING
from gpubench.params import check_value, positive_int

keras = backends.keras()  # Keras on the env's backend, its start-up chatter held back
ops = keras.ops
backend = backends.current()  # the seam: device placement, sync and compiling, per backend

METHODS = ("book", "rigorous")  # the sweep's methods; the peak probe is `peak` alone
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


def tf32_of(device: str, dtype: str) -> bool | None:
    """Whether a `dtype` product on `device` may use TF32 now: None but for float32; CPU: False."""
    if dtype != "float32":
        return None
    return device.startswith("gpu") and backend.tf32_enabled()


# Written by tools/export_chapters.py from the chapter's #@save cells: edit those.
# BEGIN CHAPTER CODE from performanceTest


def performanceTest(device_name, size, dtype="float32"):
    """The book's timing of one W @ X: W and X made on the device, the sum fetched, in seconds."""
    device = devices.resolve(device_name)  # "/gpu:0" as the book writes it, or "gpu:0"
    start = time.perf_counter()
    with backend.scope(device):
        w = keras.random.normal((size, size), dtype=dtype, seed=1)
        x = keras.random.normal((size, size), dtype=dtype, seed=2)
        total = ops.sum(ops.matmul(w, x))
    float(total)  # fetching the sum waits for the device, as the book's sess.run did
    return time.perf_counter() - start


def rigorous_product(device_name, size, dtype="float32"):
    """The compiled W @ X, W and X made on the device beforehand: call it in its `backend.scope`."""
    device = devices.resolve(device_name)
    with backend.scope(device):
        w = keras.random.normal((size, size), dtype=dtype, seed=1)
        x = keras.random.normal((size, size), dtype=dtype, seed=2)
    backend.sync(w, x)  # the operands exist before any clock starts
    product = backend.compiled(ops.matmul)  # tf.function on TensorFlow, jax.jit on JAX
    return lambda: product(w, x)


def rigorous_test(device_name, size, dtype="float32", repeats=5):
    """`rigorous_product` timed: its first call (compiling) apart, product time, call latency."""
    device = devices.resolve(device_name)
    run = rigorous_product(device, size, dtype)
    with backend.scope(device):  # once around every call: no per-call cost in the blocks
        return timing.measure_blocks(run, repeats=repeats, device=device)


# END CHAPTER CODE


def _peaks(device: str):
    if not device.startswith("gpu"):
        return None
    from gpubench import peaks  # noqa: PLC0415 - a GPU's facts: never loaded for a CPU
    return peaks


def gflops(size: int, seconds: float) -> float:
    """GFLOP/s of one size x size product that took `seconds`: 2 n^3 / seconds / 10^9."""
    return 2 * size**3 / seconds / 1e9


def _product_fields(m: timing.Measurement, size: int, figure: str) -> dict:
    """A rigorous or peak record's timing fields, `seconds` the blocks' median or min."""
    s = m.stats
    return dict(seconds=getattr(s, figure), seconds_min=s.min, seconds_max=s.max,
                seconds_iqr=s.iqr, first_seconds=m.first, repeats=s.n,
                gflops=gflops(size, getattr(s, figure)), products_per_block=m.per_block,
                call_seconds=m.call_stats.median, call_seconds_iqr=m.call_stats.iqr,
                relative_spread=round(s.spread, 4),
                noisy=m.noisy, telemetry=m.telemetry, load_average=m.load_average)


def _record(device: str, size: int, dtype: str, method: str, measure: Callable[[], dict], *,
            notebook: str, env: str | None, **more) -> dict:
    """One measurement's record: "skipped" where the GPU cannot run `dtype`, "oom", or measured."""
    common = dict(notebook=notebook, env=env or results.default_env_name(), device=device,
                  size=size, dtype=dtype, method=method, tf32=tf32_of(device, dtype), **more)
    reason = None
    if (gpu := _peaks(device)) is not None:
        common["spec_peak_gflops"] = gpu.spec_peak(device, dtype, bool(common["tf32"]))
        reason = gpu.unsupported_reason(device, dtype)
    try:
        fields = dict(status="skipped", error=reason, repeats=0) if reason else measure()
    except Exception as exc:
        if not backends.is_oom(exc):
            raise
        status, error = backends.failure(exc)
        fields = dict(status=status, error=error, repeats=0)
    return results.make_record("matmul", **fields, **common)


def performance_test(device_name: str, size: int, method: str = "book", repeats: int = 5,
                     dtype: str = "float32", *, notebook: str = "performanceTest",
                     env: str | None = None, aligned_from: int | None = None,
                     true_float32: bool = False) -> dict:
    """Multiply two size x size matrices on `device_name`: the measurement's record."""
    device, (dtype,) = devices.resolve(device_name), check_dtypes([dtype])
    positive_int("size", size)
    positive_int("repeats", repeats)

    def measure() -> dict:  # the book's: the chapter's performanceTest, then again at that shape
        if method != "book":
            return _product_fields(rigorous_test(device, size, dtype, repeats), size, "median")
        with timing.region(device) as found:
            seconds = performanceTest(device, size, dtype)
        return dict(seconds=seconds, seconds_min=seconds, seconds_max=seconds, seconds_iqr=0.0,
                    first_seconds=seconds, repeats=1, gflops=gflops(size, seconds),
                    warm_seconds=performanceTest(device, size, dtype), **found)

    with backend.float32_precision(False) if true_float32 else contextlib.nullcontext():
        return _record(device, size, dtype, check_method(method), measure, notebook=notebook,
                       env=env, aligned_from=aligned_from)


def peak(device_name: str, dtype: str = "float32", *, notebook: str,
         env: str | None = None) -> dict:
    """The peak probe's record: the fastest block at PEAK_SIZE, each "% of achievable"'s base."""
    device, (dtype,) = devices.resolve(device_name), check_dtypes([dtype])
    size = PEAK_SIZE["cpu" if device.startswith("cpu") else "gpu"]
    return _record(device, size, dtype, results.PEAK_METHOD, lambda: _product_fields(
        rigorous_test(device, size, dtype, PEAK_REPEATS), size, "min"), notebook=notebook, env=env)


def peaks_for(device_names: Sequence[str], dtypes: str | Sequence[str], *,
              store: results.ResultsStore | None = None, env: str | None = None,
              notebook: str, progress: Callable[[dict], None] | None = None) -> list[dict]:
    """This env's peak record per device and dtype: the stored one, else a new `peak`, stored."""
    resolved = [devices.resolve(n) for n in check_value("devices", device_names or [])]
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
    sizes, dtypes = check_value("sizes", sizes), check_dtypes(dtype)
    resolved = [devices.resolve(n) for n in check_value("devices", device_names or [])]
    methods = [check_method(method) for method in methods]
    positive_int("repeats", repeats)
    true_float32 = check_value("true_float32", true_float32)
    records = []
    for size, device, one_dtype in itertools.product(sizes, resolved, dtypes):
        strict = [False, True] if true_float32 and tf32_of(device, one_dtype) else [False]
        gpu = _peaks(device)
        aligned = gpu.aligned_companion(size, device, one_dtype) if gpu is not None else None
        for off, method in itertools.product(strict, methods):
            jobs = [(size, None)]
            if method == "rigorous" and aligned is not None and aligned not in sizes:
                jobs.append((aligned, size))
            for n, aligned_from in jobs:
                records.append(performance_test(device, n, method, repeats, one_dtype,
                                                notebook=notebook, env=env,
                                                aligned_from=aligned_from, true_float32=off))
                if store is not None:
                    store.append(records[-1])
                if progress is not None:
                    progress(records[-1])
    return records


def describe(record: dict) -> str:
    """One progress line of a matmul record: its cells of the matmul table (`plots.cells`)."""
    r = record
    head = f"{r['method']} n={r['size']} {r['device']} {plots.label_of(r)}:"
    if r["status"] != "ok":
        return f"{head} {r['status'].upper()}: {r['error']}"
    cells = plots.cells(r, [r]).items()
    return f"{head} " + "; ".join(f"{h} {c}" for h, c in cells if c != MISSING)
