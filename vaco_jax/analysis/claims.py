"""The evidence issue's decision rule in code: each claim, its statistic and its verdict (``claims.csv``).

Scores are ``final_eval_return`` (the primary score), or ``auc_eval_return`` (the area under the
evaluation curve: the secondary reading, for tasks whose final return saturates) when asked for with
``score=``; ``B`` is the lag depth. Runs are cleaned as everywhere else
(:func:`vaco_jax.analysis.tables.clean_cell`: diverged runs and runs without a score are dropped, whole seeds
across tasks). Every interval is a 95% percentile bootstrap that resamples runs with replacement
within each task, independently for the two samples compared (``REPS`` replicates, fixed seed).
Runs pool over the *complete* tasks only (:func:`vaco_jax.analysis.tables.complete_tasks`, per design of
the study): a task on which a design has not finished every (method, lag depth) cell is left out of
that design's claims, and every part's ``rests_on`` names it ("left out, unfinished: ...").

**Ceiling.** On the final return, a task where synchronous PPO-Clip ends within ``rules.CEILING_TOLERANCE``
(2% of the random-to-best range) of the best final return any run of the study reached there, in
most of its runs, cannot tell methods apart: it leaves every part that reads the final return (its
``rests_on`` says "left out, at the ceiling"), and stays in the parts that do not read the score and
in every part on the area under the curve (``ceiling_tasks``).

Verdicts: ``holds``, ``fails``, ``inconclusive`` or ``no data`` (a method, lag depth, column or
reference the claim needs is absent; never an error). A claim with several parts gets one row per
part (ids ``1a``, ``1b`` ...) and one row for the whole claim (``1``): it fails if a part fails,
holds if every part holds, is ``no data`` if every part is, and is inconclusive otherwise.

1. PPO-Clip, PPO-KL and SPO lose IQM as lag grows while VACO keeps >= 0.9 of its own B = 1 score
   at B = 16. ``1a`` VACO: ratio of IQMs, IQM(B=16) / IQM(B=1), of scores normalised to synchronous
   PPO-Clip (so the random score is subtracted); holds if its CI low >= ``KEEP_FRACTION``, fails if
   its CI high < ``KEEP_FRACTION``. ``1b``-``1d``: difference of IQMs, IQM(B=16) − IQM(B=1), of the
   same normalised scores (raw scores when the run has one task and no reference); holds if the CI
   high < 0, fails if the CI low > 0. The verdict is on the pooled runs; with several tasks each
   part's ``why`` also gives every task's own IQM ratio / difference (a point, no CI) and names the
   tasks where it goes against the claim (ratio < ``KEEP_FRACTION``; difference >= 0), because a
   pooled IQM trims a quarter of the runs at each end and, with few tasks, that can be one task whole.
2. VACO's filtered fraction (``2a``) and PPO-Clip's clip fraction (``2b``) grow with lag:
   probability of improvement P(fraction at B=16 > fraction at B=1) over the per-run diagnostic
   columns ``mean_filtered_fraction`` / ``mean_clip_fraction``; holds if CI low > 0.5, fails if
   CI high < 0.5.
3. A-3PO is within CI of decoupled PPO (recompute) at lower per-phase cost. ``3a``: P(A-3PO >
   decoupled) at the largest lag depth both have; holds if its CI contains 0.5 and is narrower
   than ``EQUIVALENCE_WIDTH``, fails if the CI excludes 0.5, else inconclusive (too wide to call).
   ``3b``: ratio of the mean learner milliseconds per phase, A-3PO / decoupled, CI over the
   interleaved rounds of ``learner_cost.csv`` (``experiments/study.py cost``: the part of a phase the
   methods differ in, timed alone); holds if CI high < 1, fails if CI low >= 1. Without that table,
   the same rule on mean seconds per cell-chunk (curves' ``seconds`` of a group's chunk divided by
   the group's cells; the first chunk, which includes compilation, left out when there are others),
   CI over the (task, chunk) samples.
4. Revised PPO-EWMA >= plain PPO-EWMA under mismatch (``4a``: P(revised > plain) at the largest
   lag depth > 1 both have; non-inferiority: holds if CI low >= 0.5 − ``NONINFERIORITY_MARGIN``,
   fails if CI high < 0.5); without its reset it degrades (``4b``: P(no reset > reset) for revised
   PPO-EWMA at that lag depth, the variant without reset being the rows whose ``EWMA_RESET_COLUMN``
   (the traced knob ``ewma_reset_threshold``, e.g. ``--sweep ewma_reset_threshold=0,0.5``) is 0: a
   threshold of 0 never resets; holds if CI high < 0.5, fails if CI low > 0.5; ``no data`` without
   such rows, and *not tested* (``no data``, saying why) when the reset never fired in the runs with it
   on — ``mean_ewma_resets`` 0 in every one — since then both variants are the same runs). The mismatch
   itself is the traced knob ``mismatch_strength`` (docs/lag.md).
5. Realign-only (``5a``) and filter-only (``5b``) VACO are each worse than full VACO at B = 16:
   P(VACO > variant); holds if CI low > 0.5, fails if CI high < 0.5.
6. VACO's edge over PPO-Clip at B = 16 is lag robustness, not only a larger step: P(VACO > PPO-Clip)
   at B = 16 on scores normalised to each method's *own* B = 1 score (``own_b1``); holds if CI low >
   0.5, fails if CI high < 0.5. The "why" text also gives P(VACO > PPO-Clip) at B = 1 and at B = 16
   (probability of improvement is computed per task, so it is the same on raw and on
   synchronous-PPO-normalised scores) to say whether the edge is a faster learner.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Callable

import numpy as np

from vaco_jax.analysis import tables

from vaco_jax.analysis import stats
from vaco_jax.analysis.results import (LEARNER_COST, check_design_finished, load_costs, load_curves,
                                       load_random_scores, load_scores, write_table)

SCORE = "final_eval_return"
# The scores a verdict can rest on: the primary (the final evaluation return) and the area under the
# evaluation curve, which tells methods apart when the final return saturates (docs/evaluation.md).
SCORES = ("final_eval_return", "auc_eval_return")
LOW_LAG, HIGH_LAG = 1, 16
KEEP_FRACTION = 0.9
EQUIVALENCE_WIDTH = 0.3
NONINFERIORITY_MARGIN = 0.1
EWMA_RESET_COLUMN = "ewma_reset_threshold"
EWMA_RESETS = "mean_ewma_resets"  # per-run diagnostic: resets per phase (0 in every run: the reset never acted)
REPS = 2000
CONFIDENCE = 0.95
VERDICTS = ("holds", "fails", "inconclusive", "no data")
COST_FILE = LEARNER_COST  # claim 3b's per-phase learner cost in a run directory (experiments/study.py cost)
COLUMNS = ("claim", "statement", "verdict", "statistic", "point", "ci_low", "ci_high", "rests_on", "why")


def _check_score(score: str) -> None:
    if score not in SCORES:
        raise ValueError(f"score={score!r}: allowed values are {', '.join(SCORES)}")


def _write(table: list[dict], out: str | None) -> None:
    """``table`` as ``claims.csv`` at ``out`` (atomically), when given."""
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        write_table(out, [{c: r.get(c, "") for c in COLUMNS} for r in table])


def _reset_off(row: dict) -> bool:
    """A row of revised PPO-EWMA run with its reset switched off (a threshold of 0 never fires)."""
    value = row.get(EWMA_RESET_COLUMN)
    try:
        return value is not None and value != "" and float(value) == 0.0
    except (TypeError, ValueError):
        return False


def _reset_on(row: dict) -> bool:
    return not _reset_off(row)


class Data:
    """Score rows, tasks, references and curves of the run directories, with cleaned cells."""

    def __init__(self, rows: list[dict], random: dict | None, curves: list[dict] | None = None,
                 reps: int = REPS, seed: int = 0, score: str = SCORE, costs: list[dict] | None = None,
                 left_out: dict[str, str] | None = None, at_ceiling: tuple[str, ...] = ()):
        _check_score(score)
        self.rows, self.random, self.curves, self.costs = rows, random, curves or [], costs or []
        # tasks left out as unfinished (tables.complete_tasks) -> what they lack, said in every part
        self.left_out = dict(left_out or {})
        # tasks left out of the score's parts because synchronous PPO-Clip sits at their ceiling on it
        self.at_ceiling = tuple(at_ceiling)
        self.tasks = sorted({r["env"] for r in rows})
        self.reps, self.seed, self.score = reps, seed, score
        self.ref = tables.reference_scores(rows, self.tasks, score, random) if rows else None

    def on_tasks_of(self, method: str) -> "Data":
        """The same data restricted to the tasks where ``method`` has rows (a design run on fewer tasks
        than another is compared on the tasks both cover, not dropped for the others); a task left out
        as unfinished is no longer mentioned when ``method`` was never run on it."""
        tasks = {r["env"] for r in self.rows if r["method"] == method}
        if tasks == set(self.tasks):
            return self
        curves = [c for c in self.curves if c.get("env") in tasks]
        return Data([r for r in self.rows if r["env"] in tasks], self.random, curves, reps=self.reps, seed=self.seed,
                    score=self.score, costs=[c for c in self.costs if c.get("env") in tasks],
                    left_out={t: v for t, v in self.left_out.items() if t in tasks}, at_ceiling=self.at_ceiling)

    def has(self, method: str, lag: int, where: Callable | None = None) -> bool:
        return any(r["method"] == method and int(r["lag_depth"]) == lag and (where is None or where(r))
                   for r in self.rows)

    def lags(self, method: str, where: Callable | None = None) -> set[int]:
        return {int(r["lag_depth"]) for r in self.rows if r["method"] == method and (where is None or where(r))}

    def cell(self, method: str, lag: int, column: str | None = None, where: Callable | None = None):
        """(kept runs x tasks, n_diverged, n_missing) of ``column`` (default: the score)."""
        return tables.clean_cell(self.rows, method, lag, self.tasks, column or self.score, where=where)

    def normalised(self, method: str, lag: int, where: Callable | None = None):
        """Scores normalised to synchronous PPO-Clip; raw with one task and no reference; else None."""
        kept, n_div, n_miss = self.cell(method, lag, where=where)
        if self.ref is not None:
            return stats.normalize_scores(kept, *self.ref), n_div, n_miss, "normalised to sync PPO-Clip"
        if len(self.tasks) == 1:
            return kept, n_div, n_miss, "raw (one task, no reference)"
        return None, n_div, n_miss, ""

    def own_b1(self, method: str, lag: int):
        ref = tables.own_b1_reference(self.rows, method, self.tasks, self.score, self.random)
        kept, n_div, n_miss = self.cell(method, lag)
        if ref is None:
            return None, n_div, n_miss
        return stats.normalize_scores(kept, *ref), n_div, n_miss

    def describe(self, parts: list[tuple[str, int, int, int]]) -> str:
        """'vaco B=16: 10 runs (1 diverged); ...; 5 tasks (a, b)'."""
        out = []
        for label, n, n_div, n_miss in parts:
            extra = ([f"{n_div} diverged"] if n_div else []) + ([f"{n_miss} no score"] if n_miss else [])
            out.append(f"{label}: {n} runs" + (f" ({', '.join(extra)} dropped)" if extra else ""))
        text = "; ".join(out) + f"; {len(self.tasks)} task(s) ({', '.join(self.tasks)})"
        left = "; ".join(f"{t} ({v})" for t, v in sorted(self.left_out.items()))
        text += f"; left out, unfinished: {left}" if left else ""
        return text + (f"; left out, at the ceiling on {self.score}: {', '.join(self.at_ceiling)}"
                       if self.at_ceiling else "")


def _row(claim, statement, verdict, statistic="", point=np.nan, low=np.nan, high=np.nan, rests_on="", why=""):
    assert verdict in VERDICTS, verdict
    return {"claim": claim, "statement": statement, "verdict": verdict, "statistic": statistic,
            "point": float(point), "ci_low": float(low), "ci_high": float(high), "rests_on": rests_on, "why": why}


def _no_data(claim, statement, statistic, why):
    return _row(claim, statement, "no data", statistic, why=why)


def _call(low, high, holds: Callable, fails: Callable) -> str:
    if not (np.isfinite(low) and np.isfinite(high)):
        return "inconclusive"
    if holds(low, high):
        return "holds"
    return "fails" if fails(low, high) else "inconclusive"


def _ci(x: float, lo: float, hi: float) -> str:
    return f"{x:.3g} [{lo:.3g}, {hi:.3g}]"


def combine(claim: str, statement: str, parts: list[dict]) -> dict:
    verdicts = [p["verdict"] for p in parts]
    if "fails" in verdicts:
        verdict = "fails"
    elif all(v == "holds" for v in verdicts):
        verdict = "holds"
    elif all(v == "no data" for v in verdicts):
        verdict = "no data"
    else:
        verdict = "inconclusive"
    why = "; ".join(f"{p['claim']}: {p['verdict']}" for p in parts)
    return _row(claim, statement, verdict, "parts " + ", ".join(p["claim"] for p in parts),
                rests_on="see the parts", why=why)


# ----------------------------------------------------------------------------- the claims

def _poi(d: Data, claim, statement, x_label, y_label, x, y, holds, fails, explain, stat_note=""):
    """A probability-of-improvement part: x = (matrix, n_div, n_miss) of the first sample, y of the second."""
    statistic = f"P({x_label} > {y_label}), {CONFIDENCE:.0%} CI{stat_note}"
    (xm, xd, xmi), (ym, yd, ymi) = x, y
    if xm.shape[0] == 0 or ym.shape[0] == 0:
        return _no_data(claim, statement, statistic, "no run left after dropping diverged runs and runs without "
                        "a score")
    p, lo, hi = stats.probability_of_improvement_ci(xm, ym, reps=d.reps, seed=d.seed)
    verdict = _call(lo, hi, holds, fails)
    return _row(claim, statement, verdict, statistic, p, lo, hi,
                d.describe([(x_label, xm.shape[0], xd, xmi), (y_label, ym.shape[0], yd, ymi)]),
                f"P = {_ci(p, lo, hi)}; {explain(verdict)}")


def _per_task(d: Data, x: np.ndarray, y: np.ndarray, op: str, bad: Callable[[float], bool], bad_text: str) -> str:
    """With several tasks, the IQM contrast of each task alone (points, no CI), and the tasks where it
    goes the other way: a pooled IQM trims a quarter of the runs at each end, which with few tasks can
    be one whole task, so the pooled verdict is read beside these. '' with one task."""
    if len(d.tasks) < 2:
        return ""
    points = {}
    for j, task in enumerate(d.tasks):
        a, b = stats.aggregate_iqm(x[:, j:j + 1]), stats.aggregate_iqm(y[:, j:j + 1])
        points[task] = a - b if op == "difference" else (a / b if b != 0 else np.nan)
    text = "; per task (IQM " + op + ", point): " + ", ".join(f"{t} {v:.3g}" for t, v in points.items())
    odd = [t for t, v in points.items() if np.isfinite(v) and bad(v)]
    return text + (f"; {bad_text} on {', '.join(odd)}" if odd else "")


def claim_1(d: Data) -> list[dict]:
    parts = []
    st = (f"VACO keeps >= {KEEP_FRACTION} of its own B={LOW_LAG} IQM at B={HIGH_LAG}")
    stat = f"IQM(B={HIGH_LAG}) / IQM(B={LOW_LAG}), normalised scores, {CONFIDENCE:.0%} CI"
    if not (d.has("vaco", LOW_LAG) and d.has("vaco", HIGH_LAG)):
        parts.append(_no_data("1a", st, stat, f"vaco lacks B={LOW_LAG} or B={HIGH_LAG}"))
    elif d.ref is None:
        parts.append(_no_data("1a", st, stat, "no reference (random_scores.json or ppo_clip at B=1 missing), so "
                              "the random score cannot be subtracted"))
    else:
        hi_m, hd, hm, _ = d.normalised("vaco", HIGH_LAG)
        lo_m, ld, lm, _ = d.normalised("vaco", LOW_LAG)
        if hi_m.shape[0] == 0 or lo_m.shape[0] == 0:
            parts.append(_no_data("1a", st, stat, "no run left after dropping diverged / no-score runs"))
        else:
            r, lo, hi = stats.contrast_ci(hi_m, lo_m, "iqm", "ratio", reps=d.reps, seed=d.seed)
            v = _call(lo, hi, lambda a, b: a >= KEEP_FRACTION, lambda a, b: b < KEEP_FRACTION)
            why = {"holds": f"the whole CI is at or above {KEEP_FRACTION}",
                   "fails": f"the whole CI is below {KEEP_FRACTION}",
                   "inconclusive": f"the CI straddles {KEEP_FRACTION} (or the B=1 IQM is 0)"}[v]
            parts.append(_row("1a", st, v, stat, r, lo, hi,
                              d.describe([(f"vaco B={HIGH_LAG}", hi_m.shape[0], hd, hm),
                                          (f"vaco B={LOW_LAG}", lo_m.shape[0], ld, lm)]),
                              f"ratio = {_ci(r, lo, hi)}; {why}"
                              + _per_task(d, hi_m, lo_m, "ratio", lambda x: x < KEEP_FRACTION,
                                          f"below {KEEP_FRACTION}")))
    for cid, m in (("1b", "ppo_clip"), ("1c", "ppo_kl"), ("1d", "spo")):
        st = f"{m} loses IQM from B={LOW_LAG} to B={HIGH_LAG}"
        stat = f"IQM(B={HIGH_LAG}) − IQM(B={LOW_LAG}), {CONFIDENCE:.0%} CI"
        if not (d.has(m, LOW_LAG) and d.has(m, HIGH_LAG)):
            parts.append(_no_data(cid, st, stat, f"{m} lacks B={LOW_LAG} or B={HIGH_LAG}"))
            continue
        hi_m, hd, hm, kind = d.normalised(m, HIGH_LAG)
        lo_m, ld, lm, _ = d.normalised(m, LOW_LAG)
        if hi_m is None:
            parts.append(_no_data(cid, st, stat, "several tasks but no reference to normalise them"))
            continue
        if hi_m.shape[0] == 0 or lo_m.shape[0] == 0:
            parts.append(_no_data(cid, st, stat, "no run left after dropping diverged / no-score runs"))
            continue
        diff, lo, hi = stats.contrast_ci(hi_m, lo_m, "iqm", "difference", reps=d.reps, seed=d.seed)
        v = _call(lo, hi, lambda a, b: b < 0, lambda a, b: a > 0)
        why = {"holds": "the whole CI is below 0", "fails": "the whole CI is above 0 (it gains with lag)",
               "inconclusive": "the CI contains 0"}[v]
        parts.append(_row(cid, st, v, stat + f", scores {kind}", diff, lo, hi,
                          d.describe([(f"{m} B={HIGH_LAG}", hi_m.shape[0], hd, hm),
                                      (f"{m} B={LOW_LAG}", lo_m.shape[0], ld, lm)]),
                          f"difference = {_ci(diff, lo, hi)}; {why}"
                          + _per_task(d, hi_m, lo_m, "difference", lambda x: x >= 0, "no loss")))
    return [combine("1", "PPO-Clip, PPO-KL and SPO lose IQM as lag grows (B=16 vs B=1), while VACO keeps "
                         f">= {KEEP_FRACTION} of its own B=1 score at B=16", parts)] + parts


def _grows(claim, method, column, d: Data) -> dict:
    st = f"{method}'s {column} grows with lag (B={HIGH_LAG} > B={LOW_LAG})"
    stat = f"P({column} at B={HIGH_LAG} > at B={LOW_LAG})"
    if not (d.has(method, LOW_LAG) and d.has(method, HIGH_LAG)):
        return _no_data(claim, st, stat, f"{method} lacks B={LOW_LAG} or B={HIGH_LAG}")
    if not any(r["method"] == method and np.isfinite(tables._value(r, column)) for r in d.rows):
        return _no_data(claim, st, stat, f"scores.csv rows of {method} have no {column} column")
    return _poi(d, claim, st, f"B={HIGH_LAG}", f"B={LOW_LAG}", d.cell(method, HIGH_LAG, column),
                d.cell(method, LOW_LAG, column), lambda a, b: a > 0.5, lambda a, b: b < 0.5,
                lambda v: {"holds": "the whole CI is above 0.5", "fails": "the whole CI is below 0.5 (it shrinks)",
                           "inconclusive": "the CI contains 0.5"}[v], f" ({method})")


def claim_2(d: Data) -> list[dict]:
    parts = [_grows("2a", "vaco", "mean_filtered_fraction", d), _grows("2b", "ppo_clip", "mean_clip_fraction", d)]
    return [combine("2", "VACO's filtered fraction and PPO-Clip's clip fraction grow with lag (B=16 > B=1)",
                    parts)] + parts


def _largest_common_lag(d: Data, a: str, b: str, above: int = 0, where_a=None, where_b=None) -> int | None:
    common = sorted(x for x in d.lags(a, where_a) & d.lags(b, where_b) if x > above)
    return common[-1] if common else None


def seconds_per_cell_chunk(curves: list[dict], method: str) -> np.ndarray:
    """Seconds of a group's chunk divided by the group's cells (rows sharing task, method, chunk and
    seconds), the first chunk left out when there are later ones."""
    groups = defaultdict(int)
    for r in curves:
        if r.get("method") == method and np.isfinite(tables._value(r, "seconds")):
            groups[(r["env"], int(r["chunk"]), float(r["seconds"]))] += 1
    if not groups:
        return np.zeros(0)
    later = {k: n for k, n in groups.items() if k[1] > 0}
    use = later or groups
    return np.array([k[2] / n for k, n in sorted(use.items())], float)


def learner_costs(costs: list[dict], method: str, tasks=None) -> np.ndarray:
    """``method``'s learner milliseconds per phase as [rounds, tasks] (``learner_cost.csv`` rows), its
    columns the sorted ``tasks`` (default: every task it has; a task with fewer rounds is cut to the
    shortest); empty when it has none of them."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for c in sorted(costs, key=lambda c: (str(c["env"]), int(c["round"]))):
        if c.get("method") == method and np.isfinite(float(c["learner_ms"])):
            by_task[str(c["env"])].append(float(c["learner_ms"]))
    tasks = sorted(by_task) if tasks is None else sorted(tasks)
    if not tasks or any(t not in by_task for t in tasks):
        return np.zeros((0, 0))
    n = min(len(by_task[t]) for t in tasks)
    return np.array([by_task[t][:n] for t in tasks], float).T


