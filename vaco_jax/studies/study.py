"""The evidence study (docs/evaluation.md, "The study"): the claims of the three papers, settled on
the tasks the screens chose, with step sizes tuned per method before the study and then frozen.

Two stages, each resumable (re-run the same command: finished groups are skipped, unfinished ones
resume from their last checkpoint), each writing only small tables under ``OUT`` (default
``results/study``; policies and checkpoints are git-ignored there):

    python experiments/study.py tune                   # 1. one traced grid per (task, method) at B = 1
    python experiments/study.py run                    # 2. every design, with the frozen step sizes
    python experiments/study.py run --designs lag --tasks inverted_pendulum
    python experiments/study.py tune --tasks FingerSpin --methods ppo_kl   # beside another process's --methods spo
    python experiments/study.py cost                   # 2b. claim 3's per-phase cost, measured alone
    python experiments/claims.py --study results/study # 3. the verdicts -> results/claims.csv

**Tuning** (``OUT/tuning/``, one run directory): for each task and each method a design uses there,
one compiled program runs the grid ``learning_rate`` x the method's step-size knob (``STEP_KNOB``:
clip ε, KL weight β or TV budget δ, at ``KNOB_FACTORS`` x its default) at lag depth 1 on
``TUNING_SEEDS`` (never used by the study). The chosen pair maximises the mean over those seeds of
``auc_eval_return`` (the mean evaluation return over the run: level and speed, and no ties on tasks
that saturate); a pair with a diverged run is never chosen. Choices are frozen in ``OUT/tuned.json``
(``study_tuning``): re-tuning never changes a frozen choice, and the study refuses a (task, method)
without one.

**Designs** (``DESIGNS``, in ``study_designs``; one run directory each, ``OUT/<design>/``): which
methods, lag depths and settings each claim needs, on which tasks. Every design uses the study seeds
``STUDY_SEEDS`` and the task's budget (``TASKS``). ``lag`` (claims 1, 2, 6) runs on every task; the
others on ``PAIR_TASKS`` (the two cheapest).

**Cost** (``OUT/proximal/learner_cost.csv``, claim 3b): the learner's milliseconds per phase of the
``proximal`` design's methods, timed in ``--cost-rounds`` interleaved rounds of ``--cost-calls`` calls
(``vaco_jax.studies.study_cost``). A finished table is kept: delete it to measure again.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from tyro.conf import Positional

import numpy as np

from vaco_jax.core.config import Config, ConfigError
from vaco_jax.core.presets import METHODS
from vaco_jax.studies import study_tuning
# its parts' names, as this study's: the designs' table, claim 3b's timing rounds, the tuning rule
from vaco_jax.studies.study_cost import interleaved_costs  # noqa: F401
from vaco_jax.studies.study_designs import DESIGNS, MISMATCH_STRENGTH, Design  # noqa: F401
from vaco_jax.studies.study_tuning import check_grid, choose, knob_default, tuned, tuned_path  # noqa: F401

# The tasks the screens chose (FINDINGS "Screens"; results/screens*/): env steps per run.
TASKS = {
    "inverted_pendulum": 61_440,
    "inverted_double_pendulum": 300_000,
    # sixth screen: learnable and lag-sensitive at this budget (at 491,520 steps PPO-Clip's lag loss had
    # shrunk under 10%; FINDINGS "Screens")
    "reacher": 147_456,
    # sixth screen too: learnable only with ~1M steps (at 491,520 steps and lr 1e-3 it had reached 0.14)
    "FingerSpin": 983_040,
}
PAIR_TASKS = ("inverted_pendulum", "inverted_double_pendulum")
STUDY_SEEDS = tuple(range(10))
TUNING_SEEDS = (1000, 1001)
LEARNING_RATES = (1e-4, 3e-4, 1e-3)
KNOB_FACTORS = (0.5, 1.0, 2.0)
# The methods the study tunes, each with its step-size knob besides the learning rate (the registry's
# ``step_knob``; None: the learning rate alone).
STUDY_METHODS = ("ppo_clip", "ppo_kl", "spo", "vaco", "a3po", "decoupled_recompute", "ppo_ewma", "ppo_ewma_revised",
                 "vaco_realign_only", "vaco_filter_only")
STEP_KNOB = {m: METHODS[m].step_knob for m in STUDY_METHODS}
# minibatch_shuffle='sort': the study's committed results were drawn with it, so re-running, resuming or
# extending the study keeps one protocol (docs/estimators.md)
COMMON = dict(num_envs=64, unroll_length=32, num_evals=10, eval_episodes=8, buffer_capacity=16,
              minibatch_shuffle="sort")
COST_DESIGN, COST_FILE = "proximal", "learner_cost.csv"  # claim 3b's per-phase cost (stage ``cost``)
COST_ROUNDS, COST_CALLS = 200, 10


# --help: the values its flags take (cli.grouped) and what a flag left unset means (driver/helptext.py)
CHOICES = {"methods": tuple(STEP_KNOB), "tasks": tuple(TASKS), "designs": tuple(DESIGNS)}
HELP_DEFAULTS = {"learning_rates": " ".join(f"{v:g}" for v in LEARNING_RATES),
                 "methods": "every method of the chosen designs"}


@dataclasses.dataclass
class Args:
    """The evidence study: tune each method's step size at B = 1, then run the designs of the claims."""

    stage: Positional[Literal["tune", "run", "cost"]]  # tune at B = 1, run the designs, or time the learner
    out: str = "results/study"  # the study's directory: tuning/, a folder per design, tuned.json
    designs: tuple[str, ...] = tuple(DESIGNS)  # the designs (DESIGNS) this stage covers
    tasks: tuple[str, ...] = tuple(TASKS)  # the tasks (TASKS, at their screened budgets) it covers
    # only these methods' groups (default: every method of the designs). Two processes given different
    # methods can work on one directory at once: each group is its own program and its own files
    methods: tuple[str, ...] | None = None
    progress: bool = True  # a progress bar per group (--no-progress for logs)
    max_chunks: int | None = None  # stop every group after this many chunks; rerun to continue
    max_cells_per_program: int | None = None  # split a group's grid into programs of at most this many cells
    shard: str | None = None  # "I/N": part I (0-based) of N of the stage's cells (docs/scale.md)
    cell: str | None = None  # re-run one cell of an existing stage alone (its number from the printed plan)
    tensorboard: bool = False  # per-cell scalars as TensorBoard event files, readable while a group runs
    distributed: bool = False  # experimental: one stage over several processes' devices (docs/scale.md)
    # tune, run: print the plan (groups, cells and their --cell numbers), the memory and time estimates, and exit;
    # nothing is compiled or written
    dry_run: bool = False
    bootstrap_reps: int = 2000  # bootstrap resamples of the summaries' confidence intervals
    # tune: the grid's learning rates (default: LEARNING_RATES); a new grid is a new --out
    learning_rates: tuple[float, ...] | None = None
    cost_rounds: int = COST_ROUNDS  # cost: interleaved rounds per task
    cost_calls: int = COST_CALLS  # cost: calls per method and round (their median is the round's value)


