"""Environment wrapper: auto-reset, termination vs truncation, next observation before reset (docs/estimators.md, docs/envs.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.core.config import ConfigError
from vaco_jax.envs import make_env, reset_batch


def test_unknown_task_and_backend_name_the_valid_values():
    with pytest.raises(ConfigError, match="env='cartpole'.*inverted_double_pendulum"):
        make_env("cartpole")
    with pytest.raises(ConfigError, match="backend='spring'.*generalized"):
        make_env("reacher", backend="spring")


def _run_and_check(env, actions, steps):
    """Step a batch, checking every step against the plain env; returns, per env, which episode ends
    were seen."""
    n = actions.shape[0]
    state = jax.jit(lambda k: reset_batch(env, k, n))(jax.random.PRNGKey(0))
    initial_obs = np.asarray(state.core.obs)
    # the wrapper's step and the plain env's step from the same state: one program, one compile
    both = jax.jit(lambda s, a: (jax.vmap(env.raw.step)(s.core, a), jax.vmap(env.step)(s, a)))
    returns = np.zeros(n)
    lengths = np.zeros(n, int)
    saw = {"term": np.zeros(n, bool), "trunc": np.zeros(n, bool)}
    for _ in range(steps):
        prev_step = np.asarray(state.episode_step)
        raw, (state, out) = both(state, actions)  # raw: what the plain env does from here
        term, trunc = np.asarray(out.termination), np.asarray(out.truncation)
        returns += np.asarray(out.reward)
        lengths += 1
        # next_obs is the observation the step reached, before any auto-reset
        np.testing.assert_allclose(out.next_obs, raw.obs, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(term, (np.asarray(raw.done) > 0.5).astype(np.float32))
        assert not np.any((term > 0) & (trunc > 0)), "truncation is never set together with termination"
        np.testing.assert_array_equal(trunc, ((prev_step + 1 >= env.episode_length) & (term == 0)).astype(np.float32))
        done = (term + trunc) > 0
        for i in range(n):
            if done[i]:
                # the finished episode's return and length are reported, then the env restarts
                assert out.episode_return[i] == pytest.approx(returns[i], rel=1e-5)
                assert int(out.episode_length[i]) == lengths[i]
                np.testing.assert_allclose(out.obs[i], initial_obs[i], rtol=1e-6)
                assert int(state.episode_step[i]) == 0
                returns[i] = 0.0
                lengths[i] = 0
            else:
                assert out.episode_return[i] == 0.0 and int(out.episode_length[i]) == 0
                np.testing.assert_allclose(out.obs[i], out.next_obs[i])
        saw["term"] |= term > 0
        saw["trunc"] |= trunc > 0
    return saw


@pytest.mark.slow
def test_termination_and_truncation_with_auto_reset():
    """One batch, episodes of 20 steps: two envs get no push (the pendulum stays up past step 20, so
    they are truncated, never terminated), two get full pushes (it topples within ~8 steps: terminated,
    restarted, terminated again, never truncated). 30 steps: at least one of each end per env."""
    env = make_env("inverted_double_pendulum", "mjx", episode_length=20)
    saw = _run_and_check(env, jnp.array([[0.0], [0.0], [1.0], [-1.0]]), steps=30)
    assert list(saw["trunc"]) == [True, True, False, False], saw
    assert list(saw["term"]) == [False, False, True, True], saw


def test_step_keeps_the_state_types_of_reset_so_a_chunk_compiles_once():
    """inverted_pendulum's raw step returns a weakly typed info['time_out'] where its reset returns a
    strong one: a state whose types change between calls made jit compile the training program
    twice (~40 s more per group). The wrapper keeps every leaf's dtype and strong type."""
    env = make_env("inverted_pendulum")
    first = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    after, _ = jax.eval_shape(env.step, first, jnp.zeros((env.action_size,)))
    types = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), tree)  # noqa: E731
    assert jax.tree.structure(after) == jax.tree.structure(first)
    assert types(after) == types(first)
    raw_after = jax.eval_shape(env.raw.step, jax.eval_shape(env.raw.reset, jax.random.PRNGKey(0)),
                               jnp.zeros((env.action_size,)))
    assert any(jax.tree.leaves(jax.tree.map(lambda x: x.weak_type, raw_after))), "the raw env no longer needs this"


def test_internal_and_broken_envs_are_not_offered():
    """Brax's internal `fast` env is no task, and Playground 0.2.0's Reacher tasks do not load with the
    pinned mujoco (when this starts to fail, they load again: offer them)."""
    from vaco_jax.envs import PLAYGROUND_BROKEN, available_envs, playground_tasks

    assert "fast" not in available_envs() and "hopper" in available_envs()
    if not playground_tasks():
        return
    from mujoco_playground import registry

    assert not PLAYGROUND_BROKEN & set(available_envs())
    for name in sorted(PLAYGROUND_BROKEN):
        with pytest.raises(AttributeError, match="find_body"):
            registry.dm_control_suite.load(name)
