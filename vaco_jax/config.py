"""Typed, validated configuration.

Two kinds of fields (the rejax split, DESIGN.md):

* ``Config`` holds **static** fields: they set shapes or choose code paths (task, batch sizes,
  network sizes, buffer capacity, lag model, method pieces). Changing one recompiles.
* ``TracedParams`` holds **traced** fields: plain arrays that enter the compiled program as
  inputs, so a grid over them (lag depth, learning rate, clip epsilon, TV budget) is a ``vmap``.

Every field is checked when the object is built, before anything is compiled; an error names the
field and the allowed values.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

TASKS = (
    "halfcheetah",
    "hopper",
    "walker2d",
    "ant",
    "humanoid",
    "humanoidstandup",
    "inverted_pendulum",
    "inverted_double_pendulum",
    "reacher",
    "pusher",
)
BACKENDS = ("mjx", "generalized", "positional")
LAG_MODELS = ("uniform", "fixed", "staggered", "partial", "synchronous")
ACTOR_DTYPES = ("float32", "bfloat16", "float16")

ADVANTAGE_ESTIMATORS = ("gae", "vtrace", "vtrace_every_step")
PROXIMAL_SOURCES = ("behavior", "recompute", "loglinear", "linear", "ewma", "ewma_revised")
SURROGATES = ("ppo_clip", "ppo_kl", "spo", "decoupled", "is_pg", "impala")
SAMPLE_FILTERS = ("none", "tv")
OLD_LOGIT_SOURCES = ("snapshot", "infer", "recompute", "ewma_revised")
TV_DENOMINATORS = ("behavior", "learner")
TV_SCALES = ("tv", "l1")
WEIGHT_CAP_MODES = ("truncate", "mask")
EWMA_RATIO_TESTS = ("joint", "per_dim")


class ConfigError(ValueError):
    """A configuration field has a value outside its allowed set."""


def _check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is not valid; allowed values: {', '.join(map(str, allowed))}")


def _check_positive(name: str, value, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name}={value!r} must be {bound}")


@dataclasses.dataclass(frozen=True)
class Config:
    """Static configuration of one training program (SPEC §2–§5, §8)."""

    # --- environment (SPEC §8)
    env: str = "inverted_double_pendulum"
    backend: str = "mjx"
    episode_length: int = 1000
    action_repeat: int = 1

    # --- batch shape
    num_envs: int = 64
    unroll_length: int = 32
    total_env_steps: int = 200_000
    num_evals: int = 10  # learning-curve points = jitted chunks of phases
    eval_episodes: int = 16  # 0 disables evaluation (tests that do not need it compile faster)

    # --- forward lag: E epochs x M minibatches per phase
    num_epochs: int = 4
    num_minibatches: int = 8

    # --- simulated asynchrony (SPEC §2)
    buffer_capacity: int = 16  # K; the traced lag depth B must satisfy 1 <= B <= K
    lag_model: str = "uniform"
    envs_per_actor: int = 1  # an actor is a group of envs sharing one snapshot
    partial_resync_every: int = 8  # 'partial' lag model: steps between re-syncs
    actor_dtype: str = "float32"
    old_logit_source: str = "snapshot"

    # --- networks
    policy_hidden: tuple[int, ...] = (64, 64)
    value_hidden: tuple[int, ...] = (64, 64)
    init_log_std: float = -0.5
    normalize_observations: bool = True
    normalize_rewards: bool = True  # divide rewards by the running std of the discounted return

    # --- optimisation
    gamma: float = 0.99
    gae_lambda: float = 0.95
    max_grad_norm: float = 0.5  # applied separately to actor and critic (see README)
    adam_eps: float = 1e-5
    anneal_lr: bool = False
    value_coef: float = 0.5
    value_clip: bool = False
    entropy_coef: float = 0.0
    normalize_advantages: bool = True

    # --- method (DESIGN.md: a method is a choice of four pieces); `method` names a preset
    method: str = "ppo_clip"
    advantage_estimator: str = "gae"
    proximal_source: str = "behavior"
    surrogate: str = "ppo_clip"
    sample_filter: str = "none"

    # --- method options (SPEC §3–§5 defaults)
    rho_bar: float = 1.0
    c_bar: float = 1.0
    rho_bar_pg: float = 1.0
    tv_denominator: str = "behavior"
    tv_scale: str = "tv"
    kl_coef: float = 1.0
    spo_epsilon_from_clip: bool = True  # SPO uses the traced clip_epsilon as its epsilon
    weight_cap: float = 5.0
    weight_cap_mode: str = "truncate"
    mismatch_bound: float = 2.0
    ewma_age: float | None = None  # None: (S - 1) / 2 gradient steps
    ewma_reset_threshold: float = 0.5
    ewma_ratio_test: str = "joint"

    def __post_init__(self):
        self._apply_method_preset()
        _check_choice("env", self.env, TASKS)
        _check_choice("backend", self.backend, BACKENDS)
        _check_choice("lag_model", self.lag_model, LAG_MODELS)
        _check_choice("actor_dtype", self.actor_dtype, ACTOR_DTYPES)
        _check_choice("old_logit_source", self.old_logit_source, OLD_LOGIT_SOURCES)
        _check_choice("advantage_estimator", self.advantage_estimator, ADVANTAGE_ESTIMATORS)
        _check_choice("proximal_source", self.proximal_source, PROXIMAL_SOURCES)
        _check_choice("surrogate", self.surrogate, SURROGATES)
        _check_choice("sample_filter", self.sample_filter, SAMPLE_FILTERS)
        _check_choice("tv_denominator", self.tv_denominator, TV_DENOMINATORS)
        _check_choice("tv_scale", self.tv_scale, TV_SCALES)
        _check_choice("weight_cap_mode", self.weight_cap_mode, WEIGHT_CAP_MODES)
        _check_choice("ewma_ratio_test", self.ewma_ratio_test, EWMA_RATIO_TESTS)
        for name in ("episode_length", "action_repeat", "num_envs", "unroll_length", "total_env_steps",
                     "num_evals", "num_epochs", "num_minibatches", "buffer_capacity", "envs_per_actor",
                     "partial_resync_every"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise ConfigError(f"{name}={value!r} must be an integer")
            _check_positive(name, value)
        _check_positive("eval_episodes", self.eval_episodes, allow_zero=True)
        for name in ("policy_hidden", "value_hidden"):
            sizes = getattr(self, name)
            if len(sizes) == 0 or any(int(s) <= 0 for s in sizes):
                raise ConfigError(f"{name}={sizes!r} must be a non-empty tuple of positive layer sizes")
        if self.num_envs % self.envs_per_actor:
            raise ConfigError(
                f"envs_per_actor={self.envs_per_actor} must divide num_envs={self.num_envs}")
        batch = self.num_envs * self.unroll_length
        if self.surrogate == "impala" or self.advantage_estimator == "vtrace_every_step":
            if self.num_envs % self.num_minibatches:
                raise ConfigError(
                    f"num_minibatches={self.num_minibatches} must divide num_envs={self.num_envs} "
                    "(IMPALA minibatches split the env axis into whole sequences)")
        elif batch % self.num_minibatches:
            raise ConfigError(
                f"num_minibatches={self.num_minibatches} must divide num_envs*unroll_length={batch}")
        if self.num_phases < self.num_evals:
            raise ConfigError(
                f"total_env_steps={self.total_env_steps} gives {self.num_phases} phases of "
                f"num_envs*unroll_length={batch} steps, fewer than num_evals={self.num_evals}")
        for name in ("gamma", "gae_lambda"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name}={value!r} must lie in [0, 1]")
        for name in ("max_grad_norm", "adam_eps", "rho_bar", "c_bar", "rho_bar_pg", "weight_cap"):
            _check_positive(name, getattr(self, name))
        for name in ("value_coef", "entropy_coef", "kl_coef"):
            _check_positive(name, getattr(self, name), allow_zero=True)
        if self.mismatch_bound < 1.0:
            raise ConfigError(f"mismatch_bound={self.mismatch_bound!r} must be >= 1 (band [1/c, c])")
        if not 0.0 <= self.ewma_reset_threshold <= 1.0:
            raise ConfigError(f"ewma_reset_threshold={self.ewma_reset_threshold!r} must lie in [0, 1]")
        if self.ewma_age is not None:
            _check_positive("ewma_age", self.ewma_age, allow_zero=True)
        # Pieces that only make sense together.
        if self.surrogate == "decoupled" and self.proximal_source == "behavior":
            pass  # allowed: the reduction to coupled PPO-Clip (tested)
        if self.surrogate == "impala" and self.advantage_estimator != "vtrace_every_step":
            raise ConfigError("surrogate='impala' requires advantage_estimator='vtrace_every_step'")
        if self.advantage_estimator == "vtrace_every_step" and self.surrogate != "impala":
            raise ConfigError("advantage_estimator='vtrace_every_step' is only used by surrogate='impala'")
        if self.sample_filter == "tv" and self.surrogate != "is_pg":
            raise ConfigError("sample_filter='tv' applies to surrogate='is_pg' (VACO); "
                              f"got surrogate={self.surrogate!r}")
        if self.old_logit_source == "ewma_revised" and self.proximal_source != "ewma_revised":
            raise ConfigError("old_logit_source='ewma_revised' requires proximal_source='ewma_revised'")

    def _apply_method_preset(self) -> None:
        from vaco_jax.methods import CUSTOM, METHODS, PIECE_FIELDS

        _check_choice("method", self.method, tuple(METHODS) + (CUSTOM,))
        if self.method == CUSTOM:
            return
        preset = METHODS[self.method]
        defaults = {f.name: f.default for f in dataclasses.fields(Config)}
        for name in PIECE_FIELDS:
            given, wanted = getattr(self, name), getattr(preset, name)
            if given != defaults[name] and given != wanted:
                raise ConfigError(
                    f"{name}={given!r} conflicts with method={self.method!r} (which uses {wanted!r}); "
                    "set method='custom' to choose the pieces yourself")
            object.__setattr__(self, name, wanted)

    # ----- derived static quantities
    @property
    def batch_size(self) -> int:
        return self.num_envs * self.unroll_length

    @property
    def num_phases(self) -> int:
        return self.total_env_steps // self.batch_size

    @property
    def phases_per_chunk(self) -> int:
        return self.num_phases // self.num_evals

    @property
    def steps_per_phase(self) -> int:
        """S = E * M gradient steps per phase (SPEC §1)."""
        return self.num_epochs * self.num_minibatches

    @property
    def num_actors(self) -> int:
        return self.num_envs // self.envs_per_actor

    @property
    def env_steps_per_chunk(self) -> int:
        return self.phases_per_chunk * self.batch_size

    def replace(self, **changes) -> "Config":
        return dataclasses.replace(self, **changes)


class TracedParams(NamedTuple):
    """Values that enter the compiled program as arrays, so a grid over them is a vmap."""

    lag_depth: jnp.ndarray  # int32, 1 <= B <= buffer_capacity
    learning_rate: jnp.ndarray  # float32
    clip_epsilon: jnp.ndarray  # float32 (PPO clip, SPO epsilon, decoupled clip)
    tv_budget: jnp.ndarray  # float32, VACO's delta


def make_traced(config: Config, lag_depth: int = 1, learning_rate: float = 3e-4,
                clip_epsilon: float = 0.2, tv_budget: float = 0.2) -> TracedParams:
    """Build (and validate) one cell's traced values. Grids stack several of these."""
    if not isinstance(lag_depth, (int, np.integer)) or not 1 <= lag_depth <= config.buffer_capacity:
        raise ConfigError(
            f"lag_depth={lag_depth!r} must be an integer in [1, buffer_capacity={config.buffer_capacity}]")
    if config.lag_model == "synchronous" and lag_depth != 1:
        raise ConfigError(f"lag_model='synchronous' takes lag_depth=1, got lag_depth={lag_depth}")
    if not (learning_rate > 0 and math.isfinite(learning_rate)):
        raise ConfigError(f"learning_rate={learning_rate!r} must be a positive finite number")
    if not clip_epsilon > 0:
        raise ConfigError(f"clip_epsilon={clip_epsilon!r} must be > 0")
    if not tv_budget > 0:
        raise ConfigError(f"tv_budget={tv_budget!r} must be > 0 (use inf to disable the filter)")
    return TracedParams(
        lag_depth=jnp.asarray(lag_depth, jnp.int32),
        learning_rate=jnp.asarray(learning_rate, jnp.float32),
        clip_epsilon=jnp.asarray(clip_epsilon, jnp.float32),
        tv_budget=jnp.asarray(tv_budget, jnp.float32),
    )


def stack_traced(cells: list[TracedParams]) -> TracedParams:
    """Stack cells along a new leading grid axis."""
    return TracedParams(*(jnp.stack([getattr(c, f) for c in cells]) for f in TracedParams._fields))
