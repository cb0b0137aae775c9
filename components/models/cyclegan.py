"""A small CycleGAN (Zhu et al., 2017) in Keras 3 for the dynamic-pair inputs.

Two generators, `G: X -> Y` and `F: Y -> X` (ResNet-style encoder-decoder, instance norm), and
two PatchGAN discriminators, `D_X` and `D_Y`. Losses:

- adversarial, least-squares (LSGAN): the generators push `D(fake)` to 1, the discriminators push
  `D(real)` to 1 and `D(fake)` to 0;
- cycle consistency: `|F(G(x)) - x| + |G(F(y)) - y|` (mean absolute error);
- identity: `|G(y) - y| + |F(x) - x|`, which keeps the generators from changing what is already in
  the target domain.

`CycleGAN` is a `keras.Model` whose `train_step` takes the pair batches of
`components.inputs.dynamic_pairs`, so `model.fit(dataset)` trains it; it logs `cycle_loss`,
`identity_loss`, `generator_adv_loss` and `discriminator_loss` as epoch means, and
`TranslationSnapshots` shows it translating fixed images in TensorBoard. Unlike the paper
the discriminators see the current batch's fakes, not a pool of older ones: the dynamic pairs
already give them a fresh mix every epoch, and the pool would be state outside the input plan.

Pure Keras 3 on the TensorFlow backend; no TFX.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import keras
import tensorflow as tf

from components.models import charts

X_KEY = "x"
Y_KEY = "y"
LOSS_NAMES = ("cycle_loss", "identity_loss", "generator_adv_loss", "discriminator_loss")
TRANSLATIONS_DIR = "translations"
X_CYCLE_TAG = "x_to_y_to_x"
Y_CYCLE_TAG = "y_to_x_to_y"


def _instance_norm(name: str) -> keras.layers.Layer:
    # groups=-1: one group per channel, i.e. instance normalization. Without a learned scale
    # and offset, as in the reference implementation (PyTorch's InstanceNorm2d default); the
    # convolutions before it carry no bias either, since the norm would remove it.
    return keras.layers.GroupNormalization(
        groups=-1, epsilon=1e-5, center=False, scale=False, name=name
    )


def _conv(filters: int, kernel: int, name: str, strides: int = 1) -> keras.layers.Layer:
    """A convolution followed by instance norm: no bias."""
    return keras.layers.Conv2D(
        filters, kernel, strides=strides, padding="same", use_bias=False, name=name
    )


def build_generator(
    image_shape: tuple[int, int, int],
    *,
    filters: int = 8,
    num_downsamplings: int = 2,
    num_residual_blocks: int = 2,
    name: str = "generator",
) -> keras.Model:
    """A ResNet generator: float32 [B, H, W, C] in [0, 1] -> same shape, in [0, 1].

    `num_downsamplings` stride-2 convolutions (doubling the channels each time), then
    `num_residual_blocks` residual blocks at the lowest resolution, then as many nearest
    upsamplings + convolutions (no transposed convolution: it leaves checkerboard artifacts on
    small images). Most of the compute sits at low resolution, which is what makes a few CPU
    epochs on 32x32 images cheap.

    Args:
        image_shape: (H, W, C) of the images; H and W multiples of 2**num_downsamplings.
        filters: Channels of the first convolution (doubled at each downsampling).
        num_downsamplings: How many stride-2 convolutions (and upsamplings).
        num_residual_blocks: How many residual blocks at the lowest resolution.
        name: The Keras model's name.

    Returns:
        A functional `keras.Model`, float32 [B, H, W, C] -> float32 [B, H, W, C] (sigmoid).

    Raises:
        ValueError: H or W is not a multiple of 2**num_downsamplings.

    Example:
        generator = build_generator((32, 32, 1), name="generator_xy")
    """
    height, width, channels = image_shape
    scale = 2**num_downsamplings
    if height % scale or width % scale:
        raise ValueError(
            f"generator with {num_downsamplings} downsamplings needs image sides divisible by "
            f"{scale}, got {image_shape}"
        )
    inputs = keras.Input(shape=image_shape, name="images")
    h = _conv(filters, 5, "stem")(inputs)
    h = keras.layers.ReLU()(_instance_norm("stem_norm")(h))
    width_at = [filters * 2**level for level in range(num_downsamplings + 1)]
    for level in range(1, num_downsamplings + 1):
        h = _conv(width_at[level], 3, f"down{level}", strides=2)(h)
        h = keras.layers.ReLU()(_instance_norm(f"down{level}_norm")(h))
    for block in range(num_residual_blocks):
        r = _conv(width_at[-1], 3, f"res{block}_a")(h)
        r = keras.layers.ReLU()(_instance_norm(f"res{block}_a_norm")(r))
        r = _conv(width_at[-1], 3, f"res{block}_b")(r)
        h = keras.layers.Add()([h, _instance_norm(f"res{block}_b_norm")(r)])
    for level in range(num_downsamplings - 1, -1, -1):
        h = keras.layers.UpSampling2D(2, interpolation="nearest")(h)
        h = _conv(width_at[level], 3, f"up{level}")(h)
        h = keras.layers.ReLU()(_instance_norm(f"up{level}_norm")(h))
    outputs = keras.layers.Conv2D(
        channels, 3, padding="same", activation="sigmoid", dtype="float32", name="to_image"
    )(h)
    return keras.Model(inputs, outputs, name=name)


def build_discriminator(
    image_shape: tuple[int, int, int], *, filters: int = 16, name: str = "discriminator"
) -> keras.Model:
    """A PatchGAN: float32 [B, H, W, C] -> float32 [B, H/4, W/4, 1] unbounded realness scores.

    Each score sees a 22x22-pixel patch; LSGAN compares the scores with 1 (real) or 0 (fake).

    Args:
        image_shape: (H, W, C) of the images; H and W multiples of 4.
        filters: Channels of the first convolution (then twice and four times as many).
        name: The Keras model's name.

    Returns:
        A functional `keras.Model`, float32 [B, H, W, C] -> float32 [B, H/4, W/4, 1].

    Raises:
        ValueError: H or W is not a multiple of 4.
    """
    height, width, _ = image_shape
    if height % 4 or width % 4:
        raise ValueError(f"discriminator needs image sides divisible by 4, got {image_shape}")
    inputs = keras.Input(shape=image_shape, name="images")
    h = keras.layers.Conv2D(filters, 4, strides=2, padding="same", name="c1")(inputs)
    h = keras.layers.LeakyReLU(0.2)(h)
    h = _conv(2 * filters, 4, "c2", strides=2)(h)
    h = keras.layers.LeakyReLU(0.2)(_instance_norm("c2_norm")(h))
    h = _conv(4 * filters, 4, "c3")(h)
    h = keras.layers.LeakyReLU(0.2)(_instance_norm("c3_norm")(h))
    outputs = keras.layers.Conv2D(1, 4, padding="same", dtype="float32", name="scores")(h)
    return keras.Model(inputs, outputs, name=name)


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
        generator_gradients = tape.gradient(losses["generator_loss"], self.generator_variables)
        discriminator_gradients = tape.gradient(
            losses["discriminator_loss"], self.discriminator_variables
        )
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


def translation_grid(images: tf.Tensor, forward: keras.Model, backward: keras.Model) -> tf.Tensor:
    """One picture of how images translate and cycle back: a row per image.

    Each row holds the image, `forward(image)` and `backward(forward(image))`, each framed by a
    one-pixel grey border.

    Args:
        images: float32 [k, H, W, C] in [0, 1].
        forward: The generator to the other domain (G for x, F for y).
        backward: The generator back (F for x, G for y).

    Returns:
        float32 [1, k * (H + 2), 3 * (W + 2), C], as `tf.summary.image` takes it.

    Example:
        grid = translation_grid(x[:4], model.generator_xy, model.generator_yx)
    """
    translated = forward(images, training=False)
    cycled = backward(translated, training=False)
    cells = tf.stack([images, translated, cycled], axis=1)  # [k, 3, H, W, C]
    cells = tf.pad(cells, [[0, 0], [0, 0], [1, 1], [1, 1], [0, 0]], constant_values=0.5)
    _, _, _, width, channels = cells.shape
    rows = tf.transpose(cells, [0, 2, 1, 3, 4])  # [k, H + 2, 3, W + 2, C]
    return tf.reshape(rows, [1, -1, 3 * width, channels])


class TranslationSnapshots(keras.callbacks.Callback):
    """Logs how a `CycleGAN` translates fixed images, at the end of every epoch.

    Writes two images to `<log_dir>/translations` (step: the epoch, from 0), each also as a PNG
    there (`charts.png_name`: `x_to_y_to_x_step<epoch>.png`, ...), both
    `translation_grid`s: `x_to_y_to_x`, rows [x, G(x), F(G(x))], and `y_to_x_to_y`, rows
    [y, F(y), G(F(y))]. The images are the first `num_images` x and y of the first batch that a
    dataset passed through `watch` yields, kept from then on, so every epoch shows the same ones.
    They are taken as that dataset streams past rather than by an extra pass over it: a pass
    over dynamic pairs plans an epoch and counts towards pair coverage.

    Args:
        log_dir: The TensorBoard log folder; images go to `<log_dir>/translations`.
        image_shape: (H, W, C) of the model's images.
        images_from: Which data `watch` is given, as the summaries' descriptions say it.
        num_images: How many x and how many y are shown.

    Example:
        snapshots = TranslationSnapshots(log_dir, (32, 32, 1), images_from="the training pairs")
        model.fit(snapshots.watch(dataset), callbacks=[snapshots])
    """

    def __init__(
        self,
        log_dir: str,
        image_shape: tuple[int, int, int],
        *,
        images_from: str,
        num_images: int = 4,
    ):
        super().__init__()
        self.images_from = images_from
        self.num_images = int(num_images)
        self._images = {
            key: tf.Variable(
                tf.zeros([0, *image_shape]), shape=[None, *image_shape], trainable=False
            )
            for key in (X_KEY, Y_KEY)
        }
        self._kept = tf.Variable(False, trainable=False)
        self._log_dir = os.path.join(log_dir, TRANSLATIONS_DIR)
        self._writer = tf.summary.create_file_writer(self._log_dir)

    def watch(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """`dataset`, unchanged, except that its first batch leaves its first images here.

        Args:
            dataset: Pair batches, dicts with "x" and "y" [B, H, W, C] in [0, 1].

        Returns:
            The same batches; pass it to `fit` instead of `dataset`.
        """

        def keep(batch):
            assigned = [
                self._images[key].assign(tf.cast(batch[key][: self.num_images], tf.float32))
                for key in (X_KEY, Y_KEY)
            ]
            with tf.control_dependencies(assigned):
                return self._kept.assign(True)

        def keep_first(batch):
            kept = tf.cond(self._kept, lambda: tf.constant(True), lambda: keep(batch))
            with tf.control_dependencies([kept]):
                return tf.nest.map_structure(tf.identity, batch)

        return dataset.map(keep_first)

    def on_epoch_end(self, epoch, logs=None):
        """Writes both translation grids at step `epoch` (nothing before `watch` yielded).

        Args:
            epoch: The epoch that ended, from 0.
            logs: Keras's epoch logs (unused).
        """
        if not self._kept:  # the watched dataset has yielded nothing yet
            return
        model = self.model
        cycles = (
            (X_CYCLE_TAG, X_KEY, model.generator_xy, model.generator_yx, "x, G(x) and F(G(x))"),
            (Y_CYCLE_TAG, Y_KEY, model.generator_yx, model.generator_xy, "y, F(y) and G(F(y))"),
        )
        with self._writer.as_default(step=epoch):
            for tag, key, forward, backward, row in cycles:
                grid = translation_grid(self._images[key], forward, backward)
                # Also a PNG beside the events, for people without TensorBoard.
                rgb = tf.image.grayscale_to_rgb(grid) if grid.shape[-1] == 1 else grid
                charts.write_png(
                    tf.image.convert_image_dtype(rgb[0], tf.uint8, saturate=True).numpy(),
                    os.path.join(self._log_dir, charts.png_name(tag, epoch)),
                )
                tf.summary.image(
                    tag,
                    grid,
                    description=(
                        f"Each row: a fixed {row} (G: X -> Y, F: Y -> X); the cycle loss pulls "
                        f"the last towards the first. The {key} are the first "
                        f"{self.num_images} of {self.images_from}."
                    ),
                )
        self._writer.flush()
