"""The locomotion study's driver (experiments/locomotion.py): the committed protocol plans without
compiling; tuning chooses, extends an edge once and freezes; the study units take the frozen steps;
units are copied under results with the protocol's hash; a changed protocol needs a recorded deviation.
End to end on the tiny pure-JAX point_mass task."""

import json
import os

import pytest

from conftest import study_module
from vaco_jax.analysis import results
from vaco_jax.core.config import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _args(study, tmp_path, *extra, protocol=None):
    import tyro

    return tyro.cli(study.Args, args=[*extra, "--protocol", str(protocol or tmp_path / "protocol.json"),
                                      "--results", str(tmp_path / "results"), "--runs", str(tmp_path / "runs"),
                                      "--no-progress"])


def tiny_protocol(path, **change) -> dict:
    p = {
        "engine": {"backend": None},
        "tasks": ["point_mass"],
        "settings": {"num_envs": 8, "unroll_length": 16, "num_epochs": 2, "num_minibatches": 2, "total_env_steps": 256,
                     "num_evals": 2, "eval_episodes": 2, "episode_length": 32, "lag_model": "uniform",
                     "buffer_capacity": 4, "policy_hidden": [8], "value_hidden": [8]},
        "seeds": {"study": [0, 1], "tuning": [7]},
        "lag_depths": [1, 4],
        "methods": ["ppo_clip"],
        "tuning": {"task": "point_mass", "lag_depths": [1, 2], "score": "auc_eval_return", "rule": "max mean",
                   "edge_rule": "once", "grids": {"ppo_clip": {"knob": "clip_epsilon", "values": [0.1, 0.2, 0.4]}}},
        "lag_aware": {"lag_depths": [4]},
        "ablations": {"tasks": ["point_mass"], "lag_depths": [4], "methods": {"a3po": {"inherits": "ppo_clip"}}},
        "rates_env_steps_per_s": {"point_mass": 1000},
        **change,
    }
    with open(path, "w") as f:
        json.dump(p, f)
    return p


def test_the_committed_protocol_plans_every_unit_without_compiling(capsys):
    study = study_module("locomotion")
    p, digest = study.load_protocol(os.path.join(ROOT, study.PROTOCOL))
    study.check_protocol(p)
    units = study.tuning_units(p) + study.study_units(p, None)
    assert [u.name for u in units[:len(p["methods"])]] == [f"tune/{m}" for m in p["methods"]]
    assert all(u.group.config.physics_backend == "mujoco" for u in units)
    assert all(u.group.config.total_env_steps == 1_000_000 and u.group.config.num_envs == 16 for u in units)
    tune = units[0]
    assert len(tune.group.cells) == 2 * 3 * 3  # tuning depths x grid x tuning seeds
    assert not set(c.seed for c in tune.group.cells) & set(p["seeds"]["study"])
    main = [u for u in units if u.name.startswith("study/")]
    assert len(main) == len(p["tasks"]) * len(p["methods"])
    assert all(len(u.group.cells) == 30 for u in main)
    assert sum(u.minutes for u in units) / 60 < 12  # the plan known before tuning fits the machine's budget


def test_choose_takes_the_best_mean_and_never_a_point_with_a_diverged_run():
    study = study_module("locomotion")
    rows = [dict(lag_depth=1, clip_epsilon=e, auc_eval_return=s, diverged=d)
            for e, s, d in ((0.1, 5.0, "False"), (0.1, 7.0, "False"), (0.2, 9.0, "False"), (0.2, 1.0, "True"),
                            (0.4, 6.5, "False"), (0.4, 6.0, "False"))]
    rows += [dict(lag_depth=2, clip_epsilon=0.1, auc_eval_return=100.0, diverged="False")]
    pick = study.choose(rows, "clip_epsilon", 1, "auc_eval_return")
    assert pick["value"] == 0.4  # 0.2 has the best mean of its finite runs but a diverged one
    assert [g["value"] for g in pick["grid"]] == [0.1, 0.2, 0.4] and pick["grid"][1]["diverged"] == 1
    with pytest.raises(ConfigError, match="diverged"):
        study.choose([r for r in rows if r["clip_epsilon"] == 0.2], "clip_epsilon", 1, "auc_eval_return")


