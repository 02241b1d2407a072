"""Watch a trained policy: ``vaco-render RUN_DIR [--group TASK/METHOD] [--cell K]`` (``python -m vaco_jax render``).

Rolls the saved policy of one cell (``policies.npz`` beside ``config.json``: a sweep's group directory,
or a single run's ``OUT/<name>/``) for one episode and writes an MP4 drawn by
MuJoCo's own renderer, for the Gymnasium tasks (C engine or MJX) and the Brax MuJoCo tasks. The
policy samples its actions, as evaluation does (``--deterministic``: its mean). Brax tasks can also
be written as Brax's HTML viewer page (``--html``), which needs no OpenGL.

Headless machines draw through OSMesa or EGL: ``MUJOCO_GL`` chooses (unset: OSMesa when its library is
installed, else EGL). What is missing (an OpenGL backend, ffmpeg for the MP4) is one line naming it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys

import numpy as np
from tyro.conf import Positional

from vaco_jax.core.knobs import ConfigError


def gl_backends() -> tuple[str, ...]:
    """The OpenGL backends ``MUJOCO_GL`` may name on this platform (MuJoCo's own list, which it checks
    when it is imported: any other value stops ``import mujoco``)."""
    import platform

    return {"Linux": ("egl", "osmesa", "glfw", "glx"), "Windows": ("glfw", "wgl"),
            "Darwin": ("glfw", "cgl")}.get(platform.system(), ("glfw",))


# MuJoCo's other spellings: 'enable', 'on', ... choose its default context; 'disable', 'off', ... none at all
_GL_DEFAULT = ("enable", "enabled", "on", "true", "1")
_GL_OFF = ("disable", "disabled", "off", "false", "0")


def check_gl_variable() -> None:
    """``MUJOCO_GL``, when set, names a backend that can draw (a ConfigError of one line otherwise), before
    anything imports mujoco."""
    value = os.environ.get("MUJOCO_GL")
    if not value:
        return
    name = value.lower().strip()
    allowed = f"allowed values: {', '.join(gl_backends())} (unset: osmesa when its library is installed, else egl)"
    if name in _GL_OFF:
        raise ConfigError(f"MUJOCO_GL={value!r} turns MuJoCo's rendering off; {allowed}")
    if name not in gl_backends() + _GL_DEFAULT:
        raise ConfigError(f"MUJOCO_GL={value!r} is not valid; {allowed}")


def choose_gl_backend() -> str:
    """``MUJOCO_GL`` as set (checked: ``check_gl_variable``), else 'osmesa' when libOSMesa is installed, else
    'egl'; set before mujoco loads."""
    import ctypes.util

    check_gl_variable()
    if not os.environ.get("MUJOCO_GL"):
        os.environ["MUJOCO_GL"] = "osmesa" if ctypes.util.find_library("OSMesa") else "egl"
    if os.environ["MUJOCO_GL"] == "osmesa":
        os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
    return os.environ["MUJOCO_GL"]


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


class Scene:
    """A task's MuJoCo model and how to load one env state of it into an ``MjData``."""

    def __init__(self, env, name: str, backend: str):
        import mujoco

        from vaco_jax.envs import env_source

        self.mujoco = mujoco
        if env_source(name) == "gymnasium" and backend == "mujoco":
            from vaco_jax.envs import cengine

            eng = cengine.engine(name)
            self.model, self._spec = eng.model, mujoco.mjtState.mjSTATE_INTEGRATION
            self._load = self._c_engine
        elif env_source(name) == "gymnasium":
            from vaco_jax.envs.gymnasium_tasks import GYM_TASKS, load_model

            self.model, self._load = load_model(GYM_TASKS[name]), self._qpos
        elif hasattr(getattr(env.raw, "sys", None), "mj_model"):
            self.model, self._load = env.raw.sys.mj_model, self._qpos
        else:
            raise ConfigError(f"env={name!r} has no MuJoCo model to draw (allowed: the Gymnasium tasks and Brax's "
                              "MuJoCo tasks)")
        self.data = mujoco.MjData(self.model)

    def _c_engine(self, core) -> None:
        state = np.asarray(core.physics).view(np.float64)
        self.mujoco.mj_setState(self.model, self.data, state, self._spec)

    def _qpos(self, core) -> None:
        ps = core.pipeline_state
        self.data.qpos[:] = np.asarray(ps.qpos if hasattr(ps, "qpos") else ps.q)

    def load(self, core) -> None:
        self._load(core)
        self.mujoco.mj_forward(self.model, self.data)


