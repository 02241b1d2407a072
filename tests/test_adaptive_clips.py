"""BAPO's adaptive clip bounds, SAT's staleness-contracted clip and the lag-adaptive PPO-Clip
(docs/corrections.md C7, C8; docs/adaptive.md): each against a float64 numpy reference written from the
formula (the bounds' search as the paper's loop, the losses through the update step's wiring, values and
finite-difference gradients), one property per piece that a plausible wrong version breaks, shown to
break on that mutant here, and the knobs' one-line errors.
"""

import csv
import glob
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from test_composition import LOG_2PI, _logp, jax_loss_and_grad, make_batch, reference_grad
from vaco_jax.core import objectives as obj
from vaco_jax.core.config import ConfigError
from vaco_jax.core.methods import METHODS, make_method

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAPO_DEFAULTS = dict(target=0.4, low_start=0.6, low_max=0.9, low_step=0.02, high_start=1.2, high_max=3.0,
                     high_step=0.05)


# ----------------------------------------------------------------------------- slow references

def bapo_share_reference(r, a, c_low, c_high):
    """The paper's eq. 8, term by term: the positive-advantage part of the clipped surrogate over the
    sum of every sample's |clipped surrogate| (1 when that sum is 0)."""
    num = den = 0.0
    for ri, ai in zip(r, a):
        term = min(ri * ai, min(max(ri, c_low), c_high) * ai)
        if ai > 0:
            num += min(ri * ai, min(max(ri, 0.0), c_high) * ai)
        den += abs(term)
    return num / den if den > 0 else 1.0


def bapo_bounds_reference(log_ratio, adv, target, low_start, low_max, low_step, high_start, high_max, high_step):
    """The paper's Algorithm 1 (lines 9-17), literally, in float64."""
    r = np.exp(np.asarray(log_ratio, np.float64))
    a = np.asarray(adv, np.float64)
    c_low, c_high = low_start, high_start
    tol = 1e-9
    while bapo_share_reference(r, a, c_low, c_high) < target and c_low + low_step <= low_max + tol:
        if c_high + high_step <= high_max + tol:
            c_high += high_step
        else:
            c_low += low_step
    return c_low, c_high


def sat_bounds_reference(d, eps, quantile, exponent):
    x = np.abs(np.asarray(d, np.float64))
    q = np.quantile(x, quantile)
    lower, upper = np.full(x.shape, 1 - eps), np.full(x.shape, 1 + eps)
    for i, (di, xi) in enumerate(zip(d, x)):
        if q > 0 and xi > q:
            c = 1 / (1 + ((xi - q) / q) ** exponent)
            if di > 0:
                upper[i] = 1 + eps * c
            elif di < 0:
                lower[i] = 1 - eps * c
    return lower, upper


_BAPO_BOUNDS = {}


def reference_loss(method, b, mu, mu_sg, entropy_coef=0.01):
    """The documented loss in float64; only ``mu`` is differentiated, bounds come from ``mu_sg``."""
    sur = method.surrogate
    beh = b.behaviour_logp
    logp = _logp(b.action, mu, b.log_std)
    logp_sg = _logp(b.action, mu_sg, b.log_std)
    a = (b.adv - b.adv.mean()) / (b.adv.std() + 1e-8)
    r = np.exp(logp - beh)
    if method.name == "bapo":  # the bounds read only mu_sg: searched once per batch and settings
        key = ((logp_sg - beh).tobytes(), a.tobytes(), str(sur))
        if key not in _BAPO_BOUNDS:
            _BAPO_BOUNDS[key] = bapo_bounds_reference(logp_sg - beh, a, sur.positive_share_target, sur.clip_low_start,
                                                      sur.clip_low_max, sur.clip_low_step, sur.clip_high_start,
                                                      sur.clip_high_max, sur.clip_high_step)
        c_low, c_high = _BAPO_BOUNDS[key]
        lower, upper = np.full(r.shape, c_low), np.full(r.shape, c_high)
    elif method.name == "sat":
        lower, upper = sat_bounds_reference(logp_sg - beh, sur.clip_epsilon, sur.staleness_quantile,
                                            sur.contraction_exponent)
    elif method.name == "ppo_clip_adaptive":
        age = np.mean(b.staleness)
        eps = sur.clip_epsilon + (sur.clip_epsilon_lagged - sur.clip_epsilon) * min(1.0, age / sur.saturation_staleness)
        lower, upper = np.full(r.shape, 1 - eps), np.full(r.shape, 1 + eps)
    else:
        raise AssertionError(method.name)
    loss = -np.mean(np.minimum(r * a, np.clip(r, lower, upper) * a))
    entropy = np.sum(b.log_std + 0.5 * (LOG_2PI + 1))
    return loss - entropy_coef * entropy


