"""Drawing a policy's episode: MuJoCo's renderer, the MP4 writer, Brax's HTML viewer page.

An episode of a policy in an env (``episode``) is drawn one frame per env state (``Scene``, ``frames_of``)
by MuJoCo's own renderer, for the Gymnasium tasks (C engine or MJX) and the Brax MuJoCo tasks, and
written as an MP4 by ffmpeg (``write_mp4``); a Brax task can also be written as Brax's HTML viewer page
(``write_html``), which needs no OpenGL. Two callers: ``vaco-render`` (``render_cli.py``: a trained
group's saved policy) and the ``--capture-video`` hook (``tracking.py``: a cell's current policy
during training).

Headless machines draw through OSMesa or EGL: ``MUJOCO_GL`` chooses (unset: OSMesa when its library is
installed, else EGL). What is missing (an OpenGL backend, ffmpeg for the MP4) is one line naming it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np

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
