"""From a run directory's score rows to the tables behind the figures (docs/evaluation.md).

``summarise(run_dir)`` writes ``summary.csv`` (aggregate x method x lag depth, with stratified
bootstrap CIs, on raw and on normalised scores) and ``diagnostics.csv`` (filtered/clipped
fraction, TV estimates, staleness ... per method x lag depth). Diverged runs (``diverged`` true)
are dropped and counted (column ``n_diverged``), never averaged in. A run in which MuJoCo flagged a step
unstable (``unstable_steps`` > 0) is kept and counted (``n_unstable``). A run that did not diverge but
has no value for a score (NaN: e.g. ``train_return_last5pct`` when no training episode ended in the
window) is *missing* for that score only: dropped from that score's aggregates and counted in
``n_missing``, never called diverged.

Three normalisations (column ``normalization``): ``raw``; ``normalized`` to synchronous PPO-Clip,
``(s − random) / (ref − random)`` with ``ref`` the mean over exactly the runs the aggregate of
PPO-Clip at B = 1 keeps; and ``own_b1`` (lag robustness), ``(s − random) / (own − random)`` with
``own`` the same method's own B = 1 mean, computed the same way.

Both take one run directory or several (``summarise([A, B], out=A)``): the score rows of all of
them are merged (a sweep split into shards that wrote into separate directories; shards written into
one directory are found in its ``GROUP/shard-I-of-N/`` subdirectories anyway) and the tables are
written into ``out`` (default: the first directory). ``summary_rows`` and ``diagnostic_rows`` compute
the same rows from score rows already loaded, without writing (e.g. one task's rows alone).
"""

from __future__ import annotations

import os

import numpy as np

from vaco_jax.analysis import results

from vaco_jax.analysis import stats
from vaco_jax.analysis.results import load_random_scores, load_scores, write_table

SCORES = ("final_eval_return", "auc_eval_return", "train_return_last5pct")
DIAGNOSTICS = ("mean_filtered_fraction", "mean_clip_fraction", "mean_tv_behaviour", "mean_tv_learner",
               "mean_tv_behaviour_bounded", "mean_tv_learner_bounded",  # absent from runs before they existed
               "mean_mean_staleness", "mean_ewma_resets", "mean_ewma_kept_fraction", "mean_weight_mean",
               "mean_entropy", "mean_explained_variance")
REFERENCE_METHOD = "ppo_clip"


NORMALIZATIONS = ("raw", "normalized", "own_b1")


def is_diverged(row: dict) -> bool:
    """Only the ``diverged`` column says a run diverged (a NaN score alone is *missing*)."""
    return row.get("diverged") in (True, "True", "true", 1, "1")


def _cell_rows(rows, method, lag_depth, task, extra=None, where=None) -> list[dict]:
    sel = [r for r in rows if r["method"] == method and int(r["lag_depth"]) == lag_depth and r["env"] == task
           and all(r.get(k) == v for k, v in (extra or {}).items()) and (where is None or where(r))]
    sel.sort(key=lambda r: r["seed"])
    return sel


def _value(row: dict, score: str) -> float:
    try:
        return float(row.get(score, np.nan))
    except (TypeError, ValueError):
        return float("nan")


def cell_matrices(rows: list[dict], method: str, lag_depth: int, tasks: list[str], score: str,
                  extra: dict | None = None, where=None) -> tuple[np.ndarray, np.ndarray]:
    """``(values, diverged)``, both (runs x tasks), of one cell: seeds aligned by sorted order, ragged ->
    truncated. ``values`` is the score (NaN where missing or diverged), ``diverged`` the run's flag.
    ``where``: an optional predicate on the score row (e.g. a tag column's value)."""
    return _cell_arrays(rows, method, lag_depth, tasks, score, extra, where)[:2]


def _cell_arrays(rows, method, lag_depth, tasks, score, extra=None, where=None):
    """:func:`cell_matrices` and, third, each run's unstable flag (runs x tasks)."""
    vals, divs, unst = [], [], []
    for task in tasks:
        sel = _cell_rows(rows, method, lag_depth, task, extra, where)
        divs.append(np.array([is_diverged(r) for r in sel], bool))
        unst.append(np.array([is_unstable(r) for r in sel], bool))
        vals.append(np.array([np.nan if is_diverged(r) else _value(r, score) for r in sel], float))
    n = min(len(v) for v in vals) if vals else 0
    if not n:
        return np.zeros((0, len(tasks))), np.zeros((0, len(tasks)), bool), np.zeros((0, len(tasks)), bool)
    return tuple(np.stack([a[:n] for a in arrs], axis=1) for arrs in (vals, divs, unst))


