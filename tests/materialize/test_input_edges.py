"""Edges of the jobs' inputs: names that print alike, labels holding line separators other than
"\\n", manifests with a repeated column or read from a pipe, ids with surrounding spaces; and of
the samplers' inputs: a run whose record, validly framed, is not the Example its reader parses.

Every input is generated here at run time (no fixtures on disk, no ffmpeg or sox).
"""

from __future__ import annotations

import contextlib
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tests.class_balanced.runs import write_audio_run
from tests.inputs import runs, skipping
from tests.materialize import generate, readback
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import (
    AudioFeatureConfig,
    ClassBalancedSampler,
    DynamicPairsSampler,
    ImageSpec,
    StoreOptions,
)
from tfx_dynamic_inputs.materialize import (
    AudioConfig,
    MaterializeError,
    PairsConfig,
    group_list,
    manifest,
    pair_list,
    rejects,
    run_audio,
    run_pairs,
)
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli

RNG = np.random.default_rng(20)
CROP = AudioFeatureConfig(mode="crop", crop_seconds=0.05, num_mel_bins=8)


def _rejects(output_dir) -> list[dict]:
    with open(os.path.join(output_dir, layout.REJECTS_FILE), encoding="utf-8") as f:
        return [json.loads(line) for line in f.read().split("\n") if line]


def _write_bytes_name(directory, name: bytes, data: bytes) -> None:
    """A file whose name is given as bytes (it need not be UTF-8)."""
    os.makedirs(os.fsencode(directory) + os.path.dirname(b"/" + name), exist_ok=True)
    with open(os.fsencode(directory) + b"/" + name, "wb") as f:
        f.write(data)


def _png(value: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((4, 5), value, np.uint8), "L").save(buffer, format="PNG")
    return buffer.getvalue()


def _wav(num_samples: int = 3000) -> bytes:
    return generate.wav_bytes(generate.tone(RNG, num_samples), 16000)


def _run_pairs(x_dir, y_dir, pairs, output_dir, max_reject_fraction: float) -> dict:
    config = PairsConfig(
        x_dir=str(x_dir),
        y_dir=str(y_dir),
        pairs=str(pairs),
        output_dir=str(output_dir),
        max_reject_fraction=max_reject_fraction,
    )
    return run_pairs(config)


def _stored(output_dir: str, record_set: str) -> dict[str, dict]:
    return {
        parsed[layout.ID_KEY].decode(): parsed
        for parsed in map(readback.parse, readback.records_by_index(output_dir, record_set))
    }


# Names that print alike: `printable` writes a byte that is not UTF-8 as the four characters
# \xNN, which a file may have in its name; and a name may hold both.


def test_names_that_print_alike_are_rejects_not_a_crash_and_the_utf8_one_keeps_its_id(tmp_path):
    x_dir, y_dir = tmp_path / "x", tmp_path / "y"
    _write_bytes_name(x_dir, b"a\\xff.png", _png(10))  # UTF-8: backslash, x, f, f
    _write_bytes_name(x_dir, b"a\xff.png", _png(20))  # not UTF-8, prints as the name above
    _write_bytes_name(x_dir, b"b\\xff\xfe.png", _png(30))  # both print as b\xff\xfe.png
    _write_bytes_name(x_dir, b"b\xff\xfe.png", _png(40))
    _write_bytes_name(x_dir, b"c\\xff\xfe.png", _png(50))  # alone, its print names no file
    _write_bytes_name(x_dir, b"ok.png", _png(60))
    _write_bytes_name(y_dir, b"y.png", _png(70))
    pairs = tmp_path / "pairs.jsonl"
    generate.write_pairs_jsonl(str(pairs), {"a\\xff.png": ["y.png"], "ok.png": ["y.png"]})
    output_dir = tmp_path / "out"
    summary = _run_pairs(x_dir, y_dir, pairs, output_dir, max_reject_fraction=0.9)

    assert readback.ids(str(output_dir), "x") == ["a\\xff.png", "ok.png"]
    # The id names the UTF-8 file, and its record holds that file's bytes, not the other's.
    assert _stored(str(output_dir), "x")["a\\xff.png"][layout.IMAGE_KEY] == _png(10)
    found = _rejects(output_dir)
    assert sorted(r["reason"] for r in found) == [rejects.NON_UTF8_NAME] * 4
    # Each names its file as printed; an ambiguous one has a NUL before its id.
    assert sorted(r["source"].replace("\0", "") for r in found) == [
        f"{x_dir}/a\\xff.png",
        f"{x_dir}/b\\xff\\xfe.png",
        f"{x_dir}/b\\xff\\xfe.png",
        f"{x_dir}/c\\xff\\xfe.png",
    ]
    assert all(not r.get("id") for r in found if "\0" in r["source"])
    assert summary["rejects"]["by_reason"] == {rejects.NON_UTF8_NAME: 4}
    assert summary["input_counts"]["x"] == 6


