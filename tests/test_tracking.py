"""The tracking hooks (vaco_jax/driver/tracking.py): ``progress_fn``, ``--wandb`` (offline, read back from
W&B's own run file) and ``--capture-video`` (an MP4 per filmed evaluation, where MuJoCo's renderer and
ffmpeg are installed). None of them changes a number, and what they need is checked before anything
is written."""

import ctypes.util
import dataclasses
import glob
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import study_module, tiny_config
from vaco_jax.analysis import results
from vaco_jax.driver import grid, runner, tracking
from vaco_jax.errors import ConfigError

CONFIG = dict(eval_episodes=2, num_evals=3, total_env_steps=8 * 16 * 3)
TIMING = ("seconds", "grid_steps_per_second")


def _cells():
    return grid.grid([1, 4], [0])


def _same_table(a: list[dict], b: list[dict], skip=TIMING) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert set(ra) == set(rb)
        for k in ra:
            if k in skip:
                continue
            x, y = (float("nan") if v == "" else v for v in (ra[k], rb[k]))  # an empty text cell reads as NaN
            same = x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
            assert same, (k, ra[k], rb[k])


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The tiny group run without any hook: its score and curve rows."""
    d = str(tmp_path_factory.mktemp("plain") / "g")
    scores = runner.run_group(tiny_config(**CONFIG), _cells(), d, progress=False)
    return scores, results.read_table(os.path.join(d, "curves.csv")), d


# ----------------------------------------------------------------------------- reading W&B's offline run file

def _wandb_records(path: str):
    """The records of a W&B run file (``run-<id>.wandb``): a 7-byte header (':W&B', magic, version), then
    LevelDB's log framing (32 KiB blocks; each piece a 4-byte checksum, 2-byte length, 1-byte type:
    1 whole, 2 first, 3 middle, 4 last), each record a serialised ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2 as pb

    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B", data[:7]
    pos, block, pieces = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a piece's header is padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        pieces += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pieces)
            pieces = b""
            yield record


def _wandb_run(path: str) -> tuple[str, str, dict, list[dict]]:
    """name, group, config and history rows of one offline W&B run file."""
    name, group, config, history = "", "", {}, []
    for r in _wandb_records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            name, group = r.run.display_name, r.run.run_group
            config = {u.key: json.loads(u.value_json) for u in r.run.config.update}
        elif kind == "history":
            history.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item})
    return name, group, config, history


def _float_equal(a, b) -> bool:
    return (math.isnan(a) and math.isnan(b)) or np.float32(a) == np.float32(b)


# ----------------------------------------------------------------------------- tests

def test_progress_fn_and_wandb_see_every_chunk_of_every_cell_and_change_no_number(tmp_path, plain, monkeypatch,
                                                                                  capsys):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)  # the default: offline, no network needed
    d = str(tmp_path / "run" / "g")
    calls = []
    scores = runner.run_group(tiny_config(**CONFIG), _cells(), d, progress=False, label="point_mass/ppo_clip",
                              progress_fn=lambda step, metrics: calls.append((step, metrics)),
                              wandb=tracking.WandbOptions(dir=str(tmp_path / "run")))
    curves = results.read_table(os.path.join(d, "curves.csv"))
    _same_table(scores, plain[0])
    _same_table(curves, plain[1])
    # progress_fn: once per cell and chunk, in order, with the env steps and the cell's curve row
    assert [(m["chunk"], m["cell"]) for _, m in calls] == [(c, i) for c in range(3) for i in range(2)]
    assert [s for s, _ in calls] == [int(r["env_steps"]) for r in curves] == [128, 128, 256, 256, 384, 384]
    _same_table([m for _, m in calls], curves, skip=())
    # wandb: one offline run per cell under RUN/wandb/, its history the cell's curve rows
    files = sorted(glob.glob(str(tmp_path / "run" / "wandb" / "offline-run-*" / "run-*.wandb")))
    assert len(files) == 2
    runs = {}
    for f in files:
        name, group, config, history = _wandb_run(f)
        runs[config["cell"]] = (name, group, config, history)
    for i, cell in enumerate(_cells()):
        name, group, config, history = runs[i]
        assert name == f"point_mass/ppo_clip/cell-{i}_B{cell.lag_depth}_s0" and group == "point_mass/ppo_clip"
        assert config["lag_depth"] == cell.lag_depth and config["num_envs"] == 8 and config["resumed_at_chunk"] == 0
        rows = [r for r in curves if r["cell"] == i]
        assert [h["env_steps"] for h in history] == [int(r["env_steps"]) for r in rows]
        for h, r in zip(history, rows):
            for k in ("eval_return", "train_return"):
                assert _float_equal(h[f"returns/{k}"], r[k]), (k, h, r)
            assert _float_equal(h["diagnostics/mean_staleness"], r["mean_staleness"])
            assert h["chunk"] == r["chunk"] and sum(v for k, v in h.items() if k.startswith("staleness/")) == 1
    # where the W&B files went is said, with how to upload them
    assert (f"wandb (point_mass/ppo_clip): 2 offline run(s) in {tmp_path / 'run' / 'wandb'}; upload: wandb sync "
            in capsys.readouterr().out)
    # nothing but wandb/ was added beside the group
    assert sorted(os.listdir(tmp_path / "run")) == ["g", "wandb"]
    assert sorted(os.listdir(d)) == sorted(os.listdir(plain[2]))


