"""The lag-adaptive study's rules (vaco_jax/studies/adaptive_parts.py) on synthetic per-run rows, no training:
every test of the family against a slow, written-out recomputation (the stratified seed bootstrap, the
one-sided p-values, Holm over the 14 tests, the calls in the rule's order), synthetic runs that tell the
rule from a wrong sign, an ignored margin and a skipped Holm, and a report that reads only listed units."""

import itertools
import os
import shutil

import numpy as np
import pytest

from vaco_jax.analysis import results
from vaco_jax.core.config import ConfigError
from vaco_jax.studies import adaptive, adaptive_parts, kit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results", "adaptive")
STEPLAG = os.path.join(ROOT, "results", "steplag")
REPS = 2000
DESIGN = ("Hopper-v4", "Walker2d-v4", "HalfCheetah-v4")

# (unit arm, lag model, B) -> (mean normalised score, seed spread) on the design tasks; the held-out task below
MEANS = {
    ("ppo_clip-0.2", "uniform", 1): (0.80, 0.02), ("ppo_clip-0.6", "uniform", 1): (0.65, 0.02),
    ("ppo_clip-0.6", "uniform", 8): (0.80, 0.02), ("ppo_clip-0.6", "uniform", 32): (0.75, 0.02),
    ("ppo_clip-0.6", "fixed", 8): (0.80, 0.02), ("ppo_clip-0.6", "fixed", 16): (0.50, 0.02),
    ("ppo_clip-0.2", "fixed", 16): (0.70, 0.02),  # the fixed-lag oracle at B = 16 (not the robust runs)
    ("adaptive", "uniform", 1): (0.80, 0.02),  # non-inferior; better than robust
    ("adaptive", "uniform", 8): (0.50, 0.02),  # inferior
    ("adaptive", "uniform", 32): (0.72, 0.15),  # raw p < 0.05 but not after Holm: inconclusive
    ("adaptive", "fixed", 8): (0.82, 0.02),
    ("adaptive", "fixed", 16): (0.62, 0.01),  # d = -0.08: non-inferior within the margin, not above 0
    ("bapo", "uniform", 1): (0.60, 0.01),  # inferior; worse than robust
    ("bapo", "uniform", 8): (0.78, 0.02), ("bapo", "uniform", 32): (0.76, 0.02),
    ("bapo", "fixed", 8): (0.79, 0.02), ("bapo", "fixed", 16): (0.69, 0.02),
    ("sat", "uniform", 8): (0.60, 0.05), ("sat", "uniform", 32): (0.60, 0.05),
}
ANT = {("ppo_clip-0.2", 1): (0.5, 0.05), ("ppo_clip-0.6", 1): (0.4, 0.05), ("ppo_clip-0.6", 32): (0.3, 0.05),
       ("adaptive", 1): (0.5, 0.05), ("adaptive", 32): (0.3, 0.05)}  # held_out.methods: the adaptive method only
DIVERGED = ("Hopper-v4", "ppo_clip-0.2", "uniform", 1, 603)  # scores 0, counted
MISSING = ("Walker2d-v4", "adaptive", "fixed", 8, 609)  # left out, counted


@pytest.fixture(scope="module")
def protocol():
    return kit.load_protocol(os.path.join(RESULTS, "protocol.json"))[0]


def raw(p: dict, task: str, s: float) -> float:
    lo, hi = p["normalisation"]["random"][task], p["normalisation"]["reference"][task]
    return lo + s * (hi - lo)


def s_of(p: dict, row: dict) -> float:
    lo, hi = p["normalisation"]["random"][row["env"]], p["normalisation"]["reference"][row["env"]]
    return 0.0 if row["diverged"] else max(0.0, (row["auc_eval_return"] - lo) / (hi - lo))


def fixed_oracle(base: str, per_lag: str = "B=8: 0.6; B=16: 0.2", state: str = "complete") -> str:
    """A lag-shape results folder whose tuning_choices.csv gives PPO-Clip's fixed-lag per-lag optima."""
    os.makedirs(base, exist_ok=True)
    results.write_table(os.path.join(base, "tuning_choices.csv"),
                        [{"surface": "ppo_clip", "state": state, "per_lag": per_lag},
                         {"surface": "vaco", "state": "complete", "per_lag": "B=8: 0.2; B=16: 0.2"}])
    return base


