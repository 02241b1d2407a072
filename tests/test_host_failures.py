"""What the host side does with wrong or unlucky input (issue 48): every case ends as the right behaviour
or one line naming the real cause, before anything is written. A run's own ``config.json`` reruns
exactly its cells; ``vaco-train`` judges its settings with the task's defaults applied; ``vaco-render``
and ``load_policy`` say what they were given and what they expect; a second run into a directory another
run holds stops at once; a refused study command writes nothing. Training runs on point_mass."""

import dataclasses
import os
import shutil
import subprocess
import sys

import pytest

from conftest import study_module, tiny_config
from vaco_jax.analysis import results
from vaco_jax.core.config import ConfigError
from vaco_jax.driver import grid, provenance, render_cli
from vaco_jax.driver.cli import parse_args
from vaco_jax.driver.config_file import check_rerun
from vaco_jax.driver.train import run, run_name, train_args_class, train_config

SMALL = dict(num_evals=2, eval_episodes=1, total_env_steps=8 * 16 * 4)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """A finished vaco-train run: seed 3, lag depth 2 (a one-cell group in OUT/<name>/)."""
    out = str(tmp_path_factory.mktemp("train"))
    return run(tiny_config(lag_depth=2, **SMALL), seed=3, out=out, progress=False)


def _record(directory, config, cells) -> str:
    """A group's record as the runner writes it: config.json and cells.json."""
    os.makedirs(directory, exist_ok=True)
    results.write_json(os.path.join(directory, "config.json"), dataclasses.asdict(config))
    results.write_cells(str(directory), [c.row() for c in cells])
    return os.path.join(directory, "config.json")


def _refused(cls, argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        parse_args(cls, argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    return err


# ----------------------------------------------------------------------------- item 1: --config on a run's record

def test_a_groups_config_json_reruns_its_own_cells_in_their_order(tmp_path):
    """Lag depths in the order given (4 before 1), a seed the preset lacks, and two knob axes: the
    record replans to the same cells, in order, and the same settings (a whole sweep's group)."""
    lag_sweep = study_module("lag_sweep")
    args = lag_sweep.Args(preset="tiny", lag_depths=(4, 1), seeds=(7,), progress=False,
                          sweep=("learning_rate=1e-3,3e-4", "gamma=0.9,0.99"))
    (group,) = lag_sweep.plan(args, lag_sweep.resolve(args))
    path = _record(tmp_path / "run" / "point_mass" / "ppo_clip", group.config, group.cells)
    again = parse_args(lag_sweep.Args, ["--config", path, "--out", str(tmp_path / "again")])
    groups = lag_sweep.plan(again, lag_sweep.resolve(again))
    assert [c.row() for c in groups[0].cells] == [c.row() for c in group.cells] and len(group.cells) == 8
    assert dataclasses.asdict(groups[0].config) == dataclasses.asdict(group.config)
    check_rerun(again, groups)  # the plan is the record


def test_a_groups_config_json_without_its_cells_json_is_refused(tmp_path, capsys):
    """It ran the preset's cells (9 instead of the group's 4) before."""
    lag_sweep = study_module("lag_sweep")
    path = _record(tmp_path / "g", tiny_config(), grid.grid([1, 4], [0, 1]))
    os.remove(tmp_path / "g" / "cells.json")
    err = _refused(lag_sweep.Args, ["--config", path], capsys)
    assert f"{path} is a group's record, but its cells.json is missing beside it" in err


@pytest.mark.parametrize("name", ["config.json", "cells.json"])
def test_an_edited_record_is_refused_naming_the_file(tmp_path, capsys, name):
    lag_sweep = study_module("lag_sweep")
    path = _record(tmp_path / "g", tiny_config(), grid.grid([1, 4], [0, 1]))
    edited = tmp_path / "g" / name
    text = edited.read_text()
    edited.write_text(text.replace('"gamma": 0.99', '"gamma": 0.98') if name == "config.json"
                      else text.replace('"seed": 1', '"seed": 2'))
    err = _refused(lag_sweep.Args, ["--config", path], capsys)
    assert f"{edited}: checksum mismatch" in err


def test_vaco_train_reruns_its_own_config_json_with_its_seed(tmp_path, single):
    """It refused the file (key grid_batch), and without that key ran seed 0 instead of 3."""
    path = os.path.join(single.group_dir, "config.json")
    args = parse_args(train_args_class(), ["--config", path])
    config = train_config(args)
    assert (args.seed, config.lag_depth, args.task_defaults) == (3, 2, False)
    assert run_name(config, args.seed) == os.path.basename(single.run_dir)  # every setting and the seed
    check_rerun(args, [grid.Group(config, (grid.Cell(2, 3),), "g")])
    # a sweep's one-cell group: the cell's knob value becomes the run's setting
    path = _record(tmp_path / "one", tiny_config(), [grid.Cell(4, 9, (("learning_rate", 1e-3),))])
    args = parse_args(train_args_class(), ["--config", path])
    config = train_config(args)
    assert (args.seed, config.lag_depth, config.learning_rate) == (9, 4, 1e-3)
    check_rerun(args, [grid.Group(config, (grid.Cell(4, 9),), "g")])


def test_vaco_train_refuses_a_record_it_cannot_run_as_one_cell(tmp_path, capsys, single):
    cls = train_args_class()
    path = _record(tmp_path / "four", tiny_config(), grid.grid([1, 4], [0, 1]))
    assert "its cells.json holds 4 cells and this command runs one" in _refused(cls, ["--config", path], capsys)
    path = _record(tmp_path / "batched", tiny_config(grid_batch=2), grid.grid([1], [0]))
    assert "it takes no --grid-batch" in _refused(cls, ["--config", path], capsys)
    err = _refused(cls, ["--config", os.path.join(single.run_dir, "run.json")], capsys)
    assert "is a run's record (run.json)" in err and os.path.join(single.group_dir, "config.json") in err


def test_a_plan_that_is_not_the_record_is_refused(tmp_path):
    lag_sweep = study_module("lag_sweep")
    path = _record(tmp_path / "g", tiny_config(buffer_capacity=4), grid.grid([1, 4], [0, 1]))
    args = parse_args(lag_sweep.Args, ["--config", path])
    other = grid.Group(tiny_config(buffer_capacity=4), tuple(grid.grid([1], [0, 1])), "g")
    with pytest.raises(ConfigError, match="records 4 cell.*plans other cells"):
        check_rerun(args, [other])
    with pytest.raises(ConfigError, match="gamma: 0.99 there, 0.9 planned"):
        check_rerun(args, [dataclasses.replace(other, config=other.config.replace(gamma=0.9),
                                               cells=tuple(grid.grid([1, 4], [0, 1])))])
    # a flag given beside the file changes what runs on purpose: no check
    check_rerun(parse_args(lag_sweep.Args, ["--config", path, "--seeds", "5"]), [other])


# ----------------------------------------------------------------------------- item 2: vaco-train's task defaults

def test_vaco_train_judges_its_settings_with_the_tasks_defaults():
    """Hopper-v4's defaults set unroll_length 128: one env and 64 minibatches are valid there (refused
    before, with Config's unroll length of 32), and a refusal names the unroll length the run uses."""
    cls = train_args_class()
    config = train_config(parse_args(cls, ["--env", "Hopper-v4", "--num-envs", "1", "--num-minibatches", "64"]))
    assert (config.num_envs, config.unroll_length, config.num_minibatches) == (1, 128, 64)
    with pytest.raises(ConfigError, match=r"num_envs\*unroll_length=65664 steps"):  # 513 x 128, not 513 x 32
        train_config(parse_args(cls, ["--env", "Hopper-v4", "--num-envs", "513", "--total-env-steps", "100000"]))
    with pytest.raises(ConfigError, match=r"must divide num_envs\*unroll_length=32"):  # Config's, as asked
        train_config(parse_args(cls, ["--env", "Hopper-v4", "--num-envs", "1", "--num-minibatches", "64",
                                      "--no-task-defaults"]))


# ----------------------------------------------------------------------------- items 3 and 4: render, load_policy

def _render(path, monkeypatch, **kw):
    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "egl"))
    return render_cli.main(render_cli.Args(run_dir=str(path), **kw))


