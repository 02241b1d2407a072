"""Orbax save/restore of the whole training carry, so an interrupted run resumes bit for bit.

**What is saved.** The whole ``TrainState`` (or any pytree of arrays): learner parameters, both
optimiser states, the EWMA proximal state, the learner's observation normaliser, the policy buffer
(every stored snapshot and its version), the MJX env state (the Brax ``State`` of every env, so
episodes in flight continue), the phase counter ``T`` and the run PRNG key. Every random stream
of the trainer is ``fold_in(run_key, stream, T)``, so with this carry restored the remaining
chunks recompute exactly the same numbers as an uninterrupted run (on the same backend and
program: ``tests/test_checkpoint.py`` checks every leaf is bit-identical on CPU). Grid states
(a leading vmap axis, possibly sharded over devices) are saved the same way. Next to the arrays
go ``chunk`` (the number of chunks completed) and a small JSON ``extra`` dict (e.g. the learning
curve so far).

**Layout.** ``directory/<step>/`` holds one checkpoint, written by one orbax ``Checkpointer``
with two items: ``state`` (the flat list of leaves, one array each, OCDBT/tensorstore) and
``meta`` (JSON: ``chunk``, ``extra``, and each leaf's key path, shape and dtype, checked against
the template on restore). ``<step>`` is ``chunk`` in the normal flow; when a complete checkpoint
with that number or a higher one already exists (a second save of the same chunk, or a run
restarted from scratch into an old directory) it is the largest number present plus one, so a
new save never writes into an existing directory. ``chunk`` is always read from ``meta``.
The newest checkpoint and the one before it are kept: every leaf is saved with the sha256 of its
bytes, and a restore that finds the newest one damaged (unreadable, truncated, or an array that
does not match its checksum) falls back to the previous one; when none is usable it raises
``CheckpointDamaged`` naming each problem.

**Atomicity.** Orbax writes the checkpoint into ``<step>.orbax-checkpoint-tmp`` and, after every
array and the JSON are on disk, writes ``commit_success.txt`` into it and renames it to
``<step>`` (a single ``rename``, atomic on POSIX file systems; on object stores where orbax
does not rename, the marker file alone marks completion). A checkpoint counts as complete only if
its name is a number *and* it holds the marker, so a crash at any point leaves either the previous
checkpoint or the new one, never a half-written one: leftover temporary directories and marker-less
step directories are ignored by :func:`latest_checkpoint`/:func:`restore_checkpoint` and removed
by the next successful save. Older checkpoints are removed only after the new one is finalised.
Saving is synchronous (returns when the checkpoint is complete). One writer per directory;
deletion is done by process 0 only.

Zero-size leaves (MJX keeps empty arrays for absent contacts, tendons, ...) cannot be written by
orbax; their shape and dtype are recorded and they are rebuilt as empty arrays on restore. Typed
PRNG key arrays (``jax.random.key``) are stored as their raw key data and re-wrapped; the trainer's
``jax.random.PRNGKey`` run key is a plain ``uint32`` array.

Usage in a host loop::

    template = jax.eval_shape(trainer.init, key, traced)
    restored = restore_checkpoint(ckpt_dir, template)
    state, start = (restored[0], restored[1]) if restored else (jax.jit(trainer.init)(key, traced), 0)
    for chunk in range(start, config.num_evals):
        state, metrics = run_chunk(state, traced)
        save_checkpoint(ckpt_dir, state, chunk + 1, extra={"history": history})
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

__all__ = ["CheckpointDamaged", "save_checkpoint", "restore_checkpoint", "latest_checkpoint"]

FORMAT_VERSION = 2  # 2: every leaf carries the sha256 of its bytes; the previous checkpoint is kept
TMP_SUFFIX = ocp.step.TMP_DIR_SUFFIX  # ".orbax-checkpoint-tmp", in the name of an unfinished save
COMMIT_FILE = "commit_success.txt"  # written by orbax just before the final rename


@contextlib.contextmanager
def _quiet():
    """Orbax reports every save, restore and rename at INFO through absl, and a failure (a full disk)
    at ERROR with long tracebacks of its worker threads before it raises. Every failure reaches the
    caller as an exception anyway, so absl's log is silenced while we call orbax: the caller prints
    the one line that matters."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


# ----------------------------------------------------------------------------- directory layout

def _is_complete(path: epath.Path) -> bool:
    return path.name.isdigit() and path.is_dir() and (path / COMMIT_FILE).exists()


