"""The deep-lag pilot (studies/deep_lag.py): its rule picks the configuration the docstring says, its
settings are checked before anything runs, and a tiny pilot writes its tables."""

import os
import re

import pytest

from vaco_jax.core.config import ConfigError
from vaco_jax.studies import deep_lag, deep_lag_report, kit_real, kit_real_runs


def _row(name, family, age, method="ppo_clip"):
    return {"configuration": name, "family": family, "method": method, "seed": 0, "steady_mean_age": age}


def test_the_rule_prefers_a_deep_queue_within_the_tolerance_then_the_nearest():
    rows = [_row("queue2x4", "queue", 4.9), _row("queue2x4", "queue", 4.7, "vaco"),  # pooled 4.8: within 25% of 4
            _row("publish8", "publish", 4.0), _row("publish8", "publish", 4.0, "vaco"),  # exact, but not a queue
            _row("queue4x16", "queue", 12.5), _row("publish31", "publish", 15.5)]  # 16: the queue misses by 22%
    by_target = {c["target"]: c for c in deep_lag.choose(rows)}
    assert by_target[4.0]["configuration"] == "queue2x4" and by_target[4.0]["steady_mean_age"] == pytest.approx(4.8)
    assert by_target[4.0]["runs"] == 2
    assert by_target[16.0]["configuration"] == "queue4x16"
    narrow = {c["target"]: c for c in deep_lag.choose(rows, tolerance=0.1)}
    assert narrow[4.0]["configuration"] == "publish8" and narrow[16.0]["configuration"] == "publish31"


def test_when_nothing_qualifies_the_nearest_is_chosen_and_the_output_says_so():
    chosen = deep_lag.choose([_row("queue2x4", "queue", 2.0), _row("publish8", "publish", 9.0)], targets=(16.0,))
    assert chosen[0]["configuration"] == "publish8" and "none within 25%" in chosen[0]["why"]
    with pytest.raises(ConfigError, match="no finished pilot run"):
        deep_lag.choose([])


def test_an_unknown_configuration_is_one_line_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="configurations: 'queue9'; allowed values: queue2x4, "):
        deep_lag.main(deep_lag.Args("pilot", preset="tiny", out=str(tmp_path), configurations=("queue9",)))
    assert not os.listdir(tmp_path)


def test_every_configuration_keeps_the_update_at_the_tasks_batch():
    spec = deep_lag.PRESETS["cpu"]
    for name, *_ in deep_lag.CONFIGURATIONS:
        config, settings = deep_lag.config_of(spec, name, "vaco")
        per_actor = config.num_envs // settings.num_actors
        assert per_actor * settings.per_update() == 16 and config.tv_budget == 0.06  # Hopper-v4's 16 envs
        assert settings.publish_interval <= config.buffer_capacity == 32


def test_the_equivalence_power_matches_a_simulation():
    import numpy as np

    rng = np.random.default_rng(0)
    for se, margin in [(0.05, 0.15), (0.06, 0.15), (0.1, 0.15)]:
        d = rng.normal(0.0, se, 200_000)
        inside = np.mean((d - deep_lag_report.Z90 * se > -margin) & (d + deep_lag_report.Z90 * se < margin))
        assert deep_lag_report.equivalence_power(se, margin) == pytest.approx(inside, abs=0.005)
    assert deep_lag_report.equivalence_power(0.1, 0.1) == 0.0  # the interval is wider than the margin


def test_the_prediction_errors_shrink_with_seeds_and_the_contrast_uses_both_methods():
    sd = {(m, a): (1000.0, 100.0) for m in ("ppo_clip", "vaco") for a in ("lockstep", "age4", "age16")}
    ses = deep_lag_report.prediction_ses(sd, 10, 10)
    assert ses["contrast age4"] == pytest.approx((2 * 0.1 ** 2 * 0.2) ** 0.5)
    assert ses["retention vaco age4"] == pytest.approx((2 * 0.1 ** 2 * 0.2) ** 0.5)  # R = 1, both cv 0.1
    assert deep_lag_report.prediction_ses(sd, 40, 40)["contrast age4"] == pytest.approx(ses["contrast age4"] / 2)


# ----------------------------------------------------------------------------------- the study
def _write_chosen(out, names):
    from vaco_jax.analysis import results

    os.makedirs(out, exist_ok=True)
    results.write_table(os.path.join(out, "chosen.csv"),
                        [{"target": t, "configuration": n, "family": "queue", "why": "test"}
                         for t, n in zip(deep_lag.TARGETS, names)])


