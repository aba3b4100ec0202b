"""The book's matrix-multiplication test, done the book's way and the rigorous way.

book:      build two random-normal matrices on the device, multiply, sum, and time
           one run that includes all of that set-up (what the chapter's
           `performanceTest` timed with one `sess.run`).
rigorous:  the matrices exist on the device beforehand; the product runs as a
           compiled `tf.function`; warm-up, device sync, the median of repeats.
Both report seconds and GFLOP/s, counting 2*n^3 floating-point operations.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from gpubench import devices, results, timing
from gpubench._tf import tensorflow

METHODS = ("book", "rigorous")
DTYPES = ("float32", "float64", "float16", "bfloat16")
BOOK_SIZES = tuple(range(500, 5001, 500))


def flops(size: int) -> int:
    """Floating-point operations of one n x n by n x n product."""
    return 2 * size**3


def check_sizes(sizes: Iterable) -> list[int]:
    """Return `sizes` as a list of positive ints, or raise naming the bad value."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
        sizes = [sizes]
    checked = []
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(
                f"matrix size {size!r} is not a positive integer; "
                "pass sizes such as [500, 1000, 1500]"
            )
        checked.append(size)
    if not checked:
        raise ValueError("sizes is empty; pass at least one positive integer such as [1000]")
    return checked


def check_dtype(dtype: str) -> str:
    """Return `dtype` if supported, or raise naming it and the accepted ones."""
    if dtype not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return dtype


def check_method(method: str) -> str:
    """Return `method` if known, or raise naming it and the accepted ones."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    return method


def _book_seconds(tf_device: str, size: int, dtype: str) -> float:
    """One timed run including the set-up, as the chapter's performanceTest does."""
    tf = tensorflow()
    start = time.perf_counter()
    with tf.device(tf_device):
        w = tf.random.normal([size, size], dtype=dtype)
        x = tf.random.normal([size, size], dtype=dtype)
        total = tf.reduce_sum(tf.matmul(w, x))
    total.numpy()  # fetching the sum waits for the device, like sess.run did
    return time.perf_counter() - start


def _rigorous(tf_device: str, size: int, dtype: str, repeats: int) -> timing.Measurement:
    """Median of `repeats` compiled products on operands already on the device."""
    tf = tensorflow()
    with tf.device(tf_device):
        w = tf.random.normal([size, size], dtype=dtype)
        x = tf.random.normal([size, size], dtype=dtype)
    timing.sync()

    @tf.function(autograph=False, jit_compile=False)
    def product():
        with tf.device(tf_device):
            return tf.matmul(w, x)

    return timing.measure(product, warmup=2, repeats=repeats)


def _is_oom(exc: BaseException) -> bool:
    tf = tensorflow()
    return isinstance(exc, (MemoryError, tf.errors.ResourceExhaustedError))


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
    """Multiply two size x size matrices on `device_name`; return the measurement's record.

    A size that does not fit in memory returns a record with status "oom" instead
    of raising, so a sweep can go on.
    """
    device = devices.resolve(device_name)
    (size,) = check_sizes([size])
    check_method(method)
    check_dtype(dtype)
    timing._check_count("repeats", repeats, 1)
    env = env or results.default_env_name()
    common = dict(notebook=notebook, env=env, device=device, size=size, dtype=dtype, method=method)
    try:
        if method == "book":
            seconds = _book_seconds(devices.tf_name(device), size, dtype)
            fields = dict(seconds=seconds, seconds_min=seconds, seconds_max=seconds,
                          seconds_iqr=0.0, first_seconds=seconds, repeats=1)
        else:
            m = _rigorous(devices.tf_name(device), size, dtype, repeats)
            s = m.stats
            fields = dict(seconds=s.median, seconds_min=s.min, seconds_max=s.max,
                          seconds_iqr=s.iqr, first_seconds=m.first, repeats=s.n)
    except Exception as exc:  # noqa: BLE001 - OOM is a result, anything else re-raised
        if not _is_oom(exc):
            raise
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return results.make_record("matmul", status="oom", error=message, repeats=0, **common)
    return results.make_record("matmul", gflops=flops(size) / fields["seconds"] / 1e9,
                               **fields, **common)


def sweep(
    sizes: Sequence[int],
    device_names: Sequence[str],
    methods: Sequence[str] = METHODS,
    repeats: int = 5,
    dtype: str = "float32",
    *,
    store: results.ResultsStore | None = None,
    env: str | None = None,
    notebook: str = "performanceTest",
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Run `performance_test` for every size, device and method; store each record as it is made.

    Everything is validated before the first measurement, so bad input writes nothing.
    Sizes are the outer loop and devices keep the order given (the book: GPU, then CPU).
    """
    sizes = check_sizes(sizes)
    resolved = [devices.resolve(name) for name in device_names]
    if not resolved:
        raise ValueError("devices is empty; pass at least one, e.g. [\"cpu\"]")
    for method in methods:
        check_method(method)
    check_dtype(dtype)
    timing._check_count("repeats", repeats, 1)
    records = []
    for size in sizes:
        for device in resolved:
            for method in methods:
                record = performance_test(device, size, method, repeats, dtype,
                                          notebook=notebook, env=env)
                if store is not None:
                    store.append(record)
                records.append(record)
                if progress is not None:
                    progress(record)
    return records


def describe(record: dict) -> str:
    """One line for a matmul record, for progress output."""
    head = f"{record['size']:>5} x {record['size']:<5} {record['device']:<6} {record['method']:<9}"
    if record["status"] != "ok":
        return f"{head} {record['status'].upper()}: {record['error']}"
    return f"{head} {record['seconds']:9.4f} s  {record['gflops']:9.1f} GFLOP/s"
