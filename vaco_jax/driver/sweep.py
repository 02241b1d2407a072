"""A grid of cells (lag depths x seeds x traced hyper-parameters) as one compiled, vmapped program.

One *group* = one static ``Config`` (task, method, shapes) and a list of cells that differ only in
traced values and seed. The group runs as ``jit(vmap(train_chunk))``, its grid axis split over the
local devices by ``shard_map`` (each device runs its own block of cells; with ``Config.grid_batch``
as consecutive vmapped batches: ``grid_program``, ``grid_layout``), each chunk followed by the
evaluation, a program of its own that every group of the same task shares
(``train.evaluation_program``); between chunks the host writes
results and a checkpoint, so an interrupted sweep resumes from its last chunk. Layout of a group directory::

    GROUP/cells.json      the cells (lag_depth, seed, learning_rate, clip_epsilon, tv_budget)
    GROUP/curves.csv      one row per cell x chunk: env steps, eval/train return, diagnostics
    GROUP/staleness.npz   ``counts`` [chunks, cells, buffer_capacity]: each chunk's samples by realised age
    GROUP/scores.csv      one row per cell: final eval, AUC, last-5% train return, diverged, mean diagnostics
    GROUP/checkpoint/     orbax checkpoint of the whole grid carry (removed when the group is done)

``scores.csv`` is written last: its presence marks the group finished. Every file is written to a
temporary name and renamed, so a crash leaves either the old or the new file, never half of one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import json
import math
import os
import shutil
import time
from typing import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.core.config import STATIC_FIELDS, TRACED_FIELDS, Config, _ages_depth, make_traced, stack_traced
from vaco_jax.analysis import results
from vaco_jax.core.knobs import ConfigError, check_knob
from vaco_jax.analysis.results import ResultsError
from vaco_jax.core.train import Trainer, chunk_summary, evaluated, evaluation_program, make_train

@dataclasses.dataclass(frozen=True)
class Cell:
    """One run of a grid: lag depth, seed, and any traced knobs it overrides (``knobs.KNOBS`` names
    or a piece's own numeric fields), as sorted ``(name, value)`` pairs."""

    lag_depth: int
    seed: int
    knobs: tuple = ()

    def knob_dict(self) -> dict:
        return dict(self.knobs)

    def row(self) -> dict:
        """The cell's values as result-row columns."""
        return {"lag_depth": self.lag_depth, "seed": self.seed, **self.knob_dict()}

    def with_knobs(self, **values) -> "Cell":
        merged = {**self.knob_dict(), **values}
        lag_depth = merged.pop("lag_depth", self.lag_depth)
        return Cell(int(lag_depth), self.seed, tuple(sorted(merged.items())))


def _values(v) -> list:
    return list(v) if isinstance(v, list) else [v]


def grid(lag_depths: Iterable[int], seeds: Iterable[int], **traced) -> list[Cell]:
    """Cartesian product of lag depths x seeds x every list-valued traced knob (a non-list is one value)."""
    cells = [Cell(lag_depth=int(b), seed=int(s)) for b in lag_depths for s in seeds]
    for name, values in traced.items():
        cells = [c.with_knobs(**{name: v}) for c in cells for v in _values(values)]
    return cells


# ----------------------------------------------------------------------------- --sweep: any field

@dataclasses.dataclass(frozen=True)
class Group:
    """One compiled program: a static Config and the cells it runs as one vmapped grid."""

    config: Config
    cells: tuple
    subdir: str
    label: str = ""
    tags: tuple = ()  # (name, value) columns written into every row (static values that vary)


def _field_types() -> dict:
    import typing

    hints = typing.get_type_hints(Config)
    return {f.name: hints[f.name] for f in dataclasses.fields(Config)}


def _convert(name: str, token, hint):
    import types
    import typing

    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) else hint
    if isinstance(token, str):
        token = token.strip()
        if token == "None":
            return None
        if base is bool:
            if token not in ("True", "False", "true", "false"):
                raise ConfigError(f"--sweep {name}: {token!r} is not True or False")
            return token in ("True", "true")
        if base is int:
            try:
                return int(token)
            except ValueError:
                raise ConfigError(f"--sweep {name}: {token!r} is not an integer") from None
        if base is float:
            try:
                return float(token)
            except ValueError:
                raise ConfigError(f"--sweep {name}: {token!r} is not a number") from None
        return token
    if base is float and isinstance(token, int) and not isinstance(token, bool):
        return float(token)
    return token


def parse_sweep(items: Sequence[str]) -> dict[str, list]:
    """``["gamma=0.99,0.995", "num_epochs=2,4"]`` -> ``{"gamma": [0.99, 0.995], "num_epochs": [2, 4]}``.

    The name is any ``Config`` field (or a numeric field of a user's own piece); values are separated by
    commas; a tuple-valued field takes Python tuples, e.g. ``policy_hidden=(64,64),(128,128)``.
    Names, types, duplicates and emptiness are checked here, values' ranges by the Config.
    """
    import ast
    import difflib

    types = _field_types()
    axes: dict[str, list] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--sweep {item!r}: expected NAME=V1,V2,... (e.g. gamma=0.99,0.995)")
        name, rhs = item.split("=", 1)
        name = name.strip().replace("-", "_")
        if name in ("seed", "seeds"):
            raise ConfigError("--sweep seed: use the script's --seeds")
        if name in axes:
            raise ConfigError(f"--sweep {name} is given twice")
        hint = types.get(name, float)
        if name not in types and name not in _piece_knob_names():
            close = difflib.get_close_matches(name, list(types) + sorted(_piece_knob_names()), n=3)
            raise ConfigError(f"--sweep {name}: not a setting" + (f" (did you mean {', '.join(close)}?)" if close
                                                                 else "; see python -m vaco_jax.core.train --help"))
        if not rhs.strip():
            raise ConfigError(f"--sweep {name}: no values given")
        try:
            parsed = ast.literal_eval(f"[{rhs}]")
        except (ValueError, SyntaxError):
            parsed = rhs.split(",")
        values = [_convert(name, v, hint) for v in parsed]
        if name == "age_weights":
            values = [tuple(v) if isinstance(v, (list, tuple)) else (v,) for v in values]
        if len(values) == 0:
            raise ConfigError(f"--sweep {name}: no values given")
        if len({repr(v) for v in values}) != len(values):
            raise ConfigError(f"--sweep {name}: duplicate values in {values}")
        if name in TRACED_FIELDS or name not in types:
            for v in values:
                check_knob(name, v)
        axes[name] = values
    return axes


def _piece_knob_names() -> set:
    from vaco_jax.core.pieces import PIECE_KINDS

    return {f.name for _, _, reg in PIECE_KINDS.values() for cls in reg.values() for f in dataclasses.fields(cls)}


def reads_knob(config: Config, name: str) -> bool:
    """Whether a run of ``config`` reads the traced knob ``name``."""
    from vaco_jax.core.knobs import COMMON_KNOBS, LAG_KNOBS
    from vaco_jax.core.methods import method_knobs

    if name in COMMON_KNOBS:
        return True
    if name in LAG_KNOBS:
        return name == "lag_depth" or config.lag_model == "ages"
    return name in method_knobs(config.build_method())


