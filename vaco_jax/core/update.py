"""The functional update step: align once per phase, then E epochs x M minibatches of a composed loss.

Generic wiring of a ``pieces.Method`` (docs/methods.md, "The update step"): this module reads the
pieces' small interfaces and the static ``UpdateShape``; it knows no method by name and reads no
``Config``. The numerics are in ``advantages.py``, ``proximal.py`` and ``objectives.py``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from vaco_jax.core import objectives as obj
from vaco_jax.core import proximal as prox
from vaco_jax.core.config import SHUFFLES
from vaco_jax.core.lag import PolicyBuffer
from vaco_jax.core.networks import NormalizerState, gaussian_entropy, gaussian_logp, normalize
from vaco_jax.core.pieces import Method, PolicyInputs
from vaco_jax.core.rollout import Transition


class Aligned(NamedTuple):
    """Per-sample quantities fixed at phase start (docs/estimators.md), time-major [U, N, ...]."""

    obs: jnp.ndarray  # learner-normalised observation
    next_obs: jnp.ndarray  # learner-normalised next observation (IMPALA recomputes V on it)
    action: jnp.ndarray
    reward: jnp.ndarray
    termination: jnp.ndarray
    truncation: jnp.ndarray
    behaviour_logp: jnp.ndarray  # logp_infer
    behaviour_mean: jnp.ndarray
    behaviour_log_std: jnp.ndarray
    old_logp: jnp.ndarray  # pi_old from the old-logit source (docs/lag.md)
    learner_logp: jnp.ndarray  # pi_T
    staleness: jnp.ndarray  # int32 d = T - v
    advantages: jnp.ndarray  # the advantage a ratio-to-beta surrogate multiplies
    pg_advantages: jnp.ndarray  # rho-weighted V-trace advantage (used with the pi_T denominator)
    value_targets: jnp.ndarray
    old_values: jnp.ndarray


class Networks(NamedTuple):
    policy_apply: Callable  # (variables, normalised obs) -> (mean, log_std)
    value_apply: Callable  # (variables, normalised obs) -> value


class UpdateShape(NamedTuple):
    """The static facts of a run the update step needs (set by the trainer from its Config)."""

    num_epochs: int
    num_minibatches: int
    minibatch_shuffle: str = "rank"  # permutation(): 'rank' or 'sort'
    normalize_advantages: bool = True
    normalize_observations: bool = True
    measure_mismatch: bool = False  # actor in low precision: compute the float32 snapshot for r_d
    synchronous: bool = False  # no policy buffer: pi_old of every sample is pi_T
    # the diagnostic TV to pi_T (tv_learner) for every method; False: pi_T is computed only when a piece
    # reads it (log pi_T is NaN then), so a method's cost is its own (experiments/study.py cost)
    learner_diagnostics: bool = True
    joint_grad_clip: bool = False  # one global-norm clip over both networks' gradients (Config.grad_clip)

    @property
    def steps_per_phase(self) -> int:
        return self.num_epochs * self.num_minibatches


# the metric a surrogate reports to scale the policy's learning rate in that gradient step (no gradient)
STEP_SCALE = "step_scale"

RANK_SHUFFLE_MAX = 1 << 16  # 'rank' draws keys until they are distinct: P(a tie) ~ n^2 / 2^33 per draw


def permutation(key: jax.Array, n: int, method: str = "rank") -> jnp.ndarray:
    """A uniformly random permutation of ``0..n-1`` (int32), drawn from ``key``.

    ``'rank'``: n independent uniform 32-bit keys, redrawn (a ``while_loop``) until all are distinct;
    element i goes to the rank of its key among them. Given distinct keys every ordering is equally
    likely, so the permutation is exactly uniform. It needs one single-array sort and a binary search,
    several times cheaper on a CPU than ``'sort'`` = ``jax.random.permutation`` (a sort of keys
    carrying values, twice), which ``'rank'`` also uses above ``RANK_SHUFFLE_MAX`` elements, where ties
    would make redraws frequent. The two give different permutations from one key (docs/estimators.md,
    "Minibatches")."""
    if method not in SHUFFLES:
        raise ValueError(f"minibatch_shuffle={method!r} must be one of {SHUFFLES}")
    if method == "sort" or n > RANK_SHUFFLE_MAX:
        return jax.random.permutation(key, n).astype(jnp.int32)

    def draw(k):
        k, sub = jax.random.split(k)
        bits = jax.random.bits(sub, (n,), jnp.uint32)
        ordered = jnp.sort(bits)
        return k, bits, ordered, jnp.all(ordered[1:] != ordered[:-1])

    _, bits, ordered, _ = jax.lax.while_loop(lambda c: ~c[3], lambda c: draw(c[0]), draw(key))
    return jnp.searchsorted(ordered, bits).astype(jnp.int32)


def _logp_under(policy_apply, variables, obs_n, action):
    mean, log_std = policy_apply(variables, obs_n)
    return gaussian_logp(action, mean, log_std)


def snapshot_logp(nets: Networks, buffer: PolicyBuffer, traj: Transition, phase, lag_depth,
                  normalize_observations: bool) -> jnp.ndarray:
    """Exact old-logit recovery (docs/lag.md ``snapshot``): float32 log-prob under each sample's version.

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


