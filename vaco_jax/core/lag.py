"""The policy buffer and the lag models of the simulated asynchronous actor-learner (docs/lag.md).

The buffer is a stacked pytree of ``K`` snapshots (policy parameters **and** observation-normaliser
statistics) plus their version numbers, newest first: slot ``a`` holds the snapshot of age ``a``.
Before any publication every slot holds ``theta_0`` labelled version 0, so an age larger than the
phase index lands on ``theta_0`` (docs/lag.md: "ages are clipped to T").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

# Key streams are derived with fold_in so the lag draw never consumes the action-noise key:
# the same run key gives the same action noise at every lag depth.
LAG_STREAM = 0x1A6


class PolicyBuffer(NamedTuple):
    snapshots: Any  # pytree, every leaf with a leading axis of size K (slot = age)
    versions: jnp.ndarray  # int32 [K]


def buffer_init(snapshot: Any, capacity: int) -> PolicyBuffer:
    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (capacity,) + jnp.shape(x)), snapshot)
    return PolicyBuffer(snapshots=stacked, versions=jnp.zeros((capacity,), jnp.int32))


def buffer_publish(buffer: PolicyBuffer, snapshot: Any, version) -> PolicyBuffer:
    """FIFO insert: the new snapshot becomes age 0, the oldest falls out."""
    def push(stack, x):
        return jnp.concatenate([x[None].astype(stack.dtype), stack[:-1]], axis=0)

    return PolicyBuffer(
        snapshots=jax.tree.map(push, buffer.snapshots, snapshot),
        versions=push(buffer.versions, jnp.asarray(version, jnp.int32)),
    )


def gather_snapshots(buffer: PolicyBuffer, ages: jnp.ndarray):
    """Per-actor snapshots and their versions for an int array of ages (any shape)."""
    return jax.tree.map(lambda x: x[ages], buffer.snapshots), buffer.versions[ages]


def lag_key(run_key: jax.Array, phase) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(run_key, LAG_STREAM), phase)


# ----------------------------------------------------------------------------- lag models

class LagModel:
    """A lag model is a piece (docs/lag.md): its numbers are leaves, so a grid over them is a vmap.

    ``start_ages(key, num_actors, phase)``: each actor's snapshot age at the start of phase ``phase``
    (clipped to the phase index: ages beyond it land on the pre-filled θ_0 copies);
    ``ages_at_step(start_ages, step)``: the age at step ``step`` of the unroll;
    ``depth()``: the nominal lag depth B (the version window the revised EWMA and the exact
    old-logit recovery span).
    """

    name: ClassVar[str] = "?"
    synchronous: ClassVar[bool] = False  # no buffer at all: actors act with the learner's parameters
    varies_within_unroll: ClassVar[bool] = False

    def depth(self):
        raise NotImplementedError

    def _ages(self, key, num_actors, phase):
        raise NotImplementedError

    def start_ages(self, key: jax.Array, num_actors: int, phase) -> jnp.ndarray:
        phase = jnp.asarray(phase, jnp.int32)
        return jnp.minimum(self._ages(key, num_actors, phase), phase)

    def ages_at_step(self, start_ages: jnp.ndarray, step) -> jnp.ndarray:
        return start_ages


@struct.dataclass
class AgeDistribution(LagModel):
    """i.i.d. ages from a probability vector over 0..K−1 (a traced leaf, so the lag's *shape* is a
    sweep axis). ``uniform`` (1/B on 0..B−1) and ``fixed`` (all mass on B−1) are two such vectors.

    A vector that is uniform on a prefix 0..n−1 is sampled with ``randint(0, n)`` and any other with
    the inverse CDF of one uniform draw; both are computed and one is selected, so the shape stays
    traced and the ``uniform`` model reproduces earlier results bit for bit.
    """

    probs: Any  # float32 [K], sums to 1
    label: str = struct.field(pytree_node=False, default="ages")

    @property
    def name(self):  # type: ignore[override]
        return self.label

    def depth(self):
        probs = jnp.asarray(self.probs, jnp.float32)
        return jnp.max(jnp.where(probs > 0, jnp.arange(1, probs.shape[-1] + 1, dtype=jnp.int32), 0))

    def _ages(self, key, num_actors, phase):
        probs = jnp.asarray(self.probs, jnp.float32)
        capacity = probs.shape[-1]
        support = probs > 0
        n = jnp.sum(support.astype(jnp.int32))
        prefix = jnp.all(support == (jnp.arange(capacity) < n))
        equal = jnp.max(jnp.where(support, probs, -jnp.inf)) == jnp.min(jnp.where(support, probs, jnp.inf))
        uniform_ages = jax.random.randint(key, (num_actors,), 0, n, dtype=jnp.int32)
        cdf = jnp.cumsum(probs) / jnp.sum(probs)
        u = jax.random.uniform(jax.random.fold_in(key, 1), (num_actors,))
        drawn = jnp.sum((cdf[None, :] <= u[:, None]).astype(jnp.int32), axis=1)
        drawn = jnp.minimum(drawn, self.depth() - 1)
        return jnp.where(prefix & equal, uniform_ages, drawn)


@struct.dataclass
class Staggered(LagModel):
    """Round-robin workers: age ``(a + T) mod B``."""

    name: ClassVar[str] = "staggered"
    lag_depth: Any = 1

    def depth(self):
        return jnp.asarray(self.lag_depth, jnp.int32)

    def _ages(self, key, num_actors, phase):
        return jnp.mod(jnp.arange(num_actors, dtype=jnp.int32) + phase, self.depth())


@struct.dataclass
class Partial(LagModel):
    """Partial rollouts: uniform ages at phase start, then every ``resync_every`` steps an actor
    re-syncs one version newer (versions never decrease within a phase)."""

    name: ClassVar[str] = "partial"
    varies_within_unroll: ClassVar[bool] = True
    lag_depth: Any = 1
    resync_every: int = struct.field(pytree_node=False, default=8)

    def depth(self):
        return jnp.asarray(self.lag_depth, jnp.int32)

    def _ages(self, key, num_actors, phase):
        return jax.random.randint(key, (num_actors,), 0, self.depth(), dtype=jnp.int32)

    def ages_at_step(self, start_ages, step):
        return jnp.maximum(start_ages - step // self.resync_every, 0)


@struct.dataclass
class Publish(LagModel):
    """A learner that publishes every ``k``-th version to actors that see it ``d = B − k`` versions late.

    In phase ``T`` every actor acts with the newest published version at least ``d`` old,
    ``v = k·⌊(T − d)/k⌋``: the age ``d + ((T − d) mod k)`` rises by one a phase and drops by ``k − 1``
    at each publication, the same for every actor, so consecutive phases' ages are correlated
    (a sawtooth on ``d … B − 1``, mean ``d + (k − 1)/2``). No key is read. Both numbers are traced
    leaves, so a grid over the interval or the depth is one program.
    """

    name: ClassVar[str] = "publish"
    lag_depth: Any = 1
    interval: Any = 1

    def depth(self):
        return jnp.asarray(self.lag_depth, jnp.int32)

    def _ages(self, key, num_actors, phase):
        k = jnp.asarray(self.interval, jnp.int32)
        d = self.depth() - k
        # jnp.mod is a floor modulus: before the first publication it lands above T and start_ages clips it
        return jnp.broadcast_to(d + jnp.mod(phase - d, k), (num_actors,)).astype(jnp.int32)


@struct.dataclass
class Synchronous(LagModel):
    """The no-buffer reference: every actor acts with the learner's current parameters."""

    name: ClassVar[str] = "synchronous"
    synchronous: ClassVar[bool] = True

    def depth(self):
        return jnp.ones((), jnp.int32)

    def _ages(self, key, num_actors, phase):
        return jnp.zeros((num_actors,), jnp.int32)


