"""Tracking hooks of the training loop: a progress callback, Weights & Biases runs, videos of a policy.

``runner.run_group`` calls them after every chunk, once that chunk's files and checkpoint are written,
so none of them can change a number or leave a result file half written:

``progress_fn(env_steps, metrics)``
    Python only (``vaco_jax.run(..., progress_fn=f)``, ``run_group(..., progress_fn=f)``): called once
    per cell and chunk, in cell order, with the cell's env steps so far and a copy of its ``curves.csv``
    row (``cell``, ``chunk``, ``lag_depth``, ``seed``, ``eval_return``, ``train_return``, the diagnostics,
    ``seconds``). A one-cell run is Brax's ``progress_fn(num_steps, metrics)``. An exception raised in it
    stops the run and reaches the caller, with a note saying what is on disk; the same call resumes.

``--wandb`` (extra ``wandb``: ``pip install -c requirements.lock -e '.[wandb]'``)
    one W&B run per cell (``name`` GROUP/cell-<i>_B<lag>_s<seed>, ``group`` GROUP, ``config`` the group's
    settings with the cell's lag depth, seed and knobs), each chunk logged as the TensorBoard scalars
    of ``live.py`` (``returns/``, ``diagnostics/``, ``time/``, ``staleness/share_age_<a>``) against
    ``env_steps``. Files go under ``RUN/wandb/``; the mode is ``--wandb-mode``, else ``WANDB_MODE``,
    else ``offline`` (no network needed; ``wandb sync RUN/wandb/offline-run-*`` uploads later). A
    resumed group opens new W&B runs (config ``resumed_at_chunk``) holding the chunks it runs.

``--capture-video``
    an MP4 of cell ``--capture-video-cell`` (default 0) of each group at every ``--capture-video-every``-th
    evaluation and the last one: ``RUN/videos/GROUP/cell-K/chunk-C.mp4``, one episode of the cell's
    current learner policy (sampled, as evaluation acts; reset key ``fold_in(PRNGKey(seed), C)``) drawn
    by MuJoCo's renderer as ``vaco-render`` draws a trained one (driver/render.py). Gymnasium tasks
    only; needs ffmpeg and OSMesa or EGL.

What a hook needs is checked before anything compiles or is written (``check_tracking``): wandb not
installed, no ffmpeg, no OpenGL backend or a task that cannot be drawn is one line (exit code 2).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Sequence

import numpy as np

from vaco_jax.errors import ConfigError

WANDB_MODES = ("online", "offline")
WANDB_EXTRA = "pip install -c requirements.lock -e '.[wandb]' (or pip install 'vaco_jax[wandb]')"
VIDEOS = "videos"  # RUN/videos/GROUP/cell-K/chunk-C.mp4
MAX_VIDEO_STEPS = 1000


@dataclasses.dataclass(frozen=True)
class WandbOptions:
    """``--wandb``: where and how the cells' W&B runs are written."""

    project: str = "vaco_jax"
    entity: str | None = None
    mode: str | None = None  # 'online' or 'offline'; None: $WANDB_MODE, else 'offline'
    dir: str | None = None  # the directory that gets wandb/ (the run directory; run_group: the group's)

    def resolved_mode(self) -> str:
        return self.mode or os.environ.get("WANDB_MODE") or "offline"


@dataclasses.dataclass(frozen=True)
class VideoOptions:
    """``--capture-video``: which cell is filmed, how often, and where (``dir/cell-K/chunk-C.mp4``)."""

    cell: int = 0
    every: int = 1
    dir: str | None = None  # this group's videos (runner.run_groups: RUN/videos/GROUP; run_group: GROUP/videos)
    width: int = 320
    height: int = 240
    fps: int = 30

    def films(self, chunk: int, num_evals: int) -> bool:
        return (chunk + 1) % self.every == 0 or chunk == num_evals - 1


def options_from_args(args) -> tuple[WandbOptions | None, VideoOptions | None]:
    """The hooks a command's flags ask for (``cli.TRACKING_FLAGS``; a command without them asks for none)."""
    wandb = None
    if getattr(args, "wandb", False):
        wandb = WandbOptions(project=args.wandb_project, entity=args.wandb_entity, mode=args.wandb_mode)
    video = None
    if getattr(args, "capture_video", False):
        video = VideoOptions(cell=args.capture_video_cell, every=args.capture_video_every)
    return wandb, video


