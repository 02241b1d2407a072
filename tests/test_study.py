"""experiments/study.py: the tuning protocol (choice, freezing) and the designs' groups, on synthetic
rows and the tiny pure-JAX point_mass task; one end-to-end tune + run on point_mass."""

import os

from conftest import study_module
import numpy as np
import pytest

from vaco_jax.analysis import results
from vaco_jax.core.knobs import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture()
def study(monkeypatch):
    module = study_module("study")
    monkeypatch.setattr(module, "TASKS", {"point_mass": 8 * 16 * 4, "point_mass_b": 8 * 16 * 4})
    monkeypatch.setattr(module, "PAIR_TASKS", ("point_mass",))
    monkeypatch.setattr(module, "COMMON", dict(num_envs=8, unroll_length=16, num_evals=2, eval_episodes=2,
                                               buffer_capacity=16))
    monkeypatch.setattr(module, "STUDY_SEEDS", (0, 1))
    return module


def _tuned(study, out, tasks=("point_mass",), value=0.3):
    chosen = {}
    for task in tasks:
        for method, knob in study.STEP_KNOB.items():
            pick = {"learning_rate": 1e-3, **({knob: value} if knob else {})}
            chosen.setdefault(task, {})[method] = {"chosen": pick, "grid": [{**pick, "mean_auc": 1.0,
                                                                                "mean_final": 1.0}]}
    results.write_json(study.tuned_path(out), {"learning_rates": list(study.LEARNING_RATES), "chosen": chosen})


def test_designs_use_the_frozen_step_sizes_and_their_own_settings(study, tmp_path):
    out = str(tmp_path)
    _tuned(study, out)
    lag = study.design_groups(out, "lag", ("point_mass",))
    assert [g.config.method for g in lag] == ["ppo_clip", "ppo_kl", "spo", "vaco"]
    for g in lag:
        assert g.config.learning_rate == pytest.approx(1e-3)
        assert {(c.lag_depth, c.seed) for c in g.cells} == {(b, s) for b in (1, 4, 16) for s in (0, 1)}
    assert lag[0].config.clip_epsilon == pytest.approx(0.3) and lag[3].config.tv_budget == pytest.approx(0.3)
    step = study.design_groups(out, "step", ("point_mass",))
    assert [(g.subdir, g.tags) for g in step] == [
        (os.path.join("point_mass", "ppo_clip", "variant=clip_x2"), (("variant", "clip_x2"),)),
        (os.path.join("point_mass", "ppo_clip", "variant=epochs_x2"), (("variant", "epochs_x2"),))]
    assert step[0].config.clip_epsilon == pytest.approx(0.6) and step[0].config.num_epochs == 4
    assert step[1].config.clip_epsilon == pytest.approx(0.3) and step[1].config.num_epochs == 8
    plain, revised = study.design_groups(out, "mismatch", ("point_mass",))
    assert plain.config.old_logit_source == "infer" and revised.config.build_method().surrogate.old_logit_source == "ewma_revised"
    assert plain.config.mismatch_strength == revised.config.mismatch_strength == study.MISMATCH_STRENGTH
    assert sorted({c.knob_dict()["ewma_reset_threshold"] for c in revised.cells}) == [0.0, 0.5]
    assert {c.lag_depth for c in revised.cells} == {16} and len(revised.cells) == 4
    # the pair designs run on PAIR_TASKS only; the lag design on every task
    assert study.design_groups(out, "ablation", ("point_mass_b",)) == []


def test_a_design_without_frozen_step_sizes_names_the_tuning_command(study, tmp_path):
    with pytest.raises(ConfigError, match="point_mass/ppo_clip has no frozen step size.*study.py tune"):
        study.design_groups(str(tmp_path), "lag", ("point_mass",))


def test_bad_designs_or_tasks_are_refused(study):
    with pytest.raises(ConfigError, match="designs.*allowed values: lag, proximal"):
        study.check_args(study.Args(stage="run", designs=("lagg",)))
    with pytest.raises(ConfigError, match="tasks.*hopper"):
        study.check_args(study.Args(stage="run", tasks=("hopper",)))
    with pytest.raises(ConfigError, match="methods: \\['ppo'\\] not valid; allowed values: ppo_clip, ppo_kl"):
        study.check_args(study.Args(stage="run", tasks=("point_mass",), methods=("ppo",)))
    with pytest.raises(ConfigError, match="methods: none given"):
        study.check_args(study.Args(stage="run", tasks=("point_mass",), methods=()))
    study.check_args(study.Args(stage="run", tasks=("point_mass",), methods=("spo", "vaco")))


