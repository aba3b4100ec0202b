"""gpubench's training and speed factors against bare Keras, in one process, alternating.

1. For each mode (the book's setting; batch 1000 + mixed_bfloat16; XLA on), the
   same compiled model is trained by the chapters' cells (`bare.gpubench_fit`) and by a bare
   `model.fit`, alternately for several short rounds; epoch 1 of every fit is
   dropped. Prints the minimum and the median steady epoch of each and their
   ratio as throughput (target: gpubench >= 0.95 of bare Keras in every mode).
2. `gpubench.factors.run` over a grid (one factor at a time, then its combination),
   and a hand-written loop over the same grid with plain Keras models: each finds
   its best speedup over its own baseline (target: gpubench's >= 0.95 of the hand
   loop's).

Runs on the backend Keras loads (KERAS_BACKEND=jax for JAX): there the grid has no XLA
factor (JAX always compiles), and tf.data only where TensorFlow can be imported.

    python benchmarks/factors_overhead.py [--samples 12000] [--rounds 4] [--epochs 3]
"""

from __future__ import annotations

import statistics
import time

from bare import bare_fit, epoch_clock, gpubench_fit, machine, parse_rounds, round_options

import gpubench as gb
from gpubench.factors.trainer import tf_dataset

MODES = {
    "baseline (book)": dict(batch_size=100, precision="float32", xla="off"),
    "batch 1000 + mixed_bfloat16": dict(batch_size=1000, precision="mixed_bfloat16", xla="off"),
    "XLA on": dict(batch_size=100, precision="float32", xla="on"),
}
GRID = {"batch_size": [100, 1000], "precision": ["float32", "mixed_bfloat16"],
        "xla": ["off", "on"], "steps_per_execution": [1, 32],
        "input_pipeline": ["arrays", "tf.data"]}


def overhead(data, split, rounds: int, epochs: int) -> None:
    """Part 1: gpubench vs bare fit on the same model, per mode."""
    print(f"{'mode':<28} {'gpubench min':>12} {'bare min':>9} {'ratio':>6}"
          f" {'gpubench med':>12} {'bare med':>9} {'ratio':>6}")
    for name, mode in MODES.items():
        model = gb.training.build_model("mlp_h1000", "cpu", precision=mode["precision"],
                                        xla=mode["xla"])
        steady = {"gpubench": [], "bare": []}
        for i in range(rounds):
            for who in (("gpubench", "bare") if i % 2 == 0 else ("bare", "gpubench")):
                times = (gpubench_fit(model, split, data, epochs, mode["batch_size"]) if who == "gpubench"
                         else bare_fit(model, split, epochs, mode["batch_size"]))
                steady[who] += times[1:]
        gm, bm = min(steady["gpubench"]), min(steady["bare"])
        g, b = statistics.median(steady["gpubench"]), statistics.median(steady["bare"])
        print(f"{name:<28} {gm:>10.3f} s {bm:>7.3f} s {bm / gm:>6.3f}"
              f" {g:>10.3f} s {b:>7.3f} s {b / g:>6.3f}")


def backend_grid() -> dict:
    """GRID as this backend can run it (`gpubench.factors.for_backend`), its notes printed."""
    grid, notes = gb.factors.for_backend(GRID, drop_tf_data=True)  # for this backend
    for note in notes:
        print(note)
    return grid


def hand_model(precision: str, xla: str, steps_per_execution: int):
    """The book's MLP written out in plain Keras, in the given mode."""
    keras = gb.backends.keras()

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision)
    try:
        model = keras.Sequential([keras.layers.Input(shape=(784,)),
                                  keras.layers.Dense(1000, activation="relu"),
                                  keras.layers.Dense(10, dtype="float32")])
    finally:
        keras.mixed_precision.set_global_policy(previous)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=gb.backends.current().jit_compile(xla),
                  steps_per_execution=steps_per_execution)
    return model


