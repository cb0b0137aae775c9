"""Bounded memory and inputs that would stop training (issue 20, items 6 and 7).

Small files that declare huge inputs (a WAV at 1 Hz, an hour of FLAC, an 8000 x 8000 PNG, a raw
size of 100000 x 100000) are rejects judged from their headers, and streams that declare no
length are decoded only up to the limit; what the job stores as encoded images decodes in
TensorFlow too; NaN / infinite float audio is a reject. Test media are made here with soundfile,
PyAV, Pillow and zlib.
"""

from __future__ import annotations

import io
import json
import math
import os
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tests.materialize import generate, readback
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli
from tfx_dynamic_inputs.materialize import audio, config, images, rejects
from tfx_dynamic_inputs.materialize.config import AudioConfig, AudioLimits, PairsConfig, from_flat
from tfx_dynamic_inputs.materialize.errors import MaterializeError

RATE = 16000
ENCODED = images.ImageStorage("encoded")
RAW = images.ImageStorage("raw", 8, 8, 3)
HOUR = 3600


def _flac_without_length(data: bytes) -> bytes:
    """The FLAC as a pipe writes it: STREAMINFO's total sample count 0 ("unknown"), no MD5, so
    libsndfile does not know its length and FFmpeg decodes it as a stream."""
    flac = bytearray(data)
    packed = int.from_bytes(flac[18:26], "big") & ~((1 << 36) - 1)
    flac[18:26] = packed.to_bytes(8, "big")
    flac[26:42] = bytes(16)
    return bytes(flac)


@pytest.fixture(scope="module")
def hour_of_flac() -> bytes:
    """An hour of 16 kHz silence: 180 KB of FLAC, 115 MB as int16."""
    return generate.flac_bytes(np.zeros([HOUR * RATE, 1], np.int16), RATE)


