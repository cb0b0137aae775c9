"""End-to-end runs of the audio job on generated speech, against a reference model."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pytest

from tests.materialize import generate, readback
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import (
    AudioConfig,
    MaterializeError,
    audio_pipeline,
    manifest,
    rejects,
    run_audio,
    splits,
)
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli
from tfx_dynamic_inputs.materialize.config import AudioLimits

SAMPLE_RATE = 16000


def write_corpus(root, rng, num_speakers=6):
    """Utterances of several speakers in WAV and FLAC, at several rates, some stereo.

    Returns manifest rows and, per id, the int16 samples a lossless 16 kHz mono decode gives
    (None where resampling or mixing makes the exact samples implementation-defined), plus
    the expected sample count.
    """
    rows, expected = [], {}
    for s in range(num_speakers):
        for u in range(int(rng.integers(2, 6))):
            rate = int(rng.choice([16000, 16000, 8000, 22050]))
            channels = int(rng.choice([1, 1, 2]))
            samples = generate.tone(rng, int(rate * rng.uniform(0.05, 0.2)), channels)
            relative = f"speaker{s}/utt{u}.{'flac' if rng.random() < 0.5 else 'wav'}"
            encode = generate.flac_bytes if relative.endswith(".flac") else generate.wav_bytes
            generate.write_file(root, relative, encode(samples, rate))
            exact = samples[:, 0] if rate == SAMPLE_RATE and channels == 1 else None
            expected[relative] = (exact, round(len(samples) * SAMPLE_RATE / rate))
            rows.append({"path": relative, "speaker": f"speaker{s}"})
    return rows, expected


def check_record_set(output_dir, record_set, rows, expected):
    """The record set holds exactly `rows`, sorted by id, labelled by its own vocabulary."""
    ids = sorted((row["path"] for row in rows), key=str.encode)
    vocabulary = sorted({row["speaker"] for row in rows})
    speaker_of = {row["path"]: row["speaker"] for row in rows}
    index = layout.index_dir(output_dir, record_set)
    assert readback.ids(output_dir, record_set) == ids
    assert readback.read_lines(os.path.join(index, layout.CLASSES_FILE)) == vocabulary
    records = readback.records_by_index(output_dir, record_set)
    assert records == readback.records_sequential(output_dir, record_set)
    readback.assert_matches_schema(records, readback.load_schema("audio_record.pbtxt"))
    labels = []
    for record_id, record in zip(ids, records, strict=True):
        parsed = readback.parse(record)
        exact, num_samples = expected[record_id]
        assert parsed[layout.ID_KEY].decode() == record_id
        assert parsed[layout.SPEAKER_KEY].decode() == speaker_of[record_id]
        assert parsed[layout.LABEL_KEY] == vocabulary.index(speaker_of[record_id])
        assert parsed[layout.SAMPLE_RATE_KEY] == SAMPLE_RATE
        assert parsed[layout.NUM_SAMPLES_KEY] == num_samples
        pcm = np.frombuffer(parsed[layout.AUDIO_KEY], "<i2")
        assert len(pcm) == num_samples
        if exact is not None:
            np.testing.assert_array_equal(pcm, exact)
        labels.append(parsed[layout.LABEL_KEY])
    np.testing.assert_array_equal(layout.load_npy(os.path.join(index, "class_ids.npy")), labels)
    row_splits, values = readback.csr(layout.class_records_dir(output_dir, record_set))
    for class_id in range(len(vocabulary)):
        members = values[row_splits[class_id] : row_splits[class_id + 1]].tolist()
        assert members == [i for i, label in enumerate(labels) if label == class_id]


def _config(tmp_path, manifest, output="out", **overrides) -> AudioConfig:
    fields = {
        "manifest": str(manifest),
        "root": str(tmp_path / "audio"),
        "output_dir": str(tmp_path / output),
    }
    return AudioConfig(**{**fields, **overrides})


@pytest.mark.parametrize("split_mode, seed", [("speaker", 0), ("utterance", 1)])
def test_splits_match_the_reference_model(tmp_path, split_mode, seed):
    rng = np.random.default_rng(seed)
    rows, expected = write_corpus(str(tmp_path / "audio"), rng)
    manifest = tmp_path / "manifest.csv"
    generate.write_manifest_csv(str(manifest), rows)
    summary = run_audio(
        _config(tmp_path, manifest, split_mode=split_mode, eval_fraction=0.34, split_seed=seed)
    )
    if split_mode == "speaker":
        held = splits.held_out_speakers([r["speaker"] for r in rows], 0.34, seed)
        in_eval = {row["path"] for row in rows if row["speaker"] in held}
    else:
        in_eval = set()
        for speaker in {row["speaker"] for row in rows}:
            mine = [row["path"] for row in rows if row["speaker"] == speaker]
            in_eval |= splits.held_out_utterances(mine, 0.34, seed)
    train_rows = [row for row in rows if row["path"] not in in_eval]
    eval_rows = [row for row in rows if row["path"] in in_eval]
    assert eval_rows, "the generated corpus should hold some utterances out"
    check_record_set(str(tmp_path / "out"), splits.TRAIN, train_rows, expected)
    check_record_set(str(tmp_path / "out"), splits.EVAL, eval_rows, expected)
    train_speakers = {row["speaker"] for row in train_rows}
    eval_speakers = {row["speaker"] for row in eval_rows}
    if split_mode == "speaker":
        assert not train_speakers & eval_speakers
    else:
        assert eval_speakers <= train_speakers
    assert readback.spill_entries(str(tmp_path / "out")) == []
    assert summary["ok"] and summary["config"]["split_mode"] == split_mode
    assert summary["record_sets"]["eval"]["num_records"] == len(eval_rows)
    assert summary["record_sets"]["train"]["class_counts"] == {
        speaker: sum(row["speaker"] == speaker for row in train_rows)
        for speaker in sorted(train_speakers)
    }


def test_split_column_names_the_record_sets_and_cli_prints_one_line(tmp_path, capsys):
    rng = np.random.default_rng(2)
    rows, expected = write_corpus(str(tmp_path / "audio"), rng, num_speakers=4)
    for i, row in enumerate(rows):
        row["split"] = ["train", "dev", "test.other"][i % 3]
    manifest = tmp_path / "manifest.jsonl"
    generate.write_manifest_jsonl(str(manifest), rows)
    output_dir = tmp_path / "out"
    status = materialize_cli.main(
        ["audio", "--manifest", str(manifest), "--root", str(tmp_path / "audio")]
        + ["--output_dir", str(output_dir), "--num_shards", "2"]
    )
    assert status == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("materialize audio: dev=") and line.endswith(f"-> {output_dir}")
    for split in ("train", "dev", "test.other"):
        mine = [row for row in rows if row["split"] == split]
        check_record_set(str(output_dir), split, mine, expected)
        assert len(readback.shard_paths(str(output_dir), split)) == min(2, len(mine))


def test_every_bad_audio_input_is_a_counted_reject_and_nothing_good_is_lost(tmp_path):
    rng = np.random.default_rng(3)
    root = tmp_path / "audio"
    rows, expected = write_corpus(str(root), rng, num_speakers=3)
    for row in rows:
        row["split"] = "train"
    good = list(rows)
    tone = generate.tone(rng, 800)
    generate.write_file(str(root), "bad/corrupt.wav", generate.wav_bytes(tone, 16000)[:300])
    generate.write_file(str(root), "bad/garbage.flac", b"fLaC" + rng.bytes(200))
    generate.write_file(str(root), "bad/empty.wav", generate.wav_bytes(tone[:0], 16000))
    generate.write_file(str(root), "bad/song.mp3", b"ID3" + rng.bytes(100))
    generate.write_file(str(tmp_path / "outside"), "secret.wav", generate.wav_bytes(tone, 16000))
    os.symlink(tmp_path / "outside" / "secret.wav", root / "bad" / "link.wav")
    bad = [
        ("bad/corrupt.wav", rejects.CORRUPT_AUDIO),
        ("bad/garbage.flac", rejects.CORRUPT_AUDIO),
        ("bad/empty.wav", rejects.EMPTY_AUDIO),
        ("bad/song.mp3", rejects.CORRUPT_AUDIO),
        ("bad/link.wav", rejects.SYMLINK_ESCAPES_ROOT),
        ("bad/missing.wav", rejects.MISSING_FILE),
    ]
    rows += [{"path": path, "speaker": "speaker0", "split": "train"} for path, _ in bad]
    rows += [
        dict(good[0]),  # an identical duplicate: one copy kept
        {**good[1], "speaker": "someone else"},  # conflicting duplicates: both rejected
        {"path": "speaker0/x.wav", "speaker": "", "split": "train"},
        {"path": "speaker0/y.wav", "split": "train"},
        {"path": "../outside/secret.wav", "speaker": "s", "split": "train"},
        {"path": str(tmp_path / "outside" / "secret.wav"), "speaker": "s", "split": "train"},
        {"path": "speaker0/z.wav", "speaker": "s", "split": "../train"},
    ]
    manifest = tmp_path / "manifest.jsonl"
    generate.write_manifest_jsonl(str(manifest), rows)
    with open(manifest, "a") as f:
        f.write("{not json\n\n")
    summary = run_audio(_config(tmp_path, manifest, max_reject_fraction=0.9))

    kept = [row for row in good if row["path"] != good[1]["path"]]
    check_record_set(str(tmp_path / "out"), "train", kept, expected)
    lines = [
        json.loads(line) for line in readback.read_lines(tmp_path / "out" / layout.REJECTS_FILE)
    ]
    found = sorted((r["reason"], r.get("id", "")) for r in lines)
    assert found == sorted(
        [(reason, path) for path, reason in bad]
        + [(rejects.DUPLICATE_ID, good[0]["path"])]
        + [(rejects.DUPLICATE_ID, good[1]["path"])] * 2
        + [(rejects.MISSING_LABEL, "")] * 2
        + [(rejects.UNSAFE_PATH, "")] * 2
        + [(rejects.INVALID_SPLIT, ""), (rejects.MALFORMED_ROW, "")]
    )
    assert summary["input_counts"] == {"manifest_rows": len(rows) + 1}
    assert summary["rejects"]["records"] == len(lines)


def test_every_files_per_batch_writes_the_same_run(tmp_path):
    """Files are decoded in batches of `files_per_batch` by several threads: batches of one
    file, of a few and of more than the corpus write the same run, bad files in any batch."""
    rng = np.random.default_rng(4)
    root = tmp_path / "audio"
    rows, _ = write_corpus(str(root), rng, num_speakers=3)
    tone = generate.tone(rng, 800)
    for i in range(3):
        generate.write_file(str(root), f"speaker{i}/cut.wav", generate.wav_bytes(tone, 16000)[:99])
        rows.append({"path": f"speaker{i}/cut.wav", "speaker": f"speaker{i}"})
    rows.append({"path": "speaker0/missing.wav", "speaker": "speaker0"})
    manifest = tmp_path / "manifest.csv"
    generate.write_manifest_csv(str(manifest), rows)
    runs = {}
    for files_per_batch in (1, 3, 16, 1000):
        output = f"out{files_per_batch}"
        summary = run_audio(
            _config(
                tmp_path,
                manifest,
                output,
                files_per_batch=files_per_batch,
                eval_fraction=0.34,
                max_reject_fraction=0.5,
            )
        )
        assert summary["rejects"]["by_reason"] == {
            rejects.CORRUPT_AUDIO: 3,
            rejects.MISSING_FILE: 1,
        }
        runs[files_per_batch] = readback.run_files(str(tmp_path / output))
    assert any(name.endswith(".tfrecord") for name in runs[1])
    assert runs[3] == runs[1] and runs[16] == runs[1] and runs[1000] == runs[1]


def test_a_batch_is_decoded_at_most_a_few_files_ahead_of_the_spill(tmp_path):
    """However many files a batch holds, at most 2 x DECODE_THREADS of them are decoded and not
    yet handed on: what the decoder holds is bounded by its threads, not by the batch."""
    rows, _ = write_corpus(str(tmp_path / "audio"), np.random.default_rng(5), num_speakers=8)
    lock = threading.Lock()
    counts = {"decoded": 0, "handed_on": 0, "most_ahead": 0}

    class CountingDecoder(audio_pipeline._DecodeUtterances):
        def _decode(self, row):
            decoded = super()._decode(row)
            with lock:
                counts["decoded"] += 1
                ahead = counts["decoded"] - counts["handed_on"]
                counts["most_ahead"] = max(counts["most_ahead"], ahead)
            return decoded

    decode = CountingDecoder(str(tmp_path / "audio"), SAMPLE_RATE, None, AudioLimits())
    decode.setup()
    decode.start_bundle()
    batch = [manifest.ManifestRow(row["path"], row["speaker"], "train") for row in rows]
    handed_on = []
    for utterance in decode.process(batch):
        with lock:
            counts["handed_on"] += 1
        handed_on.append(utterance.id)
        time.sleep(0.01)  # a slow consumer: an unbounded decoder would run far ahead
    decode.finish_bundle()
    decode.teardown()
    assert handed_on == [row.id for row in batch]
    assert len(batch) > 4 * audio_pipeline.DECODE_THREADS
    assert 1 <= counts["most_ahead"] <= 2 * audio_pipeline.DECODE_THREADS + 1


def test_nothing_left_fails_with_one_clear_error(tmp_path):
    root = tmp_path / "audio"
    generate.write_file(str(root), "a.wav", b"RIFF....WAVEjunk")
    manifest = tmp_path / "manifest.csv"
    generate.write_manifest_csv(str(manifest), [{"path": "a.wav", "speaker": "s"}])
    with pytest.raises(MaterializeError, match="nothing left to materialize: 1 of 1 inputs"):
        run_audio(_config(tmp_path, manifest, max_reject_fraction=1.0))
    summary = layout.load_json(str(tmp_path / "out" / layout.SUMMARY_FILE))
    assert summary["rejects"]["by_reason"] == {rejects.CORRUPT_AUDIO: 1}
