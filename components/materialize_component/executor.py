"""Executors of the materialize components: run the Beam stage, then map the run onto artifacts
(`tfx_dynamic_inputs.run_artifacts`): shards into `examples`, the rest of the run into
`offset_index`, and the job's index (`pair_index` or `class_index`) into its own artifact."""

from __future__ import annotations

import os
from collections.abc import Callable

from tfx import types

from tfx_dynamic_inputs import artifacts, execution, layout, run_artifacts
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.materialize import AudioConfig, PairsConfig, config, run_audio, run_pairs


class _MaterializeExecutor(execution.LoggedExecutor, run_artifacts.RunExecutor):
    """Shared `execute`: run the job into the offset index URI, then split the run over
    artifacts."""

    _CONFIG_CLASS: type[PairsConfig | AudioConfig]
    # The job's `run_*` function; staticmethod, so that it is not bound to the executor.
    _RUN_JOB: Callable[..., dict]
    _INDEX_KEY: str

    def _move_index(self, run_dir: str, record_sets: list[str], index_uri: str) -> None:
        raise NotImplementedError

    def _describe_index(self, index: types.Artifact, record_sets: list[str]) -> None:
        raise NotImplementedError

    def execute(self, run: execution.Execution) -> None:
        """Runs the job into `offset_index`, then moves the shards and the index to their
        artifacts.

        Args:
          run: the execution: the job's parameters and the three outputs.

        Raises:
          ValueError: a bad parameter; the job's own errors (too many rejects, ...).
        """
        examples = run.output(keys.EXAMPLES_KEY)
        offset_index = run.output(keys.OFFSET_INDEX_KEY)
        index = run.output(self._INDEX_KEY)
        run_dir = offset_index.uri
        run_artifacts.clear_outputs((examples, offset_index, index))

        job_config = config.from_flat(self._CONFIG_CLASS, {**run.properties, "output_dir": run_dir})
        summary = self._RUN_JOB(job_config, make_pipeline=self._make_beam_pipeline)
        record_sets = run_artifacts.split_examples(run_dir, summary, examples, offset_index)
        self._move_index(run_dir, record_sets, index.uri)
        run_artifacts.commit_index(run_dir, index.uri)
        self._describe_index(index, record_sets)


class PairsExecutor(_MaterializeExecutor):
    """Runs `tfx_dynamic_inputs.materialize.run_pairs`; `pair_index` gets `index/pairs/`."""

    _CONFIG_CLASS = PairsConfig
    _RUN_JOB = staticmethod(run_pairs)
    _INDEX_KEY = keys.PAIR_INDEX_KEY

    def _move_index(self, run_dir: str, record_sets: list[str], index_uri: str) -> None:
        run_artifacts.move_pair_index(run_dir, index_uri)

    def _describe_index(self, index: types.Artifact, record_sets: list[str]) -> None:
        # From the summary: a group index past `layout.MAX_GROUP_EDGES` pairs lists no edges.
        summary = layout.load_json(os.path.join(index.uri, layout.SUMMARY_FILE))
        index.set_int_custom_property(
            artifacts.NUM_PAIRS_PROPERTY, int(summary["pairs"]["num_pairs"])
        )


class AudioExecutor(_MaterializeExecutor):
    """Runs `tfx_dynamic_inputs.materialize.run_audio`; `class_index` gets each set's class
    index."""

    _CONFIG_CLASS = AudioConfig
    _RUN_JOB = staticmethod(run_audio)
    _INDEX_KEY = keys.CLASS_INDEX_KEY

    def _move_index(self, run_dir: str, record_sets: list[str], index_uri: str) -> None:
        run_artifacts.move_class_index(run_dir, record_sets, index_uri)

    def _describe_index(self, index: types.Artifact, record_sets: list[str]) -> None:
        num_classes = {}
        for record_set in record_sets:
            classes = os.path.join(layout.index_dir(index.uri, record_set), layout.CLASSES_FILE)
            num_classes[record_set] = len(layout.load_lines(classes))
        index.set_json_value_custom_property(artifacts.NUM_CLASSES_PROPERTY, num_classes)
