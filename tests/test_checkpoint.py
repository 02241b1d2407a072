"""Checkpointing: exact round trips, atomic replacement, and bit-for-bit resumption of training.

The fast tests use a synthetic pytree; the slow ones train a tiny MJX configuration (one jitted
``run_chunk`` for a single cell and one for a grid of two, shared across the whole test).
"""

import os
import shutil
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from vaco_jax.driver.checkpoint import (COMMIT_FILE, TMP_SUFFIX, latest_checkpoint, restore_checkpoint,
                                 save_checkpoint)


class Inner(NamedTuple):
    count: jax.Array  # int32 scalar
    table: dict


class Carry(NamedTuple):
    params: dict
    inner: Inner
    key: jax.Array  # uint32 PRNGKey
    scale: jax.Array  # float32 scalar
    empty: jax.Array  # zero-size, as MJX keeps for absent contacts
    typed_key: jax.Array  # new-style typed key array


def _carry(seed: int) -> Carry:
    rng = np.random.default_rng(seed)
    return Carry(
        params={"dense": {"w": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
                          "b": jnp.asarray(rng.normal(size=(4,)), jnp.float32)},
                "log_std": jnp.asarray([-0.5, np.nan, np.inf], jnp.float32)},
        inner=Inner(count=jnp.asarray(seed, jnp.int32),
                    table={"versions": jnp.asarray(rng.integers(-5, 5, size=(2, 8)), jnp.int32),
                           "hashes": jnp.asarray(rng.integers(0, 2**32, size=(5,)), jnp.uint32),
                           "alive": jnp.asarray([True, False])}),
        key=jax.random.PRNGKey(seed),
        scale=jnp.asarray(1.0 / (seed + 3), jnp.float32),
        empty=jnp.zeros((4, 0, 3), jnp.float32),
        typed_key=jax.random.split(jax.random.key(seed), 3),
    )


def _raw(x):
    x = jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
    return np.asarray(x)


