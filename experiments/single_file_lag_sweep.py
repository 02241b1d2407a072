"""One method's lag sweep on a Gymnasium task, top to bottom in one file: the place to start a new study.

Every cell (lag depth B x seed) differs from the others only in traced numbers, so the whole grid is
one compiled program: ``jax.vmap(trainer.train)`` over the cells' keys and traced parameters. The
file then writes one score row per cell (a plain CSV, its checksum beside it, as every run directory
of the project) and draws how much of its B = 1 score the method keeps as lag grows.

    .venv/bin/python experiments/single_file_lag_sweep.py                    # VACO on Hopper-v4, ~10 min
    .venv/bin/python experiments/single_file_lag_sweep.py --method ppo_clip --lag-depths 1 4 16
    .venv/bin/python experiments/single_file_lag_sweep.py --help

Only the package's public names are used (``vaco_jax.Config``, ``make_traced``, ``stack_traced``,
``make_train``, ``METHODS``, ``write_table``). Copy the file and change what your question needs; the
studies in ``vaco_jax/studies/`` add what a long study needs on top (checkpoints between chunks,
resuming, sharding over devices, bootstrap statistics).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Annotated

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import tyro

from vaco_jax import METHODS, Config, make_traced, make_train, stack_traced, write_table

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


# --help as every vaco command shows it: 200_000 (not 200000), and INT with the task's value (not {None}|INT)
DIGITS_GROUPED = tyro.conf.arg(help_behavior_hint=lambda d: f"(default: {int(d):_})")
TASKS_OWN = tyro.conf.arg(metavar="INT", help_behavior_hint="(default: the task's own)")


@dataclasses.dataclass
class Args:
    env: str = "Hopper-v4"  # a Gymnasium task (its own defaults apply) or 'point_mass' (the tiny pure-JAX task)
    method: str = "vaco"  # any name in vaco_jax.METHODS
    lag_depths: tuple[int, ...] = (1, 8, 32)  # B: each actor acts with a policy up to B - 1 versions old
    seeds: tuple[int, ...] = (0, 1, 2)
    total_env_steps: Annotated[int, DIGITS_GROUPED] = 200_000  # per run (whole chunks run: a note says how many)
    num_evals: int = 10  # evaluation points per run: the learning curve the AUC is taken over
    num_envs: Annotated[int | None, TASKS_OWN] = None  # parallel environments
    unroll_length: Annotated[int | None, TASKS_OWN] = None  # env steps per env per phase
    out: str = "runs/single_file_lag_sweep"


def make_config(args: Args) -> Config:
    """One static configuration for every cell: the task's defaults, then the settings given here.
    The buffer holds the deepest lag; shapes (envs, unroll, buffer) are the same in every cell."""
    if args.method not in METHODS:
        raise SystemExit(f"--method {args.method!r}: choose one of {', '.join(METHODS)}")
    shapes = {k: v for k, v in (("num_envs", args.num_envs), ("unroll_length", args.unroll_length)) if v is not None}
    return Config.for_task(args.env, method=args.method, total_env_steps=args.total_env_steps,
                           num_evals=args.num_evals, buffer_capacity=max(args.lag_depths), **shapes)


def steps(config: Config) -> str:
    """The env steps each run takes: whole chunks of whole phases (num_evals x phases x num_envs x unroll_length)."""
    ran = config.phases_run * config.batch_size
    return f"{ran:,} env steps each" + ("" if ran == config.total_env_steps else
                                         f" (of {config.total_env_steps:,} asked: whole chunks of whole phases run)")


def run_grid(config: Config, cells: list[tuple[int, int]]):
    """Every cell's whole run as one program. ``make_traced`` checks each cell's values (a lag depth
    deeper than the buffer is an error before anything compiles)."""
    trainer = make_train(config, progress=True)  # a line after each chunk: the grid is one long program
    traced = stack_traced([make_traced(config, lag_depth) for lag_depth, _ in cells])
    keys = jnp.stack([jax.random.PRNGKey(seed) for _, seed in cells])
    _, metrics = jax.jit(jax.vmap(trainer.train))(keys, traced)
    return jax.device_get(metrics)


def score_rows(config: Config, cells, metrics) -> list[dict]:
    """One row per cell: the final evaluation return, the area under the evaluation curve (its mean
    over the evaluation points) and whether the parameters ever became non-finite (diverged)."""
    evals = np.asarray(metrics.eval_return, float)  # [cells, num_evals]
    diverged = np.asarray(metrics.diverged).any(axis=-1)
    return [{"env": config.env, "method": config.method, "lag_depth": b, "seed": s,
             "final_eval_return": float(evals[i, -1]), "auc_eval_return": float(evals[i].mean()),
             "diverged": bool(diverged[i])} for i, (b, s) in enumerate(cells)]


def retention(rows: list[dict]) -> dict[int, tuple[float, float, int]]:
    """Per lag depth: the mean AUC over seeds divided by the mean at B = 1, its standard error (the
    seeds' spread at that B over the same B = 1 mean) and the number of runs kept. Diverged runs are
    left out and reported, never averaged in."""
    kept = [r for r in rows if not r["diverged"]]
    base = np.mean([r["auc_eval_return"] for r in kept if r["lag_depth"] == min(r["lag_depth"] for r in rows)])
    out = {}
    for b in sorted({r["lag_depth"] for r in rows}):
        auc = np.array([r["auc_eval_return"] for r in kept if r["lag_depth"] == b])
        se = auc.std(ddof=1) / np.sqrt(len(auc)) / abs(base) if len(auc) > 1 else float("nan")
        out[b] = (float(auc.mean() / base) if len(auc) else float("nan"), float(se), len(auc))
    return out


def draw(kept: dict, config: Config, path: str) -> None:
    lags = sorted(kept)
    mean = np.array([kept[b][0] for b in lags])
    se = np.array([kept[b][1] for b in lags])
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.errorbar(lags, mean, yerr=np.nan_to_num(se), marker=METHODS[config.method].marker, capsize=3,
                color=METHODS[config.method].colour, label=METHODS[config.method].label or config.method)
    ax.axhline(1.0, color="0.6", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lags, [str(b) for b in lags])
    ax.set_xlabel("lag depth B")
    ax.set_ylabel("AUC / AUC at the smallest B")
    ax.set_title(f"{config.env}: retention under lag")
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def main(args: Args) -> list[dict]:
    config = make_config(args)
    cells = [(b, s) for b in args.lag_depths for s in args.seeds]
    print(f"{config.env} / {config.method}: {len(cells)} cells (B x seed) in one program, " + steps(config))
    start = time.perf_counter()
    metrics = run_grid(config, cells)
    rows = score_rows(config, cells, metrics)
    print(f"trained in {time.perf_counter() - start:.0f} s")

    os.makedirs(args.out, exist_ok=True)
    write_table(os.path.join(args.out, "scores.csv"), rows)  # pandas.read_csv reads it as it is
    kept = retention(rows)
    draw(kept, config, os.path.join(args.out, "retention.png"))

    print(f"{'B':>4}  {'retention':>9}  {'± se':>6}  runs")
    for b, (mean, se, n) in kept.items():
        print(f"{b:>4}  {mean:>9.3f}  {se:>6.3f}  {n:>4}")
    lost = [f"B={r['lag_depth']} seed {r['seed']}" for r in rows if r["diverged"]]
    if lost:
        print("diverged (left out):", ", ".join(lost))
    print(f"wrote {args.out}/scores.csv and {args.out}/retention.png")
    return rows


if __name__ == "__main__":
    main(tyro.cli(Args))
