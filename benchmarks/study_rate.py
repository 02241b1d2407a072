"""Training against raw C-engine stepping, at the three shapes a user meets (issue 70).

    python -m benchmarks.study_rate                                  # the four locomotion tasks
    python -m benchmarks.study_rate --tasks Hopper-v4 --steps 2048 --rounds 2

For each task, three shapes, each against raw stepping at its own env count:

* ``training``: the locomotion study's group (``results/locomotion/protocol.json``'s settings: PPO-Clip,
  16 envs x 128 steps, 10 epochs x 32 minibatches; its 30 cells, B in {1, 8, 32} x 10 seeds), one
  program, against raw stepping of 30 x 16 = 480 envs in one call;
* ``single-run training``: one cell at the task's own defaults, as ``vaco-train --env TASK`` runs it
  (Hopper-v4: 16 x 128, 10 x 32; the other tasks: Config's 64 x 32, 4 x 8), against raw stepping of its
  envs;
* ``one-env training``: one cell of one env (the study's settings with 1 env x 2,048 steps: CleanRL's
  own), against raw stepping of one env.

Raw stepping is ``engine_speed``'s: a jitted ``lax.scan`` of vmapped ``env.step`` (auto-reset included)
over uniform random actions drawn before the timed call, on the same threads as training. Training is
the group's ``train_chunk`` (its phases, without the chunk's evaluation), steady state: the first call
(compilation included) is reported apart. Every timed call covers ``steps`` env steps of each cell
(whole phases: every shape's batch is 2,048 steps). A round times, per shape, raw stepping and
training one right after the other (training first in every second round), so each ratio is taken
side by side; ratios are per round, and the report gives their median, of wall time and beside it of
this process's CPU time (which other jobs of a shared machine disturb less; it counts every thread,
a spinning one too). After the rounds, one chunk evaluation of each shape is timed (``--evaluation``:
``dryrun``'s cost estimates read it).

The report ends with three lines, ``training/raw R``, ``single-run training/raw R`` and
``one-env training/raw R``, R the smallest median over the tasks run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from typing import NamedTuple

import jax

SHAPES = ("training", "single-run training", "one-env training")
TASKS = ("Hopper-v4", "Walker2d-v4", "HalfCheetah-v4", "Ant-v4")


@dataclasses.dataclass
class Args:
    """Training against raw C-engine stepping: the study's group, a single run, one env per cell."""

    tasks: tuple[str, ...] = TASKS  # tasks measured, one after another
    steps: int = 4096  # env steps of each cell per timed call (a multiple of 2,048, every shape's batch)
    rounds: int = 3  # rounds; each times raw stepping then training of every shape
    cells: int = 30  # the study group's first cells timed (30: all of them)
    evaluation: bool = True  # also time one chunk evaluation of each shape, after the rounds
    out: str = ""  # a JSON file of every number (optional)


class Shape(NamedTuple):
    name: str
    config: object  # Config
    cells: list  # grid.Cell


def shapes(task: str, cells: int) -> list[Shape]:
    """The three shapes of ``task`` (module doc)."""
    from vaco_jax.driver import grid
    from vaco_jax.driver.train import train_defaults, with_task_defaults
    from vaco_jax.envs.gymnasium_tasks import GYM_TASKS
    from vaco_jax.studies.locomotion import PROTOCOL, base_config, load_protocol

    p, _ = load_protocol(PROTOCOL)
    study = base_config(p, task, "ppo_clip")
    if task not in GYM_TASKS:  # a pure-JAX task (the tests' tiny one): its own backend
        study = study.replace(backend=None)
    single = with_task_defaults(train_defaults().replace(env=task), True)
    one = study.replace(num_envs=1, unroll_length=2048)
    return [Shape("training", study, grid.grid(p["lag_depths"], p["seeds"]["study"])[:cells]),
            Shape("single-run training", single, [grid.Cell(single.effective_lag_depth(), 0)]),
            Shape("one-env training", one, [grid.Cell(1, 0)])]


class Training:
    """A shape's group program, as ``runner.run_group`` builds it, its chunk timed."""

    def __init__(self, shape: Shape, steps: int, rounds: int):
        from vaco_jax.driver.program import group_program

        batch = shape.config.batch_size
        if steps % batch:
            raise ValueError(f"steps={steps} must be a multiple of {shape.name}'s batch ({batch} env steps)")
        # one chunk per call: a first one (compiled) and one per round, all inside the run's phases
        self.config = shape.config.replace(total_env_steps=steps * (rounds + 2), num_evals=rounds + 2)
        self.program = group_program(self.config, shape.cells, devices=1)
        self.steps = steps * len(shape.cells)
        self.state = self.program.start()
        t = time.perf_counter()
        self.state, m = self.program.train_chunk(self.state, self.program.traced)
        jax.block_until_ready((self.state, m))
        self.first_call_s = time.perf_counter() - t

    def time(self) -> tuple[float, float]:
        def call():
            self.state, m = self.program.train_chunk(self.state, self.program.traced)
            jax.block_until_ready((self.state, m))
        return timed(call, self.steps)

    def evaluation(self) -> dict:
        """Env steps per second of the chunk's evaluation (every episode runs the episode length: an ended
        one is frozen, still stepped), one call compiled ahead; None when the shape does not evaluate."""
        from vaco_jax.core.train import Trainer

        cfg = self.config
        if cfg.eval_episodes <= 0:
            return None
        inputs = Trainer.evaluation_inputs(self.state)
        evaluation = self.program.evaluation.lower(*inputs).compile()  # compiled ahead of the timed call
        t = time.perf_counter()
        jax.block_until_ready(evaluation(*inputs))
        seconds = time.perf_counter() - t
        steps = self.program.cells * cfg.eval_episodes * cfg.episode_length
        return {"env_steps": steps, "seconds": seconds, "env_steps_per_s": steps / seconds}


