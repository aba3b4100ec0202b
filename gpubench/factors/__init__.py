"""Speed_Factors (tools tier): the book's setting and variants that change one factor each, then
their fastest values combined. `rules`: the factors and the numbers read from records (no
framework); `trainer` and `measure`: the training and the records (`run`); `<backend>_feeds`: the
training set kept on the device (`feeds()`). The report shows them (`gpubench.report.factors`)."""

from gpubench.factors.measure import best_settings, devices_to_measure, matmul_peaks, run
from gpubench.factors.rules import (
    ALWAYS_COMPILED,
    BASELINE,
    FACTOR_NAMES,
    LIST_PARAMS,
    XLA_NOTE,
    Variant,
    chapter_values,
    crossover_batch_size,
    effects,
    feeds,
    for_backend,
    is_factor_record,
    percent_of_matmul_peak,
    round_rates,
    variants,
    verdict,
)
from gpubench.factors.trainer import Trainer
