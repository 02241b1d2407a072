"""The step size x lag study's later units and stage 2 (``vaco_jax.studies.steplag``, ``steplag_stage2``)
on the committed protocol with synthetic scores in a temporary results directory: the stability rule's
added seeds, the stage-2 section's checks, units, draft and verdicts."""

import copy
import shutil
import os

import numpy as np
import pytest

from vaco_jax.analysis import results
from vaco_jax.core.config import ConfigError
from vaco_jax.studies import kit
from vaco_jax.studies import kit_steplag, steplag, steplag_stage1
from vaco_jax.studies import steplag_stage2 as S2


def _args(tmp_path):
    return steplag.Args(stage="plan", results=str(tmp_path / "results"), runs=str(tmp_path / "runs"))


def _protocol():
    return kit.load_protocol(steplag.PROTOCOL)[0]


def _write_surface(results_dir, p, key, means, seeds=(0, 1, 2), spread=0.0, sub="", task="Hopper-v4"):
    """Surface rows on one task whose normalised score is means[v] (a number, or one per seed) + spread * noise."""
    s = p["stage1"]["surfaces"][key]
    lo, hi = steplag_stage1.normalisation(p, key)[task]
    rng = np.random.default_rng(0)
    rows = []
    for v, m in means.items():
        for b in s["lag_depths"]:
            for i, seed in enumerate(seeds):
                sv = (m[i] if isinstance(m, list) else m) + spread * rng.normal()
                rows.append({"env": task, "method": s["method"], "lag_depth": b, "seed": seed, s["knob"]: v,
                             "auc_eval_return": lo + sv * (hi - lo), "diverged": False})
    d = os.path.join(results_dir, "surface", task, key, sub)
    os.makedirs(d, exist_ok=True)
    results.write_table(os.path.join(d, "scores.csv"), rows)


def _unstable(res, p):
    vals = p["stage1"]["surfaces"]["m2po"]["values"]
    # two interior values, each the better on some seeds, the rest far below: the choice is unstable
    _write_surface(res, p, "m2po", {vals[0]: 0.2, vals[1]: [0.9, 0.5, 0.7], vals[2]: [0.5, 0.9, 0.71], vals[3]: 0.3,
                                    vals[4]: 0.1})
    return vals


def test_an_unstable_choice_adds_seeds_to_the_values_within_noise_then_decides_among_them(tmp_path):
    p = _protocol()
    res = str(tmp_path / "results")
    vals = _unstable(res, p)
    noisy, lacking = steplag_stage1.more_seeds(p, res, "m2po", "unknown")
    assert set(noisy) == {vals[1], vals[2]} and lacking == ["Hopper-v4"]
    units = {u.name: u for u in steplag.all_units(p, _args(tmp_path))[0]}
    u = units["seeds/Hopper-v4/m2po"]
    cells = {(c.lag_depth, c.seed, c.knob_dict()["second_moment_budget"]) for c in u.group.cells}
    assert cells == {(b, s, v) for b in (1, 32) for s in steplag.MORE_SEEDS for v in noisy}
    row = next(r for r in steplag_stage1.stage1_rows(p, res) if r["surface"] == "m2po")
    assert row["state"] == "more seeds pending" and row["contest"].startswith("every value")
    # the added seeds favour vals[2]: the rule, computed once more among the two on seeds 0-5, picks it
    _write_surface(res, p, "m2po", {vals[1]: 0.6, vals[2]: 0.8}, seeds=steplag.MORE_SEEDS, sub="more_seeds")
    assert steplag_stage1.more_seeds(p, res, "m2po", "unknown") == (noisy, [])
    row = next(r for r in steplag_stage1.stage1_rows(p, res) if r["surface"] == "m2po")
    assert row["state"] == "complete" and row["value"] == vals[2] and row["excluded"] == ""
    assert row["contest"] == f"values within noise {vals[1]:g} {vals[2]:g} on seeds 0 1 2 3 4 5"
    # no extension is asked for on the added seeds' account, and the unit stays listed (as done)
    assert steplag_stage1.extensions_state(p, res, "m2po", "unknown") == ([], "complete")


