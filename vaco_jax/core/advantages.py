"""Advantage estimators and value targets (docs/estimators.md).

All arrays are time-major: the leading axis is time (``T`` steps of one unroll), any trailing axes
are independent streams (e.g. ``[T]`` or ``[T, N]`` for ``N`` actors). Everything is jittable and
computed in float32; ``gamma`` and ``lambda_`` (and the V-trace truncation constants) may be traced
scalars, so a sweep over them is a ``vmap``.

Episode boundaries (docs/estimators.md): ``V'_t = V(next observation of step t, before any auto-reset)``.

    g_t    = γ (1 − term_t)                      (a termination zeroes the bootstrap)
    cont_t = (1 − term_t)(1 − trunc_t)           (either end stops the backward recursion)

so the recursion never carries information from step ``t+1`` (a new episode) into step ``t`` when
step ``t`` ended an episode, and a truncated step still bootstraps from ``V'_t``.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

__all__ = ["VTraceOutput", "gae", "vtrace", "vtrace_outputs"]


def _prepare(rewards, values, next_values, terminations, truncations):
    """Checks shapes and casts the per-step inputs to float32 (no gradient flows through them)."""
    chex.assert_equal_shape([rewards, values, next_values, terminations, truncations])
    if jnp.ndim(rewards) < 1:
        raise ValueError("advantage inputs must be time-major arrays with at least one axis")
    cast = lambda x: jax.lax.stop_gradient(jnp.asarray(x, jnp.float32))
    return tuple(cast(x) for x in (rewards, values, next_values, terminations, truncations))


def gae(rewards, values, next_values, terminations, truncations, gamma, lambda_):
    """Generalised advantage estimation, GAE(λ) (docs/estimators.md, first bullet).

        δ_t = r_t + g_t V'_t − V_t
        A_t = δ_t + γ λ cont_t A_{t+1},      A_T := 0 past the last step of the unroll
        value target_t = A_t + V_t

    Args:
      rewards, values, next_values, terminations, truncations: ``[T, ...]`` arrays of equal shape;
        ``next_values[t] = V'_t`` is the critic at step ``t``'s next observation before any
        auto-reset; terminations / truncations are 0/1 (bool or float).
      gamma, lambda_: scalars (Python or traced).

    Returns:
      ``(advantages, value_targets)``, float32, same shape as ``rewards``, no gradient.
    """
    r, v, v_next, term, trunc = _prepare(rewards, values, next_values, terminations, truncations)
    gamma = jnp.asarray(gamma, jnp.float32)
    lambda_ = jnp.asarray(lambda_, jnp.float32)
    discount = gamma * (1.0 - term)
    cont = (1.0 - term) * (1.0 - trunc)
    deltas = r + discount * v_next - v
    decays = gamma * lambda_ * cont

    def step(next_advantage, xs):
        delta_t, decay_t = xs
        advantage_t = delta_t + decay_t * next_advantage
        return advantage_t, advantage_t

    _, advantages = jax.lax.scan(
        step, jnp.zeros_like(deltas[0]), (deltas, decays), reverse=True
    )
    return advantages, advantages + v


class VTraceOutput(NamedTuple):
    """Everything the V-trace realignment of docs/estimators.md produces (all float32, no gradient).

    Attributes:
      value_targets: ``v_t``, the V-trace value targets.
      q_values: ``q_t``, the realigned action-value estimates.
      advantages: ``q_t − V_t`` — *not* ρ-weighted; the advantage for surrogates whose ratio is
        already taken to the behaviour policy β (docs/estimators.md "Which advantage a loss uses").
      pg_advantages: ``min(ρ̄_pg, ρ_t) · (q_t − V_t)`` — IMPALA's policy-gradient advantage, used
        with a ``π_T`` denominator and in the IMPALA loss.
      rhos: ``ρ_t = exp(log_rhos_t)``, untruncated.
    """

    value_targets: jax.Array
    q_values: jax.Array
    advantages: jax.Array
    pg_advantages: jax.Array
    rhos: jax.Array


def vtrace_outputs(
    rewards,
    values,
    next_values,
    terminations,
    truncations,
    log_rhos,
    gamma,
    lambda_,
    rho_bar=1.0,
    c_bar=1.0,
    rho_bar_pg=1.0,
) -> VTraceOutput:
    """V-trace realignment (docs/estimators.md, "V-trace realignment (VACO)"), all intermediate quantities.

        ρ_t = exp(log_rhos_t)                                  (log π_target − log β)
        δ_t = min(ρ̄, ρ_t) · (r_t + g_t V'_t − V_t)
        c_t = λ · min(c̄, ρ_t)
        v_t − V_t = δ_t + γ cont_t c_t (v_{t+1} − V_{t+1}),     (v_T − V_T) := 0
        q_t = r_t + g_t · [(1 − trunc_t)(λ v_{t+1} + (1 − λ) V'_t) + trunc_t V'_t],   v_T := V'_{T−1}

    At a termination ``g_t = 0`` removes ``v_{t+1}`` from ``q_t``; at a truncation ``trunc_t = 1``
    selects ``V'_t`` instead; so the next episode's ``v_{t+1}`` never leaks into step ``t``.

    With ``log_rhos ≡ 0`` (β = π_T) and default ``ρ̄ = c̄ = 1`` the value targets equal GAE's
    exactly, and ``advantages = q − V`` equals GAE's advantages whenever the critic inputs are
    consistent (``V'_t = V_{t+1}`` for every step ``t`` that does not end an episode), as they are
    for data from one unroll.

    Args:
      rewards, values, next_values, terminations, truncations, log_rhos: ``[T, ...]`` arrays of
        equal shape (see :func:`gae`).
      gamma, lambda_: discount and trace parameter (Python or traced scalars).
      rho_bar, c_bar, rho_bar_pg: truncation constants ρ̄, c̄, ρ̄_pg (may be traced; ``inf`` allowed).

    Returns:
      A :class:`VTraceOutput`; all fields float32 with the shape of ``rewards``, no gradient.
    """
    r, v, v_next, term, trunc = _prepare(rewards, values, next_values, terminations, truncations)
    chex.assert_equal_shape([rewards, log_rhos])
    log_rhos = jax.lax.stop_gradient(jnp.asarray(log_rhos, jnp.float32))
    gamma = jnp.asarray(gamma, jnp.float32)
    lambda_ = jnp.asarray(lambda_, jnp.float32)

    rhos = jnp.exp(log_rhos)
    clipped_rhos = jnp.minimum(rho_bar, rhos)
    cs = lambda_ * jnp.minimum(c_bar, rhos)
    discount = gamma * (1.0 - term)
    cont = (1.0 - term) * (1.0 - trunc)
    deltas = clipped_rhos * (r + discount * v_next - v)
    decays = gamma * cont * cs

    def step(next_diff, xs):
        delta_t, decay_t = xs
        diff_t = delta_t + decay_t * next_diff  # v_t − V_t
        return diff_t, diff_t

    _, diffs = jax.lax.scan(step, jnp.zeros_like(deltas[0]), (deltas, decays), reverse=True)
    value_targets = v + diffs

    # v_{t+1} for every t; past the last step v_T := V'_{T−1}.
    next_targets = jnp.concatenate([value_targets[1:], v_next[-1:]], axis=0)
    bootstrap = (1.0 - trunc) * (lambda_ * next_targets + (1.0 - lambda_) * v_next) + trunc * v_next
    q_values = r + discount * bootstrap
    advantages = q_values - v
    pg_advantages = jnp.minimum(rho_bar_pg, rhos) * advantages
    return VTraceOutput(
        value_targets=value_targets,
        q_values=q_values,
        advantages=advantages,
        pg_advantages=pg_advantages,
        rhos=rhos,
    )


def vtrace(
    rewards,
    values,
    next_values,
    terminations,
    truncations,
    log_rhos,
    gamma,
    lambda_,
    rho_bar=1.0,
    c_bar=1.0,
    rho_bar_pg=1.0,
):
    """V-trace (docs/estimators.md), IMPALA / rlax-style interface.

    Thin wrapper of :func:`vtrace_outputs`.

    Returns:
      ``(value_targets, pg_advantages)`` where ``pg_advantages = min(ρ̄_pg, ρ_t)(q_t − V_t)``
      carries its ρ factor, as in IMPALA. Use ``vtrace_outputs(...).advantages`` for the
      un-weighted ``q_t − V_t`` that the β-ratio surrogates need.
    """
    out = vtrace_outputs(
        rewards,
        values,
        next_values,
        terminations,
        truncations,
        log_rhos,
        gamma,
        lambda_,
        rho_bar=rho_bar,
        c_bar=c_bar,
        rho_bar_pg=rho_bar_pg,
    )
    return out.value_targets, out.pg_advantages
