"""Sweep runner: results on disk, resume after interruption, skip when finished, diverged cells,
(docs/evaluation.md, issue: lag-sweep experiments; sharding over devices: test_integrity)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from vaco_jax.analysis import tables

from vaco_jax.analysis import results

from vaco_jax.driver import grid, provenance, runner, study
from vaco_jax.core.config import Config, ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Same program as experiments/lag_sweep.py --preset tiny (ppo_clip group): shares the compile cache.
TINY_SWEEP = dict(env="point_mass", method="ppo_clip", total_env_steps=8 * 16 * 4, num_envs=8,
                  unroll_length=16, num_evals=2, eval_episodes=2, buffer_capacity=4, episode_length=50)


def test_grid_builds_the_cartesian_product():
    cells = grid.grid([1, 4], [0, 1, 2], tv_budget=[0.1, 0.2])
    assert len(cells) == 12
    assert {(c.lag_depth, c.seed, c.knob_dict()["tv_budget"]) for c in cells} == {
        (b, s, d) for b in (1, 4) for s in (0, 1, 2) for d in (0.1, 0.2)}
    assert cells[0].row() == {"lag_depth": 1, "seed": 0, "tv_budget": 0.1}


def test_parse_sweep_types_names_and_duplicates():
    axes = grid.parse_sweep(["gamma=0.99,0.995", "learning_rate=1e-4,3e-4", "num_epochs=2,4",
                              "policy_hidden=(64,64),(32,)", "actor_dtype=float32,bfloat16",
                              "normalize_rewards=True,False", "tv_budget=0.1,inf"])
    assert axes == {"gamma": [0.99, 0.995], "learning_rate": [1e-4, 3e-4], "num_epochs": [2, 4],
                    "policy_hidden": [(64, 64), (32,)], "actor_dtype": ["float32", "bfloat16"],
                    "normalize_rewards": [True, False], "tv_budget": [0.1, float("inf")]}
    for bad, match in [(["gama=0.9"], "did you mean gamma"), (["gamma=0.9,0.9"], "duplicate"),
                       (["gamma="], "no values"), (["gamma=2"], "gamma"), (["gamma"], "NAME=V1"),
                       (["num_epochs=two"], "not an integer"), (["learning_rate=nan"], "learning_rate")]:
        with pytest.raises(ConfigError, match=match):
            grid.parse_sweep(bad)


def test_apply_sweep_makes_groups_of_static_values_and_cells_of_traced_values():
    base = [grid.Group(Config(**TINY_SWEEP).replace(method=m), tuple(grid.grid([1, 4], [0])), f"t/{m}", m)
            for m in ("ppo_clip", "vaco")]
    groups = grid.apply_sweep(base, grid.parse_sweep(["gamma=0.9,0.99", "clip_epsilon=0.1,0.3",
                                                         "num_epochs=1,2"]))
    assert len(groups) == 4  # 2 methods x 2 epoch values
    by = {g.subdir: g for g in groups}
    assert set(by) == {"t/ppo_clip/num_epochs=1", "t/ppo_clip/num_epochs=2", "t/vaco/num_epochs=1",
                       "t/vaco/num_epochs=2"}
    assert len(by["t/ppo_clip/num_epochs=1"].cells) == 2 * 2 * 2  # lag x gamma x clip_epsilon
    assert len(by["t/vaco/num_epochs=2"].cells) == 2 * 2  # VACO reads no clip_epsilon
    assert by["t/vaco/num_epochs=2"].config.num_epochs == 2 and dict(by["t/vaco/num_epochs=2"].tags) == {"num_epochs": 2}
    text = grid.plan_text(groups)
    assert text.startswith("plan: 4 group(s)") and "gamma={0.9, 0.99}" in text
    with pytest.raises(ConfigError, match="kl_coef.*no group"):
        grid.apply_sweep(base, {"kl_coef": [0.1, 1.0]})
    with pytest.raises(ConfigError, match="lag_depth=9"):  # cells are validated before anything runs
        grid.apply_sweep(base, {"lag_depth": [9]})


def test_study_level_knobs_go_to_the_methods_that_read_them():
    configs = grid.with_knobs([Config(**TINY_SWEEP), Config(**TINY_SWEEP).replace(method="vaco")],
                               {"clip_epsilon": 0.3, "tv_budget": None})
    assert configs[0].clip_epsilon == 0.3 and configs[1].clip_epsilon is None
    with pytest.raises(ConfigError, match="kl_coef"):
        grid.with_knobs([Config(**TINY_SWEEP)], {"kl_coef": 0.5})


def test_csv_round_trip_keeps_types():
    rows = [{"env": "reacher", "lag_depth": 4, "lr": 3e-4, "diverged": False, "x": float("nan")},
            {"env": "hopper", "lag_depth": 1, "lr": 0.001, "diverged": True, "y": 2.5}]
    path = "/tmp/_vaco_csv_test.csv"
    results.write_table(path, rows)
    back = results.read_table(path)
    assert back[0]["env"] == "reacher" and back[0]["lag_depth"] == 4 and back[0]["lr"] == 3e-4
    assert back[0]["diverged"] is False and back[1]["diverged"] is True
    assert np.isnan(back[0]["x"]) and np.isnan(back[0]["y"]) and back[1]["y"] == 2.5


def test_cell_scores_flags_a_nan_run_as_diverged():
    rows = [{"eval_return": 10.0, "diverged": False}, {"eval_return": float("nan"), "diverged": True}]
    s = runner.cell_scores(rows, np.ones(20), np.ones(20))
    assert s["diverged"] and np.isnan(s["final_eval_return"])
    ok = runner.cell_scores(rows[:1] * 3, np.arange(20.0), np.ones(20))
    assert not ok["diverged"] and ok["auc_eval_return"] == 10.0 and ok["train_return_last5pct"] == 19.0


def test_summary_drops_and_counts_diverged_runs(tmp_path):
    rows = []
    for method, base in (("ppo_clip", 100.0), ("vaco", 50.0)):
        for b in (1, 4):
            for s in range(4):
                rows.append({"env": "reacher", "method": method, "lag_depth": b, "seed": s,
                             "final_eval_return": base + s - b, "auc_eval_return": base,
                             "train_return_last5pct": base, "diverged": False})
    rows[-1].update(diverged=True, final_eval_return=float("nan"))  # vaco, B=4, seed 3
    d = tmp_path / "reacher" / "all"
    d.mkdir(parents=True)
    results.write_table(str(d / "scores.csv"), rows)
    results.write_cells(str(d), [{"lag_depth": r["lag_depth"], "seed": r["seed"], "m": r["method"]} for r in rows])
    results.write_json(str(tmp_path / "random_scores.json"), {"reacher": 0.0})
    summary, _ = tables.summarise(str(tmp_path), reps=200)
    cell = [r for r in summary if r["method"] == "vaco" and r["lag_depth"] == 4 and r["score"] == "final_eval_return"
            and r["normalization"] == "raw" and r["aggregate"] == "mean"][0]
    assert cell["n_diverged"] == 1 and cell["n_runs"] == 3
    assert cell["point"] == pytest.approx(np.mean([46.0, 47.0, 48.0]))
    norm = [r for r in summary if r["method"] == "ppo_clip" and r["lag_depth"] == 1 and r["aggregate"] == "mean"
            and r["score"] == "final_eval_return" and r["normalization"] == "normalized"][0]
    assert norm["point"] == pytest.approx(1.0)  # PPO-Clip at B=1 is the reference


@pytest.mark.slow
def test_interrupted_group_resumes_to_the_same_result_and_finished_group_is_skipped(tmp_path):
    config = Config(**TINY_SWEEP)
    cells = grid.grid([1, 4], [0, 1])
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert runner.run_group(config, cells, a, progress=False, max_chunks=1) is None  # "interrupted"
    assert os.path.isdir(os.path.join(a, "checkpoint")) and not os.path.exists(os.path.join(a, "scores.csv"))
    assert len(results.read_table(os.path.join(a, "curves.csv"))) == len(cells)
    resumed = runner.run_group(config, cells, a, progress=False)
    straight = runner.run_group(config, cells, b, progress=False)
    for r1, r2 in zip(resumed, straight):
        for key in ("final_eval_return", "auc_eval_return", "train_return_last5pct", "mean_clip_fraction"):
            assert r1[key] == r2[key] or (np.isnan(r1[key]) and np.isnan(r2[key])), key
    assert not os.path.exists(os.path.join(a, "checkpoint"))
    mtime = os.path.getmtime(os.path.join(b, "scores.csv"))
    again = runner.run_group(config, cells, b, progress=False)  # finished: read back, not rerun
    assert os.path.getmtime(os.path.join(b, "scores.csv")) == mtime
    assert [r["final_eval_return"] for r in again] == [r["final_eval_return"] for r in straight]
    with pytest.raises(ValueError, match="different grid"):
        runner.run_group(config, grid.grid([1], [0]), a, progress=False)


def test_every_setting_is_a_flag_of_every_study_script():
    import importlib

    from vaco_jax.driver.cli import DRIVER_FLAGS, config_flags

    driver = {name for name, *_ in DRIVER_FLAGS}
    for script in ("lag_sweep", "forward_lag", "delta_sweep", "mismatch"):
        module = importlib.import_module(f"vaco_jax.studies.{script}")
        flags = {f.name for f in __import__("dataclasses").fields(module.Args)}
        config_fields = {f.name for f in __import__("dataclasses").fields(Config)}
        assert config_fields - set(module.PER_GROUP) <= flags, script
        # the driver's flags come from one declaration, not the script's own
        own = {f.name for f in __import__("dataclasses").fields(module.StudyArgs)}
        assert driver <= flags and not driver & own, script
        args = module.Args(gamma=0.95, activation="relu")
        given = config_flags(args, module.StudyArgs, exclude=module.PER_GROUP)
        assert given == {"gamma": 0.95, "activation": "relu"}
    base = [grid.Group(Config(**TINY_SWEEP), tuple(grid.grid([1], [0])), "t/ppo_clip")]
    (g,) = grid.apply_sweep(base, {}, {"gamma": 0.95, "num_epochs": 2})
    assert g.config.gamma == 0.95 and g.config.num_epochs == 2 and g.subdir == "t/ppo_clip"
    with pytest.raises(ConfigError, match="both|flag and as a --sweep"):
        grid.apply_sweep(base, {"gamma": [0.9]}, {"gamma": 0.95})


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    code = ("from vaco_jax.driver import cli\n"
            "def main(args):\n    raise KeyboardInterrupt\n"
            "cli.cli_main(main, None)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "VACO_JAX_DEBUG"})
    assert out.returncode == 130
    assert out.stderr.strip().splitlines() == ["interrupted: what finished is kept; run the same command again to resume"]


def test_a_study_without_evaluation_episodes_is_refused_before_anything_is_written(tmp_path):
    import types

    config = Config(env="point_mass", num_envs=8, unroll_length=16, total_env_steps=256, num_evals=2, eval_episodes=0)
    group = grid.Group(config, tuple(grid.grid([1], [0])), "point_mass/ppo_clip")
    args = types.SimpleNamespace(max_chunks=None, progress=False)
    with pytest.raises(ConfigError, match="eval_episodes=0 .*allowed values: an integer >= 1"):
        study.run_study(str(tmp_path / "run"), [group], args, {})
    assert not os.path.exists(tmp_path / "run")


def test_a_raised_buffer_capacity_is_printed_and_its_clash_explained(capsys):
    from conftest import study_module
    import tyro

    lag_sweep = study_module("lag_sweep")
    args = tyro.cli(lag_sweep.Args, args=["--preset", "tiny", "--lag-depths", "1", "4", "8"])
    spec = lag_sweep.resolve(args)
    assert spec["buffer_capacity"] == 8
    assert "buffer_capacity raised from the preset's 4 to 8" in capsys.readouterr().out
    given = tyro.cli(lag_sweep.Args, args=["--preset", "tiny", "--lag-depths", "1", "8", "--buffer-capacity", "32"])
    assert lag_sweep.resolve(given)["buffer_capacity"] == 32 and "raised" not in capsys.readouterr().out
    small = tyro.cli(lag_sweep.Args, args=["--preset", "tiny", "--lag-depths", "1", "8", "--buffer-capacity", "4"])
    with pytest.raises(ConfigError, match="buffer_capacity=4 must be an integer >= the largest lag depth, 8"):
        lag_sweep.resolve(small)
    with pytest.raises(ConfigError, match="a lag depth above 4 needs another --out"):
        provenance._compare_identity("RUN", {"g": {"buffer_capacity": 4}}, {"g": {"buffer_capacity": 8}})


@pytest.mark.parametrize("seed", [-1, 2 ** 32, 2 ** 32 + 5])
def test_a_seed_outside_32_bits_is_refused_before_anything_is_written(tmp_path, seed):
    """PRNG keys hold a seed modulo 2^32: seed 2^32 would repeat seed 0 and count as a second run."""
    from conftest import tiny_config
    from vaco_jax.driver.train import run

    with pytest.raises(ConfigError, match=rf"seed={seed} is not allowed; a seed must be an integer in \[0, 4294967295\]"):
        grid.check_cells(grid.grid([1], [0, seed]))
    with pytest.raises(ConfigError, match=f"seed={seed}"):
        run(tiny_config(), seed=seed, out=str(tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()
    grid.check_cells(grid.grid([1], [0, 2 ** 32 - 1]))  # the largest allowed


def test_a_step_budget_that_is_not_whole_chunks_is_said_in_the_plan():
    from conftest import tiny_config

    short = tiny_config(total_env_steps=8 * 16 * 5 + 7, num_evals=2)  # 5 phases possible, 4 run
    note = grid.steps_note(short)
    assert note.startswith("note: total_env_steps=647 runs 512 env steps: 2 chunks of 2 phases of 128")
    assert note in grid.plan_text([grid.Group(short, tuple(grid.grid([1], [0])), "g")])
    whole = tiny_config(total_env_steps=8 * 16 * 4, num_evals=2)
    assert grid.steps_note(whole) == "" and "note" not in grid.plan_text([grid.Group(whole, (grid.Cell(1, 0),), "g")])


def test_a_refused_command_writes_nothing_and_the_original_command_still_runs(tmp_path):
    """With run.json gone, a command with other settings was refused only after it had written run.json
    with them (and the random scores): the group's own command was then refused in turn."""
    import types

    from conftest import tiny_config

    run_dir = str(tmp_path / "run")
    config = tiny_config(total_env_steps=8 * 16 * 2, num_evals=2, eval_episodes=2)
    cells = grid.grid([1], [0])
    runner.run_group(config, cells, os.path.join(run_dir, "g"), progress=False)  # a finished group, no run.json
    args = types.SimpleNamespace(max_chunks=None, progress=False, shard=None, cell=None)
    before = sorted(os.listdir(run_dir))
    other = grid.Group(config.replace(learning_rate=1e-3), tuple(cells), "g")
    with pytest.raises(ConfigError, match=r"learning_rate: 0.0003 there, 0.001 now"):
        study.run_study(run_dir, [other], args, {})
    duplicate = grid.Group(config, tuple(cells) * 2, "g2")
    with pytest.raises(ConfigError, match="appears twice"):
        study.run_study(run_dir, [duplicate], args, {})
    assert sorted(os.listdir(run_dir)) == before and "run.json" not in before
    study.preflight(run_dir, [grid.Group(config, tuple(cells), "g")])  # the group's own settings pass


def test_an_out_that_is_a_file_and_an_empty_grid_are_one_line_errors(tmp_path):
    import types

    from conftest import tiny_config
    from vaco_jax.core.config import stack_traced

    path = tmp_path / "a_file"
    path.write_text("x")
    args = types.SimpleNamespace(max_chunks=None, progress=False, shard=None, cell=None)
    with pytest.raises(ConfigError, match="is a file; give a directory"):
        study.run_study(str(path), [grid.Group(tiny_config(eval_episodes=2), (grid.Cell(1, 0),), "g")], args, {})
    with pytest.raises(ConfigError, match="stack_traced: no cells given"):
        stack_traced([])
