"""A raw env as the trainer steps it: pure, jittable ``reset``/``step`` with truncation-aware auto-reset
(docs/estimators.md, docs/envs.md).

The ``Env`` that ``registry.make_env`` returns has a ``step`` that distinguishes

* **termination** (the task's own ``done``: the agent fell; bootstrap value 0) from
* **truncation** (the episode reached ``episode_length``; bootstrap from V(next obs)),

and hands the learner the next observation *before* the auto-reset. After a finished episode the env
returns to the initial state it was reset to (one per env, drawn at ``reset``), as Brax's own
auto-reset wrapper does: a fresh MJX reset inside every vmapped step would run the reset's physics
for every env at every step. A task on MuJoCo's C engine draws a fresh reset instead, on the host in
the step's own callback (``c_engine_env``), as Gymnasium does.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.errors import ConfigError


class EnvState(NamedTuple):
    core: Any  # brax.envs.State of the running episode
    initial: Any  # brax.envs.State this env returns to after an episode ends
    episode_step: jnp.ndarray  # int32
    episode_return: jnp.ndarray  # float32


class StepOutput(NamedTuple):
    obs: jnp.ndarray  # observation to act on next (after auto-reset)
    reward: jnp.ndarray
    termination: jnp.ndarray  # float32 in {0, 1}
    truncation: jnp.ndarray  # float32 in {0, 1}; never 1 together with termination
    next_obs: jnp.ndarray  # observation reached by this step, before any auto-reset
    episode_return: jnp.ndarray  # return of the episode this step ended (0 when it did not end)
    episode_length: jnp.ndarray  # its length in steps (0 when it did not end)


class Env(NamedTuple):
    name: str
    backend: str
    episode_length: int
    observation_size: int
    action_size: int
    reset: Callable[[jax.Array], EnvState]
    step: Callable[[EnvState, jnp.ndarray], tuple[EnvState, StepOutput]]
    raw: Any  # the underlying env (single-env reset/step, no auto-reset)
    action_low: Any = -1.0  # the action box, from the env ([A] arrays)
    action_high: Any = 1.0


def strong(x):
    """``x`` with the same dtype, never weakly typed."""
    x = jnp.asarray(x)
    return jax.lax.convert_element_type(x, x.dtype) if getattr(x, "weak_type", False) else x


def episode_bookkeeping(state: EnvState, reward, termination, ends):
    """Every wrapper's episode counters: ``ends`` (the step reaches ``episode_length``) truncates unless
    the task terminated. Returns ``done``, the env state's new counters, and the step output's
    termination, truncation and the ended episode's return and length (0 when none ended)."""
    episode_step = state.episode_step + 1
    episode_return = state.episode_return + reward
    truncation = jnp.where(termination > 0, 0.0, ends.astype(jnp.float32))
    done = jnp.maximum(termination, truncation)
    counters = dict(episode_step=jnp.where(done > 0, 0, episode_step).astype(jnp.int32),
                    episode_return=jnp.where(done > 0, 0.0, episode_return))
    ended = dict(termination=termination, truncation=truncation,
                 episode_return=jnp.where(done > 0, episode_return, 0.0),
                 episode_length=jnp.where(done > 0, episode_step, 0).astype(jnp.int32))
    return done, counters, ended


def auto_reset_env(name: str, backend: str, env, episode_length: int, observation_size: int) -> Env:
    """The training wrapper of a raw env in the program (Brax, MJX, Playground, point_mass, an env of
    your own): episodes truncated at ``episode_length`` and returned to the env's initial state."""
    action_size = int(env.action_size)
    low = np.broadcast_to(np.asarray(getattr(env, "action_low", -1.0), np.float32), (action_size,))
    high = np.broadcast_to(np.asarray(getattr(env, "action_high", 1.0), np.float32), (action_size,))
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
        raise ConfigError(f"env={name!r}: action bounds must be finite with low < high, got {low}, {high}")

    def reset(key: jax.Array) -> EnvState:
        core = jax.tree.map(strong, env.reset(key))
        return EnvState(core=core, initial=core, episode_step=jnp.zeros((), jnp.int32),
                        episode_return=jnp.zeros((), jnp.float32))

    def step(state: EnvState, action: jnp.ndarray) -> tuple[EnvState, StepOutput]:
        nxt = env.step(state.core, action)
        termination = (nxt.done > 0.5).astype(jnp.float32)
        done, counters, ended = episode_bookkeeping(state, nxt.reward, termination,
                                                    state.episode_step + 1 >= episode_length)
        # Auto-reset: swap in the initial state; the brax env itself never resets.
        fresh = state.initial.replace(metrics=nxt.metrics, info=nxt.info)
        # Every leaf strongly typed: some tasks' steps return weakly typed leaves (inverted_pendulum's
        # info['time_out']) where reset returned strong ones, and a state whose types change between
        # calls makes jit compile the whole training program a second time.
        core = jax.tree.map(lambda a, b: strong(jnp.where(done > 0, a, b)), fresh, nxt)
        new_state = EnvState(core=core, initial=state.initial, **counters)
        return new_state, StepOutput(obs=core.obs, reward=nxt.reward, next_obs=nxt.obs, **ended)

    return Env(name=name, backend=backend, episode_length=episode_length, observation_size=observation_size,
               action_size=action_size, reset=reset, step=step, raw=env, action_low=jnp.asarray(low),
               action_high=jnp.asarray(high))


def c_engine_env(name: str, env, episode_length: int) -> Env:
    """The training wrapper of a C-engine task (``cengine.CEngineEnv``): the same contract as
    ``auto_reset_env``'s, with Gymnasium's auto-reset (a fresh reset-noise draw for every episode, on
    the host in the step's own callback) instead of a return to the initial state."""

    def reset(key: jax.Array) -> EnvState:
        return EnvState(core=env.reset(key), initial=(), episode_step=jnp.zeros((), jnp.int32),
                        episode_return=jnp.zeros((), jnp.float32))

    def step(state: EnvState, action: jnp.ndarray) -> tuple[EnvState, StepOutput]:
        ends = state.episode_step + 1 >= episode_length
        core, next_obs = env.step_auto_reset(state.core, action, ends)
        _, counters, ended = episode_bookkeeping(state, core.reward, core.done, ends)
        return EnvState(core=core, initial=(), **counters), StepOutput(obs=core.obs, reward=core.reward,
                                                                       next_obs=next_obs, **ended)

    return Env(name=name, backend="mujoco", episode_length=episode_length, observation_size=env.observation_size,
               action_size=env.action_size, reset=reset, step=step, raw=env,
               action_low=jnp.asarray(env.action_low), action_high=jnp.asarray(env.action_high))


def reset_batch(env: Env, key: jax.Array, num_envs: int) -> EnvState:
    """Reset ``num_envs`` envs one by one and stack the states.

    Some tasks' resets loop with ``lax.while_loop`` (reacher samples its goal by rejection);
    batching that loop over many envs in one call was seen to hang, so each env is reset on its
    own (a ``lax.map``) and the states are stacked.
    """
    keys = jax.random.split(key, num_envs)
    return jax.lax.map(env.reset, keys)
