"""Tasks as a source of variance (vaco_jax/studies/lagshape_tasks.py): the leave-one-task-out recomputation
calls the committed stage-2 rules, and the hierarchical bootstrap resamples tasks."""

import math
import os

import numpy as np
import pytest

from vaco_jax.analysis import confirm, results, rules
from vaco_jax.studies import lagshape_tasks as lagshape

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPLAG = os.path.join(ROOT, "results", "steplag")


@pytest.fixture(scope="module")
def protocol():
    return lagshape.load(STEPLAG)


@pytest.fixture(scope="module")
def every(protocol):
    return lagshape.verdict_rows(protocol, STEPLAG)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return str(a) == str(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b)


def test_with_every_task_in_the_recomputation_is_the_committed_table_row_for_row(every):
    """The table as ``steplag report`` writes it, text for text."""
    got = every
    pooled = [r for r in got if r["family"] != "shape"]
    with open(os.path.join(STEPLAG, lagshape.STAGE2_VERDICTS)) as f:
        assert results.rows_to_csv(pooled) == f.read()
    assert len(pooled) == 72
    shape = results.read_table(os.path.join(STEPLAG, lagshape.STAGE2_SHAPE))
    assert [r["verdict"] for r in got if r["family"] == "shape"] == [r["verdict"] for r in shape] + [shape[0]["overall"]]


def test_leaving_a_task_out_changes_the_inputs_and_only_the_pooled_rows(protocol, every):
    every = {lagshape._key(r): r for r in every}
    without = lagshape.verdict_rows(protocol, STEPLAG, leave_out=("Hopper-v4",))
    assert not any("Hopper-v4" in str(r.get("tasks", "")) for r in without)
    pooled = [r for r in without if r["family"] == "primary"]
    assert sum(r["point"] != every[lagshape._key(r)]["point"] for r in pooled) >= len(pooled) // 2
    for r in without:  # a per-task row is one task alone: leaving another out cannot change it
        if r["family"] == "per task":
            assert r["point"] == every[lagshape._key(r)]["point"] and r["verdict"] == every[lagshape._key(r)]["verdict"]


def test_the_hierarchical_bootstrap_draws_tasks_then_runs():
    x = np.tile(np.arange(4.0), (5, 1))  # every run of task j scores j: only the tasks vary
    fixed = rules.replicates([x], rules.pooled_mean, 500, 0)
    drawn = confirm.hierarchical_replicates([x], rules.pooled_mean, 500, 0)
    assert np.all(fixed == 1.5) and drawn.std() > 0.3
    np.testing.assert_allclose(drawn.mean(), 1.5, atol=0.1)
    # within a task the runs are drawn too: with runs that differ, replicates vary with one task alone
    runs = np.arange(6.0)[:, None]
    assert confirm.hierarchical_replicates([runs], rules.pooled_mean, 200, 0).std() > 0.5


def test_hierarchical_columns_are_shared_between_samples():
    x = np.tile(np.arange(4.0), (3, 1))
    y = x + 10.0  # task j of y scores j + 10: the per-replicate difference is 10 exactly only if columns match
    d = confirm.hierarchical_replicates([x, y], lambda a, b: rules.pooled_mean(b) - rules.pooled_mean(a), 300, 0)
    np.testing.assert_allclose(d, 10.0)


def test_task_resampling_is_checked():
    x = np.ones((3, 2))
    with pytest.raises(ValueError, match="tasks='bootstrap' is not valid; allowed values: fixed, resampled"):
        confirm.head_to_head_test(x, x, confirm.Rules(), tasks="bootstrap")


def test_hierarchical_table_keeps_the_committed_points_beside_its_own_verdicts(protocol):
    rows = lagshape.hierarchical(protocol, STEPLAG)
    committed = [r for r in results.read_table(os.path.join(STEPLAG, lagshape.STAGE2_VERDICTS))
                 if r["family"] == "primary"]
    assert len(rows) == len(committed) == 20
    for r, c in zip(rows, committed):
        assert _same(r["point"], c["point"]) and r["committed_verdict"] == c["verdict"]
        assert r["verdict"] in (*confirm.VERDICTS, "no data")
    # resampling the tasks widens the intervals of pooled tests over several tasks
    several = [r for r in rows if len(r["tasks"].split()) > 1]
    wider = [r["resampled_high"] - r["resampled_low"] >= r["committed_high"] - r["committed_low"] for r in several]
    assert np.mean(wider) > 0.7


@pytest.mark.slow
def test_the_committed_tables_are_what_the_command_writes(tmp_path):
    lagshape.main(lagshape.Args(command="loto", steplag=STEPLAG, out=str(tmp_path)))
    for name in (lagshape.LOTO, lagshape.HIERARCHICAL):
        with open(os.path.join(tmp_path, name)) as a, open(os.path.join(ROOT, "results", "lagshape", name)) as b:
            assert a.read() == b.read(), name
