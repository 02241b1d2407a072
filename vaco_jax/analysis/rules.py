"""Decision rules that treat every method alike (the locomotion study's; docs/evaluation.md, "Rules").

Scores are per-task normalised (:func:`normalise`: a uniform-random policy = 0, synchronous PPO-Clip =
1; locomotion returns can be negative, so never a raw ratio). Every rule returns a point estimate, a
percentile-bootstrap interval and a verdict read from the interval alone:

* ``holds`` when the whole interval clears the threshold on the claimed side (its *lower* bound for a
  claim "greater than"), ``fails`` when the whole interval lies on the other side, ``inconclusive``
  when it straddles (:func:`verdict`);
* an equivalence (e.g. A-3PO vs decoupled-recompute) by a margin fixed before the runs: equivalent
  when the interval of the difference lies inside ``(-margin, margin)``, not equivalent when it lies
  wholly outside, else inconclusive (:func:`equivalence`).

The bootstrap is stratified: each task's runs are resampled only from that task's own runs, and each
sample (a method at a lag depth) independently of the others. Its replicate count and seed are fixed
(the protocol's); :func:`stability` reports how often a verdict survives other bootstrap seeds.
A family of primary comparisons is corrected by Holm's step-down procedure (:func:`holm`) on one-sided
bootstrap p-values.

Every array argument of scores is ``(runs, tasks)``: runs of one method at one lag depth, tasks in the
same column order everywhere.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

REPS = 2000
SEED = 0
CONFIDENCE = 0.95
VERDICTS = ("holds", "fails", "inconclusive")


def _scores(x, name: str) -> np.ndarray:
    a = np.asarray(x, np.float64)
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"{name} must be a (runs, tasks) array with at least one of each; got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds non-finite scores: leave diverged runs out first (they are reported "
                         "as diverged, never averaged)")
    return a


def normalise(raw, random_score, ppo_score) -> np.ndarray:
    """``(raw - random) / (ppo - random)`` per task: 0 = uniform-random policy, 1 = synchronous PPO-Clip.

    ``random_score`` and ``ppo_score``: one number per task. A task whose PPO-Clip reference does not
    beat the random one cannot be normalised: a ValueError names it."""
    raw = np.asarray(raw, np.float64)
    lo, hi = np.asarray(random_score, np.float64), np.asarray(ppo_score, np.float64)
    bad = np.nonzero(~(hi > lo))[0]
    if bad.size:
        raise ValueError(f"task column(s) {bad.tolist()}: the PPO-Clip reference {hi[bad].tolist()} does not exceed "
                         f"the random one {lo[bad].tolist()}; the normalisation is undefined there")
    return (raw - lo) / (hi - lo)


def verdict(low: float, high: float, threshold: float, side: str = "greater") -> str:
    """The verdict an interval gives for "the statistic is ``side`` than ``threshold``" (strictly)."""
    if side not in ("greater", "less"):
        raise ValueError(f"side must be 'greater' or 'less'; got {side!r}")
    if not (np.isfinite(low) and np.isfinite(high)):
        return "inconclusive"
    if side == "greater":
        return "holds" if low > threshold else "fails" if high < threshold else "inconclusive"
    return "holds" if high < threshold else "fails" if low > threshold else "inconclusive"


def _resample_index(rng: np.random.Generator, runs: int, tasks: int, reps: int) -> np.ndarray:
    """[reps, runs, tasks]: run indices drawn within each task's own column."""
    return rng.integers(0, runs, size=(reps, runs, tasks))


def replicates(samples: Sequence[np.ndarray], statistic: Callable[..., np.ndarray], reps: int, seed) -> np.ndarray:
    """``statistic(*resampled)`` for ``reps`` stratified resamples of every sample, each independent;
    ``statistic`` takes arrays ``[reps, runs, tasks]`` and returns ``[reps]``."""
    rng = np.random.default_rng(seed)
    cols = None
    drawn = []
    for s in samples:
        runs, tasks = s.shape
        cols = np.arange(tasks)
        drawn.append(s[_resample_index(rng, runs, tasks, reps), cols])
    return np.asarray(statistic(*drawn), np.float64)


def interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    v = values[np.isfinite(values)]
    if not v.size:
        return float("nan"), float("nan")
    a = (1.0 - confidence) / 2.0
    return float(np.quantile(v, a)), float(np.quantile(v, 1.0 - a))


def pooled_mean(x: np.ndarray) -> np.ndarray:
    """Mean over tasks of each task's mean over runs (``[..., runs, tasks]`` -> ``[...]``)."""
    return np.mean(np.mean(x, axis=-2), axis=-1)


def _retention(at_b, at_1):
    den = pooled_mean(at_1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, pooled_mean(at_b) / np.where(den > 0, den, 1.0), np.nan)


