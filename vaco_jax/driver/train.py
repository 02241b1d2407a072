"""One configuration, one seed: ``vaco-train`` (``python -m vaco_jax train``), or ``run`` from Python.

A single run is a one-cell group run by the same loop as every study (``runner.run_group``), so it
writes the same run directory, ``OUT/<name>/``::

    OUT/<name>/run.json                  settings, versions, machine (provenance.write_run_metadata)
    OUT/<name>/<env>/<method>/           cells.json, curves.csv, scores.csv, staleness.npz,
                                         config.json + policies.npz (render, load_policy)

``<name>`` holds the task, method, lag depth, seed and a hash of every setting, so runs never
overwrite each other and the same command resumes an interrupted run from its last chunk.
``experiments/plot.py``, ``vaco-render`` and ``load_policy`` read it like any study's directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from vaco_jax.analysis import results
from vaco_jax.core.config import TASK_DEFAULTS, Config
from vaco_jax.driver import grid, provenance, runner, tracking
from vaco_jax.driver.cli import TRACKING_FLAGS
from vaco_jax.errors import ConfigError

EXIT_DIVERGED = 4

TRAIN_EXTRA = [("seed", int, 0, "seed of the run (environment, initialisation, actions, lag draws)"),
               ("out", str, "runs/train", "parent of the run's directory OUT/<name> (the name includes a hash of "
                                          "every setting, so runs never overwrite each other)"),
               ("progress", bool, True, "show a progress bar"),
               ("max_chunks", int | None, None, "stop after this many chunks (of num_evals); the same command "
                                                "resumes"),
               ("tensorboard", bool, False, "live metrics: TensorBoard event files in OUT/<name>/tensorboard/ "
                                            "(not part of the run's name)"),
               *TRACKING_FLAGS,
               ("age_histogram", str | None, None, "lag_model='ages': its weights from a CSV of samples by age "
                                                   "(age,count; docs/lag.md), e.g. one a real actor-learner "
                                                   "recorded; instead of --age-weights"),
               ("task_defaults", bool, True, "a Gymnasium locomotion task starts from its own defaults "
                                             "(config.TASK_DEFAULTS: each flag's default names them, '--env TASK: "
                                             "VALUE') for every setting left at Config's value; "
                                             "--no-task-defaults keeps Config's values"),
               ("sweep", tuple[str, ...], (), "any setting as an axis, as vaco-lag-sweep takes it (e.g. gamma=0.99,"
                                              "0.995 lag_depth=1,8): the run becomes a grid, run as one group (a "
                                              "static setting: a group per value, each one program) in one run "
                                              "directory OUT/<name>/ whose name holds the sweep; the task and the "
                                              "method are not swept here (vaco-lag-sweep --tasks / --methods)"),
               ("dry_run", bool, False, "print the plan (the run's cells), the memory and time estimates and the "
                                        "run directory, and exit: nothing is compiled or written")]


@dataclasses.dataclass(frozen=True)
class SingleRun:
    """Where a single run wrote its results, and what they say."""

    run_dir: str  # OUT/<name>
    group_dir: str  # OUT/<name>/<env>/<method>: load_policy(group_dir), render
    curves: list  # one dict per chunk (curves.csv)
    scores: dict | None  # scores.csv's row; None when stopped by max_chunks

    @property
    def diverged(self) -> bool:
        return bool(self.scores and self.scores["diverged"])


def train_defaults() -> Config:
    """The settings ``vaco-train`` shows and runs when a flag is left out: Config's own (one default per
    setting, in Python and on the command line; a Gymnasium task's own defaults then apply, task_settings)."""
    return Config()


def train_args_class():
    """``vaco-train`` flags: seed, out, progress, max_chunks, tensorboard, task_defaults, then every
    Config field (cli.py). A sweep's cell batching (grid_batch) is no flag: one run is one cell."""
    from vaco_jax.driver.cli import config_args_class

    cls = config_args_class("TrainArgs", TRAIN_EXTRA, defaults=train_defaults(), exclude=("grid_batch",))
    cls.__doc__ = ("Train one configuration into OUT/<name>/ (a one-cell run directory, like a study's); "
                   "the same command resumes it. A setting left out takes Config's default, as Config() does "
                   "in Python.")
    return cls


