"""What the per-epoch minibatch permutation costs: ``minibatch_shuffle='rank'`` vs ``'sort'``.

Two measurements, each printed as the median (min..max) over interleaved rounds:

1. the permutation alone (``update.permutation``), jitted: one permutation of ``batch`` samples, and
   a vmapped one of ``grid`` cells x ``grid_batch`` samples (the shape inside a lag grid);
2. the learner of one phase (``Trainer.learn``: align + E x M gradient steps) and a chunk of
   ``phases`` whole phases (``Trainer.run_chunk``), ``ppo_clip`` at lag depth 1, built twice from
   configurations that differ only in ``minibatch_shuffle``; the rounds alternate the two.

    python benchmarks/minibatch_shuffle.py
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vaco_jax.core.config import Config, make_traced  # noqa: E402
from vaco_jax.core.train import make_train  # noqa: E402
from vaco_jax.core.update import permutation  # noqa: E402


@dataclasses.dataclass
class Args:
    """Cost of the minibatch permutation: 'rank' vs 'sort'."""

    env: str = "inverted_double_pendulum"  # task of the learner measurement
    num_envs: int = 256  # envs per phase (batch = num_envs x unroll_length samples)
    unroll_length: int = 32  # env steps per env per phase
    num_epochs: int = 4  # epochs per phase (one permutation each)
    num_minibatches: int = 4  # minibatches per epoch
    phases: int = 4  # phases per timed chunk
    grid: int = 16  # cells of the vmapped permutation
    grid_batch: int = 2048  # samples per cell of the vmapped permutation
    rounds: int = 9  # interleaved timed rounds


def _timed(fn, args) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return (time.perf_counter() - t0) * 1e3


def _report(title: str, times: dict) -> None:
    parts = [f"{k} {np.median(v):.2f} ms ({min(v):.2f}..{max(v):.2f})" for k, v in times.items()]
    ratio = [a / b for a, b in zip(times["sort"], times["rank"])]
    print(f"{title}: {', '.join(parts)}; sort / rank per round {min(ratio):.2f}..{max(ratio):.2f} "
          f"(median {np.median(ratio):.2f})", flush=True)


def main(args: Args) -> None:
    batch = args.num_envs * args.unroll_length
    print(f"python {' '.join(sys.argv)}\n{time.strftime('%Y-%m-%d %H:%M %Z')}, {platform.node()}, jax "
          f"{jax.__version__}, {jax.devices()[0]}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    key = jax.random.PRNGKey(0)
    keys = jax.random.split(key, args.grid)
    single = {m: jax.jit(lambda k, m=m: permutation(k, batch, m)) for m in ("sort", "rank")}
    grid = {m: jax.jit(jax.vmap(lambda k, m=m: permutation(k, args.grid_batch, m))) for m in ("sort", "rank")}
    for m in ("sort", "rank"):
        jax.block_until_ready(single[m](key))
        jax.block_until_ready(grid[m](keys))
    t1, t2 = {"sort": [], "rank": []}, {"sort": [], "rank": []}
    for _ in range(args.rounds * 5):
        for m in ("sort", "rank"):
            t1[m].append(_timed(single[m], (key,)))
            t2[m].append(_timed(grid[m], (keys,)))
    _report(f"one permutation of {batch} samples", t1)
    _report(f"{args.grid} permutations of {args.grid_batch} samples (vmapped)", t2)

    programs = {}
    for m in ("sort", "rank"):
        config = Config(env=args.env, method="ppo_clip", num_envs=args.num_envs, unroll_length=args.unroll_length,
                        num_epochs=args.num_epochs, num_minibatches=args.num_minibatches,
                        total_env_steps=args.phases * batch, num_evals=1, eval_episodes=0, minibatch_shuffle=m)
        trainer, traced = make_train(config), make_traced(config, 1)
        chunk = jax.jit(trainer.run_chunk)
        state = chunk(jax.jit(trainer.init)(key, traced), traced)[0]
        _, traj, update_key = jax.jit(trainer.collect)(state, traced)
        learn = jax.jit(lambda s, tr, k, t, trainer=trainer: trainer.learn(
            s.learner, s.normalizer, s.buffer, tr, s.phase, k, t))
        programs[m] = {"learn": (learn, (state, traj, update_key, traced)), "chunk": (chunk, (state, traced))}
        for fn, a in programs[m].values():
            jax.block_until_ready(fn(*a))
    times = {part: {"sort": [], "rank": []} for part in ("learn", "chunk")}
    for _ in range(args.rounds):
        for part in times:
            for m in ("sort", "rank"):
                times[part][m].append(_timed(*programs[m][part]))
    _report(f"learner of one phase ({args.env}, {args.num_envs} envs x {args.unroll_length} steps, "
            f"{args.num_epochs} x {args.num_minibatches} updates)", times["learn"])
    _report(f"chunk of {args.phases} phases ({args.phases * batch:,} env steps)", times["chunk"])


if __name__ == "__main__":
    from vaco_jax.driver.cli import parse_args

    main(parse_args(Args))
