"""A grid of G cells as one vmapped program vs G separate runs, compile time included.

Separate runs are what a for-loop of single-run jobs costs: each is compiled on its own (the JAX
caches are cleared between them, as separate processes would start cold). Both paths train the same
cells (lag depths x seeds) for the same number of env steps.

    python benchmarks/sweep_scaling.py --grid-sizes 1 4 8 16
    python benchmarks/sweep_scaling.py --brax --grid-sizes 16 --separate-runs 1 --repeats 5

With ``--brax`` the largest grid is also compared with G separate runs of Brax's own PPO trainer on
the same batch shape (benchmarks/throughput.py's ``bench_brax``): the grid's steady calls are timed
between Brax's timed epochs (interleaved rounds), and the report gives, per round, the steady-state
ratio (grid env steps/s over Brax's) and the ratio with compilation for a run of ``total_env_steps``
per cell (``run_env_steps``: G x (Brax compile + steps / Brax rate) over grid compile + G x steps /
grid rate). A target is met only when every round clears it. Each round times one grid call of
``grid_phases`` phases x G cells right before a Brax epoch of (by default) as many env steps
(G x ``grid_phases`` training steps) and one more grid call right after it; the grid's rate for the
round is taken over both calls, which bracket the epoch in time, so a drift of the machine's speed
during the round moves both sides alike (the call before alone is reported beside it).
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
    """A grid of G cells as one vmapped program vs G separate runs, compile time included."""

    env: str = "inverted_double_pendulum"  # task of every run
    method: str = "ppo_clip"  # method of every run
    grid_sizes: tuple[int, ...] = (1, 4, 8)  # cells G per program (one lag grid as one program)
    separate_runs: int = 4  # how many separate runs to time (their mean is scaled to G)
    num_envs: int = 64  # parallel envs per cell
    unroll_length: int = 32  # env steps per env per phase
    total_env_steps: int = 65_536  # env steps per cell of each timed program
    out: str = "runs/benchmarks/sweep_scaling.json"  # JSON output
    brax: bool = False  # also compare the largest grid with G separate runs of Brax's PPO trainer
    repeats: int = 5  # interleaved rounds for --brax
    grid_phases: int = 4  # --brax: phases per timed grid call (one chunk of the grid program)
    brax_phases: int | None = None  # --brax: training steps per timed Brax epoch; default G x grid_phases (the grid call's env steps)
    run_env_steps: int = 300_000  # --brax: run length per cell for the ratio with compilation (the cpu preset's)


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


def _grid_vs_own_runs(args: Args, config, steps: int, cmd: str) -> list[dict]:
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
    return rows


def main(args: Args) -> dict:
    config = Config(env=args.env, method=args.method, num_envs=args.num_envs, unroll_length=args.unroll_length,
                    total_env_steps=args.total_env_steps, num_evals=1, eval_episodes=0, buffer_capacity=16)
    if args.brax:  # one timed grid call = one chunk of grid_phases phases
        config = config.replace(total_env_steps=args.grid_phases * config.batch_size)
    steps = config.num_evals * config.env_steps_per_chunk
    cmd = "python " + " ".join(sys.argv)
    if args.brax:  # only the comparison with Brax's trainer (the grid's own separate runs: without --brax)
        print(f"{cmd}\n{time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, jax {jax.__version__}, "
              f"{jax.devices()[0]}, {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
        rows = [compare_brax(args, config, max(args.grid_sizes))]
    else:
        rows = _grid_vs_own_runs(args, config, steps, cmd)
    result = {"command": cmd, "date": time.strftime("%Y-%m-%d"), "jax": jax.__version__,
              "device": str(jax.devices()[0]), "args": dataclasses.asdict(args), "rows": rows}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    return result


def compare_brax(args: Args, config, g: int) -> dict:
    """The grid of ``g`` cells against ``g`` separate runs of Brax's trainer (see the module docstring)."""
    import numpy as np

    from benchmarks.throughput import Args as ThroughputArgs, CompileLog, bench_brax

    trainer = make_train(config)
    cells = _cells(config, g)
    keys = jnp.stack([jax.random.PRNGKey(s) for s, _ in cells])
    traced = stack_traced([make_traced(config, b) for _, b in cells])
    init = jax.jit(jax.vmap(trainer.init))
    chunk = jax.jit(jax.vmap(trainer.run_chunk))
    jax.clear_caches()
    t0 = time.perf_counter()
    state = jax.block_until_ready(chunk(init(keys, traced), traced)[0])
    first = time.perf_counter() - t0
    steps = config.env_steps_per_chunk  # per cell per call
    before, after, holder = [], [], [state]

    def timed_grid_call(into):
        t = time.perf_counter()
        holder[0] = jax.block_until_ready(chunk(holder[0], traced)[0])
        into.append(time.perf_counter() - t)

    def grid_round(_r):  # right before Brax's timed epoch r
        timed_grid_call(before)

    def grid_after(_r):  # right after it: the two calls bracket the epoch in time
        timed_grid_call(after)

    targs = ThroughputArgs(env=config.env, backend=config.backend, num_envs=config.num_envs,
                           unroll_length=config.unroll_length, num_minibatches=config.num_minibatches,
                           num_epochs=config.num_epochs, policy_hidden=tuple(config.policy_hidden),
                           value_hidden=tuple(config.value_hidden), episode_length=config.episode_length,
                           phases=args.brax_phases or g * config.phases_per_chunk, repeats=args.repeats,
                           warmup=1, seed=0)
    brax = bench_brax(targs, CompileLog(), grid_round, grid_after)
    grid_sps = [2 * g * steps / (a + b) for a, b in zip(before, after)]  # round r: both calls together
    before_sps = [g * steps / a for a in before]
    grid_compile = first - g * steps / float(np.median(before_sps))
    total = args.run_env_steps
    steady = [a / b for a, b in zip(grid_sps, brax["steps_per_second_each"])]
    steady_before = [a / b for a, b in zip(before_sps, brax["steps_per_second_each"])]
    with_compile = [g * (brax["compile_seconds"] + total / b) / (grid_compile + g * total / a)
                    for a, b in zip(grid_sps, brax["steps_per_second_each"])]
    row = {"grid_size": g, "brax_compile_seconds": brax["compile_seconds"],
           "brax_steps_per_second_each": brax["steps_per_second_each"], "grid_compile_seconds": grid_compile,
           "grid_steps_per_second_each": grid_sps, "steady_ratio_each": steady,
           "grid_before_steps_per_second_each": before_sps, "steady_ratio_before_only_each": steady_before,
           "grid_seconds_before_each": before, "grid_seconds_after_each": after,
           "with_compile_ratio_each": with_compile, "env_steps_per_cell": total,
           "steady_target_met": min(steady) >= 1.0, "with_compile_target_met": min(with_compile) >= 5.0}
    print(f"\n{g}-cell grid vs {g} separate runs of Brax's trainer ({config.num_envs} envs x "
          f"{config.unroll_length} steps, {config.num_epochs}x{config.num_minibatches} updates per phase; "
          f"{args.repeats} interleaved rounds; per round {g * steps:,} env steps of the grid "
          f"({config.phases_per_chunk} phases x {g} cells) right before and again right after "
          f"{brax['env_steps_per_call']:,} of Brax)")
    print(f"grid: compile {grid_compile:.1f} s, env steps/s (all cells) per round, both calls together "
          + ", ".join(f"{x:,.0f}" for x in grid_sps) + "; the call before alone "
          + ", ".join(f"{x:,.0f}" for x in before_sps))
    print(f"Brax: compile {brax['compile_seconds']:.1f} s, env steps/s per round "
          + ", ".join(f"{x:,.0f}" for x in brax["steps_per_second_each"]))
    print(f"target steady state, grid / Brax >= 1.0: median {np.median(steady):.3f}, rounds "
          f"{min(steady):.3f}..{max(steady):.3f} -> {'met' if row['steady_target_met'] else 'NOT met'} (per round "
          + ", ".join(f"{x:.3f}" for x in steady) + "; the call before alone: "
          + ", ".join(f"{x:.3f}" for x in steady_before) + ")")
    print(f"target with compilation ({total:,} env steps per cell), {g} Brax runs / grid >= 5: median "
          f"{np.median(with_compile):.2f}, rounds {min(with_compile):.2f}..{max(with_compile):.2f} -> "
          f"{'met' if row['with_compile_target_met'] else 'NOT met'}")
    return row


if __name__ == "__main__":
    import tyro

    main(tyro.cli(Args))
