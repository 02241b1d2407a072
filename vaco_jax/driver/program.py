"""A group's compiled program, built once, in the algorithm's order::

    traced cells    each cell's run key and traced values (lag depth, knobs), stacked on a grid axis
    trainer         ``make_train(config)``: env, networks, the method; pure functions of one cell, and
                    what its chunk's evaluation reads (``Trainer.evaluation_inputs``) and depends on
                    (``Trainer.evaluation_signature``)
    placement       one call, ``devices.place_group``: how many devices the group's cells are split
                    over and how many cells each holds (``grid_plan``), the keys and traced values
                    padded with copies of the last cell and laid out on them (``grid_place``), ``init``
                    and ``train_chunk`` as grid programs (``grid_program``: vmap per device,
                    ``shard_map`` over devices), and the chunk's evaluation, one program shared by every
                    group of the task that evaluates alike and is laid out alike (``shared_grid_program``)

``group_program(config, cells)`` returns that as a ``GroupProgram``, which also owns the group's
directory: ``runner.run_group`` calls ``resume_group`` (the checkpoint and the files of the chunks done,
else ``start``), then per chunk ``advance``: ``chunk`` (the phases and, when due, the evaluation) and
``record`` (the chunk's curve rows, ``rows``, written with its staleness and checkpoint), then ``finish``
(scores, policies, ``scores.csv``); ``memory.cell_bytes`` traces its ``init`` for the state's size, and
the benchmarks time it. What a chunk or a resume needs (its programs, which parts of the state the
evaluation reads, how a restored state is laid out) it holds, given when it was built. Building it
compiles nothing: each program compiles on its first call (or loads from the compilation cache).

``learner_call`` is the learner's part of one phase alone (align + E x M gradient steps on one fixed
lagged batch), as a timed call: claim 3b's cost table (``studies/study_cost.py``) and benchmarks/method_cost.py.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.analysis import results
from vaco_jax.analysis.results import ResultsError
from vaco_jax.core.config import Config, TracedParams, make_traced, stack_traced
from vaco_jax.core.train import ChunkMetrics, Trainer, make_train
from vaco_jax.driver.devices import _warn, grid_plan, grid_program, place_group


def layout(config: Config, n_cells: int, devices: int | None = None) -> tuple[int, int]:
    """``(devices used, cells per device)`` of a group of ``n_cells`` cells of ``config``, split over
    ``devices`` devices (default: as many as the task's engine allows, ``devices.devices_for``)."""
    plan = grid_plan(config, n_cells, devices)
    return plan.devices, plan.per_device


@dataclasses.dataclass(frozen=True)
class GroupProgram:
    """One group's program on this machine's devices. The grid axis holds ``padded`` cells: the group's
    ``cells`` first, then padding copies of the last cell (dropped by ``unpad``). It also keeps the
    group's directory: ``resume_group`` reads it back, ``record`` writes each chunk's files and
    checkpoint, ``finish`` the scores and trained policies."""

    config: Config
    trainer: Trainer
    cells: int  # the group's own cells
    devices: int  # devices the grid axis is split over
    per_device: int  # cells per device, padding included
    mesh: Any  # the devices' mesh (None: one device)
    keys: jax.Array  # [padded] each cell's run key, placed
    traced: TracedParams  # [padded] each cell's traced values, placed
    init: Callable  # (keys, traced) -> state
    train_chunk: Callable  # (state, traced) -> (state, metrics): the chunk's phases, without its evaluation
    evaluation: Callable  # (*evaluation_inputs(state)) -> eval_return: the chunk's evaluation over the grid
    evaluation_inputs: Callable  # state -> what the evaluation reads (the trainer's Trainer.evaluation_inputs)
    place: Callable  # a tree of the group's own cells -> padded and laid out on the devices (devices.grid_place)
    chunk_env_steps: int  # env steps of one chunk over the whole grid, padding included

    @property
    def padded(self) -> int:
        return self.devices * self.per_device

    def over_grid(self, fn: Callable) -> Callable:
        """``jit`` of ``fn`` (a function of one cell) over this program's grid axis and devices."""
        return jax.jit(grid_program(fn, self.config.grid_batch, self.mesh))

    def start(self):
        """The grid's initial state."""
        return self.init(self.keys, self.traced)

    def chunk(self, state):
        """One chunk: its phases, then its evaluation (when the config evaluates). Returns the new
        state and the chunk's metrics, on the devices."""
        state, metrics = self.train_chunk(state, self.traced)
        if self.config.eval_episodes <= 0:  # not evaluated: the chunk's eval_return stays NaN
            return state, metrics
        return state, metrics._replace(eval_return=self.evaluation(*self.evaluation_inputs(state)))

    def unpad(self, tree):
        """The group's own cells of a grid-shaped tree (no padding copies, no device layout): what a
        checkpoint holds, so a group stopped on one device count resumes on any other."""
        return jax.tree.map(lambda x: x[:self.cells], tree)

    def repad(self, tree):
        """``unpad``'s inverse: re-padded with copies of the last cell (exactly what the padding cells
        are) and laid out on the devices (``place``)."""
        return self.place(tree)

    def state_shape(self):
        """The shapes and dtypes of ``unpad(start())``, traced only (a checkpoint's template)."""
        return jax.eval_shape(lambda k, t: self.unpad(self.init(k, t)), self.keys, self.traced)

    def save(self, directory: str, state, chunks: int) -> None:
        """A checkpoint of ``state`` after ``chunks`` chunks in ``directory`` (``checkpoint.save_checkpoint``):
        the group's own cells (``unpad``)."""
        from vaco_jax.driver import checkpoint

        own = self.unpad(state)
        checkpoint.save_checkpoint(directory, own, chunks)

    def resume(self, directory: str | None):
        """``(state, chunks done)``: from the newest usable checkpoint in ``directory`` (re-padded and laid
        out on the devices, ``repad``), else the grid's initial state (``start``) and 0. A directory whose
        checkpoints are all damaged raises ``checkpoint.CheckpointDamaged``."""
        if directory is not None and os.path.exists(directory):  # (the template traces init: seconds for MJX)
            from vaco_jax.driver import checkpoint

            restored = checkpoint.restore_checkpoint(directory, self.state_shape())
            if restored is not None:
                state, chunks, _ = restored
                if self.mesh is None:  # uncommitted to a device, like a new group's state: the same program
                    state = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), state)  # (no second compile)
                return self.repad(state), chunks
        return self.start(), 0

    def rows(self, metrics, heads: Sequence[dict], chunk: int, seconds: float) -> list[dict]:
        """The ``curves.csv`` row of each of the group's cells after chunk ``chunk``: ``heads[i]`` (cell ``i``'s
        identifying columns), ``cell``, ``chunk``, the chunk's ``chunk_summary`` of host ``metrics`` (its
        non-finite diagnostics emptied and named, ``mark_nonfinite``), ``seconds`` and the grid's env steps
        per second."""
        summary = chunk_summary(metrics)
        diagnostics = [k for k in summary if k not in NOT_DIAGNOSTICS]
        rows = []
        for i, head in enumerate(heads):
            row = {**head, "cell": i, "chunk": chunk}
            row.update({k: np.asarray(v)[i].item() for k, v in summary.items()})
            mark_nonfinite(row, diagnostics)
            row["seconds"] = seconds
            row["grid_steps_per_second"] = self.chunk_env_steps / seconds
            rows.append(row)
        return rows

    def host_cells(self, state):
        """The group's own cells of ``state`` (``unpad``), copied to the host."""
        return jax.device_get(self.unpad(state))

    # --- the group's directory (layout: runner's module doc)

    def resume_group(self, group_dir: str, checkpoint: bool = True) -> tuple[Any, int, History]:
        """``(state, chunks done, their history)`` of the group in ``group_dir``: its checkpoint (``resume``)
        with the files of the chunks it has done, verified against it; without a checkpoint (or with
        ``checkpoint=False``) the grid's initial state, 0 and an empty history. A damaged checkpoint, or
        files that do not match it, restart the group from its first chunk with a one-line warning (the run
        is deterministic, so the numbers are the same)."""
        from vaco_jax.driver.checkpoint import CheckpointDamaged

        restart = f"restarting {group_dir} from its first chunk (every number is recomputed)"
        try:
            state, start = self.resume(os.path.join(group_dir, CHECKPOINT) if checkpoint else None)
        except CheckpointDamaged as e:
            _warn(f"{e}; {restart}")
            return self.start(), 0, History()
        if start == 0:
            return state, 0, History()
        try:
            return state, start, _history_on_disk(group_dir, start, self.cells, self.config.buffer_capacity)
        except ResultsError as e:
            _warn(f"{e}; {restart}")
            return self.start(), 0, History()

    def advance(self, group_dir: str, history: History, state, chunk: int, heads: Sequence[dict],
                checkpoint: bool = True) -> tuple[Any, list[dict], Any]:
        """Chunk ``chunk`` run (``chunk``), its metrics fetched to the host and recorded (``record``, the
        seconds from the chunk's start to its metrics on the host). Returns the new state, the chunk's
        curve rows and its host metrics."""
        t0 = time.perf_counter()
        state, metrics = self.chunk(state)
        metrics = jax.device_get(metrics)
        rows = self.record(group_dir, history, state, chunk, metrics, heads, time.perf_counter() - t0, checkpoint)
        return state, rows, metrics

    def record(self, group_dir: str, history: History, state, chunk: int, metrics, heads: Sequence[dict],
               seconds: float, checkpoint: bool = True) -> list[dict]:
        """After chunk ``chunk`` (its host ``metrics``, run in ``seconds``): its curve rows (``rows``, one per
        cell) and metrics added to ``history``, the curves and staleness written, and with ``checkpoint`` the
        phase returns and a checkpoint of ``state`` (what ``resume_group`` reads back). Returns the rows."""
        rows = self.rows(metrics, heads, chunk, seconds)
        history.rows.extend(rows)
        history.returns.append(np.asarray(metrics.phases.episode_return_sum)[: self.cells])
        history.counts.append(np.asarray(metrics.phases.episode_count)[: self.cells])
        history.staleness.append(np.asarray(metrics.staleness_counts)[: self.cells])
        results.write_table(os.path.join(group_dir, CURVES), history.rows)
        results.save_npz(os.path.join(group_dir, STALENESS), counts=np.stack(history.staleness))
        if checkpoint:
            results.save_npz(os.path.join(group_dir, PHASES), returns=np.stack(history.returns),
                             counts=np.stack(history.counts))
            self.save(os.path.join(group_dir, CHECKPOINT), state, chunk + 1)
        return rows

    def finish(self, group_dir: str, history: History, state, heads: Sequence[dict],
               checkpoint: bool = True) -> list[dict]:
        """The group's score rows (``heads[i]``, cell ``i``'s identifying columns, then its ``cell_scores``
        and ``diagnostic_scores``), written after the trained policies (``policies.save_policies``) as
        ``scores.csv``, the mark of a finished group; the checkpoint is then removed."""
        from vaco_jax.driver.policies import save_policies

        returns = np.concatenate(history.returns, axis=-1) if history.returns else np.zeros((self.cells, 0))
        counts = np.concatenate(history.counts, axis=-1) if history.counts else np.zeros((self.cells, 0))
        score_rows = []
        for i, head in enumerate(heads):
            rows = [r for r in history.rows if r["cell"] == i]
            row = dict(head)
            row.update(cell_scores(rows, returns[i], counts[i], evaluated=self.config.eval_episodes > 0))
            row.update(diagnostic_scores(rows, skip=list(row)))
            score_rows.append(row)
        final = self.host_cells(state)
        save_policies(group_dir, self.config, final.learner, final.normalizer)  # trained policies are kept
        results.write_table(os.path.join(group_dir, SCORES), score_rows)
        if checkpoint:
            shutil.rmtree(os.path.join(group_dir, CHECKPOINT), ignore_errors=True)
        return score_rows


