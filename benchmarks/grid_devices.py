"""One group's grid on one device vs split over several: by ``shard_map`` (how sweeps run it) and by
shardings of one vmapped program (the SPMD partitioner; sweeps ran it so before, with only the
inputs placed: "SPMD, inputs").

On a CPU, split it into devices first (JAX reads the flag when it starts)::

    XLA_FLAGS=--xla_force_host_platform_device_count=2 python benchmarks/grid_devices.py

Each layout runs the same cells (seeds 0..G-1 at lag depths 1, 2, 4, 8, 16 in turn) from the same
initial state for ``chunks`` timed chunks after one untimed (compiling) chunk; printed: env steps/s
and the process's CPU time over wall time (how many cores it kept busy). docs/scale.md, "A group
over several devices".
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vaco_jax.core.config import Config  # noqa: E402
from vaco_jax.driver.devices import grid_mesh, grid_program, grid_sharding  # noqa: E402
from vaco_jax.driver.grid import Cell  # noqa: E402
from vaco_jax.driver.program import group_program  # noqa: E402


@dataclasses.dataclass
class Args:
    """One group's grid on one device vs split over several (shard_map, SPMD shardings)."""

    env: str = "inverted_double_pendulum"  # task of every cell
    method: str = "ppo_clip"  # method of every cell
    cells: int = 16  # cells G of the group (a multiple of the device count)
    num_envs: int = 64  # parallel envs per cell
    unroll_length: int = 32  # env steps per env per phase
    phases_per_chunk: int = 4  # phases per timed chunk
    chunks: int = 5  # timed chunks per layout (one untimed compiling chunk before them)
    repeats: int = 2  # rounds over the layouts (each round starts every layout from the initial state)


def main(args: Args) -> dict:
    devices = len(jax.local_devices())
    if args.cells % devices:
        raise ValueError(f"cells={args.cells} must be a multiple of the {devices} local devices")
    config = Config(env=args.env, method=args.method, num_envs=args.num_envs, unroll_length=args.unroll_length,
                    total_env_steps=args.phases_per_chunk * args.num_envs * args.unroll_length, num_evals=1,
                    eval_episodes=0, buffer_capacity=16)
    depths = [1, 2, 4, 8, 16]
    cells = [Cell(lag_depth=depths[s % len(depths)], seed=s) for s in range(args.cells)]
    one = group_program(config, cells, devices=1)  # how a sweep builds a group's program
    trainer, keys, traced = one.trainer, one.keys, one.traced
    mesh = grid_mesh(devices)
    sharding = grid_sharding(mesh)
    # name: (init, chunk, keys, traced); the chunk with its evaluation, one program
    programs = {"one device": (one.init, one.over_grid(trainer.run_chunk), keys, traced)}
    if mesh is not None:
        split = group_program(config, cells, trainer, devices=devices)  # shard_map: how sweeps run it
        programs["shard_map"] = (split.init, split.over_grid(trainer.run_chunk), split.keys, split.traced)
        k, t = jax.device_put((keys, traced), sharding)
        # the SPMD partitioner: one vmapped program with only its inputs placed, or with jit told the
        # shardings of its inputs and outputs
        programs["SPMD, inputs"] = (jax.jit(grid_program(trainer.init)), jax.jit(grid_program(trainer.run_chunk)), k, t)
        programs["SPMD, in/out"] = (jax.jit(jax.vmap(trainer.init), in_shardings=sharding, out_shardings=sharding),
                                    jax.jit(jax.vmap(trainer.run_chunk), in_shardings=sharding,
                                            out_shardings=sharding), k, t)
    steps = args.cells * config.env_steps_per_chunk
    results = {name: [] for name in programs}
    print(f"python {' '.join(sys.argv)}\n{time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, jax {jax.__version__}, "
          f"{devices} x {jax.devices()[0].device_kind}, {os.cpu_count()} CPUs; {args.env}/{args.method}, "
          f"{args.cells} cells x {args.num_envs} envs, {config.env_steps_per_chunk:,} env steps per cell per chunk")
    for r in range(args.repeats):
        for name, (init, chunk, k, t) in programs.items():
            state = jax.block_until_ready(chunk(init(k, t), t)[0])  # compiles in round 0
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(args.chunks):
                state = chunk(state, t)[0]
            jax.block_until_ready(state)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            results[name].append({"env_steps_per_second": steps * args.chunks / wall, "cores_busy": cpu / wall})
            print(f"round {r + 1}: {name:<15} {steps * args.chunks / wall:>9,.0f} env steps/s, "
                  f"CPU time / wall time {cpu / wall:.2f}", flush=True)
    return results


if __name__ == "__main__":
    from vaco_jax.driver.cli import parse_args

    main(parse_args(Args))