def tracking_kwargs(args) -> dict:
    """``options_from_args`` as ``runner.run_groups``' keyword arguments."""
    wandb, video = options_from_args(args)
    return {"wandb": wandb, "capture_video": video}


# ----------------------------------------------------------------------------- checks, before anything runs

def check_tracking(configs: Sequence, cell_counts: Sequence[int] | None, wandb: WandbOptions | None,
                   video: VideoOptions | None, progress_fn: Callable | None = None) -> None:
    """Read-only: every hook asked for can run (a ConfigError of one line otherwise). ``cell_counts``:
    each config's number of cells, to check the filmed cell against (None: not checked; a group's part
    that lacks the cell films nothing)."""
    if progress_fn is not None and not callable(progress_fn):
        raise ConfigError(f"progress_fn={progress_fn!r} is not callable; give a function (env_steps, metrics)")
    if wandb is not None:
        check_wandb(wandb)
    if video is not None:
        check_video(configs, cell_counts, video)


def check_wandb(options: WandbOptions) -> None:
    mode = options.resolved_mode()
    if mode not in WANDB_MODES:
        raise ConfigError(f"wandb_mode={mode!r}{' (from WANDB_MODE)' if not options.mode else ''}; allowed values: "
                          f"{', '.join(WANDB_MODES)}")
    if not options.project:
        raise ConfigError("wandb_project='': give a project name")
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise ConfigError(f"wandb: the package is not installed; install the extra: {WANDB_EXTRA}") from None


