"""From a run directory's score rows to the tables behind the figures (docs/evaluation.md).

``summarise(run_dir)`` writes ``summary.csv`` (aggregate x method x lag depth, with stratified
bootstrap CIs, on raw and on normalised scores) and ``diagnostics.csv`` (filtered/clipped
fraction, TV estimates, staleness ... per method x lag depth). Diverged runs are dropped and
counted (column ``n_diverged``), never averaged in.

Both take one run directory or several (``summarise([A, B], out=A)``): the score rows of all of
them are merged (a sweep split into shards that wrote into separate directories; shards written into
one directory are found in its ``GROUP/shard-I-of-N/`` subdirectories anyway) and the tables are
written into ``out`` (default: the first directory).
"""

from __future__ import annotations

import os

import numpy as np

from vaco_jax import results, stats
from vaco_jax.results import atomic_write_text, load_random_scores, load_scores, rows_to_csv

SCORES = ("final_eval_return", "auc_eval_return", "train_return_last5pct")
DIAGNOSTICS = ("mean_filtered_fraction", "mean_clip_fraction", "mean_tv_behaviour", "mean_tv_learner",
               "mean_mean_staleness", "mean_ewma_resets", "mean_ewma_kept_fraction", "mean_weight_mean",
               "mean_entropy", "mean_explained_variance")
REFERENCE_METHOD = "ppo_clip"


def score_matrix(rows: list[dict], method: str, lag_depth: int, tasks: list[str], score: str,
                 extra: dict | None = None) -> np.ndarray:
    """(runs x tasks) array of one cell of the sweep; seeds aligned by sorted order, ragged -> truncated."""
    per_task = []
    for task in tasks:
        sel = [r for r in rows if r["method"] == method and int(r["lag_depth"]) == lag_depth and r["env"] == task
               and all(r.get(k) == v for k, v in (extra or {}).items())]
        sel.sort(key=lambda r: r["seed"])
        vals = [np.nan if r["diverged"] in (True, "True", 1) else float(r[score]) for r in sel]
        per_task.append(np.array(vals, float))
    n = min(len(v) for v in per_task) if per_task else 0
    return np.stack([v[:n] for v in per_task], axis=1) if n else np.zeros((0, len(tasks)))


def reference_scores(rows, tasks, score, random: dict | None):
    """Per-task random and synchronous-PPO (PPO-Clip at B=1) reference scores, or None when absent."""
    if random is None:
        return None
    ref = score_matrix(rows, REFERENCE_METHOD, 1, tasks, score)
    if ref.shape[0] == 0:
        return None
    finite = np.isfinite(ref)
    ref_mean = np.where(finite.any(axis=0), np.where(finite, ref, 0).sum(0) / np.maximum(finite.sum(0), 1), np.nan)
    rnd = np.array([random.get(t, np.nan) for t in tasks], float)
    if np.any(~np.isfinite(ref_mean)) or np.any(~np.isfinite(rnd)) or np.any(np.abs(ref_mean - rnd) < 1e-6 * np.maximum(1, np.abs(rnd))):
        return None
    return rnd, ref_mean


def _out_dir(run_dirs, out: str | None) -> str:
    if out:
        return out
    return run_dirs if isinstance(run_dirs, (str, os.PathLike)) else list(run_dirs)[0]


def _where(run_dirs) -> str:
    return str(run_dirs) if isinstance(run_dirs, (str, os.PathLike)) else ", ".join(map(str, run_dirs))


def _row_order(row: dict) -> tuple:
    return (str(row.get("env")), str(row.get("method")), int(row["lag_depth"]), int(row["seed"]),
            results.cell_key(row))