def synthetic(p: dict, planned: list) -> dict:
    """{unit name: scores rows} for every planned unit (``MEANS``, ``ANT``, one diverged and one missing run)."""
    rng, out = np.random.default_rng(11), {}
    for u in planned:
        c, arm = u.group.config, u.name.split("/")[2]
        rows = []
        for cell in sorted(u.group.cells, key=lambda x: (x.lag_depth, x.seed)):
            b, seed = cell.lag_depth, cell.seed
            mean, spread = ANT[(arm, b)] if c.env == "Ant-v4" else MEANS[(arm, c.lag_model, b)]
            key, s = (c.env, arm, c.lag_model, b, seed), mean + spread * rng.standard_normal()
            rows.append({"env": c.env, "method": c.method, "lag_depth": b, "seed": seed,
                         "auc_eval_return": float("nan") if key == MISSING else raw(p, c.env, s), "diverged": key == DIVERGED,
                         "mean_mean_staleness": (b - 1) / 2 if c.lag_model == "uniform" else b - 1.0})
        out[u.name] = rows
    return out


def write(base: str, runs: dict, listed) -> None:
    """The units' copied tables (as ``kit.collect`` leaves them) and a manifest listing ``listed``."""
    for name, rows in runs.items():
        d = os.path.join(base, name)
        os.makedirs(d, exist_ok=True)
        results.write_table(os.path.join(d, "scores.csv"), rows)
        results.write_table(os.path.join(d, "curves.csv"), rows)
        results.write_json(os.path.join(d, "cells.json"), {"cells": []})
        results.write_json(os.path.join(d, "config.json"), {})
    path = os.path.join(base, "protocol.json")
    digest = kit.load_protocol(path)[1] if os.path.exists(path) else "x"
    results.write_table(os.path.join(base, "manifest.csv"),
                        [{"unit": n, "runs": 1, "protocol_sha256": digest, "finished": "", "seconds_this_session": 0,
                          "estimated_minutes": 0, "cpu": "synthetic"} for n in listed])


# ------------------------------------------------------------------------------------------- by hand
def arm_by_hand(p: dict, runs: dict, unit_arm: str, model: str, b: int, tasks) -> np.ndarray:
    """(runs, tasks): each task's scored runs of the unit arm at (model, B), by seed, a missing score left
    out and every task cut to the smallest count."""
    cols = []
    for t in tasks:
        rows = sorted((r for r in runs[f"study/{t}/{unit_arm}/{model}"] if r["lag_depth"] == b),
                      key=lambda r: r["seed"])
        cols.append([s_of(p, r) for r in rows if r["diverged"] or np.isfinite(r["auc_eval_return"])])
    k = min(len(c) for c in cols)
    return np.array([c[:k] for c in cols]).T


def boot_by_hand(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The stratified seed bootstrap written out: x's draws then y's from numpy default_rng(0); per resample
    each task's mean over its drawn runs, then the mean over tasks, x's minus y's."""
    rng = np.random.default_rng(0)
    means = []
    for s in (x, y):
        draw = rng.integers(0, s.shape[0], size=(REPS, s.shape[0], s.shape[1]))
        means.append(s[draw, np.arange(s.shape[1])].mean(axis=1).mean(axis=1))  # [reps, runs, tasks] -> [reps]
    return means[0] - means[1]


def holm_by_hand(ps: dict) -> dict:
    order = sorted(ps, key=lambda k: ps[k])
    out, running = {}, 0.0
    for i, k in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * ps[k]))
        out[k] = running
    return out


