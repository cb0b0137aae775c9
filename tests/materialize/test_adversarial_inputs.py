"""Adversarial inputs: each odd file, name or row is one reject with its own reason (or one clear
error), and the good inputs around it still make it.

Every odd input is created here at run time (no fixtures on disk, no ffmpeg or sox).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import threading
import zlib

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from PIL import Image

from tests.materialize import generate, readback
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import audio_features as af
from tfx_dynamic_inputs.inputs.parsing import ImageSpec, image_example_parser
from tfx_dynamic_inputs.materialize import (
    AudioConfig,
    MaterializeError,
    PairsConfig,
    manifest,
    pair_list,
    paths,
    rejects,
    run_audio,
    run_pairs,
)
from tfx_dynamic_inputs.materialize.images import ImageStorage, image_example

SIZE = (4, 5)  # (height, width) of every generated image: raw storage keeps them unresized
RNG = np.random.default_rng(11)
GREY16 = RNG.integers(0, 65536, SIZE)
GREY_ALPHA = RNG.integers(0, 256, (*SIZE, 2))
GREY_ALPHA16 = RNG.integers(0, 65536, (*SIZE, 2))


def png_bytes(values: np.ndarray, colour_type: int, bit_depth: int) -> bytes:
    """A PNG written chunk by chunk: Pillow cannot save 16-bit grey + alpha."""
    height, width = values.shape[:2]
    dtype = ">u2" if bit_depth == 16 else "u1"
    rows = b"".join(b"\0" + values[row].astype(dtype).tobytes() for row in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def pillow_png(image: Image.Image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", **options)
    return buffer.getvalue()


PALETTE = Image.fromarray(RNG.integers(0, 4, SIZE).astype(np.uint8), "P")
PALETTE.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])
OPAQUE = np.full(SIZE, 255)
# Odd but valid images: (file bytes, grey level, alpha), each plane height x width; None for the
# palette image, whose reference is Pillow's own palette conversion.
ODD_IMAGES = {
    "grey16.png": (
        pillow_png(Image.fromarray(GREY16.astype(np.uint16), "I;16")),
        GREY16 >> 8,
        OPAQUE,
    ),
    "grey_alpha.png": (png_bytes(GREY_ALPHA, 4, 8), GREY_ALPHA[..., 0], GREY_ALPHA[..., 1]),
    "grey_alpha16.png": (
        png_bytes(GREY_ALPHA16, 4, 16),
        GREY_ALPHA16[..., 0] >> 8,
        GREY_ALPHA16[..., 1] >> 8,
    ),
    "palette_alpha.png": (pillow_png(PALETTE, transparency=0), None, None),
}
RAW_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def expected_raw(name: str, raw_channels: int) -> np.ndarray:
    """What raw storage should hold: 16-bit scaled by >> 8, grey repeated, alpha kept only for
    4 channels (dropped, not composited, otherwise)."""
    data, grey, alpha = ODD_IMAGES[name]
    if grey is None:
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert(RAW_MODES[raw_channels])).reshape(*SIZE, -1)
    return np.dstack([grey] * min(raw_channels, 3) + [alpha] * (raw_channels == 4))


@contextlib.contextmanager
def fifo_watchdog(fifo: str, seconds: float = 120.0):
    """If the job under test opens `fifo` (a regression), a writer appears after `seconds`, so
    the test fails on a wrong reason instead of hanging forever."""

    def unblock():
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(seconds, unblock)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _rejects(output_dir) -> list[dict]:
    return [json.loads(line) for line in readback.read_lines(output_dir / layout.REJECTS_FILE)]


def test_odd_directory_entries_are_rejects_and_the_pairs_job_goes_on(tmp_path):
    x_dir, y_dir = tmp_path / "x", tmp_path / "y"
    good = generate.write_images(str(x_dir), ["a.png", "sub/b.png"], RNG)
    generate.write_images(str(y_dir), ["c.png"], RNG)
    for name, (data, _, _) in ODD_IMAGES.items():
        generate.write_file(str(x_dir), name, data)
    # A name that is not UTF-8 (os.scandir gives it as a lone surrogate).
    descriptor = os.open(os.fsencode(x_dir) + b"/bad\xff.png", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(descriptor, good["a.png"])
    os.close(descriptor)
    os.symlink("loop.png", x_dir / "loop.png")  # resolves to itself: ELOOP
    os.symlink("ping.png", x_dir / "pong.png")
    os.symlink("pong.png", x_dir / "ping.png")
    os.symlink("..", x_dir / "sub" / "up")  # a directory loop, inside the root
    os.mkfifo(x_dir / "fifo.png")  # opening it would block until a writer appears
    ids = [*good, *ODD_IMAGES]
    pairs = tmp_path / "pairs.jsonl"
    generate.write_pairs_jsonl(str(pairs), {x: ["c.png"] for x in ids})
    output_dir = tmp_path / "out"
    config = PairsConfig(
        x_dir=str(x_dir),
        y_dir=str(y_dir),
        pairs=str(pairs),
        output_dir=str(output_dir),
        image_storage="raw",
        raw_height=SIZE[0],
        raw_width=SIZE[1],
        raw_channels=1,
        max_reject_fraction=0.9,
    )
    with fifo_watchdog(str(x_dir / "fifo.png")):
        summary = run_pairs(config)

    found = sorted((r["reason"], r["source"]) for r in _rejects(output_dir))
    assert found == [
        (rejects.NON_UTF8_NAME, f"{x_dir}/bad\\xff.png"),
        (rejects.NOT_REGULAR_FILE, f"{x_dir}/fifo.png"),
        (rejects.SYMLINK_LOOP, f"{x_dir}/loop.png"),
        (rejects.SYMLINK_LOOP, f"{x_dir}/ping.png"),
        (rejects.SYMLINK_LOOP, f"{x_dir}/pong.png"),
    ]
    assert readback.ids(str(output_dir), "x") == sorted(ids)
    stored = {
        parsed[layout.ID_KEY].decode(): np.frombuffer(parsed[layout.IMAGE_KEY], np.uint8)
        for parsed in map(readback.parse, readback.records_by_index(str(output_dir), "x"))
    }
    for name in ODD_IMAGES:
        np.testing.assert_array_equal(stored[name].reshape(*SIZE, 1), expected_raw(name, 1))
    assert summary["input_counts"]["x"] == len(ids) + 5


@pytest.mark.parametrize("raw_channels", [1, 3, 4])
def test_raw_storage_converts_depth_and_channels(raw_channels):
    storage = ImageStorage("raw", *SIZE, raw_channels)
    for name, (data, _, _) in ODD_IMAGES.items():
        parsed = readback.parse(image_example(name, data, storage))
        pixels = np.frombuffer(parsed[layout.IMAGE_KEY], np.uint8).reshape(*SIZE, raw_channels)
        np.testing.assert_array_equal(pixels, expected_raw(name, raw_channels), err_msg=name)


def test_encoded_channel_count_is_what_the_reader_decodes_and_every_image_reads():
    records = []
    for name, (data, _, _) in ODD_IMAGES.items():
        record = image_example(name, data, ImageStorage())
        decoded = tf.io.decode_image(data, channels=0, expand_animations=False)
        assert readback.parse(record)[layout.CHANNELS_KEY] == decoded.shape[-1], name
        records.append(record)
    for channels in (1, 3):
        images = image_example_parser(ImageSpec(*SIZE, channels))(tf.constant(records)).numpy()
        for image, name in zip(images, ODD_IMAGES, strict=True):
            # The reader drops alpha as raw storage does; grey may differ by rounding.
            expected = expected_raw(name, channels)
            assert np.abs(image.astype(int) - expected).max() <= 1, (name, channels)


def _line_reject(reject: rejects.Reject) -> tuple[str, int, str]:
    """(reason, line number, detail) of a reject of a pair-list or manifest record."""
    where = reject.source.split(": ", 1)[0]
    return reject.reason, int(where.rsplit(":", 1)[1]), reject.detail


def _not_utf8(line: int, byte: int) -> str:
    return f"line {line}: byte 0x{byte:02x} is not valid UTF-8"


def _assert_read(label: str, read, parsed_key, parsed: list, bad: list, num_records: int) -> None:
    """A pair-list or manifest `read` parsed `parsed` (as `parsed_key` of each record), rejected
    `bad` (as `_line_reject` of each reject) and counted `num_records` records."""
    keys = read.parsed | f"{label}Ids" >> beam.Map(parsed_key)
    assert_that(keys, equal_to(parsed), label=f"{label}Parsed")
    reject_lines = read.rejects | f"{label}Lines" >> beam.Map(_line_reject)
    assert_that(reject_lines, equal_to(bad), label=f"{label}Rejects")
    assert_that(read.num_records, equal_to([num_records]), label=f"{label}Count")


def test_pair_list_bad_bytes_bom_and_quoted_newlines_are_handled_record_by_record(tmp_path):
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_bytes(
        b'\xef\xbb\xbf{"x": "a.png", "y": ["c.png"]}\n'  # a BOM on the first row
        b'{"x": "b\xff.png", "y": ["c.png"]}\n'
        b"\n"
        b'{"x": "d.png", "y": ["c\xfe.png", "e.png"]}\n'
        b'{"x": "f.png", "y": ["e.png"]}\n'
        b'{"x": "h.png", "y": ["\\ud800.png", "e.png"]}\n'  # a JSON escape of a lone surrogate
    )
    headerless = tmp_path / "pairs.csv"
    headerless.write_bytes(
        b'\xef\xbb\xbfa.png,c.png\r\nb.png,\xffc.png\r\n"d\npng",e.png\r\ng.png,e.png\r\n'
    )
    with_header = tmp_path / "header.csv"
    with_header.write_bytes(b"\xef\xbb\xbfx,y\nb.png,c.png\n")
    assert not pair_list.has_csv_header(str(headerless))
    assert pair_list.has_csv_header(str(with_header))
    cases = {
        "jsonl": (
            jsonl,
            [("a.png", ["c.png"]), ("f.png", ["e.png"]), ("h.png", ["e.png"])],
            [
                (rejects.PAIR_BAD_ENCODING, 2, _not_utf8(2, 0xFF)),
                (rejects.PAIR_BAD_ENCODING, 4, _not_utf8(4, 0xFE)),
                (rejects.UNSAFE_PAIR_PATH, 6, "y id: path is not valid UTF-8"),
            ],
            5,
        ),
        "csv": (
            headerless,
            [("a.png", ["c.png"]), ("g.png", ["e.png"])],
            [
                (rejects.PAIR_BAD_ENCODING, 2, _not_utf8(2, 0xFF)),
                (
                    rejects.UNSAFE_PAIR_PATH,
                    3,
                    "x id 'd\\npng': path contains a newline or NUL",
                ),
            ],
            4,
        ),
        "header": (with_header, [("b.png", ["c.png"])], [], 1),
    }
    with TestPipeline() as pipeline:
        for label, (path, entries, bad, num_lines) in cases.items():
            pairs_format = "jsonl" if label == "jsonl" else "csv"
            read = pipeline | label >> pair_list.read_pair_list(str(path), pairs_format)
            _assert_read(label, read, lambda e: (e.x_id, e.y_ids), entries, bad, num_lines)


def test_manifest_bad_bytes_bom_and_quoted_newlines_are_handled_record_by_record(tmp_path):
    csv_path = tmp_path / "manifest.csv"
    csv_path.write_bytes(
        b"\xef\xbb\xbfpath,speaker\r\n"
        b"a.wav,s1\r\n"
        b"b\xff.wav,s1\r\n"
        b'"c\nd.wav",s2\r\n'  # a quoted newline: one field, one record over lines 4-5
        b'e.wav,"two\nlines"\r\n'
        b"f.wav,s2\r\n"
    )
    jsonl = tmp_path / "manifest.jsonl"
    jsonl.write_bytes(
        b'\xef\xbb\xbf{"path": "a.wav", "speaker": "s1"}\n'
        b'{"path": "b.wav", "speaker": "s\xe9"}\n'
        b'{"path": "c.wav", "speaker": "s2"}\n'
    )
    csv_format = manifest.inspect_manifest(str(csv_path))
    assert csv_format == manifest.ManifestFormat("csv", ("path", "speaker"))
    jsonl_format = manifest.inspect_manifest(str(jsonl))
    assert jsonl_format == manifest.ManifestFormat("jsonl", ())
    cases = {
        "csv": (
            csv_path,
            csv_format,
            [("a.wav", "s1"), ("f.wav", "s2")],
            [
                (rejects.BAD_ENCODING, 3, _not_utf8(3, 0xFF)),
                (rejects.UNSAFE_PATH, 4, "path contains a newline or NUL"),
                (rejects.MISSING_LABEL, 6, "e.wav: speaker has a newline"),
            ],
            5,
        ),
        "jsonl": (
            jsonl,
            jsonl_format,
            [("a.wav", "s1"), ("c.wav", "s2")],
            [(rejects.BAD_ENCODING, 2, _not_utf8(2, 0xE9))],
            3,
        ),
    }
    with TestPipeline() as pipeline:
        for label, (path, manifest_format, rows, bad, num_rows) in cases.items():
            read = pipeline | label >> manifest.read_manifest(str(path), manifest_format)
            _assert_read(label, read, lambda r: (r.id, r.speaker), rows, bad, num_rows)


def test_manifest_header_and_split_decision_survive_odd_first_rows(tmp_path):
    bad_header = tmp_path / "bad_header.csv"
    bad_header.write_bytes(b"path,speak\xffer\na.wav,s\n")
    with pytest.raises(MaterializeError, match="CSV header line 1: byte 0xff is not valid UTF-8"):
        manifest.inspect_manifest(str(bad_header))
    # The first row that is a JSON object decides, not a garbled or blank first line.
    jsonl = tmp_path / "manifest.jsonl"
    jsonl.write_bytes(b'\n{not json\n\xff\n{"path": "a.wav", "speaker": "s", "split": "dev"}\n')
    assert manifest.inspect_manifest(str(jsonl)).has_split


@pytest.mark.parametrize(
    "line, manifest_format, reason",
    [
        ('{"path": "a.wav", "speaker": "s", "split": "../evil"}', "jsonl-no-split", None),
        ('{"path": "a.wav", "speaker": "s", "split": "dev"}', "jsonl-no-split", None),
        ('{"path": "a.wav", "speaker": "s"}', "jsonl-split", rejects.INCONSISTENT_SPLIT),
        ('{"path": "a.wav", "speaker": "s", "split": "../evil"}', "jsonl-split", None),
        ('{"path": "a.wav", "speaker": "s", "split": 3}', "jsonl-split", rejects.INVALID_SPLIT),
        ("a.wav,s,", "csv-split", rejects.INVALID_SPLIT),
        ("a.wav,s,../evil", "csv-split", rejects.INVALID_SPLIT),
        ("a.wav,s,a/b", "csv-split", rejects.INVALID_SPLIT),
        ('{"path": "a.wav", "speaker": "\\ud800"}', "jsonl-no-split", rejects.BAD_ENCODING),
    ],
)
def test_split_is_all_rows_or_none_and_a_safe_name_and_labels_are_unicode(
    line, manifest_format, reason
):
    formats = {
        "jsonl-no-split": manifest.ManifestFormat("jsonl", ()),
        "jsonl-split": manifest.ManifestFormat("jsonl", ("split",)),
        "csv-split": manifest.ManifestFormat("csv", ("path", "speaker", "split")),
    }
    if reason is None:  # any split where the manifest has none; "../evil" where it has some
        reason = (
            rejects.INCONSISTENT_SPLIT
            if manifest_format == "jsonl-no-split"
            else rejects.INVALID_SPLIT
        )
    with pytest.raises(rejects.RejectedInput) as caught:
        manifest.parse_row(line, formats[manifest_format], "manifest")
    assert caught.value.reason == reason and "a.wav" in caught.value.detail


def _audio_job(manifest, root, output_dir) -> dict:
    """The audio job with everything in train and a reject limit these corpora stay under."""
    return run_audio(
        AudioConfig(
            manifest=str(manifest),
            root=str(root),
            output_dir=str(output_dir),
            eval_fraction=0.0,
            max_reject_fraction=0.9,
        )
    )


def _wav(root, name: str, num_samples: int) -> None:
    samples = generate.tone(RNG, num_samples)
    generate.write_file(str(root), name, generate.wav_bytes(samples, 16000))


def test_audio_job_rejects_short_clips_and_split_disagreements_and_pad_mode_reads_the_rest(
    tmp_path,
):
    root = tmp_path / "audio"
    shortest = int(np.ceil(layout.MIN_AUDIO_SECONDS * 16000))
    _wav(root, "s1/ok.wav", 4000)
    _wav(root, "s1/shortest.wav", shortest)
    _wav(root, "s2/ok.wav", 3000)
    _wav(root, "s2/tiny.wav", 160)  # 0.01 s
    _wav(root, "s2/just_short.wav", shortest - 1)
    _wav(root, "s2/evil.wav", 3000)
    rows = [
        {"path": "s1/ok.wav", "speaker": "s1"},  # no split: the job assigns every split
        {"path": "s1/shortest.wav", "speaker": "s1"},
        {"path": "s2/ok.wav", "speaker": "s2"},
        {"path": "s2/tiny.wav", "speaker": "s2"},
        {"path": "s2/just_short.wav", "speaker": "s2"},
        {"path": "s2/evil.wav", "speaker": "s2", "split": "../evil"},
    ]
    manifest_path = tmp_path / "manifest.jsonl"
    generate.write_manifest_jsonl(str(manifest_path), rows)
    output_dir = tmp_path / "out"
    summary = _audio_job(manifest_path, root, output_dir)
    found = sorted(
        (r["reason"], r.get("id") or r["source"].split(": ", 1)[1]) for r in _rejects(output_dir)
    )
    assert found == [
        (rejects.INCONSISTENT_SPLIT, json.dumps(rows[-1])),
        (rejects.TOO_SHORT, "s2/just_short.wav"),
        (rejects.TOO_SHORT, "s2/tiny.wav"),
    ]
    assert not (output_dir / layout.EXAMPLES_DIR / f"{layout.SPLIT_PREFIX}../evil").exists()
    assert readback.ids(str(output_dir), "train") == ["s1/ok.wav", "s1/shortest.wav", "s2/ok.wav"]
    assert summary["rejects"]["by_reason"] == {
        rejects.INCONSISTENT_SPLIT: 1,
        rejects.TOO_SHORT: 2,
    }
    # Pad mode takes every stored record, the shortest included, with the default frames.
    audio = [
        readback.parse(record)[layout.AUDIO_KEY]
        for record in readback.records_by_index(str(output_dir), "train")
    ]
    features = af.audio_features(tf.constant(audio), af.AudioFeatureConfig(mode="pad"))
    assert features["lengths"].numpy().min() >= 1


def test_feature_frames_may_not_outgrow_the_shortest_stored_record():
    longest_ms = layout.MIN_AUDIO_SECONDS * 1000
    config = af.AudioFeatureConfig(mode="pad", frame_length_ms=longest_ms, frame_step_ms=10.0)
    shortest = np.ones(int(np.ceil(layout.MIN_AUDIO_SECONDS * 16000)), np.int16).tobytes()
    features = af.audio_features(tf.constant([shortest]), config)
    assert features["lengths"].numpy().tolist() == [1]
    with pytest.raises(ValueError, match="MIN_AUDIO_SECONDS"):
        af.AudioFeatureConfig(mode="pad", frame_length_ms=longest_ms + 1)
    with pytest.raises(ValueError, match="MIN_AUDIO_SECONDS"):
        af.AudioFeatureConfig(sample_rate=8000, frame_length_ms=longest_ms * 2)


def test_printable_names_can_be_written_as_utf8_json():
    name = os.fsdecode(b"dir/bad\xff\xfe.png")
    assert paths.printable(name) == "dir/bad\\xff\\xfe.png"
    rejects.Reject(paths.printable(name), rejects.NON_UTF8_NAME).to_json().encode("utf-8")
    assert paths.printable("plain/é.png") == "plain/é.png"
    assert paths.printable("json\ud800") == "json\\ud800"


# The jobs end to end: bad bytes, a BOM and a quoted newline in a pair list and a manifest.


def test_pairs_job_reads_past_bad_bytes_and_a_bom(tmp_path):
    rng = np.random.default_rng(0)
    generate.write_images(str(tmp_path / "x"), ["a.png", "b.png", "d.png"], rng)
    generate.write_images(str(tmp_path / "y"), ["c.png"], rng)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(
        b'\xef\xbb\xbf{"x": "a.png", "y": ["c.png"]}\n{"x": "b\xff.png", "y": ["c.png"]}\n'
        b'{"x": "d.png", "y": ["c.png"]}\n'
    )
    out = tmp_path / "out"
    summary = run_pairs(
        PairsConfig(
            x_dir=str(tmp_path / "x"),
            y_dir=str(tmp_path / "y"),
            pairs=str(pairs),
            output_dir=str(out),
            max_reject_fraction=0.9,
        )
    )
    assert readback.ids(str(out), "x") == ["a.png", "d.png"]
    found = sorted((r["reason"], r["source"].split(": ", 1)[0]) for r in _rejects(out))
    assert found == [
        (rejects.NO_VALID_PAIRS, str(tmp_path / "x" / "b.png")),
        (rejects.PAIR_BAD_ENCODING, f"{pairs}:2"),
    ]
    assert summary["input_counts"]["pair_lines"] == 3


def test_audio_job_reads_past_bad_bytes_a_bom_and_quoted_newlines(tmp_path):
    rng = np.random.default_rng(1)
    root = tmp_path / "audio"
    for name in ("a.wav", "b.wav", "f.wav"):
        generate.write_file(str(root), name, generate.wav_bytes(generate.tone(rng, 4000), 16000))
    manifest = tmp_path / "manifest.csv"
    manifest.write_bytes(
        b'\xef\xbb\xbfpath,speaker\r\na.wav,s1\r\nb\xff.wav,s1\r\n"c\nd.wav",s2\r\nf.wav,s2\r\n'
    )
    out = tmp_path / "out"
    summary = _audio_job(manifest, root, out)
    assert readback.ids(str(out), "train") == ["a.wav", "f.wav"]
    found = sorted((r["reason"], r["source"].split(": ", 1)[0]) for r in _rejects(out))
    assert found == [
        (rejects.BAD_ENCODING, f"{manifest}:3"),
        (rejects.UNSAFE_PATH, f"{manifest}:4"),
    ]
    assert summary["input_counts"]["manifest_rows"] == 4
