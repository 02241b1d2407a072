"""The lag-shape study's remaining reports (vaco_jax/studies/lagshape_parts.py, lagshape_tuning.py) on synthetic
per-run rows, no training: each rule of protocol.json against a slow, written-out recomputation, the tuning
rules' next units and the study's units at the chosen settings, and a report that writes only the parts whose
units are in."""

import itertools
import json
import os
import shutil

import numpy as np
import pytest

from vaco_jax.analysis import results
from vaco_jax.studies import kit, lagshape, lagshape_parts, lagshape_tuning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results", "lagshape")
STEPLAG = os.path.join(ROOT, "results", "steplag")
DEEP_LAG = os.path.join(ROOT, "results", "deep_lag")
REPS = 2000


@pytest.fixture(scope="module")
def protocol():
    return kit.load_protocol(os.path.join(RESULTS, "protocol.json"))[0]


def raw(p: dict, task: str, s: float) -> float:
    """The AUC whose normalised score (the protocol's numbers) is ``s``."""
    lo, hi = p["normalisation"]["random"][task], p["normalisation"]["reference"][task]
    return lo + s * (hi - lo)


def s_of(p: dict, row: dict) -> float:
    lo, hi = p["normalisation"]["random"][row["env"]], p["normalisation"]["reference"][row["env"]]
    return 0.0 if row["diverged"] else max(0.0, (row["auc_eval_return"] - lo) / (hi - lo))


def write_unit(base: str, name: str, rows: list[dict], curves: list[dict] | None = None) -> None:
    """A finished unit's copied tables, as ``kit.collect`` leaves them."""
    d = os.path.join(base, name)
    os.makedirs(d, exist_ok=True)
    results.write_table(os.path.join(d, "scores.csv"), rows)
    results.write_table(os.path.join(d, "curves.csv"), curves or rows)
    results.write_json(os.path.join(d, "cells.json"), {"cells": []})
    results.write_json(os.path.join(d, "config.json"), {})


def write_manifest(base: str, names, digest: str) -> None:
    results.write_table(os.path.join(base, "manifest.csv"),
                        [{"unit": n, "runs": 1, "protocol_sha256": digest, "finished": "", "seconds_this_session": 0,
                          "estimated_minutes": 0, "cpu": "synthetic"} for n in names])


# ----------------------------------------------------------------------------------------------- pilot
def pilot_curves(p: dict, paths: dict) -> list[dict]:
    """curves.csv of the pilot: per seed, the normalised return at each evaluation (``paths[seed]``)."""
    c = p["pilot"]
    step = c["settings"]["total_env_steps"] // c["settings"]["num_evals"]
    return [{"env": c["task"], "seed": seed, "env_steps": (i + 1) * step, "eval_return": raw(p, c["task"], s)}
            for seed, path in paths.items() for i, s in enumerate(path)]


