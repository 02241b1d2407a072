"""The four kinds of method piece, each a small pytree (the rejax / optax shape; docs/methods.md).

    advantage estimator  x  proximal-policy source  x  surrogate  x  sample filter

A piece is a ``flax.struct`` dataclass: its structural choices are **static** fields (part of the
tree structure: changing one recompiles) and its numbers are **leaves** (traced: a grid over them is a
``vmap``). The interface of each kind is a handful of small pure methods; the update step
(``update.py``) calls them and reads nothing else. The numerics live in ``advantages.py``,
``proximal.py`` and ``objectives.py``; a piece only says which of them it uses with which numbers.

Field names are the flat names a user types (``clip_epsilon``, ``tv_budget``, ``gae_lambda``...):
``methods.make_method`` and the CLI find a knob by looking for a piece field of that name, so the
same name means the same thing in every piece that has it.

No validation lives in these classes (flax re-runs ``__post_init__`` when it unflattens a tree under
``jit``); values are checked where they enter: ``config.KNOBS`` and ``methods.compose``.

A new piece subclasses one of the four bases below, is decorated with ``@flax.struct.dataclass``,
and sets ``name``; see ``docs/methods.md`` for a worked example.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple, Optional

import jax
import jax.numpy as jnp
from flax import struct

from vaco_jax.core import advantages as adv_lib
from vaco_jax.core import objectives as obj
from vaco_jax.core import proximal as prox
from vaco_jax.core.networks import gaussian_kl, gaussian_logp_per_dim

_sg = jax.lax.stop_gradient


def static(default):
    """A structural (non-traced) field with a default."""
    return struct.field(pytree_node=False, default=default)


# ============================================================================================
# What a surrogate sees: one minibatch, everything per sample
# ============================================================================================


class PolicyInputs(NamedTuple):
    """Per-sample inputs of a surrogate's loss (docs/methods.md, "The update step").

    ``logp``, ``mean`` and ``log_std`` carry the gradient of ``π_θ`` (for a sample a filter dropped,
    ``logp`` is stop-gradient); every other field is a constant.
    """

    action: jnp.ndarray  # the recorded action [.., A]
    logp: jnp.ndarray  # log π_θ(a|s)
    mean: jnp.ndarray  # π_θ's mean [.., A]
    log_std: jnp.ndarray  # π_θ's log-std [.., A]
    behaviour_logp: jnp.ndarray  # log β (= logp_infer, the density the action was drawn from)
    behaviour_mean: jnp.ndarray
    behaviour_log_std: jnp.ndarray
    learner_logp: jnp.ndarray  # log π_T
    old_logp: jnp.ndarray  # log π_old from the old-logit source
    proximal_logp: jnp.ndarray  # log π_prox from the proximal-policy source
    mismatch_log_ratio: Optional[jnp.ndarray]  # what the mismatch mask tests (None: log π_old − log β)
    staleness: jnp.ndarray  # int32 d = T − v
    advantages: jnp.ndarray  # the advantage the ratio multiplies (normalised when the run normalises)


# What each kind of piece is given (its ``reads`` may name only these; ``methods.check_method``).
PROVIDED = {
    "advantage_estimator": ("rewards", "values", "next_values", "terminations", "truncations", "log_rho", "gamma"),
    "proximal_source": PolicyInputs._fields + ("ewma_logp", "ewma_dist"),
    "surrogate": PolicyInputs._fields,
    "sample_filter": ("log_ratio", "advantages"),
}


class Estimate(NamedTuple):
    advantages: jnp.ndarray  # multiplies a ratio taken to β
    pg_advantages: jnp.ndarray  # ρ-weighted form (ratio to π_T, IMPALA)
    value_targets: jnp.ndarray


class ProximalOut(NamedTuple):
    logp: jnp.ndarray  # log π_prox (no gradient)
    old_logp: Optional[jnp.ndarray] = None  # replaces the old-logit source (revised EWMA)
    mismatch_log_ratio: Optional[jnp.ndarray] = None  # replaces the mismatch mask's test


# ============================================================================================
# Advantage estimators (docs/estimators.md)
# ============================================================================================


class AdvantageEstimator:
    """``estimate(...)`` once per phase. ``every_step``: recomputed inside every gradient step
    from the current policy and critic (IMPALA); minibatches then split the env axis."""

    name: ClassVar[str] = "?"
    # the quantities the piece reads (a subset of ``PROVIDED``): a name the rollout does not provide is
    # an error when the method is composed, not a failure inside the compiled program (None: undeclared)
    reads: ClassVar[Optional[tuple]] = None
    every_step: ClassVar[bool] = False
    # whether ``estimate`` reads ``log_rho`` = log π_T − log β (False lets the update skip the π_T pass
    # when nothing else reads it; only a class's own declaration counts, so a subclass that does not
    # repeat it always gets π_T)
    reads_log_rho: ClassVar[bool] = True

    def estimate(self, rewards, values, next_values, terminations, truncations, log_rho, gamma) -> Estimate:
        raise NotImplementedError


@struct.dataclass
class GAE(AdvantageEstimator):
    """GAE(λ) (docs/estimators.md, eq. E1)."""

    name: ClassVar[str] = "gae"
    reads_log_rho: ClassVar[bool] = False
    gae_lambda: Any = 0.95

    def estimate(self, rewards, values, next_values, terminations, truncations, log_rho, gamma):
        del log_rho
        a, targets = adv_lib.gae(rewards, values, next_values, terminations, truncations, gamma, self.gae_lambda)
        return Estimate(a, a, targets)


@struct.dataclass
class VTrace(AdvantageEstimator):
    """V-trace realignment toward π_T, once per phase (docs/estimators.md, eq. E2)."""

    name: ClassVar[str] = "vtrace"
    gae_lambda: Any = 0.95
    rho_bar: Any = 1.0
    c_bar: Any = 1.0
    rho_bar_pg: Any = 1.0

    def estimate(self, rewards, values, next_values, terminations, truncations, log_rho, gamma):
        out = adv_lib.vtrace_outputs(rewards, values, next_values, terminations, truncations, log_rho, gamma,
                                     self.gae_lambda, self.rho_bar, self.c_bar, self.rho_bar_pg)
        return Estimate(out.advantages, out.pg_advantages, out.value_targets)


@struct.dataclass
class VTraceEveryStep(VTrace):
    """IMPALA's V-trace, recomputed at every gradient step (docs/estimators.md, eq. E2)."""

    name: ClassVar[str] = "vtrace_every_step"
    every_step: ClassVar[bool] = True


