"""GAE and V-trace (docs/estimators.md) against slow numpy references, plus the reductions the docs name."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.core.advantages import VTraceOutput, gae, vtrace, vtrace_outputs

T = 13
SHAPES = [(T,), (T, 4)]
TOL = dict(rtol=1e-4, atol=1e-5)


def make_batch(shape, seed, consistent=True, p_term=0.15, p_trunc=0.15, log_rho_scale=1.0):
    """Random time-major data with terminations and truncations.

    With ``consistent=True`` the critic inputs come from one stream: ``V'_t = V_{t+1}`` unless step
    ``t`` ends an episode (then ``V'_t`` is the value of a terminal/truncated observation that no
    later step sees).
    """
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=shape)
    term = (rng.random(shape) < p_term).astype(np.float32)
    trunc = (rng.random(shape) < p_trunc).astype(np.float32)
    values = rng.normal(size=shape)
    if consistent:
        tail = rng.normal(size=shape[1:])[None]
        next_values = np.concatenate([values[1:], tail], axis=0)
        ended = np.maximum(term, trunc) > 0
        next_values = np.where(ended, rng.normal(size=shape), next_values)
    else:
        next_values = rng.normal(size=shape)
    log_rhos = log_rho_scale * rng.normal(size=shape)
    f32 = lambda x: np.asarray(x, np.float32)
    return tuple(f32(x) for x in (rewards, values, next_values, term, trunc, log_rhos))


# ---------------------------------------------------------------------------------------------
# Slow references (float64, explicit Python loops over time and over the batch)
# ---------------------------------------------------------------------------------------------


def _columns(*arrays):
    """Original shape, and the arrays as float64 ``[T, columns]`` (one column per stream)."""
    shape = arrays[0].shape
    flat = [np.asarray(a, np.float64).reshape(shape[0], -1) for a in arrays]
    return shape, flat


def gae_reference(r, v, vn, term, trunc, gamma, lam):
    shape, (r, v, vn, term, trunc) = _columns(r, v, vn, term, trunc)
    adv = np.zeros_like(r)
    for n in range(r.shape[1]):
        next_adv = 0.0
        for t in reversed(range(r.shape[0])):
            delta = r[t, n] + gamma * (1 - term[t, n]) * vn[t, n] - v[t, n]
            cont = (1 - term[t, n]) * (1 - trunc[t, n])
            next_adv = delta + gamma * lam * cont * next_adv
            adv[t, n] = next_adv
    return adv.reshape(shape), (adv + v).reshape(shape)


def vtrace_reference(r, v, vn, term, trunc, log_rhos, gamma, lam, rho_bar, c_bar, rho_bar_pg):
    """IMPALA's explicit-sum form v_s = V_s + Σ_{t≥s} γ^{t−s} (Π_{i<t} cont_i c_i) δ_t,
    then q_t and the advantages straight from docs/estimators.md."""
    shape, (r, v, vn, term, trunc, log_rhos) = _columns(r, v, vn, term, trunc, log_rhos)
    n_steps, n_cols = r.shape
    targets = np.zeros_like(r)
    q = np.zeros_like(r)
    for n in range(n_cols):
        rho = np.exp(log_rhos[:, n])
        g = gamma * (1 - term[:, n])
        cont = (1 - term[:, n]) * (1 - trunc[:, n])
        delta = np.minimum(rho_bar, rho) * (r[:, n] + g * vn[:, n] - v[:, n])
        c = lam * np.minimum(c_bar, rho)
        for s in range(n_steps):
            total, trace = 0.0, 1.0
            for t in range(s, n_steps):
                total += trace * delta[t]
                trace *= gamma * cont[t] * c[t]
            targets[s, n] = v[s, n] + total
        for t in range(n_steps):
            v_next = targets[t + 1, n] if t + 1 < n_steps else vn[n_steps - 1, n]
            boot = (1 - trunc[t, n]) * (lam * v_next + (1 - lam) * vn[t, n]) + trunc[t, n] * vn[t, n]
            q[t, n] = r[t, n] + g[t] * boot
    rhos = np.exp(log_rhos)
    adv = q - v
    pg = np.minimum(rho_bar_pg, rhos) * adv
    return {
        "value_targets": targets.reshape(shape),
        "q_values": q.reshape(shape),
        "advantages": adv.reshape(shape),
        "pg_advantages": pg.reshape(shape),
        "rhos": rhos.reshape(shape),
    }


# ---------------------------------------------------------------------------------------------
# GAE
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.5), (1.0, 1.0)])
def test_gae_matches_reference(shape, gamma, lam):
    r, v, vn, term, trunc, _ = make_batch(shape, seed=1, consistent=False)
    adv, targets = gae(r, v, vn, term, trunc, gamma, lam)
    ref_adv, ref_targets = gae_reference(r, v, vn, term, trunc, gamma, lam)
    assert adv.shape == shape and adv.dtype == jnp.float32
    np.testing.assert_allclose(adv, ref_adv, **TOL)
    np.testing.assert_allclose(targets, ref_targets, **TOL)


@pytest.mark.parametrize("shape", SHAPES)
def test_gae_jit_traced_gamma_lambda_and_bool_flags(shape):
    r, v, vn, term, trunc, _ = make_batch(shape, seed=2)
    jitted = jax.jit(gae)
    adv, targets = jitted(r, v, vn, term > 0, trunc > 0, jnp.float32(0.97), jnp.float32(0.8))
    ref_adv, ref_targets = gae_reference(r, v, vn, term, trunc, 0.97, 0.8)
    np.testing.assert_allclose(adv, ref_adv, **TOL)
    np.testing.assert_allclose(targets, ref_targets, **TOL)
    # A grid over gamma is a vmap.
    gammas = jnp.array([0.9, 0.99], jnp.float32)
    adv_grid, _ = jax.vmap(lambda g: gae(r, v, vn, term, trunc, g, 0.8))(gammas)
    for i, g in enumerate([0.9, 0.99]):
        np.testing.assert_allclose(adv_grid[i], gae_reference(r, v, vn, term, trunc, g, 0.8)[0], **TOL)


def test_gae_truncation_bootstraps_and_termination_does_not():
    r = np.zeros(2, np.float32)
    v = np.zeros(2, np.float32)
    vn = np.array([5.0, 7.0], np.float32)
    flags_none = np.zeros(2, np.float32)
    one_at_0 = np.array([1.0, 0.0], np.float32)
    adv_trunc, _ = gae(r, v, vn, flags_none, one_at_0, 0.5, 1.0)
    adv_term, _ = gae(r, v, vn, one_at_0, flags_none, 0.5, 1.0)
    np.testing.assert_allclose(adv_trunc, [0.5 * 5.0, 0.5 * 7.0])  # no recursion across the cut
    np.testing.assert_allclose(adv_term, [0.0, 0.5 * 7.0])


# ---------------------------------------------------------------------------------------------
# V-trace
# ---------------------------------------------------------------------------------------------

VTRACE_CONSTANTS = [
    dict(gamma=0.99, lambda_=0.95, rho_bar=1.0, c_bar=1.0, rho_bar_pg=1.0),
    dict(gamma=0.9, lambda_=0.7, rho_bar=1.5, c_bar=0.8, rho_bar_pg=1.2),
    dict(gamma=0.95, lambda_=1.0, rho_bar=0.7, c_bar=2.0, rho_bar_pg=np.inf),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("consts", VTRACE_CONSTANTS)
def test_vtrace_outputs_match_reference(shape, consts):
    r, v, vn, term, trunc, log_rhos = make_batch(shape, seed=3, consistent=False)
    # Make sure the truncation constants bite from both sides.
    rhos = np.exp(log_rhos)
    assert (rhos > 2.0).any() and (rhos < 0.7).any()
    out = vtrace_outputs(r, v, vn, term, trunc, log_rhos, **consts)
    assert isinstance(out, VTraceOutput)
    ref = vtrace_reference(r, v, vn, term, trunc, log_rhos, consts["gamma"], consts["lambda_"],
                           consts["rho_bar"], consts["c_bar"], consts["rho_bar_pg"])
    for name, expected in ref.items():
        got = getattr(out, name)
        assert got.shape == shape and got.dtype == jnp.float32, name
        np.testing.assert_allclose(got, expected, err_msg=name, **TOL)


@pytest.mark.parametrize("shape", SHAPES)
def test_vtrace_jit_with_traced_constants(shape):
    r, v, vn, term, trunc, log_rhos = make_batch(shape, seed=4)
    consts = VTRACE_CONSTANTS[1]
    traced = {k: jnp.float32(x) for k, x in consts.items()}
    targets, pg = jax.jit(vtrace)(r, v, vn, term, trunc, log_rhos, **traced)
    ref = vtrace_reference(r, v, vn, term, trunc, log_rhos, *consts.values())
    np.testing.assert_allclose(targets, ref["value_targets"], **TOL)
    np.testing.assert_allclose(pg, ref["pg_advantages"], **TOL)


def test_vtrace_wrapper_is_thin():
    r, v, vn, term, trunc, log_rhos = make_batch((T, 3), seed=5)
    out = vtrace_outputs(r, v, vn, term, trunc, log_rhos, 0.98, 0.9, 1.2, 0.9, 1.1)
    targets, pg = vtrace(r, v, vn, term, trunc, log_rhos, 0.98, 0.9, 1.2, 0.9, 1.1)
    np.testing.assert_array_equal(targets, out.value_targets)
    np.testing.assert_array_equal(pg, out.pg_advantages)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.8, 0.6)])
def test_vtrace_with_rho_one_equals_gae(shape, gamma, lam):
    """docs/estimators.md required reduction: β = π_T (ρ ≡ 1) gives GAE exactly."""
    r, v, vn, term, trunc, _ = make_batch(shape, seed=6, consistent=True)
    zeros = np.zeros(shape, np.float32)
    out = vtrace_outputs(r, v, vn, term, trunc, zeros, gamma, lam)
    adv, targets = gae(r, v, vn, term, trunc, gamma, lam)
    np.testing.assert_allclose(out.value_targets, targets, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.advantages, adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages, adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.q_values - v, adv, rtol=1e-5, atol=1e-5)


def test_vtrace_value_targets_equal_gae_even_with_inconsistent_critic():
    r, v, vn, term, trunc, _ = make_batch((T, 3), seed=7, consistent=False)
    out = vtrace_outputs(r, v, vn, term, trunc, np.zeros_like(r), 0.97, 0.9)
    _, targets = gae(r, v, vn, term, trunc, 0.97, 0.9)
    np.testing.assert_allclose(out.value_targets, targets, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flag", ["term", "trunc"])
def test_vtrace_does_not_leak_across_episode_end(flag):
    """Step t ends an episode: nothing at steps > t may change any output at steps ≤ t."""
    r, v, vn, term, trunc, log_rhos = make_batch((T,), seed=8, p_term=0.0, p_trunc=0.0)
    cut = 5
    if flag == "term":
        term[cut] = 1.0
    else:
        trunc[cut] = 1.0
    fn = functools.partial(vtrace_outputs, gamma=0.99, lambda_=0.9, rho_bar=1.3, c_bar=1.1)
    base = fn(r, v, vn, term, trunc, log_rhos)
    r2, v2, vn2, lr2 = (x.copy() for x in (r, v, vn, log_rhos))
    rng = np.random.default_rng(0)
    for x in (r2, v2, vn2, lr2):
        x[cut + 1:] = rng.normal(size=T - cut - 1)
    perturbed = fn(r2, v2, vn2, term, trunc, lr2)
    for a, b in zip(base, perturbed):
        np.testing.assert_array_equal(np.asarray(a)[: cut + 1], np.asarray(b)[: cut + 1])


def test_vtrace_outputs_carry_no_gradient():
    r, v, vn, term, trunc, log_rhos = make_batch((T,), seed=9)

    def total(values, log_rhos):
        out = vtrace_outputs(r, values, vn, term, trunc, log_rhos, 0.99, 0.9)
        return sum(jnp.sum(x) for x in out)

    grads = jax.grad(total, argnums=(0, 1))(v, log_rhos)
    for g in grads:
        np.testing.assert_array_equal(g, 0.0)
