"""Aggregate metrics and bootstrap confidence intervals (docs/evaluation.md, "Evaluation protocol").

The docs ask for the aggregates "exactly as rliable defines them". rliable 1.2 itself fails to
import next to pandas 3, so everything here is reimplemented in plain numpy/scipy from the
definitions in Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical
Precipice" (NeurIPS 2021), and tested against hand-computed values (``tests/test_stats.py``).
No jax import: this module runs on the analysis side, after training.

Conventions
-----------
* A score array is shaped ``(runs, tasks)``: one row per seed, one column per task (env).
  Normalise first with :func:`normalize_scores` (docs/evaluation.md per-task normalisation, where the
  reference is the mean score of PPO-Clip at lag depth ``B = 1`` in the same sweep).
* Diverged runs (NaN / ±inf anywhere in the row) must be removed before aggregation:
  :func:`drop_diverged` drops *whole rows* (runs) that contain a non-finite value in any task, so
  the result stays rectangular. This is the simpler of the two options (the other being ragged
  per-task run lists); it can discard finite scores of the same seed on other tasks, which is
  why the number of dropped rows is returned and should be reported.
* Bootstrap CIs are percentile intervals over ``reps`` replicates drawn from a fixed RNG
  (``np.random.default_rng(seed)``). "Stratified" means runs are resampled with replacement
  independently *within each task* (a task's column only ever receives values from that same
  column). The replicate loop is vectorised in memory-bounded chunks; the result depends only on
  ``(scores.shape, reps, seed)`` and the data, so it is deterministic.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as _sstats

__all__ = [
    "AGGREGATES",
    "aggregate_iqm",
    "aggregate_mean",
    "aggregate_median",
    "aggregate_optimality_gap",
    "aggregate_with_cis",
    "contrast_ci",
    "drop_diverged",
    "normalize_scores",
    "performance_profile",
    "performance_profile_ci",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "stratified_bootstrap_ci",
]

# Upper bound on the number of array elements materialised per vectorised bootstrap chunk
# (~16 MiB of float64); keeps memory flat for large reps × runs × tasks.
_CHUNK_ELEMS = 1 << 21


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _as_scores(scores: Any, name: str = "scores") -> np.ndarray:
    """Validate a ``(runs, tasks)`` score array: 2-D, >= 1 run, >= 1 task, all finite."""
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array shaped (runs, tasks); got shape {arr.shape}"
        )
    if arr.shape[0] < 1:
        raise ValueError(f"{name} must have at least 1 run (row); got shape {arr.shape}")
    if arr.shape[1] < 1:
        raise ValueError(f"{name} must have at least 1 task (column); got shape {arr.shape}")
    n_bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
    if n_bad:
        raise ValueError(
            f"{name} contains {n_bad} non-finite value(s) (NaN/inf); drop diverged runs first "
            f"with vaco_jax.analysis.stats.drop_diverged({name})"
        )
    return arr


def _check_reps(reps: Any) -> int:
    if isinstance(reps, bool) or not isinstance(reps, (int, np.integer)) or reps < 1:
        raise ValueError(f"reps must be an integer >= 1 (docs/evaluation.md uses >= 2000); got {reps!r}")
    return int(reps)


def _check_confidence(confidence: Any) -> float:
    try:
        c = float(confidence)
    except (TypeError, ValueError):
        c = float("nan")
    if not (0.0 < c < 1.0):
        raise ValueError(
            f"confidence must be a float strictly between 0 and 1 (e.g. 0.95); got {confidence!r}"
        )
    return c


def _check_gamma(gamma: Any) -> float:
    try:
        g = float(gamma)
    except (TypeError, ValueError):
        g = float("nan")
    if not np.isfinite(g):
        raise ValueError(f"gamma must be a finite float (docs/evaluation.md uses 1.0); got {gamma!r}")
    return g


def _check_taus(taus: Any) -> np.ndarray:
    t = np.atleast_1d(np.asarray(taus, dtype=np.float64))
    if t.ndim != 1 or t.size == 0:
        raise ValueError(
            f"taus must be a scalar or a non-empty 1-D array of thresholds; got shape "
            f"{np.shape(taus)}"
        )
    if np.isnan(t).any():
        raise ValueError("taus must not contain NaN")
    return t


def _percentile_interval(values: np.ndarray, confidence: float) -> tuple[Any, Any]:
    """Percentile bootstrap interval over axis 0 of ``values``."""
    alpha = 1.0 - confidence
    lo, hi = np.percentile(values, [100.0 * alpha / 2.0, 100.0 * (1.0 - alpha / 2.0)], axis=0)
    return lo, hi


# --------------------------------------------------------------------------------------------
# Batched aggregate kernels: operate on the last two axes (runs, tasks) of an array shaped
# (..., runs, tasks), no validation. The public functions validate and call these.
# --------------------------------------------------------------------------------------------


def _median_b(s: np.ndarray) -> np.ndarray:
    return np.median(np.mean(s, axis=-2), axis=-1)


def _mean_b(s: np.ndarray) -> np.ndarray:
    return np.mean(np.mean(s, axis=-2), axis=-1)


def _iqm_b(s: np.ndarray) -> np.ndarray:
    flat = s.reshape(*s.shape[:-2], s.shape[-2] * s.shape[-1])
    return _sstats.trim_mean(flat, 0.25, axis=-1)


def _optimality_gap_b(s: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    return gamma - np.mean(np.minimum(s, gamma), axis=(-2, -1))


def _profile_b(s: np.ndarray, taus: np.ndarray) -> np.ndarray:
    # (..., runs, tasks, 1) > (K,) -> (..., runs, tasks, K) -> mean over runs and tasks -> (..., K)
    return np.mean(s[..., None] > taus, axis=(-3, -2))


def _poi_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # x: (..., m, T), y: (..., n, T). Pairwise over (i, j) -> (..., m, n, T).
    xi = x[..., :, None, :]
    yj = y[..., None, :, :]
    per_pair = (xi > yj).astype(np.float64) + 0.5 * (xi == yj)
    per_task = np.mean(per_pair, axis=(-3, -2))  # Mann–Whitney U / (m n), per task
    return np.mean(per_task, axis=-1)


# --------------------------------------------------------------------------------------------
# Public point aggregates (docs/evaluation.md "Aggregates, exactly as rliable defines them")
# --------------------------------------------------------------------------------------------


def aggregate_median(scores: Any) -> float:
    """Median over tasks of the per-task mean over runs (docs/evaluation.md "median").

    ``scores``: ``(runs, tasks)``. With an even number of tasks the median averages the two
    middle per-task means (``np.median``).
    """
    return float(_median_b(_as_scores(scores)))


def aggregate_mean(scores: Any) -> float:
    """Mean over tasks of the per-task mean over runs (docs/evaluation.md "mean")."""
    return float(_mean_b(_as_scores(scores)))


def aggregate_iqm(scores: Any) -> float:
    """Interquartile mean (docs/evaluation.md "IQM"): ``scipy.stats.trim_mean(all runs × tasks, 0.25)``.

    All ``runs * tasks`` scores are pooled; ``int(0.25 * n)`` of the lowest and of the highest
    are cut and the rest averaged.
    """
    return float(_iqm_b(_as_scores(scores)))


def aggregate_optimality_gap(scores: Any, gamma: float = 1.0) -> float:
    """Optimality gap (docs/evaluation.md): ``gamma − mean(min(x, gamma))`` over all runs × tasks.

    Scores above ``gamma`` are clipped to ``gamma`` and so never reduce the gap below 0. At
    ``gamma = 1`` on normalised (docs/evaluation.md) scores this is the "gap to synchronous PPO". Lower is better.
    """
    g = _check_gamma(gamma)
    return float(_optimality_gap_b(_as_scores(scores), g))


AGGREGATES: dict[str, Callable[[Any], float]] = {
    "median": aggregate_median,
    "iqm": aggregate_iqm,
    "mean": aggregate_mean,
    "optimality_gap": aggregate_optimality_gap,
}

_BATCHED: dict[Callable[..., Any], Callable[..., np.ndarray]] = {
    aggregate_median: _median_b,
    aggregate_mean: _mean_b,
    aggregate_iqm: _iqm_b,
    aggregate_optimality_gap: _optimality_gap_b,
}


def _batched_kernel(fn: Callable[..., Any]) -> Callable[[np.ndarray], np.ndarray] | None:
    """Vectorised kernel for one of this module's aggregates (or a ``functools.partial`` of
    :func:`aggregate_optimality_gap` fixing ``gamma``); ``None`` for anything else."""
    if isinstance(fn, functools.partial):
        if (
            fn.func is aggregate_optimality_gap
            and not fn.args
            and set(fn.keywords) <= {"gamma"}
        ):
            g = _check_gamma(fn.keywords.get("gamma", 1.0))
            return functools.partial(_optimality_gap_b, gamma=g)
        return None
    try:
        return _BATCHED.get(fn)
    except TypeError:  # unhashable callable
        return None


# --------------------------------------------------------------------------------------------
# Stratified bootstrap machinery
# --------------------------------------------------------------------------------------------


def _stratified_resamples(
    scores: np.ndarray, reps: int, rng: np.random.Generator, extra: int = 1
) -> Iterator[np.ndarray]:
    """Yield chunks shaped ``(c, runs, tasks)`` (total ``reps`` along axis 0) in which every
    task's runs are resampled with replacement from that task's own column only."""
    runs, tasks = scores.shape
    chunk = max(1, _CHUNK_ELEMS // max(1, runs * tasks * extra))
    cols = np.arange(tasks)
    done = 0
    while done < reps:
        c = min(chunk, reps - done)
        idx = rng.integers(0, runs, size=(c, runs, tasks))
        yield scores[idx, cols]  # out[b, i, t] = scores[idx[b, i, t], t]
        done += c


def _paired_resamples(xa: np.ndarray, ya: np.ndarray, reps: int, rng: np.random.Generator,
                      chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(x, y)`` chunks shaped ``(c, runs, tasks)`` (total ``reps``): both samples resampled
    within each task's own column, x's indices drawn before y's in every chunk."""
    (mx, tasks), my = xa.shape, ya.shape[0]
    cols = np.arange(tasks)
    done = 0
    while done < reps:
        c = min(chunk, reps - done)
        ix = rng.integers(0, mx, size=(c, mx, tasks))
        iy = rng.integers(0, my, size=(c, my, tasks))
        yield xa[ix, cols], ya[iy, cols]
        done += c


