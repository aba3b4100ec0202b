"""gpubench on JAX against bare Keras-JAX and a bare jitted matmul, side by side in one process.

Part 1: `gpubench.training.train` against a bare `model.fit` of the same compiled model, whose
epoch clock stops after `jax.block_until_ready` on the weights (the least a fair clock must
wait for), alternating for several rounds. Prints the fastest and the median steady epoch of
each and the ratio of the fastest (bare / gpubench); target >= 0.95.
Part 2: `gpubench.matmul.performance_test(method="rigorous")` against a bare loop of a jitted
`jnp.matmul` on the same operand size, each product blocked on, alternating. Prints the best
GFLOP/s of each and the ratio (gpubench / bare); target >= 0.95.

    KERAS_BACKEND=jax python benchmarks/backend_overhead.py [--rounds 6] [--epochs 3]
        [--samples 12000] [--size 2000] [--repeats 20]
"""

from __future__ import annotations

import os
import statistics
import time

from bare import epoch_clock, machine, parse_rounds, round_options

import gpubench as gb


def bare_jax_fit(model, split, epochs: int, batch_size: int) -> list[float]:
    """model.fit with a clock that blocks on the weights at each epoch's end."""
    import jax

    clock = epoch_clock(lambda m: jax.block_until_ready([v.value for v in m.variables]))
    model.fit(split.x_train, split.y_train, batch_size=batch_size, epochs=epochs,
              validation_data=(split.x_val, split.y_val), callbacks=[clock], verbose=0)
    return clock.times


def bare_matmul_gflops(size: int, repeats: int) -> float:
    """Best GFLOP/s of `repeats` jitted products of two size x size float32 matrices."""
    import jax
    import jax.numpy as jnp

    kw, kx = jax.random.split(jax.random.key(1))
    w = jax.random.normal(kw, (size, size), dtype=jnp.float32)
    x = jax.random.normal(kx, (size, size), dtype=jnp.float32)
    product = jax.jit(jnp.matmul)
    product(w, x).block_until_ready()  # compile
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        product(w, x).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def training(args) -> None:
    """Part 1: the book's MLP, gpubench against the bare fit."""
    data = gb.data.load("mnist", source="synthetic", max_train_samples=args.samples, verbose=False)
    split = gb.training.prepare("mlp_h1000", data)
    model = gb.training.build_model("mlp_h1000", "cpu")
    steady = {"gpubench": [], "bare": []}
    for i in range(args.rounds):
        for who in (("gpubench", "bare") if i % 2 == 0 else ("bare", "gpubench")):
            if who == "gpubench":
                run = gb.training.train(model, data, epochs=args.epochs, batch_size=100,
                                        device="cpu", env="benchmark", verbose=0)
                times = run.record["epoch_seconds"]
            else:
                times = bare_jax_fit(model, split, args.epochs, 100)
            steady[who] += times[1:]
    g, b = min(steady["gpubench"]), min(steady["bare"])
    print(f"training mlp_h1000: fastest steady epoch gpubench {g:.3f} s, bare {b:.3f} s "
          f"(medians {statistics.median(steady['gpubench']):.3f} / "
          f"{statistics.median(steady['bare']):.3f} s, {len(steady['bare'])} epochs each); "
          f"ratio bare/gpubench {b / g:.3f} (target >= 0.95)")


def matmul(args) -> None:
    """Part 2: the rigorous matmul, gpubench against the bare jitted loop."""
    best = {"gpubench": 0.0, "bare": 0.0}
    for i in range(args.rounds):
        for who in (("gpubench", "bare") if i % 2 == 0 else ("bare", "gpubench")):
            if who == "gpubench":
                record = gb.matmul.performance_test("cpu", args.size, "rigorous",
                                                    repeats=args.repeats)
                found = 2 * args.size**3 / record["seconds_min"] / 1e9
            else:
                found = bare_matmul_gflops(args.size, args.repeats)
            best[who] = max(best[who], found)
    print(f"matmul {args.size}: best gpubench {best['gpubench']:.1f} GFLOP/s, bare "
          f"{best['bare']:.1f} GFLOP/s; ratio gpubench/bare "
          f"{best['gpubench'] / best['bare']:.3f} (target >= 0.95)")


def main() -> None:
    """Both parts, on the backend KERAS_BACKEND names (JAX)."""
    parser = round_options(__doc__, rounds=6, epochs=3)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parse_rounds(parser)
    if gb.backends.requested() != "jax":
        parser.error(f"run it on JAX: KERAS_BACKEND=jax (now {os.environ.get('KERAS_BACKEND')!r})")
    print(f"{machine()}; {args.rounds} rounds x {args.epochs} epochs, {args.samples} images")
    training(args)
    matmul(args)


if __name__ == "__main__":
    main()