def claim_3(d: Data) -> list[dict]:
    a, b = "a3po", "decoupled_recompute"
    st = f"A-3PO is within CI of decoupled PPO (recompute) (CI width < {EQUIVALENCE_WIDTH})"
    lag = _largest_common_lag(d, a, b)
    if lag is None:
        part_a = _no_data("3a", st, "P(a3po > decoupled_recompute)", "a3po and decoupled_recompute share no lag depth")
    else:
        part_a = _poi(d, "3a", st, f"a3po B={lag}", f"decoupled_recompute B={lag}", d.cell(a, lag), d.cell(b, lag),
                      lambda lo, hi: lo <= 0.5 <= hi and hi - lo < EQUIVALENCE_WIDTH,
                      lambda lo, hi: lo > 0.5 or hi < 0.5,
                      lambda v: {"holds": f"the CI contains 0.5 and is narrower than {EQUIVALENCE_WIDTH}",
                                 "fails": "the CI excludes 0.5: one is better",
                                 "inconclusive": f"the CI contains 0.5 but is {EQUIVALENCE_WIDTH} or wider"}[v],
                      f" at the largest common lag depth B={lag}")
    st = "A-3PO costs less per phase than decoupled PPO (recompute)"
    xa, xb = seconds_per_cell_chunk(d.curves, a), seconds_per_cell_chunk(d.curves, b)
    chunk = None
    if len(xa) and len(xb):
        chunk = stats.contrast_ci(xa[:, None], xb[:, None], "mean", "ratio", reps=d.reps, seed=d.seed)
    has = {m: {str(c["env"]) for c in d.costs if c.get("method") == m} for m in (a, b)}
    both = has[a] & has[b]  # tasks timed for both methods: the ratio pools these only
    ca, cb = learner_costs(d.costs, a, both), learner_costs(d.costs, b, both)
    lacking = sorted((has[a] | has[b]) - both)
    why_of = {"holds": "the whole CI is below 1", "fails": "the whole CI is at or above 1",
              "inconclusive": "the CI contains 1"}
    chunk_stat = "mean seconds per cell-chunk, a3po / decoupled_recompute, 95% CI"
    timed = bool(ca.size and cb.size)
    if not timed and chunk is None:
        part_b = _no_data("3b", st, chunk_stat, f"no task of {COST_FILE} timed for both methods and no curves.csv "
                                                "rows with a seconds column for both")
    else:
        if timed:  # the learner timed alone; the chunk ratio is quoted beside it
            stat = "mean learner ms per phase, a3po / decoupled_recompute, 95% CI"
            r, lo, hi = stats.contrast_ci(ca, cb, "mean", "ratio", reps=d.reps, seed=d.seed)
            lag_b = sorted({int(c["lag_depth"]) for c in d.costs if "lag_depth" in c})
            skipped = f"; left out, timed for one method only: {', '.join(lacking)}" if lacking else ""
            rests = f"{ca.shape[0]} interleaved rounds on {ca.shape[1]} task(s) at B={lag_b} ({COST_FILE}){skipped}"
            note = "" if chunk is None else (f" The whole chunk's seconds per cell (env stepping and evaluation "
                                             f"included) give {_ci(*chunk)}.")
        else:
            stat, (r, lo, hi) = chunk_stat, chunk
            rests = f"a3po: {len(xa)} group-chunks; decoupled_recompute: {len(xb)} group-chunks (curves.csv)"
            note = (f" A group runs its cells as one program, so this is the cost per cell only when the groups "
                    f"hold the same cells (no task of {COST_FILE} timed for both methods)")
        v = _call(lo, hi, lambda p, q: q < 1, lambda p, q: p >= 1)
        part_b = _row("3b", st, v, stat, r, lo, hi, rests, f"ratio = {_ci(r, lo, hi)}; {why_of[v]}.{note}")
    parts = [part_a, part_b]
    return [combine("3", "A-3PO is within CI of decoupled PPO (recompute), at lower per-phase cost", parts)] + parts