def make_renderer(model, width: int, height: int):
    try:
        import mujoco

        return mujoco.Renderer(model, height=height, width=width)
    except Exception as e:  # noqa: BLE001 (whatever the GL stack raises)
        gl = os.environ.get("MUJOCO_GL", "")
        hint = {"osmesa": "OSMesa (Debian: apt-get install libosmesa6)",
                "egl": "EGL (a GPU driver's libEGL, or set MUJOCO_GL=osmesa with Debian's libosmesa6)"}.get(gl, gl)
        raise ConfigError(f"render: no OpenGL backend: MUJOCO_GL={gl} failed ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}); install {hint}") from None


def tracking_camera(model):
    """A camera following the root body, as Gymnasium's locomotion renders do."""
    import mujoco

    cam = mujoco.MjvCamera()
    cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
    cam.trackbodyid = 1 if model.nbody > 1 else 0
    cam.distance = float(max(3.0, 1.5 * model.stat.extent))
    cam.elevation = -20.0
    cam.azimuth = 90.0
    return cam


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


def episode(env, act, steps: int, key, deterministic: bool, step=None, reset=None):
    """One episode of ``act(obs, key)`` in ``env`` from ``key`` (at most ``steps`` steps): the env states to
    draw, the return and the steps taken. ``step``/``reset``: ``env``'s, jitted once by a caller that
    films many episodes."""
    import jax

    step = step or jax.jit(env.step)
    state = (reset or jax.jit(env.reset))(key)
    cores, total, taken = [state.core], 0.0, 0
    for t in range(steps):
        a = act(state.core.obs, None if deterministic else jax.random.fold_in(key, t))
        state, out = step(state, a)
        total += float(out.reward)
        taken += 1
        if float(out.termination) > 0 or float(out.truncation) > 0:
            break
        cores.append(state.core)
    return cores, total, taken


def write_mp4(frames: list[np.ndarray], path: str, fps: int) -> None:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise ConfigError("render: ffmpeg is not installed (Debian: apt-get install ffmpeg); it writes the MP4")
    h, w = frames[0].shape[:2]
    cmd = [ffmpeg, "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", str(fps),
           "-i", "-", "-pix_fmt", "yuv420p", "-vcodec", "libx264", path]
    proc = subprocess.run(cmd, input=b"".join(np.ascontiguousarray(f).tobytes() for f in frames),
                          capture_output=True)
    if proc.returncode != 0:
        raise ConfigError(f"render: ffmpeg failed: {proc.stderr.decode(errors='replace').strip().splitlines()[-1:]}")


def frames_of(scene: Scene, cores, width: int, height: int, plain: bool = False) -> list[np.ndarray]:
    """One frame per env state. ``plain``: without shadows and reflections, which take most of the time
    of a software (OSMesa) draw: 23 instead of 167 ms a 320 x 240 Hopper frame here (--capture-video)."""
    renderer = make_renderer(scene.model, width, height)
    cam = tracking_camera(scene.model)
    frames = []
    for core in cores:
        scene.load(core)
        renderer.update_scene(scene.data, camera=cam)
        if plain:
            import mujoco

            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        frames.append(renderer.render().copy())
    renderer.close()
    return frames


def check_html(env) -> None:
    if not hasattr(env.raw, "sys"):
        raise ConfigError(f"render --html: Brax's viewer draws Brax tasks only; {env.name} is not one")


def write_html(env, cores, path: str) -> None:
    from brax.io import html

    check_html(env)
    with open(path, "w") as f:
        f.write(html.render(env.raw.sys, [c.pipeline_state for c in cores]))


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