def test_an_exception_in_progress_fn_reaches_the_caller_and_the_run_resumes_to_the_same_numbers(tmp_path, plain):
    d = str(tmp_path / "g")
    config = tiny_config(**CONFIG)

    def stop(step, metrics):
        if metrics["chunk"] == 1:
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here") as info:
        runner.run_group(config, _cells(), d, progress=False, progress_fn=stop)
    assert any("the same call resumes" in n for n in getattr(info.value, "__notes__", []))
    curves = results.read_table(os.path.join(d, "curves.csv"))  # the chunks done, every file whole
    assert sorted({r["chunk"] for r in curves}) == [0, 1] and not os.path.exists(os.path.join(d, "scores.csv"))
    seen = []
    scores = runner.run_group(config, _cells(), d, progress=False, progress_fn=lambda s, m: seen.append(m["chunk"]))
    assert seen == [2, 2]  # resumed after the chunk whose hook raised
    _same_table(scores, plain[0])
    _same_table(results.read_table(os.path.join(d, "curves.csv")), plain[1])


def test_a_resumed_group_opens_wandb_runs_that_say_the_chunk_it_resumed_at(tmp_path, plain, monkeypatch):
    """The hooks are built before the program knows where the group resumes: the W&B runs of a group
    stopped after one chunk still say ``resumed_at_chunk`` 1 and hold the chunks run after it."""
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    d, config = str(tmp_path / "run" / "g"), tiny_config(**CONFIG)
    assert runner.run_group(config, _cells(), d, progress=False, max_chunks=1) is None
    wandb = tracking.WandbOptions(dir=str(tmp_path / "run"))
    _same_table(runner.run_group(config, _cells(), d, progress=False, wandb=wandb), plain[0])
    files = glob.glob(str(tmp_path / "run" / "wandb" / "offline-run-*" / "run-*.wandb"))
    runs = [_wandb_run(f) for f in files]
    assert len(runs) == 2 and all(settings["resumed_at_chunk"] == 1 for _, _, settings, _ in runs)
    assert all([h["chunk"] for h in history] == [1, 2] for _, _, _, history in runs)


def test_vaco_jax_run_takes_progress_fn_as_brax_does(tmp_path):
    import vaco_jax

    seen = []
    done = vaco_jax.run(tiny_config(), seed=1, out=str(tmp_path), progress=False,
                        progress_fn=lambda num_steps, metrics: seen.append((num_steps, metrics["train_return"])))
    assert [s for s, _ in seen] == [int(r["env_steps"]) for r in done.curves]
    assert all(_float_equal(a, r["train_return"]) for (_, a), r in zip(seen, done.curves))
    with pytest.raises(ConfigError, match="progress_fn"):
        vaco_jax.run(tiny_config(), seed=1, out=str(tmp_path), progress_fn="not a function")


def test_wandb_missing_is_one_line_naming_the_extra_before_anything_is_written(tmp_path, monkeypatch):
    from vaco_jax.driver.train import main, train_args_class

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails as where it is not installed
    out = tmp_path / "out"
    cls = train_args_class()
    with pytest.raises(ConfigError) as info:
        main(cls(env="point_mass", out=str(out), progress=False, wandb=True))
    assert "[wandb]" in str(info.value) and len(str(info.value).splitlines()) == 1
    assert not out.exists()
    ls = study_module("lag_sweep")
    with pytest.raises(ConfigError, match=r"\[wandb\]"):
        ls.main(ls.Args(preset="tiny", out=str(tmp_path / "study"), progress=False, figures=False, wandb=True))
    assert not (tmp_path / "study").exists()
    with pytest.raises(ConfigError, match="wandb_mode='cloud'"):
        tracking.check_wandb(tracking.WandbOptions(mode="cloud"))


