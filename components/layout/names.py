"""File and folder names of a run, feature keys, TFRecord frame sizes and the index errors:
what the writers and the readers of a run name alike (`components.layout` has the whole layout).
"""

from __future__ import annotations

import os
from typing import IO

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
    return os.path.join(output_dir, EXAMPLES_DIR, f"{SPLIT_PREFIX}{record_set}")


def index_dir(output_dir: str, record_set: str) -> str:
    return os.path.join(output_dir, INDEX_DIR, record_set)


def pairs_index_dir(output_dir: str) -> str:
    return os.path.join(output_dir, INDEX_DIR, PAIRS_INDEX)


def class_records_dir(output_dir: str, record_set: str) -> str:
    return os.path.join(index_dir(output_dir, record_set), CLASS_RECORDS_INDEX)


def shard_name(shard: int, num_shards: int) -> str:
    return f"data-{shard:05d}-of-{num_shards:05d}.tfrecord"


def create(path: str) -> IO[bytes]:
    """Opens `path` for writing, uncompressed whatever its name; a local parent folder is made."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def gfile():
    """`tf.io.gfile`, imported on first use: code that Beam workers import must not pull in
    TensorFlow (a 10-25 s start-up per worker process) unless it really reads through it."""
    import tensorflow as tf

    return tf.io.gfile