@pytest.mark.parametrize("crossings,usable", [((3, 12, None), False), ((3, 9, None), True), ((None, None, 1), False)])
def test_pilot_rule_by_hand(protocol, tmp_path, crossings, usable):
    """Each seed leaves random at its FIRST evaluation reaching 0.1 (a curve that reaches 0.1, falls back and
    rises again counts the first time); usable when at least 2 of 3 leave by 1M env steps."""
    n = protocol["pilot"]["settings"]["num_evals"]
    paths = {}
    for seed, k in zip(protocol["pilot"]["seeds"], crossings):
        path = [0.02] * n
        if k is not None:
            path[k] = 0.1000001
            path[k + 1:] = [0.05] * 2 + [0.3] * (n - k - 3)  # falls below 0.1 again, then rises for good
        paths[seed] = path
    curves = pilot_curves(protocol, paths)
    write_unit(str(tmp_path), f"pilot/Ant-v4/B{protocol['pilot']['lag_depth']}", curves)
    rows = lagshape_parts.pilot_rows(protocol, str(tmp_path))
    lo, hi = protocol["normalisation"]["random"]["Ant-v4"], protocol["normalisation"]["reference"]["Ant-v4"]
    by = 0
    for r, seed in zip(rows, protocol["pilot"]["seeds"]):
        first = None
        for c in sorted((c for c in curves if c["seed"] == seed), key=lambda c: c["env_steps"]):
            if (c["eval_return"] - lo) / (hi - lo) >= 0.1:
                first = c["env_steps"]
                break
        assert r["leaves_random_at"] == (first if first is not None else "not within 3M")
        by += first is not None and first <= 1_000_000
    assert by >= 2 if usable else by < 2
    assert all(r["usable_reference"] is usable for r in rows)
    # FINDINGS' line reads the table back as the report writes it
    from vaco_jax.studies import lagshape_findings
    out = tmp_path / "root" / "results" / "lagshape"
    out.mkdir(parents=True)
    shutil.copy(os.path.join(RESULTS, "protocol.json"), out / "protocol.json")
    results.write_table(str(out / "ant_pilot.csv"), rows)
    line = lagshape_findings.lagshape_summary(str(tmp_path / "root"))
    left = ", ".join(f"{r['leaves_random_at']:,}" if isinstance(r["leaves_random_at"], int) else r["leaves_random_at"]
                     for r in rows)
    assert (f"1M env steps is {'a usable' if usable else 'not a usable'} reference ({by} of 3 seeds leave random by "
            f"1M; env steps to leave random: {left})") in line


# ----------------------------------------------------------------------------------------------- shape
SHAPE_S = {  # (method, model, age) -> (mean normalised score, seed spread)
    **{("ppo_clip", m, a): (0.8, 0.02) for m in ("uniform", "fixed", "publish") for a in (7, 15)},
    ("ppo_clip", "fixed", 7): (0.84, 0.002), ("ppo_clip", "uniform", 7): (0.8, 0.002),  # differs, yet inside +-0.1
    **{("vaco", m, a): (0.7, 0.05) for m in ("uniform", "publish") for a in (7, 15)},
    ("vaco", "fixed", 7): (0.4, 0.05), ("vaco", "fixed", 15): (0.35, 0.05), ("vaco", "publish", 15): (0.7, 0.3),
}


def shape_runs(p: dict) -> dict:
    """{unit name: scores rows}: every shape unit, one Hopper-v4 VACO run diverged, VACO's publish runs at
    mean age 15 a realised age 1.5 above the others."""
    c, rng, out = p["shape"], np.random.default_rng(5), {}
    for task, method, model in itertools.product(c["tasks"], c["arms"], c["models"]):
        rows = []
        for i, b in enumerate(sorted(c["models"][model]["lag_depths"])):
            age = c["mean_ages"][i]
            mean, spread = SHAPE_S[(method, model, age)]
            for seed in c["seeds"]:
                rows.append({"env": task, "method": method, "lag_depth": b, "seed": seed,
                             "auc_eval_return": raw(p, task, mean + spread * rng.standard_normal()),
                             "diverged": task == "Hopper-v4" and method == "vaco" and model == "uniform" and seed == 305
                             and age == 7,
                             "mean_mean_staleness": age + (1.5 if (method, model, age) == ("vaco", "publish", 15) else 0.0)
                             + 0.01 * rng.standard_normal()})
        out[f"shape/{task}/{method}/{model}"] = rows
    return out


def by_hand_test(samples: list, stat, null: float) -> dict:
    """The stratified seed bootstrap written out: each sample's (runs, tasks) draws are numpy default_rng(0)'s
    next integers, sample after sample (the draws the rule's code makes, so the numbers agree to round-off);
    the statistic, percentile intervals and two-sided p-value from their definitions."""
    rng = np.random.default_rng(0)
    draws = [rng.integers(0, s.shape[0], size=(REPS, s.shape[0], s.shape[1])) for s in samples]
    # per resample and sample: each task's mean over its drawn runs, then the mean over tasks
    means = [s[draws[j], np.arange(s.shape[1])].mean(axis=1).mean(axis=1) for j, s in enumerate(samples)]
    values = stat(*means)
    below, above = np.sum(values <= null), np.sum(values >= null)
    return {"estimate": stat(*[s.mean(axis=0).mean() for s in samples]),
            "low": np.percentile(values, 2.5), "high": np.percentile(values, 97.5),
            "low90": np.percentile(values, 5), "high90": np.percentile(values, 95),
            "p": min(1.0, 2 * (1 + min(below, above)) / (REPS + 1))}


