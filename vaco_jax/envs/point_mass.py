"""``point_mass``: a tiny pure-JAX task (no physics engine) that the fast tests train on."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class PointMassState:
    """The raw state of :class:`PointMass`, with the fields of a ``brax.envs.State`` the wrapper reads."""

    pipeline_state: jnp.ndarray  # (position, velocity)
    obs: jnp.ndarray
    reward: jnp.ndarray
    done: jnp.ndarray
    metrics: dict = struct.field(default_factory=dict)
    info: dict = struct.field(default_factory=dict)


class PointMass:
    """Push a unit mass on a line to the origin.

    Observation (x, v); action a force in [-1, 1]; ``v += 0.1 a``, ``x += 0.1 v``; reward
    ``1 - x^2 - 0.01 a^2`` per step; the episode *terminates* when ``|x| > 2`` (so both episode ends
    occur). A training program on it compiles in seconds, not the tens of seconds of an MJX task: the
    fast tests of wiring, resume and faults train on it.
    """

    observation_size = 2
    action_size = 1

    def reset(self, key):
        x = jax.random.uniform(key, (), minval=-1.0, maxval=1.0)
        q = jnp.stack([x, jnp.zeros(())])
        return PointMassState(pipeline_state=q, obs=q, reward=jnp.zeros(()), done=jnp.zeros(()))

    def step(self, state, action):
        a = jnp.clip(jnp.reshape(action, ()), -1.0, 1.0)
        x, v = state.pipeline_state[0], state.pipeline_state[1]
        v = v + 0.1 * a
        x = x + 0.1 * v
        q = jnp.stack([x, v])
        reward = 1.0 - x * x - 0.01 * a * a
        done = (jnp.abs(x) > 2.0).astype(jnp.float32)
        return state.replace(pipeline_state=q, obs=q, reward=reward, done=done)