def _declared(piece, name: str):
    """``piece``'s ``name`` if its own class declares it, else None: a subclass of a built-in piece
    inherits the class's code but not its promise not to read π_T (it may read it in a new ``loss``)."""
    if name not in type(piece).__dict__:
        return None
    value = getattr(piece, name)
    return value() if callable(value) else value


def reads_learner_logp(method: Method) -> bool:
    """Whether a piece of ``method`` reads log π_T (the learner's log-density at phase start): the
    advantage estimator's log-ratio, the proximal source, or the surrogate (ratio denominator). A
    piece whose own class does not say it does not is assumed to."""
    return any(_declared(piece, name) is not False for piece, name in (
        (method.advantage, "reads_log_rho"), (method.proximal, "reads_learner_logp"),
        (method.surrogate, "reads_learner_logp")))


def align(shape: UpdateShape, method: Method, gamma, lag_depth, nets: Networks, policy_params, value_params,
          normalizer: NormalizerState, buffer: PolicyBuffer, traj: Transition, phase) -> tuple[Aligned, dict]:
    """Everything computed once at phase start: values, pi_T, old logits, advantages, targets."""
    obs_n = normalize(normalizer, traj.obs, shape.normalize_observations)
    next_obs_n = normalize(normalizer, traj.next_obs, shape.normalize_observations)
    values = nets.value_apply(value_params, obs_n)
    next_values = nets.value_apply(value_params, next_obs_n)
    staleness = jnp.asarray(phase, jnp.int32) - traj.behaviour_version

    source = method.surrogate.old_logits()
    if source is None:  # the surrogate reads no pi_old: it serves the r_d / r_s diagnostics only, which
        # in low precision are measured against the float32 snapshot whatever the method
        source = "snapshot" if shape.measure_mismatch else "infer"
    if (shape.learner_diagnostics or reads_learner_logp(method) or source == "recompute"
            or (source == "snapshot" and shape.synchronous)):
        learner_logp = _logp_under(nets.policy_apply, policy_params, obs_n, traj.action)
    else:  # nothing reads pi_T: its forward pass is not made (tv_learner is NaN)
        learner_logp = jnp.full_like(traj.behaviour_logp, jnp.nan)
    if source == "snapshot":
        if shape.synchronous:
            old_logp = learner_logp
        else:
            old_logp = snapshot_logp(nets, buffer, traj, phase, lag_depth, shape.normalize_observations)
    elif source == "recompute":
        old_logp = learner_logp
    else:  # 'infer'; for 'ewma_revised' the EWMA logits are computed per gradient step
        old_logp = traj.behaviour_logp

    est = method.advantage.estimate(traj.reward, values, next_values, traj.termination, traj.truncation,
                                    learner_logp - traj.behaviour_logp, gamma)
    advantages, pg_advantages, targets = jax.lax.stop_gradient(tuple(est))

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

