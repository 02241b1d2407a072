"""VACO's TV budget δ (docs/surrogates.md): δ x lag depth x seeds, plus the options that explain the result.

δ is traced, so every δ and lag depth of one variant is a single vmapped program. Variants are the
static options the docs name: the TV denominator (β, the default, or π_T) and the scale (½·L1 = TV, or
L1), and the ablations vaco_realign_only / vaco_filter_only.

    python experiments/delta_sweep.py                       # cpu preset
    python experiments/delta_sweep.py --variants vaco vaco_learner_denominator --deltas 0.05 0.4

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
from vaco_jax.core.config import Config, ConfigError

# variant name -> Config overrides
VARIANTS = {
    "vaco": dict(method="vaco"),
    "vaco_learner_denominator": dict(method="vaco", tv_denominator="learner"),
    "vaco_l1_scale": dict(method="vaco", tv_scale="l1"),
    "vaco_filter_only": dict(method="vaco_filter_only"),
}
PRESETS = {
    "cpu": dict(task="inverted_double_pendulum", variants=("vaco", "vaco_learner_denominator"),
                deltas=(0.05, 0.1, 0.2, 0.4), lag_depths=(1, 4, 16), seeds=(0, 1), total_env_steps=200_000,
                num_envs=64, unroll_length=32, num_evals=5, eval_episodes=8),
    "paper": dict(task="halfcheetah", variants=tuple(VARIANTS), deltas=(0.05, 0.1, 0.2, 0.4),
                  lag_depths=(1, 4, 16, 32), seeds=tuple(range(10)), total_env_steps=5_000_000, num_envs=256,
                  unroll_length=64, num_evals=10, eval_episodes=16),
    "tiny": dict(task="point_mass", variants=("vaco",), deltas=(0.05, 0.4), lag_depths=(1, 4),
                 seeds=(0,), total_env_steps=8 * 16 * 4, num_envs=8, unroll_length=16, num_evals=2,
                 eval_episodes=2),
}


@dataclasses.dataclass
class StudyArgs:
    """Sweep VACO's TV budget δ against lag depth, for each denominator/scale variant."""

    preset: Literal["cpu", "paper", "tiny"] = "cpu"  # the sizes in PRESETS; a flag given overrides its value
    out: str = ""  # run directory; default runs/delta_sweep_<preset>
    variants: tuple[str, ...] | None = None  # VACO forms, names in VARIANTS; None: the preset's
    deltas: tuple[float, ...] | None = None  # TV budgets δ (traced: one program); None: the preset's
    lag_depths: tuple[int, ...] | None = None  # None: the preset's lag depths B (traced: one program)
    seeds: tuple[int, ...] | None = None  # None: the preset's seeds
    total_env_steps: int | None = None  # None: the preset's env steps per run



PER_GROUP = ("env", "method", "tv_denominator", "tv_scale", "tv_budget", "lag_depth")  # set per group or cell by this script: no flag for them
Args = with_config_flags(StudyArgs, "Args", exclude=PER_GROUP)  # plus every other Config field as a flag

CHOICES = {"variants": tuple(VARIANTS)}  # --help (driver/helptext.py)


def base_configs(spec: dict) -> dict:
    """variant -> its Config."""
    return {v: Config(env=spec["task"], total_env_steps=spec["total_env_steps"], num_envs=spec["num_envs"],
                      unroll_length=spec["unroll_length"], num_evals=spec["num_evals"],
                      eval_episodes=spec["eval_episodes"], buffer_capacity=max(spec["lag_depths"]),
                      **VARIANTS[v]) for v in spec["variants"]}


HELP_DEFAULTS = {"buffer_capacity": "the largest --lag-depths (by --preset: " + "; ".join(
    f"{p}: {max(s['lag_depths'])}" for p, s in PRESETS.items()) + ")"}  # --help (driver/helptext.py)


def help_configs(preset: str) -> list:
    """--help's defaults (driver/helptext.py): the configs a preset plans when no flag is given."""
    spec = PRESETS[preset]
    return [(spec["task"], c) for c in base_configs(spec).values()]


def main(args: Args) -> str:
    spec = dict(PRESETS[args.preset])
    for key in ("variants", "deltas", "lag_depths", "seeds", "total_env_steps"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    for v in spec["variants"]:
        if v not in VARIANTS:
            raise ConfigError(f"variants: {v!r} is not valid; allowed values: {', '.join(VARIANTS)}")
    print(grid.preset_text(args.preset, spec))
    out = args.out or os.path.join("runs", f"delta_sweep_{args.preset}")
    configs = base_configs(spec)
    cells = tuple(grid.grid(spec["lag_depths"], spec["seeds"], tv_budget=list(spec["deltas"])))
    groups = grid.apply_sweep([grid.Group(config, cells, os.path.join(spec["task"], variant), variant,
                                            (("variant", variant),)) for variant, config in configs.items()],
                               *study_settings(args, StudyArgs, exclude=PER_GROUP))
    if not study.run_study(out, groups, args, spec):
        return out
    table = tables.summarise_by(out, ("variant", "tv_budget", "lag_depth"), filename="delta_sweep.csv")
    filt = tables.summarise_by(out, ("variant", "tv_budget", "lag_depth"), score="mean_filtered_fraction",
                                 filename="delta_sweep_filtered.csv")
    print(f"VACO δ sweep on {spec['task']}: final eval return IQM [95% CI] | mean filtered fraction")
    for r, f in zip(table, filt):
        print(f"  {r['variant']:<26} δ={r['tv_budget']:<5} B={r['lag_depth']:<3} "
              f"{r.get('iqm', float('nan')):9.1f} [{r.get('iqm_low', float('nan')):.1f}, "
              f"{r.get('iqm_high', float('nan')):.1f}] | {f.get('mean', float('nan')):.3f}"
              f"  diverged={r['n_diverged']}")
    return out


def cli() -> None:
    """The command line (`experiments/delta_sweep.py`, `python -m vaco_jax delta-sweep`)."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