def test_speaker_folders_that_print_alike_are_rejects_not_a_crash(tmp_path):
    root = tmp_path / "audio"
    _write_bytes_name(root, b"s1/a\\xff.wav", _wav())
    _write_bytes_name(root, b"s1/a\xff.wav", _wav())
    _write_bytes_name(root, b"s\\xff/c.wav", _wav())  # a speaker folder named s\xff
    _write_bytes_name(root, b"s\xff/c.wav", _wav())  # and one whose name is not UTF-8
    _write_bytes_name(root, b"s2/b.wav", _wav())
    output_dir = tmp_path / "out"
    summary = run_audio(
        AudioConfig(
            speaker_from_path=True,
            root=str(root),
            output_dir=str(output_dir),
            eval_fraction=0.0,
            max_reject_fraction=0.9,
        )
    )

    assert readback.ids(str(output_dir), "train") == ["s1/a\\xff.wav", "s2/b.wav", "s\\xff/c.wav"]
    assert _stored(str(output_dir), "train")["s\\xff/c.wav"][layout.SPEAKER_KEY] == b"s\\xff"
    assert summary["rejects"]["by_reason"] == {rejects.NON_UTF8_NAME: 2}


# Labels: the class index files hold one name a line, and only "\n" ends a line.


@pytest.mark.parametrize("manifest_format", ["csv", "jsonl"])
def test_speakers_holding_other_line_separators_commit_and_read_back(tmp_path, manifest_format):
    root = tmp_path / "audio"
    speakers = ["para\u2028graph", "file\x1csep", "form\x0cfeed", "vertical\x0btab", "plain"]
    rows = []
    for s, speaker in enumerate(speakers):
        for u in range(2):
            path = f"spk{s}/u{u}.wav"
            generate.write_file(str(root), path, _wav(1600 + 100 * u))
            rows.append({"path": path, "speaker": speaker})
    manifest_path = tmp_path / f"manifest.{manifest_format}"
    if manifest_format == "csv":
        generate.write_manifest_csv(str(manifest_path), rows)
    else:
        generate.write_manifest_jsonl(str(manifest_path), rows)
    output_dir = str(tmp_path / "out")
    summary = run_audio(
        AudioConfig(
            manifest=str(manifest_path),
            root=str(root),
            output_dir=output_dir,
            eval_fraction=0.0,
            max_reject_fraction=0.0,
        )
    )
    assert summary["ok"]

    sampler = ClassBalancedSampler(
        output_dir, n_classes_per_batch=5, n_samples_per_class=2, features=CROP, seed=1
    )
    assert sampler.classes == sorted(speakers)
    assert sampler.report.num_classes == len(speakers)
    assert readback.ids(output_dir, "train") == sorted(row["path"] for row in rows)
    stored = _stored(output_dir, "train")
    for row in rows:
        record = stored[row["path"]]
        assert record[layout.SPEAKER_KEY].decode() == row["speaker"]
        assert sampler.classes[record[layout.LABEL_KEY]] == row["speaker"]
    [batch] = list(sampler.dataset().as_numpy_iterator())
    assert sorted(batch["label"].tolist()) == sorted(list(range(len(speakers))) * 2)


