"""Trainer user module: a speaker-embedding net on class-balanced batches, scored by EER.

`fn_args.train_dataset` yields `{"features": float32 [B, T, n_mels] log-mel, "lengths": int32
[B], "label": int64 [B], "index": int64 [B]}` with B = n_classes_per_batch *
n_samples_per_class, grouped by class. `fn_args.eval_dataset` holds held-out speakers in plain
batches; every pair of its utterances is a verification trial.

`custom_config` keys read here (others are left to the executor): `n_samples_per_class`
(required), `n_classes_per_batch` (checked against the batch size when that is static),
`loss` ("ge2e", "angular_prototypical" or "aam_softmax"), `num_train_classes` (aam_softmax
only), `learning_rate` (1e-3), `channels` (128), `embedding_dim` (128),
`max_eval_utterances` (4000), `seed` (0), and for the export: `audio_features` (the
`AudioFeatureConfig` fields the batches were computed with; without it, the defaults with
`sample_rate` (16000) and the batches' n_mels), `serving_audio_formats` (["wav"]; add "flac"
for FLAC files, which makes the SavedModel need tensorflow-io to load).

The SavedModel (`serving.export_speaker_model`) takes waveforms (`serving_default`), audio files
or log-mel features and runs the trainer's evaluation front end in the graph.

TensorBoard, under `fn_args.model_run_dir`: the Keras scalars (`train/`), and at each
evaluation (step 0 before training, step `epochs` after) the EER, the DET curve and the target /
non-target score histograms (`verification.write_verification_summaries`). Both pictures are
also PNG files beside the events, for people without TensorBoard:
`eval_det_curve_step<step>.png` and `eval_score_distributions_step<step>.png`.
"""

from __future__ import annotations

import logging

import keras
import tensorflow as tf

from tfx_dynamic_inputs.inputs.audio_config import AudioFeatureConfig
from tfx_dynamic_inputs.models import serving, speaker, verification
from tfx_dynamic_inputs.trainer_modules import training_log

CHANCE_EER = 0.5


def _n_mels(fn_args, n_classes_per_batch: int | None, n_samples_per_class: int) -> int:
    spec = fn_args.train_dataset.element_spec
    required = (speaker.FEATURES_KEY, speaker.LENGTHS_KEY, speaker.LABEL_KEY)
    if not isinstance(spec, dict) or any(key not in spec for key in required):
        raise ValueError(
            f"the speaker trainer needs batches with keys {required}; train_dataset yields {spec}"
        )
    features = spec[speaker.FEATURES_KEY].shape
    if features.rank != 3 or features[-1] is None:
        raise ValueError(f"'features' must be [B, T, n_mels] with known n_mels, got {features}")
    batch_size = features[0]
    if batch_size is not None:
        if batch_size % n_samples_per_class:
            raise ValueError(
                f"batch size {batch_size} is not a multiple of n_samples_per_class="
                f"{n_samples_per_class}"
            )
        if (
            n_classes_per_batch is not None
            and batch_size != n_classes_per_batch * n_samples_per_class
        ):
            raise ValueError(
                f"batch size {batch_size} != n_classes_per_batch * n_samples_per_class = "
                f"{n_classes_per_batch} * {n_samples_per_class}"
            )
    return int(features[-1])


def _front_end(config: dict, n_mels: int) -> AudioFeatureConfig:
    """The `AudioFeatureConfig` the batches were computed with, which the export runs in the
    graph."""
    values = config.get("audio_features")
    if values is None:
        # What the executor builds from input options that set only these two fields.
        values = {"sample_rate": int(config.get("sample_rate", 16000)), "num_mel_bins": n_mels}
    # SpecAugment is training-only: the export runs the evaluation front end, which drops it.
    features = AudioFeatureConfig(**{k: v for k, v in values.items() if k != "spec_augment"})
    if features.num_mel_bins != n_mels:
        raise ValueError(
            f"custom_config audio_features has num_mel_bins={features.num_mel_bins} but the "
            f"batches hold {n_mels} mel bins"
        )
    return features