CASES = [
    ("bapo", {}), ("bapo", {"positive_share_target": 0.46}), ("bapo", {"positive_share_target": 0.95}),
    ("sat", {}), ("sat", {"staleness_quantile": 0.5, "contraction_exponent": 1.0, "clip_epsilon": 0.3}),
    ("ppo_clip_adaptive", {}), ("ppo_clip_adaptive", {"saturation_staleness": 9.0}),
]


@pytest.mark.parametrize("name, options", CASES, ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in CASES])
def test_each_loss_and_gradient_equal_the_numpy_reference(name, options):
    method = make_method(name, **options)
    batch = make_batch(seed=3 + len(options), spread=0.35)
    loss, grad, metrics = jax_loss_and_grad(method, batch)
    np.testing.assert_allclose(loss, reference_loss(method, batch, batch.mu, batch.mu), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(grad, reference_grad(method, batch, loss=reference_loss), rtol=2e-3, atol=2e-6)
    assert np.abs(grad).max() > 1e-4
    assert 0 < metrics["clip_fraction"] < 1  # the bounds really bind in these cases
    if name == "sat":
        assert 0 < metrics["gated_fraction"] < 1


def test_the_bapo_cases_stop_at_each_stage_of_the_search():
    """The three BAPO cases above end the search at its three stages: at the start, on the way up of
    c_high, and with both bounds at their maxima (so the comparison covers every branch of the loop)."""
    stops = []
    for options in ({}, {"positive_share_target": 0.46}, {"positive_share_target": 0.95}):
        _, _, m = jax_loss_and_grad(make_method("bapo", **options), make_batch(seed=3 + len(options), spread=0.35))
        stops.append((round(float(m["clip_low"]), 4), round(float(m["clip_high"]), 4)))
    assert stops[0] == (0.6, 1.2)
    assert stops[1][0] == 0.6 and 1.2 < stops[1][1] < 3.0
    assert stops[2] == (0.9, 3.0)


# ----------------------------------------------------------------------------- BAPO's search

def _bounds(fn, lr, adv, **kw):
    c_low, c_high, share = fn(jnp.asarray(lr, jnp.float32), jnp.asarray(adv, jnp.float32), **{**BAPO_DEFAULTS, **kw})
    return float(c_low), float(c_high), float(share)


@pytest.mark.parametrize("seed", range(6))
def test_bapo_bounds_equal_the_papers_loop_on_random_minibatches(seed):
    rng = np.random.default_rng(seed)
    lr = rng.normal(scale=0.4, size=64).astype(np.float32)
    adv = (rng.normal(size=64) - 0.4 + 0.15 * seed).astype(np.float32)
    target = float(rng.uniform(0.3, 0.8))
    c_low, c_high, share = _bounds(obj.balanced_clip_bounds, lr, adv, target=target)
    ref_low, ref_high = bapo_bounds_reference(lr, adv, target, 0.6, 0.9, 0.02, 1.2, 3.0, 0.05)
    np.testing.assert_allclose([c_low, c_high], [ref_low, ref_high], atol=1e-5)
    ref_share = bapo_share_reference(np.exp(lr.astype(np.float64)), adv.astype(np.float64), ref_low, ref_high)
    np.testing.assert_allclose(share, ref_share, rtol=1e-5)


def check_bapo_raises_the_upper_bound_first(bounds_fn):
    """Advantages all positive except one large negative: raising c_high lifts the positive share past
    ρ₀ = 0.5 before c_high's maximum, so c_low stays at its start (Algorithm 1 raises c_low only once
    c_high can go no higher); a target out of reach leaves both at their maxima."""
    lr = np.log(np.asarray([1.5, 1.8, 2.5, 0.8, 1.0], np.float32))
    adv = np.asarray([1.0, 1.0, 1.0, -5.5, 0.0], np.float32)  # the share reaches ½ at c_high = 1.5
    c_low, c_high, share = _bounds(bounds_fn, lr, adv, target=0.5)
    assert c_low == pytest.approx(0.6) and c_high == pytest.approx(1.5) and share >= 0.5
    # one step less of c_high would miss the target: the search stops at the first bound that meets it
    below = bapo_share_reference(np.exp(lr.astype(np.float64)), adv.astype(np.float64), 0.6, c_high - 0.05)
    assert below < 0.5
    c_low, c_high, _ = _bounds(bounds_fn, lr, adv, target=0.99)
    assert (c_low, c_high) == (pytest.approx(0.9), pytest.approx(3.0))


def test_bapo_raises_the_upper_bound_first_and_stops_at_the_first_bound_that_meets_the_target():
    check_bapo_raises_the_upper_bound_first(obj.balanced_clip_bounds)


def test_a_bapo_search_raising_the_lower_bound_first_is_caught():
    """The mutant: the public verl recipe's order (c_low first, then c_high)."""

    def low_first(log_ratio, advantages, target, low_start, low_max, low_step, high_start, high_max, high_step):
        r = np.exp(np.asarray(log_ratio, np.float64))
        a = np.asarray(advantages, np.float64)
        c_low, c_high = low_start, high_start
        while bapo_share_reference(r, a, c_low, c_high) < target and c_low + low_step <= low_max + 1e-9:
            c_low += low_step
        while bapo_share_reference(r, a, c_low, c_high) < target and c_high + high_step <= high_max + 1e-9:
            c_high += high_step
        return c_low, c_high, bapo_share_reference(r, a, c_low, c_high)

    with pytest.raises(AssertionError):
        check_bapo_raises_the_upper_bound_first(low_first)


def test_bapo_with_a_reached_target_is_ppo_clip_with_the_start_bounds():
    lr = np.random.default_rng(1).normal(scale=0.3, size=32).astype(np.float32)
    adv = np.abs(np.random.default_rng(2).normal(size=32)).astype(np.float32)  # all positive: share 1
    z = jnp.zeros(32)
    loss, m = obj.balanced_clip_loss(jnp.asarray(lr), z, jnp.asarray(adv), 0.4, 0.6, 0.9, 0.02, 1.2, 3.0, 0.05)
    ratio = np.exp(lr.astype(np.float64))
    np.testing.assert_allclose(float(loss), -np.mean(np.minimum(ratio * adv, np.clip(ratio, 0.6, 1.2) * adv)),
                               rtol=1e-5)
    assert float(m["positive_share"]) == 1.0 and float(m["clip_high"]) == pytest.approx(1.2)


# ----------------------------------------------------------------------------- SAT

def check_sat_contracts_only_the_outward_end_of_the_stalest_samples(loss_fn):
    """Per-sample gradients against PPO-Clip's: a sample below the gate keeps PPO's gradient; a stale
    sample whose ratio is inside PPO's interval but beyond its contracted end on the side it is pushed
    (A > 0 and r > 1, or A < 0 and r < 1) loses its gradient; pushed back toward 1 it keeps it."""
    eps = 0.2
    # 18 near-fresh samples fix the 0.9 quantile's gate near 0.05; the last two are stale (|d| = 0.15)
    fresh = np.linspace(-0.05, 0.05, 18)
    lr = np.concatenate([fresh, [0.15, -0.15]]).astype(np.float32)
    z = jnp.zeros(lr.size)

    def grads(adv):
        adv = jnp.asarray(adv, jnp.float32)
        g_sat = jax.jit(jax.grad(lambda lp: loss_fn(lp, z, adv, eps, 0.9, 2.0)[0]))(jnp.asarray(lr))
        g_ppo = jax.jit(jax.grad(lambda lp: obj.ppo_clip_loss(lp, z, adv, eps)[0]))(jnp.asarray(lr))
        return np.asarray(g_sat), np.asarray(g_ppo)

    c, q = obj.staleness_contraction(jnp.asarray(lr), 0.9, 2.0)
    assert float(c[-1]) < 1 and np.exp(0.15) > 1 + eps * float(c[-2])  # the stale ratios pass their contracted end
    outward = np.concatenate([np.ones(18), [1.0, -1.0]])  # stale: r > 1 with A > 0, r < 1 with A < 0
    g_sat, g_ppo = grads(outward)
    np.testing.assert_allclose(g_sat[:18], g_ppo[:18], rtol=1e-6)
    assert g_ppo[18] != 0 and g_ppo[19] != 0  # PPO-Clip (ε = 0.2) still moves them ...
    assert g_sat[18] == 0 and g_sat[19] == 0  # ... SAT has clipped them
    g_sat, g_ppo = grads(-outward)  # pushed back toward 1: the contracted end does not bind
    np.testing.assert_allclose(g_sat, g_ppo, rtol=1e-6)


def test_sat_contracts_only_the_outward_end_of_the_stalest_samples():
    check_sat_contracts_only_the_outward_end_of_the_stalest_samples(obj.staleness_clip_loss)


def test_a_sat_contracting_the_other_end_is_caught():
    """The mutant: the contracted end chosen by the opposite sign of the log-ratio."""

    def flipped(logp, behaviour_logp, advantages, clip_epsilon, quantile, exponent):
        d = jax.lax.stop_gradient(logp - behaviour_logp)
        c, _ = obj.staleness_contraction(d, quantile, exponent)
        lower = 1 - clip_epsilon * jnp.where(d > 0, c, 1.0)
        upper = 1 + clip_epsilon * jnp.where(d < 0, c, 1.0)
        r = jnp.exp(logp - behaviour_logp)
        return -jnp.mean(jnp.minimum(r * advantages, jnp.clip(r, lower, upper) * advantages)), {}

    with pytest.raises(AssertionError):
        check_sat_contracts_only_the_outward_end_of_the_stalest_samples(flipped)


def test_sat_contracting_the_end_on_the_advantages_side_is_the_same_loss():
    """The contracted end binds only where log r and A share a sign, so choosing the end by the sign of
    A (the issue's wording) gives the same loss and gradient as by the sign of log r (the paper's)."""
    rng = np.random.default_rng(7)
    lr = jnp.asarray(rng.normal(scale=0.3, size=50), jnp.float32)
    adv = jnp.asarray(rng.normal(size=50), jnp.float32)
    z = jnp.zeros(50)
    d = jax.lax.stop_gradient(lr)
    c, _ = obj.staleness_contraction(d, 0.8, 2.0)

    def by_advantage(lp):
        lower = 1 - 0.2 * jnp.where(adv < 0, c, 1.0)
        upper = 1 + 0.2 * jnp.where(adv > 0, c, 1.0)
        r = jnp.exp(lp)
        return -jnp.mean(jnp.minimum(r * adv, jnp.clip(r, lower, upper) * adv))

    by_ratio = lambda lp: obj.staleness_clip_loss(lp, z, adv, 0.2, 0.8, 2.0)[0]  # noqa: E731
    np.testing.assert_allclose(jax.jit(by_ratio)(lr), jax.jit(by_advantage)(lr), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(by_ratio))(lr), jax.jit(jax.grad(by_advantage))(lr), rtol=1e-6,
                               atol=1e-9)