# ============================================================================================
# Proximal-policy sources (docs/proximal.md)
# ============================================================================================


class ProximalSource:
    """``proximal(x, ewma_logp, ewma_dist)`` per minibatch; ``decay`` / ``after_step`` for sources
    that carry a parameter average across gradient steps (``uses_ewma``)."""

    name: ClassVar[str] = "?"
    # the quantities the piece reads (a subset of ``PROVIDED``): a name the rollout does not provide is
    # an error when the method is composed, not a failure inside the compiled program (None: undeclared)
    reads: ClassVar[Optional[tuple]] = None
    uses_ewma: ClassVar[bool] = False
    # whether ``proximal`` reads ``x.learner_logp`` (log π_T); True unless the piece's own class says otherwise
    reads_learner_logp: ClassVar[bool] = True
    # an old-logit source this proximal source imposes (None: the surrogate's own)
    old_logit_source: ClassVar[Optional[str]] = None

    def proximal(self, x: PolicyInputs, ewma_logp=None, ewma_dist=None) -> ProximalOut:
        raise NotImplementedError

    def decay(self, steps_per_phase: int, lag_depth):
        return jnp.zeros((), jnp.float32)

    def after_step(self, ewma: prox.EwmaState, policy_params, metrics: dict, decay) -> prox.EwmaState:
        return ewma


@struct.dataclass
class Behavior(ProximalSource):
    """π_prox = β: decoupled PPO reduces to coupled PPO-Clip."""

    name: ClassVar[str] = "behavior"
    reads_learner_logp: ClassVar[bool] = False

    def proximal(self, x, ewma_logp=None, ewma_dist=None):
        return ProximalOut(x.behaviour_logp)


