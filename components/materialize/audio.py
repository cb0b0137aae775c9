"""Audio decoding: any file libsndfile or FFmpeg reads -> mono int16 PCM at one sample rate.

libsndfile (`soundfile`) decodes WAV of every sample width, FLAC, Ogg Vorbis and Opus, AIFF and
the other formats it knows; FFmpeg (PyAV) decodes the rest (M4A/AAC and other MP4 containers,
codecs inside a WAV that libsndfile does not know) and MP3, see `_decode`. `soxr` resamples.
Neither imports TensorFlow, so a Beam worker of the audio job does not either.
"""

from __future__ import annotations

import io
import re
from typing import NamedTuple

import av
import numpy as np
import soundfile
import soxr

from components import layout
from components.materialize import rejects

# File extensions of audio: `--speaker_from_path` lists files with these, and a file with one
# whose content no decoder reads is corrupt rather than unsupported.
EXTENSIONS = (
    ".wav",
    ".wave",
    ".flac",
    ".ogg",
    ".oga",
    ".opus",
    ".mp3",
    ".m4a",
    ".aac",
    ".mp4",
    ".aif",
    ".aiff",
    ".aifc",
    ".caf",
    ".w64",
)
_FORMATS = rejects.Formats("readable audio", "file", EXTENSIONS, rejects.CORRUPT_AUDIO)
_SF_UNRECOGNISED_FORMAT = 1  # libsndfile's SF_ERR_UNRECOGNISED_FORMAT
# Frames per libsndfile read: a corrupt header may declare billions of frames, and soundfile
# allocates a read's whole array up front; reading in blocks bounds that by what decodes.
_BLOCK_FRAMES = 1 << 20
# libsndfile reads a WAV/AIFF data chunk that runs past the end of the file up to the end and
# says so only in its log ("data : 8002 (should be 1956)"); that is a truncated file.
_CUT_DATA_CHUNK = re.compile(r"^\s*(?:data|SSND) : (\d+) \(should be (\d+)\)", re.MULTILINE)
_UNKNOWN_LENGTH = 0xFFFFFFFF  # a streamed WAV's data size: "until the end of the file"
_UNKNOWN_FRAMES = 2**63 - 1  # libsndfile's frame count of a stream of unknown length


class Waveform(NamedTuple):
    """Decoded mono audio: `samples` int16 [num_samples] at `sample_rate`."""

    samples: np.ndarray
    sample_rate: int


class _Decoded(NamedTuple):
    """What a decoder read: `samples` [frames, channels], int16 only when they are already the
    stored samples (16-bit mono at the target rate), float32 at full scale 1.0 otherwise (a
    float file may exceed it: `to_int16` clips)."""

    samples: np.ndarray
    sample_rate: int


def decode_audio(data: bytes, source_name: str, sample_rate: int) -> Waveform:
    """Decodes an audio file to mono int16 at `sample_rate`.

    Channels are averaged; other rates are resampled (output length
    round(n * sample_rate / rate)). 16-bit mono at `sample_rate` is stored bit-exact. Raises
    `RejectedInput` with UNSUPPORTED_FORMAT (not audio, no audio stream, no decoder for its
    codec), CORRUPT_AUDIO (undecodable or truncated), EMPTY_AUDIO or TOO_SHORT (under
    `layout.MIN_AUDIO_SECONDS` at `sample_rate`).
    """
    if not data:
        raise _FORMATS.unrecognized(data, source_name)
    decoded = _decode(data, source_name, sample_rate)
    frames = decoded.samples
    if frames.shape[0] == 0:
        raise rejects.RejectedInput(rejects.EMPTY_AUDIO, "no samples")
    if frames.dtype == np.int16:
        samples = frames[:, 0].copy()
    else:
        mono = frames[:, 0] if frames.shape[1] == 1 else frames.mean(axis=1, dtype=np.float32)
        if decoded.sample_rate != sample_rate:
            mono = resample(mono, decoded.sample_rate, sample_rate)
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


def _decode(data: bytes, source_name: str, sample_rate: int) -> _Decoded:
    """libsndfile first; FFmpeg for what it cannot open, and for MP3: libsndfile stops an MP3
    at the length mpg123 estimates, which for a VBR file without a Xing header drops audio
    without an error, while FFmpeg decodes every frame (and trims the LAME encoder delay)."""
    try:
        sound = soundfile.SoundFile(io.BytesIO(data))
    except soundfile.LibsndfileError as error:
        return _decode_with_ffmpeg(data, source_name, error)
    with sound:
        if sound.format == "MP3":
            # Named, not probed: FFmpeg's probe misses short MP3s (a few frames of noise).
            return _decode_with_ffmpeg(data, source_name, None, container_format="mp3")
        if sound.frames == _UNKNOWN_FRAMES:
            # A stream that does not declare its length (a FLAC written to a pipe): soundfile
            # seeks after every read, which libsndfile cannot do in it.
            return _decode_with_ffmpeg(data, source_name, None)
        return _read_soundfile(sound, sample_rate)