def timed(call, steps: int) -> tuple[float, float]:
    """Env steps per second of ``call()``: per wall second, and per second of this process's CPU time (all
    its threads), which other jobs on a shared machine disturb less."""
    t, c = time.perf_counter(), time.process_time()
    call()
    return steps / (time.perf_counter() - t), steps / max(time.process_time() - c, 1e-9)


class Raw:
    """``engine_speed``'s raw stepping (``Ours``), timed like training: wall and CPU time."""

    def __init__(self, task: str, n: int, steps: int):
        from benchmarks.engine_speed import Ours

        self.ours = Ours(task, n, steps)

    def time(self) -> tuple[float, float]:
        o = self.ours
        o.key, k = jax.random.split(o.key)
        actions = jax.block_until_ready(o.draw(k))

        def call():
            o.state, r = o.run(o.state, actions)
            jax.block_until_ready((o.state, r))
        return timed(call, o.n * o.steps)


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{os.cpu_count()} cores"


def measure_task(task: str, args: Args) -> dict:
    """Raw stepping and training of ``task``'s three shapes, interleaved round by round."""
    pairs = {}
    for shape in shapes(task, args.cells):
        cfg = shape.config
        envs = cfg.num_envs * len(shape.cells)
        training = Training(shape, args.steps, args.rounds)
        raw = Raw(task, envs, args.steps // cfg.num_envs)
        pairs[shape.name] = (raw, training, envs)
    rates = {name: {"raw": [], "training": [], "raw_cpu": [], "training_cpu": []} for name in pairs}
    for r in range(args.rounds):
        for name, (raw, training, _) in pairs.items():
            order = (("raw", raw), ("training", training))
            for what, timer in (order if r % 2 == 0 else order[::-1]):  # ABBA: a drift in the load cancels
                wall, cpu = timer.time()
                rates[name][what].append(wall)
                rates[name][what + "_cpu"].append(cpu)
        print(f"{task} round {r + 1}: " + ", ".join(
            f"{name} {v['training'][-1]:,.0f} / raw {v['raw'][-1]:,.0f}" for name, v in rates.items()), flush=True)
    out = {}
    for name, (raw, training, envs) in pairs.items():
        per_round = [t / w for t, w in zip(rates[name]["training"], rates[name]["raw"])]
        per_round_cpu = [t / w for t, w in zip(rates[name]["training_cpu"], rates[name]["raw_cpu"])]
        cfg = training.config
        out[name] = {
            "envs_per_call": envs, "cells": training.program.cells, "num_envs": cfg.num_envs,
            "unroll_length": cfg.unroll_length, "num_epochs": cfg.num_epochs,
            "num_minibatches": cfg.num_minibatches, "raw": rates[name]["raw"],
            "training": rates[name]["training"], "ratio_rounds": per_round, "ratio": statistics.median(per_round),
            "raw_cpu": rates[name]["raw_cpu"], "training_cpu": rates[name]["training_cpu"],
            "cpu_ratio_rounds": per_round_cpu, "cpu_ratio": statistics.median(per_round_cpu),
            "first_call_s": training.first_call_s,
            "evaluation": training.evaluation() if args.evaluation else None}
    return out


def report_lines(results: dict, args: Args, started: str, load: tuple) -> list[str]:
    lines = [f"training against raw C-engine stepping, {machine()}, {started}, median of {args.rounds} rounds, "
             f"{args.steps:,} env steps a cell per timed call; 1-min load average {load[0]:.2f} at start, "
             f"{load[1]:.2f} at end"]
    for task, per_shape in results.items():
        lines.append(f"{task}:")
        for name, r in per_shape.items():
            shape = (f"{r['cells']} cell{'s' if r['cells'] > 1 else ''} x {r['num_envs']} envs x "
                     f"{r['unroll_length']} steps, {r['num_epochs']} x {r['num_minibatches']}")
            lines.append(f"  {name:<20} {shape:<36} raw @{r['envs_per_call']} {statistics.median(r['raw']):>9,.0f}  "
                         f"training {statistics.median(r['training']):>9,.0f}  ratio {r['ratio']:.2f} (rounds "
                         f"{', '.join(f'{x:.2f}' for x in r['ratio_rounds'])}); per CPU second "
                         f"{r['cpu_ratio']:.2f}; first call {r['first_call_s']:.1f} s")
            if r["evaluation"]:
                e = r["evaluation"]
                lines.append(f"  {'':<20} evaluation: {e['env_steps']:,} env steps in {e['seconds']:.1f} s "
                             f"({e['env_steps_per_s']:,.0f} env steps/s)")
    for name in SHAPES:
        lines.append(f"{name}/raw {min(per_shape[name]['ratio'] for per_shape in results.values()):.2f}")
    return lines


def main(args: Args) -> dict:
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()[0]
    results = {task: measure_task(task, args) for task in args.tasks}
    lines = report_lines(results, args, started, (load0, os.getloadavg()[0]))
    print("\n".join(lines))
    record = {"args": dataclasses.asdict(args), "machine": machine(), "started": started, "results": results,
              "report": "\n".join(lines)}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    return record


if __name__ == "__main__":
    from vaco_jax.driver.cli import parse_args

    main(parse_args(Args))