def group_program(config: Config, cells: Sequence, trainer: Trainer | None = None,
                  devices: int | None = None) -> GroupProgram:
    """The program of a group of ``config`` over ``cells`` (each with ``lag_depth``, ``seed`` and
    ``knob_dict()``, e.g. ``grid.Cell``), in the algorithm's order (module doc). ``trainer``: one built
    already (``make_train(config)`` otherwise); ``devices``: how many to split the cells over (default
    ``devices.devices_for``; 1 keeps the group on one device)."""
    keys = jnp.stack([jax.random.PRNGKey(c.seed) for c in cells])
    traced = stack_traced([make_traced(config, c.lag_depth, **c.knob_dict()) for c in cells])
    trainer = trainer or make_train(config)
    # the evaluation is shared by the trainers with its signature (None: an env handed to make_train, not shared)
    evaluation = (trainer.chunk_evaluation, trainer.evaluation_signature(), trainer)
    placed = place_group(config, (keys, traced), (trainer.init, trainer.train_chunk), evaluation, devices)
    plan, (keys, traced), (init, train_chunk) = placed.plan, placed.tree, placed.programs
    return GroupProgram(config=config, trainer=trainer, cells=len(cells), devices=plan.devices,
                        per_device=plan.per_device, mesh=plan.mesh, keys=keys, traced=traced, init=init,
                        train_chunk=train_chunk, evaluation=placed.shared, evaluation_inputs=trainer.evaluation_inputs,
                        place=placed.place, chunk_env_steps=config.env_steps_per_chunk * plan.devices * plan.per_device)


