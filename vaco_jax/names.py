"""The names every layer reads, and nothing else: no jax, no numpy (tests/test_layout.py imports it alone).

* **Methods** (``METHODS``): each method's four pieces by their registry names (``core/pieces.py``),
  what it is, and how it is shown and tuned: its label, colour and marker in every figure, its
  step-size knob besides the learning rate (``None``: the learning rate alone), the options it sets.
  ``core.methods.make_method`` builds a method's pytree from an entry; ``core.methods.register_method``
  adds one (to this same dict).
* **Settings** (``Settings``): every setting of a training run declared once, by ``setting(default,
  help, home=..., **range)``: its name, type, default and help line, and for a traced knob its home (its
  sweep axis) and allowed range. ``core.config.Config`` is ``Settings`` with the checks (no field of its
  own), the command line's flags take their help from the same declarations (``driver/cli.py``), and
  ``KNOBS`` is read from them. Adding a setting is one ``setting(...)`` line here (and the code that
  reads it).
* **Knobs** (``KNOBS``): the settings declared with a home, in declaration order: each one's home,
  allowed range and help line (a ``Knob``). A knob is **traced**: it enters the compiled program as an array, so a grid over it (with lag depths and
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
from typing import Optional

# ----------------------------------------------------------------------------- settings and knobs

@dataclasses.dataclass(frozen=True)
class Knob:
    home: str  # 'lag' | 'common' | 'method': its sweep axis (the lag piece, TracedParams, a method's piece)
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


def setting(default, help: str, home: str | None = None, **limits) -> dataclasses.Field:
    """One setting's declaration, a field of ``Settings``: its default and help line (``metadata['help']``:
    the command line's help of its flag); with ``home`` it is a traced knob, whose ``Knob`` (home = its
    sweep axis, ``limits`` its allowed range: ``low``, ``high``, ``low_open``, ...) is ``metadata['knob']``."""
    if home not in (None, "lag", "common", "method"):
        raise TypeError(f"setting: home={home!r} must be 'lag', 'common' or 'method' (a traced knob's sweep axis) "
                        "or None (a static setting)")
    if limits and home is None:
        raise TypeError(f"setting: a range ({', '.join(limits)}) is a traced knob's: give its home= too")
    metadata = {"help": help}
    if home is not None:
        metadata["knob"] = Knob(home, help, **limits)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every setting of a training run, each declared once: name, type, default, help line and, for a traced
    knob, its home and range. ``core.config.Config`` is this class with the checks and the derived quantities
    (it adds no field); ``KNOBS`` and the command line's help are read from these declarations."""

    # --- environment (docs/envs.md)
    env: str = setting("inverted_double_pendulum", "the task (docs/envs.md): a Gymnasium locomotion task (MuJoCo's "
                       "C engine), a Brax MuJoCo task, point_mass, an env registered with register_env, or a MuJoCo "
                       "Playground DM Control task (extra 'playground')")
    # None: the task's own default (envs.default_backend)
    backend: Optional[str] = setting(None, "physics: 'mujoco' (MuJoCo's C engine, the default of the Gymnasium "
                                     "tasks) or 'mjx' for a Gymnasium task; 'mjx' (default), 'generalized' or "
                                     "'positional' (Brax's pipelines) for a Brax task")
    episode_length: int = setting(1000, "env steps before an episode is truncated")

    # --- batch shape
    num_envs: int = setting(64, "parallel environments N")
    unroll_length: int = setting(32, "env steps per env per phase U (a phase's batch is N x U)")
    total_env_steps: int = setting(200_000, "training budget in env steps; a run stops after its last whole chunk "
                                   "(num_evals chunks of whole phases of num_envs x unroll_length steps) and says "
                                   "so when that is fewer")
    num_evals: int = setting(10, "learning-curve points = jitted chunks of phases")
    # 0: tests that do not need evaluation compile faster
    eval_episodes: int = setting(16, "episodes per evaluation of the learner's policy (0: no evaluation)")

    # --- forward lag: E epochs x M minibatches per phase
    num_epochs: int = setting(4, "epochs E per phase (forward lag)")
    num_minibatches: int = setting(8, "minibatches M per epoch (forward lag)")
    # update.permutation's methods: config.SHUFFLES
    minibatch_shuffle: str = setting("rank", "how each epoch's random permutation is drawn: 'rank' (fast) or "
                                     "'sort' (jax.random.permutation: the permutation of the committed "
                                     "pendulum-suite results); docs/estimators.md")
    # one clip per network: the policy's step never shrinks because the critic's gradient is large
    grad_clip: str = setting("per_network", "gradient-norm clip to max_grad_norm: 'per_network' (the policy's and "
                             "the critic's gradients each clipped to it on their own) or 'joint' (both networks' "
                             "gradients clipped together to one global norm, as one optimiser does: CleanRL's PPO); "
                             "docs/surrogates.md")

    # --- simulated asynchrony (docs/lag.md)
    buffer_capacity: int = setting(16, "policy-buffer capacity K (1 <= lag_depth <= K); docs/lag.md")
    # the command line lists each lag model's own help after it (core.lag.LAG_MODELS)
    lag_model: str = setting("uniform", "how each actor's snapshot age is drawn")
    envs_per_actor: int = setting(1, "envs sharing one actor (one snapshot)")
    partial_resync_every: int = setting(8, "lag_model='partial': env steps between re-syncs one version newer")
    actor_dtype: str = setting("float32", "precision of the actors' forward pass (training-inference mismatch); "
                               "docs/lag.md")
    # On a CPU smaller batches are faster once the policies drive the simulator into states its solver
    # iterates on: a vmapped solver loop runs until the slowest env of the batch is done (docs/scale.md,
    # "Cells per batch"). Per device when a group is split over several; single runs ignore it.
    grid_batch: int | None = setting(None, "run each device's cells of a sweep group in vmapped batches of this "
                                     "many, one batch after another (default: all at once); docs/scale.md")

    # --- networks (networks.NETWORKS; networks.register_network adds your own modules)
    network: str = setting("mlp", "policy and value network builder (networks.NETWORKS; register_network adds yours)")
    policy_hidden: tuple[int, ...] = setting((64, 64), "policy MLP hidden sizes")
    value_hidden: tuple[int, ...] = setting((64, 64), "value MLP hidden sizes")
    activation: str = setting("tanh", "MLP activation")
    normalize_observations: bool = setting(True, "running observation normalisation (frozen during a phase)")
    normalize_rewards: bool = setting(True, "divide rewards by the running std of the discounted return")
    normalize_advantages: bool = setting(True, "normalise advantages per minibatch, before any filter test")
    anneal_lr: bool = setting(False, "decay the learning rate linearly to 0 over the phases that run")

    # --- method (docs/methods.md): a named preset, or 'custom' with the four pieces chosen here.
    # None = the preset's choice; a value that contradicts the preset is an error.
    method: str = setting("ppo_clip", "a named method or 'custom' (then the four pieces below); docs/methods.md")
    advantage_estimator: Optional[str] = setting(None, "piece: advantage estimator (method='custom'; with a preset "
                                                 "it must equal the preset's)")
    proximal_source: Optional[str] = setting(None, "piece: proximal-policy source (method='custom'; with a preset "
                                             "it must equal the preset's)")
    surrogate: Optional[str] = setting(None, "piece: surrogate (method='custom'; with a preset it must equal the "
                                       "preset's)")
    sample_filter: Optional[str] = setting(None, "piece: sample filter (method='custom'; with a preset it must "
                                           "equal the preset's)")
    # structural piece options (None = the piece's default; an option no piece reads is an error)
    old_logit_source: Optional[str] = setting(None, "decoupled PPO: where pi_old comes from; docs/lag.md")
    tv_denominator: Optional[str] = setting(None, "IS-PG / VACO: ratio denominator beta ('behavior') or pi_T "
                                            "('learner')")
    tv_scale: Optional[str] = setting(None, "TV filter: 'tv' = 1/2 mean|r-1|, 'l1' = mean|r-1|")
    # every choice of pieces.STATIC_CHOICES['weight_cap_mode'], in its order (tests/test_input_checks.py)
    weight_cap_mode: Optional[str] = setting(None, "decoupled PPO, the weight w = pi_prox/pi_old: 'truncate' "
                                             "min(w, w_max); 'mask' drops the samples with w > w_max; 'band' drops "
                                             "the samples with w outside [weight_floor, weight_cap]")
    ewma_ratio_test: Optional[str] = setting(None, "revised PPO-EWMA: mismatch test on the joint ratio or its "
                                             "per-dimension mean")

    # --- traced knobs, home 'lag': the lag piece (docs/lag.md)
    lag_depth: int = setting(1, "lag depth B: actors act with snapshots up to B-1 versions old (1 <= B <= "
                             "buffer_capacity)", home="lag", low=1, integer=True)
    age_weights: Optional[tuple[float, ...]] = setting(None, "lag_model='ages': weights of snapshot ages 0, 1, ... "
                                                       "(normalised; length <= buffer_capacity)",
                                                       home="lag", low=0, optional=True)
    publish_interval: int = setting(1, "lag_model='publish': the learner publishes every k-th version, seen "
                                    "lag_depth-k versions late (1 <= k <= lag_depth)",
                                    home="lag", low=1, integer=True)

    # --- traced knobs, home 'common': fields of config.TracedParams read by every method (docs/methods.md,
    # docs/surrogates.md)
    learning_rate: float = setting(3e-4, "Adam step size of actor and critic", home="common", low=0, low_open=True)
    gamma: float = setting(0.99, "discount factor", home="common", low=0, high=1)
    max_grad_norm: float = setting(0.5, "the gradient clip's global-norm bound: with grad_clip='per_network' the "
                                   "policy's and the critic's gradients are each clipped to it, with "
                                   "grad_clip='joint' both together (inf: no clip)",
                                   home="common", low=0, low_open=True, allow_inf=True)
    adam_eps: float = setting(1e-5, "Adam epsilon", home="common", low=0, low_open=True)
    value_coef: float = setting(0.5, "weight of the value loss", home="common", low=0)
    entropy_coef: float = setting(0.0, "weight of the entropy bonus", home="common", low=0)
    init_log_std: float = setting(-0.5, "initial log standard deviation of the Gaussian policy",
                                  home="common", low=-20, high=5)
    value_clip_epsilon: Optional[float] = setting(None, "PPO value clipping range (None: no value clipping)",
                                                  home="common", low=0, low_open=True, optional=True)
    mismatch_strength: float = setting(0.0, "training-inference mismatch: each actor samples from its policy's mean "
                                       "shifted by this many standard deviations x a fresh standard normal draw per "
                                       "sample and action dimension, and records that density (0: none)",
                                       home="common", low=0, high=10)

    # --- traced knobs, home 'method': a field of one of the method's pieces (docs/methods.md); None = the
    # piece's default
    gae_lambda: Optional[float] = setting(None, "lambda of GAE and of V-trace's trace (every estimator)",
                                          home="method", low=0, high=1)
    rho_bar: Optional[float] = setting(None, "V-trace: truncation of rho in the TD term",
                                       home="method", low=0, low_open=True, allow_inf=True)
    c_bar: Optional[float] = setting(None, "V-trace: truncation of the trace coefficient c",
                                     home="method", low=0, low_open=True, allow_inf=True)
    rho_bar_pg: Optional[float] = setting(None, "V-trace: truncation of rho in the policy-gradient advantage",
                                          home="method", low=0, low_open=True, allow_inf=True)
    clip_epsilon: Optional[float] = setting(None, "PPO clip range epsilon (ppo_clip, decoupled, sat; "
                                            "ppo_clip_adaptive's without lag) or SPO's epsilon",
                                            home="method", low=0, low_open=True)
    kl_coef: Optional[float] = setting(None, "PPO-KL: weight of KL(beta || pi_theta)", home="method", low=0)
    tv_budget: Optional[float] = setting(None, "VACO's TV budget delta (inf: no filtering)",
                                         home="method", low=0, low_open=True, allow_inf=True)
    weight_cap: Optional[float] = setting(None, "decoupled PPO: cap w_max of pi_prox/pi_old (inf: no cap)",
                                          home="method", low=0, low_open=True, allow_inf=True)
    mismatch_bound: Optional[float] = setting(None, "decoupled PPO: keep a sample when pi_old/pi_infer is in "
                                              "[1/c, c]", home="method", low=1, allow_inf=True)
    ewma_age: Optional[float] = setting(None, "PPO-EWMA: age of the average in gradient steps (None: (S-1)/2)",
                                        home="method", low=0)
    ewma_reset_threshold: Optional[float] = setting(None, "revised PPO-EWMA: reset when the kept fraction falls "
                                                    "below it", home="method", low=0, high=1)
    # the staleness corrections of docs/corrections.md
    weight_floor: Optional[float] = setting(None, "decoupled PPO, weight_cap_mode='band': keep w = pi_prox/pi_old "
                                            "in [weight_floor, weight_cap] (None: 1/weight_cap)",
                                            home="method", low=0, low_open=True, optional=True)
    second_moment_budget: Optional[float] = setting(None, "M2PO: drop the largest squared log-ratios to beta until "
                                                    "their mean is at most this tau (inf: no filtering)",
                                                    home="method", low=0, low_open=True, allow_inf=True)
    trust_width: Optional[float] = setting(None, "GIPO: width sigma of the Gaussian trust weight "
                                           "exp(-l^2/(2 sigma^2)) on the log-ratio to beta (inf: no weighting)",
                                           home="method", low=0, low_open=True, allow_inf=True)
    gate_temperature: Optional[float] = setting(None, "SAPO: temperature tau of the sigmoid gate for positive "
                                                "advantages (larger: a tighter trust region)",
                                                home="method", low=0, low_open=True)
    gate_temperature_ratio: Optional[float] = setting(None, "SAPO: the negative-advantage temperature over the "
                                                      "positive one", home="method", low=0, low_open=True)
    ratio_cap: Optional[float] = setting(None, "VCPO: truncation C of the importance weight pi_theta/beta "
                                         "(inf: none)", home="method", low=0, low_open=True, allow_inf=True)
    target_update_phases: Optional[int] = setting(None, "IMPACT: phases between copies of the learner into the "
                                                  "target policy", home="method", low=1, integer=True)
    # BAPO's adaptive clip bounds (explicit ratio bounds, not epsilons) and SAT's contraction
    positive_share_target: Optional[float] = setting(None, "BAPO: target share rho_0 of the positive-advantage part "
                                                     "of the clipped surrogate; the bounds rise until it is reached",
                                                     home="method", low=0, high=1)
    clip_low_start: Optional[float] = setting(None, "BAPO: lower clip bound a- the search starts from (a ratio "
                                              "bound in (0, 1], <= clip_low_max)",
                                              home="method", low=0, high=1, low_open=True)
    clip_low_max: Optional[float] = setting(None, "BAPO: largest lower clip bound b- (<= 1)",
                                            home="method", low=0, high=1, low_open=True)
    clip_low_step: Optional[float] = setting(None, "BAPO: step delta- of the lower bound's search",
                                             home="method", low=0, low_open=True)
    clip_high_start: Optional[float] = setting(None, "BAPO: upper clip bound a+ the search starts from (>= 1, <= "
                                               "clip_high_max)", home="method", low=1)
    clip_high_max: Optional[float] = setting(None, "BAPO: largest upper clip bound b+", home="method", low=1)
    clip_high_step: Optional[float] = setting(None, "BAPO: step delta+ of the upper bound's search",
                                              home="method", low=0, low_open=True)
    staleness_quantile: Optional[float] = setting(None, "SAT: the minibatch quantile of |log r_beta| beyond which a "
                                                  "sample's clip end contracts", home="method", low=0, high=1)
    contraction_exponent: Optional[float] = setting(None, "SAT: exponent n of the contraction "
                                                    "1/(1 + ((|d| - q)/q)^n)", home="method", low=0, low_open=True)
    # the lag-adaptive clip range of docs/adaptive.md
    clip_epsilon_lagged: Optional[float] = setting(None, "ppo_clip_adaptive: the clip range once the mean staleness "
                                                   "reaches saturation_staleness",
                                                   home="method", low=0, low_open=True)
    saturation_staleness: Optional[float] = setting(None, "ppo_clip_adaptive: mean staleness (versions) at which "
                                                    "the clip range reaches clip_epsilon_lagged",
                                                    home="method", low=0, low_open=True)


def knobs_of(settings: type) -> dict[str, Knob]:
    """``{name: Knob}`` of the traced knobs a settings class declares, in its fields' order."""
    return {f.name: f.metadata["knob"] for f in dataclasses.fields(settings) if "knob" in f.metadata}


KNOBS: dict[str, Knob] = knobs_of(Settings)
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
