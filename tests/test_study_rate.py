"""benchmarks/study_rate.py's report and the cost estimates' per-shape rates (driver/dryrun.py)."""

import re

import pytest

from benchmarks import study_rate
from vaco_jax.driver import dryrun
from vaco_jax.driver.grid import Cell, Group

LAST_LINES = [re.compile(rf"^{name}/raw \d+\.\d\d$") for name in study_rate.SHAPES]


def _result(ratio):
    return {"envs_per_call": 16, "cells": 1, "num_envs": 16, "unroll_length": 128, "num_epochs": 10,
            "num_minibatches": 32, "raw": [1000.0], "training": [1000.0 * ratio], "ratio_rounds": [ratio],
            "ratio": ratio, "cpu_ratio": ratio, "first_call_s": 1.0, "evaluation": None}


def test_the_report_ends_with_the_smallest_ratio_over_the_tasks_for_each_shape():
    results = {"A": {"training": _result(0.7), "single-run training": _result(0.2), "one-env training": _result(0.9)},
               "B": {"training": _result(0.4), "single-run training": _result(0.6), "one-env training": _result(0.3)}}
    lines = study_rate.report_lines(results, study_rate.Args(rounds=1), "now", (1.0, 1.0))
    assert lines[-3:] == ["training/raw 0.40", "single-run training/raw 0.20", "one-env training/raw 0.30"]


@pytest.mark.slow
def test_a_tiny_run_times_every_shape_and_ends_with_the_three_lines(monkeypatch, capsys, tiny):
    """The whole command at a tiny size on the pure-JAX task: three shapes, each against raw stepping at its
    own env count, and the three closing lines."""
    small = tiny(eval_episodes=0)  # 8 envs x 16 steps: a batch of 128 env steps

    def shapes(task, cells):
        return [study_rate.Shape("training", small, [Cell(1, 0), Cell(2, 0)][:cells]),
                study_rate.Shape("single-run training", small, [Cell(1, 0)]),
                study_rate.Shape("one-env training", small.replace(num_envs=1, unroll_length=128), [Cell(1, 0)])]

    monkeypatch.setattr(study_rate, "shapes", shapes)
    record = study_rate.main(study_rate.Args(tasks=("point_mass",), steps=128, rounds=1, cells=2, evaluation=False))
    lines = capsys.readouterr().out.strip().splitlines()
    assert all(p.match(line) for p, line in zip(LAST_LINES, lines[-3:])), lines[-3:]
    got = record["results"]["point_mass"]
    assert [got[s]["envs_per_call"] for s in study_rate.SHAPES] == [16, 8, 1]
    assert all(got[s]["training"][0] > 0 and got[s]["raw"][0] > 0 for s in study_rate.SHAPES)


def _group(cells=1, **changes):
    from vaco_jax.core.config import Config

    config = Config(env="Hopper-v4", num_envs=16, unroll_length=128, total_env_steps=20_480, num_evals=2,
                    eval_episodes=4, episode_length=1000).replace(**changes)
    return Group(config, tuple(Cell(1, s) for s in range(cells)), "g")


RATES = {"grid": {"Hopper-v4": (10_000, 40_000)}, "single": {"Hopper-v4": (2_000, 8_000)},
         "one_env": {"Hopper-v4": (500, None)}}


def test_each_shape_reads_its_own_measured_rate():
    single, grid30, one = _group(), _group(30), _group(num_envs=1, unroll_length=2048)
    assert [dryrun.shape_of(g) for g in (single, grid30, one)] == ["single", "grid", "one_env"]
    assert dryrun.group_rate(single, RATES) == (2_000, 8_000)
    assert dryrun.group_rate(grid30, RATES) == (10_000, 40_000)
    assert dryrun.group_rate(one, RATES) == (500, None)
    mid = dryrun.group_rate(_group(5), RATES)[0]  # between the single run's and the grid's
    assert 2_000 < mid < 10_000


def test_the_single_run_estimate_uses_the_single_run_rate():
    """20,480 training env steps at the single run's 2,000/s are ~0.17 min, and its 2 x 4 x 1,000
    evaluation steps at 8,000/s ~0.02 min; the grid's rate would give a fifth of that."""
    (line,) = dryrun.time_lines([_group()], RATES)
    assert "a single run" in line and "at 2,000/s ~0.2 min" in line and "at 8,000/s ~0.0 min" in line
    assert line.startswith("time estimate: ~0.2 min")
    (line,) = dryrun.time_lines([_group(30)], RATES)
    assert "at 10,000/s" in line
    (line,) = dryrun.time_lines([_group(num_envs=1, unroll_length=2048)], RATES)
    assert "at 500/s" in line and "evaluation in that rate or not measured apart" in line


def test_vaco_train_dry_run_of_a_single_run_reads_the_single_run_rate_on_file(tmp_path, capsys):
    """`vaco-train --env Hopper-v4 --dry-run` (the task's defaults, one cell): the estimate reads the rate
    measured for a single run, not the grid's."""
    from vaco_jax.driver.train import dry_run, train_defaults, with_task_defaults

    config = with_task_defaults(train_defaults().replace(env="Hopper-v4"), True)
    assert dry_run(config, 0, str(tmp_path / "runs")) == 0
    text = capsys.readouterr().out
    single, grid = dryrun.MEASURED_RATES["single"]["Hopper-v4"][0], dryrun.MEASURED_RATES["grid"]["Hopper-v4"][0]
    assert single != grid
    assert f"Hopper-v4 (a single run, 1 cell) {dryrun.env_steps(Group(config, (Cell(1, 0),), '')):,} env steps " \
           f"at {single:,.0f}/s" in text
    assert not (tmp_path / "runs").exists()


def test_groups_of_one_task_and_shape_are_summed_into_one_part():
    (line,) = dryrun.time_lines([_group(), _group()], RATES)
    assert line.count("Hopper-v4 (a single run, 1 cell) 40,960 env steps at 2,000/s") == 1


def test_a_groups_minutes_are_its_env_steps_and_evaluations_over_its_shapes_rates():
    """``group_minutes`` (a study unit's estimate, ``lagshape.minutes``): 20,480 training env steps at the
    single run's 2,000/s and 2 x 4 x 1,000 evaluation env steps at 8,000/s; one env per cell, whose
    evaluation is in its training rate, counts its training alone; a task without a rate gives None.
    ``time_lines`` prints the same arithmetic's parts."""
    assert dryrun.group_minutes(_group(), RATES) == pytest.approx((20_480 / 2_000 + 8_000 / 8_000) / 60)
    one = _group(num_envs=1, unroll_length=2048)
    assert dryrun.group_minutes(one, RATES) == pytest.approx(dryrun.env_steps(one) / 500 / 60)
    assert dryrun.group_minutes(_group(env="Walker2d-v4"), RATES) is None
    (line,) = dryrun.time_lines([_group()], RATES)
    assert line.startswith(f"time estimate: ~{dryrun.group_minutes(_group(), RATES):.1f} min")