# ----------------------------------------------------------------------------- a group's record and its scores

CHECKPOINT, CURVES, PHASES, STALENESS, SCORES = ("checkpoint", "curves.csv", "phase_returns.npz", "staleness.npz",
                                                 "scores.csv")  # in the group's directory


@dataclasses.dataclass
class History:
    """The chunks a group has run, on the host: every curve row (cell order within each chunk), and per
    chunk the phase return sums and episode counts ``[cells, phases]`` and staleness counts ``[cells, ages]``."""

    rows: list = dataclasses.field(default_factory=list)
    returns: list = dataclasses.field(default_factory=list)
    counts: list = dataclasses.field(default_factory=list)
    staleness: list = dataclasses.field(default_factory=list)


def _history_on_disk(group_dir: str, start: int, n_cells: int, capacity: int) -> History:
    """The curve rows, phase returns and staleness of the ``start`` chunks a checkpoint has done, verified
    against it (a ResultsError naming the file otherwise)."""
    curves_path, phase_path = os.path.join(group_dir, CURVES), os.path.join(group_dir, PHASES)
    rows = [r for r in results.read_table(curves_path) if r["chunk"] < start]
    if len(rows) != start * n_cells or {r["chunk"] for r in rows} != set(range(start)):
        raise ResultsError(f"{curves_path}: {len(rows)} rows for the {start} chunk(s) of {n_cells} cells the "
                           "checkpoint has done")
    saved = results.load_npz(phase_path)
    if saved["returns"].shape[0] < start or saved["counts"].shape[0] < start:
        raise ResultsError(f"{phase_path}: {saved['returns'].shape[0]} chunk(s), the checkpoint has done {start}")
    stale_path = os.path.join(group_dir, STALENESS)
    counts = results.load_npz(stale_path)["counts"]
    if counts.ndim != 3 or counts.shape[0] < start or counts.shape[1:] != (n_cells, capacity):
        raise ResultsError(f"{stale_path}: counts of shape {counts.shape}, the checkpoint has done {start} chunk(s) "
                           f"of {n_cells} cells x {capacity} ages")
    return History(rows, list(saved["returns"][:start]), list(saved["counts"][:start]), list(counts[:start]))