def summarise(run_dirs, reps: int = 2000, seed: int = 0, out: str | None = None) -> tuple[list[dict], list[dict]]:
    """``summary.csv`` and ``diagnostics.csv`` of one run directory or several (merged) into ``out``."""
    rows = load_scores(run_dirs)
    if not rows:
        raise FileNotFoundError(f"no scores.csv under {_where(run_dirs)}: nothing has finished yet")
    random = load_random_scores(run_dirs)
    rows.sort(key=_row_order)  # the same numbers however the rows were split into groups, shards, directories
    tasks = sorted({r["env"] for r in rows})
    methods = sorted({r["method"] for r in rows})
    lags = sorted({int(r["lag_depth"]) for r in rows})
    summary = []
    for score in SCORES:
        refs = reference_scores(rows, tasks, score, random)
        for method in methods:
            for b in lags:
                raw = score_matrix(rows, method, b, tasks, score)
                if raw.shape[0] == 0:
                    continue
                clean, n_div = stats.drop_diverged(raw)
                variants = [("raw", clean, 1.0)]
                if refs is not None:
                    variants.append(("normalized", stats.normalize_scores(clean, refs[0], refs[1]), 1.0))
                for norm, mat, gamma in variants:
                    base = {"score": score, "normalization": norm, "method": method, "lag_depth": b,
                            "n_runs": int(mat.shape[0]), "n_tasks": len(tasks), "n_diverged": int(n_div)}
                    if mat.shape[0] == 0:
                        summary.append({**base, "aggregate": "all_diverged"})
                        continue
                    names = ["median", "iqm", "mean"] + (["optimality_gap"] if norm == "normalized" else [])
                    cis = stats.aggregate_with_cis({method: mat}, metrics=names, reps=reps, seed=seed)[method]
                    for name in names:
                        point, low, high = cis[name]
                        summary.append({**base, "aggregate": name, "point": point, "low": low, "high": high})
    diag_rows = []
    for method in methods:
        for b in lags:
            sel = [r for r in rows if r["method"] == method and int(r["lag_depth"]) == b
                   and r["diverged"] not in (True, "True", 1)]
            if not sel:
                continue
            row = {"method": method, "lag_depth": b, "n_runs": len(sel)}
            for d in DIAGNOSTICS:
                vals = np.array([float(r.get(d, np.nan)) for r in sel], float)
                vals = vals[np.isfinite(vals)]
                if len(vals):
                    row[d] = float(vals.mean())
                    row[d + "_se"] = float(vals.std(ddof=1) / np.sqrt(len(vals))) if len(vals) > 1 else 0.0
            diag_rows.append(row)
    out = _out_dir(run_dirs, out)
    os.makedirs(out, exist_ok=True)
    atomic_write_text(os.path.join(out, "summary.csv"), rows_to_csv(summary))
    atomic_write_text(os.path.join(out, "diagnostics.csv"), rows_to_csv(diag_rows))
    return summary, diag_rows


def summarise_by(run_dirs, keys: tuple[str, ...], score: str = "final_eval_return", reps: int = 2000,
                 seed: int = 0, filename: str | None = None, out: str | None = None) -> list[dict]:
    """Raw-score IQM and mean with stratified bootstrap CIs for every combination of ``keys``.

    For studies whose cells differ in more than method x lag depth (δ sweep, forward lag, mismatch):
    runs are the seeds, tasks the strata. Diverged runs are dropped and counted.
    """
    rows = load_scores(run_dirs)
    if not rows:
        raise FileNotFoundError(f"no scores.csv under {_where(run_dirs)}: nothing has finished yet")
    tasks = sorted({r["env"] for r in rows})
    combos = sorted({tuple(r.get(k) for k in keys) for r in rows}, key=lambda c: tuple(map(str, c)))
    table = []
    for combo in combos:
        per_task = []
        for task in tasks:
            sel = sorted((r for r in rows if r["env"] == task and tuple(r.get(k) for k in keys) == combo),
                         key=lambda r: r["seed"])
            per_task.append(np.array([np.nan if r["diverged"] in (True, "True", 1) else float(r[score])
                                      for r in sel], float))
        n = min(len(v) for v in per_task)
        if n == 0:
            continue
        clean, n_div = stats.drop_diverged(np.stack([v[:n] for v in per_task], axis=1))
        row = dict(zip(keys, combo))
        row.update(score=score, n_runs=int(clean.shape[0]), n_tasks=len(tasks), n_diverged=int(n_div))
        if clean.shape[0]:
            cis = stats.aggregate_with_cis({"x": clean}, metrics=["iqm", "mean"], reps=reps, seed=seed)["x"]
            for name, (point, low, high) in cis.items():
                row.update({f"{name}": point, f"{name}_low": low, f"{name}_high": high})
        table.append(row)
    if filename:
        where = _out_dir(run_dirs, out)
        os.makedirs(where, exist_ok=True)
        atomic_write_text(os.path.join(where, filename), rows_to_csv(table))
    return table