def claim_4(d: Data) -> list[dict]:
    rev, plain = "ppo_ewma_revised", "ppo_ewma"
    st = f"revised PPO-EWMA >= plain PPO-EWMA under mismatch (margin {NONINFERIORITY_MARGIN})"
    lag = _largest_common_lag(d, rev, plain, above=1, where_a=_reset_on)
    if lag is None:
        part_a = _no_data("4a", st, "P(revised > plain)", "ppo_ewma_revised and ppo_ewma share no lag depth > 1")
    else:
        part_a = _poi(d, "4a", st, f"{rev} B={lag}", f"{plain} B={lag}", d.cell(rev, lag, where=_reset_on),
                      d.cell(plain, lag), lambda lo, hi: lo >= 0.5 - NONINFERIORITY_MARGIN, lambda lo, hi: hi < 0.5,
                      lambda v: {"holds": f"CI low >= {0.5 - NONINFERIORITY_MARGIN:g} (non-inferior)",
                                 "fails": "the whole CI is below 0.5: plain is better",
                                 "inconclusive": f"CI low < {0.5 - NONINFERIORITY_MARGIN:g}"}[v],
                      f" at the largest common lag depth B={lag}")
    st = "revised PPO-EWMA degrades without its reset"
    stat = f"P(no reset > reset), rows whose {EWMA_RESET_COLUMN} is false vs the others"
    lag = None
    if any(r["method"] == rev and _reset_off(r) for r in d.rows):
        common = sorted(d.lags(rev, _reset_off) & d.lags(rev, _reset_on))
        lag = ([x for x in common if x > 1] or common or [None])[-1]
    fired = [tables._value(r, EWMA_RESETS) for r in d.rows if r["method"] == rev and _reset_on(r)
             and lag is not None and int(r["lag_depth"]) == lag]
    fired = [x for x in fired if np.isfinite(x)]
    if lag is None:
        part_b = _no_data("4b", st, stat, f"no ppo_ewma_revised rows with {EWMA_RESET_COLUMN} false (or none "
                          "sharing a lag depth with the reset variant)")
    elif fired and max(fired) == 0.0:
        part_b = _no_data("4b", st, stat, f"not tested: the reset never fired at B={lag} ({EWMA_RESETS} = 0 in all "
                          f"{len(fired)} runs with it on), so the runs with and without it are the same runs")
    else:
        part_b = _poi(d, "4b", st, f"no reset B={lag}", f"reset B={lag}", d.cell(rev, lag, where=_reset_off),
                      d.cell(rev, lag, where=_reset_on), lambda lo, hi: hi < 0.5, lambda lo, hi: lo > 0.5,
                      lambda v: {"holds": "the whole CI is below 0.5", "fails": "the whole CI is above 0.5",
                                 "inconclusive": "the CI contains 0.5"}[v])
    parts = [part_a, part_b]
    return [combine("4", "Revised PPO-EWMA >= plain PPO-EWMA under mismatch; without its reset it degrades",
                    parts)] + parts