def _fmt(v) -> str:
    if isinstance(v, tuple):
        return "-".join(_fmt(x) for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def apply_sweep(groups: Sequence[Group], axes: dict[str, list], fixed: dict | None = None) -> list[Group]:
    """Expand groups by sweep axes: a static axis gives one group per value (its own subdirectory and
    a tag column); a traced axis multiplies each group's cells (one program). A traced axis applies to
    the groups whose method reads it, and is an error when no group does. Every config and cell is
    built here, so a bad value fails before anything is written or compiled."""
    if not groups:
        raise ConfigError("nothing to run: no group (empty --methods, --tasks, --variants or --epochs?)")
    fixed = dict(fixed or {})
    both = sorted(set(fixed) & set(axes))
    if both:
        raise ConfigError(f"{', '.join(both)}: given as a flag and as a --sweep axis; give one")
    if fixed:  # settings given once on the command line: every group, no new directory level
        fixed_static = {k: v for k, v in fixed.items() if k in STATIC_FIELDS}
        fixed_traced = {k: v for k, v in fixed.items() if k not in STATIC_FIELDS}
        for k in fixed_static:
            if len({repr(getattr(g.config, k)) for g in groups}) > 1:
                raise ConfigError(f"{k}: this study sets it per group; it cannot be fixed for all of them")
        configs = [g.config.replace(**fixed_static) if fixed_static else g.config for g in groups]
        configs = with_knobs(configs, fixed_traced)
        groups = [dataclasses.replace(g, config=c) for g, c in zip(groups, configs)]
    static = {k: v for k, v in axes.items() if k in STATIC_FIELDS}
    traced = {k: v for k, v in axes.items() if k not in STATIC_FIELDS}
    used: set = set()
    out = []
    for g in groups:
        check_cells(g.cells, g.subdir)
        combos = [dict(zip(static, vals)) for vals in itertools.product(*static.values())] if static else [{}]
        for combo in combos:
            config = g.config.replace(**combo) if combo else g.config
            read = {k: v for k, v in traced.items() if reads_knob(config, k)}
            used.update(read)
            cells = list(g.cells)
            for name, values in read.items():
                cells = [c.with_knobs(**{name: v}) for c in cells for v in values]
            if "age_weights" in read:  # the nominal lag depth follows the weights
                cells = [dataclasses.replace(c, lag_depth=_ages_depth(c.knob_dict()["age_weights"])) for c in cells]
            for c in cells:  # every cell validated before anything runs
                make_traced(config, c.lag_depth, **c.knob_dict())
            subdir = g.subdir if not combo else os.path.join(g.subdir, "_".join(f"{k}={_fmt(v)}"
                                                                                 for k, v in combo.items()))
            label = g.label + ("" if not combo else " " + " ".join(f"{k}={_fmt(v)}" for k, v in combo.items()))
            out.append(Group(config, tuple(cells), subdir, label, tuple(g.tags) + tuple(combo.items())))
    unused = set(traced) - used
    if unused:
        raise ConfigError(f"--sweep {', '.join(sorted(unused))}: no group's method reads it "
                          f"(methods: {', '.join(sorted({g.config.method for g in groups}))})")
    return out


def preset_text(preset: str, spec: dict) -> str:
    """What a study preset (after the flags that override it) sets, printed before the plan."""
    def shown(v):
        if v is None:
            return "the task's default"
        return list(v) if isinstance(v, (list, tuple)) else _fmt(v)

    return f"preset {preset!r} sets: " + ", ".join(f"{k}={shown(v)}" for k, v in spec.items() if k != "out")


def plan_text(groups: Sequence[Group], first: int = 0) -> str:
    """The plan printed before anything compiles: groups (= compiled programs) x cells, numbered from
    ``first`` (a shard's cells keep their numbers in the whole plan)."""
    total = sum(len(g.cells) for g in groups)
    lines = [f"plan: {len(groups)} group(s), one compiled program each; {total} cell(s) in all "
             "(cell numbers as --cell takes them)"]
    for g in groups:
        axes = {}
        for c in g.cells:
            for k, v in c.row().items():
                axes.setdefault(k, [])
                if v not in axes[k]:
                    axes[k].append(v)
        desc = ", ".join(f"{k}={{{', '.join(_fmt(x) for x in v)}}}" for k, v in axes.items())
        numbers = f"#{first}" if len(g.cells) == 1 else f"#{first}-{first + len(g.cells) - 1}"
        lines.append(f"  {g.subdir:<44} {len(g.cells):>4} cells {numbers:>12}  {desc}")
        first += len(g.cells)
    return "\n".join(lines)


def with_knobs(configs: Sequence[Config], knobs: dict) -> list[Config]:
    """Give each config the study-level knobs its method reads (None = not given). A knob that is
    given and read by none of them is an error, so a flag is never silently ignored."""
    knobs = {k: v for k, v in knobs.items() if v is not None}
    used: set = set()
    out = []
    for config in configs:
        read = {k: v for k, v in knobs.items() if reads_knob(config, k)}
        used.update(read)
        out.append(config.replace(**read) if read else config)
    unused = set(knobs) - used
    if unused:
        raise ConfigError(f"{', '.join(sorted(unused))}: not read by any method of this study "
                          f"({', '.join(sorted({c.method for c in configs}))})")
    return out


CPU_DEVICES_FLAG = "--xla_force_host_platform_device_count"
ACCELERATOR_PLUGINS = ("jax-cuda12-plugin", "jax-cuda13-plugin", "libtpu", "jax-rocm-plugin")


def use_cpu_cores() -> int | None:
    """On a CPU, one JAX device per core this process may use, so a group's cells run on every core
    at once (``grid_program`` splits them over the devices). One XLA program of these small env
    steps keeps about one core busy, whatever its batch; docs/scale.md, "Every core of a CPU".

    Sets ``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>`` before JAX starts its
    backends, unless XLA_FLAGS already sets that count (``=1`` keeps one device), JAX has already
    started, there is one core, or JAX_PLATFORMS or an installed accelerator plugin (CUDA, ROCm,
    TPU) says the run is not on the CPU. Returns the count it set, or None."""
    import importlib.metadata

    flags = os.environ.get("XLA_FLAGS", "")
    if CPU_DEVICES_FLAG in flags:
        return None
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms and platforms != "cpu":
        return None
    if not platforms:
        for name in ACCELERATOR_PLUGINS:
            try:
                importlib.metadata.version(name)
                return None
            except importlib.metadata.PackageNotFoundError:
                pass
    try:
        from jax._src import xla_bridge
        if xla_bridge.backends_are_initialized():
            return None
    except (ImportError, AttributeError):
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    if cores <= 1:
        return None
    os.environ["XLA_FLAGS"] = f"{flags} {CPU_DEVICES_FLAG}={cores}".strip()
    return cores


CACHE_ENV = "VACO_JAX_XLA_CACHE"  # a directory, or "off"


def _machine_tag() -> str:
    """A short name for this machine's kind of processor: compiled CPU code is built for the CPU it
    was compiled on, so a cache in a home directory shared by different nodes keeps one folder per kind."""
    import hashlib
    import platform

    text = platform.machine() + platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith(("model name", "flags", "Features", "CPU part"))]
        text += "".join(sorted(set(lines)))
    except OSError:
        pass
    return f"{platform.machine() or 'cpu'}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def compilation_cache_dir() -> str | None:
    """The directory of compiled programs the scripts keep (None: off): ``$VACO_JAX_XLA_CACHE`` ("off"
    turns it off), else ``$XDG_CACHE_HOME/vaco_jax/xla/<machine kind>`` (``~/.cache`` by default)."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "0", "off", "no", "none", "false") else os.path.expanduser(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vaco_jax", "xla", _machine_tag())


def use_compilation_cache() -> str | None:
    """Keep compiled programs on disk (JAX's persistent compilation cache), so that a resumed or
    re-run sweep, another shard on the same machine, a ``--cell`` re-run and every group whose
    program is the same as an earlier one's (e.g. ``init`` for every method of a task) load them
    instead of compiling again: a program is keyed by its XLA text, the compile options, the
    jax/jaxlib versions and the devices, so a hit is the executable the compiler would build.
    A cache the user set (``JAX_COMPILATION_CACHE_DIR``) is left as it is. Returns the directory
    in use, or None (off, or not writable: then a one-line warning). docs/scale.md, "Compile time"."""
    own = os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir
    if own:
        return own
    path = compilation_cache_dir()
    if path is None:
        return None
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is not writable")
    except OSError as e:
        _warn(f"compiled programs are not kept ({e}); set {CACHE_ENV} to a writable directory, or to 'off'")
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    return path


def cli_main(main, args) -> None:
    """Run a script's ``main``: a bad setting is one line on stderr and exit code 2, a damaged result
    file or checkpoint one line and exit code 3, an OS error (a full disk) one line and exit code 1
    (the environment variable VACO_JAX_DEBUG=1 shows the traceback instead). An integer returned by
    ``main`` is the exit code."""
    import sys

    from vaco_jax.driver.checkpoint import CheckpointDamaged

    debug = os.environ.get("VACO_JAX_DEBUG") == "1"
    try:
        use_cpu_cores()  # before anything touches a device
        use_compilation_cache()
        if getattr(args, "distributed", False):
            init_distributed()
        code = main(args)
    except (ConfigError, ValueError) as e:
        if debug:
            raise
        _fail(f"error: {e}", results.EXIT_BAD_INPUT)
    except (ResultsError, CheckpointDamaged) as e:
        if debug:
            raise
        _fail(f"error: {e}", results.EXIT_DAMAGED)
    except OSError as e:  # a full disk, a path that is a file, no permission: the one line that matters
        if debug:
            raise
        _fail(f"error: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""), 1)
    except KeyboardInterrupt:
        if debug:
            raise
        # every file is written atomically and a group resumes from its last checkpoint
        _fail("interrupted: what finished is kept; run the same command again to resume", 130)
    if isinstance(code, int) and not isinstance(code, bool):
        sys.exit(code)


def _fail(line: str, code: int) -> None:
    """Print one line and leave at once: worker threads of orbax/tensorstore that are still unwinding
    would otherwise print tracebacks during interpreter shutdown."""
    import sys

    from vaco_jax.driver.checkpoint import stderr_fd

    sys.stdout.flush()
    sys.stderr.flush()
    os.write(stderr_fd(), (line + "\n").encode())
    os._exit(code)


def check_max_chunks(max_chunks) -> None:
    if max_chunks is not None and (not isinstance(max_chunks, int) or isinstance(max_chunks, bool) or max_chunks < 1):
        raise ConfigError(f"max_chunks={max_chunks!r} must be a positive integer")


def run_groups(run_dir: str, groups: Sequence[Group], progress: bool = True, max_chunks: int | None = None,
               tensorboard: bool = False, max_cells_per_program: int | None = None) -> bool:
    """Run every group; with ``max_chunks`` each stops after that many chunks (a time-limited job:
    rerun the same command to continue). With ``tensorboard`` each group also writes live metrics to
    ``RUN/tensorboard/GROUP/`` (vaco_jax/driver/live.py). With ``max_cells_per_program`` a group with more
    cells runs as parts ``GROUP/part-J-of-M/``, one program each. Returns whether every group finished."""
    check_max_chunks(max_chunks)
    check_max_cells(max_cells_per_program)
    finished = True
    for whole in groups:
        parts = split_group(whole, max_cells_per_program)
        check_layout(run_dir, whole, len(parts))
        for g in parts:
            rows = run_group(g.config, list(g.cells), os.path.join(run_dir, g.subdir), progress=progress,
                             label=g.label or g.subdir, tags=dict(g.tags), max_chunks=max_chunks,
                             tensorboard_dir=os.path.join(run_dir, "tensorboard", g.subdir) if tensorboard else None)
            finished = finished and rows is not None
    if not finished:
        print(f"stopped after --max-chunks {max_chunks}; rerun the same command to continue")
    return finished


# ----------------------------------------------------------------------------- memory: cells per program

PART_RE = r"part-(\d+)-of-(\d+)"


def check_max_cells(value) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError(f"max_cells_per_program={value!r} must be a positive integer (or not given: one "
                          "program per group)")


def split_group(group: Group, max_cells: int | None) -> list[Group]:
    """A group with more than ``max_cells`` cells as parts ``GROUP/part-J-of-M/`` of nearly equal size
    (J = 0..M-1), each its own program; otherwise the group itself."""
    from vaco_jax.driver.memory import split_sizes

    if max_cells is None or len(group.cells) <= max_cells:
        return [group]
    sizes = split_sizes(len(group.cells), max_cells)
    out, start = [], 0
    for j, size in enumerate(sizes):
        out.append(dataclasses.replace(group, cells=tuple(group.cells[start:start + size]),
                                       subdir=os.path.join(group.subdir, f"part-{j}-of-{len(sizes)}"),
                                       label=f"{group.label or group.subdir} [part {j}/{len(sizes)}]"))
        start += size
    return out


def _parts_on_disk(group_dir: str) -> set:
    import re

    if not os.path.isdir(group_dir):
        return set()
    return {int(m.group(2)) for f in os.listdir(group_dir) if (m := re.fullmatch(PART_RE, f))}


def check_layout(run_dir: str, group: Group, parts: int) -> None:
    """A group already started as one program cannot continue as parts, nor parts of another split
    (the cells would run twice)."""
    group_dir = os.path.join(run_dir, group.subdir)
    on_disk = _parts_on_disk(group_dir)
    whole = os.path.exists(os.path.join(group_dir, "cells.json"))
    if parts > 1 and whole:
        raise ConfigError(f"max_cells_per_program: {group_dir} was started as one program; continue it without "
                          "--max-cells-per-program, or remove that directory to run it in parts")
    if on_disk and on_disk != {parts}:
        was = ", ".join(str(m) for m in sorted(on_disk))
        raise ConfigError(f"max_cells_per_program: {group_dir} holds a split into {was} part(s), this command "
                          f"gives {parts}; use the --max-cells-per-program it was started with")


def group_finished(group_dir: str) -> bool:
    """A group is finished when its ``scores.csv`` exists, or every part of its split has one."""
    if os.path.exists(os.path.join(group_dir, "scores.csv")):
        return True
    counts = _parts_on_disk(group_dir)
    if len(counts) != 1:
        return False
    m = counts.pop()
    return all(os.path.exists(os.path.join(group_dir, f"part-{j}-of-{m}", "scores.csv")) for j in range(m))


_CELL_BYTES: dict = {}


def memory_plan(groups: Sequence[Group], max_cells: int | None = None, show: bool = True) -> dict:
    """Estimate each group's device memory before anything compiles (``memory.cell_bytes``; tracing
    only), print it, and check it fits: a group whose cells, spread over this process's devices,
    would not fit in a device's memory is an error that names the ``--max-cells-per-program`` that
    fits. Returns ``{subdir: bytes per cell}``."""
    from vaco_jax.driver import memory
    check_max_cells(max_cells)
    device_memory, source = memory.device_bytes()
    out, lines = {}, []
    for g in groups:
        c = g.config
        devices = devices_for(c)
        key = (c.env, c.backend, c.episode_length, c.num_envs, c.unroll_length, c.eval_episodes, c.buffer_capacity,
               c.network, tuple(c.policy_hidden), tuple(c.value_hidden))
        if key not in _CELL_BYTES:
            _CELL_BYTES[key] = memory.cell_bytes(c)["total"]
        per_cell = _CELL_BYTES[key]
        out[g.subdir] = per_cell
        n = len(g.cells) if max_cells is None else min(len(g.cells), max_cells)
        per_device = per_cell * grid_layout(n, c.grid_batch, devices)[1]
        fit = memory.cells_that_fit(per_cell, devices, device_memory)
        lines.append(f"  {g.subdir:<44} ~{memory.fmt_bytes(per_cell)} per cell; {n} cells per program -> "
                     f"~{memory.fmt_bytes(per_device)} per device")
        if fit is not None and n > fit:
            raise ConfigError(f"{g.subdir}: {n} cells per program need ~{memory.fmt_bytes(per_device)} per device, "
                              f"more than {memory.USABLE_FRACTION:.0%} of {memory.fmt_bytes(device_memory)} "
                              f"({source}); allowed: --max-cells-per-program {fit} or less")
    if show:
        dm = "unknown" if device_memory is None else f"{memory.fmt_bytes(device_memory)} ({source})"
        print(f"memory estimate before compiling ({len(jax.local_devices())} device(s), device memory {dm}):", *lines,
              sep="\n")
    return out


# The file layer lives in results.py (no jax); these names stay importable from here.
atomic_write_text = results.atomic_write_text
rows_to_csv = results.rows_to_csv
read_csv = results.read_table
load_scores = results.load_scores
load_curves = results.load_curves


def _warn(message: str) -> None:
    import sys

    print(f"warning: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- sharding

def grid_layout(n_cells: int, batch: int | None = None, devices: int | None = None) -> tuple[int, int]:
    """``(d, k)``: a group of ``n_cells`` runs on ``d`` devices with ``k`` cells each (``d * k - n_cells``
    padding copies). ``k`` is as small as the ``devices`` (default: this process's local devices)
    allow, ``ceil(n / devices)`` rounded up to a multiple of ``batch`` (``grid_batch``), and ``d`` as
    small as that ``k`` allows: 12 cells on 8 devices run as 6 devices x 2 cells (no padding, the
    same time as 8 x 2), 60 cells as 8 x 8 (4 copies)."""
    if devices is None:
        devices = len(jax.local_devices())
    k = -(-n_cells // devices)
    if batch:
        k = -(-k // batch) * batch
    return -(-n_cells // k), k


def devices_for(config: Config) -> int:
    """How many of this process's devices a group of ``config`` is split over.

    Every device for an in-program engine (Brax, MJX, the pure-JAX tasks). One for MuJoCo's C engine:
    its step is a host callback that runs on a thread of XLA's CPU pool (one per core), and JAX hands
    the callback its arguments through that same pool; with a group split over as many devices as
    cores, every pool thread can sit in a callback waiting for a hand-over no free thread will do, and
    the run hangs (seen on 2 cores with 30 Hopper-v4 cells). The engine spreads each step over the
    cores itself (``cengine.set_threads``), so one device loses little (docs/scale.md)."""
    if config.physics_backend == "mujoco":
        return 1
    return len(jax.local_devices())


def grid_mesh(devices: int):
    """A one-axis mesh ``grid`` over the first ``devices`` local devices (None for one device)."""
    if devices <= 1:
        return None
    return jax.sharding.Mesh(np.array(jax.local_devices()[:devices]), ("grid",))


def grid_sharding(mesh):
    """The grid axis (leading) of every array split over ``mesh``'s devices (None: one device)."""
    if mesh is None:
        return None
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("grid"))