def test_the_added_seeds_are_pending_until_every_task_has_them(tmp_path):
    p = _protocol()
    res = str(tmp_path / "results")
    key = "vaco_learner"
    vals = p["stage1"]["surfaces"][key]["values"]
    means = {vals[0]: 0.2, vals[1]: [0.9, 0.5, 0.7], vals[2]: [0.5, 0.9, 0.71], vals[3]: 0.3, vals[4]: 0.1}
    for task in ("Hopper-v4", "Walker2d-v4"):
        _write_surface(res, p, key, means, task=task)
    noisy, lacking = steplag_stage1.more_seeds(p, res, key, "unknown")
    assert len(noisy) == 2 and lacking == ["Hopper-v4", "Walker2d-v4"]
    _write_surface(res, p, key, {v: 0.7 for v in noisy}, seeds=steplag.MORE_SEEDS, sub="more_seeds")
    assert steplag_stage1.more_seeds(p, res, key, "unknown") == (noisy, ["Walker2d-v4"])
    names = {u.name for u in steplag.all_units(p, _args(tmp_path))[0]}
    assert {"seeds/Hopper-v4/vaco_learner", "seeds/Walker2d-v4/vaco_learner"} <= names
    assert next(r for r in steplag_stage1.stage1_rows(p, res) if r["surface"] == key)["state"] == "more seeds pending"


def _with_stage2(p, **change):
    q = copy.deepcopy(p)
    q["stage2"] = {"seeds": list(range(200, 210)),
                   "arms": {"ppo_clip": 0.2, "vaco": 0.2, "vaco_learner": 0.6, "m2po": 0.04},
                   "cells": [{"tasks": ["Hopper-v4", "Walker2d-v4"], "lag_model": "uniform", "lag_depths": [1, 8, 32]},
                             {"tasks": ["Hopper-v4"], "lag_model": "fixed", "lag_depths": [8]}],
                   "rules": dict(S2.DEFAULT_RULES)}
    q["stage2"].update(change)
    return q


def test_stage2_units_follow_the_section():
    q = _with_stage2(_protocol())
    steplag.check_protocol(q)
    units = S2.units(q, steplag.base_config, steplag._unit)
    assert [u.name for u in units][:4] == ["stage2/Hopper-v4/ppo_clip/uniform", "stage2/Hopper-v4/vaco/uniform",
                                          "stage2/Hopper-v4/vaco_learner/uniform", "stage2/Hopper-v4/m2po/uniform"]
    assert len(units) == 4 * 2 + 4 and sum(u.runs for u in units) == 4 * 2 * 30 + 4 * 10
    fixed = [u for u in units if u.name.endswith("/fixed")]
    assert {u.group.config.lag_model for u in fixed} == {"fixed"}
    m2po = next(u for u in units if u.name == "stage2/Hopper-v4/m2po/fixed")
    assert m2po.group.config.second_moment_budget == 0.04
    assert {(c.lag_depth, c.seed) for c in m2po.group.cells} == {(8, s) for s in range(200, 210)}


@pytest.mark.parametrize("change,field", [
    ({"arms": {"ppo_clip": 0.2, "vaco": 0.2, "vaco_learner": 0.6, "nope": 1.0}}, "stage2.arms"),
    ({"arms": {"ppo_clip": 0.2, "vaco": 0.2}}, "stage2.arms"),  # an entry method missing
    ({"arms": {"ppo_clip": 0.2, "vaco": 0.2, "vaco_learner": 0.6, "spo": 1.8, "ppo_kl": 0.3, "m2po": 0.04}},
     "stage2.arms"),  # six methods
    ({"rules": {**S2.DEFAULT_RULES, "margn": 0.2}}, "stage2.rules"),
    ({"rules": {k: v for k, v in S2.DEFAULT_RULES.items() if k != "margin"}}, "stage2.rules"),
    ({"rules": {**S2.DEFAULT_RULES, "retention_lags": [1, 16]}}, "stage2.rules"),
    ({"rules": {**S2.DEFAULT_RULES, "shape": {"lag_depth": 32, "models": ["uniform", "fixed"]}}}, "stage2.rules"),
    ({"seeds": list(range(0, 10))}, "stage2.seeds"),
    ({"seeds": list(range(200, 209))}, "stage2.seeds"),
    ({"cells": [{"tasks": ["Hopper-v4"], "lag_model": "sideways", "lag_depths": [8]}]}, "stage2.cells"),
    ({"cells": [{"tasks": ["Nope-v4"], "lag_model": "uniform", "lag_depths": [8]}]}, "stage2.cells"),
    ({"rules": {**S2.DEFAULT_RULES, "margin": 0.0}}, "Rules.margin"),
])
def test_a_bad_stage2_section_is_refused_naming_the_field(change, field):
    with pytest.raises((ConfigError, ValueError), match=field.replace(".", r"\.")):
        steplag.check_protocol(_with_stage2(_protocol(), **change))


