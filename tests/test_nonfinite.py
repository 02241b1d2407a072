"""Every diagnostic in a run's tables is finite or missing with a reason, and MuJoCo's own alarm
(unstable steps) reaches curves, scores and the summary instead of being dropped."""

import math
import os

import numpy as np
import pytest

from conftest import tiny_config
from vaco_jax.analysis import results, tables
from vaco_jax.driver import grid, program, runner


def test_a_non_finite_diagnostic_is_emptied_and_named_with_its_value():
    row = {"chunk": 0, "eval_return": float("nan"), "tv_learner": float("inf"), "ratio_max": float("nan"),
           "entropy": 1.5, "ewma_resets": float("-inf")}
    runner.mark_nonfinite(row, ["tv_learner", "ratio_max", "entropy", "ewma_resets"])
    assert math.isnan(row["tv_learner"]) and math.isnan(row["ratio_max"]) and math.isnan(row["ewma_resets"])
    assert row["entropy"] == 1.5
    assert row["nonfinite"] == "tv_learner=inf;ratio_max=nan;ewma_resets=-inf"
    assert math.isnan(row["eval_return"])  # not a diagnostic: an unevaluated chunk stays as it was
    clean = {"tv_learner": 0.1}
    runner.mark_nonfinite(clean, ["tv_learner"])
    assert clean == {"tv_learner": 0.1, "nonfinite": ""}


def test_score_means_are_empty_with_a_reason_when_any_chunk_was_not_finite():
    rows = [{"cell": 0, "chunk": c, "eval_return": 1.0, "tv_learner": v, "entropy": 2.0 + c, "unstable_steps": u,
             "nonfinite": ""} for c, (v, u) in enumerate([(0.1, 0.0), (float("nan"), 3.0), (0.3, 2.0)])]
    out = runner.diagnostic_scores(rows)
    assert math.isnan(out["mean_tv_learner"])  # never a mean over the finite chunks alone
    assert out["mean_entropy"] == pytest.approx(3.0)
    assert out["unstable_steps"] == 5 and "mean_unstable_steps" not in out  # a count: summed
    assert out["nonfinite"] == "tv_learner: not finite in 1 of 3 chunks"
    every = [{**r, "tv_learner": float("inf")} for r in rows]
    assert runner.diagnostic_scores(every)["nonfinite"] == "tv_learner: not finite in 3 of 3 chunks"
    assert runner.diagnostic_scores(rows[:1])["nonfinite"] == ""


def test_a_run_whose_diagnostics_overflow_writes_no_inf_and_says_why(tmp_path, monkeypatch):
    real = program.chunk_summary

    def overflowing(metrics):  # what a run at a too-high learning rate produced: tv_learner = inf, not diverged
        out = real(metrics)
        tv = np.array(out["tv_learner"], np.float64)
        tv[0] = np.inf
        if "unstable_steps" not in out:
            out["unstable_steps"] = np.zeros_like(tv)
        unstable = np.array(out["unstable_steps"], np.float64)
        unstable[1] = 2.0
        return {**out, "tv_learner": tv, "unstable_steps": unstable}

    monkeypatch.setattr(program, "chunk_summary", overflowing)
    d = str(tmp_path / "g")
    rows = runner.run_group(tiny_config(num_evals=2), grid.grid([1, 2], [0]), d, progress=False)
    text = open(os.path.join(d, "curves.csv")).read() + open(os.path.join(d, "scores.csv")).read()
    assert "inf" not in text.lower().replace("nonfinite", "").replace("tv_learner=inf", "")
    curves = results.read_table(os.path.join(d, "curves.csv"))
    assert [r["nonfinite"] for r in curves if r["cell"] == 0] == ["tv_learner=inf"] * 2
    assert all(math.isnan(r["tv_learner"]) for r in curves if r["cell"] == 0)
    assert all(np.isfinite(r["tv_learner"]) for r in curves if r["cell"] == 1)
    by_lag = {r["lag_depth"]: r for r in results.read_table(os.path.join(d, "scores.csv"))}
    assert math.isnan(by_lag[1]["mean_tv_learner"]) and by_lag[1]["nonfinite"] == \
        "tv_learner: not finite in 2 of 2 chunks"
    assert np.isfinite(by_lag[2]["mean_tv_learner"]) and by_lag[2]["unstable_steps"] == 4
    assert not by_lag[1]["diverged"] and by_lag[1]["unstable_steps"] == 0
    assert [r["lag_depth"] for r in rows] == [1, 2]
    # the summary counts the run with unstable steps, keeps it in the aggregates, and the table says so
    summary = tables.summary_rows(results.load_scores(d), None, reps=50)
    final = {r["lag_depth"]: r for r in summary if r["score"] == "final_eval_return"}  # (no evaluation: all_missing)
    assert final[2]["n_unstable"] == 1 and final[1]["n_unstable"] == 0
    by = {r["lag_depth"]: r for r in tables.summarise_by(d, ("lag_depth",), score="train_return_last5pct", reps=50)}
    assert by[2]["n_unstable"] == 1 and by[2]["n_diverged"] == 0 and by[1]["n_unstable"] == 0


def test_the_printed_table_names_cells_with_unstable_runs(capsys):
    from vaco_jax.studies.lag_sweep import print_table

    base = {"score": "auc_eval_return", "normalization": "raw", "aggregate": "iqm", "point": 1.0, "low": 0.5,
            "high": 1.5, "n_runs": 3, "n_diverged": 0, "method": "vaco"}
    print_table([{**base, "lag_depth": 1, "n_unstable": 0}, {**base, "lag_depth": 8, "n_unstable": 2},
                 {**base, "lag_depth": 32}])  # a summary written before the column existed: no count
    out = capsys.readouterr().out
    assert "flagged unstable" in out and "vaco B=8 (2)" in out and "B=1 " not in out.split("unstable")[-1]


def test_old_score_rows_without_the_columns_read_as_stable():
    assert not tables.is_unstable({"diverged": False})
    assert not tables.is_unstable({"unstable_steps": float("nan")})
    assert tables.is_unstable({"unstable_steps": 1})
    assert not results.identifies_cell("unstable_steps") and not results.identifies_cell("nonfinite")