def grid_put(tree, mesh):
    """``tree`` with the grid axis of every leaf split over ``mesh``'s devices (unchanged for None).

    A leaf of size zero (MJX keeps empty arrays for absent contacts, and a checkpoint rebuilds them)
    is placed whole on every device instead: that is how ``grid_program``'s ``shard_map`` returns
    such outputs, and a program compiles once per layout of its inputs, so a restored state laid out
    otherwise would compile the group's chunk again (and miss the compilation cache)."""
    if mesh is None:
        return tree
    split = grid_sharding(mesh)
    whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.device_put(tree, jax.tree.map(lambda x: whole if np.size(x) == 0 else split, tree))


def grid_program(fn: Callable, batch: int | None = None, mesh=None) -> Callable:
    """``fn`` of one cell over the grid axis of every argument: ``vmap(fn)``, or with ``batch`` a
    ``lax.map`` over consecutive batches of ``batch`` cells, each batch vmapped (the number of cells
    must be a multiple of ``batch``). The same numbers either way, up to floating-point rounding.

    With a ``mesh`` (``grid_mesh``) the grid axis is split over its devices by ``shard_map``: each
    device runs that program on its own block of cells, and no value crosses devices. (Splitting
    the axis of one ``vmap`` program with shardings instead lets the SPMD partitioner couple the
    devices: every ``while_loop`` whose condition depends on the batch, such as MJX's constraint
    solver, then reduces that condition over all devices at every iteration, and every device runs
    as many iterations as the slowest env anywhere; on a 2-core CPU split into 2 devices that ran
    at ~0.8x the speed of ``shard_map``, docs/scale.md.)"""
    if batch is None:
        body = jax.vmap(fn)
    else:
        def body(*args):
            n = jax.tree.leaves(args)[0].shape[0]
            if n % batch:
                raise ValueError(f"{n} cells are not a multiple of grid_batch={batch}")
            if n == batch:
                return jax.vmap(fn)(*args)
            split = lambda x: x.reshape((n // batch, batch) + x.shape[1:])  # noqa: E731 (explicit shape: 0-size leaves too)
            out = jax.lax.map(lambda a: jax.vmap(fn)(*a), jax.tree.map(split, args))
            return jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), out)
    if mesh is None:
        return body
    spec = jax.sharding.PartitionSpec("grid")
    return jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)


