"""Where a group runs: the CPU cores as XLA devices, the compiled-program cache, the grid axis split
over devices by ``shard_map`` (``grid_program``), a group laid out on them in one call (``place_group``:
its plan, padded and placed cells, grid programs, the programs groups share) and ``jax.distributed``
processes."""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.core.config import Config
from vaco_jax.core.knobs import ConfigError

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


def _warn(message: str) -> None:
    import sys

    print(f"warning: {message}", file=sys.stderr, flush=True)


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
    One cell (a single run) runs ``fn`` itself, unvmapped, with the grid axis added around it.

    With a ``mesh`` (``grid_mesh``) the grid axis is split over its devices by ``shard_map``: each
    device runs that program on its own block of cells, and no value crosses devices. (Splitting
    the axis of one ``vmap`` program with shardings instead lets the SPMD partitioner couple the
    devices: every ``while_loop`` whose condition depends on the batch, such as MJX's constraint
    solver, then reduces that condition over all devices at every iteration, and every device runs
    as many iterations as the slowest env anywhere; on a 2-core CPU split into 2 devices that ran
    at ~0.8x the speed of ``shard_map``, docs/scale.md.)"""
    def cells(*args):
        if jax.tree.leaves(args)[0].shape[0] == 1:
            return jax.tree.map(lambda x: x[None], fn(*jax.tree.map(lambda x: x[0], args)))
        return jax.vmap(fn)(*args)

    if batch is None:
        body = cells
    else:
        def body(*args):
            n = jax.tree.leaves(args)[0].shape[0]
            if n % batch:
                raise ValueError(f"{n} cells are not a multiple of grid_batch={batch}")
            if n == batch:
                return cells(*args)
            split = lambda x: x.reshape((n // batch, batch) + x.shape[1:])  # noqa: E731 (explicit shape: 0-size leaves too)
            out = jax.lax.map(lambda a: cells(*a), jax.tree.map(split, args))
            return jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), out)
    if mesh is None:
        return body
    spec = jax.sharding.PartitionSpec("grid")
    return jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)


@dataclasses.dataclass(frozen=True)
class GridPlan:
    """Where a group's grid axis runs: ``devices`` devices of ``per_device`` cells each (padding included),
    each device's cells vmapped in batches of ``batch`` (``grid_program``), split over ``mesh`` (None: one
    device). ``where``: that layout as a key (programs built for equal keys run on the same devices alike)."""

    devices: int
    per_device: int
    batch: int | None
    mesh: Any
    where: tuple

    @property
    def padded(self) -> int:
        """Cells on the grid axis, padding copies included."""
        return self.devices * self.per_device


def grid_plan(config: Config, n_cells: int, devices: int | None = None) -> GridPlan:
    """The plan of a group of ``n_cells`` cells of ``config`` over ``devices`` devices (default: as many as
    the task's engine allows, ``devices_for``): ``grid_layout`` and its ``grid_mesh``."""
    used, per_device = grid_layout(n_cells, config.grid_batch, devices_for(config) if devices is None else devices)
    mesh = grid_mesh(used)
    where = ("grid", config.grid_batch, None if mesh is None else tuple(d.id for d in mesh.devices.flat))
    return GridPlan(used, per_device, config.grid_batch, mesh, where)


def grid_place(tree, plan: GridPlan):
    """``tree`` (a leading grid axis, one entry per cell of the group) filled to ``plan.padded`` cells with
    copies of its last cell (what the padding cells are) and laid out on ``plan.mesh``'s devices
    (``grid_put``): a group's keys and traced values when its program is built, its state when resumed."""
    extra = plan.padded - jax.tree.leaves(tree)[0].shape[0]
    if extra:
        tree = jax.tree.map(lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)]), tree)
    return grid_put(tree, plan.mesh)


# Compiled grid programs that groups share: (key, layout) -> (jitted program, what it keeps alive).
# Oldest dropped beyond SHARED_KEPT.
_SHARED: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
SHARED_KEPT = 16


def shared_grid_program(fn: Callable, plan: GridPlan, key=None, keep=None) -> Callable:
    """``jit`` of ``fn`` (a function of one cell) over ``plan``'s grid (``grid_program``), one per ``key`` and
    layout (``plan.where``) in this process: groups whose ``fn`` computes the same thing (equal ``key``s,
    e.g. ``Trainer.evaluation_signature()`` for the chunk's evaluation: the methods of one task) and whose
    grids are laid out alike compile it once. ``keep`` is kept alive with the program (an object ``key``
    names by its id, so the id is not reused). ``key`` None: a program of its own."""
    if key is None:
        return jax.jit(grid_program(fn, plan.batch, plan.mesh))
    key = (key, plan.where)
    if key in _SHARED:
        _SHARED.move_to_end(key)
    else:
        _SHARED[key] = (jax.jit(grid_program(fn, plan.batch, plan.mesh)), keep)
        while len(_SHARED) > SHARED_KEPT:
            _SHARED.popitem(last=False)
    return _SHARED[key][0]


@dataclasses.dataclass(frozen=True)
class GroupPlacement:
    """A group laid out on this process's devices (``place_group``)."""

    plan: GridPlan
    tree: Any  # the cells' tree (keys, traced values), padded and laid out
    programs: tuple  # each function of one cell given, jitted over the grid
    shared: Callable | None  # the shared function given, jitted over the grid (shared_grid_program)
    place: Callable  # a tree of the group's own cells -> padded and laid out alike (grid_place)


def place_group(config: Config, tree, fns, shared=None, devices: int | None = None) -> GroupPlacement:
    """A group of ``config`` laid out on ``devices`` devices (default ``devices_for``) in one call: its plan for
    as many cells as ``tree``'s grid axis holds (``grid_plan``), ``tree`` (the cells' keys and traced values)
    padded and placed (``grid_place``), each of ``fns`` (functions of one cell) jitted over the grid
    (``grid_program``), and ``shared = (fn, key, keep)`` as ``shared_grid_program``."""
    plan = grid_plan(config, jax.tree.leaves(tree)[0].shape[0], devices)
    programs = tuple(jax.jit(grid_program(fn, plan.batch, plan.mesh)) for fn in fns)
    return GroupPlacement(plan=plan, tree=grid_place(tree, plan), programs=programs,
                          shared=None if shared is None else shared_grid_program(shared[0], plan, *shared[1:]),
                          place=functools.partial(grid_place, plan=plan))


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