def test_sat_contraction_is_one_at_the_gate_half_at_twice_it_and_off_when_the_gate_is_zero():
    lr = jnp.asarray([0.0] * 9 + [-0.1, 0.2], jnp.float32)
    c, q = obj.staleness_contraction(lr, 0.9, 2.0)  # q: 0.9 quantile of |d| (the 10th of 11 sorted) = 0.1
    assert float(q) == pytest.approx(0.1, rel=1e-5)
    np.testing.assert_allclose(np.asarray(c), [1.0] * 10 + [0.5], rtol=1e-5)
    c0, q0 = obj.staleness_contraction(jnp.zeros(10), 0.9, 2.0)
    assert float(q0) == 0 and np.all(np.asarray(c0) == 1.0)


# ----------------------------------------------------------------------------- the lag-adaptive clip range

def _stage1_surface():
    """PPO-Clip's stage-1 surface rows (Hopper-v4, Walker2d-v4): per lag depth, the measured mean
    staleness of its runs and the per-lag optimum the study's rule picked (``choices.csv``)."""
    rows = []
    for path in glob.glob(os.path.join(ROOT, "results", "steplag", "surface", "*", "ppo_clip", "**", "scores.csv"),
                          recursive=True):
        with open(path) as f:
            rows += list(csv.DictReader(line for line in f if not line.startswith("#")))
    with open(os.path.join(ROOT, "results", "steplag", "choices.csv")) as f:
        choice = next(r for r in csv.DictReader(f) if r["surface"] == "ppo_clip")
    optimum = {int(k.strip()[2:]): float(v) for k, v in (p.split(":") for p in choice["per_lag"].split(";"))}
    age = {b: np.mean([float(r["mean_mean_staleness"]) for r in rows if int(r["lag_depth"]) == b]) for b in optimum}
    return optimum, age


