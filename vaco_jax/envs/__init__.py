"""Brax MuJoCo tasks as pure, jittable reset/step pairs with truncation-aware auto-reset (docs/estimators.md, docs/envs.md).

``make_env(name, backend, episode_length)`` returns an ``Env`` whose ``step`` distinguishes

* **termination** (the task's own ``done``: the agent fell; bootstrap value 0) from
* **truncation** (the episode reached ``episode_length``; bootstrap from V(next obs)),

and hands the learner the next observation *before* the auto-reset. After a finished episode the env
returns to the initial state it was reset to (one per env, drawn at ``reset``), as Brax's own
auto-reset wrapper does: a fresh MJX reset inside every vmapped step would run the reset's physics
for every env at every step.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vaco_jax.errors import ConfigError
from vaco_jax.envs.gymnasium_tasks import GYM_TASKS

TASKS = (
    "halfcheetah",
    "hopper",
    "walker2d",
    "ant",
    "humanoid",
    "humanoidstandup",
    "inverted_pendulum",
    "inverted_double_pendulum",
    "reacher",
    "pusher",
)  # Brax's MuJoCo set; any other Brax-registered, Playground DM Control or user env works too (vaco_jax/envs)
BACKENDS = ("mujoco", "mjx", "generalized", "positional")  # check_backend: which a task takes


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
    """A tiny pure-JAX task (no physics engine): push a unit mass on a line to the origin.

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


# ----------------------------------------------------------------------------- the env registry

# name -> factory(backend) -> raw env: an object with reset(key) -> state, step(state, action) -> state,
# observation_size, action_size and optionally action_low / action_high; state has the fields obs,
# reward, done, metrics, info and a .replace method (a brax.envs.State or any flax struct like it).
_USER_ENVS: dict[str, Callable[[str], Any]] = {}

def register_env(name: str, factory: Callable[[str], Any]) -> None:
    """Make ``Config(env=name)`` work for an env of your own, without editing the package.

    ``factory(backend)`` returns the raw env (see the comment above ``_USER_ENVS``); ``backend`` is
    the ``Config.backend`` string, which a user env may ignore. Action bounds come from the env's
    ``action_low`` / ``action_high`` (default [-1, 1]).
    """
    if not name or not isinstance(name, str):
        raise ConfigError(f"register_env: name must be a non-empty string, got {name!r}")
    _USER_ENVS[name] = factory
    _raw_env.cache_clear()
    _observation_size.cache_clear()


# Brax's own test env, not a task
BRAX_INTERNAL = {"fast"}
# Playground 0.2.0's Reacher tasks call MjSpec.find_body, which the pinned mujoco 3.17 lacks: they do not load
PLAYGROUND_BROKEN = {"ReacherEasy", "ReacherHard"}


def _brax_registered() -> list[str]:
    from brax import envs as brax_envs

    # the names brax.envs.register_environment has seen
    return sorted(n for n in brax_envs._envs if n not in BRAX_INTERNAL)


def playground_tasks() -> list[str]:
    """MuJoCo Playground's DM Control suite names, or [] when the optional package is absent."""
    try:
        from mujoco_playground import registry
    except Exception:  # optional dependency (extra 'playground')
        return []
    return sorted(n for n in registry.dm_control_suite.ALL_ENVS if n not in PLAYGROUND_BROKEN)


def env_source(name: str) -> str | None:
    """Where ``name`` comes from: 'user', 'builtin', 'gymnasium', 'brax', 'playground', or None (unknown)."""
    if name in _USER_ENVS:
        return "user"
    if name == "point_mass":
        return "builtin"
    if name in GYM_TASKS:
        return "gymnasium"
    if name in TASKS or name in _brax_registered():
        return "brax"
    if name in playground_tasks():
        return "playground"
    return None


def available_envs() -> list[str]:
    return sorted(set(TASKS) | {"point_mass"} | set(GYM_TASKS) | set(_USER_ENVS) | set(_brax_registered())
                  | set(playground_tasks()))