def task_settings(values: dict, enabled: bool) -> dict:
    """The task's own defaults (config.TASK_DEFAULTS) for each setting in ``values`` (a Config's fields,
    not yet validated) left at the command line's default; a setting given on the command line keeps
    its value. Printed when there are any."""
    env = values.get("env", train_defaults().env)
    if not enabled or env not in TASK_DEFAULTS:
        return {}
    shown = train_defaults()
    keep = {k: v for k, v in TASK_DEFAULTS[env].items()
            if values.get(k, getattr(shown, k)) == getattr(shown, k) and v != getattr(shown, k)}
    if keep:
        print(f"{env}: the task's defaults " + ", ".join(f"{k}={v}" for k, v in keep.items()))
    return keep


def with_task_defaults(config: Config, enabled: bool) -> Config:
    """``config`` with the task's own defaults for each setting left at the command line's default."""
    keep = task_settings(dataclasses.asdict(config), enabled)
    return config.replace(**keep) if keep else config


def train_config(args) -> Config:
    """The Config a ``vaco-train`` command line runs: its flags, then the task's defaults for the settings
    left at the shown default, validated once on the values the run will use (a setting is judged, and
    named in a refusal, with the task's values, not Config's)."""
    from vaco_jax.driver.cli import config_values

    values = config_values(args, train_defaults())
    return Config(**{**values, **task_settings(values, getattr(args, "task_defaults", False))})


def settings_hash(config: Config, seed: int, sweep: dict | None = None) -> str:
    record = {"config": config.as_record(), "seed": seed, **({"sweep": sweep} if sweep else {})}
    text = json.dumps(record, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def run_name(config: Config, seed: int, sweep: dict | None = None) -> str:
    """``<env>_<method>_B<lag>_s<seed>_<hash>``; a swept run ``<env>_<method>_sweep-<axes>_s<seed>_<hash>``
    (the hash covers the axes and their values)."""
    if sweep:
        return (f"{config.env}_{config.method}_sweep-{'-'.join(sweep)}_s{seed}_"
                f"{settings_hash(config, seed, sweep)}")
    return f"{config.env}_{config.method}_B{config.effective_lag_depth()}_s{seed}_{settings_hash(config, seed)}"


def sweep_groups(config: Config, seed: int, items, given: dict | None = None) -> tuple[dict, list]:
    """``--sweep`` of a single run: its axes and the groups they make of the run's one cell
    (``grid.apply_sweep``: a traced setting multiplies the cells of the group, a static one makes a
    group per value). ``given``: the settings set by a flag (one swept too is an error)."""
    axes = grid.parse_sweep(items)
    fixed = [k for k in axes if k in ("env", "method")]
    if fixed:
        raise ConfigError(f"--sweep {fixed[0]}: vaco-train runs one task and one method; sweep them with "
                          "vaco-lag-sweep --tasks / --methods (which takes --sweep too)")
    both = sorted(set(axes) & set(given or {}))
    if both:
        raise ConfigError(f"{', '.join(both)}: given as a flag and as a --sweep axis; give one")
    group = grid.Group(config, (grid.Cell(config.effective_lag_depth(), seed),), f"{config.env}/{config.method}")
    return axes, grid.apply_sweep([group], axes)


def _check_out(out: str) -> None:
    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"out={out!r} is a file; give a directory")
    os.makedirs(out, exist_ok=True)
    if not os.access(out, os.W_OK):
        raise ConfigError(f"out={out!r} is not writable")