def _slow_reference(arms, statistic, reps, confidence, seed=0):
    """The report's interval the slow way: arm by arm, resample by resample, one generator; the
    percentile interval by sorting and interpolating."""
    import numpy as np

    rng = np.random.default_rng(seed)
    means = []
    for arm in arms:
        arm_means = []
        for _ in range(reps):
            idx = rng.integers(0, len(arm), size=len(arm))
            arm_means.append(sum(arm[i] for i in idx) / len(arm))
        means.append(arm_means)
    values = sorted(statistic(*[m[r] for m in means]) for r in range(reps))

    def percentile(q):
        pos = q / 100 * (len(values) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(values) - 1)
        return values[lo] + (values[hi] - values[lo]) * (pos - lo)

    alpha = 1 - confidence
    point = statistic(*[sum(a) / len(a) for a in arms])
    return point, percentile(100 * alpha / 2), percentile(100 * (1 - alpha / 2))


def test_the_contrast_retention_and_verdicts_match_a_slow_reference():
    import numpy as np

    rng = np.random.default_rng(7)

    def draw(mean, sd, n):
        return list(rng.normal(mean, sd, n))

    real = {("lockstep", "ppo_clip"): draw(1000, 60, 12), ("lockstep", "vaco"): draw(1100, 60, 12),
            ("age4", "ppo_clip"): draw(800, 60, 12), ("age4", "vaco"): draw(950, 60, 11)}  # a diverged run left out
    sim = {("lockstep", "ppo_clip", "lockstep"): draw(1000, 60, 20),
           ("lockstep", "vaco", "lockstep"): draw(1100, 60, 20),
           ("age4", "ppo_clip", "histogram"): draw(800, 60, 20), ("age4", "vaco", "histogram"): draw(950, 60, 20),
           ("age4", "ppo_clip", "uniform"): draw(800, 600, 3), ("age4", "vaco", "uniform"): draw(950, 600, 3),
           ("age4", "ppo_clip", "control"): draw(800, 60, 5), ("age4", "vaco", "control"): draw(400, 60, 5)}
    study = dict(deep_lag.STUDY["cpu"], bootstrap_reps=300)
    rows = deep_lag_report.quantity_rows({k: np.array(v) for k, v in real.items()},
                                         {k: np.array(v) for k, v in sim.items()}, ["age4"], deep_lag.VARIANTS, study)
    assert [(r["quantity"], r["method"], r["variant"]) for r in rows] == [
        ("contrast", "vaco - ppo_clip", v) for v in deep_lag.VARIANTS] + [
        ("retention", m, v) for v in deep_lag.VARIANTS for m in ("ppo_clip", "vaco")]

    def mean(x):
        return sum(x) / len(x)

    for r in rows:
        v = r["variant"]
        if r["quantity"] == "contrast":
            arms = [sim[("age4", "vaco", v)], sim[("age4", "ppo_clip", v)], real[("age4", "vaco")],
                    real[("age4", "ppo_clip")], real[("lockstep", "ppo_clip")]]
            ref = mean(real[("lockstep", "ppo_clip")])
            assert r["real"] == pytest.approx((mean(real[("age4", "vaco")]) - mean(real[("age4", "ppo_clip")])) / ref)
            assert r["sim"] == pytest.approx((mean(arms[0]) - mean(arms[1])) / ref)
            expected = _slow_reference(arms, lambda a, b, x, y, s: (a - b) / s - (x - y) / s, 300, 0.90)
        else:
            m = r["method"]
            arms = [sim[("age4", m, v)], sim[("lockstep", m, "lockstep")], real[("age4", m)], real[("lockstep", m)]]
            assert r["real"] == pytest.approx(mean(arms[2]) / mean(arms[3]))
            assert r["sim"] == pytest.approx(mean(arms[0]) / mean(arms[1]))
            expected = _slow_reference(arms, lambda a, b, x, y: a / b - x / y, 300, 0.90)
        assert (r["difference"], r["low"], r["high"]) == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert r["difference"] == pytest.approx(r["sim"] - r["real"])
        lo, hi = expected[1:]
        assert r["verdict"] == ("predicts" if -0.15 <= lo and hi <= 0.15 else
                                "differs" if lo > 0.15 or hi < -0.15 else "inconclusive")
    verdicts = {(r["quantity"], r["method"], r["variant"]): r["verdict"] for r in rows}
    assert verdicts[("contrast", "vaco - ppo_clip", "histogram")] == "predicts"  # the same distributions
    assert verdicts[("contrast", "vaco - ppo_clip", "uniform")] == "inconclusive"  # 3 noisy seeds
    assert verdicts[("contrast", "vaco - ppo_clip", "control")] == "differs"  # VACO far below its real mean
    assert verdicts[("retention", "ppo_clip", "histogram")] == "predicts"
    assert verdicts[("retention", "vaco", "control")] == "differs"
    assert {r["n_real"] for r in rows} == {11, 12} and rows[0]["n_sim"] == 20