def run_fn(fn_args) -> dict[str, float]:
    """Trains the embedding net, scores held-out speakers, exports the net with its front end.

    Returns `eer` (held-out speakers, after training), `eer_chance` (0.5, for reference),
    `eer_before_training` (the same trials scored by the untrained net), `eer_threshold`, the
    trial counts, `loss_first_epoch`, `loss_last_epoch`, `epochs`, and the last epoch's logs
    (`loss` and whatever the callbacks logged).

    Args:
        fn_args: the trainer's `FnArgs`: `train_dataset` (class-balanced batches of
            `n_classes_per_batch` x `n_samples_per_class` utterances), `eval_dataset` (held-out
            speakers), `num_epochs`, `serving_model_dir`, `model_run_dir`, `custom_config`
            (must hold `n_samples_per_class`).

    Returns:
        Metric name -> float, as above.

    Raises:
        ValueError: when `fn_args` lacks a required attribute, `eval_dataset` or
            `custom_config["n_samples_per_class"]`, or an export setting is bad.
        RuntimeError: when training diverged.
    """
    training_log.check_common_args(fn_args)
    eval_dataset = getattr(fn_args, "eval_dataset", None)
    if eval_dataset is None:
        raise ValueError(
            "the speaker trainer reports the EER on held-out speakers: fn_args.eval_dataset "
            "is required"
        )
    config = dict(fn_args.custom_config or {})
    if "n_samples_per_class" not in config:
        raise ValueError("custom_config must give n_samples_per_class (n_p of the batches)")
    n_samples_per_class = int(config["n_samples_per_class"])
    n_classes_per_batch = config.get("n_classes_per_batch")
    n_mels = _n_mels(
        fn_args,
        None if n_classes_per_batch is None else int(n_classes_per_batch),
        n_samples_per_class,
    )
    # Both read before training, so a bad export setting fails before hours of it.
    features = _front_end(config, n_mels)
    audio_formats = tuple(config.get("serving_audio_formats", ("wav",)))
    serving.check_audio_formats(audio_formats)
    keras.utils.set_random_seed(int(config.get("seed", 0)))
    # The trainer's class count (over a mix of runs, all their namespaced classes; speed-perturbed
    # speakers included) unless the user set one.
    num_classes = config.get("num_train_classes") or config.get("num_classes")
    # Built here, under the trainer's strategy: a resumed `fit` restores into it (and its
    # optimizer) at its start, on however many replicas this attempt has.
    with training_log.strategy_of(fn_args).scope():
        model = speaker.SpeakerEmbeddingModel(
            n_mels,
            n_samples_per_class=n_samples_per_class,
            loss=str(config.get("loss", "ge2e")),
            num_classes=num_classes,
            channels=int(config.get("channels", 128)),
            embedding_dim=int(config.get("embedding_dim", 128)),
        )
        model.compile(
            optimizer=keras.optimizers.Adam(float(config.get("learning_rate", 1e-3))),
            jit_compile=False,  # T changes between batches; XLA would recompile for each
        )
    max_eval_utterances = int(config.get("max_eval_utterances", 4000))
    # TensorBoard gets each evaluation's EER, DET curve and score histograms at the step of
    # the epochs trained so far: 0 before training, `epochs` after; the pictures go beside the
    # events as PNG files too.
    writer = tf.summary.create_file_writer(fn_args.model_run_dir)

    def evaluate(step: int) -> dict[str, float]:
        trials = verification.verification_trials(
            model.embedding_model, eval_dataset, max_utterances=max_eval_utterances
        )
        metrics = verification.verification_metrics(trials)
        with writer.as_default():
            verification.write_verification_summaries(
                trials, metrics, step, png_dir=fn_args.model_run_dir
            )
        writer.flush()
        return metrics

    before = evaluate(0)
    history, metrics = training_log.fit_and_log(model, fn_args, ["loss"])
    metrics.update(evaluate(len(history["loss"])))
    serving.export_speaker_model(
        model.embedding_model, fn_args.serving_model_dir, features, audio_formats=audio_formats
    )
    metrics.update(
        eer_chance=CHANCE_EER,
        eer_before_training=before["eer"],
        loss_first_epoch=float(history["loss"][0]),
        loss_last_epoch=float(history["loss"][-1]),
        epochs=float(len(history["loss"])),
        num_train_classes=float(num_classes or 0),
    )
    logging.info("speaker model trained: %s", metrics)
    return metrics