def score_matrix(rows: list[dict], method: str, lag_depth: int, tasks: list[str], score: str,
                 extra: dict | None = None) -> np.ndarray:
    """(runs x tasks) array of one cell of the sweep; seeds aligned by sorted order, ragged -> truncated.
    NaN marks both diverged and missing values: use :func:`clean_cell` to tell them apart."""
    return cell_matrices(rows, method, lag_depth, tasks, score, extra)[0]


def is_unstable(row: dict) -> bool:
    """Whether MuJoCo flagged any step of the run unstable (``unstable_steps`` > 0: it could not
    integrate the state, or it zeroed a non-finite control). Such a run is kept in the aggregates
    (its returns are what the run did) and counted in ``n_unstable``, so a reader sees it."""
    v = _value(row, "unstable_steps")
    return bool(np.isfinite(v) and v > 0)


def count_unstable(values: np.ndarray, diverged: np.ndarray, unstable: np.ndarray) -> int:
    """Of one cell's runs (rows of the runs x tasks matrices), the kept ones (not diverged) with an
    unstable step in any task."""
    if not unstable.size:
        return 0
    return int(np.sum(unstable.any(axis=1) & ~diverged.any(axis=1)))


def split_runs(values: np.ndarray, diverged: np.ndarray) -> tuple[np.ndarray, int, int]:
    """``(kept, n_diverged, n_missing)``: a run (row) with a diverged flag in any task is diverged; of
    the others, one with a non-finite score in any task is missing; the rest are kept."""
    div = diverged.any(axis=1) if diverged.size else np.zeros(values.shape[0], bool)
    miss = ~div & ~np.all(np.isfinite(values), axis=1)
    keep = ~div & ~miss
    return values[keep], int(div.sum()), int(miss.sum())


def clean_cell(rows: list[dict], method: str, lag_depth: int, tasks: list[str], score: str,
               extra: dict | None = None, where=None) -> tuple[np.ndarray, int, int]:
    """``(kept runs x tasks, n_diverged, n_missing)`` of one cell, the runs every aggregate uses."""
    return split_runs(*cell_matrices(rows, method, lag_depth, tasks, score, extra, where))


def _reference_from(kept: np.ndarray, tasks, random: dict | None):
    if random is None or kept.shape[0] == 0:
        return None
    ref_mean = kept.mean(axis=0)
    rnd = np.array([random.get(t, np.nan) for t in tasks], float)
    if np.any(~np.isfinite(ref_mean)) or np.any(~np.isfinite(rnd)) or np.any(
            np.abs(ref_mean - rnd) < 1e-6 * np.maximum(1, np.abs(rnd))):
        return None
    return rnd, ref_mean


def reference_scores(rows, tasks, score, random: dict | None, method: str = REFERENCE_METHOD, where=None):
    """Per-task random and reference scores, or None when absent: the reference is the mean of
    ``method`` (default PPO-Clip, i.e. synchronous PPO) at B = 1 over exactly the runs its aggregate
    keeps (diverged and missing runs dropped the same way)."""
    if random is None:
        return None
    kept, _, _ = clean_cell(rows, method, 1, tasks, score, where=where)
    return _reference_from(kept, tasks, random)


def own_b1_reference(rows, method, tasks, score, random: dict | None, where=None):
    """Per-task random score and ``method``'s own B = 1 mean (lag-robustness normalisation), or None."""
    return reference_scores(rows, tasks, score, random, method=method, where=where)