def test_the_verdict_rule_at_its_edges():
    assert kit_real.verdict(-0.15, 0.15, 0.15) == "predicts"
    assert kit_real.verdict(0.16, 0.3, 0.15) == "differs"
    assert kit_real.verdict(-0.4, -0.151, 0.15) == "differs"
    assert kit_real.verdict(-0.1, 0.2, 0.15) == "inconclusive"
    assert kit_real.verdict(float("nan"), float("nan"), 0.15) == "inconclusive"  # an empty arm: no interval
    import math

    assert all(math.isnan(x) for x in kit_real.bootstrap_ci([[1.0, 2.0], []], lambda a, b: a - b, 10, 0.9))


def test_plan_counts_what_is_left_and_the_kit_reads_a_configurations_real_runs(capsys):
    """``plan`` on the committed study: its seeds as spans, nothing left to run. The kit's reader of a
    configuration's real runs (the report's and lagshape's) scores each at the simulator's evaluation
    points and names the first run that has not finished."""
    from conftest import ROOT

    committed = os.path.join(ROOT, "results", "deep_lag")
    deep_lag.main(deep_lag.Args("plan", out=committed))
    text = capsys.readouterr().out
    assert "study: seeds real 0..19, simulated 1000..1039 (control 1000..1009)," in text
    assert text.count("0 real run(s) and 0 simulated program(s) to go") == 3 and text.count(": 0 pilot run(s)") == 6
    assert kit_real.span((0, 1)) == "0, 1" and kit_real.span((3, 5, 6, 7)) == "3, 5, 6, 7"
    c = {"name": "lockstep"}
    runs = kit_real.real_scores(committed, c, "vaco", (0, 1), 10)
    assert runs == [kit_real.real_score(kit_real.real_dir(committed, c, "vaco", s), 10) for s in (0, 1)]
    with pytest.raises(ConfigError, match=r"lockstep/vaco/seed99 has not finished; run the 'real' stage first"):
        kit_real.real_scores(committed, c, "vaco", (0, 99), 10)


