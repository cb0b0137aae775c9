"""How functions enter the `tf.data` graphs of this package: its own traced as written, a user's
converted by AutoGraph as `Dataset.map` would convert it.

This package's graph functions are written in TensorFlow ops with explicit control flow
(`tf.cond`, `tf.while_loop`, masks), so AutoGraph has nothing to rewrite in them. Converting
them anyway (reading each function's source and rewriting its syntax tree, once per function
and process) cost every process that built a dataset: 1.8 s of CPU for a first class-balanced
dataset, against 0.3 s traced as written, and 5 s of a 25 s `run_local speaker` with
augmentation. A function a user hands in (a `parse_fn`, a plan function of `epoch_dataset`)
may use Python `if` or `for` over tensors, as in any `Dataset.map`, so it is converted, with
the AutoGraph status of the place that handed it in (AutoGraph is off inside a function marked
`as_written`, so the user's function must be converted before it is called there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import tensorflow as tf

Function = TypeVar("Function", bound=Callable)


def as_written(function: Function) -> Function:
    """`function`, traced without AutoGraph wherever it runs (this package's own functions).

    Args:
      function: a function of TensorFlow ops whose control flow is explicit.

    Returns:
      The function marked for tracing as written; what it calls is not converted either.

    Example:
        dataset.map(as_written(lambda batch: tf.cast(batch, tf.float32)))
    """
    return tf.autograph.experimental.do_not_convert(function)


def as_given(function: Callable | None) -> Callable | None:
    """A user's `function`, converted by AutoGraph as `Dataset.map` converts the functions it
    is given, under the AutoGraph status of the caller (call it where the function is handed
    in, not inside a graph function).

    Args:
      function: any callable, or None.

    Returns:
      The converted callable (`function` itself when it is marked `as_written`), or None.

    Example:
        parse = as_given(parse_fn)  # Python `if` over tensors in parse_fn keeps working
    """
    if function is None:
        return None
    return tf.__internal__.autograph.tf_convert(
        function, tf.__internal__.autograph.control_status_ctx()
    )
