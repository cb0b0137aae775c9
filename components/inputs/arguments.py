"""Argument checks of the public constructors, made where a value is written: one-line
errors that name the argument (and, for a choice, the closest allowed value)."""

from __future__ import annotations

import difflib
import operator

import numpy as np

SEED_RANGE = (-(1 << 63), (1 << 63) - 1)


def int_argument(name: str, value, minimum: int | None = None) -> int:
    """`value` as a Python int, checked where a sampler is built: a Python or NumPy integer
    (not a bool, not a float: 2.5 is not silently 2) that fits in int64, at least `minimum`.

    Raises a one-line TypeError (wrong type) or ValueError (out of range) naming `name`.
    """
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be an int, got the bool {value!r}")
    try:
        as_int = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    low, high = SEED_RANGE
    if minimum is not None and as_int < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {as_int}")
    if not low <= as_int <= high:
        raise ValueError(f"{name} must fit in int64 [-2**63, 2**63 - 1], got {as_int}")
    return as_int


def seed_argument(seed) -> int:
    """A sampler seed: an int the stateless RNG takes (int64, `SEED_RANGE`)."""
    return int_argument("seed", seed)


def choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    """`value` when it is one of `allowed`; else ValueError naming `name`, the allowed values and
    the closest one ("did you mean")."""
    if isinstance(value, str) and value in allowed:
        return value
    close = difflib.get_close_matches(str(value), allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}{hint}")