def _write_tuning(root, method, sub, rows):
    d = os.path.join(root, "point_mass", method, *sub)
    os.makedirs(d, exist_ok=True)
    results.write_table(os.path.join(d, "scores.csv"), rows)


def test_an_optimum_at_an_edge_is_extended_once_then_frozen(tmp_path):
    study = study_module("locomotion")
    p = tiny_protocol(tmp_path / "protocol.json")
    runs = str(tmp_path / "tuning")
    row = lambda b, e, s: dict(lag_depth=b, seed=7, clip_epsilon=e, auc_eval_return=s, diverged="False")
    _write_tuning(runs, "ppo_clip", [], [row(1, 0.1, 1.0), row(1, 0.2, 2.0), row(1, 0.4, 3.0),  # B=1: top edge
                                         row(2, 0.1, 1.0), row(2, 0.2, 5.0), row(2, 0.4, 3.0)])  # B=2: inside
    path = str(tmp_path / "tuned.json")
    out = study.freeze(p, runs, path, "abc")
    assert out["extend"] == {"ppo_clip": {"1": 0.8}} and not os.path.exists(path)  # 0.4 x 0.4 / 0.2
    assert [u.name for u in study.extension_units(p, out)] == ["extend/ppo_clip/B1"]
    _write_tuning(runs, "ppo_clip", ["extend_B1"], [row(1, 0.8, 4.0)])
    out = study.freeze(p, runs, path, "abc")
    assert out["extend"] == {} and os.path.exists(path)
    assert study.chosen(out, "ppo_clip", 1) == 0.8 and study.chosen(out, "ppo_clip", 2) == 0.2
    assert out["at_edge_after_extension"] == ["ppo_clip B=1"]  # reported, not chased further


def test_bad_protocols_are_one_line_errors(tmp_path):
    study = study_module("locomotion")
    for change, field in (({"methods": ["ppo_clip", "nope"]}, "methods"), ({"tasks": ["Nope-v9"]}, "tasks"),
                          ({"rates_env_steps_per_s": {}}, "rates")):
        p = tiny_protocol(tmp_path / "protocol.json", **change)
        with pytest.raises(ConfigError, match=field):
            study.check_protocol(p)
    tiny_protocol(tmp_path / "protocol.json")
    with pytest.raises(ConfigError, match="minutes"):
        study.main(_args(study, tmp_path, "run"))
    with pytest.raises(ConfigError, match="units"):
        study.main(_args(study, tmp_path, "run", "--units", "study/nowhere"))


def test_the_study_end_to_end_on_point_mass(tmp_path, capsys):
    study = study_module("locomotion")
    tiny_protocol(tmp_path / "protocol.json")
    study.main(_args(study, tmp_path, "plan"))
    assert "tune/ppo_clip" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="tuning"):  # the study's steps come from the frozen tuning
        study.main(_args(study, tmp_path, "run", "--units", "study/point_mass/ppo_clip"))
    assert study.main(_args(study, tmp_path, "run", "--minutes", "0.0001")) == ["tune/ppo_clip"]  # at least one
    done = study.main(_args(study, tmp_path, "run", "--minutes", "1000"))  # extensions, freezing, the study
    tuned = json.load(open(tmp_path / "results" / "tuned.json"))
    eps = study.chosen(tuned, "ppo_clip", 1)
    assert "study/point_mass/ppo_clip" in done and "ablation/point_mass/a3po" in done
    assert done.index("study/point_mass/ppo_clip") > max(
        [done.index(u) for u in done if u.startswith("extend/")], default=-1)
    assert ("lag_aware/point_mass/ppo_clip" in done) == (eps != study.chosen(tuned, "ppo_clip", 2))
    res = tmp_path / "results" / "study" / "point_mass" / "ppo_clip"
    scores = results.read_table(str(res / "scores.csv"))
    assert len(scores) == 4 and json.load(open(res / "config.json"))["clip_epsilon"] == eps
    digest = study.load_protocol(str(tmp_path / "protocol.json"))[1]
    manifest = results.read_table(str(tmp_path / "results" / "manifest.csv"))
    assert {r["protocol_sha256"] for r in manifest} == {digest} and len(manifest) >= 3
    run = json.load(open(tmp_path / "runs" / "study" / "run.json"))
    assert run["command"]["protocol_sha256"] == digest
    assert study.main(_args(study, tmp_path, "run", "--minutes", "1000")) == []  # nothing left
    # a changed protocol: refused until the deviation is recorded
    tiny_protocol(tmp_path / "protocol.json", note="a changed protocol")
    with pytest.raises(ConfigError, match="deviation"):
        study.main(_args(study, tmp_path, "run", "--minutes", "1000"))
    study.main(_args(study, tmp_path, "run", "--minutes", "1000", "--deviation", "a note added, for a test"))
    deviations = results.read_table(str(tmp_path / "results" / "deviations.csv"))
    assert deviations[0]["deviation"] == "a note added, for a test"