def test_the_draft_takes_the_entry_rule_and_trims_to_the_budget(tmp_path):
    p = _protocol()
    choices = {"ppo_clip": {"value": 0.2, "R_H": 0.9}, "vaco": {"value": 0.2, "R_H": 0.5},
               "vaco_learner": {"value": 0.6, "R_H": 0.4}, "ppo_kl": {"value": 0.3, "R_H": 0.8},
               "spo": {"value": 1.8, "R_H": 0.85}, "m2po": {"value": 0.04, "R_H": 0.7}}
    # per method at the protocol's rates: 3.71 h at the outline, 3.55 h with HalfCheetah-v4 at B in 1, 32,
    # 2.98 h with Walker2d-v4 there too (and the fixed lag on Hopper-v4 alone); the Ant-v4 peer check's
    # 0.7 h comes off the cap first
    p["budget"]["cap_hours"] = 20
    d = S2.draft(p, str(tmp_path), choices, steplag._cost)
    assert d["arms"] == {"ppo_clip": 0.2, "vaco": 0.2, "vaco_learner": 0.6, "spo": 1.8, "ppo_kl": 0.3}
    assert d["cells"] == S2.outlines()[0] and 18.4 < d["estimated_hours"] <= 18.6 and d["hours_left"] == 19.3
    p["budget"]["cap_hours"] = 18.5
    d = S2.draft(p, str(tmp_path), choices, steplag._cost)
    assert d["cells"][:2] == [{"tasks": ["Hopper-v4", "Walker2d-v4"], "lag_model": "uniform", "lag_depths": [1, 8, 32]},
                              {"tasks": ["HalfCheetah-v4"], "lag_model": "uniform", "lag_depths": [1, 32]}]
    assert len(d["arms"]) == 5 and 17.6 < d["estimated_hours"] <= 17.8
    p["budget"]["cap_hours"] = 16
    d = S2.draft(p, str(tmp_path), choices, steplag._cost)
    assert d["cells"] == S2.outlines()[2] and len(d["arms"]) == 5 and 14.8 < d["estimated_hours"] <= 15.3
    assert d["cells"][-1] == {"tasks": ["Hopper-v4"], "lag_model": "fixed", "lag_depths": [8]}
    p["budget"]["cap_hours"] = 13  # four methods
    d = S2.draft(p, str(tmp_path), choices, steplag._cost)
    assert list(d["arms"]) == ["ppo_clip", "vaco", "vaco_learner", "spo"] and d["estimated_hours"] <= 12.3
    p["budget"]["cap_hours"] = 1
    assert S2.draft(p, str(tmp_path), choices, steplag._cost)["estimated_hours"] is None


def _stage2_scores(res, diverge=None):
    """Synthetic stage-2 runs of PPO-Clip and VACO (VACO loses less under lag) on the section of
    ``_with_stage2``; ``diverge``: (task, arm, model, B, seed) of a run marked diverged."""
    rng = np.random.default_rng(1)
    for task in ("Hopper-v4", "Walker2d-v4"):
        for arm, at in (("ppo_clip", {1: 2000, 8: 1500, 32: 1000}), ("vaco", {1: 2000, 8: 1900, 32: 1800})):
            for model, lags in (("uniform", (1, 8, 32)), ("fixed", (8,))):
                if model == "fixed" and task != "Hopper-v4":
                    continue
                rows = [{"env": task, "method": arm, "lag_depth": b, "seed": s,
                         "diverged": (task, arm, model, b, s) == diverge,
                         "auc_eval_return": at[b] + 30 * rng.normal()} for b in lags for s in range(200, 210)]
                d = os.path.join(res, "stage2", task, arm, model)
                os.makedirs(d)
                results.write_table(os.path.join(d, "scores.csv"), rows)
    results.write_json(os.path.join(res, "stage2", "random_scores.json"), {"Hopper-v4": 20.0, "Walker2d-v4": 5.0})


