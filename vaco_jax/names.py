"""The names every layer reads, and nothing else: no jax, no numpy (tests/test_layout.py imports it alone).

* **Methods** (``METHODS``): each method's four pieces by their registry names (``core/pieces.py``),
  what it is, and how it is shown and tuned: its label, colour and marker in every figure, its
  step-size knob besides the learning rate (``None``: the learning rate alone), the options it sets.
  ``core.methods.make_method`` builds a method's pytree from an entry; ``core.methods.register_method``
  adds one (to this same dict).
* **Knobs** (``KNOBS``): every numeric knob once, with its home, allowed range and help line. A knob
  is **traced**: it enters the compiled program as an array, so a grid over it (with lag depths and
  seeds) is one ``vmap``ped program. Three homes: ``lag`` (the lag piece: ``lag_depth``,
  ``age_weights``, ``publish_interval``), ``common`` (fields of ``config.TracedParams`` read by every method: learning
  rate, gamma, ...; docs/methods.md) and ``method`` (a field of one of the method's pieces:
  ``clip_epsilon`` of PPO-Clip, ``tv_budget`` of the TV filter, ...). A piece of a user's own may add
  knobs of its own; they are swept by name the same way, only without a range check.
  ``core.knobs.check_knob`` checks a value against its entry.

The trainer (``core``), the host side (``driver``, ``studies``) and what reads results (``analysis``)
all read these; only ``core`` turns them into code. The lag models and the tasks keep their
registries beside the code that builds them (``core/lag.py``, ``envs/registry.py``): an entry there
is a builder, not only a name.
"""

from __future__ import annotations

import dataclasses
import math

# ----------------------------------------------------------------------------- knobs

@dataclasses.dataclass(frozen=True)
class Knob:
    home: str  # 'lag' | 'common' | 'method'
    help: str
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False  # low itself not allowed
    allow_inf: bool = False  # +inf allowed (disables a cap or a filter)
    integer: bool = False
    optional: bool = False  # None is a value ("off", or "the piece's default" for a method knob)

    def allowed(self) -> str:
        lo = "(" if self.low_open else "["
        hi = "inf]" if self.allow_inf and self.high == math.inf else (
            f"{self.high:g}]" if self.high != math.inf else "inf)")
        kind = "an integer" if self.integer else "a number"
        return f"{kind} in {lo}{self.low:g}, {hi}"