def check_video(configs: Sequence, cell_counts: Sequence[int] | None, options: VideoOptions) -> None:
    import shutil

    from vaco_jax.driver.render import check_gl_variable
    from vaco_jax.envs import env_source

    check_gl_variable()  # a MUJOCO_GL that MuJoCo refuses would stop `import mujoco` with a traceback
    for name, value, least in (("capture_video_every", options.every, 1), ("capture_video_cell", options.cell, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{name}={value!r} not valid; allowed values: an integer >= {least}")
    for config, count in zip(configs, cell_counts or [None] * len(configs)):
        if env_source(config.env) != "gymnasium":
            raise ConfigError(f"capture_video: env={config.env!r} cannot be drawn during training (MuJoCo's renderer "
                              "draws the Gymnasium tasks; a finished Brax group: vaco-render --html)")
        if count is not None and options.cell >= count:
            raise ConfigError(f"capture_video_cell={options.cell}: a group of {config.env}/{config.method} has "
                              f"{count} cell(s); allowed values: 0..{count - 1}")
    if shutil.which("ffmpeg") is None:
        raise ConfigError("capture_video: ffmpeg is not installed (Debian: apt-get install ffmpeg); it writes the MP4")
    _check_gl()


@functools.lru_cache(maxsize=None)
def _check_gl() -> None:
    """A 16x16 frame of an empty model: MuJoCo's renderer works in this process (a ConfigError otherwise)."""
    import sys

    from vaco_jax.driver.render import choose_gl_backend, make_renderer

    user_set = bool(os.environ.get("MUJOCO_GL"))
    backend = choose_gl_backend()
    loaded = "mujoco" in sys.modules
    import mujoco

    if loaded and not user_set:
        _use_headless_context(mujoco, backend)
    model = mujoco.MjModel.from_xml_string("<mujoco/>")
    try:
        renderer = make_renderer(model, 16, 16)
    except ConfigError as e:
        extra = " (MuJoCo was imported before MUJOCO_GL was set: set it in the environment)" if loaded else ""
        raise ConfigError(f"capture_video: {e}{extra}") from None
    renderer.close()


def _use_headless_context(mujoco, backend: str) -> None:
    """MuJoCo picks its OpenGL context when it is imported, from MUJOCO_GL; imported before that was set
    (a Python session that imported the package first), it picked GLFW, which needs a display. Its
    renderer takes the context class from ``mujoco.rendering.classic.gl_context`` when it is built, so
    the headless one chosen now goes there (only when PyOpenGL has not been loaded for another platform)."""
    import importlib
    import sys

    try:
        from mujoco.rendering.classic import gl_context
    except ImportError:
        return
    current = getattr(gl_context, "GLContext", None)
    if backend not in ("osmesa", "egl") or getattr(current, "__module__", "") == f"mujoco.{backend}":
        return
    if "OpenGL" in sys.modules and os.environ.get("PYOPENGL_PLATFORM", "") != backend:
        return  # PyOpenGL is bound to another platform: the probe fails and says to set MUJOCO_GL
    try:
        gl_context.GLContext = importlib.import_module(f"mujoco.{backend}").GLContext
    except Exception:  # noqa: BLE001 (whatever loading the GL library raises: the probe names it)
        return


# ----------------------------------------------------------------------------- the hooks of one group

def group_hooks(config, cells: Sequence, label: str, tags: dict, progress_fn: Callable | None,
                wandb: WandbOptions | None, video: VideoOptions | None, group_dir: str) -> GroupHooks:
    """The hooks of one group, checked first (``check_tracking``; the filmed cell is not checked against
    the cells: a part of a split group may lack it and films nothing). Built before the group's program,
    so they count the chunks from the first one they are called after (``GroupHooks.start``)."""
    check_tracking([config], None, wandb, video, progress_fn)
    return GroupHooks(config, cells, label, tags, None, progress_fn, wandb, video, group_dir)


class GroupHooks:
    """The hooks of one ``run_group`` call: ``after_chunk`` once per chunk, ``close`` at the end (also
    when a hook or the chunk raised). ``start``: the chunk the group resumed at (None: the first chunk
    ``after_chunk`` is called for, which is that chunk)."""

    def __init__(self, config, cells: Sequence, label: str, tags: dict, start: int | None,
                 progress_fn: Callable | None, wandb: WandbOptions | None, video: VideoOptions | None,
                 group_dir: str):
        self.config, self.cells, self.label, self.tags, self.start = config, list(cells), label, tags, start
        self.progress_fn = progress_fn
        self.wandb = None if wandb is None else dataclasses.replace(wandb, dir=wandb.dir or group_dir)
        self.video = None
        if video is not None and video.cell < len(self.cells):  # a part of a split group may lack the cell
            self.video = dataclasses.replace(video, dir=video.dir or os.path.join(group_dir, VIDEOS))
        self._runs: dict[int, Any] = {}
        self._camera = None
        self._opened = 0  # W&B runs opened by this group
        self._films: list[str] = []  # videos written by this group

    @property
    def active(self) -> bool:
        return self.progress_fn is not None or self.wandb is not None or self.video is not None

    def after_chunk(self, chunk: int, rows: Sequence[dict], staleness: np.ndarray, program, state,
                    skip: Sequence[Sequence[str]]) -> None:
        """``rows``: the chunk's curve row of each cell; ``staleness`` [cells, ages]; ``skip``: each row's
        identifying columns (tags and the cell's own)."""
        if self.start is None:
            self.start = chunk
        if self.wandb is not None:
            for i, row in enumerate(rows):
                self._log(i, row, staleness[i], skip[i])
        if self.video is not None and self.video.films(chunk, self.config.num_evals):
            self._film(chunk, program, state)
        if self.progress_fn is not None:
            for row in rows:
                try:
                    self.progress_fn(int(row["env_steps"]), dict(row))
                except Exception as e:
                    e.add_note(f"raised by progress_fn after chunk {chunk} of {self.label or 'the group'}: that "
                               "chunk's files and checkpoint are written; the same call resumes from the next chunk")
                    raise

    # --- wandb

    def _log(self, i: int, row: dict, staleness, skip) -> None:
        from vaco_jax.driver.live import scalar_values

        run = self._runs.get(i)
        if run is None:
            run = self._runs[i] = self._open(i)
        values = {"env_steps": int(row["env_steps"]), "chunk": int(row["chunk"]), **scalar_values(row, skip)}
        counts = np.asarray(staleness, np.float64)
        values.update({f"staleness/share_age_{a}": float(c) / max(counts.sum(), 1) for a, c in enumerate(counts)})
        run.log(values)

    def _open(self, i: int):
        import wandb

        from vaco_jax.driver.live import cell_run_name

        cell = self.cells[i]
        opts = self.wandb
        name = cell_run_name(i, cell.lag_depth, cell.seed)
        settings = {**dataclasses.asdict(self.config), **self.tags, **cell.row(), "cell": i,
                    "group": self.label, "resumed_at_chunk": self.start}
        try:
            run = wandb.init(project=opts.project, entity=opts.entity, mode=opts.resolved_mode(), dir=opts.dir,
                             group=self.label or None, name=f"{self.label}/{name}" if self.label else name,
                             config=settings, reinit="create_new",
                             # console capture would wrap the progress bars; one process: system stats once
                             settings=wandb.Settings(console="off", silent=True, x_disable_stats=i > 0))
        except Exception as e:  # noqa: BLE001 (no login, no network, a bad entity: one line)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise ConfigError(f"wandb: could not start a run ({type(e).__name__}: {first}); --wandb-mode offline "
                              "needs no network or login") from None
        run.define_metric("env_steps")
        run.define_metric("*", step_metric="env_steps")
        self._opened += 1
        return run

    # --- video

    def _film(self, chunk: int, program, state) -> None:
        import jax

        from vaco_jax.driver.render import Scene, episode, frames_of, write_mp4

        opts, k = self.video, self.video.cell
        if self._camera is None:  # built once per group: the env's jitted reset and step, the act function
            from vaco_jax.driver.policies import policy_act

            env = program.trainer.env
            self._camera = (env, jax.jit(env.reset), jax.jit(env.step), policy_act(program.trainer, self.config),
                            Scene(env, self.config.env, self.config.physics_backend))
        env, reset, step, act, scene = self._camera
        params, normalizer = jax.device_get(jax.tree.map(lambda x: x[k], (state.learner.policy_params,
                                                                          state.normalizer)))
        key = jax.random.fold_in(jax.random.PRNGKey(self.cells[k].seed), chunk)
        cores, _, _ = episode(env, lambda obs, key: act(params, normalizer, obs, key),
                              min(self.config.episode_length, MAX_VIDEO_STEPS), key, False, step=step, reset=reset)
        where = os.path.join(opts.dir, f"cell-{k}")
        os.makedirs(where, exist_ok=True)
        path = os.path.join(where, f"chunk-{chunk}.mp4")
        partial = os.path.join(where, f".chunk-{chunk}.partial.mp4")
        try:
            write_mp4(frames_of(scene, cores, opts.width, opts.height, plain=True), partial, opts.fps)
            os.replace(partial, path)  # a crash leaves no half-written video under the final name
            self._films.append(path)
        finally:
            if os.path.exists(partial):
                os.remove(partial)

    def close(self, failed: bool = False) -> None:
        """Finish the W&B runs (marked failed when the loop raised; then an error in finishing one is
        dropped, so the loop's own exception is the one that reaches the caller), then say where the
        W&B files and the videos went (``where_lines``)."""
        runs, self._runs = list(self._runs.values()), {}
        for run in runs:
            try:
                run.finish(exit_code=1 if failed else 0)
            except Exception:
                if not failed:
                    raise
        for line in self.where_lines():
            print(line, flush=True)

    def where_lines(self) -> list[str]:
        """One line per hook that wrote files in this group: the W&B runs' directory (and how an offline
        run is uploaded), the videos' directory."""
        lines = []
        where = f" ({self.label})" if self.label else ""
        if self.wandb is not None and self._opened:
            wandb_dir = os.path.join(self.wandb.dir, "wandb")
            mode = self.wandb.resolved_mode()
            upload = f"; upload: wandb sync {wandb_dir}/offline-run-*" if mode == "offline" else ""
            lines.append(f"wandb{where}: {self._opened} {mode} run(s) in {wandb_dir}{upload}")
        if self._films:
            lines.append(f"capture_video{where}: {len(self._films)} video(s) in {os.path.dirname(self._films[0])}"
                         f", the last {os.path.basename(self._films[-1])}")
        self._opened, self._films = 0, []
        return lines
