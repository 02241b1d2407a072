"""The lagged rollout's policy evaluation (docs/lag.md: "The rollout"): envs placed in tiles of one
snapshot each, checked against a slow per-env reference on the pure-JAX point_mass task (no MJX)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from vaco_jax.core import lag as lag_lib
from vaco_jax.core import rollout as rollout_lib
from vaco_jax.core.config import make_traced
from vaco_jax.core.train import make_train


@pytest.mark.parametrize("n,capacity,rows", [(256, 32, 8), (8, 8, 8), (37, 5, 4), (16, 64, 3), (5, 1, 8)])
@pytest.mark.parametrize("how", ["uniform", "one_slot", "each_its_own", "skewed"])
def test_tile_layout_places_every_env_once_in_a_tile_of_its_own_slot(n, capacity, rows, how):
    rng = np.random.default_rng(n * 1000 + capacity)
    slots = {"uniform": rng.integers(0, capacity, n), "one_slot": np.full(n, capacity - 1),
             "each_its_own": np.arange(n) % capacity,
             "skewed": np.minimum(rng.geometric(0.5, n) - 1, capacity - 1)}[how]
    table, env_tile, env_lane, tile_slot = map(np.asarray, jax.jit(
        rollout_lib.tile_layout, static_argnums=(1, 2))(jnp.asarray(slots, jnp.int32), capacity, rows))
    assert table.shape == ((n + min(capacity, n) * (rows - 1)) // rows, rows)
    # every env sits in exactly one lane, the lane the tables say, in a tile that reads its slot
    np.testing.assert_array_equal(table[env_tile, env_lane], np.arange(n))
    assert sorted(table[table < n].tolist()) == list(range(n)) and np.all(table[table >= n] == n)
    np.testing.assert_array_equal(tile_slot[env_tile], slots)
    # a slot's envs fill ceil(count / rows) tiles, in env order: no tile wasted, none shared
    for s in np.unique(slots):
        tiles = np.unique(env_tile[slots == s])
        assert len(tiles) == -(-np.sum(slots == s) // rows)
        np.testing.assert_array_equal(table[tiles][table[tiles] < n], np.flatnonzero(slots == s))


def _distinct_buffer(trainer, state, capacity):
    """A buffer whose every slot holds a visibly different snapshot (policy and normaliser)."""
    buf = state.buffer
    for v in range(1, capacity):
        policy = jax.tree.map(lambda x: x + 0.2 * v, state.learner.policy_params)
        norm = state.normalizer._replace(mean=state.normalizer.mean + 0.1 * v)
        buf = lag_lib.buffer_publish(buf, trainer.snapshot(policy, norm), v)
    return buf


@pytest.mark.parametrize("lag_model,envs_per_actor", [("uniform", 1), ("uniform", 2), ("uniform", 8),
                                                      ("partial", 1), ("staggered", 4)])
def test_lagged_rollout_acts_with_each_envs_own_snapshot(lag_model, envs_per_actor):
    """Every transition's distribution is its actor's snapshot applied to that env's observation alone,
    whatever the path: tiles (fewer envs per actor than ``TILE_ROWS``) or per-actor blocks."""
    capacity, phase = 8, 7
    config = tiny_config(num_envs=32, unroll_length=6, buffer_capacity=capacity, lag_model=lag_model,
                         envs_per_actor=envs_per_actor, partial_resync_every=2)
    trainer = make_train(config)
    traced = make_traced(config, capacity)
    state = trainer.init(jax.random.PRNGKey(0), traced)
    buf = _distinct_buffer(trainer, state, capacity)

    @jax.jit
    def go(key):
        ages = traced.lag.start_ages(key, config.num_actors, phase)
        _, traj = rollout_lib.rollout(
            env=trainer.env, policy_apply=trainer.nets.policy_apply, buffer=buf, learner_snapshot=None,
            env_state=state.env_state, start_ages=ages, action_key=jax.random.PRNGKey(5),
            unroll_length=config.unroll_length, lag=traced.lag, envs_per_actor=envs_per_actor,
            actor_dtype="float32", normalize_observations=True, phase=phase)
        return traj

    # the first draw in which the actors do not all hold one snapshot (else the shared path would run)
    key = next(k for k in map(jax.random.PRNGKey, range(100))
               if len(np.unique(traced.lag.start_ages(k, config.num_actors, phase))) > 1)
    traj = go(key)
    ages = phase - np.asarray(traj.behaviour_version)  # [U, N], checked against the draw by test_train
    # the reference: each (step, env) alone, with its own snapshot gathered from the buffer
    snaps = jax.tree.map(lambda x: x[ages.reshape(-1)], buf.snapshots)
    one = lambda snap, o: rollout_lib.actor_distribution(trainer.nets.policy_apply, snap, o[None], "float32", True)
    mean, log_std = jax.vmap(one)(snaps, traj.obs.reshape((-1,) + traj.obs.shape[2:]))
    np.testing.assert_allclose(traj.behaviour_mean, mean.reshape(traj.behaviour_mean.shape), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(traj.behaviour_log_std, log_std.reshape(traj.behaviour_log_std.shape),
                               rtol=1e-5, atol=1e-6)
