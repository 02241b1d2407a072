"""Every numeric knob, defined once: its name, where it lives, its allowed range and its help line.

A knob is **traced**: it enters the compiled program as an array, so a grid over it (with lag depths
and seeds) is one ``vmap``ped program. Three homes:

* ``lag``     — the lag piece (``lag_depth``, ``age_weights``),
* ``common``  — fields of ``config.TracedParams`` read by every method (learning rate, γ, ...; docs/methods.md),
* ``method``  — a field of one of the method's pieces (``clip_epsilon`` of PPO-Clip, ``tv_budget`` of
  the TV filter, ...). A piece of a user's own may add knobs of its own; they are swept by name the
  same way, only without a range check here.

``Config`` holds a default for each knob (a method knob's default None means "the piece's own
default"); ``config.make_traced`` builds one cell's traced values from the config plus overrides.
Everything else in ``Config`` is static: it sets shapes or code paths, and a new value recompiles.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from vaco_jax.errors import ConfigError  # noqa: F401  (re-exported: the knobs' checks raise it)

FLOAT32_MAX = float(np.finfo(np.float32).max)


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
    # --- common (docs/methods.md, docs/surrogates.md)
    "learning_rate": Knob("common", "Adam step size of actor and critic", low=0, low_open=True),
    "gamma": Knob("common", "discount factor", low=0, high=1),
    "max_grad_norm": Knob("common", "global-norm gradient clip, applied to actor and critic separately",
                          low=0, low_open=True, allow_inf=True),
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
    "clip_epsilon": Knob("method", "PPO clip range epsilon (ppo_clip, decoupled) or SPO's epsilon", low=0,
                         low_open=True),
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
}

LAG_KNOBS = tuple(n for n, k in KNOBS.items() if k.home == "lag")
COMMON_KNOBS = tuple(n for n, k in KNOBS.items() if k.home == "common")
METHOD_KNOBS = tuple(n for n, k in KNOBS.items() if k.home == "method")


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_knob(name: str, value) -> None:
    """Raise ConfigError naming the knob and its allowed values unless ``value`` is allowed.

    Concrete values only (Python or numpy scalars, tuples for ``age_weights``, concrete arrays);
    knobs a user's own piece adds (not in KNOBS) are accepted when they are finite numbers.
    """
    knob = KNOBS.get(name)
    if name == "age_weights":
        if not isinstance(value, (tuple, list)) or len(value) == 0 or not all(_is_number(w) for w in value):
            raise ConfigError(f"age_weights={value!r} must be a non-empty sequence of numbers")
        w = np.asarray(value, float)
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ConfigError(f"age_weights={value!r} must be finite, >= 0, and not all 0")
        return
    arr = np.asarray(value) if not _is_number(value) and hasattr(value, "shape") else None
    if arr is not None:  # a concrete array (stacked cells): check every entry
        for v in arr.reshape(-1).tolist():
            check_knob(name, v)
        return
    if not _is_number(value):
        raise ConfigError(f"{name}={value!r} must be a number" + (f" ({knob.allowed()})" if knob else ""))
    if knob is None:
        if math.isnan(float(value)):
            raise ConfigError(f"{name}={value!r} must not be NaN")
        return
    if knob.integer and not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name}={value!r} must be an integer ({knob.allowed()})")
    v = float(value)
    bad = (math.isnan(v) or (math.isinf(v) and not (knob.allow_inf and v > 0)) or v < knob.low
           or (knob.low_open and v == knob.low) or v > knob.high
           or (math.isfinite(v) and abs(v) > FLOAT32_MAX))
    if bad:
        raise ConfigError(f"{name}={value!r} is not allowed; {name} must be {knob.allowed()}")
