"""The lag-shape study (vaco_jax/studies/lagshape.py): its committed protocol builds every unit with the settings
it names, the publish check runs the deep-lag counterparts' settings with only the lag model changed, its
report applies the deep-lag rule, and the age-19 check's margin is half the control's own effect."""

import dataclasses
import json
import os
import shutil

import pytest

from vaco_jax.analysis import results
from vaco_jax.core.config import ConfigError
from vaco_jax.studies import kit, kit_real, lagshape

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results", "lagshape")
DEEP_LAG = os.path.join(ROOT, "results", "deep_lag")


@pytest.fixture(scope="module")
def protocol():
    return kit.load_protocol(os.path.join(RESULTS, "protocol.json"))[0]


def test_every_unit_has_the_lag_and_the_mean_age_the_protocol_names(protocol):
    units = {u.name: u for u in lagshape.units(protocol)}
    assert [u.stage for u in units.values()] == sorted((u.stage for u in units.values()),
                                                      key=lambda s: lagshape.PARTS.index(s))
    mean_age = {"uniform": lambda b, k: (b - 1) / 2, "fixed": lambda b, k: b - 1,
                "publish": lambda b, k: b - (k + 1) / 2}  # docs/lag.md's ages of each model
    for name, u in units.items():
        if u.stage == "shape":
            c = u.group.config
            ages = sorted(mean_age[c.lag_model](cell.lag_depth, c.publish_interval) for cell in u.group.cells)
            assert sorted(set(ages)) == protocol["shape"]["mean_ages"], name
            assert {cell.seed for cell in u.group.cells} == set(protocol["shape"]["seeds"])
    pub = [u for u in units.values() if u.stage == "publish"]
    assert len(pub) == 4 and all(u.group.config.publish_interval == 8 for u in pub)
    assert sorted(c.seed for u in pub if u.group.config.method == "vaco" for c in u.group.cells) == list(range(1000, 1040))
    tuning = [u for u in units.values() if u.stage == "tuning"]
    assert all(u.group.config.lag_model == "fixed" and len(u.group.cells) == 30 for u in tuning)


def test_the_publish_check_runs_the_deep_lag_counterparts_settings_but_the_lag(protocol):
    deep = results.read_json(os.path.join(DEEP_LAG, "sim", "age4", "ppo_clip", "main", "seeds1000-1019", "config.json"))
    for u in lagshape.units(protocol):
        if u.stage != "publish":
            continue
        mine = dataclasses.asdict(u.group.config)
        method = mine["method"]
        knob = {"ppo_clip": "clip_epsilon", "vaco": "tv_budget"}[method]
        differ = {k for k in deep if k in mine and k not in ("sha256", "method", "clip_epsilon", "tv_budget")
                  and (list(mine[k]) if isinstance(mine[k], tuple) else mine[k]) != deep[k]}
        # the lag model and its numbers; the backend named (deep-lag's None resolves to the same engine);
        # gae_lambda 0.95 named (None is each piece's default 0.95)
        assert differ == {"lag_model", "lag_depth", "age_weights", "backend", "gae_lambda"}
        assert mine["backend"] == "mujoco" and mine["gae_lambda"] == 0.95
        assert mine[knob] == protocol["publish"]["arms"][method][knob]


def test_age19_margin_is_half_the_control_effect_and_the_committed_table_recomputes(protocol):
    rows = lagshape.age19_rows(protocol, DEEP_LAG)
    committed = [r for r in results.read_table(os.path.join(DEEP_LAG, "verdicts.csv")) if r["configuration"] == "age16"]
    assert len(rows) == len(committed) == 9
    sim = {(r["quantity"], r["method"], r["variant"]): float(r["sim"]) for r in committed}
    for r in rows:
        m = 0.5 * abs(sim[(r["quantity"], r["method"], "control")] - sim[(r["quantity"], r["method"], "histogram")])
        assert r["margin"] == pytest.approx(m, rel=1e-12)
        inside, outside = -m <= r["low"] and r["high"] <= m, r["low"] > m or r["high"] < -m
        assert r["verdict"] == ("predicts" if inside else "differs" if outside else "inconclusive")
    table = results.read_table(os.path.join(RESULTS, protocol["age19"]["table"]))
    assert [(t["quantity"], t["method"], t["variant"], t["verdict"]) for t in table] == \
        [(r["quantity"], r["method"], r["variant"], r["verdict"]) for r in rows]
    assert [float(t["margin"]) for t in table] == [r["margin"] for r in rows]


