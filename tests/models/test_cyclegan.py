"""The CycleGAN: shapes, losses, training on the digit domains (export: test_serving)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.models import synthetic
from tfx_dynamic_inputs.models import cyclegan, cyclegan_networks


@pytest.mark.parametrize("shape", [(32, 32, 1), (16, 24, 3)])
def test_networks_keep_shapes_and_range(shape):
    images = tf.random.uniform([5, *shape])
    generator = cyclegan_networks.build_generator(shape)
    translated = generator(images)
    assert translated.shape == images.shape
    assert float(tf.reduce_min(translated)) >= 0.0 and float(tf.reduce_max(translated)) <= 1.0
    scores = cyclegan_networks.build_discriminator(shape)(images)
    assert scores.shape == (5, shape[0] // 4, shape[1] // 4, 1)


def test_sizes_the_networks_cannot_take_are_refused():
    with pytest.raises(ValueError, match="divisible by 4"):
        cyclegan_networks.build_generator((30, 32, 1))
    assert cyclegan_networks.build_generator((30, 32, 1), num_downsamplings=1, filters=2).built
    with pytest.raises(ValueError, match="divisible by 2"):
        cyclegan_networks.build_generator((31, 32, 1), num_downsamplings=1, filters=2)
    with pytest.raises(ValueError, match="divisible by 4"):
        cyclegan_networks.build_discriminator((32, 18, 1))
    with pytest.raises(ValueError, match="height, width, channels"):
        cyclegan.CycleGAN((32, 32))


def test_lsgan_losses_are_zero_at_their_targets_and_positive_elsewhere():
    ones, zeros = tf.ones([2, 4, 4, 1]), tf.zeros([2, 4, 4, 1])
    assert float(cyclegan.lsgan_generator_loss(ones)) == 0.0
    assert float(cyclegan.lsgan_discriminator_loss(ones, zeros)) == 0.0
    assert float(cyclegan.lsgan_generator_loss(zeros)) == 1.0
    assert float(cyclegan.lsgan_discriminator_loss(zeros, ones)) == 1.0


def train(pairs: tf.data.Dataset, epochs: int, image_shape, learning_rate=2e-4, **kwargs):
    keras.utils.set_random_seed(0)
    model = cyclegan.CycleGAN(image_shape, **kwargs)
    model.compile(
        generator_optimizer=keras.optimizers.Adam(learning_rate, beta_1=0.5),
        discriminator_optimizer=keras.optimizers.Adam(learning_rate, beta_1=0.5),
        jit_compile=False,
    )
    return model, model.fit(pairs, epochs=epochs, verbose=0).history


def test_losses_are_finite_and_fall_on_a_learnable_toy():
    """X: random blobs; Y: the same kind of blobs, inverted. Every loss is logged each epoch."""
    rng = np.random.default_rng(0)
    blobs = tf.image.resize(rng.random((1024, 4, 4, 1)).astype(np.float32), (16, 16)).numpy()
    x, y = blobs[:512], 1.0 - blobs[512:]
    valid_pairs = tf.RaggedTensor.from_row_lengths(rng.integers(0, 512, 512 * 3), np.full(512, 3))
    pairs = synthetic.pair_batches(x, y, valid_pairs, batch_size=32)
    _, history = train(
        pairs, 4, (16, 16, 1), learning_rate=1e-3, generator_filters=4, discriminator_filters=4
    )
    assert set(cyclegan.LOSS_NAMES) <= set(history)
    for name in cyclegan.LOSS_NAMES:
        assert len(history[name]) == 4 and np.isfinite(history[name]).all(), history
    assert history["cycle_loss"][-1] < 0.8 * history["cycle_loss"][0], history
    assert history["identity_loss"][-1] < history["identity_loss"][0], history


@pytest.fixture(scope="module")
def small_digits(digits):
    """The digit domains at 16 x 16 (area-averaged): the same learning problem at a quarter of
    the training cost of 32 x 32."""
    x, y, valid_pairs = digits
    assert x.shape == y.shape == (1797, 32, 32, 1)
    return (
        tf.image.resize(x, (16, 16), "area").numpy(),
        tf.image.resize(y, (16, 16), "area").numpy(),
        valid_pairs,
    )


@pytest.fixture(scope="module")
def digits_model(small_digits):
    x, y, valid_pairs = small_digits
    pairs = synthetic.pair_batches(x, y, valid_pairs, batch_size=64)
    return train(pairs, 3, (16, 16, 1))


def test_cycle_loss_falls_over_epochs_on_the_digit_domains(digits_model):
    _, history = digits_model
    cycle = history["cycle_loss"]
    assert cycle[1] < cycle[0] and cycle[2] < cycle[1], cycle
    assert cycle[-1] < 0.7 * cycle[0], cycle
    assert all(np.isfinite(history[name]).all() for name in cyclegan.LOSS_NAMES)


def test_trained_generator_moves_x_towards_the_y_style(small_digits, digits_model):
    """Y is dark ink on white: translating X must brighten the background a lot."""
    x, y, _ = small_digits
    model, _ = digits_model
    translated = model(x[:64]).numpy()
    assert abs(translated.mean() - y.mean()) < 0.5 * abs(x.mean() - y.mean())


def test_evaluate_reports_the_same_losses_without_training(small_digits, digits_model):
    x, y, valid_pairs = small_digits
    model, _ = digits_model
    before = [w.numpy().copy() for w in model.generator_xy.weights]
    results = model.evaluate(
        synthetic.pair_batches(x[:128], y, valid_pairs[:128], 64), return_dict=True, verbose=0
    )
    assert set(cyclegan.LOSS_NAMES) <= set(results)
    assert all(
        np.array_equal(b, w.numpy())
        for b, w in zip(before, model.generator_xy.weights, strict=True)
    )


def test_batches_without_pairs_or_of_another_size_are_refused():
    model = cyclegan.CycleGAN((16, 16, 1), generator_filters=2, discriminator_filters=2)
    model.compile(jit_compile=False)
    images = tf.zeros([2, 16, 16, 1])
    with pytest.raises(ValueError, match="keys 'x' and 'y'"):
        model.fit(tf.data.Dataset.from_tensors({"x": images}), verbose=0)
    with pytest.raises(ValueError, match="keys 'x' and 'y'"):
        model.fit(tf.data.Dataset.from_tensors((images, images)), verbose=0)
    wrong = {"x": images, "y": tf.zeros([2, 32, 32, 1])}
    with pytest.raises(ValueError, match="built for"):
        model.fit(tf.data.Dataset.from_tensors(wrong), verbose=0)