# Which physics a task's name may run on, and the one it runs on when ``backend`` is not given: Gymnasium's
# locomotion tasks on MuJoCo's C engine ('mujoco'; 'mjx' loads the same model into MJX), Brax's tasks on
# Brax's pipelines ('mjx' by default, 'generalized', 'positional').
GYM_BACKENDS = ("mujoco", "mjx")
BRAX_BACKENDS = ("mjx", "generalized", "positional")


def default_backend(name: str) -> str:
    return "mujoco" if env_source(name) == "gymnasium" else "mjx"


def check_backend(name: str, backend: str | None) -> str:
    """The backend ``name`` runs on (``backend``, or the task's default when None); a ConfigError naming
    the allowed values when the task cannot run on it."""
    if backend is None:
        return default_backend(name)
    allowed = GYM_BACKENDS if env_source(name) == "gymnasium" else BRAX_BACKENDS
    if env_source(name) in ("user", "builtin"):
        allowed = BACKENDS  # handed to the user's factory (point_mass ignores it)
    if backend not in allowed:
        raise ConfigError(f"backend={backend!r} is not valid for env={name!r}; allowed values: {', '.join(allowed)}")
    return backend


def check_env_name(name: str) -> None:
    if env_source(name) is None:
        extra = "" if playground_tasks() else " (MuJoCo Playground's DM Control tasks need the extra 'playground')"
        raise ConfigError(f"env={name!r} is not valid; allowed values: {', '.join(available_envs())}{extra}")


class PlaygroundEnv:
    """MuJoCo Playground's DM Control task as a raw env of this package (JAX implementation, not Warp).

    Playground envs neither truncate nor reset themselves, like Brax's: the wrapper of ``make_env``
    adds truncation at ``episode_length`` and the auto-reset, and keeps the task's own ``done`` as
    termination.
    """

    def __init__(self, name: str):
        from mujoco_playground import registry

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._env = registry.load(name, config_overrides={"impl": "jax"})
        size = self._env.observation_size
        if not isinstance(size, int):
            raise ConfigError(f"env={name!r}: dict observations ({size}) are not supported")
        self.observation_size = int(size)
        self.action_size = int(self._env.action_size)

    def reset(self, key):
        return self._env.reset(key)

    def step(self, state, action):
        return self._env.step(state, action)


@functools.lru_cache(maxsize=None)
def _raw_env(name: str, backend: str):
    source = env_source(name)
    if source == "user":
        return _USER_ENVS[name](backend)
    if name == "point_mass":
        return PointMass()
    if source == "playground":
        return PlaygroundEnv(name)
    if source == "gymnasium":
        if backend == "mujoco":
            from vaco_jax.envs.cengine import CEngineEnv

            return CEngineEnv(name)
        from vaco_jax.envs.mjx_engine import MjxTaskEnv

        return MjxTaskEnv(name)
    from brax import envs as brax_envs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return brax_envs.get_environment(name, backend=backend)


@functools.lru_cache(maxsize=None)
def _observation_size(name: str, backend: str) -> int:
    """The length of the task's observation, from the shapes ``reset`` would return (traced, never run).

    Not Brax's ``observation_size`` property: it runs ``reset`` eagerly, op by op, and each op compiles
    on its own (tens of seconds on a CPU, BENCHMARKS.md "Start-up and compile time"), against well
    under a second traced. A declared ``observation_size`` (point_mass, envs of your own,
    Playground's) must agree with the shape."""
    env = _raw_env(name, backend)
    obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
    if not hasattr(obs, "shape") or len(obs.shape) != 1:
        raise ConfigError(f"env={name!r}: reset must return a flat observation vector, got {obs}")
    size = int(obs.shape[0])
    declared = None if env_source(name) == "brax" else getattr(env, "observation_size", None)
    if declared is not None and int(declared) != size:
        raise ConfigError(f"env={name!r}: observation_size={declared} but reset returns observations of "
                          f"length {size}")
    return size


def _strong(x):
    """``x`` with the same dtype, never weakly typed."""
    x = jnp.asarray(x)
    return jax.lax.convert_element_type(x, x.dtype) if getattr(x, "weak_type", False) else x


