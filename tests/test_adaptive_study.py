"""The lag-adaptive study (vaco_jax/studies/adaptive.py): its committed protocol plans every unit with the arm,
lag and seeds it names and prices them without compiling anything; its arms are docs/adaptive.md's constants
and the presets' defaults written out; the oracle is read from the committed choices tables (the fixed-lag
one joins the plan only once the lag-shape study's surface is complete, SAT's after it and only where they fit
the budget); a bad protocol is one line."""

import dataclasses
import json
import os
import re
import shutil

import pytest

from vaco_jax.analysis import results
from vaco_jax.core import pieces
from vaco_jax.core.config import ConfigError
from vaco_jax.driver import dryrun
from vaco_jax.studies import adaptive, kit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results", "adaptive")
STEPLAG = os.path.join(ROOT, "results", "steplag")
LAGSHAPE = os.path.join(ROOT, "results", "lagshape")
DESIGN = ["Hopper-v4", "Walker2d-v4", "HalfCheetah-v4"]


@pytest.fixture(scope="module")
def protocol():
    return kit.load_protocol(os.path.join(RESULTS, "protocol.json"))[0]


def lagshape_with(base, per_lag: str, state: str = "complete") -> str:
    os.makedirs(base, exist_ok=True)
    results.write_table(os.path.join(base, "tuning_choices.csv"), [{"surface": "ppo_clip", "state": state,
                                                                   "per_lag": per_lag}])
    return str(base)


