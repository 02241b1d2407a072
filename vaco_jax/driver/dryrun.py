"""``--dry-run``: what a command would run, printed, and nothing compiled or written.

Every study script and ``vaco-train`` take ``--dry-run``. The command plans and validates exactly as
it would to run (every config and cell built, a group's recorded settings and the run's records
checked, read-only), then prints

* the plan: groups (one compiled program each) and their cells, numbered as ``--cell`` takes them
  (``grid.plan_text``), and which groups a rerun would skip because they have finished;
* the memory estimate per cell and program (``memory.memory_plan``: shapes traced by
  ``jax.eval_shape``, no XLA compilation), refused as the run would be when it does not fit;
* a time estimate: the env steps the cells run over a measured training rate of their task
  (``MEASURED_RATES``; a task without one says so), compilation not included;

and leaves: no run directory, no ``run.json``, no checkpoint, no random-policy scores.
"""

from __future__ import annotations

import os
from typing import Sequence

from vaco_jax.driver.grid import Group, plan_text

# Env steps per second of one training program, all its cells together, on a 2-core AMD EPYC (BENCHMARKS.md):
# the Gymnasium tasks at the locomotion study's settings (16 envs x 128 steps, 10 epochs x 32 minibatches, a
# 30-cell group, the whole command incl. compilation and evaluation: "Training rate at the locomotion study's
# settings"; Ant-v4 its second chunk's rate), inverted_double_pendulum at Config's (64 envs x 32 steps, 4 x 8,
# PPO-Clip, steady state without evaluation: "A grid as one program vs separate runs").
MEASURED_RATES = {"Hopper-v4": 11_600, "Walker2d-v4": 9_800, "HalfCheetah-v4": 17_200, "Ant-v4": 4_900,
                  "inverted_double_pendulum": 33_000}
RATES_BASIS = ("each task's training rate measured on a 2-core AMD EPYC (BENCHMARKS.md: PPO-Clip, the Gymnasium "
               "tasks at the locomotion study's settings, inverted_double_pendulum at Config's); other methods, "
               "batch shapes and machines differ, and compiling each group's program (tens of seconds to minutes) "
               "comes on top")


def env_steps(group: Group) -> int:
    """The env steps a group's cells run (whole chunks of whole phases: ``grid.steps_note``)."""
    return len(group.cells) * group.config.phases_run * group.config.batch_size


def time_lines(groups: Sequence[Group], rates: dict | None = None) -> list[str]:
    """The time estimate: per task, the env steps of its cells over its measured rate."""
    rates = MEASURED_RATES if rates is None else rates
    steps: dict[str, int] = {}
    for g in groups:
        steps[g.config.env] = steps.get(g.config.env, 0) + env_steps(g)
    known = {t: n / rates[t] / 60.0 for t, n in steps.items() if t in rates}
    lines = []
    if known:
        parts = ", ".join(f"{t} {steps[t]:,} env steps ~{m:.1f} min" for t, m in known.items())
        lines.append(f"time estimate: ~{sum(known.values()):.1f} min of training ({parts}), from {RATES_BASIS}")
    missing = [t for t in steps if t not in rates]
    if missing:
        lines.append(f"time estimate: none for {', '.join(missing)} ({', '.join(f'{steps[t]:,}' for t in missing)} "
                     f"env steps): no measured rate on file (MEASURED_RATES, from BENCHMARKS.md, has "
                     f"{', '.join(rates)})")
    return lines


def report(run_dir: str, groups: Sequence[Group], max_cells: int | None = None, first: int = 0,
           plan: str | None = None, estimate: list[str] | None = None) -> None:
    """Print the plan, the memory estimate and the time estimate of ``groups`` (``first``: the number of
    their first cell in the whole plan; ``plan``: the plan text when it is not ``grid.plan_text``'s;
    ``estimate``: time lines of the caller's own, e.g. a protocol's measured rates); write nothing."""
    from vaco_jax.driver.memory import memory_plan
    from vaco_jax.driver.runner import group_finished

    print(plan if plan is not None else plan_text(groups, first))
    done = [g.subdir for g in groups if group_finished(os.path.join(run_dir, g.subdir))]
    if done:
        print(f"finished already (a run skips them): {', '.join(done)}")
    memory_plan(groups, max_cells)
    for line in (estimate if estimate is not None else time_lines(groups)):
        print(line)
    print(f"dry run: nothing compiled or written (a run would write {run_dir})")
