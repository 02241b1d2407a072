"""Named methods: each is a choice of the four composable pieces (DESIGN.md).

    advantage estimator x proximal-policy source x surrogate x sample filter

Adding a method means adding one entry here (and, at most, one small function in
``objectives.py`` / ``proximal.py``). ``Config(method=NAME)`` fills the four piece fields from
the preset; ``method="custom"`` uses the piece fields as given.
"""

from __future__ import annotations

from typing import NamedTuple


class MethodPreset(NamedTuple):
    advantage_estimator: str
    proximal_source: str
    surrogate: str
    sample_filter: str
    description: str


METHODS: dict[str, MethodPreset] = {
    "ppo_clip": MethodPreset("gae", "behavior", "ppo_clip", "none",
                             "coupled PPO-Clip on the lagged data (the naive baseline)"),
    "ppo_kl": MethodPreset("gae", "behavior", "ppo_kl", "none",
                           "PPO with an analytic KL(beta || pi_theta) penalty"),
    "spo": MethodPreset("gae", "behavior", "spo", "none", "Simple Policy Optimization (Xie et al. 2024)"),
    "decoupled_recompute": MethodPreset("gae", "recompute", "decoupled", "none",
                                        "decoupled PPO, proximal policy = pi_T (one extra forward pass)"),
    "decoupled_linear": MethodPreset("gae", "linear", "decoupled", "none",
                                     "decoupled PPO, proximal = linear interpolation beta/d + (1-1/d) pi_theta"),
    "a3po": MethodPreset("gae", "loglinear", "decoupled", "none",
                         "A-3PO: log-linear proximal policy with alpha = 1/staleness"),
    "ppo_ewma": MethodPreset("gae", "ewma", "decoupled", "none", "PPO-EWMA (Hilton et al. 2022)"),
    "ppo_ewma_revised": MethodPreset("gae", "ewma_revised", "decoupled", "none",
                                     "revised PPO-EWMA: staleness-aware decay, mismatch mask, auto-reset"),
    "vaco": MethodPreset("vtrace", "behavior", "is_pg", "tv",
                         "VACO: V-trace realignment once per phase + TV-divergence filter"),
    "vaco_realign_only": MethodPreset("vtrace", "behavior", "is_pg", "none",
                                      "VACO ablation: realignment, no filter"),
    "vaco_filter_only": MethodPreset("gae", "behavior", "is_pg", "tv",
                                     "VACO ablation: TV filter on GAE advantages"),
    "impala": MethodPreset("vtrace_every_step", "behavior", "impala", "none",
                           "IMPALA: V-trace recomputed at every gradient step"),
}

CUSTOM = "custom"
PIECE_FIELDS = ("advantage_estimator", "proximal_source", "surrogate", "sample_filter")