def test_render_names_what_is_wrong_with_the_path_before_anything_else(tmp_path, monkeypatch, single):
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no ffmpeg: named only after the rest
    unfinished = tmp_path / "run" / "point_mass" / "ppo_clip"
    unfinished.mkdir(parents=True)
    results.write_cells(str(unfinished), [{"lag_depth": 1, "seed": 0}])
    (tmp_path / "file").write_text("x")
    for path, kw, words in [
        (tmp_path / "none", {}, "none: no such directory"),
        (tmp_path / "file", {}, "file: not a directory"),
        (tmp_path / "empty", {}, "holds no group (no cells.json under it)"),
        (tmp_path / "run", {}, "policies.npz is missing: the group has not finished"),
        (unfinished, {}, "policies.npz is missing: the group has not finished"),
        (single.run_dir, {"group": "point_mass/vaco"},
         "has no group 'point_mass/vaco' (its groups: point_mass/ppo_clip)"),
        (single.run_dir, {"cell": 1}, "cell=1: " + single.group_dir + " holds 1 cell(s); allowed values: 0..0"),
        (single.group_dir, {"cell": 3}, "holds 1 cell(s)"),
    ]:
        (tmp_path / "empty").mkdir(exist_ok=True)
        with pytest.raises(ConfigError, match=None) as e:
            _render(path, monkeypatch, **kw)
        assert words in str(e.value) and "ffmpeg" not in str(e.value), (path, str(e.value))
    with pytest.raises(ConfigError, match="no MuJoCo model to draw"):  # the task, before ffmpeg and the episode
        _render(single.run_dir, monkeypatch)
    lost = tmp_path / "lost"
    shutil.copytree(single.run_dir, lost)
    os.remove(lost / "point_mass" / "ppo_clip" / "policies.npz")
    with pytest.raises(results.ResultsError, match="policies.npz: missing in a finished group"):
        _render(lost, monkeypatch)