def hand_rate(split, settings: dict, epochs: int) -> float:
    """Images per second of the fastest steady epoch, trained by hand in `settings`."""
    model = hand_model(settings["precision"], settings["xla"], settings["steps_per_execution"])
    clock = epoch_clock()
    b = settings["batch_size"]
    if settings["input_pipeline"] == "tf.data":
        # The same pipeline as gpubench's (shuffled, batched, prefetched).
        ds = tf_dataset(split.x_train, split.y_train, b)
        model.fit(ds, epochs=epochs, callbacks=[clock], verbose=0, shuffle=False)  # ds shuffles
    else:
        model.fit(split.x_train, split.y_train, batch_size=b, epochs=epochs, callbacks=[clock],
                  verbose=0)
    return len(split.x_train) / min(clock.times[1:])


def hand_grid(split, epochs: int, grid: dict) -> tuple[float, float, dict]:
    """A plain loop: each one-factor variant, then the combination of each factor's best value.

    The baseline is trained before and after the grid and its faster fit counts, so
    that one slow spell of the machine does not inflate every speed-up.
    Returns (best speed-up, best images/s, its settings).
    """
    base = dict(batch_size=100, precision="float32", xla="off", steps_per_execution=1,
                input_pipeline="arrays")
    rates = {}
    combo = dict(base)
    for factor, values in grid.items():
        best_here = 0.0
        for value in values:
            settings = {**base, factor: value}
            key = tuple(settings.values())
            if key not in rates:
                rates[key] = hand_rate(split, settings, epochs)
            if rates[key] > best_here:
                best_here, combo[factor] = rates[key], value
    rates[tuple(combo.values())] = hand_rate(split, combo, epochs)
    base_key = tuple(base.values())
    rates[base_key] = max(rates[base_key], hand_rate(split, base, epochs))
    best = max(rates, key=rates.get)
    return rates[best] / rates[base_key], rates[best], dict(zip(base, best, strict=True))


def combined(data, split, epochs: int) -> None:
    """Part 2: gpubench's best speedup over the grid against the hand loop's, same run."""
    grid = backend_grid()
    start = time.perf_counter()
    records = gb.factors.run("mlp_h1000", data, ["cpu"], grid, epochs=epochs, env="benchmark")
    rows = [r for r in gb.factors.effects(records) if r["speedup"] is not None]
    best = max(rows, key=lambda r: r["speedup"])
    fastest = max(r["samples_per_second"] or 0 for r in rows)
    combo = next(r for r in rows if r["factor"] == "combined")
    print(f"gpubench.factors ({time.perf_counter() - start:.0f} s): best {best['speedup']:.2f}x "
          f"({best['value']}); combined {combo['speedup']:.2f}x ({combo['value']}); "
          f"fastest {fastest:,.0f} images/s")
    start = time.perf_counter()
    hand, hand_fastest, settings = hand_grid(split, epochs, grid)
    print(f"hand-written loop ({time.perf_counter() - start:.0f} s): best {hand:.2f}x "
          f"({settings}); fastest {hand_fastest:,.0f} images/s")
    print(f"gpubench best / hand best: speed-up {best['speedup'] / hand:.3f}, "
          f"fastest images/s {fastest / hand_fastest:.3f}  "
          f"(gpubench combined / hand best: {combo['speedup'] / hand:.3f})")


def main() -> None:
    """Run both parts and print their ratios."""
    parser = round_options(__doc__, rounds=4, epochs=3)
    parser.add_argument("--part", choices=("1", "2", "both"), default="both")
    args = parse_rounds(parser)
    print(f"{machine()}; {args.samples} synthetic MNIST-shaped images; rounds {args.rounds}, "
          f"epochs per fit {args.epochs}")
    data = gb.data.load("mnist", source="synthetic", max_train_samples=args.samples, verbose=False)
    split = gb.training.split("mlp_h1000", data)
    if args.part in ("1", "both"):
        overhead(data, split, args.rounds, args.epochs)
    if args.part in ("2", "both"):
        combined(data, split, args.epochs)


if __name__ == "__main__":
    main()
