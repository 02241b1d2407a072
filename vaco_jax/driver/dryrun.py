"""``--dry-run``: what a command would run, printed, and nothing compiled or written.

Every study script and ``vaco-train`` take ``--dry-run``. The command plans and validates exactly as
it would to run (every config and cell built, a group's recorded settings and the run's records
checked, read-only), then prints

* the plan: groups (one compiled program each) and their cells, numbered as ``--cell`` takes them
  (``grid.plan_text``), and which groups a rerun would skip because they have finished;
* the memory estimate per cell and program (``memory.memory_plan``: shapes traced by
  ``jax.eval_shape``, no XLA compilation), refused as the run would be when it does not fit;
* a time estimate: the env steps the cells run over the training rate measured for their task at
  their group's shape (a group of cells, a single run, one env per cell: ``MEASURED_RATES``), and their
  evaluations' env steps over the evaluation's; a task without one says so; compilation not included;

and leaves: no run directory, no ``run.json``, no checkpoint, no random-policy scores.
"""

from __future__ import annotations

import os
from typing import Sequence

from vaco_jax.driver.grid import Group, plan_text

# Env steps per second of one training program, all its cells together, by the shape of its group:
# "grid" a study's group (the locomotion study's 30 cells of 16 envs x 128 steps, 10 epochs x 32
# minibatches), "single" one cell at the task's defaults (as `vaco-train` runs it), "one_env" one cell of
# one env (1 x 2,048, 10 x 32). Each entry: (training, evaluation: None where the training rate includes
# it or it was not measured apart); the evaluation's rate counts every episode at the episode length.
# Measured on a 2-core AMD EPYC (BENCHMARKS.md): the grid's training rates are the whole command's
# (compilation and evaluation included: "Training rate at the locomotion study's settings"); every
# other entry is the grid's rate times its ratio to the grid's training rate measured side by side by
# `python -m benchmarks.study_rate` ("A study at the engine's speed": when, and under what load).
# inverted_double_pendulum's grid: Config's 64 envs x 32 steps, 4 x 8, PPO-Clip, steady state without
# evaluation ("A grid as one program vs separate runs").
MEASURED_RATES = {
    "grid": {"Hopper-v4": (11_600, None), "Walker2d-v4": (9_800, None), "HalfCheetah-v4": (17_200, None),
             "Ant-v4": (4_900, None), "inverted_double_pendulum": (33_000, None)},
    "single": {"Hopper-v4": (6_600, 9_100), "Walker2d-v4": (12_200, 8_900), "HalfCheetah-v4": (16_800, 11_600),
               "Ant-v4": (5_600, 4_900)},
    "one_env": {"Hopper-v4": (1_900, 6_700), "Walker2d-v4": (1_800, 9_600), "HalfCheetah-v4": (900, 6_400),
                "Ant-v4": (1_100, 4_100)},
}
SHAPE_NAMES = {"grid": "a group of cells", "single": "a single run", "one_env": "one env per cell"}
RATES_BASIS = ("each task's rate at its group's shape (a group of cells, a single run, one env per cell) measured "
               "on a 2-core AMD EPYC (BENCHMARKS.md: PPO-Clip; the Gymnasium tasks' groups at the locomotion "
               "study's settings, their single runs at the task's defaults, scaled from the group's rate by "
               "benchmarks.study_rate's side-by-side ratio; inverted_double_pendulum's grid at Config's); other "
               "methods, batch shapes and machines differ, and compiling each group's program (tens of seconds "
               "to minutes) comes on top")
GRID_CELLS = 30  # the cells of the group the "grid" rates were measured on


def env_steps(group: Group) -> int:
    """The env steps a group's cells run (whole chunks of whole phases: ``grid.steps_note``)."""
    return len(group.cells) * group.config.phases_run * group.config.batch_size


def eval_steps(group: Group) -> int:
    """The env steps of a group's evaluations: every episode runs the episode length (an ended one is
    frozen and still stepped)."""
    cfg = group.config
    return len(group.cells) * cfg.num_evals * max(cfg.eval_episodes, 0) * cfg.episode_length


