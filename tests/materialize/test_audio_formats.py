"""Every audio format the job reads, made at run time with the libraries that decode it
(libsndfile through `soundfile`, FFmpeg through PyAV): decoded lengths, samples and rejects, and
a VoxCeleb-layout corpus of all of them materialized with `--speaker_from_path`."""

from __future__ import annotations

import argparse
import json
import math
import os
import struct

import numpy as np
import pytest

from tests.materialize import generate, readback
from tests.materialize.test_decoders import decoded_every_way
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.cli_flags import HelpWithDefaults
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli
from tfx_dynamic_inputs.materialize import audio, rejects, splits
from tfx_dynamic_inputs.materialize.verdict import decide

SAMPLE_RATE = 16000
RATES = (8000, 16000, 22050, 44100, 48000)
TONE_HZ = 440.0
AMPLITUDE = 0.4
CHANNEL_GAINS = {1: (1.0,), 2: (1.0, 0.5)}  # stereo averages to 0.75 of the tone

# kind -> (soundfile format, subtype, file extension); "m4a" is AAC encoded by PyAV.
LOSSLESS = {
    "wav_u8": ("WAV", "PCM_U8", ".wav"),
    "wav_16": ("WAV", "PCM_16", ".wav"),
    "wav_24": ("WAV", "PCM_24", ".wav"),
    "wav_32": ("WAV", "PCM_32", ".wav"),
    "wav_float": ("WAV", "FLOAT", ".wav"),
    "flac_16": ("FLAC", "PCM_16", ".flac"),
    "flac_24": ("FLAC", "PCM_24", ".flac"),
    "aiff_16": ("AIFF", "PCM_16", ".aiff"),
}
LOSSY = {
    "ogg_vorbis": ("OGG", "VORBIS", ".ogg"),
    "ogg_opus": ("OGG", "OPUS", ".opus"),
    "mp3": ("MP3", "MPEG_LAYER_III", ".mp3"),
    "m4a": ("", "", ".m4a"),
}
KINDS = {**LOSSLESS, **LOSSY}
# Whose decode at 16 kHz mono gives back the int16 samples written, bit for bit.
EXACT_AT_16K = ("wav_16", "wav_24", "wav_32", "wav_float", "flac_16", "flac_24", "aiff_16")


def tone(num_frames: int, rate: int, channels: int) -> np.ndarray:
    """int16 [num_frames, channels]: a 440 Hz tone, each channel scaled by `CHANNEL_GAINS`."""
    t = np.arange(num_frames) / rate
    wave = AMPLITUDE * np.sin(2 * np.pi * TONE_HZ * t)
    gains = np.array(CHANNEL_GAINS[channels])
    return np.round(wave[:, None] * gains * 32767).astype(np.int16)


def encode(kind: str, samples: np.ndarray, rate: int) -> bytes:
    """`samples` (int16 [n, channels]) as a file of `kind`."""
    if kind == "m4a":
        return generate.m4a_bytes(samples / 32768.0, rate)
    file_format, subtype, _ = KINDS[kind]
    if subtype == "FLOAT":
        # libsndfile writes int16 to a float file unscaled (13107 stays 13107.0).
        return generate.sound_bytes(samples / np.float32(32768), rate, file_format, subtype)
    return generate.sound_bytes(samples, rate, file_format, subtype)


def rates_of(kind: str) -> tuple[int, ...]:
    return (48000,) if kind == "ogg_opus" else RATES  # Opus runs at 48 kHz