def claim_5(d: Data) -> list[dict]:
    parts = []
    for cid, m in (("5a", "vaco_realign_only"), ("5b", "vaco_filter_only")):
        st = f"{m} is worse than full VACO at B={HIGH_LAG}"
        if not (d.has("vaco", HIGH_LAG) and d.has(m, HIGH_LAG)):
            parts.append(_no_data(cid, st, f"P(vaco > {m})", f"vaco or {m} lacks B={HIGH_LAG}"))
            continue
        dm = d.on_tasks_of(m)  # the ablation may cover fewer tasks than full VACO's runs
        parts.append(_poi(dm, cid, st, f"vaco B={HIGH_LAG}", f"{m} B={HIGH_LAG}", dm.cell("vaco", HIGH_LAG),
                          dm.cell(m, HIGH_LAG), lambda lo, hi: lo > 0.5, lambda lo, hi: hi < 0.5,
                          lambda v: {"holds": "the whole CI is above 0.5", "fails": "the whole CI is below 0.5",
                                     "inconclusive": "the CI contains 0.5"}[v]))
    return [combine("5", f"Realignment-only and filter-only VACO are each worse than full VACO at B={HIGH_LAG}",
                    parts)] + parts


def claim_6(d: Data) -> list[dict]:
    st = (f"VACO's edge over PPO-Clip at B={HIGH_LAG} is lag robustness: it keeps more of its own B={LOW_LAG} "
          "score")
    stat = f"P(vaco > ppo_clip) at B={HIGH_LAG}, own-B={LOW_LAG} normalised scores"
    need = [(m, b) for m in ("vaco", "ppo_clip") for b in (LOW_LAG, HIGH_LAG) if not d.has(m, b)]
    if need:
        return [_no_data("6", st, stat, "missing: " + ", ".join(f"{m} B={b}" for m, b in need))]
    xv, yv = d.own_b1("vaco", HIGH_LAG), d.own_b1("ppo_clip", HIGH_LAG)
    if xv[0] is None or yv[0] is None:
        return [_no_data("6", st, stat, "no random score or no B=1 run left to normalise by")]
    row = _poi(d, "6", st, f"vaco B={HIGH_LAG}", f"ppo_clip B={HIGH_LAG}", xv, yv,
               lambda lo, hi: lo > 0.5, lambda lo, hi: hi < 0.5, lambda v: "",
               f", scores normalised to each method's own B={LOW_LAG} mean")
    if row["verdict"] == "no data":
        return [row]
    edge = {}
    for b in (LOW_LAG, HIGH_LAG):
        x, y = d.cell("vaco", b)[0], d.cell("ppo_clip", b)[0]
        edge[b] = (stats.probability_of_improvement_ci(x, y, reps=d.reps, seed=d.seed)
                   if x.shape[0] and y.shape[0] else None)

    def txt(b):
        return _ci(*edge[b]) if edge[b] else "no data"

    low_edge = edge[LOW_LAG] is not None and edge[LOW_LAG][1] > 0.5
    high_edge = edge[HIGH_LAG] is not None and edge[HIGH_LAG][1] > 0.5
    v = row["verdict"]
    if v == "holds":
        why = "VACO keeps more of its own B=1 score than PPO-Clip does (own-B1 CI above 0.5): lag robustness"
        if low_edge:
            why += "; it is also ahead at B=1 (faster learner too)"
    elif v == "fails":
        why = "PPO-Clip keeps more of its own B=1 score than VACO does (own-B1 CI below 0.5)"
        if high_edge:
            why += "; VACO's edge at B=16 comes from a higher B=1 level (step size / faster learning), not robustness"
    else:
        why = "the own-B1 CI contains 0.5: robustness not shown either way"
        if high_edge and low_edge:
            why += "; VACO is ahead at both B=1 and B=16, consistent with a faster learner (step size)"
    row["why"] = (f"own-B1 P = {_ci(row['point'], row['ci_low'], row['ci_high'])}; P(vaco > ppo_clip) on "
                  f"synchronous-normalised scores: B={LOW_LAG} {txt(LOW_LAG)}, B={HIGH_LAG} {txt(HIGH_LAG)}; {why}")
    variants = sorted(m for m in {r["method"] for r in d.rows} if m.startswith(STEP_VARIANT_PREFIX))
    if not variants:
        return [row]
    row["claim"] = "6a"
    parts = [row]
    for letter, variant in zip("bcdefgh", variants):
        name = variant[len(STEP_VARIANT_PREFIX):]
        dv = d.on_tasks_of(variant)
        parts.append(_poi(dv, f"6{letter}", f"VACO beats PPO-Clip with a larger step ({name}) at B={HIGH_LAG}",
                          f"vaco B={HIGH_LAG}", f"{variant} B={HIGH_LAG}", dv.cell("vaco", HIGH_LAG),
                          dv.cell(variant, HIGH_LAG), lambda lo, hi: lo > 0.5, lambda lo, hi: hi < 0.5,
                          lambda v: {"holds": "a larger PPO-Clip step does not close the gap",
                                     "fails": "PPO-Clip with a larger step does better: the edge is step size",
                                     "inconclusive": "CI contains 0.5"}.get(v, ""))
                     if d.has(variant, HIGH_LAG) else
                     _no_data(f"6{letter}", f"VACO beats PPO-Clip ({name}) at B={HIGH_LAG}", "",
                              f"missing: {variant} B={HIGH_LAG}"))
    return parts + [combine("6", st, parts)]


