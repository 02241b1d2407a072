"""The ``publish`` lag model (docs/lag.md): a slow reference of the publishing learner, its mean age,
its validation, its place in a traced sweep, and the real actor–learner's recorded ages."""

import csv
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.core import lag
from vaco_jax.core.config import Config, make_traced, stack_traced
from vaco_jax.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a committed real run of the actor–learner publishing every 8th version (results/deep_lag, arm age4)
REAL_RUN = os.path.join(ROOT, "results", "deep_lag", "real", "age4", "ppo_clip", "seed0")


def _reference_ages(depth: int, interval: int, phases: int) -> list[int]:
    """The mechanism in plain Python: after each update the learner makes version V and publishes it
    when V is a multiple of ``interval``; an actor acting in phase T fetched the store ``depth -
    interval`` updates earlier (the store holds version 0 before any update)."""
    delay = depth - interval
    store_at = [0]  # store_at[V]: the store's version once the learner has made version V
    for v in range(1, phases + 1):
        store_at.append(v if v % interval == 0 else store_at[-1])
    return [t - (store_at[t - delay] if t >= delay else 0) for t in range(phases)]


def _ages(depth, interval, phase, n=3):
    piece = lag.make_lag("publish", depth, capacity=16, publish_interval=interval)
    return np.asarray(piece.start_ages(jax.random.PRNGKey(0), n, phase))


@pytest.mark.parametrize("depth,interval", [(1, 1), (4, 1), (4, 4), (9, 8), (7, 3), (16, 5)])
def test_publish_ages_follow_the_publishing_learner(depth, interval):
    expected = _reference_ages(depth, interval, 60)
    piece = lag.make_lag("publish", depth, capacity=16, publish_interval=interval)
    got = jax.jit(jax.vmap(lambda t: piece.start_ages(jax.random.PRNGKey(1), 5, t)))(jnp.arange(60))
    np.testing.assert_array_equal(np.asarray(got), np.repeat(np.asarray(expected)[:, None], 5, axis=1))
    assert int(piece.depth()) == depth


def test_publish_ages_are_a_sawtooth_with_mean_d_plus_half_k_minus_1():
    depth, interval = 11, 4  # d = 7: ages 7, 8, 9, 10, 7, ... once T >= d
    d = depth - interval
    ages = np.array([_ages(depth, interval, t)[0] for t in range(d, d + 40 * interval)])
    np.testing.assert_array_equal(np.unique(ages), np.arange(d, depth))
    steps = np.diff(ages)
    assert set(steps.tolist()) == {1, -(interval - 1)}  # up one a phase, down k - 1 at a publication
    assert ages.mean() == d + (interval - 1) / 2


def test_interval_1_is_the_fixed_model_and_interval_B_starts_at_age_0():
    for t in (0, 3, 20, 21):
        np.testing.assert_array_equal(_ages(6, 1, t, n=7),
                                      lag.make_lag("fixed", 6, capacity=16).start_ages(jax.random.PRNGKey(0), 7, t))
    np.testing.assert_array_equal([_ages(5, 5, t)[0] for t in range(12)], [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1])


def test_interval_and_depth_are_traced_leaves_of_one_program():
    config = Config(lag_model="publish", lag_depth=8, publish_interval=8, buffer_capacity=16)
    cells = [(8, 8), (8, 4), (12, 4), (3, 1)]
    stacked = stack_traced([make_traced(config, b, publish_interval=k) for b, k in cells])
    got = jax.jit(jax.vmap(lambda tp: jax.vmap(lambda t: tp.lag.start_ages(jax.random.PRNGKey(0), 2, t))(
        jnp.arange(30))))(stacked)
    for i, (b, k) in enumerate(cells):
        np.testing.assert_array_equal(np.asarray(got)[i, :, 0], _reference_ages(b, k, 30))


@pytest.mark.parametrize("settings,message", [
    (dict(lag_model="publish", lag_depth=4, publish_interval=8),
     r"publish_interval=8 must be an integer in \[1, lag_depth=4\]"),
    (dict(lag_model="publish", lag_depth=4, publish_interval=0), r"publish_interval=0 is not allowed"),
    (dict(lag_model="publish", lag_depth=4, publish_interval=2.0), r"publish_interval=2.0 must be an integer"),
    (dict(lag_model="publish", lag_depth=4, publish_interval=True), r"publish_interval=True must be a number"),
    (dict(lag_model="uniform", lag_depth=4, publish_interval=2),
     r"publish_interval=2 is read only by lag_model='publish' \(lag_model='uniform'\)"),
    (dict(lag_model="publish", lag_depth=17, publish_interval=2), r"lag_depth=17 must be an integer in \[1, buffer"),
])
def test_bad_publish_settings_are_one_line_errors(settings, message):
    with pytest.raises(ConfigError, match=message) as err:
        Config(**settings)
    assert "\n" not in str(err.value)