def test_the_study_is_refused_without_two_chosen_configurations(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(ConfigError, match=r"chosen.csv is missing; run `pilot` and `choose` first"):
        deep_lag.main(deep_lag.Args("real", preset="tiny", out=out, work=str(tmp_path / "work")))
    assert not os.path.exists(out)
    _write_chosen(out, ["queue2x4", "queue2x4"])
    for stage in ("real", "sim", "report"):
        with pytest.raises(ConfigError, match="names queue2x4 for every target") as e:
            deep_lag.main(deep_lag.Args(stage, preset="tiny", out=out, work=str(tmp_path / "work")))
        assert "\n" not in str(e.value)
    assert sorted(os.listdir(out)) == ["chosen.csv", "chosen.csv.sha256"]  # nothing written


def test_the_study_protocol_is_fixed_by_its_first_stage(tmp_path, monkeypatch):
    out, work = str(tmp_path / "out"), str(tmp_path / "work")
    _write_chosen(out, ["queue2x4", "publish8"])
    args = lambda stage: deep_lag.Args(stage, preset="tiny", out=out, work=work)  # noqa: E731
    with pytest.raises(ConfigError, match="study_protocol.json is missing: no stage of the study has run"):
        deep_lag.main(args("report"))  # a report starts no study: it writes nothing
    assert sorted(os.listdir(out)) == ["chosen.csv", "chosen.csv.sha256"]
    with pytest.raises(ConfigError, match="has not finished; run the 'real' stage first"):
        deep_lag.main(args("sim"))  # the protocol is written, then the sim stage finds no real run
    from vaco_jax.analysis import results

    protocol = results.read_json(os.path.join(out, "study_protocol.json"))
    assert [(c["name"], c["configuration"]) for c in protocol["configurations"]] == [
        ("lockstep", "lockstep"), ("age4", "queue2x4"), ("age16", "publish8")]
    assert protocol["study"]["margin"] == 0.15 and protocol["study"]["real_seeds"] == [0, 1]
    monkeypatch.setitem(deep_lag.STUDY, "tiny", {**deep_lag.STUDY["tiny"], "margin": 0.2})
    with pytest.raises(ConfigError, match="another protocol") as e:
        deep_lag.main(args("sim"))
    assert "\n" not in str(e.value)
    monkeypatch.setitem(deep_lag.STUDY, "tiny", {**deep_lag.STUDY["tiny"], "margin": 0.15})
    _write_chosen(out, ["queue2x4", "queue4x4"])  # the pilot chose again
    with pytest.raises(ConfigError, match="another protocol"):
        deep_lag.main(args("real"))
    _write_chosen(out, ["queue2x4", "publish8"])
    with pytest.raises(ConfigError, match="run the 'real' stage first"):  # the same protocol: accepted
        deep_lag.main(args("report"))


def test_the_study_runs_lockstep_and_the_chosen_configurations_at_the_studys_numbers(tmp_path):
    out = str(tmp_path)
    _write_chosen(out, ["queue4x4", "queue2x16"])
    spec, study = deep_lag.PRESETS["cpu"], deep_lag.STUDY["cpu"]
    configs = deep_lag.study_configurations(out, spec, study)
    assert [(c["name"], c["configuration"], c["envs_per_actor"], c["update_envs"]) for c in configs] == [
        ("lockstep", "lockstep", 4, 16), ("age4", "queue4x4", 16, 16), ("age16", "queue2x16", 16, 16)]
    assert configs[0]["settings"]["mode"] == "sync" and configs[0]["settings"]["num_actors"] == 4
    config, settings = deep_lag.config_of(spec, "lockstep", "vaco", study)
    assert (config.total_env_steps, config.num_evals, config.eval_episodes, config.buffer_capacity) == (
        1_000_000, 10, 8, 32)
    assert config.num_envs == 16 and config.tv_budget == 0.06 and settings.mode == "sync"
    assert deep_lag.config_of(spec, "lockstep", "ppo_clip", study)[0].clip_epsilon == 0.2
    assert len(study["real_seeds"]) == 20 and len(study["sim_seeds"]) == 40 and len(study["control_seeds"]) == 10
    assert set(study["control_seeds"]) <= set(study["sim_seeds"])


def test_the_simulated_sweeps_run_at_the_real_runs_settings(tmp_path, monkeypatch):
    """The cpu study's sweeps (the lag sweep itself replaced): lockstep's synchronous lag, then per deep
    configuration and method the histogram and uniform counterparts on the simulated seeds and the control on
    its own seeds, one real update's envs, the pilot's knobs, and a buffer that holds the oldest age drawn."""
    from vaco_jax.driver.histogram import write_age_histogram

    out, work = str(tmp_path / "out"), str(tmp_path / "work")
    _write_chosen(out, ["queue4x4", "publish31"])
    study = deep_lag.STUDY["cpu"]
    shapes = {"age4": [0, 10, 30, 40, 20], "age16": [0] * 10 + [5] * 22}  # age16: ages up to 31
    for name, counts in shapes.items():
        for method in ("ppo_clip", "vaco"):
            for seed in study["real_seeds"]:
                where = os.path.join(out, "real", name, method, f"seed{seed}")
                os.makedirs(where)
                write_age_histogram(os.path.join(where, "age_histogram.csv"), counts, checksum=True)
                open(os.path.join(where, "score.json"), "w").write("{}")
    calls = []
    monkeypatch.setattr(kit_real_runs, "run_sweep", lambda spec, method, variants, seeds, **kw: calls.append(
        dict(kw, spec=spec, method=method, variants=variants, seeds=seeds)))
    deep_lag.main(deep_lag.Args("sim", preset="cpu", out=out, work=work, progress=False))
    # programs of at most 40 cells: a main sweep (2 counterparts x 40 seeds) as two blocks of 20 seeds
    assert [(c["work"][len(work) + 1:], len(c["variants"]), c["seeds"]) for c in calls] == [
        (os.path.join("sim", name, m, sweep, f"seeds{seeds[0]}-{seeds[-1]}"), n, seeds)
        for name, sweeps in (("lockstep", [("lockstep", 1, range(1000, 1040))]),
                             ("age4", [("main", 2, range(1000, 1020)), ("main", 2, range(1020, 1040)),
                                       ("control", 1, range(1000, 1010))]),
                             ("age16", [("main", 2, range(1000, 1020)), ("main", 2, range(1020, 1040)),
                                        ("control", 1, range(1000, 1010))]))
        for m in ("ppo_clip", "vaco") for sweep, n, seeds in ((s, n, tuple(r)) for s, n, r in sweeps)]
    assert all(c["dst"] == os.path.join(out, c["work"][len(work) + 1:]) for c in calls)
    by = {(c["work"].split(os.sep)[-4], c["method"], c["work"].split(os.sep)[-2]): c for c in calls}
    assert by[("lockstep", "vaco", "lockstep")]["variants"] == [(1.0,)]
    assert (by[("lockstep", "vaco", "lockstep")]["num_envs"], by[("lockstep", "vaco", "lockstep")]["envs_per_actor"]) \
        == (16, 4)
    assert (by[("age4", "vaco", "main")]["num_envs"], by[("age4", "vaco", "main")]["envs_per_actor"]) == (16, 16)
    assert (by[("age16", "vaco", "main")]["num_envs"], by[("age16", "vaco", "main")]["envs_per_actor"]) == (16, 4)
    assert by[("age4", "vaco", "main")]["variants"] == [(0.0, 0.1, 0.3, 0.4, 0.2), (1.0,) * 6]  # mean 2.7: B = 6
    assert by[("age4", "vaco", "control")]["variants"] == [(0.0,) * 8 + (0.0, 0.1, 0.3, 0.4, 0.2)]
    assert by[("age4", "vaco", "control")]["seeds"] == tuple(range(1000, 1010))
    assert by[("age4", "vaco", "main")]["buffer_capacity"] == 32  # the study's
    assert by[("age16", "ppo_clip", "main")]["buffer_capacity"] == 42  # uniform at mean 20.5: B = 42
    assert by[("age16", "ppo_clip", "control")]["buffer_capacity"] == 40  # ages up to 31 + 8
    assert by[("age4", "vaco", "main")]["knobs"] == {"tv_budget": 0.06}
    assert by[("age4", "ppo_clip", "main")]["knobs"] == {"clip_epsilon": 0.2}
    spec = by[("age4", "vaco", "main")]["spec"]
    assert (spec["task"], spec["total_env_steps"], spec["num_evals"], spec["eval_episodes"]) == (
        "Hopper-v4", 1_000_000, 10, 8)


@pytest.mark.slow
def test_the_study_end_to_end_on_point_mass(tmp_path, capsys):
    import numpy as np

    from vaco_jax.analysis import results

    from vaco_jax.studies import deep_lag_findings

    out, work = str(tmp_path / "results" / "deep_lag"), str(tmp_path / "work")
    def args(stage, **kw):
        return deep_lag.Args(stage, preset="tiny", out=out, work=work, progress=False, **kw)

    deep_lag.main(args("pilot", configurations=("queue2x4",)))
    with pytest.raises(ConfigError, match="never piloted: queue4x4, queue2x16, queue4x16, publish8, publish31"):
        deep_lag.main(args("choose"))
    chosen = deep_lag.main(args("choose", configurations=("queue2x4",)))
    assert [c["configuration"] for c in chosen] == ["queue2x4", "queue2x4"]
    pilot = results.read_table(os.path.join(out, "pilot.csv"))
    assert [(r["configuration"], r["method"]) for r in pilot] == [("queue2x4", "ppo_clip"), ("queue2x4", "vaco")]
    for r in pilot:  # a queue of 4 in front of a learner that takes one batch an update: ages above 1
        assert float(r["steady_mean_age"]) > 1 and float(r["p10"]) <= float(r["p50"]) <= float(r["p90"]) <= float(r["max"])
        assert int(r["dropped"]) == 0
    with pytest.raises(ConfigError, match="names queue2x4 for every target"):  # one configuration pilot: refused
        deep_lag.main(args("real"))
    _write_chosen(out, ["queue2x4", "publish8"])
    capsys.readouterr()
    deep_lag.main(args("plan"))
    assert "age16    = publish8" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="run the 'real' stage first"):
        deep_lag.main(args("sim"))
    first = deep_lag.main(args("real", minutes=1e-6))  # the first run always starts; the budget then stops
    assert len(first) == 1 and "--minutes 1e-06 reached" in capsys.readouterr().out
    assert len(first + deep_lag.main(args("real"))) == 3 * 2 * 2  # configurations x methods x seeds
    assert deep_lag.main(args("real")) == []  # finished runs are kept
    assert os.path.exists(os.path.join(out, "real", "age16", "vaco", "seed1", "age_histogram.csv"))
    deep_lag.main(args("sim", minutes=1e-6))  # the first program always starts; the budget then stops
    assert "--minutes 1e-06 reached" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="run the 'sim' stage first"):
        deep_lag.main(args("report"))
    assert deep_lag_findings.deep_lag_table(str(tmp_path)).startswith("No verdict yet")
    deep_lag.main(args("sim"))
    # programs of at most 2 cells: a main sweep (2 counterparts) one program per seed, a 1-counterpart sweep one
    for c, sweeps in (("lockstep", ("lockstep",)), ("age4", ("main", "control")), ("age16", ("main", "control"))):
        for method in ("ppo_clip", "vaco"):
            for sweep in sweeps:
                blocks = ("seeds1000-1000", "seeds1001-1001") if sweep == "main" else ("seeds1000-1001",)
                assert sorted(os.listdir(os.path.join(out, "sim", c, method, sweep))) == list(blocks)
                for block in blocks:
                    assert os.path.exists(os.path.join(out, "sim", c, method, sweep, block, "scores.csv"))
    assert not any(f.endswith(".npz") for _, _, files in os.walk(os.path.join(out, "sim")) for f in files)
    control = results.read_table(os.path.join(out, "sim", "age4", "vaco", "control", "seeds1000-1001", "scores.csv"))
    assert sorted(r["seed"] for r in control) == [1000, 1001]
    got = deep_lag.main(args("report"))
    rows, wall = got["verdicts"], got["wall_clock"]
    assert len(rows) == 2 * 3 + 2 * 3 * 2  # contrasts, then retentions per method
    assert {r["verdict"] for r in rows} <= {"predicts", "differs", "inconclusive"}
    assert all(np.isfinite(r["difference"]) and r["low"] <= r["high"] for r in rows)
    assert all(r["n_real"] == 2 and r["n_sim"] == 2 for r in rows)
    ages = {(r["configuration"], r["variant"]): r["sim_realised_mean_age"] for r in rows if r["quantity"] == "contrast"}
    assert ages[("age4", "histogram")] < ages[("age4", "control")]  # the simulator drew the older ages it was given
    assert [(w["configuration"], w["method"]) for w in wall][:3] == [("lockstep", "all"), ("lockstep", "ppo_clip"),
                                                                     ("lockstep", "vaco")]
    assert len(wall) == 9 and all(w["runs"] in (2, 4) and w["env_steps_per_second"] > 0 for w in wall)
    assert all((w["seconds_to_threshold"] is None) == (2 * w["reached"] <= w["runs"]) for w in wall)
    for name in ("arms.csv", "verdicts.csv", "wall_clock.csv", "figures/deep_lag.png", "study_protocol.json"):
        assert os.path.exists(os.path.join(out, name))
    assert len(results.read_table(os.path.join(out, "verdicts.csv"))) == len(rows)
    # every arm behind the verdicts: real and simulated lockstep, then real + 3 counterparts per deep configuration
    arms = {(a["configuration"], a["method"], a["variant"]): a for a in got["arms"]}
    assert len(arms) == 2 * (2 + 2 * 4) and all(a["runs"] == 2 and a["diverged"] == 0 for a in arms.values())
    for c in ("age4", "age16"):
        for m in ("ppo_clip", "vaco"):
            hist = next(r for r in rows if r["quantity"] == "retention" and r["configuration"] == c
                        and r["method"] == m and r["variant"] == "histogram")
            assert arms[(c, m, "real")]["auc_mean"] / arms[("lockstep", m, "real")]["auc_mean"] == pytest.approx(hist["real"])
            assert arms[(c, m, "histogram")]["auc_mean"] / arms[("lockstep", m, "lockstep")]["auc_mean"] == \
                pytest.approx(hist["sim"])
            assert arms[(c, m, "real")]["mean_age"] > 1 and arms[(c, m, "control")]["mean_age"] > arms[(c, m, "histogram")]["mean_age"]
    block = deep_lag_findings.deep_lag_table(str(tmp_path))
    assert block.count("| contrast |") == 6 and block.count("| retention |") == 12
    assert "| age16 (publish8) | VACO | control | 2 |" in block and "| age4 (queue2x4) | both | 4 |" in block
    line = deep_lag_findings.deep_lag_summary(str(tmp_path))
    counts = {v: sum(r["verdict"] == "predicts" for r in rows if r["variant"] == v) for v in deep_lag.VARIANTS}
    assert "verdicts over the 6 rows per counterpart" in line and re.search(r"finished: (\d+) of \1;", line)
    assert all(f"{v}: {counts[v]} predicts," in line for v in deep_lag.VARIANTS)