def run(config: Config, seed: int = 0, out: str = "runs/train", progress: bool = True,
        max_chunks: int | None = None, tensorboard: bool = False, command: dict | None = None,
        progress_fn=None, wandb: tracking.WandbOptions | None = None,
        capture_video: tracking.VideoOptions | None = None) -> SingleRun:
    """Train ``config`` (its own lag depth and knobs) with ``seed`` into ``out/<name>/`` as a one-cell
    group; resumes from the last chunk when that directory holds an unfinished run of the same settings.

    ``progress_fn(env_steps, metrics)`` is called after every chunk (Brax's convention) with the run's
    env steps so far and a dict of that chunk's numbers (its ``curves.csv`` row: ``eval_return``,
    ``train_return``, the diagnostics, ``chunk``, ``seconds``), once the chunk's files and checkpoint are
    written: an exception raised in it reaches the caller, and the same call resumes from the next chunk.
    ``wandb`` (``tracking.WandbOptions()``): the run logged to W&B, files in ``out/<name>/wandb/``;
    ``capture_video`` (``tracking.VideoOptions()``): an MP4 at each evaluation in
    ``out/<name>/videos/<env>/<method>/cell-0/`` (driver/tracking.py)."""
    runner.check_max_chunks(max_chunks)
    group = grid.Group(config, (grid.Cell(config.effective_lag_depth(), seed),), f"{config.env}/{config.method}")
    grid.check_cells(group.cells)  # the seed, before anything is written
    tracking.check_tracking([config], [1], wandb, capture_video, progress_fn)
    if grid.steps_note(config):
        print(grid.steps_note(config))
    _check_out(out)
    run_dir = os.path.join(out, run_name(config, seed))
    group_dir = os.path.join(run_dir, group.subdir)
    with provenance.run_lock([group_dir]):  # the same run started twice at once: the second stops here
        provenance.write_run_metadata(run_dir, [group], command or {"seed": seed})
        board = os.path.join(run_dir, "tensorboard", group.subdir) if tensorboard else None
        if wandb is not None:
            wandb = dataclasses.replace(wandb, dir=wandb.dir or run_dir)
        if capture_video is not None:
            capture_video = dataclasses.replace(capture_video, dir=os.path.join(
                capture_video.dir or os.path.join(run_dir, tracking.VIDEOS), group.subdir))
        rows = runner.run_group(config, list(group.cells), group_dir, progress=progress, label=group.subdir,
                                max_chunks=max_chunks, tensorboard_dir=board, progress_fn=progress_fn, wandb=wandb,
                                capture_video=capture_video)
    curves = results.read_table(os.path.join(group_dir, "curves.csv"))
    return SingleRun(run_dir, group_dir, curves, rows[0] if rows else None)


def main(args=None) -> int:
    """Train one configuration (every Config field is a flag) into ``OUT/<name>/``.

    The output directory is checked before anything compiles; the run checkpoints after every chunk
    and a rerun of the same command resumes from it. Exit code 0, 2 for bad input, 3 for a damaged
    result file or checkpoint, 4 when the run diverged (non-finite parameters).
    """
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.driver.config_file import check_rerun

    args = args or parse_args(train_args_class())
    parsed = args  # carries a --config record (check_rerun), which dataclasses.replace drops
    if getattr(args, "age_histogram", None):
        from vaco_jax.driver.histogram import histogram_settings

        fixed, _ = histogram_settings((args.age_histogram,), {} if args.age_weights is None else
                                      {"age_weights": args.age_weights}, {})
        args = dataclasses.replace(args, age_weights=fixed["age_weights"])
    config = train_config(args)
    if getattr(args, "sweep", ()):
        return main_sweep(args, parsed, config)
    check_rerun(parsed, [grid.Group(config, (grid.Cell(config.effective_lag_depth(), args.seed),), "")])
    if getattr(args, "dry_run", False):
        return dry_run(config, args.seed, args.out)
    wandb, video = tracking.options_from_args(args)
    done = run(config, seed=args.seed, out=args.out, progress=args.progress,
               max_chunks=getattr(args, "max_chunks", None), tensorboard=getattr(args, "tensorboard", False),
               command={k: v for k, v in dataclasses.asdict(args).items() if k not in ("out", "progress")},
               wandb=wandb, capture_video=video)
    what = f"{config.method} on {config.env}, lag depth {config.effective_lag_depth()}"
    if done.scores is None:
        print(f"{what}: stopped after --max-chunks {args.max_chunks} ({len(done.curves)} of {config.num_evals} "
              f"chunks); the same command continues -> {done.run_dir}")
        return 0
    if done.diverged:
        print(f"{what}: DIVERGED (non-finite parameters); results in {done.run_dir}")
        return EXIT_DIVERGED
    last = done.curves[-1]
    print(f"{what}: final eval return {done.scores['final_eval_return']:.1f}, last-chunk train return "
          f"{last['train_return']:.1f}, {last['grid_steps_per_second']:.0f} env steps/s -> {done.run_dir}")
    return 0


