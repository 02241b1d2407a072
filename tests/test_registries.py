"""The surface a researcher touches: env and network registries, action bounds from the env, the CLI
that is the config (docs/envs.md, docs/methods.md).

Every registry path trains one short phase. The Brax and user paths use tiny pure-JAX envs (no MJX
compile); the MuJoCo Playground path compiles a DM Control task and is marked slow.
"""

import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from vaco_jax.analysis import results
from vaco_jax.core.config import ConfigError, make_traced
from vaco_jax.envs import PointMass, available_envs, make_env, playground_tasks, register_env
from vaco_jax.core.lag import LAG_MODELS
from vaco_jax.core.methods import METHODS
from vaco_jax.core.networks import NETWORKS, register_network
from vaco_jax.core.train import make_train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ONE_PHASE = dict(num_evals=1, total_env_steps=8 * 16, eval_episodes=2, episode_length=30)


def _train_one_phase(config):
    trainer = make_train(config)
    state, metrics = jax.jit(trainer.train)(jax.random.PRNGKey(0), make_traced(config))
    assert not bool(np.any(metrics.diverged))
    assert int(state.phase) == 1
    return trainer, state, metrics


class WideBoxMass(PointMass):
    """point_mass with the action box [-2, 3]: the env itself records the largest |action| it saw."""

    action_low = -2.0
    action_high = 3.0

    def step(self, state, action):
        nxt = super().step(state, jnp.clip(action / 3.0, -1.0, 1.0))
        seen = jnp.maximum(state.metrics.get("max_action", 0.0), jnp.max(action))
        low = jnp.minimum(state.metrics.get("min_action", 0.0), jnp.min(action))
        return nxt.replace(metrics={"max_action": seen, "min_action": low})

    def reset(self, key):
        s = super().reset(key)
        return s.replace(metrics={"max_action": jnp.zeros(()), "min_action": jnp.zeros(())})


def test_a_user_env_trains_and_its_action_bounds_come_from_the_env():
    register_env("wide_box_mass", lambda backend: WideBoxMass())
    assert "wide_box_mass" in available_envs()
    env = make_env("wide_box_mass", episode_length=30)
    np.testing.assert_array_equal(env.action_low, [-2.0])
    np.testing.assert_array_equal(env.action_high, [3.0])
    config = tiny_config(env="wide_box_mass", init_log_std=1.5, **ONE_PHASE)  # wide noise: the box binds
    trainer, state, _ = _train_one_phase(config)
    metrics = state.env_state.core.metrics
    assert float(jnp.max(metrics["max_action"])) == pytest.approx(3.0)
    assert float(jnp.min(metrics["min_action"])) == pytest.approx(-2.0)
    # the random reference draws from the env's box too
    assert np.isfinite(float(jax.jit(trainer.random_score)(jax.random.PRNGKey(1))))


def test_the_observation_size_comes_from_resets_shapes_and_a_wrong_declared_one_is_an_error():
    """make_env reads the size from ``jax.eval_shape(reset)`` (Brax's own property runs reset op by op,
    ~30 s of small compiles per MJX task); an env that declares another size is refused by name."""

    class Misdeclared(PointMass):
        observation_size = 3

    register_env("misdeclared_mass", lambda backend: Misdeclared())
    with pytest.raises(ConfigError, match="misdeclared_mass.*observation_size=3.*length 2"):
        make_env("misdeclared_mass")
    assert make_env("point_mass").observation_size == 2


def test_an_env_registered_with_brax_is_reached_by_name():
    from brax import envs as brax_envs

    class BraxPointMass(PointMass):
        def __init__(self, backend="mjx", **kwargs):
            del backend, kwargs

    brax_envs.register_environment("brax_point_mass", BraxPointMass)
    assert "brax_point_mass" in available_envs()
    _train_one_phase(tiny_config(env="brax_point_mass", **ONE_PHASE))


def test_an_unknown_env_lists_the_allowed_names():
    with pytest.raises(ConfigError, match="env='cartpole'.*inverted_double_pendulum.*point_mass"):
        tiny_config(env="cartpole")


