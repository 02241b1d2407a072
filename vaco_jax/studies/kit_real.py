"""The study kit's real-versus-simulated comparison: a real asynchronous actor-learner's runs, their
simulated counterparts, and the rule that says whether the simulator predicts them (docs/real_async.md).
Running them is ``kit_real_runs``'s; what they are compared by is here.

A **real run** (``real_dir``: ``OUT/real/<configuration>/<method>/seed<k>/``) is finished when its
``score.json`` exists; it holds ``REAL_TABLES``, among them the histogram of its consumed samples by age,
verified against its checksum (``run_histogram``). ``real_scores`` reads a configuration's runs back,
scored at the simulator's evaluation points (``real_score``).

A real configuration's **simulated counterparts** (``variant_weights``) are the ``ages`` lag model fed
its real runs' pooled histogram (``histogram``), a uniform lag of the nearest mean age (``uniform``) and
the histogram moved some versions older (``control``, a negative control), run as one lag sweep
(``kit_real_runs.run_sweep``); ``cells_of`` and ``realised_in`` read one counterpart's rows back.

**The comparison rule** (``verdict``): the simulator *predicts* a quantity when the bootstrap interval
of simulated - real lies inside +-margin, *differs* when the interval lies wholly outside, else it is
*inconclusive*; ``control_note`` says when the rule does not call every negative control *differs*.

``require_units`` keeps a report to units that have finished and hold their tables; ``unfinished`` and
``span`` give a plan's counts of units to go and its ranges of seeds. The sim-vs-real and deep-lag
studies are declarations on this module and ``kit_real_runs``; it imports no study module.
"""

from __future__ import annotations

import ast
import os

import numpy as np

from vaco_jax.core.config import ConfigError

REAL_TABLES = ("curve.csv", "record.csv", "age_histogram.csv")  # a finished real run's (score.json marks it)


# ----------------------------------------------------------------------------------- guards and plan counts
def require_units(dirs, marker: str, tables, stage: str) -> None:
    """``report``'s guard before it reads a number: every unit directory of ``dirs`` has finished (its
    ``marker`` exists) and holds every one of its ``tables``. A ConfigError naming the first unit not
    finished (and how many are not), else a ResultsError naming the tables gone, each one line."""
    from vaco_jax.analysis.results import ResultsError

    dirs = list(dirs)
    left = [d for d in dirs if not os.path.exists(os.path.join(d, marker))]
    if left:
        more = f" ({len(left)} of {len(dirs)} have not)" if len(left) > 1 else ""
        raise ConfigError(f"report: {left[0]} has not finished; run the '{stage}' stage first{more}")
    gone = [os.path.join(d, t) for d in dirs for t in tables if not os.path.exists(os.path.join(d, t))]
    if gone:
        shown = ", ".join(gone[:3]) + (f" and {len(gone) - 3} more" if len(gone) > 3 else "")
        raise ResultsError(f"report: {len(gone)} table(s) of finished units are missing: {shown}; restore them, or "
                           f"delete those units' directories and run the '{stage}' stage again")


def require_finished(path: str, stage: str) -> None:
    """A ConfigError naming the stage to run when the file a finished stage writes is missing."""
    if not os.path.exists(path):
        raise ConfigError(f"report: {os.path.dirname(path)} has not finished; run the '{stage}' stage first")


def unfinished(dirs, marker: str) -> int:
    """How many of the unit directories ``dirs`` have not finished (their ``marker`` is missing): a plan's count."""
    return sum(not os.path.exists(os.path.join(d, marker)) for d in dirs)


def span(seeds) -> str:
    """Seeds as a plan prints them: ``first..last`` for a run of more than two consecutive ones, else listed."""
    seeds = list(seeds)
    return f"{seeds[0]}..{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2 else \
        ", ".join(map(str, seeds))


# ----------------------------------------------------------------------------------- real runs
def real_dir(out: str, config: dict, method: str, seed: int) -> str:
    """A real run's directory: ``OUT/real/<configuration's name>/<method>/seed<k>``."""
    return os.path.join(out, "real", config["name"], method, f"seed{seed}")