def _flags_given(args) -> dict:
    """The Config settings a ``vaco-train`` command line sets to other values than the ones shown."""
    shown = train_defaults()
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)
            if hasattr(args, f.name) and getattr(args, f.name) != getattr(shown, f.name)}


def dry_run(config: Config, seed: int, out: str, groups: list | None = None, sweep: dict | None = None) -> int:
    """``--dry-run``: the run's plan, memory and time estimates and its directory; nothing written."""
    from vaco_jax.driver import dryrun
    from vaco_jax.driver.study import preflight

    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"out={out!r} is a file; give a directory")
    groups = groups or [grid.Group(config, (grid.Cell(config.effective_lag_depth(), seed),),
                                   f"{config.env}/{config.method}")]
    run_dir = os.path.join(out, run_name(config, seed, sweep))
    preflight(run_dir, groups)  # read-only: a directory of this name holds these settings, or nothing
    dryrun.report(run_dir, groups)
    return 0


def main_sweep(args, parsed, config: Config) -> int:
    """``vaco-train --sweep``: the swept cells of one configuration as one group (a group per static
    value) in ``OUT/<name>/``, run like a study's groups; a line per cell at the end. Exit code 4 when
    any cell diverged."""
    from vaco_jax.driver.config_file import check_rerun
    from vaco_jax.driver.memory import memory_plan
    from vaco_jax.driver.study import preflight

    axes, groups = sweep_groups(config, args.seed, args.sweep, _flags_given(args))
    check_rerun(parsed, groups)
    if args.dry_run:
        return dry_run(config, args.seed, args.out, groups, axes)
    runner.check_max_chunks(args.max_chunks)
    tracking.check_tracking([g.config for g in groups], [len(g.cells) for g in groups],
                            *tracking.options_from_args(args))
    run_dir = os.path.join(args.out, run_name(config, args.seed, axes))
    preflight(run_dir, groups)
    print(grid.plan_text(groups))
    memory_plan(groups)
    _check_out(args.out)
    with provenance.run_lock([os.path.join(run_dir, g.subdir) for g in groups]):
        provenance.write_run_metadata(run_dir, groups, {k: v for k, v in dataclasses.asdict(args).items()
                                                        if k not in ("out", "progress")})
        finished = runner.run_groups(run_dir, groups, progress=args.progress, max_chunks=args.max_chunks,
                                     tensorboard=args.tensorboard, **tracking.tracking_kwargs(args))
    if not finished:
        print(f"the same command continues -> {run_dir}")
        return 0
    diverged = 0
    for g in groups:
        for row in results.read_table(os.path.join(run_dir, g.subdir, "scores.csv")):
            cell = " ".join(f"{k}={row[k]}" for k in ("lag_depth", "seed", *axes) if k in row)
            bad = str(row["diverged"]) in ("True", "1")
            diverged += bad
            print(f"  {g.label or g.subdir} {cell}: " + ("DIVERGED" if bad else
                                                        f"final eval return {float(row['final_eval_return']):.1f}"))
    print(f"{config.method} on {config.env}, {sum(len(g.cells) for g in groups)} cells -> {run_dir}")
    return EXIT_DIVERGED if diverged else 0


def cli() -> None:
    """The ``vaco-train`` command."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(train_args_class()))


if __name__ == "__main__":
    cli()