class TwoHeadPolicy(nn.Module):
    """A user policy: a linear mean and the required top-level ``log_std`` parameter."""

    action_size: int

    @nn.compact
    def __call__(self, obs):
        mean = nn.Dense(self.action_size, kernel_init=nn.initializers.zeros)(obs)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_size,))
        return mean, jnp.broadcast_to(log_std, mean.shape)


class LinearValue(nn.Module):
    @nn.compact
    def __call__(self, obs):
        return nn.Dense(1)(obs)[..., 0]


def test_a_user_network_and_the_activation_option_build_and_train():
    register_network("linear", policy=lambda config, a: TwoHeadPolicy(a), value=lambda config: LinearValue())
    assert "linear" in NETWORKS
    trainer, state, _ = _train_one_phase(tiny_config(network="linear", init_log_std=-1.0, **ONE_PHASE))
    params = state.learner.policy_params["params"]
    assert set(params) == {"Dense_0", "log_std"}
    _train_one_phase(tiny_config(activation="relu", policy_hidden=(16,), **ONE_PHASE))
    with pytest.raises(ConfigError, match="activation='softsign'"):
        tiny_config(activation="softsign")


def test_a_user_policy_without_log_std_is_an_error_naming_the_parameter():
    class NoLogStd(nn.Module):
        action_size: int

        @nn.compact
        def __call__(self, obs):
            mean = nn.Dense(self.action_size)(obs)
            return mean, jnp.zeros_like(mean)

    register_network("no_log_std", policy=lambda config, a: NoLogStd(a))
    config = tiny_config(network="no_log_std", **ONE_PHASE)
    with pytest.raises(ConfigError, match="log_std"):
        make_train(config).init(jax.random.PRNGKey(0), make_traced(config))


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "vaco_jax", "train", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def test_help_lists_every_method_env_and_lag_model():
    out = _cli("--help").stdout
    flat = " ".join(out.replace("│", " ").split())
    for name in list(METHODS) + list(LAG_MODELS) + ["point_mass", "inverted_double_pendulum", "hopper"]:
        assert name in flat, name
    for flag in ("--env", "--method", "--lag-depth", "--total-env-steps", "--num-envs", "--gamma",
                 "--tv-budget", "--ewma-ratio-test", "--activation", "--network", "--age-weights"):
        assert flag in out, flag


def test_cli_runs_keep_apart_and_bad_input_is_one_line_with_exit_code_2(tmp_path):
    common = ["--env", "point_mass", "--num-envs", "8", "--unroll-length", "16", "--total-env-steps", "128",
              "--num-evals", "1", "--eval-episodes", "0", "--episode-length", "30", "--num-minibatches", "2",
              "--num-epochs", "1", "--out", str(tmp_path), "--no-progress"]
    for gamma in ("0.99", "0.95"):
        res = _cli(*common, "--gamma", gamma)
        assert res.returncode == 0, res.stderr[-2000:]
    runs = sorted(os.listdir(tmp_path))
    assert len(runs) == 2  # two runs differing only in gamma: two run directories
    configs = [results.read_json(os.path.join(tmp_path, r, "point_mass", "ppo_clip", "config.json")) for r in runs]
    assert {c["gamma"] for c in configs} == {0.99, 0.95}  # each with its settings and its kept policy
    assert all(os.path.exists(os.path.join(tmp_path, r, "point_mass", "ppo_clip", "policies.npz")) for r in runs)
    bad = _cli(*common, "--method", "vaco", "--clip-epsilon", "0.3")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("error: clip_epsilon=0.3 is not read by method='vaco'")
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
@pytest.mark.skipif(not playground_tasks(), reason="MuJoCo Playground not installed (extra 'playground')")
def test_a_playground_dm_control_task_trains_through_the_adapter():
    assert "CartpoleBalance" in available_envs()
    env = make_env("CartpoleBalance", episode_length=30)
    assert env.observation_size > 0 and env.action_size == 1
    _train_one_phase(tiny_config(env="CartpoleBalance", **ONE_PHASE))
