"""What a local pipeline run prints at its end (`tfx_dynamic_inputs.pipeline.run_local` and
`tfx_dynamic_inputs.pipeline.demo`).

`describe` gives, for one run read back from ML Metadata (`describe_run` reads the newest run of
any pipeline, the standard one or a user's own, from its ML Metadata file): each node and
whether it ran, was served from the cache, failed or never started; the URI of every output;
the inputs the Beam stage rejected, by reason (the materialize component's offset index artifact
carries the counts of its `summary.json` as custom properties, so cached runs report them too);
the trainer's metrics; and whether the model gate blessed the model (its metric against the
latest blessed model's, and why) and where Pusher pushed it. A CycleGAN run's report also says
the shape its images were stored and trained at (`image_lines`), inferred or given.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfx.components.evaluator.constants import (
    ARTIFACT_PROPERTY_BLESSING_MESSAGE_KEY as BLESSING_MESSAGE_PROPERTY,
)
from tfx.types import standard_component_specs

from tfx_dynamic_inputs import artifacts, layout
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.pipeline import config, image_shape, run_local
from tfx_dynamic_inputs.pipeline.run_local import NodeResult, OutputArtifact

STATES = {"COMPLETE": "ran", "CACHED": "cached", "FAILED": "failed"}
NOT_RUN = "not run"
# Custom properties of the standard Pusher's PushedModel output (its executor's own names).
PUSHED_PROPERTY = "pushed"
PUSHED_DESTINATION_PROPERTY = "pushed_destination"


def log_dirs(name: str, results: Mapping[str, NodeResult]) -> dict[str, str]:
    """The TensorBoard folders of a run: `<name>-training` (the trainer's ModelRun: losses,
    coverage, DET curves) and `<name>-data` (the materialize run's pictures), as they exist.

    Args:
      name: the pipeline's short name, e.g. "speaker".
      results: the run's nodes (`run_local.RunOutcome.results`).

    Returns:
      label -> folder, for `pictures.tensorboard_hint`.
    """
    from tfx_dynamic_inputs.materialize import pictures

    found = {}
    for result in results.values():
        for model_run in result.outputs.get(keys.MODEL_RUN_KEY, []):
            found[f"{name}-training"] = model_run.uri
        for offset_index in result.outputs.get(keys.OFFSET_INDEX_KEY, []):
            found[f"{name}-data"] = pictures.run_pictures_dir(offset_index.uri)
    return found


def state(result: NodeResult | None) -> str:
    """`ran`, `cached`, `failed`, or `not run` (the node never started).

    Args:
        result: the node's result, or None when it has none.

    Returns:
        The state's name.
    """
    if result is None:
        return NOT_RUN
    return STATES.get(result.state, result.state.lower())


def nodes(node_ids: Sequence[str], results: Mapping[str, NodeResult]) -> list[str]:
    """One line per node with its state, then one per output artifact with its URI.

    Args:
        node_ids: the pipeline's nodes, in order.
        results: node id -> `NodeResult` of the run.

    Returns:
        The report's lines.
    """
    lines = []
    for node_id in node_ids:
        result = results.get(node_id)
        lines.append(f"  {node_id} [{state(result)}]")
        for key, outputs in sorted(result.outputs.items() if result else ()):
            lines.extend(f"    {key:<13} {artifact.uri}" for artifact in outputs)
    return lines


def rejects(results: Mapping[str, NodeResult]) -> list[str]:
    """The Beam stage's rejects by reason; nothing when no materialize output was published.

    Args:
        results: node id -> `NodeResult` of the run.

    Returns:
        The report's lines, most frequent reason first.
    """
    lines = []
    for node_id, result in results.items():
        for offset_index in result.outputs.get(keys.OFFSET_INDEX_KEY, []):
            by_reason = offset_index.properties.get(artifacts.REJECTS_BY_REASON_PROPERTY) or {}
            records = int(offset_index.properties.get(artifacts.NUM_REJECTS_PROPERTY, 0))
            lines.append(
                f"  {node_id}: {records} input record{'' if records == 1 else 's'} rejected"
                + (
                    f" (listed in {os.path.join(offset_index.uri, layout.REJECTS_FILE)})"
                    if by_reason
                    else ""
                )
            )
            # JSON properties come back from ML Metadata as floats.
            lines.extend(
                f"    {reason:<22} {int(count)}"
                for reason, count in sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))
            )
    return lines


def trainer_metrics(results: Mapping[str, NodeResult]) -> dict[str, float] | None:
    """The trainer's metrics (its model run artifact's float properties), None if it did not
    publish them.

    Args:
        results: node id -> `NodeResult` of the run.

    Returns:
        Metric name -> value, or None.
    """
    for result in results.values():
        for model_run in result.outputs.get(keys.MODEL_RUN_KEY, []):
            return {k: v for k, v in model_run.properties.items() if isinstance(v, float)}
    return None


def blessing_and_push(results: Mapping[str, NodeResult]) -> list[str]:
    """The model gate's decision (with both metric values and the reason) and where Pusher put
    the model: "pushed to <serving dir>/<version>" or "not pushed"; nothing when no gate
    published a blessing.

    Args:
        results: node id -> `NodeResult` of the run.

    Returns:
        The report's lines.
    """
    # The gate's: a standard Evaluator's blessing (wired beside it) carries no message.
    blessings = [
        blessing
        for blessing in _outputs(results, keys.BLESSING_KEY)
        if BLESSING_MESSAGE_PROPERTY in blessing.properties
    ]
    if not blessings:
        return []
    lines = [f"  {blessing.properties[BLESSING_MESSAGE_PROPERTY]}" for blessing in blessings]
    pushes = _outputs(results, standard_component_specs.PUSHED_MODEL_KEY)
    if not pushes:
        return [*lines, "  not pushed (Pusher did not finish)"]
    return lines + [
        f"  pushed to {pushed.properties[PUSHED_DESTINATION_PROPERTY]}"
        if pushed.properties.get(PUSHED_PROPERTY) == 1
        else "  not pushed"
        for pushed in pushes
    ]


def image_lines(
    pipeline_config: config.CycleGanConfig | config.SpeakerConfig | None,
    images: image_shape.ImageShape | None,
) -> list[str]:
    """The one line of the shape a CycleGAN run stored and trained its images at: `images`'
    (what was inferred or given, and from what), else the config's; nothing for other runs.

    Args:
        pipeline_config: the pipeline's config.
        images: what `image_shape.resolve` found, None when the run did not resolve it.

    Returns:
        The report's lines.
    """
    if images is not None:
        return [f"== {images.line()}"]
    if isinstance(pipeline_config, config.CycleGanConfig):
        size, channels = pipeline_config.image_size, pipeline_config.channels
        if size is None or channels is None:  # not resolved: the run built no pipeline
            return []
        return [f"== images: {size} x {size} px, {channels} channel{'' if channels == 1 else 's'}"]
    return []


def _outputs(results: Mapping[str, NodeResult], key: str) -> list[OutputArtifact]:
    return [artifact for result in results.values() for artifact in result.outputs.get(key, [])]


def _epochs(count: int) -> str:
    return f"{count} epoch{'' if count == 1 else 's'}"


def _cyclegan_metrics(cyclegan: config.CycleGanConfig, gan: Mapping[str, float]) -> list[str]:
    return [
        f"CycleGAN ({_epochs(cyclegan.num_epochs)} on dynamic pairs, batch {cyclegan.batch_size})",
        f"  cycle loss         {gan['cycle_loss_first_epoch']:.4f} (epoch 1) -> "
        f"{gan['cycle_loss_last_epoch']:.4f} (epoch {int(gan['epochs'])})",
        *(
            f"  {name:<18} {gan[name]:.4f} (last epoch)"
            for name in ("identity_loss", "generator_adv_loss", "discriminator_loss")
        ),
        *(
            [
                f"  held-out cycle loss {gan['val_cycle_loss']:.4f} on {cyclegan.held_out} x and "
                f"{cyclegan.held_out} y images never trained on (last epoch)"
            ]
            if "val_cycle_loss" in gan
            else []
        ),
        f"  pair coverage      {gan['pair_coverage_epoch']:.1%} of the valid pairs in the last "
        f"epoch, {gan['pair_coverage_total']:.1%} over all epochs; invalid pairs served: "
        f"{int(gan['invalid_pairs'])}",
    ]


def _speaker_metrics(speaker: config.SpeakerConfig, eer: Mapping[str, float]) -> list[str]:
    return [
        f"speaker embedding ({_epochs(speaker.num_epochs)}, batches of "
        f"{speaker.n_classes_per_batch} speakers x {speaker.n_samples_per_class} utterances)",
        f"  EER on {int(eer['num_speakers'])} held-out speakers ({int(eer['num_utterances'])} "
        f"utterances): {eer['eer']:.1%} (untrained network: {eer['eer_before_training']:.1%}, "
        f"chance: {eer['eer_chance']:.0%})",
    ]


_HEADLINES: dict[type, Callable[[Any, Mapping[str, float]], list[str]]] = {
    config.CycleGanConfig: _cyclegan_metrics,
    config.SpeakerConfig: _speaker_metrics,
}


def metrics(
    pipeline_config: config.CycleGanConfig | config.SpeakerConfig | None,
    values: Mapping[str, float],
) -> list[str]:
    """The headline of the pipeline's own trainer module, or every metric by name where the
    trainer (a custom `trainer_module`) did not report the headline's metrics, or for another
    pipeline.

    Args:
        pipeline_config: the pipeline's config (its type picks the headline); None for a
            pipeline of neither demo.
        values: the trainer's metrics (`trainer_metrics`).

    Returns:
        The headline line, then one line per figure.
    """
    try:
        return _HEADLINES[type(pipeline_config)](pipeline_config, values)
    except KeyError:
        return ["trainer metrics", *(f"  {k:<24} {v:.6g}" for k, v in sorted(values.items()))]


def describe_run(metadata_path: str, pipeline_name: str) -> str:
    """The report (`describe`) of the newest run of `pipeline_name` recorded at `metadata_path`,
    nodes in the order they ran: for any pipeline run with LocalDagRunner, e.g.
    `standard_pipeline`'s or a user's own.

    Args:
        metadata_path: the run's sqlite ML Metadata file.
        pipeline_name: the pipeline's name.

    Returns:
        The report, lines joined with newlines.

    Raises:
        LookupError: no run of the pipeline is recorded there.

    Example:
        print(describe_run("out/standard/metadata.sqlite", "standard"))
    """
    results = run_local.latest_run(metadata_path, pipeline_name)
    return describe(f"{pipeline_name} ({metadata_path})", None, list(results), results)


def describe(
    title: str,
    pipeline_config: config.CycleGanConfig | config.SpeakerConfig | None,
    node_ids: Sequence[str],
    results: Mapping[str, NodeResult],
    images: image_shape.ImageShape | None = None,
) -> str:
    """The report of one run: nodes and artifact URIs, the images' shape (CycleGAN), rejects by
    reason, metrics, the blessing and the push.

    Args:
        title: the report's first line, e.g. the pipeline name and work dir.
        pipeline_config: the pipeline's config (it picks the metrics' headline); None for a
            pipeline of neither demo: every metric by name.
        node_ids: the pipeline's nodes, in order.
        results: node id -> `NodeResult` of the run.
        images: the CycleGAN images' shape and where it came from (`image_shape.resolve`);
            None: the config's, said without its source.

    Returns:
        The report, lines joined with newlines.

    Example:
        print(describe("speaker", config, outcome.node_ids, outcome.results))
    """
    lines = [f"== {title}", *nodes(node_ids, results), *image_lines(pipeline_config, images)]
    reject_lines = rejects(results)
    if reject_lines:
        lines += ["== rejects by reason", *reject_lines]
    values = trainer_metrics(results)
    if values is not None:
        headline, *rest = metrics(pipeline_config, values)
        lines += [f"== {headline}", *rest]
    gate_lines = blessing_and_push(results)
    if gate_lines:
        lines += ["== model gate and push", *gate_lines]
    return "\n".join(lines)
