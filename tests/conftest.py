"""Shared test set-up: a persistent XLA compilation cache and the tiny training configuration.

MJX programs take tens of seconds to compile on a CPU; tests that build the same program share
the compiled executable through JAX's persistent cache (also across pytest-xdist workers).
"""

import os

# Set through the environment (before jax is imported) so subprocesses started by tests share it.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".jax_cache")))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "2")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

# Compile, don't optimise: the suite's programs run for a fraction of a second and take seconds to
# compile, and most of that is LLVM's optimisation of the CPU code. At optimisation level 0 a point_mass
# training program compiles in about half the time (15 s -> 8 s here; tests/test_methods.py 221 s ->
# 87 s with two workers) and runs slower, which only the few tests that run a long program notice: they
# compile with FULL_OPTIMIZATION. Semantics are XLA's either way; comparisons stay within one setting.
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}".strip()
FULL_OPTIMIZATION = {"xla_backend_optimization_level": 3, "xla_llvm_disable_expensive_passes": False}

import jax  # noqa: E402
import pytest  # noqa: E402

TINY = dict(env="point_mass", num_envs=8, unroll_length=16, total_env_steps=8 * 16 * 4,
            num_evals=2, eval_episodes=0, episode_length=50, num_epochs=2, num_minibatches=2,
            buffer_capacity=8)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(name: str, fresh: bool = False):
    """``experiments/<name>.py`` as a module (scripts are files, not a package). It is registered in
    ``sys.modules`` before it runs, since dataclasses look their module up while defining ``Args``;
    one instance is shared across the tests unless ``fresh`` asks for a new one."""
    import importlib.util
    import sys

    key = f"_experiments_{name}"
    if fresh or key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, os.path.join(ROOT, "experiments", f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def tiny_config(**overrides):
    from vaco_jax.config import Config

    return Config(**{**TINY, **overrides})


@pytest.fixture
def tiny():
    return tiny_config
