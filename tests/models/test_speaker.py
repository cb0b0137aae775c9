"""The speaker-embedding net, its losses and verification scoring (export: test_serving)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.models import synthetic
from tfx_dynamic_inputs.models import speaker, verification

N_C, N_P = 6, 4


@pytest.fixture(scope="module")
def trained():
    """A net trained on 24 synthetic speakers; 8 other speakers held out for scoring."""
    rng = np.random.default_rng(0)
    envelopes = synthetic.speaker_envelopes(rng, 32)
    train = synthetic.class_balanced_batches(
        rng, envelopes[:24], n_classes_per_batch=N_C, n_samples_per_class=N_P, num_batches=40
    )
    held_out = synthetic.plain_batches(rng, envelopes[24:], per_speaker=6, batch_size=16)
    keras.utils.set_random_seed(0)
    model = speaker.SpeakerEmbeddingModel(
        synthetic.N_MELS, n_samples_per_class=N_P, channels=64, embedding_dim=32
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
    before = verification.evaluate_verification(model.embedding_model, held_out)
    history = model.fit(train, epochs=4, verbose=0).history
    after = verification.evaluate_verification(model.embedding_model, held_out)
    return model, history, before, after, held_out


def test_training_separates_held_out_speakers_far_better_than_chance(trained):
    _, history, before, after, _ = trained
    assert all(np.isfinite(history["loss"]))
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert after["eer"] < 0.15, after
    assert after["eer"] < 0.5 * before["eer"], (before, after)
    # 8 speakers x 6 utterances: every pair is a trial.
    assert after["num_utterances"] == 48 and after["num_speakers"] == 8
    assert after["num_target_trials"] == 8 * 15
    assert after["num_nontarget_trials"] == 48 * 47 / 2 - 8 * 15


def test_subsampled_verification_scores_all_pairs_of_the_subset(trained):
    model, _, _, _, held_out = trained
    result = verification.evaluate_verification(model.embedding_model, held_out, max_utterances=20)
    assert result["num_utterances"] == 20
    assert result["num_target_trials"] + result["num_nontarget_trials"] == 20 * 19 / 2


def test_embedding_ignores_padding_content_and_amount():
    rng = np.random.default_rng(1)
    net = speaker.build_embedding_model(synthetic.N_MELS, channels=16, embedding_dim=8)
    batch = synthetic.utterances(rng, synthetic.speaker_envelopes(rng, 3), np.arange(3))
    lengths = batch["lengths"]
    reference = net([batch["features"], lengths]).numpy()
    # Garbage in the padding, and 37 more padded frames.
    padded = np.concatenate(
        [batch["features"], np.zeros((3, 37, synthetic.N_MELS), np.float32)], axis=1
    )
    for row, length in enumerate(lengths):
        padded[row, length:] = rng.normal(0, 100, (padded.shape[1] - length, synthetic.N_MELS))
    np.testing.assert_allclose(net([padded, lengths]).numpy(), reference, rtol=1e-4, atol=1e-4)
    # And each row alone, unpadded.
    for row, length in enumerate(lengths):
        alone = net([batch["features"][row : row + 1, :length], lengths[row : row + 1]])
        np.testing.assert_allclose(alone.numpy()[0], reference[row], rtol=1e-4, atol=1e-4)


def test_embedding_ignores_recording_gain():
    rng = np.random.default_rng(2)
    net = speaker.build_embedding_model(synthetic.N_MELS, channels=16, embedding_dim=8)
    batch = synthetic.utterances(rng, synthetic.speaker_envelopes(rng, 2), np.arange(2))
    mask = np.arange(batch["features"].shape[1]) < batch["lengths"][:, None]
    louder = batch["features"] + 3.0 * mask[..., None]  # +3 in log-mel: about 13 dB
    np.testing.assert_allclose(
        net([louder, batch["lengths"]]).numpy(),
        net([batch["features"], batch["lengths"]]).numpy(),
        rtol=1e-4,
        atol=1e-4,
    )


def numpy_ge2e_similarity(embeddings: np.ndarray, n_p: int) -> np.ndarray:
    unit = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True)
    n_c = len(unit) // n_p
    similarity = np.zeros((len(unit), n_c))
    for i, e in enumerate(unit):
        for k in range(n_c):
            members = [j for j in range(k * n_p, (k + 1) * n_p) if j != i]
            centroid = unit[members].mean(axis=0)
            similarity[i, k] = e @ centroid / np.linalg.norm(centroid)
    return similarity


@pytest.mark.parametrize("n_c, n_p, dim", [(2, 2, 3), (3, 4, 5), (5, 3, 16)])
def test_ge2e_similarity_matches_its_definition(n_c, n_p, dim):
    embeddings = np.random.default_rng(n_c * n_p).normal(size=(n_c * n_p, dim))
    similarity = speaker.ge2e_logits(tf.constant(embeddings, tf.float32), n_p).numpy()
    np.testing.assert_allclose(similarity, numpy_ge2e_similarity(embeddings, n_p), atol=1e-5)


def test_angular_prototypical_similarity_matches_its_definition():
    n_c, n_p = 4, 3
    embeddings = np.random.default_rng(0).normal(size=(n_c * n_p, 6))
    unit = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True)
    groups = unit.reshape(n_c, n_p, -1)
    prototypes = groups[:, :-1].mean(axis=1)
    prototypes /= np.linalg.norm(prototypes, axis=-1, keepdims=True)
    expected = groups[:, -1] @ prototypes.T
    got = speaker.angular_prototypical_logits(tf.constant(embeddings, tf.float32), n_p)
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("loss", ["angular_prototypical", "aam_softmax"])
def test_other_losses_are_finite_and_decrease(loss):
    rng = np.random.default_rng(3)
    envelopes = synthetic.speaker_envelopes(rng, 12)
    train = synthetic.class_balanced_batches(
        rng, envelopes, n_classes_per_batch=4, n_samples_per_class=3, num_batches=12
    )
    keras.utils.set_random_seed(0)
    model = speaker.SpeakerEmbeddingModel(
        synthetic.N_MELS,
        n_samples_per_class=3,
        loss=loss,
        num_classes=12,
        channels=32,
        embedding_dim=16,
    )
    model.compile(optimizer=keras.optimizers.Adam(2e-3), jit_compile=False)
    losses = model.fit(train, epochs=3, verbose=0).history["loss"]
    assert all(np.isfinite(losses)), losses
    assert losses[-1] < 0.7 * losses[0], losses


def grouped_batch(labels) -> dict[str, tf.Tensor]:
    rng = np.random.default_rng(4)
    batch = synthetic.utterances(rng, synthetic.speaker_envelopes(rng, 8), np.asarray(labels))
    return {key: tf.constant(value) for key, value in batch.items()}


def test_batches_that_are_not_grouped_by_class_are_refused():
    # Eagerly through `train_step` (what `fit` runs), so no graph has to be traced.
    model = speaker.SpeakerEmbeddingModel(synthetic.N_MELS, n_samples_per_class=2, channels=8)
    model.compile(optimizer="adam")
    before = [v.numpy().copy() for v in model.trainable_variables]
    with pytest.raises(tf.errors.InvalidArgumentError, match="groups of 2 consecutive"):
        model.train_step(grouped_batch([0, 1, 0, 1]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="multiple of n_samples_per_class"):
        model.train_step(grouped_batch([0, 0, 1]))
    with pytest.raises(ValueError, match="missing"):
        model.train_step({"features": tf.zeros([2, 5, synthetic.N_MELS])})
    assert all(
        np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables, strict=True)
    )
    model.train_step(grouped_batch([3, 3, 1, 1]))  # and a grouped batch trains
    assert not all(
        np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables, strict=True)
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_samples_per_class": 1}, "n_samples_per_class >= 2"),
        ({"n_samples_per_class": 2, "loss": "triplet"}, "loss must be one of"),
        ({"n_samples_per_class": 2, "loss": "aam_softmax"}, "num_classes"),
    ],
)
def test_bad_model_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        speaker.SpeakerEmbeddingModel(synthetic.N_MELS, **kwargs)


def test_verification_needs_two_speakers_and_some_batches():
    net = speaker.build_embedding_model(synthetic.N_MELS, channels=8, embedding_dim=4)
    rng = np.random.default_rng(5)
    one_speaker = [synthetic.utterances(rng, synthetic.speaker_envelopes(rng, 1), np.zeros(4, int))]
    with pytest.raises(ValueError, match="two speakers"):
        verification.evaluate_verification(net, one_speaker)
    with pytest.raises(ValueError, match="no utterances"):
        verification.evaluate_verification(net, [])


def test_embed_samples_a_bounded_subset_of_the_utterances():
    rng = np.random.default_rng(6)
    net = speaker.build_embedding_model(synthetic.N_MELS, channels=4, embedding_dim=3)
    envelopes = synthetic.speaker_envelopes(rng, 40)
    batches = [synthetic.utterances(rng, envelopes, np.arange(s, s + 8)) for s in range(0, 40, 8)]
    everything, labels = verification.embed(net, batches)
    np.testing.assert_array_equal(labels, np.arange(40))  # labels double as utterance ids
    sample, sample_labels = verification.embed(net, batches, max_utterances=10, seed=3)
    assert sample.shape == (10, 3) and len(set(sample_labels)) == 10
    np.testing.assert_allclose(sample, everything[sample_labels], atol=1e-6)


@pytest.mark.parametrize("batch_size", [1, 7, 40])
def test_reservoir_sample_is_uniform_deterministic_and_bounded(batch_size):
    rows = np.arange(40, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)

    def stream():
        for start in range(0, 40, batch_size):
            yield rows[start : start + batch_size], np.arange(40)[start : start + batch_size]

    inclusions = np.zeros(40)
    for seed in range(400):
        sample, labels = verification.reservoir_sample(stream(), 10, seed)
        assert sample.shape == (10, 2) and len(set(labels)) == 10
        np.testing.assert_array_equal(sample[:, 0], labels)  # rows travel with their labels
        inclusions[labels] += 1
    np.testing.assert_array_equal(verification.reservoir_sample(stream(), 10, 399)[1], labels)
    # Each row is kept with probability 10/40: 100 of 400 times, std ~8.7.
    assert np.all(np.abs(inclusions - 100) < 40), inclusions
    everything, all_labels = verification.reservoir_sample(stream(), None)
    np.testing.assert_array_equal(all_labels, np.arange(40))
    assert verification.reservoir_sample(stream(), 100)[0].shape == (40, 2)
