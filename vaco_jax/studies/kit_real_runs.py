"""The study kit's running of real-versus-simulated units: a real asynchronous actor-learner's runs and
their simulated counterparts' lag sweeps, each resumable and bounded by ``--minutes`` (docs/real_async.md).

A study's **protocol file** (``fix_protocol``) is written by its first stage and must equal the study's
numbers in every later one. ``run_real_runs`` runs, in order, the real runs not yet finished (a run's
``score.json`` marks it) while ``--minutes`` allows (``Budget``, judged from the runs this session made).
``run_sweep`` runs one lag sweep of simulated counterparts through the driver (``sweep_groups``,
``study.run_study``) and copies its small tables (``SIM_TABLES``: its scores and the ages it realised,
``realised_ages``) out of the run directory; ``run_sweeps`` runs the sweeps not yet finished while
``--minutes`` allows. What the runs are compared by (their scores, histograms, counterparts' weights and
the rule) is ``kit_real``'s. It imports no study module.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import numpy as np

from vaco_jax.core.config import ConfigError

# copied from a finished sweep; scores.csv last: it marks the sweep copied
COPIED = ("curves.csv", "cells.json", "config.json", "scores.csv")
REALISED = "realised_ages.csv"  # the simulated samples by realised age, per variant (from the sweep's staleness.npz)
SIM_TABLES = COPIED + (REALISED,)  # what a finished sweep's directory under OUT/sim holds


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
        key = str(tuple(float(x) for x in cell["age_weights"]))  # a list in cells.json
        total[key] = total.get(key, 0) + row
    return [{"age_weights": key, "age": a, "samples": int(n)} for key, row in total.items() for a, n in enumerate(row)]
