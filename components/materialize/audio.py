"""Audio decoding with tensorflow-io: WAV and FLAC to mono int16 PCM at one sample rate.

The container header is parsed here (sample rate, channels, sample format, frame count) because
tensorflow-io's decoders need the sample dtype up front and do not report the rate; the samples
themselves are decoded by `tfio.audio.decode_wav` / `decode_flac` and resampled by
tensorflow-io's resampler.
"""

from __future__ import annotations

import dataclasses
import functools
import struct

import numpy as np
import tensorflow as tf
import tensorflow_io as tfio
from tensorflow_io.python.ops import core_ops

from components import layout
from components.materialize import rejects

_FORMATS = rejects.Formats("WAV or FLAC", "file", (".wav", ".flac"), rejects.CORRUPT_AUDIO)
_WAVE_FORMAT_PCM = 1
_WAVE_FORMAT_IEEE_FLOAT = 3
_WAVE_FORMAT_EXTENSIBLE = 0xFFFE


@dataclasses.dataclass(frozen=True)
class AudioHeader:
    container: str  # "wav" | "flac"
    sample_rate: int
    channels: int
    dtype: tf.DType  # what tensorflow-io decodes the samples to
    num_frames: int


@dataclasses.dataclass(frozen=True)
class Waveform:
    """Decoded mono audio: `samples` int16 [num_samples] at `sample_rate`."""

    samples: np.ndarray
    sample_rate: int


def decode_audio(data: bytes, source_name: str, sample_rate: int) -> Waveform:
    """Decodes a WAV or FLAC file to mono int16 at `sample_rate`.

    Channels are averaged; other rates are resampled. Raises `RejectedInput` with
    UNSUPPORTED_FORMAT (other containers or sample formats), CORRUPT_AUDIO, EMPTY_AUDIO or
    TOO_SHORT (under `layout.MIN_AUDIO_SECONDS` at `sample_rate`).
    """
    header = read_header(data, source_name)
    if header.num_frames == 0:
        raise rejects.RejectedInput(rejects.EMPTY_AUDIO, "no samples")
    decode = tfio.audio.decode_wav if header.container == "wav" else tfio.audio.decode_flac
    try:
        decoded = decode(data, dtype=header.dtype).numpy()
    except Exception as error:  # Any decoder failure is a property of this file.
        raise rejects.RejectedInput(rejects.CORRUPT_AUDIO, _op_error_text(error)) from error
    if decoded.shape[0] == 0:
        raise rejects.RejectedInput(rejects.EMPTY_AUDIO, "no samples")
    if decoded.ndim != 2 or decoded.shape[1] != header.channels:
        raise rejects.RejectedInput(
            rejects.CORRUPT_AUDIO,
            f"decoded shape {decoded.shape} does not match {header.channels} channels",
        )
    if header.sample_rate == sample_rate and decoded.dtype == np.int16 and header.channels == 1:
        samples = decoded[:, 0].copy()
    else:
        mono = _to_float(decoded).mean(axis=1, dtype=np.float32)
        if header.sample_rate != sample_rate:
            mono = resample(mono, header.sample_rate, sample_rate)
        samples = to_int16(mono)
    # The same bound `AudioFeatureConfig` holds its frame length to: every stored record has at
    # least one feature frame, so pad-mode evaluation never meets a record it cannot featurize.
    if len(samples) < layout.MIN_AUDIO_SECONDS * sample_rate:
        raise rejects.RejectedInput(
            rejects.TOO_SHORT,
            f"{len(samples)} samples ({len(samples) / sample_rate:.3f} s) at {sample_rate} Hz; "
            f"the minimum is {layout.MIN_AUDIO_SECONDS} s",
        )
    return Waveform(samples, sample_rate)