def last_fraction_train_return(phase_returns: np.ndarray, phase_counts: np.ndarray,
                               last_fraction: float = 0.05) -> np.ndarray:
    """Mean return of the training episodes that ended in the last ``last_fraction`` of the phases
    (at least one phase); ``[..., phases]`` sums and counts -> ``[...]``, NaN where none ended."""
    phases = phase_returns.shape[-1]
    window = np.arange(phases) >= phases - max(1, int(math.ceil(last_fraction * phases)))
    ret, cnt = phase_returns[..., window].sum(-1), phase_counts[..., window].sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, ret / np.maximum(cnt, 1), np.nan)


def cell_scores(curve_rows: list[dict], phase_returns: np.ndarray, phase_counts: np.ndarray,
                last_fraction: float = 0.05, evaluated: bool = True) -> dict:
    """Scores of one cell (docs/evaluation.md): final eval return, area under the eval curve, last-5% train return.

    A cell is diverged when its parameters became non-finite (the trainer's flag) or, when it was
    evaluated (``evaluated``), its final evaluation return is not finite.
    """
    evals = np.array([r["eval_return"] for r in curve_rows], float)
    diverged = any(bool(r["diverged"]) for r in curve_rows) or (
        evaluated and not np.isfinite(evals[-1] if len(evals) else np.nan))
    return {
        "final_eval_return": float(evals[-1]) if len(evals) else float("nan"),
        "auc_eval_return": float(np.mean(evals)) if len(evals) else float("nan"),
        "train_return_last5pct": float(last_fraction_train_return(phase_returns, phase_counts, last_fraction)),
        "diverged": bool(diverged),
    }


