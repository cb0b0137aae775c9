"""Speaker verification on held-out speakers: embeddings of held-out utterances, cosine-scored
trials, the equal error rate and DET curve, and their TensorBoard summaries (the DET curve and
target / non-target score histograms, also written as PNG files). Pure Keras 3 / numpy; no TFX.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.models import charts
from tfx_dynamic_inputs.models.speaker import FEATURES_KEY, LABEL_KEY, LENGTHS_KEY

SCORE_BINS = 40  # of the score histograms written by `write_verification_summaries`


def equal_error_rate(scores, same_speaker) -> float:
    """The equal error rate of verification trials, exactly.

    Accepting a trial when `score >= threshold`, each distinct threshold (every distinct score,
    and +inf, accepting nothing) gives an operating point: the false-acceptance rate FAR (of
    different-speaker trials) and the false-rejection rate FRR (of same-speaker trials). Joined
    in threshold order they form the ROC polyline from (FAR, FRR) = (0, 1) to (1, 0); the EER is
    where it crosses FAR = FRR. With finitely many trials that is usually between two operating
    points and is found by linear interpolation between them (the crossing is unique because
    FRR - FAR falls monotonically along the polyline). Tied scores are accepted together, so
    constant scores give 0.5, perfectly separated ones 0. O(N log N).

    Args:
        scores: float [N], higher means more likely the same speaker.
        same_speaker: bool (or 0/1) [N], the truth of each trial.

    Returns:
        The EER in [0, 1].

    Raises:
        ValueError: on mismatched lengths, non-finite scores, labels other than 0/1, or when
            the trials lack either kind.

    Example:
        equal_error_rate([0.9, 0.8, 0.3, 0.1], [True, False, True, False])  # 0.5
    """
    return _equal_error_rate_and_threshold(scores, same_speaker)[0]


def det_curve(scores, same_speaker) -> tuple[np.ndarray, np.ndarray]:
    """The operating points of verification trials: (FAR float [K], FRR float [K]).

    One point per distinct threshold, in threshold order from +inf (accept nothing: FAR 0,
    FRR 1) down to the lowest score (accept everything: FAR 1, FRR 0), so FAR never decreases
    and FRR never increases: the detection error trade-off (DET) curve, and the polyline whose
    crossing with FAR = FRR is `equal_error_rate`.

    Args:
        scores: float [N], higher means more likely the same speaker.
        same_speaker: bool (or 0/1) [N], the truth of each trial.

    Returns:
        `(far, frr)`: float64 [K] each, K the number of distinct scores + 1.

    Raises:
        ValueError: as `equal_error_rate`.

    Example:
        far, frr = det_curve(trials.scores, trials.same_speaker)
    """
    far, frr, _ = _operating_points(scores, same_speaker)
    return far, frr


def _operating_points(scores, same_speaker) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FAR [K], FRR [K] and the threshold of each point [K] (accept `score >= threshold`;
    +inf at the first point)."""
    scores = np.asarray(scores).ravel()
    if not np.issubdtype(scores.dtype, np.floating):
        scores = scores.astype(np.float64)
    same_speaker = np.asarray(same_speaker).ravel()
    if same_speaker.dtype != np.bool_:
        if not np.isin(same_speaker, (0, 1)).all():
            raise ValueError("same_speaker must be boolean (or 0/1)")
        same_speaker = same_speaker.astype(bool)
    if scores.shape != same_speaker.shape:
        raise ValueError(
            f"scores and same_speaker differ in length: {scores.size} vs {same_speaker.size}"
        )
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    num_target = int(np.count_nonzero(same_speaker))
    num_nontarget = same_speaker.size - num_target
    if num_target == 0 or num_nontarget == 0:
        raise ValueError(
            "need both same-speaker and different-speaker trials, got "
            f"{num_target} and {num_nontarget}"
        )
    # Any order of tied scores will do: only the boundaries between distinct scores are used.
    order = np.argsort(scores)[::-1]
    sorted_scores = scores[order]
    # Accepting the k best-scoring trials, k = 0..N; only k at a change of score (or the ends)
    # is reachable by a threshold, since tied scores are accepted together.
    accepted_targets = np.concatenate([[0], np.cumsum(same_speaker[order])])
    accepted_nontargets = np.arange(scores.size + 1) - accepted_targets
    reachable = np.flatnonzero(
        np.concatenate([[True], sorted_scores[1:] != sorted_scores[:-1], [True]])
    )
    far = accepted_nontargets[reachable] / num_nontarget
    frr = 1.0 - accepted_targets[reachable] / num_target
    # Accepting the k best trials is the threshold "score >= the k-th best score".
    thresholds = np.concatenate([[np.inf], sorted_scores[reachable[1:] - 1]])
    return far, frr, thresholds


