"""Speed_Factors (tools tier): `rules`, the factors and the numbers read from records (no
framework); `trainer` and `measure` (`run`), the training and its records; imported when used."""

import importlib

RULES = ("ALWAYS_COMPILED", "COMPUTE_DTYPE", "FACTOR_NAMES", "chapter_values", "check_parameters",
         "crossover_batch_size", "effects", "for_backend", "is_factor_record",
         "percent_of_matmul_peak", "round_rates", "variants")
MEASURING = ("Trainer", "best_settings", "devices_to_measure", "run")


def __getattr__(name: str):
    """A name of RULES or of MEASURING (which loads the telemetry), from its module."""
    if name not in RULES + MEASURING:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{'rules' if name in RULES else 'measure'}")
    return getattr(module, name)
