"""Policy buffer and lag models (docs/lag.md): age distributions, clipping, FIFO versions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.core import lag
from vaco_jax.errors import ConfigError
def _ages(model, phase, depth, n=4000, seed=0):
    piece = lag.make_lag(model, depth, capacity=max(depth, 8))
    return np.asarray(piece.start_ages(jax.random.PRNGKey(seed), n, phase))


@pytest.mark.parametrize("depth", [1, 3, 8])
def test_uniform_ages_are_uniform_on_0_to_B_minus_1(depth):
    ages = _ages("uniform", phase=100, depth=depth, n=40_000)
    counts = np.bincount(ages, minlength=depth)
    assert ages.min() >= 0 and ages.max() <= depth - 1
    assert len(counts) == depth
    # each bin within 5 standard deviations of n/B
    expected = len(ages) / depth
    sd = np.sqrt(len(ages) * (1 / depth) * (1 - 1 / depth)) + 1e-9
    assert np.all(np.abs(counts - expected) <= 5 * sd + 1e-9)


def test_fixed_ages_are_B_minus_1():
    assert np.all(_ages("fixed", phase=50, depth=6) == 5)


def test_staggered_ages_are_round_robin():
    n, depth, phase = 10, 4, 7
    ages = _ages("staggered", phase=phase, depth=depth, n=n)
    np.testing.assert_array_equal(ages, (np.arange(n) + phase) % depth)


@pytest.mark.parametrize("model", ["uniform", "fixed", "staggered", "partial"])
@pytest.mark.parametrize("phase", [0, 1, 2, 5])
def test_ages_never_exceed_phase_index(model, phase):
    ages = _ages(model, phase=phase, depth=8, n=500)
    assert ages.max() <= phase


def test_traced_lag_depth_under_vmap_matches_python_value():
    key = jax.random.PRNGKey(3)
    depths = jnp.array([1, 2, 5], jnp.int32)
    pieces = [lag.make_lag("uniform", b, capacity=8) for b in [1, 2, 5]]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *pieces)
    batched = jax.jit(jax.vmap(lambda p: p.start_ages(key, 300, 100)))(stacked)
    for i, b in enumerate([1, 2, 5]):
        np.testing.assert_array_equal(batched[i], pieces[i].start_ages(key, 300, 100))
        assert int(batched[i].max()) <= b - 1
    del depths


def test_uniform_age_distribution_draws_exactly_what_randint_draws():
    """The i.i.d. models became a traced probability vector; a uniform one is still sampled with
    randint(0, B), so runs of the earlier string-dispatched 'uniform' model reproduce bit for bit."""
    key = jax.random.PRNGKey(7)
    for b in (1, 3, 8):
        ages = lag.make_lag("uniform", b, capacity=8).start_ages(key, 500, 100)
        np.testing.assert_array_equal(ages, jax.random.randint(key, (500,), 0, b, dtype=jnp.int32))


def test_any_age_distribution_is_sampled_with_its_frequencies():
    weights = (0.5, 0.0, 0.2, 0.3)
    piece = lag.make_lag("ages", capacity=6, age_weights=weights)
    assert int(piece.depth()) == 4
    ages = np.asarray(piece.start_ages(jax.random.PRNGKey(0), 40_000, 100))
    freq = np.bincount(ages, minlength=6) / len(ages)
    np.testing.assert_allclose(freq[:4], weights, atol=0.01)
    assert freq[1] == 0 and freq[4:].sum() == 0


def test_the_shape_of_the_lag_is_a_vmap_axis():
    shapes = [(1.0, 1.0), (0.0, 0.0, 0.0, 1.0), (0.25, 0.25, 0.25, 0.25)]
    pieces = [lag.make_lag("ages", capacity=4, age_weights=w) for w in shapes]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *pieces)
    ages = np.asarray(jax.jit(jax.vmap(lambda p: p.start_ages(jax.random.PRNGKey(1), 4000, 50)))(stacked))
    assert set(np.unique(ages[0])) == {0, 1}
    assert set(np.unique(ages[1])) == {3}
    assert set(np.unique(ages[2])) == {0, 1, 2, 3}
    np.testing.assert_array_equal(jax.vmap(lambda p: p.depth())(stacked), [2, 4, 4])


def test_B_equal_1_gives_age_zero_for_every_model():
    for model in ["uniform", "fixed", "staggered", "partial", "synchronous"]:
        assert np.all(_ages(model, phase=9, depth=1, n=50) == 0)


def test_partial_resync_moves_one_version_newer_every_k_steps_and_never_back():
    start = jnp.array([0, 1, 3, 7], jnp.int32)
    k = 4
    prev = np.asarray(start)
    for t in range(40):
        ages = np.asarray(lag.make_lag("partial", 8, resync_every=k).ages_at_step(start, t))
        np.testing.assert_array_equal(ages, np.maximum(np.asarray(start) - t // k, 0))
        assert np.all(ages <= prev)  # age never grows = version never decreases
        prev = ages
    # other models ignore the step
    np.testing.assert_array_equal(lag.make_lag("uniform", 8).ages_at_step(start, 17), start)


def test_buffer_fifo_versions_and_prefill():
    snap = {"w": jnp.zeros((2,)), "stats": jnp.zeros(())}
    buf = lag.buffer_init(snap, capacity=4)
    np.testing.assert_array_equal(buf.versions, [0, 0, 0, 0])
    for v in range(1, 7):
        buf = lag.buffer_publish(buf, {"w": jnp.full((2,), float(v)), "stats": jnp.asarray(float(v))}, v)
        expected_versions = [max(v - a, 0) for a in range(4)]
        np.testing.assert_array_equal(buf.versions, expected_versions)
        # the snapshot in slot a is the one published as version v - a (theta_0 = zeros before that)
        np.testing.assert_array_equal(buf.snapshots["w"][:, 0], np.array(expected_versions, float))
        np.testing.assert_array_equal(buf.snapshots["stats"], np.array(expected_versions, float))


def test_gather_returns_snapshot_and_version_of_each_age():
    buf = lag.buffer_init({"w": jnp.zeros(())}, capacity=5)
    for v in range(1, 4):
        buf = lag.buffer_publish(buf, {"w": jnp.asarray(float(v))}, v)
    ages = jnp.array([0, 2, 1, 3, 0], jnp.int32)
    snaps, versions = lag.gather_snapshots(buf, ages)
    np.testing.assert_array_equal(versions, 3 - np.asarray(ages))
    np.testing.assert_array_equal(snaps["w"], (3 - np.asarray(ages)).astype(float))


def test_lag_stream_is_independent_of_action_stream():
    run_key = jax.random.PRNGKey(0)
    a = lag.lag_key(run_key, 3)
    b = lag.lag_key(run_key, 4)
    assert not np.array_equal(jax.random.key_data(a), jax.random.key_data(b))


def test_a_registered_lag_model_is_a_config_choice_and_trains(monkeypatch):
    """Adding a lag model is one registry entry: Config, make_traced and the trainer read it."""
    import jax

    from conftest import tiny_config
    from vaco_jax.core import lag as lag_lib
    from vaco_jax.core.config import make_traced
    from vaco_jax.core.train import make_train
    from vaco_jax.driver.cli import field_choices

    spec = lag_lib.LagSpec("oldest", lambda b, k, r, w: lag_lib.Staggered(lag_depth=jax.numpy.asarray(b)),
                           "test: staggered under another name")
    monkeypatch.setitem(lag_lib.LAG_MODELS, "oldest", spec)
    assert "oldest" in field_choices(skip={"env"})["lag_model"]
    config = tiny_config(lag_model="oldest", lag_depth=4)
    traced = make_traced(config)
    assert int(traced.lag_depth) == 4
    state = make_train(config).init(jax.random.PRNGKey(0), traced)
    assert state is not None
    with pytest.raises(ConfigError, match="lag_model='nope' is not valid; allowed values: .*oldest"):
        tiny_config(lag_model="nope")
