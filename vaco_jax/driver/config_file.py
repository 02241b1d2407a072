"""``--config FILE``: a file of flags, or a group's own record rerun as recorded.

A JSON or YAML mapping of flag names to values becomes command-line tokens read before the flags
given (``config_tokens``); a group's ``config.json`` that the project wrote (checksummed, with its
``cells.json`` beside it) is a ``RunRecord``, turned into the tokens that plan exactly that group
(``record_tokens``) and, with nothing but output flags beside it, checked against the plan before
anything is written (``check_rerun``). ``cli.parse_args`` reads the flag.
"""

from __future__ import annotations

import dataclasses
import os
import typing

from vaco_jax.analysis import results
from vaco_jax.analysis.results import ResultsError
from vaco_jax.core.config import Config, ConfigError

# A group's config.json names its task and method; a study script takes them as lists.
_AS_LIST = {"env": "tasks", "method": "methods"}


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """A group's own record as the project wrote it: ``config.json`` (every setting) and the
    ``cells.json`` beside it (lag depth, seed and knobs of each cell), both checksum-verified."""

    path: str
    settings: dict
    cells: list


def _load_mapping(path: str):
    import json

    if not os.path.isfile(path):
        raise ConfigError(f"config: {path} is not a file")
    with open(path) as f:
        text = f.read()
    try:
        if path.endswith((".yaml", ".yml")):
            import yaml

            return yaml.safe_load(text)
        return json.loads(text)
    except Exception as e:  # noqa: BLE001 (any parse error is the file's)
        raise ConfigError(f"config: {path} does not parse ({type(e).__name__}: {str(e).splitlines()[0]})") from None


def read_config_file(path: str) -> dict:
    """A JSON or YAML mapping of flag names (``snake_case``, as the fields are named) to values. A file
    the project wrote (it carries a ``sha256``) is checksum-verified: an edited one is refused, naming it."""
    data = _load_mapping(path)
    if not isinstance(data, dict):
        raise ConfigError(f"config: {path} must hold a mapping of flag names to values")
    if "sha256" in data and not path.endswith((".yaml", ".yml")):
        try:
            data = results.read_json(path)
        except ResultsError as e:
            raise ConfigError(f"config: {e}; a run's own config.json reruns it only as written (give a changed "
                              "setting as a flag after --config)") from None
    data.pop("sha256", None)
    return data


def read_record(path: str, data: dict) -> RunRecord | None:
    """The group record ``data`` (read from ``path``) is, with its verified ``cells.json``; None for a
    file of flags written by hand. A record without its cells, a ``run.json`` or a ``cells.json`` is
    refused, saying what to give instead."""
    if path.endswith((".yaml", ".yml")) or "sha256" not in _load_mapping(path):
        return None
    where = os.path.dirname(path) or "."
    if "identity" in data:  # run.json: the run's groups, not one group's settings
        groups = ", ".join(os.path.join(where, g, "config.json") for g in sorted(data["identity"])) or "none"
        raise ConfigError(f"config: {path} is a run's record (run.json), not one group's settings; give a group's "
                          f"own config.json ({groups})")
    if set(data) == {"cells"}:
        raise ConfigError(f"config: {path} is a group's cells.json; give the config.json beside it")
    if not set(data) <= {f.name for f in dataclasses.fields(Config)}:
        return None  # another file the project wrote (e.g. random_scores.json): its keys are refused by name
    cells_path = os.path.join(where, "cells.json")
    if not os.path.exists(cells_path):
        raise ConfigError(f"config: {path} is a group's record, but its cells.json is missing beside it (the "
                          "group's lag depths, seeds and knob values); copy the group's cells.json beside it")
    try:
        cells = results.read_cells(where)
    except (ResultsError, KeyError, TypeError) as e:
        raise ConfigError(f"config: {path}'s cells.json: {e}") from None
    if not cells:
        raise ConfigError(f"config: {cells_path} holds no cells")
    from vaco_jax.driver.provenance import UNRECORDED_SETTINGS  # what a record older than a setting ran with

    return RunRecord(path, {**UNRECORDED_SETTINGS, **data}, cells)


def _key(value) -> str:
    import json

    return json.dumps(value, sort_keys=True)


