"""gpubench's matmul product time against a bare loop, with its call latency beside it.

For each n, side by side in one process and alternating round by round (so that drift on a
noisy machine hits both alike):
- gpubench: `gb.matmul.performance_test(method="rigorous")`, exactly as the notebook runs it:
  its product time (blocks of products, one sync per block) and its call latency;
- bare: the same product compiled by hand (`tf.function` or `jax.jit` of a matmul on two
  random float32 matrices), queued `products_per_block` times (gpubench's block length) and
  synced once; the median of `--repeats` blocks.
Prints the medians over the rounds of per-product times, the ratio bare / gpubench (target
>= 0.95: gpubench's blocks cost the product and nothing else) and the same ratio of the
fastest rounds (the least disturbed, steadier on a shared machine), gpubench's call latency,
and the overhead per call in microseconds (call latency - product time: the launch and sync
a single call pays; 0 where a product alone fills a block, so that blocks are single calls).
The backend is Keras's (KERAS_BACKEND); the one backend branch is `bare_product`.

With --aligned, it times instead each n of that list and its aligned size
(`gb.peaks.aligned_size`, the next multiple of 8 at 16-bit dtypes) at --dtype, alternating,
and prints the GFLOP/s of both: what the GPU sweep's aligned records show, on this CPU.

    python benchmarks/matmul_overhead.py [--sizes 64,128,256,512,1000,2000] [--rounds 5]
        [--repeats 5]
    KERAS_BACKEND=jax .venv-jax/bin/python benchmarks/matmul_overhead.py
    python benchmarks/matmul_overhead.py --aligned 500,1500 --dtype bfloat16 [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import gpubench as gb


def bare_product(size: int) -> tuple[Callable[[], object], Callable[[object], None]]:
    """(one compiled product on the CPU, a sync on its result), written without gpubench."""
    if gb.backends.current().NAME == "jax":
        import jax
        import jax.numpy as jnp

        cpu = jax.devices("cpu")[0]
        kw, kx = jax.random.split(jax.random.key(1))
        w = jax.device_put(jax.random.normal(kw, (size, size), dtype=jnp.float32), cpu)
        x = jax.device_put(jax.random.normal(kx, (size, size), dtype=jnp.float32), cpu)
        product = jax.jit(jnp.matmul)
        return (lambda: product(w, x)), jax.block_until_ready
    import tensorflow as tf

    with tf.device("/CPU:0"):
        w = tf.random.normal([size, size])
        x = tf.random.normal([size, size])
    # A lambda, not tf.function(tf.matmul): tf.matmul's own signature binds slower per call
    # (600 against 250 µs on the 2-core VM), which would flatter gpubench.
    product = tf.function(lambda a, b: tf.matmul(a, b), autograph=False)
    return (lambda: product(w, x)), lambda _: tf.test.experimental.sync_devices()


def bare_blocks(run: Callable[[], object], sync: Callable[[object], None], per_block: int,
                repeats: int) -> float:
    """Median per-product seconds of `repeats` blocks of `per_block` products, one sync each."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(per_block):
            result = run()
        sync(result)
        times.append((time.perf_counter() - start) / per_block)
    return statistics.median(times)


def gpubench_rigorous(size: int, repeats: int, dtype: str = "float32") -> dict:
    """gpubench's rigorous record, exactly as the notebook makes it."""
    return gb.matmul.performance_test("cpu", size, method="rigorous", repeats=repeats,
                                      dtype=dtype, env="benchmark")


def aligned(sizes: list[int], dtype: str, rounds: int, repeats: int) -> None:
    """Each n and its aligned size at `dtype`, alternating: the median GFLOP/s of each."""
    print("| n | GFLOP/s | aligned n | GFLOP/s | aligned / n |")
    print("|---|---|---|---|---|")
    for size in sizes:
        other = gb.peaks.aligned_size(size, dtype)
        rates: dict[int, list[float]] = {size: [], other: []}
        for i in range(rounds):
            for n in ((size, other) if i % 2 == 0 else (other, size)):
                rates[n].append(gpubench_rigorous(n, repeats, dtype)["gflops"])
        mine, theirs = statistics.median(rates[size]), statistics.median(rates[other])
        print(f"| {size} | {mine:,.1f} | {other} | {theirs:,.1f} | {theirs / mine:.3f} |")


def main() -> None:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,128,256,512,1000,2000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--aligned", help="sizes to time beside their aligned size")
    parser.add_argument("--dtype", default="bfloat16", help="the dtype of --aligned")
    args = parser.parse_args()
    env = gb.results.environment_snapshot()
    dtype = args.dtype if args.aligned else "float32"
    print(f"CPU: {env['cpu_model']} ({env['cpu_count']} cores); {env['backend']} "
          f"{env['backend_version']}, Keras {env['keras']}; {dtype}; {args.rounds} rounds, "
          f"{args.repeats} blocks each")
    if args.aligned:
        aligned([int(s) for s in args.aligned.split(",")], dtype, args.rounds, args.repeats)
        return
    print("| n | products per block | gpubench product time | bare loop | bare / gpubench "
          "| fastest rounds: bare / gpubench | gpubench call latency | overhead per call |")
    print("|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        run, sync = bare_product(size)
        per_block = gpubench_rigorous(size, args.repeats)["products_per_block"]  # and warm-up
        bare_blocks(run, sync, per_block, 1)  # compile the bare product
        ours, bare, calls = [], [], []
        for i in range(args.rounds):
            for name in (("gpubench", "bare") if i % 2 == 0 else ("bare", "gpubench")):
                if name == "bare":
                    bare.append(bare_blocks(run, sync, per_block, args.repeats))
                    continue
                record = gpubench_rigorous(size, args.repeats)
                per_block = record["products_per_block"]
                ours.append(record["seconds"])
                calls.append(record["call_seconds"])
        product, loop, call = (statistics.median(v) for v in (ours, bare, calls))
        print(f"| {size} | {per_block} | {product * 1e6:,.1f} µs | {loop * 1e6:,.1f} µs "
              f"| {loop / product:.3f} | {min(bare) / min(ours):.3f} | {call * 1e6:,.1f} µs "
              f"| {(call - product) * 1e6:,.1f} µs |")


if __name__ == "__main__":
    main()
