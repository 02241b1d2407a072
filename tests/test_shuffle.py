"""update.permutation, the per-epoch minibatch permutation: a permutation, exactly uniform, the same
under vmap, redrawn on tied keys; 'sort' is jax.random.permutation (runs made before it existed)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from vaco_jax.core.config import ConfigError
from vaco_jax.core.update import RANK_SHUFFLE_MAX, permutation


@pytest.mark.parametrize("method", ["rank", "sort"])
@pytest.mark.parametrize("n", [1, 2, 7, 64, 2048])
def test_is_a_permutation(method, n):
    for seed in range(3):
        p = np.asarray(jax.jit(lambda k: permutation(k, n, method))(jax.random.PRNGKey(seed)))
        assert p.dtype == np.int32 and sorted(p.tolist()) == list(range(n))


def test_sort_is_jax_random_permutation():
    for seed in range(3):
        k = jax.random.PRNGKey(seed)
        np.testing.assert_array_equal(permutation(k, 1000, "sort"), jax.random.permutation(k, 1000))


def test_rank_is_uniform_over_all_orderings():
    """n = 4: 24 orderings, 24,000 draws; a chi-square statistic with 23 degrees of freedom above 70
    has probability < 1e-6 under uniformity (the draws are fixed by their keys: this is deterministic)."""
    n, draws = 4, 24_000
    keys = jax.random.split(jax.random.PRNGKey(7), draws)
    perms = np.asarray(jax.jit(jax.vmap(lambda k: permutation(k, n, "rank")))(keys))
    index = {p: i for i, p in enumerate(itertools.permutations(range(n)))}
    counts = np.bincount([index[tuple(p)] for p in perms.tolist()], minlength=24)
    expected = draws / 24
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 70, (chi2, counts)
    # and every position is equally likely to receive every element
    for pos in range(n):
        assert np.all(np.abs(np.bincount(perms[:, pos], minlength=n) / draws - 1 / n) < 0.015)


def test_rank_under_vmap_equals_one_key_at_a_time():
    keys = jax.random.split(jax.random.PRNGKey(3), 6)
    batched = np.asarray(jax.jit(jax.vmap(lambda k: permutation(k, 4096)))(keys))
    for k, row in zip(keys, batched):
        np.testing.assert_array_equal(row, permutation(k, 4096))


def test_tied_keys_are_redrawn():
    """At n = 2^16, 32-bit keys tie in ~40 % of draws. Find a key whose first draw ties, as
    permutation draws it, and check the result is still a permutation (ranks of tied keys would
    repeat an index and drop another)."""
    n = RANK_SHUFFLE_MAX
    for seed in range(40):
        first = jax.random.bits(jax.random.split(jax.random.PRNGKey(seed))[1], (n,), jnp.uint32)
        if len(np.unique(np.asarray(first))) < n:
            break
    else:
        pytest.fail("no key with tied first draw among 40")
    p = np.asarray(jax.jit(lambda k: permutation(k, n))(jax.random.PRNGKey(seed)))
    assert np.array_equal(np.sort(p), np.arange(n))


def test_rank_falls_back_to_sort_above_its_size_and_bad_names_are_refused():
    k = jax.random.PRNGKey(0)
    n = RANK_SHUFFLE_MAX + 1
    np.testing.assert_array_equal(permutation(k, n, "rank"), jax.random.permutation(k, n))
    with pytest.raises(ValueError, match="minibatch_shuffle='radix'.*rank.*sort"):
        permutation(k, 8, "radix")
    with pytest.raises(ConfigError, match="minibatch_shuffle='radix'.*rank, sort"):
        tiny_config(minibatch_shuffle="radix")