def test_plan_lists_every_unit_with_its_cost_and_compiles_nothing(protocol, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(kit, "run_unit", lambda *a, **k: pytest.fail("plan ran a unit"))
    shutil.copy(os.path.join(RESULTS, "protocol.json"), tmp_path / "protocol.json")
    adaptive.main(adaptive.Args("plan", results=str(tmp_path), runs=str(tmp_path / "runs"),
                                lagshape=str(tmp_path / "no")))
    lines = capsys.readouterr().out.splitlines()
    planned = adaptive.units(protocol, STEPLAG, str(tmp_path / "no"))
    body = [re.fullmatch(r"(\S+) +(\d+) runs  ~ *([0-9.]+) min  to run", line).groups()
            for line in lines[1:1 + len(planned)]]
    assert [b[0] for b in body] == [u.name for u in planned] and [int(b[1]) for b in body] == [u.runs for u in planned]
    assert [float(b[2]) for b in body] == [round(dryrun.group_minutes(u.group), 1) for u in planned]
    total = sum(u.minutes for u in planned)
    runs = sum(u.runs for u in planned)
    assert f"{runs} runs  ~{total / 60:.1f} h in {len(planned)} units" in lines[1 + len(planned)]
    assert "then SAT's units" in lines[-1] and "follow the lag-shape study's fixed-lag PPO-Clip surface" in lines[-1]
    assert not any("/sat/" in u.name for u in planned) and len(lines) == len(planned) + 3
    assert max(u.minutes for u in planned) <= 90  # the groups of at most 90 minutes


def test_every_unit_runs_the_arm_lag_and_seeds_the_protocol_names(protocol):
    units = {u.name: u for u in adaptive.units(protocol, STEPLAG, os.devnull)}
    settings = {k: tuple(v) if isinstance(v, list) else v for k, v in protocol["settings"].items() if k != "lag_model"}
    got = set()
    for name, u in units.items():
        _, task, arm, model = name.split("/")
        c = u.group.config
        assert {k: getattr(c, k) for k in settings} == settings and c.backend == "mujoco" and c.env == task
        assert c.lag_model == model and {x.seed for x in u.group.cells} == set(range(600, 610))
        fields = protocol["arms"]["robust" if arm.startswith("ppo_clip") else arm]
        assert c.method == fields["method"]
        if arm.startswith("ppo_clip"):
            assert c.clip_epsilon == float(arm.split("-")[1])
        else:
            assert all(getattr(c, k) == v for k, v in fields.items())
        got |= {(task, arm, model, x.lag_depth) for x in u.group.cells}
        assert len(u.group.cells) == 10 * len({x.lag_depth for x in u.group.cells})
    want = set()
    for t in DESIGN:
        want |= {(t, a, "uniform", b) for a in ("adaptive", "bapo", "ppo_clip-0.6") for b in (1, 8, 32)}
        want |= {(t, a, "fixed", b) for a in ("adaptive", "bapo", "ppo_clip-0.6") for b in (8, 16)}
        want |= {(t, "ppo_clip-0.2", "uniform", 1)}  # SAT's units follow the fixed-lag oracle (tests below)
    want |= {("Ant-v4", a, "uniform", b) for a in ("adaptive", "ppo_clip-0.6") for b in (1, 32)}  # adaptive only
    assert got == want | {("Ant-v4", "ppo_clip-0.2", "uniform", 1)}


def test_the_arms_are_the_designs_constants_and_the_presets_defaults(protocol):
    defaults = lambda cls: {f.name: f.default for f in dataclasses.fields(cls)}  # noqa: E731
    arms = protocol["arms"]
    assert {k: v for k, v in arms["bapo"].items() if k != "method"} == defaults(pieces.BalancedClip)
    assert {k: v for k, v in arms["sat"].items() if k != "method"} == defaults(pieces.StalenessClip)
    page = open(os.path.join(ROOT, "docs", "adaptive.md")).read()
    for knob in ("clip_epsilon", "clip_epsilon_lagged", "saturation_staleness"):  # the page's table of constants
        value = re.search(rf"\| ([0-9.]+) \| `{knob}` \|", page).group(1)
        assert arms["adaptive"][knob] == float(value) == defaults(pieces.LagAdaptiveClip)[knob]
    row = [r for r in results.read_table(os.path.join(STEPLAG, "choices.csv")) if r["surface"] == "ppo_clip"][0]
    assert arms["robust"] == {"method": "ppo_clip", "clip_epsilon": float(row["value"])}
    lag = kit.load_protocol(os.path.join(LAGSHAPE, "protocol.json"))[0]  # the lag-shape study's copies
    assert all(protocol[k] == lag[k] for k in ("engine", "settings", "normalisation"))


def test_the_seeds_are_fresh():
    """No committed study's protocol names a seed of 600-609."""
    used = set()

    def walk(x):
        if isinstance(x, dict):
            [walk(v) for v in x.values()]
        elif isinstance(x, list):
            [walk(v) for v in x]
        elif isinstance(x, int) and not isinstance(x, bool):
            used.add(x)
    for name in os.listdir(os.path.join(ROOT, "results")):
        path = os.path.join(ROOT, "results", name, "protocol.json")
        if name != "adaptive" and os.path.exists(path):
            walk(kit.load_protocol(path)[0])
    assert not used & set(range(600, 610))


def test_the_uniform_oracle_is_stage_1s_per_lag_optima_read_from_its_table(protocol, tmp_path):
    eps = adaptive.oracle_eps(protocol, STEPLAG, os.devnull)
    assert eps == {"uniform": {1: 0.2, 8: 0.6, 32: 0.6}, "fixed": None}
    assert eps["uniform"] == {int(b): v for b, v in protocol["oracle"]["uniform"]["per_lag"].items()}
    rows = results.read_table(os.path.join(STEPLAG, "choices.csv"))
    for r in rows:
        if r["surface"] == "ppo_clip":
            r["per_lag"] = "B=1: 0.2; B=8: 1.8; B=32: 0.6"
    results.write_table(str(tmp_path / "choices.csv"), rows)
    names = [u.name for u in adaptive.units(protocol, str(tmp_path), os.devnull)]
    assert "study/Hopper-v4/ppo_clip-1.8/uniform" in names  # the table is read, not a copy of it
    with pytest.raises(ConfigError, match=r"oracle.uniform.per_lag: .* recorded, but .* says"):
        adaptive.check_protocol(protocol, str(tmp_path))


@pytest.mark.parametrize("per_lag,state,extra", [
    ("B=8: 0.6; B=16: 0.2", "complete", {"ppo_clip-0.2": [16]}),
    ("B=8: 1.8; B=16: 0.2", "complete", {"ppo_clip-1.8": [8], "ppo_clip-0.2": [16]}),
    ("B=8: 0.6; B=16: 0.6", "complete", {}),  # the robust runs are the oracle's
    ("B=8: every value equal; B=16: 0.6", "complete", {}),  # a tie takes the robust epsilon
    ("B=8: 0.6; B=16: 0.2", "more seeds pending", None),  # not complete: nothing yet
])
def test_the_fixed_lag_oracle_joins_the_plan_once_the_surface_is_complete(protocol, tmp_path, per_lag, state, extra):
    before = [u.name for u in adaptive.units(protocol, STEPLAG, os.devnull)]
    planned = adaptive.units(protocol, STEPLAG, lagshape_with(tmp_path, per_lag, state))
    assert [u.name for u in planned][:len(before)] == before  # the earlier units keep their order
    added = planned[len(before):]
    known = adaptive.oracle_eps(protocol, STEPLAG, str(tmp_path))["fixed"]
    if extra is None:
        assert not added and known is None and "then `plan`" in adaptive.all_done(False)
        return
    assert known is not None and adaptive.all_done(True) == "every unit has finished"
    added = [u for u in added if "/sat/" not in u.name]  # SAT's, after them: the tests below
    assert {u.name for u in added} == {f"study/{t}/{a}/fixed" for t in DESIGN for a in extra}
    for u in added:
        arm = u.name.split("/")[2]
        assert sorted({x.lag_depth for x in u.group.cells}) == extra[arm] and u.group.config.lag_model == "fixed"


def test_a_bad_protocol_is_one_line(protocol, tmp_path):
    bad = {k: v for k, v in protocol.items() if k != "held_out"}
    with pytest.raises(ConfigError, match="'held_out' missing"):
        adaptive.check_protocol(bad)
    bad = json.loads(json.dumps(protocol))
    bad["arms"]["bapo"]["positive_share_target"] = 1.5
    with pytest.raises(ConfigError, match="positive_share_target"):
        adaptive.check_protocol(bad)
    path = tmp_path / "protocol.json"
    bad = json.loads(json.dumps(protocol))
    bad["rules"]["bootstrap_reps"] = 200
    path.write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match=r"protocol.json: rules.bootstrap_reps: 200; allowed values: 2000"):
        adaptive.main(adaptive.Args("plan", results=str(tmp_path)))
    with pytest.raises(ConfigError, match="is missing"):
        adaptive.main(adaptive.Args("plan", results=str(tmp_path / "nowhere")))
    with pytest.raises(ConfigError, match="not 'B=<depth>: <value>"):
        adaptive.per_lag("8: 0.6")