CLAIMS = (claim_1, claim_2, claim_3, claim_4, claim_5, claim_6)
# Parts whose statistic does not read the score (diagnostic fractions; seconds per phase).
SCORE_FREE = ("2a", "2b", "3b")


def ceiling_tasks(rows: list[dict], random: dict | None, score: str = SCORE) -> list[str]:
    """The tasks at their ceiling on the final return (``tables.ceiling_tasks``):
    such a task cannot tell methods apart on the final return, so it leaves that score's parts (the area
    under the curve keeps it). Empty for any other score, or without a random score."""
    if score != SCORE or not random:
        return []
    return tables.ceiling_tasks(rows, random, score)


def _claim_rows(fn, rows: list[dict], random: dict | None, curves: list[dict], costs: list[dict],
                left_out: dict, reps: int, seed: int, score: str, ceiling: list[str]) -> list[dict]:
    """``fn``'s rows: its score-reading parts on the tasks below their ceiling, its ``SCORE_FREE`` parts
    on every task, each whole claim combined again from the parts it then has."""
    full = Data(rows, random, curves, reps=reps, seed=seed, score=score, costs=costs, left_out=left_out)
    drop = [t for t in ceiling if t in full.tasks]
    if not drop:
        return fn(full)
    keep = lambda r: r.get("env") not in drop  # noqa: E731
    kept = [r for r in rows if keep(r)]
    if kept:
        reduced = fn(Data(kept, random, [c for c in curves if keep(c)], reps=reps, seed=seed, score=score,
                          costs=[c for c in costs if keep(c)],
                          left_out={t: v for t, v in left_out.items() if t not in drop}, at_ceiling=tuple(drop)))
        note = f"left out at their ceiling on {score}: {', '.join(drop)}"
        reduced = [{**r, "why": f"{r['why']}; {note}"} if r["verdict"] == "no data" else r for r in reduced]
    else:
        note = f"every task is at its ceiling on {score} ({', '.join(drop)}): it cannot tell the methods apart"
        reduced = [{**r, "why": note} for r in fn(Data([], None))]
    free = {r["claim"]: r for r in fn(full) if r["claim"] in SCORE_FREE}
    merged = [free.get(r["claim"], r) for r in reduced]
    out = []
    for r in merged:
        if str(r["statistic"]).startswith("parts "):
            parts = [p for p in merged if len(p["claim"]) == len(r["claim"]) + 1 and p["claim"].startswith(r["claim"])]
            r = combine(r["claim"], r["statement"], parts)
        out.append(r)
    return out


