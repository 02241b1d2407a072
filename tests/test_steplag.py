"""The step size x lag study's stage-1 rules (``vaco_jax.analysis.surfaces``) on synthetic rows, each on
both sides of its threshold, and its driver's plan (``vaco_jax.studies.steplag``) on the committed protocol."""

import math
import os
import shutil

import pytest

from vaco_jax.analysis import surfaces as S

NORM = {"A": (0.0, 100.0), "B": (10.0, 110.0)}


def rows_for(means: dict, tasks=("A", "B"), lags=(1, 32), seeds=(0, 1, 2), spread=0.0, diverged=(), missing=()):
    """Rows whose raw AUC is ``random + s * (reference - random)`` with s = means[v] (+ seed spread)."""
    out = []
    for v, s in means.items():
        for t in tasks:
            lo, hi = NORM[t]
            for b in lags:
                for seed in seeds:
                    sv = s(b) if callable(s) else s
                    raw = lo + (sv + spread * (seed - 1)) * (hi - lo)
                    if (v, t, b, seed) in missing:
                        raw = ""
                    out.append({"env": t, "lag_depth": b, "seed": seed, "value": v, "auc": raw,
                                "diverged": (v, t, b, seed) in diverged})
    return out


def test_floored_is_zero_below_random_and_normalised_above():
    assert S.floored(-50.0, 0.0, 100.0) == 0.0
    assert S.floored(0.0, 0.0, 100.0) == 0.0
    assert S.floored(150.0, 0.0, 100.0) == pytest.approx(1.5)
    assert math.isnan(S.floored(float("nan"), 0.0, 100.0))
    with pytest.raises(ValueError, match="not above"):
        S.floored(1.0, 100.0, 100.0)


def test_robust_choice_is_the_largest_mean_over_tasks_and_lags():
    rows = rows_for({0.1: lambda b: 1.0 if b == 1 else 0.2, 0.3: 0.7, 1.0: lambda b: 0.3 if b == 1 else 0.9})
    c = S.robust_choice(rows, "auc", NORM)
    assert c["R"][0.1] == pytest.approx(0.6) and c["R"][0.3] == pytest.approx(0.7) and c["R"][1.0] == pytest.approx(0.6)
    assert c["value"] == 0.3
    # the per-lag optima differ from the robust choice
    assert S.per_lag_optima(rows, "auc", NORM) == {1: 0.1, 32: 1.0}


def test_the_floor_changes_the_choice_a_collapsed_run_would_decide():
    """Without the floor, one run far below random would sink a value; floored, it counts as random."""
    rows = rows_for({0.1: 0.5, 0.3: 0.45})
    for r in rows:
        if r["value"] == 0.1 and r["env"] == "A" and r["lag_depth"] == 32 and r["seed"] == 0:
            r["auc"] = -10_000.0  # far below A's random score 0
    assert S.robust_choice(rows, "auc", NORM)["value"] == 0.1  # floored: R = 0.5 - 0.5/12 > 0.45
    mean_unfloored = (0.5 * 11 + (-10_000.0 / 100.0)) / 12
    assert mean_unfloored < 0.45  # unfloored it would have lost


@pytest.mark.parametrize("kind", ["diverged", "missing"])
def test_a_value_with_a_diverged_or_missing_run_is_never_chosen(kind):
    bad = {(0.3, "B", 32, 2)}
    rows = rows_for({0.1: 0.5, 0.3: 0.9}, **{kind: bad})
    c = S.robust_choice(rows, "auc", NORM)
    assert c["value"] == 0.1 and c["excluded"] == {0.3: [kind]}
    clean = S.robust_choice(rows_for({0.1: 0.5, 0.3: 0.9}), "auc", NORM)
    assert clean["value"] == 0.3 and clean["excluded"] == {}


def test_a_value_missing_a_cell_is_incomplete_and_not_chosen():
    rows = [r for r in rows_for({0.1: 0.5, 0.3: 0.9}) if not (r["value"] == 0.3 and r["seed"] == 2 and r["env"] == "A")]
    c = S.robust_choice(rows, "auc", NORM)
    assert c["value"] == 0.1 and "incomplete" in c["excluded"][0.3]


def test_a_tie_goes_to_the_smaller_value():
    assert S.robust_choice(rows_for({0.3: 0.7, 0.1: 0.7, 1.0: 0.5}), "auc", NORM)["value"] == 0.1


