"""experiments/screen.py's verdicts on synthetic score and curve rows (no training)."""

import os

import pytest
from conftest import study_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _screen():
    return study_module("screen")


@pytest.mark.parametrize("b1, half, b16, learnable, sensitive", [
    (800.0, 500.0, 300.0, True, True),     # learns, still improving at half, loses 5/8 at B=16
    (800.0, 790.0, 300.0, False, True),    # saturated before half of the budget
    (400.0, 100.0, 100.0, False, True),    # below half of the reachable score
    (800.0, 500.0, 760.0, True, False),    # loses 5% only
    (50.0, 40.0, 10.0, False, False),      # "loses" 80% of almost nothing: not a lag effect
])
def test_learnable_and_lag_sensitive_verdicts(monkeypatch, b1, half, b16, learnable, sensitive):
    screen = _screen()
    from vaco_jax.analysis import results
    scores = [{"env": "CartpoleSwingup", "lag_depth": b, "seed": s, "final_eval_return": v, "diverged": False}
              for b, v in ((1, b1), (16, b16)) for s in (100, 101)]
    curves = [{"env": "CartpoleSwingup", "lag_depth": 1, "seed": s, "chunk": c,
               "eval_return": {3: 0.5 * half, 4: half}.get(c, b1)} for s in (100, 101) for c in range(10)]
    monkeypatch.setattr(results, "load_scores", lambda d: scores)
    monkeypatch.setattr(results, "load_curves", lambda d: curves)
    monkeypatch.setattr(results, "load_random_scores", lambda d: {"CartpoleSwingup": 0.0})
    (row,) = screen.screen_rows("unused", ["CartpoleSwingup"])
    assert row["learned_fraction"] == pytest.approx(b1 / 1000.0)
    assert row["half_over_final"] == pytest.approx(half / b1)  # chunk 4 = the middle of 10 chunks
    assert row["lag_loss_b16"] == pytest.approx(1 - b16 / b1)
    assert (row["learnable"], row["lag_sensitive"], row["chosen"]) == (learnable, sensitive, learnable and sensitive)


def test_a_task_without_a_reachable_score_is_refused_before_running():
    screen = _screen()
    from vaco_jax.core.knobs import ConfigError

    with pytest.raises(ConfigError, match="no reachable score"):
        screen.main(screen.Args(tasks=("hopper",), out="/nonexistent/never-written"))


def test_the_screen_runs_at_the_learning_rate_it_is_given():
    screen = _screen()
    lag_sweep = study_module("lag_sweep")
    settings = screen.sweep_settings(screen.Args(tasks=("inverted_pendulum",), learning_rate=1e-3))
    assert settings["learning_rate"] == 1e-3 and settings["lag_depths"] == (1, 16)
    lag_sweep.Args(**settings)  # every setting is one the lag sweep takes
    assert screen.sweep_settings(screen.Args())["learning_rate"] is None  # the Config default
    assert settings["minibatch_shuffle"] == "sort"  # the committed screens' permutation: one protocol
