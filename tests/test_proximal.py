"""Proximal-policy sources (docs/proximal.md): A-3PO log-linear, linear interpolation, PPO-EWMA."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.core.proximal import (
    EwmaState,
    default_ewma_age,
    ewma_decay_for_age,
    ewma_init,
    ewma_maybe_reset,
    ewma_update,
    linear_proximal_logp,
    loglinear_proximal_logp,
    revised_ewma_decay,
)

N = 40


def make_samples(seed, n=N, max_staleness=6):
    rng = np.random.default_rng(seed)
    behaviour = rng.normal(-1.0, 1.0, size=n).astype(np.float32)
    logp = (behaviour + rng.normal(0.0, 0.5, size=n)).astype(np.float32)
    staleness = rng.integers(0, max_staleness + 1, size=n).astype(np.int32)
    staleness[:3] = [0, 1, 2]  # always cover the special cases
    return logp, behaviour, staleness


# ---------------------------------------------------------------------------------------------
# Log-linear (A-3PO)
# ---------------------------------------------------------------------------------------------


def loglinear_reference(logp, behaviour, staleness):
    out = np.empty(len(logp), np.float64)
    for i, (lp, b, d) in enumerate(zip(logp, behaviour, staleness)):
        if d == 0:
            out[i] = b
        else:
            alpha = 1.0 / d
            out[i] = alpha * b + (1 - alpha) * lp
    return out


@pytest.mark.parametrize("jit", [False, True])
def test_loglinear_matches_reference(jit):
    logp, behaviour, staleness = make_samples(0)
    fn = jax.jit(loglinear_proximal_logp) if jit else loglinear_proximal_logp
    got = fn(logp, behaviour, staleness)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, loglinear_reference(logp, behaviour, staleness), rtol=1e-6, atol=1e-6)
    fresh = staleness <= 1
    np.testing.assert_array_equal(np.asarray(got)[fresh], behaviour[fresh])


def test_loglinear_2d():
    logp, behaviour, staleness = make_samples(1, n=24)
    shape = (6, 4)
    got = loglinear_proximal_logp(logp.reshape(shape), behaviour.reshape(shape), staleness.reshape(shape))
    np.testing.assert_allclose(got.ravel(), loglinear_reference(logp, behaviour, staleness), rtol=1e-6, atol=1e-6)


def test_loglinear_identity_and_gradient():
    """π_θ/π_prox = (π_θ/β)^α and ∇_logp r_p = r_p (the proximal policy carries no gradient)."""
    logp, behaviour, staleness = make_samples(2)
    staleness = np.maximum(staleness, 1)
    alpha = 1.0 / staleness

    def ratio(lp):
        return jnp.exp(lp - loglinear_proximal_logp(lp, behaviour, staleness))

    r_p = ratio(logp)
    np.testing.assert_allclose(r_p, np.exp(logp - behaviour) ** alpha, rtol=1e-5)
    grad = jax.grad(lambda lp: jnp.sum(ratio(lp)))(logp)
    np.testing.assert_allclose(grad, r_p, rtol=1e-6)
    prox_grad = jax.grad(lambda lp: jnp.sum(loglinear_proximal_logp(lp, behaviour, staleness)))(logp)
    np.testing.assert_array_equal(prox_grad, 0.0)


# ---------------------------------------------------------------------------------------------
# Linear (probability space)
# ---------------------------------------------------------------------------------------------


def linear_reference(logp, behaviour, staleness):
    out = np.empty(len(logp), np.float64)
    for i, (lp, b, d) in enumerate(zip(logp.astype(np.float64), behaviour.astype(np.float64), staleness)):
        if d == 0:
            out[i] = b
        else:
            out[i] = np.log(np.exp(b) / d + (1 - 1 / d) * np.exp(lp))
    return out


@pytest.mark.parametrize("jit", [False, True])
def test_linear_matches_reference(jit):
    logp, behaviour, staleness = make_samples(3)
    fn = jax.jit(linear_proximal_logp) if jit else linear_proximal_logp
    got = fn(logp, behaviour, staleness)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, linear_reference(logp, behaviour, staleness), rtol=1e-5, atol=1e-5)
    fresh = staleness <= 1
    np.testing.assert_array_equal(np.asarray(got)[fresh], behaviour[fresh])  # exactly β at d ∈ {0, 1}
    assert np.all(np.isfinite(got))


def test_linear_is_stable_for_extreme_logps_and_has_no_gradient():
    logp = np.array([-300.0, 50.0, -1.0, -80.0], np.float32)
    behaviour = np.array([-310.0, -2.0, -1.0, -200.0], np.float32)
    staleness = np.array([3, 2, 5, 1], np.int32)
    got = np.asarray(linear_proximal_logp(logp, behaviour, staleness))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got[0], np.logaddexp(-310.0 - np.log(3), -300.0 + np.log(2 / 3)), rtol=1e-6)
    np.testing.assert_allclose(got[1], 50.0 + np.log(0.5), rtol=1e-6)
    np.testing.assert_allclose(got[2], -1.0, rtol=1e-6)
    assert got[3] == -200.0
    grad = jax.grad(lambda lp: jnp.sum(linear_proximal_logp(lp, behaviour, staleness)))(logp)
    np.testing.assert_array_equal(grad, 0.0)


# ---------------------------------------------------------------------------------------------
# EWMA
# ---------------------------------------------------------------------------------------------


def make_params(rng):
    return {"w": rng.normal(size=(3, 2)).astype(np.float32), "b": rng.normal(size=(2,)).astype(np.float32)}


def test_ewma_init():
    params = make_params(np.random.default_rng(0))
    state = ewma_init(params)
    assert isinstance(state, EwmaState)
    assert state.weight.dtype == jnp.float32 and float(state.weight) == 1.0
    assert state.resets.dtype == jnp.int32 and int(state.resets) == 0
    for k in params:
        np.testing.assert_array_equal(state.params[k], params[k])


def test_ewma_sequence_with_reset_matches_numpy_loop():
    rng = np.random.default_rng(1)
    theta0 = make_params(rng)
    steps = [make_params(rng) for _ in range(8)]
    kept = [0.9, 0.8, 0.3, 0.7, 0.95, 0.2, 0.6, 0.5]  # resets after steps 2 and 5 (strict <)
    decay, threshold = 0.8, 0.5

    # numpy reference
    avg = {k: v.astype(np.float64) for k, v in theta0.items()}
    weight, resets = 1.0, 0
    expected = []
    for params, frac in zip(steps, kept):
        weight = decay * weight + 1.0
        avg = {k: avg[k] + (params[k] - avg[k]) / weight for k in avg}
        if frac < threshold:
            avg = {k: params[k].astype(np.float64) for k in avg}
            weight, resets = 1.0, resets + 1
        expected.append(({k: v.copy() for k, v in avg.items()}, weight, resets))

    @jax.jit
    def step(state, params, frac, decay, threshold):
        state = ewma_update(state, params, decay)
        return ewma_maybe_reset(state, params, frac, threshold)

    state = ewma_init(theta0)
    for (params, frac), (exp_avg, exp_w, exp_resets) in zip(zip(steps, kept), expected):
        state = step(state, params, jnp.float32(frac), jnp.float32(decay), jnp.float32(threshold))
        for k in exp_avg:
            np.testing.assert_allclose(state.params[k], exp_avg[k], rtol=1e-5, atol=1e-6)
            assert state.params[k].dtype == jnp.float32
        np.testing.assert_allclose(state.weight, exp_w, rtol=1e-6)
        assert int(state.resets) == exp_resets
    assert int(state.resets) == 2


def test_ewma_is_bias_corrected_average():
    """With η = 1 the EWMA is the plain running mean of θ_0 and all updates."""
    values = [np.array([float(i)], np.float32) for i in range(6)]
    state = ewma_init({"x": values[0]})
    for v in values[1:]:
        state = ewma_update(state, {"x": v}, 1.0)
    np.testing.assert_allclose(state.params["x"], [np.mean(np.arange(6.0))], rtol=1e-6)
    np.testing.assert_allclose(state.weight, 6.0)


def test_decay_for_age_and_defaults():
    for age in [0.0, 0.5, 3.0, 15.5, 100.0]:
        eta = float(ewma_decay_for_age(age))
        if age > 0:
            np.testing.assert_allclose(eta / (1 - eta), age, rtol=1e-5)
        else:
            assert eta == 0.0
    np.testing.assert_allclose(default_ewma_age(32), 15.5)
    np.testing.assert_allclose(default_ewma_age(1), 0.0)


@pytest.mark.parametrize("lag_depth,steps", [(1, 32), (3, 32), (8, 4)])
def test_revised_decay(lag_depth, steps):
    window = lag_depth * steps
    eta = float(jax.jit(revised_ewma_decay)(jnp.int32(lag_depth), steps))
    np.testing.assert_allclose(eta, window / (window + 2.0), rtol=1e-6)
    np.testing.assert_allclose(eta / (1 - eta), window / 2.0, rtol=1e-4)  # age W_stale/2


def test_revised_decay_vmaps_over_lag_depth():
    depths = jnp.arange(1, 5)
    etas = jax.vmap(lambda b: revised_ewma_decay(b, 16))(depths)
    np.testing.assert_allclose(etas, [16 * b / (16 * b + 2.0) for b in range(1, 5)], rtol=1e-6)
