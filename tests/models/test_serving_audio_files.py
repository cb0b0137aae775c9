"""What training accepts, serving accepts: WAV files of every PCM and float sample width, any rate
and channel count, through `embed_encoded_audio`, give what the audio job's decode (libsndfile,
soxr) gives; other files and lying headers fail in one line naming what is accepted."""

from __future__ import annotations

import io
import re
import struct

import keras
import numpy as np
import pytest
import soundfile
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.inputs.audio_config import AudioFeatureConfig
from tfx_dynamic_inputs.materialize import config as materialize_config
from tfx_dynamic_inputs.materialize.audio import decode_audio
from tfx_dynamic_inputs.models import serving, speaker, wav_decoding

RATE = 16000
N_MELS = 24
FEATURES = AudioFeatureConfig(
    sample_rate=RATE, num_mel_bins=N_MELS, frame_length_ms=20.0, frame_step_ms=8.0
)
RATES = (8000, 16000, 22050, 44100, 48000)
SUBTYPES = ("PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE")
# Resampled files: the job has soxr, serving the speed perturbation's filter. Their records
# differ by the two filters' band edges (tests/class_balanced/test_rate_resampling.py), which the
# tiny untrained net below sees; at the training rate records and embeddings are the job's.
MIN_RECORD_SNR_DB = 40.0
MIN_COSINE = 0.95
ATOL = 1e-5