def test_methods_restrict_the_groups_of_both_stages(study, tmp_path, capsys):
    """--methods: two processes can take different groups of one directory."""
    out = str(tmp_path)
    every = study.tuning_groups(("lag",), ("point_mass",))
    only = study.tuning_groups(("lag",), ("point_mass",), only=("spo", "vaco"))
    assert [g.config.method for g in every] == ["ppo_clip", "ppo_kl", "spo", "vaco"]
    assert [g.subdir for g in only] == [g.subdir for g in every[2:]]
    # run: only the named methods need a frozen step size; a variant belongs to its method
    results.write_json(study.tuned_path(out), {"learning_rates": list(study.LEARNING_RATES), "chosen": {
        "point_mass": {"vaco": {"chosen": {"learning_rate": 1e-3, "tv_budget": 0.2}, "grid": []}}}})
    assert [g.config.method for g in study.design_groups(out, "lag", ("point_mass",), only=("vaco",))] == ["vaco"]
    with pytest.raises(ConfigError, match="point_mass/ppo_clip has no frozen step size"):
        study.design_groups(out, "step", ("point_mass",), only=("ppo_clip",))
    assert study.design_groups(out, "step", ("point_mass",), only=("vaco",)) == []
    # a method no chosen design tunes: nothing runs, and it says so
    assert study.main(study.Args(stage="tune", out=out, designs=("ablation",), tasks=("point_mass",),
                                 methods=("spo",), progress=False)) == []
    assert "nothing to tune" in capsys.readouterr().out
    assert not os.path.exists(os.path.join(out, "tuning"))
    # nor without --methods, on a task none of the chosen designs runs on
    assert study.main(study.Args(stage="tune", out=out, designs=("ablation",), tasks=("point_mass_b",),
                                 progress=False)) == []
    assert "uses any method on ['point_mass_b']; nothing to tune" in capsys.readouterr().out


def _rows(pairs):
    return [{"learning_rate": lr, "clip_epsilon": eps, "auc_eval_return": auc, "final_eval_return": auc,
             "diverged": div} for lr, eps, auc, div in pairs]


def test_choice_is_the_highest_mean_auc_without_a_diverged_run(study):
    rows = _rows([(1e-4, 0.1, 10.0, False), (1e-4, 0.1, 20.0, False),      # mean 15
                  (3e-4, 0.1, 50.0, False), (3e-4, 0.1, 90.0, True),       # best mean, but one run diverged
                  (3e-4, 0.2, 30.0, False), (3e-4, 0.2, 12.0, False)])     # mean 21: chosen
    pick = study.choose(rows, "clip_epsilon")
    assert pick["chosen"] == {"learning_rate": 3e-4, "clip_epsilon": 0.2}
    assert [(g["mean_auc"], g["diverged"]) for g in pick["grid"]] == [(15.0, 0), (70.0, 1), (21.0, 0)]
    with pytest.raises(ConfigError, match="every tuning pair diverged"):
        study.choose(_rows([(1e-4, 0.1, 1.0, True)]), "clip_epsilon")


def test_knob_defaults_come_from_the_method_pieces(study):
    assert study.knob_default(study.base_config("point_mass", "ppo_clip"), "clip_epsilon") == pytest.approx(0.2)
    assert study.knob_default(study.base_config("point_mass", "vaco"), "tv_budget") == pytest.approx(0.2)
    assert study.knob_default(study.base_config("point_mass", "ppo_kl"), "kl_coef") > 0