def _equal_error_rate_and_threshold(scores, same_speaker) -> tuple[float, float]:
    """The EER and the threshold of the first operating point with FRR <= FAR."""
    far, frr, thresholds = _operating_points(scores, same_speaker)
    gap = frr - far  # 1 at k = 0, -1 at k = N, non-increasing in between
    crossed = int(np.argmax(gap <= 0))
    if gap[crossed] == 0:
        eer = far[crossed]
    else:
        before = crossed - 1
        fraction = gap[before] / (gap[before] - gap[crossed])
        eer = far[before] + fraction * (far[crossed] - far[before])
    return float(eer), float(thresholds[crossed])


def embed(
    embedding_model: keras.Model,
    batches: Iterable,
    *,
    max_utterances: int | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """L2-normalized embeddings and labels of the utterances of `batches`.

    With `max_utterances`, a uniform random sample of at most that many utterances, drawn by
    reservoir sampling as the batches stream past: memory stays at `max_utterances` rows however
    large the data, and the sample depends only on `seed` and the utterance order.

    Args:
        embedding_model: Maps `[features, lengths]` to embeddings (`build_embedding_model`).
        batches: An iterable (e.g. `tf.data.Dataset`) of dicts with "features" float32
            [B, T, n_mels], "lengths" int [B] and "label" int [B].
        max_utterances: The most utterances kept; None keeps all.
        seed: Picks the sample.

    Returns:
        `(embeddings, labels)`: float32 [N, D], unit length, and int64 [N].

    Raises:
        ValueError: `batches` holds no utterance.
    """
    n_mels = embedding_model.inputs[0].shape[-1]

    # One trace for every batch shape.
    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None, n_mels], tf.float32),
            tf.TensorSpec([None], tf.int32),
        ]
    )
    def normalized_embeddings(features, lengths):
        return tf.math.l2_normalize(embedding_model([features, lengths], training=False), axis=-1)

    def embedded_batches():
        for batch in batches:
            output = normalized_embeddings(
                tf.convert_to_tensor(batch[FEATURES_KEY], tf.float32),
                tf.cast(batch[LENGTHS_KEY], tf.int32),
            )
            yield output.numpy(), np.asarray(batch[LABEL_KEY], np.int64).reshape(-1)

    return reservoir_sample(embedded_batches(), max_utterances, seed)