@struct.dataclass
class Recompute(ProximalSource):
    """π_prox = π_T (one extra forward pass at phase start)."""

    name: ClassVar[str] = "recompute"

    def proximal(self, x, ewma_logp=None, ewma_dist=None):
        return ProximalOut(x.learner_logp)


@struct.dataclass
class LogLinear(ProximalSource):
    """A-3PO: log π_prox = α log β + (1 − α) log sg(π_θ), α = 1/d (docs/proximal.md, eq. P1)."""

    name: ClassVar[str] = "loglinear"
    reads_learner_logp: ClassVar[bool] = False

    def proximal(self, x, ewma_logp=None, ewma_dist=None):
        return ProximalOut(prox.loglinear_proximal_logp(x.logp, x.behaviour_logp, x.staleness))


@struct.dataclass
class Linear(ProximalSource):
    """π_prox = β/d + (1 − 1/d) sg(π_θ) (docs/proximal.md, eq. P2)."""

    name: ClassVar[str] = "linear"
    reads_learner_logp: ClassVar[bool] = False

    def proximal(self, x, ewma_logp=None, ewma_dist=None):
        return ProximalOut(prox.linear_proximal_logp(x.logp, x.behaviour_logp, x.staleness))


@struct.dataclass
class Ewma(ProximalSource):
    """PPO-EWMA: π_prox = π_θ̄, a bias-corrected parameter average (docs/proximal.md, eq. P3).

    ``ewma_age`` in gradient steps; None: (S − 1)/2, the mean age of PPO's π_T over a phase.
    """

    name: ClassVar[str] = "ewma"
    reads_learner_logp: ClassVar[bool] = False
    uses_ewma: ClassVar[bool] = True
    ewma_age: Any = None

    def proximal(self, x, ewma_logp=None, ewma_dist=None):
        return ProximalOut(ewma_logp)

    def decay(self, steps_per_phase, lag_depth):
        age = prox.default_ewma_age(steps_per_phase) if self.ewma_age is None else self.ewma_age
        return prox.ewma_decay_for_age(jnp.asarray(age, jnp.float32))

    def after_step(self, ewma, policy_params, metrics, decay):
        return prox.ewma_update(ewma, policy_params, decay)


@struct.dataclass
class EwmaRevised(ProximalSource):
    """Revised PPO-EWMA: staleness-aware decay, π_θ̄ as both π_prox and π_old, auto-reset when the
    kept fraction of the mismatch mask falls below ``ewma_reset_threshold`` (docs/proximal.md, eq. P4).

    ``ewma_ratio_test``: ``joint`` tests π_θ̄/π_infer; ``per_dim`` its per-dimension geometric mean,
    in the loss's mask and in the reset alike (the reset reads the mask the loss used).
    """

    name: ClassVar[str] = "ewma_revised"
    reads_learner_logp: ClassVar[bool] = False
    uses_ewma: ClassVar[bool] = True
    old_logit_source: ClassVar[Optional[str]] = "ewma_revised"
    ewma_reset_threshold: Any = 0.5
    ewma_ratio_test: str = static("joint")

    def proximal(self, x, ewma_logp=None, ewma_dist=None):
        if self.ewma_ratio_test == "per_dim":
            e_mean, e_log_std = ewma_dist
            log_ratio = jnp.mean(gaussian_logp_per_dim(x.action, e_mean, e_log_std)
                                 - gaussian_logp_per_dim(x.action, x.behaviour_mean, x.behaviour_log_std), axis=-1)
        else:
            log_ratio = ewma_logp - x.behaviour_logp
        return ProximalOut(ewma_logp, old_logp=ewma_logp, mismatch_log_ratio=log_ratio)

    def decay(self, steps_per_phase, lag_depth):
        return prox.revised_ewma_decay(lag_depth, steps_per_phase)

    def after_step(self, ewma, policy_params, metrics, decay):
        ewma = prox.ewma_update(ewma, policy_params, decay)
        return prox.ewma_maybe_reset(ewma, policy_params, metrics["mismatch_kept_fraction"],
                                     self.ewma_reset_threshold)