def _study_scores(root, effect):
    """Synthetic committed scores on two tasks: every main method at B in 1 8 32, 10 seeds; VACO's score at
    B > 1 is ``effect`` above the others' (negative: below)."""
    import numpy as np

    rng = np.random.default_rng(0)
    for task, scale in (("Hopper-v4", 1000.0), ("HalfCheetah-v4", 3000.0)):
        for m in ("ppo_clip", "ppo_kl", "spo", "vaco"):
            rows, cells = [], []
            for b in (1, 8, 32):
                for seed in range(10):
                    level = 1.0 if b == 1 else 0.5 + (effect if m == "vaco" else 0.0)
                    auc = scale * (level + 0.05 * rng.standard_normal())
                    rows.append(dict(env=task, method=m, lag_depth=b, seed=seed, final_eval_return=auc,
                                     auc_eval_return=auc, diverged=False, mean_filtered_fraction=0.01 * b,
                                     mean_clip_fraction=0.01 * b))
                    cells.append(dict(lag_depth=b, seed=seed))
            d = os.path.join(root, "study", task, m)
            os.makedirs(d)
            results.write_table(os.path.join(d, "scores.csv"), rows)
            results.write_cells(d, cells)
    results.write_json(os.path.join(root, "study", "random_scores.json"), {"Hopper-v4": 10.0, "HalfCheetah-v4": -300.0})


def _protocol_for_report(path):
    p = json.load(open(os.path.join(ROOT, "results", "locomotion", "protocol.json")))
    p["rules"]["bootstrap"]["replicates"] = 500
    p["rules"]["bootstrap"]["stability_seeds"] = [1, 3]
    return p


@pytest.mark.parametrize("effect, want", [(0.4, "holds"), (-0.4, "fails"), (0.0, None)])
def test_the_report_applies_the_primary_rule_with_holm_and_names_what_has_no_data(tmp_path, effect, want):
    study = study_module("locomotion_report")
    _study_scores(str(tmp_path), effect)
    p = _protocol_for_report(tmp_path)
    rows = study.verdicts(p, str(tmp_path))
    primary = [r for r in rows if r["family"] == "primary"]
    assert len(primary) == 9  # 3 baselines x (B = 8, 32 with B = 1 tunings; B = 32 lag-aware)
    assert all(r["tasks"] == "Hopper-v4 HalfCheetah-v4" for r in primary)  # Walker2d-v4 has no runs: left out
    if want:
        assert {r["verdict"] for r in primary} == {want}
    else:  # no effect: Holm over nine tests keeps the family from "holding" by chance
        assert "holds" not in {r["verdict"] for r in primary}
    assert all(0 <= r["p_holm"] <= 1 and r["p_holm"] >= r["p_value"] for r in primary)
    retention = [r for r in rows if r["claim"] == "retention" and r["score"] == "auc_eval_return"]
    vaco32 = [r for r in retention if r["comparison"] == "vaco B=32 / B=1"][0]
    assert abs(vaco32["point"] - (0.5 + effect)) < 0.08 and vaco32["low"] < vaco32["point"] < vaco32["high"]
    assert all(r["verdict"] == "no data" for r in rows if r["claim"] in ("3", "5"))  # no ablation runs yet
    claim2 = [r for r in rows if r["claim"] == "2"]
    assert {r["verdict"] for r in claim2} == {"holds"}
    import math
    decided = [r for r in rows if r["verdict"] in ("holds", "fails", "inconclusive")]
    assert all(0.0 <= r["stability"] <= 1.0 for r in decided)  # every verdict with its stability over seeds 1, 3
    assert all(math.isnan(r["stability"]) for r in retention)  # an estimate without a verdict has none
    text = study.report(p, str(tmp_path))
    assert os.path.exists(tmp_path / "verdicts.csv") and "primary" in text