KNOBS: dict[str, Knob] = {
    # --- lag (docs/lag.md)
    "lag_depth": Knob("lag", "lag depth B: actors act with snapshots up to B-1 versions old (1 <= B <= buffer_capacity)",
                      low=1, integer=True),
    "age_weights": Knob("lag", "lag_model='ages': weights of snapshot ages 0, 1, ... (normalised; length <= buffer_capacity)",
                        low=0, optional=True),
    "publish_interval": Knob("lag", "lag_model='publish': the learner publishes every k-th version, seen lag_depth-k "
                             "versions late (1 <= k <= lag_depth)", low=1, integer=True),
    # --- common (docs/methods.md, docs/surrogates.md)
    "learning_rate": Knob("common", "Adam step size of actor and critic", low=0, low_open=True),
    "gamma": Knob("common", "discount factor", low=0, high=1),
    "max_grad_norm": Knob("common", "the gradient clip's global-norm bound: with grad_clip='per_network' the "
                          "policy's and the critic's gradients are each clipped to it, with grad_clip='joint' both "
                          "together (inf: no clip)", low=0, low_open=True, allow_inf=True),
    "adam_eps": Knob("common", "Adam epsilon", low=0, low_open=True),
    "value_coef": Knob("common", "weight of the value loss", low=0),
    "entropy_coef": Knob("common", "weight of the entropy bonus", low=0),
    "init_log_std": Knob("common", "initial log standard deviation of the Gaussian policy", low=-20, high=5),
    "value_clip_epsilon": Knob("common", "PPO value clipping range (None: no value clipping)",
                               low=0, low_open=True, optional=True),
    "mismatch_strength": Knob("common", "training-inference mismatch: each actor samples from its policy's "
                              "mean shifted by this many standard deviations x a fresh standard normal draw "
                              "per sample and action dimension, and records that density (0: none)",
                              low=0, high=10),
    # --- method pieces (docs/methods.md); None in Config = the piece's default
    "gae_lambda": Knob("method", "lambda of GAE and of V-trace's trace (every estimator)", low=0, high=1),
    "rho_bar": Knob("method", "V-trace: truncation of rho in the TD term", low=0, low_open=True, allow_inf=True),
    "c_bar": Knob("method", "V-trace: truncation of the trace coefficient c", low=0, low_open=True,
                  allow_inf=True),
    "rho_bar_pg": Knob("method", "V-trace: truncation of rho in the policy-gradient advantage", low=0,
                       low_open=True, allow_inf=True),
    "clip_epsilon": Knob("method", "PPO clip range epsilon (ppo_clip, decoupled, sat; ppo_clip_adaptive's without "
                         "lag) or SPO's epsilon", low=0, low_open=True),
    "kl_coef": Knob("method", "PPO-KL: weight of KL(beta || pi_theta)", low=0),
    "tv_budget": Knob("method", "VACO's TV budget delta (inf: no filtering)", low=0, low_open=True,
                      allow_inf=True),
    "weight_cap": Knob("method", "decoupled PPO: cap w_max of pi_prox/pi_old (inf: no cap)", low=0,
                       low_open=True, allow_inf=True),
    "mismatch_bound": Knob("method", "decoupled PPO: keep a sample when pi_old/pi_infer is in [1/c, c]", low=1,
                           allow_inf=True),
    "ewma_age": Knob("method", "PPO-EWMA: age of the average in gradient steps (None: (S-1)/2)", low=0),
    "ewma_reset_threshold": Knob("method", "revised PPO-EWMA: reset when the kept fraction falls below it",
                                 low=0, high=1),
    # the staleness corrections of 2025-26 (docs/corrections.md)
    "weight_floor": Knob("method", "decoupled PPO, weight_cap_mode='band': keep w = pi_prox/pi_old in "
                         "[weight_floor, weight_cap] (None: 1/weight_cap)", low=0, low_open=True, optional=True),
    "second_moment_budget": Knob("method", "M2PO: drop the largest squared log-ratios to beta until their mean is "
                                 "at most this tau (inf: no filtering)", low=0, low_open=True, allow_inf=True),
    "trust_width": Knob("method", "GIPO: width sigma of the Gaussian trust weight exp(-l^2/(2 sigma^2)) on the "
                        "log-ratio to beta (inf: no weighting)", low=0, low_open=True, allow_inf=True),
    "gate_temperature": Knob("method", "SAPO: temperature tau of the sigmoid gate for positive advantages "
                             "(larger: a tighter trust region)", low=0, low_open=True),
    "gate_temperature_ratio": Knob("method", "SAPO: the negative-advantage temperature over the positive one",
                                   low=0, low_open=True),
    "ratio_cap": Knob("method", "VCPO: truncation C of the importance weight pi_theta/beta (inf: none)", low=0,
                      low_open=True, allow_inf=True),
    "target_update_phases": Knob("method", "IMPACT: phases between copies of the learner into the target policy",
                                 low=1, integer=True),
    # BAPO's adaptive clip bounds (explicit ratio bounds, not epsilons) and SAT's contraction
    "positive_share_target": Knob("method", "BAPO: target share rho_0 of the positive-advantage part of the "
                                  "clipped surrogate; the bounds rise until it is reached", low=0, high=1),
    "clip_low_start": Knob("method", "BAPO: lower clip bound a- the search starts from (a ratio bound in "
                           "(0, 1], <= clip_low_max)", low=0, high=1, low_open=True),
    "clip_low_max": Knob("method", "BAPO: largest lower clip bound b- (<= 1)", low=0, high=1, low_open=True),
    "clip_low_step": Knob("method", "BAPO: step delta- of the lower bound's search", low=0, low_open=True),
    "clip_high_start": Knob("method", "BAPO: upper clip bound a+ the search starts from (>= 1, <= "
                            "clip_high_max)", low=1),
    "clip_high_max": Knob("method", "BAPO: largest upper clip bound b+", low=1),
    "clip_high_step": Knob("method", "BAPO: step delta+ of the upper bound's search", low=0, low_open=True),
    "staleness_quantile": Knob("method", "SAT: the minibatch quantile of |log r_beta| beyond which a sample's "
                               "clip end contracts", low=0, high=1),
    "contraction_exponent": Knob("method", "SAT: exponent n of the contraction 1/(1 + ((|d| - q)/q)^n)", low=0,
                                 low_open=True),
    # the lag-adaptive clip range of docs/adaptive.md
    "clip_epsilon_lagged": Knob("method", "ppo_clip_adaptive: the clip range once the mean staleness reaches "
                                "saturation_staleness", low=0, low_open=True),
    "saturation_staleness": Knob("method", "ppo_clip_adaptive: mean staleness (versions) at which the clip range "
                                 "reaches clip_epsilon_lagged", low=0, low_open=True),
}