@struct.dataclass
class Target(ProximalSource):
    """IMPACT's target network: π_prox = π_tgt, a copy of θ taken every ``target_update_phases`` phases
    (docs/corrections.md, eq. C6). It rides on the EWMA's state: ``params`` hold the copy and ``weight``
    counts 1 + the gradient steps since it was taken; ``decay`` is the copy period K·S in steps.

    At ``target_update_phases = 1`` the copy is taken after a phase's last step, so π_tgt = π_T in
    every phase (``recompute``'s proximal policy, computed per minibatch instead of once)."""

    name: ClassVar[str] = "target"
    reads: ClassVar[Optional[tuple]] = ("ewma_logp",)
    reads_learner_logp: ClassVar[bool] = False
    uses_ewma: ClassVar[bool] = True
    target_update_phases: Any = 1

    def proximal(self, x, ewma_logp=None, ewma_dist=None):
        return ProximalOut(ewma_logp)

    def decay(self, steps_per_phase, lag_depth):
        return jnp.asarray(self.target_update_phases, jnp.float32) * jnp.float32(steps_per_phase)

    def after_step(self, ewma, policy_params, metrics, decay):
        return prox.target_update(ewma, policy_params, decay)


# ============================================================================================
# Surrogates (docs/surrogates.md)
# ============================================================================================


class Surrogate:
    """``loss(x) -> (loss, metrics)``: the negative surrogate averaged over the minibatch. A metric named
    ``step_scale`` (``update.STEP_SCALE``, no gradient) multiplies the policy's learning rate in that
    gradient step (VCPO's √ESS).

    Class attributes say what the surrogate reads, so ``methods.compose`` can refuse a piece it
    would ignore: ``reads_proximal`` (uses ``x.proximal_logp``), ``filterable`` (a sample filter may
    drop samples from its gradient), ``needs_every_step`` (its advantages must come from an
    every-step estimator).
    """

    name: ClassVar[str] = "?"
    # the quantities the piece reads (a subset of ``PROVIDED``): a name the rollout does not provide is
    # an error when the method is composed, not a failure inside the compiled program (None: undeclared)
    reads: ClassVar[Optional[tuple]] = None
    reads_proximal: ClassVar[bool] = False
    filterable: ClassVar[bool] = False
    needs_every_step: ClassVar[bool] = False

    def uses_pg_advantages(self) -> bool:
        """Whether the ratio's denominator is π_T, so the ρ-weighted advantage applies."""
        return False

    def denominator_logp(self, x: PolicyInputs):
        """The denominator of the ratio a sample filter tests."""
        return x.behaviour_logp

    def reads_learner_logp(self) -> bool:
        """Whether ``loss`` or ``denominator_logp`` reads ``x.learner_logp`` (log π_T); a surrogate
        is assumed to unless its own class (not a parent) defines this method."""
        return True

    def old_logits(self) -> Optional[str]:
        """Where the π_old this surrogate reads comes from (docs/lag.md, "Old-logit sources");
        None: it reads no π_old (then π_old only serves the r_d / r_s diagnostics)."""
        return None

    def loss(self, x: PolicyInputs):
        raise NotImplementedError


@struct.dataclass
class PPOClip(Surrogate):
    """−mean min(r_β A, clip(r_β, 1 − ε, 1 + ε) A) (docs/surrogates.md, eq. S1)."""

    name: ClassVar[str] = "ppo_clip"
    clip_epsilon: Any = 0.2

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        return obj.ppo_clip_loss(x.logp, x.behaviour_logp, x.advantages, self.clip_epsilon)


@struct.dataclass
class PPOKL(Surrogate):
    """−mean r_β A + c_kl mean KL(β ‖ π_θ) (docs/surrogates.md, eq. S2)."""

    name: ClassVar[str] = "ppo_kl"
    kl_coef: Any = 1.0

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        kl = gaussian_kl(x.behaviour_mean, x.behaviour_log_std, x.mean, x.log_std)
        return obj.ppo_kl_loss(x.logp, x.behaviour_logp, x.advantages, kl, self.kl_coef)


