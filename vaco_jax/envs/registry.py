"""Which tasks exist, which physics each runs on, and ``make_env``: a task's name to the ``Env`` the
trainer steps, in one call (docs/envs.md).

``make_env(name, backend, episode_length)`` checks the name and the backend, builds the raw env once
per (name, backend) (Gymnasium's locomotion tasks on MuJoCo's C engine, ``cengine``, or MJX,
``mjx_engine``; Brax's tasks; MuJoCo Playground's DM Control suite; ``point_mass``; an env of your
own, ``register_env``) and hands it to the training wrapper of ``episodes``.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import jax

from vaco_jax.envs.episodes import Env, auto_reset_env, c_engine_env
from vaco_jax.envs.gymnasium_tasks import GYM_TASKS
from vaco_jax.envs.point_mass import PointMass
from vaco_jax.errors import ConfigError

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


def task_families() -> dict[str, list[str]]:
    """The task names known without importing Brax or Playground, by where they come from: 'gymnasium',
    'brax' (Brax's MuJoCo set), 'builtin', 'user' (``--help`` lists these; ``available_envs`` every name)."""
    return {"gymnasium": list(GYM_TASKS), "brax": list(TASKS), "builtin": ["point_mass"], "user": sorted(_USER_ENVS)}


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
        return c_engine_env(name, env, episode_length)
    return auto_reset_env(name, backend, env, episode_length, _observation_size(name, backend))
