"""How the trainer modules run `fit`: logging callbacks, the history file, checked metrics."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence

import keras
import tensorflow as tf

HISTORY_FILE = "history.json"


def strategy_of(fn_args) -> tf.distribute.Strategy:
    """The strategy to build the model under: `fn_args.strategy` (the trainer's
    `distribution`), or the default strategy for callers whose `fn_args` has none.

    Args:
        fn_args: the trainer's `FnArgs`, or any object with the attributes `run_fn` reads.

    Returns:
        A `tf.distribute.Strategy`.
    """
    return getattr(fn_args, "strategy", None) or tf.distribute.get_strategy()


def fit_and_log(
    model: keras.Model,
    fn_args,
    loss_names: Sequence[str],
    validation_data: tf.data.Dataset | None = None,
    *,
    train_dataset: tf.data.Dataset | None = None,
    callbacks: Sequence[keras.callbacks.Callback] = (),
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """`model.fit` on `train_dataset` (by default `fn_args.train_dataset`) with the executor's
    callbacks, the module's own `callbacks` and the logging callbacks, from
    `fn_args.initial_epoch` (a resumed execution, see `checkpoints`).

    Writes `history.json` to `fn_args.model_run_dir` and returns `(history, last-epoch
    metrics)`, the history covering every epoch: `fn_args.trained_history` (the epochs earlier
    attempts trained) before this `fit`'s. Raises RuntimeError if a loss in `loss_names` ended
    non-finite.

    Args:
        model: the compiled Keras model.
        fn_args: the trainer's `FnArgs` (`train_dataset`, `num_epochs`, `model_run_dir`,
            `callbacks`, and optionally `initial_epoch` and `trained_history`).
        loss_names: the logs that must end finite, e.g. ("loss",).
        validation_data: a `tf.data.Dataset` for `fit`'s validation, or None.
        train_dataset: the dataset to fit on, instead of `fn_args.train_dataset`.
        callbacks: more Keras callbacks.

    Returns:
        `(history, metrics)`: log name -> per-epoch values, and log name -> last-epoch value.

    Raises:
        RuntimeError: when a loss in `loss_names` ended non-finite or was not logged.

    Example:
        history, metrics = fit_and_log(model, fn_args, ("loss",))
    """
    # `fn_args` is duck-typed, and callers other than the trainer component may not resume.
    history = model.fit(
        fn_args.train_dataset if train_dataset is None else train_dataset,
        epochs=int(fn_args.num_epochs),
        initial_epoch=int(getattr(fn_args, "initial_epoch", 0)),
        validation_data=validation_data,
        callbacks=[
            *(fn_args.callbacks or []),
            *callbacks,
            *logging_callbacks(fn_args.model_run_dir),
        ],
        verbose=2,
    ).history
    history = merge_history(getattr(fn_args, "trained_history", None) or {}, history)
    write_history(fn_args.model_run_dir, history)
    metrics = last_epoch_metrics(history)
    require_finite(metrics, loss_names)
    return history, metrics


def merge_history(
    earlier: Mapping[str, Sequence[float]], later: Mapping[str, Sequence[float]]
) -> dict[str, list[float]]:
    """Per-epoch logs of the epochs in `earlier` followed by those in `later`, by name.

    Args:
        earlier: log name -> values of the earlier epochs.
        later: log name -> values of the later epochs.

    Returns:
        Log name -> values of both, earlier first.

    Example:
        merge_history({"loss": [3.0]}, {"loss": [2.0]})  # {"loss": [3.0, 2.0]}
    """
    return {name: [*earlier.get(name, ()), *later.get(name, ())] for name in {**earlier, **later}}


def logging_callbacks(model_run_dir: str) -> list[keras.callbacks.Callback]:
    """TensorBoard scalars per epoch under `model_run_dir` (the TFX ModelRun artifact).

    Args:
        model_run_dir: the ModelRun artifact's folder.

    Returns:
        `[keras.callbacks.TensorBoard]`, writing per-epoch scalars there.
    """
    return [
        keras.callbacks.TensorBoard(
            log_dir=model_run_dir, write_graph=False, update_freq="epoch", profile_batch=0
        )
    ]


def write_history(model_run_dir: str, history: Mapping[str, Sequence[float]]) -> str:
    """Writes the per-epoch logs of `fit` to `<model_run_dir>/history.json`; returns the path.

    Args:
        model_run_dir: the ModelRun artifact's folder (created when missing).
        history: log name -> per-epoch values.

    Returns:
        The path of `history.json`.
    """
    path = os.path.join(model_run_dir, HISTORY_FILE)
    tf.io.gfile.makedirs(model_run_dir)
    epochs = {key: [float(v) for v in values] for key, values in history.items()}
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(epochs, indent=2, sort_keys=True) + "\n")
    return path


def last_epoch_metrics(history: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """The last epoch's value of every numeric log (losses, and what callbacks added).

    Args:
        history: log name -> per-epoch values.

    Returns:
        Log name -> last value, as float; empty and non-numeric logs left out.

    Example:
        last_epoch_metrics({"loss": [3.0, 2.0], "note": ["x"]})  # {"loss": 2.0}
    """
    metrics = {}
    for key, values in history.items():
        if len(values) == 0:
            continue
        try:
            metrics[key] = float(values[-1])
        except (TypeError, ValueError):
            continue  # not a number (a callback may log strings); not a metric
    return metrics


def require_finite(metrics: Mapping[str, float], keys: Sequence[str]) -> None:
    """Raises RuntimeError when training diverged: a loss in `keys` is missing, NaN or inf.

    Args:
        metrics: log name -> last-epoch value.
        keys: the losses to check.

    Raises:
        RuntimeError: naming the first such loss.
    """
    for key in keys:
        value = metrics.get(key)
        if value is None or not math.isfinite(value):
            raise RuntimeError(
                f"training diverged or logged nothing: final {key} is {value}; lower the "
                "learning rate or check the inputs for NaN/inf"
            )


def check_common_args(fn_args) -> None:
    """Raises ValueError naming the first missing or invalid `fn_args` attribute.

    Args:
        fn_args: the trainer's `FnArgs`.

    Raises:
        ValueError: when `train_dataset`, `num_epochs`, `serving_model_dir` or
            `model_run_dir` is missing, `num_epochs` < 1, or `train_dataset` is not a
            `tf.data.Dataset`.
    """
    for name in ("train_dataset", "num_epochs", "serving_model_dir", "model_run_dir"):
        if getattr(fn_args, name, None) is None:
            raise ValueError(f"fn_args.{name} is required")
    if int(fn_args.num_epochs) < 1:
        raise ValueError(f"fn_args.num_epochs must be at least 1, got {fn_args.num_epochs}")
    if not isinstance(fn_args.train_dataset, tf.data.Dataset):
        raise ValueError(
            f"fn_args.train_dataset must be a tf.data.Dataset, got "
            f"{type(fn_args.train_dataset).__name__}"
        )
