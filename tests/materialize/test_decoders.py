"""Image validation and audio decoding: what each input becomes, and how bad ones are refused."""

from __future__ import annotations

import io
import os
import struct
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.materialize import generate
from tests.materialize.readback import parse
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import audio, images, rejects

ENCODED = images.ImageStorage("encoded")


def _outcome(decode) -> tuple:
    try:
        waveform = decode()
    except rejects.RejectedInput as error:
        return ("rejected", error.reason, error.detail)
    return ("decoded", waveform.samples.dtype, waveform.samples.tobytes(), waveform.sample_rate)


def decoded_every_way(data: bytes, name: str, sample_rate: int = 16000) -> tuple:
    """The outcome of `audio.decode_audio` of `data`: ("decoded", dtype, samples' bytes, rate)
    or ("rejected", reason, detail); asserts that `audio.decode_audio_file` gives the same of
    the file written with `data` (read by its descriptor) and of a file object without one."""
    from_bytes = _outcome(lambda: audio.decode_audio(data, name, sample_rate))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(data)
        with open(path, "rb") as f:
            from_descriptor = _outcome(lambda: audio.decode_audio_file(f, name, sample_rate))
    from_stream = _outcome(lambda: audio.decode_audio_file(io.BytesIO(data), name, sample_rate))
    assert from_descriptor == from_bytes
    assert from_stream == from_bytes
    return from_bytes


@pytest.mark.parametrize(
    "image_format, mode",
    [("PNG", "RGB"), ("PNG", "L"), ("PNG", "LA"), ("PNG", "RGBA"), ("JPEG", "RGB"), ("JPEG", "L")],
)
def test_encoded_image_records_describe_what_tf_decodes(image_format, mode):
    rng = np.random.default_rng(0)
    data = generate.image_bytes(rng, image_format, (7, 13), mode)
    record = parse(images.image_example("d/a.img", data, ENCODED))
    decoded = tf.io.decode_image(record[layout.IMAGE_KEY], channels=0).numpy()
    assert record[layout.IMAGE_KEY] == data
    assert record[layout.ID_KEY] == b"d/a.img"
    assert record[layout.IMAGE_FORMAT_KEY] == image_format.lower().encode()
    assert (
        decoded.shape
        == (record["height"], record["width"], record["channels"])
        == (
            7,
            13,
            decoded.shape[2],
        )
    )


@pytest.mark.parametrize("transparent", [False, True])
def test_palette_png_channels_match_tf(transparent):
    image = Image.new("P", (5, 3))
    image.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", **({"transparency": 0} if transparent else {}))
    record = parse(images.image_example("p.png", buffer.getvalue(), ENCODED))
    decoded = tf.io.decode_png(record[layout.IMAGE_KEY], channels=0).numpy()
    assert record["channels"] == decoded.shape[2] == (4 if transparent else 3)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_raw_images_hold_resized_pixels(channels):
    rng = np.random.default_rng(1)
    data = generate.image_bytes(rng, "PNG", (9, 17))
    storage = images.ImageStorage("raw", raw_height=6, raw_width=5, raw_channels=channels)
    record = parse(images.image_example("a.png", data, storage))
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    expected = Image.open(io.BytesIO(data)).convert(mode).resize((5, 6), Image.Resampling.BILINEAR)
    assert record[layout.IMAGE_FORMAT_KEY] == b"raw"
    assert (record["height"], record["width"], record["channels"]) == (6, 5, channels)
    pixels = np.frombuffer(record[layout.IMAGE_KEY], np.uint8).reshape(6, 5, channels)
    np.testing.assert_array_equal(pixels, np.asarray(expected).reshape(6, 5, channels))


def _gif() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buffer, format="GIF")
    return buffer.getvalue()


def _png() -> bytes:
    return generate.image_bytes(np.random.default_rng(2), "PNG", (16, 16))


