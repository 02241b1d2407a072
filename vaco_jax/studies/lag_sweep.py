"""The MuJoCo lag sweep (docs/evaluation.md): methods x lag depths x seeds x tasks -> scores, statistics, figures.

One compiled program per (task, method) vmaps lag depths x seeds, sharded over local devices.
Re-running the same command skips finished groups and resumes unfinished ones from their last
checkpoint.

    python experiments/lag_sweep.py                     # cpu preset (default)
    python experiments/lag_sweep.py --preset paper      # GPU-sized
    python experiments/lag_sweep.py --preset cpu --methods ppo_clip vaco --lag-depths 1 8
    python experiments/lag_sweep.py --preset tiny --sweep gamma=0.99,0.995 learning_rate=1e-4,3e-4
    python experiments/lag_sweep.py --preset paper --shard 3/16 --out runs/paper   # part 3 (0-based) of 16
    python experiments/lag_sweep.py --preset paper --out runs/paper                # merge the 16 shards
    python experiments/lag_sweep.py --preset tiny --cell 3      # re-run cell 3 alone, compare with the sweep

``--sweep NAME=V1,V2 ...`` takes any setting: a traced knob (gamma, learning_rate, clip_epsilon, ...)
multiplies the cells of each group (one compiled program), a static field (num_epochs, policy_hidden,
actor_dtype, ...) makes one group per value. The plan is printed before anything compiles.
``--shard I/N`` and ``--cell K`` (every study script): docs/scale.md. What it prints when the sweep is
done (the AUC table, the README's headline, the note on untuned step sizes): ``lag_sweep_report``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Literal

from vaco_jax.driver.cli import study_settings, with_config_flags
from vaco_jax.core.config import Config, ConfigError
from vaco_jax.core.methods import METHODS
from vaco_jax.core.lag import LAG_MODELS
from vaco_jax.studies.lag_sweep_report import README_FIGURE, headline, print_table, untuned_note

PRESETS = {
    # the main job (`make demo`): the project's question on a locomotion task, sized for 2 CPU cores (BENCHMARKS.md)
    "demo": dict(tasks=("Hopper-v4",), methods=("ppo_clip", "vaco"), lag_depths=(1, 8, 32), seeds=(0, 1, 2),
                 total_env_steps=307_200, num_envs=None, unroll_length=None, num_evals=10, eval_episodes=8,
                 buffer_capacity=32),
    # ~10 minutes on 2 CPU cores (BENCHMARKS.md)
    "cpu": dict(tasks=("inverted_double_pendulum",), methods=("ppo_clip", "vaco", "a3po", "ppo_ewma_revised"),
                lag_depths=(1, 4, 16), seeds=(0, 1, 2), total_env_steps=300_000, num_envs=64,
                unroll_length=32, num_evals=10, eval_episodes=8, buffer_capacity=16),
    # sized for one GPU: the gym-MuJoCo set of the SPO / VACO protocol, >= 10 seeds
    "paper": dict(tasks=("halfcheetah", "hopper", "walker2d", "ant", "humanoid"),
                  methods=("ppo_clip", "vaco", "vaco_realign_only", "vaco_filter_only", "a3po", "ppo_ewma",
                           "ppo_ewma_revised", "decoupled_recompute", "spo"),
                  lag_depths=(1, 2, 4, 8, 16, 32), seeds=tuple(range(10)), total_env_steps=10_000_000,
                  num_envs=256, unroll_length=64, num_evals=20, eval_episodes=16, buffer_capacity=32),
    # Gymnasium's Hopper-v4 on MuJoCo's C engine with the task's own (peer-checked) defaults: PPO-Clip and
    # VACO at B = 1 and 16, sized to finish in <= 20 minutes on 2 CPU cores (BENCHMARKS.md, "MuJoCo's C engine")
    "cpu_locomotion": dict(tasks=("Hopper-v4",), methods=("ppo_clip", "vaco"), lag_depths=(1, 16), seeds=(0, 1, 2),
                           total_env_steps=400_000, num_envs=None, unroll_length=None, num_evals=10,
                           eval_episodes=8, buffer_capacity=16),
    # for tests and smoke runs: the tiny pure-JAX point_mass task (seconds, no physics engine)
    "tiny": dict(tasks=("point_mass",), methods=("ppo_clip",), lag_depths=(1, 4),
                 seeds=(0, 1), total_env_steps=8 * 16 * 4, num_envs=8, unroll_length=16, num_evals=2,
                 eval_episodes=2, buffer_capacity=4),
}


@dataclasses.dataclass
class StudyArgs:
    """Lag sweep: every (task, method) is one compiled, vmapped grid of lag depths x seeds."""

    preset: Literal["demo", "cpu", "cpu_locomotion", "paper", "tiny"] = "demo"  # the sizes in PRESETS; a flag given overrides its value
    out: str = ""  # run directory; default runs/lag_sweep_<preset>
    tasks: tuple[str, ...] | None = None  # None: the preset's tasks
    methods: tuple[str, ...] | None = None  # None: the preset's methods (a group per task and method)
    lag_depths: tuple[int, ...] | None = None  # None: the preset's lag depths B (traced: one program)
    seeds: tuple[int, ...] | None = None  # None: the preset's seeds
    total_env_steps: int | None = None  # None: the preset's env steps per run
    num_envs: int | None = None  # None: the preset's parallel envs per run
    unroll_length: int | None = None  # None: the preset's steps per env per phase
    num_evals: int | None = None  # None: the preset's evaluations per run (learning-curve points)
    eval_episodes: int | None = None  # None: the preset's episodes per evaluation (stochastic: docs/evaluation.md)
    lag_model: Literal[tuple(LAG_MODELS)] = "uniform"  # how each actor's lag is drawn (docs/lag.md); 'ages' takes --age-weights
    learning_rate: float | None = None  # None: the Config default (3e-4)
    clip_epsilon: float | None = None  # None: each method's default; applied to the methods that read it
    tv_budget: float | None = None  # None: VACO's default (0.2)
    episode_length: int | None = None  # steps before an episode is truncated (None: the task's own time limit, else 1000)
    bootstrap_reps: int = 2000  # bootstrap resamples of the summaries' confidence intervals
    figures: bool = True  # draw the figures when the sweep is done



PER_GROUP = ("env", "method", "lag_depth")  # set per group or cell by this script (--lag-depths): no flag for them
Args = with_config_flags(StudyArgs, "Args", exclude=PER_GROUP)  # plus every other Config field as a flag

def resolve(args: Args) -> dict:
    """Preset values overridden by any flag given; validated before anything is compiled."""
    spec = dict(PRESETS[args.preset])
    for key in ("tasks", "methods", "lag_depths", "seeds", "total_env_steps", "num_envs", "unroll_length",
                "num_evals", "eval_episodes"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    for m in spec["methods"]:
        if m not in METHODS:
            raise ConfigError(f"methods: {m!r} is not valid; allowed values: {', '.join(METHODS)}")
    weights = age_weights(args)
    if weights:  # each cell's lag depth is its weights' last age + 1; the buffer holds the longest
        spec["lag_depths"] = (max(len(w) for w in weights),)
    for key in ("tasks", "methods", "lag_depths", "seeds"):
        if len(spec[key]) == 0:
            raise ConfigError(f"{key}: at least one value is needed")
        if len(set(spec[key])) != len(spec[key]):
            raise ConfigError(f"{key}={tuple(spec[key])} contains duplicates")
    if min(spec["lag_depths"]) < 1:
        raise ConfigError(f"lag_depths={spec['lag_depths']} must be >= 1")
    given = getattr(args, "buffer_capacity", None)  # a flag given is kept, never raised behind the user's back
    if given is not None:
        if not isinstance(given, int) or given < max(spec["lag_depths"]):
            raise ConfigError(f"buffer_capacity={given!r} must be an integer >= the largest lag depth, "
                              f"{max(spec['lag_depths'])} (or left unset: the preset's, raised to fit)")
        spec["buffer_capacity"] = given
    elif max(spec["lag_depths"]) > spec["buffer_capacity"]:
        print(f"buffer_capacity raised from the preset's {spec['buffer_capacity']} to {max(spec['lag_depths'])}: "
              "the policy buffer must hold the largest lag depth")
        spec["buffer_capacity"] = max(spec["lag_depths"])
    if not isinstance(args.bootstrap_reps, int) or args.bootstrap_reps < 1:
        raise ConfigError(f"bootstrap_reps={args.bootstrap_reps!r} must be a positive integer")
    spec["out"] = args.out or os.path.join("runs", f"lag_sweep_{args.preset}")
    return spec


def age_weights(args: Args) -> list[tuple] | None:
    """With a lag model that reads ``age_weights`` (``ages``): every weight vector the cells use (one
    fixed, or a ``--sweep`` / several ``--age-histogram`` files' axis); None for any other model."""
    if not LAG_MODELS[args.lag_model].reads_age_weights:
        return None
    if args.lag_depths is not None:
        raise ConfigError(f"lag_depths: with lag_model={args.lag_model!r} a cell's lag depth follows its age "
                          "weights; leave --lag-depths out")
    axes, fixed = study_settings(args, StudyArgs, exclude=PER_GROUP)
    weights = [fixed["age_weights"]] if "age_weights" in fixed else list(axes.get("age_weights", ()))
    if not weights:
        raise ConfigError(f"lag_model={args.lag_model!r} needs the ages' weights: --age-histogram FILE ..., "
                          "--age-weights W0 W1 ... or --sweep age_weights=...")
    return weights


def base_config(args: Args, spec: dict, task: str, method: str, weights: list[tuple] | None = None) -> Config:
    """The task's own defaults (Config.for_task), then the preset's sizes (None: the task's), then flags.
    ``weights``: :func:`age_weights`' vectors with a lag model that reads them (the first is the
    config's; a sweep axis replaces it per cell)."""
    sizes = {k: spec[k] for k in ("total_env_steps", "num_envs", "unroll_length", "num_evals", "eval_episodes",
                                  "buffer_capacity") if spec.get(k) is not None}
    ages = {"age_weights": weights[0]} if weights else {}
    length = {} if args.episode_length is None else {"episode_length": args.episode_length}
    return Config.for_task(task, method=method, lag_model=args.lag_model, **sizes, **ages, **length)


def plan(args: Args, spec: dict) -> list:
    """Every group (task x method x static sweep values) with its cells, validated, nothing compiled."""
    from vaco_jax.driver import grid
    keys = [(t, m) for t in spec["tasks"] for m in spec["methods"]]
    weights = age_weights(args)  # the histogram files read once
    configs = grid.with_knobs([base_config(args, spec, t, m, weights) for t, m in keys],
                               dict(learning_rate=args.learning_rate, clip_epsilon=args.clip_epsilon,
                                    tv_budget=args.tv_budget))
    ages = weights is not None
    depths = (configs[0].effective_lag_depth(),) if ages else spec["lag_depths"]  # a sweep axis sets it per cell
    cells = tuple(grid.grid(depths, spec["seeds"]))
    groups = [grid.Group(c, cells, os.path.join(t, m), f"{t}/{m}") for (t, m), c in zip(keys, configs)]
    axes, fixed = study_settings(args, StudyArgs, exclude=PER_GROUP)
    if ages:
        fixed.pop("age_weights", None)  # the configs hold it already
    return grid.apply_sweep(groups, axes, fixed)


def main(args: Args) -> str:
    from vaco_jax.analysis import tables
    from vaco_jax.driver import grid, study
    spec = resolve(args)
    groups = plan(args, spec)
    print(grid.preset_text(args.preset, spec))
    run_dir = spec["out"]
    t0 = time.perf_counter()
    if not study.run_study(run_dir, groups, args, spec,
                           prepare=lambda: study.random_scores(run_dir, spec["tasks"], groups[0].config)):
        return run_dir
    summary, _ = tables.summarise(run_dir, reps=args.bootstrap_reps)
    print(f"\nlag sweep finished in {time.perf_counter() - t0:.0f} s -> {run_dir}")
    print_table(summary)
    line = headline(summary)
    if line:
        print(line)
    note = untuned_note(groups)
    if note:
        print(note)
    if args.figures:
        from vaco_jax.analysis import figures
        paths = figures.make_all(run_dir)
        print(f"{len(paths)} figures in {os.path.join(run_dir, 'figures')}; the README's is "
              f"{os.path.join(run_dir, 'figures', README_FIGURE)}")
    print(f"the table above: {os.path.join(run_dir, 'summary.csv')} (score auc_eval_return)")
    return run_dir


def cli() -> None:
    """The command line (`experiments/lag_sweep.py`, `python -m vaco_jax lag-sweep`)."""
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.driver.cli import cli_main

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
