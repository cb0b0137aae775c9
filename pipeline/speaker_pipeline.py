"""The speaker pipeline: manifest (or speaker folders) + audio -> speaker embedding on
class-balanced batches.

MaterializeAudio -> StatisticsGen -> ImportSchemaGen -> ExampleValidator -> ClassBalancedTrainer
-> ModelGate (held-out speakers' EER vs the latest blessed model) -> Pusher
"""

from __future__ import annotations

import functools

from tfx.orchestration.pipeline import Pipeline

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.materialize_component import MaterializeAudio
from tfx_dynamic_inputs.pipeline import common, mixed_corpora
from tfx_dynamic_inputs.pipeline.config import RunConfig, SpeakerConfig
from tfx_dynamic_inputs.trainer_component import ClassBalancedInputOptions, ClassBalancedTrainer

TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"


def create_pipeline(config: SpeakerConfig, run: RunConfig) -> Pipeline:
    """The speaker pipeline of `config` (`common.training_pipeline` after MaterializeAudio, its
    trainer node `ClassBalancedTrainer` on `train`, evaluated on `eval` when `config` holds
    speakers out), writing where `run` says.

    Args:
        config: the pipeline's settings (data, features, training, gate).
        run: where it runs: pipeline root, ML Metadata, caching, Beam arguments.

    Returns:
        The TFX pipeline.

    Example:

        create_pipeline(SpeakerConfig(), RunConfig(pipeline_root="/tmp/root"))
    """
    materialize = _materialize(config, run)
    # A mix: each further corpus its own MaterializeAudio, its class index mixed by the trainer.
    corpora = mixed_corpora.mixed_corpora(config)
    mixed = [
        _materialize(mixed_corpora.corpus_config(config, corpus), run).with_id(
            f"MaterializeAudio_mix{number}"
        )
        for number, corpus in enumerate(corpora, start=1)
    ]
    mix_arguments = {}
    if mixed:
        mix_arguments = {
            # One corpus more: its channel itself (what Kubeflow's compiler takes); more: a list,
            # which the trainer joins (LocalDagRunner only: KFP v2 takes one channel an input).
            "mixed_class_index": mixed[0].outputs[keys.CLASS_INDEX_KEY]
            if len(mixed) == 1
            else [m.outputs[keys.CLASS_INDEX_KEY] for m in mixed],
            "run_weights": (1.0, *(corpus.weight for corpus in corpora)),
            "mix_weighting": config.mix_weighting,
        }
    # The speaker augmentation's noise clips and RIRs: folders materialized by the same job.
    clips = {
        key: MaterializeAudio(
            manifest=None,
            root=folder,
            speaker_from_path=True,
            sample_rate=config.sample_rate,
            eval_fraction=0.0,
            num_shards=1,
            max_reject_fraction=config.max_reject_fraction,
            input_fingerprint=(
                common.input_fingerprint([folder]) if run.fingerprint_inputs else None
            ),
        ).with_id(component_id)
        for key, folder, component_id in (
            (keys.NOISE_EXAMPLES_KEY, config.noise_dir, "MaterializeNoise"),
            (keys.RIR_EXAMPLES_KEY, config.rir_dir, "MaterializeRirs"),
        )
        if folder is not None
    }
    return common.training_pipeline(
        config,
        run,
        materialize,
        keys.CLASS_INDEX_KEY,
        functools.partial(
            ClassBalancedTrainer,
            **{key: clip.outputs[keys.EXAMPLES_KEY] for key, clip in clips.items()},
            n_classes_per_batch=config.n_classes_per_batch,
            n_samples_per_class=config.n_samples_per_class,
            train_split=TRAIN_SPLIT,
            eval_split=EVAL_SPLIT if config.eval_fraction > 0 else None,
            input_options=ClassBalancedInputOptions(
                epoch_mode=config.epoch_mode,
                max_draws_per_record=config.max_draws_per_record,
                features=config.feature_options(),
                run_weights=mix_arguments.pop("run_weights", None),
                mix_weighting=mix_arguments.pop("mix_weighting", "classes"),
                augment=config.augment_options(),
            ),
            custom_config=dict(config.custom_config),
            **mix_arguments,
        ),
        upstream=[*mixed, *clips.values()],
    )


def _materialize(config: SpeakerConfig, run: RunConfig) -> MaterializeAudio:
    """The MaterializeAudio of `config`'s corpus, split by speaker."""
    return MaterializeAudio(
        manifest=None if config.speaker_from_path else config.manifest,
        root=config.audio_root,
        speaker_from_path=config.speaker_from_path or None,
        sample_rate=config.sample_rate,
        split_mode="speaker",
        eval_fraction=config.eval_fraction,
        split_seed=config.split_seed,
        **common.materialize_parameters(config, run),
    )