def real_score(run_dir: str, num_evals: int) -> dict:
    """A real run's ``score.json`` with its scores taken at the simulator's evaluation points: the final
    return and AUC of its first ``num_evals`` evaluations (``curve.csv``). The simulator trains
    ``num_evals`` chunks of whole phases and leaves the remainder of the budget untrained; a record
    whose run also trained that remainder holds one more evaluation after it, which has no simulated
    counterpart and is left out here (FINDINGS.md says which records those are)."""
    from vaco_jax.analysis import results

    score = dict(results.read_json(os.path.join(run_dir, "score.json")))
    curve = results.read_table(os.path.join(run_dir, "curve.csv"))
    every = int(curve[0]["update"]) if curve else 0
    if len(curve) < num_evals or [int(r["update"]) for r in curve[:num_evals]] != [every * (k + 1)
                                                                                   for k in range(num_evals)]:
        raise ConfigError(f"{run_dir}/curve.csv: expected {num_evals} evaluations every {every} updates first, "
                          f"found updates {[r['update'] for r in curve]}")
    evals = np.array([float(r["eval_return"]) for r in curve[:num_evals]], float)
    score.update(final_eval_return=float(evals[-1]), auc_eval_return=float(np.mean(evals)),
                 scored_env_steps=int(curve[num_evals - 1]["env_steps"]),
                 diverged=bool(not np.all(np.isfinite(evals))))
    return score


def real_scores(out: str, c: dict, method: str, seeds, num_evals: int) -> list[dict]:
    """The real runs of ``c`` x ``method`` x ``seeds`` in order, each scored at the simulator's evaluation
    points (:func:`real_score`) once it is known to have finished (``require_finished``)."""
    runs = []
    for seed in seeds:
        where = real_dir(out, c, method, seed)
        require_finished(os.path.join(where, "score.json"), "real")
        runs.append(real_score(where, num_evals))
    return runs


def score_values(rows: list[dict], score: str = "auc_eval_return") -> np.ndarray:
    """The ``score`` of the runs that did not diverge (finite)."""
    x = np.array([float(r[score]) for r in rows if not r["diverged"]], float)
    return x[np.isfinite(x)]


# ----------------------------------------------------------------------------------- histograms of ages
def run_histogram(run_dir: str, checksum: bool = True) -> tuple[float, ...]:
    """A real run's consumed samples by age (its ``age_histogram.csv``), verified against the checksum
    beside it (every run writes one). A run written before its histogram carried one (``checksum=False``
    allows it: the sim-vs-real study's committed runs) is verified against the consumed batches of its
    checksummed ``record.csv`` instead. A ResultsError naming the file when it fails."""
    from vaco_jax.analysis import results
    from vaco_jax.driver.histogram import read_age_histogram

    path = os.path.join(run_dir, "age_histogram.csv")
    if checksum or os.path.exists(path + results.CHECKSUM_SUFFIX):
        return read_age_histogram(path, checksum=True)
    counts = read_age_histogram(path)
    if counts != record_histogram(run_dir):
        raise results.ResultsError(f"{path}: its counts differ from the consumed batches of the record.csv beside "
                                   "it (the file was changed after the run wrote it)")
    return counts


def record_histogram(run_dir: str) -> tuple[float, ...]:
    """A real run's consumed samples by age, from its record (``record.csv``: a row per batch), up to the
    oldest age consumed: what ``age_histogram.csv`` holds."""
    from vaco_jax.analysis import results

    consumed = [r for r in results.read_table(os.path.join(run_dir, "record.csv")) if r["fate"] == "consumed"]
    counts = np.bincount([int(r["age"]) for r in consumed], weights=[float(r["samples"]) for r in consumed])
    last = int(np.max(np.nonzero(counts)[0])) + 1 if counts.any() else 0
    return tuple(float(x) for x in counts[:last])


def pooled_histogram(out: str, c: dict, method: str, seeds, checksum: bool = False) -> tuple[float, ...]:
    """Consumed samples by age, summed over the finished real runs of ``c`` x ``method`` x ``seeds``, each
    verified (``run_histogram``; ``checksum``: every one must carry its checksum)."""
    total: np.ndarray = np.zeros(0)
    for seed in seeds:
        where = real_dir(out, c, method, seed)
        if not os.path.exists(os.path.join(where, "score.json")):
            raise ConfigError(f"sim: the real run {where} has not finished; run the 'real' stage first")
        h = np.asarray(run_histogram(where, checksum))
        total = np.pad(total, (0, max(0, len(h) - len(total)))) + np.pad(h, (0, max(0, len(total) - len(h))))
    return tuple(float(x) for x in total)


def pooled(arrays) -> np.ndarray | None:
    """Counts by age summed over histograms of different lengths (None ones left out); None when none."""
    arrays = [np.asarray(a, float) for a in arrays if a is not None]
    if not arrays:
        return None
    n = max(len(a) for a in arrays)
    return sum(np.pad(a, (0, n - len(a))) for a in arrays)


def mean_age(counts) -> float:
    """The mean age of samples counted by age (index = age); nan for None or no samples."""
    if counts is None:
        return float("nan")
    counts = np.asarray(counts, float)
    if np.sum(counts) <= 0:
        return float("nan")
    return float(np.dot(np.arange(len(counts)), counts) / np.sum(counts))