def _finish(res, names):
    """Manifest lines saying these units finished (what the driver writes when a unit's runs are in)."""
    path = os.path.join(res, "manifest.csv")
    old = results.read_table(path) if os.path.exists(path) else []
    results.write_table(path, old + [{"unit": n, "runs": 30, "protocol_sha256": "x", "finished": "2026-12-06 12:00 UTC",
                                      "seconds_this_session": 100.0, "estimated_minutes": 2.0} for n in names])


def test_stage2_verdicts_from_committed_scores(tmp_path):
    q = _with_stage2(_protocol(), arms={"ppo_clip": 0.2, "vaco": 0.2})
    res = str(tmp_path / "results")
    _stage2_scores(res)
    got = kit_steplag.stage2_rows(res)
    assert {(r["arm"], r["lag_model"]) for r in got} == {(a, m) for a in ("ppo_clip", "vaco") for m in ("uniform", "fixed")}
    norm = kit_steplag.stage2_scale(got, res, "auc_eval_return")
    assert norm["Hopper-v4"][0] == 20.0 and norm["Hopper-v4"][1] == pytest.approx(2000, abs=30)
    v = S2.verdicts(q, res)
    calls = {(r["test"], r["lag_model"], r["lag_depth"]): r["verdict"] for r in v["primary"]}
    assert calls[("P(X > reference)", "uniform", 32)] == "better"
    assert calls[("P(X > reference)", "uniform", 1)] == "equivalent"  # the same mean, noise 30 on ~2,000
    assert calls[("retention X - reference", "uniform", 32)] == "better"
    assert calls[("P(X > reference)", "fixed", 8)] == "better"
    assert v["shape"]["lag_depth"] == 8 and v["left_out"] == {} and v["unscaled"] == []
    assert all(np.isnan(r["setting_stability"]) for r in v["primary"])  # no choices.csv in this directory
    results.write_table(os.path.join(res, "choices.csv"), [{"surface": "vaco", "stability": 0.85},
                                                           {"surface": "ppo_clip", "state": "incomplete"}])
    assert {r["setting_stability"] for r in S2.verdicts(q, res)["primary"]} == {0.85}
    # B = 1 PPO-Clip is within 2% of the best run (VACO's, also ~2000) in most runs: at its ceiling
    assert {r["tasks"]: r["at_ceiling"] for r in v["per_task"]} == {"Hopper-v4": True, "Walker2d-v4": True}
    _finish(res, S2.unit_names(q))
    text = steplag.report(q, res)
    assert "stage 2 (primary" in text and "better" in text


def test_no_interim_verdict_before_the_last_unit(tmp_path):
    q = _with_stage2(_protocol(), arms={"ppo_clip": 0.2, "vaco": 0.2})
    res = str(tmp_path / "results")
    _stage2_scores(res)
    names = S2.unit_names(q)
    assert names == ["stage2/Hopper-v4/ppo_clip/uniform", "stage2/Hopper-v4/vaco/uniform",
                     "stage2/Walker2d-v4/ppo_clip/uniform", "stage2/Walker2d-v4/vaco/uniform",
                     "stage2/Hopper-v4/ppo_clip/fixed", "stage2/Hopper-v4/vaco/fixed"]
    assert names == [u.name for u in S2.units(q, steplag.base_config, steplag._unit)]
    _finish(res, names[:-1])  # every unit but one: the scores are all there, the manifest says one is not
    assert S2.progress(q, res) == (names[:-1], names) and not S2.complete(q, res)
    text = steplag.report(q, res)
    assert "stage 2: 5 of 6 units finished" in text and "stage 2 (primary" not in text
    assert not os.path.exists(os.path.join(res, steplag.STAGE2_VERDICTS))
    assert not os.path.exists(os.path.join(res, steplag.STAGE2_SHAPE))
    _finish(res, names[-1:])
    assert S2.complete(q, res)
    assert "stage 2 (primary" in steplag.report(q, res)
    shape = results.read_table(os.path.join(res, steplag.STAGE2_SHAPE))
    assert [r["pair"] for r in shape] == ["ppo_clip - vaco"] and shape[0]["lag_depth"] == 8
    assert shape[0]["overall"] == S2.verdicts(q, res)["shape"]["overall"]