def _write_publish_scores(base: str, method: str, blocks, scores: dict) -> None:
    """A finished publish unit's ``scores.csv`` per block: given AUCs by seed, an age of 4.5."""
    for block in blocks:
        os.makedirs(os.path.join(base, "publish", method, f"seeds{block[0]}-{block[-1]}"))
        results.write_table(os.path.join(base, "publish", method, f"seeds{block[0]}-{block[-1]}", "scores.csv"),
                            [{"env": "Hopper-v4", "method": method, "lag_depth": 9, "seed": s,
                              "auc_eval_return": scores[s], "diverged": False, "mean_mean_staleness": 4.5}
                             for s in block])


def test_the_publish_report_is_the_deep_lag_rule_on_the_publish_arm(protocol, tmp_path):
    """Fed the deep-lag histogram counterpart's own scores as its 'publish' runs, the report's retention rows
    equal the committed histogram rows: the same rule on the same arms."""
    blocks = protocol["publish"]["seed_blocks"]
    for method in protocol["publish"]["arms"]:
        hist = {}
        for block in ("seeds1000-1019", "seeds1020-1039"):
            path = os.path.join(DEEP_LAG, "sim", "age4", method, "main", block, "scores.csv")
            weights = lagshape_hist_weights(path)
            for r in results.read_table(path):
                if tuple(float(x) for x in kit_real.weights_of(r)) == weights:
                    hist[int(r["seed"])] = float(r["auc_eval_return"])
        _write_publish_scores(str(tmp_path), method, blocks, hist)
    args = lagshape.Args("report", results=str(tmp_path), deep_lag=DEEP_LAG)
    rows = {(r["quantity"], r["method"]): r for r in lagshape.publish_rows(protocol, args, ("ppo_clip", "vaco"))}
    alone = lagshape.publish_rows(protocol, args, ("ppo_clip",))  # before VACO's units: PPO-Clip's retention only
    assert [(r["quantity"], r["method"]) for r in alone] == [("retention", "ppo_clip")]
    assert alone[0] == rows[("retention", "ppo_clip")]
    committed = {(r["quantity"], r["method"]): r for r in results.read_table(os.path.join(DEEP_LAG, "verdicts.csv"))
                 if r["configuration"] == "age4" and r["variant"] == "histogram"}
    for key in [("retention", "ppo_clip"), ("retention", "vaco"), ("contrast", "vaco - ppo_clip")]:
        assert rows[key]["sim"] == pytest.approx(float(committed[key]["sim"]), rel=1e-12)
        assert rows[key]["difference"] == pytest.approx(float(committed[key]["difference"]), rel=1e-12)
        assert rows[key]["verdict"] == committed[key]["verdict"] == rows[key]["histogram_verdict"]
        assert rows[key]["sim_mean_age"] == 4.5


def lagshape_hist_weights(path: str) -> tuple:
    """The histogram counterpart's weights in a deep-lag main sweep: the vector that is not uniform."""
    vectors = {tuple(float(x) for x in kit_real.weights_of(r)) for r in results.read_table(path)}
    (hist,) = [v for v in vectors if len(set(v)) > 1]
    return hist


def test_a_protocol_without_a_part_or_with_a_bad_margin_is_one_line(protocol, tmp_path):
    bad = {k: v for k, v in protocol.items() if k != "pilot"}
    with pytest.raises(ConfigError, match="'pilot' missing"):
        lagshape.check_protocol(bad)
    bad = json.loads(json.dumps(protocol))
    bad["publish"]["rule"]["margin"] = 1.5
    with pytest.raises(ConfigError, match="margin"):
        lagshape.check_protocol(bad)
    shutil.copy(os.path.join(RESULTS, "protocol.json"), tmp_path / "protocol.json")
    with pytest.raises(ConfigError, match="is missing"):
        lagshape.main(lagshape.Args("plan", results=str(tmp_path / "nowhere")))
