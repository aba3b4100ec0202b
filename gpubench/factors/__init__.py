"""Speed_Factors (tools tier): `rules`, the factors and the numbers read from records (no
framework); `trainer` and `measure` (`run`), the training and its records; imported when used."""

import importlib


def __getattr__(name: str):
    """A name of `rules`, else of `measure` (which loads the trainer and the telemetry)."""
    rules = importlib.import_module(f"{__name__}.rules")
    if hasattr(rules, name):
        return getattr(rules, name)
    return getattr(importlib.import_module(f"{__name__}.measure"), name)