def _mark_score(table: list[dict], score: str) -> list[dict]:
    """Name a secondary score in the statistic of every part that rests on it (the primary goes unnamed)."""
    if score == SCORE:
        return table
    for row in table:
        if str(row["claim"]).split(" ")[0] not in SCORE_FREE and not str(row["statistic"]).startswith("parts"):
            row["statistic"] = f"{row['statistic']}; score: {score}" if row["statistic"] else f"score: {score}"
    return table

# The study's layout (experiments/study.py): one run directory per design; each claim reads the designs
# that hold its methods, so that runs of one method under other settings never share a cell.
STUDY_SOURCES = {claim_1: ("lag",), claim_2: ("lag",), claim_3: ("proximal",), claim_4: ("mismatch",),
                 claim_5: ("lag", "ablation"), claim_6: ("lag", "step")}
# Claims evaluated again on another design alone (the same rule under other settings, e.g. claim 4 at a
# stronger mismatch): the rows' claim ids get the design's name, "4a [mismatch_strong]".
STUDY_REPEATS = {claim_4: ("mismatch_strong",)}


def study_designs() -> list[str]:
    """Every design directory the claims read (``STUDY_SOURCES`` and ``STUDY_REPEATS``), sorted."""
    return sorted({d for ds in list(STUDY_SOURCES.values()) + list(STUDY_REPEATS.values()) for d in ds})
