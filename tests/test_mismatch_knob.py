"""The traced mismatch-strength knob (docs/lag.md, "Training–inference mismatch"): a controlled
perturbation of the actors' distribution, on the tiny pure-JAX point_mass task."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from vaco_jax.core.config import ConfigError, make_traced
from vaco_jax.core.networks import gaussian_logp
from vaco_jax.core.rollout import rollout
from vaco_jax.core.train import make_train


def _traj(strength, num_envs=512):
    config = tiny_config(num_envs=num_envs, total_env_steps=num_envs * 16 * 2)
    trainer = make_train(config)
    traced = make_traced(config, 1)
    state = trainer.init(jax.random.PRNGKey(0), traced)
    snap = trainer.snapshot(state.learner.policy_params, state.normalizer)
    _, traj = rollout(env=trainer.env, policy_apply=trainer.nets.policy_apply, buffer=state.buffer,
                      learner_snapshot=snap, env_state=state.env_state,
                      start_ages=jnp.zeros((config.num_actors,), jnp.int32), action_key=jax.random.PRNGKey(7),
                      unroll_length=2, lag=traced.lag, envs_per_actor=config.envs_per_actor,
                      actor_dtype="float32", normalize_observations=True, phase=0, mismatch_strength=strength)
    learner_mean, learner_log_std = trainer.nets.policy_apply(state.learner.policy_params, traj.obs[0])
    return traj, learner_mean, learner_log_std


def test_the_actor_samples_from_a_mean_shifted_by_strength_standard_deviations():
    t0, mean, log_std = _traj(0.0)
    t1, _, _ = _traj(0.5)
    # strength 0: the actor's distribution is the learner's (to float32 round-off: the rollout's
    # compiled matmul and this eager one are two programs, which differ by an ulp at XLA's level 0)
    np.testing.assert_allclose(t0.behaviour_mean[0], mean, rtol=1e-6, atol=1e-9)
    # strength 0.5: shift / std is a standard normal draw times 0.5, the log-std unchanged
    z = np.asarray((t1.behaviour_mean[0] - mean) / jnp.exp(log_std)).ravel()
    assert abs(z.std() / 0.5 - 1) < 0.1 and abs(z.mean()) < 0.1
    np.testing.assert_array_equal(t1.behaviour_log_std[0], t0.behaviour_log_std[0])
    # the action noise is the same stream: action - own mean is identical at both strengths
    np.testing.assert_allclose(t1.action[0] - t1.behaviour_mean[0], t0.action[0] - t0.behaviour_mean[0], atol=1e-6)
    # recorded density = the shifted distribution's; the learner's recomputation differs from it
    np.testing.assert_allclose(t1.behaviour_logp[0], gaussian_logp(t1.action[0], t1.behaviour_mean[0], log_std),
                               rtol=1e-6, atol=1e-6)
    gap0 = np.abs(np.asarray(t0.behaviour_logp[0] - gaussian_logp(t0.action[0], mean, log_std)))
    gap1 = np.abs(np.asarray(t1.behaviour_logp[0] - gaussian_logp(t1.action[0], mean, log_std)))
    assert gap0.max() < 1e-5 and gap1.mean() > 0.1


def test_the_knob_is_checked_and_sweepable():
    with pytest.raises(ConfigError, match="mismatch_strength"):
        tiny_config(mismatch_strength=-1.0)
    from vaco_jax.driver import grid
    assert grid.parse_sweep(["mismatch_strength=0,0.5"]) == {"mismatch_strength": [0.0, 0.5]}
    assert float(make_traced(tiny_config(), 1, mismatch_strength=0.25).mismatch_strength) == 0.25
