"""Training–inference mismatch (docs/lag.md): actor precision x old-logit source, with the cost of recovery.

Actors sample with their snapshot evaluated in ``actor_dtype`` (bfloat16/float16 simulate an
inference engine); the decoupled loss repairs the mismatch with π_old from the chosen source:
``snapshot`` (exact recomputation from the policy buffer), ``infer`` (no repair), ``recompute``
(π_T: absorbs staleness into r_d) — and revised PPO-EWMA with its own reference. Each combination
is a static configuration (its own program); the seconds per chunk of each are recorded, so the
cost of exact recovery is measured, not assumed.

    python experiments/mismatch.py                 # cpu preset

``--shard I/N`` (one of N disjoint parts; the same command without it merges) and ``--cell K``
(re-run one cell alone): docs/scale.md.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

import numpy as np

from vaco_jax.analysis import tables

from vaco_jax.analysis import results

from vaco_jax.driver import grid, study
from vaco_jax.driver.cli import study_settings, with_config_flags
from vaco_jax.core.config import Config

PRESETS = {
    "cpu": dict(task="inverted_double_pendulum", method="a3po", dtypes=("float32", "bfloat16"),
                sources=("snapshot", "infer", "recompute"), lag_depths=(1, 8), seeds=(0, 1),
                total_env_steps=200_000, num_envs=64, unroll_length=32, num_evals=5, eval_episodes=8),
    "paper": dict(task="halfcheetah", method="a3po", dtypes=("float32", "bfloat16", "float16"),
                  sources=("snapshot", "infer", "recompute"), lag_depths=(1, 4, 16), seeds=tuple(range(10)),
                  total_env_steps=5_000_000, num_envs=256, unroll_length=64, num_evals=10, eval_episodes=16),
    "tiny": dict(task="point_mass", method="a3po", dtypes=("bfloat16",), sources=("snapshot",),
                 lag_depths=(1, 4), seeds=(0,), total_env_steps=8 * 16 * 4, num_envs=8, unroll_length=16,
                 num_evals=2, eval_episodes=2),
}


@dataclasses.dataclass
class StudyArgs:
    """Actor precision x old-logit source for a decoupled method, plus revised PPO-EWMA."""

    preset: Literal["cpu", "paper", "tiny"] = "cpu"  # the sizes in PRESETS; a flag given overrides its value
    out: str = ""  # run directory; default runs/mismatch_<preset>
    method: str | None = None  # the decoupled method under test; None: the preset's (a3po)
    dtypes: tuple[str, ...] | None = None  # actor precisions (float32, bfloat16, float16); None: the preset's
    sources: tuple[str, ...] | None = None  # old logits from snapshot, infer or recompute; None: the preset's
    include_ewma_revised: bool = True  # add revised PPO-EWMA at each actor precision
    lag_depths: tuple[int, ...] | None = None  # None: the preset's lag depths B (traced: one program)
    seeds: tuple[int, ...] | None = None  # None: the preset's seeds
    total_env_steps: int | None = None  # None: the preset's env steps per run



PER_GROUP = ("env", "method", "actor_dtype", "old_logit_source", "lag_depth")  # set per group by this script: no single flag for them
Args = with_config_flags(StudyArgs, "Args", exclude=PER_GROUP)  # plus every other Config field as a flag

CHOICES = {"dtypes": ("float32", "bfloat16", "float16"), "sources": ("snapshot", "infer", "recompute")}  # --help


def base_configs(args: Args, spec: dict) -> dict:
    """(method, actor dtype, old-logit source) -> its Config."""
    common = dict(env=spec["task"], total_env_steps=spec["total_env_steps"], num_envs=spec["num_envs"],
                  unroll_length=spec["unroll_length"], num_evals=spec["num_evals"],
                  eval_episodes=spec["eval_episodes"], buffer_capacity=max(spec["lag_depths"]))
    configs = {}
    for dtype in spec["dtypes"]:
        for source in spec["sources"]:
            configs[(spec["method"], dtype, source)] = Config(method=spec["method"], actor_dtype=dtype,
                                                              old_logit_source=source, **common)
        if args.include_ewma_revised:
            configs[("ppo_ewma_revised", dtype, "ewma_revised")] = Config(
                method="ppo_ewma_revised", actor_dtype=dtype, old_logit_source="ewma_revised", **common)
    return configs


HELP_DEFAULTS = {"buffer_capacity": "the largest --lag-depths (by --preset: " + "; ".join(
    f"{p}: {max(s['lag_depths'])}" for p, s in PRESETS.items()) + ")"}  # --help (driver/helptext.py)


def help_configs(preset: str) -> list:
    """--help's defaults (driver/helptext.py): the configs a preset plans when no flag is given."""
    spec = PRESETS[preset]
    return [(spec["task"], c) for c in base_configs(Args(preset=preset), spec).values()]


def main(args: Args) -> str:
    spec = dict(PRESETS[args.preset])
    for key in ("method", "dtypes", "sources", "lag_depths", "seeds", "total_env_steps"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    print(grid.preset_text(args.preset, spec))
    out = args.out or os.path.join("runs", f"mismatch_{args.preset}")
    configs = base_configs(args, spec)
    cells = tuple(grid.grid(spec["lag_depths"], spec["seeds"]))
    groups = grid.apply_sweep(
        [grid.Group(config, cells, os.path.join(spec["task"], method, f"{dtype}_{source}"),
                     f"{method} {dtype} {source}", (("actor_dtype", dtype), ("old_logit_source", source)))
         for (method, dtype, source), config in configs.items()], *study_settings(args, StudyArgs, exclude=PER_GROUP))
    if not study.run_study(out, groups, args, spec):
        return out
    keys = ("method", "actor_dtype", "old_logit_source", "lag_depth")
    table = tables.summarise_by(out, keys, filename="mismatch.csv")
    cost = _seconds_per_chunk(out)
    print(f"mismatch study on {spec['task']}: final eval return IQM [95% CI], seconds per chunk (steady state)")
    for r in table:
        sec = cost.get((r["method"], r["actor_dtype"], r["old_logit_source"]), float("nan"))
        print(f"  {r['method']:<18}{r['actor_dtype']:<10}{r['old_logit_source']:<13}B={r['lag_depth']:<3}"
              f"{r.get('iqm', float('nan')):9.1f} [{r.get('iqm_low', float('nan')):.1f}, "
              f"{r.get('iqm_high', float('nan')):.1f}]  {sec:.2f}s/chunk  diverged={r['n_diverged']}")
    return out


def _seconds_per_chunk(run_dir: str) -> dict:
    """Median seconds per chunk per group, excluding the first chunk (which includes compilation)."""
    out: dict = {}
    for row in results.load_curves(run_dir):
        if row["chunk"] == 0:
            continue
        out.setdefault((row["method"], row["actor_dtype"], row["old_logit_source"]), []).append(row["seconds"])
    return {k: float(np.median(v)) for k, v in out.items()}


def cli() -> None:
    """The command line (`experiments/mismatch.py`, `python -m vaco_jax mismatch`)."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