def test_edge_extensions_at_each_edge_and_at_most_twice():
    values = [0.02, 0.06, 0.2, 0.6, 1.8]
    assert S.edge_extensions(values, [0.2, 0.6], {}) == []  # interior: none
    assert S.edge_extensions(values, [0.02], {}) == [pytest.approx(0.02 * 0.02 / 0.06, rel=1e-3)]
    assert S.edge_extensions(values, [1.8, 0.2], {}) == [pytest.approx(5.4)]
    assert S.edge_extensions(values, [0.02, 1.8], {}) == [pytest.approx(0.006667, rel=1e-3), pytest.approx(5.4)]
    assert S.edge_extensions(values + [5.4], [5.4], {"high": 1}) == [pytest.approx(16.2)]
    assert S.edge_extensions(values + [5.4, 16.2], [16.2], {"high": 2}) == []  # the cap: reported at the edge
    assert S.edge_extensions(values, [None], {}) == []


def test_a_cap_grid_log_spaced_in_log_c_extends_on_log_c_and_stays_above_1():
    caps = [1.08, 1.26, 2.0, 8.0, 512.0]  # log C = 0.077 ... 6.24, ratio 3
    low = S.edge_extensions(caps, [1.08], {}, in_log=True)
    assert low == [pytest.approx(2 ** (1 / 27), rel=2e-3)] and low[0] > 1  # log C / 3, not 1.08 * 1.08 / 1.26 < 1
    assert S.edge_extensions(caps, [512.0], {}, in_log=True) == [pytest.approx(2.0 ** 27, rel=2e-3)]
    with pytest.raises(ValueError, match="above 1"):
        S.edge_extensions([0.5, 2.0], [0.5], {}, in_log=True)


def test_the_driver_extends_tis_and_mis_on_log_c(tmp_path):
    """The TIS surface's optimum at the grid's low edge asks for C = 2^(1/27), never a cap below 1."""
    import sys
    sys.path.insert(0, os.path.dirname(__file__))
    import test_steplag_stage2 as T
    from vaco_jax.studies import steplag, steplag_stage1

    p = T._protocol()
    res = str(tmp_path / "results")
    vals = p["stage1"]["surfaces"]["tis"]["values"]
    T._write_surface(res, p, "tis", {vals[0]: 0.9, vals[1]: 0.5, vals[2]: 0.4, vals[3]: 0.3, vals[4]: 0.2}, spread=0.05)
    points, state = steplag_stage1.extensions_state(p, res, "tis", "unknown")
    assert state == "complete" and points == [pytest.approx(1.026, abs=1e-3)]
    names = {u.name for u in steplag.all_units(p, T._args(tmp_path))[0]}
    assert "extend/Hopper-v4/tis/1.026" in names


@pytest.mark.parametrize("tied", [True, False])
def test_a_lag_where_every_value_scores_the_same_has_no_optimum_and_asks_no_extension(tied):
    # at B = 1 a cap on pi_T / beta never acts (the ratio is 1): every value's runs are the same
    at1 = {0.1: 0.7, 0.3: 0.7, 1.0: 0.7} if tied else {0.1: 0.71, 0.3: 0.7, 1.0: 0.7}
    rows = [r for r in rows_for(at1, lags=(1,))] + rows_for({0.1: 0.2, 0.3: 0.6, 1.0: 0.3}, lags=(32,))
    optima = S.per_lag_optima(rows, "auc", NORM)
    assert optima == ({1: None, 32: 0.3} if tied else {1: 0.1, 32: 0.3})
    assert S.edge_extensions([0.1, 0.3, 1.0], [S.robust_choice(rows, "auc", NORM)["value"], *optima.values()], {}) \
        == ([] if tied else [pytest.approx(0.0333, rel=1e-2)])


def test_stability_on_both_sides_of_the_threshold():
    clear = S.stability(rows_for({0.1: 0.3, 0.3: 0.9}, spread=0.05), "auc", NORM, reps=400)
    assert clear["value"] == 0.3 and clear["share"] == 1.0 and clear["stable"]
    assert clear["within_noise"] == [0.3]
    # two values within the seeds' noise: the bootstrap picks each often
    rows = rows_for({0.1: 0.50, 0.3: 0.51})
    for r in rows:  # seed-specific noise, opposite in sign for the two values
        sign = 1 if r["value"] == 0.1 else -1
        r["auc"] = float(r["auc"]) + sign * (r["seed"] - 1) * 8.0
    close = S.stability(rows, "auc", NORM, reps=400)
    assert close["share"] < S.STABILITY_THRESHOLD and not close["stable"]
    assert set(close["within_noise"]) == {0.1, 0.3}
    assert sum(close["picks"].values()) == pytest.approx(1.0)