def check_args(args: Args) -> None:
    named = (("designs", args.designs, DESIGNS), ("tasks", args.tasks, TASKS))
    if args.methods is not None:
        named += (("methods", args.methods, STEP_KNOB),)
    for name, given, allowed in named:
        bad = [v for v in given if v not in allowed]
        if bad or not given:
            raise ConfigError(f"{name}: {bad or 'none given'} not valid; allowed values: {', '.join(allowed)}")
    if args.learning_rates is not None and (not args.learning_rates
                                            or any(not (0 < float(x) < 1) for x in args.learning_rates)):
        raise ConfigError(f"learning_rates: {list(args.learning_rates)} not valid; allowed values: one or more "
                          "numbers in (0, 1)")
    for name, value, least in (("cost_rounds", args.cost_rounds, 2), ("cost_calls", args.cost_calls, 1)):
        if not isinstance(value, int) or value < least:
            raise ConfigError(f"{name}={value!r} not valid; allowed values: an integer >= {least}")


def design_tasks(design: Design, tasks) -> list[str]:
    return [t for t in tasks if design.every_task or t in PAIR_TASKS]


def base_config(task: str, method: str, **static) -> Config:
    return Config(env=task, method=method, total_env_steps=TASKS[task], **COMMON, **static)


# ----------------------------------------------------------------------------- tuning