def test_render_says_the_steps_it_took(monkeypatch, single, capsys):
    """``--steps 5`` takes 5 steps and draws 6 frames (the first state and one after each step); it
    printed "6 steps"."""
    env, config, cores, total, taken = render_cli.rollout(single.group_dir, 0, 5, 0, True)
    assert (taken, len(cores)) == (5, 6)

    class Drawn:
        def __init__(self, *a):
            pass

    monkeypatch.setattr(render_cli, "Scene", Drawn)
    monkeypatch.setattr(render_cli, "frames_of", lambda scene, cores, w, h: cores)
    monkeypatch.setattr(render_cli, "write_mp4", lambda frames, path, fps: None)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    _render(single.run_dir, monkeypatch, steps=5, out=os.devnull)
    out = capsys.readouterr().out
    assert "cell 0 (B = " in out and ", seed " in out and "): 5 steps (6 frames)" in out  # what the cell is, too


def test_load_policy_takes_a_run_directory_of_one_group_and_lists_several(tmp_path, single):
    """Decided: a run directory holding exactly one finished group (vaco-train's OUT/<name>) loads that
    group; several are listed, to choose from."""
    import numpy as np

    from vaco_jax.driver.policies import load_policy

    act = load_policy(single.run_dir)  # said "config.json: missing"
    assert np.asarray(act(np.zeros(2, np.float32))).shape == (1,)
    both = tmp_path / "both"
    for method in ("ppo_clip", "vaco"):
        shutil.copytree(single.group_dir, both / "point_mass" / method)
    with pytest.raises(ConfigError, match=r"holds 2 finished groups \(point_mass/ppo_clip, point_mass/vaco\)") as e:
        load_policy(str(both))
    assert "load_policy(..., group='point_mass/ppo_clip')" in str(e.value)  # a parameter the function takes
    act = load_policy(str(both), 0, group="point_mass/vaco")
    assert np.asarray(act(np.zeros(2, np.float32))).shape == (1,)
    with pytest.raises(ConfigError, match="no such directory"):
        load_policy(str(tmp_path / "none"))


# ----------------------------------------------------------------------------- item 5: one run per directory

HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder():
    """Another process holding a directory, as a run of the same group does while it runs."""
    procs = []

    def hold(path):
        os.makedirs(path, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc.pid

    yield hold
    for proc in procs:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_second_run_into_a_directory_another_run_holds_stops_before_writing(tmp_path, holder):
    config = tiny_config(**SMALL)
    run_dir = tmp_path / run_name(config, 0)
    pid = holder(run_dir / "point_mass" / "ppo_clip")
    with pytest.raises(ConfigError, match=rf"another run holds this directory \(pid {pid}, running since "):
        run(config, seed=0, out=str(tmp_path), progress=False)
    assert not (run_dir / "run.json").exists() and os.listdir(run_dir / "point_mass" / "ppo_clip") == []


def test_a_second_study_into_groups_another_run_holds_stops_before_writing(tmp_path, holder):
    lag_sweep = study_module("lag_sweep")
    out = tmp_path / "run"
    pid = holder(out / "point_mass" / "ppo_clip")
    with pytest.raises(ConfigError, match=rf"ppo_clip: another run holds this directory \(pid {pid}"):
        lag_sweep.main(lag_sweep.Args(preset="tiny", out=str(out), progress=False, figures=False))
    assert sorted(os.listdir(out)) == ["point_mass"]  # no run.json, no random scores


def test_the_run_lock_is_released_and_leaves_nothing(tmp_path):
    d = str(tmp_path / "g")
    with provenance.run_lock([d]):
        with provenance.directory_lock(d):  # this process's own directory: no wait on itself
            pass
    with provenance.run_lock([d]):  # released
        pass
    assert os.listdir(d) == []


# ----------------------------------------------------------------------------- item 6: a refused command writes nothing

def test_a_refused_study_command_writes_nothing_even_without_run_json(tmp_path):
    """A group trained at learning rate 3e-4, its run.json and random scores gone: the same study at 1e-3,
    a sweep that makes a cell twice and a seed outside 32 bits are each refused, and nothing is written."""
    lag_sweep = study_module("lag_sweep")
    out = str(tmp_path / "run")
    base = dict(preset="tiny", out=out, progress=False, figures=False, lag_depths=(1,), seeds=(0,))
    lag_sweep.main(lag_sweep.Args(**base))
    for name in ("run.json", "random_scores.json", "summary.csv", "diagnostics.csv"):
        os.remove(os.path.join(out, name))
    def written():
        return {os.path.join(r, p): os.path.getmtime(os.path.join(r, p)) for r, _, files in os.walk(out) for p in files}

    before = written()
    for flags, match in [(dict(learning_rate=1e-3), "learning_rate: 0.0003 there, 0.001 now"),
                         (dict(lag_depths=(1, 4), sweep=("lag_depth=1",)), "appears twice"),
                         (dict(seeds=(2 ** 32,)), r"seed=4294967296 is not allowed")]:
        with pytest.raises(ConfigError, match=match):
            lag_sweep.main(lag_sweep.Args(**{**base, **flags}))
        assert written() == before, flags
