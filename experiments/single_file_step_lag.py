"""A step size x lag grid of two methods, top to bottom in one file: which step size is best, and does
the best one move as lag grows?

Each method is one static configuration (its pieces fix the program), so each method is one compiled
program; inside it every cell (lag depth B x step size x seed) is a set of traced numbers, vmapped.
A method's step size is the knob its registry entry names (``METHODS[m].step_knob``: PPO-Clip's clip
range, VACO's TV budget, ...), swept on a log grid around the method's default. The file writes one
score row per cell and draws each method's AUC against the step size, one line per lag depth.

    .venv/bin/python experiments/single_file_step_lag.py                      # PPO-Clip and VACO, Hopper-v4
    .venv/bin/python experiments/single_file_step_lag.py --methods ppo_clip spo --factors 0.5 1 2
    .venv/bin/python experiments/single_file_step_lag.py --help

Only the package's public names are used; the project's own study of this question, with a protocol
fixed before its runs, is ``experiments/steplag.py``.
"""

from __future__ import annotations

import dataclasses
import os
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
    methods: tuple[str, ...] = ("ppo_clip", "vaco")  # each needs a step knob in vaco_jax.METHODS
    factors: tuple[float, ...] = (0.3, 1.0, 3.0)  # step sizes: these multiples of the method's default
    lag_depths: tuple[int, ...] = (1, 16)
    seeds: tuple[int, ...] = (0, 1)
    total_env_steps: Annotated[int, DIGITS_GROUPED] = 200_000  # per run (whole chunks run: a note says how many)
    num_evals: int = 10
    num_envs: Annotated[int | None, TASKS_OWN] = None  # parallel environments
    unroll_length: Annotated[int | None, TASKS_OWN] = None  # env steps per env per phase
    out: str = "runs/single_file_step_lag"


def method_config(args: Args, method: str) -> Config:
    if method not in METHODS or METHODS[method].step_knob is None:
        usable = [m for m, p in METHODS.items() if p.step_knob]
        raise SystemExit(f"--methods {method!r}: choose methods with a step knob: {', '.join(usable)}")
    shapes = {k: v for k, v in (("num_envs", args.num_envs), ("unroll_length", args.unroll_length)) if v is not None}
    return Config.for_task(args.env, method=method, total_env_steps=args.total_env_steps, num_evals=args.num_evals,
                           buffer_capacity=max(args.lag_depths), **shapes)


def steps(config: Config) -> str:
    """The env steps each run takes: whole chunks of whole phases (num_evals x phases x num_envs x unroll_length)."""
    ran = config.phases_run * config.batch_size
    return f"{ran:,} env steps each" + ("" if ran == config.total_env_steps else
                                         f" (of {config.total_env_steps:,} asked: whole chunks of whole phases run)")


def run_method(args: Args, method: str) -> list[dict]:
    """One method's grid as one program; returns a score row per cell."""
    config = method_config(args, method)
    knob = METHODS[method].step_knob
    default = _default_of(config, knob)
    cells = [(b, default * f, s) for b in args.lag_depths for f in args.factors for s in args.seeds]
    traced = stack_traced([make_traced(config, b, **{knob: v}) for b, v, _ in cells])
    keys = jnp.stack([jax.random.PRNGKey(s) for _, _, s in cells])
    print(f"{method}: {len(cells)} cells (B x {knob} x seed) in one program, " + steps(config))
    _, metrics = jax.jit(jax.vmap(make_train(config, progress=True).train))(keys, traced)  # a line per chunk
    evals = np.asarray(metrics.eval_return, float)  # [cells, num_evals]
    diverged = np.asarray(metrics.diverged).any(axis=-1)
    return [{"env": config.env, "method": method, "lag_depth": b, "step_knob": knob, "step_size": v, "seed": s,
             "final_eval_return": float(evals[i, -1]), "auc_eval_return": float(evals[i].mean()),
             "diverged": bool(diverged[i])} for i, (b, v, s) in enumerate(cells)]


def _default_of(config: Config, knob: str) -> float:
    """The step size the method uses when none is given: the config's value, else the one its piece holds
    (``config.build_method()``: the method's four pieces with their numbers)."""
    if getattr(config, knob, None) is not None:
        return float(getattr(config, knob))
    method = config.build_method()
    piece = next(p for p in (method.advantage, method.proximal, method.surrogate, method.sample_filter)
                 if hasattr(p, knob))
    return float(getattr(piece, knob))


def surface(rows: list[dict]) -> dict:
    """(method, B) -> [(step size, mean AUC over the seeds kept, runs kept)]; diverged runs left out."""
    out: dict = {}
    for key in sorted({(r["method"], r["lag_depth"]) for r in rows}):
        here = [r for r in rows if (r["method"], r["lag_depth"]) == key]
        points = []
        for v in sorted({r["step_size"] for r in here}):
            auc = [r["auc_eval_return"] for r in here if r["step_size"] == v and not r["diverged"]]
            points.append((v, float(np.mean(auc)) if auc else float("nan"), len(auc)))
        out[key] = points
    return out


def draw(table: dict, methods, path: str) -> None:
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods), 3.2), squeeze=False)
    for ax, method in zip(axes[0], methods):
        for (m, b), points in table.items():
            if m == method:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"B = {b}")
        ax.set_xscale("log")
        values = sorted({p[0] for (m, _), points in table.items() if m == method for p in points})
        ax.set_xticks(values, [f"{v:.3g}" for v in values])
        ax.minorticks_off()
        ax.set_xlabel(METHODS[method].step_knob)
        ax.set_title(METHODS[method].label or method)
    axes[0][0].set_ylabel("AUC of the evaluation return")
    axes[0][-1].legend(frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def main(args: Args) -> list[dict]:
    rows = [row for method in args.methods for row in run_method(args, method)]
    os.makedirs(args.out, exist_ok=True)
    write_table(os.path.join(args.out, "scores.csv"), rows)
    table = surface(rows)
    draw(table, args.methods, os.path.join(args.out, "surface.png"))
    print(f"{'method':<12}{'B':>4}  best step size  mean AUC  (runs kept / seeds)")
    for (method, b), points in table.items():
        finite = [p for p in points if np.isfinite(p[1])]
        best = max(finite, key=lambda p: p[1]) if finite else (float("nan"), float("nan"), 0)
        print(f"{method:<12}{b:>4}  {best[0]:>14.4g}  {best[1]:>8.1f}  ({best[2]} / {len(args.seeds)})")
    lost = sum(r["diverged"] for r in rows)
    if lost:
        print(f"diverged (left out): {lost} of {len(rows)} runs")
    print(f"wrote {args.out}/scores.csv and {args.out}/surface.png")
    return rows


if __name__ == "__main__":
    main(tyro.cli(Args))
