"""Typed, validated configuration: one flat list of settings, each static or traced, each declared once
in ``names.Settings`` (its type, default, help line and, for a knob, home and range); ``Config`` is that
class with the checks.

* **Static** fields set shapes or choose code paths (task, batch sizes, network sizes, buffer
  capacity, lag model, the method's pieces and their structural options). Changing one recompiles.
* **Traced** fields are the numeric knobs, the settings declared with a home (``knobs.KNOBS``: lag
  depth, learning rate, γ, clip ε, TV budget δ, ...). ``Config`` holds their defaults;
  ``make_traced(config, **overrides)`` builds one cell's ``TracedParams`` pytree, and a grid of cells is
  a ``vmap`` of one compiled program.

``STATIC_FIELDS`` and ``TRACED_FIELDS`` say which is which, in one place. Every field is checked
when a ``Config`` is built, before anything is compiled; an error names the field and the allowed
values. The method is resolved here too (``methods.make_method``): a preset never overwrites a piece
or option the user gave: it is honoured, or it is an error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vaco_jax.core.knobs import COMMON_KNOBS, KNOBS, METHOD_KNOBS, ConfigError, check_knob
from vaco_jax.core.lag import LAG_MODELS, make_lag
from vaco_jax.core.pieces import PIECE_KINDS, STATIC_CHOICES
from vaco_jax.envs import BACKENDS
from vaco_jax.envs.gymnasium_tasks import GYM_TASKS
from vaco_jax.names import Settings

ACTOR_DTYPES = ("float32", "bfloat16", "float16")
GRAD_CLIPS = ("per_network", "joint")  # update.update_phase: a global-norm clip per network, or one over both
SHUFFLES = ("rank", "sort")  # update.permutation's methods; 'sort' reproduces the committed pendulum-suite results

# Settings a Gymnasium locomotion task starts from where the user leaves them unset (Config.for_task; the
# study scripts and `vaco-train` apply them). Every task's episode length is its own time limit
# (``LocomotionTask.max_episode_steps``: Gymnasium's registered TimeLimit, 50 steps for Reacher, 100 for
# Pusher, 1,000 for the others). Hopper adds vmapped-env PPO-Clip settings that reach CleanRL's
# published band (BENCHMARKS.md, "The peer check"): Config's defaults fall below it on Hopper-v4, and
# Hopper-v5 steps the same model (it differs only in the terminating step's reward). The other tasks
# keep Config's defaults (inside or above the band, or not peer-checked). Config(...) itself keeps its
# global defaults.
_HOPPER = dict(num_envs=16, unroll_length=128, num_epochs=10, num_minibatches=32, anneal_lr=True, init_log_std=0.0,
               value_clip_epsilon=0.2)
TASK_DEFAULTS: dict[str, dict] = {
    name: dict(episode_length=task.max_episode_steps, **(_HOPPER if name in ("Hopper-v4", "Hopper-v5") else {}))
    for name, task in GYM_TASKS.items()}

__all__ = ["Config", "ConfigError", "TASK_DEFAULTS", "STATIC_FIELDS", "TRACED_FIELDS", "TracedParams", "make_traced",
           "stack_traced"]


def _check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is not valid; allowed values: {', '.join(map(str, allowed))}")


def _check_int(name: str, value, minimum: int = 1) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} must be an integer >= {minimum}")
    if value < minimum:
        raise ConfigError(f"{name}={value!r} must be an integer >= {minimum}")


def _check_bool(name: str, value) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name}={value!r} must be True or False")


@dataclasses.dataclass(frozen=True)
class Config(Settings):
    """One training run's settings, checked when built. Its fields are ``names.Settings``' (each one's
    default, help line and, for a traced knob, home and range, declared once there); this class adds
    no field, only the checks and the quantities derived from the fields."""

    def __post_init__(self):
        from vaco_jax.envs import check_env_name

        check_env_name(self.env)
        if self.backend is not None:
            _check_choice("backend", self.backend, BACKENDS)
        self.physics_backend  # a task that cannot run on the backend given is an error naming the allowed ones
        _check_choice("lag_model", self.lag_model, LAG_MODELS)
        _check_choice("actor_dtype", self.actor_dtype, ACTOR_DTYPES)
        _check_choice("minibatch_shuffle", self.minibatch_shuffle, SHUFFLES)
        _check_choice("grad_clip", self.grad_clip, GRAD_CLIPS)
        from vaco_jax.core.networks import ACTIVATIONS, NETWORKS

        _check_choice("network", self.network, tuple(NETWORKS))
        _check_choice("activation", self.activation, tuple(ACTIVATIONS))
        for name in ("episode_length", "num_envs", "unroll_length", "total_env_steps", "num_evals",
                     "num_epochs", "num_minibatches", "buffer_capacity", "envs_per_actor", "partial_resync_every"):
            _check_int(name, getattr(self, name))
        _check_int("eval_episodes", self.eval_episodes, minimum=0)
        if self.grid_batch is not None and (not isinstance(self.grid_batch, (int, np.integer))
                                            or isinstance(self.grid_batch, bool) or self.grid_batch < 1):
            raise ConfigError(f"grid_batch={self.grid_batch!r} must be an integer >= 1, or None (all cells at once)")
        for name in ("normalize_observations", "normalize_rewards", "normalize_advantages", "anneal_lr"):
            _check_bool(name, getattr(self, name))
        for name in ("policy_hidden", "value_hidden"):
            sizes = getattr(self, name)
            if (not isinstance(sizes, (tuple, list)) or len(sizes) == 0
                    or any(not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s <= 0 for s in sizes)):
                raise ConfigError(f"{name}={sizes!r} must be a non-empty tuple of positive integer layer sizes")
        for name in ("advantage_estimator", "proximal_source", "surrogate", "sample_filter"):
            value = getattr(self, name)
            if value is not None:
                _check_choice(name, value, tuple(PIECE_KINDS[name][2]))
        for name, allowed in STATIC_CHOICES.items():
            if getattr(self, name) is not None:
                _check_choice(name, getattr(self, name), allowed)
        for name in KNOBS:
            value = getattr(self, name)
            if value is not None:
                check_knob(name, value)
        for name, knob in KNOBS.items():  # a method knob's None is the piece's default
            if knob.home != "method" and not knob.optional and getattr(self, name) is None:
                raise ConfigError(f"{name}=None is not allowed; {name} must be {KNOBS[name].allowed()}")
        self._check_lag()
        if self.num_envs % self.envs_per_actor:
            raise ConfigError(
                f"envs_per_actor={self.envs_per_actor} must divide num_envs={self.num_envs}")
        method = self.build_method()  # raises on any conflict between preset, pieces and options
        batch = self.num_envs * self.unroll_length
        if method.advantage.every_step:
            if self.num_envs % self.num_minibatches:
                raise ConfigError(
                    f"num_minibatches={self.num_minibatches} must divide num_envs={self.num_envs} "
                    "(an every-step estimator splits the env axis into whole sequences)")
        elif batch % self.num_minibatches:
            raise ConfigError(
                f"num_minibatches={self.num_minibatches} must divide num_envs*unroll_length={batch}")
        if self.total_env_steps // batch < self.num_evals:
            raise ConfigError(
                f"total_env_steps={self.total_env_steps} gives {self.total_env_steps // batch} phases of "
                f"num_envs*unroll_length={batch} steps, fewer than num_evals={self.num_evals}")

    def _check_lag(self) -> None:
        k = self.buffer_capacity
        spec = LAG_MODELS[self.lag_model]
        if spec.reads_age_weights:
            if self.age_weights is None:
                raise ConfigError(f"lag_model={self.lag_model!r} needs age_weights (weights of ages 0, 1, ...)")
            if len(self.age_weights) > k:
                raise ConfigError(f"age_weights has {len(self.age_weights)} entries, more than "
                                  f"buffer_capacity={k}")
        elif self.age_weights is not None:
            readers = ", ".join(repr(n) for n, s in LAG_MODELS.items() if s.reads_age_weights)
            raise ConfigError(f"age_weights is read only by lag_model={readers} (lag_model={self.lag_model!r} "
                              "takes its shape from lag_depth)")
        if not 1 <= self.lag_depth <= k:
            raise ConfigError(f"lag_depth={self.lag_depth!r} must be an integer in [1, buffer_capacity={k}]")
        if spec.synchronous and self.lag_depth != 1:
            raise ConfigError(f"lag_model={self.lag_model!r} takes lag_depth=1, got lag_depth={self.lag_depth}")
        if not spec.reads_publish_interval and self.publish_interval != 1:
            readers = ", ".join(repr(n) for n, s in LAG_MODELS.items() if s.reads_publish_interval)
            raise ConfigError(f"publish_interval={self.publish_interval!r} is read only by lag_model={readers} "
                              f"(lag_model={self.lag_model!r}); leave it at 1")
        if spec.reads_publish_interval and self.publish_interval > self.lag_depth:
            raise ConfigError(f"publish_interval={self.publish_interval} must be an integer in [1, lag_depth="
                              f"{self.lag_depth}] (lag_model={self.lag_model!r}: ages run lag_depth - publish_interval "
                              "... lag_depth - 1)")
        if spec.reads_age_weights:
            depth = _ages_depth(self.age_weights)
            if self.lag_depth not in (1, depth):
                raise ConfigError(f"lag_depth={self.lag_depth} contradicts age_weights={self.age_weights} "
                                  f"(their nominal depth is {depth}); leave lag_depth out with lag_model={self.lag_model!r}")

    # ----- the method and the traced values
    def method_options(self) -> dict:
        """The piece choices, structural options and method knobs this config sets (None = not set)."""
        names = tuple(PIECE_KINDS) + tuple(STATIC_CHOICES) + METHOD_KNOBS
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def build_method(self, **extra):
        """The method as a pytree of pieces (Python-number leaves), honouring every given option."""
        from vaco_jax.core.methods import make_method

        return make_method(self.method, **{**self.method_options(), **extra})

    def effective_lag_depth(self) -> int:
        return _ages_depth(self.age_weights) if LAG_MODELS[self.lag_model].reads_age_weights else int(self.lag_depth)

    @classmethod
    def for_task(cls, env: str, **settings) -> "Config":
        """A Config for ``env`` that starts from the task's own defaults (``TASK_DEFAULTS``); ``settings``
        win over them."""
        return cls(env=env, **{**TASK_DEFAULTS.get(env, {}), **settings})

    def as_record(self) -> dict:
        """The settings as a run records them: every field, the backend resolved to the physics used, and
        for a Gymnasium task the SHA-256 of the model file it loads (``model_sha256``)."""
        from vaco_jax.envs import env_source

        record = {**dataclasses.asdict(self), "backend": self.physics_backend}
        if env_source(self.env) == "gymnasium":
            from vaco_jax.envs.gymnasium_tasks import model_sha256

            record["model_sha256"] = model_sha256(self.env)
        return record

    # ----- derived static quantities
    @property
    def physics_backend(self) -> str:
        """The physics the task runs on: ``backend``, or the task's default when it is None."""
        from vaco_jax.envs import check_backend

        return check_backend(self.env, self.backend)

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
    def phases_run(self) -> int:
        """Phases that actually run: ``num_evals`` chunks of ``phases_per_chunk`` (<= num_phases)."""
        return self.phases_per_chunk * self.num_evals

    @property
    def steps_per_phase(self) -> int:
        """S = E * M gradient steps per phase (docs/notation.md)."""
        return self.num_epochs * self.num_minibatches

    @property
    def num_actors(self) -> int:
        return self.num_envs // self.envs_per_actor

    @property
    def env_steps_per_chunk(self) -> int:
        return self.phases_per_chunk * self.batch_size

    def replace(self, **changes) -> "Config":
        return dataclasses.replace(self, **changes)