# Manifests: a repeated column is an error; a row naming a field twice is a reject.


@pytest.mark.parametrize(
    "header, column",
    [
        ("path,speaker,speaker", "speaker"),
        ("path,path,speaker", "path"),
        ("path,speaker,split,split", "split"),
    ],
)
def test_a_repeated_manifest_column_is_one_error_naming_it(tmp_path, header, column):
    path = tmp_path / "manifest.csv"
    path.write_text(
        f"{header}\n" + ",".join(["a.wav"] + ["s"] * (header.count(",") - 1) + ["train"]) + "\n"
    )
    with pytest.raises(MaterializeError, match=f"names column '{column}' 2 times"):
        manifest.inspect_manifest(str(path))


def test_the_cli_says_which_column_is_repeated_in_one_line(tmp_path, capsys):
    root = tmp_path / "audio"
    generate.write_file(str(root), "a.wav", _wav())
    path = tmp_path / "manifest.csv"
    path.write_text("path,speaker,speaker\na.wav,first,second\n")
    status = materialize_cli.main(
        ["audio", "--manifest", str(path), "--root", str(root), "--output_dir", str(tmp_path / "o")]
    )
    assert status != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "column 'speaker' 2 times" in err, err


@pytest.mark.parametrize("field", ["path", "speaker", "split"])
def test_a_json_row_naming_a_field_twice_is_a_malformed_row(field):
    fields = {"path": '"a.wav"', "speaker": '"s"', "split": '"train"'}
    line = "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + f', "{field}": "x"}}'
    with pytest.raises(rejects.RejectedInput) as caught:
        manifest.parse_row(line, manifest.ManifestFormat("jsonl", ("split",)), "m.jsonl")
    assert caught.value.reason == rejects.MALFORMED_ROW
    assert caught.value.detail == f"field {field!r} given 2 times"


# Pipes: bash's `<(...)` names a pipe (/dev/fd/N), which can be read once.


@contextlib.contextmanager
def _pipe(data: bytes):
    """A path that reads `data` once, then nothing, as `--manifest <(cat m.csv)` does."""
    assert len(data) < 65536  # the pipe buffer holds it all: no writer thread needed
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    os.close(write_end)
    try:
        yield f"/dev/fd/{read_end}"
    finally:
        os.close(read_end)


def _speaker_corpus(root) -> list[dict]:
    rows = []
    for s in range(3):
        for u in range(2):
            path = f"spk{s}/u{u}.wav"
            generate.write_file(str(root), path, _wav())
            rows.append({"path": path, "speaker": f"spk{s}", "split": ["train", "dev"][u]})
    return rows


@pytest.mark.parametrize("manifest_format", ["csv", "jsonl"])
def test_a_manifest_read_from_a_pipe_gives_every_row(tmp_path, manifest_format):
    rows = _speaker_corpus(tmp_path / "audio")
    written = tmp_path / f"m.{manifest_format}"
    if manifest_format == "csv":
        generate.write_manifest_csv(str(written), rows, columns=("path", "speaker", "split"))
    else:
        generate.write_manifest_jsonl(str(written), rows)
    output_dir = tmp_path / "out"
    with _pipe(written.read_bytes()) as path:
        summary = run_audio(
            AudioConfig(
                manifest=path,
                manifest_format=manifest_format,
                root=str(tmp_path / "audio"),
                output_dir=str(output_dir),
                max_reject_fraction=0.0,
            )
        )
    assert summary["input_counts"]["manifest_rows"] == len(rows)
    for split in ("train", "dev"):
        expected = sorted(row["path"] for row in rows if row["split"] == split)
        assert readback.ids(str(output_dir), split) == expected


