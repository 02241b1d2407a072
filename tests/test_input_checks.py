"""What a user types that cannot run is one line naming it, before anything is compiled or written: a
knob name that is no knob (the nearest named), a value float32 cannot hold, ``--config`` without a file,
a ``MUJOCO_GL`` MuJoCo refuses; and what a newcomer met on the first screen: the steps a run takes, the
progress of a whole-run program, ``vaco-render --help``, the weight cap's modes, where W&B files and
videos went."""

import dataclasses
import math

import numpy as np
import pytest

from vaco_jax.core.config import Config, make_traced
from vaco_jax.core.knobs import FLOAT32_MAX, FLOAT32_TINY, KNOBS, check_knob
from vaco_jax.errors import ConfigError


def _config(**kw):
    return Config(env="point_mass", **kw)


# ----------------------------------------------------------------------------- knob names

def test_a_name_that_is_no_knob_is_unknown_with_the_nearest_name():
    with pytest.raises(ConfigError, match=r"^unknown knob 'tv_budgte' \(did you mean tv_budget\?\)$"):
        make_traced(_config(method="vaco"), tv_budgte=0.1)
    with pytest.raises(ConfigError, match=r"^unknown knob 'learning_rte' \(did you mean learning_rate\?\)$"):
        make_traced(_config(), learning_rte=1e-3)
    with pytest.raises(ConfigError, match=r"^unknown knob 'tv_budgte'"):  # the name first, whatever the value
        make_traced(_config(method="vaco"), tv_budgte="x")
    from vaco_jax.core.methods import make_method

    with pytest.raises(ConfigError, match=r"^unknown knob 'clip_epsilom' \(did you mean clip_epsilon\?\)$"):
        make_method("ppo_clip", clip_epsilom=0.1)
    # a real knob that this method does not read keeps its message, naming the pieces that read it
    with pytest.raises(ConfigError, match=r"^clip_epsilon=0.2 is not read by method='vaco' .*surrogate='ppo_clip'"):
        make_traced(_config(method="vaco"), clip_epsilon=0.2)
    assert make_traced(_config(method="vaco"), tv_budget=0.1) is not None


def test_a_knob_of_a_registered_users_piece_is_a_knob(monkeypatch):
    from typing import Any, ClassVar

    from flax import struct

    from vaco_jax.core import methods, pieces
    from vaco_jax.core.presets import METHODS

    @struct.dataclass
    class Halved(pieces.PPOClip):
        name: ClassVar[str] = "halved"
        shrink: Any = 0.5

    monkeypatch.setitem(METHODS, "halved_ppo", METHODS["ppo_clip"])
    assert "shrink" not in methods.knob_names()
    methods.register_method("halved_ppo", "gae", "behavior", Halved, "none")
    assert "shrink" in methods.knob_names()
    methods.check_knob_name("shrink")
    with pytest.raises(ConfigError, match=r"did you mean shrink\?"):
        methods.check_knob_name("shrinc")


# ----------------------------------------------------------------------------- values float32 cannot hold

FLOATS = [n for n, k in KNOBS.items() if not k.integer and n != "age_weights"]


@pytest.mark.parametrize("name", FLOATS)
def test_every_float_knob_refuses_what_rounds_to_inf_or_to_zero_in_float32(name):
    """One rule for every float knob: a value inside its range that float32 turns into inf, 0 or a
    subnormal is refused as such (it used to pass, or be called "outside (0, inf]")."""
    knob = KNOBS[name]
    if knob.high >= 1e300:
        with pytest.raises(ConfigError, match=rf"^{name}=1e\+300 overflows float32, the training dtype \(largest"):
            check_knob(name, 1e300)
    for tiny, becomes in ((1e-50, "rounds to 0"), (1e-40, "is a subnormal number")):
        if knob.low <= tiny <= knob.high:
            with pytest.raises(ConfigError, match=rf"^{name}={tiny!r} {becomes} in float32, .*smallest allowed "
                                                  r"magnitude is 1\.17549e-38"):
                check_knob(name, tiny)
    edge = max(FLOAT32_TINY, knob.low)
    if knob.low <= edge <= knob.high and not (knob.low_open and edge == knob.low):
        check_knob(name, edge)  # float32's smallest normal number itself is allowed
    if knob.high >= FLOAT32_MAX:
        check_knob(name, FLOAT32_MAX)


def test_the_issues_cases_are_refused_when_the_config_is_built():
    with pytest.raises(ConfigError, match=r"second_moment_budget=1e\+300 overflows float32.*allowed values: a number "
                                          r"in \(0, inf\]"):
        _config(method="m2po", second_moment_budget=1e300)
    with pytest.raises(ConfigError, match=r"^gate_temperature=1e-50 rounds to 0 in float32"):
        _config(method="sapo", gate_temperature=1e-50)
    with pytest.raises(ConfigError, match=r"^trust_width=1e-50 rounds to 0 in float32"):
        _config(method="gipo", trust_width=1e-50)
    with pytest.raises(ConfigError, match=r"^trust_width=1e-50 rounds to 0 in float32"):
        make_traced(_config(method="gipo"), trust_width=1e-50)  # a cell's override too
    with pytest.raises(ConfigError, match=r"^age_weights\[1\]=1e-45 is a subnormal number in float32"):
        _config(lag_model="ages", age_weights=(1.0, 1e-45), buffer_capacity=4)
    with pytest.raises(ConfigError, match=r"^my_knob=1e\+39 overflows float32"):  # a user's own knob: the same rule
        check_knob("my_knob", 1e39)
    assert math.isfinite(float(np.float32(_config(method="sapo", gate_temperature=1e-30).gate_temperature)))