# A design's runs of a method under another setting (a ``variant`` column, e.g. the ``step`` design's
# PPO-Clip with a larger step) enter the claims as methods of their own, ``<method>_<variant>``, so
# they never join the method's own cells; claim 6 compares VACO with every ``ppo_clip_*`` variant.
STEP_VARIANT_PREFIX = "ppo_clip_"


def _complete(rows: list[dict], curves: list[dict], costs: list[dict]) -> tuple[list, list, list, dict]:
    """Rows, curves and costs of the complete tasks only (tables.complete_tasks), and the others."""
    rows, left_out = tables.complete_tasks(rows)
    keep = lambda r: r.get("env") not in left_out  # noqa: E731
    return rows, [c for c in curves if keep(c)], [c for c in costs if keep(c)], left_out


def _design_rows(study_dir: str, design: str) -> tuple[list[dict], list[dict], dict, list[dict], dict]:
    """One design's score rows, curves, random scores and costs, on the tasks where it is complete
    (a task the design has not finished on is left out of it, and returned last; a finished design
    that lost a group's scores is an error, :func:`results.check_design_finished`)."""
    path = os.path.join(study_dir, design)
    if not os.path.exists(os.path.join(path, "run.json")):
        return [], [], {}, [], {}
    check_design_finished(path)
    rows = load_scores(path)
    try:
        curves = load_curves(path)
    except OSError:
        curves = []
    for r in rows + curves:  # a design's variants (a ``variant`` column) become methods of their own
        variant = r.get("variant")
        if isinstance(variant, str) and variant:
            r["method"] = f"{r['method']}_{variant}"
    rows, curves, costs, left_out = _complete(rows, curves, load_costs(path))
    return rows, curves, load_random_scores(path) or {}, costs, left_out