def test_tune_then_run_end_to_end_and_a_frozen_choice_never_changes(study, tmp_path, monkeypatch):
    """point_mass, one method: tuning grid -> tuned.json -> the design at the frozen values -> claims."""
    monkeypatch.setattr(study, "DESIGNS", {"ablation": study.Design("5", ("vaco_realign_only",), (1, 4))})
    monkeypatch.setattr(study, "LEARNING_RATES", (1e-4, 1e-3))
    out = str(tmp_path / "study")
    args = dict(out=out, designs=("ablation",), tasks=("point_mass",), progress=False, bootstrap_reps=20)
    assert study.main(study.Args(stage="tune", **args)) == [os.path.join(out, "tuning")]
    frozen = results.read_json(study.tuned_path(out))["chosen"]["point_mass"]["vaco_realign_only"]
    assert len(frozen["grid"]) == 2 and frozen["chosen"]["learning_rate"] in (1e-4, 1e-3)
    tuning = results.load_scores(os.path.join(out, "tuning"))
    assert {int(r["seed"]) for r in tuning} == set(study.TUNING_SEEDS) and {int(r["lag_depth"]) for r in tuning} == {1}
    assert study.main(study.Args(stage="run", **args)) == [os.path.join(out, "ablation")]
    meta = results.read_json(os.path.join(out, "ablation", "run.json"))
    assert meta["machines"][0]["cores"] == os.cpu_count() and meta["versions"]["jax"]  # where it ran, for the docs
    rows = results.load_scores(os.path.join(out, "ablation"))
    assert len(rows) == 4 and {int(r["seed"]) for r in rows} == {0, 1}
    config = results.read_json(os.path.join(out, "ablation", "point_mass", "vaco_realign_only", "config.json"))
    assert config["learning_rate"] == pytest.approx(frozen["chosen"]["learning_rate"])
    # the tuning rows changed under a frozen choice: refused, the file untouched
    best = frozen["chosen"]["learning_rate"]
    rows = [dict(r, auc_eval_return=(-1e9 if r["learning_rate"] == best else 1e9)) for r in tuning]
    monkeypatch.setattr(results, "load_scores", lambda d: rows)
    before = open(study.tuned_path(out)).read()
    with pytest.raises(ConfigError, match="was frozen at"):
        study.freeze(out, study.tuning_groups(("ablation",), ("point_mass",)))
    assert open(study.tuned_path(out)).read() == before
    assert np.isfinite(frozen["grid"][0]["mean_auc"])


def test_a_wider_learning_rate_grid_is_a_new_tuning_directory(study, tmp_path):
    """--learning-rates sets the tuning grid; a directory tuned on one grid refuses another (named),
    and a grid outside (0, 1) is refused before anything runs."""
    groups = study.tuning_groups(("lag",), ("point_mass",), (1e-3, 3e-3))
    assert sorted({c.knob_dict()["learning_rate"] for c in groups[0].cells}) == pytest.approx([1e-3, 3e-3])
    out = str(tmp_path)
    _tuned(study, out)  # frozen with the default grid
    with pytest.raises(ConfigError, match=r"learning_rates: \[0.001, 0.003\] differs .* another --out"):
        study.main(study.Args(stage="tune", out=out, tasks=("point_mass",), learning_rates=(1e-3, 3e-3)))
    with pytest.raises(ConfigError, match=r"learning_rates: \[0.0, 0.001\] not valid; allowed values"):
        study.check_args(study.Args(stage="tune", tasks=("point_mass",), learning_rates=(0.0, 1e-3)))


def test_cost_rounds_interleave_and_alternate_the_order(study):
    log, now = [], [0.0]

    def call(name, ms):
        def f():
            log.append(name)
            now[0] += ms / 1e3
        return f

    calls = {("t", "a3po"): call("a", 2.0), ("t", "decoupled_recompute"): call("d", 3.0)}
    rows = study.interleaved_costs(calls, rounds=4, per_round=3, clock=lambda: now[0])
    assert "".join(log) == "aaaddd" "dddaaa" "aaaddd" "dddaaa"
    assert [(r["round"], r["method"]) for r in rows][:4] == [(0, "a3po"), (0, "decoupled_recompute"),
                                                             (1, "decoupled_recompute"), (1, "a3po")]
    assert {r["method"]: r["learner_ms"] for r in rows} == {"a3po": pytest.approx(2.0),
                                                             "decoupled_recompute": pytest.approx(3.0)}


def test_bad_cost_settings_are_refused(study):
    with pytest.raises(ConfigError, match="cost_rounds=1 not valid; allowed values: an integer >= 2"):
        study.check_args(study.Args(stage="cost", tasks=("point_mass",), cost_rounds=1))
    with pytest.raises(ConfigError, match="cost_calls=0"):
        study.check_args(study.Args(stage="cost", tasks=("point_mass",), cost_calls=0))