def test_the_stage2_findings_block_grows_with_the_units_then_shows_the_verdicts(tmp_path):
    import json

    from vaco_jax.studies import steplag_findings
    q = _with_stage2(_protocol(), arms={"ppo_clip": 0.2, "vaco": 0.2})
    res = tmp_path / "results" / "steplag"
    os.makedirs(res)
    no_section = steplag_findings.steplag_stage2_table  # before the section exists
    assert no_section(str(tmp_path)).startswith("No step size × lag study")
    with open(res / "protocol.json", "w") as f:
        json.dump({k: v for k, v in _protocol().items() if k != "stage2"}, f)
    assert no_section(str(tmp_path)).startswith("Stage 2 is not fixed yet")
    with open(res / "protocol.json", "w") as f:
        json.dump(q, f)
    _stage2_scores(str(res), diverge=("Hopper-v4", "vaco", "uniform", 32, 203))
    names = S2.unit_names(q)
    assert "none of its 6 units has finished yet" in steplag_findings.steplag_stage2_table(str(tmp_path))
    _finish(str(res), names[:2])
    text = steplag_findings.steplag_stage2_table(str(tmp_path))
    assert "2 of 6 units finished" in text and "No verdict yet" in text
    rows = [line for line in text.splitlines() if line.startswith("| Hopper-v4")]
    assert len(rows) == 2 and "PPO-Clip, clip_epsilon = 0.2" in rows[0] and "VACO, tv_budget = 0.2" in rows[1]
    # the diverged run is counted and left out of its cell's mean
    kept = [float(r["auc_eval_return"]) for r in results.read_table(str(res / "stage2/Hopper-v4/vaco/uniform/scores.csv"))
            if int(r["lag_depth"]) == 32 and not r["diverged"]]
    assert f"{np.mean(kept):,.0f} ± {np.std(kept, ddof=1):,.0f} (9; 1 diverged)" in rows[1]
    assert "Stage 2 is fixed in the protocol" in steplag_findings.steplag_summary(str(tmp_path))
    assert "2 of its 6 units finished, no verdict before the last" in steplag_findings.steplag_summary(str(tmp_path))
    _finish(str(res), names[2:])
    steplag.report(q, str(res))
    text = steplag_findings.steplag_stage2_table(str(tmp_path))
    assert "6 of 6 units finished" in text and "No verdict yet" not in text
    assert "| P(X > PPO-Clip) | VACO, tv_budget = 0.2 | uniform | 32 |" in text and "**better**" in text
    # the equivalence call's own difference and 90% interval stand beside each verdict
    v = [r for r in results.read_table(str(res / steplag.STAGE2_VERDICTS)) if r["family"] == "primary"]
    r = v[0]
    d = f"{r['difference']:+.3f} [{r['difference_low']:+.3f}, {r['difference_high']:+.3f}]".replace("-", "−")
    assert "difference [90% interval]" in text and d in text
    summary = steplag_findings.steplag_summary(str(tmp_path))
    assert "6 of its 6 units finished; its primary family (`stage2_verdicts.csv`, " in summary
    from vaco_jax.analysis.confirm import VERDICTS
    counts = {k: [x["verdict"] for x in v].count(k) for k in VERDICTS}
    assert ", ".join(f"{n} {k}" for k, n in counts.items() if n) in summary and "the lag's shape" in summary
    paths = steplag.draw_figures(q, str(res), str(tmp_path / "figures"))
    assert str(tmp_path / "figures" / "stage2.png") in paths and os.path.getsize(tmp_path / "figures" / "stage2.png") > 0
    assert "The lag's shape at B = 8" in text and "| VACO − PPO-Clip |" not in text and "| PPO-Clip − VACO |" in text


