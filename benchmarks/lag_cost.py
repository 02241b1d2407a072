"""Where a lagged phase's extra cost goes: the actors' part and the learner's part, timed apart.

``benchmarks.throughput`` gives the cost per env step of ``uniform`` B = 32 over the synchronous path
as one number per round. This benchmark splits a phase (docs/lag.md) into ``Trainer.collect`` (the
rollout: the actors' policy forward passes and the simulator) and ``Trainer.learn`` (alignment and
the E x M gradient steps) and times each for five variants of the same ``ppo_clip`` configuration:

    sync     lag_model='synchronous' (no buffer: every env acts with the learner's parameters)
    b32      uniform, B = 32, one actor per env (the default ``envs_per_actor = 1``): at most 32
             snapshots in use; envs sorted by snapshot into tiles of ``rollout.TILE_ROWS`` envs, one
             copy per tile, a batched matrix product per env step (``rollout``'s per-actor path)
    b32copy  the same with one gathered copy of its snapshot per env, a batched matrix-vector
             product (the per-actor path before tiles; built with ``rollout.TILE_ROWS = 1``)
    b32x16   the same with 16 envs per actor: 16 copies, a batched matrix product
    b32x256  the same with one actor of all envs: the lagged snapshot's states, but one matrix
             product per step (the shared path) - the simulator's share of b32's cost without the
             copies

All five are trained for ``train_phases`` phases first and then advance one phase per round, and
every call of every variant starts from the same env states (the synchronous run's, copied in before
each round), so the simulator steps the same kind of states; each round times every variant twice,
in the order of the list and then in reverse (A B C D E E D C B A), and the ratio to ``sync`` is taken
round by round over the two. The learner's calls take the trajectory the variant's own collect
returned.

    python -m benchmarks.lag_cost                          # inverted_double_pendulum, 256 envs
    python -m benchmarks.lag_cost --learning-rate 1e-9     # policies held near their initialisation
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shlex
import sys
import time

import jax
import numpy as np

from benchmarks.throughput import Args as ThroughputArgs
from benchmarks.throughput import _machine, _versions, our_config
from vaco_jax.core.config import make_traced
from vaco_jax.core.train import make_train


@dataclasses.dataclass
class Args:
    """Collect and learn of one phase timed apart for sync, B = 32 with 1 (tiles, copies), 16 and 256 envs per actor."""

    env: str = "inverted_double_pendulum"  # task
    num_envs: int = 256  # parallel envs
    lag_depth: int = 32  # B of the lagged variants
    learning_rate: float = 3e-4  # Adam step size of every variant (1e-9 holds the policies near their initialisation)
    train_phases: int = 40  # phases every variant trains before the timed rounds
    rounds: int = 12  # timed rounds (each: A B C D E E D C B A, then one phase of training each)
    seed: int = 0  # PRNG seed (the same for every variant)
    out: str | None = None  # JSON output; default runs/benchmarks/lag_cost_<env>.json


VARIANTS = {"sync": dict(lag_model="synchronous", lag_depth=1, envs_per_actor=1),
            "b32": dict(envs_per_actor=1), "b32copy": dict(envs_per_actor=1, tile_rows=1),
            "b32x16": dict(envs_per_actor=16), "b32x256": dict(envs_per_actor=None)}


def build(args: Args, lag_model: str | None = None, lag_depth: int | None = None,
          envs_per_actor: int | None = None, tile_rows: int | None = None) -> dict:
    """One variant: compiled one-phase chunk, collect and learn, and its state after ``init``.
    ``tile_rows`` replaces ``rollout.TILE_ROWS`` while this variant is traced (1: a copy per env)."""
    from vaco_jax.core import rollout
    kept = rollout.TILE_ROWS
    rollout.TILE_ROWS = tile_rows or kept
    try:
        return _build(args, lag_model, lag_depth, envs_per_actor)
    finally:
        rollout.TILE_ROWS = kept


def _build(args, lag_model, lag_depth, envs_per_actor):
    base = ThroughputArgs(env=args.env, num_envs=args.num_envs, learning_rate=args.learning_rate, phases=1,
                          seed=args.seed)
    depth = args.lag_depth if lag_depth is None else lag_depth
    config = dataclasses.replace(our_config(base, lag_model, depth, phases=1),
                                 envs_per_actor=envs_per_actor or args.num_envs)
    traced = make_traced(config, config.lag_depth)
    trainer = make_train(config)
    state = jax.jit(trainer.init)(jax.random.PRNGKey(args.seed), traced)

    def learn(state, traj, key, traced):
        return trainer.learn(state.learner, state.normalizer, state.buffer, traj, state.phase, key, traced)[0]

    collect = jax.jit(trainer.collect).lower(state, traced).compile()
    _, traj, key = collect(state, traced)
    return {"config": config, "traced": traced, "state": state,
            "chunk": jax.jit(trainer.run_chunk).lower(state, traced).compile(), "collect": collect,
            "learn": jax.jit(learn).lower(state, traj, key, traced).compile()}


def main(args: Args | None = None) -> dict:
    from vaco_jax.driver.cli import parse_args

    args = args or parse_args(Args)
    if args.lag_depth < 2 or args.num_envs % 16 or args.rounds < 1:
        raise SystemExit(f"--lag-depth must be >= 2 (got {args.lag_depth}), --num-envs a multiple of 16 "
                         f"(got {args.num_envs}) and --rounds >= 1 (got {args.rounds})")
    out_path = args.out or os.path.join("runs", "benchmarks", f"lag_cost_{args.env}.json")
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
            "versions": _versions(), "machine": _machine()}
    t_all = time.perf_counter()
    names = [n.replace("32", str(args.lag_depth)) for n in VARIANTS]
    v = {}
    for name, kw in zip(names, VARIANTS.values()):
        print(f"[compile] {name} ...", flush=True)
        v[name] = build(args, **kw)

    def advance():  # one phase of training each, all from the synchronous run's env states
        common = v[names[0]]["state"].env_state
        for x in v.values():
            x["state"] = jax.block_until_ready(x["chunk"](x["state"]._replace(env_state=common), x["traced"]))[0]

    print(f"[train] {args.train_phases} phases each ...", flush=True)
    for _ in range(args.train_phases):
        advance()
    seconds = {n: {"collect": [], "learn": []} for n in names}
    for r in range(args.rounds):
        common = v[names[0]]["state"].env_state
        acc = {n: {"collect": 0.0, "learn": 0.0} for n in names}
        for n in names + names[::-1]:
            x = v[n]
            state = x["state"]._replace(env_state=common)
            t0 = time.perf_counter()
            _, traj, key = jax.block_until_ready(x["collect"](state, x["traced"]))
            t1 = time.perf_counter()
            jax.block_until_ready(x["learn"](state, traj, key, x["traced"]))
            t2 = time.perf_counter()
            acc[n]["collect"] += t1 - t0
            acc[n]["learn"] += t2 - t1
        for n in names:
            for part in ("collect", "learn"):
                seconds[n][part].append(acc[n][part] / 2)
        print(f"[round {r + 1}/{args.rounds}] ms per phase (collect/learn): "
              + ", ".join(f"{n} {1e3 * acc[n]['collect'] / 2:.0f}/{1e3 * acc[n]['learn'] / 2:.0f}" for n in names),
              flush=True)
        advance()

    results, lines = {}, []
    steps = v[names[0]]["config"].batch_size
    m = meta["machine"]
    lines += [f"lag cost on {args.env}: {args.num_envs} envs x {v[names[0]]['config'].unroll_length} steps per "
              f"phase, ppo_clip, learning rate {args.learning_rate:g}, {args.train_phases} phases trained, "
              f"{args.rounds} rounds (A B C D E E D C B A, same env states)",
              f"jax {meta['versions']['jax']}, mujoco-mjx {meta['versions']['mujoco-mjx']}; {m['cpu_model']}, "
              f"{m['cpus_available']} CPUs; {meta['date']}", f"command: {meta['command']}", "",
              f"{'variant':<10} {'part':<8} {'ms/phase':>9} {'/ sync: median':>15} {'min..max':>14}"]
    for n in names:  # seconds per round of each part, and of the whole phase
        seconds[n] = {part: np.asarray(x) for part, x in seconds[n].items()}
        seconds[n]["phase"] = seconds[n]["collect"] + seconds[n]["learn"]
    for n in names:
        results[n] = {}
        for part in ("collect", "learn", "phase"):
            each = seconds[n][part]
            ratio = each / seconds[names[0]][part]
            results[n][part] = {"seconds_each": each.tolist(), "ratio_to_sync_each": ratio.tolist(),
                                "ms": 1e3 * float(np.median(each)), "ratio_median": float(np.median(ratio)),
                                "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max())}
            lines.append(f"{n:<10} {part:<8} {1e3 * np.median(each):>9.1f} {np.median(ratio):>15.3f} "
                         f"{ratio.min():>6.3f}..{ratio.max():.3f}")
    lines.append(f"(one phase = {steps:,} env steps)")
    meta["total_seconds"] = time.perf_counter() - t_all
    text = "\n".join(lines)
    print("\n" + text, flush=True)
    payload = {"args": dataclasses.asdict(args), **meta, "results": results, "report": text}
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    with open(out_path + ".tmp", "w") as f:
        json.dump(payload, f, indent=1)
    os.replace(out_path + ".tmp", out_path)
    print(f"\nwritten to {out_path} (total {meta['total_seconds']:.0f} s)")
    return payload


if __name__ == "__main__":
    main()
