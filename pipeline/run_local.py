"""Local runs: LocalDagRunner, sqlite ML Metadata, Beam DirectRunner; and what a run produced.

    python -m pipeline.run_local {cyclegan,speaker} --work-dir out/local [--digits-dir DIR]

`run(pipeline)` executes a pipeline in this process. `latest_run(metadata_path, name)` reads
back from ML Metadata what the newest run of a pipeline did: per node, whether it executed or
was served from the cache, and the URIs and custom properties of its outputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx import v1 as tfx

from pipeline import config, cyclegan_pipeline, speaker_pipeline
from pipeline.sample_data import write_digit_domains

PIPELINE_CONTEXT = "pipeline"
RUN_CONTEXT = "pipeline_run"
NODE_CONTEXT = "node"
METADATA_FILE = "metadata.sqlite"
PIPELINE_ROOT_DIR = "pipeline_root"
DIGITS_DIR = "digits"

_STATE_NAMES = {value: name for name, value in metadata_store_pb2.Execution.State.items()}


@dataclasses.dataclass(frozen=True)
class OutputArtifact:
    """An output artifact as ML Metadata holds it; `properties` merges properties and custom
    properties (JSON values decoded)."""

    uri: str
    type_name: str
    properties: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class NodeResult:
    """One node's execution in a run: `state` is COMPLETE (it ran), CACHED or FAILED."""

    node_id: str
    state: str
    outputs: dict[str, list[OutputArtifact]]

    def uri(self, key: str) -> str:
        [artifact] = self.outputs[key]
        return artifact.uri


def run(pipeline: tfx.dsl.Pipeline) -> None:
    """Runs `pipeline` to completion in this process (raises if a component fails)."""
    tfx.orchestration.LocalDagRunner().run(pipeline)


def run_config(work_dir: str, **overrides) -> config.RunConfig:
    """A local `RunConfig` under `work_dir`: pipeline root and one shared sqlite MLMD file."""
    return config.RunConfig(
        pipeline_root=os.path.join(work_dir, PIPELINE_ROOT_DIR),
        metadata_path=os.path.join(work_dir, METADATA_FILE),
        **overrides,
    )


def cyclegan_config(digits_dir: str, **overrides) -> config.CycleGanConfig:
    """The CycleGAN config over the bundled digit domains, written to `digits_dir` if needed."""
    image_size = overrides.get("image_size", config.CycleGanConfig.image_size)
    domains = write_digit_domains(digits_dir, image_size=image_size)
    return config.CycleGanConfig(
        x_dir=domains.x_dir, y_dir=domains.y_dir, pairs=domains.pairs_path, **overrides
    )


def latest_run(metadata_path: str, pipeline_name: str) -> dict[str, NodeResult]:
    """Node id -> `NodeResult` of the newest run of `pipeline_name` recorded at `metadata_path`."""
    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = metadata_path
    connection.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    store = metadata_store.MetadataStore(connection)
    pipeline_context = store.get_context_by_type_and_name(PIPELINE_CONTEXT, pipeline_name)
    if pipeline_context is None:
        raise LookupError(f"no run of pipeline {pipeline_name!r} in {metadata_path}")
    pipeline_executions = {e.id for e in store.get_executions_by_context(pipeline_context.id)}
    runs = [
        context
        for context in store.get_contexts_by_type(RUN_CONTEXT)
        if pipeline_executions & {e.id for e in store.get_executions_by_context(context.id)}
    ]
    newest = max(runs, key=lambda c: (c.create_time_since_epoch, c.id))
    results = {}
    for execution in sorted(store.get_executions_by_context(newest.id), key=lambda e: e.id):
        node_id = _node_id(store, execution.id, pipeline_name)
        events = store.get_events_by_execution_ids([execution.id])
        output_events = [e for e in events if e.type == metadata_store_pb2.Event.OUTPUT]
        artifacts = {
            a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in output_events])
        }
        types = {
            t.id: t.name
            for t in store.get_artifact_types_by_id(list({a.type_id for a in artifacts.values()}))
        }
        outputs: dict[str, list[OutputArtifact]] = {}
        for event in output_events:
            artifact = artifacts[event.artifact_id]
            outputs.setdefault(event.path.steps[0].key, []).append(
                OutputArtifact(
                    uri=artifact.uri,
                    type_name=types[artifact.type_id],
                    properties={
                        k: _value(v)
                        for props in (artifact.properties, artifact.custom_properties)
                        for k, v in props.items()
                    },
                )
            )
        results[node_id] = NodeResult(node_id, _STATE_NAMES[execution.last_known_state], outputs)
    return results


def _node_id(store: metadata_store.MetadataStore, execution_id: int, pipeline_name: str) -> str:
    for context in store.get_contexts_by_execution(execution_id):
        if store.get_context_types_by_id([context.type_id])[0].name == NODE_CONTEXT:
            return context.name.removeprefix(f"{pipeline_name}.")
    raise LookupError(f"execution {execution_id} has no node context")


def _value(value: metadata_store_pb2.Value) -> Any:
    kind = value.WhichOneof("value")
    if kind == "struct_value":
        from google.protobuf import json_format

        decoded = json_format.MessageToDict(value.struct_value)
        # TFX stores a JSON value that is not an object as {"__value__": value}.
        return decoded["__value__"] if decoded.keys() == {"__value__"} else decoded
    return getattr(value, kind) if kind else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run one pipeline locally (DirectRunner).")
    parser.add_argument("pipeline", choices=["cyclegan", "speaker"])
    parser.add_argument("--work-dir", default=os.path.join(config.REPO_ROOT, "out", "local"))
    args = parser.parse_args(argv)
    run_settings = run_config(args.work_dir)
    if args.pipeline == "cyclegan":
        pipeline_config = cyclegan_config(os.path.join(args.work_dir, DIGITS_DIR))
        run(cyclegan_pipeline.create_pipeline(pipeline_config, run_settings))
    else:
        pipeline_config = config.SpeakerConfig()
        run(speaker_pipeline.create_pipeline(pipeline_config, run_settings))
    for node_id, result in latest_run(
        run_settings.metadata_path, pipeline_config.pipeline_name
    ).items():
        uris = {k: [a.uri for a in v] for k, v in result.outputs.items()}
        print(f"{node_id} [{result.state}]: {uris}")


if __name__ == "__main__":
    main()
