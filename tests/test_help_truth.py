"""Help shows the truth (issue 49, item 3): every command's ``--help`` says the value a run uses when a
flag is left out (never ``(default: None)``), per preset, task or method where it depends on one, and
that value is the one the command plans; ``--methods`` / ``--tasks`` / ``--env`` list their choices;
``--config``, ``--sweep`` and ``--dry-run`` are listed where the command takes them; ``--dry-run``
prints the plan, the memory and time estimates, and writes nothing.

Everything runs in-process: parsing, planning and the memory estimate's tracing, no compilation."""

import contextlib
import dataclasses
import importlib
import io
import os
import re

import pytest

from vaco_jax.__main__ import COMMANDS
from vaco_jax.core.config import Config

# the commands whose flags are Config fields and DRIVER_FLAGS (sweeps), and the study commands
SWEEPS = ("train", "lag-sweep", "forward-lag", "delta-sweep", "mismatch")
DRY_RUN = ("train", "lag-sweep", "forward-lag", "delta-sweep", "mismatch", "screen", "study", "locomotion",
           "steplag", "bench", "sim-vs-real", "locomotion-pilot")
TYRO = ("train", "render", "lag-sweep", "forward-lag", "delta-sweep", "mismatch", "screen", "study", "locomotion",
        "steplag", "bench", "sim-vs-real", "deep-lag")
CONFIG_FIELDS = {f.name for f in dataclasses.fields(Config)}


def args_class(command: str):
    module = importlib.import_module(COMMANDS[command][0])
    return module.train_args_class() if command == "train" else module.Args


def help_text(command: str, argv=(), monkeypatch=None) -> str:
    """``COMMAND [argv] --help`` as printed on a 120-column terminal (one column of groups)."""
    if monkeypatch is not None:
        monkeypatch.setenv("COLUMNS", "120")
    buf, code = io.StringIO(), 0
    with contextlib.redirect_stdout(buf):
        try:
            if command in TYRO:
                from vaco_jax.driver.cli import parse_args

                parse_args(args_class(command), [*argv, "--help"])
            else:
                importlib.import_module(COMMANDS[command][0]).main([*argv, "--help"])
        except SystemExit as stop:
            code = stop.code
    assert code in (0, None), command
    return buf.getvalue()


def flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def entries(text: str) -> dict[str, str]:
    """``--flag`` -> its whole help text, defaults included (tyro's panels, continuation lines joined)."""
    out, name = {}, None
    for line in text.splitlines():
        raw = line.rstrip().rstrip("│").rstrip().lstrip("│")
        body = raw.strip()
        entry = len(raw) - len(raw.lstrip(" ")) <= 2
        rule = re.fullmatch(r"[-─╰╭]+", body) is not None
        if entry and body.startswith("--") and not rule:
            name = re.match(r"--[\w-]+", body).group(0)
            parts = re.split(r"\s{2,}", body, maxsplit=1)
            out[name] = parts[1] if len(parts) > 1 else ""
        elif entry and name and not out[name] and body and not body.startswith("-") and not rule:
            continue  # a long metavar wrapped onto the next line ({ppo_clip,...,custom})
        elif entry or not body or rule:
            name = None
        elif name:
            out[name] += " " + body
    return out


def hint(entry: str) -> str:
    """The ``(default ...)`` that ends a flag's help."""
    return entry[entry.rindex("(default"):]


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_help_says_default_none(command, monkeypatch):
    text = flat(help_text(command, monkeypatch=monkeypatch))
    assert "(default: None)" not in text and "(default: unset)" not in text, command
    assert "default: the preset's, else" not in text


# a number as help prints it: digits, with the _ or , that may group them (not a version's v4, not 0.99's 99)
NUMBER = re.compile(r"(?<![\w.])\d[\d_,]*\d|(?<![\w.])\d")


