"""Rules every module shares: what a positive integer is, what counts as out of memory.

No TensorFlow at import time: `is_oom` loads it only when asked.
"""

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


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` means the device (or the host) ran out of memory."""
    if isinstance(exc, MemoryError):
        return True
    from gpubench._tf import tensorflow  # noqa: PLC0415 - only when a failure is classified

    return isinstance(exc, tensorflow().errors.ResourceExhaustedError)
