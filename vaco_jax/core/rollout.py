"""Unroll N envs x U steps with per-actor lagged snapshots (docs/lag.md).

Each actor evaluates *its own* snapshot (policy + normaliser statistics of version ``v``) in
``actor_dtype``, casts the distribution parameters to float32, samples, and records the float32
log-density of the sampled action (``behaviour_logp`` = ``logp_infer``).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from vaco_jax.core import lag as lag_lib
from vaco_jax.envs import Env, EnvState
from vaco_jax.core.networks import gaussian_logp, normalize

MISMATCH_STREAM = 0x3A7C  # the mismatch shift's key stream (fold_in of the phase's action key)

TILE_ROWS = 8  # envs per tile of the per-actor path (docs/lag.md: "The rollout")

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


class Transition(NamedTuple):
    obs: jnp.ndarray  # raw observation acted on
    action: jnp.ndarray  # sampled (unclipped) action
    reward: jnp.ndarray
    termination: jnp.ndarray
    truncation: jnp.ndarray
    next_obs: jnp.ndarray  # raw next observation before any auto-reset
    behaviour_logp: jnp.ndarray  # logp_infer: density the action was sampled from (float32)
    behaviour_version: jnp.ndarray  # int32 version v of the actor's snapshot
    behaviour_mean: jnp.ndarray  # behaviour distribution parameters (float32)
    behaviour_log_std: jnp.ndarray
    episode_return: jnp.ndarray  # return of an episode that ended at this step (else 0)
    episode_length: jnp.ndarray  # its length (else 0)


def actor_distribution(policy_apply: Callable, snapshot: Any, obs: jnp.ndarray, actor_dtype: str,
                       normalize_observations: bool):
    """One snapshot's distribution parameters for a batch of observations, computed in ``actor_dtype``."""
    dtype = DTYPES[actor_dtype]
    x = normalize(snapshot["normalizer"], obs, normalize_observations)
    params = jax.tree.map(lambda p: p.astype(dtype), snapshot["policy"])
    mean, log_std = policy_apply(params, x.astype(dtype))
    return mean.astype(jnp.float32), log_std.astype(jnp.float32)


