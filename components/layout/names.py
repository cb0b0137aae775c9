"""File and folder names of a run, feature keys, TFRecord frame sizes and the index errors:
what the writers and the readers of a run name alike (`tfx_dynamic_inputs.layout` has the whole
layout).
"""

from __future__ import annotations

import os

SUMMARY_FILE = "summary.json"


REJECTS_FILE = "rejects.jsonl"


EXAMPLES_DIR = "examples"


INDEX_DIR = "index"


PAIRS_INDEX = "pairs"


OFFSETS_FILE = "offsets.npy"


SHARDS_FILE = "shards.json"


IDS_FILE = "ids.txt"


CLASSES_FILE = "classes.txt"


CLASS_IDS_FILE = "class_ids.npy"


CLASS_RECORDS_INDEX = "class_records"


ROW_SPLITS_FILE = "row_splits.npy"


VALUES_FILE = "values.npy"


RUN_FILE = "run.json"


GROUPS_FILE = "groups.txt"


X_GROUPS_FILE = "x_groups.npy"


Y_GROUPS_FILE = "y_groups.npy"


CLAIM_FILE = ".claim"


RUN_ID_KEY = "run_id"


class IndexFileError(ValueError):
    """An index file of a run is unreadable, truncated or not of its declared type and shape, or
    its values contradict the rest of the run. The message names the file (and the record or
    row, where one is at fault)."""


class RunCommitError(IndexFileError):
    """The parts a reader opens are not one committed run: `summary.json` is missing (the job
    was killed, or still runs), says the run failed, or commits another run than a part names.
    The message names the folder, the part and both run ids."""


# The two record sets of a pairs run, and the folder prefix TFX gives each split of `Examples`.
X_RECORD_SET = "x"


Y_RECORD_SET = "y"


SPLIT_PREFIX = "Split-"


# TFRecord framing: uint64 length, uint32 masked crc of the length, payload, uint32 masked crc
# of the payload. Offsets in `offsets.npy` point at the start of the frame.
FRAME_HEADER_BYTES = 12


FRAME_FOOTER_BYTES = 4


FRAME_OVERHEAD_BYTES = FRAME_HEADER_BYTES + FRAME_FOOTER_BYTES


CRC_MASK_DELTA = 0xA282EAD8


# Feature keys of the two record kinds (see schemas/*.pbtxt).
ID_KEY = "id"


IMAGE_KEY = "image"


IMAGE_FORMAT_KEY = "image_format"  # b"png", b"jpeg" (encoded bytes) or b"raw" (uint8 pixels)


HEIGHT_KEY = "height"


WIDTH_KEY = "width"


CHANNELS_KEY = "channels"


AUDIO_KEY = "audio"  # little-endian int16 PCM, mono


NUM_SAMPLES_KEY = "num_samples"


SAMPLE_RATE_KEY = "sample_rate"


LABEL_KEY = "label"  # int64 class id within the record set's vocabulary


SPEAKER_KEY = "speaker"  # class name


# The shortest audio record the audio job stores; `AudioFeatureConfig` refuses frames longer
# than this, so every stored record yields at least one feature frame.
MIN_AUDIO_SECONDS = 0.05


def examples_dir(output_dir: str, record_set: str) -> str:
    """The folder of a record set's shards: `<output_dir>/examples/Split-<record_set>`.

    Args:
        output_dir: The run directory (a local path or any `tf.io.gfile` / Beam URI).
        record_set: The record set's name (`"x"`, `"y"`, `"train"`, ...).

    Returns:
        The folder path; it may not exist.

    Example:
        examples_dir("/runs/r1", "x")  # "/runs/r1/examples/Split-x"
    """
    return os.path.join(output_dir, EXAMPLES_DIR, f"{SPLIT_PREFIX}{record_set}")


def index_dir(output_dir: str, record_set: str) -> str:
    """The index folder of a record set: `<output_dir>/index/<record_set>`.

    Args:
        output_dir: The run directory.
        record_set: The record set's name.

    Returns:
        The folder of its `offsets.npy`, `shards.json`, `ids.txt` and class index files.

    Example:
        index_dir("/runs/r1", "train")  # "/runs/r1/index/train"
    """
    return os.path.join(output_dir, INDEX_DIR, record_set)


def pairs_index_dir(output_dir: str) -> str:
    """The folder of a pairs run's valid-pair index: `<output_dir>/index/pairs`.

    Args:
        output_dir: The run directory.

    Returns:
        The folder of the pair CSR or the group index, and their `run.json`.
    """
    return os.path.join(output_dir, INDEX_DIR, PAIRS_INDEX)


def class_records_dir(output_dir: str, record_set: str) -> str:
    """The folder of a labelled record set's class CSR: `<index_dir>/class_records`.

    Args:
        output_dir: The run directory.
        record_set: The labelled record set's name.

    Returns:
        The folder of the `row_splits.npy` / `values.npy` CSR and its `run.json`.
    """
    return os.path.join(index_dir(output_dir, record_set), CLASS_RECORDS_INDEX)


def shard_name(shard: int, num_shards: int) -> str:
    """The file name of one shard of a record set.

    Args:
        shard: The shard number, from 0.
        num_shards: How many shards the record set has.

    Returns:
        `data-SSSSS-of-NNNNN.tfrecord`, numbers zero-padded to 5 digits.

    Example:
        shard_name(2, 10)  # "data-00002-of-00010.tfrecord"
    """
    return f"data-{shard:05d}-of-{num_shards:05d}.tfrecord"