def evaluate_study(study_dir: str, reps: int = REPS, seed: int = 0, out: str | None = None,
                   score: str = SCORE) -> list[dict]:
    """Every claim's rows from the study's run directories (``STUDY_SOURCES``: each claim reads only
    the designs that hold its methods; ``STUDY_REPEATS``: claims evaluated again on another design
    alone, ids tagged with it); a claim whose designs have not run is ``no data``. ``score``:
    one of ``SCORES``, the per-run score the verdicts rest on."""
    _check_score(score)
    cache = {design: _design_rows(study_dir, design) for design in study_designs()}
    every = [r for rows, *_ in cache.values() for r in rows]
    random_all = {k: v for *_, rnd, _, _ in cache.values() for k, v in rnd.items()}
    ceiling = ceiling_tasks(every, random_all, score)
    table = []
    runs = []  # each claim on its designs, then again on each of its repeat designs alone
    for fn, designs in STUDY_SOURCES.items():
        runs += [(fn, designs, "")] + [(fn, (design,), f" [{design}]") for design in STUDY_REPEATS.get(fn, ())]
    for fn, designs, tag in runs:
        rows, curves, random, costs, notes = [], [], {}, [], {}
        for design in designs:
            if design not in cache:
                cache[design] = _design_rows(study_dir, design)
            r, c, rnd, cost, left = cache[design]
            rows, curves, random, costs = rows + r, curves + c, {**random, **rnd}, costs + cost
            for task, lacks in left.items():
                notes[task] = "; ".join(filter(None, [notes.get(task), f"no {', '.join(lacks)} in {design}"]))
        if not rows:  # the claim's own no-data rows (with its statements), saying which designs are missing
            note = f"no results in {', '.join(designs)} under {study_dir}"
            part = [{**r, "why": f"{note}; {r['why']}" if r["why"] else note} for r in fn(Data([], None))]
        else:
            rows = sorted(rows, key=tables._row_order)
            part = _claim_rows(fn, rows, random or None, curves, costs, notes, reps, seed, score, ceiling)
        table += [{**r, "claim": f"{r['claim']}{tag}"} for r in part]
    _mark_score(table, score)
    _write(table, out)
    return table


def evaluate(run_dirs, reps: int = REPS, seed: int = 0, out: str | None = None, score: str = SCORE) -> list[dict]:
    """Every claim's rows for one run directory or several (merged); writes ``out`` (a CSV path) when given.
    ``score``: one of ``SCORES``, the per-run score the verdicts rest on."""
    _check_score(score)
    rows = load_scores(run_dirs)
    rows.sort(key=tables._row_order)
    try:
        curves = load_curves(run_dirs)
    except OSError:
        curves = []
    rows, curves, costs, left_out = _complete(rows, curves, load_costs(run_dirs))
    random = load_random_scores(run_dirs)
    notes = {t: f"no {', '.join(lacks)}" for t, lacks in left_out.items()}
    ceiling = ceiling_tasks(rows, random, score)
    table = []
    for fn in CLAIMS:
        table += (_claim_rows(fn, rows, random, curves, costs, notes, reps, seed, score, ceiling) if rows
                  else [_no_data(fn.__name__.split("_")[1], "", "", "no scores.csv rows")])
    _mark_score(table, score)
    _write(table, out)
    return table