# ----------------------------------------------------------------------------- --config and MUJOCO_GL

@pytest.mark.parametrize("argv", [["--config"], ["--config", "--seed", "3"], ["--config="]])
def test_config_without_a_file_is_one_line(argv, capsys):
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.driver.train import train_args_class

    with pytest.raises(SystemExit) as e:
        parse_args(train_args_class(), argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: config: --config needs a file (JSON or YAML): --config PATH\n"


def test_config_naming_no_file_says_the_path(tmp_path, capsys):
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.driver.train import train_args_class

    with pytest.raises(SystemExit):
        parse_args(train_args_class(), ["--config", str(tmp_path / "nope.yaml")])
    assert capsys.readouterr().err.strip() == f"error: config: {tmp_path / 'nope.yaml'} is not a file"


def test_a_mujoco_gl_that_mujoco_refuses_is_one_line_before_anything_runs(tmp_path, monkeypatch, capsys):
    from vaco_jax.driver import render, render_cli, tracking

    monkeypatch.setenv("MUJOCO_GL", "bogus")
    hopper = Config(env="Hopper-v4")
    with pytest.raises(ConfigError, match=r"^MUJOCO_GL='bogus' is not valid; allowed values: egl, osmesa, glfw"):
        tracking.check_tracking([hopper], [1], None, tracking.VideoOptions())
    monkeypatch.setattr("sys.argv", ["vaco-render", str(tmp_path)])
    with pytest.raises(SystemExit) as e:
        render_cli.cli()
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("error: MUJOCO_GL='bogus' is not valid; allowed values: egl")
    monkeypatch.setenv("MUJOCO_GL", "off")
    with pytest.raises(ConfigError, match="MUJOCO_GL='off' turns MuJoCo's rendering off"):
        render.check_gl_variable()
    for fine in ("egl", "OSMesa", "glfw"):
        monkeypatch.setenv("MUJOCO_GL", fine)
        render.check_gl_variable()


# ----------------------------------------------------------------------------- the first screen

def test_vaco_train_and_config_share_their_defaults():
    from vaco_jax.driver.train import train_args_class, train_defaults

    assert train_defaults() == Config()
    fields = {f.name: f.default for f in dataclasses.fields(train_args_class())}
    assert fields["total_env_steps"] == Config().total_env_steps


def test_every_choice_a_help_line_names_is_there_with_the_others():
    """A structural option's help line that describes its choices describes every one of them, from the
    registry (--weight-cap-mode left out 'band')."""
    from vaco_jax.core.pieces import STATIC_CHOICES

    help_of = {f.name: f.metadata["help"] for f in dataclasses.fields(Config)}  # declared beside each field
    described = 0
    for name, allowed in STATIC_CHOICES.items():
        text = help_of[name]
        named = [c for c in allowed if f"'{c}'" in text]
        if named:
            assert named == list(allowed), (name, named, allowed)
            described += 1
    assert "'band'" in help_of["weight_cap_mode"] and described >= 3


def test_vaco_render_help_describes_rendering(monkeypatch, capsys):
    import tyro

    from vaco_jax.driver import cli, render_cli

    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        tyro.cli(cli.grouped(render_cli.Args), args=["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert text.count("GROUP_DIR/cell-K.mp4") == 1  # --out's default, once
    assert render_cli.HELP_GROUP_TEXT["run"] in text and cli.HELP_GROUPS["run"] not in text
    assert render_cli.HELP_CONFIG_TEXT in text and "re-runs that group's cells" not in text
    assert "tasks, methods, seeds" not in text


def test_chunk_lines_print_once_per_chunk_whatever_the_cells(capsys):
    from vaco_jax.core.train import ChunkLines

    config = _config(num_envs=8, unroll_length=16, total_env_steps=1000, num_evals=2)
    lines = ChunkLines(config)
    for chunk in (-1, -1, 0, 0, 0, 1, 1):  # three cells of a vmapped grid call it alike
        lines(np.int32(chunk), np.int32(0))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "training: 2 chunks of 384 env steps per run (768 in all), a line after each"
    assert [line.split(", ")[0] for line in out[1:]] == ["training: chunk 1/2", "training: chunk 2/2"]
    assert "768 env steps per run" in out[2]
    lines(np.int32(-1), np.int32(0))  # the same program called again starts again
    assert capsys.readouterr().out.startswith("training: 2 chunks")


def test_where_the_tracking_files_went_is_said(tmp_path):
    from vaco_jax.driver import grid, tracking

    hooks = tracking.GroupHooks(_config(), grid.grid([1], [0]), "point_mass/ppo_clip", {}, 0, None,
                                tracking.WandbOptions(mode="offline"), tracking.VideoOptions(), str(tmp_path))
    assert hooks.where_lines() == []  # nothing written, nothing said
    hooks._opened, hooks._films = 1, [str(tmp_path / "videos" / "cell-0" / f"chunk-{c}.mp4") for c in (0, 1)]
    wandb_line, video_line = hooks.where_lines()
    assert wandb_line == (f"wandb (point_mass/ppo_clip): 1 offline run(s) in {tmp_path}/wandb; upload: wandb sync "
                          f"{tmp_path}/wandb/offline-run-*")
    assert video_line == (f"capture_video (point_mass/ppo_clip): 2 video(s) in {tmp_path}/videos/cell-0, the last "
                          "chunk-1.mp4")