def test_a_sweep_runs_as_programs_of_at_most_the_cells_allowed():
    """Blocks of seeds in order, each at most ``cells`` cells (counterparts x seeds), at least one seed."""
    assert deep_lag.seed_blocks(range(1000, 1040), 2, 40) == [tuple(range(1000, 1020)), tuple(range(1020, 1040))]
    assert deep_lag.seed_blocks(range(1000, 1040), 1, 40) == [tuple(range(1000, 1040))]
    assert deep_lag.seed_blocks(range(1000, 1010), 1, 40) == [tuple(range(1000, 1010))]
    assert deep_lag.seed_blocks(range(5), 1, 2) == [(0, 1), (2, 3), (4,)]
    assert deep_lag.seed_blocks(range(3), 3, 2) == [(0,), (1,), (2,)]  # one seed is more than the cells: alone
    assert deep_lag.seed_blocks(range(7), 2, 5) == [(0, 1), (2, 3), (4, 5), (6,)]


def test_the_first_screen_counts_the_simulated_programs_of_the_protocol(tmp_path):
    from vaco_jax.analysis import results
    from vaco_jax.studies import deep_lag_findings

    out = tmp_path / "results" / "deep_lag"
    out.mkdir(parents=True)
    study = deep_lag.STUDY["cpu"]
    configs = [{"name": n, "family": f} for n, f in (("lockstep", "sync"), ("age4", "publish"), ("age16", "queue"))]
    protocol = {"preset": "cpu", "task": "Hopper-v4", "methods": ["ppo_clip", "vaco"], "configurations": configs,
                "study": {k: list(v) if isinstance(v, tuple) else v for k, v in study.items()}}
    results.write_json(str(out / "study_protocol.json"), protocol)
    for part in ("lockstep/vaco/lockstep/seeds1000-1039", "age4/vaco/main/seeds1000-1019",
                 "age4/vaco/main/seeds1020-1039"):
        (out / "sim" / part).mkdir(parents=True)
        (out / "sim" / part / "scores.csv").write_text("seed\n1000\n")
    (out / "sim" / "age16/vaco/main/seeds1000-1019").mkdir(parents=True)  # started, not finished
    line = deep_lag_findings.deep_lag_summary(str(tmp_path))
    # per method: lockstep 1 program, age4 and age16 2 (main) + 1 (control) each
    assert "simulated programs finished: 3 of 14; no verdict yet (the simulated sweeps follow the real" in line
    for c in configs:  # every real run in: the report is what is left
        for m in protocol["methods"]:
            for seed in study["real_seeds"]:
                (out / "real" / c["name"] / m / f"seed{seed}").mkdir(parents=True)
                results.write_json(str(out / "real" / c["name"] / m / f"seed{seed}" / "score.json"), {"mean_age": 1.0})
    line = deep_lag_findings.deep_lag_summary(str(tmp_path))
    assert "age4 40 (mean age 1.00)" in line and "report` runs once every simulated program has finished" in line