def read_header(data: bytes, source_name: str) -> AudioHeader:
    """Parses the WAV `fmt `/`data` chunks or the FLAC STREAMINFO block."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return _wav_header(data)
    if data[:4] == b"fLaC":
        return _flac_header(data)
    raise _FORMATS.unrecognized(data, source_name)


def _wav_header(data: bytes) -> AudioHeader:
    fmt = None
    data_bytes = None
    position = 12
    while position + 8 <= len(data):
        chunk_id = data[position : position + 4]
        (chunk_size,) = struct.unpack_from("<I", data, position + 4)
        body = position + 8
        if chunk_id == b"fmt " and chunk_size >= 16 and body + 16 <= len(data):
            fmt = struct.unpack_from("<HHIIHH", data, body)
            if fmt[0] == _WAVE_FORMAT_EXTENSIBLE and chunk_size >= 26 and body + 26 <= len(data):
                (sub_format,) = struct.unpack_from("<H", data, body + 24)
                fmt = (sub_format, *fmt[1:])
        elif chunk_id == b"data":
            data_bytes = min(chunk_size, len(data) - body)
            break
        position = body + chunk_size + (chunk_size & 1)
    if fmt is None or data_bytes is None:
        raise rejects.RejectedInput(rejects.CORRUPT_AUDIO, "WAV without fmt or data chunk")
    audio_format, channels, sample_rate, _, _, bits = fmt
    if channels == 0 or sample_rate == 0:
        raise rejects.RejectedInput(rejects.CORRUPT_AUDIO, "WAV with 0 channels or 0 Hz")
    dtype = _wav_dtype(audio_format, bits)
    frame_bytes = channels * max(bits // 8, 1)
    return AudioHeader("wav", sample_rate, channels, dtype, data_bytes // frame_bytes)


def _wav_dtype(audio_format: int, bits: int) -> tf.DType:
    if audio_format == _WAVE_FORMAT_PCM and bits in (8, 16, 24):
        return {8: tf.uint8, 16: tf.int16, 24: tf.int32}[bits]
    if audio_format == _WAVE_FORMAT_IEEE_FLOAT and bits == 32:
        return tf.float32
    # tensorflow-io misreads 32-bit integer PCM as float, so it is refused rather than garbled.
    raise rejects.RejectedInput(
        rejects.UNSUPPORTED_FORMAT,
        f"WAV sample format {audio_format} with {bits} bits (supported: 8/16/24-bit PCM, "
        "32-bit float)",
    )


def _flac_header(data: bytes) -> AudioHeader:
    if len(data) < 42 or data[4] & 0x7F != 0:
        raise rejects.RejectedInput(rejects.CORRUPT_AUDIO, "FLAC without STREAMINFO")
    (packed,) = struct.unpack_from(">Q", data, 18)
    sample_rate = packed >> 44
    channels = ((packed >> 41) & 0x7) + 1
    bits = ((packed >> 36) & 0x1F) + 1
    num_frames = packed & ((1 << 36) - 1)
    if sample_rate == 0:
        raise rejects.RejectedInput(rejects.CORRUPT_AUDIO, "FLAC with a 0 Hz sample rate")
    if bits not in (8, 16, 24):
        raise rejects.RejectedInput(
            rejects.UNSUPPORTED_FORMAT, f"FLAC with {bits} bits per sample (supported: 8/16/24)"
        )
    dtype = {8: tf.uint8, 16: tf.int16, 24: tf.int32}[bits]
    return AudioHeader("flac", sample_rate, channels, dtype, num_frames)


def _to_float(samples: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1); 24-bit samples arrive left-aligned in int32."""
    if samples.dtype == np.int16:
        return samples.astype(np.float32) / 32768.0
    if samples.dtype == np.int32:
        return (samples.astype(np.float64) / 2147483648.0).astype(np.float32)
    if samples.dtype == np.uint8:
        return (samples.astype(np.float32) - 128.0) / 128.0
    return np.clip(samples.astype(np.float32), -1.0, 1.0)


def to_int16(samples: np.ndarray) -> np.ndarray:
    """float [-1, 1] -> int16, rounded and clipped."""
    return np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)


def resample(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """float32 [n] -> float32 [round(n * rate_out / rate_in)], time-aligned with the input.

    tensorflow-io's resampler delays its output by its filter latency and drops the same
    amount at the end; the input is padded and the delay trimmed so sample k of the output
    lies at time k / rate_out.
    """
    delay = _resampler_delay(rate_in, rate_out)
    num_out = int(round(len(samples) * rate_out / rate_in))
    padding = int(np.ceil((delay + 2) * rate_in / rate_out))
    padded = np.concatenate([samples, np.zeros([padding], np.float32)])[:, None]
    resampled = core_ops.io_audio_resample(padded, rate_in=rate_in, rate_out=rate_out).numpy()
    return resampled[delay : delay + num_out, 0]


@functools.lru_cache(maxsize=64)
def _resampler_delay(rate_in: int, rate_out: int) -> int:
    """Output samples by which the resampler lags its input, measured with an impulse."""
    impulse_at = 4096
    impulse = np.zeros([impulse_at * 4, 1], np.float32)
    impulse[impulse_at] = 1.0
    response = core_ops.io_audio_resample(impulse, rate_in=rate_in, rate_out=rate_out).numpy()
    return int(round(int(np.argmax(response[:, 0])) - impulse_at * rate_out / rate_in))


def _op_error_text(error: BaseException) -> str:
    message = getattr(error, "message", str(error))
    message = message.split("}}")[-1].split("[Op:")[0]
    return " ".join(message.split())[:300] or type(error).__name__