def test_capture_video_refuses_what_it_cannot_draw_before_anything_is_written(tmp_path, monkeypatch):
    ls = study_module("lag_sweep")
    args = dict(preset="tiny", out=str(tmp_path / "study"), progress=False, figures=False, capture_video=True)
    with pytest.raises(ConfigError, match="capture_video: env='point_mass' cannot be drawn"):
        ls.main(ls.Args(**args))
    from vaco_jax.core.config import Config

    hopper = Config(env="Hopper-v4")
    with pytest.raises(ConfigError, match=r"capture_video_cell=2: .* 2 cell\(s\)"):
        tracking.check_tracking([hopper], [2], None, tracking.VideoOptions(cell=2))
    with pytest.raises(ConfigError, match="capture_video_every=0"):
        tracking.check_tracking([hopper], [2], None, tracking.VideoOptions(every=0))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="ffmpeg is not installed"):
        tracking.check_tracking([hopper], [2], None, tracking.VideoOptions())
    assert not (tmp_path / "study").exists()


def test_the_hooks_are_flags_of_every_command_with_tensorboard():
    from vaco_jax.driver.cli import DRIVER_FLAGS, TRACKING_FLAG_NAMES
    from vaco_jax.driver.train import train_args_class

    names = set(TRACKING_FLAG_NAMES)
    assert names <= {f[0] for f in DRIVER_FLAGS}
    assert names <= {f.name for f in dataclasses.fields(train_args_class())}
    assert names <= {f.name for f in dataclasses.fields(study_module("lag_sweep").Args)}
    assert tracking.VideoOptions(every=3).films(2, 10) and not tracking.VideoOptions(every=3).films(3, 10)
    assert tracking.VideoOptions(every=3).films(9, 10)  # the last evaluation is always filmed


REQUIRED = os.environ.get("VACO_JAX_REQUIRE_RENDER") == "1"
HAVE_RENDER = (bool(ctypes.util.find_library("OSMesa")) or os.environ.get("MUJOCO_GL") == "egl") \
    and bool(shutil.which("ffmpeg"))


@pytest.mark.slow
@pytest.mark.skipif(not (HAVE_RENDER or REQUIRED), reason="no OSMesa library or no ffmpeg (Debian: libosmesa6, ffmpeg)")
def test_capture_video_writes_an_mp4_per_filmed_evaluation_and_changes_no_number(tmp_path):
    from vaco_jax.core.config import Config

    config = Config(env="Hopper-v4", method="ppo_clip", num_envs=2, unroll_length=8, num_epochs=1,
                    num_minibatches=1, total_env_steps=48, num_evals=3, eval_episodes=1, episode_length=20,
                    policy_hidden=(8,), value_hidden=(8,))
    cells = grid.grid([1], [0, 1])
    group = grid.Group(config, tuple(cells), "Hopper-v4/ppo_clip")
    filmed, bare = str(tmp_path / "filmed"), str(tmp_path / "bare")
    assert runner.run_groups(filmed, [group], progress=False, capture_video=tracking.VideoOptions(cell=1, every=2))
    assert runner.run_groups(bare, [group], progress=False)
    for name in ("scores.csv", "curves.csv"):
        _same_table(results.read_table(os.path.join(filmed, group.subdir, name)),
                    results.read_table(os.path.join(bare, group.subdir, name)))
    where = os.path.join(filmed, "videos", group.subdir, "cell-1")
    assert sorted(os.listdir(where)) == ["chunk-1.mp4", "chunk-2.mp4"]  # every 2nd evaluation, and the last
    for f in os.listdir(where):
        probe = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                                "stream=nb_read_frames,width,height", "-of", "csv=p=0", os.path.join(where, f)],
                               capture_output=True, text=True)
        width, height, frames = (int(x) for x in probe.stdout.strip().split(","))
        assert (width, height) == (320, 240) and 1 <= frames <= 20
    assert sorted(os.listdir(filmed)) == sorted(os.listdir(bare) + ["videos"])