def _replicates(
    scores: np.ndarray,
    kernels: Sequence[Callable[[np.ndarray], np.ndarray] | None],
    fns: Sequence[Callable[..., Any]],
    reps: int,
    seed: Any,
) -> list[np.ndarray]:
    """Bootstrap replicate values, one array of shape ``(reps,)`` per aggregate. The same
    resamples are used for every aggregate in the list."""
    rng = np.random.default_rng(seed)
    out: list[list[np.ndarray]] = [[] for _ in fns]
    for res in _stratified_resamples(scores, reps, rng):
        for k, (kernel, fn) in enumerate(zip(kernels, fns)):
            if kernel is not None:
                out[k].append(np.asarray(kernel(res), dtype=np.float64).reshape(-1))
            else:
                out[k].append(np.array([float(fn(r)) for r in res], dtype=np.float64))
    return [np.concatenate(v) for v in out]


def stratified_bootstrap_ci(
    scores: Any,
    aggregate_fn: Callable[[np.ndarray], float],
    reps: int = 2000,
    confidence: float = 0.95,
    seed: Any = 0,
) -> tuple[float, float, float]:
    """Point estimate and stratified percentile-bootstrap CI of an aggregate (docs/evaluation.md).

    Each of ``reps`` replicates resamples the runs with replacement independently within each
    task (stratified by task) and evaluates ``aggregate_fn`` on the ``(runs, tasks)`` resample;
    ``(low, high)`` are the ``(1 − confidence)/2`` and ``(1 + confidence)/2`` percentiles of the
    replicate values. ``point`` is ``aggregate_fn(scores)`` on the original data. The RNG is
    ``np.random.default_rng(seed)``, so results are deterministic for a fixed seed.

    The module's own aggregates (and ``functools.partial(aggregate_optimality_gap, gamma=g)``)
    are evaluated vectorised over replicates; any other callable mapping a ``(runs, tasks)``
    array to a scalar works too, evaluated one replicate at a time on the same resamples.

    Raises ValueError for non-2-D ``scores``, zero runs/tasks, non-finite scores (drop diverged
    runs first with :func:`drop_diverged`), ``reps < 1`` or ``confidence`` outside (0, 1).
    Note the percentile interval need not contain ``point`` for very skewed replicate
    distributions.
    """
    arr = _as_scores(scores)
    reps = _check_reps(reps)
    confidence = _check_confidence(confidence)
    if not callable(aggregate_fn):
        raise ValueError(
            f"aggregate_fn must be callable, e.g. one of {sorted(AGGREGATES)}; got "
            f"{aggregate_fn!r}"
        )
    point = np.asarray(aggregate_fn(arr))
    if point.ndim != 0:
        raise ValueError(
            f"aggregate_fn must return a scalar for a (runs, tasks) array; got shape "
            f"{point.shape}"
        )
    (vals,) = _replicates(arr, [_batched_kernel(aggregate_fn)], [aggregate_fn], reps, seed)
    lo, hi = _percentile_interval(vals, confidence)
    return float(point), float(lo), float(hi)