LAG_KNOBS = tuple(n for n, k in KNOBS.items() if k.home == "lag")
COMMON_KNOBS = tuple(n for n, k in KNOBS.items() if k.home == "common")
METHOD_KNOBS = tuple(n for n, k in KNOBS.items() if k.home == "method")


# ----------------------------------------------------------------------------- methods

PIECE_FIELDS = ("advantage_estimator", "proximal_source", "surrogate", "sample_filter")
CUSTOM = "custom"  # Config(method='custom'): the four pieces chosen one by one


@dataclasses.dataclass(frozen=True)
class MethodPreset:
    advantage_estimator: str | type  # a piece's registry name, or a user's piece class
    proximal_source: str | type
    surrogate: str | type
    sample_filter: str | type
    description: str
    label: str = ""  # in figures and tables (default: the method's name)
    colour: str | None = None  # in every figure (None: one of figures' spare colours)
    marker: str = "o"
    step_knob: str | None = None  # the step-size knob the studies tune besides the learning rate
    # the method's own settings of its pieces' options: a structural one (``weight_cap_mode``, ...) is part of
    # the method (another value is an error); a number is its default (a flag or a sweep may change it)
    options: dict = dataclasses.field(default_factory=dict)

    def piece_names(self) -> dict:
        return {kind: v if isinstance(v, str) else v.name for kind in PIECE_FIELDS for v in [getattr(self, kind)]}


