"""Reward scaler and observation normaliser against plain numpy loops."""

import jax.numpy as jnp
import numpy as np

from vaco_jax.core.networks import normalizer_init, normalizer_update, reward_scaler_init, reward_scaler_update


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


# ----------------------------------------------------------------------------- orthogonal init

def test_orthogonal_init_matches_flax_and_is_orthogonal():
    import flax.linen as nn
    import jax

    from vaco_jax.core.networks import orthogonal

    key = jax.random.PRNGKey(3)
    for shape in [(17, 64), (64, 64), (64, 3), (5, 7)]:
        for scale in [1.0, float(np.sqrt(2.0)), 0.01]:
            ours = np.asarray(orthogonal(scale)(key, shape))
            np.testing.assert_array_equal(ours, np.asarray(nn.initializers.orthogonal(scale)(key, shape)))
            small = min(shape)
            gram = ours.T @ ours if shape[0] >= shape[1] else ours @ ours.T
            np.testing.assert_allclose(gram, scale**2 * np.eye(small), atol=1e-5 * max(1.0, scale**2))


def test_vmapped_network_init_makes_only_unbatched_lapack_calls():
    """Regression: a batched QR in a vmapped init (a grid of runs) hung XLA CPU at 0% CPU.

    jaxlib's LAPACK kernels split a large batch into tasks on the intra-op pool and block a pool
    thread until they finish; with every pool thread blocked in such a kernel the program never
    finishes (seen on the 2-core machine in ``jit(vmap(trainer.train))``). The initialiser keeps
    every QR unbatched, whatever the vmap depth, and gives each cell the values of its own init.
    """
    import re

    import jax

    from vaco_jax.core.networks import GaussianPolicy, ValueNet

    policy, critic = GaussianPolicy((64, 64), 3), ValueNet((64, 64))
    obs = jnp.zeros((1, 11))

    def init(key):
        k1, k2 = jax.random.split(key)
        return policy.init(k1, obs), critic.init(k2, obs)

    keys = jax.random.split(jax.random.PRNGKey(0), 6).reshape(2, 3, -1)
    text = jax.jit(jax.vmap(jax.vmap(init))).lower(keys).as_text()
    calls = re.findall(r"custom_call @(lapack_\w+)\(.*num_batch_dims = \"(\d+)\"", text)
    assert {name for name, _ in calls} >= {"lapack_sgeqrf_ffi"}
    assert all(batch == "0" for _, batch in calls), calls

    grid = jax.jit(jax.vmap(jax.vmap(init)))(keys)
    for i in range(2):
        for j in range(3):
            one = init(keys[i, j])
            for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(jax.tree.map(lambda x: x[i, j], grid))):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