def tuning_methods(designs, tasks) -> dict[str, list[str]]:
    """task -> the methods (tuned forms) some chosen design runs there."""
    out: dict[str, list[str]] = {}
    for name in designs:
        d = DESIGNS[name]
        for task in design_tasks(d, tasks):
            for m in list(d.methods) + [m for m, _ in d.variants]:
                if m not in out.setdefault(task, []):
                    out[task].append(m)
    return out


def tuning_groups(designs, tasks, learning_rates=None, only=None) -> list:
    """One tuning group per (task, method) of the designs; ``only``: just these methods."""
    from vaco_jax.driver import grid
    learning_rates = learning_rates or LEARNING_RATES
    groups = []
    for task, methods in tuning_methods(designs, tasks).items():
        for method in methods:
            if only is not None and method not in only:
                continue
            config = base_config(task, method)
            traced = {"learning_rate": [float(x) for x in learning_rates]}
            knob = STEP_KNOB[method]
            if knob:
                traced[knob] = [float(np.float32(f * knob_default(config, knob))) for f in KNOB_FACTORS]
            cells = tuple(grid.grid((1,), TUNING_SEEDS, **traced))
            groups.append(grid.Group(config, cells, os.path.join(task, method), f"tune {task}/{method}"))
    return groups


def freeze(out: str, groups, learning_rates=None) -> dict:
    """Choose and freeze every tuned (task, method) of ``groups`` in ``OUT/tuned.json`` (``study_tuning``'s
    rule on this study's grid); a frozen choice is never changed."""
    return study_tuning.freeze(out, groups, STEP_KNOB, learning_rates or LEARNING_RATES, TUNING_SEEDS, KNOB_FACTORS)


# ----------------------------------------------------------------------------- the designs

def _lookup(pairs: tuple, key, default=()):
    return dict(pairs).get(key, default)


def design_groups(out: str, name: str, tasks, only=None) -> list:
    """The groups of one design, each method at its frozen step size; ``only``: just these methods."""
    from vaco_jax.driver import grid
    d = DESIGNS[name]
    groups = []
    for task in design_tasks(d, tasks):
        forms = [(m, None, (), 1.0) for m in d.methods]
        forms += [(m, v, static, factor) for m, vs in d.variants for v, static, factor in vs]
        forms = [f for f in forms if only is None or f[0] in only]
        for method, variant, static, factor in forms:
            config = base_config(task, method, **dict(_lookup(d.static, method)), **dict(static))
            chosen = dict(tuned(out, task, method))
            knob = STEP_KNOB[method]
            if knob and factor != 1.0:
                chosen[knob] = float(np.float32(factor * chosen[knob]))
            config = grid.with_knobs([config], {**chosen, **dict(d.knobs)})[0]
            traced = {k: list(v) for k, v in _lookup(d.traced, method)}
            cells = tuple(grid.grid(d.lag_depths, STUDY_SEEDS, **traced))
            subdir = os.path.join(task, method) if variant is None else os.path.join(task, method, f"variant={variant}")
            tags = () if variant is None else (("variant", variant),)
            groups.append(grid.Group(config, cells, subdir, f"{name} {subdir}", tags))
    return groups


# ----------------------------------------------------------------------------- per-phase cost