def test_the_report_draws_the_study_figures_pooled_and_per_task(tmp_path, capsys):
    study = study_module("locomotion_report")
    _study_scores(str(tmp_path), 0.4)
    p = {**_protocol_for_report(tmp_path), "tasks": ["Hopper-v4", "Walker2d-v4"]}  # HalfCheetah-v4's runs: not drawn
    figs = tmp_path / "figures"
    paths = study.draw_figures(p, str(tmp_path), str(figs), reps=50)
    names = sorted(os.path.basename(x) for x in paths)
    assert not any(n.startswith("HalfCheetah-v4") for n in names)
    for view in ("all", "Hopper-v4"):
        assert f"{view}_auc_vs_lag.png" in names and f"{view}_final_retention.png" in names
    assert "all_probability_of_improvement.png" in names and "all_performance_profiles.png" in names
    assert "Hopper-v4_probability_of_improvement.png" not in names  # pooled figures: the pooled view only
    assert "all_interval_estimates_both_tunings.png" in names and "Hopper-v4_interval_estimates_both_tunings.png" in names
    assert not any(n.startswith("Walker2d-v4") for n in names)  # no units yet: named, not drawn
    out = capsys.readouterr().out
    assert "no study unit of Walker2d-v4" in out and "skipped Hopper-v4_learning_curves.png" in out
    assert all(os.path.getsize(x) > 1000 for x in paths)


def test_a_lag_aware_unit_joins_the_tunings_view_as_a_method_of_its_own(tmp_path):
    """The figure of claim 1 with both tunings reads the lag-aware runs as "VACO | lag-aware tuning", apart from
    VACO at its B = 1 tuning (never pooled with it); the other views leave them out."""
    study = study_module("locomotion_report")
    _study_scores(str(tmp_path), 0.0)
    d = tmp_path / "study" / "Hopper-v4" / "vaco" / "variant=lag_aware"
    os.makedirs(d)
    results.write_table(str(d / "scores.csv"), [dict(env="Hopper-v4", method="vaco", variant="lag_aware", lag_depth=32,
                                                     seed=s, final_eval_return=900.0, auc_eval_return=900.0,
                                                     diverged=False) for s in range(10)])
    results.write_cells(str(d), [dict(lag_depth=32, seed=s) for s in range(10)])
    ablation = tmp_path / "study" / "Hopper-v4" / "a3po"  # an ablation unit: a design of its own, never drawn
    os.makedirs(ablation)
    results.write_table(str(ablation / "scores.csv"), [dict(env="Hopper-v4", method="a3po", lag_depth=32, seed=0,
                                                            final_eval_return=1.0, auc_eval_return=1.0, diverged=False)])
    results.write_cells(str(ablation), [dict(lag_depth=32, seed=0)])
    with_it, without = tmp_path / "with", tmp_path / "without"
    main = ["ppo_clip", "ppo_kl", "spo", "vaco"]
    assert study._study_view(str(tmp_path), str(with_it), ["Hopper-v4"], main, lag_aware=True) == ["Hopper-v4"]
    study._study_view(str(tmp_path), str(without), ["Hopper-v4"], main)
    methods = {r["method"] for r in results.load_scores(str(with_it))}
    assert methods == {"ppo_clip", "ppo_kl", "spo", "vaco", "vaco | lag-aware tuning"}
    assert {r["method"] for r in results.load_scores(str(without))} == {"ppo_clip", "ppo_kl", "spo", "vaco"}
    aware = [r for r in results.load_scores(str(with_it)) if r["method"] == "vaco | lag-aware tuning"]
    assert len(aware) == 10 and all(int(r["lag_depth"]) == 32 and "variant" not in r for r in aware)


