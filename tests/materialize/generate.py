"""Generated inputs for the materialization tests: images, pair lists, speech and manifests."""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import tensorflow as tf
import tensorflow_io as tfio
from PIL import Image


def image_bytes(rng: np.random.Generator, image_format: str = "PNG", size=(8, 12), mode="RGB"):
    """A small image with random pixels; `size` is (height, width)."""
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[mode]
    shape = (*size, channels) if channels > 1 else size
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, mode).save(buffer, format=image_format)
    return buffer.getvalue()


def write_images(directory: str, ids: list[str], rng: np.random.Generator) -> dict[str, bytes]:
    """Writes PNG/JPEG files (by extension) and returns their bytes by id."""
    written = {}
    for record_id in ids:
        path = os.path.join(directory, record_id)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        image_format = "JPEG" if record_id.endswith((".jpg", ".jpeg")) else "PNG"
        size = (int(rng.integers(4, 20)), int(rng.integers(4, 20)))
        data = image_bytes(rng, image_format, size)
        with open(path, "wb") as f:
            f.write(data)
        written[record_id] = data
    return written


def write_pairs_jsonl(path: str, pairs: dict[str, list[str]]) -> None:
    with open(path, "w") as f:
        for x_id, y_ids in pairs.items():
            f.write(json.dumps({"x": x_id, "y": y_ids}) + "\n")


def write_pairs_csv(path: str, pairs: dict[str, list[str]], header: bool = True) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        if header:
            writer.writerow(["x", "y"])
        for x_id, y_ids in pairs.items():
            for y_id in y_ids:
                writer.writerow([x_id, y_id])


def tone(rng: np.random.Generator, num_samples: int, channels: int = 1) -> np.ndarray:
    """int16 [num_samples, channels] noise plus a tone."""
    t = np.arange(num_samples)
    signal = 8000 * np.sin(2 * np.pi * rng.uniform(100, 1000) * t / 16000)
    noise = rng.normal(0, 500, (num_samples, channels))
    return np.clip(signal[:, None] + noise, -32768, 32767).astype(np.int16)


def wav_bytes(samples: np.ndarray, sample_rate: int) -> bytes:
    """16-bit PCM WAV via `tf.audio.encode_wav` (samples int16 [n, channels])."""
    return tf.audio.encode_wav(tf.constant(samples / 32768.0, tf.float32), sample_rate).numpy()


def flac_bytes(samples: np.ndarray, sample_rate: int) -> bytes:
    """16-bit FLAC via `tfio.audio.encode_flac` (samples int16 [n, channels])."""
    return tfio.audio.encode_flac(tf.constant(samples), rate=sample_rate).numpy()


def write_file(root: str, relative: str, data: bytes) -> str:
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def write_manifest_csv(path: str, rows: list[dict], columns=("path", "speaker")) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([row.get(column, "") for column in columns])


def write_manifest_jsonl(path: str, rows: list[dict]) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
