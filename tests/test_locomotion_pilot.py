"""The pilot's command is a valid lag-sweep plan, and its report reads a run directory's scores."""

import csv
import os

import numpy as np

from conftest import study_module


def test_the_pilots_plan_is_valid_without_compiling():
    pilot = study_module("locomotion_pilot")
    lag_sweep = study_module("lag_sweep")
    import tyro

    args = tyro.cli(lag_sweep.Args, args=pilot.command())
    groups = lag_sweep.plan(args, lag_sweep.resolve(args))
    assert [g.subdir.split(os.sep)[:2] for g in groups] == [["Hopper-v4", "ppo_clip"], ["Hopper-v4", "vaco"]]
    assert len(groups[0].cells) == 2 * 3 and len(groups[1].cells) == 2 * 3 * 2
    assert groups[0].config.total_env_steps == 1_000_000 and groups[0].config.buffer_capacity >= 32


def test_report_gives_lag_effect_and_detectable_difference(tmp_path, monkeypatch):
    pilot = study_module("locomotion_pilot")
    rng = np.random.default_rng(0)
    for method, tvs in (("ppo_clip", [""]), ("vaco", ["0.02", "0.2"])):
        os.makedirs(tmp_path / "Hopper-v4" / method)
        with open(tmp_path / "Hopper-v4" / method / "scores.csv", "w", newline="") as f:
            w = csv.DictWriter(f, ["env", "method", "lag_depth", "seed", "tv_budget", "final_eval_return",
                                   "auc_eval_return", "diverged"])
            w.writeheader()
            for tv in tvs:
                for b, mean in ((1, 2000.0), (32, 1500.0)):
                    for seed in (100, 101, 102):
                        w.writerow(dict(env="Hopper-v4", method=method, lag_depth=b, seed=seed, tv_budget=tv,
                                        final_eval_return=mean + 100 * rng.standard_normal(),
                                        auc_eval_return=mean / 2, diverged="False"))
    monkeypatch.setattr(pilot, "OUT", str(tmp_path / "out"))
    text = pilot.report(str(tmp_path))
    assert "lag effect ppo_clip" in text and "minimum detectable difference" in text
    effect = [l for l in text.splitlines() if "lag effect ppo_clip" in l][0]
    assert 300 < float(effect.split("=")[-1].split("[")[0]) < 700
    assert os.path.exists(tmp_path / "out" / "report.txt")
