"""Argument checks of the public constructors, made where a value is written: one-line
errors that name the argument (and, for a choice, the closest allowed value)."""

from __future__ import annotations

import difflib
import operator

import numpy as np

SEED_RANGE = (-(1 << 63), (1 << 63) - 1)


def int_argument(name: str, value, minimum: int | None = None) -> int:
    """`value` as a Python int, checked where a sampler is built.

    Args:
      name: the argument's name, for the errors.
      value: a Python or NumPy integer (not a bool, not a float: 2.5 is not silently 2).
      minimum: the smallest value allowed (None: any int64).

    Returns:
      `value` as a Python int.

    Raises:
      TypeError: `value` is not an integer (or is a bool), naming `name`.
      ValueError: `value` is below `minimum` or does not fit in int64, naming `name`.
    """
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be an int, got the bool {_shown(value)}")
    try:
        as_int = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be an int, got {type(value).__name__} {_shown(value)}"
        ) from None
    low, high = SEED_RANGE
    if minimum is not None and as_int < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {as_int}")
    if not low <= as_int <= high:
        raise ValueError(f"{name} must fit in int64 [-2**63, 2**63 - 1], got {as_int}")
    return as_int


def seed_argument(seed) -> int:
    """A sampler seed: an int the stateless RNG takes (int64, `SEED_RANGE`).

    Args:
      seed: a Python or NumPy integer.

    Returns:
      `seed` as a Python int.

    Raises:
      TypeError: not an integer.
      ValueError: outside int64.
    """
    return int_argument("seed", seed)


def choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    """`value` when it is one of `allowed`.

    Args:
      name: the argument's name, for the error.
      value: the value given.
      allowed: the allowed strings.

    Returns:
      `value`.

    Raises:
      ValueError: `value` is not one of `allowed`, naming `name`, the allowed values and the
        closest one ("did you mean").
    """
    if isinstance(value, str) and value in allowed:
        return value
    close = difflib.get_close_matches(str(value), allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {_shown(value)}{hint}")


def _shown(value: object) -> str:
    """`value` as an error shows it: a NumPy scalar as its Python value (NumPy 2 would write
    `np.float32(2.0)`, NumPy 1 `2.0`), anything else as its repr."""
    return repr(value.item() if isinstance(value, np.generic) else value)