@pytest.mark.parametrize("header", [True, False])
def test_a_csv_pair_list_read_from_a_pipe_gives_every_pair(tmp_path, header):
    x_dir, y_dir = tmp_path / "x", tmp_path / "y"
    generate.write_images(str(x_dir), ["a.png", "b.png"], RNG)
    generate.write_images(str(y_dir), ["c.png", "d.png"], RNG)
    written = tmp_path / "pairs.csv"
    generate.write_pairs_csv(
        str(written), {"a.png": ["c.png", "d.png"], "b.png": ["d.png"]}, header
    )
    output_dir = tmp_path / "out"
    with _pipe(written.read_bytes()) as path:
        summary = run_pairs(
            PairsConfig(
                x_dir=str(x_dir),
                y_dir=str(y_dir),
                pairs=path,
                pairs_format="csv",
                output_dir=str(output_dir),
                max_reject_fraction=0.0,
            )
        )
    assert summary["input_counts"]["pair_lines"] == 3
    assert summary["rejects"]["by_reason"] == {}
    row_splits, values = layout.load_csr(layout.pairs_index_dir(str(output_dir)))
    assert row_splits.tolist() == [0, 2, 3] and values.tolist() == [0, 1, 1]


# Ids with surrounding spaces: a JSON string and a quoted CSV field are taken as written, an
# unquoted CSV field without its surrounding spaces.


@pytest.mark.parametrize("pairs_format", ["csv", "jsonl"])
def test_ids_with_surrounding_spaces_are_matched_as_written(tmp_path, pairs_format):
    x_dir, y_dir = tmp_path / "x", tmp_path / "y"
    generate.write_images(str(x_dir), [" a.png", "b.png ", "c.png"], RNG)
    generate.write_images(str(y_dir), [" y.png", "z.png"], RNG)
    pairs = tmp_path / f"pairs.{pairs_format}"
    if pairs_format == "csv":
        pairs.write_text('x,y\n" a.png"," y.png"\n"b.png ",z.png\nc.png , z.png\n')
    else:
        generate.write_pairs_jsonl(
            str(pairs), {" a.png": [" y.png"], "b.png ": ["z.png"], "c.png": ["z.png"]}
        )
    output_dir = tmp_path / "out"
    summary = _run_pairs(x_dir, y_dir, pairs, output_dir, max_reject_fraction=0.0)
    assert summary["rejects"]["by_reason"] == {}
    assert readback.ids(str(output_dir), "x") == [" a.png", "b.png ", "c.png"]
    assert readback.ids(str(output_dir), "y") == [" y.png", "z.png"]
    row_splits, values = layout.load_csr(layout.pairs_index_dir(str(output_dir)))
    assert row_splits.tolist() == [0, 1, 2, 3] and values.tolist() == [0, 1, 1]


def test_manifest_paths_and_group_ids_with_spaces_are_taken_as_written():
    csv_format = manifest.ManifestFormat("csv", ("path", "speaker"))
    assert manifest.parse_row('" a.wav",s', csv_format, "m.csv").id == " a.wav"
    assert manifest.parse_row('"b.wav ", s ', csv_format, "m.csv")[:2] == ("b.wav ", "s")
    assert manifest.parse_row(" c.wav , s", csv_format, "m.csv").id == "c.wav"
    jsonl_format = manifest.ManifestFormat("jsonl", ())
    assert manifest.parse_row('{"path": " d.wav", "speaker": "s"}', jsonl_format, "m").id == (
        " d.wav"
    )
    assert group_list.parse_entry('" a.png", cat ', "csv") == (" a.png", "cat")
    assert group_list.parse_entry(" a.png , cat", "csv") == ("a.png", "cat")
    assert group_list.parse_entry('{"id": "b.png ", "group": "dog"}', "jsonl") == ("b.png ", "dog")
    assert pair_list.parse_entry('" a.png", b.png ', "csv") == (" a.png", ["b.png"], [])