def shape_of(group: Group) -> str:
    """Which measured shape a group has: "one_env" (one env per cell), "single" (one cell), else "grid"."""
    if group.config.num_envs == 1:
        return "one_env"
    return "single" if len(group.cells) == 1 else "grid"


def group_rate(group: Group, rates: dict | None = None) -> tuple | None:
    """``(training, evaluation)`` env steps per second of ``group`` at its shape's measured rate, or None
    when its task has none for that shape. A group of 2 to 29 cells with both a single-run and a grid
    rate takes one between them, geometric in the cell count (the C engine steps all cells' envs in one
    call, so the rate grows with the cells); at or beyond the grid's 30 cells, the grid's."""
    import math

    rates = MEASURED_RATES if rates is None else rates
    task, shape = group.config.env, shape_of(group)
    measured = rates[shape].get(task)
    single = rates["single"].get(task)
    if shape != "grid" or single is None or measured is None or len(group.cells) >= GRID_CELLS:
        return measured
    w = math.log(len(group.cells)) / math.log(GRID_CELLS)

    def between(a, b):
        return None if a is None or b is None else a ** (1 - w) * b ** w

    return between(single[0], measured[0]), between(single[1], measured[1])


def minutes_at(n: int, n_eval: int, rate: tuple) -> tuple[float, float]:
    """(training, evaluation) minutes of ``n`` env steps and ``n_eval`` evaluation env steps at ``rate``
    (``group_rate``'s pair); the evaluation's 0 where its rate is None (in the training rate, or not
    measured apart)."""
    return n / rate[0] / 60.0, (n_eval / rate[1] / 60.0 if n_eval and rate[1] else 0.0)


def group_minutes(group: Group, rates: dict | None = None) -> float | None:
    """A group's estimated minutes: its env steps and its evaluations' at its shape's measured rates
    (``minutes_at``), compilation not included; None when its task has no rate at that shape."""
    rate = group_rate(group, rates)
    return None if rate is None else sum(minutes_at(env_steps(group), eval_steps(group), rate))


def time_lines(groups: Sequence[Group], rates: dict | None = None) -> list[str]:
    """The time estimate: per task and shape, the env steps of its cells over the rate measured at that
    shape, and its evaluations' env steps over the evaluation's measured rate (groups of one task, shape,
    cell count and rate summed)."""
    steps: dict[tuple, list[int]] = {}  # (what, rate) -> [env steps, evaluation env steps]
    for g in groups:
        what = f"{g.config.env} ({SHAPE_NAMES[shape_of(g)]}, {len(g.cells)} cell{'s' * (len(g.cells) > 1)})"
        total = steps.setdefault((what, group_rate(g, rates)), [0, 0])
        total[0] += env_steps(g)
        total[1] += eval_steps(g)
    parts, minutes, missing = [], 0.0, []
    for (what, rate), (n, n_eval) in steps.items():
        if rate is None:
            missing.append((what, n))
            continue
        m, e = minutes_at(n, n_eval, rate)
        text = f"{what} {n:,} env steps at {rate[0]:,.0f}/s ~{m:.1f} min"
        if n_eval:
            if rate[1]:
                m += e
                text += f" + evaluation {n_eval:,} env steps at {rate[1]:,.0f}/s ~{e:.1f} min"
            else:
                text += " (evaluation in that rate or not measured apart)"
        minutes += m
        parts.append(text)
    lines = []
    if parts:
        lines.append(f"time estimate: ~{minutes:.1f} min of training ({'; '.join(parts)}), from {RATES_BASIS}")
    if missing:
        shown = MEASURED_RATES if rates is None else rates
        lines.append(f"time estimate: none for {', '.join(w for w, _ in missing)} "
                     f"({', '.join(f'{n:,}' for _, n in missing)} env steps): no measured rate on file at that "
                     f"shape (MEASURED_RATES, from BENCHMARKS.md, has "
                     + "; ".join(f"{s}: {', '.join(t) or 'none'}" for s, t in shown.items()) + ")")
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