def retention(at_b, at_1, reps: int = REPS, seed=SEED, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """A method's retention at lag depth B: its pooled mean normalised score at B over its own at B = 1,
    with a stratified bootstrap interval (``nan`` when the B = 1 score is not positive)."""
    at_b, at_1 = _scores(at_b, "at_b"), _scores(at_1, "at_1")
    point = float(_retention(at_b, at_1))
    lo, hi = interval(replicates([at_b, at_1], _retention, reps, seed), confidence)
    return point, lo, hi


def retention_difference(a_b, a_1, x_b, x_1, reps: int = REPS, seed=SEED,
                         confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Retention of method A minus retention of method X (four independent samples), with its interval."""
    samples = [_scores(s, n) for s, n in ((a_b, "a_b"), (a_1, "a_1"), (x_b, "x_b"), (x_1, "x_1"))]
    stat = lambda ab, a1, xb, x1: _retention(ab, a1) - _retention(xb, x1)
    point = float(stat(*samples))
    lo, hi = interval(replicates(samples, stat, reps, seed), confidence)
    return point, lo, hi


def _poi(x, y):
    """P(X > Y) + ½ P(X = Y) per task (all pairs of runs), averaged over tasks; ``[..., runs, tasks]``."""
    gt = (x[..., :, None, :] > y[..., None, :, :]).mean(axis=(-3, -2))
    eq = (x[..., :, None, :] == y[..., None, :, :]).mean(axis=(-3, -2))
    return np.mean(gt + 0.5 * eq, axis=-1)


def _draw_counts(rng: np.random.Generator, runs: int, tasks: int, reps: int) -> np.ndarray:
    """[reps, tasks, runs]: how often each run is drawn by :func:`_resample_index` (the same draw)."""
    idx = _resample_index(rng, runs, tasks, reps)
    flat = (np.arange(reps)[:, None, None] * tasks + np.arange(tasks)) * runs + idx
    return np.bincount(flat.ravel(), minlength=reps * tasks * runs).reshape(reps, tasks, runs).astype(np.float64)


def poi_replicates(x, y, reps: int, seed) -> np.ndarray:
    """``replicates([x, y], _poi, reps, seed)``, the same values bit for bit, from the draw counts: a
    resample's pair counts are ``counts_x · [x_i > y_j] · counts_y`` (integers, exact in float64), so the
    ``[reps, runs, runs, tasks]`` comparison of every resampled pair is never formed."""
    rng = np.random.default_rng(seed)
    (m, tasks), n = x.shape, y.shape[0]
    cx, cy = _draw_counts(rng, m, tasks, reps), _draw_counts(rng, n, tasks, reps)
    def pairs(relation: np.ndarray) -> np.ndarray:  # [m, n, tasks] -> [reps, tasks]
        return np.sum((cx[..., None, :] @ np.moveaxis(relation, -1, 0).astype(np.float64))[..., 0, :] * cy, axis=-1)

    gt, eq = pairs(x[:, None] > y[None]), pairs(x[:, None] == y[None])
    return np.mean(gt / (m * n) + 0.5 * (eq / (m * n)), axis=-1)


def head_to_head(a, x, reps: int = REPS, seed=SEED, confidence: float = CONFIDENCE) -> dict:
    """P(A > X) at one lag depth with its interval and a one-sided bootstrap p-value for "P(A > X) > ½"
    (the share of replicates at or below ½, plus one, over the replicates plus one)."""
    a, x = _scores(a, "a"), _scores(x, "x")
    values = poi_replicates(a, x, reps, seed)
    lo, hi = interval(values, confidence)
    p = (1.0 + np.sum(values <= 0.5)) / (len(values) + 1.0)
    return {"point": float(_poi(a, x)), "low": lo, "high": hi, "p_value": float(p)}


def holm(p_values: dict, alpha: float = 0.05) -> dict:
    """Holm's step-down correction: name -> (adjusted p-value, rejected?) at family-wise level ``alpha``."""
    names = sorted(p_values, key=lambda k: (p_values[k], k))
    m = len(names)
    out, running, stop = {}, 0.0, False
    for i, name in enumerate(names):
        running = max(running, min(1.0, (m - i) * float(p_values[name])))
        stop = stop or p_values[name] > alpha / (m - i)
        out[name] = (running, not stop)
    return out


def difference(a, x, reps: int = REPS, seed=SEED, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Pooled mean normalised score of A minus that of X, with its interval."""
    a, x = _scores(a, "a"), _scores(x, "x")
    stat = lambda u, v: pooled_mean(u) - pooled_mean(v)
    lo, hi = interval(replicates([a, x], stat, reps, seed), confidence)
    return float(stat(a, x)), lo, hi


def equivalence(a, x, margin: float, reps: int = REPS, seed=SEED, confidence: float = 0.90) -> dict:
    """Equivalence of A and X within ``margin`` (normalised score; two one-sided tests at 5% each as a
    90% interval): ``equivalent`` when the interval of A - X lies inside (-margin, margin), ``not
    equivalent`` when it lies wholly outside it, else ``inconclusive``."""
    if not margin > 0:
        raise ValueError(f"margin must be > 0; got {margin!r}")
    point, lo, hi = difference(a, x, reps, seed, confidence)
    if -margin < lo and hi < margin:
        call = "equivalent"
    elif lo >= margin or hi <= -margin:
        call = "not equivalent"
    else:
        call = "inconclusive"
    return {"point": point, "low": lo, "high": hi, "margin": margin, "verdict": call}


CEILING_TOLERANCE = 0.02  # the protocols' ceiling: within 2% of the random-to-best range below the best score


def at_ceiling(ppo_scores, best_score: float, random_score: float, tolerance: float = CEILING_TOLERANCE) -> bool:
    """A task is at its ceiling when synchronous PPO-Clip ends within ``tolerance`` of the best score any
    run reached (measured on the random-to-best range) in most of its runs."""
    s = np.asarray(ppo_scores, np.float64)
    span = best_score - random_score
    if not span > 0:
        return False
    return bool(np.mean(s >= best_score - tolerance * span) > 0.5)


def stability(rule: Callable[[int], str], seeds: Sequence[int] = tuple(range(1, 21)), reference_seed: int = SEED) -> float:
    """The share of bootstrap seeds whose verdict equals the reference seed's: ``rule(seed)`` -> verdict."""
    ref = rule(reference_seed)
    return float(np.mean([rule(s) == ref for s in seeds]))
