"""Proximal-policy sources of the decoupled PPO family (docs/proximal.md).

Two kinds of source live here:

* closed-form proxies that need no forward pass, computed per sample from the behaviour
  log-probability, the current log-probability and the sample's staleness ``d`` (in versions):
  :func:`loglinear_proximal_logp` (A-3PO) and :func:`linear_proximal_logp` (the interpolation baseline of Guan et al.);
* the parameter-space exponentially weighted moving average of PPO-EWMA (Hilton et al. 2022) and
  its revised, staleness-aware variant (Missing Old Logits): :class:`EwmaState` and friends.

The ``behavior`` and ``recompute`` sources are just ``behaviour_logp`` and ``π_T``'s log-prob and
need no code of their own. Every proximal log-probability returned here carries no gradient.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp

__all__ = [
    "EwmaState",
    "default_ewma_age",
    "ewma_decay_for_age",
    "ewma_init",
    "ewma_maybe_reset",
    "ewma_update",
    "linear_proximal_logp",
    "loglinear_proximal_logp",
    "revised_ewma_decay",
    "target_update",
]


# --------------------------------------------------------------------------------------------
# Closed-form proxies
# --------------------------------------------------------------------------------------------


def loglinear_proximal_logp(logp, behaviour_logp, staleness):
    """A-3PO log-linear proximal policy (docs/proximal.md, ``loglinear``).

        log π_prox = α · log β + (1 − α) · log sg(π_θ),     α = 1/d   for d ≥ 1
        π_prox     = β                                               for d = 0

    (``d = 0`` follows the paper's stated intent and the AReaL code: coupled PPO-Clip.) Hence
    ``π_θ/π_prox = (π_θ/β)^α`` and, with the stop-gradient, ``∇(π_θ/π_prox) = r_p ∇log π_θ``.

    Args:
      logp: ``log π_θ(a|s)`` per sample (its gradient is ignored).
      behaviour_logp: ``log β(a|s)`` per sample.
      staleness: integer staleness ``d`` per sample (versions), broadcastable to ``logp``.

    Returns:
      ``log π_prox`` (float32, no gradient).
    """
    chex.assert_equal_shape([logp, behaviour_logp])
    logp = jax.lax.stop_gradient(jnp.asarray(logp, jnp.float32))
    behaviour_logp = jax.lax.stop_gradient(jnp.asarray(behaviour_logp, jnp.float32))
    staleness = jnp.asarray(staleness)
    alpha = 1.0 / jnp.maximum(staleness, 1).astype(jnp.float32)
    interpolated = alpha * behaviour_logp + (1.0 - alpha) * logp
    # d ≤ 1 gives exactly β (α = 1 at d = 1 already; d = 0 by convention).
    return jax.lax.stop_gradient(jnp.where(staleness <= 1, behaviour_logp, interpolated))


def linear_proximal_logp(logp, behaviour_logp, staleness):
    """Linear (probability-space) interpolation proxy of Guan et al. (docs/proximal.md, ``linear``).

        π_prox = β/d + (1 − 1/d) · sg(π_θ)      for d ≥ 1,      π_prox = β   for d = 0

    computed in log space as ``logaddexp(log β − log d, log sg(π_θ) + log1p(−1/d))``. At ``d = 1``
    the second weight is 0, so the result is exactly ``behaviour_logp`` (selected explicitly rather
    than relying on ``log 0 = −inf`` arithmetic).

    Returns:
      ``log π_prox`` (float32, no gradient).
    """
    chex.assert_equal_shape([logp, behaviour_logp])
    logp = jax.lax.stop_gradient(jnp.asarray(logp, jnp.float32))
    behaviour_logp = jax.lax.stop_gradient(jnp.asarray(behaviour_logp, jnp.float32))
    staleness = jnp.asarray(staleness)
    # Evaluate the interpolation only at d ≥ 2 so neither log weight is −inf or NaN.
    d = jnp.maximum(staleness, 2).astype(jnp.float32)
    interpolated = jnp.logaddexp(behaviour_logp - jnp.log(d), logp + jnp.log1p(-1.0 / d))
    return jax.lax.stop_gradient(jnp.where(staleness <= 1, behaviour_logp, interpolated))


# --------------------------------------------------------------------------------------------
# PPO-EWMA
# --------------------------------------------------------------------------------------------


class EwmaState(NamedTuple):
    """State of the bias-corrected parameter EWMA (docs/proximal.md, ``ewma`` / ``ewma_revised``).

    Attributes:
      params: the averaged parameters ``θ̄`` (any pytree of float arrays; policy only).
      weight: float32 scalar ``W``, the EWMA's total (decayed) sample weight.
      resets: int32 scalar, how many times :func:`ewma_maybe_reset` has fired.
    """

    params: Any
    weight: jax.Array
    resets: jax.Array


def ewma_init(params) -> EwmaState:
    """Starts the EWMA at ``θ̄ = θ_0`` with ``W = 1``: ``θ_0`` counts as the first sample.

    (Hilton et al. start from an empty average whose first update copies ``θ``; counting ``θ_0``
    as a sample instead keeps ``θ̄`` defined before the first gradient step. The difference is one
    sample of weight ``η^k`` that decays geometrically.)
    """
    return EwmaState(
        params=jax.tree.map(jnp.asarray, params),
        weight=jnp.ones((), jnp.float32),
        resets=jnp.zeros((), jnp.int32),
    )


def ewma_update(state: EwmaState, params, decay) -> EwmaState:
    """One bias-corrected EWMA step after a gradient step (docs/proximal.md):

        W ← η W + 1,     θ̄ ← θ̄ + (θ − θ̄) / W

    ``decay`` (η) may be traced.
    """
    weight = jnp.asarray(decay, jnp.float32) * state.weight + 1.0
    inv_weight = 1.0 / weight
    new_params = jax.tree.map(
        lambda avg, p: (avg + (p - avg) * inv_weight.astype(avg.dtype)).astype(avg.dtype),
        state.params,
        params,
    )
    return EwmaState(params=new_params, weight=weight, resets=state.resets)


def ewma_decay_for_age(age):
    """Decay η whose EWMA has mean age ``η/(1 − η) = age`` gradient steps: ``η = age/(age + 1)``."""
    age = jnp.asarray(age, jnp.float32)
    return age / (age + 1.0)


def default_ewma_age(steps_per_phase):
    """PPO-EWMA's default age ``(S − 1)/2``: the mean age of PPO's ``π_T`` over a phase of ``S`` steps."""
    return (jnp.asarray(steps_per_phase, jnp.float32) - 1.0) / 2.0


def revised_ewma_decay(lag_depth, steps_per_phase):
    """Revised PPO-EWMA decay (docs/proximal.md, ``ewma_revised``).

    ``W_stale = B · S`` gradient steps (lag model's nominal window, current phase included); the
    EWMA's centre of mass sits at its middle, age ``W_stale/2``, so ``η = W_stale/(W_stale + 2)``.
    ``lag_depth`` may be traced.
    """
    window = jnp.asarray(lag_depth, jnp.float32) * jnp.asarray(steps_per_phase, jnp.float32)
    return window / (window + 2.0)


def ewma_maybe_reset(state: EwmaState, params, kept_fraction, threshold) -> EwmaState:
    """Auto-reset of the revised EWMA (docs/proximal.md): if ``kept_fraction < threshold`` (strict) then
    ``θ̄ ← θ``, ``W ← 1`` and ``resets += 1``; otherwise the state is unchanged.

    Jittable with traced ``kept_fraction`` / ``threshold`` (a ``jnp.where`` over the tree).
    """
    reset = jnp.asarray(kept_fraction) < jnp.asarray(threshold)
    new_params = jax.tree.map(
        lambda avg, p: jnp.where(reset, jnp.asarray(p, avg.dtype), avg), state.params, params
    )
    return EwmaState(
        params=new_params,
        weight=jnp.where(reset, jnp.ones((), jnp.float32), state.weight),
        resets=state.resets + reset.astype(jnp.int32),
    )


# --------------------------------------------------------------------------------------------
# IMPACT's target network (kept in an EwmaState: params = the copy, weight = 1 + steps since it)
# --------------------------------------------------------------------------------------------


def target_update(state: EwmaState, params, period) -> EwmaState:
    """After a gradient step: ``W ← W + 1``; when ``W > period`` (``period`` steps since the last copy,
    ``W`` starting at 1) the target becomes ``θ`` and ``W ← 1`` (docs/corrections.md, IMPACT).
    ``period`` (K·S gradient steps) may be traced. ``resets`` is left alone."""
    weight = state.weight + 1.0
    copy = weight > jnp.asarray(period, jnp.float32)
    new_params = jax.tree.map(lambda avg, p: jnp.where(copy, jnp.asarray(p, avg.dtype), avg), state.params, params)
    return EwmaState(params=new_params, weight=jnp.where(copy, jnp.ones((), jnp.float32), weight),
                     resets=state.resets)
