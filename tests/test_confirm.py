"""Stage 2's confirmatory rules (vaco_jax.analysis.confirm) on synthetic rows, each threshold from both sides.

Rows use the normalisation {task: (0, 1)}, so a run's score is its normalised score (floored at 0).
Runs of identical scores make the bootstrap intervals degenerate, so a difference sits exactly where a
test puts it relative to a threshold."""

import numpy as np
import pytest

from vaco_jax.analysis import confirm

NORM = {"Hopper-v4": (0.0, 1.0), "Walker2d-v4": (0.0, 1.0)}
R = confirm.Rules(reps=400)


def runs(arm, b, values, lag_model="uniform", tasks=("Hopper-v4", "Walker2d-v4"), **extra):
    return [{"env": t, "arm": arm, "lag_model": lag_model, "lag_depth": b, "seed": i, "diverged": False,
             "auc": float(v), **extra} for t in tasks for i, v in enumerate(values)]


def flat(v, n=10):
    return [v] * n


def spread(centre, width, n=10, seed=0):
    return list(centre + width * np.random.default_rng(seed).uniform(-1, 1, n))


def only(rows, **where):
    out = [r for r in rows if all(r[k] == v for k, v in where.items())]
    assert len(out) == 1, out
    return out[0]


def test_normalised_floors_at_random_and_refuses_an_undefined_scale():
    assert confirm.normalised(-50.0, 10.0, 110.0) == 0.0
    assert confirm.normalised(60.0, 10.0, 110.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="reference"):
        confirm.normalised(1.0, 5.0, 5.0)


def test_a_diverged_run_scores_the_floor_and_a_missing_one_is_left_out_both_counted():
    rows = runs("vaco", 8, [0.5, 0.6, 0.7], tasks=("Hopper-v4",))
    rows[1]["diverged"] = True
    rows[1]["auc"] = float("nan")
    rows[2]["auc"] = float("nan")
    assert confirm.cells(rows, "auc", NORM) == {("Hopper-v4", "vaco", "uniform", 8): [0.5, 0.0]}
    assert confirm.left_out(rows, "auc") == {("Hopper-v4", "vaco", "uniform", 8): (1, 1)}


def test_diverged_runs_count_against_their_method():
    # VACO beats PPO-Clip in every run; with 9 of its 10 runs diverged it is worse
    rows = runs("ppo_clip", 8, flat(0.5)) + runs("vaco", 8, flat(0.7))
    call = lambda: only(confirm.primary(rows, "auc", NORM, ["ppo_clip", "vaco"], [("uniform", 8)], (1, 8), R),
                        test="P(X > reference)")
    assert call()["verdict"] == "better"
    for r in rows:
        if r["arm"] == "vaco" and r["seed"] < 9:
            r["diverged"] = True
    assert call()["point"] == pytest.approx(0.1) and call()["verdict"] == "worse"
    with pytest.raises(ValueError, match="no normalisation"):
        confirm.cells(runs("vaco", 8, [1.0], tasks=("Ant-v4",)), "auc", NORM)


@pytest.mark.parametrize("field,value", [("margin", 0.0), ("retention_margin", -0.1), ("floor", -1.0), ("alpha", 1.0),
                                         ("confidence", 0.0), ("reps", 10)])
def test_rules_refuse_bad_numbers_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"Rules.{field}"):
        confirm.Rules(**{field: value})


@pytest.mark.parametrize("lo,hi,rejected,point,want", [
    (-0.09, 0.09, True, 0.9, "equivalent"),  # inside the margin: negligible even when Holm rejects
    (-0.09, 0.11, True, 0.9, "better"),  # one end outside: Holm decides
    (-0.11, 0.09, True, 0.1, "worse"),
    (-0.11, 0.09, False, 0.1, "inconclusive"),
    (0.2, 0.4, False, 0.9, "inconclusive"),  # outside the margin but Holm does not reject
])
def test_call_on_each_side_of_the_margin_and_of_holm(lo, hi, rejected, point, want):
    test = {"difference_low": lo, "difference_high": hi, "point": point, "null": 0.5}
    assert confirm.call(test, rejected, 0.1) == want