def test_cost_stage_writes_a_verified_table_once(study, tmp_path, monkeypatch):
    out = str(tmp_path)
    _tuned(study, out)
    from vaco_jax.driver import program as mc

    seen = []
    monkeypatch.setattr(mc, "learner_call", lambda config, b, traced, warm_chunks=1, learner_diagnostics=True: (
        seen.append((config.env, config.method, b, warm_chunks, config.learning_rate, learner_diagnostics))
        or (lambda: None, None, 0.0)))
    path = study.measure_cost(out, ("point_mass",), rounds=2, per_round=1)
    assert path == os.path.join(out, "proximal", "learner_cost.csv")
    assert [s[:3] for s in seen] == [("point_mass", "a3po", 16), ("point_mass", "decoupled_recompute", 16)]
    assert all(s[4] == pytest.approx(1e-3) for s in seen)  # the frozen step sizes
    assert not any(s[5] for s in seen)  # the TV-to-pi_T diagnostic off: each method pays for pi_T only if it reads it
    assert all(s[3] * 2 >= 16 for s in seen)  # warm phases cover the lag depth (2 phases per chunk here)
    rows = results.read_table(path)
    assert len(rows) == 4 and {r["lag_depth"] for r in rows} == {16}
    assert results.read_json(path[:-4] + ".json")["measurements"][0]["rounds"] == 2
    seen.clear()
    assert study.measure_cost(out, ("point_mass",), rounds=2, per_round=1) == path and seen == []  # kept
    assert study.measure_cost(out, ("point_mass_b",), rounds=2, per_round=1) is None  # not a pair task
    # a new task is measured and added; the old rows stay
    monkeypatch.setattr(study, "TASKS", {**study.TASKS, "inverted_pendulum": 8 * 16 * 4})
    monkeypatch.setattr(study, "PAIR_TASKS", ("point_mass", "inverted_pendulum"))
    _tuned(study, out, tasks=("point_mass", "inverted_pendulum"))
    assert study.measure_cost(out, ("point_mass", "inverted_pendulum"), rounds=2, per_round=1) == path
    assert [s[:2] for s in seen] == [("inverted_pendulum", "a3po"), ("inverted_pendulum", "decoupled_recompute")]
    assert rows == results.read_table(path)[:4] and len(results.read_table(path)) == 8
    assert len(results.read_json(path[:-4] + ".json")["measurements"]) == 2
    os.remove(path)  # a deleted table is measured again, with a new record of where
    assert study.measure_cost(out, ("point_mass",), rounds=2, per_round=1) == path
    assert len(results.read_json(path[:-4] + ".json")["measurements"]) == 1
    rows = results.read_table(path)
    results.write_table(path, [{**r, "lag_depth": 8} for r in rows])  # timed at another lag depth: refused
    with pytest.raises(ConfigError, match="measured at lag depth \\[8\\], the design's is 16; delete it"):
        study.measure_cost(out, ("point_mass", "inverted_pendulum"), rounds=2, per_round=1)


@pytest.mark.parametrize("group", ["lag/reacher/spo", "lag/FingerSpin/spo/shard-1-of-2",
                                   "step/inverted_pendulum/ppo_clip/variant=clip_x2"])
def test_a_finished_designs_lost_table_is_named_by_the_report_and_nothing_is_written(tmp_path, group):
    """A copy of the committed study with one finished group's scores gone: the claims report names it
    (never leaves the task out as if it were unfinished) and writes nothing."""
    import shutil

    from vaco_jax.studies import claims as report
    study_dir = tmp_path / "study"
    shutil.copytree(os.path.join(ROOT, "results", "study"), study_dir)
    lost = study_dir / group / "scores.csv"
    os.remove(lost)
    if os.path.exists(str(lost) + ".sha256"):
        os.remove(str(lost) + ".sha256")
    with pytest.raises(results.ResultsError, match=f"1 of its groups have no scores.csv: {lost};") as e:
        report.main(["--study", str(study_dir), "--out", str(tmp_path / "claims.csv")])
    assert "\n" not in str(e.value) and not os.path.exists(tmp_path / "claims.csv")
