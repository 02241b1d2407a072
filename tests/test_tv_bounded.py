"""The bounded TV diagnostics (docs/diagnostics.md, "Sampled and bounded TV"): in [0, 1] where the sampled
estimate exceeds 1, the same expectation, and a plain-loop reference."""

import math

import jax.numpy as jnp
import numpy as np

from vaco_jax.core import objectives as obj
from vaco_jax.core import update


def _normal_logpdf(x, mu, sigma=1.0):
    return -0.5 * ((x - mu) / sigma) ** 2 - math.log(sigma * math.sqrt(2 * math.pi))


def _exact_tv(mu_a, mu_b, sigma=1.0):  # two Gaussians of one width
    return math.erf(abs(mu_a - mu_b) / (2 * sigma) / math.sqrt(2))


def test_bounded_tv_matches_a_plain_loop_and_stays_in_0_1_where_the_sampled_one_exceeds_1():
    rng = np.random.default_rng(0)
    log_ratio = rng.normal(0.0, 3.0, 500).astype(np.float32)
    log_ratio[:3] = (40.0, 90.0, -200.0)  # huge ratios, one beyond float32
    log_weight = rng.normal(0.0, 2.0, 500).astype(np.float32)
    assert float(obj.tv_estimate(jnp.asarray(log_ratio), "tv")) > 1
    plain = sum(max(1.0 - math.exp(min(l, 700.0)), 0.0) for l in log_ratio.astype(float)) / len(log_ratio)
    weighted = (sum(math.exp(w) * max(1.0 - math.exp(min(l, 700.0)), 0.0) for l, w in zip(log_ratio.astype(float),
                                                                                         log_weight.astype(float)))
                / sum(math.exp(w) for w in log_weight.astype(float)))
    got = float(obj.tv_bounded(jnp.asarray(log_ratio)))
    got_w = float(obj.tv_bounded(jnp.asarray(log_ratio), jnp.asarray(log_weight)))
    assert abs(got - plain) < 1e-5 and abs(got_w - weighted) < 1e-5
    assert 0 <= got <= 1 and 0 <= got_w <= 1


def test_bounded_tv_estimates_the_total_variation_of_two_gaussians():
    rng = np.random.default_rng(1)
    beta, pi_t, pi = 0.0, 0.4, 1.0  # means: behaviour, the learner at phase start, the current policy
    a = rng.normal(beta, 1.0, 200_000)
    lp, lb, lt = _normal_logpdf(a, pi), _normal_logpdf(a, beta), _normal_logpdf(a, pi_t)
    behaviour = float(obj.tv_bounded(jnp.asarray(lp - lb)))
    assert abs(behaviour - _exact_tv(pi, beta)) < 0.01
    learner = float(obj.tv_bounded(jnp.asarray(lp - lt), jnp.asarray(lt - lb)))
    assert abs(learner - _exact_tv(pi, pi_t)) < 0.02
    # the unweighted mean over behaviour samples estimates something else
    assert abs(float(obj.tv_bounded(jnp.asarray(lp - lt))) - _exact_tv(pi, pi_t)) > 0.03


def test_every_update_reports_both_bounded_columns():
    rng = np.random.default_rng(2)
    n = 256
    behaviour = jnp.asarray(rng.normal(0, 1, n), jnp.float32)
    learner = behaviour + jnp.asarray(rng.normal(0, 4, n), jnp.float32)  # far apart: the sampled one explodes
    logp = learner + jnp.asarray(rng.normal(0, 4, n), jnp.float32)
    metrics: dict = {}
    update._add_diagnostics(metrics, jnp.zeros((2,)), logp, behaviour, learner, behaviour)
    assert float(metrics["tv_learner"]) > 1 and float(metrics["tv_behaviour"]) > 1
    for name in ("tv_behaviour_bounded", "tv_learner_bounded"):
        assert 0 <= float(metrics[name]) <= 1