# Records that are not the Example their reader parses (validly framed: length and CRCs match).

NOT_EXAMPLES = {
    "random bytes": np.random.default_rng(7).bytes(300),
    "an Example without the feature": runs.image_example("img", np.zeros([2, 2, 3], np.uint8)),
}


def _replace_record(output_dir: str, record_set: str, record: int, payload: bytes) -> None:
    """Rewrites the record set with `payload` as record `record`, framed like any other."""
    records = readback.records_by_index(output_dir, record_set)
    ids = readback.ids(output_dir, record_set)
    num_shards = len(readback.shard_paths(output_dir, record_set))
    records[record] = payload
    runs.write_record_set(output_dir, record_set, records, num_shards, ids)


@pytest.mark.parametrize("payload", list(NOT_EXAMPLES), ids=list(NOT_EXAMPLES))
@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_class_balanced_names_skips_and_counts_a_record_that_is_no_audio_example(
    tmp_path, caplog, backend, payload
):
    output_dir = str(tmp_path)
    info = write_audio_run(output_dir, [4, 5, 6, 4], seed=3)
    bad = 7
    _replace_record(output_dir, "train", bad, NOT_EXAMPLES[payload])
    options = dict(
        n_classes_per_batch=2,
        n_samples_per_class=3,
        features=CROP,
        epoch_mode="samples",
        seed=5,
    )
    failing = ClassBalancedSampler(
        output_dir, store_options=StoreOptions(backend=backend), **options
    )
    with pytest.raises(tf.errors.OpError, match=rf"record {bad} \(shard .*data-.*, offset \d+\)"):
        list(failing.dataset().as_numpy_iterator())

    sampler = ClassBalancedSampler(
        output_dir, store_options=StoreOptions(backend=backend, on_damaged="skip"), **options
    )
    epochs = 2
    planned = skipping.times_planned(sampler.epoch_plan, "index", bad, epochs)
    assert planned >= epochs  # the samples mode plans every record every epoch
    for batch in skipping.batches_of_epochs(sampler.dataset(), epochs, caplog):
        assert bad not in batch["index"]
        np.testing.assert_array_equal(info["class_ids"][batch["index"]], batch["label"])
    assert sampler.skipped_samples == planned
    messages = skipping.warnings_of(caplog, "class_balanced: epoch")
    assert len(messages) == epochs, messages
    assert f"record {bad} (shard " in messages[-1]


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_dynamic_pairs_names_skips_and_counts_a_record_that_is_no_image_example(
    tmp_path, caplog, backend
):
    output_dir = str(tmp_path)
    skipping.write_pairs_run(output_dir, y_payloads={1: NOT_EXAMPLES["random bytes"]})
    options = dict(batch_size=4, image=ImageSpec(2, 2, 3), seed=2)
    failing = DynamicPairsSampler(
        output_dir, store_options=StoreOptions(backend=backend), **options
    )
    with pytest.raises(tf.errors.OpError, match=r"record 1 \(shard .*data-.*\): not a tf.train"):
        for _ in range(3):
            list(failing.dataset().as_numpy_iterator())

    sampler = DynamicPairsSampler(
        output_dir, store_options=StoreOptions(backend=backend, on_damaged="skip"), **options
    )
    epochs = 3
    planned = skipping.times_planned(sampler.planner.plan, "y_index", 1, epochs)
    assert planned > 0
    for batch in skipping.batches_of_epochs(sampler.dataset(), epochs, caplog):
        assert 1 not in batch["y_index"]
        assert batch["y"].shape == (len(batch["y_index"]), 2, 2, 3)
    assert sampler.skipped_samples == planned
    messages = skipping.warnings_of(caplog, "dynamic_pairs: epoch")
    assert messages and all("y record 1 (shard " in message for message in messages), messages
