"""Local runs: LocalDagRunner, sqlite ML Metadata, Beam DirectRunner; and what a run produced.

    python -m tfx_dynamic_inputs.pipeline.run_local speaker --manifest M --audio_root R [...]
    python -m tfx_dynamic_inputs.pipeline.run_local cyclegan --x_dir X --y_dir Y --pairs P [...]
    python -m tfx_dynamic_inputs.pipeline.run_local {speaker,cyclegan} --config FILE [flags]

(`[...]`: `--work_dir W` and the other flags; flags given with `--config` override the file.)

Every field of `SpeakerConfig` / `CycleGanConfig` and the local run settings (`enable_cache`,
`beam_pipeline_args`, `fingerprint_inputs`) is a flag of the same name
(`tfx_dynamic_inputs.pipeline.cli`; `--help` lists them). Without data flags a pipeline runs on
the bundled sample data (the CycleGAN digit domains are written to `<work_dir>/digits`). The run's
pipeline root and sqlite ML Metadata live under `--work_dir` (default
`tfx-dynamic-inputs-out/local` below the current folder), so a second run with unchanged inputs is
served from the cache; a run claims its work dir while it runs, so a second one started there
meanwhile is refused in one line naming the first (`work_dir_claim`). At the end it prints each
node (ran / cached / failed / not run), every output URI, the Beam stage's rejects by reason and
the trainer's metrics; a failed run then ends with `error: <the failed component's own error>` and
exit status 1. A bad flag or config key, or a work dir in use, ends with one `error:` line and
exit status 2; Ctrl-C, with one line naming the nodes done and status 130 (`interrupted_line`).

`run(pipeline)` executes a pipeline in this process; `execute` also catches its failure and
reads back the run. `latest_run(metadata_path, name)` reads back from ML Metadata what the
newest run of a pipeline did: per node, whether it executed or was served from the cache, and
the URIs and custom properties of its outputs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Any

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_dynamic_inputs.cli_flags import quiet
from tfx_dynamic_inputs.interrupts import EXIT_INTERRUPTED, watching_interrupts
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.pipeline import (
    cli,
    config,
    config_checks,
    image_shape,
    mixed_corpora,
    speakers,
    work_dir_claim,
)
from tfx_dynamic_inputs.pipeline.sample_data import write_digit_domains

if TYPE_CHECKING:
    from tfx.orchestration.pipeline import Pipeline

PIPELINE_CONTEXT = "pipeline"
RUN_CONTEXT = "pipeline_run"
NODE_CONTEXT = "node"
METADATA_FILE = "metadata.sqlite"
PIPELINE_ROOT_DIR = "pipeline_root"
DIGITS_DIR = "digits"

# What TFX logs for every channel it resolves, predicate or not (`_UnconditionalQueryWarning`).
UNCONDITIONAL_QUERY_WARNING = "ArtifactQuery.property_predicate is not supported."

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
        """The URI of the node's one output artifact under `key`.

        Args:
            key: the output's key, e.g. `component_keys.MODEL_RUN_KEY`.

        Returns:
            The artifact's URI.

        Raises:
            KeyError: when the node has no such output.
            ValueError: when it has not exactly one artifact there.
        """
        [artifact] = self.outputs[key]
        return artifact.uri


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """A finished local run: its nodes in pipeline order, what ML Metadata recorded of them, and
    the failed component's own error, None when the run succeeded."""

    node_ids: list[str]
    results: dict[str, NodeResult]
    error: str | None


def run(pipeline: Pipeline) -> None:
    """Runs `pipeline` to completion in this process (raises if a component fails).

    Args:
        pipeline: the TFX pipeline (its metadata connection config says where MLMD is).

    Example:
        run(speaker_pipeline.create_pipeline(SpeakerConfig(), run_config("/tmp/work")))
    """
    # Imported here, as in `main`: a bad flag of `python -m tfx_dynamic_inputs.pipeline.run_local`
    # is answered before TFX's import (10-25 s, and pages of warnings).
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    absl_log = logging.getLogger("absl")  # absl's own logger, TFX having imported it
    if not any(isinstance(f, _UnconditionalQueryWarning) for f in absl_log.filters):
        absl_log.addFilter(_UnconditionalQueryWarning())
    LocalDagRunner().run(pipeline)


