"""Watching a policy: MuJoCo's renderer draws a real (non-blank) frame of a Gymnasium task, and
``python -m vaco_jax render`` (= vaco-render) writes an MP4 of a trained group's policy. Where no OpenGL backend or
ffmpeg is installed the tests are skipped with the reason, except under ``.ci/run``, which installs
them and sets VACO_JAX_REQUIRE_RENDER=1 so that a missing one fails."""

import ctypes.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIRED = os.environ.get("VACO_JAX_REQUIRE_RENDER") == "1"
HAVE_GL = bool(ctypes.util.find_library("OSMesa")) or os.environ.get("MUJOCO_GL") == "egl"
if not (HAVE_GL and shutil.which("ffmpeg")) and not REQUIRED:
    pytest.skip("no OSMesa library or no ffmpeg (Debian: libosmesa6, ffmpeg)", allow_module_level=True)

FRAME = """
import sys, numpy as np, jax
from vaco_jax.driver.render import choose_gl_backend
choose_gl_backend()
from vaco_jax.envs import make_env
from vaco_jax.driver.render import Scene, frames_of
env = make_env("Hopper-v4")
cores = [jax.jit(env.reset)(jax.random.PRNGKey(k)).core for k in (0, 1)]
np.save(sys.argv[1], np.stack(frames_of(Scene(env, "Hopper-v4", "mujoco"), cores, 160, 120)))
"""


def test_the_renderer_draws_a_real_frame_of_a_gymnasium_task(tmp_path):
    path = tmp_path / "frames.npy"
    out = subprocess.run([sys.executable, "-c", FRAME, str(path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    frames = np.load(path)
    assert frames.shape == (2, 120, 160, 3) and frames.dtype == np.uint8
    for f in frames:  # not blank: many colours, the floor's checks and the robot
        assert f.std() > 20 and len(np.unique(f.reshape(-1, 3), axis=0)) > 50


def test_render_writes_an_mp4_of_a_trained_groups_policy(tmp_path):
    from vaco_jax.driver import grid, runner
    from vaco_jax.core.config import Config

    config = Config(env="Hopper-v4", method="ppo_clip", num_envs=2, unroll_length=8, num_epochs=1,
                    num_minibatches=1, total_env_steps=32, num_evals=1, eval_episodes=1, episode_length=20,
                    policy_hidden=(8,), value_hidden=(8,))
    group = tmp_path / "run" / "Hopper-v4" / "ppo_clip"
    runner.run_group(config, grid.grid([1], [0, 1]), str(group), progress=False)
    out = subprocess.run([sys.executable, "-m", "vaco_jax", "render", str(tmp_path / "run"), "--cell", "1",
                          "--steps", "15", "--width", "96", "--height", "64"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    video = group / "cell-1.mp4"
    assert video.exists() and video.stat().st_size > 1000 and "-> " + str(video) in out.stdout
    probe = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                            "stream=nb_read_frames,width,height", "-of", "csv=p=0", str(video)],
                           capture_output=True, text=True)
    width, height, frames = (int(x) for x in probe.stdout.strip().split(","))
    assert (width, height) == (96, 64) and 1 <= frames <= 16
    bad = subprocess.run([sys.executable, "-m", "vaco_jax", "render", str(tmp_path / "run"), "--cell", "7"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "cell=7" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1  # bad input
