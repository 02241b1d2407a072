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
that saturate); a pair with a diverged run is never chosen. Choices are frozen in ``OUT/tuned.json``:
re-tuning never changes a frozen choice, and the study refuses a (task, method) without one.

**Designs** (``DESIGNS``; one run directory each, ``OUT/<design>/``): which methods, lag depths and
settings each claim needs, on which tasks. Every design uses the study seeds ``STUDY_SEEDS`` and the
task's budget (``TASKS``). ``lag`` (claims 1, 2, 6) runs on every task; the others on
``PAIR_TASKS`` (the two cheapest).

**Cost** (``OUT/proximal/learner_cost.csv``, claim 3b): the learner's milliseconds per phase (align + E x M
gradient steps on one fixed lagged batch, at the design's largest lag depth and the frozen step sizes)
of the ``proximal`` design's methods, timed in ``--cost-rounds`` interleaved rounds (the methods'
order alternating), each round the median of ``--cost-calls`` calls per method. A chunk's wall time
(curves' ``seconds``) is mostly env stepping and evaluation, which the methods share, so it cannot
resolve a difference of one forward pass per phase; this measures the part the methods differ in,
with the diagnostic TV to π_T switched off (``UpdateShape.learner_diagnostics``), so that each method
computes π_T only if it reads it (decoupled PPO's proximal policy is π_T; A-3PO's is not).
A finished table is kept: delete it to measure again.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from tyro.conf import Positional

import numpy as np

from vaco_jax.core.config import Config, ConfigError
from vaco_jax.core.presets import METHODS

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
MISMATCH_STRENGTH = 0.5  # docs/lag.md: 14% of samples' π_old/π_infer leave [0.5, 2] at m = 0.5
# At m = 0.5 the revised PPO-EWMA's reset (kept fraction < 0.5) never fired on either task, so claim 4b
# could not be tested there. At m = 1.5 the mismatch alone keeps ~51% of one action dimension's samples
# (docs/lag.md), so the reset fires when staleness pushes the kept fraction further down.
MISMATCH_STRENGTH_STRONG = 1.5
COST_DESIGN, COST_FILE = "proximal", "learner_cost.csv"  # claim 3b's per-phase cost (stage ``cost``)
COST_ROUNDS, COST_CALLS = 200, 10


@dataclasses.dataclass(frozen=True)
class Design:
    """One run directory of the study: the methods a claim compares, at which lag depths, on which tasks.

    ``variants``: method -> ((name, static changes, step-knob factor), ...): extra groups of a method
    run beside (or instead of, when the method is not in ``methods``) its tuned form, in a subdirectory
    ``variant=<name>`` with a ``variant`` column. ``traced``: method -> {knob: values} multiplying its
    cells. ``static`` / ``knobs``: settings of every group (a static field / a traced knob's value).
    """

    claims: str
    methods: tuple
    lag_depths: tuple
    every_task: bool = False
    static: tuple = ()
    knobs: tuple = ()
    traced: tuple = ()
    variants: tuple = ()


_MISMATCH = Design("4", ("ppo_ewma", "ppo_ewma_revised"), (16,),
                   knobs=(("mismatch_strength", MISMATCH_STRENGTH),),
                   static=(("ppo_ewma", (("old_logit_source", "infer"),)),),
                   traced=(("ppo_ewma_revised", (("ewma_reset_threshold", (0.0, 0.5)),)),))

DESIGNS = {
    # 1: lag costs PPO-Clip / PPO-KL / SPO and not VACO; 2: filter / clip fractions; 6: own-B1 normalisation
    "lag": Design("1 2 6", ("ppo_clip", "ppo_kl", "spo", "vaco"), (1, 4, 16), every_task=True),
    # 3: A-3PO vs decoupled PPO with pi_T recomputed
    "proximal": Design("3", ("a3po", "decoupled_recompute"), (1, 16)),
    # 4: revised vs plain PPO-EWMA under a training-inference mismatch; the revised one without its reset.
    # Plain PPO-EWMA takes pi_old from the actor's reported log-probs (old logits missing, as in a
    # system whose inference engine is not the learner); the revised one imposes its own.
    "mismatch": _MISMATCH,
    # 4 again, at a mismatch large enough for the reset to fire (a directory of its own: a finished design
    # is never changed)
    "mismatch_strong": dataclasses.replace(_MISMATCH, knobs=(("mismatch_strength", MISMATCH_STRENGTH_STRONG),)),
    # 5: each half of VACO alone (full VACO's runs are the lag design's)
    "ablation": Design("5", ("vaco_realign_only", "vaco_filter_only"), (16,)),
    # 6: is VACO's edge only a larger step? PPO-Clip with twice its tuned clip range, and with twice the epochs
    "step": Design("6", (), (1, 16), variants=(("ppo_clip", (("clip_x2", (), 2.0), ("epochs_x2", (("num_epochs", 8),),
                                                                                                1.0))),)),
}


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


def knob_default(config: Config, name: str) -> float:
    """The value a method uses for a knob it reads: the config's, else its piece's default."""
    value = getattr(config, name, None)
    if value is not None:
        return float(value)
    method = config.build_method()
    for piece in (method.advantage, method.proximal, method.surrogate, method.sample_filter):
        if hasattr(piece, name):
            return float(getattr(piece, name))
    raise ConfigError(f"{name}: method {config.method!r} does not read it")


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


def choose(rows: list[dict], knob: str | None) -> dict:
    """The tuned pair from one (task, method)'s tuning rows: highest mean AUC over the tuning seeds,
    pairs with a diverged run excluded. Returns the choice and every pair's numbers."""
    from vaco_jax.analysis.tables import is_diverged

    keys = ["learning_rate"] + ([knob] if knob else [])
    pairs: dict[tuple, list[dict]] = {}
    for r in rows:
        pairs.setdefault(tuple(float(r[k]) for k in keys), []).append(r)
    table = []
    for pair, rs in sorted(pairs.items()):
        auc = [float(r["auc_eval_return"]) for r in rs]
        final = [float(r["final_eval_return"]) for r in rs]
        diverged = sum(is_diverged(r) for r in rs)
        table.append({**dict(zip(keys, pair)), "mean_auc": float(np.mean(auc)), "mean_final": float(np.mean(final)),
                      "runs": len(rs), "diverged": diverged})
    ok = [t for t in table if t["diverged"] == 0 and np.isfinite(t["mean_auc"])]
    if not ok:
        raise ConfigError("every tuning pair diverged or has no score; widen the grid (LEARNING_RATES, KNOB_FACTORS)")
    best = max(ok, key=lambda t: t["mean_auc"])
    return {"chosen": {k: best[k] for k in keys}, "grid": table}


def check_grid(path: str, frozen: dict, learning_rates) -> None:
    """A tuning directory holds one grid: other learning rates belong in another ``--out``."""
    grid = frozen.get("learning_rates")
    if grid is not None and [float(x) for x in grid] != [float(x) for x in learning_rates]:
        raise ConfigError(f"learning_rates: {list(learning_rates)} differs from {frozen['learning_rates']}, the grid "
                          f"{path} was tuned with; a wider grid is a new tuning directory (choose another --out)")


def tuned_path(out: str) -> str:
    return os.path.join(out, "tuned.json")


def freeze(out: str, groups, learning_rates=None) -> dict:
    """Choose and freeze every tuned (task, method) of ``groups`` in ``OUT/tuned.json``; a frozen
    choice is never changed (a different choice from the same rows is an error: the rows changed)."""
    from vaco_jax.analysis import results
    from vaco_jax.driver import provenance
    learning_rates = learning_rates or LEARNING_RATES
    path = tuned_path(out)
    os.makedirs(out, exist_ok=True)
    # processes tuning other --methods may freeze at the same moment: one read-modify-write at a time
    with provenance.directory_lock(out):
        frozen = results.read_json(path) if os.path.exists(path) else {
            "criterion": "max mean auc_eval_return over the tuning seeds, no diverged run",
            "tuning_seeds": list(TUNING_SEEDS), "learning_rates": [float(x) for x in learning_rates],
            "knob_factors": list(KNOB_FACTORS), "chosen": {}}
        check_grid(path, frozen, learning_rates)
        rows = results.load_scores(os.path.join(out, "tuning"))
        for g in groups:
            task, method = g.config.env, g.config.method
            pick = choose([r for r in rows if r["env"] == task and r["method"] == method], STEP_KNOB[method])
            old = frozen["chosen"].get(task, {}).get(method)
            if old is not None and old["chosen"] != pick["chosen"]:
                raise ConfigError(f"{path}: {task}/{method} was frozen at {old['chosen']}, the tuning rows now "
                                  f"give {pick['chosen']}; the tuning results changed (restore them or choose "
                                  "another --out)")
            frozen["chosen"].setdefault(task, {})[method] = pick
        results.write_json(path, frozen)
    return frozen


def tuned(out: str, task: str, method: str) -> dict:
    from vaco_jax.analysis import results
    path = tuned_path(out)
    chosen = results.read_json(path)["chosen"] if os.path.exists(path) else {}
    if method not in chosen.get(task, {}):
        raise ConfigError(f"{task}/{method} has no frozen step size in {path}; run first: python "
                          f"experiments/study.py tune --out {out} --tasks {task}")
    return chosen[task][method]["chosen"]


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

def interleaved_costs(calls: dict, rounds: int, per_round: int, clock=None) -> list[dict]:
    """Time each task's methods in ``rounds`` interleaved rounds.

    ``calls``: {(task, method): zero-argument call}. Task by task: in each of its rounds the task's
    methods are timed one after another, the order reversed every other round (so drifting load
    falls on both alike); a method's value for the round is the median of ``per_round`` calls.
    Rows: env, method, round, learner_ms."""
    import statistics
    import time

    clock = clock or time.perf_counter
    by_task: dict[str, list] = {}
    for (task, method), call in calls.items():
        by_task.setdefault(task, []).append((method, call))
    rows = []
    for task, methods in by_task.items():
        for r in range(rounds):
            for method, call in (methods if r % 2 == 0 else methods[::-1]):
                times = []
                for _ in range(per_round):
                    t0 = clock()
                    call()
                    times.append(clock() - t0)
                rows.append({"env": task, "method": method, "round": r,
                             "learner_ms": 1e3 * statistics.median(times)})
    return rows


def measure_cost(out: str, tasks, rounds: int, per_round: int) -> str | None:
    """Claim 3b's table ``OUT/<COST_DESIGN>/learner_cost.csv`` (and a ``.json`` beside it saying
    where and how each task was measured). Tasks already in the table are kept as they are; the
    design's other tasks among ``tasks`` are measured and added. Returns its path, None when the
    design has no task among ``tasks``."""
    import time

    import jax

    from vaco_jax.analysis import results
    from vaco_jax.core.config import make_traced
    from vaco_jax.driver import provenance
    from vaco_jax.driver.program import learner_call

    path = os.path.join(out, COST_DESIGN, COST_FILE)
    meta_path = path[:-len(".csv")] + ".json"
    lag_depth = max(DESIGNS[COST_DESIGN].lag_depths)
    fresh_meta = {"what": "learner milliseconds per phase (align + E x M gradient steps on one fixed lagged batch; "
                          "the TV-to-pi_T diagnostic off, so pi_T is computed only by a method that reads it)",
                  "design": COST_DESIGN, "measurements": []}
    if os.path.exists(path):  # damaged files are errors here, before anything is compiled or timed
        old = results.read_table(path)
        meta = results.read_json(meta_path) if os.path.exists(meta_path) else fresh_meta
        depths = sorted({int(r["lag_depth"]) for r in old})
        if depths != [lag_depth]:
            raise ConfigError(f"{path}: measured at lag depth {depths}, the design's is {lag_depth}; "
                              "delete it to measure again")
    else:  # a deleted table starts a new record of where it was measured
        old, meta = [], fresh_meta
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
    calls = {}
    for g in groups:
        print(f"cost: compiling {g.config.env}/{g.config.method} at B={lag_depth}", flush=True)
        warm = -(-lag_depth // g.config.phases_per_chunk)  # enough phases for every lag up to the depth
        calls[(g.config.env, g.config.method)] = learner_call(g.config, lag_depth, make_traced(g.config, lag_depth),
                                                              warm_chunks=warm, learner_diagnostics=False)[0]
    t0 = time.time()
    rows = [{**r, "lag_depth": lag_depth} for r in interleaved_costs(calls, rounds, per_round)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    where = provenance.machine()
    meta["measurements"].append({
        "tasks": sorted({r["env"] for r in rows}), "lag_depth": lag_depth, "rounds": rounds,
        "calls_per_round": per_round, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
        "seconds": round(time.time() - t0, 1), "cpu": where["cpu"], "cpu_count": where["cores"], "jax": jax.__version__,
        "device": str(jax.devices()[0])})
    results.write_json(meta_path, meta)  # first: rows are never without the record of where they were timed
    results.write_table(path, old + rows)
    for task in sorted({r["env"] for r in rows}):
        means = {m: np.mean([r["learner_ms"] for r in rows if r["env"] == task and r["method"] == m])
                 for m in sorted({r["method"] for r in rows if r["env"] == task})}
        print(f"cost {task}: " + ", ".join(f"{m} {v:.2f} ms" for m, v in means.items()))
    return path


def main(args: Args) -> list[str]:
    from vaco_jax.analysis import tables
    from vaco_jax.driver import study
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
        spec = {"stage": "tune", "tasks": sorted({g.config.env for g in groups})}
        if study.run_study(run_dir, groups, args, spec,
                           prepare=lambda: study.random_scores(run_dir, spec["tasks"], groups[0].config)):
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
        spec = {"stage": "run", "design": name, "claims": DESIGNS[name].claims,
                "tasks": sorted({g.config.env for g in groups})}
        print(f"\n== design {name!r} (claims {DESIGNS[name].claims}) -> {run_dir}")
        if study.run_study(run_dir, groups, args, spec,
                           prepare=lambda: study.random_scores(run_dir, spec["tasks"], groups[0].config)):
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