def _unique(values) -> list:
    seen, out = set(), []
    for v in values:
        if _key(v) not in seen:
            seen.add(_key(v))
            out.append(v)
    return out


def _grid_order(cells: list[dict], knobs: list[str], lag_axis: bool) -> list[str] | None:
    """The order of the knob axes for which lag depths x seeds x knob values, expanded as a study plans
    them (``grid.grid`` then ``grid.apply_sweep``, each axis innermost in turn), give ``cells`` in
    order; None when no order does (the cells are no whole grid, e.g. a shard's slice)."""
    import itertools

    rows = [_key(c) for c in cells]
    for order in itertools.permutations(knobs):
        planned = [{"seed": s, **({"lag_depth": b} if lag_axis else {})}
                   for b in (_unique(c["lag_depth"] for c in cells) if lag_axis else [None])
                   for s in _unique(c["seed"] for c in cells)]
        for name in order:
            planned = [{**p, name: v} for p in planned for v in _unique(c[name] for c in cells)]
        dropped = [_key({k: v for k, v in c.items() if lag_axis or k != "lag_depth"}) for c in cells]
        if [_key(p) for p in planned] == (rows if lag_axis else dropped):
            return list(order)
    return None


def _as_recorded(value):
    """``value`` as a JSON file holds it (tuples as lists)."""
    import json

    return json.loads(json.dumps(value, default=str))


def _sweep_value(v) -> str:
    return repr(tuple(v)) if isinstance(v, list) else repr(v)


def record_tokens(cls: type, record: RunRecord) -> list[str]:
    """Command-line tokens that make the command ``cls`` plan exactly ``record``'s group: its settings,
    and its cells as ``--seeds`` / ``--lag-depths`` / ``--sweep`` (a study) or ``--seed`` / ``--lag-depth``
    and knob flags (a single run of a one-cell group). What the command cannot express is a ConfigError
    saying what would rerun the record."""
    from vaco_jax.core.lag import LAG_MODELS

    path, cells = record.path, record.cells
    fields = {f.name for f in dataclasses.fields(cls)}
    settings = dict(record.settings)
    instead = (f"rerun it with vaco-lag-sweep --config {path} (its cells), or vaco-train --config {path} (a "
               "one-cell group)")
    defaults = _as_recorded(dataclasses.asdict(Config()))
    flagless = [k for k in settings if k not in fields and _AS_LIST.get(k) not in fields and k != "lag_depth"]
    takes = [k for k in flagless if _key(settings[k]) != _key(defaults.get(k))]
    if takes or not ({"seeds", "seed"} & fields):
        missing = ", ".join("--" + k.replace("_", "-") for k in (takes or ["seeds"])[:4]) + (
            f" and {len(takes) - 4} more" if len(takes) > 4 else "")
        raise ConfigError(f"config: {path} is a group's record (its settings and cells.json); this command cannot "
                          f"rerun it (it takes no {missing}); {instead}")
    for k in flagless:
        del settings[k]  # a setting this command has no flag for, recorded at Config's default
    spec = LAG_MODELS[settings.get("lag_model", Config().lag_model)]
    ages = spec.reads_age_weights
    if not spec.reads_publish_interval:
        settings.pop("publish_interval", None)  # held at 1 by every lag model that does not read it
    knobs = _unique(k for c in cells for k in c if k not in ("lag_depth", "seed"))
    given: dict = {}
    if "seeds" in fields:  # a study: lag depths x seeds x knob values
        order = _grid_order(cells, knobs, lag_axis=not ages)
        if order is None:
            raise ConfigError(f"config: {path}: its cells.json's {len(cells)} cells are not every combination of "
                              "their lag depths, seeds and knob values in the order a study plans them (a shard's "
                              "or a part's slice of a grid?); rerun it with the command that made it")
        if knobs and "sweep" not in fields:
            raise ConfigError(f"config: {path}: its cells vary {', '.join(knobs)}, and this command takes no --sweep; "
                              f"{instead}")
        given["seeds"] = _unique(c["seed"] for c in cells)
        if not ages:  # with age weights each cell's lag depth follows its weights
            if "lag_depths" not in fields:
                raise ConfigError(f"config: {path}: this command takes no --lag-depths; {instead}")
            given["lag_depths"] = _unique(c["lag_depth"] for c in cells)
        settings.pop("lag_depth", None)
        for name in order:
            settings.pop(name, None)
        if order:
            given["sweep"] = [f"{n}=" + ",".join(_sweep_value(v) for v in _unique(c[n] for c in cells)) for n in order]
    else:  # a single run (vaco-train): one cell
        if len(cells) != 1:
            raise ConfigError(f"config: {path}: its cells.json holds {len(cells)} cells and this command runs one; "
                              f"rerun them with vaco-lag-sweep --config {path}")
        (cell,) = cells
        given["seed"] = cell["seed"]
        if not ages:
            settings["lag_depth"] = cell["lag_depth"]
        for name in knobs:
            settings[name] = cell[name]
    if "task_defaults" in fields:
        given["task_defaults"] = False  # the record holds every value the run used
    return config_tokens(cls, {**settings, **given}, path)


