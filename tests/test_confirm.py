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


def test_cells_leave_out_diverged_and_missing_runs_and_count_them():
    rows = runs("vaco", 8, [0.5, 0.6, 0.7], tasks=("Hopper-v4",))
    rows[1]["diverged"] = True
    rows[2]["auc"] = float("nan")
    assert confirm.cells(rows, "auc", NORM) == {("Hopper-v4", "vaco", "uniform", 8): [0.5]}
    assert confirm.left_out(rows, "auc") == {("Hopper-v4", "vaco", "uniform", 8): (1, 1)}
    with pytest.raises(ValueError, match="no normalisation"):
        confirm.cells(runs("vaco", 8, [1.0], tasks=("Ant-v4",)), "auc", NORM)


@pytest.mark.parametrize("field,value", [("margin", 0.0), ("floor", -1.0), ("alpha", 1.0), ("confidence", 0.0),
                                         ("reps", 10)])
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


@pytest.mark.parametrize("vaco_32,want", [(0.31, "better"), (0.27, "equivalent"), (0.19, "worse")])
def test_retention_difference_on_each_side(vaco_32, want):
    # PPO-Clip keeps 0.4 / 0.8 = 0.5 of its B = 1 score; VACO keeps vaco_32 / 0.5
    rows = runs("ppo_clip", 1, flat(0.8)) + runs("ppo_clip", 32, flat(0.4))
    rows += runs("vaco", 1, flat(0.5)) + runs("vaco", 32, flat(vaco_32))
    out = confirm.primary(rows, "auc", NORM, ["ppo_clip", "vaco"], [], (1, 32), R)
    t = only(out, test="retention X - reference")
    assert t["point"] == pytest.approx(vaco_32 / 0.5 - 0.5)
    assert t["verdict"] == want


@pytest.mark.parametrize("level,flagged", [(0.09, "Hopper-v4 Walker2d-v4"), (0.11, "")])
def test_floor_flag_on_each_side(level, flagged):
    rows = runs("ppo_clip", 32, flat(level)) + runs("vaco", 32, flat(level - 0.05))
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


@pytest.mark.parametrize("fixed_contrast,overall,flips", [(-0.3, "depends", ["a - b"]), (0.3, "does not", []),
                                                          (0.2, "depends", [])])
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


def test_tuning_robust():
    assert confirm.tuning_robust({0.06: "worse", 0.2: "worse"}) == "worse"
    assert confirm.tuning_robust({0.06: "worse", 0.2: "better"}) == "depends on tuning"
    with pytest.raises(ValueError):
        confirm.tuning_robust({})


def test_two_sided_p_matches_a_slow_count():
    values = np.random.default_rng(3).normal(0.55, 0.1, 999)
    below, above = sum(v <= 0.5 for v in values), sum(v >= 0.5 for v in values)
    assert confirm._two_sided(values, 0.5) == pytest.approx(2 * (1 + min(below, above)) / 1000)
