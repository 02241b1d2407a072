"""The policy buffer and the lag models of the simulated asynchronous actor-learner (SPEC §2).

The buffer is a stacked pytree of ``K`` snapshots (policy parameters **and** observation-normaliser
statistics) plus their version numbers, newest first: slot ``a`` holds the snapshot of age ``a``.
Before any publication every slot holds ``theta_0`` labelled version 0, so an age larger than the
phase index lands on ``theta_0`` (SPEC: "ages are clipped to T").
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

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


def sample_ages(key: jax.Array, lag_model: str, num_actors: int, phase, lag_depth) -> jnp.ndarray:
    """Age of each actor at the start of phase ``phase`` (SPEC §2 table), clipped to the phase index.

    ``lag_depth`` (B) may be traced. For 'partial' this is the age at the start of the unroll;
    ``ages_at_step`` moves it forward inside the unroll.
    """
    phase = jnp.asarray(phase, jnp.int32)
    lag_depth = jnp.asarray(lag_depth, jnp.int32)
    if lag_model in ("uniform", "partial"):
        ages = jax.random.randint(key, (num_actors,), 0, lag_depth, dtype=jnp.int32)
    elif lag_model == "fixed":
        ages = jnp.full((num_actors,), lag_depth - 1, jnp.int32)
    elif lag_model == "staggered":
        ages = jnp.mod(jnp.arange(num_actors, dtype=jnp.int32) + phase, lag_depth)
    elif lag_model == "synchronous":
        ages = jnp.zeros((num_actors,), jnp.int32)
    else:
        raise ValueError(f"lag_model={lag_model!r} is not valid")
    return jnp.minimum(ages, phase)


def ages_at_step(start_ages: jnp.ndarray, lag_model: str, step, resync_every: int) -> jnp.ndarray:
    """'partial' rollouts: every ``resync_every`` steps an actor re-syncs one version newer."""
    if lag_model != "partial":
        return start_ages
    return jnp.maximum(start_ages - step // resync_every, 0)
