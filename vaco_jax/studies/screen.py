"""Screens before the study (docs/evaluation.md, "Choosing tasks"): which tasks are learnable and
lag-sensitive on the CPU budget.

For every candidate task, synchronous-budget PPO-Clip runs at lag depths 1 and 16 on seeds the
study does not use (100, 101), through the lag sweep (one compiled program per task). Then, per task
(scores = final evaluation return, means over the seeds; 0 = the uniform-random policy, 1 = the
task's reachable score ``REACHABLE``):

- *learnable*: PPO-Clip at B = 1 reaches >= ``LEARN_FRACTION`` of the reachable score within the
  budget, and is *not saturated* before half of it: its evaluation return at the middle of the run
  is below ``SATURATION`` x its final one (so the budget still tells fast and slow learners apart);
- *lag-sensitive*: PPO-Clip at B = 16 loses >= ``LAG_LOSS`` of its B = 1 score (normalised), on a
  task where B = 1 got at least ``MIN_PROGRESS`` of the way from random to reachable (a loss of
  nothing is not a loss).

    python experiments/screen.py                                  # every candidate, ~300k steps per run
    python experiments/screen.py --tasks CartpoleSwingup inverted_double_pendulum --out runs/screen
    python experiments/screen.py --tasks CartpoleSwingup --learning-rate 1e-3   # at another step size

Lag sensitivity depends on the step size (a larger step moves the learner further from the actors'
policies per phase), so a task may pass at the study's tuned step size and fail at the default.

Writes ``OUT/screens.csv`` (and prints it): one row per task with the numbers and both verdicts.
The rules and their thresholds are ``screen_rules``' (FINDINGS.md's screen tables read them too).
"""

from __future__ import annotations

import dataclasses
import os

from vaco_jax.studies.screen_rules import CANDIDATES, REACHABLE, SEEDS, screen_rows

@dataclasses.dataclass
class Args:
    """Screens: learnability and lag sensitivity of candidate tasks for the study."""

    tasks: tuple[str, ...] = CANDIDATES  # candidate tasks to screen
    out: str = "runs/screen"  # run directory (the screen table is written there)
    total_env_steps: int = 300_000  # env steps per run: the budget being screened
    num_envs: int = 64  # parallel envs per run
    num_evals: int = 10  # evaluations per run (learning-curve points)
    eval_episodes: int = 8  # episodes per evaluation (stochastic: docs/evaluation.md)
    learning_rate: float | None = None  # the Config default, 3e-4, unless given; the study's tuning grid tops at 1e-3
    progress: bool = True  # a progress bar per group (--no-progress for logs)
    # print the lag sweep's plan, its memory and time estimates, and exit: nothing is compiled or written
    dry_run: bool = False


# --help: the tasks a screen takes (those with a reachable score)
CHOICES = {"tasks": tuple(REACHABLE)}


def write_table(run_dir: str, tasks) -> list[dict]:
    """``screens.csv`` from a finished screen run, printed."""
    from vaco_jax.analysis import results
    rows = screen_rows(run_dir, tasks)
    results.write_table(os.path.join(run_dir, "screens.csv"), rows)
    print(f"\n{'task':<26}{'B=1':>9}{'learned':>9}{'half/fin':>9}{'B=16':>9}{'lag loss':>9}  learnable  sensitive")
    for r in rows:
        print(f"{r['env']:<26}{r['ppo_clip_b1']:>9.1f}{r['learned_fraction']:>9.2f}{r['half_over_final']:>9.2f}"
              f"{r['ppo_clip_b16']:>9.1f}{r['lag_loss_b16']:>9.2f}  {str(r['learnable']):<10} {r['lag_sensitive']}")
    return rows


def main(args: Args) -> list[dict]:
    from vaco_jax.core.knobs import ConfigError

    unknown = [t for t in args.tasks if t not in REACHABLE]
    if unknown:
        raise ConfigError(f"tasks: {unknown} have no reachable score here; allowed values: {', '.join(REACHABLE)}")
    from vaco_jax.studies import lag_sweep

    lag_sweep.main(lag_sweep.Args(**sweep_settings(args)))
    if args.dry_run:
        return []
    return write_table(args.out, args.tasks)


def sweep_settings(args: Args) -> dict:
    """The lag sweep a screen runs: PPO-Clip at B = 1 and 16 on the screen's seeds, minibatches drawn
    with ``minibatch_shuffle='sort'`` like every screen in FINDINGS.md."""
    return dict(preset="cpu", out=args.out, tasks=tuple(args.tasks), methods=("ppo_clip",), lag_depths=(1, 16),
                seeds=SEEDS, total_env_steps=args.total_env_steps, num_envs=args.num_envs, num_evals=args.num_evals,
                eval_episodes=args.eval_episodes, learning_rate=args.learning_rate, figures=False,
                progress=args.progress, bootstrap_reps=200, dry_run=args.dry_run,
                # the committed screens were drawn with it (docs/estimators.md, "Minibatches"): one protocol
                minibatch_shuffle="sort")


def cli() -> None:
    """The command line (`experiments/screen.py`, `python -m vaco_jax screen`)."""
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.driver.cli import cli_main

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