@pytest.mark.slow
def test_the_committed_rules_recompute_from_the_per_run_scores(tmp_path):
    """``results/steplag/choices.csv`` (and ``stage2_verdicts.csv`` once stage 2 is fixed) are what the
    protocol's rules give on the committed per-run scores: an edited or stale table fails here."""
    p = _protocol()
    res = steplag.RESULTS
    committed = os.path.join(res, steplag.CHOICES)
    assert os.path.exists(committed), "run `python experiments/steplag.py report` and commit its tables"
    results.write_table(str(tmp_path / "choices.csv"), steplag_stage1.stage1_rows(p, res))
    with open(committed) as f, open(tmp_path / "choices.csv") as g:
        assert f.read() == g.read()
    if "stage2" in p and S2.complete(p, res):
        v = S2.verdicts(p, res)
        results.write_table(str(tmp_path / "v.csv"), [{"family": "primary", **r} for r in v["primary"]]
                            + [{"family": "per task", **r} for r in v["per_task"]])
        with open(os.path.join(res, steplag.STAGE2_VERDICTS)) as f, open(tmp_path / "v.csv") as g:
            assert f.read() == g.read()
        results.write_table(str(tmp_path / "shape.csv"), S2.shape_rows(v["shape"]))
        with open(os.path.join(res, steplag.STAGE2_SHAPE)) as f, open(tmp_path / "shape.csv") as g:
            assert f.read() == g.read()
    else:  # no interim verdict is committed
        assert not os.path.exists(os.path.join(res, steplag.STAGE2_VERDICTS))


# ----------------------------------------------------------------------------- report and run guards

def _snapshot(root) -> dict:
    """Every file under ``root`` with its bytes: what a refused command must leave as it was."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                out[os.path.relpath(os.path.join(d, f), root)] = fh.read()
    return out


def _committed_copy(tmp_path):
    """A copy of the committed step size x lag study (protocol, manifest, every unit's tables)."""
    res = tmp_path / "results"
    shutil.copytree(steplag.RESULTS, res)
    return res


def _main(tmp_path, stage, res, *, protocol=None, **kw):
    return steplag.main(steplag.Args(stage=stage, protocol=str(protocol or res / "protocol.json"), results=str(res),
                                     runs=str(tmp_path / "runs"), figures=str(tmp_path / "figures"), **kw))


def test_report_under_an_edited_protocol_is_refused_unless_the_change_is_a_recorded_deviation(tmp_path):
    import json
    res = _committed_copy(tmp_path)
    p = json.load(open(res / "protocol.json"))
    p["stage2"]["rules"]["margin"] = 0.2  # the verdicts would change under it
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(p, indent=1))
    before = _snapshot(res)
    with pytest.raises(ConfigError, match=f"protocol: {edited} .*not the protocol the units ran under"):
        _main(tmp_path, "report", res, protocol=edited)
    assert _snapshot(res) == before and not os.path.exists(tmp_path / "figures")
    digest = kit.load_protocol(str(edited))[1]
    kit.check_report_protocol(str(res), kit.load_protocol(str(res / "protocol.json"))[1], "p")  # committed: fine
    rows = results.read_table(str(res / "deviations.csv"))
    results.write_table(str(res / "deviations.csv"), rows + [{**rows[-1], "protocol_sha256": digest}])
    kit.check_report_protocol(str(res), digest, str(edited))  # recorded as a deviation: computed under it


@pytest.mark.parametrize("unit, damage", [("stage2/Hopper-v4/vaco/uniform", "delete"),
                                          ("surface/Hopper-v4/ppo_clip", "edit"), ("seeds/Hopper-v4/sapo", "delete")])
