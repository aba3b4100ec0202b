"""Rules every module shares: what a positive integer is."""

from __future__ import annotations

from typing import Any


def positive_int(name: str, value: Any, *, minimum: int = 1, allow_none: bool = False) -> Any:
    """Return `value` if it is an int >= `minimum` (or None when allowed), else raise naming it."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {what}{' or None' if allow_none else ''}, got {value!r}")
    return value

