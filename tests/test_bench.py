"""``vaco-bench`` (``vaco_jax.studies.bench``): a new fix through the step size x lag study's committed
protocol. End to end at the tiny size with a method whose surrogate is defined here; the committed
PPO-Clip runs put through the bench's rules give the committed setting and verdicts equal to PPO-Clip's;
the edge rule's extensions join the plan; bad input is one line, and ``--dry-run`` writes nothing."""

import os
import shutil
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import pytest
from flax import struct

from vaco_jax.analysis import confirm, results
from vaco_jax.core import pieces
from vaco_jax.core.config import ConfigError
from vaco_jax.core.methods import METHODS, register_method
from vaco_jax.studies import bench, bench_report, kit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMITTED = os.path.join(ROOT, "results", "steplag")
PROTOCOL = os.path.join(COMMITTED, "protocol.json")


@struct.dataclass
class CappedPG(pieces.Surrogate):
    """−mean min(r, ratio_cap) A: an importance-sampled policy gradient with its ratio capped from above."""

    name: ClassVar[str] = "capped_pg_bench"
    ratio_cap: Any = 1.5

    def loss(self, x):
        ratio = jnp.exp(x.logp - jax.lax.stop_gradient(x.behaviour_logp))
        return -jnp.mean(jnp.minimum(ratio, self.ratio_cap) * jax.lax.stop_gradient(x.advantages)), {}


@pytest.fixture
def capped():
    register_method("capped_bench", pieces.GAE, pieces.Behavior, CappedPG, pieces.NoFilter, "test: capped IS-PG",
                    step_knob="ratio_cap")
    yield "capped_bench"
    METHODS.pop("capped_bench", None)


def _args(**kw):
    return bench.Args(**{"protocol": PROTOCOL, "committed": COMMITTED, "progress": False, **kw})