NONFINITE = "nonfinite"  # curve and score rows: which diagnostics were not finite (their cells are left empty)
UNSTABLE = "unstable_steps"  # steps MuJoCo could not integrate or act on: a count, summed, never averaged
NOT_DIAGNOSTICS = ("cell", "chunk", "env_steps", "eval_return", "train_return", "diverged", "seconds",
                   "grid_steps_per_second", NONFINITE)


CHUNK_TOTALS = ("unstable_steps",)  # diagnostics that count events: a chunk's value is their sum


def chunk_summary(metrics: ChunkMetrics) -> dict:
    """Host-side summary of one chunk (arrays may carry leading grid axes)."""
    ph = metrics.phases
    ret_sum = np.asarray(ph.episode_return_sum).sum(-1)
    count = np.asarray(ph.episode_count).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        train_return = np.where(count > 0, ret_sum / np.maximum(count, 1), np.nan)
    out = {
        "env_steps": np.asarray(ph.env_steps)[..., -1],
        "eval_return": np.asarray(metrics.eval_return),
        "train_return": train_return,
        "diverged": np.asarray(metrics.diverged),
    }
    for name, value in ph.diagnostics.items():  # a count (unstable steps) is summed over the phases
        out[name] = np.asarray(value).sum(-1) if name in CHUNK_TOTALS else np.asarray(value).mean(-1)
    return out


def mark_nonfinite(row: dict, names: Sequence[str]) -> None:
    """A curve row's diagnostics are finite or missing with a reason: each non-finite value among
    ``names`` is emptied and named with what it was in ``row['nonfinite']`` ('tv_learner=inf;...')."""
    bad = []
    for k in names:
        v = row[k]
        if isinstance(v, float) and not math.isfinite(v):
            bad.append(f"{k}={v}")
            row[k] = float("nan")
    row[NONFINITE] = ";".join(bad)


def diagnostic_scores(rows: list[dict], skip: Sequence[str] = ()) -> dict:
    """A cell's diagnostics in its score row: ``mean_<name>`` over its chunks, empty when any chunk's
    value was not finite, with the reason in ``nonfinite`` ('tv_learner: not finite in 21 of 48
    chunks'); the unstable-step count summed over the run (``unstable_steps``)."""
    out, reasons = {}, []
    for k in rows[0]:
        if k in NOT_DIAGNOSTICS or k in skip:
            continue
        vals = np.array([r[k] for r in rows], float)
        bad = int(np.sum(~np.isfinite(vals)))
        if bad:
            reasons.append(f"{k}: not finite in {bad} of {len(rows)} chunks")
        if k == UNSTABLE:
            out[UNSTABLE] = int(round(float(np.nansum(vals))))
        else:
            out[f"mean_{k}"] = float("nan") if bad else float(vals.mean())
    out[NONFINITE] = "; ".join(reasons)
    return out


def learner_call(config: Config, lag_depth: int, traced=None, warm_chunks: int = 1, learner_diagnostics: bool = True):
    """A zero-argument call that runs the learner's part of one phase (align + E x M gradient steps)
    of ``config`` at ``lag_depth`` on one fixed trajectory batch and waits for it (compiled and run
    once here). The batch comes from real lagged actors (``Trainer.collect``) after ``warm_chunks``
    chunks, so snapshot recovery has several versions to gather from. Also returns the whole-phase
    call (``run_chunk``) and the seconds of the first chunk (compilation included).
    ``learner_diagnostics=False``: log π_T is computed only for a method whose pieces read it
    (UpdateShape.learner_diagnostics)."""
    trainer = make_train(config, learner_diagnostics=learner_diagnostics)
    traced = traced if traced is not None else make_traced(config, lag_depth)
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0), traced)
    chunk = jax.jit(trainer.run_chunk)
    t0 = time.perf_counter()
    for _ in range(warm_chunks):
        state, _ = chunk(state, traced)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - t0

    traj = jax.jit(lambda state: trainer.collect(state, traced)[1])(state)

    @jax.jit
    def learner_only(state, traj):
        learner, _ = trainer.learn(state.learner, state.normalizer, state.buffer, traj, state.phase,
                                   jax.random.PRNGKey(3), traced)
        return learner.policy_params

    jax.block_until_ready(learner_only(state, traj))  # compile
    return (lambda: jax.block_until_ready(learner_only(state, traj)),
            lambda: jax.block_until_ready(chunk(state, traced)[0].phase), compile_s)
