"""What a telemetry Monitor around each epoch costs: the book's MLP trained with and without one.

Runs in one process and alternates the two for several rounds on the same compiled
Keras model (784-1000-10 Dense, Adam, batch 100, synthetic 28x28 images; the weights
carry on, which does not change the cost of an epoch). Both sides time each epoch
with the same callback; one side also starts a `gpubench.telemetry.Monitor` at each
epoch's start and stops it at its end, as the train records do. Epoch 1 of every fit
is dropped. Prints the fastest steady epoch of each and their throughput ratio
(without / with the Monitor's epoch time; target >= 0.98), and the last epoch's
telemetry line.

    python benchmarks/telemetry_overhead.py [--rounds 4] [--epochs 3] [--samples 12000]
                                            [--interval 0.1] [--device cpu|gpu:N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from gpubench import (
    fmt,
    telemetry,  # stdlib only: loads no framework
)


def parse() -> argparse.Namespace:
    """The command line; a one-line error (exit 2) for values that cannot work."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=12_000)
    parser.add_argument("--interval", type=float, default=telemetry.DEFAULT_INTERVAL)
    parser.add_argument("--device", default="cpu", help='the Monitor\'s device: "cpu" or "gpu:N"')
    args = parser.parse_args()
    if args.epochs < 2 or args.rounds < 1 or args.samples < 100 or not args.interval > 0:
        parser.error(f"need --epochs >= 2 (epoch 1 of each fit is dropped), --rounds >= 1, "
                     f"--samples >= 100 and --interval > 0; got {args.epochs}, {args.rounds}, "
                     f"{args.samples}, {args.interval}")
    try:
        telemetry.Monitor(args.device, interval=args.interval)
    except ValueError as error:
        parser.error(str(error))
    return args


def main() -> None:
    """Alternate training with and without a Monitor per epoch; print the fastest epochs."""
    args = parse()
    import keras  # after the argument check: a bad option costs no import
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((args.samples, 784), dtype=np.float32)
    y = rng.integers(0, 10, args.samples)
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(1000, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    class EpochClock(keras.callbacks.Callback):
        """Times each epoch; with `interval`, a Monitor runs around each one."""

        def __init__(self, interval: float | None) -> None:
            super().__init__()
            self.interval, self.times, self.results = interval, [], []

        def on_epoch_begin(self, epoch, logs=None):
            self.monitor = (telemetry.Monitor(args.device, self.interval).start()
                            if self.interval else None)
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self.start)
            if self.monitor is not None:
                self.results.append(self.monitor.stop())

    steady = {"monitor": [], "bare": []}
    last = None
    for i in range(args.rounds):
        for who in (("monitor", "bare") if i % 2 == 0 else ("bare", "monitor")):
            clock = EpochClock(args.interval if who == "monitor" else None)
            model.fit(x, y, batch_size=100, epochs=args.epochs, callbacks=[clock], verbose=0)
            steady[who] += clock.times[1:]
            last = clock.results[-1] if clock.results else last
    fastest = {who: min(times) for who, times in steady.items()}
    median = {who: statistics.median(times) for who, times in steady.items()}
    print(f"book MLP, {args.samples} synthetic images, batch 100, {args.rounds} rounds x "
          f"{args.epochs} epochs, Monitor({args.device!r}, interval={args.interval:g} s), "
          f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, Keras {keras.__version__}")
    for who in ("bare", "monitor"):
        print(f"{who:<8} fastest steady epoch {fastest[who]:.3f} s, median {median[who]:.3f} s "
              f"({len(steady[who])} epochs)")
    ratio = {who: values["bare"] / values["monitor"]
             for who, values in (("fastest", fastest), ("median", median))}
    print(f"throughput ratio with/without the Monitor: fastest {ratio['fastest']:.3f} "
          f"(target >= 0.98), median {ratio['median']:.3f}")
    print("last epoch:", fmt.telemetry_line(last, epochs=1))


if __name__ == "__main__":
    main()