def test_a_units_provenance_is_merged_into_the_committed_files_never_replacing_them(tmp_path):
    """A fresh machine's run directory holds only its own units: the committed random returns and
    group identities of earlier sessions stay, a committed task's random return is never changed."""
    loco = study_module("locomotion")
    run_dir, dst = tmp_path / "runs", tmp_path / "results"
    os.makedirs(run_dir)
    os.makedirs(dst)
    machine = {"cpu": "AMD EPYC", "cores": 2}
    results.write_json(str(dst / "random_scores.json"), {"Hopper-v4": 24.6, "Walker2d-v4": 2.76})
    results.write_json(str(dst / "run.json"), {"identity": {"Hopper-v4/vaco": {"env": "Hopper-v4"}},
                                               "machines": [machine], "git_commit": "old"})
    results.write_json(str(run_dir / "random_scores.json"), {"Walker2d-v4": 2.75, "Ant-v4": -50.0})
    results.write_json(str(run_dir / "run.json"), {"identity": {"Walker2d-v4/spo": {"env": "Walker2d-v4"}},
                                                   "machines": [dict(machine, cpu="Intel")], "git_commit": "new"})
    study_module("kit").merge_provenance(str(run_dir), str(dst))
    assert results.read_json(str(dst / "random_scores.json")) == {"Hopper-v4": 24.6, "Walker2d-v4": 2.76,
                                                                   "Ant-v4": -50.0}
    merged = results.read_json(str(dst / "run.json"))
    assert merged["identity"] == {"Hopper-v4/vaco": {"env": "Hopper-v4"}, "Walker2d-v4/spo": {"env": "Walker2d-v4"}}
    assert merged["machines"] == [machine, dict(machine, cpu="Intel")] and merged["git_commit"] == "new"
    study_module("kit").merge_provenance(str(run_dir), str(dst))  # collecting twice changes nothing
    assert results.read_json(str(dst / "run.json")) == merged


def test_minutes_take_as_many_units_as_the_measured_pace_fits(tmp_path):
    """--minutes: units at the plan's estimate until one has run, then at the pace this call measured."""
    import types

    loco = study_module("locomotion")
    group = types.SimpleNamespace(subdir="Walker2d-v4/x")
    units = [loco.Unit(f"study/Walker2d-v4/m{i}", "study", group, 30, 50.0) for i in range(3)]
    args = types.SimpleNamespace(units=(), results=str(tmp_path / "results"), runs=str(tmp_path / "runs"))
    assert [u.name for u in loco.select(units, args, 60.0)] == ["study/Walker2d-v4/m0"]
    assert loco.select(units, args, 30.0, first=False) == []  # a later round never overruns the budget
    assert len(loco.select(units, args, 60.0, first=False, pace=0.5)) == 2  # half the estimate: two fit
    assert len(loco.select(units, args, 60.0, first=False, pace=2.0)) == 0


@pytest.mark.slow
def test_the_committed_verdicts_are_what_the_committed_per_run_scores_give():
    """results/locomotion/verdicts.csv is recomputed from the committed per-run scores by the protocol's rules
    (the same bootstrap seed and replicates): no verdict, interval or p-value in it was edited or is stale."""
    import numpy as np

    study, report = study_module("locomotion"), study_module("locomotion_report")
    loco = os.path.join(ROOT, "results", "locomotion")
    if not os.path.exists(os.path.join(loco, "verdicts.csv")):
        pytest.skip("the locomotion study has not been reported yet (no results/locomotion/verdicts.csv)")
    p, _ = study.load_protocol(os.path.join(loco, "protocol.json"))
    want = report.verdicts(p, loco)
    have = results.read_table(os.path.join(loco, "verdicts.csv"))
    assert len(have) == len(want)
    for h, w in zip(have, want):
        for key, value in w.items():
            if isinstance(value, float):
                assert np.isclose(float(h[key]), value, rtol=1e-9, atol=1e-12, equal_nan=True), (w["comparison"], key)
            else:
                assert str(h[key]) == str(value) or (value == "" and h[key] != h[key]), (w["comparison"], key)