def help_problems(wide: str, narrow: list[str]) -> list[str]:
    """What a ``--help`` text (``wide``; the same help on ``narrow`` terminals) shows wrong: ``{None}`` in a
    flag's metavar (``--max-chunks INT``, not ``{None}|INT``: left out, its ``(default: ...)`` applies),
    ``(default: None)``, a number in another format than ``helptext.number``'s (``300_000``: ``_`` from five
    digits on, never ``300,000`` or ``300000``), or a number a narrow terminal's wrap splits in two."""
    problems = [f"{p!r} in: {line.strip()}" for line in wide.splitlines()
                for p in ("{None", "None}", ",None,", "(default: None)") if p in line]
    numbers = NUMBER.findall(flat(wide))
    problems += [f"number {n} not as helptext.number shows it" for n in numbers
                 if re.fullmatch(r"\d{1,3}(,\d{3})+|\d{5,}", n)]
    for text in narrow:
        if sorted(NUMBER.findall(flat(text))) != sorted(numbers):
            problems.append("a number split across lines on a narrow terminal")
    return problems


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_shows_what_a_user_types_and_whole_numbers(command, monkeypatch):
    """No ``{None}`` anywhere (cli.clean_metavar), numbers as helptext.number shows them and whole on 61, 80
    and 97 columns."""
    wide = help_text(command, monkeypatch=monkeypatch)
    narrow = []
    for columns in ("61", "80", "97"):
        monkeypatch.setenv("COLUMNS", columns)
        narrow.append(help_text(command))
    assert not help_problems(wide, narrow), (command, help_problems(wide, narrow))


def test_help_problems_finds_what_tyro_showed_before():
    """The check itself: tyro's own metavar of an Optional field, a comma-grouped or bare number, a split."""
    assert help_problems("--max-chunks {None}|INT", []) and help_problems("--wandb-mode {None,online,offline}", [])
    assert help_problems("(default: 300,000)", []) and help_problems("(default: 300000)", [])
    assert help_problems("(default: demo: 307_200)", ["(default: demo: 307_\n200)"])
    assert not help_problems("--max-chunks INT (default: 300_000; 1000; 0.99,0.995; Hopper-v4)", [])


def test_an_optional_flag_shows_its_type_and_still_parses(monkeypatch):
    from vaco_jax.driver.cli import parse_args

    text = " ".join(help_text("lag-sweep", monkeypatch=monkeypatch).split())
    for shown in ("--max-chunks INT ", "--seeds INT [INT ...] ", "--age-weights FLOAT [FLOAT ...] ",
                  "--clip-epsilon FLOAT ", "--backend {mujoco,mjx,", "--wandb-mode {online,offline} ",
                  "--sweep STR [STR ...] ", "--anneal-lr {True,False} ", "--tasks TASK [TASK ...] "):
        assert shown in text, shown
    assert "(default: 200_000)" in help_text("train", monkeypatch=monkeypatch)  # tyro's own was 200000
    args = parse_args(args_class("lag-sweep"), ["--max-chunks", "3", "--seeds", "0", "1", "--total-env-steps",
                                                "300_000", "--wandb-mode", "online", "--clip-epsilon", "0.1"])
    assert (args.max_chunks, args.seeds, args.total_env_steps, args.wandb_mode, args.clip_epsilon) == (
        3, (0, 1), 300_000, "online", 0.1)
    assert parse_args(args_class("lag-sweep"), ["--max-chunks", "None"]).max_chunks is None  # still taken


def test_a_number_is_shown_in_one_format():
    from vaco_jax.driver.helptext import number, show

    assert [number(n) for n in (512, 2000, 10_000, 307_200, 10_000_000)] == ["512", "2000", "10_000", "307_200",
                                                                              "10_000_000"]
    assert [number(x) for x in (3e-4, 1e-5, 0.99, 0.0, 0.1234567891)] == ["0.0003", "1e-05", "0.99", "0",
                                                                          "0.1234567891"]
    assert show((1, 8, 32)) == "1 8 32" and show(True) == "True" and int("307_200") == 307_200  # pastes back


@pytest.mark.parametrize("command", TYRO)
def test_config_sweep_and_dry_run_are_listed_where_taken(command, monkeypatch):
    helps = entries(help_text(command, monkeypatch=monkeypatch))
    assert "--config" in helps and "(default: no file)" in helps["--config"], command
    assert ("--sweep" in helps) == (command in SWEEPS), command
    assert ("--dry-run" in helps) == (command in DRY_RUN), command
    if command == "train":  # a sweep in vaco-train is a grid run as one group: the help says so
        assert "one group" in helps["--sweep"] and "one run directory" in helps["--sweep"]


def test_the_pilot_takes_dry_run_through_the_lag_sweep(monkeypatch, capsys):
    from vaco_jax.studies import locomotion_pilot

    locomotion_pilot.main(["--help"])
    assert "--dry-run" in capsys.readouterr().out
    assert "--dry-run" in help_text("lag-sweep", monkeypatch=monkeypatch)