def _complete_steps(directory: epath.Path) -> list[int]:
    if not directory.exists():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if _is_complete(p))


def _numbered_entries(directory: epath.Path) -> list[int]:
    """Step numbers of every entry orbax could have made, complete or not (to avoid reusing one)."""
    out = []
    for p in directory.iterdir():
        head = p.name.split(TMP_SUFFIX)[0]
        if head.isdigit():
            out.append(int(head))
    return out


_saved_stderr: list[int] = []  # the real stderr while a failed save's threads are still unwinding


def stderr_fd() -> int:
    """Where a one-line error should go: the real stderr (fd 2 may be silenced for a moment)."""
    return _saved_stderr[-1] if _saved_stderr else 2


@contextlib.contextmanager
def _stderr_silenced(grace: float = 3.0):
    """When orbax's writes fail, its worker threads print tracebacks straight to the process's stderr
    (file descriptor 2) while the save unwinds and for a moment after; the exception it raises says
    all of it once. On success fd 2 is restored at once; after a failure ``grace`` seconds later (a
    command-line script has printed its one line through ``stderr_fd()`` and exited by then)."""
    import threading

    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)

    def restore():
        os.dup2(saved, 2)
        os.close(saved)
        if saved in _saved_stderr:
            _saved_stderr.remove(saved)

    try:
        yield
    except BaseException:
        _saved_stderr.append(saved)
        timer = threading.Timer(grace, restore)
        timer.daemon = True
        timer.start()
        raise
    restore()


def _process_local_arrays() -> bool:
    """In a ``jax.distributed`` run orbax writes arrays only from process 0 (and refuses process-local
    device arrays), so there the arrays of a checkpoint go into ``<step>.arrays.npz`` beside it
    (``results.save_npz``: atomic, with a checksum) and orbax keeps only the metadata."""
    return jax.process_count() > 1


def _arrays_name(step) -> str:
    return f"{step}.arrays.npz"


def _process_local() -> ocp.options.MultiprocessingOptions:
    """Every checkpoint here belongs to one process: in a ``jax.distributed`` run each process saves
    its own shard's grid, so orbax must neither wait for the other processes nor leave the writing
    to process 0."""
    index = jax.process_index()
    if jax.process_count() == 1:
        return ocp.options.MultiprocessingOptions()
    return ocp.options.MultiprocessingOptions(primary_host=index, active_processes={index},
                                              barrier_sync_key_prefix=f"vaco_jax_process_{index}")


@contextlib.contextmanager
def _checkpointer():
    mp = _process_local()
    handler = ocp.CompositeCheckpointHandler(
        composite_options=ocp.CompositeOptions(multiprocessing_options=mp),
        meta=ocp.JsonCheckpointHandler(multiprocessing_options=mp),
        state=ocp.StandardCheckpointHandler(multiprocessing_options=mp))
    with _quiet(), ocp.Checkpointer(handler, multiprocessing_options=mp) as ckptr:
        yield ckptr


def _read_meta(path: epath.Path) -> dict:
    with _checkpointer() as ckptr:
        return ckptr.restore(path, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]


def _newest(directory: epath.Path) -> tuple[epath.Path, dict] | None:
    """The newest complete checkpoint and its metadata (falls back past an unreadable one)."""
    for step in reversed(_complete_steps(directory)):
        path = directory / str(step)
        try:
            meta = _read_meta(path)
        except Exception:  # noqa: BLE001 - a damaged checkpoint is skipped, not fatal
            logging.getLogger(__name__).warning("skipping unreadable checkpoint %s", path)
            continue
        if meta.get("format") == FORMAT_VERSION:
            return path, meta
    return None


# ----------------------------------------------------------------------------- leaves

def _is_key(dtype) -> bool:
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _leaf_record(path, leaf) -> tuple[dict, Any]:
    """(metadata, array to write or None) for one leaf."""
    if not isinstance(leaf, jax.Array):
        leaf = np.asarray(leaf)
    record = {"path": jax.tree_util.keystr(path), "shape": list(leaf.shape), "dtype": str(leaf.dtype)}
    if _is_key(leaf.dtype):
        record["key_impl"] = str(jax.random.key_impl(leaf))
        leaf = jax.random.key_data(leaf)
    return record, (leaf if leaf.size > 0 else None)