def holm_by_hand(ps: dict) -> dict:
    order = sorted(ps, key=lambda k: ps[k])
    out, running = {}, 0.0
    for i, k in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * ps[k]))
        out[k] = running
    return out


def test_shape_rules_by_hand(protocol, tmp_path):
    p, c = protocol, protocol["shape"]
    runs = shape_runs(p)
    for name, rows in runs.items():
        write_unit(str(tmp_path), name, rows)
    got = {(r["family"], r["method"], r["mean_age"], r["lag_model"]): r for r in lagshape_parts.shape_rows(p, str(tmp_path))}
    assert len(got) == 18

    def arm(method, model, age):  # (runs, tasks), seeds in order; a diverged run scores 0
        b = sorted(c["models"][model]["lag_depths"])[c["mean_ages"].index(age)]
        return np.array([[s_of(p, r) for r in sorted((r for r in runs[f"shape/{t}/{method}/{model}"]
                                                      if r["lag_depth"] == b), key=lambda r: r["seed"])]
                         for t in c["tasks"]]).T

    def age_of(method, model, age):
        b = sorted(c["models"][model]["lag_depths"])[c["mean_ages"].index(age)]
        return np.mean([r["mean_mean_staleness"] for t in c["tasks"] for r in runs[f"shape/{t}/{method}/{model}"]
                        if r["lag_depth"] == b])

    pairs = [("fixed", "uniform"), ("publish", "uniform"), ("publish", "fixed")]
    effect = {(m, a, f, s): by_hand_test([arm(m, f, a), arm(m, s, a)], lambda x, y: x - y, 0.0)
              for m in ("ppo_clip", "vaco") for a in c["mean_ages"] for f, s in pairs}
    contrast = {("vaco", a, f, s): by_hand_test([arm("vaco", f, a), arm("ppo_clip", f, a), arm("vaco", s, a),
                                                 arm("ppo_clip", s, a)], lambda v, q, w, r: (v - q) - (w - r), 0.0)
                for a in c["mean_ages"] for f, s in pairs}
    calls = set()
    for family, tests in (("shape_effect", effect), ("contrast_change", contrast)):
        holm = holm_by_hand({k: t["p"] for k, t in tests.items()})
        for (m, a, f, s), t in tests.items():
            r = got[(family, m, a, f"{f} - {s}")]
            for k in ("estimate", "low", "high", "low90", "high90", "p"):
                assert r[k] == pytest.approx(t[k], rel=1e-9, abs=1e-12), (family, m, a, f, s, k)
            assert r["holm_p"] == pytest.approx(holm[(m, a, f, s)], rel=1e-9)
            verdict = ("differs" if holm[(m, a, f, s)] < 0.05 else
                       "equivalent" if -0.1 < t["low90"] and t["high90"] < 0.1 else "inconclusive")
            assert r["verdict"] == verdict
            arms = [m] if family == "shape_effect" else ["vaco", "ppo_clip"]
            apart = max(abs(age_of(x, f, a) - age_of(x, s, a)) for x in arms)
            assert r["ages"] == ("ages not matched" if apart > 1.0 else "")
            calls.add(r["verdict"])
    # the synthetic runs reach every call, and the rule's order: a small but decided effect is 'differs'
    assert calls == {"differs", "equivalent", "inconclusive"}
    small = got[("shape_effect", "ppo_clip", 7, "fixed - uniform")]
    assert small["verdict"] == "differs" and -0.1 < small["low90"] and small["high90"] < 0.1
    assert got[("shape_effect", "vaco", 15, "publish - uniform")]["ages"] == "ages not matched"