def odd_length(rate: int) -> int:
    return (rate // 4) | 1  # about 0.25 s


def ideal(num_samples: int, channels: int) -> np.ndarray:
    """The mono tone a decode at `SAMPLE_RATE` should give, in int16 units."""
    gain = float(np.mean(CHANNEL_GAINS[channels]))
    t = np.arange(num_samples) / SAMPLE_RATE
    return gain * AMPLITUDE * 32767 * np.sin(2 * np.pi * TONE_HZ * t)


def lossy_slack(rate: int) -> int:
    """Samples at `SAMPLE_RATE` a lossy codec may add or drop: two 2048-sample frames."""
    return math.ceil(2 * 2048 * SAMPLE_RATE / rate)


CASES = [(kind, rate, channels) for kind in KINDS for rate in rates_of(kind) for channels in (1, 2)]


@pytest.mark.parametrize("kind, rate, channels", CASES)
def test_every_format_rate_and_layout_decodes_to_the_tone(kind, rate, channels):
    num_frames = odd_length(rate)
    samples = tone(num_frames, rate, channels)
    data = encode(kind, samples, rate)
    # The job reads a local file by its descriptor: the same samples as from its bytes.
    outcome = decoded_every_way(data, f"a{KINDS[kind][2]}", SAMPLE_RATE)
    assert outcome[0] == "decoded", outcome
    _, dtype, pcm, decoded_rate = outcome
    decoded = np.frombuffer(pcm, dtype)
    expected_length = round(num_frames * SAMPLE_RATE / rate)
    assert decoded_rate == SAMPLE_RATE and decoded.dtype == np.int16
    if kind in LOSSLESS:
        assert len(decoded) == expected_length
        if rate == SAMPLE_RATE and channels == 1 and kind in EXACT_AT_16K:
            np.testing.assert_array_equal(decoded, samples[:, 0])
        # Away from the edges (filter ramps), the decode lies on the ideal tone: no delay, no
        # gain change; 8-bit input is quantized to 1/256 of full scale.
        middle = slice(64, -64)
        error = np.abs(decoded[middle] - ideal(len(decoded), channels)[middle]).max()
        assert error < 0.01 * 32768, error
    else:
        assert abs(len(decoded) - expected_length) <= lossy_slack(rate)
        spectrum = np.abs(np.fft.rfft(decoded.astype(np.float64)))
        peak_hz = np.argmax(spectrum) * SAMPLE_RATE / len(decoded)
        assert abs(peak_hz - TONE_HZ) < 10, peak_hz
        rms = np.sqrt(np.mean(decoded.astype(np.float64) ** 2))
        expected_rms = np.mean(CHANNEL_GAINS[channels]) * AMPLITUDE * 32767 / np.sqrt(2)
        assert 0.7 < rms / expected_rms < 1.3, rms / expected_rms


@pytest.mark.parametrize("subtype", ["PCM_24", "PCM_U8"])
@pytest.mark.parametrize("pad_byte", [True, False])
def test_wav_whose_data_chunk_has_an_odd_byte_count_is_accepted(subtype, pad_byte):
    samples = tone(1601, SAMPLE_RATE, 1)
    data = generate.sound_bytes(samples, SAMPLE_RATE, "WAV", subtype)
    chunk = data.index(b"data")
    (size,) = struct.unpack_from("<I", data, chunk + 4)
    assert size % 2 == 1 and len(data) == chunk + 8 + size + 1  # the pad byte ends the file
    if not pad_byte:
        data = data[:-1]
    decoded = audio.decode_audio(data, "a.wav", SAMPLE_RATE).samples
    assert len(decoded) == 1601
    if subtype == "PCM_24":
        np.testing.assert_array_equal(decoded, samples[:, 0])
    else:
        assert np.abs(decoded.astype(np.int32) - samples[:, 0]).max() <= 256


def test_streams_that_do_not_declare_their_length_decode_whole():
    samples = tone(4001, SAMPLE_RATE, 1)
    # A WAV written to a pipe: data size 0xFFFFFFFF ("until the end of the file").
    wav = bytearray(generate.wav_bytes(samples, SAMPLE_RATE))
    wav[wav.index(b"data") + 4 :][:4] = b"\xff" * 4
    wav[4:8] = b"\xff" * 4
    # A FLAC written to a pipe: STREAMINFO's total sample count 0 ("unknown"), no MD5.
    flac = bytearray(generate.flac_bytes(samples, SAMPLE_RATE))
    packed = int.from_bytes(flac[18:26], "big") & ~((1 << 36) - 1)
    flac[18:26] = packed.to_bytes(8, "big")
    flac[26:42] = bytes(16)
    for name, data in (("a.wav", wav), ("a.flac", flac)):
        decoded = audio.decode_audio(bytes(data), name, SAMPLE_RATE).samples
        np.testing.assert_array_equal(decoded, samples[:, 0])


_MPEG1_LAYER3_KBPS = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)


def test_vbr_mp3_without_a_xing_header_decodes_whole():
    """libsndfile stops such a file at mpg123's estimated length: MP3 goes to FFmpeg."""
    rng = np.random.default_rng(0)
    t = np.arange(44100 * 3) / 44100
    # Quiet, then loud noise: the first frame's bitrate underestimates the rest by far.
    samples = np.where(t < 0.5, 0.01, 0.5)[:, None] * rng.standard_normal((len(t), 1))
    data = generate.sound_bytes(
        np.clip(samples, -1, 1).astype(np.float32), 44100, "MP3", "MPEG_LAYER_III"
    )
    header = data[:4]
    assert header[:2] == b"\xff\xfb" and b"Xing" in data[:200]  # MPEG-1 layer III, VBR header
    first_frame = 144 * _MPEG1_LAYER3_KBPS[header[2] >> 4] * 1000 // 44100 + (header[2] >> 1 & 1)
    decoded = audio.decode_audio(data[first_frame:], "a.mp3", SAMPLE_RATE).samples
    assert abs(len(decoded) - SAMPLE_RATE * 3) <= lossy_slack(44100)


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


MONO = tone(4001, SAMPLE_RATE, 1)
NO_SAMPLES = MONO[:0]