def test_a_finished_units_lost_table_is_named_by_report_and_plan_and_nothing_is_rewritten(tmp_path, unit, damage):
    res = _committed_copy(tmp_path)
    path = res / steplag.unit_dir(unit) / "scores.csv"
    if damage == "delete":
        os.remove(path)
        if os.path.exists(str(path) + ".sha256"):  # (an older table carries its checksum as a footer)
            os.remove(str(path) + ".sha256")
    else:
        path.write_text(path.read_text().replace("Hopper-v4", "Hopper-v5", 1))
    before = _snapshot(res)
    for stage in ("report", "plan"):  # plan never says "done" for what report cannot read
        with pytest.raises(results.ResultsError, match=f"1 unit.*: {unit} \\({path}: "):
            _main(tmp_path, stage, res)
    assert _snapshot(res) == before and not os.path.exists(tmp_path / "figures")


def test_unit_folders_follow_from_the_names_as_the_plan_makes_them(tmp_path):
    p = _with_stage2(_protocol())
    res = str(tmp_path / "results")
    c = steplag.CHECK  # a failed reuse check: fill units
    then = steplag_stage1.reused_cells(p, c["task"], c["surface"])[(c["lag_depth"], c["seed"], c["value"])]
    os.makedirs(os.path.join(res, "check", c["task"], c["surface"]))
    results.write_table(os.path.join(res, "check", c["task"], c["surface"], "scores.csv"),
                        [{**then, "auc_eval_return": float(then["auc_eval_return"]) + 1.0}])
    vals = p["stage1"]["surfaces"]["spo"]["values"]  # best at the upper edge: extension units
    for task in ("Hopper-v4", "Walker2d-v4"):
        _write_surface(res, p, "spo", {v: 0.1 * (i + 1) for i, v in enumerate(vals)}, task=task, spread=0.02)
    _unstable(res, p)  # added seeds
    units = steplag.all_units(p, _args(tmp_path))[0]
    kinds = {u.name.split("/")[0] for u in units}
    assert kinds == {"reuse_check", "surface", "fill", "extend", "seeds", "stage2"}
    assert all(steplag.unit_dir(u.name) == os.path.join(u.stage, u.group.subdir) for u in units)
    with pytest.raises(ConfigError, match="manifest unit 'nope/x'"):
        steplag.unit_dir("nope/x")


def _unit_tables(folder, rows=1):
    os.makedirs(folder, exist_ok=True)
    results.write_table(os.path.join(folder, "scores.csv"), [{"env": "Hopper-v4", "seed": i, "auc_eval_return": 1.0}
                                                              for i in range(rows)])
    results.write_table(os.path.join(folder, "curves.csv"), [{"seed": i, "chunk": 0} for i in range(rows)])
    results.write_cells(folder, [{"lag_depth": 1, "seed": i} for i in range(rows)])
    results.write_json(os.path.join(folder, "config.json"), {"env": "Hopper-v4"})


def test_run_copies_back_a_lost_or_half_copied_unit_and_collects_one_never_copied_with_its_cpu(tmp_path, capsys):
    import types

    from vaco_jax.driver import provenance
    res, runs = tmp_path / "results", tmp_path / "runs"
    names = ["surface/Hopper-v4/ppo_clip", "surface/Hopper-v4/vaco", "surface/Walker2d-v4/vaco"]
    for n in names:
        _unit_tables(runs / steplag.unit_dir(n))
    for n in names[:2]:
        _unit_tables(res / steplag.unit_dir(n))
    _finish(str(res), names[:2])
    os.remove(res / steplag.unit_dir(names[0]) / "scores.csv")  # lost
    curves = res / steplag.unit_dir(names[1]) / "curves.csv"
    curves.write_text(curves.read_text()[:-3])  # half-copied
    here = provenance.machine()
    os.makedirs(runs / "surface", exist_ok=True)
    results.write_json(str(runs / "surface" / "run.json"), {"machines": [{**here, "cpu": "Some CPU"}]})
    with pytest.raises(results.ResultsError, match="2 unit.*copy back what .* still holds .* with `run`"):
        kit.check_units_present(str(res), str(runs), steplag.unit_dir)  # plan and report: named
    args = types.SimpleNamespace(results=str(res), runs=str(runs), deviation="", protocol="p", units=(), minutes=10.0)
    units = [kit.Unit(n, "surface", types.SimpleNamespace(subdir=steplag.unit_dir(n).split(os.sep, 1)[1]), 1, 1.0)
             for n in names]
    kit.start_run(units, args, "x", steplag.unit_dir)
    assert kit.unit_problems(str(res), steplag.unit_dir) == {}
    manifest = {r["unit"]: r for r in results.read_table(str(res / "manifest.csv"))}
    assert set(manifest) == set(names) and manifest[names[2]]["protocol_sha256"] == "x"
    assert manifest[names[2]]["cpu"] == "Some CPU"  # from the run directory's run.json
    assert "copied back" in capsys.readouterr().out
    # a unit this machine has just finished: its CPU model, which run.json records among its machines
    results.write_json(str(runs / "surface" / "run.json"), {"machines": [{**here, "cpu": "Other"}, here]})
    assert kit.unit_cpu(str(runs / "surface"), here=True) == here["cpu"]
    assert kit.unit_cpu(str(runs / "surface"), here=False) == f"Other | {here['cpu']}"
    assert kit.unit_cpu(str(tmp_path / "nowhere"), here=False) == ""