# ----------------------------------------------------------------------------------------------- study
def study_runs(p: dict, chosen: dict) -> dict:
    """Every study unit: at B = 8 VACO's runs score above PPO-Clip's, at B = 16 every run of a task scores the
    same (all ties: P = 1/2 in every resample)."""
    c, rng, out = p["study"], np.random.default_rng(7), {}
    for task, method in itertools.product(c["tasks"], ("ppo_clip", "vaco")):
        rows = []
        for b in c["lag_depths"]:
            for i, seed in enumerate(c["seeds"]):
                s = 0.5 + 0.03 * i + 0.25 * rng.random() * (method == "vaco") if b == 8 else 0.4 + 0.1 * len(task) / 10
                rows.append({"env": task, "method": method, "lag_depth": b, "seed": seed,
                             "auc_eval_return": raw(p, task, s), "diverged": False, "mean_mean_staleness": b - 1.0})
        out[f"study/{task}/{method}"] = rows
    return out


def poi_by_hand(x: np.ndarray, y: np.ndarray) -> float:
    per_task = []
    for t in range(x.shape[1]):  # every pair of runs of task t: a win counts 1, a tie one half
        a, b = x[:, t][:, None], y[:, t][None, :]
        per_task.append(np.mean((a > b) + 0.5 * (a == b)))
    return float(np.mean(per_task))


def test_best_against_best_rule_by_hand(protocol, tmp_path):
    p, c = protocol, protocol["study"]
    runs = study_runs(p, {})
    for name, rows in runs.items():
        write_unit(str(tmp_path), name, rows)
    got = {r["lag_depth"]: r for r in lagshape_parts.study_rows(p, str(tmp_path), STEPLAG)}

    def arm(method, b):
        return np.array([[s_of(p, r) for r in sorted((r for r in runs[f"study/{t}/{method}"] if r["lag_depth"] == b),
                                                     key=lambda r: r["seed"])] for t in c["tasks"]]).T

    tests = {}
    for b in c["lag_depths"]:
        x, y = arm("vaco", b), arm("ppo_clip", b)
        rng = np.random.default_rng(0)  # the seeds drawn within each task, VACO's then PPO-Clip's
        ix, iy = (rng.integers(0, s.shape[0], size=(REPS, s.shape[0], s.shape[1])) for s in (x, y))
        values = np.array([poi_by_hand(np.take_along_axis(x, ix[k], 0), np.take_along_axis(y, iy[k], 0))
                           for k in range(REPS)])
        below, above = np.sum(values <= 0.5), np.sum(values >= 0.5)
        tests[b] = {"estimate": poi_by_hand(x, y), "low": np.percentile(values, 2.5), "high": np.percentile(values, 97.5),
                    "low90": np.percentile(values, 5), "high90": np.percentile(values, 95),
                    "p": min(1.0, 2 * (1 + min(below, above)) / (REPS + 1))}
    holm = holm_by_hand({b: t["p"] for b, t in tests.items()})
    for b, t in tests.items():
        r = got[b]
        for k in t:
            assert r[k] == pytest.approx(t[k], rel=1e-9, abs=1e-12), (b, k)
        assert r["holm_p"] == pytest.approx(holm[b])
        verdict = ("better" if t["low"] > 0.6 and holm[b] < 0.05 else "worse" if t["high"] < 0.4 and holm[b] < 0.05
                   else "equivalent" if 0.4 <= t["low90"] and t["high90"] <= 0.6 else "inconclusive")
        assert r["verdict"] == verdict
        assert r["mean_age"] == pytest.approx(b - 1.0) and r["ages"] == ""
        assert (r["family"], r["method"], r["reference"], r["lag_model"]) == ("best_vs_best", "vaco", "ppo_clip", "fixed")
    assert got[8]["verdict"] == "better" and got[16]["verdict"] == "equivalent"  # ties count one half
    committed = [r for r in results.read_table(os.path.join(STEPLAG, "stage2_verdicts.csv"))
                 if (r["family"], r["arm"], r["lag_model"], r["lag_depth"]) == ("primary", "vaco", "fixed", 8)]
    assert got[8]["beside_stage2_P"] == f"{committed[0]['point']:.3f} ({committed[0]['tasks']})"
    assert got[16]["beside_stage2_P"] == ""  # stage 2 ran fixed lag at B = 8 only