def sat_plan(protocol, tmp_path, per_lag: str, capsys):
    """(planned names, SAT names planned, SAT names left out, plan's lines) with the fixed-lag oracle at ``per_lag``."""
    lagshape = lagshape_with(tmp_path / "lagshape", per_lag)
    planned, left = adaptive.plan_units(protocol, STEPLAG, lagshape)
    shutil.copy(os.path.join(RESULTS, "protocol.json"), tmp_path / "protocol.json")
    adaptive.main(adaptive.Args("plan", results=str(tmp_path), runs=str(tmp_path / "runs"), lagshape=lagshape))
    names = [u.name for u in planned]
    return names, [n for n in names if "/sat/" in n], [u.name for u in left], capsys.readouterr().out.splitlines()


def test_sat_is_not_planned_while_the_fixed_lag_oracle_is_unknown(protocol, tmp_path):
    for lagshape in (os.devnull, lagshape_with(tmp_path, "B=8: 0.6; B=16: 0.2", "more seeds pending")):
        planned, left = adaptive.plan_units(protocol, STEPLAG, lagshape)
        assert not [u for u in planned if "/sat/" in u.name] and left == []


def test_every_sat_unit_runs_last_when_the_fixed_lag_oracle_is_the_robust_epsilon(protocol, tmp_path, capsys):
    names, sat, left, lines = sat_plan(protocol, tmp_path, "B=8: 0.6; B=16: 0.6", capsys)
    assert sat == names[-3:] == [f"study/{t}/sat/uniform" for t in DESIGN] and left == []
    planned = adaptive.units(protocol, STEPLAG, str(tmp_path / "lagshape"))
    u = planned[-1]
    assert u.group.config.method == "sat" and sorted({x.lag_depth for x in u.group.cells}) == [8, 32]
    assert sum(x.minutes for x in planned) <= 60 * protocol["budget"]["limit_hours"]
    assert "~14.9 h in 27 units" in lines[-1] and not any("not run" in line for line in lines)


@pytest.mark.parametrize("per_lag,fit", [
    ("B=8: 0.6; B=16: 0.2", ["Hopper-v4"]),  # +42.1 min: Hopper 30.2 fits, Walker2d 32.6 and HalfCheetah 19.1 not
    ("B=8: 1.8; B=16: 0.2", []),  # the worst case: the tested units alone 899.0 of 900 min
])
def test_only_the_sat_units_that_fit_the_budget_are_planned_in_order(protocol, tmp_path, capsys, per_lag, fit):
    names, sat, left, lines = sat_plan(protocol, tmp_path, per_lag, capsys)
    assert sat == [f"study/{t}/sat/uniform" for t in fit] and names[len(names) - len(fit):] == sat
    assert left == [f"study/{t}/sat/uniform" for t in DESIGN if t not in fit]
    planned = adaptive.units(protocol, STEPLAG, str(tmp_path / "lagshape"))
    limit = 60 * protocol["budget"]["limit_hours"]
    assert sum(u.minutes for u in planned) <= limit
    tested = sum(u.minutes for u in planned if "/sat/" not in u.name)
    sat_minutes = {u.name: u.minutes for u in adaptive.plan_units(protocol, STEPLAG, str(tmp_path / "lagshape"))[1]}
    assert all(tested + sum(u.minutes for u in planned if "/sat/" in u.name) + m > limit for m in sat_minutes.values())
    not_run = [line.split()[0] for line in lines if line.endswith("not run: over the 15 h budget")]
    assert not_run == left
