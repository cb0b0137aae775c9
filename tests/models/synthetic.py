"""Inputs for the model tests, shaped exactly as the trainer component hands them over."""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf
from PIL import Image

N_MELS = 80


def load_domain(directory: str, ids: list[str]) -> np.ndarray:
    """float32 [N, H, W, 1] in [0, 1]: the PNG images `ids` under `directory`."""
    return np.stack(
        [
            np.asarray(Image.open(os.path.join(directory, i)), np.float32)[..., None] / 255.0
            for i in ids
        ]
    )


def digit_pairs(domains) -> tuple[np.ndarray, np.ndarray, tf.RaggedTensor]:
    """The digit domains as arrays (x and y in id order) and the valid pairs as row -> y rows."""
    with open(domains.pairs_path) as f:
        rows = [json.loads(line) for line in f]
    x_ids = [row["x"] for row in rows]
    y_ids = sorted({y for row in rows for y in row["y"]} | set(x_ids))
    y_row = {y: n for n, y in enumerate(y_ids)}
    valid_pairs = tf.ragged.constant([[y_row[y] for y in row["y"]] for row in rows], tf.int64)
    return load_domain(domains.x_dir, x_ids), load_domain(domains.y_dir, y_ids), valid_pairs


def pair_batches(
    x: np.ndarray, y: np.ndarray, valid_pairs: tf.RaggedTensor, batch_size: int, seed: int = 0
) -> tf.data.Dataset:
    """Pair batches per the contract: each iteration reshuffles x and draws a fresh valid y.

    Known cardinality (range -> shuffle -> map -> batch with drop_remainder).
    """
    x, y = tf.constant(x), tf.constant(y)
    degrees = valid_pairs.row_lengths()

    def pair(x_index, draw):
        choice = tf.cast(draw * tf.cast(degrees[x_index], tf.float32), tf.int64)
        y_index = valid_pairs[x_index][tf.minimum(choice, degrees[x_index] - 1)]
        return {"x": x[x_index], "y": y[y_index], "x_index": x_index, "y_index": y_index}

    draws = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).map(
        lambda v: tf.cast(v % 1_000_003, tf.float32) / 1_000_003.0
    )
    indices = tf.data.Dataset.range(len(x)).shuffle(len(x), seed=seed)
    return (
        tf.data.Dataset.zip(indices, draws)
        .map(pair)
        .batch(batch_size, drop_remainder=True)
        .prefetch(2)
    )


def speaker_envelopes(rng: np.random.Generator, num_speakers: int) -> np.ndarray:
    """float [S, N_MELS]: a 'voice' per speaker, three formant-like bumps and a spectral tilt."""
    bins = np.arange(N_MELS)
    envelopes = rng.uniform(-1, 1, (num_speakers, 1)) * bins / N_MELS
    for _ in range(3):
        centre = rng.uniform(5, 75, (num_speakers, 1))
        width = rng.uniform(3, 10, (num_speakers, 1))
        height = rng.uniform(0.6, 1.8, (num_speakers, 1))
        envelopes = envelopes + height * np.exp(-0.5 * ((bins - centre) / width) ** 2)
    return envelopes


def utterances(
    rng: np.random.Generator,
    envelopes: np.ndarray,
    speakers: np.ndarray,
    *,
    num_frames: tuple[int, int] = (40, 120),
    pad_to: int | None = None,
) -> dict[str, np.ndarray]:
    """A batch dict per the contract: log-mel-like `features` [B, T, N_MELS] zero-padded,
    `lengths` int32, `label` int64 (the speaker), `index` int64.

    Each utterance is its speaker's envelope under much louder shared "content" (a random
    spectrum held for 10 frames, the same distribution for everyone), a random channel tilt and
    gain, and frame noise: the speaker is in the long-term average, not in any single frame.
    """
    lengths = rng.integers(num_frames[0], num_frames[1] + 1, size=len(speakers))
    width = pad_to or int(lengths.max())
    features = np.zeros((len(speakers), width, N_MELS), np.float32)
    for row, (speaker, length) in enumerate(zip(speakers, lengths, strict=True)):
        content = np.repeat(rng.normal(0, 1, (length // 10 + 1, N_MELS)), 10, axis=0)[:length]
        tilt = rng.normal(0, 1.5) * np.linspace(-1, 1, N_MELS)
        gain = rng.normal(0, 2)
        noise = rng.normal(size=(length, N_MELS))
        features[row, :length] = envelopes[speaker] + tilt + gain + 2.0 * content + noise
    return {
        "features": features,
        "lengths": lengths.astype(np.int32),
        "label": np.asarray(speakers, np.int64),
        "index": rng.integers(0, 1 << 40, size=len(speakers)),
    }


def class_balanced_batches(
    rng: np.random.Generator,
    envelopes: np.ndarray,
    *,
    n_classes_per_batch: int,
    n_samples_per_class: int,
    num_batches: int,
) -> tf.data.Dataset:
    """`num_batches` n_c x n_p batches (groups of n_p consecutive samples of one speaker),
    one common padded length, known cardinality."""
    batches = []
    for _ in range(num_batches):
        classes = rng.choice(len(envelopes), n_classes_per_batch, replace=False)
        speakers = np.repeat(classes, n_samples_per_class)
        batches.append(utterances(rng, envelopes, speakers, pad_to=120))
    stacked = {key: np.stack([b[key] for b in batches]) for key in batches[0]}
    return tf.data.Dataset.from_tensor_slices(stacked)


def plain_batches(
    rng: np.random.Generator, envelopes: np.ndarray, *, per_speaker: int, batch_size: int
) -> tf.data.Dataset:
    """Every speaker `per_speaker` times, in plain batches (varying T), like an eval set."""
    speakers = np.repeat(np.arange(len(envelopes)), per_speaker)
    batches = [
        utterances(rng, envelopes, speakers[start : start + batch_size])
        for start in range(0, len(speakers), batch_size)
    ]
    signature = {
        "features": tf.TensorSpec([None, None, N_MELS], tf.float32),
        "lengths": tf.TensorSpec([None], tf.int32),
        "label": tf.TensorSpec([None], tf.int64),
        "index": tf.TensorSpec([None], tf.int64),
    }
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=signature)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches)))
