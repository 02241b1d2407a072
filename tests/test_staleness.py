"""The realised staleness histogram (docs/diagnostics.md): samples by age ``T - v`` per phase and chunk,
computed inside the jitted chunk. Tiny pure-JAX point_mass programs (seconds with the compilation cache)."""

import jax
import numpy as np

from conftest import tiny_config
from vaco_jax.core.config import make_traced
from vaco_jax.core.train import make_train

N, U, PHASES = 32, 4, 16  # 128 samples (32 actor draws) per phase, 2 chunks of 8 phases


def _counts(lag_model, lag_depth, capacity):
    config = tiny_config(lag_model=lag_model, buffer_capacity=capacity, num_envs=N, unroll_length=U,
                         num_epochs=1, num_minibatches=1, total_env_steps=N * U * PHASES, num_evals=2)
    _, metrics = jax.jit(make_train(config).train)(jax.random.PRNGKey(0), make_traced(config, lag_depth))
    per_phase = np.asarray(metrics.phases.staleness_counts).reshape(PHASES, capacity)
    per_chunk = np.asarray(metrics.staleness_counts)
    assert per_chunk.shape == (2, capacity) and per_chunk.dtype == np.int32
    # the chunk histogram is its phases' histograms summed; every sample is counted once
    np.testing.assert_array_equal(per_chunk, per_phase.reshape(2, PHASES // 2, capacity).sum(1))
    assert np.all(per_phase.sum(1) == N * U)
    # and its mean is the mean_staleness diagnostic
    mean_age = per_phase @ np.arange(capacity) / (N * U)
    np.testing.assert_allclose(mean_age, np.asarray(metrics.phases.diagnostics["mean_staleness"]).reshape(-1),
                               rtol=1e-6)
    return per_phase


def test_fixed_lag_gives_age_B_minus_1_after_the_first_phases():
    per_phase = _counts("fixed", 3, 3)
    np.testing.assert_array_equal(per_phase[0], [N * U, 0, 0])  # ages are clipped to the phase index
    np.testing.assert_array_equal(per_phase[1], [0, N * U, 0])
    np.testing.assert_array_equal(per_phase[2:], np.tile([0, 0, N * U], (PHASES - 2, 1)))


def test_uniform_lag_gives_every_age_an_equal_share():
    per_phase = _counts("uniform", 4, 4)
    share = per_phase[3:].sum(0) / per_phase[3:].sum()  # from phase 3 on no age is clipped
    assert np.all(per_phase[3:].sum(0) > 0)
    np.testing.assert_allclose(share, 0.25, atol=0.06)  # 416 draws of 4 equally likely ages


def test_synchronous_is_all_age_0():
    per_phase = _counts("synchronous", 1, 4)
    np.testing.assert_array_equal(per_phase, np.tile([N * U, 0, 0, 0], (PHASES, 1)))
