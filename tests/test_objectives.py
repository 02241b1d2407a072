"""Surrogates, filters and value loss (docs/surrogates.md): values and gradients against numpy formulas,
the reductions the docs name, and hypothesis properties of VACO's TV filter."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vaco_jax.core.objectives import (
    decoupled_ppo_loss,
    impala_pg_loss,
    is_pg_loss,
    mismatch_mask,
    normalize_advantages,
    ppo_clip_loss,
    ppo_kl_loss,
    spo_loss,
    tv_estimate,
    tv_filter_keep,
    tv_filtered_pg_loss,
    value_loss,
)
from vaco_jax.core.proximal import loglinear_proximal_logp

N = 64
TOL = dict(rtol=2e-5, atol=1e-6)


def make_minibatch(seed, n=N, spread=0.4):
    rng = np.random.default_rng(seed)
    behaviour = rng.normal(-1.5, 1.0, size=n).astype(np.float32)
    logp = (behaviour + rng.normal(0.0, spread, size=n)).astype(np.float32)
    adv = rng.normal(size=n).astype(np.float32)
    return logp, behaviour, adv


def value_and_grad(fn, logp, *args, **kwargs):
    """Loss, metrics and d loss / d logp of ``fn(logp, *args, **kwargs)``."""
    (loss, metrics), grad = jax.value_and_grad(lambda lp: fn(lp, *args, **kwargs), has_aux=True)(
        jnp.asarray(logp)
    )
    return float(loss), metrics, np.asarray(grad)


def clipped_surrogate_reference(ratio, adv, eps):
    """Per-sample value and d/d logp of min(r A, clip(r) A) (d r / d logp = r)."""
    value = np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv)
    clip_active = ((adv > 0) & (ratio > 1 + eps)) | ((adv < 0) & (ratio < 1 - eps))
    grad = np.where(clip_active, 0.0, adv * ratio)
    return value, grad


def test_normalize_advantages():
    adv = np.random.default_rng(0).normal(3.0, 5.0, size=N).astype(np.float32)
    out = np.asarray(normalize_advantages(adv))
    np.testing.assert_allclose(out.mean(), 0.0, atol=1e-6)
    np.testing.assert_allclose(out.std(), 1.0, rtol=1e-5)
    np.testing.assert_allclose(out, (adv - adv.mean()) / (adv.std() + 1e-8), rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(normalize_advantages(np.ones(4, np.float32))))


# ---------------------------------------------------------------------------------------------
# Coupled PPO family
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True])
def test_ppo_clip_value_and_gradient(jit):
    logp, behaviour, adv = make_minibatch(1)
    eps = 0.2
    fn = jax.jit(ppo_clip_loss) if jit else ppo_clip_loss
    loss, metrics, grad = value_and_grad(fn, logp, behaviour, adv, eps)
    ratio = np.exp(logp.astype(np.float64) - behaviour)
    value, dvalue = clipped_surrogate_reference(ratio, adv, eps)
    np.testing.assert_allclose(loss, -value.mean(), **TOL)
    np.testing.assert_allclose(grad, -dvalue / N, **TOL)
    assert 0 < float(metrics["clip_fraction"]) < 1
    np.testing.assert_allclose(metrics["clip_fraction"], np.mean(np.abs(ratio - 1) > eps))
    np.testing.assert_allclose(metrics["ratio_mean"], ratio.mean(), rtol=1e-5)
    np.testing.assert_allclose(metrics["ratio_max"], ratio.max(), rtol=1e-5)


def test_ppo_clip_ignores_behaviour_gradient():
    logp, behaviour, adv = make_minibatch(2)
    grad = jax.grad(lambda b: ppo_clip_loss(logp, b, adv, 0.2)[0])(behaviour)
    np.testing.assert_array_equal(grad, 0.0)


def test_ppo_kl_value_and_gradient():
    logp, behaviour, adv = make_minibatch(3)
    kl = np.random.default_rng(3).exponential(0.1, size=N).astype(np.float32)
    coef = 0.7
    loss, metrics, grad = value_and_grad(ppo_kl_loss, logp, behaviour, adv, kl, coef)
    ratio = np.exp(logp.astype(np.float64) - behaviour)
    np.testing.assert_allclose(loss, -(ratio * adv).mean() + coef * kl.mean(), **TOL)
    np.testing.assert_allclose(grad, -(adv * ratio) / N, **TOL)
    np.testing.assert_allclose(metrics["kl"], kl.mean(), rtol=1e-6)
    kl_grad = jax.grad(lambda k: ppo_kl_loss(logp, behaviour, adv, k, coef)[0])(kl)
    np.testing.assert_allclose(kl_grad, np.full(N, coef / N), rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_spo_value_and_gradient(jit):
    logp, behaviour, adv = make_minibatch(4)
    eps = 0.2
    fn = jax.jit(spo_loss) if jit else spo_loss
    loss, metrics, grad = value_and_grad(fn, logp, behaviour, adv, eps)
    ratio = np.exp(logp.astype(np.float64) - behaviour)
    surrogate = ratio * adv - np.abs(adv) / (2 * eps) * (ratio - 1) ** 2
    dsurrogate = adv * ratio - np.abs(adv) / eps * (ratio - 1) * ratio
    np.testing.assert_allclose(loss, -surrogate.mean(), **TOL)
    np.testing.assert_allclose(grad, -dsurrogate / N, **TOL)
    np.testing.assert_allclose(metrics["clip_fraction"], np.mean(np.abs(ratio - 1) > eps))
    assert {"ratio_mean", "ratio_max"} <= set(metrics)


# ---------------------------------------------------------------------------------------------
# Decoupled PPO
# ---------------------------------------------------------------------------------------------


def test_mismatch_mask_inclusive_bound():
    log2 = np.float32(np.log(np.float32(2.0)))
    old = np.array([0.0, log2, -log2, log2 + 1e-3, -log2 - 1e-3, 5.0], np.float32)
    infer = np.zeros_like(old)
    np.testing.assert_array_equal(mismatch_mask(old, infer, 2.0), [1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(mismatch_mask(old, infer, np.inf), np.ones(6))
    np.testing.assert_array_equal(jax.jit(mismatch_mask)(old, infer, jnp.float32(2.0)), [1, 1, 1, 0, 0, 0])
    assert mismatch_mask(old, infer, 2.0).dtype == jnp.float32


def make_decoupled(seed, n=N):
    rng = np.random.default_rng(seed)
    infer = rng.normal(-1.5, 1.0, size=n)
    old = infer + rng.normal(0.0, 0.5, size=n)  # some beyond the c = 2 mismatch bound
    proximal = old + rng.normal(0.0, 1.0, size=n)  # some weights beyond w_max
    logp = proximal + rng.normal(0.0, 0.3, size=n)
    adv = rng.normal(size=n)
    return tuple(x.astype(np.float32) for x in (logp, proximal, old, infer, adv))


def decoupled_reference(logp, proximal, old, infer, adv, eps, w_max, cap_mode, c):
    f64 = lambda x: x.astype(np.float64)
    logp, proximal, old, infer = map(f64, (logp, proximal, old, infer))
    n = len(logp)
    total, grad = 0.0, np.zeros(n)
    for i in range(n):
        w = np.exp(proximal[i] - old[i])
        if cap_mode == "truncate":
            w = min(w, w_max)
        elif w > w_max:
            w = 0.0
        r_d = np.exp(old[i] - infer[i])
        m = 1.0 if 1 / c <= r_d <= c else 0.0
        r_p = np.exp(logp[i] - proximal[i])
        value, dvalue = clipped_surrogate_reference(np.array(r_p), np.array(adv[i]), eps)
        total += m * r_d * w * value
        grad[i] = -m * r_d * w * dvalue / n
    return -total / n, grad


@pytest.mark.parametrize("cap_mode", ["truncate", "mask"])
@pytest.mark.parametrize("jit", [False, True])
def test_decoupled_value_and_gradient(cap_mode, jit):
    logp, proximal, old, infer, adv = make_decoupled(5)
    eps, w_max, c = 0.2, 2.0, 1.5
    fn = decoupled_ppo_loss
    if jit:
        fn = jax.jit(fn, static_argnames="cap_mode")
    loss, metrics, grad = value_and_grad(
        fn, logp, proximal, old, infer, adv, eps, w_max, cap_mode=cap_mode, mismatch_bound=c
    )
    ref_loss, ref_grad = decoupled_reference(logp, proximal, old, infer, adv, eps, w_max, cap_mode, c)
    np.testing.assert_allclose(loss, ref_loss, **TOL)
    np.testing.assert_allclose(grad, ref_grad, **TOL)

    w = np.exp(proximal.astype(np.float64) - old)
    r_d = np.exp(old.astype(np.float64) - infer)
    r_p = np.exp(logp.astype(np.float64) - proximal)
    kept = (r_d >= 1 / c) & (r_d <= c)
    assert 0 < kept.mean() < 1 and 0 < np.mean(w > w_max) < 1  # both mechanisms exercised
    expected = {
        "clip_fraction": np.mean(np.abs(r_p - 1) > eps),
        "weight_mean": w.mean(),
        "weight_max": w.max(),
        "capped_fraction": np.mean(w > w_max),
        "mismatch_kept_fraction": kept.mean(),
        "mismatch_ratio_mean": r_d.mean(),
        "mismatch_ratio_max": r_d.max(),
        "staleness_ratio_mean": np.exp(logp.astype(np.float64) - old).mean(),
    }
    assert set(expected) <= set(metrics)
    for name, value in expected.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-5, err_msg=name)


def test_decoupled_reduces_to_ppo_clip_when_all_policies_are_behaviour():
    logp, behaviour, adv = make_minibatch(6)
    eps = 0.2
    loss, _, grad = value_and_grad(
        decoupled_ppo_loss, logp, behaviour, behaviour, behaviour, adv, eps, 5.0, "truncate", 2.0
    )
    ref_loss, _, ref_grad = value_and_grad(ppo_clip_loss, logp, behaviour, adv, eps)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6)


def test_loglinear_fresh_decoupled_equals_ppo_clip():
    """docs/proximal.md reduction: A-3PO with d = 0 is coupled PPO-Clip (value and gradient)."""
    logp, behaviour, adv = make_minibatch(7)
    eps = 0.2
    staleness = np.zeros(N, np.int32)

    def a3po(lp):
        prox = loglinear_proximal_logp(lp, behaviour, staleness)
        return decoupled_ppo_loss(lp, prox, behaviour, behaviour, adv, eps, jnp.inf, "truncate", 2.0)

    (loss, _), grad = jax.value_and_grad(a3po, has_aux=True)(jnp.asarray(logp))
    ref_loss, _, ref_grad = value_and_grad(ppo_clip_loss, logp, behaviour, adv, eps)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6)


def test_loglinear_stale_decoupled_gradient_is_rp_times_adv():
    """With a log-linear proximal (d ≥ 1), π_old = π_infer = β and no clipping,
    d loss/d logp_i = −A_i w_i r_p,i / n with w_i = π_prox/β = (π_θ/β)^(1−α) held constant."""
    logp, behaviour, adv = make_minibatch(8, spread=0.05)
    staleness = np.random.default_rng(8).integers(1, 5, size=N)

    def a3po(lp):
        prox = loglinear_proximal_logp(lp, behaviour, staleness)
        return decoupled_ppo_loss(lp, prox, behaviour, behaviour, adv, 10.0, jnp.inf, "truncate", 2.0)

    grad = jax.grad(lambda lp: a3po(lp)[0])(jnp.asarray(logp))
    log_ratio = logp.astype(np.float64) - behaviour
    r_p = np.exp(log_ratio / staleness)
    w = np.exp((1 - 1 / staleness) * log_ratio)
    np.testing.assert_allclose(grad, -adv * w * r_p / N, **TOL)


def test_decoupled_masked_overflow_stays_finite():
    logp, proximal, old, infer, adv = (np.zeros(4, np.float32) for _ in range(5))
    old[0] = 200.0  # r_d overflows float32, sample is masked
    proximal[0] = 200.0
    logp[0] = 200.0
    adv[:] = 1.0
    loss, metrics, grad = value_and_grad(
        decoupled_ppo_loss, logp, proximal, old, infer, adv, 0.2, 5.0, "mask", 2.0
    )
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    np.testing.assert_allclose(loss, -3.0 / 4.0)
    assert float(metrics["mismatch_kept_fraction"]) == 0.75


def test_decoupled_rejects_unknown_cap_mode():
    logp, behaviour, adv = make_minibatch(9, n=4)
    with pytest.raises(ValueError):
        decoupled_ppo_loss(logp, behaviour, behaviour, behaviour, adv, 0.2, 5.0, "clip", 2.0)


# ---------------------------------------------------------------------------------------------
# VACO TV filter
# ---------------------------------------------------------------------------------------------


def tv_filtered_reference(logp, den, adv, budget, scale):
    log_ratio = logp.astype(np.float64) - den
    ratio = np.exp(log_ratio)
    l1 = np.mean(np.abs(ratio - 1))
    tv = 0.5 * l1 if scale == "tv" else l1
    keep = np.array([(tv <= budget) or not (a * lr > 0) for a, lr in zip(adv, log_ratio)], np.float64)
    loss = -np.mean(ratio * adv)  # filtered samples keep their value
    grad = -keep * adv * ratio / len(logp)
    return loss, grad, keep, tv


@pytest.mark.parametrize("scale", ["tv", "l1"])
@pytest.mark.parametrize("budget", [0.02, 0.1, 0.5, np.inf])
@pytest.mark.parametrize("jit", [False, True])
def test_tv_filtered_value_and_gradient(scale, budget, jit):
    logp, behaviour, adv = make_minibatch(10, spread=0.2)
    fn = jax.jit(tv_filtered_pg_loss, static_argnames="scale") if jit else tv_filtered_pg_loss
    loss, metrics, grad = value_and_grad(fn, logp, behaviour, adv, budget, scale=scale)
    ref_loss, ref_grad, ref_keep, ref_tv = tv_filtered_reference(logp, behaviour, adv, budget, scale)
    np.testing.assert_allclose(loss, ref_loss, **TOL)
    np.testing.assert_allclose(grad, ref_grad, **TOL)
    np.testing.assert_allclose(metrics["tv_estimate"], ref_tv, rtol=1e-5)
    np.testing.assert_allclose(metrics["filtered_fraction"], 1 - ref_keep.mean(), atol=1e-7)
    keep, tv = tv_filter_keep(logp - behaviour, adv, budget, scale)
    np.testing.assert_array_equal(keep, ref_keep)
    np.testing.assert_allclose(tv, ref_tv, rtol=1e-5)
    if budget == 0.02:
        assert ref_keep.mean() < 1  # the budget bites


def test_tv_filtered_with_infinite_budget_equals_is_pg():
    logp, behaviour, adv = make_minibatch(11, spread=1.0)
    loss, _, grad = value_and_grad(tv_filtered_pg_loss, logp, behaviour, adv, jnp.inf)
    ref_loss, metrics, ref_grad = value_and_grad(is_pg_loss, logp, behaviour, adv)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6)
    ratio = np.exp(logp.astype(np.float64) - behaviour)
    np.testing.assert_allclose(ref_loss, -np.mean(ratio * adv), **TOL)
    np.testing.assert_allclose(ref_grad, -adv * ratio / N, **TOL)
    np.testing.assert_allclose(metrics["ratio_max"], ratio.max(), rtol=1e-5)


def test_tv_estimate_scales():
    log_ratio = np.random.default_rng(12).normal(0, 0.5, size=N).astype(np.float32)
    l1 = np.mean(np.abs(np.exp(log_ratio.astype(np.float64)) - 1))
    np.testing.assert_allclose(tv_estimate(log_ratio), 0.5 * l1, rtol=1e-5)
    np.testing.assert_allclose(tv_estimate(log_ratio, "l1"), l1, rtol=1e-5)
    with pytest.raises(ValueError):
        tv_estimate(log_ratio, "kl")


def test_tv_filter_is_vmappable_over_budget():
    logp, behaviour, adv = make_minibatch(13, spread=0.3)
    budgets = jnp.array([0.01, 0.05, 0.1, 0.4, jnp.inf])
    fractions = jax.vmap(lambda d: tv_filtered_pg_loss(logp, behaviour, adv, d)[1]["filtered_fraction"])(budgets)
    for d, frac in zip(budgets, fractions):
        ref = 1 - tv_filtered_reference(logp, behaviour, adv, float(d), "tv")[2].mean()
        np.testing.assert_allclose(frac, ref, atol=1e-7)
    assert np.all(np.diff(np.asarray(fractions)) <= 0)  # a larger budget never filters more


# Hypothesis properties -----------------------------------------------------------------------

SIZE = 12
_floats = lambda lo, hi: st.floats(lo, hi, allow_nan=False, allow_subnormal=False, width=32)
_log_ratio = hnp.arrays(np.float32, SIZE, elements=_floats(-1.0, 1.0))
_adv = hnp.arrays(np.float32, SIZE, elements=_floats(-3.0, 3.0))
_mask = hnp.arrays(np.bool_, SIZE)
_budget = st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.2, 0.4, 1.0])
_scale = st.sampled_from(["tv", "l1"])
tv_settings = settings(max_examples=50, deadline=None, database=None)


def _filtered(log_ratio, adv, den_seed, budget, scale):
    den = np.random.default_rng(den_seed).normal(-1.0, 0.5, size=SIZE).astype(np.float32)
    logp = den + log_ratio
    keep, tv = tv_filter_keep(logp - den, adv, budget, scale)
    (loss, metrics), grad = jax.value_and_grad(tv_filtered_pg_loss, has_aux=True)(
        jnp.asarray(logp), den, adv, budget, scale
    )
    return logp - den, np.asarray(keep), float(tv), np.asarray(grad), metrics


@tv_settings
@given(_log_ratio, _adv, st.integers(0, 3), _budget, _scale)
def test_tv_filter_over_budget_keeps_no_growing_sample(log_ratio, adv, den_seed, budget, scale):
    lr, keep, tv, grad, _ = _filtered(log_ratio, adv, den_seed, budget, scale)
    if tv > budget:
        assert not np.any((keep > 0) & (adv * lr > 0))


@tv_settings
@given(_log_ratio, _adv, st.integers(0, 3), _budget, _scale)
def test_tv_filter_within_budget_filters_nothing(log_ratio, adv, den_seed, budget, scale):
    _, keep, tv, _, metrics = _filtered(log_ratio, adv, den_seed, budget, scale)
    if tv <= budget:
        assert np.all(keep == 1)
        assert float(metrics["filtered_fraction"]) == 0.0


@tv_settings
@given(_log_ratio, _adv, _mask, _mask, st.integers(0, 3), _budget, _scale)
def test_tv_filter_keeps_unit_ratio_and_zero_advantage(log_ratio, adv, unit, zero_adv, den_seed, budget, scale):
    log_ratio = np.where(unit, np.float32(0.0), log_ratio)
    adv = np.where(zero_adv, np.float32(0.0), adv)
    lr, keep, _, _, _ = _filtered(log_ratio, adv, den_seed, budget, scale)
    assert np.all(keep[(lr == 0) | (adv == 0)] == 1)


@tv_settings
@given(_log_ratio, _adv, st.integers(0, 3), _budget, _scale)
def test_tv_filter_gradient_is_zero_exactly_on_filtered(log_ratio, adv, den_seed, budget, scale):
    lr, keep, _, grad, _ = _filtered(log_ratio, adv, den_seed, budget, scale)
    assert np.all(grad[keep == 0] == 0.0)
    expected = -adv.astype(np.float64) * np.exp(lr.astype(np.float64)) / SIZE
    np.testing.assert_allclose(grad[keep > 0], expected[keep > 0], rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# IMPALA and value loss
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(N,), (8, 4)])
def test_impala_pg_loss(shape):
    rng = np.random.default_rng(14)
    logp = rng.normal(-1.0, 1.0, size=shape).astype(np.float32)
    pg = rng.normal(size=shape).astype(np.float32)
    loss, metrics, grad = value_and_grad(jax.jit(impala_pg_loss), logp, pg)
    np.testing.assert_allclose(loss, -np.mean(pg.astype(np.float64) * logp), **TOL)
    np.testing.assert_allclose(grad, -pg / pg.size, **TOL)
    adv_grad = jax.grad(lambda a: impala_pg_loss(logp, a)[0])(pg)
    np.testing.assert_array_equal(adv_grad, 0.0)
    np.testing.assert_allclose(metrics["pg_advantage_mean"], pg.mean(), rtol=1e-5, atol=1e-7)


def test_value_loss_unclipped():
    rng = np.random.default_rng(15)
    values, targets = (rng.normal(size=N).astype(np.float32) for _ in range(2))
    (loss, metrics), grads = jax.value_and_grad(value_loss, argnums=(0, 1), has_aux=True)(values, targets)
    err = values.astype(np.float64) - targets
    np.testing.assert_allclose(loss, 0.5 * np.mean(err**2), **TOL)
    np.testing.assert_allclose(grads[0], err / N, **TOL)
    np.testing.assert_array_equal(grads[1], 0.0)
    np.testing.assert_allclose(metrics["value_loss"], loss)


def test_value_loss_clipped():
    rng = np.random.default_rng(16)
    old = rng.normal(size=N).astype(np.float32)
    values = (old + rng.normal(0.0, 0.5, size=N)).astype(np.float32)
    targets = rng.normal(size=N).astype(np.float32)
    eps = 0.2
    fn = jax.jit(lambda v, t, o, e: value_loss(v, t, o, e))
    (loss, metrics), grad = jax.value_and_grad(fn, has_aux=True)(values, targets, old, eps)
    v, t, o = (x.astype(np.float64) for x in (values, targets, old))
    delta = v - o
    clipped = o + np.clip(delta, -eps, eps)
    unclipped_err, clipped_err = (v - t) ** 2, (clipped - t) ** 2
    np.testing.assert_allclose(loss, 0.5 * np.mean(np.maximum(unclipped_err, clipped_err)), **TOL)
    # d/dV: the unclipped branch when it is the max; the clipped one only inside the clip range.
    ref_grad = np.where(
        unclipped_err >= clipped_err, v - t, np.where(np.abs(delta) < eps, clipped - t, 0.0)
    ) / N
    np.testing.assert_allclose(grad, ref_grad, **TOL)
    np.testing.assert_allclose(metrics["value_clip_fraction"], np.mean(np.abs(delta) > eps))


def test_tv_and_ratio_means_stay_finite_when_a_ratio_overflows_and_keep_their_bits_otherwise():
    """A log-ratio of 90 overflows exp in float32; the diagnostic is then the same mean computed in log
    space (never inf, which would poison every mean over it); ordinary inputs give the direct formula's
    bits."""
    import vaco_jax.core.objectives as obj

    big = jnp.asarray([90.0, 0.0, -1.0, 2.0], jnp.float32)  # e^90 overflows float32; its mean over 4 does not
    want = np.mean(np.abs(np.exp(np.float64(big)) - 1.0))
    got = float(obj.tv_estimate(big, "l1"))
    assert np.isfinite(got) and abs(got / want - 1) < 1e-5
    assert abs(float(obj.tv_estimate(big)) / (0.5 * want) - 1) < 1e-5
    assert abs(float(obj.mean_exp(big)) / np.mean(np.exp(np.float64(big))) - 1) < 1e-5
    small = jax.random.normal(jax.random.PRNGKey(0), (257,)) * 0.3
    direct = jnp.mean(jnp.abs(jnp.exp(small) - 1.0))
    assert np.asarray(obj.mean_abs_ratio_minus_one(small)).tobytes() == np.asarray(direct).tobytes()
    assert np.asarray(obj.mean_exp(small)).tobytes() == np.asarray(jnp.mean(jnp.exp(small))).tobytes()
    assert float(obj.tv_estimate(jnp.zeros(5))) == 0.0


def test_a_joint_clip_with_two_adams_is_one_optimiser_over_both_networks():
    """grad_clip='joint': both networks' gradients clipped together, then each network's own optimiser
    (whose clip then does nothing): the same steps as one clip + Adam over the joined tree (CleanRL)."""
    import optax

    from vaco_jax.core.update import apply_updates, joint_clip, make_optimizer

    rng = np.random.default_rng(0)
    params = {"policy": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32),
              "value": jnp.asarray(rng.normal(size=(4,)), jnp.float32)}
    opt = make_optimizer(0.5, 1e-5)
    one = optax.chain(optax.clip_by_global_norm(0.5), optax.scale_by_adam(eps=1e-5))
    ours = dict(params)
    states = {k: opt.init(v) for k, v in params.items()}
    ref, ref_state = dict(params), one.init(params)
    for step in range(4):
        grads = {"policy": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32),
                 "value": jnp.asarray(rng.normal(size=(4,)) * 10.0 ** step, jnp.float32)}  # the critic's grows
        clipped = joint_clip(grads, 0.5)
        for k in ours:
            ours[k], states[k] = apply_updates(opt, states[k], clipped[k], ours[k], 3e-4)
        updates, ref_state = one.update(grads, ref_state, ref)
        ref = optax.apply_updates(ref, jax.tree.map(lambda u: -3e-4 * u, updates))
    for k in ours:
        np.testing.assert_allclose(np.asarray(ours[k]), np.asarray(ref[k]), rtol=1e-6, atol=1e-7)
    assert float(optax.global_norm(joint_clip(grads, 0.5))) <= 0.5 + 1e-6


def test_grad_clip_is_a_checked_setting_and_joint_clipping_changes_training():
    from conftest import tiny_config
    from vaco_jax.core.config import ConfigError, make_traced
    from vaco_jax.core.train import make_train

    with pytest.raises(ConfigError, match="grad_clip='both' is not valid; allowed values: per_network, joint"):
        tiny_config(grad_clip="both")
    finals = {}
    for mode in ("per_network", "joint"):
        c = tiny_config(grad_clip=mode, max_grad_norm=0.05, num_evals=1)
        t = make_train(c)
        state = jax.jit(t.init)(jax.random.PRNGKey(0), make_traced(c))
        state, _ = jax.jit(t.train_chunk)(state, make_traced(c))
        finals[mode] = np.concatenate([np.ravel(x) for x in jax.tree.leaves(state.learner.policy_params)])
    assert np.all(np.isfinite(finals["joint"])) and not np.array_equal(finals["joint"], finals["per_network"])