@struct.dataclass
class SPO(Surrogate):
    """−mean[r_β A − |A|/(2ε) (r_β − 1)²] (docs/surrogates.md, eq. S3); ε is ``clip_epsilon``."""

    name: ClassVar[str] = "spo"
    clip_epsilon: Any = 0.2

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        return obj.spo_loss(x.logp, x.behaviour_logp, x.advantages, self.clip_epsilon)


@struct.dataclass
class Decoupled(Surrogate):
    """Decoupled PPO with old logits, weight cap and mismatch mask (docs/surrogates.md, eq. S4).

    ``old_logit_source``: snapshot (exact: the sample's own version, float32), infer (the actor's
    log-prob), recompute (π_T), or ewma_revised (set by the revised-EWMA source, which supplies it).
    ``weight_cap_mode``: truncate, mask (drop w > w_max) or band (drop w outside [w_min, w_max]).
    """

    name: ClassVar[str] = "decoupled"
    reads_proximal: ClassVar[bool] = True
    clip_epsilon: Any = 0.2
    weight_cap: Any = 5.0
    mismatch_bound: Any = 2.0
    weight_floor: Any = None  # the band's lower bound (weight_cap_mode='band'; None: 1/weight_cap)
    weight_cap_mode: str = static("truncate")
    old_logit_source: str = static("snapshot")

    def old_logits(self):
        return self.old_logit_source

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        return obj.decoupled_ppo_loss(x.logp, x.proximal_logp, x.old_logp, x.behaviour_logp, x.advantages,
                                      self.clip_epsilon, self.weight_cap, self.weight_cap_mode,
                                      self.mismatch_bound, mismatch_log_ratio=x.mismatch_log_ratio,
                                      weight_floor=self.weight_floor)


@struct.dataclass
class ISPG(Surrogate):
    """Importance-sampled policy gradient −mean r A (docs/surrogates.md, eq. S5), VACO's surrogate.

    ``tv_denominator``: ``behavior`` (r = π_θ/β, advantage q − V) or ``learner`` (r = π_θ/π_T, the
    ρ-weighted advantage).
    """

    name: ClassVar[str] = "is_pg"
    filterable: ClassVar[bool] = True
    tv_denominator: str = static("behavior")

    def uses_pg_advantages(self):
        return self.tv_denominator == "learner"

    def denominator_logp(self, x):
        return x.learner_logp if self.tv_denominator == "learner" else x.behaviour_logp

    def reads_learner_logp(self):
        return self.tv_denominator == "learner"

    def loss(self, x):
        return obj.is_pg_loss(x.logp, self.denominator_logp(x), x.advantages)


@struct.dataclass
class Impala(Surrogate):
    """−mean sg(pg-advantage) log π_θ with V-trace recomputed every step (docs/surrogates.md, eq. S6)."""

    name: ClassVar[str] = "impala"
    needs_every_step: ClassVar[bool] = True

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        return obj.impala_pg_loss(x.logp, x.advantages)


@struct.dataclass
class GaussianTrust(Surrogate):
    """GIPO: −mean sg(ω) r_β A with ω = exp(−ℓ²/(2σ²)), ℓ = sg(log r_β), no clip (docs/corrections.md, eq. C3)."""

    name: ClassVar[str] = "gaussian_trust"
    reads: ClassVar[Optional[tuple]] = ("logp", "behaviour_logp", "advantages")
    trust_width: Any = 0.5

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        return obj.gaussian_trust_loss(x.logp, x.behaviour_logp, x.advantages, self.trust_width)


@struct.dataclass
class SoftGate(Surrogate):
    """SAPO: −mean σ(τ(r_β − 1))·4/τ·A, τ for A > 0 and τ·``gate_temperature_ratio`` otherwise
    (docs/corrections.md, eq. C4)."""

    name: ClassVar[str] = "soft_gate"
    reads: ClassVar[Optional[tuple]] = ("logp", "behaviour_logp", "advantages")
    gate_temperature: Any = 1.0
    gate_temperature_ratio: Any = 1.05

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        return obj.soft_gate_loss(x.logp, x.behaviour_logp, x.advantages, self.gate_temperature,
                                  self.gate_temperature_ratio)


