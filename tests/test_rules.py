"""The decision rules (vaco_jax/analysis/rules.py) on synthetic scores: a case clearly on each side of every
threshold, one whose interval straddles it, and the bootstrap against a slow per-task loop."""

import numpy as np
import pytest

from vaco_jax.analysis import rules
RNG = np.random.default_rng(0)


def _runs(means, runs=10, spread=0.05, seed=0):
    rng = np.random.default_rng(seed)
    return np.asarray(means)[None, :] + spread * rng.standard_normal((runs, len(means)))


def test_normalise_maps_random_to_0_and_ppo_to_1_with_negative_returns():
    raw = np.array([[-50.0, 100.0], [300.0, 1100.0]])
    out = rules.normalise(raw, random_score=[-50.0, 100.0], ppo_score=[300.0, 1100.0])
    np.testing.assert_allclose(out, [[0.0, 0.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match=r"task column\(s\) \[1\]"):
        rules.normalise(raw, [0.0, 5.0], [1.0, 5.0])


@pytest.mark.parametrize("low,high,expected", [(0.95, 1.2, "holds"), (0.5, 0.85, "fails"), (0.85, 0.95, "inconclusive")])
def test_verdict_reads_the_lower_bound_for_greater(low, high, expected):
    # (0.85, 0.95) straddles 0.9: a rule that read the upper bound would call it "holds"
    assert rules.verdict(low, high, 0.9) == expected
    # "x > 0.9" is "-x < -0.9": the same verdict from the mirrored interval
    assert rules.verdict(-high, -low, -0.9, side="less") == expected


def test_retention_on_each_side_and_straddling():
    at_1 = _runs([1.0, 1.0, 1.0])
    kept = rules.retention(_runs([0.98, 1.0, 1.02], seed=1), at_1)
    lost = rules.retention(_runs([0.5, 0.6, 0.4], seed=2), at_1)
    unsure = rules.retention(_runs([0.9, 0.9, 0.9], spread=0.3, seed=3), at_1)
    assert rules.verdict(kept[1], kept[2], 0.9) == "holds"
    assert rules.verdict(lost[1], lost[2], 0.9) == "fails"
    assert unsure[1] < 0.9 < unsure[2] and rules.verdict(unsure[1], unsure[2], 0.9) == "inconclusive"
    assert np.isnan(rules.retention(at_1, -at_1)[0])  # a method that does not learn at B = 1


def test_retention_difference_point_is_the_difference_of_retentions():
    a_b, a_1, x_b, x_1 = _runs([0.9, 0.8]), _runs([1.0, 1.0], seed=1), _runs([0.5, 0.6], seed=2), _runs([1.0, 0.9], seed=3)
    point, lo, hi = rules.retention_difference(a_b, a_1, x_b, x_1)
    assert point == pytest.approx(rules.retention(a_b, a_1)[0] - rules.retention(x_b, x_1)[0])
    assert lo > 0 and rules.verdict(lo, hi, 0.0) == "holds"


def test_stratified_bootstrap_equals_a_slow_per_task_loop():
    """The vectorised retention replicates against plain loops over replicates and tasks, reading the
    same drawn indices: each task's runs are resampled from that task's own column only."""
    at_b, at_1 = _runs([0.7, 0.9, 0.4], runs=6), _runs([1.0, 0.8, 1.1], runs=5, seed=4)
    reps, seed = 300, 11
    fast = rules.replicates([at_b, at_1], rules._retention, reps, seed)
    rng = np.random.default_rng(seed)
    idx_b = rng.integers(0, 6, size=(reps, 6, 3))
    idx_1 = rng.integers(0, 5, size=(reps, 5, 3))
    slow = []
    for r in range(reps):
        num = np.mean([np.mean([at_b[idx_b[r, i, t], t] for i in range(6)]) for t in range(3)])
        den = np.mean([np.mean([at_1[idx_1[r, i, t], t] for i in range(5)]) for t in range(3)])
        slow.append(num / den)
    np.testing.assert_allclose(fast, slow, rtol=1e-12)


def test_poi_replicates_equal_the_pairwise_comparison_of_the_resampled_runs_bit_for_bit():
    """P(A > X) per replicate from the draw counts against the resampled runs compared pair by pair (the
    same drawn indices), with ties (scores on a coarse grid), unequal run counts and one run: every
    replicate is the same float, so p-values that count replicates at exactly ½ cannot move."""
    rng = np.random.default_rng(3)
    for case in range(40):
        m, n, tasks = (int(v) for v in rng.integers(1, 9, size=3))
        a, x = rng.integers(0, 6, size=(m, tasks)) / 4.0, rng.integers(0, 6, size=(n, tasks)) / 4.0
        reps, seed = int(rng.integers(1, 200)), int(rng.integers(0, 1000))
        draw = np.random.default_rng(seed)
        ia, ix = draw.integers(0, m, size=(reps, m, tasks)), draw.integers(0, n, size=(reps, n, tasks))
        slow = []
        for r in range(reps):
            per_task = []
            for t in range(tasks):
                ra, rx = a[ia[r, :, t], t], x[ix[r, :, t], t]
                gt = sum(int(u > v) for u in ra for v in rx) / (m * n)
                eq = sum(int(u == v) for u in ra for v in rx) / (m * n)
                per_task.append(gt + 0.5 * eq)
            slow.append(np.mean(per_task))
        fast = rules.poi_replicates(a, x, reps, seed)
        assert fast.tolist() == slow, case
        assert fast.tolist() == rules.replicates([a, x], rules._poi, reps, seed).tolist(), case


def test_head_to_head_and_its_p_value():
    better = rules.head_to_head(_runs([1.2, 1.1]), _runs([0.8, 0.9], seed=1))
    worse = rules.head_to_head(_runs([0.8, 0.9]), _runs([1.2, 1.1], seed=1))
    tied = rules.head_to_head(_runs([1.0, 1.0], spread=0.3), _runs([1.0, 1.0], spread=0.3, seed=1))
    assert better["point"] == 1.0 and better["p_value"] < 0.01 and rules.verdict(better["low"], better["high"], 0.5) == "holds"
    assert worse["point"] == 0.0 and worse["p_value"] == 1.0 and rules.verdict(worse["low"], worse["high"], 0.5) == "fails"
    assert tied["low"] < 0.5 < tied["high"] and tied["p_value"] > 0.05


def test_holm_step_down():
    out = rules.holm({"a": 0.01, "b": 0.04, "c": 0.03}, alpha=0.05)
    # sorted 0.01 (x3 = 0.03 <= 0.05, reject), 0.03 (x2 = 0.06 > 0.025 threshold: stop), 0.04
    assert out["a"] == (pytest.approx(0.03), True)
    assert out["c"] == (pytest.approx(0.06), False) and out["b"][1] is False
    assert rules.holm({"a": 0.001, "b": 0.002}, 0.05) == {"a": (pytest.approx(0.002), True), "b": (pytest.approx(0.002), True)}


def test_equivalence_inside_outside_and_straddling_the_margin():
    base = _runs([1.0, 1.0])
    assert rules.equivalence(_runs([1.01, 0.99], seed=1), base, margin=0.1)["verdict"] == "equivalent"
    assert rules.equivalence(_runs([1.5, 1.4], seed=1), base, margin=0.1)["verdict"] == "not equivalent"
    unsure = rules.equivalence(_runs([1.1, 1.1], seed=1), base, margin=0.1)
    assert unsure["low"] < 0.1 < unsure["high"] and unsure["verdict"] == "inconclusive"
    with pytest.raises(ValueError, match="margin"):
        rules.equivalence(base, base, margin=0.0)


def test_ceiling_needs_most_runs_within_two_percent_of_the_best():
    assert rules.at_ceiling([995, 999, 1000, 990], best_score=1000, random_score=0)
    assert not rules.at_ceiling([995, 700, 600, 990], best_score=1000, random_score=0)
    assert not rules.at_ceiling([975, 970, 960], best_score=1000, random_score=0)  # 2.5% below


def test_stability_counts_seeds_that_agree():
    at_1 = _runs([1.0, 1.0])
    clear = lambda s: rules.verdict(*rules.retention(_runs([0.5, 0.5], seed=1), at_1, reps=300, seed=s)[1:], 0.9)
    assert rules.stability(clear, seeds=range(1, 6)) == 1.0
    # an interval whose edge sits near the threshold flips with the bootstrap seed
    edge = _runs([0.9, 0.9], spread=0.2, seed=5)
    point, lo, _ = rules.retention(edge, at_1, reps=300)
    near = lambda s: rules.verdict(*rules.retention(edge, at_1, reps=300, seed=s)[1:], lo)
    assert rules.stability(near, seeds=range(1, 21)) < 1.0


def test_diverged_runs_must_be_left_out_first():
    bad = _runs([1.0, 1.0])
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="diverged"):
        rules.retention(bad, _runs([1.0, 1.0]))


def _holm_slow(p: dict, alpha: float) -> dict:
    """Holm by the textbook: sort the p-values, p_(i) * (m - i + 1) (i from 1), a running maximum, capped at
    1, mapped back to the input names; a hypothesis is rejected when its adjusted p-value is <= alpha."""
    names = sorted(p, key=lambda k: (p[k], k))
    m = len(names)
    adjusted, running = {}, 0.0
    for i, name in enumerate(names, start=1):
        running = max(running, p[name] * (m - i + 1))
        adjusted[name] = min(1.0, running)
    return {k: (adjusted[k], adjusted[k] <= alpha) for k in p}


def test_holm_adjusts_every_hypothesis_as_the_textbook_step_down():
    """Every adjusted p-value (not only the smallest) and every decision against the slow reference, on
    cases where the running maximum matters: a larger p sorted later whose own product is smaller."""
    cases = [
        {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005},  # 0.02, 0.03, 0.06, then 0.04 x 1 raised to 0.06
        {"a": 0.01, "b": 0.03, "c": 0.035},  # the second decides: 0.06 > 0.05 stops; 0.035 is not rejected
        {"a": 0.2, "b": 0.9, "c": 0.6},  # capped at 1
        {"x": 0.001},
    ]
    rng = np.random.default_rng(7)
    for m in (2, 3, 5, 8, 13):
        for scale in (0.05, 0.2, 1.0):
            cases.append({f"h{i}": float(v) for i, v in enumerate(rng.uniform(0.0, scale, m))})
    raised = 0
    for p in cases:
        got, want = rules.holm(p, alpha=0.05), _holm_slow(p, 0.05)
        assert set(got) == set(p)
        for k in p:
            assert got[k][0] == pytest.approx(want[k][0], rel=1e-12, abs=0.0), (p, k)
            assert got[k][1] is want[k][1], (p, k)
        # the cases exercise the running maximum: some adjusted p-value exceeds its own (m - i + 1) p_(i)
        names = sorted(p, key=lambda k: (p[k], k))
        raised += any(want[k][0] > min(1.0, p[k] * (len(p) - i)) for i, k in enumerate(names))
    assert raised >= 5
    # the running maximum itself, by hand: d 0.005 x 4 = 0.02, a 0.01 x 3 = 0.03, c 0.03 x 2 = 0.06 (stop),
    # b 0.04 x 1 = 0.04 but raised to 0.06
    out = rules.holm(cases[0], alpha=0.05)
    assert out == {"d": (pytest.approx(0.02), True), "a": (pytest.approx(0.03), True),
                   "c": (pytest.approx(0.06), False), "b": (pytest.approx(0.06), False)}
    # the second hypothesis decides: the third (0.035 x 1 <= 0.05 on its own) is not rejected after it
    out = rules.holm(cases[1], alpha=0.05)
    assert out == {"a": (pytest.approx(0.03), True), "b": (pytest.approx(0.06), False),
                   "c": (pytest.approx(0.06), False)}
    # and it rejects when the second clears its level (0.02 x 2 = 0.04 <= 0.05): then all three go
    assert [v[1] for v in rules.holm({"a": 0.01, "b": 0.02, "c": 0.035}).values()] == [True, True, True]


def test_ceiling_is_measured_on_the_random_to_best_range_at_a_nonzero_random_score():
    """At a random score of 0 the 2% of the range equals the 2% of the best score; elsewhere they differ.
    Random -500, best 1000: the ceiling is 1000 - 0.02 x 1500 = 970 (2% of the best would say 980);
    random 1000, best 1500: 1500 - 0.02 x 500 = 1490 (2% of the best would say 1470)."""
    assert rules.at_ceiling([975, 975, 972, 960], best_score=1000, random_score=-500)
    assert rules.at_ceiling([970, 970, 970, 900], best_score=1000, random_score=-500)  # at the bound: in
    assert not rules.at_ceiling([969, 969, 965, 1000], best_score=1000, random_score=-500)
    assert not rules.at_ceiling([1480, 1485, 1475, 1500], best_score=1500, random_score=1000)
    assert rules.at_ceiling([1491, 1495, 1490, 1300], best_score=1500, random_score=1000)
    # "most runs" is strictly more than half
    assert not rules.at_ceiling([1000, 990, 900, 800], best_score=1000, random_score=-500)
    assert rules.at_ceiling([1000, 990, 980, 800], best_score=1000, random_score=-500)
    # no range, no ceiling
    assert not rules.at_ceiling([1000, 1000], best_score=1000, random_score=1000)


@pytest.mark.parametrize("low,high,expected", [
    (0.5, 0.8, "inconclusive"),  # the lower bound at the threshold: "greater" does not hold (strict)
    (0.2, 0.5, "inconclusive"),  # the upper bound at the threshold: it does not fail either
    (0.5, 0.5, "inconclusive"),
    (np.nextafter(0.5, 1.0), 0.8, "holds"),
    (0.2, np.nextafter(0.5, 0.0), "fails"),
    (0.45, 0.55, "inconclusive"),  # straddling: neither side
])
def test_verdict_at_the_exact_threshold(low, high, expected):
    assert rules.verdict(low, high, 0.5) == expected
    assert rules.verdict(-high, -low, -0.5, side="less") == expected


def test_head_to_head_counts_replicates_at_one_half_against_the_claim():
    """Identical samples: every replicate of P(A > X) is exactly ½ (ties count ½), so nothing supports
    "P(A > X) > ½": the p-value is 1 (replicates at ½ count as not above it) and the verdict inconclusive."""
    a = _runs([1.0, 2.0], runs=1)
    out = rules.head_to_head(a, a.copy(), reps=200)
    assert out["point"] == 0.5 and out["low"] == out["high"] == 0.5
    assert out["p_value"] == 1.0
    assert rules.verdict(out["low"], out["high"], 0.5) == "inconclusive"


@pytest.mark.parametrize("low,high,expected", [
    (-0.1, 0.05, "inconclusive"),  # the interval's edge on the margin: not inside (-margin, margin)
    (-0.05, 0.1, "inconclusive"),
    (np.nextafter(-0.1, 0.0), np.nextafter(0.1, 0.0), "equivalent"),
    (0.1, 0.3, "not equivalent"),  # wholly outside, touching the margin
    (-0.3, -0.1, "not equivalent"),
    (np.nextafter(0.1, 0.0), 0.3, "inconclusive"),
])
def test_equivalence_at_the_exact_margin(monkeypatch, low, high, expected):
    monkeypatch.setattr(rules, "difference", lambda *a, **k: ((low + high) / 2, low, high))
    assert rules.equivalence(np.zeros((2, 1)), np.zeros((2, 1)), margin=0.1)["verdict"] == expected