# ----------------------------------------------------------------------------------- the guards
def _committed_copy(tmp_path, ignore=("figures", "pilot")):
    import shutil

    from conftest import ROOT

    out = str(tmp_path / "deep_lag")
    shutil.copytree(os.path.join(ROOT, "results", "deep_lag"), out, ignore=shutil.ignore_patterns(*ignore))
    return out


def _files(out):
    return {os.path.relpath(os.path.join(d, f), out): open(os.path.join(d, f), "rb").read()
            for d, _, names in os.walk(out) for f in names}


def _edit_count(path):
    lines = open(path).read().split("\n")
    i = next(i for i, line in enumerate(lines) if line[:1].isdigit() and not line.endswith(",0"))
    age, count = lines[i].split(",")
    lines[i] = f"{age},{int(count) + 1}"
    open(path, "w").write("\n".join(lines))


def _drop_seed(path, seed):
    from vaco_jax.analysis import results

    results.write_table(path, [r for r in results.read_table(path) if r["seed"] != seed])


DL_DAMAGE = {  # what is done to a copy of results/deep_lag, and the one line report answers with
    "a real run's curve gone": (lambda o: os.remove(f"{o}/real/age16/vaco/seed7/curve.csv"), "ResultsError",
                                "report: 1 table(s) of finished units are missing: "
                                "{o}/real/age16/vaco/seed7/curve.csv;"),
    "a real histogram's checksum gone": (lambda o: os.remove(f"{o}/real/age4/ppo_clip/seed0/age_histogram.csv.sha256"),
                                         "ResultsError", "{o}/real/age4/ppo_clip/seed0/age_histogram.csv: no checksum"),
    "a real histogram's count edited": (lambda o: _edit_count(f"{o}/real/age16/ppo_clip/seed5/age_histogram.csv"),
                                        "ResultsError", "{o}/real/age16/ppo_clip/seed5/age_histogram.csv: checksum "
                                                        "mismatch"),
    "a real run's score gone": (lambda o: os.remove(f"{o}/real/lockstep/vaco/seed19/score.json"), "ConfigError",
                                "report: {o}/real/lockstep/vaco/seed19 has not finished; run the 'real' stage first"),
    "a program's realised ages gone": (
        lambda o: os.remove(f"{o}/sim/age4/vaco/control/seeds1000-1009/realised_ages.csv"), "ResultsError",
        "missing: {o}/sim/age4/vaco/control/seeds1000-1009/realised_ages.csv;"),
    "a program's scores gone": (lambda o: os.remove(f"{o}/sim/age16/ppo_clip/main/seeds1020-1039/scores.csv"),
                                "ConfigError", "report: {o}/sim/age16/ppo_clip/main/seeds1020-1039 has not finished; "
                                               "run the 'sim' stage first"),
    "the protocol gone": (lambda o: os.remove(f"{o}/study_protocol.json"), "ConfigError",
                          "report: {o}/study_protocol.json is missing: no stage of the study has run"),
    "a program's seed lost": (lambda o: _drop_seed(f"{o}/sim/age16/ppo_clip/main/seeds1020-1039/scores.csv", 1033),
                              "ResultsError", "{o}/sim/age16/ppo_clip/main/seeds1020-1039/scores.csv: seeds [1020, "),
}


