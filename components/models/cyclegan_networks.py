"""The networks of the CycleGAN (`cyclegan.CycleGAN`): a ResNet generator and a PatchGAN.

`build_generator` (ResNet-style encoder-decoder, instance norm) gives `G: X -> Y` and
`F: Y -> X`; `build_discriminator` (PatchGAN) gives `D_X` and `D_Y`. Both are functional Keras 3
models; no TFX.
"""

from __future__ import annotations

import keras


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