@pytest.mark.parametrize("shift,want", [(0.09, "equivalent"), (0.11, "better"), (-0.11, "worse"), (-0.09, "equivalent")])
def test_primary_head_to_head_on_each_side_of_the_margin(shift, want):
    rows = runs("ppo_clip", 8, flat(0.5)) + runs("vaco", 8, flat(0.5 + shift))
    out = confirm.primary(rows, "auc", NORM, ["ppo_clip", "vaco"], [("uniform", 8)], (1, 8), R)
    h = only(out, test="P(X > reference)")
    assert h["verdict"] == want
    assert h["difference"] == pytest.approx(shift)
    assert h["tasks"] == "Hopper-v4 Walker2d-v4"
    # the retention test has no B = 1 runs: a 'no data' row, out of Holm's family
    assert only(out, test="retention X - reference")["verdict"] == "no data"


@pytest.mark.parametrize("factor,want", [(0.9, "inconclusive"), (1.1, "better")])
def test_primary_holm_on_each_side_of_its_threshold(factor, want):
    # six tests: four head-to-heads with the smallest p-value the bootstrap gives (2 / (reps + 1)) and two
    # retention differences of exactly 0 (p = 1). Holm's first step compares the smallest with alpha / 6.
    rows = runs("ppo_clip", 1, flat(0.3)) + runs("ppo_clip", 8, flat(0.3))
    for arm in ("a", "b"):
        rows += runs(arm, 1, flat(0.6)) + runs(arm, 8, flat(0.6))
    p_min = 2.0 / 401
    r = confirm.Rules(reps=400, alpha=6 * p_min * factor)
    out = confirm.primary(rows, "auc", NORM, ["ppo_clip", "a", "b"], [("uniform", 1), ("uniform", 8)], (1, 8), r)
    h2h = [row for row in out if row["test"] == "P(X > reference)"]
    assert len(h2h) == 4 and all(row["p_value"] == pytest.approx(p_min) for row in h2h)
    assert {row["verdict"] for row in h2h} == {want}
    assert all(row["p_holm"] >= row["p_value"] for row in h2h)
    assert {row["verdict"] for row in out if row["test"].startswith("retention")} == {"equivalent"}


def test_primary_is_inconclusive_when_noise_swamps_a_small_effect():
    rows = runs("ppo_clip", 8, spread(0.5, 0.5, n=4, seed=1)) + runs("vaco", 8, spread(0.55, 0.5, n=4, seed=2))
    out = confirm.primary(rows, "auc", NORM, ["ppo_clip", "vaco"], [("uniform", 8)], (1, 8), R)
    h = only(out, test="P(X > reference)")
    assert h["verdict"] == "inconclusive" and h["low"] < 0.5 < h["high"]


@pytest.mark.parametrize("vaco_32,margin,want", [(0.31, 0.1, "better"), (0.27, 0.1, "equivalent"), (0.19, 0.1, "worse"),
                                                 (0.31, 0.13, "equivalent"), (0.27, 0.03, "better")])
def test_retention_difference_on_each_side_of_its_own_margin(vaco_32, margin, want):
    # PPO-Clip keeps 0.4 / 0.8 = 0.5 of its B = 1 score; VACO keeps vaco_32 / 0.5. The score margin (0.1)
    # is not the retention's.
    rows = runs("ppo_clip", 1, flat(0.8)) + runs("ppo_clip", 32, flat(0.4))
    rows += runs("vaco", 1, flat(0.5)) + runs("vaco", 32, flat(vaco_32))
    r = confirm.Rules(reps=400, retention_margin=margin)
    out = confirm.primary(rows, "auc", NORM, ["ppo_clip", "vaco"], [], (1, 32), r)
    t = only(out, test="retention X - reference")
    assert t["point"] == pytest.approx(vaco_32 / 0.5 - 0.5)
    assert t["verdict"] == want


@pytest.mark.parametrize("ref,x,flagged", [(0.09, 0.04, "Hopper-v4 Walker2d-v4"), (0.11, 0.04, ""), (0.04, 0.11, "")])
def test_floor_flag_needs_both_methods_below_it(ref, x, flagged):
    rows = runs("ppo_clip", 32, flat(ref)) + runs("vaco", 32, flat(x))
    h = only(confirm.primary(rows, "auc", NORM, ["ppo_clip", "vaco"], [("uniform", 32)], (1, 32), R),
             test="P(X > reference)")
    assert h["at_floor"] == flagged