@pytest.mark.parametrize("damage", list(DL_DAMAGE))
def test_a_report_on_a_damaged_copy_of_the_study_is_one_line_and_writes_nothing(tmp_path, damage):
    """The committed study, copied, one unit's file gone or changed (a real run's histogram included: it
    decides the simulated counterparts' weights): the report names it in one line before it writes
    anything, never a verdict from the units that are left or an inconclusive row from a changed count."""
    from vaco_jax.analysis.results import ResultsError

    out = _committed_copy(tmp_path)
    act, kind, message = DL_DAMAGE[damage]
    act(out)
    before = _files(out)
    with pytest.raises({"ResultsError": ResultsError, "ConfigError": ConfigError}[kind]) as e:
        deep_lag.main(deep_lag.Args("report", out=out, work=str(tmp_path / "work"), progress=False))
    assert message.format(o=out) in str(e.value) and "\n" not in str(e.value)
    assert _files(out) == before


def test_choose_refuses_a_pilot_that_has_not_run_every_configuration(tmp_path):
    """The committed pilot, copied: whole, ``choose`` writes the committed choice again; with a
    configuration never piloted and one partly, it names both and writes nothing; ``--configurations``
    applies the rule among the ones named, and ``chosen.csv`` says so."""
    import shutil

    from conftest import ROOT

    committed = os.path.join(ROOT, "results", "deep_lag")
    whole, part = str(tmp_path / "whole"), str(tmp_path / "part")
    for out in (whole, part):
        shutil.copytree(os.path.join(committed, "pilot"), os.path.join(out, "pilot"))
    args = lambda out, **kw: deep_lag.Args("choose", out=out, progress=False, **kw)  # noqa: E731
    deep_lag.main(args(whole))
    for name in ("chosen.csv", "pilot.csv"):
        assert open(os.path.join(whole, name)).read() == open(os.path.join(committed, name)).read()
    shutil.rmtree(os.path.join(part, "pilot", "queue2x16"))
    shutil.rmtree(os.path.join(part, "pilot", "publish31", "vaco"))
    with pytest.raises(ConfigError) as e:
        deep_lag.main(args(part))
    assert str(e.value) == ("choose: the rule compares every configuration it is given, and the pilot has not "
                            "finished them (never piloted: queue2x16; partly piloted: publish31 (1 of 2 runs)); run "
                            "`pilot`, or choose among the finished ones only: --configurations queue2x4 queue4x4 "
                            "queue4x16 publish8")
    assert os.listdir(part) == ["pilot"]
    chosen = deep_lag.main(args(part, configurations=("queue2x4", "publish8")))
    assert [c["configuration"] for c in chosen] == ["publish8", "queue2x4"]  # queue2x4 nearest 16 (none within 25%)
    assert all(c["why"].endswith("; among queue2x4, publish8 only (--configurations)") for c in chosen)