def test_methods_tasks_and_env_list_their_choices(monkeypatch):
    from vaco_jax.core.methods import METHODS

    study = entries(help_text("lag-sweep", monkeypatch=monkeypatch))
    train = entries(help_text("train", monkeypatch=monkeypatch))
    for text in (study["--methods"], train["--method"]):
        assert all(m in text for m in METHODS)
    assert "custom" not in study["--methods"]  # a study's --methods takes named methods only
    for text in (study["--tasks"], train["--env"]):
        assert "choices:" in text
        for name in ("Hopper-v4/v5", "Pusher-v5", "halfcheetah", "inverted_double_pendulum", "point_mass",
                     "Playground"):
            assert name in text, name
    screen = entries(help_text("screen", monkeypatch=monkeypatch))  # a study's own allowed tasks
    assert "choices: inverted_pendulum" in screen["--tasks"] or "choices: reacher" in screen["--tasks"]


def test_defaults_are_resolved_per_preset(monkeypatch):
    helps = entries(help_text("lag-sweep", monkeypatch=monkeypatch))
    steps, envs = hint(helps["--total-env-steps"]), hint(helps["--num-envs"])
    assert steps.startswith("(default by --preset:") and "cpu: 300_000" in steps and "tiny: 512" in steps
    assert "cpu: 64" in envs and "tiny: 8" in envs and "cpu_locomotion: 16" in envs  # Hopper-v4's own
    one = entries(help_text("lag-sweep", ["--preset", "tiny"], monkeypatch))
    assert hint(one["--total-env-steps"]) == "(default: 512 with --preset tiny)"
    assert hint(one["--num-envs"]) == "(default: 8 with --preset tiny)"
    assert hint(one["--out"]) == "(default: runs/lag_sweep_tiny with --preset tiny)"
    method = hint(helps["--clip-epsilon"])  # a method's knob: per method
    assert method.startswith("(default by method: 0.2 for ppo_clip") and "no other method reads it" in method


def study_module_of(command: str):
    return importlib.import_module(COMMANDS[command][0])


def _planned_groups(module_name: str, argv: list[str], monkeypatch) -> list:
    """The groups a study's ``main`` plans for ``argv`` (run_study replaced: nothing runs)."""
    from vaco_jax.driver import study
    from vaco_jax.driver.cli import parse_args

    seen = []
    monkeypatch.setattr(study, "run_study", lambda run_dir, groups, *a, **k: seen.extend(groups) or False)
    module = importlib.import_module(f"vaco_jax.studies.{module_name}")
    with contextlib.redirect_stdout(io.StringIO()):
        module.main(parse_args(module.Args, argv))
    return seen


@pytest.mark.parametrize("command,preset", [("lag-sweep", "tiny"), ("lag-sweep", "cpu"),
                                            ("lag-sweep", "cpu_locomotion"), ("forward-lag", "tiny"),
                                            ("delta-sweep", "tiny"), ("mismatch", "cpu")])
def test_a_preset_default_shown_is_the_value_the_study_plans(command, preset, monkeypatch, tmp_path):
    from vaco_jax.driver.helptext import method_dependent, show

    helps = entries(help_text(command, ["--preset", preset], monkeypatch))
    groups = _planned_groups(COMMANDS[command][0].rsplit(".", 1)[1], ["--preset", preset, "--out",
                                                                      str(tmp_path / "x")], monkeypatch)
    checked = 0
    for name in sorted(CONFIG_FIELDS):
        if flag(name) not in helps or method_dependent(name):  # a method's piece or knob: per method
            continue
        if name in getattr(study_module_of(command), "HELP_DEFAULTS", {}):  # said in words (the buffer: B's)
            continue
        planned = {show(getattr(g.config, name), name) for g in groups}
        if name == "lag_depth":  # carried by the cells
            planned = {show(c.lag_depth) for g in groups for c in g.cells}
        if name == "method" and command == "mismatch":  # the method under test, beside revised PPO-EWMA
            planned -= {"ppo_ewma_revised"}
        shown = re.fullmatch(r"\(default: (.*?)(?:, Config's)?(?: with --preset \w+)?\)", hint(helps[flag(name)]))
        assert shown, (name, helps[flag(name)])
        assert planned == {shown.group(1)}, (command, preset, name, planned, shown.group(1))
        checked += 1
    assert checked >= 20
    assert not os.path.exists(tmp_path / "x")