def _rejected(call, *args) -> tuple[rejects.RejectedInput, float]:
    """The reject `call(*args)` raises and the peak of what was allocated meanwhile, in MB (numpy
    arrays report to tracemalloc)."""
    tracemalloc.start()
    try:
        with pytest.raises(rejects.RejectedInput) as caught:
            call(*args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return caught.value, peak / 1e6


# ---------------------------------------------------------------------------------------------
# Audio: limits judged from the header, and streams decoded only up to the limit


def test_a_40_kb_wav_declaring_1_hz_is_rejected_from_its_header():
    # Resampled to 16 kHz it was 320M samples (4 GB of RSS, 10 s).
    data = generate.wav_bytes(
        np.random.default_rng(0).integers(-99, 99, [20000, 1], dtype=np.int16), 1
    )
    assert len(data) < 41000
    error, peak_mb = _rejected(audio.decode_audio, data, "a.wav", RATE)
    assert error.reason == rejects.IMPLAUSIBLE_RATE
    assert "1 Hz" in error.detail and "1000..768000 Hz" in error.detail
    assert "--min_input_sample_rate" in error.detail
    assert peak_mb < 4


@pytest.mark.parametrize(
    "rate, limits, accepted",
    [
        (800_000, AudioLimits(), False),
        (768_000, AudioLimits(), True),
        (1000, AudioLimits(), True),
        (999, AudioLimits(), False),
        (8000, AudioLimits(min_sample_rate=16000), False),
        (48000, AudioLimits(max_sample_rate=44100), False),
    ],
)
def test_the_plausible_rate_range_is_inclusive_and_configurable(rate, limits, accepted):
    data = generate.wav_bytes(generate.tone(np.random.default_rng(1), rate // 10), rate)
    if accepted:
        assert len(audio.decode_audio(data, "a.wav", RATE, limits).samples) == RATE // 10
        return
    with pytest.raises(rejects.RejectedInput) as caught:
        audio.decode_audio(data, "a.wav", RATE, limits)
    assert caught.value.reason == rejects.IMPLAUSIBLE_RATE and f"{rate} Hz" in caught.value.detail


def test_an_hour_of_flac_is_rejected_from_its_header_without_decoding(hour_of_flac):
    error, peak_mb = _rejected(audio.decode_audio, hour_of_flac, "a.flac", RATE)
    assert error.reason == rejects.TOO_LONG
    assert error.detail == (
        "FLAC header declares 3600.0 s (57600000 frames at 16000 Hz); the limit is 600 s "
        "(--max_audio_seconds)"
    )
    assert peak_mb < 4  # the whole file decodes to 115 MB of int16


def test_a_stream_that_declares_no_length_is_decoded_only_up_to_the_limit(hour_of_flac):
    error, peak_mb = _rejected(
        audio.decode_audio, _flac_without_length(hour_of_flac), "a.flac", RATE
    )
    assert error.reason == rejects.TOO_LONG
    assert "decoding stopped at" in error.detail and "the limit is 600 s" in error.detail
    stopped_at = float(error.detail.split("decoding stopped at ")[1].split(" s")[0])
    assert 600 < stopped_at < 700
    # 600 s of int16 (19 MB) and a block; the hour decoded whole was 230 MB of float32, twice.
    assert peak_mb < 64


def _encode(kind: str, samples: np.ndarray, rate: int) -> bytes:
    if kind == "m4a":
        return generate.m4a_bytes(samples / 32768.0, rate)
    if kind == "mp3":
        return generate.sound_bytes(samples, rate, "MP3", "MPEG_LAYER_III")
    if kind == "ogg":
        return generate.sound_bytes(samples, rate, "OGG", "VORBIS")
    if kind == "flac_stream":
        return _flac_without_length(generate.flac_bytes(samples, rate))
    return generate.wav_bytes(samples, rate)


THREE_SECONDS = generate.tone(np.random.default_rng(2), 3 * 22050, channels=2)


@pytest.mark.parametrize("kind", ["mp3", "m4a", "ogg", "flac_stream", "wav"])
def test_every_decoder_path_stops_at_a_lower_limit(kind):
    data = _encode(kind, THREE_SECONDS, 22050)
    with pytest.raises(rejects.RejectedInput) as caught:
        audio.decode_audio(data, f"a.{kind[:4]}", RATE, AudioLimits(max_seconds=2.5))
    assert caught.value.reason == rejects.TOO_LONG
    assert "the limit is 2.5 s (--max_audio_seconds)" in caught.value.detail
    # Under a limit it passes the same file decodes to its 3 s.
    kept = audio.decode_audio(data, f"a.{kind[:4]}", RATE, AudioLimits(max_seconds=3.5))
    assert abs(len(kept.samples) - 3 * RATE) < 0.1 * RATE


def test_audio_of_exactly_the_limit_is_kept():
    limits = AudioLimits(max_seconds=1.0)
    tone = generate.tone(np.random.default_rng(3), RATE + 1)
    kept = audio.decode_audio(generate.wav_bytes(tone[:RATE], RATE), "a.wav", RATE, limits)
    np.testing.assert_array_equal(kept.samples, tone[:RATE, 0])
    with pytest.raises(rejects.RejectedInput) as caught:
        audio.decode_audio(generate.wav_bytes(tone, RATE), "a.wav", RATE, limits)
    assert caught.value.reason == rejects.TOO_LONG


def test_many_channels_are_mixed_in_bounded_blocks():
    # 64 channels x 20 s at 48 kHz: 245 MB as float32 frames; mixed block by block instead.
    rng = np.random.default_rng(4)
    frames = 20 * 48000
    mono = generate.tone(rng, frames)
    data = generate.wav_bytes(np.repeat(mono, 64, axis=1), 48000)
    tracemalloc.start()
    try:
        decoded = audio.decode_audio(data, "a.wav", RATE)
        peak_mb = tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
    # Every channel is the same: the mix is the tone, resampled (as one channel would be).
    alone = audio.decode_audio(generate.wav_bytes(mono, 48000), "a.wav", RATE)
    np.testing.assert_array_equal(decoded.samples, alone.samples)
    assert peak_mb < 64


@pytest.mark.parametrize("subtype", ["FLOAT", "DOUBLE"])
@pytest.mark.parametrize("rate", [RATE, 22050])
def test_nan_and_infinite_float_samples_are_rejected(subtype, rate):
    samples = np.full(rate, 0.25, np.float32)
    samples[100:200] = np.nan
    samples[rate // 2] = np.inf
    data = generate.sound_bytes(samples, rate, "WAV", subtype)
    with pytest.raises(rejects.RejectedInput) as caught:
        audio.decode_audio(data, "a.wav", RATE)
    assert caught.value.reason == rejects.NON_FINITE_AUDIO
    assert caught.value.detail == (
        f"101 of {rate} frames hold NaN or infinite samples, the first at "
        f"{100 / rate:.3f} s (frame 100)"
    )
    # Finite samples, even past full scale, are stored (clipped).
    samples[~np.isfinite(samples)] = 2.0
    stored = audio.decode_audio(generate.sound_bytes(samples, rate, "WAV", subtype), "a.w", RATE)
    assert stored.samples.max() == 32767


def test_non_finite_samples_in_one_channel_are_found():
    samples = np.full([RATE, 2], -0.5, np.float32)
    samples[RATE - 1, 1] = -np.inf
    data = generate.sound_bytes(samples, RATE, "WAV", "FLOAT")
    with pytest.raises(rejects.RejectedInput, match="1 of 16000 frames"):
        audio.decode_audio(data, "a.wav", RATE)


# ---------------------------------------------------------------------------------------------
# Images: size from the header, and only what TensorFlow decodes is stored


def _chunk(chunk_type: bytes, body: bytes, crc: int | None = None) -> bytes:
    crc = zlib.crc32(chunk_type + body) if crc is None else crc
    return struct.pack(">I", len(body)) + chunk_type + body + struct.pack(">I", crc)


def _png(
    width: int,
    height: int,
    raw: bytes | None = None,
    *,
    depth: int = 8,
    colour_type: int = 0,
    interlace: int = 0,
    idat_parts: int = 1,
    after_idat: bytes = b"",
    iend: bool = True,
    stream: bytes | None = None,
) -> bytes:
    """A PNG built chunk by chunk: `raw` the filtered image data (all-zero rows when None),
    `stream` its zlib stream (compressed from `raw` when None)."""
    if raw is None and stream is None:
        raw = bytes(_png_data_bytes(width, height, depth, colour_type, interlace))
    if stream is None:
        stream = zlib.compress(raw)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, interlace)
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr)
    if colour_type == 3:
        out += _chunk(b"PLTE", bytes(range(48)))
    step = -(-len(stream) // idat_parts)
    for start in range(0, len(stream), step):
        out += _chunk(b"IDAT", stream[start : start + step])
    return out + after_idat + (_chunk(b"IEND", b"") if iend else b"")


def _png_data_bytes(width, height, depth, colour_type, interlace) -> int:
    """Bytes of filtered image data (a filter byte per row) of a PNG, as the spec counts them."""
    bits = depth * {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour_type]
    passes = (
        [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2)]
        + [(0, 1, 1, 2)]
        if interlace
        else [(0, 0, 1, 1)]
    )
    total = 0
    for x0, y0, dx, dy in passes:
        columns, rows = math.ceil(max(width - x0, 0) / dx), math.ceil(max(height - y0, 0) / dy)
        if columns and rows:
            total += rows * (1 + math.ceil(columns * bits / 8))
    return total


def _with_crc(data: bytes, chunk_type: bytes, occurrence: int, crc: int) -> bytes:
    """`data` with the CRC of its `occurrence`-th `chunk_type` chunk replaced."""
    position = -1
    for _ in range(occurrence + 1):
        position = data.index(chunk_type, position + 1)
    (length,) = struct.unpack_from(">I", data, position - 4)
    end = position + 4 + length
    return data[:end] + struct.pack(">I", crc) + data[end + 4 :]


def _tf_decodes(data: bytes) -> bool:
    try:
        tf.io.decode_image(data, channels=0)
    except tf.errors.InvalidArgumentError:
        return False
    return True


def _stores(data: bytes, name: str = "a.png", storage=ENCODED) -> bool:
    try:
        images.image_example(name, data, storage)
    except rejects.RejectedInput:
        return False
    return True


GOOD_PNG = generate.image_bytes(np.random.default_rng(5), "PNG", (12, 9), "RGB")
GOOD_JPEG = generate.image_bytes(np.random.default_rng(6), "JPEG", (16, 16), "RGB")
_ROWS = bytes(_png_data_bytes(5, 6, 8, 0, 0))
_STREAM = zlib.compress(_ROWS)

# Files Pillow decodes (the job stored them) that `tf.io.decode_image` refuses: "Invalid PNG
# data" at every epoch. (name, data, what the detail names)
TF_REFUSES = [
    ("bad IDAT CRC", _with_crc(GOOD_PNG, b"IDAT", 0, 0), "CRC mismatch in chunk 'IDAT'"),
    (
        "bad CRC in a later IDAT",
        _with_crc(_png(5, 6, idat_parts=3), b"IDAT", 1, 0),
        "CRC mismatch in chunk 'IDAT'",
    ),
    ("bad IEND CRC", _with_crc(GOOD_PNG, b"IEND", 0, 1), "CRC mismatch in chunk 'IEND'"),
    ("no IEND", _png(5, 6, iend=False), "no IEND chunk"),
    ("zlib stream without its checksum", _png(5, 6, stream=_STREAM[:-4]), "does not end"),
    ("image data a row short", _png(5, 6, _ROWS[:-6]), "inflates to 30 bytes"),
    ("JPEG whose end marker became a marker segment", GOOD_JPEG[:-2] + b"\xff\xe2", "JPEG: cut"),
]
# Damage libpng / libjpeg only warn about: stored, and TensorFlow reads them.
TF_READS = [
    (
        "bad CRC of an ancillary chunk after IDAT",
        _png(5, 6, after_idat=_chunk(b"tEXt", b"a\0b", 5)),
    ),
    ("bytes after IEND", GOOD_PNG + b"trailing"),
    ("data after the zlib stream", _png(5, 6, stream=_STREAM + b"more")),
    ("more image data than rows", _png(5, 6, _ROWS + bytes(12))),
    ("bytes after the JPEG end marker", GOOD_JPEG + b"trailing"),
]


@pytest.mark.parametrize("name, data, detail", TF_REFUSES, ids=[c[0] for c in TF_REFUSES])
def test_what_tensorflow_refuses_is_a_corrupt_image_naming_the_damage(name, data, detail):
    assert not _tf_decodes(data)  # the premise: training would fail on this record
    extension = "a.jpg" if name.startswith("JPEG") else "a.png"
    for storage in (ENCODED, RAW):
        with pytest.raises(rejects.RejectedInput) as caught:
            images.image_example(extension, data, storage)
        assert caught.value.reason == rejects.CORRUPT_IMAGE
        assert detail in caught.value.detail


@pytest.mark.parametrize("name, data", TF_READS, ids=[c[0] for c in TF_READS])
def test_damage_tensorflow_tolerates_is_stored(name, data):
    assert _tf_decodes(data)
    assert _stores(data, "a.jpg" if "JPEG" in name else "a.png")


def test_image_data_lengths_are_counted_as_libpng_counts_them():
    """Every colour type and bit depth, interlaced or not: the image data IHDR asks for is
    stored, a byte less is refused, as TensorFlow decodes or refuses them."""
    kinds = [(0, 1), (0, 2), (0, 4), (0, 16), (2, 8), (2, 16), (3, 4), (4, 8), (6, 16)]
    for colour_type, depth in kinds:
        for interlace in (0, 1):
            for width, height in ((1, 1), (3, 5), (9, 17), (33, 2)):
                needed = _png_data_bytes(width, height, depth, colour_type, interlace)
                whole, short = (
                    _png(
                        width,
                        height,
                        bytes(n),
                        depth=depth,
                        colour_type=colour_type,
                        interlace=interlace,
                    )
                    for n in (needed, needed - 1)
                )
                case = (colour_type, depth, interlace, width, height)
                assert _tf_decodes(whole) and _stores(whole), case
                assert not _tf_decodes(short) and not _stores(short), case


def _pillow_decodes(data: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except Exception:
        return False
    return True


def test_damaged_images_are_stored_only_when_tensorflow_decodes_them():
    """Random cuts and byte flips: every image the job stores decodes in TensorFlow (before,
    about one damaged PNG in 30 was stored and failed there), and of what Pillow and TensorFlow
    both decode, the checks refuse next to nothing."""
    rng = np.random.default_rng(7)
    stored = refused_though_both_decode = 0
    for trial in range(300):
        image_format = "PNG" if trial % 2 else "JPEG"
        mode = ("RGB", "L", "RGBA", "LA")[trial % 4] if image_format == "PNG" else "RGB"
        size = (int(rng.integers(1, 30)), int(rng.integers(1, 30)))
        data = bytearray(generate.image_bytes(rng, image_format, size, mode))
        if trial % 3 == 0:
            data = data[: int(rng.integers(1, len(data)))]
        else:
            for _ in range(int(rng.integers(1, 4))):
                data[int(rng.integers(0, len(data)))] ^= int(rng.integers(1, 256))
        data = bytes(data)
        if _stores(data, f"a.{image_format.lower()}"):
            stored += 1
            assert _tf_decodes(data), data
        elif _tf_decodes(data) and _pillow_decodes(data):
            refused_though_both_decode += 1
    assert stored > 50  # the damage did not simply make everything a reject
    assert refused_though_both_decode <= 3


@pytest.fixture(scope="module")
def png_8000x8000() -> bytes:
    """A valid 8000 x 8000 grey PNG of 62 KB (64 MB of pixels)."""
    compressor = zlib.compressobj(9)
    row_block = bytes(8001 * 250)
    stream = b"".join(compressor.compress(row_block) for _ in range(32)) + compressor.flush()
    return _png(8000, 8000, stream=stream)


def test_an_8000x8000_png_is_rejected_from_its_header_before_pillow_opens_it(
    png_8000x8000, monkeypatch
):
    assert len(png_8000x8000) < 100_000

    def no_decoding(*args, **kwargs):
        raise AssertionError("Pillow opened an image past the limit")

    monkeypatch.setattr(images.Image, "open", no_decoding)
    for storage in (ENCODED, RAW):
        with pytest.raises(rejects.RejectedInput) as caught:
            images.image_example("big.png", png_8000x8000, storage)
        assert caught.value.reason == rejects.IMAGE_TOO_LARGE
        assert caught.value.detail == (
            "its PNG header declares 8000x8000 = 64000000 pixels; the limit is 33554432 "
            "(--max_image_pixels)"
        )


def test_a_jpeg_past_the_limit_is_rejected_from_its_frame_header(monkeypatch):
    sof = GOOD_JPEG.index(b"\xff\xc0")
    big = GOOD_JPEG[: sof + 5] + struct.pack(">HH", 6000, 7000) + GOOD_JPEG[sof + 9 :]
    monkeypatch.setattr(images.Image, "open", lambda *a, **k: pytest.fail("opened"))
    with pytest.raises(rejects.RejectedInput) as caught:
        images.image_example("big.jpg", big, ENCODED)
    assert caught.value.reason == rejects.IMAGE_TOO_LARGE
    assert "its JPEG header declares 7000x6000 = 42000000 pixels" in caught.value.detail


def test_the_pixel_limit_is_inclusive_and_configurable():
    data = generate.image_bytes(np.random.default_rng(8), "PNG", (10, 10))
    assert _stores(data, storage=images.ImageStorage(max_pixels=100))
    with pytest.raises(rejects.RejectedInput) as caught:
        images.image_example("a.png", data, images.ImageStorage(max_pixels=99))
    assert caught.value.reason == rejects.IMAGE_TOO_LARGE and "limit is 99" in caught.value.detail
    # Above Pillow's own bomb warning (89M pixels), our limit decides, not the warning.
    assert _stores(data, storage=images.ImageStorage(max_pixels=config.PILLOW_MAX_IMAGE_PIXELS))


def test_a_raw_size_past_the_limit_is_refused_before_anything_is_allocated():
    with pytest.raises(ValueError, match="max_pixels"):
        images.ImageStorage("raw", 100000, 100000)
    assert images.ImageStorage("encoded", 100000, 100000).mode == "encoded"  # raw size unused


# ---------------------------------------------------------------------------------------------
# Flags and config fields


def _audio_argv(tmp_path, *extra: str) -> list[str]:
    return [
        "audio",
        "--speaker_from_path",
        "--root",
        str(tmp_path),
        "--output_dir",
        str(tmp_path / "out"),
        *extra,
    ]


@pytest.mark.parametrize(
    "job, flags, named",
    [
        (
            "pairs",
            ["--image_storage", "raw", "--raw_height", "100000", "--raw_width", "100000"],
            "max_image_pixels",
        ),
        (
            "pairs",
            ["--raw_height", "8192", "--raw_width", "8192", "--image_storage", "raw"],
            "67108864 pixels",
        ),
        ("pairs", ["--max_image_pixels", "0"], "max_image_pixels"),
        ("pairs", ["--max_image_pixels", str(10**12)], "max_image_pixels"),
        ("audio", ["--max_audio_seconds", "0"], "max_audio_seconds"),
        ("audio", ["--max_audio_seconds", "nan"], "max_audio_seconds"),
        ("audio", ["--max_audio_seconds", "inf"], "max_audio_seconds"),
        ("audio", ["--max_audio_seconds", "1e6"], "2 GiB"),
        ("audio", ["--min_input_sample_rate", "0"], "min_input_sample_rate"),
        (
            "audio",
            ["--min_input_sample_rate", "48000", "--max_input_sample_rate", "44100"],
            "max_input_sample_rate",
        ),
    ],
)
def test_bad_limits_are_one_line_errors_before_the_job_starts(tmp_path, capsys, job, flags, named):
    argv = (generate.empty_pairs_argv if job == "pairs" else _audio_argv)(tmp_path, *flags)
    assert materialize_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and named in err, err
    assert not os.path.exists(tmp_path / "out")


def test_limit_flags_set_the_config_fields_with_documented_defaults(tmp_path):
    def parsed(argv, config_class):
        args, _ = materialize_cli._parser().parse_known_args(argv)
        return from_flat(config_class, vars(args))

    defaults = parsed(_audio_argv(tmp_path), AudioConfig)
    assert defaults.limits == AudioLimits(600.0, 1000, 768000) == AudioLimits()
    assert AudioConfig(root="r", output_dir="o").limits == AudioLimits()
    given = parsed(
        _audio_argv(
            tmp_path,
            *["--max_audio_seconds", "30", "--min_input_sample_rate", "8000"],
            *["--max_input_sample_rate", "48000"],
        ),
        AudioConfig,
    )
    assert given.limits == AudioLimits(30.0, 8000, 48000)
    assert parsed(generate.empty_pairs_argv(tmp_path), PairsConfig).max_image_pixels == 1 << 25
    # The raw size bounds only raw storage: encoded storage takes a limit under 256 x 256.
    parsed(
        generate.empty_pairs_argv(tmp_path, "--max_image_pixels", "1000"), PairsConfig
    ).validate()
    with pytest.raises(MaterializeError, match="max_image_pixels=1000"):
        parsed(
            generate.empty_pairs_argv(
                tmp_path, "--max_image_pixels", "1000", "--image_storage", "raw"
            ),
            PairsConfig,
        ).validate()
    assert (
        parsed(
            generate.empty_pairs_argv(tmp_path, "--max_image_pixels", "1000"), PairsConfig
        ).max_image_pixels
        == 1000
    )
    with pytest.raises(MaterializeError, match="max_audio_seconds"):
        AudioLimits(max_seconds=-1).validate()


# ---------------------------------------------------------------------------------------------
# The jobs: rejects with their reasons, and every stored record readable


def _reject_reasons(output_dir) -> dict[str, tuple[str, str]]:
    found = {}
    for line in readback.read_lines(os.path.join(output_dir, layout.REJECTS_FILE)):
        reject = json.loads(line)
        found[os.path.basename(reject["source"])] = (reject["reason"], reject["detail"])
    return found


def test_the_audio_job_rejects_each_with_its_reason(tmp_path, hour_of_flac, capsys):
    root = tmp_path / "vox"
    rng = np.random.default_rng(9)
    for speaker in ("id1", "id2"):
        for i in range(2):
            generate.write_file(
                str(root),
                f"{speaker}/v/{i}.wav",
                generate.wav_bytes(generate.tone(rng, 4000), RATE),
            )
    nan = np.full(RATE, 0.1, np.float32)
    nan[5] = np.nan
    bad = {
        "id1/v/one_hz.wav": generate.wav_bytes(
            rng.integers(-99, 99, [20000, 1], dtype=np.int16), 1
        ),
        "id1/v/hour.flac": hour_of_flac,
        "id2/v/stream.flac": _flac_without_length(hour_of_flac),
        "id2/v/nan.wav": generate.sound_bytes(nan, RATE, "WAV", "FLOAT"),
    }
    for relative, data in bad.items():
        generate.write_file(str(root), relative, data)
    output_dir = str(tmp_path / "out")
    argv = ["audio", "--speaker_from_path", "--root", str(root), "--output_dir", output_dir]
    status = materialize_cli.main(argv + ["--max_reject_fraction", "0.6", "--eval_fraction", "0"])
    assert status == 0, capsys.readouterr().err
    found = _reject_reasons(output_dir)
    assert {name: reason for name, (reason, _) in found.items()} == {
        "one_hz.wav": rejects.IMPLAUSIBLE_RATE,
        "hour.flac": rejects.TOO_LONG,
        "stream.flac": rejects.TOO_LONG,
        "nan.wav": rejects.NON_FINITE_AUDIO,
    }
    assert all(detail for _, detail in found.values())
    assert len(readback.records_by_index(output_dir, "train")) == 4


def test_the_pairs_job_stores_only_images_tensorflow_decodes(tmp_path, png_8000x8000, capsys):
    x_dir, y_dir = tmp_path / "x", tmp_path / "y"
    good = generate.write_images(str(x_dir), ["a.png", "b.jpg"], np.random.default_rng(10))
    generate.write_images(str(y_dir), ["c.png"], np.random.default_rng(11))
    bad = {
        "crc.png": (_with_crc(GOOD_PNG, b"IDAT", 0, 0), rejects.CORRUPT_IMAGE),
        "big.png": (png_8000x8000, rejects.IMAGE_TOO_LARGE),
        "eoi.jpg": (GOOD_JPEG[:-2] + b"\xff\xe2", rejects.CORRUPT_IMAGE),
    }
    for name, (data, _) in bad.items():
        generate.write_file(str(x_dir), name, data)
    pairs = tmp_path / "pairs.jsonl"
    generate.write_pairs_jsonl(str(pairs), {x: ["c.png"] for x in [*good, *bad]})
    output_dir = str(tmp_path / "out")
    argv = ["pairs", "--x_dir", str(x_dir), "--y_dir", str(y_dir), "--pairs", str(pairs)]
    argv += ["--output_dir", output_dir]
    assert materialize_cli.main(argv + ["--max_reject_fraction", "0.9"]) == 0, capsys.readouterr()
    found = _reject_reasons(output_dir)
    assert {name: found[name][0] for name in bad} == {name: r for name, (_, r) in bad.items()}
    assert "CRC mismatch in chunk 'IDAT'" in found["crc.png"][1]
    assert readback.ids(output_dir, "x") == sorted(good)
    for record in readback.records_by_index(output_dir, "x"):
        parsed = readback.parse(record)
        decoded = tf.io.decode_image(parsed[layout.IMAGE_KEY], channels=0)
        assert decoded.shape[:2] == (parsed["height"], parsed["width"])


# ------------------------------------------------------------- the flags reach the decoders


def _job_reasons(output_dir: str) -> dict[str, str]:
    lines = readback.read_lines(os.path.join(output_dir, layout.REJECTS_FILE))
    return {
        os.path.basename(json.loads(line)["source"]): json.loads(line)["reason"] for line in lines
    }


def test_limit_flags_reach_the_decoders(tmp_path, capsys):
    rng = np.random.default_rng(0)
    root = tmp_path / "vox"
    for i, seconds in enumerate((0.5, 0.5, 2.0)):
        generate.write_file(
            str(root),
            f"id{i}/v/{i}.wav",
            generate.wav_bytes(generate.tone(rng, int(16000 * seconds)), 16000),
        )
    generate.write_file(
        str(root), "id0/v/8k.wav", generate.wav_bytes(generate.tone(rng, 8000), 8000)
    )
    out = str(tmp_path / "audio")
    argv = [
        "audio",
        "--speaker_from_path",
        "--root",
        str(root),
        "--output_dir",
        out,
        "--max_audio_seconds",
        "1",
        "--min_input_sample_rate",
        "16000",
        "--eval_fraction",
        "0",
        "--max_reject_fraction",
        "0.6",
    ]
    assert materialize_cli.main(argv) == 0, capsys.readouterr().err
    assert _job_reasons(out) == {"2.wav": rejects.TOO_LONG, "8k.wav": rejects.IMPLAUSIBLE_RATE}

    x_dir, y_dir = tmp_path / "x", tmp_path / "y"
    generate.write_file(str(x_dir), "small.png", generate.image_bytes(rng, "PNG", (10, 10)))
    generate.write_file(str(x_dir), "big.png", generate.image_bytes(rng, "PNG", (10, 11)))
    generate.write_file(str(y_dir), "y.png", generate.image_bytes(rng, "PNG", (10, 10)))
    pairs = tmp_path / "pairs.jsonl"
    generate.write_pairs_jsonl(str(pairs), {"small.png": ["y.png"], "big.png": ["y.png"]})
    out = str(tmp_path / "pairs")
    argv = [
        "pairs",
        "--x_dir",
        str(x_dir),
        "--y_dir",
        str(y_dir),
        "--pairs",
        str(pairs),
        "--output_dir",
        out,
        "--max_image_pixels",
        "100",
        "--max_reject_fraction",
        "0.6",
    ]
    assert materialize_cli.main(argv) == 0, capsys.readouterr().err
    assert _job_reasons(out)[
        "big.png"
    ] == rejects.IMAGE_TOO_LARGE and "small.png" not in _job_reasons(out)