# ----------------------------------------------------------------------------------------------- tuning
STAGE1 = kit.load_protocol(os.path.join(STEPLAG, "protocol.json"))[0]["stage1"]["normalisation"]


def stage1_raw(task: str, s: float) -> float:
    return STAGE1["random"][task] + s * (STAGE1["reference"][task] - STAGE1["random"][task])


def tuning_rows(p: dict, task: str, surface: str, values, seeds, score) -> list[dict]:
    c = p["tuning"]
    knob = c["surfaces"][surface]["knob"]
    return [{"env": task, "method": c["surfaces"][surface]["method"], "lag_depth": b, "seed": seed, knob: v,
             "auc_eval_return": stage1_raw(task, score(v, b, seed)), "diverged": False, "mean_mean_staleness": b - 1.0}
            for b in c["lag_depths"] for seed in seeds for v in values]


def test_the_stability_rule_draws_the_protocols_resamples(protocol):
    """The tuning tests below draw fewer resamples (``monkeypatch``) to stay fast; the report draws 2,000."""
    assert lagshape_tuning.STABILITY_REPS == 2000 and "2,000 bootstrap resamples" in protocol["tuning"]["stability"]["rule"]


def test_tuning_rules_ask_for_the_extension_then_the_study_runs_at_the_choice(protocol, tmp_path, monkeypatch):
    """PPO-Clip peaks inside its grid (complete, stable); VACO at its high edge (one point beyond, 1.8 x 1.8 / 0.6
    = 5.4, at every task, B and seed); once that is in and the choices are written, the study units run each
    method at its choice. R and the choice are recomputed by hand."""
    monkeypatch.setattr(lagshape_tuning, "STABILITY_REPS", 200)
    p, c, base = protocol, protocol["tuning"], str(tmp_path)
    peak = {"ppo_clip": lambda v, b, seed: 0.9 - abs(np.log(v / 0.2)) * 0.1 + 0.01 * seed,
            "vaco": lambda v, b, seed: 0.3 + 0.2 * np.log(v) + 0.01 * seed - (0.5 if v > 2 else 0.0)}
    names = []
    for task, key in itertools.product(c["tasks"], c["surfaces"]):
        write_unit(base, f"tuning/{task}/{key}", tuning_rows(p, task, key, c["surfaces"][key]["values"], c["seeds"],
                                                             peak[key]))
        names.append(f"tuning/{task}/{key}")
    write_manifest(base, names, "x")
    choices, _ = lagshape_tuning.choices(p, base, STEPLAG)
    row = {r["surface"]: r for r in choices}
    n = STAGE1
    for key, s in c["surfaces"].items():  # R(v): mean over (task, B) of the seed-mean of max(0, normalised AUC)
        r_by_hand = {v: np.mean([np.mean([max(0.0, (stage1_raw(t, peak[key](v, b, seed)) - n["random"][t])
                                              / (n["reference"][t] - n["random"][t])) for seed in c["seeds"]])
                                 for t in c["tasks"] for b in c["lag_depths"]]) for v in s["values"]}
        assert row[key]["value"] == max(r_by_hand, key=lambda v: (r_by_hand[v], -v))
    assert row["ppo_clip"]["state"] == "complete" and row["ppo_clip"]["value"] == 0.2
    assert row["ppo_clip"]["stability"] == 1.0
    assert row["vaco"]["state"] == "extension pending" and row["vaco"]["value"] == 1.8
    ext = [f"tuning/{t}/vaco/ext-5.4" for t in c["tasks"]]
    assert row["vaco"]["pending"].split() == ext
    planned = {u.name: u for u in lagshape.units(p, base, STEPLAG)}
    assert set(ext) <= set(planned) and not any(u.stage == "study" for u in planned.values())
    cells = planned[ext[0]].group.cells
    assert len(cells) == 2 * 3 and {x.knob_dict()["tv_budget"] for x in cells} == {5.4}
    # a choices table that says complete while an asked-for tuning unit has not run opens no study unit
    results.write_table(os.path.join(base, lagshape_tuning.CHOICES), [{**r, "state": "complete"} for r in choices])
    assert not any(u.stage == "study" for u in lagshape.units(p, base, STEPLAG))
    os.remove(os.path.join(base, lagshape_tuning.CHOICES))
    for t in c["tasks"]:  # the extension scores below the edge: the edge is kept
        write_unit(base, f"tuning/{t}/vaco/ext-5.4", tuning_rows(p, t, "vaco", [5.4], c["seeds"], peak["vaco"]))
    write_manifest(base, names + ext, "x")
    assert lagshape_tuning.chosen(p, base) is None  # no tuning_choices.csv yet: the study waits
    assert "run `report`" in lagshape.all_done(lagshape.units(p, base, STEPLAG))  # and `run` says what comes next
    choices, surfaces = lagshape_tuning.choices(p, base, STEPLAG)
    assert [(r["surface"], r["state"], r["value"]) for r in choices] == [("ppo_clip", "complete", 0.2),
                                                                        ("vaco", "complete", 1.8)]
    assert {r["value"] for r in surfaces if r["surface"] == "vaco"} == {0.018, 0.06, 0.2, 0.6, 1.8, 5.4}
    results.write_table(os.path.join(base, lagshape_tuning.CHOICES), choices)
    study = [u for u in lagshape.units(p, base, STEPLAG) if u.stage == "study"]
    assert lagshape.all_done(lagshape.units(p, base, STEPLAG)) == "every unit has finished"
    assert [u.name for u in study] == [f"study/{t}/{m}" for t in p["study"]["tasks"] for m in c["surfaces"]]
    for u in study:
        cfg = u.group.config
        assert cfg.lag_model == "fixed" and (cfg.clip_epsilon == 0.2 if cfg.method == "ppo_clip" else cfg.tv_budget == 1.8)
        assert {(x.lag_depth, x.seed) for x in u.group.cells} == set(itertools.product(p["study"]["lag_depths"],
                                                                                       p["study"]["seeds"]))