def _read_soundfile(sound: soundfile.SoundFile, sample_rate: int) -> _Decoded:
    cut = _CUT_DATA_CHUNK.search(sound.extra_info)
    if cut and int(cut[1]) != _UNKNOWN_LENGTH and int(cut[1]) > int(cut[2]):
        raise rejects.RejectedInput(
            rejects.CORRUPT_AUDIO,
            f"truncated {sound.format}: its header declares {cut[1]} bytes of audio, the file "
            f"holds {cut[2]}",
        )
    exact = sound.subtype == "PCM_16" and sound.channels == 1 and sound.samplerate == sample_rate
    dtype = "int16" if exact else "float32"
    blocks = [np.zeros([0, sound.channels], dtype)]
    try:
        while len(block := sound.read(_BLOCK_FRAMES, dtype=dtype, always_2d=True)):
            blocks.append(block)
    except soundfile.LibsndfileError as error:
        raise rejects.RejectedInput(
            rejects.CORRUPT_AUDIO, f"libsndfile ({sound.format}): {error.error_string}"
        ) from error
    samples = np.concatenate(blocks)
    if len(samples) < sound.frames:
        raise rejects.RejectedInput(
            rejects.CORRUPT_AUDIO,
            f"truncated {sound.format}: decoded {len(samples)} of the {sound.frames} frames "
            "its header declares",
        )
    return _Decoded(samples, sound.samplerate)


def _decode_with_ffmpeg(
    data: bytes,
    source_name: str,
    libsndfile_error: soundfile.LibsndfileError | None,
    container_format: str | None = None,
) -> _Decoded:
    """FFmpeg's decode; `libsndfile_error` is why libsndfile did not open the file (None when
    it did), `container_format` the FFmpeg demuxer to use instead of probing."""
    try:
        container = av.open(io.BytesIO(data), format=container_format, metadata_errors="ignore")
    except Exception as error:  # Any failure to open is a property of this file.
        if libsndfile_error is None or libsndfile_error.code != _SF_UNRECOGNISED_FORMAT:
            # libsndfile knew the format but neither library reads this file.
            sndfile_text = "opens it" if libsndfile_error is None else libsndfile_error.error_string
            raise rejects.RejectedInput(
                rejects.CORRUPT_AUDIO,
                f"libsndfile: {sndfile_text.rstrip('.')}; FFmpeg: {_one_line(error)}",
            ) from error
        raise _FORMATS.unrecognized(data, source_name) from error
    with container:
        if not container.streams.audio:
            kinds = sorted({stream.type for stream in container.streams}) or ["no"]
            raise rejects.RejectedInput(
                rejects.UNSUPPORTED_FORMAT,
                f"no audio stream ({container.format.name} with {', '.join(kinds)} streams)",
            )
        stream = container.streams.audio[0]
        # PyAV crashes the process when asked to decode a stream it has no decoder for.
        if stream.codec_context is None:
            raise rejects.RejectedInput(
                rejects.UNSUPPORTED_FORMAT,
                f"no decoder for the audio codec of this {container.format.name} file",
            )
        # Decoders return int16, int32, float or double samples, planar or interleaved;
        # converting every frame to planar float gives one [channels, n] layout.
        to_float = av.AudioResampler(format="fltp")
        planes = []
        try:
            for frame in container.decode(stream):
                planes.extend(f.to_ndarray() for f in to_float.resample(frame))
            planes.extend(f.to_ndarray() for f in to_float.resample(None))
        except Exception as error:  # Any decoder failure is a property of this file.
            raise rejects.RejectedInput(
                rejects.CORRUPT_AUDIO, f"FFmpeg ({container.format.name}): {_one_line(error)}"
            ) from error
    if not planes:
        return _Decoded(np.zeros([0, 1], np.float32), stream.rate)
    return _Decoded(np.concatenate(planes, axis=1).T, to_float.rate)


def to_int16(samples: np.ndarray) -> np.ndarray:
    """float [-1, 1] -> int16, rounded and clipped."""
    return np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)


def resample(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """float32 [n] -> float32 [round(n * rate_out / rate_in)], time-aligned with the input.

    soxr's one-shot resampler (HQ) compensates its filter delay; its length can differ from
    that rounded length by a sample, so it is padded or trimmed to it: a lossless input then
    gives a length that depends on its sample count and rates alone.
    """
    num_out = round(len(samples) * rate_out / rate_in)
    resampled = soxr.resample(np.ascontiguousarray(samples), rate_in, rate_out, quality="HQ")
    if len(resampled) >= num_out:
        return resampled[:num_out]
    return np.pad(resampled, (0, num_out - len(resampled)))


def _one_line(error: BaseException) -> str:
    # An FFmpeg error's `str` adds the errno and a file name ("<none>" for bytes in memory).
    text = error.strerror if isinstance(error, av.FFmpegError) else str(error)
    return " ".join(str(text).split())[:300] or type(error).__name__