def test_choose_refuses_to_overwrite_the_choice_a_study_has_run_on(tmp_path):
    out = _committed_copy(tmp_path, ignore=("figures",))
    before = _files(out)
    with pytest.raises(ConfigError) as e:
        deep_lag.main(deep_lag.Args("choose", out=out, progress=False))
    assert str(e.value) == (f"choose: the study has run on {out}/chosen.csv (study_protocol.json, 120 finished real "
                            "run(s), 14 finished simulated program(s)); choosing again would leave its runs under "
                            "another choice: keep it, or pilot and choose in another --out")
    assert _files(out) == before


@pytest.mark.parametrize("stage", ["plan", "power", "real", "sim", "report"])
def test_configurations_is_refused_by_the_stages_that_do_not_read_it(tmp_path, stage):
    out = str(tmp_path / "out")
    _write_chosen(out, ["queue2x4", "publish8"])
    with pytest.raises(ConfigError) as e:
        deep_lag.main(deep_lag.Args(stage, preset="tiny", out=out, work=str(tmp_path / "work"),
                                    configurations=("queue2x4",)))
    assert str(e.value) == (f"configurations: read by the stages pilot and choose only; {stage} takes every "
                            "configuration (the study's stages: lockstep and the ones chosen.csv names)")
    assert sorted(os.listdir(out)) == ["chosen.csv", "chosen.csv.sha256"] and not os.path.exists(tmp_path / "work")


@pytest.mark.parametrize("rows, message", [
    ([{"target": 4.0, "configuration": "queue9"}, {"target": 16.0, "configuration": "publish8"}],
     "names 'queue9' for the target 4, which is no configuration of the pilot (allowed values: queue2x4, "),
    ([{"target": 4.0, "configuration": "lockstep"}, {"target": 16.0, "configuration": "publish8"}],
     "names 'lockstep' for the target 4, which is no configuration of the pilot"),
    ([{"target": 4.0, "configuration": "queue2x4"}, {"target": 4.0, "configuration": "publish8"}],
     "names the target 4 twice"),
    ([{"goal": 4.0, "configuration": "queue2x4"}], "row 1: expected a number under 'target' and a name under "
                                                   "'configuration'"),
])
def test_a_bad_chosen_csv_is_a_problem_of_that_file(tmp_path, rows, message):
    from vaco_jax.analysis import results

    out = str(tmp_path / "out")
    os.makedirs(out)
    results.write_table(os.path.join(out, "chosen.csv"), rows)
    with pytest.raises(ConfigError) as e:  # not a --configurations flag error: the file's
        deep_lag.main(deep_lag.Args("real", preset="tiny", out=out, work=str(tmp_path / "work")))
    assert str(e.value).startswith(f"study: {out}/chosen.csv") and message in str(e.value)
    assert str(e.value).endswith("; rerun `choose`") and "\n" not in str(e.value)
    assert sorted(os.listdir(out)) == ["chosen.csv", "chosen.csv.sha256"]