def test_an_unstable_choice_asks_for_the_added_seeds(protocol, tmp_path, monkeypatch):
    """Two values a hair apart on noisy seeds: stability below 0.8, the values picked in >= 5% of the paired
    seed resamples (recomputed here) get seeds 3-5 at every task."""
    reps = 400
    monkeypatch.setattr(lagshape_tuning, "STABILITY_REPS", reps)
    p, c, base = protocol, protocol["tuning"], str(tmp_path)
    rng = np.random.default_rng(3)
    noise = {(t, b, seed): 0.2 * rng.standard_normal() for t in c["tasks"] for b in c["lag_depths"] for seed in c["seeds"]}
    score = lambda t: lambda v, b, seed: {0.2: 0.8, 0.6: 0.8 + (0.01 if seed == 1 else -0.005)}.get(v, 0.3) \
        + (noise[(t, b, seed)] if v == 0.6 else 0.0)  # noqa: E731
    for t, key in itertools.product(c["tasks"], c["surfaces"]):
        write_unit(base, f"tuning/{t}/{key}", tuning_rows(p, t, key, c["surfaces"][key]["values"], c["seeds"], score(t)))
    row = {r["surface"]: r for r in lagshape_tuning.choices(p, base, STEPLAG)[0]}["ppo_clip"]
    # the paired seed bootstrap by hand: per resample, per task, seeds drawn with replacement for every value and B
    rng, picks = np.random.default_rng(0), {}
    n = STAGE1
    norm_s = lambda t, v, b, seed: max(0.0, (stage1_raw(t, score(t)(v, b, seed)) - n["random"][t])  # noqa: E731
                                       / (n["reference"][t] - n["random"][t]))
    for _ in range(reps):
        draw = {t: list(rng.choice(c["seeds"], size=3, replace=True)) for t in c["tasks"]}
        r = {v: np.mean([np.mean([norm_s(t, v, b, seed) for seed in draw[t]]) for t in c["tasks"] for b in c["lag_depths"]])
             for v in c["surfaces"]["ppo_clip"]["values"]}
        best = max(r.values())
        pick = min(v for v in r if r[v] == best)
        picks[pick] = picks.get(pick, 0) + 1
    share = picks.get(row["value"], 0) / reps
    assert row["stability"] == pytest.approx(share) and share < 0.8
    noisy = sorted(v for v, k in picks.items() if k / reps >= 0.05)
    assert row["state"] == "more seeds pending" and row["pending"].split() == [f"tuning/{t}/ppo_clip/seeds3-5"
                                                                               for t in c["tasks"]]
    extra = {u.name: u for u in lagshape.units(p, base, STEPLAG) if u.name.endswith("seeds3-5")}
    u = extra["tuning/Hopper-v4/ppo_clip/seeds3-5"]
    assert {x.seed for x in u.group.cells} == {3, 4, 5}
    assert sorted({x.knob_dict()["clip_epsilon"] for x in u.group.cells}) == noisy


