"""The materialize components' executors, run on real data with real artifacts in a temp dir."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf
from tfx.components.statistics_gen import executor as statistics_executor
from tfx.components.statistics_gen import stats_artifact_utils
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs

from tests.components.conftest import (
    DIGIT_IMAGE_SIZE,
    make_artifact,
    materialize,
    pairs_properties,
    png_bytes,
)
from tests.materialize import readback
from tfx_dynamic_inputs import artifacts, layout
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.inputs import ValidPairs, class_balanced
from tfx_dynamic_inputs.inputs.record_store import RecordStore
from tfx_dynamic_inputs.inputs.run import StoreOptions, open_run
from tfx_dynamic_inputs.materialize import MaterializeError
from tfx_dynamic_inputs.materialize_component import MaterializeAudio, MaterializePairs
from tfx_dynamic_inputs.materialize_component import executor as materialize_executor
from tfx_dynamic_inputs.pipeline import config


def _files_below(directory: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, name), directory)
        for d, _, names in tf.io.gfile.walk(directory)
        for name in names
    )


def _split_records(examples_uri: str, record_set: str) -> list[bytes]:
    shards = sorted(
        tf.io.gfile.glob(os.path.join(examples_uri, f"{layout.SPLIT_PREFIX}{record_set}", "*"))
    )
    return [r.numpy() for r in tf.data.TFRecordDataset(shards)]


def test_pairs_examples_artifact_holds_split_folders_of_tfrecord_shards(pairs_run):
    examples = pairs_run[keys.EXAMPLES_KEY]
    assert artifact_utils.decode_split_names(examples.split_names) == ["x", "y"]
    entries = sorted(n.rstrip("/") for n in tf.io.gfile.listdir(examples.uri))
    assert entries == ["Split-x", "Split-y"]
    files = _files_below(examples.uri)
    assert files and all(f.endswith(".tfrecord") for f in files)
    assert len([f for f in files if f.startswith("Split-x/")]) == 3
    assert examples.get_string_custom_property("payload_format") == "FORMAT_TF_EXAMPLE"


def test_pairs_run_directory_keeps_no_shards_and_index_artifacts_hold_their_parts(pairs_run):
    offset_index, pair_index = pairs_run[keys.OFFSET_INDEX_KEY], pairs_run[keys.PAIR_INDEX_KEY]
    assert not tf.io.gfile.exists(os.path.join(offset_index.uri, layout.EXAMPLES_DIR))
    assert tf.io.gfile.exists(os.path.join(offset_index.uri, layout.SUMMARY_FILE))
    assert not tf.io.gfile.exists(layout.pairs_index_dir(offset_index.uri))
    # The pair index names its run, and the run's summary.json commits it there too.
    assert _files_below(pair_index.uri) == [
        "index/pairs/row_splits.npy",
        "index/pairs/run.json",
        "index/pairs/values.npy",
        "summary.json",
    ]


def test_record_store_on_the_offset_index_reads_the_examples_artifact_in_order(
    pairs_run, digit_domains
):
    offset_index, examples = pairs_run[keys.OFFSET_INDEX_KEY], pairs_run[keys.EXAMPLES_KEY]
    num_records = offset_index.get_json_value_custom_property(artifacts.NUM_RECORDS_PROPERTY)
    assert num_records == {"x": digit_domains.num_x, "y": digit_domains.num_y}
    for record_set in (layout.X_RECORD_SET, layout.Y_RECORD_SET):
        store = RecordStore.open(offset_index.uri, record_set, backend="disk")
        sequential = _split_records(examples.uri, record_set)
        assert store.num_records == len(sequential) == num_records[record_set]
        picked = np.random.default_rng(7).permutation(store.num_records)[:300]
        read = store.read(tf.constant(picked, tf.int64)).numpy()
        assert [bytes(r) for r in read] == [sequential[i] for i in picked]


def test_pair_index_matches_the_stores_and_its_count(pairs_run, digit_domains):
    store_x = RecordStore.open(pairs_run[keys.OFFSET_INDEX_KEY].uri, layout.X_RECORD_SET)
    store_y = RecordStore.open(pairs_run[keys.OFFSET_INDEX_KEY].uri, layout.Y_RECORD_SET)
    valid_pairs = ValidPairs.load(
        pairs_run[keys.PAIR_INDEX_KEY].uri, num_x=store_x.num_records, num_y=store_y.num_records
    )
    assert valid_pairs.num_pairs == digit_domains.num_pairs
    assert pairs_run[keys.PAIR_INDEX_KEY].get_int_custom_property("num_valid_pairs") == (
        digit_domains.num_pairs
    )
    assert pairs_run[keys.OFFSET_INDEX_KEY].get_int_custom_property("num_rejects") == 0


def test_multi_processing_beam_args_run_lean_workers_and_write_the_same_artifacts(
    pairs_run, digit_domains, tmp_path, unrun_pipelines
):
    two_processes = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
    executor = materialize_executor.PairsExecutor(
        materialize_executor.PairsExecutor.Context(beam_pipeline_args=list(two_processes))
    )
    unrun_pipelines.append(executor._make_beam_pipeline())
    assert type(unrun_pipelines[-1].runner).__name__ == "LeanWorkersRunner"
    outputs = materialize(
        MaterializePairs,
        str(tmp_path),
        pairs_properties(digit_domains),
        beam_pipeline_args=two_processes,
    )
    for key, artifact in outputs.items():
        assert readback.run_files(artifact.uri) == readback.run_files(pairs_run[key].uri), key


def test_statistics_gen_reads_the_uncompressed_examples(pairs_run, tmp_path):
    statistics = make_artifact(standard_artifacts.ExampleStatistics, str(tmp_path / "stats"))
    statistics_executor.Executor().Do(
        {standard_component_specs.EXAMPLES_KEY: [pairs_run[keys.EXAMPLES_KEY]]},
        {standard_component_specs.STATISTICS_KEY: [statistics]},
        {},
    )
    expected = pairs_run[keys.OFFSET_INDEX_KEY].get_json_value_custom_property("num_records")
    for split, count in expected.items():
        [stats] = stats_artifact_utils.load_statistics(statistics, split).proto().datasets
        assert stats.num_examples == count
        assert {f.path.step[0] for f in stats.features} >= {"id", "image", "height", "channels"}


def test_audio_run_maps_splits_and_class_index(audio_run, speaker_manifest):
    examples, offset_index, class_index = (
        audio_run[keys.EXAMPLES_KEY],
        audio_run[keys.OFFSET_INDEX_KEY],
        audio_run[keys.CLASS_INDEX_KEY],
    )
    splits = artifact_utils.decode_split_names(examples.split_names)
    assert splits == ["eval", "train"]
    num_records = offset_index.get_json_value_custom_property("num_records")
    with open(speaker_manifest) as f:
        assert sum(num_records.values()) == len(f.read().splitlines()) - 1
    num_classes = class_index.get_json_value_custom_property("num_classes")
    assert num_classes["eval"] + num_classes["train"] == 10
    assert num_classes["eval"] == 3
    for split in splits:
        directory = layout.index_dir(class_index.uri, split)
        ids = layout.load_npy(os.path.join(directory, layout.CLASS_IDS_FILE))
        labels = [
            tf.train.Example.FromString(r).features.feature["label"].int64_list.value[0]
            for r in _split_records(examples.uri, split)
        ]
        assert list(ids) == labels
        assert (
            len(layout.load_lines(os.path.join(directory, layout.CLASSES_FILE)))
            == (num_classes[split])
        )
    # Eval speakers are held out: no speaker name in both splits.
    speakers = {
        split: set(
            layout.load_lines(os.path.join(layout.index_dir(class_index.uri, split), "classes.txt"))
        )
        for split in splits
    }
    assert not speakers["eval"] & speakers["train"]


@pytest.fixture()
def domains_with_a_corrupt_image(tmp_path):
    rng = np.random.default_rng(0)
    for side in ("x", "y"):
        os.makedirs(tmp_path / side)
        for i in range(12):
            pixels = rng.integers(0, 256, size=(6, 6), dtype=np.uint8)
            (tmp_path / side / f"{i:02d}.png").write_bytes(png_bytes(pixels))
    (tmp_path / "y" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    with open(tmp_path / "pairs.jsonl", "w") as f:
        for i in range(12):
            f.write(json.dumps({"x": f"{i:02d}.png", "y": [f"{i:02d}.png", "broken.png"]}) + "\n")
    return tmp_path


def _pairs_properties(directory, **overrides):
    return {
        keys.X_DIR_KEY: str(directory / "x"),
        keys.Y_DIR_KEY: str(directory / "y"),
        keys.PAIRS_KEY: str(directory / "pairs.jsonl"),
        keys.IMAGE_STORAGE_KEY: "raw",
        keys.RAW_HEIGHT_KEY: 6,
        keys.RAW_WIDTH_KEY: 6,
        keys.RAW_CHANNELS_KEY: 1,
        **overrides,
    }


def test_a_corrupt_image_is_a_counted_and_recorded_reject(domains_with_a_corrupt_image, tmp_path):
    outputs = materialize(
        MaterializePairs,
        str(tmp_path / "out"),
        _pairs_properties(domains_with_a_corrupt_image),
    )
    offset_index = outputs[keys.OFFSET_INDEX_KEY]
    assert offset_index.get_int_custom_property("num_rejects") == 1
    assert offset_index.get_json_value_custom_property("rejects_by_reason") == {
        "corrupt_image": 1,
        "pair_rejected_y": 12,
    }
    rejects = [
        json.loads(line)
        for line in layout.load_lines(os.path.join(offset_index.uri, layout.REJECTS_FILE))
    ]
    assert len(rejects) == 13
    [corrupt] = [r for r in rejects if r["reason"] == "corrupt_image"]
    assert corrupt["id"] == "broken.png"
    assert outputs[keys.OFFSET_INDEX_KEY].get_json_value_custom_property("num_records") == {
        "x": 12,
        "y": 12,
    }
    # The 12 pair entries naming the broken y are gone; every x keeps its valid y.
    assert outputs[keys.PAIR_INDEX_KEY].get_int_custom_property("num_valid_pairs") == 12


def test_too_many_rejects_fail_the_component_with_the_reason(
    domains_with_a_corrupt_image, tmp_path
):
    with pytest.raises(MaterializeError, match="reject"):
        materialize(
            MaterializePairs,
            str(tmp_path / "out"),
            _pairs_properties(domains_with_a_corrupt_image, max_reject_fraction=0.0),
        )


def test_a_missing_input_folder_fails_before_any_work(tmp_path):
    with pytest.raises(MaterializeError, match="x_dir"):
        materialize(
            MaterializePairs,
            str(tmp_path / "out"),
            _pairs_properties(tmp_path / "nowhere"),
        )


def test_component_specs_reject_wrong_parameter_types():
    with pytest.raises(TypeError):
        MaterializePairs(x_dir="x", y_dir="y", pairs="p", num_shards="two")
    with pytest.raises(TypeError):
        MaterializeAudio(manifest="m", root="r", eval_fraction="a third")
    component = MaterializeAudio(manifest="m", root="r", sample_rate=8000)
    assert set(component.outputs) == {"examples", "offset_index", "class_index"}
    assert component.exec_properties["sample_rate"] == 8000


def test_a_retry_into_the_same_uris_leaves_no_stale_shards(domains_with_a_corrupt_image, tmp_path):
    root = str(tmp_path / "out")
    for num_shards in (3, 1):
        outputs = materialize(
            MaterializePairs,
            root,
            _pairs_properties(domains_with_a_corrupt_image, num_shards=num_shards),
        )
    assert _files_below(outputs[keys.EXAMPLES_KEY].uri) == [
        "Split-x/data-00000-of-00001.tfrecord",
        "Split-y/data-00000-of-00001.tfrecord",
    ]
    store = RecordStore.open(outputs[keys.OFFSET_INDEX_KEY].uri, layout.Y_RECORD_SET)
    assert store.num_records == 12


def test_speaker_from_path_materializes_what_the_manifest_does(
    audio_run, speaker_manifest, tmp_path
):
    """The manifest run's files copied to a folder of their own (speaker folders, nothing
    else): taking each speaker from the path gives the same records, splits and classes."""
    with open(speaker_manifest) as f:
        paths = [line.split(",")[0] for line in f.read().splitlines()[1:]]
    root = tmp_path / "corpus"
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes((pathlib.Path(config.SPEAKER_CORPUS_DIR) / path).read_bytes())
    by_path = materialize(
        MaterializeAudio,
        str(tmp_path / "run"),
        {
            keys.SPEAKER_FROM_PATH_KEY: True,
            keys.ROOT_KEY: str(root),
            keys.SAMPLE_RATE_KEY: 16000,
            keys.SPLIT_MODE_KEY: "speaker",
            keys.EVAL_FRACTION_KEY: 0.3,
            keys.NUM_SHARDS_KEY: 2,
        },
    )
    for split in ("train", "eval"):
        got = _split_records(by_path[keys.EXAMPLES_KEY].uri, split)
        assert got and got == _split_records(audio_run[keys.EXAMPLES_KEY].uri, split)
        classes = [
            layout.load_lines(
                os.path.join(
                    layout.index_dir(run[keys.CLASS_INDEX_KEY].uri, split), layout.CLASSES_FILE
                )
            )
            for run in (by_path, audio_run)
        ]
        assert classes[0] == classes[1]


def test_audio_component_takes_a_manifest_or_speaker_folders_not_both():
    component = MaterializeAudio(manifest=None, root="r", speaker_from_path=True)
    assert component.exec_properties["speaker_from_path"] is True
    for manifest, from_path in (("m", True), (None, None), (None, False)):
        with pytest.raises(ValueError, match="manifest=None and speaker_from_path=True"):
            MaterializeAudio(manifest=manifest, root="r", speaker_from_path=from_path)


# ---------------------------------------------------------- open_run on a pipeline's outputs


@pytest.mark.parametrize("key", [keys.EXAMPLES_KEY, keys.OFFSET_INDEX_KEY, keys.CLASS_INDEX_KEY])
def test_open_run_takes_any_artifact_of_an_audio_execution_to_the_sampler(audio_run, key):
    """One line from a pipeline's outputs to the class-balanced sampler (issue 21.1): before,
    `class_balanced(offset_index_uri)` answered "record set 'train' ... has no class index"."""
    run = open_run(audio_run[key].uri)
    offset_index = audio_run[keys.OFFSET_INDEX_KEY]
    assert (
        run.uri == offset_index.uri and run.class_index_uri == audio_run[keys.CLASS_INDEX_KEY].uri
    )
    assert run.kind == "audio" and run.sample_rate == 16000 and run.record_sets == ("eval", "train")
    assert {name: run.num_records(name) for name in run.record_sets} == (
        offset_index.get_json_value_custom_property("num_records")
    )
    summary = layout.load_json(os.path.join(offset_index.uri, layout.SUMMARY_FILE))
    assert run.run_id == summary[layout.RUN_ID_KEY] and run.rejects == summary["rejects"]
    batch = next(
        iter(class_balanced(run, record_set="train", n_classes_per_batch=3, n_samples_per_class=2))
    )
    assert len(set(batch["label"].numpy().tolist())) == 3
    with pytest.raises(KeyError, match="no record set 'trian'.*did you mean 'train'"):
        run.store("trian")


def test_open_run_takes_a_pairs_execution_to_its_stores_and_pairs(pairs_run):
    run = open_run(pairs_run[keys.PAIR_INDEX_KEY].uri)
    assert run.kind == "pairs" and run.sample_rate is None
    assert run.pair_index_uri == pairs_run[keys.PAIR_INDEX_KEY].uri
    assert run.raw_image_shape[:2] == (DIGIT_IMAGE_SIZE, DIGIT_IMAGE_SIZE)
    x_store, y_store, valid_pairs = run.pairs(StoreOptions(backend="disk"))
    assert x_store.run_id == y_store.run_id == run.run_id
    assert (x_store.num_records, y_store.num_records) == (
        run.num_records("x"),
        run.num_records("y"),
    )
    assert valid_pairs.num_x == x_store.num_records


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"backend": "disc"},
            "backend must be one of auto, memory, disk; got 'disc'; did you mean 'disk'",
        ),
        ({"on_damaged": "skipp"}, "did you mean 'skip'"),
        ({"memory_budget_bytes": 1.5}, "memory_budget_bytes must be an int, got float 1.5"),
        ({"verify_crc": "yes"}, "verify_crc must be a bool"),
    ],
)
def test_store_options_are_checked_when_built(options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        StoreOptions(**options)


def test_open_run_refuses_artifacts_of_two_runs(audio_run, tmp_path):
    component = tmp_path / "MaterializeAudio"
    for key in (keys.OFFSET_INDEX_KEY, keys.CLASS_INDEX_KEY):
        tf.io.gfile.makedirs(str(component / key))
        shutil.copytree(audio_run[key].uri, str(component / key / "3"))
    summary_path = component / keys.CLASS_INDEX_KEY / "3" / layout.SUMMARY_FILE
    summary = layout.load_json(str(summary_path))
    summary[layout.RUN_ID_KEY] = "0" * 32
    summary_path.write_text(json.dumps(summary))
    with pytest.raises(layout.RunCommitError, match=f"holds run {'0' * 32}"):
        open_run(str(component / keys.OFFSET_INDEX_KEY / "3"))
