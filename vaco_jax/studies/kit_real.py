"""The study kit's real-versus-simulated comparison: a real asynchronous actor-learner's runs, their
simulated counterparts, and the rule that says whether the simulator predicts them (docs/real_async.md).

A **real run** (``real_dir``: ``OUT/real/<configuration>/<method>/seed<k>/``) is finished when its
``score.json`` exists; it holds ``REAL_TABLES``, among them the histogram of its consumed samples by age,
verified against its checksum (``run_histogram``). ``run_real_runs`` runs, in order, the real runs not
yet finished while ``--minutes`` allows (``Budget``).

A real configuration's **simulated counterparts** (``variant_weights``) are the ``ages`` lag model fed
its real runs' pooled histogram (``histogram``), a uniform lag of the nearest mean age (``uniform``) and
the histogram moved some versions older (``control``, a negative control). ``run_sweep`` runs them as one
lag sweep and copies its small tables (``SIM_TABLES``: its scores and the ages it realised) out of the
run directory; ``run_sweeps`` runs the sweeps not yet finished while ``--minutes`` allows;
``cells_of`` and ``realised_in`` read one counterpart's rows back.

**The comparison rule** (``verdict``): the simulator *predicts* a quantity when the bootstrap interval
of simulated - real lies inside +-margin, *differs* when the interval lies wholly outside, else it is
*inconclusive*; ``control_note`` says when the rule does not call every negative control *differs*.

A **study's protocol file** (``fix_protocol``) is written by its first stage and must equal the study's
numbers in every later one; ``require_units`` keeps a report to units that have finished and hold their
tables. The sim-vs-real and deep-lag studies are declarations on this module; it imports no study
module: the driver runs the simulated counterparts' lag sweeps (``sweep_groups``, ``study.run_study``).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import time

import numpy as np

from vaco_jax.core.config import ConfigError

REAL_TABLES = ("curve.csv", "record.csv", "age_histogram.csv")  # a finished real run's (score.json marks it)
# copied from a finished sweep; scores.csv last: it marks the sweep copied
COPIED = ("curves.csv", "cells.json", "config.json", "scores.csv")
REALISED = "realised_ages.csv"  # the simulated samples by realised age, per variant (from the sweep's staleness.npz)
SIM_TABLES = COPIED + (REALISED,)  # what a finished sweep's directory under OUT/sim holds


# ----------------------------------------------------------------------------------- protocol, budget, guards
def fix_protocol(path: str, mine: dict, write: bool = True, hint: str = "use another --out",
                 stage: str = "") -> None:
    """A study's protocol file ``path``: written as ``mine`` when absent (and ``write``), else it must equal
    ``mine`` (a ConfigError of one line, ending in ``hint``, when it does not). The ``report`` stage writes
    none: it reads only under the protocol an earlier stage wrote (a ConfigError when there is none)."""
    from vaco_jax.analysis import results

    out = os.path.dirname(path)
    if stage == "report" and not os.path.exists(path):
        raise ConfigError(f"report: {path} is missing: no stage of the study has run there; run the 'real' stage "
                          "first")
    write = write and stage != "report"
    if os.path.exists(path):
        theirs = {k: v for k, v in results.read_json(path).items() if k != "sha256"}
        if json.loads(json.dumps(mine)) != theirs:
            raise ConfigError(f"out: {out} holds a study run under another protocol ({path}); {hint}")
        return
    if not write:
        return
    os.makedirs(out, exist_ok=True)
    results.write_json(path, mine)


def check_minutes(minutes: float | None) -> None:
    """``--minutes``: a positive number, or unset (no limit)."""
    if minutes is not None and not minutes > 0:
        raise ConfigError(f"minutes={minutes!r} must be a positive number of minutes (or left unset: no limit)")


class Budget:
    """``--minutes``: start a piece of work only if it should end within the budget, judged from the
    pieces this session ran (the first always starts)."""

    def __init__(self, minutes: float | None):
        self.minutes, self.start, self.spent = minutes, time.monotonic(), []

    def fits(self, size: float = 1.0) -> bool:
        if self.minutes is None or not self.spent:
            return True
        per_unit = sum(s for s, _ in self.spent) / sum(n for _, n in self.spent)
        return time.monotonic() - self.start + per_unit * size <= self.minutes * 60

    def record(self, seconds: float, size: float = 1.0) -> None:
        self.spent.append((seconds, size))


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


# ----------------------------------------------------------------------------------- real runs
def real_dir(out: str, config: dict, method: str, seed: int) -> str:
    """A real run's directory: ``OUT/real/<configuration's name>/<method>/seed<k>``."""
    return os.path.join(out, "real", config["name"], method, f"seed{seed}")


def run_real_runs(runs, minutes: float | None, progress: bool = True, line=None) -> list[dict]:
    """Run and write, in order, each real run of ``runs`` — (run directory, Config, RealSettings, seed,
    label) — that is not finished (its ``score.json`` marks it), while ``minutes`` allows (``Budget``);
    the scores written this time. With ``progress``, a line per run: ``line(label, seed, run directory,
    score, seconds)``, by default its AUC, speed, mean age and the machine's load."""
    from vaco_jax.driver.actor_learner import run_real, write_real_run

    done, budget = [], Budget(minutes)
    for where, config, settings, seed, label in runs:
        if os.path.exists(os.path.join(where, "score.json")):
            continue
        if not budget.fits():
            print(f"real: --minutes {minutes:g} reached; {len(done)} run(s) this time, rerun to go on")
            return done
        started = time.monotonic()
        run = run_real(config, settings, seed=seed)
        score = write_real_run(where, run, config, settings, seed)
        budget.record(time.monotonic() - started)
        done.append(score)
        if progress and line is not None:
            print(line(label, seed, where, score, time.monotonic() - started), flush=True)
        elif progress:
            load = (score.get("load_average") or {}).get("start")
            print(f"real {label} seed {seed}: AUC {score['auc_eval_return']:.1f}, {score['env_steps_per_second']:.0f} "
                  f"env steps/s, mean age {score['mean_age']:.2f}, load {load if load is None else f'{load:.2f}'}",
                  flush=True)
    return done


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