def expected(p: dict, runs: dict, oracle_arm) -> dict:
    """{(family, method, cell): the test's numbers and call}, from the rule's text alone."""
    tests = {}
    h = p["held_out"]
    cells = [(m, b, DESIGN) for m in ("uniform", "fixed") for b in p["lag_models"][m]]
    held = [(h["lag_model"], b, (h["task"],)) for b in h["lag_depths"]]
    for method, (model, b, tasks) in [*itertools.product(("adaptive", "bapo"), cells),
                                      *itertools.product(("adaptive",), held)]:
        x = arm_by_hand(p, runs, method, model, b, tasks)
        y = arm_by_hand(p, runs, oracle_arm(model, b), model, b, tasks)
        tests[("non_inferiority", method, model, b, tasks)] = (x, y, -0.1)
    for method in ("adaptive", "bapo"):
        x = arm_by_hand(p, runs, method, "uniform", 1, DESIGN)
        y = arm_by_hand(p, runs, "ppo_clip-0.6", "uniform", 1, DESIGN)
        tests[("superiority", method, "uniform", 1, DESIGN)] = (x, y, 0.0)
    out = {}
    for key, (x, y, bound) in tests.items():
        values = boot_by_hand(x, y)
        out[key] = {"estimate": x.mean(axis=0).mean() - y.mean(axis=0).mean(), "values": values,
                    "low": np.percentile(values, 2.5), "high": np.percentile(values, 97.5),
                    "low90": np.percentile(values, 5), "high90": np.percentile(values, 95),
                    "p": (1 + np.sum(values <= bound)) / (REPS + 1)}
    holm = holm_by_hand({k: t["p"] for k, t in out.items()})
    for k, t in out.items():
        t["holm_p"] = holm[k]
        if k[0] == "non_inferiority":
            t["verdict"] = "non-inferior" if holm[k] < 0.05 else "inferior" if t["high90"] < -0.1 else "inconclusive"
        else:
            t["verdict"] = "better" if holm[k] < 0.05 else "worse" if t["high"] < 0 else "not shown better"
    return out


@pytest.fixture(scope="module")
def study(protocol, tmp_path_factory):
    """The planned units with the fixed-lag oracle known (0.6 at B = 8: the robust runs; 0.2 at B = 16), their
    synthetic runs, and the report's verdict rows keyed as ``expected``'s."""
    base = tmp_path_factory.mktemp("adaptive")
    planned, left = adaptive.plan_units(protocol, STEPLAG, fixed_oracle(str(base / "lagshape")))
    runs = synthetic(protocol, planned)
    eps = adaptive.oracle_eps(protocol, STEPLAG, str(base / "lagshape"))
    write(str(base), runs, list(runs))
    rows = adaptive_parts.tagged_rows(protocol, str(base), planned, set(runs), eps)
    got = {}
    sat_left = tuple(u.group.config.env for u in left)
    for r in adaptive_parts.verdict_rows(protocol, rows, sat_left):
        tasks = tuple(r["tasks"].split())
        got[(r["family"], r["method"], r["lag_model"], r["lag_depth"], tasks)] = r
    return {"planned": planned, "runs": runs, "rows": rows, "got": got, "eps": eps, "sat_left": sat_left}


def oracle_of(model: str, b: int) -> str:
    return {("uniform", 1): "ppo_clip-0.2", ("fixed", 16): "ppo_clip-0.2"}.get((model, b), "ppo_clip-0.6")


# ------------------------------------------------------------------------------------------- the tests
@pytest.fixture(scope="module")
def want(protocol, study):
    return expected(protocol, study["runs"], oracle_of)


def test_every_test_of_the_family_by_hand(study, want):
    got = study["got"]
    assert len([k for k in got if k[0] != "descriptive"]) == len(want) == 14
    assert ("non_inferiority", "bapo", "uniform", 1, ("Ant-v4",)) not in got  # the held-out task: adaptive only
    for key, t in want.items():
        r = got[key]
        for k in ("estimate", "low", "high", "low90", "high90", "p", "holm_p"):
            assert r[k] == pytest.approx(t[k], rel=1e-9, abs=1e-12), (key, k)
        assert r["verdict"] == t["verdict"], key
        assert r["margin"] == (0.1 if key[0] == "non_inferiority" else 0.0) and r["reference"] == (
            "oracle" if key[0] == "non_inferiority" else "robust")
    calls = {r["verdict"] for r in got.values()}
    assert {"non-inferior", "inferior", "inconclusive", "better", "worse", "descriptive"} <= calls
    held = got[("non_inferiority", "adaptive", "uniform", 32, ("Ant-v4",))]
    assert held["cell"] == "uniform B 32 (Ant-v4)"
    assert got[("non_inferiority", "adaptive", "uniform", 32, DESIGN)]["cell"] == "uniform B 32"