@struct.dataclass
class ESSScaledPG(Surrogate):
    """VCPO: the truncated importance-weighted policy gradient −mean min(sg(r_β), C) A log π_θ, with the
    policy's learning rate scaled by √ESS of the minibatch's weights (docs/corrections.md, eq. C5).

    The scale reaches the update step as the ``step_scale`` metric (``update.STEP_SCALE``): any surrogate
    that reports it gets its step scaled the same way."""

    name: ClassVar[str] = "ess_scaled_pg"
    reads: ClassVar[Optional[tuple]] = ("logp", "behaviour_logp", "advantages")
    ratio_cap: Any = 8.0

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        return obj.truncated_is_pg_loss(x.logp, x.behaviour_logp, x.advantages, self.ratio_cap)


@struct.dataclass
class BalancedClip(Surrogate):
    """BAPO: PPO-Clip on r_β with bounds [c_low, c_high] raised per minibatch, c_high first, until the
    positive-advantage share of the clipped surrogate reaches ``positive_share_target`` or both bounds
    reach their maxima (docs/corrections.md, eq. C7)."""

    name: ClassVar[str] = "balanced_clip"
    reads: ClassVar[Optional[tuple]] = ("logp", "behaviour_logp", "advantages")
    positive_share_target: Any = 0.4
    clip_low_start: Any = 0.6
    clip_low_max: Any = 0.9
    clip_low_step: Any = 0.02
    clip_high_start: Any = 1.2
    clip_high_max: Any = 3.0
    clip_high_step: Any = 0.05

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        return obj.balanced_clip_loss(x.logp, x.behaviour_logp, x.advantages, self.positive_share_target,
                                      self.clip_low_start, self.clip_low_max, self.clip_low_step,
                                      self.clip_high_start, self.clip_high_max, self.clip_high_step)


@struct.dataclass
class StalenessClip(Surrogate):
    """SAT: PPO-Clip on r_β whose interval end on the side of log r_β contracts for the samples beyond the
    minibatch's ``staleness_quantile`` of |log r_β| (docs/corrections.md, eq. C8)."""

    name: ClassVar[str] = "staleness_clip"
    reads: ClassVar[Optional[tuple]] = ("logp", "behaviour_logp", "advantages")
    clip_epsilon: Any = 0.2
    staleness_quantile: Any = 0.9
    contraction_exponent: Any = 2.0

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        return obj.staleness_clip_loss(x.logp, x.behaviour_logp, x.advantages, self.clip_epsilon,
                                       self.staleness_quantile, self.contraction_exponent)


@struct.dataclass
class LagAdaptiveClip(Surrogate):
    """PPO-Clip with ε = ε₀ + (ε_lag − ε₀)·min(1, ā/ā_sat), ā the minibatch's mean staleness in versions
    (docs/adaptive.md): ``clip_epsilon`` ε₀, ``clip_epsilon_lagged`` ε_lag, ``saturation_staleness`` ā_sat."""

    name: ClassVar[str] = "lag_adaptive_clip"
    reads: ClassVar[Optional[tuple]] = ("logp", "behaviour_logp", "advantages", "staleness")
    clip_epsilon: Any = 0.2
    clip_epsilon_lagged: Any = 0.6
    saturation_staleness: Any = 2.2

    def reads_learner_logp(self):
        return False

    def loss(self, x):
        return obj.lag_adaptive_clip_loss(x.logp, x.behaviour_logp, x.advantages, x.staleness, self.clip_epsilon,
                                          self.clip_epsilon_lagged, self.saturation_staleness)


# ============================================================================================
# Sample filters (docs/surrogates.md, "Filters")
# ============================================================================================


