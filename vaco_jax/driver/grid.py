"""Cells and groups: what a study runs. A *cell* is one run (lag depth, seed, traced knobs); a *group* is one
static ``Config`` and its cells, run as one compiled program. ``--sweep`` parsing (any Config field or
piece knob), plans as text, cell selection for ``--cell``, shards of a plan (``--shard I/N``) and the
split of a large group into parts."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
from typing import Iterable, Sequence

import numpy as np

from vaco_jax.core.config import STATIC_FIELDS, TRACED_FIELDS, Config, _ages_depth, make_traced
from vaco_jax.core.lag import LAG_MODELS
from vaco_jax.core.knobs import ConfigError, check_knob



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
                                                                 else "; see vaco-train --help"))
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
        spec = LAG_MODELS[config.lag_model]
        if name == "publish_interval":
            return spec.reads_publish_interval
        return name == "lag_depth" or spec.reads_age_weights
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
             "(numbered as a study's --cell takes them; vaco-render --cell counts from 0 within a group)"]
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
    shortfalls = {steps_note(g.config) for g in groups} - {""}
    return "\n".join(lines + sorted(shortfalls))


def steps_note(config: Config) -> str:
    """A line when ``total_env_steps`` is not what runs: training stops after the last whole chunk
    (``num_evals`` chunks of whole phases), so the steps that run are said, never silently fewer."""
    run = config.phases_run * config.batch_size
    if run == config.total_env_steps:
        return ""
    return (f"note: total_env_steps={config.total_env_steps:,} runs {run:,} env steps: {config.num_evals} chunks of "
            f"{config.phases_per_chunk} phases of {config.batch_size:,} (num_envs x unroll_length); a multiple of "
            f"{config.num_evals * config.batch_size:,} runs in full")


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


PART_RE = r"part-(\d+)-of-(\d+)"


def check_max_cells(value) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError(f"max_cells_per_program={value!r} must be a positive integer (or not given: one "
                          "program per group)")


def split_sizes(n: int, max_cells: int) -> list[int]:
    """``n`` cells in ``ceil(n / max_cells)`` parts of nearly equal size (largest first)."""
    parts = max(1, math.ceil(n / max_cells))
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def split_group(group: Group, max_cells: int | None) -> list[Group]:
    """A group with more than ``max_cells`` cells as parts ``GROUP/part-J-of-M/`` of nearly equal size
    (J = 0..M-1), each its own program; otherwise the group itself."""
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


def _pad(cells: list[Cell], multiple: int) -> list[Cell]:
    extra = (-len(cells)) % multiple
    return cells + [cells[-1]] * extra


def _cell_from_row(row: dict) -> Cell:
    knobs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in row.items() if k not in ("lag_depth", "seed")}
    return Cell(int(row["lag_depth"]), int(row["seed"]), tuple(sorted(knobs.items())))


SEED_LIMIT = 2 ** 32  # seeds are folded into 32-bit PRNG keys


def check_seed(seed) -> None:
    """A seed is an integer in [0, 2^32): a PRNG key holds a seed modulo 2^32, so seeds 0 and 2^32 (or -1
    and 2^32 - 1) would be the same run counted twice."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < SEED_LIMIT:
        raise ConfigError(f"seed={seed!r} is not allowed; a seed must be an integer in [0, {SEED_LIMIT - 1}]")


def check_cells(cells: Sequence[Cell], where: str = "") -> None:
    """A group needs at least one cell and no cell twice (a duplicate would be counted as two runs)."""
    if not cells:
        raise ConfigError(f"{where or 'a group'}: no cells (empty --seeds or --lag-depths?)")
    seen: dict = {}
    for c in cells:
        check_seed(c.seed)
        key = json.dumps(c.row(), sort_keys=True, default=str)
        if key in seen:
            raise ConfigError(f"{where or 'a group'}: the cell {c.row()} appears twice (duplicate seeds, lag "
                              "depths or sweep values)")
        seen[key] = True


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


def plan_digest(groups: Sequence[Group]) -> str:
    """A hash of the planned cells (the split into shards depends on them, not only on the settings)."""
    import hashlib

    plan = [[g.subdir, [c.row() for c in g.cells]] for g in groups]
    return hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()[:16]


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