def _listing(path) -> dict:
    return {os.path.join(r, f): os.path.getmtime(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs}


@pytest.mark.slow
def test_a_fix_defined_here_goes_through_the_protocol_end_to_end_at_the_tiny_size(capped, tmp_path, capsys):
    out = tmp_path / "bench"
    args = _args(method=capped, grid=(1.2, 2.0), size="tiny", out=str(out))
    bench.main(bench.Args(**{**vars(args), "dry_run": True}))
    text = capsys.readouterr().out
    assert "surface/point_mass" in text and "once the lag-robust setting is decided" in text and "CPU-hours" in text
    assert not out.exists()  # --dry-run wrote nothing
    # interrupted after its first unit, then resumed: the units already in are not run again
    bench.main(bench.Args(**{**vars(args), "units": ("stage2/point_mass/ppo_clip/uniform",)}))
    assert not (out / "report.md").exists() and "the report is written once every unit" in capsys.readouterr().out
    bench.main(args)
    text = capsys.readouterr().out
    assert "unit stage2/point_mass/ppo_clip/uniform finished" not in text and "every unit has finished" in text
    listed = [m["unit"] for m in kit.manifest(str(out))]
    assert listed == ["stage2/point_mass/ppo_clip/uniform", "surface/point_mass",
                      "stage2/point_mass/capped_bench/uniform"]
    digest = bench.resolve(args).digest
    assert all(m["cpu"] and m["protocol_sha256"] == digest for m in kit.manifest(str(out)))
    report = (out / "report.md").read_text()
    assert "stand-in" in report and "![surface](surface.png)" in report and (out / "surface.png").exists()
    table = [line for line in report.splitlines() if line.startswith(("| P(X > PPO-Clip)", "| retention"))]
    assert len(table) == 3  # B = 1 and 4, and the retention
    assert all(any(f"**{v}**" in line for v in confirm.VERDICTS) for line in table)
    rows = results.read_table(str(out / "verdicts.csv"))
    assert {r["arm"] for r in rows} == {"capped_bench"} and len([r for r in rows if r["family"] == "primary"]) == 3
    choice = results.read_table(str(out / "choice.csv"))[0]
    assert choice["value"] in (1.2, 2.0) and "CPU-hours" in report
    before = _listing(out)
    bench.main(bench.Args(**{**vars(args), "dry_run": True}))
    assert _listing(out) == before


def _committed_ppo_clip(out) -> None:
    """The committed PPO-Clip surface and stage-2 runs laid out as the bench's units of method ppo_clip."""
    for task in ("Hopper-v4", "Walker2d-v4"):
        shutil.copytree(os.path.join(COMMITTED, "surface", task, "ppo_clip"), out / "surface" / task)
    for task in os.listdir(os.path.join(COMMITTED, "stage2")):
        src = os.path.join(COMMITTED, "stage2", task, "ppo_clip")
        if os.path.isdir(src):
            shutil.copytree(src, out / "stage2" / task / "ppo_clip_bench")


def test_the_committed_ppo_clip_runs_give_its_committed_setting_and_rules(tmp_path):
    """PPO-Clip benched on its own committed runs: stage 1's rule picks the committed lag-robust ε with the
    committed stability; against the committed PPO-Clip (the same runs, resampled apart: the comparison is
    statistical) every P(X > PPO-Clip) is ½ and no verdict is better or worse; the committed arms' tests
    recompute to the committed points; the report puts the committed verdicts beside."""
    out = tmp_path / "bench"
    _committed_ppo_clip(out)
    plan = bench.resolve(_args(method="ppo_clip"))
    assert plan.arm == "ppo_clip_bench" and plan.values == (0.018, 0.06, 0.2, 0.6, 1.8)
    st = bench.stage1(plan, str(out))
    committed = next(r for r in results.read_table(os.path.join(COMMITTED, "choices.csv"))
                     if r["surface"] == "ppo_clip")
    assert st["state"] == "decided" and st["value"] == committed["value"]
    assert st["stability"]["share"] == committed["stability"]
    assert [u.name for u in bench.units(plan, str(out)) if u.name.startswith("stage2/")][:1] == [
        "stage2/Hopper-v4/ppo_clip_bench/uniform"]
    v = bench_report.verdicts(plan, str(out), COMMITTED)
    mine = [r for r in v["primary"] if r["arm"] == "ppo_clip_bench"]
    assert len(mine) == 5 and {r["verdict"] for r in mine} <= {"equivalent", "inconclusive"}
    assert {r["point"] for r in mine if r["test"].startswith("P(")} == {0.5}
    assert {r["difference"] for r in mine} == {0.0}
    old = bench_report.committed_verdicts(COMMITTED)
    again = {(r["test"], r["arm"], r["lag_model"], int(r["lag_depth"])): r["point"] for r in v["primary"]
             if r["arm"] != "ppo_clip_bench"}
    assert again.keys() == old.keys() and all(again[k] == pytest.approx(float(old[k]["point"]), abs=1e-12) for k in old)
    text = bench.report(plan, str(out), COMMITTED)
    assert "ran in other programs and on other CPUs" in text and "statistical" in text
    header = next(line for line in text.splitlines() if line.startswith("| test"))
    assert all(f" {a} |" in header for a in ("vaco", "vaco_learner", "spo", "ppo_kl"))
    assert len([line for line in text.splitlines() if line.startswith(("| P(X", "| retention"))]) == 5


def test_an_optimum_at_an_edge_adds_an_extension_and_stage_2_waits(tmp_path):
    plan = bench.resolve(_args(method="ppo_clip"))
    for task in plan.tasks:
        rows = [{"env": task, "method": "ppo_clip", "lag_depth": b, "seed": s, "clip_epsilon": v,
                 "auc_eval_return": 100.0 + 500.0 * v + s, "diverged": False}
                for b in plan.lag_depths for s in plan.seeds for v in plan.values]
        os.makedirs(tmp_path / "surface" / task)
        results.write_table(str(tmp_path / "surface" / task / "scores.csv"), rows)
    names = [u.name for u in bench.units(plan, str(tmp_path))]
    assert "extend/Hopper-v4/5.4" in names and "extend/Walker2d-v4/5.4" in names
    assert not any(n.startswith("stage2/") for n in names)


def test_a_method_module_registers_its_method_and_dry_run_plans_the_full_protocol(tmp_path, capsys):
    module = tmp_path / "my_fix.py"
    module.write_text("from vaco_jax.core import pieces\nfrom vaco_jax.core.methods import register_method\n"
                      "register_method('clip_from_file', pieces.GAE, pieces.Behavior, pieces.PPOClip,\n"
                      "                pieces.NoFilter, 'a test', step_knob='clip_epsilon')\n")
    out = tmp_path / "bench"
    try:
        bench.main(_args(method_module=f"{module}:clip_from_file", out=str(out), dry_run=True))
    finally:
        METHODS.pop("clip_from_file", None)
    text = capsys.readouterr().out
    for unit in ("surface/Hopper-v4", "surface/Walker2d-v4", "stage2/Ant-v4/clip_from_file/uniform",
                 "stage2/Walker2d-v4/clip_from_file/fixed"):
        assert unit in text, unit
    assert "0.018 0.06 0.2 0.6 1.8" in text and "CPU-hours" in text and not out.exists()


@pytest.mark.parametrize("kw,field", [
    ({}, "method"), ({"method": "ppo_clip", "method_module": "x.py:y"}, "method"),
    ({"method": "no_such_method"}, "method"), ({"method": "ppo_clip", "knob": "tv_budget"}, "knob"),
    ({"method": "ppo_clip", "grid": (0.1, 0.2)}, "grid"), ({"method": "ppo_clip", "grid": (0.1, 0.1)}, "grid"),
    ({"method": "ppo_clip", "grid": (0.1, 0.2, 0.4, 0.8, 1.6)}, "grid"),
    ({"method": "vcpo", "knob": "no_knob"}, "knob"),
    ({"method_module": "no_such_file.py:x"}, "method_module"), ({"method_module": "no_colon"}, "method_module"),
    ({"method": "ppo_clip", "minutes": -1.0}, "minutes")])
def test_bad_input_is_one_line_naming_the_field_and_nothing_is_written(kw, field, tmp_path):
    out = tmp_path / "bench"
    with pytest.raises(ConfigError, match=f"^{field}") as e:
        bench.main(_args(out=str(out), dry_run=True, **kw))
    assert "\n" not in str(e.value) and not out.exists()


def test_a_changed_plan_is_refused_until_recorded_as_a_deviation(tmp_path):
    """Units ran under another plan (another method file, knob or grid): no unit runs, nothing is written."""
    out = tmp_path / "bench"
    os.makedirs(out)
    results.write_table(str(out / "manifest.csv"), [
        {"unit": "surface/point_mass", "runs": 8, "protocol_sha256": "f" * 64, "finished": "2026-12-07 00:00 UTC",
         "seconds_this_session": 1.0, "estimated_minutes": 0.3, "cpu": "x"}])
    before = _listing(out)
    with pytest.raises(ConfigError, match="changed since earlier units ran.*--deviation"):
        bench.main(_args(method="ppo_clip", size="tiny", out=str(out)))
    assert _listing(out) == before