def _age_vector(probs: np.ndarray, label: str) -> AgeDistribution:
    return AgeDistribution(probs=jnp.asarray(probs, jnp.float32), label=label)


def _uniform(lag_depth, capacity, resync_every, age_weights):
    probs = np.zeros((capacity,), np.float32)
    probs[:lag_depth] = 1.0 / lag_depth
    return _age_vector(probs, "uniform")


def _fixed(lag_depth, capacity, resync_every, age_weights):
    probs = np.zeros((capacity,), np.float32)
    probs[lag_depth - 1] = 1.0
    return _age_vector(probs, "fixed")


def _ages(lag_depth, capacity, resync_every, age_weights):
    probs = np.zeros((capacity,), np.float32)
    w = np.asarray(age_weights, np.float64)
    probs[: len(w)] = (w / w.sum()).astype(np.float32)
    return _age_vector(probs, "ages")


@dataclasses.dataclass(frozen=True)
class LagSpec:
    """A lag model's entry in ``LAG_MODELS``: how one cell's piece is built from the config's lag
    settings (``build(lag_depth, capacity, resync_every, age_weights)``, plus
    ``publish_interval=`` when ``reads_publish_interval``), a help line, and the facts the config
    checks: whether it reads ``age_weights`` (and takes its depth from them), whether it reads
    ``publish_interval`` (at most the lag depth), and whether it runs without a buffer (lag depth 1
    only)."""

    name: str
    build: Callable[..., LagModel]
    help: str
    reads_age_weights: bool = False
    synchronous: bool = False
    reads_publish_interval: bool = False


