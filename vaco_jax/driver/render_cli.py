"""Watch a trained policy: ``vaco-render RUN_DIR [--group TASK/METHOD] [--cell K]`` (``python -m vaco_jax render``).

Rolls the saved policy of one cell (``policies.npz`` beside ``config.json``: a sweep's group directory,
or a single run's ``OUT/<name>/``) for one episode and writes an MP4 drawn by MuJoCo's own renderer
(``render.py``), for the Gymnasium tasks (C engine or MJX) and the Brax MuJoCo tasks. The policy samples
its actions, as evaluation does (``--deterministic``: its mean). Brax tasks can also be written as
Brax's HTML viewer page (``--html``), which needs no OpenGL.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys

from tyro.conf import Positional

from vaco_jax.core.knobs import ConfigError
from vaco_jax.driver.render import Scene, check_html, choose_gl_backend, episode, frames_of, write_html, write_mp4


def group_dir(run_dir: str, group: str | None) -> str:
    """The directory holding ``config.json`` and ``policies.npz``: ``run_dir`` itself, ``run_dir/group``,
    or the only finished group under ``run_dir`` (policies.find_group: what is wrong is said)."""
    from vaco_jax.driver.policies import find_group

    return find_group(run_dir, group)


def check_cell(directory: str, cell: int) -> None:
    """``cell`` is one of the group's cells (``cells.json``, else the saved policies' first axis)."""
    from vaco_jax.analysis import results

    if os.path.exists(os.path.join(directory, "cells.json")):
        count = len(results.read_cells(directory))
    else:
        count = next(iter(results.load_npz(os.path.join(directory, "policies.npz")).values())).shape[0]
    if not 0 <= cell < count:
        raise ConfigError(f"cell={cell}: {directory} holds {count} cell(s); allowed values: 0..{count - 1} "
                          "(cells.json's order)")


def make_group_env(directory: str):
    """The env of the group in ``directory`` and its config."""
    from vaco_jax.envs import make_env
    from vaco_jax.driver.policies import _config

    config = _config(directory)
    return make_env(config.env, backend=config.physics_backend, episode_length=config.episode_length), config


def rollout(directory: str, cell: int, steps: int, seed: int, deterministic: bool, env=None):
    """The saved policy of ``cell`` for one episode (at most ``steps`` steps): the env states to draw
    (the first state, then the state after each step that did not end the episode), with the env, its
    config, the episode's return and the number of steps taken."""
    import jax

    from vaco_jax.driver.policies import _config, load_policy

    config = _config(directory)
    act = load_policy(directory, cell)
    env = make_group_env(directory)[0] if env is None else env
    cores, total, taken = episode(env, act, steps, jax.random.PRNGKey(seed), deterministic)
    return env, config, cores, total, taken


# --help (cli.grouped): what this command's groups, --config and --out's default are
HELP_GROUP_TEXT = {"run": "what is drawn: the group, the cell, the episode",
                   "output": "the file written: where, its format, its frames' size and rate"}
HELP_CONFIG_TEXT = ("a JSON or YAML file of these flags (their snake_case names -> values), read first, so flags "
                    "given on the command line win")
HELP_DEFAULTS = {"out": "GROUP_DIR/cell-K.mp4, or .html with --html"}


@dataclasses.dataclass
class Args:
    """Write a video of a trained policy (MuJoCo's renderer), or Brax's HTML viewer page."""

    run_dir: Positional[str]  # a run directory (a study's or vaco-train's OUT/<name>) or a group directory
    group: str | None = None  # the group under RUN_DIR (e.g. Hopper-v4/vaco); needed when it holds several
    cell: int = 0  # the cell of the group (cells.json's order; the plan's numbers within the group)
    steps: int = 1000  # at most this many env steps (one episode)
    seed: int = 0  # the episode's reset and action noise
    deterministic: bool = False  # act with the policy's mean instead of sampling
    out: str | None = None  # the file written
    width: int = 480  # the frame's width in pixels
    height: int = 360  # the frame's height in pixels
    fps: int = 30  # frames per second of the MP4
    html: bool = False  # Brax tasks: Brax's HTML viewer page instead of an MP4 (no OpenGL needed)


def main(args: Args) -> str:
    for name, value, least in (("steps", args.steps, 1), ("width", args.width, 16), ("height", args.height, 16),
                               ("fps", args.fps, 1), ("cell", args.cell, 0)):
        if not isinstance(value, int) or value < least:
            raise ConfigError(f"{name}={value!r} not valid; allowed values: an integer >= {least}")
    # what the user named (directory, group, cell, a task that can be drawn) before what the machine lacks
    directory = group_dir(args.run_dir, args.group)
    check_cell(directory, args.cell)
    out = args.out or os.path.join(directory, f"cell-{args.cell}.{'html' if args.html else 'mp4'}")
    if not args.html:
        choose_gl_backend()
    env, config = make_group_env(directory)
    if args.html:
        check_html(env)
    else:
        scene = Scene(env, config.env, config.physics_backend)
        if shutil.which("ffmpeg") is None:
            raise ConfigError("render: ffmpeg is not installed (Debian: apt-get install ffmpeg); it writes the MP4")
    env, config, cores, total, taken = rollout(directory, args.cell, args.steps, args.seed, args.deterministic, env)
    if args.html:
        write_html(env, cores, out)
    else:
        write_mp4(frames_of(scene, cores, args.width, args.height), out, args.fps)
    from vaco_jax.analysis import results

    cell = results.read_cells(directory)[args.cell]  # what the cell is: its lag depth, seed and knobs
    what = ", ".join([f"B = {cell.get('lag_depth')}", f"seed {cell.get('seed')}"]
                     + [f"{k} = {v}" for k, v in cell.items() if k not in ("lag_depth", "seed")])
    print(f"{config.env} / {config.method}, cell {args.cell} ({what}): {taken} steps ({len(cores)} frames), "
          f"return {total:.1f} -> {out}")
    return out


def cli() -> None:
    try:
        choose_gl_backend()  # before anything imports mujoco
    except ConfigError as e:  # a bad MUJOCO_GL: one line and exit code 2, as a bad flag
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.driver.cli import cli_main

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    sys.exit(cli())