def test_the_adaptive_rule_maps_stage_one_staleness_to_the_surfaces_per_lag_optima():
    """docs/adaptive.md's constants, checked against the committed stage-1 rows they come from: at each
    lag depth's measured mean staleness the rule gives that depth's per-lag optimum of PPO-Clip's ε."""
    optimum, age = _stage1_surface()
    assert optimum == {1: 0.2, 8: 0.6, 32: 0.6}
    assert age[1] == 0 and age[8] == pytest.approx(3.489, abs=1e-3) and age[32] == pytest.approx(15.212, abs=1e-3)
    sur = make_method("ppo_clip_adaptive").surrogate
    for b, eps_star in optimum.items():
        staleness = jnp.full((64,), age[b], jnp.float32)
        eps, _ = obj.lag_adaptive_epsilon(staleness, sur.clip_epsilon, sur.clip_epsilon_lagged,
                                          sur.saturation_staleness)
        assert float(eps) == pytest.approx(eps_star, abs=1e-6), b


def test_the_adaptive_clip_range_is_linear_then_flat_in_the_mean_staleness():
    ages = np.asarray([0.0, 0.55, 1.1, 2.2, 4.0, 30.0])
    eps = [float(obj.lag_adaptive_epsilon(jnp.full((8,), a), 0.2, 0.6, 2.2)[0]) for a in ages]
    np.testing.assert_allclose(eps, [0.2, 0.3, 0.4, 0.6, 0.6, 0.6], rtol=1e-6)
    # the minibatch mean of integer ages: 7 samples at 0 and one at 8 read as 1 version
    ints = jnp.asarray([0] * 7 + [8], jnp.int32)
    assert float(obj.lag_adaptive_epsilon(ints, 0.2, 0.6, 2.2)[0]) == pytest.approx(0.2 + 0.4 / 2.2)


