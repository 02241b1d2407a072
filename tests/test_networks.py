"""Reward scaler and observation normaliser against plain numpy loops."""

import jax.numpy as jnp
import numpy as np

from vaco_jax.networks import normalizer_init, normalizer_update, reward_scaler_init, reward_scaler_update


def test_reward_scaler_matches_a_numpy_loop():
    rng = np.random.default_rng(0)
    U, N, gamma = 7, 3, 0.9
    state = reward_scaler_init(N)
    ret = np.zeros(N)
    seen = []
    for _ in range(3):  # three phases; returns carry across them, reset at episode ends
        r = rng.normal(size=(U, N)).astype(np.float32)
        done = (rng.random((U, N)) < 0.2).astype(np.float32)
        state, scaled = reward_scaler_update(state, jnp.asarray(r), jnp.asarray(done), gamma)
        for t in range(U):
            ret = ret * gamma + r[t]
            seen.append(ret.copy())
            ret = ret * (1 - done[t])
        all_seen = np.concatenate(seen)
        # pseudo-count 1e-4 at mean 0, var 1 merged with every return seen so far
        c0 = 1e-4
        n = len(all_seen)
        mean = (np.sum(all_seen)) / (c0 + n)
        var = (c0 * 1.0 + np.sum((all_seen - mean) ** 2) + c0 * mean**2) / (c0 + n)
        np.testing.assert_allclose(state.returns, ret, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state.stats.var[0], var, rtol=1e-4)
        np.testing.assert_allclose(scaled, r / np.sqrt(var + 1e-8), rtol=1e-4)


def test_observation_normaliser_matches_numpy_moments():
    rng = np.random.default_rng(1)
    state = normalizer_init(4)
    xs = []
    for _ in range(5):
        x = rng.normal(2.0, 3.0, size=(6, 4)).astype(np.float32)
        xs.append(x)
        state = normalizer_update(state, jnp.asarray(x))
    allx = np.concatenate(xs)
    c0, n = 1e-4, len(allx)
    mean = allx.sum(0) / (c0 + n)
    var = (c0 + ((allx - mean) ** 2).sum(0) + c0 * mean**2) / (c0 + n)
    np.testing.assert_allclose(state.mean, mean, rtol=1e-4)
    np.testing.assert_allclose(state.var, var, rtol=1e-4)
