"""``--config FILE`` on every script: a JSON or YAML subset of its flags, flags on the command line win,
an unknown key is an error naming it, and a group's own config.json re-runs that group."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from conftest import study_module
from vaco_jax.analysis import results
from vaco_jax.driver.cli import parse_args

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_yaml_or_json_subset_sets_flags_and_the_command_line_wins(tmp_path):
    lag_sweep = study_module("lag_sweep")
    (tmp_path / "c.yaml").write_text("preset: tiny\nseeds: [3, 4]\nlearning_rate: 0.001\nnormalize_rewards: false\n")
    args = parse_args(lag_sweep.Args, ["--config", str(tmp_path / "c.yaml")])
    assert (args.preset, args.seeds, args.learning_rate, args.normalize_rewards) == ("tiny", (3, 4), 0.001, False)
    args = parse_args(lag_sweep.Args, ["--seeds", "9", f"--config={tmp_path / 'c.yaml'}", "--learning-rate", "0.01"])
    assert args.seeds == (9,) and args.learning_rate == 0.01  # given on the command line: they win
    (tmp_path / "c.json").write_text(json.dumps({"preset": "tiny", "lag_depths": [1, 2]}))
    assert parse_args(lag_sweep.Args, ["--config", str(tmp_path / "c.json")]).lag_depths == (1, 2)
    study = study_module("study")
    (tmp_path / "s.yaml").write_text("tasks: [inverted_pendulum]\n")
    args = parse_args(study.Args, ["tune", "--config", str(tmp_path / "s.yaml")])
    assert args.stage == "tune" and args.tasks == ("inverted_pendulum",)


def test_an_unknown_key_or_a_bad_file_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "c.yaml").write_text("preset: tiny\nlearning_rat: 0.001\n")
    (tmp_path / "bad.json").write_text("{")
    for path, words in ((tmp_path / "c.yaml", "learning_rat"), (tmp_path / "bad.json", "does not parse"),
                        (tmp_path / "none.yaml", "is not a file")):
        out = subprocess.run([sys.executable, "experiments/lag_sweep.py", "--config", str(path)], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 2, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and words in out.stderr


def test_a_groups_own_config_json_re_runs_that_group(tmp_path):
    """The tiny preset's group, its config.json and cells.json written as a finished group has them; the
    lag sweep given that config.json plans the same group: task, method, cells and every setting."""
    import tyro

    lag_sweep = study_module("lag_sweep")
    args = tyro.cli(lag_sweep.Args, args=["--preset", "tiny", "--seeds", "5", "6", "--learning-rate", "0.002",
                                          "--gamma", "0.97"])
    (group,) = lag_sweep.plan(args, lag_sweep.resolve(args))
    d = tmp_path / "run" / "point_mass" / "ppo_clip"
    os.makedirs(d)
    results.write_json(str(d / "config.json"), dataclasses.asdict(group.config))
    results.write_cells(str(d), [c.row() for c in group.cells])
    again = parse_args(lag_sweep.Args, ["--config", str(d / "config.json"), "--out", str(tmp_path / "again")])
    (regroup,) = lag_sweep.plan(again, lag_sweep.resolve(again))
    assert regroup.cells == group.cells and regroup.subdir == group.subdir
    assert dataclasses.asdict(regroup.config) == dataclasses.asdict(group.config)


def test_a_flag_the_script_would_not_read_is_refused():
    """--lag-depth beside --lag-depths set nothing (the cells set each run's lag depth): it is no flag now."""
    out = subprocess.run([sys.executable, "experiments/lag_sweep.py", "--preset", "tiny", "--lag-depth", "4"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "--lag-depth" in out.stderr


def test_train_has_no_sweep_only_flag_and_still_builds_its_config():
    from vaco_jax.driver.cli import config_from_args
    from vaco_jax.driver.train import train_args_class

    cls = train_args_class()
    assert "grid_batch" not in {f.name for f in dataclasses.fields(cls)}
    args = parse_args(cls, ["--env", "point_mass", "--lag-depth", "2"])
    config = config_from_args(args)
    assert config.grid_batch is None and config.lag_depth == 2
