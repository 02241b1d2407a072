"""Does the simulator predict a real asynchronous actor–learner? (docs/real_async.md)

    python experiments/sim_vs_real.py plan                 # the protocol and what is left to run
    python experiments/sim_vs_real.py real --minutes 80    # real runs (threads; not reproducible bit for bit)
    python experiments/sim_vs_real.py sim --minutes 80     # their simulated counterparts (reproducible)
    python experiments/sim_vs_real.py report               # verdicts, wall clock, histograms

For each real configuration (a number of actors with unequal speeds, or the lockstep reference) and
method, the real system runs on every seed and records its age histogram. The simulator then runs
the same training three ways, one cell per seed each: (a) ``ages`` with the real runs' pooled
histogram, (b) ``uniform`` with the lag depth whose mean age is nearest the real mean (as weights
1, ..., 1: the same draws as ``uniform``), (c) a negative control, the real histogram shifted
``CONTROL_SHIFT`` versions older. The decision rule, fixed here before any run: the simulator
*predicts* a (configuration, method, score) when the 90% bootstrap CI of mean(sim) - mean(real),
divided by the mean of the method's real lockstep runs, lies inside +-``MARGIN``; it *differs* when
the CI lies wholly outside; else *inconclusive*. A rule that does not call the negative control
*differs* cannot tell, and the report says so.

The protocol (the preset's numbers and the rule) is written to ``OUT/protocol.json`` by the first run;
a later run with other numbers is refused. ``OUT`` holds only small tables (the real runs' records,
the simulated sweeps' scores and curves, the verdicts), so the ``cpu`` preset keeps it under
``results/`` to be committed; the simulator's run directories (checkpoints) live in ``WORK``.
Both stages are resumable: a real run is finished when its ``score.json`` exists, a simulated sweep
resumes from its checkpoints; ``--minutes`` stops starting new work once the next piece would not fit.
``report`` writes no protocol and reads only under the one in ``OUT``, once every real run and sweep has
finished and holds its tables (the first one that has not, or the tables gone, named); a real run's
histogram is verified against its checksum, or (a run written before histograms carried one) against
the consumed batches of its ``record.csv``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Literal

import numpy as np
from tyro.conf import Positional

from vaco_jax.core.config import ConfigError

# Equivalence margin, as a fraction of the method's real lockstep mean; why this value: docs/real_async.md
MARGIN = 0.15
CONFIDENCE = 0.90
CONTROL_SHIFT = 8  # versions the negative control's histogram is moved older
SCORES = ("auc_eval_return", "final_eval_return")
VARIANTS = ("histogram", "uniform", "control")

PRESETS = {
    # Hopper-v4 with its task defaults (16 envs x 128 steps a batch, 10 epochs x 32 minibatches)
    "cpu": dict(task="Hopper-v4", methods=("ppo_clip", "vaco"), actors=(2, 4, 8), slowest=2.0, sync_actors=4,
                seeds=tuple(range(10)), total_env_steps=300_000, num_evals=10, eval_episodes=8, buffer_capacity=32,
                sizes={}),
    # the tiny pure-JAX task, for tests: seconds
    "tiny": dict(task="point_mass", methods=("ppo_clip", "vaco"), actors=(2, 4), slowest=2.0, sync_actors=2,
                 seeds=(0, 1), total_env_steps=8 * 16 * 8, num_evals=2, eval_episodes=2, buffer_capacity=16,
                 sizes=dict(num_envs=8, unroll_length=16, episode_length=50, num_epochs=2, num_minibatches=2)),
}


@dataclasses.dataclass
class Args:
    """The simulator against a real asynchronous actor-learner: plan, real, sim, report."""

    stage: Positional[Literal["plan", "real", "sim", "report"]]
    preset: Literal["cpu", "tiny"] = "cpu"  # the study's numbers (PRESETS)
    out: str = ""  # the study's tables; default results/sim_vs_real (preset cpu), runs/sim_vs_real_tiny (tiny)
    work: str = ""  # the simulator's run directories (checkpoints); default runs/sim_vs_real_<preset>
    minutes: float | None = None  # real, sim: start no run or sweep that would end after this many minutes
    progress: bool = True  # a line per real run and a progress bar per simulated group
    bootstrap_reps: int = 2000  # bootstrap resamples of the report's intervals
    # real, sim: print what the stage would run (sim: the lag sweeps' plans, memory and time estimates) and exit;
    # nothing is run or written
    dry_run: bool = False


HELP_DEFAULTS = {"minutes": "no limit"}  # --help (driver/helptext.py)


def configurations(spec: dict) -> list[dict]:
    """The real configurations: the lockstep reference, then each actor count with speeds spread
    evenly from 1 (full speed) to ``slowest`` times slower."""
    out = [dict(name=f"sync{spec['sync_actors']}", num_actors=spec["sync_actors"], slowdown=(), mode="sync")]
    for a in spec["actors"]:
        slow = tuple(float(x) for x in np.round(np.linspace(1.0, spec["slowest"], a), 3))
        out.append(dict(name=f"async{a}", num_actors=a, slowdown=slow, mode="async"))
    return out


def base_config(spec: dict, method: str):
    from vaco_jax.core.config import Config

    return Config.for_task(spec["task"], method=method, total_env_steps=spec["total_env_steps"],
                           num_evals=spec["num_evals"], eval_episodes=spec["eval_episodes"],
                           buffer_capacity=spec["buffer_capacity"], **spec["sizes"])


def _real_dir(out: str, config: dict, method: str, seed: int) -> str:
    return os.path.join(out, "real", config["name"], method, f"seed{seed}")


def protocol(spec: dict) -> dict:
    return {"preset": spec, "configurations": configurations(spec), "margin": MARGIN, "confidence": CONFIDENCE,
            "control_shift": CONTROL_SHIFT, "scores": list(SCORES), "variants": list(VARIANTS)}


def _fix_protocol(out: str, spec: dict, write: bool = True) -> None:
    """``OUT/protocol.json``: written by the first stage that runs, then every stage's settings must equal
    it (checked, not written, with ``write=False``)."""
    fix_protocol(os.path.join(out, "protocol.json"), protocol(spec), write)


def fix_protocol(path: str, mine: dict, write: bool = True, hint: str = "use another --out") -> None:
    """A study's protocol file ``path``: written as ``mine`` when absent (and ``write``), else it must equal
    ``mine`` (a ConfigError of one line, ending in ``hint``, when it does not)."""
    from vaco_jax.analysis import results

    out = os.path.dirname(path)
    if os.path.exists(path):
        theirs = {k: v for k, v in results.read_json(path).items() if k != "sha256"}
        import json

        if json.loads(json.dumps(mine)) != theirs:
            raise ConfigError(f"out: {out} holds a study run under another protocol ({path}); {hint}")
        return
    if not write:
        return
    os.makedirs(out, exist_ok=True)
    results.write_json(path, mine)


class _Budget:
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


def real(args: Args, spec: dict) -> list[dict]:
    """Every real run not yet finished (a run's ``score.json`` marks it finished), while ``--minutes`` allows."""
    from vaco_jax.driver.actor_learner import RealSettings

    def runs():
        # seed by seed across every configuration: a study spread over sessions (and machines) then has
        # whole blocks of seeds, each configuration's runs of a seed made on the same machine
        for seed in spec["seeds"]:
            for c in configurations(spec):
                settings = RealSettings(num_actors=c["num_actors"], slowdown=c["slowdown"],
                                        queue_capacity=c["num_actors"], mode=c["mode"])
                for method in spec["methods"]:
                    config = base_config(spec, method)
                    settings.check(config)
                    yield _real_dir(args.out, c, method, seed), config, settings, seed, f"{c['name']} {method}"

    return run_real_runs(runs(), args.minutes, args.progress)


def run_real_runs(runs, minutes: float | None, progress: bool = True) -> list[dict]:
    """Run and write, in order, each real run of ``runs`` — (run directory, Config, RealSettings, seed,
    label) — that is not finished (its ``score.json`` marks it), while ``minutes`` allows (``_Budget``);
    the scores written this time."""
    from vaco_jax.driver.actor_learner import run_real, write_real_run

    done, budget = [], _Budget(minutes)
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
        if progress:
            load = (score.get("load_average") or {}).get("start")
            print(f"real {label} seed {seed}: AUC {score['auc_eval_return']:.1f}, {score['env_steps_per_second']:.0f} "
                  f"env steps/s, mean age {score['mean_age']:.2f}, load {load if load is None else f'{load:.2f}'}",
                  flush=True)
    return done


def pooled_histogram(out: str, c: dict, method: str, seeds, checksum: bool = False) -> tuple[float, ...]:
    """Consumed samples by age, summed over the finished real runs of ``c`` x ``method`` x ``seeds``, each
    verified (``run_histogram``; ``checksum``: every one must carry its checksum)."""
    total: np.ndarray = np.zeros(0)
    for seed in seeds:
        where = _real_dir(out, c, method, seed)
        if not os.path.exists(os.path.join(where, "score.json")):
            raise ConfigError(f"sim: the real run {where} has not finished; run the 'real' stage first")
        h = np.asarray(run_histogram(where, checksum))
        total = np.pad(total, (0, max(0, len(h) - len(total)))) + np.pad(h, (0, max(0, len(total) - len(h))))
    return tuple(float(x) for x in total)


def run_histogram(run_dir: str, checksum: bool = True) -> tuple[float, ...]:
    """A real run's consumed samples by age (its ``age_histogram.csv``), verified against the checksum
    beside it (every run writes one). A run written before its histogram carried one (``checksum=False``
    allows it: this study's committed runs) is verified against the consumed batches of its checksummed
    ``record.csv`` instead. A ResultsError naming the file when it fails."""
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


REAL_TABLES = ("curve.csv", "record.csv", "age_histogram.csv")  # a finished real run's (score.json marks it)


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


def cells_of(path: str, weights: tuple, seeds, variant: str) -> list[dict]:
    """The rows of a finished simulated sweep's ``scores.csv`` that belong to one counterpart's
    ``weights``: exactly one per seed of ``seeds``, else a ResultsError naming the file (the sweep ran
    other weights, as when the real histograms changed after the ``sim`` stage ran it, or lost rows)."""
    from vaco_jax.analysis import results

    key = tuple(float(x) for x in weights)
    mine = [r for r in results.read_table(path) if tuple(float(x) for x in _weights_of(r)) == key]
    if sorted(int(r["seed"]) for r in mine) != sorted(seeds):
        raise results.ResultsError(f"{path}: seeds {sorted(int(r['seed']) for r in mine)} of the {variant} "
                                   f"counterpart's weights, expected {sorted(seeds)} (did the real runs' histograms "
                                   "change after the 'sim' stage ran?)")
    return mine


def variant_weights(hist: tuple[float, ...], shift: int | None = None) -> dict[str, tuple[float, ...]]:
    """The three simulated counterparts of one real histogram (see the module's docstring); ``shift``:
    the control's versions older (default ``CONTROL_SHIFT``)."""
    h = np.asarray(hist, float)
    mean = float(np.dot(np.arange(len(h)), h) / h.sum())
    depth = int(np.argmin([abs((b - 1) / 2 - mean) for b in range(1, 2 * len(h) + 2)])) + 1
    p = tuple(float(x) for x in h / h.sum())
    shift = CONTROL_SHIFT if shift is None else shift
    return {"histogram": p, "uniform": (1.0,) * depth, "control": (0.0,) * shift + p}


# copied from a finished sweep; scores.csv last: it marks the sweep copied
COPIED = ("curves.csv", "cells.json", "config.json", "scores.csv")
REALISED = "realised_ages.csv"  # the simulated samples by realised age, per variant (from the sweep's staleness.npz)
SIM_TABLES = COPIED + (REALISED,)  # what OUT/sim/<configuration>/<method>/ holds


def _sim_dir(out: str, c: dict, method: str) -> str:
    return os.path.join(out, "sim", c["name"], method)


def sim(args: Args, spec: dict) -> None:
    """One lag sweep per (configuration, method): the variants' weights as an ``age_weights`` axis x
    the seeds, with as many envs per simulated actor as a real actor steps. The sweep runs in
    ``WORK``; its small tables are copied to ``OUT/sim/<configuration>/<method>/`` when it finishes."""
    budget = _Budget(args.minutes)
    for c in configurations(spec):
        for method in spec["methods"]:
            dst = _sim_dir(args.out, c, method)
            if os.path.exists(os.path.join(dst, "scores.csv")):
                continue
            weights = variant_weights(pooled_histogram(args.out, c, method, spec["seeds"]))
            variants = list(dict.fromkeys(weights.values()))  # lockstep: histogram = uniform
            cells = len(variants) * len(spec["seeds"])
            if not budget.fits(cells):
                print(f"sim: --minutes {args.minutes:g} reached; rerun to go on")
                return
            started = time.monotonic()
            config = base_config(spec, method)
            run_sweep(spec, method, variants, spec["seeds"], envs_per_actor=config.num_envs // c["num_actors"],
                      work=os.path.join(args.work, "sim", c["name"], method), dst=dst, progress=args.progress,
                      bootstrap_reps=min(args.bootstrap_reps, 200), dry_run=args.dry_run)
            if args.dry_run:
                continue
            budget.record(time.monotonic() - started, cells)


def run_sweep(spec: dict, method: str, variants, seeds, *, envs_per_actor: int, work: str, dst: str,
              num_envs: int | None = None, buffer_capacity: int | None = None, knobs: dict | None = None,
              progress: bool = True, bootstrap_reps: int = 200, dry_run: bool = False) -> None:
    """One lag sweep of ``spec``'s task and numbers (``task``, ``total_env_steps``, ``num_evals``,
    ``eval_episodes``, ``buffer_capacity``, ``sizes``): the ``ages`` lag model with ``variants`` (weight
    vectors) as its ``age_weights`` axis x ``seeds``, ``envs_per_actor`` envs per simulated actor. It runs
    in ``work``; its small tables (``SIM_TABLES``) are copied to ``dst`` when it finishes. ``num_envs``
    (default: the task's, or ``sizes``'), ``buffer_capacity`` (default: ``spec``'s) and ``knobs`` (a method's
    knobs: ``clip_epsilon``, ``tv_budget``) override."""
    from vaco_jax.analysis import results
    from vaco_jax.studies import lag_sweep

    axis = ",".join(str(w) for w in variants)
    config = base_config(spec, method)
    sizes = {k: v for k, v in spec["sizes"].items() if k in ("num_envs", "unroll_length")}
    extra = {k: v for k, v in spec["sizes"].items() if k not in sizes}
    lag_sweep.main(lag_sweep.Args(
        preset="tiny", tasks=(spec["task"],), methods=(method,), lag_model="ages", sweep=(f"age_weights={axis}",),
        seeds=tuple(seeds), total_env_steps=spec["total_env_steps"],
        num_envs=num_envs or sizes.get("num_envs", config.num_envs),
        unroll_length=sizes.get("unroll_length", config.unroll_length),
        num_evals=spec["num_evals"], eval_episodes=spec["eval_episodes"],
        buffer_capacity=buffer_capacity or spec["buffer_capacity"], envs_per_actor=envs_per_actor, out=work,
        progress=progress, figures=False, bootstrap_reps=bootstrap_reps, dry_run=dry_run, **extra, **(knobs or {})))
    if dry_run:
        return
    src = os.path.join(work, spec["task"], method)
    os.makedirs(dst, exist_ok=True)
    results.write_table(os.path.join(dst, REALISED), realised_ages(src))
    for name in COPIED:
        results.atomic_copy(os.path.join(src, name), os.path.join(dst, name))


def realised_ages(group_dir: str) -> list[dict]:
    """A finished sweep's training samples by realised age, summed over chunks and seeds, one row per
    (variant's weights, age) with samples: what the simulator drew, beside what it was asked to draw."""
    from vaco_jax.analysis import results

    cells = results.read_cells(group_dir)
    counts = np.asarray(results.load_npz(os.path.join(group_dir, "staleness.npz"))["counts"]).sum(axis=0)
    total: dict[str, np.ndarray] = {}
    for cell, row in zip(cells, counts):
        key = str(tuple(float(x) for x in _weights_of(cell)))
        total[key] = total.get(key, 0) + row
    return [{"age_weights": key, "age": a, "samples": int(n)} for key, row in total.items() for a, n in enumerate(row)]


def _realised_by_variant(out: str, c: dict, method: str, weights: dict,
                         require: bool = False) -> dict[str, np.ndarray]:
    """``realised_ages.csv`` of a sweep as ``{variant: samples by age}`` (``realised_in``)."""
    return realised_in(os.path.join(_sim_dir(out, c, method), REALISED), weights, require)


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
        mine = [r for r in rows if tuple(float(x) for x in _weights_of(r)) == tuple(float(x) for x in w)]
        if mine:
            out_[variant] = np.bincount([int(r["age"]) for r in mine], weights=[float(r["samples"]) for r in mine])
        elif require:
            raise results.ResultsError(f"{path}: no row of the {variant} counterpart's weights {tuple(w)}")
    return out_


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


def _real_scores(out: str, c: dict, method: str, seeds, num_evals: int) -> list[dict]:
    return [real_score(_real_dir(out, c, method, s), num_evals) for s in seeds]


def report_rows(out: str, spec: dict, reps: int = 2000) -> list[dict]:
    """One row per (configuration, method, variant, score): real and simulated means, the scaled
    difference with its CI, and the verdict; plus each configuration's wall clock."""
    from vaco_jax.analysis.stats import contrast_ci

    rows = []
    configs = configurations(spec)
    require_report_units(out, spec)
    for method in spec["methods"]:
        sync = _real_scores(out, configs[0], method, spec["seeds"], spec["num_evals"])
        for c in configs:
            real_runs = _real_scores(out, c, method, spec["seeds"], spec["num_evals"])
            weights = variant_weights(pooled_histogram(out, c, method, spec["seeds"]))
            realised = _realised_by_variant(out, c, method, weights, require=True)
            for variant, w in weights.items():
                mine = cells_of(os.path.join(_sim_dir(out, c, method), "scores.csv"), w, spec["seeds"], variant)
                for score in SCORES:
                    scale = abs(float(np.mean([r[score] for r in sync])))
                    x = np.array([[r[score]] for r in mine if not r["diverged"]], float) / scale
                    y = np.array([[r[score]] for r in real_runs if not r["diverged"]], float) / scale
                    point, lo, hi = contrast_ci(x, y, aggregate="mean", reps=reps, confidence=CONFIDENCE)
                    verdict = ("predicts" if -MARGIN <= lo and hi <= MARGIN else
                               "differs" if lo > MARGIN or hi < -MARGIN else "inconclusive")
                    rows.append({"configuration": c["name"], "method": method, "variant": variant, "score": score,
                                 "margin": MARGIN,
                                 "real_mean": float(np.mean([r[score] for r in real_runs])),
                                 "sim_mean": float(np.mean([r[score] for r in mine])) if mine else float("nan"),
                                 "scaled_difference": point, "low": lo, "high": hi, "verdict": verdict,
                                 "real_mean_age": float(np.mean([r["mean_age"] for r in real_runs])),
                                 "sim_mean_age": float(np.dot(np.arange(len(w)), w) / np.sum(w)),
                                 "sim_realised_mean_age": _mean_age(realised.get(variant)),
                                 "real_env_steps_per_second": float(np.mean([r["env_steps_per_second"]
                                                                             for r in real_runs])),
                                 "n_real": len(y), "n_sim": len(x),
                                 "diverged": sum(bool(r["diverged"]) for r in real_runs + mine)})
    return rows


def _mean_age(counts) -> float:
    if counts is None or np.sum(counts) <= 0:
        return float("nan")
    return float(np.dot(np.arange(len(counts)), counts) / np.sum(counts))


def _weights_of(row: dict) -> tuple:
    import ast

    value = row["age_weights"]
    return tuple(ast.literal_eval(value)) if isinstance(value, str) else tuple(value)


def require_report_units(out: str, spec: dict) -> None:
    """Every real run and simulated sweep the report reads has finished and holds its tables
    (``require_units``), before any number is read."""
    require_units([_real_dir(out, c, m, s) for s in spec["seeds"] for c in configurations(spec)
                   for m in spec["methods"]], "score.json", REAL_TABLES, "real")
    require_units([_sim_dir(out, c, m) for c in configurations(spec) for m in spec["methods"]], "scores.csv",
                  SIM_TABLES, "sim")


def report(args: Args, spec: dict) -> list[dict]:
    from vaco_jax.analysis import results

    from vaco_jax.analysis import figures

    rows = report_rows(args.out, spec, args.bootstrap_reps)
    histograms = {}  # read before anything is written
    for c in configurations(spec):  # the first method's: the actors' lag does not depend on the method
        real_hist = pooled_histogram(args.out, c, spec["methods"][0], spec["seeds"])
        drawn = _realised_by_variant(args.out, c, spec["methods"][0], variant_weights(real_hist), require=True)
        histograms[c["name"]] = {"real (pooled)": real_hist,
                                 **{f"simulated: {v}": drawn[v] for v in ("histogram", "uniform") if v in drawn}}
    results.write_table(os.path.join(args.out, "verdicts.csv"), rows)
    paths = [p for score in SCORES for p in figures.plot_sim_vs_real(args.out, rows, histograms, score)]
    print(f"{'configuration':<10} {'method':<9} {'variant':<10} {'age real/sim':>12} {'score':<18} {'real':>9} "
          f"{'sim':>9} {'(sim-real)/sync':>16} {'90% CI':>17}  verdict")
    for r in rows:
        ages = f"{r['real_mean_age']:.2f}/{r['sim_realised_mean_age']:.2f}"
        print(f"{r['configuration']:<10} {r['method']:<9} {r['variant']:<10} {ages:>12} {r['score']:<18} {r['real_mean']:>9.1f} "
              f"{r['sim_mean']:>9.1f} {r['scaled_difference']:>16.3f} [{r['low']:>7.3f}, {r['high']:>7.3f}]  "
              f"{r['verdict']}")
    controls = [r for r in rows if r["variant"] == "control" and not r["configuration"].startswith("sync")]
    if controls and not all(r["verdict"] == "differs" for r in controls):
        print(f"the negative control is not called 'differs' in {sum(r['verdict'] != 'differs' for r in controls)} "
              f"of {len(controls)} rows: with these seeds the rule cannot tell a wrong histogram from a right one")
    print("wall clock, real runs (env steps per second, mean over seeds and methods):")
    for c in configurations(spec):
        sps = [r["real_env_steps_per_second"] for r in rows if r["configuration"] == c["name"]]
        print(f"  {c['name']:<8} {np.mean(sps):>10.0f}")
    print("figures:", *paths, sep="\n  ")
    return rows


def plan_text(args: Args, spec: dict) -> str:
    lines = [f"protocol: margin +-{MARGIN} of the lockstep mean, {CONFIDENCE:.0%} bootstrap CI, control shift "
             f"{CONTROL_SHIFT}; task {spec['task']}, methods {', '.join(spec['methods'])}, seeds {list(spec['seeds'])}, "
             f"{spec['total_env_steps']} env steps a run"]
    for c in configurations(spec):
        left = sum(not os.path.exists(os.path.join(_real_dir(args.out, c, m, s), "score.json"))
                   for m in spec["methods"] for s in spec["seeds"])
        lines.append(f"  {c['name']:<8} {c['num_actors']} actors, {c['mode']}, slowdown {list(c['slowdown']) or 1}: "
                     f"{left} real runs to go")
    return "\n".join(lines)


def main(args: Args):
    spec = dict(PRESETS[args.preset])
    args.work = args.work or os.path.join("runs", f"sim_vs_real_{args.preset}")
    args.out = args.out or (os.path.join("results", "sim_vs_real") if args.preset == "cpu" else args.work)
    if args.minutes is not None and not args.minutes > 0:
        raise ConfigError(f"minutes={args.minutes!r} must be a positive number of minutes (or left unset: no limit)")
    if not isinstance(args.bootstrap_reps, int) or args.bootstrap_reps < 1:
        raise ConfigError(f"bootstrap_reps={args.bootstrap_reps!r} must be a positive integer")
    for method in spec["methods"]:  # every setting checked before anything runs
        base_config(spec, method)
    if args.stage == "plan":
        print(plan_text(args, spec))
        return None
    if args.dry_run and args.stage == "report":
        raise ConfigError("dry_run: --dry-run applies to real and sim (plan runs nothing; report writes the tables)")
    if args.stage == "report" and not os.path.exists(os.path.join(args.out, "protocol.json")):
        raise ConfigError(f"report: {os.path.join(args.out, 'protocol.json')} is missing: no stage of the study has "
                          "run there; run the 'real' stage first")
    _fix_protocol(args.out, spec, write=not args.dry_run and args.stage != "report")
    if args.dry_run and args.stage == "real":
        print(plan_text(args, spec))
        print("dry run: nothing run or written (the real runs are threads on this machine's cores, timed as they go: "
              "no estimate beyond the plan's)")
        return None
    if args.stage == "real":
        return real(args, spec)
    if args.stage == "sim":
        return sim(args, spec)
    return report(args, spec)


def cli() -> None:
    """The command line (`experiments/sim_vs_real.py`, `python -m vaco_jax sim-vs-real`)."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