def test_stability_threshold_and_noise_share_are_inclusive(monkeypatch):
    rows = rows_for({0.1: 0.3, 0.3: 0.9}, spread=0.05)
    monkeypatch.setattr(S, "STABILITY_THRESHOLD", 1.0)
    assert S.stability(rows, "auc", NORM, reps=50)["stable"]  # share 1.0 == threshold: stable
    monkeypatch.setattr(S, "NOISE_SHARE", 1.0)
    assert S.stability(rows, "auc", NORM, reps=50)["within_noise"] == [0.3]  # pick share 1.0 == NOISE_SHARE


# ----------------------------------------------------------------------------- the driver's plan

def _args(tmp_path, stage="plan"):
    from vaco_jax.studies.steplag import Args
    return Args(stage=stage, results=str(tmp_path / "results"), runs=str(tmp_path / "runs"))


def test_the_plan_reuses_the_first_study_and_runs_the_check_first(tmp_path):
    from vaco_jax.studies import kit
    from vaco_jax.studies import steplag, steplag_stage1

    p, _ = kit.load_protocol(steplag.PROTOCOL)
    steplag.check_protocol(p)
    units, reuse = steplag.all_units(p, _args(tmp_path))
    assert reuse == "unknown" and units[0].name == "reuse_check" and units[0].runs == 1
    by = {u.name: u for u in units}
    assert by["surface/Hopper-v4/ppo_clip"].runs == 45 - 12  # 12 cells from the first study
    assert by["surface/Hopper-v4/vaco_learner"].runs == 45  # never run before
    assert by["surface/Hopper-v4/m2po"].runs == 30  # Hopper only, B in 1, 32
    reused = steplag_stage1.reused_cells(p, "Hopper-v4", "ppo_clip")
    assert {(b, v) for b, _, v in reused} == {(1, 0.2), (8, 0.2), (32, 0.2), (32, 0.6)}
    cells = {(c.lag_depth, c.seed, c.knob_dict()["clip_epsilon"]) for c in by["surface/Hopper-v4/ppo_clip"].group.cells}
    assert not cells & set(reused)
    assert by["surface/Hopper-v4/vaco_learner"].group.config.build_method().surrogate.tv_denominator == "learner"


@pytest.mark.parametrize("same", [True, False])
def test_a_failed_reuse_check_adds_fill_units(tmp_path, same):
    from vaco_jax.analysis import results
    from vaco_jax.studies import kit
    from vaco_jax.studies import steplag, steplag_stage1

    p, _ = kit.load_protocol(steplag.PROTOCOL)
    c = steplag.CHECK
    then = steplag_stage1.reused_cells(p, c["task"], c["surface"])[(c["lag_depth"], c["seed"], c["value"])]
    d = tmp_path / "results" / "check" / c["task"] / c["surface"]
    os.makedirs(d)
    auc = float(then["auc_eval_return"]) if same else float(then["auc_eval_return"]) + 1e-3
    results.write_table(str(d / "scores.csv"), [{**then, "auc_eval_return": auc}])
    units, reuse = steplag.all_units(p, _args(tmp_path))
    assert reuse == ("holds" if same else "fails")
    fills = [u for u in units if u.name.startswith("fill/")]
    assert (len(fills) == 8) != same  # 4 reused methods x 2 tasks
    shutil.rmtree(tmp_path / "results")