LAG_MODELS: dict[str, LagSpec] = {}


def register_lag_model(spec: LagSpec) -> LagSpec:
    """Add a lag model: ``Config(lag_model=spec.name)``, the command line's choices and help then know it."""
    LAG_MODELS[spec.name] = spec
    return spec


for _spec in (
    LagSpec("uniform", _uniform, "i.i.d. ages, uniform on 0..B-1"),
    LagSpec("fixed", _fixed, "every actor B-1 versions old"),
    LagSpec("ages", _ages, "i.i.d. ages from --age-weights (weights of ages 0, 1, ...; B = their last nonzero "
            "age + 1)", reads_age_weights=True),
    LagSpec("staggered", lambda b, k, r, w: Staggered(lag_depth=jnp.asarray(b, jnp.int32)),
            "round-robin workers: age (actor + phase) mod B"),
    LagSpec("partial", lambda b, k, r, w: Partial(lag_depth=jnp.asarray(b, jnp.int32), resync_every=int(r)),
            "uniform ages at a phase's start, then one version newer every --partial-resync-every steps"),
    LagSpec("synchronous", lambda b, k, r, w: Synchronous(), "no buffer: every actor acts with the learner's "
            "parameters (B = 1)", synchronous=True),
    LagSpec("publish", lambda b, k, r, w, publish_interval: Publish(lag_depth=jnp.asarray(b, jnp.int32),
                                                                   interval=jnp.asarray(publish_interval, jnp.int32)),
            "a learner publishing every --publish-interval k-th version, seen B-k versions late: every actor's age "
            "runs B-k, ..., B-1 and drops back at each publication (mean B-(k+1)/2)", reads_publish_interval=True),
):
    register_lag_model(_spec)


def make_lag(lag_model: str, lag_depth: int = 1, capacity: int = 16, resync_every: int = 8,
             age_weights=None, publish_interval: int = 1) -> LagModel:
    """Build the lag piece of one cell (values are checked by ``config.make_traced``)."""
    if lag_model not in LAG_MODELS:
        raise ValueError(f"lag_model={lag_model!r} is not valid; allowed values: {', '.join(LAG_MODELS)}")
    spec = LAG_MODELS[lag_model]
    if spec.reads_publish_interval:
        return spec.build(lag_depth, capacity, resync_every, age_weights, publish_interval=publish_interval)
    return spec.build(lag_depth, capacity, resync_every, age_weights)