def _episode_bookkeeping(state: EnvState, reward, termination, ends):
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


def make_env(name: str, backend: str | None = None, episode_length: int = 1000) -> Env:
    """Pure single-env ``reset(key)`` and ``step(state, action)``; vmap them for a batch.

    ``name``: one of Gymnasium's locomotion tasks (``Hopper-v4``, ...; MuJoCo's C engine unless
    ``backend='mjx'``), a Brax task (the built-in MuJoCo set or anything ``brax.envs.register_environment``
    registered), a MuJoCo Playground DM Control task (extra 'playground'), ``point_mass``, or an env
    of your own (``register_env``).
    """
    check_env_name(name)
    if backend is not None and backend not in BACKENDS:
        raise ConfigError(f"backend={backend!r} is not valid; allowed values: {', '.join(BACKENDS)}")
    backend = check_backend(name, backend)
    if not isinstance(episode_length, int) or episode_length <= 0:
        raise ConfigError(f"episode_length={episode_length!r} must be a positive integer")
    env = _raw_env(name, backend)
    if env_source(name) == "gymnasium" and backend == "mujoco":
        return _c_engine_env(name, env, episode_length)
    action_size = int(env.action_size)
    low = np.broadcast_to(np.asarray(getattr(env, "action_low", -1.0), np.float32), (action_size,))
    high = np.broadcast_to(np.asarray(getattr(env, "action_high", 1.0), np.float32), (action_size,))
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
        raise ConfigError(f"env={name!r}: action bounds must be finite with low < high, got {low}, {high}")

    def reset(key: jax.Array) -> EnvState:
        core = jax.tree.map(_strong, env.reset(key))
        return EnvState(core=core, initial=core, episode_step=jnp.zeros((), jnp.int32),
                        episode_return=jnp.zeros((), jnp.float32))

    def step(state: EnvState, action: jnp.ndarray) -> tuple[EnvState, StepOutput]:
        nxt = env.step(state.core, action)
        termination = (nxt.done > 0.5).astype(jnp.float32)
        done, counters, ended = _episode_bookkeeping(state, nxt.reward, termination,
                                                     state.episode_step + 1 >= episode_length)
        # Auto-reset: swap in the initial state; the brax env itself never resets.
        fresh = state.initial.replace(metrics=nxt.metrics, info=nxt.info)
        # Every leaf strongly typed: some tasks' steps return weakly typed leaves (inverted_pendulum's
        # info['time_out']) where reset returned strong ones, and a state whose types change between
        # calls makes jit compile the whole training program a second time.
        core = jax.tree.map(lambda a, b: _strong(jnp.where(done > 0, a, b)), fresh, nxt)
        new_state = EnvState(core=core, initial=state.initial, **counters)
        return new_state, StepOutput(obs=core.obs, reward=nxt.reward, next_obs=nxt.obs, **ended)

    return Env(name=name, backend=backend, episode_length=episode_length,
               observation_size=_observation_size(name, backend), action_size=action_size,
               reset=reset, step=step, raw=env, action_low=jnp.asarray(low), action_high=jnp.asarray(high))


def _c_engine_env(name: str, env, episode_length: int) -> Env:
    """The training wrapper of a C-engine task: the same contract as ``make_env``'s, with Gymnasium's
    auto-reset (a fresh reset-noise draw for every episode, on the host in the step's own callback)
    instead of a return to the initial state."""

    def reset(key: jax.Array) -> EnvState:
        return EnvState(core=env.reset(key), initial=(), episode_step=jnp.zeros((), jnp.int32),
                        episode_return=jnp.zeros((), jnp.float32))

    def step(state: EnvState, action: jnp.ndarray) -> tuple[EnvState, StepOutput]:
        ends = state.episode_step + 1 >= episode_length
        core, next_obs = env.step_auto_reset(state.core, action, ends)
        _, counters, ended = _episode_bookkeeping(state, core.reward, core.done, ends)
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