# -------------------------------------------------------------------------------------------- dispatch
def test_report_writes_only_the_finished_parts_and_says_which_wait(protocol, tmp_path, capsys):
    """Pilot and shape units in, tuning half in: ant_pilot.csv and verdicts.csv (shape rows only) are written,
    tuning_choices.csv is not, and the report names what tuning and study wait for."""
    p, base = protocol, str(tmp_path)
    shutil.copy(os.path.join(RESULTS, "protocol.json"), tmp_path / "protocol.json")
    digest = kit.load_protocol(str(tmp_path / "protocol.json"))[1]
    n = p["pilot"]["settings"]["num_evals"]
    pilot = f"pilot/Ant-v4/B{p['pilot']['lag_depth']}"
    write_unit(base, pilot, pilot_curves(p, {s: [0.2] * n for s in p["pilot"]["seeds"]}))
    shape = shape_runs(p)
    for name, rows in shape.items():
        write_unit(base, name, rows)
    c = p["tuning"]
    half = [f"tuning/{t}/ppo_clip" for t in c["tasks"]]
    for name in half:
        write_unit(base, name, tuning_rows(p, name.split("/")[1], "ppo_clip", c["surfaces"]["ppo_clip"]["values"],
                                           c["seeds"], lambda v, b, seed: 0.5))
    write_manifest(base, [pilot, *shape, *half], digest)
    out = lagshape.main(lagshape.Args("report", results=base, runs=str(tmp_path / "runs"), deep_lag=DEEP_LAG,
                                      steplag=STEPLAG))
    printed = capsys.readouterr().out
    assert os.path.exists(tmp_path / "ant_pilot.csv") and os.path.exists(tmp_path / "age19_check.csv")
    assert not os.path.exists(tmp_path / "tuning_choices.csv") and not os.path.exists(tmp_path / "publish_check.csv")
    verdicts = results.read_table(str(tmp_path / "verdicts.csv"))
    assert {r["family"] for r in verdicts} == {"shape_effect", "contrast_change"} and len(verdicts) == 18
    assert [r["verdict"] for r in verdicts] == [r["verdict"] for r in out["verdicts.csv"]]
    assert "tuning: waits (2 of 4 units in; next: tuning/Hopper-v4/vaco" in printed and "study: waits" in printed
    assert "pilot: Ant-v4 at 1M steps is a usable reference" in printed
    for col in ("family", "method", "reference", "lag_model", "lag_depth", "mean_age", "margin", "verdict"):
        assert col in verdicts[0]
    json.dumps(out["ant_pilot.csv"], default=str)


def test_the_protocols_normalisation_is_stage_2s_scale_recomputed(protocol):
    """The protocol's fixed numbers are stage 2's scale (``kit_steplag.stage2_scale``) on the committed
    stage-2 runs, digit for digit: the shape and study reports normalise by the protocol's copy."""
    from vaco_jax.studies import kit_steplag
    scale = kit_steplag.stage2_scale(kit_steplag.stage2_rows(STEPLAG), STEPLAG, lagshape_parts.SCORE)
    fixed = lagshape_parts.norm(protocol)
    assert fixed == {t: tuple(map(float, scale[t])) for t in fixed}