def test_the_synthetic_runs_tell_the_rule_from_its_mutants(want):
    """A wrong sign, an ignored margin or a skipped Holm each changes a call here (the rule's own calls are
    checked above): the data can catch each mutant."""
    cell = lambda *k: want[("non_inferiority", *k)]  # noqa: E731
    # the margin: d below 0 but above -0.1 is non-inferior; counted against 0 it would not be
    within = cell("adaptive", "fixed", 16, DESIGN)
    assert within["verdict"] == "non-inferior" and -0.1 < within["estimate"] < 0
    assert (1 + np.sum(within["values"] <= 0.0)) / (REPS + 1) > 0.05
    # Holm: a raw p below 0.05 that the family's correction lifts above it
    lifted = cell("adaptive", "uniform", 32, DESIGN)
    assert lifted["p"] < 0.05 <= lifted["holm_p"] and lifted["verdict"] == "inconclusive"
    # the sign: the inferior cell read the other way round would be non-inferior
    worse = cell("adaptive", "uniform", 8, DESIGN)
    assert worse["verdict"] == "inferior" and (1 + np.sum(-worse["values"] <= -0.1)) / (REPS + 1) < 0.05 / 14


@pytest.mark.parametrize("t,call", [
    ({"family": "non_inferiority", "holm_p": 0.01, "high90": -0.2, "high": -0.1}, "non-inferior"),  # Holm first
    ({"family": "non_inferiority", "holm_p": 0.2, "high90": -0.11, "high": 0.0}, "inferior"),
    ({"family": "non_inferiority", "holm_p": 0.2, "high90": -0.1, "high": 0.0}, "inconclusive"),  # strict
    ({"family": "superiority", "holm_p": 0.04, "high90": -0.2, "high": -0.1}, "better"),
    ({"family": "superiority", "holm_p": 0.5, "high90": -0.2, "high": -0.001}, "worse"),
    ({"family": "superiority", "holm_p": 0.5, "high90": -0.2, "high": 0.0}, "not shown better"),
])
def test_the_calls_in_the_rules_order(t, call):
    assert adaptive_parts.verdict(t) == call


def test_shared_runs_count_for_both_arms_and_left_out_runs_are_reported(protocol, study):
    rows, got = study["rows"], study["got"]
    arms = {(r["env"], r["lag_model"], int(r["lag_depth"]), r["arm"]) for r in rows if r["method"] == "ppo_clip"}
    for t in DESIGN:  # uniform B = 8 and 32, fixed B = 8: the robust runs are the oracle's
        for model, b in (("uniform", 8), ("uniform", 32), ("fixed", 8)):
            assert {(t, model, b, "oracle"), (t, model, b, "robust")} <= arms
        assert (t, "uniform", 1, "oracle") in arms and (t, "fixed", 16, "oracle") in arms
    oracle_b16 = [r for r in rows if r["arm"] == "oracle" and r["lag_model"] == "fixed" and int(r["lag_depth"]) == 16]
    assert {r["method"] for r in oracle_b16} == {"ppo_clip"} and len(oracle_b16) == 30
    assert got[("non_inferiority", "adaptive", "uniform", 1, DESIGN)]["diverged"] == 1
    assert got[("non_inferiority", "adaptive", "fixed", 8, DESIGN)]["missing"] == 1
    per_task = {(r["task"], r["arm"], r["lag_model"], r["lag_depth"]): r
                for r in adaptive_parts.per_task_rows(protocol, rows)}
    assert per_task[("Walker2d-v4", "adaptive", "fixed", 8)]["runs"] == 9
    assert per_task[("Walker2d-v4", "adaptive", "fixed", 8)]["missing"] == 1
    h = per_task[("Hopper-v4", "oracle", "uniform", 1)]
    assert h["diverged"] == 1 and h["runs"] == 10
    assert h["mean_s"] == pytest.approx(np.mean(arm_by_hand(protocol, study["runs"], "ppo_clip-0.2", "uniform", 1,
                                                            ("Hopper-v4",))))
    # the fixed-lag oracle at 0.2 at B = 16 adds 42.1 min: Hopper-v4's SAT unit fits, the other two do not
    assert study["sat_left"] == ("Walker2d-v4", "HalfCheetah-v4")
    sat = [r for r in got.values() if r["method"] == "sat"]
    assert [(r["lag_depth"], r["verdict"], r["tasks"]) for r in sat] == [
        (b, v, t) for b in (8, 32) for v, t in (("descriptive", "Hopper-v4"),
                                                ("not run: over the 15 h budget", "Walker2d-v4 HalfCheetah-v4"))]
    assert all(np.isnan(r["p"]) and np.isnan(r["holm_p"]) for r in sat)
    assert all(np.isnan(r["estimate"]) == r["verdict"].startswith("not run") for r in sat)


