"""The functional update step: align once per phase, then E epochs x M minibatches of a composed loss.

A method is a choice of four pieces (``Config.advantage_estimator``, ``proximal_source``,
``surrogate``, ``sample_filter``); this module wires them together and nothing else. The pieces
themselves are the pure functions of ``advantages.py``, ``proximal.py`` and ``objectives.py``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from vaco_jax import advantages as adv_lib
from vaco_jax import objectives as obj
from vaco_jax import proximal as prox
from vaco_jax.config import Config, TracedParams
from vaco_jax.lag import PolicyBuffer
from vaco_jax.networks import (NormalizerState, gaussian_entropy, gaussian_kl, gaussian_logp,
                               gaussian_logp_per_dim, normalize)
from vaco_jax.rollout import Transition


class Aligned(NamedTuple):
    """Per-sample quantities fixed at phase start (SPEC §2-§3), time-major [U, N, ...]."""

    obs: jnp.ndarray  # learner-normalised observation
    next_obs: jnp.ndarray  # learner-normalised next observation (IMPALA recomputes V on it)
    action: jnp.ndarray
    reward: jnp.ndarray
    termination: jnp.ndarray
    truncation: jnp.ndarray
    behaviour_logp: jnp.ndarray  # logp_infer
    behaviour_mean: jnp.ndarray
    behaviour_log_std: jnp.ndarray
    old_logp: jnp.ndarray  # pi_old from the old-logit source (SPEC §2)
    learner_logp: jnp.ndarray  # pi_T
    staleness: jnp.ndarray  # int32 d = T - v
    advantages: jnp.ndarray  # the advantage a ratio-to-beta surrogate multiplies
    pg_advantages: jnp.ndarray  # rho-weighted V-trace advantage (used with the pi_T denominator)
    value_targets: jnp.ndarray
    old_values: jnp.ndarray


class Networks(NamedTuple):
    policy_apply: Callable  # (variables, normalised obs) -> (mean, log_std)
    value_apply: Callable  # (variables, normalised obs) -> value


def _logp_under(policy_apply, variables, obs_n, action):
    mean, log_std = policy_apply(variables, obs_n)
    return gaussian_logp(action, mean, log_std)


def snapshot_logp(nets: Networks, buffer: PolicyBuffer, traj: Transition, phase, lag_depth,
                  normalize_observations: bool) -> jnp.ndarray:
    """Exact old-logit recovery (SPEC §2 ``snapshot``): float32 log-prob under each sample's version.

    One batched forward pass per buffer slot that can hold a used version (``min(B, T+1)`` slots,
    a traced loop bound), selecting the samples whose age matches the slot.
    """
    ages = jnp.asarray(phase, jnp.int32) - traj.behaviour_version
    capacity = buffer.versions.shape[0]
    num_slots = jnp.minimum(jnp.minimum(lag_depth, capacity), phase + 1)

    def body(slot, acc):
        snap = jax.tree.map(lambda x: x[slot], buffer.snapshots)
        obs_n = normalize(snap["normalizer"], traj.obs, normalize_observations)
        logp = _logp_under(nets.policy_apply, snap["policy"], obs_n, traj.action)
        return jnp.where(ages == slot, logp, acc)

    return jax.lax.fori_loop(0, num_slots, body, jnp.zeros_like(traj.behaviour_logp))


def align(config: Config, nets: Networks, policy_params, value_params, normalizer: NormalizerState,
          buffer: PolicyBuffer, traj: Transition, phase, traced: TracedParams) -> tuple[Aligned, dict]:
    """Everything computed once at phase start: values, pi_T, old logits, advantages, targets."""
    obs_n = normalize(normalizer, traj.obs, config.normalize_observations)
    next_obs_n = normalize(normalizer, traj.next_obs, config.normalize_observations)
    values = nets.value_apply(value_params, obs_n)
    next_values = nets.value_apply(value_params, next_obs_n)
    learner_logp = _logp_under(nets.policy_apply, policy_params, obs_n, traj.action)
    staleness = jnp.asarray(phase, jnp.int32) - traj.behaviour_version

    source = "ewma_revised" if config.proximal_source == "ewma_revised" else config.old_logit_source
    if source == "snapshot" and config.surrogate == "decoupled":
        if config.lag_model == "synchronous":
            old_logp = learner_logp
        else:
            old_logp = snapshot_logp(nets, buffer, traj, phase, traced.lag_depth,
                                     config.normalize_observations)
    elif source == "recompute":
        old_logp = learner_logp
    else:  # 'infer'; for 'ewma_revised' the EWMA logits are computed per gradient step
        old_logp = traj.behaviour_logp

    if config.advantage_estimator == "gae":
        advantages, targets = adv_lib.gae(traj.reward, values, next_values, traj.termination,
                                          traj.truncation, config.gamma, config.gae_lambda)
        pg_advantages = advantages
    else:  # V-trace realignment toward pi_T (also the first-step values for IMPALA's diagnostics)
        out = adv_lib.vtrace_outputs(traj.reward, values, next_values, traj.termination,
                                     traj.truncation, learner_logp - traj.behaviour_logp,
                                     config.gamma, config.gae_lambda, config.rho_bar, config.c_bar,
                                     config.rho_bar_pg)
        advantages, pg_advantages, targets = out.advantages, out.pg_advantages, out.value_targets
    advantages, pg_advantages, targets = jax.lax.stop_gradient((advantages, pg_advantages, targets))

    explained_variance = 1.0 - jnp.var(targets - values) / jnp.maximum(jnp.var(targets), 1e-8)
    aligned = Aligned(obs=obs_n, next_obs=next_obs_n, action=traj.action, reward=traj.reward,
                      termination=traj.termination, truncation=traj.truncation,
                      behaviour_logp=traj.behaviour_logp, behaviour_mean=traj.behaviour_mean,
                      behaviour_log_std=traj.behaviour_log_std, old_logp=old_logp,
                      learner_logp=learner_logp, staleness=staleness, advantages=advantages,
                      pg_advantages=pg_advantages, value_targets=targets, old_values=values)
    diag = {"explained_variance": explained_variance,
            "mean_staleness": jnp.mean(staleness.astype(jnp.float32)),
            "advantage_mean": jnp.mean(advantages)}
    return aligned, diag


# ----------------------------------------------------------------------------- losses

def _mean_dim_log_ratio(action, mean_a, log_std_a, mean_b, log_std_b):
    """Per-dimension geometric mean of the density ratio, in log space."""
    return jnp.mean(gaussian_logp_per_dim(action, mean_a, log_std_a)
                    - gaussian_logp_per_dim(action, mean_b, log_std_b), axis=-1)


def policy_loss(config: Config, nets: Networks, policy_params, ewma_params, mb: Aligned,
                traced: TracedParams):
    """Negative surrogate of the configured method on one minibatch (SPEC §4), plus diagnostics."""
    mean, log_std = nets.policy_apply(policy_params, mb.obs)
    logp = gaussian_logp(mb.action, mean, log_std)
    sg_logp = jax.lax.stop_gradient(logp)
    eps = traced.clip_epsilon

    # Which advantage multiplies the ratio (SPEC §3): q - V for a ratio to beta; the rho-weighted
    # V-trace advantage only when VACO's ratio is taken to pi_T.
    use_pg = config.surrogate == "is_pg" and config.tv_denominator == "learner"
    advantages = mb.pg_advantages if use_pg else mb.advantages
    if config.normalize_advantages:
        advantages = obj.normalize_advantages(advantages)

    metrics: dict[str, Any] = {}
    ewma_logp = None
    if config.proximal_source in ("ewma", "ewma_revised"):
        e_mean, e_log_std = nets.policy_apply(ewma_params, mb.obs)
        ewma_logp = jax.lax.stop_gradient(gaussian_logp(mb.action, e_mean, e_log_std))
        if config.proximal_source == "ewma_revised":
            if config.ewma_ratio_test == "per_dim":
                log_ratio = _mean_dim_log_ratio(mb.action, e_mean, e_log_std, mb.behaviour_mean,
                                                mb.behaviour_log_std)
            else:
                log_ratio = ewma_logp - mb.behaviour_logp
            kept = obj.mismatch_mask(log_ratio, jnp.zeros_like(log_ratio), config.mismatch_bound)
            metrics["ewma_kept_fraction"] = jax.lax.stop_gradient(jnp.mean(kept))

    s = config.surrogate
    if s == "ppo_clip":
        loss, m = obj.ppo_clip_loss(logp, mb.behaviour_logp, advantages, eps)
    elif s == "ppo_kl":
        kl = gaussian_kl(mb.behaviour_mean, mb.behaviour_log_std, mean, log_std)
        loss, m = obj.ppo_kl_loss(logp, mb.behaviour_logp, advantages, kl, config.kl_coef)
    elif s == "spo":
        loss, m = obj.spo_loss(logp, mb.behaviour_logp, advantages, eps)
    elif s == "decoupled":
        src = config.proximal_source
        if src == "behavior":
            prox_logp = mb.behaviour_logp
        elif src == "recompute":
            prox_logp = mb.learner_logp
        elif src == "loglinear":
            prox_logp = prox.loglinear_proximal_logp(logp, mb.behaviour_logp, mb.staleness)
        elif src == "linear":
            prox_logp = prox.linear_proximal_logp(logp, mb.behaviour_logp, mb.staleness)
        else:
            prox_logp = ewma_logp
        old_logp = ewma_logp if src == "ewma_revised" else mb.old_logp
        loss, m = obj.decoupled_ppo_loss(logp, prox_logp, old_logp, mb.behaviour_logp, advantages, eps,
                                         config.weight_cap, config.weight_cap_mode, config.mismatch_bound)
    elif s == "is_pg":
        den = mb.learner_logp if config.tv_denominator == "learner" else mb.behaviour_logp
        if config.sample_filter == "tv":
            loss, m = obj.tv_filtered_pg_loss(logp, den, advantages, traced.tv_budget, config.tv_scale)
        else:
            loss, m = obj.is_pg_loss(logp, den, advantages)
    else:
        raise ValueError(f"surrogate={s!r} is handled by impala_loss")
    metrics.update(m)

    entropy = jnp.mean(gaussian_entropy(log_std))
    loss = loss - config.entropy_coef * entropy
    metrics["entropy"] = entropy
    metrics["tv_behaviour"] = obj.tv_estimate(sg_logp - mb.behaviour_logp, "tv")
    metrics["tv_learner"] = obj.tv_estimate(sg_logp - mb.learner_logp, "tv")
    # r_s and r_d of SPEC §2 for every method (the decoupled loss reports its own, with its pi_old)
    metrics.setdefault("staleness_ratio_mean", jnp.mean(jnp.exp(sg_logp - mb.old_logp)))
    metrics.setdefault("mismatch_ratio_mean", jnp.mean(jnp.exp(mb.old_logp - mb.behaviour_logp)))
    return loss, metrics


def value_loss(config: Config, nets: Networks, value_params, mb: Aligned, traced: TracedParams):
    values = nets.value_apply(value_params, mb.obs)
    if config.value_clip:
        return obj.value_loss(values, mb.value_targets, mb.old_values, traced.clip_epsilon)
    return obj.value_loss(values, mb.value_targets)


def impala_loss(config: Config, nets: Networks, policy_params, value_params, mb: Aligned):
    """IMPALA (SPEC §4): V-trace from the current policy and critic at every step; whole sequences."""
    mean, log_std = nets.policy_apply(policy_params, mb.obs)
    logp = gaussian_logp(mb.action, mean, log_std)
    values = nets.value_apply(value_params, mb.obs)
    next_values = nets.value_apply(value_params, mb.next_obs)
    out = adv_lib.vtrace_outputs(mb.reward, jax.lax.stop_gradient(values),
                                 jax.lax.stop_gradient(next_values), mb.termination, mb.truncation,
                                 jax.lax.stop_gradient(logp) - mb.behaviour_logp, config.gamma,
                                 config.gae_lambda, config.rho_bar, config.c_bar, config.rho_bar_pg)
    pg, m = obj.impala_pg_loss(logp.reshape(-1), out.pg_advantages.reshape(-1))
    vl, _ = obj.value_loss(values.reshape(-1), out.value_targets.reshape(-1))
    entropy = jnp.mean(gaussian_entropy(log_std))
    sg_logp = jax.lax.stop_gradient(logp)
    m = dict(m)
    m.update(entropy=entropy,
             tv_behaviour=obj.tv_estimate((sg_logp - mb.behaviour_logp).reshape(-1), "tv"),
             tv_learner=obj.tv_estimate((sg_logp - mb.learner_logp).reshape(-1), "tv"))
    return pg - config.entropy_coef * entropy, vl, m


# ----------------------------------------------------------------------------- optimiser

def make_optimizer(config: Config) -> optax.GradientTransformation:
    """Clip + Adam direction; the (traced) learning rate is applied by ``apply_updates``.

    Actor and critic get separate optimisers, each with its own global-norm clip: one clip shared
    by both lets large value gradients (large returns) shrink the policy's step to nothing.
    """
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                       optax.scale_by_adam(eps=config.adam_eps))


def apply_updates(opt, opt_state, grads, params, learning_rate):
    updates, opt_state = opt.update(grads, opt_state, params)
    updates = jax.tree.map(lambda u: -learning_rate * u, updates)
    return optax.apply_updates(params, updates), opt_state


class LearnerState(NamedTuple):
    policy_params: Any
    value_params: Any
    policy_opt: Any
    value_opt: Any
    ewma: prox.EwmaState


def update_phase(config: Config, nets: Networks, opt, learner: LearnerState, aligned: Aligned,
                 key: jax.Array, traced: TracedParams, learning_rate) -> tuple[LearnerState, dict]:
    """E epochs x M minibatches of gradient steps on the aligned phase batch."""
    steps = config.steps_per_phase
    if config.proximal_source == "ewma_revised":
        decay = prox.revised_ewma_decay(traced.lag_depth, steps)
    else:
        age = config.ewma_age if config.ewma_age is not None else prox.default_ewma_age(steps)
        decay = prox.ewma_decay_for_age(jnp.asarray(age, jnp.float32))
    impala = config.surrogate == "impala"
    n_mb = config.num_minibatches

    def minibatches(epoch_key):
        if impala:  # split the env axis: [U, N] -> [M, U, N/M]
            perm = jax.random.permutation(epoch_key, config.num_envs)
            return jax.tree.map(
                lambda x: jnp.swapaxes(x[:, perm].reshape((x.shape[0], n_mb, -1) + x.shape[2:]), 0, 1),
                aligned)
        perm = jax.random.permutation(epoch_key, config.batch_size)
        return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[perm].reshape((n_mb, -1) + x.shape[2:]),
                            aligned)

    def grad_step(learner: LearnerState, mb: Aligned):
        if impala:
            def total(pp, vp):
                pl, vl, m = impala_loss(config, nets, pp, vp, mb)
                return pl + config.value_coef * vl, (pl, vl, m)
        else:
            def total(pp, vp):
                pl, m = policy_loss(config, nets, pp, learner.ewma.params, mb, traced)
                vl, _ = value_loss(config, nets, vp, mb, traced)
                return pl + config.value_coef * vl, (pl, vl, m)
        (_, (pl, vl, m)), (g_pol, g_val) = jax.value_and_grad(total, argnums=(0, 1), has_aux=True)(
            learner.policy_params, learner.value_params)
        policy_params, policy_opt = apply_updates(opt, learner.policy_opt, g_pol, learner.policy_params,
                                                  learning_rate)
        value_params, value_opt = apply_updates(opt, learner.value_opt, g_val, learner.value_params,
                                                learning_rate)
        ewma = learner.ewma
        if config.proximal_source in ("ewma", "ewma_revised"):
            ewma = prox.ewma_update(ewma, policy_params, decay)
            if config.proximal_source == "ewma_revised":
                ewma = prox.ewma_maybe_reset(ewma, policy_params, m["ewma_kept_fraction"],
                                             config.ewma_reset_threshold)
        m = dict(m)
        m.update(policy_loss=pl, value_loss=vl, grad_norm_policy=optax.global_norm(g_pol),
                 grad_norm_value=optax.global_norm(g_val))
        return LearnerState(policy_params, value_params, policy_opt, value_opt, ewma), m

    def epoch(learner, epoch_key):
        return jax.lax.scan(grad_step, learner, minibatches(epoch_key))

    resets_before = learner.ewma.resets
    learner, metrics = jax.lax.scan(epoch, learner, jax.random.split(key, config.num_epochs))
    out = {}
    for name, value in metrics.items():
        out[name] = jnp.max(value) if name.endswith("_max") else jnp.mean(value)
    out["ewma_resets"] = (learner.ewma.resets - resets_before).astype(jnp.float32)
    return learner, out
