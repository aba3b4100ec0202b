"""How close gpubench's rigorous matmul timing comes to bare TensorFlow, and numpy beside both.

Measured side by side in one process, alternating the three in every round so
that drift on a noisy machine hits all of them alike. Prints median seconds and
GFLOP/s per size, and the ratio gpubench / bare TensorFlow in throughput
(target: at least 0.95).

    python benchmarks/matmul_overhead.py [--sizes 2000,3000,4000] [--rounds 5] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import gpubench as gb


def bare_tf(size: int, repeats: int) -> float:
    """A plain tf.function matmul loop: operands on the CPU beforehand, median of `repeats`."""
    tf = gb.backends.current().tf()
    with tf.device("/CPU:0"):
        a = tf.random.normal([size, size])
        b = tf.random.normal([size, size])

    @tf.function(autograph=False)
    def product():
        return tf.matmul(a, b)

    product()
    product()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        tf.test.experimental.sync_devices()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bare_numpy(size: int, repeats: int) -> float:
    """numpy `a @ b` on two different matrices (`a @ a.T` would take a half-work routine)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gpubench_rigorous(size: int, repeats: int) -> float:
    """gpubench's rigorous method, exactly as the notebook runs it."""
    record = gb.matmul.performance_test("cpu", size, method="rigorous", repeats=repeats,
                                        env="benchmark")
    return record["seconds"]


def main() -> None:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,3000,4000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    contenders = {"gpubench": gpubench_rigorous, "bare_tf": bare_tf, "numpy": bare_numpy}
    env = gb.results.environment_snapshot()
    print(f"CPU: {env['cpu_model']} ({env['cpu_count']} cores); TensorFlow {env['tensorflow']}, "
          f"numpy {np.__version__}; {args.rounds} rounds x {args.repeats} repeats, float32")
    print(f"{'size':>6} {'gpubench':>18} {'bare tf.function':>18} {'numpy a@b':>18} "
          f"{'gpubench/bare':>14} {'numpy/bare':>11}")
    for size in sizes:
        rounds: dict[str, list[float]] = {name: [] for name in contenders}
        for i in range(args.rounds):
            order = list(contenders) if i % 2 == 0 else list(reversed(contenders))
            for name in order:
                rounds[name].append(contenders[name](size, args.repeats))
        med = {name: statistics.median(v) for name, v in rounds.items()}
        gflops = {name: 2 * size**3 / s / 1e9 for name, s in med.items()}
        cells = [f"{med[n]:.4f} s {gflops[n]:5.0f} GF" for n in contenders]
        print(f"{size:>6} " + " ".join(f"{c:>18}" for c in cells)
              + f" {gflops['gpubench'] / gflops['bare_tf']:>14.3f}"
              + f" {gflops['numpy'] / gflops['bare_tf']:>11.3f}")


if __name__ == "__main__":
    main()
