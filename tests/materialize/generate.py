"""Generated inputs for the materialization tests: images, pair lists, speech and manifests."""

from __future__ import annotations

import csv
import io
import json
import os

import av
import numpy as np
import soundfile
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
    """16-bit PCM WAV (samples int16 [n, channels])."""
    return sound_bytes(samples, sample_rate, "WAV", "PCM_16")


def flac_bytes(samples: np.ndarray, sample_rate: int) -> bytes:
    """16-bit FLAC (samples int16 [n, channels])."""
    return sound_bytes(samples, sample_rate, "FLAC", "PCM_16")


def sound_bytes(samples: np.ndarray, sample_rate: int, file_format: str, subtype: str) -> bytes:
    """A file libsndfile writes: `file_format` / `subtype` as `soundfile.write` names them
    ("WAV"/"PCM_24", "OGG"/"OPUS", "MP3"/"MPEG_LAYER_III", ...). int16 samples are written as
    such, float samples [-1, 1] as floats; [n, channels]."""
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, sample_rate, format=file_format, subtype=subtype)
    return buffer.getvalue()


def m4a_bytes(samples: np.ndarray, sample_rate: int, container_format: str = "ipod") -> bytes:
    """AAC in an MP4 container (FFmpeg's "ipod" muxer writes M4A, "mp4" MP4), encoded by FFmpeg
    through PyAV (samples float32 [n, channels] in [-1, 1], 1 or 2 channels)."""
    layout = "mono" if samples.shape[1] == 1 else "stereo"
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container_format) as container:
        stream = container.add_stream("aac", rate=sample_rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(samples.T, np.float32), format="fltp", layout=layout
        )
        frame.sample_rate = sample_rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


def video_bytes() -> bytes:
    """An MP4 holding three frames of video and no audio."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 16, 16, "yuv420p"
        for _ in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


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


def empty_pairs_argv(root, *extra: str) -> list[str]:
    """The materialize CLI's flags for a pairs job over `x/` and `y/` folders that hold one
    undecodable `.png` each (the CLI's preflight wants an image file) and an empty pair list
    below `root` (a pathlib folder), into `root/out`, then `extra`."""
    for folder in ("x", "y"):
        (root / folder).mkdir(exist_ok=True)
        (root / folder / "a.png").write_bytes(b"not a png")
    (root / "pairs.jsonl").write_text("")
    return [
        "pairs",
        *("--x_dir", str(root / "x"), "--y_dir", str(root / "y")),
        *("--pairs", str(root / "pairs.jsonl"), "--output_dir", str(root / "out")),
        *extra,
    ]