def aggregate_with_cis(
    score_dict: Mapping[str, Any],
    metrics: Sequence[str] = ("median", "iqm", "mean", "optimality_gap"),
    reps: int = 2000,
    seed: Any = 0,
    confidence: float = 0.95,
) -> dict[str, dict[str, tuple[float, float, float]]]:
    """docs/evaluation.md aggregates with stratified percentile-bootstrap CIs for several methods.

    ``score_dict`` maps a method name to its ``(runs, tasks)`` scores (methods may have different
    run counts). Returns ``{method: {metric: (point, low, high)}}`` for each name in ``metrics``
    (keys of :data:`AGGREGATES`; optimality gap at ``gamma = 1``). Every method is bootstrapped
    with ``np.random.default_rng(seed)`` and, within a method, all metrics share the same
    resamples; each entry equals ``stratified_bootstrap_ci(scores, AGGREGATES[metric], reps,
    confidence, seed)``.
    """
    if isinstance(metrics, str):
        metrics = (metrics,)
    metrics = tuple(metrics)
    if not metrics:
        raise ValueError(f"metrics must name at least one of {sorted(AGGREGATES)}")
    unknown = [m for m in metrics if m not in AGGREGATES]
    if unknown:
        raise ValueError(f"metrics has unknown name(s) {unknown}; allowed: {sorted(AGGREGATES)}")
    reps = _check_reps(reps)
    confidence = _check_confidence(confidence)
    fns = [AGGREGATES[m] for m in metrics]
    kernels = [_batched_kernel(f) for f in fns]
    result: dict[str, dict[str, tuple[float, float, float]]] = {}
    for method, scores in score_dict.items():
        arr = _as_scores(scores, name=f"score_dict[{method!r}]")
        vals = _replicates(arr, kernels, fns, reps, seed)
        entry: dict[str, tuple[float, float, float]] = {}
        for m, fn, v in zip(metrics, fns, vals):
            lo, hi = _percentile_interval(v, confidence)
            entry[m] = (float(fn(arr)), float(lo), float(hi))
        result[method] = entry
    return result