def _pad(cells: list[Cell], multiple: int) -> list[Cell]:
    extra = (-len(cells)) % multiple
    return cells + [cells[-1]] * extra


# ----------------------------------------------------------------------------- scores

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


# ----------------------------------------------------------------------------- one group

def run_group(config: Config, cells: list[Cell], group_dir: str, progress: bool = True,
              checkpoint: bool = True, trainer: Trainer | None = None, label: str = "",
              tags: dict | None = None, shard: bool = True, max_chunks: int | None = None,
              tensorboard_dir: str | None = None) -> list[dict] | None:
    """Run (or resume, or skip when finished) one group; returns its score rows.

    Resuming verifies every file against the checkpoint (row counts per chunk, checksums); a damaged
    checkpoint falls back to the previous one, and when no checkpoint or no consistent set of files
    is left the group restarts from its first chunk (the run is deterministic, so the numbers are the
    same) with a one-line warning. A damaged ``scores.csv`` of a finished group raises ResultsError.

    ``shard=False`` keeps the grid on one device. ``max_chunks`` stops after that many chunks in
    this call (returns None; the next call resumes from the checkpoint), for time-sliced jobs.

    ``tags`` are extra columns written into every row (e.g. ``num_epochs`` for a forward-lag sweep).

    ``tensorboard_dir``: also write each chunk's rows and staleness histograms as TensorBoard event
    files, one run per cell in ``tensorboard_dir/cell-<i>_B<lag>_s<seed>/`` (vaco_jax/driver/live.py).
    """
    tags = dict(tags or {})
    check_cells(cells, group_dir)
    scores_path = os.path.join(group_dir, "scores.csv")
    cell_rows = json.loads(json.dumps([c.row() for c in cells], default=str))
    if os.path.exists(scores_path) and not os.path.exists(os.path.join(group_dir, "cells.json")):
        _rebuild_cells(group_dir, scores_path, cell_rows)
    if os.path.exists(os.path.join(group_dir, "cells.json")):
        old_rows = results.read_cells(group_dir)
        if old_rows != cell_rows:
            return _extend_group(config, cells, cell_rows, old_rows, group_dir, progress=progress,
                                 checkpoint=checkpoint, trainer=trainer, label=label, tags=tags, shard=shard,
                                 max_chunks=max_chunks)
    if os.path.exists(scores_path):
        rows = results.read_table(scores_path, expect_rows=len(cells))
        check_finished_group(group_dir, config)
        return rows
    from tqdm.auto import tqdm

    from vaco_jax.driver import checkpoint as ckpt
    os.makedirs(group_dir, exist_ok=True)
    results.write_cells(group_dir, cell_rows)

    trainer = trainer or make_train(config)
    used, per_device = grid_layout(len(cells), config.grid_batch, devices_for(config) if shard else 1)
    mesh = grid_mesh(used)
    padded = _pad(cells, used * per_device)
    keys = jnp.stack([jax.random.PRNGKey(c.seed) for c in padded])
    traced = stack_traced([make_traced(config, c.lag_depth, **c.knob_dict()) for c in padded])
    keys, traced = grid_put((keys, traced), mesh)
    init = jax.jit(grid_program(trainer.init, config.grid_batch, mesh))
    run_chunk = jax.jit(grid_program(trainer.train_chunk, config.grid_batch, mesh))
    evaluation = evaluation_program(  # one compiled evaluation for the groups that evaluate alike
        trainer, lambda fn: grid_program(fn, config.grid_batch, mesh),
        ("grid", config.grid_batch, None if mesh is None else tuple(d.id for d in mesh.devices.flat)))
    n = len(cells)

    # Checkpoints hold the real cells only (no padding copies, no device layout), so a group stopped
    # on one device count resumes on any other: restore, re-pad with copies of the last cell (exactly
    # what the padded cells are), and lay the grid out on this machine's devices.
    def unpad(tree):
        return jax.tree.map(lambda x: x[:n], tree)

    def repad(tree):
        extra = len(padded) - n
        if extra:
            tree = jax.tree.map(lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)]), tree)
        return grid_put(tree, mesh)

    ckpt_dir = os.path.join(group_dir, "checkpoint")
    curves_path = os.path.join(group_dir, "curves.csv")
    phase_path = os.path.join(group_dir, "phase_returns.npz")
    stale_path = os.path.join(group_dir, "staleness.npz")
    state, start, curve_rows, phase_ret, phase_cnt, stale = None, 0, [], [], [], []
    if checkpoint and os.path.exists(ckpt_dir):  # (the template traces init: seconds for an MJX task)
        try:
            restored = ckpt.restore_checkpoint(ckpt_dir, jax.eval_shape(lambda k, t: unpad(init(k, t)), keys, traced))
        except ckpt.CheckpointDamaged as e:
            _warn(f"{e}; restarting {group_dir} from its first chunk (every number is recomputed)")
            restored = None
        if restored is not None:
            state, start, _ = restored
            state = repad(state)
            try:
                curve_rows, phase_ret, phase_cnt = _resume_files(curves_path, phase_path, start, len(cells))
                stale = _resume_staleness(stale_path, start, len(cells), config.buffer_capacity)
            except ResultsError as e:
                _warn(f"{e}; restarting {group_dir} from its first chunk (every number is recomputed)")
                state, start, curve_rows, phase_ret, phase_cnt, stale = None, 0, [], [], [], []
    if state is None:
        state = init(keys, traced)

    bar = tqdm(total=config.num_evals, initial=start, disable=not progress, unit="chunk",
               desc=label or f"{config.env}/{config.method} x{len(cells)}")
    stop = config.num_evals if max_chunks is None else min(config.num_evals, start + max_chunks)
    live = _live_writer(tensorboard_dir, cells)
    for chunk in range(start, stop):
        t0 = time.perf_counter()
        state, metrics = run_chunk(state, traced)
        metrics = jax.device_get(evaluated(metrics, evaluation, state, config))
        seconds = time.perf_counter() - t0
        summary = chunk_summary(metrics)
        phase_ret.append(np.asarray(metrics.phases.episode_return_sum)[: len(cells)])
        phase_cnt.append(np.asarray(metrics.phases.episode_count)[: len(cells)])
        stale.append(np.asarray(metrics.staleness_counts)[: len(cells)])
        for i, cell in enumerate(cells):
            row = {"env": config.env, "method": config.method, **tags, **cell.row(), "cell": i, "chunk": chunk}
            row.update({k: np.asarray(v)[i].item() for k, v in summary.items()})
            row["seconds"] = seconds
            row["grid_steps_per_second"] = config.env_steps_per_chunk * len(padded) / seconds
            curve_rows.append(row)
            if live is not None:
                live.write(i, row, stale[-1][i], skip=list(tags) + list(cell.row()))
        results.write_table(curves_path, curve_rows)
        results.save_npz(stale_path, counts=np.stack(stale))
        if checkpoint:
            results.save_npz(phase_path, returns=np.stack(phase_ret), counts=np.stack(phase_cnt))
            ckpt.save_checkpoint(ckpt_dir, unpad(state), chunk + 1)
        bar.update(1)
        evals = np.asarray(summary["eval_return"][: len(cells)], float)
        evals = evals[np.isfinite(evals)]
        bar.set_postfix(eval=f"{evals.mean():.0f}" if len(evals) else "n/a",
                        sps=f"{config.env_steps_per_chunk * len(padded) / seconds:.0f}")
    bar.close()
    if live is not None:
        live.close()
    if stop < config.num_evals:
        return None

    returns = np.concatenate(phase_ret, axis=-1) if phase_ret else np.zeros((len(cells), 0))
    counts = np.concatenate(phase_cnt, axis=-1) if phase_cnt else np.zeros((len(cells), 0))
    score_rows = []
    for i, cell in enumerate(cells):
        rows = [r for r in curve_rows if r["cell"] == i]
        row = {"env": config.env, "method": config.method, **tags, **cell.row()}
        row.update(cell_scores(rows, returns[i], counts[i], evaluated=config.eval_episodes > 0))
        diag_names = [k for k in rows[0] if k not in row and k not in ("cell", "chunk", "env_steps", "eval_return",
                                                                       "train_return", "seconds",
                                                                       "grid_steps_per_second")]
        for k in diag_names:
            vals = np.array([r[k] for r in rows], float)
            row[f"mean_{k}"] = float(np.nanmean(vals)) if np.any(np.isfinite(vals)) else float("nan")
        score_rows.append(row)
    from vaco_jax.driver.policies import save_policies

    final = jax.device_get(unpad(state))
    save_policies(group_dir, config, final.learner, final.normalizer)  # trained policies are kept
    results.write_table(scores_path, score_rows)
    if checkpoint:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    return score_rows