def test_a_refused_run_records_no_deviation_and_names_its_own_flag(tmp_path):
    res, runs = tmp_path / "results", tmp_path / "runs"
    _unit_tables(res / "stage2" / "Ant-v4" / "ppo_clip" / "uniform")
    _finish(str(res), ["stage2/Ant-v4/ppo_clip/uniform"])  # ran under another protocol ("x")
    c = steplag.CHECK  # the run directory holds the unit's group with other settings
    os.makedirs(runs / "check")
    results.write_json(str(runs / "check" / "run.json"),
                       {"identity": {f"{c['task']}/{c['surface']}": {"env": c["task"], "num_envs": 999}}})
    before = _snapshot(tmp_path)
    with pytest.raises(ConfigError, match="deviation"):  # no --deviation: refused
        _main(tmp_path, "run", res, protocol=steplag.PROTOCOL, units=("reuse_check",))
    with pytest.raises(ConfigError, match="other settings") as e:
        _main(tmp_path, "run", res, protocol=steplag.PROTOCOL, units=("reuse_check",), deviation="a change")
    assert "--runs" in str(e.value) and "--out" not in str(e.value)
    assert _snapshot(tmp_path) == before and not os.path.exists(res / "deviations.csv")


def test_a_report_that_fails_part_way_rewrites_no_table(tmp_path, monkeypatch):
    q = _with_stage2(_protocol(), arms={"ppo_clip": 0.2, "vaco": 0.2})
    res = str(tmp_path / "results")
    _stage2_scores(res)
    _finish(res, S2.unit_names(q))

    def broken(*a, **k):
        raise RuntimeError("a failure after stage 1's rules")
    monkeypatch.setattr(S2, "verdicts", broken)
    with pytest.raises(RuntimeError):
        steplag.report(q, res)
    assert not os.path.exists(os.path.join(res, steplag.CHOICES))


@pytest.mark.parametrize("text, field", [
    ("{", "not valid JSON"), ("[1, 2]", "must be a JSON object of sections, not an array"),
    (None, "missing section.*stage1"), ("knob", r"stage1.surfaces.ppo_clip.knob: 'clip_epsilonn' is not a knob "
                                              r"\(did you mean 'clip_epsilon'\?\)"),
    ("values", "stage1.surfaces.ppo_clip: missing values")])
def test_a_bad_protocol_file_is_one_line_naming_the_file_and_the_field(tmp_path, text, field):
    import json
    path = tmp_path / "protocol.json"
    p = _protocol()
    if text is None:
        del p["stage1"]
    elif text == "knob":
        p["stage1"]["surfaces"]["ppo_clip"]["knob"] = "clip_epsilonn"
    elif text == "values":
        del p["stage1"]["surfaces"]["ppo_clip"]["values"]
    path.write_text(json.dumps(p) if text in (None, "knob", "values") else text)
    with pytest.raises(ConfigError, match=f"{path}.*{field}") as e:
        _main(tmp_path, "plan", tmp_path / "results", protocol=path)
    assert "\n" not in str(e.value)
    assert not os.path.exists(tmp_path / "results")