def _voice(rate: int, channels: int, rng: np.random.Generator, seconds: float = 0.5):
    """A vowel-like tone: harmonics of a wavering pitch up to 3.4 kHz (or 0.4 of the rate), a
    little noise, each channel at its own gain; float64 [frames, channels] within +-0.6."""
    t = np.arange(int(rate * seconds)) / rate
    pitch = rng.uniform(100, 220) * (1 + 0.04 * np.sin(2 * np.pi * 5 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    top = min(3400.0, 0.4 * rate)
    harmonics = range(1, int(top // 220) + 1)
    tone = sum(np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in harmonics)
    tone = tone / np.abs(tone).max() * 0.5 + 0.003 * rng.standard_normal(len(t))
    return np.stack([tone * (1 - 0.2 * c) for c in range(channels)], axis=1)


def _wav(samples: np.ndarray, rate: int, subtype: str, file_format: str = "WAV") -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=file_format, subtype=subtype)
    return buffer.getvalue()


def _snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    reference, other = reference.astype(np.float64), other.astype(np.float64)
    return 10 * np.log10(np.sum(reference**2) / max(np.sum((other - reference) ** 2), 1e-30))


def _message(error: tf.errors.InvalidArgumentError) -> str:
    """The assertion's message: what a client reads after TensorFlow's "assertion failed: "."""
    found = re.search(r"assertion failed: \[(.*?)\]\n", error.message)
    assert found, error.message
    return found[1]


@pytest.fixture(scope="module")
def decode():
    return tf.function(
        lambda audio: serving.decode_audio_files(audio, RATE),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )


@pytest.fixture(scope="module")
def signatures(tmp_path_factory):
    keras.utils.set_random_seed(0)
    net = speaker.build_embedding_model(N_MELS, channels=8, embedding_dim=6)
    export_dir = str(tmp_path_factory.mktemp("wav_serving"))
    serving.export_speaker_model(net, export_dir, FEATURES)
    return tf.saved_model.load(export_dir).signatures


def _cases(rng: np.random.Generator) -> list[tuple[int, str, str, int, bytes]]:
    """(rate, container, subtype, channels, file) of every width, rate and 1-2 channels; WAVE_
    FORMAT_EXTENSIBLE (soundfile's WAVEX) for the widths it writes."""
    cases = []
    for rate in RATES:
        for subtype in SUBTYPES:
            for channels in (1, 2):
                container = "WAVEX" if channels == 2 and subtype != "PCM_U8" else "WAV"
                samples = _voice(rate, channels, rng)
                cases.append(
                    (rate, container, subtype, channels, _wav(samples, rate, subtype, container))
                )
    return cases


def test_every_width_rate_and_channel_count_decodes_to_the_jobs_record(decode):
    cases = _cases(np.random.default_rng(0))
    records = decode(tf.constant([case[-1] for case in cases])).numpy()
    for (rate, container, subtype, channels, data), record in zip(cases, records, strict=True):
        stored = decode_audio(data, "request.wav", RATE).samples
        ours = np.frombuffer(record, "<i2")
        name = f"{rate} Hz {container} {subtype} x{channels}"
        assert len(ours) == len(stored), name
        if rate == RATE:
            np.testing.assert_array_equal(ours, stored, err_msg=name)
        else:
            assert _snr_db(stored, ours) > MIN_RECORD_SNR_DB, name


def test_wav_files_give_the_embeddings_of_the_jobs_records(signatures):
    cases = _cases(np.random.default_rng(1))
    for rate in RATES:
        files = [case[-1] for case in cases if case[0] == rate]
        served = signatures["embed_encoded_audio"](audio=tf.constant(files))["embedding"].numpy()
        for file, embedding in zip(files, served, strict=True):
            stored = decode_audio(file, "request.wav", RATE).samples
            expected = signatures["embed_waveforms"](
                waveforms=tf.constant(stored[np.newaxis] / 32768.0, tf.float32),
                lengths=tf.constant([len(stored)]),
            )["embedding"].numpy()[0]
            if rate == RATE:
                np.testing.assert_allclose(embedding, expected, atol=ATOL)
            else:
                assert embedding @ expected > MIN_COSINE, rate


def _riff(*chunks: tuple[bytes, bytes]) -> bytes:
    body = b"WAVE" + b"".join(
        name + struct.pack("<I", len(content)) + content + b"\0" * (len(content) % 2)
        for name, content in chunks
    )
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _fmt(code=1, channels=1, rate=RATE, bits=16, block_align=None) -> bytes:
    block_align = channels * bits // 8 if block_align is None else block_align
    return struct.pack("<HHIIHH", code, channels, rate, rate * block_align, block_align, bits)


def test_chunks_anywhere_and_a_streamed_length_decode_as_libsndfile_reads_them(decode):
    pcm = (np.random.default_rng(2).uniform(-0.5, 0.5, 1601) * 32768).astype("<i2")
    files = [
        # A LIST and an odd-sized (padded) JUNK chunk before fmt, a trailing chunk after data.
        _riff(
            (b"LIST", b"INFOtest"),
            (b"JUNK", b"abc"),
            (b"fmt ", _fmt()),
            (b"data", pcm.tobytes()),
            (b"id3 ", b"x" * 9),
        ),
        # A streamed WAV: its data size "until the end of the file".
        _riff((b"fmt ", _fmt()), (b"data", b""))[:-4]
        + struct.pack("<I", 0xFFFFFFFF)
        + pcm.tobytes(),
    ]
    for data in files:
        stored = decode_audio(data, "request.wav", RATE).samples
        np.testing.assert_array_equal(stored, pcm)
    for record in decode(tf.constant(files)).numpy():
        np.testing.assert_array_equal(np.frombuffer(record, "<i2"), pcm)


def _refusals() -> list[tuple[bytes, str]]:
    rng = np.random.default_rng(3)
    voice = _voice(RATE, 1, rng)
    pcm = (voice[:, 0] * 32768).astype("<i2").tobytes()
    good = _wav(voice, RATE, "PCM_16")
    accepted = re.escape(wav_decoding.ACCEPTED_WAV)
    extensible = bytearray(_wav(_voice(RATE, 2, rng), RATE, "PCM_16", "WAVEX"))
    extensible[20 + 8 + 26] ^= 0xFF  # a byte of the SubFormat GUID
    nan = voice.copy()
    nan[100] = np.nan
    return [
        (
            _wav(voice, RATE, "PCM_16", "FLAC"),
            f"is FLAC audio, not accepted; the model takes {accepted}$",
        ),
        (
            _wav(voice, RATE, "VORBIS", "OGG"),
            f"is Ogg .* audio, not accepted; the model takes {accepted}$",
        ),
        (_wav(voice, RATE, "MPEG_LAYER_III", "MP3"), f"is MP3 audio, not accepted; .*{accepted}$"),
        (
            b"\0\0\0\x20ftypM4A " + bytes(200),
            f"is MP4 \\(M4A/AAC\\) audio, not accepted; .*{accepted}$",
        ),
        (
            b"\x00\x01\x80\x81" + bytes(40),
            r"no audio file the model knows \(first bytes \[0 1 128 129 0 0 0 0 0 0 0 0\]\)",
        ),
        (
            _wav(voice, RATE, "ULAW"),
            f"WAV of format code 7 .* and 8-bit samples, not accepted; .*{accepted}$",
        ),
        (_wav(voice, RATE, "IMA_ADPCM"), f"WAV of format code 17 .*, not accepted; .*{accepted}$"),
        (
            _riff((b"fmt ", _fmt(bits=12, block_align=2)), (b"data", pcm)),
            "format code 1 .* and 12-bit",
        ),
        (bytes(extensible), "format code 65534 .* not accepted"),
        (_riff((b"data", pcm)), "a WAV without a fmt chunk"),
        (good[:30], "a truncated WAV: its fmt chunk runs past the end of the file"),
        (_riff((b"fmt ", _fmt())), r"a WAV without a data chunk \(cut short\?\)"),
        (
            _riff((b"fmt ", _fmt(block_align=4)), (b"data", pcm)),
            "inconsistent: 1 channels of 16 bits in blocks of 4 bytes",
        ),
        (_riff((b"fmt ", _fmt(channels=0)), (b"data", pcm)), "inconsistent: 0 channels"),
        (
            _riff((b"fmt ", _fmt(rate=999)), (b"data", pcm)),
            "a WAV at 999 Hz, outside 1000 to 768000 Hz",
        ),
        (_riff((b"fmt ", _fmt(rate=768001)), (b"data", pcm)), "a WAV at 768001 Hz"),
        (
            good[:-1000],
            "a truncated WAV: its header declares 16000 bytes of audio, the file holds 15000",
        ),
        # 601 s of 8-bit audio at 1 kHz: 601 KB.
        (
            _riff((b"fmt ", _fmt(rate=1000, bits=8)), (b"data", bytes(601000))),
            "601000 frames at 1000 Hz, longer than the 600 s",
        ),
        (_wav(nan, RATE, "FLOAT"), "a WAV of NaN or infinite samples"),
        (_wav(voice[:200], RATE, "PCM_16"), "at least one 20.0 ms frame"),
    ]


def test_other_files_and_lying_headers_fail_in_one_line_naming_what_is_accepted(signatures):
    encoded = signatures["embed_encoded_audio"]
    good = _wav(_voice(RATE, 1, np.random.default_rng(4)), RATE, "PCM_16")
    for bad, expected in _refusals():
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            encoded(audio=tf.constant([good, bad]))
        message = _message(raised.value)
        assert "\n" not in message and '"' not in message
        if "frame" not in expected:
            assert message.startswith("audio item 1 is "), message
        assert re.search(expected, message), (expected, message)


@settings(max_examples=25, deadline=None)
@given(
    position=st.integers(0, 63),
    value=st.integers(0, 255),
    cut=st.integers(0, 100),
    seed=st.integers(0, 2**16),
)
def test_damaged_headers_decode_or_fail_in_one_line(decode, position, value, cut, seed):
    # A byte of the first 64 (RIFF header, fmt, and for WAVEX its extension) set to any value,
    # or the file cut anywhere in them: decoded, or refused in one line; never another error,
    # never memory a header claims.
    rng = np.random.default_rng(seed)
    rate = int(rng.choice(RATES))
    subtype = str(rng.choice(SUBTYPES))
    container = str(rng.choice(["WAV", "WAVEX"])) if subtype != "PCM_U8" else "WAV"
    data = bytearray(
        _wav(_voice(rate, int(rng.integers(1, 3)), rng, 0.05), rate, subtype, container)
    )
    data[position] = value
    for damaged in (bytes(data), bytes(data[: len(data) * cut // 100])):
        try:
            (record,) = decode(tf.constant([damaged])).numpy()
        except tf.errors.InvalidArgumentError as error:
            message = _message(error)
            assert message.startswith("audio item 0 is ") and "\n" not in message
        else:
            # At most 16 outputs an input frame (from the lowest rate, 1 kHz), 2 bytes each.
            assert len(record) <= 2 * 16 * len(damaged) + 2


def test_the_limits_are_the_audio_jobs():
    assert wav_decoding.MAX_AUDIO_SECONDS == materialize_config.MAX_AUDIO_SECONDS
    assert wav_decoding.MIN_SAMPLE_RATE == materialize_config.MIN_INPUT_SAMPLE_RATE
    assert wav_decoding.MAX_SAMPLE_RATE == materialize_config.MAX_INPUT_SAMPLE_RATE