def _rebuild_cells(group_dir: str, scores_path: str, cell_rows: list[dict]) -> None:
    """A finished group whose ``cells.json`` is gone: rebuilt from the plan when its scores hold exactly
    the planned cells (lag depth, seed and traced knobs, in order), else named (exit 3)."""
    rows = results.read_table(scores_path)
    keys = [tuple(sorted(c)) for c in cell_rows]
    found = [{k: r.get(k) for k in key} for r, key in zip(rows, keys)]
    same = len(rows) == len(cell_rows) and all(
        all(str(f[k]) == str(c[k]) or _same_number(f[k], c[k]) for k in c) for f, c in zip(found, cell_rows))
    if not same:
        raise ResultsError(f"{os.path.join(group_dir, 'cells.json')}: missing, and the group's scores.csv does not "
                           "hold the planned cells; restore it, or delete the group directory to run it again")
    results.write_cells(group_dir, cell_rows)
    _warn(f"{group_dir}: cells.json was missing; rebuilt from the plan (the scores hold exactly its cells)")


def _engine_of(config: Config, backend) -> str:
    try:
        return config.replace(backend=backend).physics_backend
    except (ConfigError, TypeError):
        return str(backend)


def _same_number(a, b) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


def check_finished_group(group_dir: str, config: Config) -> None:
    """A finished group holds its settings (``config.json``, equal to the command's) and its trained
    policies (``policies.npz``); anything missing, unreadable or different is named before it is reported."""
    from vaco_jax.driver.policies import CONFIG, POLICIES

    path = os.path.join(group_dir, CONFIG)
    if not os.path.exists(path):
        raise ResultsError(f"{path}: missing in a finished group, so nothing says which settings produced its scores; "
                           "restore it, or delete the group directory to run it again")
    recorded = results.read_json(path)  # a damaged file is a ResultsError naming it
    now = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    recorded = {**UNRECORDED_SETTINGS, **recorded}
    if "backend" in recorded:  # None means the task's default engine: compare the engines meant
        recorded["backend"], now["backend"] = (_engine_of(config, recorded["backend"]),
                                               _engine_of(config, now["backend"]))
    diff = [k for k in now if k in recorded and recorded[k] != now[k]]
    if diff:
        shown = ", ".join(f"{k}: {recorded[k]!r} there, {now[k]!r} now" for k in diff[:4])
        raise ConfigError(f"{group_dir} finished with other settings ({shown}); run with the same settings or "
                          "choose another --out")
    if not os.path.exists(os.path.join(group_dir, POLICIES)):
        raise ResultsError(f"{os.path.join(group_dir, POLICIES)}: missing in a finished group (its trained policies); "
                           "restore it, or delete the group directory to run it again")


def _cell_from_row(row: dict) -> Cell:
    knobs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in row.items() if k not in ("lag_depth", "seed")}
    return Cell(int(row["lag_depth"]), int(row["seed"]), tuple(sorted(knobs.items())))


def _extend_group(config, cells, cell_rows, old_rows, group_dir, **kwargs):
    """The manifest is extensible: a grid that holds every cell of the group's ``cells.json`` plus new
    ones (more seeds, lag depths or knob values) runs the new cells as a sub-group
    ``GROUP/more_<hash>/`` (its own program) and returns the rows of both; anything else is an error."""
    import hashlib

    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    old_keys = {key(r) for r in old_rows}
    if not old_keys <= {key(r) for r in cell_rows}:
        raise ValueError(f"{group_dir} holds a different grid (cells.json has cells this command lacks); "
                         "give every cell it holds (plus any new ones) or choose another --out")
    new = [c for c, r in zip(cells, cell_rows) if key(r) not in old_keys]
    old = [_cell_from_row(r) for r in old_rows]
    digest = hashlib.sha1("".join(sorted(key(c.row()) for c in new)).encode()).hexdigest()[:8]
    first = run_group(config, old, group_dir, **kwargs)
    if kwargs.get("tensorboard_dir"):
        kwargs = {**kwargs, "tensorboard_dir": os.path.join(kwargs["tensorboard_dir"], f"more_{digest}")}
    more = run_group(config, new, os.path.join(group_dir, f"more_{digest}"), **kwargs)
    return None if first is None or more is None else first + more


def check_cells(cells: Sequence[Cell], where: str = "") -> None:
    """A group needs at least one cell and no cell twice (a duplicate would be counted as two runs)."""
    if not cells:
        raise ConfigError(f"{where or 'a group'}: no cells (empty --seeds or --lag-depths?)")
    seen: dict = {}
    for c in cells:
        key = json.dumps(c.row(), sort_keys=True, default=str)
        if key in seen:
            raise ConfigError(f"{where or 'a group'}: the cell {c.row()} appears twice (duplicate seeds, lag "
                              "depths or sweep values)")
        seen[key] = True