def _digest(array) -> str:
    """sha256 of a leaf's bytes (gathered to the host; a sharded grid leaf is hashed whole)."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(jax.device_get(array))).tobytes()).hexdigest()


class CheckpointDamaged(RuntimeError):
    """A checkpoint whose arrays do not match the checksums written with them, or cannot be read."""


def _default_sharding() -> jax.sharding.Sharding:
    return jax.sharding.SingleDeviceSharding(jax.local_devices()[0])


def _key_data_sharding(sharding):
    # Key data has trailing axes the key array lacks; a NamedSharding's spec leaves them replicated.
    if isinstance(sharding, (jax.sharding.NamedSharding, jax.sharding.SingleDeviceSharding)):
        return sharding
    raise ValueError(f"cannot restore a typed PRNG key with sharding {sharding!r}")


# ----------------------------------------------------------------------------- public API

def save_checkpoint(directory: str, state, chunk: int, extra: dict | None = None) -> None:
    """Atomically write ``state`` (any pytree of arrays), ``chunk`` and a JSON ``extra`` dict.

    Returns once the checkpoint is complete on disk; the previous checkpoint in ``directory`` is
    removed afterwards (with any leftover temporary directory of an interrupted save).
    """
    extra = {} if extra is None else extra
    json.dumps(extra)  # fail before writing anything if it is not JSON-able
    directory = epath.Path(os.path.abspath(directory))  # orbax requires absolute paths
    directory.mkdir(parents=True, exist_ok=True)

    records, arrays = [], {}
    for i, (path, leaf) in enumerate(jax.tree_util.tree_flatten_with_path(state)[0]):
        record, array = _leaf_record(path, leaf)
        if array is not None:
            record["sha256"] = _digest(array)
            arrays[f"{i:05d}"] = array
        records.append(record)
    meta = {"format": FORMAT_VERSION, "chunk": int(chunk), "extra": extra, "leaves": records,
            "arrays_file": _process_local_arrays()}

    existing = _numbered_entries(directory)
    complete = _complete_steps(directory)
    step = int(chunk)
    if any(s >= step for s in complete) or step in existing:
        step = max(existing) + 1
    final = directory / str(step)
    tmp = directory / (str(step) + TMP_SUFFIX)
    if tmp.exists():  # a previous attempt at this step crashed
        tmp.rmtree()

    items = {"meta": ocp.args.JsonSave(meta)}
    if meta["arrays_file"]:  # written (atomically, verified) before the checkpoint that points to it
        from vaco_jax.analysis import results
        results.save_npz(str(directory / _arrays_name(step)),
                         **{k: np.asarray(jax.device_get(v)) for k, v in arrays.items()})
    elif arrays:  # orbax refuses an empty item (a state of only zero-size leaves)
        items["state"] = ocp.args.StandardSave(arrays)
    try:
        with _stderr_silenced(), _checkpointer() as ckptr:
            ckptr.save(final, args=ocp.args.Composite(**items))
    except Exception as e:  # noqa: BLE001 - a full disk, a lost mount: one clear OSError, no temporary dir
        if tmp.exists():
            tmp.rmtree()
        message = str(e)
        if "No space left on device" in message:
            raise OSError(errno.ENOSPC, "No space left on device", str(final)) from None
        raise OSError(errno.EIO, f"checkpoint save failed: {message.splitlines()[0][:300]}", str(final)) from None
    if not _is_complete(final):  # the synchronous save must have renamed and marked it
        raise RuntimeError(f"orbax returned before {final} was finalised")

    # keep this one and the newest complete one before it (a fallback; each process owns its checkpoints)
    older = [s for s in complete if s < step]
    keep = {final.name} | ({str(max(older))} if older else set())
    for p in directory.iterdir():
        head = p.name.split(TMP_SUFFIX)[0].split(".arrays.npz")[0]
        if head.isdigit() and head not in keep:
            p.rmtree() if p.is_dir() else p.unlink()




def latest_checkpoint(directory: str) -> int | None:
    """``chunk`` of the newest complete checkpoint in ``directory``, or None."""
    newest = _newest(epath.Path(os.path.abspath(directory)))
    return None if newest is None else int(newest[1]["chunk"])


def restore_checkpoint(directory: str, template) -> tuple[Any, int, dict] | None:
    """Restore the newest complete checkpoint into the structure of ``template``.

    ``template`` is a pytree of the same structure as the saved state, with arrays or
    ``jax.ShapeDtypeStruct`` leaves (e.g. ``jax.eval_shape(jax.vmap(trainer.init), keys, traced)``).
    The result has the template's treedef (same NamedTuple/dataclass types), dtypes and, for
    ``jax.Array``/``ShapeDtypeStruct`` leaves with a sharding, shardings (default device otherwise;
    NumPy template leaves give NumPy arrays). Returns ``(state, chunk, extra)``, or None when the
    directory holds no complete checkpoint. Raises ValueError when the checkpoint does not match
    the template (different leaves, shapes or dtypes).
    """
    directory = epath.Path(os.path.abspath(directory))
    problems = []
    for step in reversed(_complete_steps(directory)):
        path = directory / str(step)
        try:
            meta = _read_meta(path)
        except Exception as e:  # noqa: BLE001 - unreadable metadata: try the previous checkpoint
            problems.append(f"{path}: unreadable metadata ({type(e).__name__})")
            continue
        if meta.get("format") != FORMAT_VERSION:
            problems.append(f"{path}: format {meta.get('format')} (this version reads {FORMAT_VERSION})")
            continue
        try:
            return _restore_from(path, meta, template)
        except CheckpointDamaged as e:
            problems.append(str(e))
            logging.getLogger(__name__).warning("%s; falling back to the previous checkpoint", e)
    if problems:
        raise CheckpointDamaged(f"{directory}: no usable checkpoint ({'; '.join(problems)})")
    return None


def _restore_from(path, meta, template):
    flat, treedef = jax.tree_util.tree_flatten_with_path(template)
    records = meta["leaves"]
    if len(records) != len(flat):
        raise ValueError(f"checkpoint {path} has {len(records)} leaves, the template {len(flat)}")

    targets, plans = {}, []
    for i, ((kpath, leaf), rec) in enumerate(zip(flat, records)):
        name = jax.tree_util.keystr(kpath)
        shape = tuple(np.shape(leaf))
        dtype = leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
        saved = (rec["path"], tuple(rec["shape"]), rec["dtype"])
        if saved != (name, shape, str(dtype)):
            raise ValueError(f"checkpoint {path} leaf {i} is {saved[0]} {saved[1]} {saved[2]}; "
                             f"the template has {name} {shape} {dtype}")
        as_numpy = not isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct))
        sharding = None if as_numpy else getattr(leaf, "sharding", None)
        sharding = sharding or _default_sharding()
        key_impl = rec.get("key_impl")
        if key_impl is not None:
            sharding = _key_data_sharding(sharding)
            data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct(shape, dtype))
            shape, dtype = data.shape, data.dtype
        if int(np.prod(shape)) > 0:
            targets[f"{i:05d}"] = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
        plans.append((shape, dtype, sharding, key_impl, as_numpy))

    arrays = {}
    if targets and meta.get("arrays_file"):
        from vaco_jax.analysis import results
        try:
            saved = results.load_npz(str(epath.Path(path).parent / _arrays_name(epath.Path(path).name)))
            arrays = {k: saved[k] for k in targets}
        except Exception as e:  # noqa: BLE001 - missing, truncated or not matching its checksum
            raise CheckpointDamaged(f"{path}: arrays unreadable ({type(e).__name__})") from None
    elif targets:
        try:
            with _checkpointer() as ckptr:
                args = ocp.args.Composite(state=ocp.args.StandardRestore(targets))
                arrays = ckptr.restore(path, args=args)["state"]
        except Exception as e:  # noqa: BLE001 - truncated or corrupt array files
            raise CheckpointDamaged(f"{path}: arrays unreadable ({type(e).__name__})") from None
        for key, value in arrays.items():
            rec = records[int(key)]
            if _digest(value) != rec.get("sha256"):
                raise CheckpointDamaged(f"{path}: leaf {rec['path']} does not match its checksum")

    leaves = []
    for i, (shape, dtype, sharding, key_impl, as_numpy) in enumerate(plans):
        key = f"{i:05d}"
        if key in arrays:
            value = arrays[key]
            if isinstance(value, np.ndarray) and not as_numpy:
                value = jax.device_put(value, sharding)
        elif as_numpy:
            value = np.zeros(shape, dtype)
        else:
            value = jax.device_put(np.zeros(shape, dtype), sharding)
        if key_impl is not None:
            value = jax.random.wrap_key_data(value, impl=key_impl)
        leaves.append(np.asarray(value) if as_numpy else value)
    return jax.tree_util.tree_unflatten(treedef, leaves), int(meta["chunk"]), meta["extra"]
