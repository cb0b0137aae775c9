"""Pictures of a CycleGAN translating fixed images, logged to TensorBoard every epoch.

`translation_grid` draws how images translate and cycle back; `TranslationSnapshots` is the Keras
callback that keeps the first images of the training stream and logs their grids (and PNGs).
"""

from __future__ import annotations

import os

import keras
import tensorflow as tf

from tfx_dynamic_inputs.models import charts
from tfx_dynamic_inputs.models.cyclegan import X_KEY, Y_KEY

TRANSLATIONS_DIR = "translations"
X_CYCLE_TAG = "x_to_y_to_x"
Y_CYCLE_TAG = "y_to_x_to_y"


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