def _live_writer(tensorboard_dir: str | None, cells: Sequence[Cell]):
    if not tensorboard_dir:
        return None
    from vaco_jax.driver.live import GroupWriter, cell_run_name

    return GroupWriter(tensorboard_dir, [cell_run_name(i, c.lag_depth, c.seed) for i, c in enumerate(cells)])


def _resume_staleness(path: str, start: int, n_cells: int, capacity: int) -> list:
    """The staleness histograms of the chunks a checkpoint has done, verified against it."""
    counts = results.load_npz(path)["counts"]
    if counts.ndim != 3 or counts.shape[0] < start or counts.shape[1:] != (n_cells, capacity):
        raise ResultsError(f"{path}: counts of shape {counts.shape}, the checkpoint has done {start} chunk(s) "
                           f"of {n_cells} cells x {capacity} ages")
    return list(counts[:start])


def _resume_files(curves_path: str, phase_path: str, start: int, n_cells: int):
    """The curve rows and phase returns of the chunks a checkpoint has done, verified against it."""
    table = results.read_table(curves_path)
    rows = [r for r in table if r["chunk"] < start]
    if len(rows) != start * n_cells or {r["chunk"] for r in rows} != set(range(start)):
        raise ResultsError(f"{curves_path}: {len(rows)} rows for the {start} chunk(s) of {n_cells} cells the "
                           "checkpoint has done")
    saved = results.load_npz(phase_path)
    if saved["returns"].shape[0] < start or saved["counts"].shape[0] < start:
        raise ResultsError(f"{phase_path}: {saved['returns'].shape[0]} chunk(s), the checkpoint has done {start}")
    return rows, list(saved["returns"][:start]), list(saved["counts"][:start])


# ----------------------------------------------------------------------------- run metadata

def package_versions() -> dict:
    from importlib import metadata

    names = ["jax", "jaxlib", "flax", "optax", "brax", "mujoco", "mujoco-mjx", "gymnasium", "chex",
             "orbax-checkpoint", "numpy", "scipy", "matplotlib", "tyro"]
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def machine() -> dict:
    """What ran the study (exact numbers differ across CPU types; docs/evaluation.md)."""
    import platform

    cpu = platform.processor() or None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}


def git_commit() -> str | None:
    import subprocess

    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _identity(groups: Sequence[Group]) -> dict:
    """Each group's settings as recorded (``Config.as_record``: the backend resolved, a Gymnasium task's
    model hash)."""
    return json.loads(json.dumps({g.subdir: g.config.as_record() for g in groups}, default=str))


# A setting added to Config after runs were recorded without it: the value that reproduces those runs.
# A record lacking the field is read with this value, so such a run resumes only with that setting
# (and says so) instead of silently continuing under another algorithm.
UNRECORDED_SETTINGS = {"minibatch_shuffle": "sort", "grad_clip": "per_network"}


def _compare_identity(run_dir: str, old: dict, identity: dict) -> None:
    for subdir in sorted(set(old) & set(identity)):
        recorded = {**UNRECORDED_SETTINGS, **old[subdir]}
        diff = [k for k in identity[subdir] if recorded.get(k) != identity[subdir][k]]
        if diff:
            shown = ", ".join(f"{k}: {recorded.get(k)!r} there, {identity[subdir][k]!r} now" for k in diff[:4])
            hint = ("; the policy buffer grows with the largest lag depth, so a lag depth above "
                    f"{recorded.get('buffer_capacity')} needs another --out" if "buffer_capacity" in diff else "")
            raise ConfigError(f"{run_dir} holds group {subdir} with other settings ({shown}){hint}; resume with "
                              "the same settings or choose another --out")


def check_identity(run_dir: str, groups: Sequence[Group], skip: str | None = None) -> None:
    """Read-only: the settings of ``groups`` agree with every record in ``run_dir`` (``run.json`` and
    each shard's ``run.shard-I-of-N.json``, except ``skip``); a group whose settings differ is a
    ConfigError naming them."""
    identity = _identity(groups)
    for path in [os.path.join(run_dir, "run.json")] + shard_records(run_dir):
        if os.path.basename(path) != skip and os.path.exists(path):
            _compare_identity(run_dir, results.read_json(path).get("identity", {}), identity)


