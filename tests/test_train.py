"""Trainer: synchronous reduction, vmapped grids, recorded versions, learning (docs/lag.md, docs/evaluation.md).

Each test compiles an MJX training program (tens of seconds on a CPU); configurations are shared so
the persistent compilation cache (conftest.py) serves repeats.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import FULL_OPTIMIZATION, tiny_config
from vaco_jax.core import lag as lag_lib
from vaco_jax.core.config import ConfigError, make_traced, stack_traced
from vaco_jax.core.rollout import rollout
from vaco_jax.core.train import make_train
from vaco_jax.core.update import snapshot_logp

pytestmark = pytest.mark.slow


def _final_params(config, lag_depth, seed=0):
    trainer = make_train(config)
    state, metrics = jax.jit(trainer.train)(jax.random.PRNGKey(seed), make_traced(config, lag_depth))
    return state, metrics


def test_B_equal_1_reproduces_synchronous_ppo():
    # Tolerance: the lagged path evaluates each actor's gathered snapshot in its own (vmapped)
    # matmul, the synchronous path one batched matmul with the learner's parameters; the two agree
    # to float32 round-off, which a few phases of training must not amplify beyond 1e-4.
    sync_state, sync_m = _final_params(tiny_config(lag_model="synchronous"), 1)
    lag_state, lag_m = _final_params(tiny_config(lag_model="uniform"), 1)
    for a, b in zip(jax.tree.leaves(sync_state.learner.policy_params),
                    jax.tree.leaves(lag_state.learner.policy_params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sync_m.phases.episode_return_sum, lag_m.phases.episode_return_sum, rtol=1e-4)
    assert float(jnp.max(lag_m.phases.diagnostics["mean_staleness"])) == 0.0
    # and parameters did move: the comparison is not between two untouched initialisations
    init = make_train(tiny_config()).init(jax.random.PRNGKey(0), make_traced(tiny_config(), 1))
    moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(
        jax.tree.leaves(init.learner.policy_params), jax.tree.leaves(lag_state.learner.policy_params)))
    assert moved > 1e-3


def test_vmapped_grid_equals_each_cell_alone():
    config = tiny_config()
    trainer = make_train(config)
    seeds, depths = [0, 1], [1, 4]
    cells = [(s, b) for s in seeds for b in depths]
    keys = jnp.stack([jax.random.PRNGKey(s) for s, _ in cells])
    traced = stack_traced([make_traced(config, b) for _, b in cells])
    grid_state, grid_m = jax.jit(jax.vmap(trainer.train))(keys, traced)
    single = jax.jit(trainer.train)
    for i, (s, b) in enumerate(cells):
        state, m = single(jax.random.PRNGKey(s), make_traced(config, b))
        for a, g in zip(jax.tree.leaves(state.learner.policy_params),
                        jax.tree.leaves(grid_state.learner.policy_params)):
            np.testing.assert_allclose(a, g[i], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(m.phases.diagnostics["mean_staleness"],
                                   grid_m.phases.diagnostics["mean_staleness"][i], rtol=1e-6)
    # the lag depth really acts per cell: depth 4 sees stale data, depth 1 never does
    stale = np.asarray(grid_m.phases.diagnostics["mean_staleness"]).mean(axis=(1, 2))
    assert stale[0] == 0 and stale[2] == 0 and stale[1] > 0 and stale[3] > 0


def test_recorded_versions_and_logp_match_the_snapshots_used():
    config = tiny_config(buffer_capacity=4)
    trainer = make_train(config)
    traced = make_traced(config, 4)
    state = trainer.init(jax.random.PRNGKey(0), traced)
    # publish three visibly different versions (perturbed policy means and normaliser statistics)
    buf = state.buffer
    for v in (1, 2, 3):
        policy = jax.tree.map(lambda x: x + 0.3 * v, state.learner.policy_params)
        norm = state.normalizer._replace(mean=state.normalizer.mean + 0.1 * v)
        buf = lag_lib.buffer_publish(buf, trainer.snapshot(policy, norm), v)
    phase = 3

    @jax.jit
    def go(key):
        ages = traced.lag.start_ages(key, config.num_actors, phase)
        _, traj = rollout(env=trainer.env, policy_apply=trainer.nets.policy_apply, buffer=buf,
                          learner_snapshot=None, env_state=state.env_state, start_ages=ages,
                          action_key=jax.random.PRNGKey(5), unroll_length=config.unroll_length,
                          lag=traced.lag, envs_per_actor=1, actor_dtype="float32",
                          normalize_observations=True, phase=phase)
        recovered = snapshot_logp(trainer.nets, buf, traj, phase, traced.lag_depth, True)
        return ages, traj, recovered

    ages, traj, recovered = go(jax.random.PRNGKey(2))
    np.testing.assert_array_equal(traj.behaviour_version, np.broadcast_to(phase - np.asarray(ages),
                                                                          traj.behaviour_version.shape))
    assert len(np.unique(ages)) > 1
    # exact old-logit recovery from the buffer equals what the actor computed (docs/lag.md)
    np.testing.assert_allclose(recovered, traj.behaviour_logp, rtol=1e-5, atol=1e-4)
    # ...and differs from the newest version's log-prob for stale samples (the check has teeth)
    newest = snapshot_logp(trainer.nets, buf, traj._replace(
        behaviour_version=jnp.full_like(traj.behaviour_version, phase)), phase, traced.lag_depth, True)
    stale = np.asarray(traj.behaviour_version) < phase
    assert np.max(np.abs(np.asarray(newest - traj.behaviour_logp)[stale])) > 1e-2


def test_ppo_learns_inverted_double_pendulum():
    """PPO-Clip on an MJX task, 80k env steps: the training episodes of the last 8 phases return more
    than 5x those of the first phase, whose policy is the initial, nearly random one (measured here:
    144 -> 1,542; a uniform-random policy scores ~160). Training returns, not a separate evaluation:
    an evaluation rollout and a random-policy score would each inline the MJX step again and more than
    double the compile (57 s + 16 s against 22 s). Compiled with full optimisation: this one program
    runs long enough (1.6 s against 17 s at conftest's level 0) to pay for it."""
    from vaco_jax.core.config import Config

    config = Config(env="inverted_double_pendulum", method="ppo_clip", num_envs=32, unroll_length=32,
                    total_env_steps=80_000, num_evals=2, eval_episodes=0, num_epochs=4,
                    num_minibatches=4, buffer_capacity=2)
    trainer = make_train(config)
    traced = make_traced(config, 1, learning_rate=1e-3)
    key = jax.random.PRNGKey(0)
    train = jax.jit(trainer.train).lower(key, traced).compile(compiler_options=FULL_OPTIMIZATION)
    state, metrics = train(key, traced)
    assert not bool(jnp.any(metrics.diverged))
    returns, episodes = np.asarray(metrics.phases.episode_return_sum), np.asarray(metrics.phases.episode_count)
    assert episodes[0, 0] > 0 and episodes[-1, -8:].sum() > 0
    first = returns[0, 0] / episodes[0, 0]
    last = returns[-1, -8:].sum() / episodes[-1, -8:].sum()
    assert last > 5 * first, (first, last)


def test_bad_values_fail_before_compilation_naming_the_field():
    config = tiny_config(buffer_capacity=4)
    with pytest.raises(ConfigError, match="lag_depth=5.*buffer_capacity=4"):
        make_traced(config, 5)
    with pytest.raises(ConfigError, match="num_envs"):
        tiny_config(num_envs=0)
    with pytest.raises(ConfigError, match="lag_model='lifo'.*uniform"):
        tiny_config(lag_model="lifo")
    with pytest.raises(ConfigError, match="num_minibatches=3"):
        tiny_config(num_minibatches=3)
    with pytest.raises(ConfigError, match="policy_hidden"):
        tiny_config(policy_hidden=(64, 0))