# ----------------------------------------------------------------------------- registry and validation

def test_the_methods_are_registered_with_their_labels():
    """Registered with a label, colour, marker and description; that each trains at lag 1 and 8 with every
    diagnostic finite (their own among them: BAPO's clip bounds, SAT's gated fraction, the adaptive clip's ε)
    is tests/test_methods.py's `test_method_trains_at_lag_1_and_8_without_nan`, which runs every method."""
    for name in ("bapo", "sat", "ppo_clip_adaptive"):
        preset = METHODS[name]
        assert preset.label and preset.colour and preset.marker and preset.description


@pytest.mark.parametrize("options, message", [
    ({"method": "bapo", "clip_low_start": 0.95}, r"clip_low_start=0.95 is above clip_low_max=0.9: the search range "
                                                 r"would be empty; allowed values: clip_low_start <= clip_low_max"),
    ({"method": "bapo", "clip_high_start": 3.5}, r"clip_high_start=3.5 is above clip_high_max=3.0"),
    ({"method": "bapo", "clip_high_step": 1e-4}, r"clip_high_step=0.0001 takes more than 1000 steps from "
                                                 r"clip_high_start=1.2 to clip_high_max=3.0"),
    ({"method": "bapo", "positive_share_target": 1.2}, r"positive_share_target=1.2 is not allowed; "
                                                       r"positive_share_target must be a number in \[0, 1\]"),
    ({"method": "bapo", "clip_low_max": 1.1}, r"clip_low_max=1.1 is not allowed; .* in \(0, 1\]"),
    ({"method": "bapo", "clip_high_step": 0.0}, r"clip_high_step=0.0 is not allowed; .* in \(0, inf\)"),
    ({"method": "sat", "staleness_quantile": -0.1}, r"staleness_quantile=-0.1 is not allowed"),
    ({"method": "sat", "contraction_exponent": 0.0}, r"contraction_exponent=0.0 is not allowed"),
    ({"method": "ppo_clip_adaptive", "saturation_staleness": 0.0}, r"saturation_staleness=0.0 is not allowed"),
    ({"method": "ppo_clip", "staleness_quantile": 0.5}, r"staleness_quantile=0.5 is not read by method='ppo_clip'"
                                                        r".*surrogate='staleness_clip'"),
])
def test_each_knob_is_checked_with_a_one_line_error(options, message):
    with pytest.raises(ConfigError, match=message) as info:
        tiny_config(**options)
    assert "\n" not in str(info.value)


