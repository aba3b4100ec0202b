"""gpubench's timed training against a bare `model.fit`, on the same model and arrays.

Runs in one process and alternates the two for many short rounds, on the same
compiled model (weights carry on, which does not change the cost of an epoch).
Epoch 1 of every fit (data adapter set-up) is dropped. Prints, for each, the
median and the minimum of the steady epochs, and the overhead in both; target:
gpubench's overhead at most 5%. On a shared VM whose speed swings, the minimum
(the epoch least disturbed by neighbours) is the steadier of the two.

    python benchmarks/train_overhead.py [--models mlp_h1000,mnist_cnn,cifar_cnn]
                                        [--rounds 8] [--epochs 2] [--samples 12000]
"""

from __future__ import annotations

import statistics

from bare import bare_fit, gpubench_fit, machine, parse_rounds, round_options

import gpubench as gb


def main() -> None:
    """Alternate the two for each model and print the steady epoch times and ratio."""
    parser = round_options(__doc__, rounds=8, epochs=2)
    parser.add_argument("--models", default="mlp_h1000,mnist_cnn,cifar_cnn")
    args = parse_rounds(parser)
    print(f"{machine()}; {args.rounds} rounds x {args.epochs} epochs, {args.samples} images, synthetic data")
    print(f"{'model':<10} {'gpubench median':>16} {'bare median':>12} {'overhead':>9}"
          f" {'gpubench min':>13} {'bare min':>9} {'overhead':>9}  epochs each")
    for name in args.models.split(","):
        dataset = "cifar10" if name == "cifar_cnn" else "mnist"
        data = gb.data.load(dataset, source="synthetic", max_train_samples=args.samples,
                            verbose=False)
        split = gb.training.split(name, data)
        notebook = {v: k for k, v in gb.params.TRAINING_NOTEBOOKS.items()}[name]
        batch = gb.params.DEFAULTS["full"][notebook]["batch_size"]
        model = gb.training.build_model(name, "cpu")
        steady = {"gpubench": [], "bare": []}
        for i in range(args.rounds):
            order = ("gpubench", "bare") if i % 2 == 0 else ("bare", "gpubench")
            for who in order:
                times = (gpubench_fit(model, split, data, args.epochs, batch) if who == "gpubench"
                         else bare_fit(model, split, args.epochs, batch))
                steady[who] += times[1:]
        g, b = statistics.median(steady["gpubench"]), statistics.median(steady["bare"])
        gm, bm = min(steady["gpubench"]), min(steady["bare"])
        print(f"{name:<10} {g:>14.3f} s {b:>10.3f} s {100 * (g / b - 1):>+8.1f}%"
              f" {gm:>11.3f} s {bm:>7.3f} s {100 * (gm / bm - 1):>+8.1f}%"
              f"  {len(steady['gpubench'])}")


if __name__ == "__main__":
    main()