@pytest.mark.parametrize(
    "name, data, reason",
    [
        ("a.png", b"", rejects.CORRUPT_IMAGE),
        ("a.png", b"hello, not an image", rejects.CORRUPT_IMAGE),
        ("a.jpg", _png()[:8] + b"\0" * 40, rejects.CORRUPT_IMAGE),
        ("a.png", _png()[: len(_png()) // 2], rejects.CORRUPT_IMAGE),
        (
            "a.png",
            _png()[:40] + bytes(b ^ 0xFF for b in _png()[40:60]) + _png()[60:],
            rejects.CORRUPT_IMAGE,
        ),
        ("a.gif", _gif(), rejects.UNSUPPORTED_FORMAT),
        ("a.png", _gif(), rejects.CORRUPT_IMAGE),
        ("notes.txt", b"text", rejects.UNSUPPORTED_FORMAT),
        ("noext", b"", rejects.UNSUPPORTED_FORMAT),
    ],
)
def test_bad_images_are_rejected_with_a_reason(name, data, reason):
    for storage in (ENCODED, images.ImageStorage("raw", 4, 4, 3)):
        with pytest.raises(rejects.RejectedInput) as caught:
            images.image_example(name, data, storage)
        assert caught.value.reason == reason
        assert caught.value.detail


def test_truncated_jpeg_is_rejected():
    data = generate.image_bytes(np.random.default_rng(3), "JPEG", (64, 64))
    with pytest.raises(rejects.RejectedInput) as caught:
        images.image_example("a.jpg", data[: len(data) // 2], ENCODED)
    assert caught.value.reason == rejects.CORRUPT_IMAGE


def test_cmyk_jpeg_is_unsupported():
    buffer = io.BytesIO()
    Image.new("CMYK", (4, 4)).save(buffer, format="JPEG")
    with pytest.raises(rejects.RejectedInput) as caught:
        images.image_example("a.jpg", buffer.getvalue(), ENCODED)
    assert caught.value.reason == rejects.UNSUPPORTED_FORMAT


RNG = np.random.default_rng(4)
MONO = generate.tone(RNG, 4000)
STEREO = generate.tone(RNG, 4000, channels=2)


@pytest.mark.parametrize("encode", [generate.wav_bytes, generate.flac_bytes])
def test_mono_16k_int16_is_stored_exactly(encode):
    waveform = audio.decode_audio(encode(MONO, 16000), "a.x", 16000)
    assert waveform.sample_rate == 16000
    np.testing.assert_array_equal(waveform.samples, MONO[:, 0])


@pytest.mark.parametrize("encode", [generate.wav_bytes, generate.flac_bytes])
def test_stereo_is_averaged_to_mono(encode):
    waveform = audio.decode_audio(encode(STEREO, 16000), "a.x", 16000)
    expected = np.round(STEREO.astype(np.float64).mean(axis=1))
    assert np.abs(waveform.samples - expected).max() <= 1


@pytest.mark.parametrize("rate_in, rate_out", [(8000, 16000), (44100, 16000), (16000, 22050)])
def test_resampling_keeps_duration_and_timing(rate_in, rate_out):
    seconds = 0.25
    t = np.arange(int(rate_in * seconds)) / rate_in
    samples = (np.sin(2 * np.pi * 300 * t) * 16000).astype(np.int16)[:, None]
    waveform = audio.decode_audio(generate.wav_bytes(samples, rate_in), "a.wav", rate_out)
    assert len(waveform.samples) == round(len(samples) * rate_out / rate_in)
    expected = np.sin(2 * np.pi * 300 * np.arange(len(waveform.samples)) / rate_out) * 16000
    # Away from the edges the resampled tone lines up with the ideal one (no filter delay).
    middle = slice(100, -100)
    assert np.abs(waveform.samples[middle] - expected[middle]).max() < 0.02 * 16000


def _wav(format_tag: int, bits: int, payload: bytes, channels: int = 1, rate: int = 16000):
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", format_tag, channels, rate, rate * block, block, bits)
    return (
        b"RIFF"
        + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(payload))
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", len(payload))
        + payload
    )


# A FLAC stream of no frames: STREAMINFO (16 kHz, mono, 16 bits, 0 samples) as its only block;
# libsndfile writes no file at all for zero frames.
_EMPTY_FLAC = (
    b"fLaC"
    + bytes([0x80, 0, 0, 34])
    + struct.pack(">HH", 4096, 4096)
    + bytes(6)
    + ((16000 << 44) | (15 << 36)).to_bytes(8, "big")
    + bytes(16)
)


def test_24_bit_and_float_wav_scale_to_int16():
    values = MONO[:, 0].astype(np.int32)
    pcm24 = b"".join(struct.pack("<i", v << 8)[:3] for v in values.tolist())
    np.testing.assert_array_equal(
        audio.decode_audio(_wav(1, 24, pcm24), "a.wav", 16000).samples, MONO[:, 0]
    )
    pcm32 = (values << 16).astype("<i4").tobytes()
    np.testing.assert_array_equal(
        audio.decode_audio(_wav(1, 32, pcm32), "a.wav", 16000).samples, MONO[:, 0]
    )
    floats = (MONO[:, 0] / 32768.0).astype("<f4").tobytes()
    np.testing.assert_array_equal(
        audio.decode_audio(_wav(3, 32, floats), "a.wav", 16000).samples, MONO[:, 0]
    )


@pytest.mark.parametrize(
    "name, data, reason",
    [
        ("a.wav", b"", rejects.CORRUPT_AUDIO),
        ("a.flac", b"garbage", rejects.CORRUPT_AUDIO),
        ("a.wav", generate.wav_bytes(MONO, 16000)[:30], rejects.CORRUPT_AUDIO),
        ("a.wav", generate.wav_bytes(MONO, 16000)[:2000], rejects.CORRUPT_AUDIO),
        ("a.flac", generate.flac_bytes(MONO, 16000)[:200], rejects.CORRUPT_AUDIO),
        ("a.wav", generate.wav_bytes(np.zeros([0, 1], np.int16), 16000), rejects.EMPTY_AUDIO),
        ("a.flac", _EMPTY_FLAC, rejects.EMPTY_AUDIO),
        ("a.ogg", generate.sound_bytes(MONO[:0], 16000, "OGG", "VORBIS"), rejects.EMPTY_AUDIO),
        ("a.wav", _wav(1, 32, b"\0" * 64), rejects.TOO_SHORT),
        # A codec neither library has a decoder for (PyAV would crash decoding it).
        ("a.wav", _wav(0x9999, 16, b"\0" * 64), rejects.UNSUPPORTED_FORMAT),
        ("a.mp3", b"ID3\x03\x00" + b"\0" * 100, rejects.CORRUPT_AUDIO),
        ("a.ogg", b"OggS" + b"\0" * 100, rejects.CORRUPT_AUDIO),
        ("notes.txt", b"hello, not audio", rejects.UNSUPPORTED_FORMAT),
        ("a.wav", _png(), rejects.UNSUPPORTED_FORMAT),  # FFmpeg reads it: a video, no audio
    ],
)
def test_bad_audio_is_rejected_with_a_reason(name, data, reason):
    outcome, got_reason, detail = decoded_every_way(data, name)
    assert (outcome, got_reason) == ("rejected", reason)
    assert detail and "{{" not in detail


_FUZZ_TONE = generate.tone(np.random.default_rng(8), 300)
VALID_FILES = {
    "a.png": generate.image_bytes(np.random.default_rng(5), "PNG", (12, 9)),
    "a.jpg": generate.image_bytes(np.random.default_rng(6), "JPEG", (12, 9)),
    "a.wav": generate.wav_bytes(generate.tone(np.random.default_rng(7), 300, 2), 8000),
    "a.flac": generate.flac_bytes(_FUZZ_TONE, 16000),
    "a.ogg": generate.sound_bytes(_FUZZ_TONE, 16000, "OGG", "VORBIS"),
    "a.mp3": generate.sound_bytes(_FUZZ_TONE, 16000, "MP3", "MPEG_LAYER_III"),
    "a.m4a": generate.m4a_bytes(_FUZZ_TONE / 32768.0, 16000),
}


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(VALID_FILES)),
    cut=st.integers(0, 4096),
    flips=st.lists(st.tuples(st.integers(0, 4095), st.integers(1, 255)), max_size=6),
)
def test_damaged_files_are_decoded_or_rejected_never_crash(name, cut, flips):
    data = bytearray(VALID_FILES[name][: max(cut, 1)] if cut < 4000 else VALID_FILES[name])
    for position, mask in flips:
        if position < len(data):
            data[position] ^= mask
    try:
        if name.endswith((".png", ".jpg")):
            images.image_example(name, bytes(data), ENCODED)
        else:
            outcome = decoded_every_way(bytes(data), name)
            if outcome[0] == "decoded":
                assert outcome[1] == np.int16 and len(outcome[2]) > 0
            else:
                assert outcome[1] in rejects.RECORD_REASONS and outcome[2]
    except rejects.RejectedInput as error:
        assert error.reason in rejects.RECORD_REASONS and error.detail


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.floats(-2.0, 2.0, allow_nan=False, width=32)
        | st.sampled_from([0.5 / 32768, -0.5 / 32768, 1.5 / 32768, 32767.5 / 32768, -1.0]),
        max_size=300,
    ),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_to_int16_rounds_half_to_even_and_clips_as_the_plain_formula(values, dtype):
    # `to_int16` works in place on one scaled copy; its samples are those of the plain
    # formula, ties to even included, at either float width.
    samples = np.array(values, dtype)
    expected = np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)
    got = audio.to_int16(samples)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, expected)