def tile_layout(env_slot: jnp.ndarray, capacity: int, tile_rows: int):
    """Place N envs, each reading buffer slot ``env_slot[n]``, in tiles of ``tile_rows`` envs of one slot.

    Envs are ordered by slot (stable: by env index within a slot) and each slot's envs fill
    ``ceil(count / tile_rows)`` consecutive tiles, so at most ``floor((N + S (tile_rows - 1)) / tile_rows)``
    tiles are needed for S = min(capacity, N) slots in use; that many are laid out (a static shape),
    the unused ones empty. Returns ``rows`` [tiles, tile_rows], the env in each lane (N marks an
    empty lane); ``env_tile`` and ``env_lane`` [N], where each env sits; ``tile_slot`` [tiles], the
    slot each tile reads (0 for an empty tile)."""
    n = env_slot.shape[0]
    num_tiles = (n + min(capacity, n) * (tile_rows - 1)) // tile_rows
    order = jnp.argsort(env_slot, stable=True)
    count = jnp.bincount(env_slot, length=capacity)
    first_env = jnp.cumsum(count) - count  # sorted position of each slot's first env
    tiles_of = -(-count // tile_rows)
    first_tile = jnp.cumsum(tiles_of) - tiles_of
    sorted_slot = env_slot[order]
    within = jnp.arange(n) - first_env[sorted_slot]
    tile = first_tile[sorted_slot] + within // tile_rows
    lane = within % tile_rows
    rows = jnp.full((num_tiles, tile_rows), n, jnp.int32).at[tile, lane].set(order.astype(jnp.int32))
    tile_slot = jnp.zeros((num_tiles,), env_slot.dtype).at[tile].set(sorted_slot)
    env_tile = jnp.zeros((n,), jnp.int32).at[order].set(tile.astype(jnp.int32))
    env_lane = jnp.zeros((n,), jnp.int32).at[order].set(lane.astype(jnp.int32))
    return rows, env_tile, env_lane, tile_slot


def apply_in_tiles(fn: Callable, snaps: Any, layout: tuple, obs: jnp.ndarray):
    """``fn(snapshot, block)`` for every tile at once (``vmap``), read back in env order.

    ``snaps`` holds one snapshot per tile, ``layout`` is ``(rows, env_tile, env_lane)`` of
    :func:`tile_layout`; empty lanes see a row of zeros. Returns ``fn``'s outputs with a leading [N]."""
    rows, env_tile, env_lane = layout
    padded = jnp.concatenate([obs, jnp.zeros_like(obs[:1])], axis=0)  # row N: an empty lane
    return jax.tree.map(lambda x: x[env_tile, env_lane], jax.vmap(fn)(snaps, padded[rows]))


def rollout(
    *,
    env: Env,
    policy_apply: Callable,
    buffer: lag_lib.PolicyBuffer,
    learner_snapshot: Any,
    env_state: EnvState,
    start_ages: jnp.ndarray,  # int32 [num_actors]
    action_key: jax.Array,
    unroll_length: int,
    lag: lag_lib.LagModel,
    envs_per_actor: int,
    actor_dtype: str,
    normalize_observations: bool,
    phase,
    mismatch_strength=0.0,
) -> tuple[EnvState, Transition]:
    """Return the final env state and a time-major ``Transition`` batch [U, N, ...].

    ``mismatch_strength`` m (traced): a controlled training-inference mismatch. The actor's mean is
    shifted by m x its standard deviation x a standard normal draw per sample and action dimension
    (from a stream of its own, so the action noise is the same at every m), and the actor samples
    from and records that shifted distribution; a learner recomputing the snapshot's density gets the
    unshifted one. m = 0 leaves every number unchanged."""

    num_actors = start_ages.shape[0]
    capacity = jax.tree.leaves(buffer.snapshots)[0].shape[0]
    tiled = envs_per_actor < TILE_ROWS and not lag.synchronous

    def gathered(ages):
        """What the per-actor path needs for these ages: the snapshots it applies (one per tile of
        ``TILE_ROWS`` envs of one age, or one per actor when actors are that large), the tables that
        place envs in tiles, whether every actor holds the same snapshot, each env's version."""
        versions = jnp.repeat(buffer.versions[ages], envs_per_actor, axis=0)
        same = jnp.all(ages == ages[0])
        if not tiled:
            return jax.tree.map(lambda x: x[ages], buffer.snapshots), None, same, versions
        rows, env_tile, env_lane, tile_slot = tile_layout(
            jnp.repeat(ages, envs_per_actor, axis=0), capacity, TILE_ROWS)
        return jax.tree.map(lambda x: x[tile_slot], buffer.snapshots), (rows, env_tile, env_lane), same, versions

    def actors_distribution(snaps, layout, same, obs):
        """Distribution parameters of every env under its actor's snapshot.

        When every actor holds the same snapshot (B = 1, the ``fixed`` model, the first phases) the
        policy is one matrix product over all envs; otherwise each snapshot is applied to its own
        tiles of envs (or each actor's to its own block of envs), a batched matrix product.
        ``lax.cond`` runs one of the two (under ``vmap`` of a grid whose cells disagree, both).
        docs/lag.md: "The rollout"."""
        def shared(_):
            return dist_batch(jax.tree.map(lambda x: x[0], snaps), obs)

        def per_tile(_):
            return apply_in_tiles(dist_batch, snaps, layout, obs)

        def per_actor(_):
            blocks = obs.reshape((num_actors, envs_per_actor) + obs.shape[1:])
            mean, log_std = jax.vmap(dist_batch)(snaps, blocks)
            return (mean.reshape((obs.shape[0],) + mean.shape[2:]),
                    log_std.reshape((obs.shape[0],) + log_std.shape[2:]))

        if tiled:  # all actors the same: tile 0 holds envs of that one slot, so ``shared`` reads its snapshot
            return jax.lax.cond(same, shared, per_tile, None)
        return jax.lax.cond(same, shared, per_actor, None)

    fixed = None
    if not lag.synchronous and not lag.varies_within_unroll:
        fixed = gathered(start_ages)  # once per phase

    dist_batch = lambda snap, o: actor_distribution(policy_apply, snap, o, actor_dtype, normalize_observations)

    def step_fn(carry, t):
        state = carry
        obs = state.core.obs
        if lag.synchronous:
            mean, log_std = dist_batch(learner_snapshot, obs)
            versions = jnp.full((obs.shape[0],), phase, jnp.int32)
        else:
            snaps, layout, same, versions = fixed if fixed is not None else gathered(lag.ages_at_step(start_ages, t))
            mean, log_std = actors_distribution(snaps, layout, same, obs)
        shift = jax.random.normal(jax.random.fold_in(jax.random.fold_in(action_key, MISMATCH_STREAM), t), mean.shape,
                                  jnp.float32)
        mean = mean + jnp.asarray(mismatch_strength, jnp.float32) * jnp.exp(log_std) * shift
        noise = jax.random.normal(jax.random.fold_in(action_key, t), mean.shape, jnp.float32)
        action = mean + jnp.exp(log_std) * noise
        logp = gaussian_logp(action, mean, log_std)
        state, out = jax.vmap(env.step)(state, jnp.clip(action, env.action_low, env.action_high))
        tr = Transition(
            obs=obs, action=action, reward=out.reward, termination=out.termination,
            truncation=out.truncation, next_obs=out.next_obs, behaviour_logp=logp,
            behaviour_version=versions, behaviour_mean=mean, behaviour_log_std=log_std,
            episode_return=out.episode_return, episode_length=out.episode_length,
        )
        return state, tr

    return jax.lax.scan(step_fn, env_state, jnp.arange(unroll_length, dtype=jnp.int32))
