"""Tests for vaco_jax.analysis.stats (docs/evaluation.md) against hand-computed values on tiny arrays."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats as sstats

from vaco_jax.analysis import stats

# 4 runs × 3 tasks (columns are tasks).
S43 = np.array(
    [
        [0.0, 0.5, 1.0],
        [0.2, 0.7, 2.0],
        [0.4, 0.9, 3.0],
        [0.6, 1.1, 6.0],
    ]
)
# 4 runs × 2 tasks.
S42 = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])


# ------------------------------------------------------------------ point aggregates


def test_median_and_mean_hand_computed():
    # per-task means: t0 (0+.2+.4+.6)/4 = 0.3; t1 (.5+.7+.9+1.1)/4 = 0.8; t2 (1+2+3+6)/4 = 3.0
    # median over tasks of [0.3, 0.8, 3.0] = 0.8; mean = 4.1 / 3
    assert stats.aggregate_median(S43) == pytest.approx(0.8)
    assert stats.aggregate_mean(S43) == pytest.approx(4.1 / 3)
    # S42: per-task means 2.5 and 25; median of two = (2.5 + 25) / 2 = 13.75 = mean
    assert stats.aggregate_median(S42) == pytest.approx(13.75)
    assert stats.aggregate_mean(S42) == pytest.approx(13.75)


def test_median_is_of_per_task_means_not_of_all_scores():
    # 2 runs × 3 tasks: per-task means [1, 2, 100] -> median 2.
    # (median of all 6 pooled scores 0,2,1,3,0,200 would be 1.5)
    s = np.array([[0.0, 1.0, 0.0], [2.0, 3.0, 200.0]])
    assert stats.aggregate_median(s) == pytest.approx(2.0)


def test_iqm_hand_computed():
    # S42: 8 pooled scores sorted 1,2,3,4,10,20,30,40; trim_mean cuts int(0.25*8)=2 from each
    # end -> 3,4,10,20 -> 37/4 = 9.25
    assert stats.aggregate_iqm(S42) == pytest.approx(9.25)
    # S43: 12 sorted 0,.2,.4,.5,.6,.7,.9,1,1.1,2,3,6; cut int(0.25*12)=3 each end
    # -> .5,.6,.7,.9,1.0,1.1 -> 4.8/6 = 0.8
    assert stats.aggregate_iqm(S43) == pytest.approx(0.8)
    assert stats.aggregate_iqm(S43) == pytest.approx(sstats.trim_mean(S43.ravel(), 0.25))


def test_optimality_gap_hand_computed_with_values_above_gamma():
    # gamma=1: min(x,1): t0 0,.2,.4,.6 (sum 1.2); t1 .5,.7,.9,1 (sum 3.1); t2 1,1,1,1 (sum 4)
    # mean = 8.3/12; gap = 1 - 8.3/12 = 3.7/12
    assert stats.aggregate_optimality_gap(S43) == pytest.approx(3.7 / 12)
    # gamma=2: sums 1.2 + 3.2 + (1+2+2+2=7) = 11.4 -> mean .95 -> gap 2 - .95 = 1.05
    assert stats.aggregate_optimality_gap(S43, gamma=2.0) == pytest.approx(1.05)
    # all scores above gamma -> gap exactly 0 (never negative)
    assert stats.aggregate_optimality_gap(S43 + 10.0) == 0.0


def test_aggregates_registry():
    assert set(stats.AGGREGATES) == {"median", "iqm", "mean", "optimality_gap"}
    assert stats.AGGREGATES["iqm"](S42) == pytest.approx(9.25)


# ------------------------------------------------------------------ probability of improvement


def test_probability_of_improvement_with_ties_and_unequal_runs():
    # task 0: x = 1,2,3 vs y = 2,2 (6 pairs)
    #   x=1: 0+0; x=2: tie+tie = .5+.5; x=3: 1+1  -> 3/6 = 0.5
    # task 1: x = 5,6,7 vs y = 4,6
    #   x=5: 1+0; x=6: 1+.5; x=7: 1+1 -> 4.5/6 = 0.75
    # average over tasks: (0.5 + 0.75)/2 = 0.625
    x = np.array([[1.0, 5.0], [2.0, 6.0], [3.0, 7.0]])
    y = np.array([[2.0, 4.0], [2.0, 6.0]])
    assert stats.probability_of_improvement(x, y) == pytest.approx(0.625)
    assert stats.probability_of_improvement(y, x) == pytest.approx(0.375)
    assert stats.probability_of_improvement(x, x) == pytest.approx(0.5)


@settings(max_examples=25, deadline=None)
@given(
    arrays(np.float64, (3, 2), elements=st.integers(-3, 3).map(float)),
    arrays(np.float64, (2, 2), elements=st.integers(-3, 3).map(float)),
)
def test_probability_of_improvement_complement(x, y):
    # P(X>Y) + P(Y>X) = 1 pairwise ([a>b] + [b>a] + 2·½[a==b] = 1); matches scipy's U / (m n)
    p = stats.probability_of_improvement(x, y)
    assert p + stats.probability_of_improvement(y, x) == pytest.approx(1.0)
    u = [sstats.mannwhitneyu(x[:, t], y[:, t]).statistic / 6.0 for t in range(2)]
    assert p == pytest.approx(np.mean(u))


def test_probability_of_improvement_ci():
    x = np.array([[1.0, 5.0], [2.0, 6.0], [3.0, 7.0]])
    y = np.array([[2.0, 4.0], [2.0, 6.0]])
    p, lo, hi = stats.probability_of_improvement_ci(x, y, reps=500, seed=3)
    assert p == pytest.approx(0.625)
    assert 0.0 <= lo <= p <= hi <= 1.0 and hi > lo
    assert stats.probability_of_improvement_ci(x, y, reps=500, seed=3) == (p, lo, hi)
    # one run per task on each side: every resample is the data itself -> zero width
    p1, lo1, hi1 = stats.probability_of_improvement_ci(x[:1], y[:1], reps=200)
    # task 0: 1 vs 2 -> 0; task 1: 5 vs 4 -> 1; mean 0.5
    assert p1 == lo1 == hi1 == pytest.approx(0.5)
    # independence: with y == x, a paired resample (same indices for both) would always give
    # exactly 0.5; independent resampling of x's and y's runs must spread around 0.5.
    z = np.array([[0.0, 1.0], [1.0, 2.0], [2.0, 3.0], [3.0, 4.0]])
    pz, loz, hiz = stats.probability_of_improvement_ci(z, z.copy(), reps=400)
    assert pz == 0.5 and loz < 0.5 < hiz


def test_probability_of_improvement_task_mismatch():
    with pytest.raises(ValueError, match="tasks"):
        stats.probability_of_improvement(np.zeros((2, 2)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="x"):
        stats.probability_of_improvement(np.full((2, 2), np.nan), np.zeros((2, 2)))


# ------------------------------------------------------------------ performance profile


def test_performance_profile_hand_computed():
    # S43 has 12 scores. > 0: all but the 0.0 -> 11/12
    # > 0.5: .6,.7,.9,1.1,1,2,3,6 -> 8/12 (0.5 itself is not > 0.5)
    # > 1.0: 1.1,2,3,6 -> 4/12; > 10: none -> 0
    prof = stats.performance_profile(S43, [0.0, 0.5, 1.0, 10.0])
    np.testing.assert_allclose(prof, [11 / 12, 8 / 12, 4 / 12, 0.0])
    assert stats.performance_profile(S43, 1.0).shape == (1,)


def test_performance_profile_ci():
    taus = [0.0, 0.5, 1.0, 10.0]
    prof, lo, hi = stats.performance_profile_ci(S43, taus, reps=400, seed=1)
    np.testing.assert_allclose(prof, [11 / 12, 8 / 12, 4 / 12, 0.0])
    assert prof.shape == lo.shape == hi.shape == (4,)
    assert np.all(lo <= prof) and np.all(prof <= hi)
    assert lo[3] == hi[3] == 0.0  # nothing can exceed 10 in any resample
    again = stats.performance_profile_ci(S43, taus, reps=400, seed=1)
    for a, b in zip((prof, lo, hi), again):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ normalisation


def test_normalize_scores_hand_computed():
    raw = np.array([[10.0, 0.0], [30.0, 5.0]])
    random_score = np.array([10.0, -5.0])
    reference = np.array([30.0, 15.0])
    # task 0: (10-10)/20 = 0, (30-10)/20 = 1; task 1: (0+5)/20 = .25, (5+5)/20 = .5
    out = stats.normalize_scores(raw, random_score, reference)
    np.testing.assert_allclose(out, [[0.0, 0.25], [1.0, 0.5]])
    # reference itself maps to 1, random to 0
    np.testing.assert_allclose(stats.normalize_scores(reference, random_score, reference), 1.0)


def test_normalize_scores_guard_names_task_index():
    with pytest.raises(ValueError, match="task index 1"):
        stats.normalize_scores(np.zeros((2, 3)), [0.0, 0.0, 0.0], [1.0, 1e-9, 2.0])
    with pytest.raises(ValueError, match="task index 0"):
        stats.normalize_scores(np.zeros((2, 1)), [5.0], [5.0 + 1e-3], min_gap=0.01)
    with pytest.raises(ValueError, match="reference_score"):
        stats.normalize_scores(np.zeros((2, 2)), [0.0, 0.0], [1.0])


# ------------------------------------------------------------------ drop_diverged


def test_drop_diverged_drops_whole_rows():
    s = np.array([[1.0, 2.0], [np.nan, 3.0], [4.0, np.inf], [5.0, 6.0]])
    clean, n = stats.drop_diverged(s)
    np.testing.assert_array_equal(clean, [[1.0, 2.0], [5.0, 6.0]])
    assert n == 2
    clean, n = stats.drop_diverged(S42)
    np.testing.assert_array_equal(clean, S42)
    assert n == 0


# ------------------------------------------------------------------ bootstrap


def test_bootstrap_two_point_distribution_hand_computed():
    # 1 task, runs [0, 1]: a replicate mean is 0 (p=1/4), 0.5 (p=1/2) or 1 (p=1/4), so with
    # 2000 replicates the 2.5th percentile is 0 and the 97.5th is 1.
    s = np.array([[0.0], [1.0]])
    assert stats.stratified_bootstrap_ci(s, stats.aggregate_mean) == (0.5, 0.0, 1.0)


def test_bootstrap_contains_point_and_is_deterministic():
    rng = np.random.default_rng(123)
    s = rng.normal(size=(10, 5))
    for name, fn in stats.AGGREGATES.items():
        p, lo, hi = stats.stratified_bootstrap_ci(s, fn, seed=7)
        assert lo <= p <= hi, name
        assert hi > lo, name
        assert stats.stratified_bootstrap_ci(s, fn, seed=7) == (p, lo, hi)
    a = stats.stratified_bootstrap_ci(s, stats.aggregate_iqm, seed=7)
    b = stats.stratified_bootstrap_ci(s, stats.aggregate_iqm, seed=8)
    assert a[0] == b[0] and a[1:] != b[1:]
    # higher confidence -> interval at least as wide
    lo9, hi9 = stats.stratified_bootstrap_ci(s, stats.aggregate_mean, confidence=0.99, seed=7)[1:]
    lo5, hi5 = stats.stratified_bootstrap_ci(s, stats.aggregate_mean, confidence=0.5, seed=7)[1:]
    assert lo9 <= lo5 and hi5 <= hi9


def test_bootstrap_collapses_when_runs_equal_within_each_task():
    # each task constant across runs but tasks differ: a stratified resample is always the data
    # itself; an unstratified (pooled) bootstrap would not collapse.
    s = np.tile([0.1, 0.7, 3.0], (5, 1))
    for fn in stats.AGGREGATES.values():
        p, lo, hi = stats.stratified_bootstrap_ci(s, fn, reps=300)
        assert p == pytest.approx(lo) and p == pytest.approx(hi)


def test_bootstrap_single_run_per_task_has_zero_width():
    s = S43[:1]
    for fn in stats.AGGREGATES.values():
        p, lo, hi = stats.stratified_bootstrap_ci(s, fn, reps=300)
        assert p == lo == hi


def test_bootstrap_resamples_within_task():
    seen = []

    def record(r):
        seen.append(np.array(r))
        return float(np.mean(r))

    stats.stratified_bootstrap_ci(S43, record, reps=50)
    assert len(seen) == 51  # point estimate + 50 replicates
    for r in seen:
        assert r.shape == S43.shape
        for t in range(S43.shape[1]):
            assert set(r[:, t]) <= set(S43[:, t])


def test_vectorised_matches_per_replicate_loop():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(6, 4))
    for fn in stats.AGGREGATES.values():
        fast = stats.stratified_bootstrap_ci(s, fn, reps=300, seed=5)
        slow = stats.stratified_bootstrap_ci(s, lambda a, fn=fn: fn(a), reps=300, seed=5)
        np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-12)
    g2 = functools.partial(stats.aggregate_optimality_gap, gamma=0.5)
    fast = stats.stratified_bootstrap_ci(s, g2, reps=300, seed=5)
    slow = stats.stratified_bootstrap_ci(s, lambda a: g2(a), reps=300, seed=5)
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-12)


def test_aggregate_with_cis_matches_single_metric_calls():
    rng = np.random.default_rng(1)
    d = {"vaco": rng.normal(size=(5, 3)), "ppo": rng.normal(size=(4, 3))}
    out = stats.aggregate_with_cis(d, reps=300, seed=2)
    assert set(out) == {"vaco", "ppo"}
    for method, s in d.items():
        assert set(out[method]) == {"median", "iqm", "mean", "optimality_gap"}
        for metric, fn in stats.AGGREGATES.items():
            ref = stats.stratified_bootstrap_ci(s, fn, reps=300, seed=2)
            np.testing.assert_allclose(out[method][metric], ref, rtol=1e-12)
    only = stats.aggregate_with_cis(d, metrics=("iqm",), reps=50)
    assert set(only["ppo"]) == {"iqm"}


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"scores": np.zeros(4)}, "scores"),
        ({"scores": np.zeros((0, 3))}, "scores"),
        ({"scores": np.array([[1.0, np.nan]])}, "drop_diverged"),
        ({"scores": np.array([[1.0, np.inf]])}, "scores"),
        ({"reps": 0}, "reps"),
        ({"reps": 2.5}, "reps"),
        ({"confidence": 1.0}, "confidence"),
        ({"confidence": 0.0}, "confidence"),
        ({"aggregate_fn": "iqm"}, "aggregate_fn"),
    ],
)
def test_bootstrap_validation_names_argument(kwargs, match):
    args = {"scores": S42, "aggregate_fn": stats.aggregate_mean, "reps": 10}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        stats.stratified_bootstrap_ci(**args)


def test_other_validation_errors():
    with pytest.raises(ValueError, match="metrics"):
        stats.aggregate_with_cis({"a": S42}, metrics=("iqm", "max"))
    with pytest.raises(ValueError, match="score_dict"):
        stats.aggregate_with_cis({"a": np.array([[np.nan]])}, reps=10)
    with pytest.raises(ValueError, match="scores"):
        stats.aggregate_median(np.zeros(3))
    with pytest.raises(ValueError, match="gamma"):
        stats.aggregate_optimality_gap(S42, gamma=np.nan)
    with pytest.raises(ValueError, match="reps"):
        stats.probability_of_improvement_ci(S42, S42, reps=0)
    with pytest.raises(ValueError, match="taus"):
        stats.performance_profile(S42, [])
    with pytest.raises(ValueError, match="scores"):
        stats.drop_diverged(np.zeros(3))