def assert_trees_identical(a, b):
    """Same treedef (hence NamedTuple types) and every leaf bit-identical with the same dtype."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)):
        assert x.dtype == y.dtype, jax.tree_util.keystr(path)
        assert x.shape == y.shape, jax.tree_util.keystr(path)
        # view as bytes so NaNs and signed zeros compare bit for bit
        np.testing.assert_array_equal(_raw(x).reshape(-1).view(np.uint8), _raw(y).reshape(-1).view(np.uint8),
                                      err_msg=jax.tree_util.keystr(path))


def _step_dirs(directory):
    return sorted(os.listdir(directory))


def test_round_trip_is_exact_and_keeps_types(tmp_path):
    state = _carry(0)
    save_checkpoint(str(tmp_path), state, 3, extra={"history": [{"eval_return": 1.5}], "seed": 0})
    for template in (_carry(7), jax.eval_shape(lambda: _carry(7))):
        restored, chunk, extra = restore_checkpoint(str(tmp_path), template)
        assert chunk == 3 and extra == {"history": [{"eval_return": 1.5}], "seed": 0}
        assert type(restored) is Carry and type(restored.inner) is Inner
        assert isinstance(restored.params, dict) and isinstance(restored.params["dense"], dict)
        assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(restored))
        assert_trees_identical(state, restored)
    # NumPy template leaves come back as NumPy arrays
    np_inner = Inner(np.int32(0), jax.tree.map(np.asarray, state.inner.table))
    np_template = _carry(7)._replace(scale=np.float32(0), inner=np_inner)
    restored, _, _ = restore_checkpoint(str(tmp_path), np_template)
    assert isinstance(restored.scale, np.ndarray) and isinstance(restored.inner.table["hashes"], np.ndarray)
    assert_trees_identical(state, restored)


def test_latest_tracks_newest_and_a_save_replaces_the_previous(tmp_path):
    d = str(tmp_path / "ckpt")
    assert latest_checkpoint(d) is None and restore_checkpoint(d, _carry(0)) is None  # no directory
    os.makedirs(d)
    assert latest_checkpoint(d) is None and restore_checkpoint(d, _carry(0)) is None  # empty directory

    save_checkpoint(d, _carry(1), 1, extra={"n": 1})
    assert latest_checkpoint(d) == 1 and _step_dirs(d) == ["1"]
    save_checkpoint(d, _carry(2), 2, extra={"n": 2})
    assert latest_checkpoint(d) == 2 and _step_dirs(d) == ["1", "2"]  # the previous one stays as a fallback
    save_checkpoint(d, _carry(3), 3, extra={"n": 3})
    assert latest_checkpoint(d) == 3 and _step_dirs(d) == ["2", "3"]  # older ones go
    restored, chunk, extra = restore_checkpoint(d, _carry(0))
    assert (chunk, extra) == (3, {"n": 3})
    assert_trees_identical(_carry(3), restored)

    # saving the same chunk again (or an earlier one: a run restarted into an old directory)
    # never writes into an existing checkpoint directory, and the newest save wins
    save_checkpoint(d, _carry(4), 3, extra={"n": 4})
    assert latest_checkpoint(d) == 3 and len(_step_dirs(d)) == 2
    assert restore_checkpoint(d, _carry(0))[2] == {"n": 4}
    save_checkpoint(d, _carry(5), 1, extra={"n": 5})
    assert latest_checkpoint(d) == 1 and len(_step_dirs(d)) == 2
    restored, chunk, extra = restore_checkpoint(d, _carry(0))
    assert (chunk, extra) == (1, {"n": 5})
    assert_trees_identical(_carry(5), restored)


def _array_files(step_dir):
    out = []
    for root, _, files in os.walk(os.path.join(step_dir, "state")):
        out += [os.path.join(root, f) for f in files if "/d/" in os.path.join(root, f) + "/" or root.endswith("/d")]
    return sorted(out, key=os.path.getsize)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, damage):
    from vaco_jax.driver.checkpoint import CheckpointDamaged

    d = str(tmp_path)
    save_checkpoint(d, _carry(1), 1, extra={"n": 1})
    save_checkpoint(d, _carry(2), 2, extra={"n": 2})
    files = _array_files(os.path.join(d, "2"))
    assert files, os.listdir(os.path.join(d, "2"))
    # Damage every array data file of the newest checkpoint (flipping a few bytes may land in bytes
    # the restore never reads, which is harmless; here the read arrays are certainly damaged)
    for target in files:
        data = bytearray(open(target, "rb").read())
        if damage == "flip":
            data = bytearray(b ^ 0xFF for b in data)
        else:
            data = data[: len(data) // 2]
        open(target, "wb").write(bytes(data))
    restored, chunk, extra = restore_checkpoint(d, _carry(0))  # never the damaged arrays
    assert (chunk, extra) == (1, {"n": 1})
    assert_trees_identical(_carry(1), restored)
    shutil.rmtree(os.path.join(d, "1"))  # no fallback left: a clear error naming the checkpoint
    with pytest.raises(CheckpointDamaged, match=r"no usable checkpoint.*2"):
        restore_checkpoint(d, _carry(0))


def test_interrupted_saves_are_ignored(tmp_path, monkeypatch):
    d = str(tmp_path)
    save_checkpoint(d, _carry(1), 1)
    complete = os.path.join(d, "1")
    assert os.path.exists(os.path.join(complete, COMMIT_FILE))

    # 1. a real crash: orbax has written every array into its temporary directory, then the
    #    process dies before the commit marker and the rename
    from orbax.checkpoint._src.path import atomicity

    def crash(self):
        raise KeyboardInterrupt("killed before the checkpoint was finalised")

    with monkeypatch.context() as m:
        m.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", crash)
        with pytest.raises(KeyboardInterrupt):
            save_checkpoint(d, _carry(2), 2)
    assert "2" + TMP_SUFFIX in _step_dirs(d)
    # 2. a step directory without its commit marker (e.g. an interrupted copy, or an object store
    #    where orbax marks completion with the file instead of a rename)
    shutil.copytree(complete, os.path.join(d, "9"))
    os.remove(os.path.join(d, "9", COMMIT_FILE))
    # 3. a hand-made temporary directory with a larger number
    shutil.copytree(complete, os.path.join(d, "12" + TMP_SUFFIX))

    assert latest_checkpoint(d) == 1
    restored, chunk, _ = restore_checkpoint(d, _carry(0))
    assert chunk == 1
    assert_trees_identical(_carry(1), restored)

    # the next successful save does not reuse any of those names, and removes them (keeping the
    # previous complete checkpoint as a fallback)
    save_checkpoint(d, _carry(2), 2)
    assert latest_checkpoint(d) == 2 and _step_dirs(d) == ["1", "13"]
    assert_trees_identical(_carry(2), restore_checkpoint(d, _carry(0))[0])


def test_mismatched_template_is_refused(tmp_path):
    save_checkpoint(str(tmp_path), _carry(0), 1)
    wrong_shape = _carry(0)._replace(scale=jnp.zeros((2,), jnp.float32))
    with pytest.raises(ValueError, match="scale"):
        restore_checkpoint(str(tmp_path), wrong_shape)
    wrong_dtype = _carry(0)._replace(scale=jnp.zeros((), jnp.bfloat16))
    with pytest.raises(ValueError, match="scale"):
        restore_checkpoint(str(tmp_path), wrong_dtype)
    with pytest.raises(ValueError, match="leaves"):
        restore_checkpoint(str(tmp_path), {"only": jnp.zeros(())})
    with pytest.raises(TypeError):
        save_checkpoint(str(tmp_path), _carry(0), 2, extra={"not json": object()})
    assert latest_checkpoint(str(tmp_path)) == 1


def test_sharded_grid_state_keeps_its_sharding(tmp_path):
    devices = jax.devices()
    n = len(devices) if len(devices) > 1 else 1
    mesh = jax.sharding.Mesh(np.array(devices[:n]), ("grid",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("grid"))
    grid = 2 * n
    state = {"w": jnp.arange(grid * 3, dtype=jnp.float32).reshape(grid, 3),
             "key": jax.vmap(jax.random.PRNGKey)(jnp.arange(grid)),
             "typed": jax.random.split(jax.random.key(0), grid),
             "empty": jnp.zeros((grid, 0))}
    state = jax.device_put(state, sharding)
    save_checkpoint(str(tmp_path), state, 1)
    template = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
    restored, _, _ = restore_checkpoint(str(tmp_path), template)
    assert_trees_identical(state, restored)
    for x in jax.tree.leaves(restored):
        assert x.sharding == sharding


# ----------------------------------------------------------------------------- resumption (MJX)

LAG_DEPTH = 3


@pytest.fixture(scope="module")
def resume_setup():
    from vaco_jax.core.train import make_train

    # 8 phases in 4 chunks of 2; the revised EWMA proximal policy carries state across phases
    config = tiny_config(num_evals=4, total_env_steps=8 * 16 * 8, method="ppo_ewma_revised")
    assert config.phases_per_chunk == 2 and config.num_evals == 4
    return config, make_train(config)


def _run(chunk_fn, state, traced, n):
    metrics = []
    for _ in range(n):
        state, m = chunk_fn(state, traced)
        metrics.append(jax.device_get(m))
    return state, metrics


def _resume_matches_uninterrupted(tmp_path, trainer, init, chunk_fn, keys, traced, template_fn):
    full, full_metrics = _run(chunk_fn, init(keys, traced), traced, 4)

    half, _ = _run(chunk_fn, init(keys, traced), traced, 2)
    save_checkpoint(str(tmp_path), half, 2, extra={"note": "after two chunks"})
    del half  # from here on the state comes from disk only
    restored, chunk, extra = restore_checkpoint(str(tmp_path), template_fn())
    assert chunk == 2 and extra == {"note": "after two chunks"}
    assert int(np.max(restored.phase)) == 2 * 2
    resumed, resumed_metrics = _run(chunk_fn, restored, traced, 2)

    assert type(resumed) is type(full)
    assert_trees_identical(full, resumed)
    for a, b in zip(full_metrics[2:], resumed_metrics):
        assert_trees_identical(a, b)

    # the comparison is sensitive to the carry: resuming with a fresh EWMA state instead of the
    # saved one changes the result
    fresh = init(keys, traced)
    wrong = restored._replace(learner=restored.learner._replace(ewma=fresh.learner.ewma))
    wrong_final, _ = _run(chunk_fn, wrong, traced, 2)
    assert not all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(full.learner.policy_params),
                                                        jax.tree.leaves(wrong_final.learner.policy_params)))
    return full


@pytest.mark.slow
def test_resume_is_bit_for_bit_single_cell(tmp_path, resume_setup):
    from vaco_jax.core.config import make_traced

    config, trainer = resume_setup
    traced = make_traced(config, LAG_DEPTH)
    key = jax.random.PRNGKey(0)
    _resume_matches_uninterrupted(
        tmp_path, trainer, jax.jit(trainer.init), jax.jit(trainer.run_chunk), key, traced,
        template_fn=lambda: jax.eval_shape(trainer.init, jax.random.PRNGKey(123), traced))


@pytest.mark.slow
def test_resume_is_bit_for_bit_vmapped_grid(tmp_path, resume_setup):
    from vaco_jax.core.config import make_traced, stack_traced

    config, trainer = resume_setup
    traced = stack_traced([make_traced(config, LAG_DEPTH), make_traced(config, 1)])
    keys = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    init = jax.jit(jax.vmap(trainer.init))
    full = _resume_matches_uninterrupted(
        tmp_path, trainer, init, jax.jit(jax.vmap(trainer.run_chunk)), keys, traced,
        # a fresh init with other keys as the template
        template_fn=lambda: init(jnp.stack([jax.random.PRNGKey(7), jax.random.PRNGKey(8)]), traced))
    assert full.phase.shape == (2,)
    # the two cells really differ, so a mixed-up grid axis would be caught
    kernel = jax.tree.leaves(full.learner.policy_params)[-1]
    assert not np.array_equal(kernel[0], kernel[1])