def weights_of(row: dict) -> tuple:
    """A row's ``age_weights`` (written as the text of a tuple in a table) as a tuple."""
    value = row["age_weights"]
    return tuple(ast.literal_eval(value)) if isinstance(value, str) else tuple(value)


# ----------------------------------------------------------------------------------- simulated counterparts
def variant_weights(hist: tuple[float, ...], shift: int) -> dict[str, tuple[float, ...]]:
    """The three simulated counterparts of one real histogram: ``histogram`` (its probabilities),
    ``uniform`` (weights 1, ..., 1 over the lag depth whose mean age (B - 1) / 2 is nearest its mean) and
    ``control`` (the histogram ``shift`` versions older)."""
    h = np.asarray(hist, float)
    mean = float(np.dot(np.arange(len(h)), h) / h.sum())
    depth = int(np.argmin([abs((b - 1) / 2 - mean) for b in range(1, 2 * len(h) + 2)])) + 1
    p = tuple(float(x) for x in h / h.sum())
    return {"histogram": p, "uniform": (1.0,) * depth, "control": (0.0,) * shift + p}


def realised_in(path: str, weights: dict, require: bool = False) -> dict[str, np.ndarray]:
    """A ``realised_ages.csv`` as ``{variant: samples by age}`` for the variants' ``weights`` it holds
    (empty if the file is absent); with ``require``, a ResultsError naming the file when it is absent or
    holds no row of a variant's weights."""
    from vaco_jax.analysis import results

    if not os.path.exists(path) and not require:
        return {}
    rows = results.read_table(path)
    out_: dict[str, np.ndarray] = {}
    for variant, w in weights.items():
        mine = [r for r in rows if tuple(float(x) for x in weights_of(r)) == tuple(float(x) for x in w)]
        if mine:
            out_[variant] = np.bincount([int(r["age"]) for r in mine], weights=[float(r["samples"]) for r in mine])
        elif require:
            raise results.ResultsError(f"{path}: no row of the {variant} counterpart's weights {tuple(w)}")
    return out_


def cells_of(path: str, weights: tuple, seeds, variant: str) -> list[dict]:
    """The rows of a finished simulated sweep's ``scores.csv`` that belong to one counterpart's
    ``weights``: exactly one per seed of ``seeds``, else a ResultsError naming the file (the sweep ran
    other weights, as when the real histograms changed after the ``sim`` stage ran it, or lost rows)."""
    from vaco_jax.analysis import results

    key = tuple(float(x) for x in weights)
    mine = [r for r in results.read_table(path) if tuple(float(x) for x in weights_of(r)) == key]
    if sorted(int(r["seed"]) for r in mine) != sorted(seeds):
        raise results.ResultsError(f"{path}: seeds {sorted(int(r['seed']) for r in mine)} of the {variant} "
                                   f"counterpart's weights, expected {sorted(seeds)} (did the real runs' histograms "
                                   "change after the 'sim' stage ran?)")
    return mine


# ----------------------------------------------------------------------------------- the comparison rule
def verdict(low: float, high: float, margin: float) -> str:
    """``predicts`` (the interval inside +-margin), ``differs`` (wholly outside), else ``inconclusive``."""
    if -margin <= low and high <= margin:
        return "predicts"
    return "differs" if low > margin or high < -margin else "inconclusive"


def bootstrap_ci(arms, statistic, reps: int, confidence: float, seed: int = 0) -> tuple[float, float, float]:
    """``statistic(*means)`` of the arms' means at the full samples, and its percentile bootstrap interval:
    each arm's runs resampled with replacement, independently of the others (arm by arm, ``reps`` resamples
    each, from one generator). Replicates that are not finite are left out; ``nan`` when an arm is empty."""
    arms = [np.asarray(a, float) for a in arms]
    if any(a.size == 0 for a in arms):
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = [a[rng.integers(0, a.size, size=(reps, a.size))].mean(axis=1) for a in arms]
    with np.errstate(divide="ignore", invalid="ignore"):
        point = float(statistic(*[a.mean() for a in arms]))
        values = np.asarray(statistic(*means), float)
    values = values[np.isfinite(values)]
    if not values.size:
        return point, float("nan"), float("nan")
    alpha = 1.0 - confidence
    lo, hi = np.percentile(values, [100.0 * alpha / 2.0, 100.0 * (1.0 - alpha / 2.0)])
    return point, float(lo), float(hi)


def control_note(rows: list[dict]) -> str | None:
    """A line when the rule does not call every negative control (``variant`` control) *differs*."""
    controls = [r for r in rows if r["variant"] == "control"]
    if not controls or all(r["verdict"] == "differs" for r in controls):
        return None
    return (f"the negative control is not called 'differs' in {sum(r['verdict'] != 'differs' for r in controls)} "
            f"of {len(controls)} rows: with these seeds the rule cannot tell a wrong histogram from a right one")
