"""Every command line explains itself: each option of every script's ``--help`` has its own help text.

A study script's ``Args`` is built by ``with_config_flags`` (its own fields plus every Config field);
such a class has no source, so tyro once showed no help for the script's own fields (``--out``,
``--max-chunks``, ...). This reads the help a user sees and fails on any option left without one, or
two options sharing one text (a comment attached to the wrong field)."""

import contextlib
import importlib
import io
import pathlib
import re

from conftest import study_module
import pytest

SCRIPTS = ["lag_sweep", "delta_sweep", "mismatch", "forward_lag", "screen", "study", "sim_vs_real"]
_ROOT = pathlib.Path(__file__).resolve().parent.parent
# every benchmark with a command line (an ``Args`` class), so a new one cannot be forgotten here
BENCHMARKS = sorted(p.stem for p in (_ROOT / "benchmarks").glob("*.py") if "class Args" in p.read_text())


def option_help(args_class, monkeypatch) -> dict[str, str]:
    """option -> its help text as ``--help`` prints it (defaults removed), on one wide terminal."""
    from vaco_jax.driver.cli import parse_args

    monkeypatch.setenv("COLUMNS", "120")  # one column of groups (wider terminals get two side by side)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        parse_args(args_class, ["--help"])  # as a script prints it: options in groups
    helps, name = {}, None
    for line in buf.getvalue().splitlines():
        raw = line.rstrip().rstrip("│").rstrip().lstrip("│")  # a terminal draws a panel; a pipe does not
        body = raw.strip()
        entry = len(raw) - len(raw.lstrip(" ")) <= 2  # entries start at the panel's first column
        rule = re.fullmatch(r"[-─╰╭]+", body) is not None  # a heading's underline
        if entry and body.startswith("--") and not rule:  # "--flag SIGNATURE   help text": single spaces in the signature
            name = re.match(r"--[\w-]+", body).group(0)
            parts = re.split(r"\s{2,}", body, maxsplit=1)
            helps[name] = parts[1] if len(parts) > 1 else ""
        elif entry and name and not helps[name] and body and not body.startswith("-") and not rule:
            continue  # a long metavar wrapped onto the next line ({ppo_clip,...,lag_adaptive_clip})
        elif entry or not body or rule:
            name = None  # another entry (-h, a positional, a heading) or the panel's end
        elif name:  # a continuation line, indented under the option
            helps[name] += " " + body
    return {k: re.sub(r"\s*\(default: [^()]*\)\s*$", "", v).strip() for k, v in helps.items()}


def _args_class(where: str, name: str):
    if where == "experiments":
        return study_module(name).Args
    return importlib.import_module(f"benchmarks.{name}").Args


@pytest.mark.parametrize("where,name", [("experiments", s) for s in SCRIPTS] + [("benchmarks", b) for b in BENCHMARKS])
def test_every_option_has_its_own_help(where, name, monkeypatch):
    helps = option_help(_args_class(where, name), monkeypatch)
    assert len(helps) >= 3, helps  # the parser found the options
    missing = sorted(k for k, v in helps.items() if not v)
    assert not missing, f"{where}/{name}.py: no help for {missing}"
    shared: dict[str, list[str]] = {}
    for k, v in helps.items():
        shared.setdefault(v, []).append(k)
    twins = {v: ks for v, ks in shared.items() if len(ks) > 1}
    assert not twins, f"{where}/{name}.py: options share one help text: {twins}"


def test_a_script_field_keeps_its_comment_as_help(monkeypatch):
    """The documented case: lag_sweep's own ``--max-chunks`` (a comment in its class) reaches --help,
    beside the Config fields with_config_flags adds."""
    helps = option_help(study_module("lag_sweep").Args, monkeypatch)
    assert "stop every group after this many chunks" in helps["--max-chunks"]
    assert helps["--gamma"], "a Config field added by with_config_flags keeps its help"


def test_help_is_grouped_and_every_config_field_has_its_group(monkeypatch, capsys):
    """--help shows the options in groups (run, env, lag, method, optimiser, output) under their own
    flag names; every Config field is placed in a group by name, not by a fallback; a preset's field
    shows the values each preset sets."""
    import dataclasses

    from vaco_jax.core.config import Config
    from vaco_jax.driver.cli import HELP_GROUPS, help_group, parse_args

    assert not [f.name for f in dataclasses.fields(Config) if help_group(f.name, default=None) is None]
    monkeypatch.setenv("COLUMNS", "120")
    with pytest.raises(SystemExit):
        parse_args(study_module("lag_sweep").Args, ["--help"])
    out = capsys.readouterr().out
    for g in HELP_GROUPS:
        assert f"{g} options" in out, g
    assert out.index("lag options") < out.index("--lag-depths") < out.index("method options")
    assert "(default by --preset: " in out and "cpu: 0 1 2;" in out and "tiny: point_mass" in out
    args = parse_args(study_module("lag_sweep").Args, ["--lag-depths", "1", "2", "--gamma", "0.9", "--no-progress"])
    assert args.lag_depths == (1, 2) and args.gamma == 0.9 and args.progress is False
    # a tri-state boolean (None: the preset's) is a pair of flags, not {None,True,False}
    assert "--anneal-lr {True,False}" in out and "(--anneal-lr or --no-anneal-lr)" in out
    lag_sweep = study_module("lag_sweep").Args
    assert [parse_args(lag_sweep, argv).anneal_lr for argv in ([], ["--anneal-lr"], ["--no-anneal-lr"],
                                                               ["--anneal-lr", "False"])] == [None, True, False, False]