def measure_cost(out: str, tasks, rounds: int, per_round: int) -> str | None:
    """Claim 3b's table ``OUT/<COST_DESIGN>/learner_cost.csv`` (and a ``.json`` beside it saying
    where and how each task was measured). Tasks already in the table are kept as they are; the
    design's other tasks among ``tasks`` are measured and added. Returns its path, None when the
    design has no task among ``tasks``."""
    from vaco_jax.studies import study_cost

    path = os.path.join(out, COST_DESIGN, COST_FILE)
    lag_depth = max(DESIGNS[COST_DESIGN].lag_depths)
    old, meta = study_cost.committed(path, COST_DESIGN, lag_depth)
    measured = {r["env"] for r in old}
    groups = [g for g in design_groups(out, COST_DESIGN, tasks)  # refuses a (task, method) without a frozen choice
              if g.config.env not in measured]
    if not groups:
        if old and set(design_tasks(DESIGNS[COST_DESIGN], tasks)) & measured:
            print(f"{path}: finished for {', '.join(sorted(measured))} (delete it to measure again)")
            return path
        print(f"cost: the {COST_DESIGN!r} design runs on {', '.join(PAIR_TASKS)}; none of them is among the tasks "
              f"given ({', '.join(tasks)})")
        return None
    study_cost.measure(path, meta, old, groups, lag_depth, rounds, per_round)
    return path


def run_groups(run_dir: str, groups: list, args: Args, spec: dict) -> bool:
    """One run directory's groups, resumably (``driver.study.run_study``: finished groups skipped, the
    rest from their last checkpoint), the tasks' random-policy scores first; ``spec`` (with the tasks
    added) is recorded in the directory."""
    from vaco_jax.driver import study
    spec = {**spec, "tasks": sorted({g.config.env for g in groups})}
    return study.run_study(run_dir, groups, args, spec,
                           prepare=lambda: study.random_scores(run_dir, spec["tasks"], groups[0].config))


def main(args: Args) -> list[str]:
    from vaco_jax.analysis import tables
    check_args(args)
    done = []
    if args.stage == "cost" and args.dry_run:
        raise ConfigError("dry_run: --dry-run plans the stages tune and run; cost times the learner (it has no plan "
                          "to print)")
    if args.stage == "cost":
        path = measure_cost(args.out, args.tasks, args.cost_rounds, args.cost_calls)
        return [path] if path else []
    if args.stage == "tune":
        groups = tuning_groups(args.designs, args.tasks, args.learning_rates, args.methods)
        if not groups:
            which = "any method" if args.methods is None else list(args.methods)
            print(f"tune: none of the designs {list(args.designs)} uses {which} on {list(args.tasks)}; "
                  "nothing to tune")
            return done
        if os.path.exists(tuned_path(args.out)):  # before anything runs
            from vaco_jax.analysis import results
            check_grid(tuned_path(args.out), results.read_json(tuned_path(args.out)),
                       args.learning_rates or LEARNING_RATES)
        run_dir = os.path.join(args.out, "tuning")
        if run_groups(run_dir, groups, args, {"stage": "tune"}):
            frozen = freeze(args.out, groups, args.learning_rates)
            for task, methods in frozen["chosen"].items():
                for method, pick in methods.items():
                    print(f"tuned {task}/{method}: {pick['chosen']}")
            done.append(run_dir)
        return done
    # all validated first
    plans = [(name, design_groups(args.out, name, args.tasks, args.methods)) for name in args.designs]
    for name, groups in plans:
        if not groups:
            continue
        run_dir = os.path.join(args.out, name)
        print(f"\n== design {name!r} (claims {DESIGNS[name].claims}) -> {run_dir}")
        if run_groups(run_dir, groups, args, {"stage": "run", "design": name, "claims": DESIGNS[name].claims}):
            tables.summarise(run_dir, reps=args.bootstrap_reps)
            done.append(run_dir)
    return done


def cli() -> None:
    """The command line (`experiments/study.py`, `python -m vaco_jax study`)."""
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.driver.cli import cli_main

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