def policy_loss(method: Method, nets: Networks, policy_params, ewma_params, mb: Aligned, entropy_coef,
                normalize_advantages: bool = True):
    """Negative surrogate of ``method`` on one minibatch (docs/methods.md), plus diagnostics.

    Order: pick the advantage the surrogate multiplies, normalise it, compute the proximal policy,
    test the filter on sg(log π_θ − the surrogate's denominator), stop the gradient of the samples
    it drops, then the surrogate's loss.
    """
    _, proximal, surrogate, sample_filter = method.pieces()
    mean, log_std = nets.policy_apply(policy_params, mb.obs)
    logp = gaussian_logp(mb.action, mean, log_std)
    sg_logp = jax.lax.stop_gradient(logp)

    # Which advantage multiplies the ratio (docs/estimators.md): q - V for a ratio to beta; the
    # rho-weighted V-trace advantage only when the ratio is taken to pi_T.
    advantages = mb.pg_advantages if surrogate.uses_pg_advantages() else mb.advantages
    if normalize_advantages:
        advantages = obj.normalize_advantages(advantages)

    ewma_logp = ewma_dist = None
    if proximal.uses_ewma:
        ewma_dist = nets.policy_apply(ewma_params, mb.obs)
        ewma_logp = jax.lax.stop_gradient(gaussian_logp(mb.action, *ewma_dist))
    x = PolicyInputs(action=mb.action, logp=logp, mean=mean, log_std=log_std, behaviour_logp=mb.behaviour_logp,
                     behaviour_mean=mb.behaviour_mean, behaviour_log_std=mb.behaviour_log_std,
                     learner_logp=mb.learner_logp, old_logp=mb.old_logp, proximal_logp=mb.behaviour_logp,
                     mismatch_log_ratio=None, staleness=mb.staleness, advantages=advantages)
    p = proximal.proximal(x, ewma_logp, ewma_dist)
    x = x._replace(proximal_logp=p.logp, mismatch_log_ratio=p.mismatch_log_ratio,
                   old_logp=mb.old_logp if p.old_logp is None else p.old_logp)

    keep, metrics = sample_filter.keep(sg_logp - jax.lax.stop_gradient(surrogate.denominator_logp(x)), advantages)
    metrics = dict(metrics)
    if keep is not None:  # a dropped sample keeps its value in the loss and contributes no gradient
        x = x._replace(logp=jnp.where(keep > 0, logp, sg_logp))
    loss, m = surrogate.loss(x)
    metrics.update(m)
    if proximal.uses_ewma and "mismatch_kept_fraction" in metrics:
        metrics["ewma_kept_fraction"] = metrics["mismatch_kept_fraction"]

    entropy = _add_diagnostics(metrics, log_std, sg_logp, mb.behaviour_logp, mb.learner_logp,
                               jax.lax.stop_gradient(x.old_logp))
    return loss - entropy_coef * entropy, metrics