def test_vaco_train_shows_the_task_defaults_it_applies(monkeypatch):
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.driver.helptext import show
    from vaco_jax.driver.train import train_args_class, train_config, train_defaults

    helps = entries(help_text("train", monkeypatch=monkeypatch))
    assert hint(helps["--num-envs"]) == "(default: 64; --env Hopper-v4, Hopper-v5: 16)"
    assert "--env Hopper-v4, Hopper-v5: 128" in hint(helps["--unroll-length"])
    hopper = entries(help_text("train", ["--env", "Hopper-v4"], monkeypatch))
    assert hint(hopper["--num-envs"]) == "(default: 16 for --env Hopper-v4)"
    with contextlib.redirect_stdout(io.StringIO()):
        config = train_config(parse_args(train_args_class(), ["--env", "Hopper-v4"]))
    shown = train_defaults()
    checked = 0
    for name in sorted(CONFIG_FIELDS & {f.name for f in dataclasses.fields(train_args_class())}):
        text = hopper[flag(name)]
        if "for --env Hopper-v4)" in text:  # the value the run takes for Hopper-v4, said
            assert hint(text) == f"(default: {show(getattr(config, name), name)} for --env Hopper-v4)", name
            checked += 1
        elif "(default by method" not in text and name != "env":  # the value shown by tyro is Config's, and runs
            assert getattr(config, name) == getattr(shown, name), name
    assert checked >= 8


def test_grad_clip_and_max_grad_norm_say_the_same_thing(monkeypatch):
    helps = entries(help_text("train", monkeypatch=monkeypatch))
    norm, clip = helps["--max-grad-norm"], helps["--grad-clip"]
    assert "separately" not in norm
    assert "per_network" in norm and "joint" in norm and "together" in norm
    assert "max_grad_norm" in clip and "each clipped" in clip and "together" in clip


def test_dry_run_prints_the_plan_and_estimates_and_writes_nothing(tmp_path, capsys):
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.studies import lag_sweep

    out = tmp_path / "sweep"
    assert lag_sweep.main(parse_args(lag_sweep.Args, ["--preset", "tiny", "--out", str(out), "--dry-run"])) == str(out)
    text = capsys.readouterr().out
    assert "plan: 1 group(s)" in text and "#0-3" in text and "memory estimate" in text
    assert "time estimate: none for point_mass" in text and "dry run: nothing compiled or written" in text
    lag_sweep.main(parse_args(lag_sweep.Args, ["--preset", "cpu", "--out", str(out), "--dry-run", "--shard", "1/3"]))
    text = capsys.readouterr().out
    assert "shard 1/3" in text and "time estimate: ~" in text and "inverted_double_pendulum" in text
    assert not out.exists()


def test_vaco_train_dry_run_and_sweep_write_nothing(tmp_path, capsys):
    from vaco_jax.driver import train
    from vaco_jax.driver.cli import parse_args

    out = tmp_path / "train"
    small = ["--env", "point_mass", "--num-envs", "8", "--unroll-length", "16", "--out", str(out), "--dry-run"]
    assert train.main(parse_args(train.train_args_class(), small)) == 0
    text = capsys.readouterr().out
    assert "1 cell(s)" in text and "memory estimate" in text and "point_mass_ppo_clip_B1_s0_" in text
    assert train.main(parse_args(train.train_args_class(), [*small, "--sweep", "gamma=0.9,0.99",
                                                            "num_epochs=1,2"])) == 0
    text = capsys.readouterr().out
    assert "plan: 2 group(s)" in text and "4 cell(s)" in text
    assert "point_mass_ppo_clip_sweep-gamma-num_epochs_s0_" in text
    assert not out.exists()


def test_vaco_train_sweep_refuses_the_task_the_method_and_a_flag_swept_twice():
    from vaco_jax.driver.train import sweep_groups
    from vaco_jax.errors import ConfigError

    config = Config(env="point_mass")
    with pytest.raises(ConfigError, match="vaco-lag-sweep --tasks"):
        sweep_groups(config, 0, ["env=point_mass,hopper"])
    with pytest.raises(ConfigError, match="given as a flag and as a --sweep axis"):
        sweep_groups(config, 0, ["gamma=0.9,0.99"], {"gamma": 0.95})
    axes, groups = sweep_groups(config, 0, ["gamma=0.9,0.99", "lag_depth=1,4"])
    assert list(axes) == ["gamma", "lag_depth"] and len(groups) == 1 and len(groups[0].cells) == 4


def test_locomotion_run_dry_run_names_its_units_and_writes_nothing(tmp_path, capsys):
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.studies import locomotion

    results, runs = tmp_path / "results", tmp_path / "runs"
    args = parse_args(locomotion.Args, ["run", "--minutes", "1", "--dry-run", "--results", str(results),
                                        "--runs", str(runs)])
    assert locomotion.main(args) == []
    text = capsys.readouterr().out
    assert "a run would start with: tune/" in text and "memory estimate" in text and "time estimate: ~" in text
    assert not results.exists() and not runs.exists()