def ceiling_tasks(rows: list[dict], random: dict | None, score: str, tolerance: float | None = None,
                  reference=None) -> list[str]:
    """The tasks at their ceiling on ``score``: synchronous PPO-Clip (``ppo_clip`` at B = 1, and
    ``reference(row)`` when given) ends within ``tolerance`` (default ``rules.CEILING_TOLERANCE``) of the
    random-to-best range below the best
    score any run of the task reached, in most of its runs (``rules.at_ceiling``). Diverged runs and
    runs missing the score take no part; a task without a random score is never at its ceiling."""
    from vaco_jax.analysis import rules

    out = []
    for task in sorted({r["env"] for r in rows}):
        ok = [r for r in rows if r["env"] == task and not is_diverged(r) and np.isfinite(_value(r, score))]
        ref = [_value(r, score) for r in ok if r["method"] == REFERENCE_METHOD and int(r["lag_depth"]) == 1
               and (reference is None or reference(r))]
        if ref and random and task in random and rules.at_ceiling(
                ref, max(_value(r, score) for r in ok), float(random[task]),
                rules.CEILING_TOLERANCE if tolerance is None else tolerance):
            out.append(task)
    return out


def empty_aggregate(n_diverged: int, n_missing: int) -> str:
    """The ``aggregate`` label of a cell with no run left: ``all_diverged``, ``all_missing`` (no score:
    e.g. no episode ended in the window) or ``none_left`` (some of each)."""
    if n_missing == 0:
        return "all_diverged"
    return "all_missing" if n_diverged == 0 else "none_left"


def _out_dir(run_dirs, out: str | None) -> str:
    if out:
        return out
    return run_dirs if isinstance(run_dirs, (str, os.PathLike)) else list(run_dirs)[0]


def _where(run_dirs) -> str:
    return str(run_dirs) if isinstance(run_dirs, (str, os.PathLike)) else ", ".join(map(str, run_dirs))


def _row_order(row: dict) -> tuple:
    return (str(row.get("env")), str(row.get("method")), int(row["lag_depth"]), int(row["seed"]),
            results.cell_key(row))


CELL_AXES = ("env", "method", "lag_depth", "seed")


def setting_axes(rows: list[dict]) -> list[str]:
    """The columns in which two score rows of the same task, method, lag depth and seed differ: the
    axes of a sweep beyond those four (``--sweep gamma=0.99,0.995``, a static field's groups). Empty
    for a plain lag sweep. Rows that differ in them are different configurations, never more seeds
    of one: the summary keeps every setting apart (:func:`summary_rows`)."""
    by_cell: dict[tuple, list[dict]] = {}
    for r in rows:
        by_cell.setdefault(tuple(str(r.get(k)) for k in CELL_AXES), []).append(r)
    axes: list[str] = []
    for same in by_cell.values():
        if len(same) < 2:
            continue
        for k in sorted({k for r in same for k in r}):
            if k in CELL_AXES or not results.identifies_cell(k) or k in axes:
                continue
            if len({"" if _absent(r.get(k)) else str(r.get(k)) for r in same}) > 1:
                axes.append(k)
    return sorted(axes)


def _absent(v) -> bool:
    """No value: missing, empty, or NaN (what a table read from a CSV that mixes groups with and
    without the column holds where a group has none)."""
    return v is None or results.cell_text(v) == ""


def _setting_value(v) -> str:
    return format(v, "g") if isinstance(v, float) else str(v)


def setting_of(row: dict, axes: list[str]) -> str:
    """'gamma=0.99 learning_rate=0.0001': the row's values of ``axes`` (those it has; '' for none)."""
    return " ".join(f"{k}={_setting_value(row[k])}" for k in axes if not _absent(row.get(k)))