def _add_diagnostics(metrics: dict, log_std, sg_logp, behaviour_logp, learner_logp, old_logp):
    """Entropy, TV to beta and to pi_T, the ESS of sg(pi_theta/beta), mean and 99th percentile of |log ratio|
    to beta and to pi_T, and r_s / r_d (docs/diagnostics.md) for every method (a loss that reports its own
    r_s / r_d, the decoupled one, keeps them). Returns the entropy."""
    entropy = jnp.mean(gaussian_entropy(log_std))
    metrics.update(entropy=entropy, tv_behaviour=obj.tv_estimate(sg_logp - behaviour_logp, "tv"),
                   tv_learner=obj.tv_estimate(sg_logp - learner_logp, "tv"),
                   tv_behaviour_bounded=obj.tv_bounded(sg_logp - behaviour_logp),
                   tv_learner_bounded=obj.tv_bounded(sg_logp - learner_logp, learner_logp - behaviour_logp))
    # what a reader needs to see why a method fails under lag (docs/diagnostics.md): the importance
    # weights' effective sample size and the size of the log-ratio to β and to π_T
    metrics["ess_behaviour"] = obj.effective_sample_size(sg_logp - behaviour_logp)
    for to, denominator in (("behaviour", behaviour_logp), ("learner", learner_logp)):
        mean_abs, p99_abs = obj.abs_log_ratio_stats(sg_logp - denominator)
        metrics[f"abs_log_ratio_{to}_mean"] = mean_abs
        metrics[f"abs_log_ratio_{to}_p99"] = p99_abs
    metrics.setdefault("staleness_ratio_mean", obj.mean_exp(sg_logp - old_logp))
    metrics.setdefault("mismatch_ratio_mean", obj.mean_exp(old_logp - behaviour_logp))
    metrics.setdefault("mismatch_ratio_max", jnp.max(jnp.exp(old_logp - behaviour_logp)))
    return entropy


def value_loss(nets: Networks, value_params, mb: Aligned, value_clip_epsilon=None):
    values = nets.value_apply(value_params, mb.obs)
    if value_clip_epsilon is not None:
        return obj.value_loss(values, mb.value_targets, mb.old_values, value_clip_epsilon)
    return obj.value_loss(values, mb.value_targets)


def every_step_loss(method: Method, gamma, nets: Networks, policy_params, value_params, mb: Aligned, entropy_coef):
    """An every-step estimator (IMPALA): advantages from the current policy and critic, whole sequences."""
    mean, log_std = nets.policy_apply(policy_params, mb.obs)
    logp = gaussian_logp(mb.action, mean, log_std)
    values = nets.value_apply(value_params, mb.obs)
    next_values = nets.value_apply(value_params, mb.next_obs)
    sg_logp = jax.lax.stop_gradient(logp)
    est = method.advantage.estimate(mb.reward, jax.lax.stop_gradient(values), jax.lax.stop_gradient(next_values),
                                    mb.termination, mb.truncation, sg_logp - mb.behaviour_logp, gamma)
    flat = lambda a: a.reshape(-1)  # noqa: E731
    x = PolicyInputs(action=mb.action, logp=flat(logp), mean=mean, log_std=log_std,
                     behaviour_logp=flat(mb.behaviour_logp), behaviour_mean=mb.behaviour_mean,
                     behaviour_log_std=mb.behaviour_log_std, learner_logp=flat(mb.learner_logp),
                     old_logp=flat(mb.old_logp), proximal_logp=flat(mb.behaviour_logp), mismatch_log_ratio=None,
                     staleness=flat(mb.staleness), advantages=flat(est.pg_advantages))
    pg, m = method.surrogate.loss(x)
    vl, _ = obj.value_loss(flat(values), flat(est.value_targets))
    m = dict(m)
    entropy = _add_diagnostics(m, log_std, flat(sg_logp), x.behaviour_logp, x.learner_logp, x.old_logp)
    return pg - entropy_coef * entropy, vl, m


# ----------------------------------------------------------------------------- optimiser

def make_optimizer(max_grad_norm, adam_eps) -> optax.GradientTransformation:
    """Clip + Adam direction; the (traced) learning rate is applied by ``apply_updates``.

    Actor and critic get separate optimisers, each with its own global-norm clip: one clip shared
    by both lets large value gradients (large returns) shrink the policy's step to nothing.
    ``max_grad_norm`` and ``adam_eps`` may be traced (the state's shapes do not depend on them).
    """
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.scale_by_adam(eps=adam_eps))


def joint_clip(grads, max_grad_norm):
    """``grads`` (any tree, e.g. both networks' gradients) scaled together so that their global norm is at
    most ``max_grad_norm``: ``optax.clip_by_global_norm``'s rule over the whole tree."""
    norm = optax.global_norm(grads)
    scale = jnp.where(norm < max_grad_norm, 1.0, max_grad_norm / norm)
    return jax.tree.map(lambda g: (g * scale).astype(g.dtype), grads)


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