def test_per_task_rows_carry_their_own_verdict_and_flags():
    rows = runs("ppo_clip", 8, flat(0.5), tasks=("Hopper-v4",)) + runs("vaco", 8, flat(0.7), tasks=("Hopper-v4",))
    rows += runs("ppo_clip", 8, flat(0.05), tasks=("Walker2d-v4",)) + runs("vaco", 8, flat(0.02), tasks=("Walker2d-v4",))
    out = confirm.per_task(rows, "auc", NORM, ["ppo_clip", "vaco"], [("uniform", 8)], R, ceiling={"Hopper-v4": True})
    hop, walk = only(out, tasks="Hopper-v4"), only(out, tasks="Walker2d-v4")
    assert (hop["verdict"], hop["at_floor"], hop["at_ceiling"]) == ("holds", "", True)
    assert (walk["verdict"], walk["at_floor"], walk["at_ceiling"]) == ("fails", "Walker2d-v4", False)


def test_lag_model_is_part_of_the_cell():
    rows = runs("ppo_clip", 8, flat(0.5)) + runs("vaco", 8, flat(0.8), lag_model="fixed")
    out = confirm.primary(rows, "auc", NORM, ["ppo_clip", "vaco"], [("uniform", 8), ("fixed", 8)], (1, 8), R)
    assert {r["lag_model"]: r["verdict"] for r in out if r["test"] == "P(X > reference)"} == {
        "uniform": "no data", "fixed": "no data"}


@pytest.mark.parametrize("fixed_contrast,overall,flips", [
    (-0.3, "ranking changes", ["a - b"]),  # a ahead under uniform lag, behind under fixed lag
    (0.3, "no change beyond the margin", []),
    (0.21, "no change beyond the margin", []),  # a change of -0.09, inside the margin of 0.1
    (0.19, "contrasts change", []),  # -0.11: outside it, and rejected; the order holds
])
def test_shape_dependence(fixed_contrast, overall, flips):
    rows = runs("a", 8, flat(0.6)) + runs("b", 8, flat(0.3))
    rows += runs("a", 8, flat(0.3 + fixed_contrast), "fixed") + runs("b", 8, flat(0.3), "fixed")
    out = confirm.shape_dependence(rows, "auc", NORM, ["a", "b"], 8, ("uniform", "fixed"), R)
    assert out["overall"] == overall and out["flips"] == flips
    assert out["pairs"][0]["change"] == pytest.approx(fixed_contrast - 0.3)


def test_shape_dependence_unresolved_when_noisy():
    rows = runs("a", 8, spread(0.5, 0.4, 4, 11)) + runs("b", 8, spread(0.5, 0.4, 4, 12))
    rows += runs("a", 8, spread(0.5, 0.4, 4, 13), "fixed") + runs("b", 8, spread(0.5, 0.4, 4, 14), "fixed")
    out = confirm.shape_dependence(rows, "auc", NORM, ["a", "b"], 8, ("uniform", "fixed"), R)
    pair = out["pairs"][0]
    assert out["overall"] == "not resolved" and pair["low"] < 0 < pair["high"] and pair["high"] - pair["low"] > 0.2


def test_the_equivalence_call_reads_the_90_percent_interval_not_the_95():
    rows = runs("ppo_clip", 8, spread(0.5, 0.3, 10, 5)) + runs("vaco", 8, spread(0.5, 0.3, 10, 6))
    h = only(confirm.primary(rows, "auc", NORM, ["ppo_clip", "vaco"], [("uniform", 8)], (1, 8), R),
             test="P(X > reference)")
    table = confirm.cells(rows, "auc", NORM)
    ts = ["Hopper-v4", "Walker2d-v4"]
    x, y = confirm.sample(table, ts, "vaco", "uniform", 8), confirm.sample(table, ts, "ppo_clip", "uniform", 8)
    from vaco_jax.analysis import rules
    assert (h["difference_low"], h["difference_high"]) == rules.difference(x, y, R.reps, R.seed, 0.90)[1:]
    wide = rules.difference(x, y, R.reps, R.seed, 0.95)
    assert wide[1] < h["difference_low"] and h["difference_high"] < wide[2]


def test_two_sided_p_at_its_extremes_and_in_between():
    n = 999
    assert confirm.two_sided(np.full(n, 0.9), 0.5) == pytest.approx(2 / (n + 1))  # every replicate above
    assert confirm.two_sided(np.full(n, 0.1), 0.5) == pytest.approx(2 / (n + 1))  # every replicate below
    assert confirm.two_sided(np.linspace(0, 1, n), 0.5) == 1.0  # centred: capped at 1
    # 10% of the replicates at or below the null: p = 2 x (1 + 100) / 1000
    values = np.concatenate([np.full(100, 0.4), np.full(899, 0.6)])
    assert confirm.two_sided(values, 0.5) == pytest.approx(0.202)