@pytest.mark.parametrize(
    "name, data, reason",
    [
        ("a.wav", _half(encode("wav_16", MONO, SAMPLE_RATE)), rejects.CORRUPT_AUDIO),
        ("a.wav", _half(encode("wav_24", MONO, SAMPLE_RATE)), rejects.CORRUPT_AUDIO),
        ("a.aiff", _half(encode("aiff_16", MONO, SAMPLE_RATE)), rejects.CORRUPT_AUDIO),
        ("a.flac", _half(encode("flac_16", MONO, SAMPLE_RATE)), rejects.CORRUPT_AUDIO),
        ("a.m4a", _half(encode("m4a", MONO, SAMPLE_RATE)), rejects.CORRUPT_AUDIO),
        ("a.wav", encode("wav_16", NO_SAMPLES, SAMPLE_RATE), rejects.EMPTY_AUDIO),
        ("a.aiff", encode("aiff_16", NO_SAMPLES, SAMPLE_RATE), rejects.EMPTY_AUDIO),
        ("a.ogg", encode("ogg_vorbis", NO_SAMPLES, SAMPLE_RATE), rejects.EMPTY_AUDIO),
        ("a.wav", encode("wav_16", MONO[:400], SAMPLE_RATE), rejects.TOO_SHORT),
        ("a.mp3", encode("mp3", MONO[:400], SAMPLE_RATE), rejects.TOO_SHORT),
        ("a.wav", b"a text file, not audio\n" * 20, rejects.CORRUPT_AUDIO),
        ("notes.txt", b"a text file, not audio\n" * 20, rejects.UNSUPPORTED_FORMAT),
        ("clip.mp4", generate.video_bytes(), rejects.UNSUPPORTED_FORMAT),
    ],
)
def test_damaged_and_non_audio_files_get_their_reason(name, data, reason):
    with pytest.raises(rejects.RejectedInput) as caught:
        audio.decode_audio(data, name, SAMPLE_RATE)
    assert caught.value.reason == reason, caught.value
    assert caught.value.detail


def test_audio_of_an_mp4_with_video_is_decoded():
    samples = tone(8001, SAMPLE_RATE, 2)
    data = generate.m4a_bytes(samples / 32768.0, SAMPLE_RATE, container_format="mp4")
    decoded = audio.decode_audio(data, "talk.mp4", SAMPLE_RATE).samples
    assert abs(len(decoded) - 8001) <= lossy_slack(SAMPLE_RATE)


def write_voxceleb_corpus(root: str) -> dict[str, tuple[str, np.ndarray | None, int]]:
    """Every kind at every rate, mono and stereo, as `id1000<s>/<video>/<n>.<ext>`.

    Returns, per id: its speaker, the exact int16 samples it must decode to (None where only
    the length is exact), and its expected length (-1 for lossy files)."""
    expected = {}
    cases = [(kind, rate, ch) for kind in KINDS for rate in rates_of(kind)[:3] for ch in (1, 2)]
    for i, (kind, rate, channels) in enumerate(cases):
        speaker = f"id1000{i % 4 + 1}"
        record_id = f"{speaker}/video{i % 3}/{i:05d}{KINDS[kind][2]}"
        samples = tone(odd_length(rate) + 2 * i, rate, channels)
        generate.write_file(root, record_id, encode(kind, samples, rate))
        exact = kind in EXACT_AT_16K and rate == SAMPLE_RATE and channels == 1
        length = round(len(samples) * SAMPLE_RATE / rate) if kind in LOSSLESS else -1
        expected[record_id] = (speaker, samples[:, 0] if exact else None, length)
    return expected


