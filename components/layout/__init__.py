"""On-disk layout of a materialized run: the contract between the Beam stage and the readers.

One run writes one directory (any path both Beam `FileSystems` and `tf.io.gfile` reach)::

    <output_dir>/
      summary.json                       counts per record set and class, pair degrees, rejects,
                                         "ok" and "run_id": written last, it commits the run
      rejects.jsonl                      one {"source": ..., "reason": ...} per rejected input
      examples/Split-<record_set>/data-SSSSS-of-NNNNN.tfrecord
                                         uncompressed TFRecord shards of tf.train.Example
      index/<record_set>/offsets.npy     int64 [N, 3]: (shard, frame offset, payload length)
      index/<record_set>/shards.json     {"record_set", "num_records", "shards": [paths], "run_id",
                                          "shard_bytes": [size per shard],
                                          "shard_crcs": [[[position, crc], ...] per shard]}
      index/<record_set>/ids.txt         the source id of each record, in record order
      index/<record_set>/classes.txt     class vocabulary (labelled record sets only)
      index/<record_set>/class_ids.npy   int64 [N]: class id of each record
      index/<record_set>/class_records/{row_splits,values}.npy
                                         CSR: the record numbers of each class, ascending
      index/pairs/{row_splits,values}.npy
                                         CSR over the records of `x`: the valid `y` record numbers
      index/pairs/groups.txt             valid pairs by group ("x pairs with every y of its
      index/pairs/{x,y}_groups.npy       group"), O(N_x + N_y): the group names, sorted, and the
                                         int64 [N] group id of each x / y record; the CSR above is
                                         then written too, when it holds at most MAX_GROUP_EDGES
      index/pairs/run.json               {"run_id": ...}: the run that wrote the pair index
      index/<record_set>/class_records/run.json
                                         {"run_id": ...}: the run that wrote the class index
      .claim                             while a job runs: {"run_id", "host", "pid", "started"}

Index files live outside the `Split-*` folders because tfx-bsl rejects a split folder that mixes
file kinds; the `examples/` folder is therefore a valid TFX `Examples` artifact URI as it stands.

A run is committed by its `summary.json` (`commit_run`), written last and naming the run id (a
uuid4 hex the launcher chooses) that every index part carries: the `"run_id"` of each
`shards.json`, and a `run.json` beside the pair index and each class index (those parts are
moved into their own TFX artifact URIs, each of which gets a copy of `summary.json`). There are
no folder renames (on object stores they are full copies). Readers (`load_shards`,
`check_part`) refuse a part whose run is not the one `summary.json` commits as ok: a job killed
before its summary, a failed run, or parts of two runs mixed in one folder (`RunCommitError`
names both run ids). A folder without `summary.json` whose parts name no run is not a run but a
store `tfx_dynamic_inputs.inputs.sources.record_store_from` cached from user data; it is read as is.

A job claims its folder with `.claim` (`tfx_dynamic_inputs.materialize.claims.try_claim`: created
exclusively on local disks; on object stores a best-effort write-if-absent, read back), so a
second job on the same folder fails fast; the job removes its claim when it ends.

Shard paths in `shards.json` are relative to the run directory, so a run can be moved or copied.

Writers (`write_shard`, `save_*`) run in Beam workers and go through Beam's `FileSystems`
(`tf.io.gfile` in the core install, without Beam: `filesystem`), with TFRecord frames built in
Python, so a worker that only writes never imports TensorFlow (a 10-25 s start-up per worker
process). Readers (`load_*`) run in input pipelines and use
`tf.io.gfile`. Both import their file layer on first use: importing this package is cheap.

The package is this contract, one concern a module, each index's writer beside its reader:

* `names`: file and folder names, feature keys, frame sizes, `IndexFileError` / `RunCommitError`;
* `filesystem`: the file layer the writers go through (Beam's `FileSystems`, else `tf.io.gfile`);
* `paths`: shard paths resolved and confined to the run;
* `framing`: TFRecord frames and shards written from them;
* `files`: `.npy`, CSR, JSON and text-line files, each with its checked reader;
* `record_sets`: a record set's offsets, `shards.json` (shard sizes and sampled CRCs), ids;
* `class_index`, `group_index`: the class index and valid pairs by group;
* `commit`: run ids and the commit protocol (the job's claim on its folder is the writers':
  `tfx_dynamic_inputs.materialize.claims`);
* `summary`: the committed `summary.json`, checked where it is read.

Everything is re-exported here: `from tfx_dynamic_inputs import layout` and `layout.<name>`.
"""

from __future__ import annotations