def reservoir_sample(
    batches: Iterable[tuple[np.ndarray, np.ndarray]], max_rows: int | None, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A uniform sample of at most `max_rows` rows of a stream of batches, by Algorithm R.

    Memory is O(max_rows * D); the sample depends only on `seed` and the row order.

    Args:
        batches: `(rows [n, D], labels [n])` pairs of numpy arrays (n may vary).
        max_rows: The most rows kept; None keeps all.
        seed: Seeds the sample.

    Returns:
        `(rows, labels)`: [N, D] of the rows' dtype and int64 [N], N <= `max_rows`.

    Raises:
        ValueError: the stream holds no row.

    Example:
        rows, labels = reservoir_sample([(np.eye(3), np.arange(3))], max_rows=2)
    """
    rng = np.random.default_rng(seed)
    kept_rows: list[np.ndarray] = []
    kept_labels: list[int] = []
    seen = 0
    for rows, labels in batches:
        for row, label in zip(rows, labels, strict=True):
            if max_rows is None or seen < max_rows:
                kept_rows.append(row)
                kept_labels.append(int(label))
            else:
                slot = int(rng.integers(0, seen + 1))
                if slot < max_rows:
                    kept_rows[slot] = row
                    kept_labels[slot] = int(label)
            seen += 1
    if not kept_rows:
        raise ValueError("the evaluation data has no utterances")
    return np.stack(kept_rows), np.asarray(kept_labels, np.int64)


class VerificationTrials(NamedTuple):
    """Every pair of N evaluated utterances as one trial (M = N(N-1)/2 trials).

    Attributes:
        scores: float32 [M], the cosine similarity of each trial.
        same_speaker: bool [M], whether a trial is a target trial.
        labels: int64 [N], the utterances' speakers.
    """

    scores: np.ndarray  # float32 [M], cosine similarity
    same_speaker: np.ndarray  # bool [M], a target trial
    labels: np.ndarray  # int64 [N], the utterances' speakers


def verification_trials(
    embedding_model: keras.Model,
    batches: Iterable,
    *,
    max_utterances: int = 4000,
    seed: int = 0,
) -> VerificationTrials:
    """Scores every pair of the utterances of `batches`; a pair is a target trial when both
    share a label.

    Above `max_utterances` a seeded uniform sample is scored (see `embed`): the trials grow as
    N^2, and memory stays bounded however large the evaluation set.

    Args:
        embedding_model: Maps `[features, lengths]` to embeddings.
        batches: An iterable (e.g. `tf.data.Dataset`) of dicts with `features`, `lengths`,
            `label`; held-out speakers, any batch order.
        max_utterances: The most utterances scored.
        seed: Picks the sample.

    Returns:
        The trials of every pair of the (sampled) utterances.

    Raises:
        ValueError: `batches` holds no utterance, or utterances of fewer than two speakers.

    Example:
        trials = verification_trials(net, held_out_dataset, max_utterances=2000)
    """
    embeddings, labels = embed(embedding_model, batches, max_utterances=max_utterances, seed=seed)
    if np.unique(labels).size < 2:
        raise ValueError("verification needs utterances of at least two speakers")
    # Work on the N x N score matrix (N^2 * 6 bytes: 96 MB at 4,000 utterances), never on
    # per-trial copies of the embeddings (N^2 * D * 4 bytes).
    upper = np.triu(np.ones((len(labels), len(labels)), dtype=bool), k=1)
    scores = (embeddings @ embeddings.T)[upper]
    same = (labels[:, np.newaxis] == labels[np.newaxis, :])[upper]
    return VerificationTrials(scores, same, labels)


def verification_metrics(trials: VerificationTrials) -> dict[str, float]:
    """The equal error rate of `trials`, its threshold and the trial counts.

    Args:
        trials: The scored trials (`verification_trials`).

    Returns:
        Floats by name: `eer`, `eer_threshold` (cosine), and the counts `num_utterances`,
        `num_speakers`, `num_target_trials`, `num_nontarget_trials`.

    Raises:
        ValueError: the trials lack target or non-target trials (see `equal_error_rate`).
    """
    eer, threshold = _equal_error_rate_and_threshold(trials.scores, trials.same_speaker)
    return {
        "eer": eer,
        "eer_threshold": threshold,
        "num_utterances": float(len(trials.labels)),
        "num_speakers": float(np.unique(trials.labels).size),
        "num_target_trials": float(np.count_nonzero(trials.same_speaker)),
        "num_nontarget_trials": float(np.count_nonzero(~trials.same_speaker)),
    }


def evaluate_verification(
    embedding_model: keras.Model,
    batches: Iterable,
    *,
    max_utterances: int = 4000,
    seed: int = 0,
) -> dict[str, float]:
    """Verification EER on the utterances of `batches`, every pair one trial.

    `verification_metrics` of `verification_trials`.

    Args:
        embedding_model: Maps `[features, lengths]` to embeddings.
        batches: Dicts with `features`, `lengths`, `label` of held-out speakers.
        max_utterances: The most utterances scored (a seeded uniform sample above it).
        seed: Picks the sample.

    Returns:
        As `verification_metrics`.

    Raises:
        ValueError: as `verification_trials` and `verification_metrics`.

    Example:
        metrics = evaluate_verification(model.embedding_model, held_out_dataset)
    """
    return verification_metrics(
        verification_trials(embedding_model, batches, max_utterances=max_utterances, seed=seed)
    )


def write_verification_summaries(
    trials: VerificationTrials,
    metrics: Mapping[str, float],
    step: int,
    *,
    png_dir: str | None = None,
) -> list[str]:
    """Writes what the trials look like to the default summary writer, at `step`.

    `eval/eer` (scalar); `eval/target_scores` and `eval/nontarget_scores` (histograms of the
    cosine scores); `eval/det_curve` (image: the DET curve, see `charts.det_chart`);
    `eval/score_distributions` (image: both score histograms as fractions of their trials,
    overlaid, with the EER threshold). With `png_dir`, both images are also written there as
    PNG files (`charts.png_name(tag, step)`), for people without TensorBoard.

    Args:
        trials: The scored trials.
        metrics: `verification_metrics(trials)`.
        step: The summary step (an epoch, say).
        png_dir: The folder of the PNG files (the writer's log dir, say); None writes none.

    Returns:
        The paths of the PNG files written, [] without `png_dir`.

    Example:
        with tf.summary.create_file_writer(log_dir).as_default():
            write_verification_summaries(
                trials, verification_metrics(trials), step=epoch, png_dir=log_dir
            )
    """
    target = trials.scores[trials.same_speaker]
    nontarget = trials.scores[~trials.same_speaker]
    eer, threshold = metrics["eer"], metrics["eer_threshold"]
    tf.summary.scalar("eval/eer", eer, step=step)
    tf.summary.histogram("eval/target_scores", target, step=step, buckets=SCORE_BINS)
    tf.summary.histogram("eval/nontarget_scores", nontarget, step=step, buckets=SCORE_BINS)

    far, frr = det_curve(trials.scores, trials.same_speaker)
    ticks = ", ".join(f"{tick:.1%}".replace(".0%", "%") for tick in charts.DET_TICKS)
    edges = np.histogram_bin_edges(trials.scores, bins=SCORE_BINS)
    fractions = [np.histogram(s, bins=edges)[0] / len(s) for s in (target, nontarget)]
    peak = max(float(f.max()) for f in fractions)
    images = {
        "eval/det_curve": (
            charts.det_chart(far, frr, eer),
            f"Detection error trade-off of {len(target)} target and {len(nontarget)} non-target "
            "trials: x = false-alarm rate, y = miss rate, both on normal-deviate axes (grid at "
            f"{ticks}). Grey diagonal: equal rates; red square: the EER, {eer:.1%}. Closer to "
            "the lower left is better.",
        ),
        "eval/score_distributions": (
            charts.histogram_chart(
                fractions,
                (charts.GREEN, charts.RED),
                x_labels=(
                    f"{(edges[0] + edges[1]) / 2:.2f}",
                    f"{(edges[-2] + edges[-1]) / 2:.2f}",
                ),
                y_label=f"{peak:.0%}",
                y_max=peak,
                x_title="cosine score",
                y_title="fraction of trials",
                names=("target", "non-target"),
                marker=(threshold - edges[0]) / (edges[-1] - edges[0]),
                marker_name="EER threshold",
            ),
            "Cosine scores of target (green) and non-target (red) trials, each as a fraction "
            f"of its {len(target)} / {len(nontarget)} trials, in {SCORE_BINS} bins from "
            f"{edges[0]:.3f} to {edges[-1]:.3f}; black line: the EER threshold "
            f"{threshold:.3f}. The less they overlap, the better.",
        ),
    }
    paths = []
    for tag, (image, description) in images.items():
        tf.summary.image(tag, image[np.newaxis], step=step, description=description)
        if png_dir is not None:
            paths.append(os.path.join(png_dir, charts.png_name(tag, step)))
            charts.write_png(image, paths[-1])
    return paths