def test_a_publish_interval_sweep_reads_only_the_publish_model():
    from vaco_jax.driver.grid import reads_knob

    assert reads_knob(Config(lag_model="publish", lag_depth=4), "publish_interval")
    assert not reads_knob(Config(lag_model="uniform", lag_depth=4), "publish_interval")
    assert not reads_knob(Config(lag_model="fixed", lag_depth=4), "publish_interval")


def _real_record():
    with open(os.path.join(REAL_RUN, "record.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["fate"] == "consumed"]
    return (np.array([int(r["learner_version"]) for r in rows]), np.array([int(r["age"]) for r in rows]),
            np.array([int(r["samples"]) for r in rows]))


def test_publish_model_matches_the_real_actor_learners_recorded_ages():
    """The real run (4 actors, a queue of 4 batches, 4 batches an update, publish every 8): a batch waits
    about one update in the queue, so d = 1 and B = d + k = 9. Tolerances, stated: the model's age at
    the learner's version equals the batch's recorded age for >= 93% of the batches (queue jitter moves
    the rest by one), the histograms differ by a total variation <= 0.1 and the mean ages by <= 0.5. A
    wrong delay or interval, and i.i.d. ages of the same histogram, fail the sequence check."""
    versions, ages, samples = _real_record()
    assert versions.max() > 100  # many publications

    def model(depth, interval):
        piece = lag.make_lag("publish", depth, capacity=32, publish_interval=interval)
        return np.asarray(jax.vmap(lambda t: piece.start_ages(jax.random.PRNGKey(0), 1, t)[0])(versions))

    sim = model(9, 8)
    assert np.mean(sim == ages) >= 0.93
    real_hist = np.bincount(ages, weights=samples, minlength=16) / samples.sum()
    sim_hist = np.bincount(sim, weights=samples, minlength=16) / samples.sum()
    assert 0.5 * np.abs(real_hist - sim_hist).sum() <= 0.1
    assert abs(np.dot(real_hist, np.arange(16)) - np.dot(sim_hist, np.arange(16))) <= 0.5
    for depth, interval in ((8, 8), (10, 8), (9, 4)):
        assert np.mean(model(depth, interval) == ages) < 0.93
    iid = np.random.default_rng(0).choice(16, size=len(ages), p=sim_hist)
    assert np.mean(iid == ages) < 0.3


@pytest.mark.slow
def test_publish_trains_and_interval_1_trains_as_fixed():
    """Interval 1 draws the fixed model's ages exactly; the two programs differ (XLA may fuse them
    differently), so parameters agree to float32 round-off only (test_train.py's tolerance)."""
    from conftest import tiny_config
    from vaco_jax.core.train import make_train

    def run(**kw):
        config = tiny_config(**kw)
        return jax.jit(make_train(config).train)(jax.random.PRNGKey(0), make_traced(config))

    fixed_state, fixed_m = run(lag_model="fixed", lag_depth=3)
    pub_state, pub_m = run(lag_model="publish", lag_depth=3, publish_interval=1)
    np.testing.assert_array_equal(pub_m.phases.diagnostics["mean_staleness"],
                                  fixed_m.phases.diagnostics["mean_staleness"])
    for a, b in zip(jax.tree.leaves(fixed_state.learner.policy_params), jax.tree.leaves(pub_state.learner.policy_params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    _, saw_m = run(lag_model="publish", lag_depth=3, publish_interval=2)
    staleness = np.asarray(saw_m.phases.diagnostics["mean_staleness"]).reshape(-1)
    np.testing.assert_allclose(staleness, _reference_ages(3, 2, len(staleness)), atol=1e-6)


def test_a_run_recorded_before_publish_interval_existed_resumes(tmp_path):
    """Runs recorded before the setting existed ran with interval 1 (it changes nothing outside 'publish')."""
    from conftest import tiny_config
    from vaco_jax.analysis import results
    from vaco_jax.driver import grid, provenance

    run = str(tmp_path)
    provenance.write_run_metadata(run, [grid.Group(tiny_config(), (), "t/ppo_clip")], {})
    path = os.path.join(run, "run.json")
    meta = results.read_json(path)
    del meta["identity"]["t/ppo_clip"]["publish_interval"]  # as recorded before the field existed
    results.write_json(path, meta)
    provenance.write_run_metadata(run, [grid.Group(tiny_config(), (), "t/ppo_clip")], {})
