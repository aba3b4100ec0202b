"""gpubench on JAX or PyTorch against bare Keras and a bare matmul, side by side in one process.

Part 1: the training chapters' cells (`bare.gpubench_fit`) against a bare `model.fit` of the
same compiled model, whose epoch clock stops after the backend's wait (JAX: `jax.block_until_ready` on the weights;
torch: `torch.cuda.synchronize()` where CUDA started, nothing on the CPU), alternating for
several rounds. Prints the fastest and the median steady epoch of each and the ratio of the
fastest (bare / gpubench); target >= 0.95.
Part 2: `gpubench.matmul.performance_test(method="rigorous")` against a bare loop of the
backend's own matmul (a jitted `jnp.matmul`; torch's eager `torch.matmul`) on the same operand
size, each product waited for, alternating. Prints the best GFLOP/s of each and the ratio
(gpubench / bare); target >= 0.95.

    KERAS_BACKEND=jax python benchmarks/backend_overhead.py [--rounds 6] [--epochs 3]
        [--samples 12000] [--size 2000] [--repeats 20]
    KERAS_BACKEND=torch python benchmarks/backend_overhead.py ...
"""

from __future__ import annotations

import os
import statistics
import time

from bare import epoch_clock, gpubench_fit, machine, parse_rounds, round_options

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


def bare_torch_fit(model, split, epochs: int, batch_size: int) -> list[float]:
    """model.fit with a clock that waits for the GPUs torch started (none on the CPU)."""
    import torch

    def wait(m) -> None:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()

    clock = epoch_clock(wait)
    model.fit(split.x_train, split.y_train, batch_size=batch_size, epochs=epochs,
              validation_data=(split.x_val, split.y_val), callbacks=[clock], verbose=0)
    return clock.times


def bare_torch_matmul_gflops(size: int, repeats: int) -> float:
    """Best GFLOP/s of `repeats` eager torch products of two size x size float32 matrices."""
    import torch

    generator = torch.Generator().manual_seed(1)
    w = torch.randn(size, size, generator=generator)
    x = torch.randn(size, size, generator=generator)
    torch.matmul(w, x)  # warm
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(w, x)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


# The bare fit and the bare matmul of each backend: the one backend branch of this script.
BARE = {"jax": (bare_jax_fit, bare_matmul_gflops),
        "torch": (bare_torch_fit, bare_torch_matmul_gflops)}


def training(args) -> None:
    """Part 1: the book's MLP, gpubench against the bare fit."""
    data = gb.data.load("mnist", source="synthetic", max_train_samples=args.samples, verbose=False)
    split = gb.training.split("mlp_h1000", data)
    model = gb.training.build_model("mlp_h1000", "cpu")
    steady = {"gpubench": [], "bare": []}
    for i in range(args.rounds):
        for who in (("gpubench", "bare") if i % 2 == 0 else ("bare", "gpubench")):
            if who == "gpubench":
                times = gpubench_fit(model, split, data, args.epochs, 100)
            else:
                times = BARE[args.backend][0](model, split, args.epochs, 100)
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
                found = BARE[args.backend][1](args.size, args.repeats)
            best[who] = max(best[who], found)
    print(f"matmul {args.size}: best gpubench {best['gpubench']:.1f} GFLOP/s, bare "
          f"{best['bare']:.1f} GFLOP/s; ratio gpubench/bare "
          f"{best['gpubench'] / best['bare']:.3f} (target >= 0.95)")


def main() -> None:
    """Both parts, on the backend KERAS_BACKEND names (JAX or PyTorch)."""
    parser = round_options(__doc__, rounds=6, epochs=3)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parse_rounds(parser)
    args.backend = gb.backends.requested()
    if args.backend not in BARE:
        parser.error(f"run it on JAX or PyTorch: KERAS_BACKEND=jax or KERAS_BACKEND=torch (now "
                     f"{os.environ.get('KERAS_BACKEND')!r})")
    print(f"{machine()}; {args.backend}; {args.rounds} rounds x {args.epochs} epochs, "
          f"{args.samples} images")
    training(args)
    matmul(args)


if __name__ == "__main__":
    main()