METHODS: dict[str, MethodPreset] = {
    "ppo_clip": MethodPreset("gae", "behavior", "ppo_clip", "none",
                             "coupled PPO-Clip on the lagged data (the naive baseline)",
                             "PPO-Clip", "#1f77b4", "o", "clip_epsilon"),
    "ppo_kl": MethodPreset("gae", "behavior", "ppo_kl", "none", "PPO with an analytic KL(beta || pi_theta) penalty",
                           "PPO-KL", "#7f7f7f", "v", "kl_coef"),
    "spo": MethodPreset("gae", "behavior", "spo", "none", "Simple Policy Optimization (Xie et al. 2024)",
                        "SPO", "#17becf", "P", "clip_epsilon"),
    "decoupled_recompute": MethodPreset("gae", "recompute", "decoupled", "none",
                                        "decoupled PPO, proximal policy = pi_T (one extra forward pass)",
                                        "Decoupled PPO (recompute)", "#ff7f0e", "s", "clip_epsilon"),
    "decoupled_linear": MethodPreset("gae", "linear", "decoupled", "none",
                                     "decoupled PPO, proximal = linear interpolation beta/d + (1-1/d) pi_theta",
                                     "Decoupled PPO (linear)", "#e377c2", "D", "clip_epsilon"),
    "a3po": MethodPreset("gae", "loglinear", "decoupled", "none",
                         "A-3PO: log-linear proximal policy with alpha = 1/staleness",
                         "A-3PO", "#2ca02c", "^", "clip_epsilon"),
    "ppo_ewma": MethodPreset("gae", "ewma", "decoupled", "none", "PPO-EWMA (Hilton et al. 2022)",
                             "PPO-EWMA", "#9467bd", "<", "clip_epsilon"),
    "ppo_ewma_revised": MethodPreset("gae", "ewma_revised", "decoupled", "none",
                                     "revised PPO-EWMA: staleness-aware decay, mismatch mask, auto-reset",
                                     "PPO-EWMA (revised)", "#8c564b", ">", "clip_epsilon"),
    "vaco": MethodPreset("vtrace", "behavior", "is_pg", "tv",
                         "VACO: V-trace realignment once per phase + TV-divergence filter",
                         "VACO", "#d62728", "*", "tv_budget"),
    "vaco_realign_only": MethodPreset("vtrace", "behavior", "is_pg", "none", "VACO ablation: realignment, no filter",
                                      "VACO (realign only)", "#ff9896", "X", None),
    "vaco_filter_only": MethodPreset("gae", "behavior", "is_pg", "tv", "VACO ablation: TV filter on GAE advantages",
                                     "VACO (filter only)", "#bcbd22", "d", "tv_budget"),
    # the staleness corrections of 2025-26 (docs/corrections.md)
    "m2po": MethodPreset("gae", "behavior", "is_pg", "second_moment",
                         "M2PO: IS policy gradient, largest squared log-ratios dropped until their mean is <= tau",
                         "M2PO", "#393b79", "p", "second_moment_budget"),
    "tis": MethodPreset("gae", "recompute", "decoupled", "none",
                        "truncated IS: PPO-Clip on pi_theta/pi_T times min(pi_T/beta, C)",
                        "TIS", "#637939", "8", "weight_cap", {"old_logit_source": "infer", "weight_cap": 2.0}),
    "mis": MethodPreset("gae", "recompute", "decoupled", "none",
                        "masked IS (IcePop): PPO-Clip on pi_theta/pi_T times pi_T/beta, 0 outside [1/C, C]",
                        "MIS", "#8c6d31", "H", "weight_cap",
                        {"old_logit_source": "infer", "weight_cap": 2.0, "weight_cap_mode": "band"}),
    "gipo": MethodPreset("gae", "behavior", "gaussian_trust", "none",
                         "GIPO: a Gaussian trust weight on the log-ratio in place of the clip",
                         "GIPO", "#843c39", "1", "trust_width"),
    "sapo": MethodPreset("gae", "behavior", "soft_gate", "none",
                         "SAPO: a temperature-controlled sigmoid gate on the ratio in place of the clip",
                         "SAPO", "#7b4173", "2", "gate_temperature"),
    "vcpo": MethodPreset("gae", "behavior", "ess_scaled_pg", "none",
                         "VCPO: truncated IS policy gradient, learning rate scaled by the sqrt of the weights' ESS",
                         "VCPO", "#e7969c", "3", None),
    "impact": MethodPreset("gae", "target", "decoupled", "none",
                           "IMPACT: PPO-Clip on pi_theta/pi_target times min(pi_target/beta, rho_bar), target "
                           "copied every K phases", "IMPACT", "#5254a3", "4", "clip_epsilon",
                           {"old_logit_source": "infer", "weight_cap": 2.0, "target_update_phases": 2}),
    "bapo": MethodPreset("gae", "behavior", "balanced_clip", "none",
                         "BAPO: PPO-Clip whose bounds rise per minibatch until the positive-advantage share of "
                         "the loss reaches its target", "BAPO", "#ad494a", "x", None),
    "sat": MethodPreset("gae", "behavior", "staleness_clip", "none",
                        "SAT: PPO-Clip whose interval end contracts for the samples with the largest |log r_beta|",
                        "SAT", "#31a354", "+", "clip_epsilon"),
    # a lag-adaptive clip range of our own, designed from the step size x lag study (docs/adaptive.md)
    "ppo_clip_adaptive": MethodPreset("gae", "behavior", "lag_adaptive_clip", "none",
                                      "PPO-Clip with its clip range set from the minibatch's mean staleness, "
                                      "calibrated on the step-size x lag surfaces", "PPO-Clip (lag-adaptive)",
                                      "#6baed6", "|", None),
    "impala": MethodPreset("vtrace_every_step", "behavior", "impala", "none",
                           "IMPALA: V-trace recomputed at every gradient step", "IMPALA", "#000000", "h", None),
}


def label(method: str) -> str:
    preset = METHODS.get(method)
    return preset.label or method if preset else method
