"""Device memory of one cell, estimated before anything is compiled (docs/scale.md: "Memory").

A group runs as one program whose memory grows linearly with its cells: the carried state
(parameters, optimiser moments, the K-snapshot policy buffer, the env batch) is held twice (the
chunk's input and output), and one phase's batch of U x N samples lives with what is computed from
it: the trajectory and its aligned copy, and the networks' hidden activations over the whole batch
(forward and backward, policy and value). ``cell_bytes`` measures the state exactly with
``jax.eval_shape`` (tracing only, no XLA compilation) and sizes the rest per sample from the env's
observation and action sizes and the hidden widths. Calibrated against XLA's own
``memory_analysis`` of compiled chunk programs (point_mass and inverted_double_pendulum, 8-256 envs,
1 and 4 cells per program): XLA needed 0.63-1.03x the estimate, so the estimate errs on the safe
side; tests/test_scale.py keeps it within [0.9, 2]x of XLA's figure.

``plan_programs`` turns the estimate into a number of cells per program: a group larger than
``max_cells_per_program`` (or than what fits into the device's memory) is split into parts, each
its own program and subdirectory (``grid.split_group``).
"""

from __future__ import annotations

import os
from typing import Sequence

import jax
import numpy as np

from vaco_jax.driver.devices import devices_for
from vaco_jax.driver.grid import Cell, Group, check_max_cells, split_sizes  # noqa: F401  (split_sizes re-exported)
from vaco_jax.driver.program import group_program, layout
from vaco_jax.errors import ConfigError

# Per sample: live copies of the trajectory record, and bytes per hidden unit (forward + backward,
# float32) of the policy and value networks evaluated over the whole batch (calibrated; see above).
TRAJECTORY_COPIES = 2
ACTIVATION_BYTES = 8
# Fraction of a device's memory a program may plan for (XLA needs room of its own).
USABLE_FRACTION = 0.8


def tree_bytes(tree) -> int:
    return int(sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


def cell_bytes(config, trainer=None) -> dict:
    """Estimated bytes of one cell of ``config``'s program: ``state``, ``trajectory``, ``evaluation``,
    ``total``. Nothing is compiled: the state's shapes come from tracing the ``init`` of a one-cell
    group's program (``program.group_program``)."""
    program = group_program(config, [Cell(config.effective_lag_depth(), 0)], trainer, devices=1)
    state = program.state_shape()
    state_b = tree_bytes(state)
    per_env = tree_bytes(state.env_state) / config.num_envs
    d, a = program.trainer.env.observation_size, program.trainer.env.action_size
    samples = config.unroll_length * config.num_envs
    # Transition fields: obs, next_obs [D]; action, mean, log_std [A]; 7 scalars (float32 / int32).
    traj_b = samples * (2 * d + 3 * a + 7) * 4
    hidden = sum(config.policy_hidden) + sum(config.value_hidden)
    act_b = samples * hidden * ACTIVATION_BYTES
    eval_b = 3 * config.eval_episodes * per_env  # carry, stepped state, frozen select
    total = 2 * state_b + TRAJECTORY_COPIES * traj_b + act_b + eval_b
    return {"state": state_b, "trajectory": traj_b, "activations": act_b, "evaluation": int(eval_b),
            "total": int(total)}


def device_bytes() -> tuple[int | None, str]:
    """Memory of one local device and where the number came from (an accelerator's allocator limit,
    or, on the CPU, the machine's physical memory shared by its devices)."""
    dev = jax.local_devices()[0]
    try:
        stats = dev.memory_stats() or {}
    except Exception:  # some backends raise instead of returning None
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"{dev.device_kind} allocator limit"
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return int(phys / max(1, len(jax.local_devices()))), "host memory / local devices"
    except (ValueError, OSError, AttributeError):
        return None, "unknown"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def cells_that_fit(per_cell: int, devices: int, device_memory: int | None) -> int | None:
    """How many cells one program can hold on ``devices`` devices (None: no limit known)."""
    if device_memory is None:
        return None
    per_device = max(1, int(USABLE_FRACTION * device_memory // max(per_cell, 1)))
    return per_device * devices


_CELL_BYTES: dict = {}


def memory_plan(groups: Sequence[Group], max_cells: int | None = None, show: bool = True) -> dict:
    """Estimate each group's device memory before anything compiles (``cell_bytes``; tracing
    only), print it, and check it fits: a group whose cells, spread over this process's devices,
    would not fit in a device's memory is an error that names the ``--max-cells-per-program`` that
    fits. Returns ``{subdir: bytes per cell}``."""
    check_max_cells(max_cells)
    device_memory, source = device_bytes()
    out, lines = {}, []
    for g in groups:
        c = g.config
        devices = devices_for(c)
        key = (c.env, c.backend, c.episode_length, c.num_envs, c.unroll_length, c.eval_episodes, c.buffer_capacity,
               c.network, tuple(c.policy_hidden), tuple(c.value_hidden))
        if key not in _CELL_BYTES:
            _CELL_BYTES[key] = cell_bytes(c)["total"]
        per_cell = _CELL_BYTES[key]
        out[g.subdir] = per_cell
        n = len(g.cells) if max_cells is None else min(len(g.cells), max_cells)
        per_device = per_cell * layout(c, n, devices)[1]
        fit = cells_that_fit(per_cell, devices, device_memory)
        lines.append(f"  {g.subdir:<44} ~{fmt_bytes(per_cell)} per cell; {n} cells per program -> "
                     f"~{fmt_bytes(per_device)} per device")
        if fit is not None and n > fit:
            raise ConfigError(f"{g.subdir}: {n} cells per program need ~{fmt_bytes(per_device)} per device, "
                              f"more than {USABLE_FRACTION:.0%} of {fmt_bytes(device_memory)} "
                              f"({source}); allowed: --max-cells-per-program {fit} or less")
    if show:
        dm = "unknown" if device_memory is None else f"{fmt_bytes(device_memory)} ({source})"
        print(f"memory estimate before compiling ({len(jax.local_devices())} device(s), device memory {dm}):", *lines,
              sep="\n")
    return out