@pytest.mark.parametrize("rejected, high, verdict", [
    (True, 0.9, "holds"), (True, 0.45, "holds"),  # Holm's rejection decides a hold, whatever the interval
    (False, 0.49, "fails"),  # the whole interval below 0.5
    (False, 0.5, "inconclusive"),  # touching 0.5 is not below it
    (False, 0.55, "inconclusive"),  # straddling 0.5 (e.g. [0.45, 0.55]) is never a failure
    (False, float("nan"), "inconclusive"),
])
def test_the_primary_call_at_and_around_its_thresholds(rejected, high, verdict):
    from vaco_jax.studies.locomotion_report import primary_verdict

    assert primary_verdict(rejected, high) == verdict


# ----------------------------------------------------------------------------- report and run guards

def _snapshot(root) -> dict:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                out[os.path.relpath(os.path.join(d, f), root)] = fh.read()
    return out


def test_the_report_is_computed_only_under_the_units_protocol_and_from_every_listed_unit(tmp_path):
    """A copy of the committed study: an edited protocol, then a finished unit's lost table, are one-line
    errors naming them; nothing is rewritten."""
    import shutil

    study = study_module("locomotion")
    res = tmp_path / "results"
    shutil.copytree(os.path.join(ROOT, study.RESULTS), res)
    figures = ("--figures", str(tmp_path / "figures"))
    p = json.load(open(res / "protocol.json"))
    p["rules"]["bootstrap"]["confidence"] = 0.9
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(p))
    before = _snapshot(res)
    with pytest.raises(ConfigError, match=f"{edited} .*not the protocol the units ran under"):
        study.main(_args(study, tmp_path, "report", *figures, protocol=edited))
    assert _snapshot(res) == before
    lost = res / "study" / "Walker2d-v4" / "vaco" / "scores.csv"
    os.remove(lost)
    before = _snapshot(res)
    for stage in ("report", "plan"):
        with pytest.raises(results.ResultsError, match=f"1 unit.*: study/Walker2d-v4/vaco \\({lost}: missing"):
            study.main(_args(study, tmp_path, stage, *figures, protocol=res / "protocol.json"))
    assert _snapshot(res) == before and not os.path.exists(tmp_path / "figures")


def test_unit_folders_follow_from_the_names(tmp_path):
    study = study_module("locomotion")
    p, _ = study.load_protocol(os.path.join(ROOT, study.PROTOCOL))
    units = study.all_units(p, study.Args(stage="plan", results=os.path.join(ROOT, study.RESULTS),
                                          runs=str(tmp_path)))[0]
    units += study.extension_units(p, {"extend": {"vaco": {"1": 0.05}}})
    assert {u.name.split("/")[0] for u in units} == {"tune", "extend", "study", "lag_aware", "ablation"}
    assert all(study.unit_dir(p, u.name) == os.path.join(u.stage, u.group.subdir) for u in units)


@pytest.mark.parametrize("text, message", [("{\"tasks\": [", "not valid JSON"),
                                           ("[]", "must be a JSON object of sections, not an array"),
                                           ("{}", "protocol field 'tasks' missing")])
def test_a_protocol_file_that_is_no_protocol_is_one_line_naming_it(tmp_path, text, message):
    study = study_module("locomotion")
    (tmp_path / "protocol.json").write_text(text)
    with pytest.raises(ConfigError, match=f"{tmp_path / 'protocol.json'}.*{message}") as e:
        study.main(_args(study, tmp_path, "plan"))
    assert "\n" not in str(e.value)


def test_the_frozen_tuning_error_names_the_results_given(tmp_path):
    study = study_module("locomotion")
    tiny_protocol(tmp_path / "protocol.json")
    with pytest.raises(ConfigError, match=f"frozen tuning \\({tmp_path / 'results' / 'tuned.json'}\\)"):
        study.main(_args(study, tmp_path, "run", "--units", "study/point_mass/ppo_clip"))
    assert not os.path.exists(tmp_path / "results")