TRACED_FIELDS: tuple[str, ...] = tuple(KNOBS)
STATIC_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Config) if f.name not in KNOBS)


def _ages_depth(weights) -> int:
    w = np.asarray(weights, float)
    return int(np.nonzero(w > 0)[0].max()) + 1


def _traced_params_class():
    """``TracedParams``: one cell's traced values — the lag piece, the method's pieces, then one field
    per common knob, in ``knobs.KNOBS``' order (so a common knob is declared once, in ``names.Settings``,
    and its slot here follows). All fields are pytree leaves; structure (lag model, pieces, structural options) is
    static, and a ``vmap`` over a stack of these runs a grid in one program (``stack_traced``)."""

    def lag_depth(self):
        """Nominal lag depth B of the lag piece (traced int32)."""
        return self.lag.depth()

    fields = {"lag": Any, "method": Any, **{name: Any for name in COMMON_KNOBS}}
    namespace = {"__annotations__": fields, "__module__": __name__, "__qualname__": "TracedParams",
                 "__doc__": _traced_params_class.__doc__, "lag_depth": property(lag_depth)}
    return struct.dataclass(type("TracedParams", (), namespace))


TracedParams = _traced_params_class()


def _f32_leaves(tree):
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), tree)


def make_traced(config: Config, lag_depth: int | None = None, *, method=None, **knobs) -> TracedParams:
    """Build (and validate) one cell's traced values: ``config``'s knobs overridden by ``knobs``.

    ``knobs`` may name any field of ``knobs.KNOBS`` or a numeric field of one of the method's pieces
    (a user's own piece included); a knob that the method does not read is an error, and a name that
    is no knob at all is "unknown knob" with the nearest knob's name. ``method`` (a
    ``pieces.Method``) replaces the config's method entirely (its leaves are used as given).
    """
    overrides = dict(knobs)
    if lag_depth is not None:
        overrides["lag_depth"] = lag_depth
    known = {k: v for k, v in overrides.items() if k in KNOBS}
    extra = {k: v for k, v in overrides.items() if k not in KNOBS}
    if any(k in STATIC_FIELDS for k in extra):
        bad = [k for k in extra if k in STATIC_FIELDS]
        raise ConfigError(f"{', '.join(bad)} is static (it sets shapes or code paths): set it on the Config; "
                          "a sweep over it runs one compiled group per value")
    from vaco_jax.core.methods import check_knob_name

    for k, v in extra.items():
        check_knob_name(k, method)  # a name that is no knob at all: "unknown knob", the nearest named
        check_knob(k, v)
    if LAG_MODELS[config.lag_model].reads_age_weights and "age_weights" in known and "lag_depth" not in known:
        known["lag_depth"] = _ages_depth(known["age_weights"])
    cfg = config.replace(**known) if known else config
    if method is None:
        method = cfg.build_method(**extra)
    elif extra:
        raise ConfigError(f"give {', '.join(extra)} on the method's pieces when passing method=")
    else:
        from vaco_jax.core.methods import check_method

        check_method(method)
    lag = make_lag(cfg.lag_model, cfg.effective_lag_depth(), cfg.buffer_capacity, cfg.partial_resync_every,
                   cfg.age_weights, cfg.publish_interval)
    common = {n: getattr(cfg, n) for n in COMMON_KNOBS}
    return TracedParams(lag=lag, method=_f32_leaves(method),
                        **{n: (None if v is None else jnp.asarray(v, jnp.float32)) for n, v in common.items()})


def stack_traced(cells: list[TracedParams]) -> TracedParams:
    """Stack cells along a new leading grid axis (they must share their structure)."""
    if not cells:
        raise ConfigError("stack_traced: no cells given; allowed values: a non-empty list of make_traced(...) cells")
    structures = {str(jax.tree.structure(c)) for c in cells}
    if len(structures) > 1:
        raise ConfigError("cells of one grid must share lag model, method pieces and structural options "
                          f"(found {len(structures)} different structures); run them as separate groups")
    return jax.tree.map(lambda *xs: jnp.stack(xs), *cells)
