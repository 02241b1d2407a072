"""The lagged rollout's policy forward pass alone: ways to evaluate N envs under their actors' snapshots.

Times, per env step of all N envs (a ``lax.scan`` over U steps of fixed observations, no env), the
candidates weighed for ``rollout.rollout`` (docs/lag.md, "The rollout"):

    sync        one matrix product with one snapshot (the synchronous path's cost)
    copies      one gathered copy of the snapshot per env, a batched matrix-vector product
    slots_loop  a loop over the snapshot slots in use, each a full matrix product, then a select
    slots_all   every slot of the buffer at once, then a select
    grouped     envs grouped 16 per actor: one copy per actor, a batched matrix product
    tiles       envs sorted by slot into tiles of ``rollout.TILE_ROWS`` envs of one slot: one copy per
                tile, a batched matrix product (what ``rollout`` does with fewer envs per actor)

    python -m benchmarks.rollout_forward
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.core.networks import GaussianPolicy, normalize, normalizer_init
from vaco_jax.core.rollout import TILE_ROWS, apply_in_tiles, tile_layout

N, D, A, K, U, GROUP = 256, 11, 1, 32, 32, 16  # envs, obs size, action size, slots, steps, envs per actor


def main() -> None:
    net = GaussianPolicy((64, 64), A)
    key = jax.random.PRNGKey(0)
    snaps = [{"policy": net.init(jax.random.fold_in(key, i), jnp.zeros((1, D))), "normalizer": normalizer_init(D)}
             for i in range(K)]
    buf = jax.tree.map(lambda *x: jnp.stack(x), *snaps)
    obs = jax.random.normal(key, (U, N, D))

    def dist(s, o):
        return net.apply(s["policy"], normalize(s["normalizer"], o, True))

    def scan(f):
        return jax.lax.scan(lambda c, o: (c + f(o).sum(), None), 0.0, obs)[0]

    def sync(ages):
        return scan(lambda o: dist(snaps[0], o)[0])

    def copies(ages):
        sn = jax.tree.map(lambda x: x[ages], buf)
        return scan(lambda o: jax.vmap(dist)(sn, o)[0])

    def slots_loop(ages):
        def f(o):
            def body(a, acc):
                return jnp.where((ages == a)[:, None], dist(jax.tree.map(lambda x: x[a], buf), o)[0], acc)
            return jax.lax.fori_loop(0, jnp.max(ages) + 1, body, jnp.zeros((N, A)))
        return scan(f)

    def slots_all(ages):
        def f(o):
            m = jax.vmap(dist, in_axes=(0, None))(buf, o)[0]
            return jnp.take_along_axis(m, ages[None, :, None], 0)[0]
        return scan(f)

    def grouped(ages):
        sn = jax.tree.map(lambda x: x[ages[::GROUP]], buf)
        return scan(lambda o: jax.vmap(dist)(sn, o.reshape(N // GROUP, GROUP, D))[0])

    def tiles(ages):
        rows, env_tile, env_lane, tile_slot = tile_layout(ages, K, TILE_ROWS)
        sn = jax.tree.map(lambda x: x[tile_slot], buf)

        return scan(lambda o: apply_in_tiles(dist, sn, (rows, env_tile, env_lane), o)[0])

    print(f"{' '.join(sys.argv)}; jax {jax.__version__}, {jax.devices()[0]}; {N} envs, policy 64x64, "
          f"{K} slots; median of 7 calls of {U} steps")
    for depth in (1, 4, 32):
        ages = jax.random.randint(key, (N,), 0, depth)
        for name, fn in (("sync", sync), ("copies", copies), ("slots_loop", slots_loop), ("slots_all", slots_all),
                         ("grouped", grouped), ("tiles", tiles)):
            if name == "sync" and depth > 1:
                continue
            f = jax.jit(fn)
            f(ages).block_until_ready()
            times = []
            for _ in range(7):
                t0 = time.perf_counter()
                f(ages).block_until_ready()
                times.append(time.perf_counter() - t0)
            print(f"B={depth:>2} {name:<11} {np.median(times) * 1e6 / U:8.1f} us per step of {N} envs", flush=True)


if __name__ == "__main__":
    main()