def test_the_new_knobs_are_traced_cells_of_one_program():
    """Each new knob is a traced leaf: cells differing only in it stack into one grid (one program), and a
    vmap over the stacked method gives each cell its own bounds; a knob the method does not read is refused."""
    from vaco_jax.core.config import make_traced, stack_traced

    config = tiny_config(method="bapo")
    cells = stack_traced([make_traced(config, 1, positive_share_target=t) for t in (0.0, 0.99)])
    np.testing.assert_allclose(np.asarray(cells.method.surrogate.positive_share_target), [0.0, 0.99], rtol=1e-6)
    batch = make_batch(seed=4, spread=0.35)
    lr = jnp.asarray(_logp(batch.action, batch.mu, batch.log_std) - batch.behaviour_logp, jnp.float32)
    adv = jnp.asarray(batch.adv - batch.adv.mean(), jnp.float32)

    def high(method):
        sur = method.surrogate
        return obj.balanced_clip_bounds(lr, adv, sur.positive_share_target, sur.clip_low_start, sur.clip_low_max,
                                        sur.clip_low_step, sur.clip_high_start, sur.clip_high_max,
                                        sur.clip_high_step)[1]

    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(high))(cells.method)), [1.2, 3.0], rtol=1e-6)
    for name, knob, value in (("sat", "staleness_quantile", 0.7), ("ppo_clip_adaptive", "saturation_staleness", 4.0)):
        traced = make_traced(tiny_config(method=name), 1, **{knob: value})
        assert float(getattr(traced.method.surrogate, knob)) == pytest.approx(value)
    with pytest.raises(ConfigError, match="saturation_staleness"):
        make_traced(tiny_config(method="ppo_clip"), 1, saturation_staleness=4.0)
