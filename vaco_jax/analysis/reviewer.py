"""The numbers behind the reviewer figures (6)-(9) and the forward-lag figure (5), from rows already loaded.

:mod:`vaco_jax.analysis.figures` only draws: each figure loads its rows, calls one function here and
draws what it returns. Every function is pure: it takes score rows (``scores.csv``), curve rows
(``curves.csv``) or summary rows (``summary.csv``) plus the bootstrap's ``reps`` and ``seed``, and
returns plain data (dicts, lists, NumPy arrays, small dataclasses); nothing here reads or writes a
file or imports matplotlib.

    interval_estimates         (6) the summary's points and CIs per method x lag depth x aggregate
    probability_of_improvement (7) P(method > each other method) with CIs, per lag depth
    normalised_cells, performance_profiles (8) kept runs x tasks per cell, normalised; profiles with CIs
    iqm_curves                 (9) IQM of the (normalised) eval return per evaluation, with CIs
    forward_lag_cells          (5) scores per (method, lag depth, E, M), diverged / no-score runs counted

``order`` (where a function takes it) sorts method names; the figures pass their registry order.
Every bootstrap uses ``np.random.default_rng(seed)`` afresh per call, as :mod:`~vaco_jax.analysis.stats`
does, so the numbers do not depend on the order the cells are computed in.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Callable, Iterable, Sequence

import numpy as np

from vaco_jax.analysis import stats, tables
from vaco_jax.names import KNOBS

Order = Callable[[Iterable[str]], list]

_HPARAMS = tuple(KNOBS)  # traced knobs a cell may carry as columns
PROFILE_TAUS = 80  # thresholds of a performance profile


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


# ----------------------------------------------------------------------------- (6) interval estimates

@dataclasses.dataclass(frozen=True)
class Intervals:
    """``points[(method, lag, aggregate)] = (point, low, high)`` of one score and normalisation."""

    normalization: str
    n_tasks: int
    aggregates: list[str]
    lags: list[int]
    methods: list[str]
    points: dict


def interval_estimates(summary: Sequence[dict], score: str, normalization: str | None = None,
                       order: Order = sorted) -> Intervals:
    """The summary's finite points of ``score`` at ``normalization`` (default: normalised when the
    summary has it, else raw); ``points`` is empty when there are none. With one task the median (that
    task's mean) is left out of ``aggregates``."""
    rows = [r for r in summary if r["score"] == score and _finite(r.get("point"))]
    norms = {r["normalization"] for r in rows}
    normalization = normalization or ("normalized" if "normalized" in norms else "raw")
    rows = [r for r in rows if r["normalization"] == normalization]
    n_tasks = max((int(r["n_tasks"]) for r in rows), default=0)
    aggs = [a for a in ("median", "iqm", "mean", "optimality_gap") if any(r["aggregate"] == a for r in rows)]
    if n_tasks == 1 and "median" in aggs:
        aggs.remove("median")  # the median of one per-task mean is that mean
    points: dict = {}
    for r in rows:
        points.setdefault((r["method"], int(r["lag_depth"]), r["aggregate"]),
                          tuple(float(r[k]) for k in ("point", "low", "high")))
    return Intervals(normalization, n_tasks, aggs, sorted({int(r["lag_depth"]) for r in rows}),
                     order({r["method"] for r in rows}), points)


# ----------------------------------------------------------------------------- (7) probability of improvement

def probability_of_improvement(rows: Sequence[dict], method: str, score: str, reps: int, seed: int = 0,
                               order: Order = sorted) -> dict[int, list[dict]]:
    """``{lag depth: [{"method": other, "point", "low", "high"}, ...]}``: P(``method`` > other) over the
    kept runs of each task (:func:`stats.probability_of_improvement_ci`), at each lag depth where
    ``method`` and another method both have runs; others in ``order``."""
    tasks = sorted({r["env"] for r in rows})
    lags = sorted({int(r["lag_depth"]) for r in rows if r["method"] == method})
    by_lag = {}
    for lag in lags:
        x = tables.clean_cell(rows, method, lag, tasks, score)[0]
        others = order({r["method"] for r in rows if r["method"] != method and int(r["lag_depth"]) == lag})
        res = []
        for o in others:
            y = tables.clean_cell(rows, o, lag, tasks, score)[0]
            if x.shape[0] and y.shape[0]:
                p, lo, hi = stats.probability_of_improvement_ci(x, y, reps=reps, seed=seed)
                res.append({"method": o, "point": p, "low": lo, "high": hi})
        if res:
            by_lag[lag] = res
    return by_lag


# ----------------------------------------------------------------------------- (8) performance profiles

@dataclasses.dataclass(frozen=True)
class Cells:
    """``cells[(method, lag)]``: a cell's kept runs x tasks, normalised to synchronous PPO-Clip
    (``normalised``) or raw (one task and no reference)."""

    tasks: list[str]
    normalised: bool
    lags: list[int]
    methods: list[str]
    cells: dict


def normalised_cells(rows: Sequence[dict], score: str, random: dict | None, order: Order = sorted) -> Cells | None:
    """Each (method, lag depth) cell's kept runs (:func:`tables.clean_cell`), normalised with
    :func:`tables.reference_scores`; raw with one task and no reference; None with several tasks and no
    reference (nothing to pool them with). Cells with no run left are absent."""
    tasks = sorted({r["env"] for r in rows})
    refs = tables.reference_scores(rows, tasks, score, random)
    if refs is None and len(tasks) > 1:
        return None
    lags = sorted({int(r["lag_depth"]) for r in rows})
    methods = order({r["method"] for r in rows})
    cells = {}
    for lag in lags:
        for m in methods:
            kept = tables.clean_cell(rows, m, lag, tasks, score)[0]
            if kept.shape[0]:
                cells[(m, lag)] = stats.normalize_scores(kept, *refs) if refs is not None else kept
    return Cells(tasks, refs is not None, lags, methods, cells)


@dataclasses.dataclass(frozen=True)
class Profiles:
    """``curves[(method, lag)] = (profile, low, high)`` at the thresholds ``taus``; ``lags``: those with a curve."""

    taus: np.ndarray
    lags: list[int]
    curves: dict


def profile_taus(cells: dict, n: int = PROFILE_TAUS) -> np.ndarray:
    """``n`` thresholds spanning every kept score of ``cells``, 5% of the range beyond each end."""
    values = np.concatenate([v.ravel() for v in cells.values()])
    lo_v, hi_v = float(values.min()), float(values.max())
    pad = 0.05 * (hi_v - lo_v or 1.0)
    return np.linspace(lo_v - pad, hi_v + pad, n)


def performance_profiles(cells: Cells, reps: int, seed: int = 0) -> Profiles:
    """The fraction of runs x tasks above each threshold per cell, with pointwise CIs
    (:func:`stats.performance_profile_ci`); ``cells.cells`` must hold at least one cell."""
    taus = profile_taus(cells.cells)
    curves = {}
    for lag in cells.lags:
        for m in cells.methods:
            if (m, lag) in cells.cells:
                curves[(m, lag)] = stats.performance_profile_ci(cells.cells[(m, lag)], taus, reps=reps, seed=seed)
    return Profiles(taus, [b for b in cells.lags if any(k[1] == b for k in cells.cells)], curves)


# ----------------------------------------------------------------------------- (9) IQM sample efficiency

def _is_diverged(value) -> bool:
    return value in (True, 1, "True", "true", "1")


def curve_cells(curves: Sequence[dict]):
    """{(method, lag, task): {seed-ish cell key: {chunk: row}}} of non-diverged runs."""
    cells: dict = defaultdict(lambda: defaultdict(dict))
    for r in curves:
        key = (r.get("seed"), *(r.get(h) for h in _HPARAMS), r.get("lag_model"))
        cells[(r["method"], int(r["lag_depth"]), r["env"])][key][int(r["chunk"])] = r
    for cell in cells.values():
        for key in [k for k, ch in cell.items() if any(_is_diverged(r.get("diverged")) for r in ch.values())]:
            del cell[key]
    return cells


@dataclasses.dataclass(frozen=True)
class IqmCurves:
    """``series[(method, lag)] = (env steps, IQM, low, high)`` (lists, one entry per evaluation); ``lags``
    and ``methods``: every one the curve rows hold, with or without a series."""

    normalised: bool
    lags: list[int]
    methods: list[str]
    series: dict


def _iqm_series(per_task: list, refs, reps: int, seed: int):
    chunks = sorted(set.intersection(*[{c for run in pt.values() for c in run} for pt in per_task]))
    xs, pts, los, his = [], [], [], []
    for c in chunks:
        cols = [np.array([float(run[c]["eval_return"]) for _, run in sorted(pt.items(), key=lambda kv: str(kv[0]))
                          if c in run])
                for pt in per_task]
        n = min(len(v) for v in cols)
        mat = np.stack([v[:n] for v in cols], axis=1)
        mat = mat[np.all(np.isfinite(mat), axis=1)]
        if not mat.shape[0]:
            continue
        if refs is not None:
            mat = stats.normalize_scores(mat, *refs)
        p, lo, hi = stats.stratified_bootstrap_ci(mat, stats.aggregate_iqm, reps=reps, seed=seed)
        xs.append(np.mean([float(run[c]["env_steps"]) for pt in per_task for run in pt.values() if c in run]))
        pts.append(p), los.append(lo), his.append(hi)
    return xs, pts, los, his


def iqm_curves(curves: Sequence[dict], rows: Sequence[dict], random: dict | None, reps: int, seed: int = 0,
               order: Order = sorted) -> IqmCurves | None:
    """IQM over runs x tasks of the eval return at each evaluation that every task's runs reached, with
    stratified bootstrap CIs; normalised per task with the final-score reference
    (:func:`tables.reference_scores` of ``rows``), raw with one task and no reference, None with several
    tasks and no reference. ``curves``: rows with a finite ``eval_return``; diverged runs are left out."""
    tasks = sorted({r["env"] for r in rows})
    refs = tables.reference_scores(rows, tasks, "final_eval_return", random)
    if refs is None and len(tasks) > 1:
        return None
    cells = curve_cells(curves)
    lags = sorted({k[1] for k in cells})
    methods = order({k[0] for k in cells})
    series = {}
    for lag in lags:
        for m in methods:
            per_task = [cells.get((m, lag, t), {}) for t in tasks]
            if not all(per_task):
                continue
            xs, pts, los, his = _iqm_series(per_task, refs, reps, seed)
            if xs:
                series[(m, lag)] = (xs, pts, los, his)
    return IqmCurves(refs is not None, lags, methods, series)


# ----------------------------------------------------------------------------- (5) forward lag

def forward_lag_cells(rows: Sequence[dict], score: str):
    """``(scores, n_diverged, n_missing)``, each a defaultdict keyed by (method, lag depth, E, M): the
    scores of the runs kept, and the counts of diverged runs and of runs with no value of ``score``."""
    cell = defaultdict(list)
    n_div, n_miss = defaultdict(int), defaultdict(int)
    for r in rows:
        key = (r["method"], int(r["lag_depth"]), int(r["num_epochs"]), int(r["num_minibatches"]))
        if _is_diverged(r.get("diverged")):
            n_div[key] += 1
        elif not _finite(r.get(score)):
            n_miss[key] += 1
        else:
            cell[key].append(float(r[score]))
    return cell, n_div, n_miss


def mean_se(vals: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for one value, NaN for none)."""
    a = np.asarray(vals, float)
    if not len(a):
        return float("nan"), float("nan")
    return float(a.mean()), (float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else 0.0)
