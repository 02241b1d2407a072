"""The methods' registry: the one place a method's name, pieces and everything shown about it live.

    advantage estimator x proximal-policy source x surrogate x sample filter

Each ``MethodPreset`` names its four pieces (by their registry names in ``pieces.py``, or a user's own
piece classes), says what the method is, and how it is shown and tuned: its label and its colour
and marker in every figure, and its step-size knob besides the learning rate (``None``: the learning
rate alone), which the studies tune. This module imports no jax, so figures and tables read it too;
``methods.make_method`` builds a method's pytree from an entry, and ``methods.register_method`` adds one.
"""

from __future__ import annotations

import dataclasses

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
    "impala": MethodPreset("vtrace_every_step", "behavior", "impala", "none",
                           "IMPALA: V-trace recomputed at every gradient step", "IMPALA", "#000000", "h", None),
}


def label(method: str) -> str:
    preset = METHODS.get(method)
    return preset.label or method if preset else method
