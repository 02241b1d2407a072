"""The confirmatory rules of the step size x lag study's stage 2: every method at its one lag-robust
setting, fresh seeds, compared with PPO-Clip per lag and per lag model.

A row is one run: ``env``, ``arm`` (the method as the study names it, e.g. ``vaco_learner``),
``lag_model``, ``lag_depth``, ``seed``, ``diverged`` and its scores. Scores are normalised per task as
stage 1 normalises them: ``max(0, (score - random) / (reference - random))`` (:func:`normalised`), so a
collapsed run counts as the random policy and never outweighs the rest. A **diverged run scores the
floor** (0): leaving it out would judge a method that often diverges on its survivors only; it is
counted and reported (:func:`left_out`). A run with a missing score is left out and reported.

The rules (their numbers live in :class:`Rules`, which the stage's protocol section fixes):

* **Primary family**, Holm-corrected at ``alpha`` (two-sided bootstrap p-values):
  - per (lag model, B) and method X: P(X > reference), pooled over the tasks both ran
    (:func:`head_to_head_test`);
  - per method X: its retention (pooled mean normalised score at the highest B over B = 1, uniform lag)
    minus the reference's (:func:`retention_test`).
  A test's verdict (:func:`call`): ``equivalent`` when the 90% interval of the difference (pooled
  normalised score with ``margin``, or retention with ``retention_margin``) lies inside the margin; else
  ``better`` or ``worse`` (X against the reference) when Holm rejects, by the point's side; else
  ``inconclusive``. A difference smaller than the margin is what the protocol calls negligible, so a
  rejected test inside it is ``equivalent``. For the head-to-heads, better/worse is read on P(X > Y)
  (how often X's run beats the reference's) and equivalence on the mean normalised difference (how much
  it changes the score): the two can disagree in sign only when a few runs dominate a mean, and the
  row carries both.
* **Per task** beside the pooled rows: the same P(X > reference) on one task, its interval's verdict,
  and whether the task sits at its floor (both methods' seed-mean normalised score below ``floor``:
  P(X > Y) then measures noise) or its ceiling (``rules.at_ceiling``).
* **The lag's shape** (:func:`shape_dependence`): for each pair of methods at one B, the contrast
  (pooled normalised X - Y) under each lag model and its change between them, Holm over the pairs.
  A pair's change is negligible when its 90% interval lies inside the margin (as in the primary
  family); otherwise, when Holm rejects it, the pair **flips** if its contrast is decided (interval
  excludes 0) in opposite directions under the two models, else it **changes**. Overall: the **ranking
  changes** when some pair flips; **contrasts change** when some pair changes; **no change beyond the
  margin** when every pair is negligible; else **not resolved**.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from vaco_jax.analysis import rules, surfaces
from vaco_jax.analysis.tables import is_diverged

VERDICTS = ("better", "worse", "equivalent", "inconclusive")
# how a pooled test's bootstrap treats the tasks: 'fixed' (the committed rule: each task's runs resampled
# within it) or 'resampled' (two stages: the tasks drawn with replacement, then the runs within each drawn task)
TASK_RESAMPLING = ("fixed", "resampled")


@dataclasses.dataclass(frozen=True)
class Rules:
    """The numbers of stage 2's rules (fixed by its protocol section before its runs)."""

    reference: str = "ppo_clip"  # the arm every other is compared with
    margin: float = 0.1  # equivalence margin on the pooled normalised score (and on a shape change)
    retention_margin: float = 0.1  # equivalence margin on a difference of retentions
    alpha: float = 0.05  # Holm's family-wise level
    floor: float = 0.1  # a task is at its floor in a comparison when both seed-means are below this
    reps: int = 2000  # bootstrap replicates
    seed: int = 0  # bootstrap seed
    confidence: float = 0.95  # interval of P(X > Y) and of retention
    equivalence_confidence: float = 0.90  # two one-sided tests at 5%

    def __post_init__(self):
        for name in ("margin", "retention_margin", "floor"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Rules.{name} must be > 0; got {getattr(self, name)!r}")
        for name in ("alpha", "confidence", "equivalence_confidence"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"Rules.{name} must be in (0, 1); got {getattr(self, name)!r}")
        if int(self.reps) < 100:
            raise ValueError(f"Rules.reps must be >= 100; got {self.reps!r}")


def normalised(score: float, random: float, reference: float) -> float:
    """Stage 1's random-floored normalisation of one run's score (``surfaces.floored``)."""
    return surfaces.floored(float(score), random, reference)


def cells(rows: list[dict], score: str, norm: dict) -> dict:
    """``{(task, arm, lag_model, B): [normalised score per run, by seed]}``: a diverged run at the floor
    (0), a missing score left out (both counted by :func:`left_out`); ``norm``: ``{task: (random,
    reference)}``."""
    out: dict = {}
    for r in sorted(rows, key=lambda r: int(r["seed"])):
        if r["env"] not in norm:
            raise ValueError(f"row env {r['env']!r}: no normalisation; known: {sorted(norm)}")
        if not is_diverged(r) and not np.isfinite(float(r[score])):
            continue
        key = (r["env"], r["arm"], r["lag_model"], int(r["lag_depth"]))
        out.setdefault(key, []).append(0.0 if is_diverged(r) else normalised(float(r[score]), *norm[r["env"]]))
    return out


def left_out(rows: list[dict], score: str) -> dict:
    """``{(task, arm, lag_model, B): (diverged, missing)}`` for the cells with a diverged run (scored at
    the floor) or a missing score (left out)."""
    out: dict = {}
    for r in rows:
        d, m = is_diverged(r), not is_diverged(r) and not np.isfinite(float(r[score]))
        if d or m:
            key = (r["env"], r["arm"], r["lag_model"], int(r["lag_depth"]))
            a, b = out.get(key, (0, 0))
            out[key] = (a + d, b + m)
    return out


def sample(table: dict, tasks: list[str], arm: str, lag_model: str, b: int) -> np.ndarray | None:
    """``(runs, tasks)``: each task's first k runs by seed, k the smallest count over the tasks (only a
    missing score makes counts differ); None if one has none."""
    cols = [table.get((t, arm, lag_model, b), []) for t in tasks]
    k = min((len(c) for c in cols), default=0)
    return np.array([c[:k] for c in cols]).T if k else None


def shared_tasks(table: dict, needs: list[tuple[str, str, int]]) -> list[str]:
    """The tasks (sorted) where every ``(arm, lag_model, B)`` in ``needs`` has a run."""
    tasks = sorted({k[0] for k in table})
    return [t for t in tasks if all(table.get((t, *n)) for n in needs)]


def hierarchical_replicates(samples, statistic, reps: int, seed) -> np.ndarray:
    """``statistic(*resampled)`` for ``reps`` two-stage resamples: the task columns drawn with
    replacement, the same columns for every sample (they are compared task by task), then each drawn
    column's runs drawn from that task's own runs, each sample independently. ``statistic`` takes
    arrays ``[reps, runs, tasks]``, as ``rules.replicates``' does."""
    rng = np.random.default_rng(seed)
    tasks = samples[0].shape[1]
    cols = rng.integers(0, tasks, size=(reps, 1, tasks))
    drawn = [s[rng.integers(0, s.shape[0], size=(reps, s.shape[0], tasks)), cols] for s in samples]
    return np.asarray(statistic(*drawn), np.float64)


def _check_task_resampling(tasks: str) -> None:
    if tasks not in TASK_RESAMPLING:
        raise ValueError(f"tasks={tasks!r} is not valid; allowed values: {', '.join(TASK_RESAMPLING)}")


def two_sided(values: np.ndarray, null: float) -> float:
    v = values[np.isfinite(values)]
    below, above = np.sum(v <= null), np.sum(v >= null)
    return float(min(1.0, 2.0 * (1.0 + min(below, above)) / (len(v) + 1.0)))


def head_to_head_test(x: np.ndarray, y: np.ndarray, r: Rules, seed: int | None = None, tasks: str = "fixed") -> dict:
    """P(X > Y) pooled over tasks with its interval and a two-sided p-value against ½, and the pooled
    normalised-score difference X - Y with its 90% interval (for the equivalence call). ``tasks``
    (``TASK_RESAMPLING``): 'resampled' draws the tasks too (:func:`hierarchical_replicates`)."""
    _check_task_resampling(tasks)
    s = r.seed if seed is None else seed
    if tasks == "fixed":
        values = rules.poi_replicates(x, y, r.reps, s)
        d, dlo, dhi = rules.difference(x, y, r.reps, s, r.equivalence_confidence)
    else:
        values = hierarchical_replicates([x, y], rules._poi, r.reps, s)
        diff = lambda u, v: rules.pooled_mean(u) - rules.pooled_mean(v)
        d = float(diff(x, y))
        dlo, dhi = rules.interval(hierarchical_replicates([x, y], diff, r.reps, s), r.equivalence_confidence)
    lo, hi = rules.interval(values, r.confidence)
    return {"point": float(rules._poi(x, y)), "low": lo, "high": hi, "p_value": two_sided(values, 0.5),
            "null": 0.5, "difference": d, "difference_low": dlo, "difference_high": dhi}


def retention_test(x_b, x_1, y_b, y_1, r: Rules, seed: int | None = None, tasks: str = "fixed") -> dict:
    """Retention of X minus retention of Y (pooled mean at B over B = 1), its interval, a two-sided
    p-value against 0 and its 90% interval (for the equivalence call); ``tasks`` as in
    :func:`head_to_head_test`."""
    _check_task_resampling(tasks)
    s = r.seed if seed is None else seed
    samples = [x_b, x_1, y_b, y_1]
    stat = lambda ab, a1, xb, x1: rules._retention(ab, a1) - rules._retention(xb, x1)
    values = (rules.replicates if tasks == "fixed" else hierarchical_replicates)(samples, stat, r.reps, s)
    lo, hi = rules.interval(values, r.confidence)
    elo, ehi = rules.interval(values, r.equivalence_confidence)
    point = float(stat(*samples))
    return {"point": point, "low": lo, "high": hi, "p_value": two_sided(values, 0.0), "null": 0.0,
            "difference": point, "difference_low": elo, "difference_high": ehi}


def call(test: dict, rejected: bool, margin: float) -> str:
    """One primary test's verdict (module docstring): equivalence first, then Holm's rejection by side."""
    lo, hi = test["difference_low"], test["difference_high"]
    if np.isfinite(lo) and np.isfinite(hi) and -margin < lo and hi < margin:
        return "equivalent"
    if rejected:
        return "better" if test["point"] > test["null"] else "worse"
    return "inconclusive"


def at_floor(x: np.ndarray, y: np.ndarray, floor: float) -> list[bool]:
    """Per task column: both methods' seed-mean normalised score below ``floor``."""
    return [bool(a < floor and b < floor) for a, b in zip(x.mean(axis=0), y.mean(axis=0))]


def primary(rows: list[dict], score: str, norm: dict, arms: list[str], lag_cells: list[tuple[str, int]],
            retention_lags: tuple[int, int], r: Rules, seed: int | None = None, tasks: str = "fixed") -> list[dict]:
    """The primary family: a row per test with its point, interval, p-values (raw and Holm's) and verdict.

    ``lag_cells``: the (lag model, B) of the head-to-head tests; ``retention_lags``: (1, B_high) of the
    retention tests (uniform lag). A test with no shared task is a row with verdict ``no data`` and
    stays out of Holm's family. ``tasks`` (``TASK_RESAMPLING``): how the bootstrap treats the tasks."""
    _check_task_resampling(tasks)
    table = cells(rows, score, norm)
    tests, meta = {}, {}
    for x in [a for a in arms if a != r.reference]:
        for lag_model, b in lag_cells:
            ts = shared_tasks(table, [(x, lag_model, b), (r.reference, lag_model, b)])
            key = ("P(X > reference)", x, lag_model, b)
            meta[key] = ts
            if ts:
                xs, ys = sample(table, ts, x, lag_model, b), sample(table, ts, r.reference, lag_model, b)
                tests[key] = head_to_head_test(xs, ys, r, seed, tasks)
                tests[key]["at_floor"] = [t for t, f in zip(ts, at_floor(xs, ys, r.floor)) if f]
        b1, bh = retention_lags
        ts = shared_tasks(table, [(a, "uniform", b) for a in (x, r.reference) for b in (b1, bh)])
        key = ("retention X - reference", x, "uniform", bh)
        meta[key] = ts
        if ts:
            s = [sample(table, ts, a, "uniform", b) for a in (x, r.reference) for b in (bh, b1)]
            tests[key] = retention_test(*s, r, seed, tasks)
            tests[key]["at_floor"] = [t for t, f in zip(ts, at_floor(s[1], s[3], r.floor)) if f]
    adjusted = rules.holm({k: t["p_value"] for k, t in tests.items()}, r.alpha)
    out = []
    for key, ts in meta.items():
        test, arm, lag_model, b = key
        row = {"test": test, "arm": arm, "reference": r.reference, "lag_model": lag_model, "lag_depth": b,
               "tasks": " ".join(ts)}
        if key not in tests:
            out.append({**row, "verdict": "no data"})
            continue
        t = tests[key]
        p_holm, rejected = adjusted[key]
        out.append({**row, **{k: v for k, v in t.items() if k != "at_floor"}, "p_holm": p_holm,
                    "at_floor": " ".join(t["at_floor"]),
                    "verdict": call(t, rejected, r.retention_margin if test.startswith("retention") else r.margin)})
    return out


def per_task(rows: list[dict], score: str, norm: dict, arms: list[str], lag_cells: list[tuple[str, int]],
             r: Rules, ceiling: dict | None = None) -> list[dict]:
    """P(X > reference) on each task alone (exploratory: the interval's verdict against ½, no Holm), with
    the task's floor and ceiling flags (``ceiling``: ``{task: bool}``, from ``rules.at_ceiling``)."""
    table = cells(rows, score, norm)
    out = []
    for x in [a for a in arms if a != r.reference]:
        for lag_model, b in lag_cells:
            for t in shared_tasks(table, [(x, lag_model, b), (r.reference, lag_model, b)]):
                xs, ys = sample(table, [t], x, lag_model, b), sample(table, [t], r.reference, lag_model, b)
                h = head_to_head_test(xs, ys, r)
                out.append({"test": "P(X > reference)", "arm": x, "reference": r.reference, "lag_model": lag_model,
                            "lag_depth": b, "tasks": t, "point": h["point"], "low": h["low"], "high": h["high"],
                            "verdict": rules.verdict(h["low"], h["high"], 0.5),
                            "at_floor": t if at_floor(xs, ys, r.floor)[0] else "",
                            "at_ceiling": bool((ceiling or {}).get(t, False))})
    return out


def shape_dependence(rows: list[dict], score: str, norm: dict, arms: list[str], b: int,
                     models: tuple[str, str], r: Rules) -> dict:
    """Whether the ranking of methods at lag depth ``b`` depends on the lag's shape (``models``: e.g.
    ('uniform', 'fixed')): per pair, the contrast X - Y under each model (its interval) and its change
    from the first model to the second (four independent samples pooled over the tasks all four share;
    two-sided bootstrap p-value against 0, Holm over the pairs). ``overall`` (module docstring):
    ``ranking changes``, ``contrasts change``, ``no change beyond the margin`` or ``not resolved``;
    ``flips``: the pairs decided in opposite directions under the two models."""
    table = cells(rows, score, norm)
    m0, m1 = models
    pairs, tests = [], {}
    for x, y in itertools.combinations(arms, 2):
        name = f"{x} - {y}"
        ts = shared_tasks(table, [(a, m, b) for a in (x, y) for m in models])
        if not ts:
            pairs.append({"pair": name, "tasks": "", "verdict": "no data"})
            continue
        s = [sample(table, ts, a, m, b) for m in (m1, m0) for a in (x, y)]
        c = {m: rules.difference(*s[i:i + 2], r.reps, r.seed, r.confidence) for m, i in ((m1, 0), (m0, 2))}
        stat = lambda a, bb, c_, d: (rules.pooled_mean(a) - rules.pooled_mean(bb)
                                     - (rules.pooled_mean(c_) - rules.pooled_mean(d)))
        values = rules.replicates(s, stat, r.reps, r.seed)
        lo, hi = rules.interval(values, r.confidence)
        elo, ehi = rules.interval(values, r.equivalence_confidence)
        sign = {m: 1 if c[m][1] > 0 else -1 if c[m][2] < 0 else 0 for m in models}
        tests[name] = two_sided(values, 0.0)
        pairs.append({"pair": name, "tasks": " ".join(ts), f"contrast_{m0}": c[m0][0], f"contrast_{m1}": c[m1][0],
                      "change": float(stat(*s)), "low": lo, "high": hi, "p_value": tests[name],
                      "flips": sign[m0] * sign[m1] < 0, "within_margin": bool(-r.margin < elo and ehi < r.margin)})
    adjusted = rules.holm(tests, r.alpha) if tests else {}
    for p in pairs:
        if p["pair"] in adjusted:
            p["p_holm"], rejected = adjusted[p["pair"]]
            p["verdict"] = ("within margin" if p["within_margin"] else "flips" if p["flips"] and rejected else
                            "changes" if rejected else "inconclusive")
    decided = [p for p in pairs if p["verdict"] != "no data"]
    flips = [p["pair"] for p in decided if p["verdict"] == "flips"]
    if flips:
        overall = "ranking changes"
    elif any(p["verdict"] == "changes" for p in decided):
        overall = "contrasts change"
    elif decided and all(p["verdict"] == "within margin" for p in decided):
        overall = "no change beyond the margin"
    else:
        overall = "not resolved"
    return {"lag_depth": b, "models": list(models), "overall": overall, "flips": flips, "pairs": pairs}
