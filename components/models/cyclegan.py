"""A small CycleGAN (Zhu et al., 2017) in Keras 3 for the dynamic-pair inputs.

Two generators, `G: X -> Y` and `F: Y -> X` (ResNet-style encoder-decoder, instance norm), and
two PatchGAN discriminators, `D_X` and `D_Y`. Losses:

- adversarial, least-squares (LSGAN): the generators push `D(fake)` to 1, the discriminators push
  `D(real)` to 1 and `D(fake)` to 0;
- cycle consistency: `|F(G(x)) - x| + |G(F(y)) - y|` (mean absolute error);
- identity: `|G(y) - y| + |F(x) - x|`, which keeps the generators from changing what is already in
  the target domain.

`CycleGAN` is a `keras.Model` whose `train_step` takes the pair batches of
`tfx_dynamic_inputs.inputs.dynamic_pairs`, so `model.fit(dataset)` trains it; it logs `cycle_loss`,
`identity_loss`, `generator_adv_loss` and `discriminator_loss` as epoch means, and
`translation_snapshots.TranslationSnapshots` shows it translating fixed images in TensorBoard.
Unlike the paper the discriminators see the current batch's fakes, not a pool of older ones: the
dynamic pairs already give them a fresh mix every epoch, and the pool would be state outside the
input plan. The networks are built in `cyclegan_networks`.

Pure Keras 3 on the TensorFlow backend; no TFX.
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
import tensorflow as tf

from tfx_dynamic_inputs.models.cyclegan_networks import build_discriminator, build_generator
from tfx_dynamic_inputs.models.replicas import replica_loss

X_KEY = "x"
Y_KEY = "y"
LOSS_NAMES = ("cycle_loss", "identity_loss", "generator_adv_loss", "discriminator_loss")


def lsgan_generator_loss(fake_scores: tf.Tensor) -> tf.Tensor:
    """The least-squares GAN loss of a generator: how far `D(fake)` is from 1 (real).

    Args:
        fake_scores: float32 [B, h, w, 1], the discriminator's scores of generated images.

    Returns:
        float32 []: mean((fake_scores - 1)^2).
    """
    return tf.reduce_mean(tf.square(fake_scores - 1.0))


def lsgan_discriminator_loss(real_scores: tf.Tensor, fake_scores: tf.Tensor) -> tf.Tensor:
    """The least-squares GAN loss of a discriminator: real scores towards 1, fakes towards 0.

    Args:
        real_scores: float32 [B, h, w, 1], its scores of real images.
        fake_scores: float32 [B, h, w, 1], its scores of generated images.

    Returns:
        float32 []: (mean((real_scores - 1)^2) + mean(fake_scores^2)) / 2.
    """
    return 0.5 * (
        tf.reduce_mean(tf.square(real_scores - 1.0)) + tf.reduce_mean(tf.square(fake_scores))
    )


def mean_absolute_error(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """The mean absolute difference of two tensors (the cycle and identity losses).

    Args:
        a: float32 tensor, e.g. images [B, H, W, C].
        b: float32 tensor broadcastable to `a`'s shape.

    Returns:
        float32 []: mean(|a - b|).
    """
    return tf.reduce_mean(tf.abs(a - b))


class CycleGAN(keras.Model):
    """CycleGAN over pair batches `{"x": [B, H, W, C], "y": [B, H, W, C], ...}` in [0, 1].

    Calling the model translates X to Y. Compile with `compile(generator_optimizer=...,
    discriminator_optimizer=...)` (Adam(2e-4, beta_1=0.5) each by default).

    Args:
        image_shape: (H, W, C) of the images of both domains.
        generator_filters: `filters` of both generators (`build_generator`).
        num_downsamplings: `num_downsamplings` of both generators.
        num_residual_blocks: `num_residual_blocks` of both generators.
        discriminator_filters: `filters` of both discriminators (`build_discriminator`).
        cycle_weight: The weight of the cycle loss in the generators' loss.
        identity_weight: The weight of the identity loss in the generators' loss.
        **kwargs: Passed to `keras.Model` (`name`, ...).

    Raises:
        ValueError: `image_shape` is not (height, width, channels), or its sides do not suit
            the networks (see `build_generator`, `build_discriminator`).

    Example:
        model = CycleGAN((32, 32, 1))
        model.compile()
        model.fit(dynamic_pairs_dataset, epochs=5)
    """

    def __init__(
        self,
        image_shape: tuple[int, int, int],
        *,
        generator_filters: int = 8,
        num_downsamplings: int = 2,
        num_residual_blocks: int = 2,
        discriminator_filters: int = 16,
        cycle_weight: float = 10.0,
        identity_weight: float = 5.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.image_shape = tuple(int(d) for d in image_shape)
        if len(self.image_shape) != 3:
            raise ValueError(f"image_shape must be (height, width, channels), got {image_shape}")
        self.cycle_weight = float(cycle_weight)
        self.identity_weight = float(identity_weight)
        generator_args = {
            "filters": generator_filters,
            "num_downsamplings": num_downsamplings,
            "num_residual_blocks": num_residual_blocks,
        }
        self.generator_xy = build_generator(self.image_shape, name="generator_xy", **generator_args)
        self.generator_yx = build_generator(self.image_shape, name="generator_yx", **generator_args)
        self.discriminator_x = build_discriminator(
            self.image_shape, filters=discriminator_filters, name="discriminator_x"
        )
        self.discriminator_y = build_discriminator(
            self.image_shape, filters=discriminator_filters, name="discriminator_y"
        )
        self.loss_trackers = {name: keras.metrics.Mean(name=name) for name in LOSS_NAMES}
        self.built = True  # every sub-model is a built functional model

    @property
    def generator_variables(self) -> list:
        """The trainable variables of both generators (what the generator optimizer updates)."""
        return self.generator_xy.trainable_variables + self.generator_yx.trainable_variables

    @property
    def discriminator_variables(self) -> list:
        """The trainable variables of both discriminators."""
        return self.discriminator_x.trainable_variables + self.discriminator_y.trainable_variables

    @property
    def metrics(self) -> list:
        """The loss trackers, one `keras.metrics.Mean` per name of `LOSS_NAMES`."""
        # Listing the trackers here makes `fit` reset them at each epoch start, so the logged
        # values are epoch means.
        return list(self.loss_trackers.values())

    def compile(
        self,
        generator_optimizer: keras.optimizers.Optimizer | None = None,
        discriminator_optimizer: keras.optimizers.Optimizer | None = None,
        **kwargs,
    ) -> None:
        """Sets one optimizer per player and builds each over its own networks' variables.

        Args:
            generator_optimizer: Updates both generators; None: Adam(2e-4, beta_1=0.5).
            discriminator_optimizer: Updates both discriminators; None: Adam(2e-4, beta_1=0.5).
            **kwargs: Passed to `keras.Model.compile` (`run_eagerly`, `jit_compile`, ...).
        """
        self.generator_optimizer = generator_optimizer or keras.optimizers.Adam(2e-4, beta_1=0.5)
        self.discriminator_optimizer = discriminator_optimizer or keras.optimizers.Adam(
            2e-4, beta_1=0.5
        )
        # Each optimizer holds slots for its own players only; building them here keeps
        # `fit` from building `self.optimizer` over all four networks.
        self.generator_optimizer.build(self.generator_variables)
        self.discriminator_optimizer.build(self.discriminator_variables)
        super().compile(optimizer=self.generator_optimizer, **kwargs)

    def call(self, images, training=False):
        """Translates X to Y with the generator G.

        Args:
            images: float32 [B, H, W, C] in [0, 1], images of domain X.
            training: Whether the layers run in training mode.

        Returns:
            float32 [B, H, W, C] in [0, 1]: G(images).
        """
        return self.generator_xy(images, training=training)

    def _unpack_pair(self, data) -> tuple[tf.Tensor, tf.Tensor]:
        if not isinstance(data, Mapping) or X_KEY not in data or Y_KEY not in data:
            raise ValueError(
                "CycleGAN expects batches as dicts with keys 'x' and 'y' (float32 [B, H, W, C] "
                f"in [0, 1]), got {type(data).__name__}"
                + (f" with keys {sorted(data)}" if isinstance(data, Mapping) else "")
            )
        x, y = data[X_KEY], data[Y_KEY]
        for key, images in ((X_KEY, x), (Y_KEY, y)):
            if tuple(images.shape[1:]) != self.image_shape:
                raise ValueError(
                    f"batch '{key}' has shape {images.shape}; this CycleGAN was built for "
                    f"[B, {', '.join(map(str, self.image_shape))}]"
                )
        return tf.cast(x, tf.float32), tf.cast(y, tf.float32)

    def _cyclegan_losses(self, x: tf.Tensor, y: tf.Tensor, training: bool) -> dict[str, tf.Tensor]:
        # Each network runs once per distinct input batch it needs, on the inputs stacked along
        # the batch axis (instance norm and PatchGAN scores are per image, so stacking changes
        # nothing): 4 generator and 2 discriminator calls instead of 6 and 4. That halves the
        # graph to trace, and larger convolutions run faster per image.
        batch_size = tf.shape(x)[0]
        fake_y, same_y = tf.split(
            self.generator_xy(tf.concat([x, y], 0), training=training), [batch_size, -1]
        )
        fake_x, same_x = tf.split(
            self.generator_yx(tf.concat([y, x], 0), training=training), [batch_size, -1]
        )
        cycled_x = self.generator_yx(fake_y, training=training)
        cycled_y = self.generator_xy(fake_x, training=training)
        real_x_scores, fake_x_scores = tf.split(
            self.discriminator_x(tf.concat([x, fake_x], 0), training=training), [batch_size, -1]
        )
        real_y_scores, fake_y_scores = tf.split(
            self.discriminator_y(tf.concat([y, fake_y], 0), training=training), [batch_size, -1]
        )

        losses = {
            "cycle_loss": mean_absolute_error(x, cycled_x) + mean_absolute_error(y, cycled_y),
            "identity_loss": mean_absolute_error(y, same_y) + mean_absolute_error(x, same_x),
            "generator_adv_loss": lsgan_generator_loss(fake_y_scores)
            + lsgan_generator_loss(fake_x_scores),
            # The fakes are not stopped here: the tape only asks for gradients of this loss
            # with respect to the discriminators.
            "discriminator_loss": lsgan_discriminator_loss(real_x_scores, fake_x_scores)
            + lsgan_discriminator_loss(real_y_scores, fake_y_scores),
        }
        losses["generator_loss"] = (
            losses["generator_adv_loss"]
            + self.cycle_weight * losses["cycle_loss"]
            + self.identity_weight * losses["identity_loss"]
        )
        return losses

    def _update_loss_trackers(self, losses: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        for name, tracker in self.loss_trackers.items():
            tracker.update_state(losses[name])
        return {name: tracker.result() for name, tracker in self.loss_trackers.items()}

    def train_step(self, data):
        """One step of both players on a pair batch (what `fit` calls).

        Args:
            data: A dict with "x" and "y", float32 [B, H, W, C] in [0, 1] (other keys ignored).

        Returns:
            The epoch means so far of the losses in `LOSS_NAMES`, float32 [] each.

        Raises:
            ValueError: `data` is not such a dict, or its images are not of `image_shape`.
        """
        x, y = self._unpack_pair(data)
        with tf.GradientTape(persistent=True) as tape:
            losses = self._cyclegan_losses(x, y, training=True)
            generator_loss = replica_loss(losses["generator_loss"])
            discriminator_loss = replica_loss(losses["discriminator_loss"])
        generator_gradients = tape.gradient(generator_loss, self.generator_variables)
        discriminator_gradients = tape.gradient(discriminator_loss, self.discriminator_variables)
        del tape
        self.generator_optimizer.apply_gradients(
            zip(generator_gradients, self.generator_variables, strict=True)
        )
        self.discriminator_optimizer.apply_gradients(
            zip(discriminator_gradients, self.discriminator_variables, strict=True)
        )
        return self._update_loss_trackers(losses)

    def test_step(self, data):
        """The losses of a pair batch without training (what `evaluate` calls).

        Args:
            data: A dict with "x" and "y", as for `train_step`.

        Returns:
            The means so far of the losses in `LOSS_NAMES`, float32 [] each.

        Raises:
            ValueError: as `train_step`.
        """
        x, y = self._unpack_pair(data)
        return self._update_loss_trackers(self._cyclegan_losses(x, y, training=False))