# --------------------------------------------------------------------------------------------
# Probability of improvement (docs/evaluation.md, independent stratified bootstrap)
# --------------------------------------------------------------------------------------------


def _check_pair(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    xa = _as_scores(x, name="x")
    ya = _as_scores(y, name="y")
    if xa.shape[1] != ya.shape[1]:
        raise ValueError(
            f"x and y must have the same number of tasks (columns); got x {xa.shape} and "
            f"y {ya.shape}"
        )
    return xa, ya


def probability_of_improvement(x: Any, y: Any) -> float:
    """Average probability of improvement P(X > Y) (docs/evaluation.md, Agarwal et al. 2021).

    ``x``: ``(runs_x, tasks)``, ``y``: ``(runs_y, tasks)``, same tasks in the same column order
    (run counts may differ). Per task it is the Mann–Whitney statistic normalised by the number
    of pairs, ``mean_{i,j} ([x_i > y_j] + ½[x_i == y_j])``; the result is its mean over tasks.
    ``probability_of_improvement(x, y) + probability_of_improvement(y, x) == 1``.
    """
    xa, ya = _check_pair(x, y)
    return float(_poi_b(xa, ya))


def probability_of_improvement_ci(
    x: Any,
    y: Any,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: Any = 0,
) -> tuple[float, float, float]:
    """:func:`probability_of_improvement` with an *independent* stratified percentile-bootstrap CI.

    Each replicate resamples ``x``'s runs and ``y``'s runs with replacement, independently of
    each other and independently within each task. Returns ``(point, low, high)``; the RNG is
    ``np.random.default_rng(seed)``.
    """
    xa, ya = _check_pair(x, y)
    reps = _check_reps(reps)
    confidence = _check_confidence(confidence)
    rng = np.random.default_rng(seed)
    (mx, tasks), my = xa.shape, ya.shape[0]
    chunk = max(1, _CHUNK_ELEMS // (mx * my * tasks))
    vals = [_poi_b(x, y) for x, y in _paired_resamples(xa, ya, reps, rng, chunk)]
    lo, hi = _percentile_interval(np.concatenate(vals), confidence)
    return float(_poi_b(xa, ya)), float(lo), float(hi)


# --------------------------------------------------------------------------------------------
# Contrast of one aggregate between two samples (difference or ratio), independent bootstrap
# --------------------------------------------------------------------------------------------


def contrast_ci(
    x: Any,
    y: Any,
    aggregate: str = "iqm",
    op: str = "difference",
    reps: int = 2000,
    confidence: float = 0.95,
    seed: Any = 0,
) -> tuple[float, float, float]:
    """``agg(x) − agg(y)`` (``op="difference"``) or ``agg(x) / agg(y)`` (``op="ratio"``) with an
    independent stratified percentile-bootstrap CI.

    ``agg`` is one of :data:`AGGREGATES` (default IQM). Each replicate resamples ``x``'s runs and
    ``y``'s runs with replacement, independently of each other and within each task, exactly as
    :func:`probability_of_improvement_ci` does. Returns ``(point, low, high)``. For a ratio the
    point is ``nan`` when ``agg(y) == 0``; replicates with a zero denominator are left out of the
    interval (``nan`` bounds when every replicate has one).
    """
    xa, ya = _check_pair(x, y)
    reps = _check_reps(reps)
    confidence = _check_confidence(confidence)
    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate must be one of {sorted(AGGREGATES)}; got {aggregate!r}")
    if op not in ("difference", "ratio"):
        raise ValueError(f"op must be 'difference' or 'ratio'; got {op!r}")
    kernel = _BATCHED[AGGREGATES[aggregate]]

    def combine(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if op == "difference":
            return a - b
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)

    rng = np.random.default_rng(seed)
    (mx, tasks), my = xa.shape, ya.shape[0]
    chunk = max(1, _CHUNK_ELEMS // ((mx + my) * tasks))
    vals = [combine(kernel(x), kernel(y)) for x, y in _paired_resamples(xa, ya, reps, rng, chunk)]
    vals = np.concatenate(vals)
    vals = vals[np.isfinite(vals)]
    point = float(combine(kernel(xa), kernel(ya)))
    if not vals.size:
        return point, float("nan"), float("nan")
    lo, hi = _percentile_interval(vals, confidence)
    return point, float(lo), float(hi)


# --------------------------------------------------------------------------------------------
# Performance profiles (docs/evaluation.md)
# --------------------------------------------------------------------------------------------


def performance_profile(scores: Any, taus: Any) -> np.ndarray:
    """Run-score performance profile (docs/evaluation.md): for each threshold ``tau``, the fraction of all
    runs × tasks with score strictly greater than ``tau``.

    (For rectangular scores this equals rliable's mean over tasks of the per-task fraction of
    runs above ``tau``.) Returns an array shaped like ``np.atleast_1d(taus)``.
    """
    arr = _as_scores(scores)
    t = _check_taus(taus)
    return _profile_b(arr, t)


def performance_profile_ci(
    scores: Any,
    taus: Any,
    reps: int = 2000,
    seed: Any = 0,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`performance_profile` with pointwise stratified percentile-bootstrap CIs.

    Returns ``(profile, low, high)``, each shaped like ``np.atleast_1d(taus)``; the band is
    pointwise in ``tau`` (all thresholds share the same resamples).
    """
    arr = _as_scores(scores)
    t = _check_taus(taus)
    reps = _check_reps(reps)
    confidence = _check_confidence(confidence)
    rng = np.random.default_rng(seed)
    vals = np.concatenate(
        [_profile_b(res, t) for res in _stratified_resamples(arr, reps, rng, extra=t.size)]
    )
    lo, hi = _percentile_interval(vals, confidence)
    return _profile_b(arr, t), np.asarray(lo), np.asarray(hi)


# --------------------------------------------------------------------------------------------
# Normalisation and diverged runs (docs/evaluation.md)
# --------------------------------------------------------------------------------------------


def normalize_scores(
    raw: Any, random_score: Any, reference_score: Any, min_gap: float = 1e-6
) -> np.ndarray:
    """Per-task normalisation (docs/evaluation.md): ``(score − random) / (reference − random)``.

    ``raw``: scores whose last axis is tasks, usually ``(runs, tasks)``. ``random_score`` and
    ``reference_score``: shape ``(tasks,)``. In the terms of docs/evaluation.md ``random`` is a uniform-random
    policy's return and ``reference`` ("sync_ppo") the mean score of PPO-Clip at lag depth
    ``B = 1`` in the same sweep, so 1.0 = the synchronous baseline's level. Non-finite entries
    of ``raw`` (diverged runs) pass through unchanged in kind; use :func:`drop_diverged` later.

    Raises ValueError (naming the task index) when ``|reference − random| < min_gap`` — the
    the guard of docs/evaluation.md against ``sync_ppo − random ≈ 0``. A reference *below* random is allowed (the
    scale flips sign); the guard only rejects a vanishing denominator.
    """
    r = np.asarray(raw, dtype=np.float64)
    lo = np.asarray(random_score, dtype=np.float64)
    ref = np.asarray(reference_score, dtype=np.float64)
    if r.ndim < 1:
        raise ValueError(f"raw must have a trailing tasks axis; got shape {r.shape}")
    tasks = r.shape[-1]
    for name, a in (("random_score", lo), ("reference_score", ref)):
        if a.shape != (tasks,):
            raise ValueError(
                f"{name} must have shape (tasks,) = ({tasks},) to match raw {r.shape}; got "
                f"{a.shape}"
            )
        bad = np.flatnonzero(~np.isfinite(a))
        if bad.size:
            raise ValueError(f"{name} is non-finite for task index {int(bad[0])}")
    gap_min = float(min_gap)
    if not (gap_min >= 0.0):
        raise ValueError(f"min_gap must be >= 0; got {min_gap!r}")
    gap = ref - lo
    small = np.flatnonzero(np.abs(gap) < gap_min)
    if small.size:
        i = int(small[0])
        raise ValueError(
            f"cannot normalise task index {i}: |reference_score − random_score| = "
            f"{abs(gap[i]):.3g} < min_gap = {gap_min:g} (reference {ref[i]!r}, random {lo[i]!r})"
            + (f"; also task indices {small[1:].tolist()}" if small.size > 1 else "")
        )
    return (r - lo) / gap


def drop_diverged(scores: Any) -> tuple[np.ndarray, int]:
    """Drop diverged runs: remove every row (run) of a ``(runs, tasks)`` array that contains a
    non-finite value (NaN or ±inf) in *any* task. Returns ``(clean_scores, n_dropped_rows)``.

    Whole rows are dropped so the result stays rectangular and every aggregate here keeps its
    ``(runs, tasks)`` contract (the simpler alternative to ragged per-task run lists); the price
    is that a seed's finite scores on other tasks go too, so report ``n_dropped_rows``. If every
    row is dropped the result has shape ``(0, tasks)``, which the aggregates reject.
    """
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(
            f"scores must be a 2-D array shaped (runs, tasks); got shape {arr.shape}"
        )
    keep = np.all(np.isfinite(arr), axis=1)
    return arr[keep], int(arr.shape[0] - np.count_nonzero(keep))