class SampleFilter:
    """``keep(log_ratio, advantages) -> (keep or None, metrics)``: a 0/1 mask of the samples whose
    gradient the surrogate keeps (None: keep all). ``log_ratio`` is sg(log π_θ − denominator)."""

    name: ClassVar[str] = "?"
    # the quantities the piece reads (a subset of ``PROVIDED``): a name the rollout does not provide is
    # an error when the method is composed, not a failure inside the compiled program (None: undeclared)
    reads: ClassVar[Optional[tuple]] = None

    def keep(self, log_ratio, advantages):
        raise NotImplementedError


@struct.dataclass
class NoFilter(SampleFilter):
    name: ClassVar[str] = "none"

    def keep(self, log_ratio, advantages):
        return None, {}


@struct.dataclass
class TVFilter(SampleFilter):
    """VACO's TV-divergence filter (docs/surrogates.md, eq. F1): while TV̂ > δ, drop the samples whose
    gradient would grow TV. ``tv_scale``: ``tv`` (½ mean|r − 1|) or ``l1`` (mean|r − 1|)."""

    name: ClassVar[str] = "tv"
    tv_budget: Any = 0.2
    tv_scale: str = static("tv")

    def keep(self, log_ratio, advantages):
        keep, tv = obj.tv_filter_keep(log_ratio, advantages, self.tv_budget, self.tv_scale)
        return keep, {"tv_estimate": tv, "filtered_fraction": 1.0 - jnp.mean(keep)}


@struct.dataclass
class SecondMomentFilter(SampleFilter):
    """M2PO's filter (docs/corrections.md, eq. C1): drop the samples with the largest squared log-ratio
    until the kept samples' mean ``ℓ²`` is at most ``second_moment_budget`` (τ); whatever the advantage."""

    name: ClassVar[str] = "second_moment"
    reads: ClassVar[Optional[tuple]] = ("log_ratio",)
    second_moment_budget: Any = 0.04

    def keep(self, log_ratio, advantages):
        keep, m2 = obj.second_moment_keep(log_ratio, self.second_moment_budget)
        return keep, {"second_moment": m2, "filtered_fraction": 1.0 - jnp.mean(keep)}


# ============================================================================================
# A method: one piece of each kind
# ============================================================================================


@struct.dataclass
class Method:
    """A composition of the four pieces. Build it with ``methods.make_method`` (a named preset) or
    ``methods.compose`` (any pieces; compatibility is checked there)."""

    advantage: Any
    proximal: Any
    surrogate: Any
    sample_filter: Any
    name: str = static("custom")

    def pieces(self) -> tuple:
        return (self.advantage, self.proximal, self.surrogate, self.sample_filter)


ADVANTAGE_ESTIMATORS = {c.name: c for c in (GAE, VTrace, VTraceEveryStep)}
PROXIMAL_SOURCES = {c.name: c for c in (Behavior, Recompute, LogLinear, Linear, Ewma, EwmaRevised, Target)}
SURROGATES = {c.name: c for c in (PPOClip, PPOKL, SPO, Decoupled, ISPG, Impala, GaussianTrust, SoftGate, ESSScaledPG,
                                BalancedClip, StalenessClip, LagAdaptiveClip)}
SAMPLE_FILTERS = {c.name: c for c in (NoFilter, TVFilter, SecondMomentFilter)}
PIECE_KINDS = {  # Config field naming the piece -> (Method attribute, base class, registry)
    "advantage_estimator": ("advantage", AdvantageEstimator, ADVANTAGE_ESTIMATORS),
    "proximal_source": ("proximal", ProximalSource, PROXIMAL_SOURCES),
    "surrogate": ("surrogate", Surrogate, SURROGATES),
    "sample_filter": ("sample_filter", SampleFilter, SAMPLE_FILTERS),
}

# Allowed values of every structural option (the Config field of the same name chooses them).
STATIC_CHOICES = {
    "old_logit_source": ("snapshot", "infer", "recompute", "ewma_revised"),
    "tv_denominator": ("behavior", "learner"),
    "tv_scale": ("tv", "l1"),
    "weight_cap_mode": ("truncate", "mask", "band"),
    "ewma_ratio_test": ("joint", "per_dim"),
}