def write_run_metadata(run_dir: str, groups: Sequence[Group], info: dict, shard: tuple[int, int] | None = None,
                       extra: dict | None = None) -> None:
    """``run.json``: the run's identity, package versions, git commit, devices.

    The identity is what changes results: each group's static configuration and knob defaults (its
    cells are in its ``cells.json``). Display flags (progress, figures, bootstrap replicates) and the
    directory's location are not part of it, so they never block a resume; a new group (another
    task or method) extends the identity; a group whose settings differ is an error naming them.

    With ``shard=(I, N)`` the record is ``run.shard-I-of-N.json`` instead, written by that shard
    alone (shards running at once never write one file), and checked against every other record.
    ``extra``: more fields of a new record (e.g. a shard's plan).
    """
    identity = _identity(groups)
    name = "run.json" if shard is None else f"run.{shard_name(*shard)}.json"
    os.makedirs(run_dir, exist_ok=True)
    with directory_lock(run_dir):  # processes given other --methods may start at the same moment
        check_identity(run_dir, groups, skip=name)
        meta_path = os.path.join(run_dir, name)
        here = machine()
        if os.path.exists(meta_path):
            meta = results.read_json(meta_path)
            old = meta.get("identity", {})
            _compare_identity(run_dir, old, identity)
            merged = {**old, **identity}
            if merged == old and here in meta.get("machines", []):
                return
            meta["identity"] = merged
        else:
            meta = {"identity": identity, "versions": package_versions(), "git_commit": git_commit(),
                    "devices": [str(d) for d in jax.devices()], "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                    **(extra or {})}
        # every machine that ran part of this directory (a study resumed elsewhere has several)
        meta["machines"] = meta.get("machines", []) + ([here] if here not in meta.get("machines", []) else [])
        meta["command"] = {k: v for k, v in info.items() if k != "out"}  # the latest command (not compared)
        results.write_json(meta_path, meta)


@contextlib.contextmanager
def directory_lock(path: str):
    """An exclusive advisory lock on a directory (``flock`` on the directory itself: no lock file is
    left behind), held for a read-modify-write of a file in it that several processes may share."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def random_scores(run_dir: str, tasks: Sequence[str], base_config: Config, episodes: int = 16) -> dict:
    """Uniform-random policy return per task (docs/evaluation.md normalisation), cached in the run directory.

    Shards running at once may each compute it: every write is atomic under a name of its own
    (results.atomic_write_bytes), so a reader sees one complete file, and each writer writes every
    task it was asked for, so the file a shard leaves holds all of the study's tasks."""
    path = os.path.join(run_dir, "random_scores.json")
    cache = results.read_json(path) if os.path.exists(path) else {}
    for task in tasks:
        if task in cache:
            continue
        trainer = make_train(base_config.replace(env=task))
        cache[task] = float(jax.jit(lambda k: trainer.random_score(k, episodes))(jax.random.PRNGKey(12345)))
        results.write_json(path, cache)
    return {t: cache[t] for t in tasks}


# ----------------------------------------------------------------------------- shards and single cells
#
# ``--shard I/N`` runs the I-th (0-based) of N disjoint parts of a study: the flat list of planned
# cells (groups in plan order, each group's cells in order) is cut into N contiguous, near-equal
# slices, so the cells of one group that fall into one shard stay one compiled program. A shard
# writes only its own files: ``GROUP/shard-I-of-N/`` and ``run.shard-I-of-N.json``. ``--cell K``
# re-runs one planned cell alone into ``RUN/rerun/GROUP/cell-K/`` and compares it with the sweep.

def shard_name(index: int, count: int) -> str:
    return f"shard-{index}-of-{count}"


SHARD_HELP = "I/N with N >= 1 and 0 <= I < N (0-based: 0/4, 1/4, 2/4, 3/4)"


def parse_shard(text) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)``, 0-based: the N shards are 0/N ... (N-1)/N (a SLURM array 0-(N-1))."""
    parts = str(text).strip().split("/")
    try:
        index, count = (int(p) for p in parts) if len(parts) == 2 else (None, None)
    except ValueError:
        index, count = None, None
    if index is None or count < 1 or not 0 <= index < count:
        raise ConfigError(f"shard={text!r}: allowed values are {SHARD_HELP}")
    return index, count


def shard_groups(groups: Sequence[Group], index: int, count: int) -> list[Group]:
    """The groups of shard ``index`` of ``count`` (0-based): cells ``[index*T//count, (index+1)*T//count)``
    of the flat list of all T planned cells, each group's part in ``GROUP/shard-I-of-N/``. Shards are
    disjoint, together hold every cell once, and differ in size by at most one cell."""
    total = sum(len(g.cells) for g in groups)
    if not 0 <= index < count:
        raise ConfigError(f"shard={index}/{count}: allowed values are {SHARD_HELP}")
    if count > total:
        raise ConfigError(f"shard={index}/{count}: the study has {total} cell(s), so N must be 1..{total} "
                          f"(allowed values: {SHARD_HELP}, N <= {total})")
    lo, hi = index * total // count, (index + 1) * total // count
    out, start = [], 0
    for g in groups:
        a, b = max(lo, start), min(hi, start + len(g.cells))
        if a < b:
            out.append(dataclasses.replace(g, cells=tuple(g.cells[a - start:b - start]),
                                           subdir=os.path.join(g.subdir, shard_name(index, count)),
                                           label=f"{g.label or g.subdir} [shard {index}/{count}]"))
        start += len(g.cells)
    return out


def shard_records(run_dir: str) -> list[str]:
    """The shards' records ``run.shard-I-of-N.json`` in ``run_dir``, sorted."""
    import re

    if not os.path.isdir(run_dir):
        return []
    return sorted(os.path.join(run_dir, f) for f in os.listdir(run_dir)
                  if re.fullmatch(r"run\.shard-\d+-of-\d+\.json", f))


def plan_digest(groups: Sequence[Group]) -> str:
    """A hash of the planned cells (the split into shards depends on them, not only on the settings)."""
    import hashlib

    plan = [[g.subdir, [c.row() for c in g.cells]] for g in groups]
    return hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _check_shards(run_dir: str, groups: Sequence[Group], count: int | None) -> dict:
    """Read-only: every shard record in ``run_dir`` belongs to one split into the same N of the same
    planned cells as ``groups``; returns {index: record}."""
    found = {}
    for path in shard_records(run_dir):
        meta = results.read_json(path)
        info = meta.get("shard", {})
        if count is not None and info.get("count") != count:
            raise ConfigError(f"shard: {run_dir} holds shards of a {info.get('count')}-way split ({path}); "
                              f"allowed values here: I/{info.get('count')} with 0 <= I < {info.get('count')}, "
                              "or another --out")
        count = info.get("count")
        if info.get("plan") != plan_digest(groups):
            raise ConfigError(f"shard: {path} was planned with other cells (seeds, lag depths, --sweep values, "
                              "methods or tasks) than this command; give the shards' settings or another --out")
        found[info.get("index")] = meta
    return found


def _merge_text(run_dir: str, count: int) -> str:
    return (f"when all {count} shards have finished, merge them: run the same command without --shard (it runs "
            f"nothing, checks that every shard finished, and writes the summaries and figures into {run_dir}), "
            f"or: python experiments/plot.py {run_dir}")


def select_cell(groups: Sequence[Group], which) -> tuple[Group, int, int]:
    """``--cell``: ``K`` (the flat cell number of the plan, 0-based) or ``GROUP:J`` (cell J of the group
    in subdirectory GROUP) -> (group, J, K). An unknown cell prints the list of cells and raises ConfigError."""
    text = str(which).strip()
    flat = [(g, j) for g in groups for j in range(len(g.cells))]
    found = None
    if ":" in text:
        subdir, _, j = text.rpartition(":")
        starts = {}
        for k, (g, jj) in enumerate(flat):
            starts.setdefault(g.subdir, k)
        g = next((g for g in groups if g.subdir == subdir.strip().strip("/")), None)
        if g is not None and j.strip().isdigit() and int(j) < len(g.cells):
            found = (g, int(j), starts[g.subdir] + int(j))
    elif text.isdigit() and int(text) < len(flat):
        g, j = flat[int(text)]
        found = (g, j, int(text))
    if found is None:
        print(cell_list_text(groups))
        raise ConfigError(f"cell={text!r}: allowed values are K in 0..{len(flat) - 1} or GROUP:J with GROUP a group "
                          "of the plan and J in 0..(its cells - 1); the cells are listed above")
    return found


def cell_list_text(groups: Sequence[Group]) -> str:
    lines, k = ["cells (K, GROUP:J, values):"], 0
    for g in groups:
        for j, c in enumerate(g.cells):
            lines.append(f"  {k:>5}  {g.subdir}:{j:<6} " + " ".join(f"{n}={_fmt(v)}" for n, v in c.row().items()))
            k += 1
    return "\n".join(lines)


def _relative_difference(a, b) -> float:
    a, b = float(a), float(b)
    if (math.isnan(a) and math.isnan(b)) or a == b:
        return 0.0
    if math.isnan(a) or math.isnan(b):
        return float("inf")
    return abs(a - b) / max(abs(a), abs(b))


def compare_rows(rerun: dict, sweep_row: dict) -> tuple[list[tuple[str, object, object, float]], float]:
    """The score columns of two rows of one cell, each with its relative difference, and the largest."""
    columns = [k for k in rerun if k in sweep_row and not results.identifies_cell(k)]
    out = []
    for k in columns:
        a, b = sweep_row[k], rerun[k]
        out.append((k, a, b, 0.0 if a == b else _relative_difference(a, b)))
    return out, max((d for *_, d in out), default=0.0)


def sweep_row(run_dir: str, group: Group, cell: Cell) -> dict | None:
    """The row of ``cell`` in the sweep's finished ``scores.csv`` (whole, extended, or in shards); None if
    that part of the sweep has not finished."""
    key = results.cell_key({"env": group.config.env, "method": group.config.method, **dict(group.tags),
                            **cell.row()})
    for g in results.group_dirs(os.path.join(run_dir, group.subdir)):
        path = os.path.join(g, "scores.csv")
        if os.path.exists(path):
            for row in results.read_table(path, expect_rows=len(results.read_cells(g))):
                if results.cell_key(row) == key:
                    return row
    return None


def rerun_cell(run_dir: str, groups: Sequence[Group], which, info: dict, progress: bool = True,
               max_chunks: int | None = None) -> dict | None:
    """Re-run one planned cell alone into ``RUN/rerun/GROUP/cell-K/`` (a finished re-run there is
    run again; nothing of the sweep is written), then print its score row next to the sweep's and
    the largest relative difference. Returns ``{"rerun", "sweep", "max_rel_diff", "dir"}`` (None
    when stopped by ``max_chunks``)."""
    group, j, k = select_cell(groups, which)
    cell = group.cells[j]
    check_identity(run_dir, groups)
    if shard_records(run_dir):  # a sweep split into shards: this plan must be the shards' plan
        _check_shards(run_dir, groups, None)
    where = os.path.join(run_dir, results.RERUN, group.subdir, f"cell-{k}")
    print(f"re-running cell {k} = {group.subdir}:{j} ({' '.join(f'{n}={_fmt(v)}' for n, v in cell.row().items())}) "
          f"alone -> {where}")
    if os.path.exists(os.path.join(where, "scores.csv")):
        shutil.rmtree(where)
    one = dataclasses.replace(group, cells=(cell,))
    write_run_metadata(where, [one], info)
    rows = run_group(group.config, [cell], where, progress=progress, label=f"cell {k} ({group.subdir}:{j})",
                     tags=dict(group.tags), max_chunks=max_chunks)
    if rows is None:
        print(f"stopped after --max-chunks {max_chunks}; rerun the same command to continue")
        return None
    again = rows[0]
    old = sweep_row(run_dir, group, cell)
    if old is None:
        print(f"the sweep in {run_dir} has no finished row for this cell (its group or shard has not finished); "
              "the re-run's row:")
        for name, v in again.items():
            print(f"  {name:<32} {v}")
        return {"rerun": again, "sweep": None, "max_rel_diff": None, "dir": where}
    table, worst = compare_rows(again, old)
    print(f"  {'column':<30} {'sweep':>22} {'re-run':>22} {'rel. diff':>10}")
    for name, a, b, d in table:
        print(f"  {name:<30} {str(a):>22} {str(b):>22} {d:>10.2e}")
    worst_name = max(table, key=lambda t: t[3])[0] if table else "-"
    print(f"largest relative difference: {worst:.3e}" + (" (bit-identical)" if worst == 0 else f" ({worst_name})"))
    return {"rerun": again, "sweep": old, "max_rel_diff": worst, "dir": where}


def run_study(run_dir: str, groups: Sequence[Group], args, spec: dict, prepare=None) -> bool:
    """What every study script does once its groups are planned and validated. Returns True when
    the whole study has finished and the script should write its summaries and figures.

    - plain: the plan, ``run.json`` (:func:`write_run_metadata`), ``prepare()`` (e.g. the random
      scores), every group;
    - ``args.shard = "I/N"``: only that shard's cells (into ``GROUP/shard-I-of-N/``, its record in
      ``run.shard-I-of-N.json``), then prints how to merge (a shard writes no summary or figure);
    - plain in a directory holding shards: the merge; runs nothing, checks that every shard of the
      split finished (else lists the unfinished ones and returns False);
    - ``args.cell = "K"`` or ``"GROUP:J"``: :func:`rerun_cell`;
    - ``args.distributed`` in a ``jax.distributed`` run of N processes: process I runs shard I/N on its
      own devices, all wait at a barrier, then process 0 merges (the only one to return True).
    A memory estimate per cell is printed (and checked against the devices' memory) before anything
    compiles; ``args.max_cells_per_program`` splits larger groups into parts.
    Every flag is checked before anything is written.
    """
    shard, cell = getattr(args, "shard", None), getattr(args, "cell", None)
    if shard is not None and cell is not None:
        raise ConfigError(f"shard={shard!r}, cell={cell!r}: give --shard or --cell, not both")
    check_max_chunks(args.max_chunks)
    for g in groups:  # a study's scores read evaluation episodes
        if g.config.eval_episodes < 1:
            raise ConfigError(f"eval_episodes={g.config.eval_episodes} ({g.subdir}): a study's scores (final and AUC "
                              "evaluation return) need evaluation episodes; allowed values: an integer >= 1")
    max_cells = getattr(args, "max_cells_per_program", None)
    check_max_cells(max_cells)
    info = {**dataclasses.asdict(args), **spec}
    if cell is not None:
        print(plan_text(groups))
        rerun_cell(run_dir, groups, cell, info, progress=args.progress, max_chunks=args.max_chunks)
        return False
    if getattr(args, "distributed", False):
        if shard is not None:
            raise ConfigError(f"shard={shard!r}, distributed=True: with --distributed each process runs its own "
                              "shard; give one of them")
        index, count = jax.process_index(), jax.process_count()
        if count > 1:
            print(f"process {index} of {count} (jax.distributed): shard {index}/{count} on this host's "
                  f"{len(jax.local_devices())} device(s)")
            _run_shard(run_dir, groups, index, count, info, args, prepare, max_cells, distributed=True)
            barrier("vaco_jax.study.shards_done")
            if index != 0:  # one process writes the summaries
                return False
            return merge_shards(run_dir, groups, info, None)
    if shard is not None:
        index, count = parse_shard(shard)
        _run_shard(run_dir, groups, index, count, info, args, prepare, max_cells)
        return False
    if shard_records(run_dir):
        return merge_shards(run_dir, groups, info, prepare)
    print(plan_text(groups))
    memory_plan(groups, max_cells)
    write_run_metadata(run_dir, groups, info)
    if prepare is not None:
        prepare()
    return run_groups(run_dir, groups, progress=args.progress, max_chunks=args.max_chunks,
                      tensorboard=getattr(args, "tensorboard", False), max_cells_per_program=max_cells)



def _run_shard(run_dir, groups, index, count, info, args, prepare, max_cells, distributed: bool = False) -> bool:
    """Run shard ``index`` of ``count``: its cells into ``GROUP/shard-I-of-N/``, its record in
    ``run.shard-I-of-N.json``; prints how to merge. Returns whether it finished."""
    shard = f"{index}/{count}"
    part = shard_groups(groups, index, count)
    whole = [g.subdir for g in groups if os.path.exists(os.path.join(run_dir, g.subdir, "cells.json"))]
    if whole:
        raise ConfigError(f"shard={shard!r}: {run_dir} already holds {whole[0]} run whole (without --shard); "
                          "a shard would run its cells a second time; allowed: another --out")
    _check_shards(run_dir, groups, count)
    print(plan_text(groups))
    print(f"shard {index}/{count}: {sum(len(g.cells) for g in part)} cell(s) in {len(part)} group(s)")
    first = index * sum(len(g.cells) for g in groups) // count
    print("\n".join(plan_text(part, first).splitlines()[1:]))
    memory_plan(part, max_cells)
    write_run_metadata(run_dir, groups, info, shard=(index, count),
                       extra={"shard": {"index": index, "count": count, "plan": plan_digest(groups),
                                        "groups": [g.subdir for g in part]}})
    if prepare is not None:
        prepare()
    finished = run_groups(run_dir, part, progress=args.progress, max_chunks=args.max_chunks,
                          tensorboard=getattr(args, "tensorboard", False), max_cells_per_program=max_cells)
    if finished:
        print(f"shard {index}/{count} finished -> {run_dir}; " + (
            "waiting for the other processes; process 0 then merges" if distributed else _merge_text(run_dir, count)))
    return finished


def init_distributed() -> tuple[int, int]:
    """Start ``jax.distributed`` (once per process, before any computation) and return (process index,
    process count). The coordinator comes from VACO_JAX_COORDINATOR (host:port), VACO_JAX_NUM_PROCESSES
    and VACO_JAX_PROCESS_ID when set, else from the cluster (SLURM, Open MPI, ...: jax detects it)."""
    if not jax.distributed.is_initialized():
        names = ("VACO_JAX_COORDINATOR", "VACO_JAX_NUM_PROCESSES", "VACO_JAX_PROCESS_ID")
        given = [n for n in names if os.environ.get(n)]
        kwargs = {}
        if given:
            if len(given) != 3:
                raise ConfigError(f"distributed: set all of {', '.join(names)} or none (set: {', '.join(given)})")
            try:
                kwargs = dict(coordinator_address=os.environ[names[0]], num_processes=int(os.environ[names[1]]),
                              process_id=int(os.environ[names[2]]))
            except ValueError:
                raise ConfigError(f"distributed: {names[1]} and {names[2]} must be integers") from None
            if not 0 <= kwargs["process_id"] < kwargs["num_processes"]:
                raise ConfigError(f"distributed: {names[2]}={kwargs['process_id']} must be in "
                                  f"0..{kwargs['num_processes'] - 1}")
        jax.distributed.initialize(**kwargs)
    return jax.process_index(), jax.process_count()


def barrier(name: str, timeout_s: int = 7 * 24 * 3600) -> None:
    """Wait until every process of a ``jax.distributed`` run reaches this point: a barrier of the
    coordination service (no device collective, so a process that finishes its shard hours before
    the others just waits). The timeout is a week: a shard may run for days."""
    from orbax.checkpoint import multihost

    fn = multihost.get_barrier_sync_fn(processes=set(range(jax.process_count())))
    fn(key=name, timeout_ms=timeout_s * 1000)

def merge_shards(run_dir: str, groups: Sequence[Group], info: dict, prepare=None) -> bool:
    """The study run without ``--shard`` in a directory its shards wrote: check every shard of the
    split is there and finished (nothing is run); True when the summaries can be written."""
    print(plan_text(groups))
    found = _check_shards(run_dir, groups, None)
    count = next(iter(found.values()))["shard"]["count"]
    write_run_metadata(run_dir, groups, info)
    missing = []
    for index in range(count):
        for g in shard_groups(groups, index, count):
            if not group_finished(os.path.join(run_dir, g.subdir)):
                missing.append(f"shard {index}/{count} ({g.subdir}: " +
                               ("not started" if index not in found else "not finished") + ")")
    if missing:
        print(f"{run_dir} holds a sweep split into {count} shards; not finished yet:", *missing, sep="\n  ")
        print("run each of them (--shard I/N), then this command again")
        return False
    print(f"merging the {count} shards of {run_dir}")
    if prepare is not None:
        prepare()
    return True
