"""A grid of G cells as one vmapped program vs G separate runs, compile time included.

Separate runs are what a for-loop of single-run jobs costs: each is compiled on its own (the JAX
caches are cleared between them, as separate processes would start cold). Both paths train the same
cells (lag depths x seeds) for the same number of env steps.

    python benchmarks/sweep_scaling.py --grid-sizes 1 4 8 16
    python benchmarks/sweep_scaling.py --brax --grid-sizes 16 --separate-runs 1 --repeats 5

With ``--brax`` the largest grid is also compared with G separate runs of Brax's own PPO trainer on
the same batch shape (benchmarks/throughput.py's ``bench_brax``), at the same stage of training. One
Brax run stands for each of the G separate runs. Its epochs are ``grid_phases`` training steps, the
env steps one grid call gives each cell, and one grid call runs right before each of its epochs
(inside Brax's ``progress_fn``, outside the time charged to Brax), so after every pair the Brax run
and each cell of the grid have taken the same number of env steps: the cost of an env step changes
as a policy learns (the simulator's solver works harder in some states), and comparing a grid whose
cells are early in training with a Brax run far ahead of them would measure that instead. A round
is ``pairs_per_round`` consecutive pairs: the grid's env steps/s over its calls of the round
against Brax's over its epochs of the round (Brax's own ``training/sps`` for each epoch, the epoch
call alone: its per-epoch host work, which short epochs would inflate, is not charged to it). The
report gives, per round, the steady-state ratio and the ratio with compilation for a run of
``run_env_steps`` per cell (G x (Brax compile + steps / Brax rate) over grid compile + G x steps /
grid rate). A target is met only when every round clears it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vaco_jax.core.config import Config, make_traced  # noqa: E402
from vaco_jax.core.train import make_train  # noqa: E402
from vaco_jax.driver.grid import Cell  # noqa: E402
from vaco_jax.driver.program import group_program, layout  # noqa: E402


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
    repeats: int = 5  # --brax: rounds (each of pairs_per_round grid calls and Brax epochs)
    pairs_per_round: int = 8  # --brax: (grid call, Brax epoch) pairs per round
    grid_phases: int = 4  # --brax: phases per grid call = training steps per Brax epoch (the same stage)
    learning_rate: float = 3e-4  # Adam step size of every run (both trainers with --brax); 1e-9 holds every policy near its initialisation, so both sides' simulators see the same kind of states
    grid_batch: int | None = None  # the grid's cells in vmapped batches of this many, one batch after another (Config.grid_batch; default: all at once)
    run_env_steps: int = 300_000  # --brax: run length per cell for the ratio with compilation (the cpu preset's)
    brax_devices: int | None = 1  # --brax: devices of each Brax run (its max_devices_per_host; None: all local devices, its envs split over them)


def _cells(config, g):
    depths = [1, 2, 4, 8, 16]
    return [(s, depths[s % len(depths)]) for s in range(g)]


def _grid(config, g) -> list[Cell]:
    return [Cell(lag_depth=b, seed=s) for s, b in _cells(config, g)]


def time_grid(config, g):
    used, per_device = layout(config, g)
    program = group_program(config, _grid(config, g), devices=None if used * per_device == g else 1)  # padding: one device
    jax.clear_caches()
    t0 = time.perf_counter()
    fn = program.over_grid(program.trainer.train)  # the whole run, every chunk and evaluation
    jax.block_until_ready(fn(program.keys, program.traced))
    total = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(fn(program.keys, program.traced))
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
                    total_env_steps=args.total_env_steps, num_evals=1, eval_episodes=0, buffer_capacity=16,
                    learning_rate=args.learning_rate, grid_batch=args.grid_batch)
    if args.brax:  # one timed grid call = one chunk of grid_phases phases
        config = config.replace(total_env_steps=args.grid_phases * config.batch_size)
    steps = config.num_evals * config.env_steps_per_chunk
    cmd = "python " + " ".join(sys.argv)
    if args.brax:  # only the comparison with Brax's trainer (the grid's own separate runs: without --brax)
        print(f"{cmd}\n{time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, jax {jax.__version__}, "
              f"{len(jax.local_devices())} x {jax.devices()[0].device_kind}, {os.cpu_count()} CPUs; load average "
              f"{os.getloadavg()[0]:.2f}; the grid's cells split over the {len(jax.local_devices())} device(s), "
              f"each Brax run on {args.brax_devices or len(jax.local_devices())} of them")
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

    used, per_device = layout(config, g)
    if used * per_device != g:
        raise ValueError(f"{g} cells on {len(jax.local_devices())} devices need padding: choose a multiple")
    program = group_program(config, _grid(config, g))  # the grid split over the local devices, as a sweep runs it
    keys, traced, init = program.keys, program.traced, program.init
    chunk = program.over_grid(program.trainer.run_chunk)  # a chunk with its evaluation, one program
    jax.clear_caches()
    t0 = time.perf_counter()
    state = jax.block_until_ready(chunk(init(keys, traced), traced)[0])
    first = time.perf_counter() - t0
    steps = config.env_steps_per_chunk  # per cell per call = env steps of one Brax epoch
    seconds, holder = [], [state]

    def grid_call(_i):  # right before Brax's timed epoch i: both then stand at the same env steps
        t = time.perf_counter()
        holder[0] = jax.block_until_ready(chunk(holder[0], traced)[0])
        seconds.append(time.perf_counter() - t)

    k = args.pairs_per_round
    targs = ThroughputArgs(env=config.env, backend=config.backend, num_envs=config.num_envs,
                           unroll_length=config.unroll_length, num_minibatches=config.num_minibatches,
                           num_epochs=config.num_epochs, policy_hidden=tuple(config.policy_hidden),
                           value_hidden=tuple(config.value_hidden), episode_length=config.episode_length,
                           phases=config.phases_per_chunk, repeats=args.repeats * k, warmup=1, seed=0,
                           learning_rate=config.learning_rate, brax_devices=args.brax_devices)
    brax = bench_brax(targs, CompileLog(), grid_call)
    if brax["env_steps_per_call"] != steps:
        raise RuntimeError(f"a Brax epoch ran {brax['env_steps_per_call']} env steps, a grid call {steps} per cell")
    own = brax["brax_reported_sps_each"]  # the epoch call alone
    wall = brax["steps_per_second_each"]  # with Brax's per-epoch host work
    rounds = [slice(r * k, (r + 1) * k) for r in range(args.repeats)]
    grid_sps = [g * steps * k / sum(seconds[r]) for r in rounds]
    brax_sps = [steps * k / sum(steps / x for x in own[r]) for r in rounds]
    brax_wall_sps = [steps * k / sum(steps / x for x in wall[r]) for r in rounds]
    grid_compile = first - g * steps / float(np.median(grid_sps))
    total = args.run_env_steps
    steady = [a / b for a, b in zip(grid_sps, brax_sps)]
    steady_wall = [a / b for a, b in zip(grid_sps, brax_wall_sps)]
    with_compile = [g * (brax["compile_seconds"] + total / b) / (grid_compile + g * total / a)
                    for a, b in zip(grid_sps, brax_sps)]
    row = {"grid_size": g, "brax_compile_seconds": brax["compile_seconds"],
           "brax_steps_per_second_each": brax_sps, "brax_wall_steps_per_second_each": brax_wall_sps,
           "grid_compile_seconds": grid_compile, "grid_steps_per_second_each": grid_sps,
           "steady_ratio_each": steady, "steady_ratio_brax_wall_each": steady_wall,
           "pairs_per_round": k, "grid_seconds_per_call": seconds, "brax_epoch_sps_own": own,
           "brax_epoch_sps_wall": wall,
           "with_compile_ratio_each": with_compile, "env_steps_per_cell": total,
           "steady_target_met": min(steady) >= 1.0, "with_compile_target_met": min(with_compile) >= 5.0}
    print(f"\n{g}-cell grid vs {g} separate runs of Brax's trainer ({config.num_envs} envs x "
          f"{config.unroll_length} steps, {config.num_epochs}x{config.num_minibatches} updates per phase); "
          f"{args.repeats} rounds of {k} pairs: a grid call ({config.phases_per_chunk} phases x {g} cells) "
          f"right before a Brax epoch of {config.phases_per_chunk} training steps ({steps:,} env steps, one "
          "cell's share), so both stand at the same stage of training after every pair")
    print(f"grid: compile {grid_compile:.1f} s, env steps/s (all cells) per round "
          + ", ".join(f"{x:,.0f}" for x in grid_sps))
    print(f"Brax: compile {brax['compile_seconds']:.1f} s, env steps/s per round (epoch calls alone) "
          + ", ".join(f"{x:,.0f}" for x in brax_sps) + "; with its per-epoch host work "
          + ", ".join(f"{x:,.0f}" for x in brax_wall_sps))
    print(f"target steady state, grid / Brax >= 1.0: median {np.median(steady):.3f}, rounds "
          f"{min(steady):.3f}..{max(steady):.3f} -> {'met' if row['steady_target_met'] else 'NOT met'} (per round "
          + ", ".join(f"{x:.3f}" for x in steady) + "; against Brax with its host work: "
          + ", ".join(f"{x:.3f}" for x in steady_wall) + ")")
    print(f"target with compilation ({total:,} env steps per cell), {g} Brax runs / grid >= 5: median "
          f"{np.median(with_compile):.2f}, rounds {min(with_compile):.2f}..{max(with_compile):.2f} -> "
          f"{'met' if row['with_compile_target_met'] else 'NOT met'}")
    return row


if __name__ == "__main__":
    from vaco_jax.driver.cli import parse_args

    main(parse_args(Args))