def test_surface_curves_per_task_and_pooled_and_the_figure_draws(tmp_path):
    rows = rows_for({0.1: lambda b: 0.8 if b == 1 else 0.2, 0.3: 0.6, 1.0: 0.4}, spread=0.1)
    rows[0]["diverged"] = True  # value 0.1, task A, B = 1, seed 0: left out of its point
    curves = S.surface_curves(rows, "auc", NORM)
    assert set(curves) == {(p, b) for p in ("A", "B", "pooled") for b in (1, 32)}
    v, mean, lo, hi = curves[("A", 1)][0]
    assert v == 0.1 and mean == pytest.approx(0.85) and (lo, hi) == (pytest.approx(0.8), pytest.approx(0.9))
    v, mean, lo, hi = curves[("pooled", 32)][1]
    assert v == 0.3 and mean == pytest.approx(0.6) and lo == pytest.approx(0.5) and hi == pytest.approx(0.7)
    fig = S.draw_surface(rows, "auc", NORM, "clip_epsilon", "PPO-Clip", chosen=0.3)
    fig.savefig(tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_the_first_screen_names_a_surface_with_no_run_as_to_run(tmp_path):
    """``choices.csv`` leaves ``tasks_in`` empty for a surface with no run; read back it is NaN, and the
    first screen must say "to run", not "on nan"."""
    from vaco_jax.analysis import results
    from vaco_jax.studies import steplag, steplag_findings

    # the tables the first screen reads are the ones ``report`` writes
    assert (steplag_findings.CHOICES, steplag_findings.STAGE2_VERDICTS, steplag_findings.STAGE2_SHAPE) == (
        steplag.CHOICES, steplag.STAGE2_VERDICTS, steplag.STAGE2_SHAPE)
    res = tmp_path / "results" / "steplag"
    res.mkdir(parents=True)
    shutil.copy(os.path.join("results", "steplag", "protocol.json"), res / "protocol.json")
    blank = {k: "" for k in ("contest", "value", "stability", "picks", "R", "R_stage_seeds", "per_lag", "R_H",
                             "excluded", "pending")}
    results.write_table(str(res / steplag.CHOICES), [
        {"surface": "vcpo", "method": "vcpo", "knob": "learning_rate", "runs": 0, "tasks_in": "",
         "state": "incomplete", **blank},
        {"surface": "ppo_clip", "method": "ppo_clip", "knob": "clip_epsilon", "runs": 45, "tasks_in": "Hopper-v4",
         "state": "incomplete", **blank}])
    line = steplag_findings.steplag_summary(str(tmp_path))
    assert "vcpo to run" in line and "ppo_clip on Hopper-v4" in line and "nan" not in line


def test_an_extension_in_on_one_task_only_still_plans_its_other_tasks(tmp_path):
    """A session can end between an extension's units: the extension value then has runs on one task and
    none on the other, and the plan must keep the missing unit (not call the surface incomplete and plan
    nothing), list the finished one as done, and decide the next extension only once both are in."""
    import sys
    sys.path.insert(0, os.path.dirname(__file__))
    import test_steplag_stage2 as T
    from vaco_jax.studies import steplag, steplag_stage1

    p = T._protocol()
    res = str(tmp_path / "results")
    vals = p["stage1"]["surfaces"]["spo"]["values"]
    grid = {vals[0]: 0.1, vals[1]: 0.2, vals[2]: 0.3, vals[3]: 0.5, vals[4]: 0.8}  # best at the upper edge
    for task in ("Hopper-v4", "Walker2d-v4"):
        T._write_surface(res, p, "spo", grid, task=task, spread=0.02)
    points, state = steplag_stage1.extensions_state(p, res, "spo", "unknown")
    assert state == "complete" and points == [pytest.approx(5.4)]
    T._write_surface(res, p, "spo", {5.4: 0.9}, task="Hopper-v4", sub="extend=5.4")
    points, state = steplag_stage1.extensions_state(p, res, "spo", "unknown")
    assert state == "complete" and points == [pytest.approx(5.4)]  # Walker2d-v4's unit is still to run
    names = [u.name for u in steplag.all_units(p, T._args(tmp_path))[0]]
    assert "extend/Hopper-v4/spo/5.4" in names and "extend/Walker2d-v4/spo/5.4" in names
    assert not any("16.2" in n for n in names)  # nothing beyond it is decided on one task
    assert next(r for r in steplag_stage1.stage1_rows(p, res) if r["surface"] == "spo")["state"] == "extension pending"
    T._write_surface(res, p, "spo", {5.4: 0.9}, task="Walker2d-v4", sub="extend=5.4")
    points, state = steplag_stage1.extensions_state(p, res, "spo", "unknown")
    assert state == "complete" and points == [pytest.approx(16.2)]  # still best at the edge: one more
    names = [u.name for u in steplag.all_units(p, T._args(tmp_path))[0]]
    assert {"extend/Hopper-v4/spo/5.4", "extend/Walker2d-v4/spo/5.4", "extend/Hopper-v4/spo/16.2",
            "extend/Walker2d-v4/spo/16.2"} <= set(names)  # the finished extension units stay in the plan