def by_setting(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """``[(setting, its rows)]``, sorted; ``[("", rows)]`` when the rows hold one setting only."""
    axes = setting_axes(rows)
    if not axes:
        return [("", rows)]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(setting_of(r, axes), []).append(r)
    return sorted(groups.items())


def complete_tasks(rows: list[dict]) -> tuple[list[dict], dict[str, list[str]]]:
    """``(rows of the complete tasks, {other task: what it lacks})``.

    A task is complete when it holds every (method, lag depth) cell that some task holds. Anything
    pooled over tasks is computed on the complete tasks only: a study part-way through (one method's
    group not yet finished on a newly added task) would otherwise pool that method over fewer tasks
    than the others, or drop it. What a task lacks reads "spo" (the method at every lag depth) or
    "spo B=16". Per-task readings (one task's rows alone) are unaffected: one task is complete."""
    cells: dict[str, set] = {}
    for r in rows:
        cells.setdefault(r["env"], set()).add((r["method"], int(r["lag_depth"])))
    every = set().union(*cells.values()) if cells else set()
    left_out = {}
    for task, have in sorted(cells.items()):
        lacks = every - have
        if not lacks:
            continue
        names = []
        for method in sorted({m for m, _ in lacks}):
            lags = sorted(b for m, b in lacks if m == method)
            whole = lags == sorted(b for m, b in every if m == method)
            names.append(method if whole else f"{method} B={', '.join(map(str, lags))}")
        left_out[task] = names
    return [r for r in rows if r["env"] not in left_out], left_out


def left_out_text(left_out: dict[str, list[str]]) -> str:
    """'FingerSpin (no spo)' for :func:`complete_tasks`'s second value; '' when nothing was left out."""
    return "; ".join(f"{task} (no {', '.join(lacks)})" for task, lacks in sorted(left_out.items()))


def summary_rows(rows: list[dict], random: dict | None, reps: int = 2000, seed: int = 0,
                 scores: tuple[str, ...] = SCORES) -> list[dict]:
    """The rows of ``summary.csv`` (score x method x lag depth x normalisation x aggregate) for score
    rows already loaded: all tasks pooled, or one task's rows alone for per-task aggregates (its
    reference is then that task's PPO-Clip at B = 1). Tasks pool only when complete
    (:func:`complete_tasks`): ``n_tasks`` counts the tasks pooled.

    Rows of several settings (:func:`setting_axes`: a ``--sweep`` over gamma, say) are summarised
    each on their own, every summary row then carrying its ``setting`` ('gamma=0.99'); the
    normalisation's reference is PPO-Clip at B = 1 of the same setting (none where that setting has
    no PPO-Clip rows, e.g. a method that does not read the swept knob: raw scores only)."""
    settings = by_setting(rows)
    if len(settings) > 1:
        return [{"setting": name, **row} for name, sub in settings
                for row in summary_rows(sub, random, reps=reps, seed=seed, scores=scores)]
    rows = sorted(complete_tasks(rows)[0], key=_row_order)  # the same numbers however the rows were split
    tasks = sorted({r["env"] for r in rows})
    methods = sorted({r["method"] for r in rows})
    lags = sorted({int(r["lag_depth"]) for r in rows})
    summary = []
    for score in scores:
        refs = reference_scores(rows, tasks, score, random)
        for method in methods:
            own = own_b1_reference(rows, method, tasks, score, random)
            for b in lags:
                values, div, unstable = _cell_arrays(rows, method, b, tasks, score)
                if values.shape[0] == 0:
                    continue
                clean, n_div, n_miss = split_runs(values, div)
                n_unstable = count_unstable(values, div, unstable)
                variants = [("raw", clean)]
                if refs is not None:
                    variants.append(("normalized", stats.normalize_scores(clean, refs[0], refs[1])))
                if own is not None:
                    variants.append(("own_b1", stats.normalize_scores(clean, own[0], own[1])))
                for norm, mat in variants:
                    base = {"score": score, "normalization": norm, "method": method, "lag_depth": b,
                            "n_runs": int(mat.shape[0]), "n_tasks": len(tasks), "n_diverged": int(n_div),
                            "n_missing": int(n_miss), "n_unstable": n_unstable}
                    if mat.shape[0] == 0:
                        summary.append({**base, "aggregate": empty_aggregate(n_div, n_miss)})
                        continue
                    # the median of one task's mean is that mean: with one task there is no median row
                    names = (["median"] if len(tasks) > 1 else []) + ["iqm", "mean"] + (
                        ["optimality_gap"] if norm == "normalized" else [])
                    cis = stats.aggregate_with_cis({method: mat}, metrics=names, reps=reps, seed=seed)[method]
                    for name in names:
                        point, low, high = cis[name]
                        summary.append({**base, "aggregate": name, "point": point, "low": low, "high": high})
    return summary


def diagnostic_rows(rows: list[dict]) -> list[dict]:
    """The rows of ``diagnostics.csv``: each diagnostic's mean and standard error per method x lag depth,
    over the complete tasks (:func:`complete_tasks`); several settings each on their own, as in
    :func:`summary_rows`."""
    settings = by_setting(rows)
    if len(settings) > 1:
        return [{"setting": name, **row} for name, sub in settings for row in diagnostic_rows(sub)]
    rows = sorted(complete_tasks(rows)[0], key=_row_order)
    diag_rows = []
    for method in sorted({r["method"] for r in rows}):
        for b in sorted({int(r["lag_depth"]) for r in rows}):
            sel = [r for r in rows if r["method"] == method and int(r["lag_depth"]) == b and not is_diverged(r)]
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
    return diag_rows


def summarise(run_dirs, reps: int = 2000, seed: int = 0, out: str | None = None) -> tuple[list[dict], list[dict]]:
    """``summary.csv`` and ``diagnostics.csv`` of one run directory or several (merged) into ``out``."""
    rows = load_scores(run_dirs)
    if not rows:
        raise FileNotFoundError(f"no scores.csv under {_where(run_dirs)}: nothing has finished yet")
    summary = summary_rows(rows, load_random_scores(run_dirs), reps=reps, seed=seed)
    diag_rows = diagnostic_rows(rows)
    out = _out_dir(run_dirs, out)
    os.makedirs(out, exist_ok=True)
    write_table(os.path.join(out, "summary.csv"), summary)
    write_table(os.path.join(out, "diagnostics.csv"), diag_rows)
    return summary, diag_rows


def summarise_if_needed(run_dirs, out: str, when: bool | None = None, reps: int = 2000, log=print) -> bool:
    """:func:`summarise` ``run_dirs`` into ``out`` when ``when`` is True, or when it is None and ``out``
    has no ``summary.csv`` yet (never when False). Returns False when the data cannot be summarised (a
    ValueError, e.g. a non-finite reference score: the tables are not to be read), else True (also when
    nothing has finished yet, which is ``log``ged)."""
    if not (when or (when is None and not os.path.exists(os.path.join(out, "summary.csv")))):
        return True
    try:
        summarise(run_dirs, reps=reps, out=out)
    except FileNotFoundError as e:
        log(f"no summary: {e}")
    except ValueError as e:  # draw what does not need the summary
        log(f"tables.summarise failed ({type(e).__name__}: {e}); "
            "skipping the figures drawn from summary.csv / diagnostics.csv")
        return False
    return True


def summarise_by(run_dirs, keys: tuple[str, ...], score: str = "final_eval_return", reps: int = 2000,
                 seed: int = 0, filename: str | None = None, out: str | None = None) -> list[dict]:
    """Raw-score IQM and mean with stratified bootstrap CIs for every combination of ``keys``.

    For studies whose cells differ in more than method x lag depth (δ sweep, forward lag, mismatch):
    runs are the seeds, tasks the strata. Diverged runs are dropped and counted (``n_diverged``); runs
    with no value for ``score`` are dropped and counted apart (``n_missing``).
    """
    rows = load_scores(run_dirs)
    if not rows:
        raise FileNotFoundError(f"no scores.csv under {_where(run_dirs)}: nothing has finished yet")
    tasks = sorted({r["env"] for r in rows})
    combos = sorted({tuple(r.get(k) for k in keys) for r in rows}, key=lambda c: tuple(map(str, c)))
    table = []
    for combo in combos:
        vals, divs, unst = [], [], []
        for task in tasks:
            sel = sorted((r for r in rows if r["env"] == task and tuple(r.get(k) for k in keys) == combo),
                         key=lambda r: r["seed"])
            divs.append(np.array([is_diverged(r) for r in sel], bool))
            unst.append(np.array([is_unstable(r) for r in sel], bool))
            vals.append(np.array([np.nan if is_diverged(r) else _value(r, score) for r in sel], float))
        n = min(len(v) for v in vals)
        if n == 0:
            continue
        values, div, unstable = (np.stack([a[:n] for a in arrs], axis=1) for arrs in (vals, divs, unst))
        clean, n_div, n_miss = split_runs(values, div)
        row = dict(zip(keys, combo))
        row.update(score=score, n_runs=int(clean.shape[0]), n_tasks=len(tasks), n_diverged=int(n_div),
                   n_missing=int(n_miss), n_unstable=count_unstable(values, div, unstable))
        if clean.shape[0]:
            cis = stats.aggregate_with_cis({"x": clean}, metrics=["iqm", "mean"], reps=reps, seed=seed)["x"]
            for name, (point, low, high) in cis.items():
                row.update({f"{name}": point, f"{name}_low": low, f"{name}_high": high})
        table.append(row)
    if filename:
        where = _out_dir(run_dirs, out)
        os.makedirs(where, exist_ok=True)
        write_table(os.path.join(where, filename), table)
    return table