@dataclasses.dataclass(frozen=True)
class SweepFlags:
    """The run flags ``study.run_study`` reads, as this kit's lag sweeps set them (no shard, no single
    cell, no tracking: those are a study command's own flags)."""

    progress: bool = True
    dry_run: bool = False
    max_chunks: int | None = None


def sweep_groups(spec: dict, method: str, variants, seeds, *, envs_per_actor: int, num_envs: int | None = None,
                 buffer_capacity: int | None = None, knobs: dict | None = None) -> list:
    """The one group (``grid.Group``) of :func:`run_sweep`'s lag sweep: ``spec``'s task at its numbers, the
    ``ages`` lag model with ``variants`` as the cells' ``age_weights`` axis x ``seeds`` (each cell's lag depth
    its weights' last age + 1), validated; nothing compiled."""
    from vaco_jax.core.config import Config
    from vaco_jax.driver import grid

    variants = [tuple(w) for w in variants]
    config = Config.for_task(spec["task"], method=method, total_env_steps=spec["total_env_steps"],
                             num_evals=spec["num_evals"], eval_episodes=spec["eval_episodes"],
                             buffer_capacity=buffer_capacity or spec["buffer_capacity"], **spec["sizes"])
    if num_envs:
        config = config.replace(num_envs=num_envs)
    longest = max(map(len, variants))
    if config.buffer_capacity < longest:  # the policy buffer holds the oldest age a variant draws
        raise ConfigError(f"buffer_capacity={config.buffer_capacity} must be >= {longest}, the ages of the "
                          "longest variant's weights")
    config = grid.with_knobs([config.replace(lag_model="ages", age_weights=variants[0],
                                             envs_per_actor=envs_per_actor)], knobs or {})[0]
    cells = tuple(grid.grid((config.effective_lag_depth(),), seeds))
    group = grid.Group(config, cells, os.path.join(spec["task"], method), f"{spec['task']}/{method}")
    return grid.apply_sweep([group], {"age_weights": variants})


def run_sweep(spec: dict, method: str, variants, seeds, *, envs_per_actor: int, work: str, dst: str,
              num_envs: int | None = None, buffer_capacity: int | None = None, knobs: dict | None = None,
              progress: bool = True, bootstrap_reps: int = 200, dry_run: bool = False) -> None:
    """One lag sweep of ``spec``'s task and numbers (``task``, ``total_env_steps``, ``num_evals``,
    ``eval_episodes``, ``buffer_capacity``, ``sizes``): :func:`sweep_groups`' group, ``envs_per_actor`` envs
    per simulated actor, run by the driver (``study.run_study``) in ``work`` with the random policy's scores
    beside it and its summary (``bootstrap_reps`` resamples); its small tables (``SIM_TABLES``) are copied to
    ``dst`` when it finishes. ``num_envs`` (default: the task's, or ``sizes``'), ``buffer_capacity``
    (default: ``spec``'s) and ``knobs`` (a method's knobs: ``clip_epsilon``, ``tv_budget``) override."""
    from vaco_jax.analysis import results, tables
    from vaco_jax.driver import study

    groups = sweep_groups(spec, method, variants, seeds, envs_per_actor=envs_per_actor, num_envs=num_envs,
                          buffer_capacity=buffer_capacity, knobs=knobs)
    config = groups[0].config
    if not study.run_study(work, groups, SweepFlags(progress=progress, dry_run=dry_run), spec,
                           prepare=lambda: study.random_scores(work, [config.env], config)):
        return
    tables.summarise(work, reps=bootstrap_reps)
    src = os.path.join(work, groups[0].subdir)
    os.makedirs(dst, exist_ok=True)
    results.write_table(os.path.join(dst, REALISED), realised_ages(src))
    for name in COPIED:
        results.atomic_copy(os.path.join(src, name), os.path.join(dst, name))


def run_sweeps(sweeps, minutes: float | None, dry_run: bool = False) -> None:
    """Run, in order, each sweep of ``sweeps`` — (its ``dst``, a function giving its cells and a function
    that runs it) — not yet finished (``dst/scores.csv`` marks it), while ``minutes`` allows (``Budget``,
    per cell). A sweep is prepared only when its turn comes and it has not finished."""
    budget = Budget(minutes)
    for dst, prepare in sweeps:
        if os.path.exists(os.path.join(dst, "scores.csv")):
            continue
        cells, run = prepare()
        if not budget.fits(cells):
            print(f"sim: --minutes {minutes:g} reached; rerun to go on")
            return
        started = time.monotonic()
        run()
        if not dry_run:
            budget.record(time.monotonic() - started, cells)


def realised_ages(group_dir: str) -> list[dict]:
    """A finished sweep's training samples by realised age, summed over chunks and seeds, one row per
    (variant's weights, age) with samples: what the simulator drew, beside what it was asked to draw."""
    from vaco_jax.analysis import results

    cells = results.read_cells(group_dir)
    counts = np.asarray(results.load_npz(os.path.join(group_dir, "staleness.npz"))["counts"]).sum(axis=0)
    total: dict[str, np.ndarray] = {}
    for cell, row in zip(cells, counts):
        key = str(tuple(float(x) for x in weights_of(cell)))
        total[key] = total.get(key, 0) + row
    return [{"age_weights": key, "age": a, "samples": int(n)} for key, row in total.items() for a, n in enumerate(row)]


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
