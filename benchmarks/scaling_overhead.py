"""gpubench's one-replica scaling step against a bare `model.fit` on one device, same model, data.

The scaling step is what Multi_GPU_Scaling and `gpubench scaling` time, on the backend
KERAS_BACKEND names: on TensorFlow MirroredStrategy over one device, `strategy.run` inside a
`tf.function`, each replica's mean loss over the replicas, the data from
`distribute_datasets_from_function`; on JAX DataParallel over one device and Keras's own `fit`;
on PyTorch DistributedDataParallel in a process group of one, its own step and the Keras optimiser.
The bare side is `model.fit` on the CPU with the same batch, no callbacks, no validation.
Both run in one process and alternate round by round, each round on a freshly built
model; epoch 1 of each (tracing) is dropped. Prints the images per second of both
(median and minimum epoch) and their ratio; target: the scaling step at >= 0.90 of bare fit.

    python benchmarks/scaling_overhead.py [--model mlp_h1000] [--rounds 4] [--epochs 3]
                                          [--samples 12000] [--batch 100]
"""

from __future__ import annotations

import statistics
import time

from bare import epoch_clock, machine, parse_rounds, round_options

import gpubench as gb


def scaling_round(strategy, name: str, split, epochs: int, batch: int) -> list[float]:
    """Images per second of each steady epoch of gpubench's one-replica scaling step."""
    measured = gb.scaling.train(strategy, name, split, batch=batch, epochs=epochs, verbose=False)
    return [measured.train_samples / s for s in measured.epoch_seconds[1:]]


def bare_round(name: str, split, epochs: int, batch: int) -> list[float]:
    """Images per second of each steady epoch of a plain model.fit on the CPU."""
    with gb.devices.scope("cpu"):
        model = gb.models.build(name)
        clock = epoch_clock()
        model.fit(split.x_train, split.y_train, batch_size=batch, epochs=epochs, callbacks=[clock],
                  verbose=0)
    return [len(split.x_train) / s for s in clock.times[1:]]


def main() -> None:
    """Alternate the two and print their steady speeds and the ratio."""
    parser = round_options(__doc__, rounds=4, epochs=3)
    parser.add_argument("--model", default="mlp_h1000")
    parser.add_argument("--batch", type=int, default=100)
    args = parse_rounds(parser)
    print(f"{machine()}; backend {gb.backends.requested()}; {args.model}, {args.rounds} rounds "
          f"x {args.epochs} epochs, {args.samples} images, batch {args.batch}, synthetic data")
    dataset = "cifar10" if args.model == "cifar_cnn" else "mnist"
    data = gb.data.load(dataset, source="synthetic", max_train_samples=args.samples, verbose=False)
    split = gb.training.split(args.model, data)
    strategy, _ = gb.scaling.strategy(["cpu:0"])
    ours, bare = [], []
    start = time.perf_counter()
    for _ in range(args.rounds):
        ours += scaling_round(strategy, args.model, split, args.epochs, args.batch)
        bare += bare_round(args.model, split, args.epochs, args.batch)
    print(f"{'':<24}{'median img/s':>14}{'best img/s':>12}")
    print(f"{'gpubench scaling step':<24}{statistics.median(ours):>14,.0f}{max(ours):>12,.0f}")
    print(f"{'bare model.fit':<24}{statistics.median(bare):>14,.0f}{max(bare):>12,.0f}")
    ratio_median = statistics.median(ours) / statistics.median(bare)
    ratio_best = max(ours) / max(bare)
    verdict = "meets" if min(ratio_median, ratio_best) >= 0.90 else "misses"
    print(f"ratio (scaling step / bare fit): median {ratio_median:.2f}, best {ratio_best:.2f} "
          f"-> {verdict} the 0.90 target; wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
