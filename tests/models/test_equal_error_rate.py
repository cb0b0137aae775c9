"""`equal_error_rate` and `det_curve` against a brute-force threshold sweep, and their edge
cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.models.verification import det_curve, equal_error_rate


def brute_force_points(scores, same_speaker) -> list[tuple[float, float]]:
    """(FAR, FRR) at every threshold, +inf then each distinct score downwards, counted trial
    by trial."""
    targets = [s for s, same in zip(scores, same_speaker, strict=True) if same]
    nontargets = [s for s, same in zip(scores, same_speaker, strict=True) if not same]
    points = []
    for threshold in [math.inf, *sorted(set(scores), reverse=True)]:
        far = sum(s >= threshold for s in nontargets) / len(nontargets)
        frr = sum(s < threshold for s in targets) / len(targets)
        points.append((far, frr))
    return points


def brute_force_eer(scores, same_speaker) -> float:
    """Intersects the ROC polyline of `brute_force_points` segment by segment with FAR = FRR."""
    points = brute_force_points(scores, same_speaker)
    for (far0, frr0), (far1, frr1) in zip(points[:-1], points[1:], strict=True):
        if frr0 - far0 >= 0 >= frr1 - far1:
            if frr0 == far0:
                return far0
            # (far0, frr0) + t * (far1 - far0, frr1 - frr0) on the diagonal.
            t = (frr0 - far0) / ((far1 - far0) - (frr1 - frr0))
            return far0 + t * (far1 - far0)
    raise AssertionError("the ROC polyline always crosses the diagonal")


trials = st.integers(2, 60).flatmap(
    lambda n: st.tuples(
        st.one_of(
            # Few distinct values: many ties.
            st.lists(st.integers(0, 4).map(float), min_size=n, max_size=n),
            # A fine grid, so that the increasing maps below cannot merge distinct scores.
            st.lists(st.integers(-640, 640).map(lambda k: k / 128), min_size=n, max_size=n),
        ),
        st.lists(st.booleans(), min_size=n, max_size=n).filter(lambda s: 0 < sum(s) < len(s)),
    )
)


@settings(max_examples=150, deadline=None)
@given(trials)
def test_matches_brute_force_sweep(trial):
    scores, same_speaker = trial
    assert equal_error_rate(scores, same_speaker) == pytest.approx(
        brute_force_eer(scores, same_speaker), abs=1e-12
    )


@settings(max_examples=100, deadline=None)
@given(trials)
def test_det_curve_is_the_monotone_brute_force_sweep(trial):
    scores, same_speaker = trial
    far, frr = det_curve(scores, same_speaker)
    np.testing.assert_allclose(
        np.stack([far, frr], axis=1), brute_force_points(scores, same_speaker), atol=1e-12
    )
    assert (far[0], frr[0]) == (0.0, 1.0) and (far[-1], frr[-1]) == (1.0, 0.0)
    assert np.all(np.diff(far) >= 0) and np.all(np.diff(frr) <= 0)
    # Each point moves: a distinct threshold accepts at least one more trial.
    assert np.all((np.diff(far) > 0) | (np.diff(frr) < 0))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("num_trials", [10, 301, 2000])
def test_matches_brute_force_on_random_overlapping_scores(seed, num_trials):
    rng = np.random.default_rng(seed)
    same = rng.random(num_trials) < 0.3
    same[:2] = [True, False]
    scores = rng.normal(size=num_trials) + 1.5 * same
    if num_trials > 500:
        scores = np.round(scores, 1)  # ties, and keeps the O(N^2) sweep quick
    assert equal_error_rate(scores, same) == pytest.approx(brute_force_eer(scores, same), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(trials)
def test_invariant_to_increasing_maps_and_symmetric_in_roles(trial):
    scores, same_speaker = np.array(trial[0]), np.array(trial[1])
    eer = equal_error_rate(scores, same_speaker)
    assert 0.0 <= eer <= 1.0
    assert equal_error_rate(3.0 * scores - 7.0, same_speaker) == pytest.approx(eer, abs=1e-12)
    assert equal_error_rate(np.tanh(scores), same_speaker) == pytest.approx(eer, abs=1e-12)
    # Swapping same/different speaker and reversing the scores mirrors the ROC on its diagonal.
    assert equal_error_rate(-scores, ~same_speaker) == pytest.approx(eer, abs=1e-12)


def test_known_values():
    assert equal_error_rate([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]) == 0.0
    assert equal_error_rate([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0]) == 1.0
    assert equal_error_rate([0.5] * 6, [1, 0, 1, 0, 1, 0]) == 0.5
    # One target below one of three nontargets: accepting down to 0.6 gives FAR 1/3, FRR 0.
    # Before it, at 0.7: FAR 1/3, FRR 1/2. The polyline meets the diagonal at 1/3.
    assert equal_error_rate([0.9, 0.7, 0.6, 0.3, 0.2], [1, 0, 1, 0, 0]) == pytest.approx(1 / 3)
    assert equal_error_rate(np.r_[np.ones(5), np.zeros(5)], np.arange(10) < 5) == 0.0


def test_large_input_is_fast_and_near_half_for_uninformative_scores():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=2_000_000)
    same = rng.random(2_000_000) < 0.01
    assert equal_error_rate(scores, same) == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize(
    "scores, same, message",
    [
        ([0.1, 0.2], [True], "differ in length"),
        ([0.1, float("nan")], [True, False], "finite"),
        ([0.1, float("inf")], [True, False], "finite"),
        ([0.1, 0.2], [True, True], "both"),
        ([0.1, 0.2], [False, False], "both"),
        ([0.1, 0.2], [1, 2], "boolean"),
    ],
)
def test_bad_trials_are_refused(scores, same, message):
    with pytest.raises(ValueError, match=message):
        equal_error_rate(scores, same)