def test_report_reads_only_listed_units_and_waits_for_the_family(protocol, study, tmp_path, capsys, monkeypatch):
    """With one unit's tables present but unlisted, its runs are in no table and verdicts.csv is not
    written; once every unit is listed it is, with the rows ``verdict_rows`` gives."""
    base = str(tmp_path)
    shutil.copy(os.path.join(RESULTS, "protocol.json"), tmp_path / "protocol.json")
    lagshape = fixed_oracle(str(tmp_path / "lagshape"))
    runs = study["runs"]
    left = "study/Walker2d-v4/bapo/fixed"
    write(base, runs, [n for n in runs if n != left])
    args = adaptive.Args("report", results=base, runs=str(tmp_path / "runs"), steplag=STEPLAG, lagshape=lagshape,
                         figures=str(tmp_path / "fig"))
    out = adaptive.main(args)
    printed = capsys.readouterr().out
    assert "verdicts.csv" not in out and not os.path.exists(tmp_path / "verdicts.csv")
    assert f"waits for every unit of the family; next: {left}" in printed
    assert not [r for r in out["per_task.csv"]
                if (r["task"], r["arm"], r["lag_model"]) == ("Walker2d-v4", "bapo", "fixed")]
    assert os.path.exists(tmp_path / "fig" / "adaptive.png")
    write(base, runs, list(runs))
    monkeypatch.setattr(adaptive_parts, "draw", lambda *a: None)  # drawn above; the tables are what is checked here
    out = adaptive.main(args)
    table = results.read_table(str(tmp_path / "verdicts.csv"))
    assert [r["verdict"] for r in table] == [r["verdict"] for r in out["verdicts.csv"]]
    assert [(r["method"], r["cell"], r["verdict"]) for r in table] == \
        [(r["method"], r["cell"], r["verdict"])
         for r in adaptive_parts.verdict_rows(protocol, study["rows"], study["sat_left"])]
    for col in ("method", "reference", "lag_model", "lag_depth", "verdict", "margin", "estimate", "low", "high", "p",
                "holm_p", "tasks"):
        assert col in table[0]


def test_the_rules_numbers_are_the_protocols(protocol):
    """The protocol's rule numbers are the module's; a changed one is a one-line error naming the field."""
    adaptive_parts.check_rules(protocol)
    bad = {**protocol, "rules": {**protocol["rules"], "margin": 0.15}}
    with pytest.raises(ConfigError, match=r"rules.margin: 0.15; allowed values: 0.1"):
        adaptive_parts.check_rules(bad)
    superiority = {**protocol["rules"]["superiority"], "lag_depth": 2}
    bad = {**protocol, "rules": {**protocol["rules"], "superiority": superiority}}
    with pytest.raises(ConfigError, match="rules.superiority"):
        adaptive_parts.check_rules(bad)
    bad = {**protocol, "held_out": {**protocol["held_out"], "methods": ["adaptive", "bapo"]}}
    with pytest.raises(ConfigError, match=r"held_out.methods: \['adaptive', 'bapo'\]; allowed values: \['adaptive'\]"):
        adaptive_parts.check_rules(bad)


def test_the_findings_line_appears_with_the_first_unit_and_quotes_the_calls(protocol, study, tmp_path):
    from vaco_jax.studies import adaptive_findings
    out = tmp_path / "results" / "adaptive"
    os.makedirs(out)
    shutil.copy(os.path.join(RESULTS, "protocol.json"), out / "protocol.json")
    assert adaptive_findings.adaptive_summary(str(tmp_path)) is None  # no unit yet: no line
    write(str(out), {}, ["study/Hopper-v4/adaptive/uniform"])
    line = adaptive_findings.adaptive_summary(str(tmp_path))
    assert "1 units finished" in line and kit.load_protocol(str(out / "protocol.json"))[1][:8] in line
    rows = list(study["got"].values())
    results.write_table(str(out / "verdicts.csv"), rows)
    line = adaptive_findings.adaptive_summary(str(tmp_path))
    r = study["got"][("non_inferiority", "bapo", "uniform", 1, DESIGN)]
    assert f"bapo: against oracle: uniform B 1 {r['verdict']} ({r['estimate']:+.2f} [".replace("-", "−") in line
    assert "against robust: uniform B 1 worse" in line and "sat: against oracle: uniform B 8 descriptive" in line
