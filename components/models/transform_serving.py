"""The SavedModel export of a Keras model trained on Transform's features: raw Examples in.

A model trained on Transform's `transformed_examples` takes transformed features; a client has
raw `tf.train.Example`s. `export_transform_model` saves the model with Transform's graph in
front of it (`TFTransformOutput.transform_features_layer()`, its assets such as vocabularies
saved with it), so serving re-implements none of the preprocessing, and with the signature TFMA
needs to compute the label of raw eval Examples:

- ``serving_default``: ``examples`` tf.string [B], serialized raw Examples (the label may be
  missing: they are parsed with Transform's raw feature spec less the label) -> the model's
  outputs: its dict as it is, or a single tensor under `output_key`.
- ``transform_features``: ``examples`` tf.string [B], serialized raw Examples parsed with the
  whole raw feature spec -> every transformed feature, the label's included (what TFMA's
  `ModelSpec.preprocessing_function_names` runs before it reads `label_key`).

The model takes the transformed features its inputs name (`model_feature_keys`: a functional
model's `keras.Input(name=...)`, or its input dict's keys), in the structure it was built with
(one tensor, a list or a dict), so a model built on `keras.Input(name="vector_xf")` is called
with Transform's `vector_xf`; a subclassed model names its features in `feature_keys` and is
called with a dict of them.

Pure TensorFlow and Keras: the Transform output is used through its methods, so importing this
module imports neither TFX nor tensorflow-transform.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

if TYPE_CHECKING:
    from tensorflow_transform import TFTransformOutput

SERVING_SIGNATURE = "serving_default"
TRANSFORM_FEATURES_SIGNATURE = "transform_features"
EXAMPLES_KEY = "examples"
DEFAULT_OUTPUT_KEY = "outputs"


def model_feature_keys(model: keras.Model) -> tuple[str, ...]:
    """The names of `model`'s inputs: the keys of a functional model's input dict, else the
    `keras.Input` names of its inputs, in order.

    Args:
      model: a functional (or Sequential, built on an `Input`) Keras model.

    Returns:
      The input names.

    Raises:
      ValueError: a model without symbolic inputs (subclassed, or not built on an `Input`).

    Example:

        vector = keras.Input(shape=(4,), name="vector_xf")
        model_feature_keys(keras.Model(vector, keras.layers.Dense(2)(vector)))  # ("vector_xf",)
    """
    return tuple(tf.nest.flatten(_input_structure(model)))


def _input_structure(model: keras.Model) -> str | list | dict:
    """The transformed feature keys in the structure of `model.input`: a call with that
    structure is what Keras expects (another, even a reconcilable one, warns each call)."""
    try:
        inputs = model.input
    except (AttributeError, ValueError) as error:
        # A subclassed model has no symbolic inputs to read names from.
        raise ValueError(
            f"model {model.name!r} has no symbolic inputs to name the transformed features it "
            "takes: pass feature_keys"
        ) from error
    if isinstance(inputs, Mapping):
        return {key: key for key in inputs}
    return tf.nest.map_structure(lambda tensor: tensor.name, inputs)


def export_transform_model(
    model: keras.Model,
    tf_transform_output: TFTransformOutput,
    serving_model_dir: str,
    *,
    label_feature: str,
    feature_keys: Sequence[str] | None = None,
    output_key: str = DEFAULT_OUTPUT_KEY,
) -> None:
    """Saves `model` behind Transform's graph, serving serialized raw Examples.

    Args:
      model: the trained model; it is called with a dict of transformed features (the keys in
        `feature_keys`) and returns a tensor or a dict of tensors.
      tf_transform_output: Transform's output the model was trained on
        (`fn_args.tf_transform_output`).
      serving_model_dir: where to save (`fn_args.serving_model_dir`).
      label_feature: the raw label feature: left out of what `serving_default` parses, kept in
        what `transform_features` parses.
      feature_keys: the transformed features the model takes; None: `model_feature_keys(model)`.
      output_key: the name of `serving_default`'s output when the model returns one tensor.

    Raises:
      ValueError: `label_feature` is not a raw feature, a feature key is not a transformed
        feature (both named with the features there are), or `model` names no inputs and
        `feature_keys` is None.
      TypeError (when saving): the model returns neither a tensor nor a dict of tensors.

    Example:

        # In run_fn, after training on Transform's `vector_xf`:
        export_transform_model(
            model, fn_args.tf_transform_output, fn_args.serving_model_dir, label_feature="label"
        )
        serve = tf.saved_model.load(fn_args.serving_model_dir).signatures["serving_default"]
        serve(examples=tf.constant([raw_example.SerializeToString()]))["outputs"]
    """
    raw_spec = tf_transform_output.raw_feature_spec()
    if label_feature not in raw_spec:
        raise ValueError(
            f"label_feature {label_feature!r} is not a raw feature; the raw features are "
            f"{sorted(raw_spec)}"
        )
    structure = (
        _input_structure(model) if feature_keys is None else {key: key for key in feature_keys}
    )
    keys = tuple(tf.nest.flatten(structure))
    transformed = tf_transform_output.transformed_feature_spec()
    unknown = [key for key in keys if key not in transformed]
    if not keys or unknown:
        raise ValueError(
            f"the model's features {list(keys)} must be transformed features, and {unknown} are "
            f"not; the transformed features are {sorted(transformed)}"
        )
    module = _TransformModel(model, tf_transform_output, structure, label_feature, output_key)
    tf.saved_model.save(
        module,
        serving_model_dir,
        signatures={
            SERVING_SIGNATURE: module.serve_examples,
            TRANSFORM_FEATURES_SIGNATURE: module.transform_examples,
        },
    )


class _TransformModel(tf.Module):
    """The model and Transform's layer, tracked so that the SavedModel holds both (the
    layer's assets included), and the two signatures over serialized raw Examples."""

    def __init__(
        self,
        model: keras.Model,
        tf_transform_output: TFTransformOutput,
        input_structure: str | list | dict,
        label_feature: str,
        output_key: str,
    ):
        super().__init__()
        self.model = model
        self.transform = tf_transform_output.transform_features_layer()
        self._raw_spec = tf_transform_output.raw_feature_spec()
        # Serving clients send no label: a label parsed as required would fail their Examples.
        self._serving_spec = {
            key: spec for key, spec in self._raw_spec.items() if key != label_feature
        }
        # Kept out of tf.Module's tracking: a tracked list or dict would be saved as a wrapper.
        self._input_structure = _Untracked(input_structure)
        self._label_feature = label_feature
        self._output_key = output_key

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLES_KEY)])
    def serve_examples(self, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        features = self.transform(tf.io.parse_example(serialized, self._serving_spec))
        # Transform prunes the outputs that need a feature it was not given: the label's.
        structure = self._input_structure.value
        missing = [key for key in tf.nest.flatten(structure) if key not in features]
        if missing:
            raise ValueError(
                f"the model's features {missing} are not transformed from raw Examples without "
                f"the label {self._label_feature!r}: they depend on it"
            )
        outputs = self.model(tf.nest.map_structure(lambda key: features[key], structure))
        if isinstance(outputs, Mapping):
            return dict(outputs)
        if tf.is_tensor(outputs):
            return {self._output_key: outputs}
        raise TypeError(
            f"the model returns {type(outputs).__name__}, not a tensor or a dict of tensors: "
            "build it with a dict of named outputs"
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLES_KEY)])
    def transform_examples(self, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.transform(tf.io.parse_example(serialized, self._raw_spec))


@dataclasses.dataclass(frozen=True)
class _Untracked:
    """A value a tf.Module holds as it is (not wrapped and saved as a trackable)."""

    value: Any
