"""A grid of G cells as one vmapped program vs G separate runs, compile time included.

Separate runs are what a for-loop of single-run jobs costs: each is compiled on its own (the JAX
caches are cleared between them, as separate processes would start cold). Both paths train the same
cells (lag depths x seeds) for the same number of env steps.

    python benchmarks/sweep_scaling.py --grid-sizes 1 4 8 16
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vaco_jax.config import Config, make_traced, stack_traced  # noqa: E402
from vaco_jax.train import make_train  # noqa: E402


@dataclasses.dataclass
class Args:
    env: str = "inverted_double_pendulum"
    method: str = "ppo_clip"
    grid_sizes: tuple[int, ...] = (1, 4, 8)
    separate_runs: int = 4  # how many separate runs to time (their mean is scaled to G)
    num_envs: int = 64
    unroll_length: int = 32
    total_env_steps: int = 65_536
    out: str = "runs/benchmarks/sweep_scaling.json"


def _cells(config, g):
    depths = [1, 2, 4, 8, 16]
    return [(s, depths[s % len(depths)]) for s in range(g)]


def time_grid(config, g):
    trainer = make_train(config)
    cells = _cells(config, g)
    keys = jnp.stack([jax.random.PRNGKey(s) for s, _ in cells])
    traced = stack_traced([make_traced(config, b) for _, b in cells])
    jax.clear_caches()
    t0 = time.perf_counter()
    fn = jax.jit(jax.vmap(trainer.train))
    jax.block_until_ready(fn(keys, traced))
    total = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(fn(keys, traced))
    steady = time.perf_counter() - t0
    return total, steady


def time_single(config, seed, depth):
    trainer = make_train(config)
    jax.clear_caches()
    t0 = time.perf_counter()
    fn = jax.jit(trainer.train)
    jax.block_until_ready(fn(jax.random.PRNGKey(seed), make_traced(config, depth)))
    total = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(fn(jax.random.PRNGKey(seed), make_traced(config, depth)))
    return total, time.perf_counter() - t0


def main(args: Args) -> dict:
    config = Config(env=args.env, method=args.method, num_envs=args.num_envs, unroll_length=args.unroll_length,
                    total_env_steps=args.total_env_steps, num_evals=1, eval_episodes=0, buffer_capacity=16)
    steps = config.num_evals * config.env_steps_per_chunk
    singles = [time_single(config, s, b) for s, b in _cells(config, args.separate_runs)]
    single_total = sum(t for t, _ in singles) / len(singles)
    single_steady = sum(t for _, t in singles) / len(singles)
    rows = []
    for g in args.grid_sizes:
        total, steady = time_grid(config, g)
        rows.append({"grid_size": g, "grid_seconds_incl_compile": total, "grid_seconds_steady": steady,
                     "separate_seconds_incl_compile": g * single_total, "separate_seconds_steady": g * single_steady,
                     "speedup_incl_compile": g * single_total / total, "speedup_steady": g * single_steady / steady,
                     "grid_env_steps_per_second": g * steps / steady})
    cmd = "python " + " ".join(sys.argv)
    print(f"{cmd}\n{time.strftime('%Y-%m-%d')}, {platform.node()}, jax {jax.__version__}, {jax.devices()[0]}, "
          f"{os.cpu_count()} CPUs; {args.env}/{args.method}, {args.num_envs} envs x {args.unroll_length} steps, "
          f"{steps} env steps per cell; one separate run: {single_total:.1f} s incl. compile, "
          f"{single_steady:.2f} s steady")
    print("| G | grid s (incl. compile) | G separate runs s | speed-up | grid s steady | separate steady | "
          "speed-up steady | grid env steps/s |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['grid_size']} | {r['grid_seconds_incl_compile']:.1f} | {r['separate_seconds_incl_compile']:.1f} | "
              f"{r['speedup_incl_compile']:.2f}x | {r['grid_seconds_steady']:.2f} | {r['separate_seconds_steady']:.2f} | "
              f"{r['speedup_steady']:.2f}x | {r['grid_env_steps_per_second']:.0f} |")
    result = {"command": cmd, "date": time.strftime("%Y-%m-%d"), "jax": jax.__version__,
              "device": str(jax.devices()[0]), "args": dataclasses.asdict(args), "rows": rows}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    return result


if __name__ == "__main__":
    import tyro

    main(tyro.cli(Args))
