"""A small x-vector-style speaker-embedding net and metric-learning losses over n_c x n_p
batches (verification on held-out speakers is in `verification`).

The net (`build_embedding_model`) maps log-mel features float32 [B, T, n_mels] and the valid
frame counts int32 [B] to embeddings float32 [B, D]: a per-utterance gain normalization, four
dilated 1-D convolution (TDNN) layers, statistics pooling (mean and standard deviation over the
valid frames only) and a linear embedding layer. Padded frames are zeroed after every layer, so
an utterance's embedding does not depend on how much padding its batch carried.

Losses over the class-balanced batches of `tfx_dynamic_inputs.inputs.class_balanced` (B = n_c * n_p,
n_c groups of n_p consecutive samples of one speaker):

- `"ge2e"` (default): generalized end-to-end softmax loss (Wan et al., 2018). Every utterance is
  a query against every speaker centroid of the batch; its own centroid leaves it out.
- `"angular_prototypical"` (Chung et al., 2020): the last utterance of each group is the query,
  the mean of the other n_p - 1 is the prototype.
- `"aam_softmax"`: additive angular margin softmax over the training speakers (needs their
  number); it does not use the batch structure, and is there as the usual reference.

Pure Keras 3 on the TensorFlow backend; no TFX.
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
import tensorflow as tf

from tfx_dynamic_inputs.models.replicas import replica_loss

FEATURES_KEY = "features"
LENGTHS_KEY = "lengths"
LABEL_KEY = "label"
EMBEDDING_OUTPUT = "embedding"
LOSSES = ("ge2e", "angular_prototypical", "aam_softmax")


def sequence_mask(lengths: tf.Tensor, num_frames: tf.Tensor) -> tf.Tensor:
    """The frame mask of a padded batch: 1 on the valid frames of each row, 0 on the padding.

    Args:
        lengths: int32 [B], the valid frames of each row.
        num_frames: int32 [], T, the padded length.

    Returns:
        float32 [B, T, 1]: 1 on the first `lengths[b]` frames of row b, 0 after.

    Example:
        mask = sequence_mask(tf.constant([2, 3]), 4)  # [[1, 1, 0, 0], [1, 1, 1, 0]] (x [..., 1])
    """
    return tf.sequence_mask(lengths, num_frames, dtype=tf.float32)[:, :, tf.newaxis]


class UtteranceNormalization(keras.layers.Layer):
    """Subtracts each utterance's mean log-mel level and divides by its spread (two scalars).

    Scalars, not per-bin statistics: per-bin mean normalization would erase the long-term
    spectral envelope, which is much of what tells synthetic and read-speech speakers apart;
    the scalars only remove recording gain. Padding stays zero.
    """

    def call(self, features: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """Normalizes each utterance over its valid frames.

        Args:
            features: float32 [B, T, n_mels] log-mel features.
            mask: float32 [B, T, 1] frame mask (`sequence_mask`).

        Returns:
            float32 [B, T, n_mels]: zero mean and unit variance over each utterance's valid
            frames and bins, zero on the padding.
        """
        count = tf.maximum(
            tf.reduce_sum(mask, axis=[1, 2]) * tf.cast(tf.shape(features)[2], tf.float32), 1.0
        )
        mean = tf.reduce_sum(features * mask, axis=[1, 2]) / count
        centred = (features - mean[:, tf.newaxis, tf.newaxis]) * mask
        variance = tf.reduce_sum(tf.square(centred), axis=[1, 2]) / count
        return centred * tf.math.rsqrt(variance + 1e-5)[:, tf.newaxis, tf.newaxis]


class MaskedStatisticsPooling(keras.layers.Layer):
    """float32 [B, T, C] frames and [B, T, 1] mask -> [B, 2C]: mean and std over valid frames."""

    def call(self, frames: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """Pools the valid frames of each row.

        Args:
            frames: float32 [B, T, C].
            mask: float32 [B, T, 1] frame mask (`sequence_mask`).

        Returns:
            float32 [B, 2C]: the mean, then the standard deviation, of each channel.
        """
        count = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
        mean = tf.reduce_sum(frames * mask, axis=1) / count
        variance = tf.reduce_sum(tf.square(frames - mean[:, tf.newaxis]) * mask, axis=1) / count
        return tf.concat([mean, tf.sqrt(variance + 1e-5)], axis=-1)


class FrameMask(keras.layers.Layer):
    """float32 [B, T, C] features and int32 [B] lengths -> float32 [B, T, 1] frame mask."""

    def call(self, features: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
        """The frame mask of `features`.

        Args:
            features: float32 [B, T, C] (only its T is used).
            lengths: int [B], the valid frames of each row.

        Returns:
            float32 [B, T, 1] (`sequence_mask`).
        """
        return sequence_mask(tf.cast(lengths, tf.int32), tf.shape(features)[1])


def build_embedding_model(
    n_mels: int = 80,
    *,
    channels: int = 128,
    embedding_dim: int = 128,
    name: str = "speaker_embedding",
) -> keras.Model:
    """The embedding net: `[features [B, T, n_mels], lengths [B]]` -> float32 [B, embedding_dim].

    T may differ between batches. The embedding is not normalized; score with cosine
    similarity (`evaluate_verification` and the signatures `serving.export_speaker_model`
    exports normalize it).

    Args:
        n_mels: Mel bins of the features.
        channels: Channels of the TDNN layers (the last has 1.5 times as many).
        embedding_dim: D, the embedding size.
        name: The Keras model's name.

    Returns:
        A functional `keras.Model` with inputs `features` float32 [B, T, n_mels] and `lengths`
        int32 [B], and output `embedding` float32 [B, D].

    Example:
        net = build_embedding_model(40, embedding_dim=64)
        embeddings = net([features, lengths])
    """
    features = keras.Input(shape=(None, n_mels), name=FEATURES_KEY)
    lengths = keras.Input(shape=(), dtype="int32", name=LENGTHS_KEY)
    mask = FrameMask(name="frame_mask")(features, lengths)
    h = UtteranceNormalization(name="utterance_norm")(features, mask)
    # (kernel, dilation, width): a receptive field of 15 frames (~150 ms at a 10 ms hop).
    layers = ((5, 1, channels), (3, 2, channels), (3, 3, channels), (1, 1, 3 * channels // 2))
    for number, (kernel, dilation, width) in enumerate(layers):
        h = keras.layers.Conv1D(
            width, kernel, dilation_rate=dilation, padding="same", name=f"tdnn{number}"
        )(h)
        h = keras.layers.ReLU()(h)
        h = keras.layers.LayerNormalization(name=f"tdnn{number}_norm")(h)
        h = keras.layers.Multiply(name=f"tdnn{number}_mask")([h, mask])
    pooled = MaskedStatisticsPooling(name="statistics_pooling")(h, mask)
    embedding = keras.layers.Dense(embedding_dim, name=EMBEDDING_OUTPUT)(pooled)
    return keras.Model([features, lengths], embedding, name=name)


def _group(embeddings: tf.Tensor, n_samples_per_class: int) -> tf.Tensor:
    """[n_c * n_p, D] -> L2-normalized [n_c, n_p, D]."""
    grouped = tf.reshape(embeddings, [-1, n_samples_per_class, tf.shape(embeddings)[-1]])
    return tf.math.l2_normalize(grouped, axis=-1)


def ge2e_logits(embeddings: tf.Tensor, n_samples_per_class: int) -> tf.Tensor:
    """Cosine similarities of every utterance to every speaker centroid of a batch (GE2E).

    The similarity of an utterance to its own speaker's centroid uses the centroid of the other
    n_p - 1 utterances (GE2E's exclusive centroid), so no utterance scores against itself.

    Args:
        embeddings: float32 [n_c * n_p, D], n_c groups of n_p consecutive utterances of one
            speaker (need not be normalized).
        n_samples_per_class: n_p, at least 2.

    Returns:
        float32 [n_c * n_p, n_c]: row i, column k is the similarity of utterance i to the
        centroid of group k.
    """
    grouped = _group(embeddings, n_samples_per_class)  # [n_c, n_p, D]
    n_classes = tf.shape(grouped)[0]
    sums = tf.reduce_sum(grouped, axis=1)  # [n_c, D]
    centroids = tf.math.l2_normalize(sums, axis=-1)
    exclusive = tf.math.l2_normalize(sums[:, tf.newaxis] - grouped, axis=-1)  # [n_c, n_p, D]
    to_all = tf.einsum("cpd,kd->cpk", grouped, centroids)  # [n_c, n_p, n_c]
    to_own = tf.reduce_sum(grouped * exclusive, axis=-1)  # [n_c, n_p]
    own = tf.one_hot(tf.range(n_classes), n_classes, dtype=to_all.dtype)[:, tf.newaxis]
    similarity = to_all * (1.0 - own) + to_own[:, :, tf.newaxis] * own
    return tf.reshape(similarity, [-1, n_classes])


def angular_prototypical_logits(embeddings: tf.Tensor, n_samples_per_class: int) -> tf.Tensor:
    """Cosine similarities of each group's last utterance to the prototypes of all groups.

    A group's prototype is the mean of its other n_p - 1 utterances.

    Args:
        embeddings: float32 [n_c * n_p, D], n_c groups of n_p consecutive utterances of one
            speaker (need not be normalized).
        n_samples_per_class: n_p, at least 2.

    Returns:
        float32 [n_c, n_c]: row g, column k is the similarity of group g's query to group k's
        prototype.
    """
    grouped = _group(embeddings, n_samples_per_class)
    queries = grouped[:, -1]
    prototypes = tf.math.l2_normalize(tf.reduce_mean(grouped[:, :-1], axis=1), axis=-1)
    return tf.matmul(queries, prototypes, transpose_b=True)


class ScaledCosineLoss(keras.layers.Layer):
    """GE2E or angular prototypical loss: softmax cross-entropy over `w * cos + b`.

    `w` (kept positive) and `b` are trained with the net, as in both papers.

    Args:
        kind: `"ge2e"` (`ge2e_logits`); any other value: angular prototypical
            (`angular_prototypical_logits`).
        n_samples_per_class: n_p of the batches.
        **kwargs: Passed to `keras.layers.Layer` (`name`, ...).
    """

    def __init__(self, kind: str, n_samples_per_class: int, **kwargs):
        super().__init__(**kwargs)
        self.kind = kind
        self.n_samples_per_class = n_samples_per_class
        self.scale = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(10.0), name="scale"
        )
        self.bias = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(-5.0), name="bias"
        )

    def call(self, embeddings: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        """The loss of a class-balanced batch.

        Args:
            embeddings: float32 [n_c * n_p, D], grouped by class.
            labels: int [n_c * n_p], unused: the batch order carries the classes.

        Returns:
            float32 []: the mean softmax cross-entropy.
        """
        del labels  # the batch order carries the classes: group g holds class g of the batch
        if self.kind == "ge2e":
            similarity = ge2e_logits(embeddings, self.n_samples_per_class)
            targets = tf.repeat(tf.range(tf.shape(similarity)[1]), self.n_samples_per_class)
        else:
            similarity = angular_prototypical_logits(embeddings, self.n_samples_per_class)
            targets = tf.range(tf.shape(similarity)[0])
        logits = tf.maximum(self.scale, 1e-6) * similarity + self.bias
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
        )


class AAMSoftmaxLoss(keras.layers.Layer):
    """Additive angular margin softmax (ArcFace) over `num_classes` training speakers.

    Args:
        num_classes: How many training speakers (the labels are in [0, num_classes)).
        embedding_dim: D, the embedding size.
        margin: The angular margin added to each target angle, in radians.
        scale: The scale of the logits.
        **kwargs: Passed to `keras.layers.Layer` (`name`, ...).
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        margin: float = 0.2,
        scale: float = 30.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.margin = margin
        self.logit_scale = scale
        self.class_weights = self.add_weight(
            shape=(embedding_dim, num_classes), initializer="glorot_uniform", name="classes"
        )

    def call(self, embeddings: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        """The loss of a batch.

        Args:
            embeddings: float32 [B, D].
            labels: int32 [B], the speaker of each embedding.

        Returns:
            float32 []: the mean softmax cross-entropy of the margin logits.
        """
        cosine = tf.matmul(
            tf.math.l2_normalize(embeddings, axis=-1),
            tf.math.l2_normalize(self.class_weights, axis=0),
        )
        cosine = tf.clip_by_value(cosine, -1.0 + 1e-7, 1.0 - 1e-7)
        target = tf.one_hot(labels, self.num_classes, dtype=cosine.dtype)
        with_margin = tf.cos(tf.acos(cosine) + self.margin)
        logits = self.logit_scale * (target * with_margin + (1.0 - target) * cosine)
        return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(target, logits))


class SpeakerEmbeddingModel(keras.Model):
    """Trains `embedding_model` on class-balanced batches.

    Batches are dicts `{"features": float32 [B, T, n_mels], "lengths": int32 [B], "label": int64
    [B], ...}` with B = n_c * n_p grouped by class. Calling the model returns the embeddings.
    Logs `loss` (epoch mean).

    Args:
        n_mels: Mel bins of the features.
        n_samples_per_class: n_p of the batches (at least 2 but for `"aam_softmax"`).
        loss: One of `LOSSES`.
        num_classes: The number of training speakers; needed by `"aam_softmax"` only.
        channels: `channels` of the embedding net (`build_embedding_model`).
        embedding_dim: `embedding_dim` of the embedding net.
        **kwargs: Passed to `keras.Model` (`name`, ...).

    Raises:
        ValueError: an unknown `loss`, n_p < 2 for a batch loss, or `"aam_softmax"` without
            `num_classes`.

    Example:
        model = SpeakerEmbeddingModel(40, n_samples_per_class=4)
        model.compile(optimizer="adam")
        model.fit(class_balanced_dataset, epochs=3)
    """

    def __init__(
        self,
        n_mels: int,
        *,
        n_samples_per_class: int,
        loss: str = "ge2e",
        num_classes: int | None = None,
        channels: int = 128,
        embedding_dim: int = 128,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
        if loss != "aam_softmax" and n_samples_per_class < 2:
            raise ValueError(
                f"{loss} needs n_samples_per_class >= 2 (a query and at least one other "
                f"utterance of its speaker), got {n_samples_per_class}"
            )
        self.n_samples_per_class = int(n_samples_per_class)
        self.embedding_model = build_embedding_model(
            n_mels, channels=channels, embedding_dim=embedding_dim
        )
        if loss == "aam_softmax":
            if not num_classes:
                raise ValueError("aam_softmax needs num_classes (the number of training speakers)")
            self.metric_loss = AAMSoftmaxLoss(num_classes, embedding_dim, name="aam_softmax")
        else:
            self.metric_loss = ScaledCosineLoss(loss, self.n_samples_per_class, name=loss)
        self.metric_loss.build(None)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.built = True

    @property
    def metrics(self) -> list:
        """The loss tracker (reset by `fit` at each epoch start)."""
        return [self.loss_tracker]

    def call(self, inputs, training=False):
        """The embeddings of a batch.

        Args:
            inputs: A dict with "features" float32 [B, T, n_mels] and "lengths" int32 [B].
            training: Whether the layers run in training mode.

        Returns:
            float32 [B, D], not normalized.
        """
        return self.embedding_model([inputs[FEATURES_KEY], inputs[LENGTHS_KEY]], training=training)

    def _check_batch(self, data) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        missing = (
            sorted({FEATURES_KEY, LENGTHS_KEY, LABEL_KEY} - set(data))
            if isinstance(data, Mapping)
            else None
        )
        if missing is None or missing:
            raise ValueError(
                "speaker batches must be dicts with 'features' [B, T, n_mels], 'lengths' [B] and "
                f"'label' [B]; missing {missing if missing else type(data).__name__}"
            )
        labels = tf.cast(data[LABEL_KEY], tf.int32)
        batch_size = tf.shape(labels)[0]
        n_p = self.n_samples_per_class
        divisible = tf.debugging.assert_equal(
            batch_size % n_p, 0,
            message=f"batch size must be a multiple of n_samples_per_class={n_p}",
        )  # fmt: skip
        with tf.control_dependencies([divisible]):
            grouped = tf.reshape(labels, [-1, n_p])
        grouped_by_class = tf.debugging.assert_equal(
            grouped, tf.broadcast_to(grouped[:, :1], tf.shape(grouped)),
            message=f"batches must hold groups of {n_p} consecutive samples of one class",
        )  # fmt: skip
        with tf.control_dependencies([grouped_by_class]):
            features = tf.identity(data[FEATURES_KEY])
        return features, tf.cast(data[LENGTHS_KEY], tf.int32), labels

    def train_step(self, data):
        """One training step on a class-balanced batch (what `fit` calls).

        Args:
            data: A dict with "features" float32 [B, T, n_mels], "lengths" int [B] and "label"
                int [B], B = n_c * n_p in groups of n_p consecutive samples of one class.

        Returns:
            {"loss": the epoch mean so far, float32 []}.

        Raises:
            ValueError: `data` is not a dict with those keys.
            tf.errors.InvalidArgumentError: B is not a multiple of n_p, or a group mixes classes.
        """
        features, lengths, labels = self._check_batch(data)
        with tf.GradientTape() as tape:
            embeddings = self.embedding_model([features, lengths], training=True)
            loss = self.metric_loss(embeddings, labels)
            scaled = replica_loss(loss)
        variables = self.trainable_variables
        self.optimizer.apply_gradients(
            zip(tape.gradient(scaled, variables), variables, strict=True)
        )
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}