from tfx_dynamic_inputs.layout.class_index import (
    class_records,
    save_class_index,
)
from tfx_dynamic_inputs.layout.commit import (
    check_committed,
    check_part,
    check_same_run,
    commit_run,
    committed_run_id,
    load_run_file,
    new_run_id,
    run_id_field,
    save_run_file,
)
from tfx_dynamic_inputs.layout.files import (
    INTEGER,
    load_csr,
    load_json,
    load_lines,
    load_npy,
    save_csr,
    save_json,
    save_lines,
    save_npy,
)
from tfx_dynamic_inputs.layout.filesystem import create, gfile
from tfx_dynamic_inputs.layout.framing import (
    frame_parts,
    masked_crc32c,
    tfrecord_frame,
    write_frames,
    write_shard,
)
from tfx_dynamic_inputs.layout.group_index import (
    MAX_GROUP_EDGES,
    group_degrees,
    group_edges,
    has_group_index,
    load_group_index,
    save_group_index,
)
from tfx_dynamic_inputs.layout.names import (
    AUDIO_KEY,
    CHANNELS_KEY,
    CLAIM_FILE,
    CLASS_IDS_FILE,
    CLASS_RECORDS_INDEX,
    CLASSES_FILE,
    CRC_MASK_DELTA,
    EXAMPLES_DIR,
    FRAME_FOOTER_BYTES,
    FRAME_HEADER_BYTES,
    FRAME_OVERHEAD_BYTES,
    GROUPS_FILE,
    HEIGHT_KEY,
    ID_KEY,
    IDS_FILE,
    IMAGE_FORMAT_KEY,
    IMAGE_KEY,
    INDEX_DIR,
    LABEL_KEY,
    MIN_AUDIO_SECONDS,
    NUM_SAMPLES_KEY,
    OFFSETS_FILE,
    PAIRS_INDEX,
    REJECTS_FILE,
    ROW_SPLITS_FILE,
    RUN_FILE,
    RUN_ID_KEY,
    SAMPLE_RATE_KEY,
    SHARDS_FILE,
    SPEAKER_KEY,
    SPLIT_PREFIX,
    SUMMARY_FILE,
    VALUES_FILE,
    WIDTH_KEY,
    X_GROUPS_FILE,
    X_RECORD_SET,
    Y_GROUPS_FILE,
    Y_RECORD_SET,
    IndexFileError,
    RunCommitError,
    class_records_dir,
    examples_dir,
    index_dir,
    pairs_index_dir,
    shard_name,
)
from tfx_dynamic_inputs.layout.paths import (
    resolve,
    resolve_shard,
)
from tfx_dynamic_inputs.layout.record_sets import (
    CRC_BYTES,
    SAMPLED_FRAMES,
    ReadCrcs,
    ShardManifest,
    is_count,
    load_shards,
    sampled_crcs,
    sampled_records,
    save_record_set_index,
    write_record_set,
)
from tfx_dynamic_inputs.layout.summary import is_record_set_name, load_summary

__all__ = [
    "AUDIO_KEY",
    "CHANNELS_KEY",
    "CLAIM_FILE",
    "CLASSES_FILE",
    "CLASS_IDS_FILE",
    "CLASS_RECORDS_INDEX",
    "CRC_BYTES",
    "CRC_MASK_DELTA",
    "EXAMPLES_DIR",
    "FRAME_FOOTER_BYTES",
    "FRAME_HEADER_BYTES",
    "FRAME_OVERHEAD_BYTES",
    "GROUPS_FILE",
    "HEIGHT_KEY",
    "IDS_FILE",
    "ID_KEY",
    "IMAGE_FORMAT_KEY",
    "IMAGE_KEY",
    "INDEX_DIR",
    "INTEGER",
    "IndexFileError",
    "LABEL_KEY",
    "MAX_GROUP_EDGES",
    "MIN_AUDIO_SECONDS",
    "NUM_SAMPLES_KEY",
    "OFFSETS_FILE",
    "PAIRS_INDEX",
    "REJECTS_FILE",
    "ROW_SPLITS_FILE",
    "RUN_FILE",
    "RUN_ID_KEY",
    "ReadCrcs",
    "RunCommitError",
    "SAMPLED_FRAMES",
    "SAMPLE_RATE_KEY",
    "SHARDS_FILE",
    "SPEAKER_KEY",
    "SPLIT_PREFIX",
    "SUMMARY_FILE",
    "ShardManifest",
    "VALUES_FILE",
    "WIDTH_KEY",
    "X_GROUPS_FILE",
    "X_RECORD_SET",
    "Y_GROUPS_FILE",
    "Y_RECORD_SET",
    "check_committed",
    "check_part",
    "check_same_run",
    "class_records",
    "class_records_dir",
    "commit_run",
    "committed_run_id",
    "create",
    "examples_dir",
    "frame_parts",
    "gfile",
    "group_degrees",
    "group_edges",
    "has_group_index",
    "index_dir",
    "is_count",
    "is_record_set_name",
    "load_csr",
    "load_group_index",
    "load_json",
    "load_lines",
    "load_npy",
    "load_run_file",
    "load_shards",
    "load_summary",
    "masked_crc32c",
    "new_run_id",
    "pairs_index_dir",
    "resolve",
    "resolve_shard",
    "run_id_field",
    "sampled_crcs",
    "sampled_records",
    "save_class_index",
    "save_csr",
    "save_group_index",
    "save_json",
    "save_lines",
    "save_npy",
    "save_record_set_index",
    "save_run_file",
    "shard_name",
    "tfrecord_frame",
    "write_frames",
    "write_record_set",
    "write_shard",
]
