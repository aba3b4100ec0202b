"""Speed factors: one-factor-at-a-time variations of a training run from the book's baseline.

The baseline is the book's setting: batch 100, float32, XLA off, one step per execution,
arrays fed to `fit`. Each variant changes one factor; the combination takes each factor's
fastest value. The modules:

- `rules`: the factors, the variants and which values a backend runs (no framework);
- `stats`: the numbers read from the records: rates, speedups with their interval and
  verdict, the crossover batch size, the share of the matmul peak (no framework);
- `trainer`: one variant on one device, its probes and its time box;
- `measure`: the matmul peaks, the interleaved rounds, the combination, the busy regions on a
  GPU, the records (`run`).

The tables, charts and text written from these numbers live in `gpubench.report.factors`.
"""

from gpubench.factors.measure import best_settings, devices_to_measure, matmul_peaks, run
from gpubench.factors.rules import (
    ALWAYS_COMPILED,
    BASELINE,
    FACTOR_NAMES,
    LIST_PARAMS,
    XLA_NOTE,
    Variant,
    chapter_values,
    feeds,
    for_backend,
    variants,
)
from gpubench.factors.stats import (
    crossover_batch_size,
    effects,
    is_factor_record,
    percent_of_matmul_peak,
    round_rates,
    verdict,
)