class _UnconditionalQueryWarning(logging.Filter):
    """Drops TFX 1.16's "ArtifactQuery.property_predicate is not supported." (`channel_resolver.
    _filter_by_artifact_query`): it tests the truth of a protobuf sub-message, which is always
    true, so it warns for every input channel it resolves (10 a CycleGAN run), of no predicate
    any pipeline set."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != UNCONDITIONAL_QUERY_WARNING


def execute(
    pipeline: Pipeline,
    metadata_path: str,
    interrupted: threading.Event | None = None,
) -> RunOutcome:
    """Runs `pipeline` like `run`, but a failed run is an outcome with its error, not a raise.

    A MaterializeError is the Beam stage's verdict, written for the user: its message is the
    error. Any other failure prints its traceback to stderr first, as nothing else shows it
    (the orchestrator logs only that the execution failed).

    Args:
        pipeline: the TFX pipeline.
        metadata_path: its sqlite ML Metadata file, read for the results.
        interrupted: set by a SIGINT handler (`interrupts.watching_interrupts`): a failure
            once it is set is the interrupt, whatever error a runner made of it.

    Returns:
        The `RunOutcome`.

    Raises:
        LookupError: when the run succeeded but ML Metadata holds no run of the pipeline.
        KeyboardInterrupt: the run was interrupted.

    Example:
        outcome = execute(pipeline, run_settings.metadata_path); print(outcome.error)
    """
    error = None
    try:
        run(pipeline)
    except Exception as failure:
        if interrupted is not None and interrupted.is_set():
            raise KeyboardInterrupt from failure
        cause = root_cause(failure)
        if isinstance(cause, MaterializeError):
            error = str(cause)
        else:
            traceback.print_exception(type(failure), failure, failure.__traceback__)
            error = f"{type(cause).__name__}: {cause}"
    name = pipeline.pipeline_info.pipeline_name
    try:
        results = latest_run(metadata_path, name)
    except LookupError:
        if error is None:
            raise
        results = {}  # it failed before any node ran
    return RunOutcome([component.id for component in pipeline.components], results, error)


def interrupted_line(command: str, pipeline: Pipeline, run_settings: config.RunConfig) -> str:
    """What `run_local` says when interrupted: the nodes the newest run recorded as done, and
    that the same command resumes from them (ML Metadata's cache).

    Args:
        command: the subcommand (``"speaker"`` or ``"cyclegan"``).
        pipeline: the pipeline that was running.
        run_settings: its run settings (where ML Metadata is, whether the cache is on).

    Returns:
        One line.
    """
    name = pipeline.pipeline_info.pipeline_name
    try:
        results = latest_run(run_settings.metadata_path, name)
    except (LookupError, RuntimeError):  # no run recorded yet, or a store left unreadable
        results = {}
    done = [node for node in results if results[node].state in ("COMPLETE", "CACHED")]
    resumes = (
        "the same command resumes from them (ML Metadata's cache)"
        if run_settings.enable_cache
        else "the cache is off (--enable_cache false): the same command starts again"
    )
    return (
        f"run_local {command}: interrupted; done in the newest run: "
        f"{', '.join(done) if done else 'no node'}; {resumes}"
    )


def root_cause(error: BaseException) -> BaseException:
    """The first exception of the chain Python would print for `error`.

    LocalDagRunner cleans up a failed execution's outputs, and when that cleanup fails itself
    (e.g. a `NotFoundError` for the output folder the component never wrote), that is what
    it raises, with the component's error as its context.

    Args:
        error: the exception raised.

    Returns:
        The first of its chain (`error` itself when it has no cause or context).
    """
    while True:
        parent = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
        if parent is None:
            return error
        error = parent


def run_config(
    work_dir: str,
    *,
    enable_cache: bool = config.RunConfig.enable_cache,
    beam_pipeline_args: tuple[str, ...] = config.RunConfig.beam_pipeline_args,
    fingerprint_inputs: bool = config.RunConfig.fingerprint_inputs,
) -> config.RunConfig:
    """A local `RunConfig` under `work_dir`: pipeline root and one shared sqlite MLMD file.

    Args:
        work_dir: the folder of local runs.
        enable_cache: as `RunConfig.enable_cache` (and its default).
        beam_pipeline_args: as `RunConfig.beam_pipeline_args`.
        fingerprint_inputs: as `RunConfig.fingerprint_inputs`.

    Returns:
        The `RunConfig`.

    Example:
        run_config("/tmp/work", enable_cache=False).metadata_path  # under /tmp/work
    """
    return config.RunConfig(
        pipeline_root=os.path.join(work_dir, PIPELINE_ROOT_DIR),
        metadata_path=os.path.join(work_dir, METADATA_FILE),
        enable_cache=enable_cache,
        beam_pipeline_args=beam_pipeline_args,
        fingerprint_inputs=fingerprint_inputs,
    )


def cyclegan_config(
    digits_dir: str,
    *,
    image_size: int = config.DIGITS_IMAGE_SIZE,
    groups_from_subfolder: bool = config.CycleGanConfig.groups_from_subfolder,
) -> config.CycleGanConfig:
    """The CycleGAN config over the bundled digit domains, written to `digits_dir` if needed.

    Its other fields keep `CycleGanConfig`'s defaults; set them with `dataclasses.replace`, which
    checks the new config whole.

    Args:
        digits_dir: where the digit domains and their pair list are (or are written).
        image_size: the side of the digit images written, and the config's `image_size` (its
            `channels` is the digits' 1).
        groups_from_subfolder: pair each x with any y of its digit (the domains' folders are
            their classes) instead of by the written pair list, which is then not read.

    Returns:
        The `CycleGanConfig`.

    Example:
        gan = dataclasses.replace(cyclegan_config("/tmp/digits", image_size=8), num_epochs=1)
    """
    domains = write_digit_domains(digits_dir, image_size=image_size)
    return config.CycleGanConfig(
        x_dir=domains.x_dir,
        y_dir=domains.y_dir,
        pairs=None if groups_from_subfolder else domains.pairs_path,
        groups_from_subfolder=groups_from_subfolder,
        image_size=image_size,
        channels=config.DIGITS_CHANNELS,
    )


def latest_run(metadata_path: str, pipeline_name: str) -> dict[str, NodeResult]:
    """Node id -> `NodeResult` of the newest run of `pipeline_name` recorded at `metadata_path`.

    Args:
        metadata_path: the sqlite ML Metadata file (opened read-only).
        pipeline_name: the pipeline's name.

    Returns:
        Node id -> `NodeResult`, for the nodes that ran (or were cached) in that run.

    Raises:
        LookupError: when there is no run of the pipeline.

    Example:
        latest_run(run_settings.metadata_path, config.pipeline_name)["ClassBalancedTrainer"].state
    """
    if not os.path.isfile(metadata_path):  # the read-only store would fail to open it
        raise LookupError(f"no run of pipeline {pipeline_name!r}: {metadata_path} does not exist")
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


def local_configs(
    args: cli.LocalArgs,
) -> tuple[config.CycleGanConfig | config.SpeakerConfig, config.RunConfig]:
    """The pipeline and run configs of `args`; without data paths, the bundled sample data.

    Args:
        args: the checked flags (`cli.parse_local_args`).

    Returns:
        `(pipeline config, run config)`.
    """
    run_fields = dict(args.run)
    work_dir = run_fields.pop(cli.WORK_DIR)
    run_settings = run_config(work_dir, **run_fields)
    try:
        if args.pipeline == "speaker":
            return config.SpeakerConfig(**args.settings), run_settings
        if args.bundled_data:
            settings = dict(args.settings)
            # Checked before the digits are drawn at that size (none: the digits' own).
            image_size = settings.pop("image_size", None)
            image_size = config_checks.check_image_size(
                config.DIGITS_IMAGE_SIZE if image_size is None else image_size
            )
            bundled = cyclegan_config(
                os.path.join(work_dir, DIGITS_DIR),
                image_size=image_size,
                groups_from_subfolder=settings.pop(
                    "groups_from_subfolder", config.CycleGanConfig.groups_from_subfolder
                ),
            )
            if settings.get("x_groups") is not None:  # groups files replace the pair list
                settings["pairs"] = None
            return dataclasses.replace(bundled, **settings), run_settings
        return config.CycleGanConfig(**args.settings), run_settings
    except (ValueError, TypeError) as error:  # a config's own checks: one line
        raise cli.ConfigError(str(error)) from None
    except OSError as error:  # the bundled digits: e.g. written there at another size
        raise cli.ConfigError(f"--work_dir {work_dir}: the bundled digits: {error}") from None


# The data fields of the pipeline configs: a file, or a folder, that must exist before a run.
_INPUT_FILES = ("manifest", "pairs", "x_groups", "y_groups")
_INPUT_DIRS = ("audio_root", "x_dir", "y_dir", "noise_dir", "rir_dir")


def check_inputs(pipeline_config: config.CycleGanConfig | config.SpeakerConfig) -> None:
    """Raises `cli.ConfigError` naming the first local input path that does not exist (or is not
    a file / folder): said in one line before TFX loads (10-25 s), not as a traceback from the
    input fingerprint.

    Args:
        pipeline_config: the pipeline's config.

    Raises:
        cli.ConfigError: naming the missing path.
    """
    for names, is_kind, kind in (
        (_INPUT_FILES, os.path.isfile, "file"),
        (_INPUT_DIRS, os.path.isdir, "folder"),
    ):
        for name in names:
            path = getattr(pipeline_config, name, None)
            if path and "://" not in path and not is_kind(path):
                if name == "manifest" and getattr(pipeline_config, "speaker_from_path", False):
                    continue
                raise cli.ConfigError(f"--{name}: no such {kind}: {path}")


def resolve_images(
    pipeline_config: config.CycleGanConfig,
) -> tuple[config.CycleGanConfig, image_shape.ImageShape]:
    """`image_shape.resolve`, said before the run: the images' side and channels (inferred or
    given) in one line on stdout, and on stderr the warning line when given values shrink most
    images or drop their colour (summary.json used to be the only place that said so).

    Args:
        pipeline_config: the CycleGAN config, its input folders checked (`check_inputs`).

    Returns:
        `(config with image_size and channels set, ImageShape)`.

    Raises:
        cli.ConfigError: one line, when they cannot be inferred or the side does not suit the
            networks.
    """
    try:
        resolved, shape = image_shape.resolve(pipeline_config)
    except (ValueError, OSError) as error:
        raise cli.ConfigError(str(error)) from None
    print(f"run_local cyclegan: {shape.line()}", flush=True)
    warning = shape.warning()
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    return resolved, shape


def main(argv: list[str] | None = None) -> int:
    """Runs the pipeline `argv` asks for; 0 when it succeeded, 1 when it failed, 130 when it
    was interrupted. It holds the claim on its work dir while it runs (`work_dir_claim.claimed`): a
    second run there is refused in one line naming the first.

    Args:
        argv: the arguments without the program name; None reads `sys.argv`.

    Raises:
        SystemExit: status 2 for a bad flag, config or input path, or a work dir in use by
            another run (`cli.fail`).

    Example:
        main(["speaker", "--num_epochs", "1", "--work_dir", "/tmp/work"])
    """
    try:
        args = cli.parse_local_args(argv)
    except cli.ConfigError as error:
        cli.fail(error)
    quiet(args.verbose)  # before TFX's import
    try:
        with work_dir_claim.claimed(args.run[cli.WORK_DIR]):
            return _run_claimed(args)
    except cli.ConfigError as error:
        cli.fail(error)


def _run_claimed(args: cli.LocalArgs) -> int:
    """`main` once the work dir is claimed: checks, runs, reports; ConfigError before TFX."""
    pipeline_config, run_settings = local_configs(args)
    check_inputs(pipeline_config)
    images = None
    if isinstance(pipeline_config, config.SpeakerConfig):
        speakers.check_speakers(pipeline_config)
        mixed_corpora.mixed_corpora(pipeline_config)  # a bad --mix file: one line, now
    else:
        pipeline_config, images = resolve_images(pipeline_config)
    from tfx_dynamic_inputs.pipeline import (  # they import TFX: see `run`
        cyclegan_pipeline,
        report,
        speaker_pipeline,
    )

    factory = cyclegan_pipeline if args.pipeline == "cyclegan" else speaker_pipeline
    pipeline = factory.create_pipeline(pipeline_config, run_settings)
    with watching_interrupts() as interrupted:
        try:
            outcome = execute(pipeline, run_settings.metadata_path, interrupted)
        except KeyboardInterrupt:
            print(interrupted_line(args.pipeline, pipeline, run_settings), file=sys.stderr)
            return EXIT_INTERRUPTED
    title = f"{pipeline_config.pipeline_name} ({args.run[cli.WORK_DIR]})"
    print(report.describe(title, pipeline_config, outcome.node_ids, outcome.results, images))
    print(f"ML Metadata: {run_settings.metadata_path}", flush=True)
    if outcome.error is not None:
        print(f"error: {outcome.error}", file=sys.stderr)
        return 1
    from tfx_dynamic_inputs.materialize import pictures

    print(pictures.tensorboard_hint(report.log_dirs(args.pipeline, outcome.results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
