"""Shared test set-up: a persistent XLA compilation cache and the tiny training configuration.

MJX programs take tens of seconds to compile on a CPU; tests that build the same program share
the compiled executable through JAX's persistent cache (also across pytest-xdist workers).
"""

import os

import jax
import pytest

jax.config.update("jax_compilation_cache_dir",
                  os.environ.get("VACO_JAX_TEST_CACHE", os.path.join(os.path.dirname(__file__), "..", ".jax_cache")))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

TINY = dict(env="inverted_double_pendulum", num_envs=8, unroll_length=16, total_env_steps=8 * 16 * 4,
            num_evals=2, eval_episodes=0, episode_length=50, num_epochs=2, num_minibatches=2,
            buffer_capacity=8)


def tiny_config(**overrides):
    from vaco_jax.config import Config

    return Config(**{**TINY, **overrides})


@pytest.fixture
def tiny():
    return tiny_config