def update_phase(shape: UpdateShape, method: Method, nets: Networks, opt, learner: LearnerState, aligned: Aligned,
                 key: jax.Array, learning_rate, *, lag_depth, gamma, value_coef, entropy_coef,
                 value_clip_epsilon=None, max_grad_norm=None) -> tuple[LearnerState, dict]:
    """E epochs x M minibatches of gradient steps on the aligned phase batch.

    With ``shape.joint_grad_clip`` both networks' gradients are first scaled together so that their
    joint global norm is at most ``max_grad_norm`` (then each optimiser's own clip has nothing left to
    do): with Adam's elementwise moments this is one optimiser over both networks, as CleanRL's PPO."""
    if shape.joint_grad_clip and max_grad_norm is None:
        raise ValueError("update_phase: a joint gradient clip needs max_grad_norm")
    proximal = method.proximal
    decay = proximal.decay(shape.steps_per_phase, lag_depth)
    every_step = method.advantage.every_step
    n_mb = shape.num_minibatches
    num_envs = aligned.reward.shape[1]
    batch = aligned.reward.shape[0] * num_envs

    def minibatches(epoch_key):
        if every_step:  # split the env axis: [U, N] -> [M, U, N/M]
            perm = permutation(epoch_key, num_envs, shape.minibatch_shuffle)
            return jax.tree.map(
                lambda x: jnp.swapaxes(x[:, perm].reshape((x.shape[0], n_mb, -1) + x.shape[2:]), 0, 1),
                aligned)
        perm = permutation(epoch_key, batch, shape.minibatch_shuffle)
        return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[perm].reshape((n_mb, -1) + x.shape[2:]),
                            aligned)

    def grad_step(learner: LearnerState, mb: Aligned):
        if every_step:
            def total(pp, vp):
                pl, vl, m = every_step_loss(method, gamma, nets, pp, vp, mb, entropy_coef)
                return pl + value_coef * vl, (pl, vl, m)
        else:
            def total(pp, vp):
                pl, m = policy_loss(method, nets, pp, learner.ewma.params, mb, entropy_coef,
                                    shape.normalize_advantages)
                vl, _ = value_loss(nets, vp, mb, value_clip_epsilon)
                return pl + value_coef * vl, (pl, vl, m)
        (_, (pl, vl, m)), (g_pol, g_val) = jax.value_and_grad(total, argnums=(0, 1), has_aux=True)(
            learner.policy_params, learner.value_params)
        grad_norms = dict(grad_norm_policy=optax.global_norm(g_pol), grad_norm_value=optax.global_norm(g_val))
        if shape.joint_grad_clip:
            g_pol, g_val = joint_clip((g_pol, g_val), max_grad_norm)
        # a surrogate may scale the policy's step by a factor of its minibatch (VCPO's ESS; Surrogate doc)
        policy_lr = learning_rate * m[STEP_SCALE] if STEP_SCALE in m else learning_rate
        policy_params, policy_opt = apply_updates(opt, learner.policy_opt, g_pol, learner.policy_params,
                                                  policy_lr)
        value_params, value_opt = apply_updates(opt, learner.value_opt, g_val, learner.value_params,
                                                learning_rate)
        ewma = proximal.after_step(learner.ewma, policy_params, m, decay)
        m = dict(m)
        m.update(policy_loss=pl, value_loss=vl, **grad_norms)
        return LearnerState(policy_params, value_params, policy_opt, value_opt, ewma), m

    def epoch(learner, epoch_key):
        return jax.lax.scan(grad_step, learner, minibatches(epoch_key))

    resets_before = learner.ewma.resets
    learner, metrics = jax.lax.scan(epoch, learner, jax.random.split(key, shape.num_epochs))
    out = {}
    for name, value in metrics.items():
        out[name] = jnp.max(value) if name.endswith("_max") else jnp.mean(value)
    out["ewma_resets"] = (learner.ewma.resets - resets_before).astype(jnp.float32)
    return learner, out
