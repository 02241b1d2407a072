"""A setting is declared once (``names.setting`` in ``names.Settings``): its Config field (name, type,
default), its help line on the command line and, for a knob, its ``KNOBS`` entry (home = sweep axis,
range) all come from that one declaration; nothing restates them."""

import dataclasses

import pytest
from test_cli_help import option_help

from vaco_jax.core.config import Config
from vaco_jax.names import COMMON_KNOBS, KNOBS, LAG_KNOBS, METHOD_KNOBS, Settings, knobs_of, setting


def test_config_is_the_declarations_with_no_field_of_its_own():
    declared, config = dataclasses.fields(Settings), dataclasses.fields(Config)
    assert len(config) == len(declared) and all(c is d for c, d in zip(config, declared))
    assert not Config.__dict__.get("__annotations__"), "Config declares no field of its own"
    assert all(f.metadata["help"].strip() for f in declared), "every setting has its help line"


def test_knobs_are_the_declarations_with_a_home_in_their_order():
    with_home = [f for f in dataclasses.fields(Settings) if "knob" in f.metadata]
    assert list(KNOBS) == [f.name for f in with_home]
    for f in with_home:
        assert KNOBS[f.name] is f.metadata["knob"], f"KNOBS[{f.name!r}] is not its declaration's Knob"
        assert KNOBS[f.name].help == f.metadata["help"]
    for home, names in (("lag", LAG_KNOBS), ("common", COMMON_KNOBS), ("method", METHOD_KNOBS)):
        assert names == tuple(f.name for f in with_home if f.metadata["knob"].home == home)
    assert len(KNOBS) > 30 and {"lag_depth", "learning_rate", "clip_epsilon"} <= set(KNOBS)


def test_one_declaration_gives_the_field_the_knob_and_the_help():
    """A setting of one's own, declared with help and a home, is a field with its default, a knob with
    its range and sweep axis, and the help line the command line shows (``cli._help``)."""
    from vaco_jax.driver.cli import _help

    @dataclasses.dataclass(frozen=True)
    class Mine(Settings):
        my_gain: float = setting(0.25, "my piece's gain", home="method", low=0, high=1)

    field = dataclasses.fields(Mine)[-1]
    assert (field.name, field.type, Mine().my_gain) == ("my_gain", float, 0.25)
    knobs = knobs_of(Mine)
    assert list(knobs)[:-1] == list(KNOBS) and knobs["my_gain"].home == "method"
    assert knobs["my_gain"].allowed() == "a number in [0, 1]"
    assert _help(field) == "my piece's gain"
    assert "knob" not in dataclasses.fields(Mine)[0].metadata  # a static setting: help only
    for wrong in (dict(home="lags", low=0), dict(low=0)):  # no such sweep axis; a range without a home
        with pytest.raises(TypeError, match="home="):
            setting(0.25, "my piece's gain", **wrong)


def test_the_command_line_shows_each_declared_help_line(monkeypatch):
    """vaco-train's --help shows, for every Config field it has a flag for, the help line declared beside
    the field (then the field's choices, the lag models' own lines, or the tri-state note)."""
    from vaco_jax.driver.train import train_args_class

    shown = option_help(train_args_class(), monkeypatch)
    checked = 0
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        if flag not in shown:
            continue
        declared = " ".join(f.metadata["help"].split())
        assert " ".join(shown[flag].split()).startswith(declared), (flag, shown[flag], declared)
        checked += 1
    assert checked >= len(dataclasses.fields(Config)) - 1  # every field but grid_batch (no flag of vaco-train)
