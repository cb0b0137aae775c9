"""The samplers' batches as Keras takes them: `(inputs, targets)` tuples instead of dicts.

A sampler's batch is a dict (`x`, `y`, `x_index`, `y_index` for pairs; `features`, `label`,
`index`, ... for class-balanced batches). Keras 3's `fit` reads a dataset element as `x`, or
`(x, y)`, or `(x, y, sample_weight)`: a dict alone is `x` with no targets, so a model compiled
with a loss fails. `keras_inputs` picks the batch entries a model takes, checked against the
dataset's element spec when it is written. The result is still a `tf.data.Dataset` re-planned on
every iteration, which Keras 3 reads on its TensorFlow, JAX and PyTorch backends alike.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

import tensorflow as tf

# One key of the batches, or a sequence of them (a tuple of entries, in that order).
Keys = str | Sequence[str]


def keras_inputs(
    dataset: tf.data.Dataset,
    *,
    inputs: Keys,
    targets: Keys | None = None,
) -> tf.data.Dataset:
    """`dataset`'s dict batches as `(inputs, targets)` tuples for `model.fit` / `evaluate`.

    Args:
      dataset: a dataset of dict batches (`dynamic_pairs`, `class_balanced`, a sampler's
        `dataset()`; any dataset whose elements are dicts keyed by str).
      inputs: the key of the model's input (that entry), or a sequence of keys (a tuple of
        those entries in that order, for a model of several inputs).
      targets: the key (or sequence of keys) of the targets the loss compares with; None for a
        model without targets (its loss added by the model, or `predict`): each element is then
        `(inputs,)`, which Keras reads as inputs alone.

    Returns:
      A dataset of `(inputs, targets)` (or `(inputs,)`) tuples, one per batch of `dataset`,
      with its cardinality; each iteration is still the sampler's next epoch, so
      `model.fit(..., epochs=N)` trains on N different epochs.

    Raises:
      TypeError: `dataset` is not a `tf.data.Dataset` of dicts, or a key is not a str.
      ValueError: a key is not in the batches (naming the batches' keys and the closest one),
        or `inputs` is an empty sequence.

    Example:

        dataset = class_balanced(open_run("runs/speakers"), record_set="train",
                                 n_classes_per_batch=8, n_samples_per_class=4)
        model.fit(keras_inputs(dataset, inputs="features", targets="label"), epochs=10)
        pairs = dynamic_pairs(x_images, y_images, valid_pairs, batch_size=32)
        model.fit(keras_inputs(pairs, inputs="x", targets="y"), epochs=10)
    """
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"keras_inputs takes a tf.data.Dataset of dict batches, got {type(dataset).__name__}"
        )
    spec = dataset.element_spec
    if not isinstance(spec, Mapping):
        raise TypeError(
            "keras_inputs takes a dataset of dict batches (a sampler's); its elements are "
            f"{type(spec).__name__}, not dicts"
        )
    available = tuple(sorted(str(key) for key in spec))
    input_keys = _checked_keys("inputs", inputs, available)
    target_keys = None if targets is None else _checked_keys("targets", targets, available)

    def as_tuple(batch: Mapping[str, tf.Tensor]) -> tuple:
        picked = (_entries(batch, input_keys, inputs),)
        if target_keys is None:
            return picked
        return (*picked, _entries(batch, target_keys, targets))

    return dataset.map(as_tuple, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _checked_keys(name: str, keys: object, available: tuple[str, ...]) -> tuple[str, ...]:
    """`keys` (one key or a sequence of them) as a tuple, each one a key of the batches."""
    as_tuple = (keys,) if isinstance(keys, str) else keys
    if not isinstance(as_tuple, Sequence):
        raise TypeError(
            f"keras_inputs {name} must be a key (str) or a sequence of keys, "
            f"got {type(keys).__name__} {keys!r}"
        )
    if not as_tuple:
        raise ValueError(f"keras_inputs {name} names no key; the batches hold {_listed(available)}")
    for key in as_tuple:
        if not isinstance(key, str):
            raise TypeError(
                f"keras_inputs {name} keys must be str, got {type(key).__name__} {key!r}"
            )
        if key not in available:
            close = difflib.get_close_matches(key, available, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"keras_inputs {name} key {key!r} is not in the batches, which hold "
                f"{_listed(available)}{hint}"
            )
    return tuple(as_tuple)


def _entries(batch: Mapping[str, tf.Tensor], keys: tuple[str, ...], given: Keys):
    """The entry of a single key given as a str; a tuple of entries for a sequence."""
    if isinstance(given, str):
        return batch[given]
    return tuple(batch[key] for key in keys)


def _listed(keys: tuple[str, ...]) -> str:
    return ", ".join(repr(key) for key in keys)
