"""Missing vs diverged scores, the normalisation references and the claims file, on synthetic score
tables in the on-disk format (no training, no compilation)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import study_module
import numpy as np
import pytest

from vaco_jax.analysis import tables

from vaco_jax.analysis import claims

from vaco_jax.analysis import figures
from vaco_jax.analysis import plotting

from vaco_jax.analysis import results
from vaco_jax.analysis.results import read_csv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALE = {"a": 100.0, "b": 1000.0}
RANDOM = {"a": 0.0, "b": 0.0}
SEEDS = tuple(range(10))


def write_group(run_dir, task, method, levels, tags=None, diag=None, seconds=None, rng=None, noise=0.01,
                nan_seeds=(), diverged_seeds=(), sub="", final=None):
    """One group: ``levels[B]`` = the mean normalised score at lag depth B (score = level x task scale x
    (1 + noise)); ``diag[B]`` = {column: value}; ``seconds`` writes curves.csv with that cost per chunk;
    ``final[B]``: the final return at B exactly (level x task scale: a ceiling every run reaches), the
    level then setting the area under the curve only."""
    rng = rng or np.random.default_rng(0)
    group = os.path.join(run_dir, task, method, sub)
    os.makedirs(group, exist_ok=True)
    cells = [{"lag_depth": b, "seed": s} for b in sorted(levels) for s in SEEDS]
    rows, curves = [], []
    for c in cells:
        b, s = c["lag_depth"], c["seed"]
        score = levels[b] * SCALE[task] * (1 + noise * rng.standard_normal())
        div = (b, s) in diverged_seeds
        row = {"env": task, "method": method, **(tags or {}), **c,
               "final_eval_return": float("nan") if div else (score if final is None else final[b] * SCALE[task]),
               "auc_eval_return": score,
               "train_return_last5pct": float("nan") if (b, s) in nan_seeds else 0.8 * score, "diverged": div}
        for k, v in (diag or {}).get(b, {}).items():
            row[k] = v * (1 + 0.05 * rng.standard_normal())
        rows.append(row)
        if seconds is not None:
            for chunk in range(3):
                curves.append({"env": task, "method": method, **(tags or {}), **c, "chunk": chunk,
                               "env_steps": 1000.0 * (chunk + 1), "eval_return": score, "diverged": False,
                               "seconds": (5.0 if chunk == 0 else seconds) * (1 + 0.02 * rng.standard_normal())})
    if seconds is not None:  # one program per group: every cell of a chunk shares the chunk's seconds
        by_chunk = {}
        for r in curves:
            r["seconds"] = by_chunk.setdefault(r["chunk"], r["seconds"])
        results.write_table(os.path.join(group, "curves.csv"), curves)
    results.write_cells(group, cells)
    results.write_table(os.path.join(group, "scores.csv"), rows)


def make_claims_run(run_dir):
    rng = np.random.default_rng(1)
    results.write_json(os.path.join(run_dir, "random_scores.json"), RANDOM)
    for t in SCALE:
        w = lambda m, lv, **kw: write_group(run_dir, t, m, lv, rng=rng, **kw)  # noqa: E731
        w("ppo_clip", {1: 1.0, 16: 0.5}, diag={1: {"mean_clip_fraction": 0.05}, 16: {"mean_clip_fraction": 0.2}})
        w("vaco", {1: 1.2, 16: 1.15},
          diag={1: {"mean_filtered_fraction": 0.02}, 16: {"mean_filtered_fraction": 0.17}})
        w("ppo_kl", {1: 1.0, 16: 1.1})
        w("a3po", {16: 0.8}, seconds=1.0, noise=0.05)
        w("decoupled_recompute", {16: 0.8}, seconds=1.5, noise=0.05)
        w("ppo_ewma_revised", {1: 1.0, 16: 0.9})
        w("ppo_ewma_revised", {1: 1.0, 16: 0.3}, tags={claims.EWMA_RESET_COLUMN: 0.0}, sub="no_reset")
        w("ppo_ewma", {1: 1.0, 16: 0.6})
        w("vaco_filter_only", {16: 1.3})
    return run_dir


# ----------------------------------------------------------------------------- missing vs diverged

def test_missing_score_is_not_diverged(tmp_path):
    run = str(tmp_path)
    results.write_json(os.path.join(run, "random_scores.json"), RANDOM)
    write_group(run, "a", "ppo_clip", {1: 1.0, 4: 0.8}, nan_seeds={(4, 0), (4, 1)}, diverged_seeds={(4, 2)})
    write_group(run, "a", "vaco", {1: 1.0}, nan_seeds={(1, s) for s in SEEDS})
    summary, _ = tables.summarise(run, reps=100)
    pick = lambda score, m, b, norm="raw": [r for r in summary if (r["score"], r["method"], r["lag_depth"],  # noqa
                                                                     r["normalization"]) == (score, m, b, norm)]
    last5 = pick("train_return_last5pct", "ppo_clip", 4)
    assert all((r["n_missing"], r["n_diverged"], r["n_runs"]) == (2, 1, 7) for r in last5)
    final = pick("final_eval_return", "ppo_clip", 4)
    assert all((r["n_missing"], r["n_diverged"], r["n_runs"]) == (0, 1, 9) for r in final)
    assert [r["aggregate"] for r in pick("train_return_last5pct", "vaco", 1)] == ["all_missing"]
    on_disk = read_csv(os.path.join(run, "summary.csv"))
    assert "n_missing" in on_disk[0]
    by = tables.summarise_by(run, ("method", "lag_depth"), score="train_return_last5pct", reps=50)
    row = [r for r in by if r["method"] == "ppo_clip" and r["lag_depth"] == 4][0]
    assert (row["n_missing"], row["n_diverged"], row["n_runs"]) == (2, 1, 7)
    values, div = tables.cell_matrices(tables.load_scores(run), "ppo_clip", 4, ["a"], "train_return_last5pct")
    kept, n_div, n_miss = tables.split_runs(values, div)
    assert (kept.shape, n_div, n_miss) == ((7, 1), 1, 2)


def test_plots_say_no_score_not_diverged(tmp_path):
    run = str(tmp_path)
    write_group(run, "a", "vaco", {1: 1.0, 2: 1.0}, nan_seeds={(b, s) for b in (1, 2) for s in SEEDS})
    tables.summarise(run, reps=50)
    with pytest.raises(figures.NoData, match="no score") as err:
        figures.plot_aggregate_vs_lag(run, score="train_return_last5pct")
    assert "diverged" not in str(err.value)


# ----------------------------------------------------------------------------- references

def test_reference_uses_the_aggregates_runs(tmp_path):
    run = str(tmp_path)
    results.write_json(os.path.join(run, "random_scores.json"), {"a": 10.0, "b": -5.0})
    rng = np.random.default_rng(3)
    for t in ("a", "b"):
        write_group(run, t, "ppo_clip", {1: 1.0, 4: 0.7}, rng=rng, noise=0.2, diverged_seeds={(1, 3)} if t == "a"
                    else set())
        write_group(run, t, "vaco", {1: 1.4, 4: 1.3}, rng=rng, noise=0.2)
    summary, _ = tables.summarise(run, reps=100)
    ref = [r for r in summary if r["score"] == "final_eval_return" and r["method"] == "ppo_clip"
           and r["lag_depth"] == 1 and r["normalization"] == "normalized"]
    mean = [r for r in ref if r["aggregate"] == "mean"][0]
    assert mean["n_diverged"] == 1 and mean["n_runs"] == 9
    assert mean["point"] == pytest.approx(1.0, abs=1e-12)
    # per task: the normalised kept runs average exactly 1
    rows = tables.load_scores(run)
    kept, _, _ = tables.clean_cell(rows, "ppo_clip", 1, ["a", "b"], "final_eval_return")
    rnd, ref_mean = tables.reference_scores(rows, ["a", "b"], "final_eval_return", {"a": 10.0, "b": -5.0})
    np.testing.assert_allclose(ref_mean, kept.mean(axis=0))
    np.testing.assert_allclose(tables.stats.normalize_scores(kept, rnd, ref_mean).mean(axis=0), 1.0, atol=1e-12)
    # own_b1: every method's own B=1 cell is 1 on average
    for m in ("ppo_clip", "vaco"):
        own = [r for r in summary if (r["score"], r["method"], r["lag_depth"], r["normalization"], r["aggregate"])
               == ("final_eval_return", m, 1, "own_b1", "mean")]
        assert own and own[0]["point"] == pytest.approx(1.0, abs=1e-12)
    own4 = [r for r in summary if (r["score"], r["method"], r["lag_depth"], r["normalization"], r["aggregate"])
            == ("final_eval_return", "vaco", 4, "own_b1", "mean")][0]
    norm4 = [r for r in summary if (r["score"], r["method"], r["lag_depth"], r["normalization"], r["aggregate"])
             == ("final_eval_return", "vaco", 4, "normalized", "mean")][0]
    assert own4["point"] < norm4["point"]  # VACO's own B=1 level is above PPO-Clip's


def test_contrast_ci():
    from vaco_jax.analysis import stats
    x = np.array([[2.0], [2.0], [2.0]])
    y = np.array([[1.0], [1.0]])
    assert stats.contrast_ci(x, y, "iqm", "difference", reps=50) == (1.0, 1.0, 1.0)
    assert stats.contrast_ci(x, y, "mean", "ratio", reps=50) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="op"):
        stats.contrast_ci(x, y, op="sum")


# ----------------------------------------------------------------------------- claims

@pytest.fixture(scope="module")
def claims_table(tmp_path_factory):
    run = make_claims_run(str(tmp_path_factory.mktemp("claims")))
    out = os.path.join(run, "results", "claims.csv")
    return run, out, claims.evaluate(run, reps=300, out=out)


def test_claims_verdicts(claims_table):
    _, out, table = claims_table
    v = {r["claim"]: r["verdict"] for r in table}
    assert v["1a"] == "holds" and v["1b"] == "holds" and v["1c"] == "fails" and v["1d"] == "no data"
    assert v["1"] == "fails"
    assert v["2a"] == v["2b"] == v["2"] == "holds"
    assert v["3a"] == "inconclusive" and v["3b"] == "holds" and v["3"] == "inconclusive"
    assert v["4a"] == v["4b"] == v["4"] == "holds"
    assert v["5a"] == "no data" and v["5b"] == "fails" and v["5"] == "fails"
    assert v["6"] == "holds"
    assert set(v.values()) == set(claims.VERDICTS)
    disk = read_csv(out)
    assert [r["claim"] for r in disk] == [r["claim"] for r in table]
    assert list(disk[0]) == list(claims.COLUMNS)
    r1a = [r for r in table if r["claim"] == "1a"][0]
    assert r1a["ci_low"] <= r1a["point"] <= r1a["ci_high"] and "vaco B=16: 10 runs" in r1a["rests_on"]


def test_claims_no_data_without_methods(tmp_path):
    run = str(tmp_path)
    write_group(run, "a", "impala", {1: 1.0, 4: 0.5})
    table = claims.evaluate(run, reps=50)
    assert {r["verdict"] for r in table} == {"no data"}
    assert {r["verdict"] for r in claims.evaluate(str(tmp_path / "empty"), reps=50)} == {"no data"}


def test_claims_script(claims_table, tmp_path):
    run, _, _ = claims_table
    out = str(tmp_path / "c.csv")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "experiments", "claims.py"), run, "--out", out,
                           "--bootstrap-reps", "100"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert os.path.exists(out) and "holds" in proc.stdout


def _iqm_slow(values):
    """Interquartile mean by hand: sort, drop floor(n/4) from each end, average the rest."""
    v = sorted(values)
    k = len(v) // 4
    kept = v[k:len(v) - k]
    return sum(kept) / len(kept)


@pytest.mark.parametrize("op", ["difference", "ratio"])
def test_contrast_ci_matches_a_slow_reference_loop(op):
    """Per replicate: resample each task's runs of x, then of y, with replacement (the index draws in
    the order contrast_ci makes them), IQM over runs x tasks, difference or ratio; then the 2.5/97.5
    percentiles."""
    rng0 = np.random.default_rng(5)
    x, y = rng0.normal(2.0, 1.0, (7, 3)), rng0.normal(1.0, 1.0, (5, 3))
    from vaco_jax.analysis import stats
    reps = 300
    point, lo, hi = stats.contrast_ci(x, y, "iqm", op, reps=reps, seed=11)
    rng = np.random.default_rng(11)
    ix = rng.integers(0, 7, size=(reps, 7, 3))  # one chunk: these inputs are far below the chunk size
    iy = rng.integers(0, 5, size=(reps, 5, 3))
    vals = []
    for b in range(reps):
        xs = [x[ix[b, i, t], t] for i in range(7) for t in range(3)]
        ys = [y[iy[b, i, t], t] for i in range(5) for t in range(3)]
        a, c = _iqm_slow(xs), _iqm_slow(ys)
        vals.append(a - c if op == "difference" else a / c)
    ref_point = _iqm_slow(x.ravel()) - _iqm_slow(y.ravel()) if op == "difference" else \
        _iqm_slow(x.ravel()) / _iqm_slow(y.ravel())
    ref_lo, ref_hi = np.percentile(vals, [2.5, 97.5])
    np.testing.assert_allclose([point, lo, hi], [ref_point, ref_lo, ref_hi], rtol=1e-10, atol=1e-12)


def test_the_study_layout_keeps_designs_apart_and_step_variants_are_methods_of_their_own(tmp_path):
    """evaluate_study: each claim reads its designs only; the step design's PPO-Clip variants enter
    claim 6 as methods of their own (never pooled with the tuned PPO-Clip); absent designs are no data."""
    study = str(tmp_path / "study")
    rng = np.random.default_rng(3)
    lag, step = os.path.join(study, "lag"), os.path.join(study, "step")
    for run in (lag, step):
        os.makedirs(run)
        results.write_json(os.path.join(run, "run.json"), {})
        results.write_json(os.path.join(run, "random_scores.json"), RANDOM)
    for t in SCALE:
        write_group(lag, t, "ppo_clip", {1: 1.0, 16: 0.5}, rng=rng)
        write_group(lag, t, "vaco", {1: 1.2, 16: 1.15}, rng=rng)
        # a wide-clip PPO-Clip that is far better at B = 16 than the tuned one and than VACO
        write_group(step, t, "ppo_clip", {1: 1.0, 16: 2.0}, tags={"variant": "clip_x2"}, sub="variant=clip_x2", rng=rng)
        write_group(step, t, "ppo_clip", {1: 1.0, 16: 0.5}, tags={"variant": "epochs_x2"}, sub="variant=epochs_x2",
                    rng=rng)
    out = str(tmp_path / "claims.csv")
    table = claims.evaluate_study(study, reps=200, out=out)
    v = {r["claim"]: r["verdict"] for r in table}
    assert v["1a"] == "holds" and v["1b"] == "holds"  # the tuned PPO-Clip alone: the variants did not join it
    assert v["6a"] == "holds" and v["6b"] == "fails" and v["6c"] == "holds" and v["6"] == "fails"
    assert "ppo_clip_clip_x2 B=16: 10 runs" in next(r for r in table if r["claim"] == "6b")["rests_on"]
    # a step design run on one task only is compared with VACO on that task (not dropped for the other)
    import shutil

    shutil.rmtree(os.path.join(step, "b"))
    only_a = {r["claim"]: r for r in claims.evaluate_study(study, reps=200)}
    assert only_a["6b"]["verdict"] == "fails" and "1 task(s) (a)" in only_a["6b"]["rests_on"]
    assert "2 task(s)" in only_a["6a"]["rests_on"]
    abl = os.path.join(study, "ablation")  # an ablation on task a only, against VACO's runs on a and b
    os.makedirs(abl)
    results.write_json(os.path.join(abl, "run.json"), {})
    write_group(abl, "a", "vaco_filter_only", {16: 0.5}, rng=rng)
    only_a = {r["claim"]: r for r in claims.evaluate_study(study, reps=200)}
    assert only_a["5b"]["verdict"] == "holds" and "1 task(s) (a)" in only_a["5b"]["rests_on"]
    for claim, design in (("3", "proximal"), ("4", "mismatch")):
        row = next(r for r in table if r["claim"] == claim)
        assert row["verdict"] == "no data" and design in row["why"]
    assert v["5"] == "no data"  # lag has VACO, but no ablation ran (yet: see below)
    assert [r["claim"] for r in read_csv(out)] == [r["claim"] for r in table]


def _lag_design(tmp_path):
    """(study directory, its ``lag`` design's run directory), the run directory with its run.json and
    random scores (``RANDOM``) written."""
    study = str(tmp_path / "study")
    lag = os.path.join(study, "lag")
    os.makedirs(lag)
    results.write_json(os.path.join(lag, "run.json"), {})
    results.write_json(os.path.join(lag, "random_scores.json"), RANDOM)
    return study, lag


def test_verdicts_on_the_area_under_the_curve_when_the_final_return_saturates(tmp_path):
    """Every run ends at the ceiling, but lag slows PPO-Clip's learning: on the final return claim 1b
    cannot be called (the IQM difference is exactly 0); on the area under the curve it holds. Parts
    that do not read the score keep their statistic; a score outside ``SCORES`` is refused by name."""
    study, lag = _lag_design(tmp_path)
    rng = np.random.default_rng(5)
    for t in SCALE:
        write_group(lag, t, "ppo_clip", {1: 1.0, 16: 0.5}, final={1: 1.0, 16: 1.0}, rng=rng,
                    diag={1: {"mean_clip_fraction": 0.05}, 16: {"mean_clip_fraction": 0.2}})
        write_group(lag, t, "vaco", {1: 1.2, 16: 1.15}, final={1: 1.0, 16: 1.0}, rng=rng)
    final = {r["claim"]: r for r in claims.evaluate_study(study, reps=200)}
    auc = {r["claim"]: r for r in claims.evaluate_study(study, reps=200, score="auc_eval_return")}
    # both tasks are at their ceiling on the final return: every part reading it is not called, and says why
    assert final["1b"]["verdict"] == "no data" and "every task is at its ceiling" in final["1b"]["why"]
    assert auc["1b"]["verdict"] == "holds" and auc["1b"]["point"] < -0.3
    assert auc["1a"]["verdict"] == "holds" and auc["6"]["verdict"] == "holds"
    assert final["6"]["verdict"] == "no data"
    assert auc["1b"]["statistic"].endswith("score: auc_eval_return")
    assert "score:" not in final["1b"]["statistic"] and "score:" not in auc["2b"]["statistic"]
    assert auc["2b"]["verdict"] == final["2b"]["verdict"] == "holds"
    with pytest.raises(ValueError, match="score='eval_return'.*final_eval_return, auc_eval_return"):
        claims.evaluate_study(study, score="eval_return")
    out = str(tmp_path / "claims_auc.csv")
    script = study_module("claims")
    script.main(["--study", study, "--score", "auc_eval_return", "--bootstrap-reps", "200", "--out", out])
    assert {r["claim"]: r["verdict"] for r in read_csv(out)}["1b"] == "holds"
    with pytest.raises(SystemExit):
        script.main(["--study", study, "--score", "eval_return"])


def test_a_repeat_design_gets_its_own_tagged_verdicts(tmp_path):
    """Claim 4 is evaluated on the ``mismatch`` design and again on ``mismatch_strong`` alone: the runs
    of the two mismatch strengths never share a cell, and the repeat's ids carry the design's name."""
    study = str(tmp_path / "study")
    rng = np.random.default_rng(4)
    for design, no_reset in (("mismatch", 0.9), ("mismatch_strong", 0.3)):
        run = os.path.join(study, design)
        os.makedirs(run)
        results.write_json(os.path.join(run, "run.json"), {})
        for t in SCALE:
            write_group(run, t, "ppo_ewma", {16: 0.6}, rng=rng)
            write_group(run, t, "ppo_ewma_revised", {16: 0.9}, tags={claims.EWMA_RESET_COLUMN: 0.5}, rng=rng)
            write_group(run, t, "ppo_ewma_revised", {16: no_reset}, tags={claims.EWMA_RESET_COLUMN: 0.0},
                        sub="no_reset", rng=rng)
    table = claims.evaluate_study(study, reps=200)
    ids = [r["claim"] for r in table]
    assert ids[ids.index("4"):ids.index("4") + 6] == ["4", "4a", "4b", "4 [mismatch_strong]", "4a [mismatch_strong]",
                                                      "4b [mismatch_strong]"]
    v = {r["claim"]: r["verdict"] for r in table}
    assert v["4b"] == "inconclusive" and v["4b [mismatch_strong]"] == "holds"  # 0.9 vs 0.9; 0.3 vs 0.9
    assert v["4a"] == v["4a [mismatch_strong]"] == "holds"
    assert "10 runs" in next(r for r in table if r["claim"] == "4b [mismatch_strong]")["rests_on"]


def _costs(run_dir, a3po_ms, decoupled_ms, rounds=12, tasks=SCALE, seed=3):
    rng = np.random.default_rng(seed)
    rows = [{"env": t, "method": m, "round": r, "learner_ms": ms * (1 + 0.01 * rng.standard_normal()), "lag_depth": 16}
            for t in tasks for r in range(rounds)
            for m, ms in (("a3po", a3po_ms), ("decoupled_recompute", decoupled_ms))]
    results.write_table(os.path.join(run_dir, claims.COST_FILE), rows)


@pytest.mark.parametrize("a3po_ms,verdict", [(9.0, "holds"), (11.0, "fails")])
def test_claim_3b_reads_the_learner_cost_table_when_there_is_one(tmp_path, a3po_ms, verdict):
    run = make_claims_run(str(tmp_path))  # chunk seconds: a3po cheaper (1.0 vs 1.5 s)
    _costs(run, a3po_ms, 10.0)
    row = {r["claim"]: r for r in claims.evaluate(run, reps=300)}["3b"]
    assert row["verdict"] == verdict and row["statistic"].startswith("mean learner ms per phase")
    assert row["point"] == pytest.approx(a3po_ms / 10.0, rel=0.02)
    assert f"12 interleaved rounds on {len(SCALE)} task(s) at B=[16]" in row["rests_on"]
    assert "whole chunk's seconds per cell" in row["why"]  # the chunk ratio is still reported
    os.remove(os.path.join(run, claims.COST_FILE))  # without the table: the chunk seconds, as before
    row = {r["claim"]: r for r in claims.evaluate(run, reps=300)}["3b"]
    assert row["verdict"] == "holds" and row["statistic"].startswith("mean seconds per cell-chunk")


def test_learner_costs_are_rounds_by_tasks():
    rows = [{"env": t, "method": "a3po", "round": r, "learner_ms": 10 * i + r}
            for i, t in enumerate(("b", "a")) for r in range(3)]
    rows.append({"env": "a", "method": "a3po", "round": 3, "learner_ms": 99.0})  # a task with more rounds is cut
    x = claims.learner_costs(rows, "a3po")
    assert x.shape == (3, 2) and x[:, 0].tolist() == [10, 11, 12] and x[:, 1].tolist() == [0, 1, 2]
    assert claims.learner_costs(rows, "vaco").size == 0


def test_claim_3b_pools_only_the_tasks_timed_for_both_methods(tmp_path):
    run = make_claims_run(str(tmp_path))
    _costs(run, 9.0, 10.0)
    rows = results.read_table(os.path.join(run, claims.COST_FILE))
    rows += [{"env": "extra", "method": "a3po", "round": r, "learner_ms": 50.0, "lag_depth": 16} for r in range(12)]
    results.write_table(os.path.join(run, claims.COST_FILE), rows)
    row = {r["claim"]: r for r in claims.evaluate(run, reps=300)}["3b"]
    assert row["verdict"] == "holds" and row["point"] == pytest.approx(0.9, rel=0.02)  # "extra" not paired
    assert "left out, timed for one method only: extra" in row["rests_on"]
    assert claims.learner_costs(rows, "decoupled_recompute", {"extra"}).size == 0


def test_claim_1_names_a_task_the_pooled_iqm_trims(tmp_path, monkeypatch):
    """Three tasks; VACO keeps its B=1 level on two and loses 20% on the third: the pooled IQM (which
    trims the lowest quarter of the 30 runs, nearly all of them the third task's) still says 'holds',
    and 1a's why gives every task's own IQM ratio (checked against a slow loop) and names the third."""
    monkeypatch.setitem(SCALE, "c", 10.0)
    run = str(tmp_path)
    results.write_json(os.path.join(run, "random_scores.json"), {"a": 0.0, "b": 0.0, "c": 0.0})
    rng = np.random.default_rng(5)
    for t in ("a", "b", "c"):
        write_group(run, t, "ppo_clip", {1: 1.0, 16: 0.5 if t == "c" else 0.9}, rng=rng)
        # VACO above PPO-Clip at B = 1 keeps synchronous PPO-Clip off the best score (no task at its ceiling)
        write_group(run, t, "vaco", {1: 1.1, 16: 0.88 if t == "c" else 1.1}, rng=rng)
    table = {r["claim"]: r for r in claims.evaluate(run, reps=200)}
    assert table["1a"]["verdict"] == "holds"
    rows = tables.load_scores(run)

    def iqm_slow(v):  # int(n / 4) of the lowest and of the highest cut, the rest averaged
        v, cut = sorted(v), int(0.25 * len(v))
        kept = v[cut:len(v) - cut]
        return sum(kept) / len(kept)

    for t in ("a", "b", "c"):
        ref = np.mean([r["final_eval_return"] for r in rows if (r["env"], r["method"], r["lag_depth"]) ==
                       (t, "ppo_clip", 1)])
        x, y = ([r["final_eval_return"] / ref for r in rows if (r["env"], r["method"], r["lag_depth"]) == (t, "vaco", b)]
                for b in (16, 1))
        assert f"{t} {iqm_slow(x) / iqm_slow(y):.3g}" in table["1a"]["why"]
    assert table["1a"]["why"].endswith("below 0.9 on c")
    assert "per task (IQM difference, point): a " in table["1b"]["why"] and "no loss" not in table["1b"]["why"]
    # one task: no per-task text
    one = str(tmp_path / "one")
    write_group(one, "a", "ppo_clip", {1: 1.0, 16: 0.5})
    write_group(one, "a", "vaco", {1: 1.0, 16: 1.0})
    assert "per task" not in {r["claim"]: r for r in claims.evaluate(one, reps=50)}["1a"]["why"]


def test_complete_tasks_names_what_an_unfinished_task_lacks():
    rows = [{"env": t, "method": m, "lag_depth": b} for t in ("a", "b") for m in ("ppo_clip", "spo") for b in (1, 16)]
    rows += [{"env": "c", "method": "ppo_clip", "lag_depth": b} for b in (1, 16)]  # spo not run on c yet
    rows += [{"env": "d", "method": m, "lag_depth": 1} for m in ("ppo_clip", "spo")] + [
        {"env": "d", "method": "ppo_clip", "lag_depth": 16}]  # spo at B=1 only
    kept, left_out = tables.complete_tasks(rows)
    assert {r["env"] for r in kept} == {"a", "b"} and len(kept) == 8
    assert left_out == {"c": ["spo"], "d": ["spo B=16"]}
    assert tables.left_out_text(left_out) == "c (no spo); d (no spo B=16)"
    assert tables.complete_tasks(kept) == (kept, {})


def test_a_task_part_way_through_the_study_is_left_out_of_every_pooled_reading(tmp_path, monkeypatch):
    """A study adds task c and has finished three of the lag design's four methods there: claims,
    summary.csv and the pooled figures use tasks a and b only (the same numbers as a study without c)
    and say that c was left out; c's own rows still read alone."""
    import shutil

    monkeypatch.setitem(SCALE, "c", 10.0)
    full = str(tmp_path / "with_c")
    lag = os.path.join(full, "lag")
    os.makedirs(lag)
    results.write_json(os.path.join(lag, "run.json"), {})
    results.write_json(os.path.join(lag, "random_scores.json"), {"a": 0.0, "b": 0.0, "c": 0.0})
    rng = np.random.default_rng(11)
    levels = {"ppo_clip": {1: 1.0, 16: 0.6}, "ppo_kl": {1: 1.0, 16: 0.7}, "spo": {1: 1.0, 16: 0.5},
              "vaco": {1: 1.1, 16: 1.05}}
    for t in ("a", "b", "c"):
        for m, lv in levels.items():
            if not (t == "c" and m == "spo"):
                write_group(lag, t, m, lv, rng=rng, seconds=1.0,
                            diag={b: {"mean_filtered_fraction" if m == "vaco" else "mean_clip_fraction": 0.1 * b ** 0.5}
                                  for b in lv})
    without = str(tmp_path / "without_c")
    shutil.copytree(full, without)
    shutil.rmtree(os.path.join(without, "lag", "c"))
    with_c = {r["claim"]: r for r in claims.evaluate_study(full, reps=200)}
    no_c = {r["claim"]: r for r in claims.evaluate_study(without, reps=200)}
    for part in ("1a", "1b", "1c", "1d", "2a", "2b", "6"):
        a, b = with_c[part], no_c[part]
        assert (a["verdict"], a["point"], a["ci_low"], a["ci_high"]) == (b["verdict"], b["point"], b["ci_low"],
                                                                         b["ci_high"]), part
        assert a["rests_on"] == b["rests_on"] + "; left out, unfinished: c (no spo in lag)", part
    assert with_c["1d"]["verdict"] == "holds"  # SPO is not dropped from claim 1 for lacking c
    abl = os.path.join(full, "ablation")  # a design on task a only: c would never enter its comparison
    os.makedirs(abl)
    results.write_json(os.path.join(abl, "run.json"), {})
    write_group(abl, "a", "vaco_filter_only", {16: 0.5}, rng=rng)
    five = {r["claim"]: r for r in claims.evaluate_study(full, reps=100)}["5b"]
    assert five["verdict"] == "holds" and "left out" not in five["rests_on"], five["rests_on"]
    # summary.csv pools the same two tasks; c alone still has its own rows
    pooled = tables.summary_rows(results.load_scores(lag), {"a": 0.0, "b": 0.0, "c": 0.0}, reps=50)
    assert pooled == tables.summary_rows(results.load_scores(os.path.join(without, "lag")),
                                           {"a": 0.0, "b": 0.0}, reps=50)
    assert {r["n_tasks"] for r in pooled} == {2} and "spo" in {r["method"] for r in pooled}
    alone = tables.summary_rows([r for r in results.load_scores(lag) if r["env"] == "c"], {"c": 0.0}, reps=50)
    assert {r["method"] for r in alone} == {"ppo_clip", "ppo_kl", "vaco"}
    assert {r["env"] for r in plotting.score_rows(lag)} == {"a", "b"}


def test_the_ceiling_reads_only_the_reference_runs_it_is_given():
    """``tables.ceiling_tasks``: synchronous PPO-Clip in most runs within 2% of the best. A lag-aware
    PPO-Clip unit at the ceiling counts only when ``reference`` lets it; diverged runs and runs missing the
    score take no part (a diverged run's huge score would otherwise move the best); no random score, no
    ceiling."""
    def run(method, score, variant="", diverged=False):
        return {"env": "a", "method": method, "lag_depth": 1, "variant": variant, "final": score,
                "diverged": diverged}
    rows = [run("ppo_clip", 50.0), run("ppo_clip", 60.0), run("vaco", 100.0),
            run("ppo_clip", 99.0, "lag_aware"), run("ppo_clip", 99.5, "lag_aware"), run("ppo_clip", 99.9, "lag_aware")]
    assert tables.ceiling_tasks(rows, {"a": 0.0}, "final") == ["a"]  # 3 of 5 PPO-Clip runs at the ceiling
    plain = lambda r: not r["variant"]  # noqa: E731
    assert tables.ceiling_tasks(rows, {"a": 0.0}, "final", reference=plain) == []
    at = [run("ppo_clip", 99.0), run("ppo_clip", 100.0), run("vaco", 95.0)]
    assert tables.ceiling_tasks(at, {"a": 0.0}, "final", reference=plain) == ["a"]
    assert tables.ceiling_tasks(at + [run("vaco", 1e9, diverged=True), run("vaco", float("nan"))],
                                {"a": 0.0}, "final") == ["a"]
    assert tables.ceiling_tasks(at, None, "final") == [] and tables.ceiling_tasks(at, {"b": 0.0}, "final") == []


def test_the_ceiling_is_two_percent_of_the_random_to_best_range_at_a_nonzero_random_score():
    """``tables.ceiling_tasks`` at random scores away from 0, where 2% of the random-to-best range and 2% of
    the best score disagree. Best 1000 (a VACO run): random -500 puts the ceiling at 970, so PPO-Clip at
    975 is at it (2% of the best, 980, would say not); random 1000 (best 1500) puts it at 1490, so
    PPO-Clip at 1480 is not (2% of the best, 1470, would say it is)."""
    def run(method, score, env="a"):
        return {"env": env, "method": method, "lag_depth": 1, "final": score, "diverged": False}
    a = [run("ppo_clip", 975.0), run("ppo_clip", 972.0), run("ppo_clip", 900.0), run("vaco", 1000.0)]
    b = [run("ppo_clip", 1480.0, "b"), run("ppo_clip", 1485.0, "b"), run("ppo_clip", 1300.0, "b"),
         run("vaco", 1500.0, "b")]
    assert tables.ceiling_tasks(a + b, {"a": -500.0, "b": 1000.0}, "final") == ["a"]
    # just outside each bound: a's runs 1 below 970 are not at it; b's runs at 1490 and above are
    below = [run("ppo_clip", 969.0), run("ppo_clip", 969.5), run("ppo_clip", 900.0), run("vaco", 1000.0)]
    above = [run("ppo_clip", 1490.0, "b"), run("ppo_clip", 1495.0, "b"), run("ppo_clip", 1300.0, "b"),
             run("vaco", 1500.0, "b")]
    assert tables.ceiling_tasks(below + above, {"a": -500.0, "b": 1000.0}, "final") == ["b"]


def test_a_task_at_its_ceiling_leaves_the_final_return_parts_only(tmp_path):
    """Task a: synchronous PPO-Clip ends at the best final return any run reached (a ceiling); task b: far
    below it. The final-return parts rest on b alone and name a as left out at its ceiling; the parts
    that do not read the score, and every part on the area under the curve, keep both tasks."""
    study, lag = _lag_design(tmp_path)
    rng = np.random.default_rng(6)
    ceiling = {"a": {1: 1.0, 16: 1.0}, "b": None}
    for t in SCALE:
        write_group(lag, t, "ppo_clip", {1: 1.0, 16: 0.5}, final=ceiling[t], rng=rng,
                    diag={1: {"mean_clip_fraction": 0.05}, 16: {"mean_clip_fraction": 0.2}})
        write_group(lag, t, "vaco", {1: 1.2, 16: 1.15}, final=ceiling[t], rng=rng,
                    diag={1: {"mean_filtered_fraction": 0.02}, 16: {"mean_filtered_fraction": 0.17}})
    assert claims.ceiling_tasks(results.load_scores(lag), RANDOM) == ["a"]
    assert claims.ceiling_tasks(results.load_scores(lag), RANDOM, "auc_eval_return") == []
    final = {r["claim"]: r for r in claims.evaluate_study(study, reps=200)}
    auc = {r["claim"]: r for r in claims.evaluate_study(study, reps=200, score="auc_eval_return")}
    assert "1 task(s) (b); left out, at the ceiling on final_eval_return: a" in final["1b"]["rests_on"]
    assert final["1b"]["verdict"] == "holds" and final["1a"]["verdict"] == "holds"  # on b, lag still shows
    assert "2 task(s) (a, b)" in final["2b"]["rests_on"] and final["2"]["verdict"] == "holds"
    assert "2 task(s) (a, b)" in auc["1b"]["rests_on"] and "ceiling" not in auc["1b"]["rests_on"]


def test_claim_4b_is_not_tested_when_the_reset_never_fired(tmp_path):
    """With the reset on, ``mean_ewma_resets`` is 0 in every run: the runs with and without it are the same
    runs, so 4b is not called (no data, saying so) rather than an inconclusive P = 0.5."""
    study = str(tmp_path / "study")
    run = os.path.join(study, "mismatch")
    os.makedirs(run)
    results.write_json(os.path.join(run, "run.json"), {})
    rng = np.random.default_rng(7)
    for fired in (0.0, 3.0):
        for t in SCALE:
            write_group(run, t, "ppo_ewma", {16: 0.6}, rng=rng)
            write_group(run, t, "ppo_ewma_revised", {16: 0.9}, tags={claims.EWMA_RESET_COLUMN: 0.5}, rng=rng,
                        diag={16: {claims.EWMA_RESETS: fired}})
            write_group(run, t, "ppo_ewma_revised", {16: 0.9}, tags={claims.EWMA_RESET_COLUMN: 0.0},
                        sub="no_reset", rng=rng, diag={16: {claims.EWMA_RESETS: 0.0}})
        row = {r["claim"]: r for r in claims.evaluate_study(study, reps=200)}["4b"]
        if fired:
            assert row["verdict"] == "inconclusive"
        else:
            assert row["verdict"] == "no data" and "the reset never fired" in row["why"]
