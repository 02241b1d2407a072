"""A group's compiled program, built once, in the algorithm's order::

    device layout   how many devices the group's cells are split over, how many cells each holds
                    (padding copies of the last cell fill the last device)
    traced cells    each cell's run key and traced values (lag depth, knobs), stacked on a grid axis
    trainer         ``make_train(config)``: env, networks, the method; pure functions of one cell
    placement       the grid axis laid out on the devices; ``init`` and ``train_chunk`` as grid programs
                    (``devices.grid_program``: vmap per device, ``shard_map`` over devices), and the
                    chunk's evaluation, one program shared by every group of the task that evaluates
                    alike (``core.train.evaluation_program``)

``group_program(config, cells)`` returns that as a ``GroupProgram``. ``runner.run_group`` runs it chunk by
chunk: ``resume`` (from the group's checkpoint, else ``start``), then ``chunk`` (the phases and the
evaluation) and ``save`` (the checkpoint) after each; ``memory.cell_bytes`` traces its ``init`` for the
state's size, and the benchmarks time it. Building it compiles nothing: each program compiles on its
first call (or loads from the compilation cache).

``learner_call`` is the learner's part of one phase alone (align + E x M gradient steps on one fixed
lagged batch), as a timed call: claim 3b's cost table (``studies/study.py``) and benchmarks/method_cost.py.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from vaco_jax.core.config import Config, TracedParams, make_traced, stack_traced
from vaco_jax.core.train import Trainer, evaluated, evaluation_program, make_train
from vaco_jax.driver.devices import devices_for, grid_layout, grid_mesh, grid_program, grid_put


def layout(config: Config, n_cells: int, devices: int | None = None) -> tuple[int, int]:
    """``(devices used, cells per device)`` of a group of ``n_cells`` cells of ``config``, split over
    ``devices`` devices (default: as many as the task's engine allows, ``devices.devices_for``)."""
    return grid_layout(n_cells, config.grid_batch, devices_for(config) if devices is None else devices)


def pad_cells(cells: Sequence, multiple: int) -> list:
    """``cells`` followed by copies of the last one, to a multiple of ``multiple``."""
    return list(cells) + [cells[-1]] * ((-len(cells)) % multiple)


@dataclasses.dataclass(frozen=True)
class GroupProgram:
    """One group's program on this machine's devices. The grid axis holds ``padded`` cells: the group's
    ``cells`` first, then padding copies of the last cell (dropped by ``unpad``)."""

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
    evaluation: Callable  # the chunk's evaluation over the grid (shared by the task's groups)
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
        return state, evaluated(metrics, self.evaluation, state, self.config)

    def unpad(self, tree):
        """The group's own cells of a grid-shaped tree (no padding copies, no device layout): what a
        checkpoint holds, so a group stopped on one device count resumes on any other."""
        return jax.tree.map(lambda x: x[:self.cells], tree)

    def repad(self, tree):
        """``unpad``'s inverse: re-padded with copies of the last cell (exactly what the padding cells
        are) and laid out on the devices."""
        extra = self.padded - self.cells
        if extra:
            tree = jax.tree.map(lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)]), tree)
        return grid_put(tree, self.mesh)

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
                return self.repad(state), chunks
        return self.start(), 0

    def host_cells(self, state):
        """The group's own cells of ``state`` (``unpad``), copied to the host."""
        return jax.device_get(self.unpad(state))


def group_program(config: Config, cells: Sequence, trainer: Trainer | None = None,
                  devices: int | None = None) -> GroupProgram:
    """The program of a group of ``config`` over ``cells`` (each with ``lag_depth``, ``seed`` and
    ``knob_dict()``, e.g. ``grid.Cell``), in the algorithm's order (module doc). ``trainer``: one built
    already (``make_train(config)`` otherwise); ``devices``: how many to split the cells over (default
    ``devices.devices_for``; 1 keeps the group on one device)."""
    used, per_device = layout(config, len(cells), devices)
    mesh = grid_mesh(used)
    padded = pad_cells(cells, used * per_device)
    keys = jnp.stack([jax.random.PRNGKey(c.seed) for c in padded])
    traced = stack_traced([make_traced(config, c.lag_depth, **c.knob_dict()) for c in padded])
    trainer = trainer or make_train(config)
    keys, traced = grid_put((keys, traced), mesh)
    on_grid = lambda fn: grid_program(fn, config.grid_batch, mesh)  # noqa: E731  (a cell's function over the grid)
    where = ("grid", config.grid_batch, None if mesh is None else tuple(d.id for d in mesh.devices.flat))
    return GroupProgram(config=config, trainer=trainer, cells=len(cells), devices=used, per_device=per_device,
                        mesh=mesh, keys=keys, traced=traced, init=jax.jit(on_grid(trainer.init)),
                        train_chunk=jax.jit(on_grid(trainer.train_chunk)),
                        evaluation=evaluation_program(trainer, on_grid(trainer.chunk_evaluation), where),
                        chunk_env_steps=config.env_steps_per_chunk * used * per_device)


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
