"""The deep-lag pilot (studies/deep_lag.py): its rule picks the configuration the docstring says, its
settings are checked before anything runs, and a tiny pilot writes its tables."""

import os

import pytest

from vaco_jax.core.config import ConfigError
from vaco_jax.studies import deep_lag


def _row(name, family, age, method="ppo_clip"):
    return {"configuration": name, "family": family, "method": method, "seed": 0, "steady_mean_age": age}


def test_the_rule_prefers_a_deep_queue_within_the_tolerance_then_the_nearest():
    rows = [_row("queue2x4", "queue", 4.9), _row("queue2x4", "queue", 4.7, "vaco"),  # pooled 4.8: within 25% of 4
            _row("publish8", "publish", 4.0), _row("publish8", "publish", 4.0, "vaco"),  # exact, but not a queue
            _row("queue4x16", "queue", 12.5), _row("publish31", "publish", 15.5)]  # 16: the queue misses by 22%
    by_target = {c["target"]: c for c in deep_lag.choose(rows)}
    assert by_target[4.0]["configuration"] == "queue2x4" and by_target[4.0]["steady_mean_age"] == pytest.approx(4.8)
    assert by_target[4.0]["runs"] == 2
    assert by_target[16.0]["configuration"] == "queue4x16"
    narrow = {c["target"]: c for c in deep_lag.choose(rows, tolerance=0.1)}
    assert narrow[4.0]["configuration"] == "publish8" and narrow[16.0]["configuration"] == "publish31"


def test_when_nothing_qualifies_the_nearest_is_chosen_and_the_output_says_so():
    chosen = deep_lag.choose([_row("queue2x4", "queue", 2.0), _row("publish8", "publish", 9.0)], targets=(16.0,))
    assert chosen[0]["configuration"] == "publish8" and "none within 25%" in chosen[0]["why"]
    with pytest.raises(ConfigError, match="no finished pilot run"):
        deep_lag.choose([])


def test_an_unknown_configuration_is_one_line_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="configurations: 'queue9'; allowed values: queue2x4, "):
        deep_lag.main(deep_lag.Args("pilot", preset="tiny", out=str(tmp_path), configurations=("queue9",)))
    assert not os.listdir(tmp_path)


def test_every_configuration_keeps_the_update_at_the_tasks_batch():
    spec = deep_lag.PRESETS["cpu"]
    for name, *_ in deep_lag.CONFIGURATIONS:
        config, settings = deep_lag.config_of(spec, name, "vaco")
        per_actor = config.num_envs // settings.num_actors
        assert per_actor * settings.per_update() == 16 and config.tv_budget == 0.06  # Hopper-v4's 16 envs
        assert settings.publish_interval <= config.buffer_capacity == 32


def test_a_tiny_pilot_writes_its_runs_and_its_choice(tmp_path):
    out = str(tmp_path)
    deep_lag.main(deep_lag.Args("pilot", preset="tiny", out=out, configurations=("queue2x4",), progress=False))
    chosen = deep_lag.main(deep_lag.Args("choose", preset="tiny", out=out))
    assert [c["configuration"] for c in chosen] == ["queue2x4", "queue2x4"]
    from vaco_jax.analysis import results

    rows = results.read_table(os.path.join(out, "pilot.csv"))
    assert [(r["configuration"], r["method"]) for r in rows] == [("queue2x4", "ppo_clip"), ("queue2x4", "vaco")]
    for r in rows:  # a queue of 4 in front of a learner that takes one batch an update: ages above 1
        assert float(r["steady_mean_age"]) > 1 and float(r["p10"]) <= float(r["p50"]) <= float(r["p90"]) <= float(r["max"])
        assert int(r["dropped"]) == 0


def test_the_equivalence_power_matches_a_simulation():
    import numpy as np

    rng = np.random.default_rng(0)
    for se, margin in [(0.05, 0.15), (0.06, 0.15), (0.1, 0.15)]:
        d = rng.normal(0.0, se, 200_000)
        inside = np.mean((d - deep_lag.Z90 * se > -margin) & (d + deep_lag.Z90 * se < margin))
        assert deep_lag.equivalence_power(se, margin) == pytest.approx(inside, abs=0.005)
    assert deep_lag.equivalence_power(0.1, 0.1) == 0.0  # the interval is wider than the margin


def test_the_prediction_errors_shrink_with_seeds_and_the_contrast_uses_both_methods():
    sd = {(m, a): (1000.0, 100.0) for m in ("ppo_clip", "vaco") for a in ("lockstep", "age4", "age16")}
    ses = deep_lag.prediction_ses(sd, 10, 10)
    assert ses["contrast age4"] == pytest.approx((2 * 0.1 ** 2 * 0.2) ** 0.5)
    assert ses["retention vaco age4"] == pytest.approx((2 * 0.1 ** 2 * 0.2) ** 0.5)  # R = 1, both cv 0.1
    assert deep_lag.prediction_ses(sd, 40, 40)["contrast age4"] == pytest.approx(ses["contrast age4"] / 2)