def config_tokens(cls: type, data: dict, path: str = "") -> list[str]:
    """Command-line tokens for ``data`` on the dataclass ``cls``: ``--name value ...`` (``--name`` /
    ``--no-name`` for a plain bool). A key that is not a field of ``cls`` is an error naming it
    (``env`` / ``method`` go to ``tasks`` / ``methods`` where the script takes those); ``None`` leaves a
    field at its default."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    tokens: list[str] = []
    unknown = []
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in fields and name in _AS_LIST and _AS_LIST[name] in fields:
            name, value = _AS_LIST[name], [value]
        if name not in fields:
            unknown.append(key)
            continue
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if hints[name] is bool:
            tokens.append(flag if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, (list, tuple)):
            tokens += [flag, *(str(v) for v in value)]
        else:
            tokens += [flag, str(value)]
    if unknown:
        raise ConfigError(f"config: {path or 'file'} has key(s) {', '.join(unknown)} that this command does not "
                          f"take; allowed keys: {', '.join(sorted(fields))}")
    return tokens


RECORD_ATTR = "_vaco_jax_rerun_record"  # set by cli.parse_args on args read from a record, with only output flags


def rerun_record(args) -> RunRecord | None:
    """The group record ``args`` were read from by ``--config`` with nothing but output flags beside
    it (``parse_args``); None otherwise."""
    return getattr(args, RECORD_ATTR, None)


def check_rerun(args, groups) -> None:
    """Read-only, before anything is written: a command given a group's own ``config.json`` (and only
    output flags) plans exactly that group: one group, the record's cells in order, its settings
    (a cell's lag depth and knobs aside, which its cells carry). Otherwise a ConfigError saying so."""
    record = rerun_record(args)
    if record is None:
        return
    path = record.path
    if len(groups) != 1:
        raise ConfigError(f"config: {path} records one group, and this command plans {len(groups)} from it; "
                          f"{_NOT_AS_RECORDED}")
    (group,) = groups
    now = _as_recorded(dataclasses.asdict(group.config))
    knobs = {k for c in record.cells for k in c} - {"lag_depth", "seed"}  # a cell's, else its config's value
    planned = [{**{k: now.get(k) for k in knobs}, **c} for c in _as_recorded([c.row() for c in group.cells])]
    if _key(planned) != _key(record.cells):
        raise ConfigError(f"config: {path} records {len(record.cells)} cell(s) and this command plans other cells "
                          f"({len(planned)}: {_cells_text(planned)}; recorded: {_cells_text(record.cells)}); "
                          f"{_NOT_AS_RECORDED}")
    carried = {"lag_depth"} | knobs
    differ = [k for k in now if k not in carried and k in record.settings
              and _key(now[k]) != _key(record.settings[k])]
    if differ:
        shown = ", ".join(f"{k}: {record.settings[k]!r} there, {now[k]!r} planned" for k in differ[:4])
        raise ConfigError(f"config: {path}: this command plans its group with other settings ({shown}); "
                          f"{_NOT_AS_RECORDED}")


_NOT_AS_RECORDED = ("this command cannot rerun it as recorded (vaco-lag-sweep reruns a study's group, vaco-train a "
                    "one-cell group)")


def _cells_text(rows: list) -> str:
    text = "; ".join(" ".join(f"{k}={v}" for k, v in r.items()) for r in rows[:3])
    return text + ("; ..." if len(rows) > 3 else "")
