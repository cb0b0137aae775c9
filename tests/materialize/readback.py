"""Reading a materialized run back, independently of the code that wrote it."""

from __future__ import annotations

import contextlib
import os
import struct

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import held_payloads, pictures

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_ID = b"<run id>"


def spill_entries(output_dir: str) -> list[str]:
    """The spill folders and pointer files (`.spill-<run id>`) left in `output_dir`."""
    return sorted(name for name in os.listdir(output_dir) if name.startswith(".spill-"))


def record_holders(monkeypatch) -> list[held_payloads.HeldPayloads]:
    """Every holder of payloads held in memory (`held_payloads`) the jobs open in this process
    from now on, in order (the list fills as they open)."""
    holders: list[held_payloads.HeldPayloads] = []
    open_holder = held_payloads.open_holder

    def recording(root: str, run_id: str, budget_bytes: int | None = None):
        holders.append(open_holder(root, run_id, budget_bytes))
        return holders[-1]

    monkeypatch.setattr(held_payloads, "open_holder", recording)
    return holders


def shard_paths(output_dir: str, record_set: str) -> list[str]:
    shards = layout.load_json(os.path.join(layout.index_dir(output_dir, record_set), "shards.json"))
    return [os.path.join(output_dir, path) for path in shards["shards"]]


def records_by_index(output_dir: str, record_set: str) -> list[bytes]:
    """Every record, read by (shard, offset, length) from the offset index."""
    paths = shard_paths(output_dir, record_set)
    offsets = layout.load_npy(os.path.join(layout.index_dir(output_dir, record_set), "offsets.npy"))
    records = []
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open(path, "rb")) for path in paths]
        for shard, offset, length in offsets.tolist():
            handle = handles[shard]
            handle.seek(offset)
            (framed_length,) = struct.unpack("<Q", handle.read(8))
            assert framed_length == length, (shard, offset, framed_length, length)
            handle.read(4)
            records.append(handle.read(length))
    return records


def records_sequential(output_dir: str, record_set: str) -> list[bytes]:
    """Every record, in a sequential `TFRecordDataset` pass over the shards in order."""
    dataset = tf.data.TFRecordDataset(shard_paths(output_dir, record_set))
    return [record.numpy() for record in dataset]


def parse(serialized: bytes) -> dict:
    """Example -> {key: bytes | int} (every feature here holds one value)."""
    example = tf.train.Example.FromString(serialized)
    parsed = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = list(getattr(feature, kind).value)
        assert len(values) == 1, (key, values)
        parsed[key] = values[0]
    return parsed


def read_lines(path) -> list[str]:
    with open(path) as f:
        return f.read().splitlines()


def ids(output_dir: str, record_set: str) -> list[str]:
    return layout.load_lines(os.path.join(layout.index_dir(output_dir, record_set), "ids.txt"))


def load_schema(name: str) -> schema_pb2.Schema:
    with open(os.path.join(REPO_ROOT, "components", "schemas", name)) as f:
        return text_format.Parse(f.read(), schema_pb2.Schema())


def assert_matches_schema(records: list[bytes], schema: schema_pb2.Schema) -> None:
    """Every record has exactly the schema's features, of its type, one value, in its domain."""
    kinds = {schema_pb2.BYTES: "bytes_list", schema_pb2.INT: "int64_list"}
    expected = {feature.name: feature for feature in schema.feature}
    string_domains = {domain.name: set(domain.value) for domain in schema.string_domain}
    for serialized in records:
        example = tf.train.Example.FromString(serialized)
        assert set(example.features.feature) == set(expected)
        for name, feature in example.features.feature.items():
            spec = expected[name]
            assert feature.WhichOneof("kind") == kinds[spec.type], name
            values = list(getattr(feature, kinds[spec.type]).value)
            assert spec.value_count.min <= len(values) <= spec.value_count.max, name
            if spec.HasField("int_domain"):
                domain = spec.int_domain
                assert not domain.HasField("min") or values[0] >= domain.min, (name, values)
                assert not domain.HasField("max") or values[0] <= domain.max, (name, values)
            if spec.domain:
                assert values[0].decode() in string_domains[spec.domain], (name, values)


def csr(directory: str) -> tuple[np.ndarray, np.ndarray]:
    row_splits, values = layout.load_csr(directory)
    return np.asarray(row_splits), np.asarray(values)


def run_files(output_dir: str) -> dict[str, bytes]:
    """Relative path -> bytes of every file of a run, its run id (random, named in the index
    files and the summary) replaced by `RUN_ID`, so runs of the same input compare equal. The
    TensorBoard pictures are left out: event files carry their wall time."""
    summary_path = os.path.join(output_dir, layout.SUMMARY_FILE)
    run_id = (
        layout.load_json(summary_path)[layout.RUN_ID_KEY] if os.path.exists(summary_path) else None
    )
    files = {}
    for relative, path in pictures.data_files(output_dir):
        with open(path, "rb") as f:
            data = f.read()
        files[relative] = data.replace(run_id.encode(), RUN_ID) if run_id else data
    return files
