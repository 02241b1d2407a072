"""The π_T pass is made only where something reads it when the TV-to-π_T diagnostic is off
(UpdateShape.learner_diagnostics, used by ``experiments/study.py cost`` so that each method pays
for its own work): the update is bit for bit the same with the diagnostic on and off."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from vaco_jax.core.config import make_traced
from vaco_jax.core import pieces
from vaco_jax.core.methods import METHODS, make_method
from vaco_jax.core.train import make_train
from vaco_jax.core.update import reads_learner_logp

# which presets read log π_T themselves (V-trace's ratio, decoupled PPO's proximal policy)
READS_PI_T = {"vaco", "vaco_realign_only", "impala", "decoupled_recompute", "tis", "mis"}


def test_which_presets_read_pi_t():
    assert {name for name in METHODS if reads_learner_logp(make_method(name))} == READS_PI_T
    assert reads_learner_logp(make_method("vaco_filter_only", tv_denominator="learner"))  # ratio to π_T
    assert reads_learner_logp(make_method("custom", advantage_estimator="vtrace"))

    class MyClip(pieces.PPOClip):  # a subclass may read π_T in a loss of its own: it is assumed to
        def loss(self, x):
            return super().loss(x)

    preset = make_method("ppo_clip")
    assert not reads_learner_logp(preset)
    assert reads_learner_logp(preset.replace(surrogate=MyClip()))


def _learn(config, lag_depth, learner_diagnostics):
    trainer = make_train(config, learner_diagnostics=learner_diagnostics)
    traced = make_traced(config, lag_depth)
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0), traced)
    state = state._replace(phase=jnp.asarray(3, jnp.int32))  # versions 0..3 in use: stale samples

    @jax.jit
    def one_phase(state):
        _, traj, key = trainer.collect(state, traced)
        return trainer.learn(state.learner, state.normalizer, state.buffer, traj, state.phase, key, traced)

    return jax.device_get(one_phase(state))


@pytest.mark.parametrize("method,lag_model", [("a3po", "uniform"), ("ppo_ewma_revised", "uniform"),
                                              ("a3po", "synchronous"), ("decoupled_recompute", "uniform")])
def test_the_update_is_the_same_without_the_pi_t_diagnostic(method, lag_model):
    """Four cases, one per way of reaching π_T: not read (A-3PO, the revised EWMA), π_old = π_T on
    the synchronous path, and read by the proximal policy (decoupled-recompute)."""
    config = tiny_config(method=method, lag_model=lag_model)
    depth = 1 if lag_model == "synchronous" else 4
    (on, on_diag), (off, off_diag) = (_learn(config, depth, flag) for flag in (True, False))
    for a, b in zip(jax.tree.leaves(on), jax.tree.leaves(off)):
        np.testing.assert_array_equal(a, b)
    assert set(on_diag) == set(off_diag)
    learner_diags = ("tv_learner", "tv_learner_bounded", "abs_log_ratio_learner_mean", "abs_log_ratio_learner_p99")
    for name in on_diag:
        if name not in learner_diags:
            np.testing.assert_array_equal(on_diag[name], off_diag[name], err_msg=name)
    assert np.all(np.isfinite(on_diag["tv_learner"]))
    # π_T is skipped only where nothing reads it (on the synchronous path π_old is π_T): its diagnostic
    # is NaN then, never a made-up number
    skipped = method not in READS_PI_T and lag_model != "synchronous"
    for name in learner_diags:
        assert np.all(np.isfinite(on_diag[name])), name
        assert np.all(np.isnan(off_diag[name])) == skipped, name
