"""Forward-lag sweep (docs/evaluation.md figure 5): epochs x minibatches per phase at a fixed backward lag.

Forward lag is the drift of pi_theta away from pi_T inside a phase; it grows with the number of
gradient steps S = E x M. Each (E, M) changes shapes, so each is its own compiled group; seeds are
vmapped inside it.

    python experiments/forward_lag.py                               # cpu preset
    python experiments/forward_lag.py --epochs 1 4 8 --minibatches 2 8 --lag-depth 8

``--shard I/N`` (one of N disjoint parts; the same command without it merges) and ``--cell K``
(re-run one cell alone): docs/scale.md.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from vaco_jax.analysis import tables

from vaco_jax.driver import grid, study
from vaco_jax.driver.cli import study_settings, with_config_flags
from vaco_jax.core.config import Config

PRESETS = {
    "cpu": dict(task="inverted_double_pendulum", methods=("ppo_clip", "vaco"), epochs=(1, 4, 8),
                minibatches=(2, 8), seeds=(0, 1, 2), total_env_steps=200_000, num_envs=64, unroll_length=32,
                num_evals=5, eval_episodes=8),
    "paper": dict(task="halfcheetah", methods=("ppo_clip", "vaco", "a3po", "ppo_ewma_revised"),
                  epochs=(1, 2, 4, 8, 16), minibatches=(1, 4, 16, 32), seeds=tuple(range(10)),
                  total_env_steps=5_000_000, num_envs=256, unroll_length=64, num_evals=10, eval_episodes=16),
    "tiny": dict(task="point_mass", methods=("ppo_clip",), epochs=(1, 2), minibatches=(2,),
                 seeds=(0,), total_env_steps=8 * 16 * 4, num_envs=8, unroll_length=16, num_evals=2,
                 eval_episodes=2),
}


@dataclasses.dataclass
class StudyArgs:
    """Epochs x minibatches (forward lag) at a fixed lag depth (backward lag)."""

    preset: Literal["cpu", "paper", "tiny"] = "cpu"  # the sizes in PRESETS; a flag given overrides its value
    out: str = ""  # run directory; default runs/forward_lag_<preset>
    lag_depth: int = 4  # the fixed backward lag B
    methods: tuple[str, ...] | None = None  # None: the preset's methods
    epochs: tuple[int, ...] | None = None  # epochs per phase E (forward lag); None: the preset's
    minibatches: tuple[int, ...] | None = None  # minibatches per epoch M (forward lag); None: the preset's
    seeds: tuple[int, ...] | None = None  # None: the preset's seeds
    total_env_steps: int | None = None  # None: the preset's env steps per run
    figures: bool = True  # draw the figures when the sweep is done



PER_GROUP = ("env", "method", "num_epochs", "num_minibatches")  # set per group by this script: no single flag for them
Args = with_config_flags(StudyArgs, "Args", exclude=PER_GROUP)  # plus every other Config field as a flag

HELP_DEFAULTS = {"buffer_capacity": "--lag-depth's value (4 unless given)"}  # --help (driver/helptext.py)


def base_configs(args: Args, spec: dict) -> dict:
    """(method, E, M) -> its Config, every one built (and validated) before anything compiles."""
    configs = {}
    for method in spec["methods"]:
        for e in spec["epochs"]:
            for m in spec["minibatches"]:
                configs[(method, e, m)] = Config(
                    env=spec["task"], method=method, num_epochs=e, num_minibatches=m,
                    total_env_steps=spec["total_env_steps"], num_envs=spec["num_envs"],
                    unroll_length=spec["unroll_length"], num_evals=spec["num_evals"],
                    eval_episodes=spec["eval_episodes"], buffer_capacity=max(args.lag_depth, 1))
    return configs


def help_configs(preset: str) -> list:
    """--help's defaults (driver/helptext.py): the configs a preset plans when no flag is given."""
    spec = PRESETS[preset]
    return [(spec["task"], c) for c in base_configs(Args(preset=preset), spec).values()]


def main(args: Args) -> str:
    spec = dict(PRESETS[args.preset])
    for key in ("methods", "epochs", "minibatches", "seeds", "total_env_steps"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    print(grid.preset_text(args.preset, spec))
    out = args.out or os.path.join("runs", f"forward_lag_{args.preset}")
    configs = base_configs(args, spec)
    cells = tuple(grid.grid([args.lag_depth], spec["seeds"]))
    groups = grid.apply_sweep(
        [grid.Group(config, cells, os.path.join(spec["task"], method, f"e{e}_m{m}"), f"{method} E={e} M={m}",
                     (("num_epochs", e), ("num_minibatches", m))) for (method, e, m), config in configs.items()],
        *study_settings(args, StudyArgs, exclude=PER_GROUP))
    if not study.run_study(out, groups, args, spec):
        return out
    table = tables.summarise_by(out, ("method", "num_epochs", "num_minibatches"), filename="forward_lag.csv")
    print(f"forward lag at lag depth {args.lag_depth} ({spec['task']}): final eval return, IQM [95% CI]")
    for r in table:
        print(f"  {r['method']:<12} E={r['num_epochs']:<3} M={r['num_minibatches']:<3} "
              f"{r.get('iqm', float('nan')):9.1f} [{r.get('iqm_low', float('nan')):.1f}, "
              f"{r.get('iqm_high', float('nan')):.1f}]  runs={r['n_runs']} diverged={r['n_diverged']}")
    if args.figures:
        from vaco_jax.analysis import figures
        print("figure:", *figures.plot_forward_lag(out))
    return out


def cli() -> None:
    """The command line (`experiments/forward_lag.py`, `python -m vaco_jax forward-lag`)."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
