"""Tasks and the engines that step them, as pure, jittable reset/step pairs (docs/envs.md).

    registry.py          task names, backends, ``register_env``, ``make_env`` (a name -> an ``Env``, one call)
    episodes.py          the training wrapper: termination vs truncation, auto-reset, ``reset_batch``
    gymnasium_tasks.py   Gymnasium's locomotion tasks: model + definition, for either engine
    cengine.py           MuJoCo's C engine (one ``pure_callback`` per vectorised step)
    mjx_engine.py        MJX
    point_mass.py        a tiny pure-JAX task for fast tests

This package only re-exports the names the rest of the code reads.
"""

from vaco_jax.envs.episodes import Env, EnvState, StepOutput, reset_batch
from vaco_jax.envs.point_mass import PointMass, PointMassState
from vaco_jax.envs.registry import (BACKENDS, BRAX_BACKENDS, BRAX_INTERNAL, GYM_BACKENDS, PLAYGROUND_BROKEN, TASKS,
                                    PlaygroundEnv, available_envs, check_backend, check_env_name, default_backend,
                                    env_source, make_env, playground_tasks, register_env)

__all__ = ["BACKENDS", "BRAX_BACKENDS", "BRAX_INTERNAL", "Env", "EnvState", "GYM_BACKENDS", "PLAYGROUND_BROKEN",
           "PlaygroundEnv", "PointMass", "PointMassState", "StepOutput", "TASKS", "available_envs", "check_backend",
           "check_env_name", "default_backend", "env_source", "make_env", "playground_tasks", "register_env",
           "reset_batch"]