def test_voxceleb_layout_of_every_format_materializes_from_the_folders(tmp_path, capsys):
    root = str(tmp_path / "vox")
    expected = write_voxceleb_corpus(root)
    bad = {
        "id10001/cut/00001.wav": (_half(encode("wav_16", MONO, 22050)), rejects.CORRUPT_AUDIO),
        "id10002/cut/00001.m4a": (_half(encode("m4a", MONO, 44100)), rejects.CORRUPT_AUDIO),
        "id10003/empty/00001.wav": (encode("wav_16", NO_SAMPLES, 8000), rejects.EMPTY_AUDIO),
        "id10004/text/00001.wav": (b"not audio\n" * 30, rejects.CORRUPT_AUDIO),
        "id10004/video/00001.mp4": (generate.video_bytes(), rejects.UNSUPPORTED_FORMAT),
        "loose.wav": (encode("wav_16", MONO, SAMPLE_RATE), rejects.MISSING_LABEL),
    }
    for record_id, (data, _) in bad.items():
        generate.write_file(root, record_id, data)
    generate.write_file(root, "id10001/README.txt", b"not listed: not an audio extension")
    output_dir = str(tmp_path / "out")

    status = materialize_cli.main(
        ["audio", "--speaker_from_path", "--root", root, "--output_dir", output_dir]
        + ["--eval_fraction", "0.25", "--max_reject_fraction", "0.5"]
        + ["--direct_running_mode=in_memory", "--direct_num_workers=1"]  # Beam options pass
    )

    assert status == 0, capsys.readouterr().err
    summary = layout.load_json(os.path.join(output_dir, layout.SUMMARY_FILE))
    assert summary["input_counts"] == {"audio_files": len(expected) + len(bad)}
    assert summary["inputs"]["speaker_from_path"] and summary["config"]["split_mode"] == "speaker"
    held_out = splits.held_out_speakers({s for s, _, _ in expected.values()}, 0.25, 0)
    assert len(held_out) == 1
    seen = {}
    for record_set in (splits.TRAIN, splits.EVAL):
        for record in readback.records_by_index(output_dir, record_set):
            parsed = readback.parse(record)
            record_id = parsed[layout.ID_KEY].decode()
            speaker = parsed[layout.SPEAKER_KEY].decode()
            assert (speaker in held_out) == (record_set == splits.EVAL)
            seen[record_id] = (speaker, np.frombuffer(parsed[layout.AUDIO_KEY], "<i2"))
    assert sorted(seen) == sorted(expected)  # no good file rejected
    for record_id, (speaker, exact, length) in expected.items():
        decoded_speaker, pcm = seen[record_id]
        assert decoded_speaker == speaker
        if length >= 0:
            assert len(pcm) == length, record_id
        if exact is not None:
            np.testing.assert_array_equal(pcm, exact)
    found = sorted(
        (json.loads(line)["reason"], json.loads(line)["source"])
        for line in readback.read_lines(os.path.join(output_dir, layout.REJECTS_FILE))
    )
    assert found == sorted(
        (reason, os.path.join(root, record_id)) for record_id, (_, reason) in bad.items()
    )


def test_unknown_flags_are_an_error_naming_the_flag(tmp_path, capsys):
    (tmp_path / "vox").mkdir()
    (tmp_path / "vox" / "a.wav").write_bytes(b"")
    argv = ["audio", "--speaker_from_path", "--root", str(tmp_path / "vox")]
    argv += ["--output_dir", str(tmp_path / "out")]
    for flag in ("--sample_rat=8000", "--x_dir", "--direct_num_wrokers=2"):
        assert materialize_cli.main([*argv, flag]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"unknown flag {flag.split('=')[0]}" in err, err
    assert not os.path.exists(tmp_path / "out")


def test_an_unknown_flag_close_to_a_flag_says_which(tmp_path, capsys):
    (tmp_path / "vox").mkdir()
    (tmp_path / "vox" / "a.wav").write_bytes(b"")
    argv = ["audio", "--speaker_from_path", "--root", str(tmp_path / "vox")]
    argv += ["--output_dir", str(tmp_path / "out"), "--eval-fractoin=0.2"]
    assert materialize_cli.main(argv) == 2
    assert "unknown flag --eval-fractoin (did you mean --eval_fraction?)" in capsys.readouterr().err


@pytest.mark.parametrize("job", ["audio", "pairs"])
def test_help_states_every_default(job, capsys):
    with pytest.raises(SystemExit):
        materialize_cli.main([job, "--help"])
    assert "default: 0.1" in capsys.readouterr().out  # --max_reject_fraction, as printed
    [subparsers] = [
        a for a in materialize_cli._parser()._actions if isinstance(a, argparse._SubParsersAction)
    ]
    formatter = HelpWithDefaults(job)
    for action in subparsers.choices[job]._actions:
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS:
            continue
        text = formatter._get_help_string(action)
        assert "default" in text and (
            "%(default)s" in text or str(action.default).split(".")[0] in text
        ), (action.option_strings, text)


@pytest.mark.parametrize("extra", [[], ["--manifest", "m.csv", "--speaker_from_path"]])
def test_a_manifest_or_speaker_folders_but_not_both(tmp_path, capsys, extra):
    argv = ["audio", "--root", str(tmp_path), "--output_dir", str(tmp_path / "out")]
    assert materialize_cli.main(argv + extra) == 2
    assert "--speaker_from_path" in capsys.readouterr().err


def test_failure_line_names_every_reject_reason_with_its_count():
    counts = {reason: i + 1 for i, reason in enumerate(rejects.RECORD_REASONS[:7])}
    verdict = decide(
        num_inputs=100,
        reject_counts=counts,
        record_counts={"train": 72},
        required_record_sets=("train",),
        max_reject_fraction=0.1,
    )
    assert not verdict.ok and "\n" not in verdict.error
    for reason, count in counts.items():
        assert f"{reason}={count}" in verdict.error
