"""Policy surrogates, sample filters and the value loss (docs/surrogates.md).

Conventions shared by every loss here:

* inputs are per-sample arrays of one minibatch, all of the same shape (normally 1-D); the
  advantages are already normalised by the caller (:func:`normalize_advantages`) where the method
  normalises them;
* ``logp`` is ``log π_θ(a|s)`` and carries the gradient; every other log-probability (behaviour,
  proximal, old, inference, filter denominator) is treated as a constant (``stop_gradient``);
* ratios are taken in log space, ``r = exp(logp_a − logp_b)``;
* the loss is the *negative* surrogate averaged over **all** samples of the minibatch;
* each returns ``(loss, metrics)`` with ``metrics`` a dict of float32 scalars (no gradient).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

__all__ = [
    "balanced_clip_bounds",
    "balanced_clip_loss",
    "lag_adaptive_clip_loss",
    "lag_adaptive_epsilon",
    "staleness_clip_loss",
    "staleness_contraction",
    "truncated_is_pg_loss",
    "soft_gate_loss",
    "gaussian_trust_loss",
    "decoupled_ppo_loss",
    "effective_sample_size",
    "impala_pg_loss",
    "is_pg_loss",
    "mean_abs_ratio_minus_one",
    "mean_exp",
    "abs_log_ratio_stats",
    "mismatch_mask",
    "normalize_advantages",
    "ppo_clip_loss",
    "ppo_kl_loss",
    "second_moment_keep",
    "spo_loss",
    "tv_estimate",
    "tv_bounded",
    "tv_filter_keep",
    "tv_filtered_pg_loss",
    "value_loss",
]

_sg = jax.lax.stop_gradient
_TV_SCALES = ("tv", "l1")
_CAP_MODES = ("truncate", "mask", "band")


def _f32(x):
    return jnp.asarray(x, jnp.float32)


def _ratio_metrics(ratio) -> dict:
    ratio = _sg(ratio)
    return {"ratio_mean": jnp.mean(ratio), "ratio_max": jnp.max(ratio)}


def _clipped_surrogate(ratio, advantages, clip_epsilon):
    """``min(r A, clip(r, 1 − ε, 1 + ε) A)`` per sample."""
    clipped = jnp.clip(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon)
    return jnp.minimum(ratio * advantages, clipped * advantages)


def _clip_fraction(ratio, clip_epsilon):
    return jnp.mean((jnp.abs(_sg(ratio) - 1.0) > clip_epsilon).astype(jnp.float32))


def normalize_advantages(adv, eps: float = 1e-8):
    """Per-minibatch advantage normalisation (docs/estimators.md, last bullet): ``(A − mean A)/(std A + eps)``
    over all elements (population std)."""
    adv = _f32(adv)
    return (adv - jnp.mean(adv)) / (jnp.std(adv) + eps)


# --------------------------------------------------------------------------------------------
# Coupled PPO family
# --------------------------------------------------------------------------------------------


def ppo_clip_loss(logp, behaviour_logp, advantages, clip_epsilon):
    """PPO-Clip (docs/surrogates.md, first bullet): ``−mean min(r_β A, clip(r_β, 1−ε, 1+ε) A)``,
    ``r_β = exp(logp − sg(behaviour_logp))``.

    Metrics: ``clip_fraction`` (fraction with ``|r − 1| > ε``), ``ratio_mean``, ``ratio_max``.
    """
    chex.assert_equal_shape([logp, behaviour_logp, advantages])
    advantages = _sg(_f32(advantages))
    ratio = jnp.exp(_f32(logp) - _sg(_f32(behaviour_logp)))
    loss = -jnp.mean(_clipped_surrogate(ratio, advantages, clip_epsilon))
    metrics = {"clip_fraction": _clip_fraction(ratio, clip_epsilon), **_ratio_metrics(ratio)}
    return loss, metrics


def ppo_kl_loss(logp, behaviour_logp, advantages, kl, kl_coef):
    """PPO-KL (docs/surrogates.md, second bullet): ``−mean(r_β A) + c_kl · mean KL(β ‖ π_θ)``.

    ``kl`` is the per-sample analytic KL computed by the caller; it carries gradient.
    Metrics: ``kl`` (its mean), ``ratio_mean``, ``ratio_max``.
    """
    chex.assert_equal_shape([logp, behaviour_logp, advantages, kl])
    advantages = _sg(_f32(advantages))
    ratio = jnp.exp(_f32(logp) - _sg(_f32(behaviour_logp)))
    mean_kl = jnp.mean(_f32(kl))
    loss = -jnp.mean(ratio * advantages) + kl_coef * mean_kl
    return loss, {"kl": _sg(mean_kl), **_ratio_metrics(ratio)}


def spo_loss(logp, behaviour_logp, advantages, epsilon):
    """SPO, Simple Policy Optimization (docs/surrogates.md, third bullet):
    ``−mean[r_β A − |A|/(2ε) · (r_β − 1)²]``.

    Metrics: ``clip_fraction`` (``|r − 1| > ε``, reported for the filtering diagnostics although
    SPO never clips), ``ratio_mean``, ``ratio_max``.
    """
    chex.assert_equal_shape([logp, behaviour_logp, advantages])
    advantages = _sg(_f32(advantages))
    ratio = jnp.exp(_f32(logp) - _sg(_f32(behaviour_logp)))
    penalty = jnp.abs(advantages) / (2.0 * epsilon) * jnp.square(ratio - 1.0)
    loss = -jnp.mean(ratio * advantages - penalty)
    metrics = {"clip_fraction": _clip_fraction(ratio, epsilon), **_ratio_metrics(ratio)}
    return loss, metrics


# --------------------------------------------------------------------------------------------
# Decoupled PPO (Hilton et al.) with old logits and the mismatch mask
# --------------------------------------------------------------------------------------------


def mismatch_mask(logp_old, logp_infer, bound):
    """Training–inference mismatch mask (docs/surrogates.md, decoupled PPO; docs/lag.md):
    ``m = 1[π_old/π_infer ∈ [1/c, c]]`` (inclusive), tested in log space as
    ``|log π_old − log π_infer| ≤ log c``. Returns float32 0/1; ``bound = inf`` keeps everything.
    """
    chex.assert_equal_shape([logp_old, logp_infer])
    log_ratio = _sg(_f32(logp_old) - _f32(logp_infer))
    log_bound = jnp.log(_f32(bound))
    keep = (log_ratio >= -log_bound) & (log_ratio <= log_bound)
    return keep.astype(jnp.float32)


def decoupled_ppo_loss(
    logp,
    proximal_logp,
    old_logp,
    infer_logp,
    advantages,
    clip_epsilon,
    weight_cap,
    cap_mode: str = "truncate",
    mismatch_bound=2.0,
    mismatch_log_ratio=None,
    weight_floor=None,
):
    """Decoupled PPO with old logits and mismatch mask (docs/surrogates.md, "Decoupled PPO"):

        w_i  = sg(π_prox/π_old),  capped: ``truncate`` → min(w, w_max); ``mask`` → 0 if w > w_max;
                                  ``band`` → 0 unless w ∈ [w_min, w_max] (masked IS, IcePop)
        m_i  = 1[π_old/π_infer ∈ [1/c, c]]
        r_p  = exp(logp − sg(log π_prox))
        loss = −(1/n) Σ_i m_i · sg(π_old/π_infer) · w_i · min(r_p A, clip(r_p, 1−ε, 1+ε) A)

    The mean's denominator ``n`` counts **all** samples of the minibatch, masked ones included (a
    masked sample contributes 0), so masking shrinks the step rather than re-weighting the rest.
    A masked (or zero-weight) sample contributes exactly 0 to the loss and its gradient even when
    its ratio overflows: its log-ratio is replaced by 0 before the exponential.

    ``mismatch_log_ratio`` (optional) is what the mask tests instead of ``log π_old − log π_infer``
    (the revised EWMA's per-dimension test); the coefficient keeps the joint ``π_old/π_infer``.

    Args:
      cap_mode: static Python string, ``"truncate"``, ``"mask"`` or ``"band"``.
      weight_cap: ``w_max`` (may be traced; ``inf`` disables the cap).
      weight_floor: ``w_min`` of the ``band`` mode (may be traced; None: ``1/w_max``, the symmetric band).
      mismatch_bound: ``c`` of the mismatch mask (may be traced; ``inf`` disables it).

    Metrics: ``clip_fraction`` (``|r_p − 1| > ε``), ``weight_mean`` / ``weight_max`` (of the
    uncapped ``w``), ``capped_fraction`` (``w > w_max``), ``mismatch_kept_fraction`` (mean ``m``),
    ``mismatch_ratio_mean`` / ``mismatch_ratio_max`` (``r_d = π_old/π_infer``), with ``capped_fraction``
    counting the samples outside the band in ``band`` mode,
    ``staleness_ratio_mean`` (``r_s = π_θ/π_old``).
    """
    if cap_mode not in _CAP_MODES:
        raise ValueError(f"cap_mode must be one of {_CAP_MODES}, got {cap_mode!r}")
    chex.assert_equal_shape([logp, proximal_logp, old_logp, infer_logp, advantages])
    logp = _f32(logp)
    proximal_logp = _sg(_f32(proximal_logp))
    old_logp = _sg(_f32(old_logp))
    infer_logp = _sg(_f32(infer_logp))
    advantages = _sg(_f32(advantages))

    weight = jnp.exp(proximal_logp - old_logp)
    exceeds_cap = weight > weight_cap
    if cap_mode == "truncate":
        capped_weight = jnp.minimum(weight, weight_cap)
    elif cap_mode == "mask":
        capped_weight = jnp.where(exceeds_cap, 0.0, weight)
    else:  # band: inclusive at both bounds
        floor = 1.0 / _f32(weight_cap) if weight_floor is None else _f32(weight_floor)
        exceeds_cap = exceeds_cap | (weight < floor)
        capped_weight = jnp.where(exceeds_cap, 0.0, weight)

    if mismatch_log_ratio is None:
        keep = mismatch_mask(old_logp, infer_logp, mismatch_bound)
    else:
        chex.assert_equal_shape([logp, mismatch_log_ratio])
        keep = mismatch_mask(mismatch_log_ratio, jnp.zeros_like(logp), mismatch_bound)
    mismatch_ratio = jnp.exp(old_logp - infer_logp)
    coefficient = jnp.where(keep > 0, mismatch_ratio * capped_weight, 0.0)

    # A sample with coefficient 0 gets log-ratio 0 (ratio 1): neither its loss term nor its gradient
    # can become 0 * inf = NaN when its proximal ratio overflows.
    active = coefficient != 0.0
    ratio = jnp.exp(jnp.where(active, logp - proximal_logp, 0.0))
    surrogate = _clipped_surrogate(ratio, advantages, clip_epsilon)
    loss = -jnp.mean(coefficient * surrogate)
    raw_ratio = jnp.exp(_sg(logp) - proximal_logp)

    metrics = {
        "clip_fraction": _clip_fraction(raw_ratio, clip_epsilon),
        "weight_mean": jnp.mean(weight),
        "weight_max": jnp.max(weight),
        "capped_fraction": jnp.mean(exceeds_cap.astype(jnp.float32)),
        "mismatch_kept_fraction": jnp.mean(keep),
        "mismatch_ratio_mean": jnp.mean(mismatch_ratio),
        "mismatch_ratio_max": jnp.max(mismatch_ratio),
        "staleness_ratio_mean": jnp.mean(jnp.exp(_sg(logp) - old_logp)),
    }
    return loss, metrics


# --------------------------------------------------------------------------------------------
# VACO: TV-filtered importance-sampled policy gradient
# --------------------------------------------------------------------------------------------


def tv_estimate(log_ratio, scale: str = "tv"):
    """Total-variation estimate from per-sample log-ratios (docs/surrogates.md, VACO; docs/diagnostics.md):
    ``½ · mean|r − 1|`` for ``scale="tv"``, ``mean|r − 1|`` for ``scale="l1"`` (static string),
    with ``r = exp(sg(log_ratio))``. No gradient.
    """
    if scale not in _TV_SCALES:
        raise ValueError(f"scale must be one of {_TV_SCALES}, got {scale!r}")
    l1 = mean_abs_ratio_minus_one(log_ratio)
    return 0.5 * l1 if scale == "tv" else l1


def tv_bounded(log_ratio, log_weight=None):
    """A total-variation estimate that cannot leave [0, 1] (docs/diagnostics.md): ``mean (1 − r)⁺`` with
    ``r = exp(sg(log_ratio))``, for samples of the ratio's denominator policy. There E[r] = 1, so
    E[(1 − r)⁺] = ½·E|r − 1| = TV: the expectation of :func:`tv_estimate`'s ``½ · mean|r − 1|``, which a
    few large ratios push above 1. Samples of another policy are importance-weighted by
    ``w = exp(log_weight)`` (denominator over sampler), self-normalised: ``Σ w (1 − r)⁺ / Σ w``, still in
    [0, 1] (consistent, not unbiased). No gradient."""
    terms = jnp.maximum(1.0 - jnp.exp(_sg(_f32(log_ratio))), 0.0)
    if log_weight is None:
        return jnp.mean(terms)
    lw = _sg(_f32(log_weight))
    w = jnp.exp(lw - jnp.max(lw))
    return jnp.sum(w * terms) / jnp.sum(w)


def mean_abs_ratio_minus_one(log_ratio):
    """``mean|exp(l) − 1|`` without overflow: computed directly (so a finite value keeps its bits), and
    where a ratio overflows float32 (``l`` above ~88.7), in log space instead: ``log|e^l − 1|`` per
    sample, then a log-mean-exp. Infinite only when the mean itself exceeds float32. No gradient."""
    lr = _sg(_f32(log_ratio))
    direct = jnp.mean(jnp.abs(jnp.exp(lr) - 1.0))
    pos = jnp.maximum(lr, 0.0)
    neg = jnp.minimum(lr, 0.0)
    # log|e^l − 1| = l + log(1 − e^(−l)) for l > 0, log(1 − e^l) for l < 0, −inf at l = 0
    terms = jnp.where(lr > 0, pos + jnp.log(-jnp.expm1(-pos)), jnp.log(-jnp.expm1(neg)))
    stable = jnp.exp(jax.nn.logsumexp(terms) - jnp.log(jnp.float32(lr.size)))
    return jnp.where(jnp.isfinite(direct), direct, stable)


def mean_exp(log_x):
    """``mean(exp(l))``, in log space where the direct mean overflows float32 (a finite direct value keeps
    its bits). No gradient."""
    lx = _sg(_f32(log_x))
    direct = jnp.mean(jnp.exp(lx))
    stable = jnp.exp(jax.nn.logsumexp(lx) - jnp.log(jnp.float32(lx.size)))
    return jnp.where(jnp.isfinite(direct), direct, stable)


def tv_filter_keep(log_ratio, advantages, tv_budget, scale: str = "tv"):
    """VACO's TV filter (docs/surrogates.md):

        TV̂      = ½ · mean|sg(r) − 1|    (or mean|sg(r) − 1| for ``scale="l1"``)
        grows_i = A_i · sg(log r_i) > 0   (strict)
        keep_i  = (TV̂ ≤ δ) or not grows_i

    Samples with ``r_i = 1`` or ``A_i = 0`` are always kept.

    Returns:
      ``(keep, tv)``: float32 0/1 mask of the shape of ``log_ratio`` and the scalar ``TV̂``.
    """
    chex.assert_equal_shape([log_ratio, advantages])
    log_ratio = _sg(_f32(log_ratio))
    advantages = _sg(_f32(advantages))
    tv = tv_estimate(log_ratio, scale)
    # Sign test rather than the product, which can underflow to 0 for tiny A or log r.
    grows = jnp.sign(advantages) * jnp.sign(log_ratio) > 0.0
    keep = (tv <= tv_budget) | ~grows
    return keep.astype(jnp.float32), tv


def tv_filtered_pg_loss(logp, denominator_logp, advantages, tv_budget, scale: str = "tv"):
    """VACO loss (docs/surrogates.md, "VACO"): ``−mean[keep · r A + (1 − keep) · sg(r) A]`` with
    ``r = exp(logp − sg(denominator_logp))`` and ``keep`` from :func:`tv_filter_keep`.

    The denominator is ``β`` by default (``π_T`` as an option). Filtered samples keep their value
    in the loss but contribute exactly zero gradient. ``tv_budget`` (δ) may be traced; ``inf``
    gives :func:`is_pg_loss`.

    Metrics: ``tv_estimate``, ``filtered_fraction`` (``1 − mean keep``), ``ratio_mean``,
    ``ratio_max``.
    """
    chex.assert_equal_shape([logp, denominator_logp, advantages])
    logp = _f32(logp)
    advantages = _sg(_f32(advantages))
    log_ratio = logp - _sg(_f32(denominator_logp))
    keep, tv = tv_filter_keep(log_ratio, advantages, tv_budget, scale)
    ratio = jnp.exp(log_ratio)
    # Select in log space: a filtered sample's gradient is an exact 0 even if its ratio overflows.
    filtered_ratio = jnp.exp(jnp.where(keep > 0, log_ratio, _sg(log_ratio)))
    loss = -jnp.mean(filtered_ratio * advantages)
    metrics = {
        "tv_estimate": tv,
        "filtered_fraction": 1.0 - jnp.mean(keep),
        **_ratio_metrics(ratio),
    }
    return loss, metrics


def is_pg_loss(logp, denominator_logp, advantages):
    """Plain importance-sampled policy gradient ``−mean(r A)``, ``r = exp(logp − sg(denominator))``:
    VACO with an infinite TV budget (docs/surrogates.md). Metrics: ``ratio_mean``, ``ratio_max``."""
    chex.assert_equal_shape([logp, denominator_logp, advantages])
    advantages = _sg(_f32(advantages))
    ratio = jnp.exp(_f32(logp) - _sg(_f32(denominator_logp)))
    return -jnp.mean(ratio * advantages), _ratio_metrics(ratio)


# --------------------------------------------------------------------------------------------
# The staleness corrections of 2025–26 (docs/corrections.md) and the diagnostics every method records
# --------------------------------------------------------------------------------------------


def effective_sample_size(log_w):
    """Normalised effective sample size of importance weights ``w = exp(log_w)`` (docs/corrections.md, VCPO):

        ESS = (Σ w)² / (N Σ w²)  ∈ [1/N, 1]

    computed in log space, ``exp(2 logsumexp(l) − log N − logsumexp(2 l))``, so it stays finite when
    the weights overflow float32. No gradient. 1 when every weight is equal.
    """
    lw = _sg(_f32(log_w)).reshape(-1)
    n = jnp.float32(lw.size)
    return jnp.exp(2.0 * jax.nn.logsumexp(lw) - jnp.log(n) - jax.nn.logsumexp(2.0 * lw))


def abs_log_ratio_stats(log_ratio) -> tuple:
    """``(mean |l|, 99th percentile of |l|)`` over the minibatch (linear interpolation between order
    statistics, numpy's default). No gradient."""
    a = jnp.abs(_sg(_f32(log_ratio))).reshape(-1)
    return jnp.mean(a), jnp.percentile(a, 99.0)


def second_moment_keep(log_ratio, budget):
    """M2PO's second-moment mask (docs/corrections.md, eq. C1): with ``ℓ_i = sg(log_ratio_i)`` and
    ``M̂₂(kept) = mean of ℓ_i² over the kept samples``, drop the kept sample with the largest ``ℓ²``
    while ``M̂₂(kept) > τ``.

    The greedy loop drops the ``k`` largest ``ℓ²`` for the smallest ``k`` whose remaining mean is at
    most ``τ``; computed at once from the sorted values (suffix sums). An empty remainder counts as
    within the budget, so every sample is dropped only when even the smallest ``ℓ²`` exceeds ``τ``.
    Ties in ``ℓ²`` are broken by position (the earlier sample is dropped first). ``budget = inf``
    keeps everything.

    Returns:
      ``(keep, second_moment)``: float32 0/1 mask of the shape of ``log_ratio`` and ``M̂₂`` of all
      samples (before masking).
    """
    lr = _sg(_f32(log_ratio))
    sq = jnp.square(lr).reshape(-1)
    n = sq.shape[0]
    order = jnp.argsort(-sq, stable=True)  # largest first
    ranked = sq[order]
    # remaining_sum[k] = sum of the n - k smallest values (k dropped), k = 0..n
    remaining_sum = jnp.concatenate([jnp.cumsum(ranked[::-1])[::-1], jnp.zeros((1,), jnp.float32)])
    remaining = jnp.float32(n) - jnp.arange(n + 1, dtype=jnp.float32)
    mean_left = jnp.where(remaining > 0, remaining_sum / jnp.maximum(remaining, 1.0), 0.0)
    dropped = jnp.argmax(mean_left <= budget)  # the first k within budget (k = n always is)
    rank = jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
    keep = (rank >= dropped).astype(jnp.float32).reshape(lr.shape)
    return keep, jnp.mean(sq)


def gaussian_trust_loss(logp, behaviour_logp, advantages, trust_width):
    """GIPO (docs/corrections.md, eq. C3): the hard clip replaced by a Gaussian trust weight on the log-ratio,

        ℓ_i = sg(log π_θ − log β),   ω_i = exp(−ℓ_i² / (2σ²)),   loss = −mean_i ω_i · r_β,i · A_i

    with ``ω`` carrying no gradient (the authors' code), so the gradient is ``ω r_β A ∇log π_θ``; no clip.
    ``r_β ω`` is formed in log space, so a sample whose ratio overflows contributes 0, not NaN.
    ``trust_width`` σ may be traced; ``inf`` gives the plain importance-sampled policy gradient.

    Metrics: ``gated_fraction`` (samples whose weight ω is below ½), ``trust_weight_mean``, ``ratio_mean``,
    ``ratio_max``.
    """
    chex.assert_equal_shape([logp, behaviour_logp, advantages])
    advantages = _sg(_f32(advantages))
    log_ratio = _f32(logp) - _sg(_f32(behaviour_logp))
    log_weight = -0.5 * jnp.square(_sg(log_ratio) / trust_width)
    loss = -jnp.mean(jnp.exp(log_ratio + log_weight) * advantages)
    weight = jnp.exp(log_weight)
    metrics = {"gated_fraction": jnp.mean((weight < 0.5).astype(jnp.float32)), "trust_weight_mean": jnp.mean(weight),
               **_ratio_metrics(jnp.exp(log_ratio))}
    return loss, metrics


def soft_gate_loss(logp, behaviour_logp, advantages, temperature, temperature_ratio):
    """SAPO (docs/corrections.md, eq. C4): the clip replaced by a temperature-controlled sigmoid gate,

        f_τ(r) = σ(τ (r − 1)) · 4/τ,   τ_i = τ for A_i > 0, τ · ``temperature_ratio`` otherwise,
        loss = −mean_i f_{τ_i}(r_β,i) · A_i

    The gate carries the gradient: ``∇f = 4 p (1 − p) r ∇log π_θ`` with ``p = σ(τ(r − 1))``, which is 1 at
    ``r = 1`` and decays like ``4 e^{−τ|r−1|}``; the paper's defaults are τ_pos = 1, τ_neg = 1.05.
    The log-ratio is capped at ``log(1 + 60/τ)`` before the exponential (there the gate's gradient is
    below ``4 e^{−60}`` of its peak), so an overflowing ratio gives 0, not NaN.

    Metrics: ``gated_fraction`` (samples whose gradient weight ``4p(1 − p)`` is below ½), ``ratio_mean``,
    ``ratio_max``.
    """
    chex.assert_equal_shape([logp, behaviour_logp, advantages])
    advantages = _sg(_f32(advantages))
    log_ratio = _f32(logp) - _sg(_f32(behaviour_logp))
    tau = jnp.where(advantages > 0, _f32(temperature), _f32(temperature) * _f32(temperature_ratio))
    ratio = jnp.exp(jnp.minimum(log_ratio, jnp.log1p(60.0 / tau)))
    gate = jax.nn.sigmoid(tau * (ratio - 1.0))
    loss = -jnp.mean(gate * (4.0 / tau) * advantages)
    grad_weight = 4.0 * _sg(gate) * (1.0 - _sg(gate))
    metrics = {"gated_fraction": jnp.mean((grad_weight < 0.5).astype(jnp.float32)),
               **_ratio_metrics(jnp.exp(log_ratio))}
    return loss, metrics


def truncated_is_pg_loss(logp, behaviour_logp, advantages, ratio_cap):
    """The policy gradient of VCPO's recipe (docs/corrections.md, eq. C5): a truncated importance weight
    to β times the score function, no clip,

        w_i = min(sg(r_β,i), C),   loss = −mean_i w_i · exp(log π_θ − sg(log π_θ)) · A_i

    (value ``−mean w A``; gradient ``w A ∇log π_θ``). Also the minibatch's normalised ESS of the untruncated
    weights and the step scale ``√ESS`` the update step applies to the policy's learning rate
    (``update.STEP_SCALE``). ``ratio_cap`` C may be traced (``inf``: untruncated).

    Metrics: ``step_scale`` (``√ESS``), ``capped_fraction`` (``r_β > C``), ``ratio_mean``, ``ratio_max``.
    """
    chex.assert_equal_shape([logp, behaviour_logp, advantages])
    advantages = _sg(_f32(advantages))
    logp = _f32(logp)
    log_ratio = _sg(logp - _f32(behaviour_logp))
    weight = jnp.minimum(jnp.exp(log_ratio), ratio_cap)
    loss = -jnp.mean(weight * jnp.exp(logp - _sg(logp)) * advantages)
    metrics = {"step_scale": jnp.sqrt(effective_sample_size(log_ratio)),
               "capped_fraction": jnp.mean((jnp.exp(log_ratio) > ratio_cap).astype(jnp.float32)),
               **_ratio_metrics(jnp.exp(log_ratio))}
    return loss, metrics


def _bounded_clip_surrogate(ratio, advantages, lower, upper):
    """``min(r A, clip(r, lower, upper) A)`` per sample, with per-sample or scalar bounds."""
    return jnp.minimum(ratio * advantages, jnp.clip(ratio, lower, upper) * advantages)


def _steps_within(start, stop, step):
    """How many steps of ``step`` fit from ``start`` to ``stop`` (``start + n·step <= stop``), up to
    round-off of 1e-4 of a step, so a range such as 1.2 → 3.0 by 0.05 has its 36 steps in float32."""
    return jnp.maximum(jnp.floor((_f32(stop) - _f32(start)) / _f32(step) + 1e-4), 0.0)


def balanced_clip_bounds(log_ratio, advantages, target, low_start, low_max, low_step, high_start, high_max,
                         high_step):
    """BAPO's search for the clip bounds (docs/corrections.md, eq. C7; the paper's Algorithm 1):

        P(c_high)       = Σ_{A>0} min(r, c_high) A,     N(c_low) = Σ_{A<0} max(r, c_low) |A|
        ρ(c_low, c_high) = P / (P + N)                 (1 when P + N = 0)
        c_low = a⁻, c_high = a⁺;  while ρ < ρ₀ and c_low + δ_low <= b⁻:
            c_high += δ_high if c_high + δ_high <= b⁺ else c_low += δ_low

    with ``r = exp(sg(log_ratio))``; ``min(r A, clip(r, c_low, c_high) A)`` is ``min(r, c_high) A`` for
    ``A > 0`` and ``max(r, c_low) A`` for ``A < 0``, so ``P`` and ``N`` are the positive and negative
    parts of the clipped surrogate. The bounds are ``a + k·δ`` with integer step counts (no float
    accumulation); every number may be traced. No gradient.

    Returns:
      ``(c_low, c_high, share)``: float32 scalars, ``share`` = ρ at the bounds returned.
    """
    chex.assert_equal_shape([log_ratio, advantages])
    ratio = jnp.exp(_sg(_f32(log_ratio)))
    adv = _sg(_f32(advantages))
    low_start, high_start, low_step, high_step = (_f32(v) for v in (low_start, high_start, low_step, high_step))
    n_high = _steps_within(high_start, high_max, high_step)
    n_low = _steps_within(low_start, low_max, low_step)

    def share(k, j):
        c_low, c_high = low_start + j * low_step, high_start + k * high_step
        pos = jnp.sum(jnp.where(adv > 0, jnp.minimum(ratio, c_high) * adv, 0.0))
        neg = jnp.sum(jnp.where(adv < 0, -jnp.maximum(ratio, c_low) * adv, 0.0))
        total = pos + neg
        return jnp.where(total > 0, pos / jnp.where(total > 0, total, 1.0), 1.0)

    def cond(state):
        k, j = state
        return (share(k, j) < target) & (j < n_low)

    def body(state):
        k, j = state
        raise_high = k < n_high
        return jnp.where(raise_high, k + 1.0, k), jnp.where(raise_high, j, j + 1.0)

    k, j = jax.lax.while_loop(cond, body, (jnp.float32(0.0), jnp.float32(0.0)))
    return low_start + j * low_step, high_start + k * high_step, share(k, j)


def balanced_clip_loss(logp, behaviour_logp, advantages, target, low_start, low_max, low_step, high_start,
                       high_max, high_step):
    """BAPO (docs/corrections.md, eq. C7): PPO-Clip on ``r_β`` with the bounds ``[c_low, c_high]`` that
    :func:`balanced_clip_bounds` finds on this minibatch,

        loss = −mean_i min(r_β,i A_i, clip(r_β,i, c_low, c_high) A_i)

    Metrics: ``clip_low``, ``clip_high`` (the bounds used), ``positive_share`` (ρ there), ``clip_fraction``
    (samples with ``r_β`` outside ``[c_low, c_high]``), ``ratio_mean``, ``ratio_max``.
    """
    chex.assert_equal_shape([logp, behaviour_logp, advantages])
    advantages = _sg(_f32(advantages))
    log_ratio = _f32(logp) - _sg(_f32(behaviour_logp))
    c_low, c_high, share = balanced_clip_bounds(log_ratio, advantages, target, low_start, low_max, low_step,
                                                high_start, high_max, high_step)
    ratio = jnp.exp(log_ratio)
    loss = -jnp.mean(_bounded_clip_surrogate(ratio, advantages, c_low, c_high))
    sg_ratio = _sg(ratio)
    outside = (sg_ratio < c_low) | (sg_ratio > c_high)
    metrics = {"clip_low": c_low, "clip_high": c_high, "positive_share": share,
               "clip_fraction": jnp.mean(outside.astype(jnp.float32)), **_ratio_metrics(ratio)}
    return loss, metrics


def staleness_contraction(log_ratio, quantile, exponent):
    """SAT's per-sample contraction factor (docs/corrections.md, eq. C8): with ``x_i = |sg(log_ratio_i)|``
    and ``q`` the batch's ``quantile`` of ``x`` (linear interpolation, numpy's default),

        c_i = 1                                  if q = 0 or x_i <= q
        c_i = 1 / (1 + ((x_i − q)/q)^n)          otherwise          (n = ``exponent``)

    a decreasing kernel in the excess over the gate, 1 at the gate and ½ at twice it (the form of the
    paper's kernel is not confirmed: docs/corrections.md). No gradient.

    Returns:
      ``(c, q)``: float32 factors in (0, 1] of the shape of ``log_ratio`` and the scalar gate ``q``.
    """
    x = jnp.abs(_sg(_f32(log_ratio)))
    q = jnp.quantile(x.reshape(-1), _f32(quantile))
    gated = (q > 0) & (x > q)
    safe_q = jnp.where(q > 0, q, 1.0)
    excess = jnp.where(gated, (x - q) / safe_q, 0.0)
    c = jnp.where(gated, 1.0 / (1.0 + jnp.power(excess, _f32(exponent))), 1.0)
    return c, q


def staleness_clip_loss(logp, behaviour_logp, advantages, clip_epsilon, quantile, exponent):
    """SAT (docs/corrections.md, eq. C8): PPO-Clip on ``r_β`` whose interval's end on the side of
    ``d = sg(log r_β)`` contracts by :func:`staleness_contraction`'s ``c``,

        lower_i = 1 − ε · (c_i if d_i < 0 else 1),   upper_i = 1 + ε · (c_i if d_i > 0 else 1)
        loss    = −mean_i min(r_β,i A_i, clip(r_β,i, lower_i, upper_i) A_i)

    The interval lies inside PPO-Clip's ``[1 − ε, 1 + ε]``; a contracted end binds only where the
    ratio is already beyond it in the direction the advantage pushes (the same loss as contracting the
    end on the advantage's side). ``c = 1`` everywhere gives PPO-Clip.

    Metrics: ``gated_fraction`` (samples with ``c < 1``), ``contraction_min``, ``staleness_gate`` (``q``),
    ``clip_fraction`` (``r_β`` outside its own interval), ``ratio_mean``, ``ratio_max``.
    """
    chex.assert_equal_shape([logp, behaviour_logp, advantages])
    advantages = _sg(_f32(advantages))
    log_ratio = _f32(logp) - _sg(_f32(behaviour_logp))
    d = _sg(log_ratio)
    c, q = staleness_contraction(d, quantile, exponent)
    lower = 1.0 - clip_epsilon * jnp.where(d < 0, c, 1.0)
    upper = 1.0 + clip_epsilon * jnp.where(d > 0, c, 1.0)
    ratio = jnp.exp(log_ratio)
    loss = -jnp.mean(_bounded_clip_surrogate(ratio, advantages, lower, upper))
    sg_ratio = _sg(ratio)
    metrics = {"gated_fraction": jnp.mean((c < 1.0).astype(jnp.float32)), "contraction_min": jnp.min(c),
               "staleness_gate": q,
               "clip_fraction": jnp.mean(((sg_ratio < lower) | (sg_ratio > upper)).astype(jnp.float32)),
               **_ratio_metrics(ratio)}
    return loss, metrics


def lag_adaptive_epsilon(staleness, clip_epsilon, clip_epsilon_lagged, saturation_staleness):
    """The lag-adaptive clip range (docs/adaptive.md): with ``ā`` the mean staleness (versions) of the
    samples given,

        ε(ā) = ε₀ + (ε_lag − ε₀) · min(1, ā / ā_sat)

    ``ε₀`` = ``clip_epsilon`` (no lag), ``ε_lag`` = ``clip_epsilon_lagged``, ``ā_sat`` =
    ``saturation_staleness``. No gradient. Returns ``(ε, ā)``.
    """
    mean_age = jnp.mean(_sg(staleness).astype(jnp.float32))
    weight = jnp.minimum(1.0, mean_age / _f32(saturation_staleness))
    return _f32(clip_epsilon) + (_f32(clip_epsilon_lagged) - _f32(clip_epsilon)) * weight, mean_age


def lag_adaptive_clip_loss(logp, behaviour_logp, advantages, staleness, clip_epsilon, clip_epsilon_lagged,
                           saturation_staleness):
    """PPO-Clip whose ε is :func:`lag_adaptive_epsilon` of the minibatch's mean staleness (docs/adaptive.md).

    Metrics: :func:`ppo_clip_loss`'s, plus ``clip_epsilon_used`` (ε) and ``staleness_seen`` (ā).
    """
    chex.assert_equal_shape([logp, behaviour_logp, advantages, staleness])
    eps, mean_age = lag_adaptive_epsilon(staleness, clip_epsilon, clip_epsilon_lagged, saturation_staleness)
    loss, metrics = ppo_clip_loss(logp, behaviour_logp, advantages, eps)
    return loss, {**metrics, "clip_epsilon_used": eps, "staleness_seen": mean_age}


# --------------------------------------------------------------------------------------------
# IMPALA and the critic
# --------------------------------------------------------------------------------------------


def impala_pg_loss(logp, pg_advantages):
    """IMPALA policy-gradient loss (docs/surrogates.md, last bullet): ``−mean(sg(pg_adv) · log π_θ)``, with
    ``pg_adv = min(ρ̄_pg, π_θ/β)(q − V)`` from V-trace recomputed by the caller.

    Metrics: ``pg_advantage_mean``.
    """
    chex.assert_equal_shape([logp, pg_advantages])
    pg_advantages = _sg(_f32(pg_advantages))
    loss = -jnp.mean(pg_advantages * _f32(logp))
    return loss, {"pg_advantage_mean": jnp.mean(pg_advantages)}


def value_loss(values, targets, old_values=None, clip_epsilon=None):
    """Critic loss (docs/surrogates.md, "Value loss"): ``mean ½(V − sg(target))²``.

    With both ``old_values`` and ``clip_epsilon`` given, PPO value clipping:
    ``½ mean max((V − t)², (V_old + clip(V − V_old, −ε, ε) − t)²)``.

    Metrics: ``value_loss``; with clipping also ``value_clip_fraction`` (``|V − V_old| > ε``).
    """
    chex.assert_equal_shape([values, targets])
    values = _f32(values)
    targets = _sg(_f32(targets))
    squared_error = jnp.square(values - targets)
    metrics = {}
    if old_values is not None and clip_epsilon is not None:
        chex.assert_equal_shape([values, old_values])
        old_values = _sg(_f32(old_values))
        delta = values - old_values
        clipped_values = old_values + jnp.clip(delta, -clip_epsilon, clip_epsilon)
        squared_error = jnp.maximum(squared_error, jnp.square(clipped_values - targets))
        metrics["value_clip_fraction"] = jnp.mean(
            (jnp.abs(_sg(delta)) > clip_epsilon).astype(jnp.float32)
        )
    loss = 0.5 * jnp.mean(squared_error)
    metrics["value_loss"] = _sg(loss)
    return loss, metrics
