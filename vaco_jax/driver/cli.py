"""The command line is the config: every ``Config`` field as a flag, with its choices and a help line.

``config_args_class(name, extra)`` builds a dataclass with the run's own fields (``extra``) followed by
every ``Config`` field (same name, type and default), each annotated with the help line declared beside
it (``names.Settings``: a setting's flag, help and default come from its one declaration) and, where the
field chooses from a registry (methods, lag models, pieces, networks ...), a ``Literal`` of the
registered names, so ``--help`` lists them and ``tyro`` rejects any other value before anything runs
(the task is checked by ``Config``; ``--help`` lists the tasks compactly). ``config_from_args(args)``
builds (and validates) the ``Config``.

``parse_args`` shows ``--help`` in groups (``grouped``), each flag ending with the value a run uses when
it is left out (``helptext.py``: per preset, task or method where it depends on one; a number as
``helptext.number`` writes it, ``300_000``) and taking what a user types (``INT``, not tyro's
``{None}|INT``: ``clean_metavar``), and reads ``--config FILE`` (``config_file.py``); ``DRIVER_FLAGS`` are the sweep
scripts' run flags (``--sweep``, ``--shard``, ``--cell``, ``--dry-run``, ...).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import os
import pathlib
import types
import typing
from typing import Annotated, Any, Literal, Optional

from vaco_jax.core.config import ACTOR_DTYPES, GRAD_CLIPS, SHUFFLES, Config, ConfigError
from vaco_jax.envs import BACKENDS
from vaco_jax.analysis import results
from vaco_jax.analysis.results import ResultsError
from vaco_jax.driver.config_file import (RECORD_ATTR, config_tokens, read_config_file, read_record,
                                         record_tokens)


def field_choices(skip: tuple | set = ()) -> dict[str, tuple]:
    """The registered names a choice field accepts (read when the CLI is built: user registrations count).

    ``skip``: fields not wanted. The env list is the costly one: naming every Brax and Playground task
    imports both packages (~6 s of a script's start on a 2-core CPU), so scripts whose tasks come from
    their own ``--tasks`` flag skip it, and a point_mass run never imports them."""
    from vaco_jax.core.lag import LAG_MODELS
    from vaco_jax.core.methods import CUSTOM, METHODS
    from vaco_jax.core.networks import ACTIVATIONS, NETWORKS
    from vaco_jax.core.pieces import PIECE_KINDS, STATIC_CHOICES

    choices = {"backend": BACKENDS, "lag_model": tuple(LAG_MODELS),
               "actor_dtype": ACTOR_DTYPES, "minibatch_shuffle": SHUFFLES, "grad_clip": GRAD_CLIPS, "network": tuple(NETWORKS), "activation": tuple(ACTIVATIONS),
               "method": tuple(METHODS) + (CUSTOM,)}
    if "env" not in skip:
        from vaco_jax.envs import available_envs

        choices["env"] = tuple(available_envs())
    choices.update({k: tuple(reg) for k, (_, _, reg) in PIECE_KINDS.items()})
    choices.update(STATIC_CHOICES)
    return {k: v for k, v in choices.items() if k not in skip}


def methods_help(allowed: tuple | None = None) -> str:
    """Every registered method (or those ``allowed``) with its one-line description (``presets.METHODS``)."""
    from vaco_jax.core.methods import CUSTOM, METHODS

    if allowed is not None:
        return "choices: " + "; ".join(f"{n}: {METHODS[n].description}" if n in METHODS else n for n in allowed)
    return "; ".join(f"{n}: {p.description}" for n, p in METHODS.items()) + f"; {CUSTOM}: the four pieces below"


def _method_names() -> list[str]:
    from vaco_jax.core.methods import METHODS

    return list(METHODS)


def _lag_models_help() -> str:
    """Each registered lag model with its help line (read when the CLI is built: user registrations count)."""
    from vaco_jax.core.lag import LAG_MODELS

    return "; ".join(f"{n}: {s.help}" for n, s in LAG_MODELS.items()) + " (docs/lag.md)"


def _help(field: dataclasses.Field) -> str:
    """A Config field's help line: the one declared beside it (``names.setting``), the lag models' own
    help after the lag model's. Its default is not part of it: ``--help`` shows the value a run uses when
    the flag is left out in the ``(default: ...)`` after it (``grouped``, ``default_hint``)."""
    text = field.metadata.get("help", "")
    return f"{text}: {_lag_models_help()}" if field.name == "lag_model" else text


def config_args_class(name: str, extra: list[tuple[str, Any, Any, str]], defaults: Config | None = None,
                      exclude: tuple = ()) -> type:
    """A dataclass: ``extra`` fields (name, type, default, help) then every Config field as a flag, but
    ``exclude`` (settings that mean nothing to this command; they keep ``defaults``' value)."""
    hints = typing.get_type_hints(Config)
    # the task is checked by Config (a one-line error listing every task); --help lists the tasks compactly
    # (task_choices) without importing Brax and Playground to name theirs (~3 s of every start)
    choices = field_choices(skip={"env"})
    base = defaults or Config()
    fields = []
    for fname, ftype, fdefault, fhelp in extra:
        fields.append((fname, Annotated[ftype, _arg(fhelp)], dataclasses.field(default=fdefault)))
    for f in dataclasses.fields(Config):
        if f.name in exclude:
            continue
        hint = hints[f.name]
        if f.name in choices:
            lit = Literal[choices[f.name]]  # type: ignore[valid-type]
            hint = Optional[lit] if getattr(base, f.name) is None or type(None) in typing.get_args(hint) else lit
        default = getattr(base, f.name)
        fields.append((f.name, Annotated[hint, _arg(_help(f))], dataclasses.field(default=default)))
    return dataclasses.make_dataclass(name, fields)


def _arg(help_text: str):
    import tyro

    return tyro.conf.arg(help=help_text)


def config_values(args, defaults: Config | None = None) -> dict:
    """The Config fields of a command's flags, not yet validated; a field the command has no flag for
    keeps ``defaults``' value."""
    base = defaults or Config()
    names = [f.name for f in dataclasses.fields(Config)]
    values = {n: getattr(args, n, getattr(base, n)) for n in names}
    for n in ("policy_hidden", "value_hidden", "age_weights"):
        if isinstance(values[n], list):
            values[n] = tuple(values[n])
    return values


def config_from_args(args, defaults: Config | None = None) -> Config:
    """The Config of a command's flags; a field the command has no flag for keeps ``defaults``' value."""
    return Config(**config_values(args, defaults))


# The tracking hooks' flags (driver/tracking.py), in DRIVER_FLAGS and vaco-train's flags
TRACKING_FLAGS: tuple[tuple[str, Any, Any, str], ...] = (
    ("wandb", bool, False, "log each chunk's curve rows to Weights & Biases: one W&B run per cell, files in the "
                           "run directory's wandb/ (extra 'wandb'; not in the identity)"),
    ("wandb_project", str, "vaco_jax", "--wandb: the W&B project"),
    ("wandb_entity", Optional[str], None, "--wandb: the W&B entity (user or team); unset: W&B's default"),
    ("wandb_mode", Optional[Literal["online", "offline"]], None,
     "--wandb: 'offline' (no network; `wandb sync RUN/wandb/offline-run-*` uploads later) or 'online'; "
     "unset: $WANDB_MODE, else offline"),
    ("capture_video", bool, False, "an MP4 of one cell's policy at each evaluation: videos/GROUP/cell-K/chunk-C.mp4 "
                                   "in the run directory (Gymnasium tasks; needs ffmpeg and OSMesa or EGL)"),
    ("capture_video_every", int, 1, "--capture-video: film every Nth evaluation (and the last)"),
    ("capture_video_cell", int, 0, "--capture-video: the cell filmed in each group (its cells.json index)"),
)
TRACKING_FLAG_NAMES = tuple(f[0] for f in TRACKING_FLAGS)

# How a sweep script runs its groups: declared here once, added by ``with_config_flags`` after the
# script's own fields (name, type, default, help)
DRIVER_FLAGS: tuple[tuple[str, Any, Any, str], ...] = (
    ("max_chunks", Optional[int], None, "stop every group after this many chunks (a time-limited job); rerun to continue"),
    ("sweep", tuple[str, ...], (), "any setting as an axis of the grid, e.g. gamma=0.99,0.995 "
                                   "learning_rate=1e-4,3e-4 num_epochs=2,4 (one program per static value)"),
    ("shard", Optional[str], None, '"I/N": run only part I (0-based) of N disjoint parts of the study (docs/scale.md)'),
    ("cell", Optional[str], None, '"K" or "GROUP:J": re-run one planned cell alone into RUN/rerun/ and compare '
                                  "(docs/scale.md)"),
    ("progress", bool, True, "a progress bar per group (--no-progress for logs)"),
    ("tensorboard", bool, False, "live metrics: TensorBoard event files in OUT/tensorboard/ (not in the identity)"),
    *TRACKING_FLAGS,
    ("max_cells_per_program", Optional[int], None, "run a larger group as parts of this many cells, one program each"),
    ("distributed", bool, False, "one sweep over several processes/hosts (jax.distributed; docs/scale.md)"),
    ("dry_run", bool, False, "print the plan (groups, cells and the --cell numbers they take), the memory and time "
                             "estimates, and exit: nothing is compiled or written (driver/dryrun.py)"),
)


def with_config_flags(base: type, name: str = "Args", exclude: tuple = ()) -> type:
    """A study script's ``Args`` dataclass plus ``DRIVER_FLAGS`` and every ``Config`` field it lacks,
    as an optional flag (None = what the preset or ``Config`` sets) with its choices and help line, so
    every setting is reachable from every script. ``exclude``: fields the script sets per group itself
    (e.g. ``env`` and ``method`` through ``--tasks`` / ``--methods``). ``config_flags(args, base)``
    returns the ones given."""
    hints = typing.get_type_hints(Config)
    own = {f.name for f in dataclasses.fields(base)} | set(exclude)
    choices = field_choices(skip=own)
    fields = _own_help(base)
    for fname, ftype, fdefault, fhelp in DRIVER_FLAGS:
        if fname not in own:
            fields.append((fname, Annotated[ftype, _arg(fhelp)], dataclasses.field(default=fdefault)))
    for f in dataclasses.fields(Config):
        if f.name in own:
            continue
        hint = hints[f.name]
        if f.name in choices:
            hint = Literal[choices[f.name]]  # type: ignore[valid-type]
        else:
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = args[0] if type(None) in typing.get_args(hint) else hint
        # None: the preset's value, else the task's or Config's; --help shows which (grouped, default_hint)
        fields.append((f.name, Annotated[Optional[hint], _arg(_help(f))], dataclasses.field(default=None)))
    if "age_histogram" not in own:
        fields.append(("age_histogram", Annotated[tuple[str, ...], _arg(AGE_HISTOGRAM_HELP)],
                       dataclasses.field(default=())))
    cls = dataclasses.make_dataclass(name, fields, bases=(base,))
    cls.__doc__ = base.__doc__
    return cls


def _own_help(base: type) -> list:
    """``base``'s own fields re-declared with their help text made explicit.

    tyro reads a field's help from the comment beside it in the class's source; a class built by
    ``make_dataclass`` has no source, and tyro then shows no help for the fields it inherits. So the
    text tyro finds on ``base`` itself is attached to each field (order and defaults unchanged)."""
    from tyro import _docstrings  # the same lookup tyro does for a class with source

    hints = typing.get_type_hints(base, include_extras=True)
    fields = []
    for f in dataclasses.fields(base):
        text = _docstrings.get_field_docstring(base, f.name, ())
        if not text or typing.get_origin(hints[f.name]) is Annotated:
            continue
        kept = {"default": f.default} if f.default is not dataclasses.MISSING else (
            {"default_factory": f.default_factory} if f.default_factory is not dataclasses.MISSING else {})
        fields.append((f.name, Annotated[hints[f.name], _arg(text)], dataclasses.field(**kept)))
    return fields


AGE_HISTOGRAM_HELP = ("lag_model='ages': the ages' weights from a CSV of samples by age (age,count; "
                      "docs/lag.md), e.g. one a real actor-learner recorded; several files: a cell each")


def study_settings(args, base: type, exclude: tuple = ()) -> tuple[dict, dict]:
    """A study script's sweep axes (``--sweep``) and fixed settings (the Config flags given, with
    ``--age-histogram`` read into ``age_weights``): ``grid.apply_sweep(groups, *study_settings(...))``."""
    from vaco_jax.driver.grid import parse_sweep
    from vaco_jax.driver.histogram import histogram_settings

    fixed = config_flags(args, base, exclude)
    files = getattr(args, "age_histogram", ())
    if files and getattr(args, "lag_model", None) not in (None, *_readers_of_age_weights()):
        raise ConfigError(f"age_histogram: read only by --lag-model {' / '.join(_readers_of_age_weights())} "
                          f"(--lag-model is {args.lag_model!r})")
    fixed, axes = histogram_settings(files, fixed, parse_sweep(args.sweep))
    return axes, fixed


def _readers_of_age_weights() -> tuple[str, ...]:
    from vaco_jax.core.lag import LAG_MODELS

    return tuple(n for n, s in LAG_MODELS.items() if s.reads_age_weights)


def config_flags(args, base: type, exclude: tuple = ()) -> dict:
    """The Config fields given on a study script's command line (those ``base`` does not define)."""
    own = {f.name for f in dataclasses.fields(base)} | set(exclude)
    out = {}
    for f in dataclasses.fields(Config):
        value = getattr(args, f.name, None)
        if f.name not in own and value is not None:
            out[f.name] = tuple(value) if isinstance(value, list) else value
    return out


# ----------------------------------------------------------------------------- --config FILE

CONFIG_FLAG = "--config"
# Flags beside a run's own config.json that leave what runs as the record says (where it goes, what is shown)
_RERUN_NEUTRAL = {"out", "progress", "max_chunks", "tensorboard", "figures", "bootstrap_reps", "shard", "cell",
                  "max_cells_per_program", "distributed", "dry_run", *TRACKING_FLAG_NAMES}


# --help's groups: every Config field is placed (a test checks it); a script's own field goes by name,
# else to "run". Flags keep their names (--lag-depth, not --lag.lag-depth).
HELP_GROUPS = {
    "run": "what runs: tasks, methods, seeds, sizes, evaluation, sweeps, shards",
    "env": "the environments and what the actors see",
    "lag": "the simulated asynchrony: lag model, depth, buffer, actors",
    "method": "the method: pieces, their knobs, the networks",
    "optimiser": "the learner's updates",
    "output": "where results go and what is shown",
}
_GROUP_OF = {
    **dict.fromkeys(("total_env_steps", "num_evals", "eval_episodes", "grid_batch", "seed", "seeds"), "run"),
    **dict.fromkeys(("env", "backend", "episode_length", "num_envs", "normalize_observations", "normalize_rewards",
                     "tasks"), "env"),
    **dict.fromkeys(("lag_model", "lag_depth", "lag_depths", "age_weights", "age_histogram", "buffer_capacity",
                     "publish_interval",
                     "envs_per_actor",
                     "partial_resync_every", "actor_dtype", "mismatch_strength", "lag_depths_b"), "lag"),
    **dict.fromkeys(("learning_rate", "learning_rates", "anneal_lr", "adam_eps", "max_grad_norm", "grad_clip",
                     "num_epochs", "num_minibatches", "minibatch_shuffle", "unroll_length"), "optimiser"),
    **dict.fromkeys(("method", "methods", "network", "policy_hidden", "value_hidden", "activation", "gamma",
                     "value_coef", "entropy_coef", "init_log_std", "value_clip_epsilon", "normalize_advantages",
                     "advantage_estimator", "proximal_source", "surrogate", "sample_filter", "variants"), "method"),
    **dict.fromkeys(("out", "progress", "tensorboard", "figures", "bootstrap_reps", "results", "runs", "html",
                     "width", "height", "fps", "table", *TRACKING_FLAG_NAMES), "output"),
}


def help_group(name: str, default: str | None = "run") -> str | None:
    """The ``--help`` group of a flag's field (``HELP_GROUPS``); a field named nowhere gets ``default``."""
    from vaco_jax.core.knobs import KNOBS
    from vaco_jax.core.pieces import STATIC_CHOICES

    if name in _GROUP_OF:
        return _GROUP_OF[name]
    if (name in KNOBS and KNOBS[name].home == "method") or name in STATIC_CHOICES:
        return "method"
    return default


CONFIG_HELP = ("a JSON or YAML file of flags (their snake_case names -> values), read first, so flags given on the "
               "command line win; a group's own config.json, with its cells.json beside it, re-runs that group's "
               "cells as recorded")


def grouped(cls: type, ctx=None) -> type:
    """``cls`` re-declared as one nested dataclass per ``HELP_GROUPS`` entry, so ``--help`` shows the
    flags in groups; ``flatten`` turns what tyro parses back into a ``cls``. Flag names, defaults and
    positionals are unchanged; each flag's help ends with the value a run uses when it is left out
    (``helptext.default_hint``: per preset, task or method where it depends on one; ``ctx``, from the
    command line, narrows it to the preset, task or method given), lists its choices where a
    registry or the study names them, and ``--config FILE`` (read by ``parse_args``) is listed too."""
    import tyro

    from vaco_jax.driver import helptext

    ctx = ctx or helptext.HelpContext()
    # a command that is no training run (vaco-render) says what its groups and --config are for itself
    module = helptext.study_module(cls)
    group_text = {**HELP_GROUPS, **(getattr(module, "HELP_GROUP_TEXT", None) or {})}
    config_help = getattr(module, "HELP_CONFIG_TEXT", None) or CONFIG_HELP
    hints = typing.get_type_hints(cls, include_extras=True)
    members: dict[str, list] = {g: [] for g in HELP_GROUPS}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if _tri_state(hint):  # None = the preset's / Config's value; given as --flag or --no-flag (parse_args)
            hint = _paired(cls, f.name, hint)
        text = _field_help(cls, f.name, hint)  # tyro finds a comment's help only on a class with source: attach it
        allowed = helptext.choices_of(cls, f.name)
        conf: dict = {}
        if f.name in ("method", "methods"):  # every registered method (or the study's own) with what it is
            text = f"{text} — {methods_help(allowed or (tuple(_method_names()) if f.name == 'methods' else None))}"
            if f.name == "methods":
                conf["metavar"] = "METHOD [METHOD ...]"
        elif f.name in ("env", "tasks"):
            text += " — choices: " + (", ".join(allowed) if allowed else helptext.task_choices())
            conf["metavar"] = "TASK [TASK ...]" if f.name == "tasks" else "TASK"
        elif allowed:
            text += " — choices: " + ", ".join(map(str, allowed))
        if "metavar" not in conf and not _has_metavar(hint):
            metavar = clean_metavar(hint)  # INT, not {None}|INT: left out, the help's (default: ...) applies
            if metavar:
                conf["metavar"] = metavar
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        if default is not dataclasses.MISSING:
            behaviour = helptext.default_hint(cls, f.name, default, text, ctx)
            if behaviour is None and _numeric(default):  # tyro's own would be 300000: one format (show)
                behaviour = f"(default: {helptext.show(default)})"
            if behaviour:
                conf["help_behavior_hint"] = behaviour
        if text:
            conf["help"] = text
        if conf:
            hint = Annotated[hint, tyro.conf.arg(**conf)]
        kept = {"default": f.default} if f.default is not dataclasses.MISSING else (
            {"default_factory": f.default_factory} if f.default_factory is not dataclasses.MISSING else {})
        members[help_group(f.name)].append((f.name, hint, dataclasses.field(**kept)))
    # --config FILE, read by parse_args before tyro parses: listed first after the positionals
    config = (CONFIG_FLAG[2:], Annotated[Optional[str], tyro.conf.arg(
        metavar="FILE", help=config_help, help_behavior_hint="(default: no file)")], dataclasses.field(default=None))
    at = next((i for i, item in enumerate(members["run"]) if item[2].default is not dataclasses.MISSING
               or item[2].default_factory is not dataclasses.MISSING), len(members["run"]))
    members["run"].insert(at, config)
    fields = []
    for g, items in members.items():
        if not items:
            continue
        sub = dataclasses.make_dataclass(f"{cls.__name__}_{g}", items)
        sub.__doc__ = group_text[g]
        # a positional without a default forces the group to be given; such groups are built without defaults
        needs = any(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                    for f in dataclasses.fields(sub))
        spec = dataclasses.field() if needs else dataclasses.field(default_factory=sub)
        fields.append((needs, (g, Annotated[sub, tyro.conf.OmitArgPrefixes, tyro.conf.arg(name=g, help=group_text[g])],
                               spec)))
    fields.sort(key=lambda item: not item[0])  # groups without a default first (a dataclass rule)
    wrapper = dataclasses.make_dataclass(cls.__name__, [f for _, f in fields])
    doc = cls.__doc__ or ""
    doc = "" if doc.startswith(cls.__name__ + "(") else doc  # make_dataclass's own doc is its signature
    wrapper.__doc__ = (doc.rstrip() + "\n\n" if doc.strip() else "") + helptext.rule_text(cls)
    wrapper._flat = cls  # type: ignore[attr-defined]
    return wrapper


def _base(hint):
    """The type under an ``Annotated`` hint (the hint itself otherwise)."""
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


_SCALAR_METAVARS = {int: "INT", float: "FLOAT", str: "STR", pathlib.Path: "PATH"}


def clean_metavar(hint) -> str | None:
    """What ``--help`` shows a flag of type ``hint`` to take, where tyro's own would say more than what a
    user types: ``INT`` for ``Optional[int]`` (tyro: ``{None}|INT``), ``{a,b}`` for ``Optional[Literal['a',
    'b']]``, ``INT [INT ...]`` for a tuple or list of ints, optional or not (tyro: ``{None}|{[INT [INT
    ...]]}``). A flag left out takes what its help's ``(default: ...)`` says, so None is no value shown to
    type (``--flag None`` still parses). None where tyro's own is kept (a plain type, a bool, a type not
    named here)."""
    inner = _base(hint)
    args = typing.get_args(inner)
    if typing.get_origin(inner) in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == len(args):
            return None
        parts = [_metavar_of(a) for a in rest]
        return None if None in parts else "|".join(parts)
    if typing.get_origin(inner) in (tuple, list, collections.abc.Sequence):
        return _metavar_of(inner)
    return None


def _metavar_of(hint) -> str | None:
    """A type's metavar as a user types it (``clean_metavar``); None for a type not named here."""
    hint = _base(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _SCALAR_METAVARS:
        return _SCALAR_METAVARS[hint]
    if hint is bool:
        return "{True,False}"
    if origin is Literal:
        return "{" + ",".join(str(a) for a in args) + "}"
    if origin in (list, collections.abc.Sequence) or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        one = _metavar_of(args[0]) if args else None
        return f"{one} [{one} ...]" if one else None
    if origin is tuple and args and Ellipsis not in args:
        parts = [_metavar_of(a) for a in args]
        return None if None in parts else " ".join(parts)
    return None


def _has_metavar(hint) -> bool:
    """Whether an ``Annotated`` hint already carries a metavar of its own (``_paired``, a script's)."""
    return typing.get_origin(hint) is Annotated and any(getattr(m, "metavar", None)
                                                        for m in typing.get_args(hint)[1:])


def _numeric(value) -> bool:
    """A number, or a non-empty tuple or list of numbers (bools are not)."""
    values = value if isinstance(value, (tuple, list)) and value else [value]
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _attached_help(hint) -> str | None:
    """The help text a ``tyro.conf.arg`` in an ``Annotated`` hint carries, if any."""
    if typing.get_origin(hint) is not Annotated:
        return None
    return next((m.help for m in typing.get_args(hint)[1:] if getattr(m, "help", None)), None)


def _field_help(cls: type, name: str, hint) -> str:
    """A field's help: the text attached to its hint, else the comment beside it in ``cls``'s source."""
    from tyro import _docstrings

    return _attached_help(hint) or _docstrings.get_field_docstring(cls, name, ()) or ""


def _tri_state(hint) -> bool:
    return set(typing.get_args(_base(hint))) == {bool, type(None)}


def _paired(cls: type, name: str, hint):
    """An ``Optional[bool]`` flag shown as ``--name {True,False}`` with its pair named (``--name`` alone
    and ``--no-name`` are translated by ``paired_tokens``); left out, it is None."""
    import tyro

    flag = name.replace("_", "-")
    return Annotated[_base(hint), tyro.conf.arg(metavar="{True,False}",
                                                help=f"{_field_help(cls, name, hint)} (--{flag} or --no-{flag})")]


def paired_tokens(cls: type, argv: list[str]) -> list[str]:
    """``--name`` (without a value) -> ``--name True`` and ``--no-name`` -> ``--name False`` for the
    tri-state booleans of ``cls``; every other token unchanged."""
    hints = typing.get_type_hints(cls, include_extras=True)
    flags = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(cls) if _tri_state(hints[f.name])}
    out = []
    for i, tok in enumerate(argv):
        if tok.startswith("--no-") and "--" + tok[5:] in flags:
            out += ["--" + tok[5:], "False"]
        elif tok in flags and (i + 1 >= len(argv) or argv[i + 1] not in ("True", "False", "true", "false")):
            out += [tok, "True"]
        else:
            out.append(tok)
    return out


def flatten(parsed, cls: type):
    """A ``grouped(cls)`` instance back as a ``cls`` (``--config``, read by ``parse_args``, is no field of it)."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {}
    for g in HELP_GROUPS:
        sub = getattr(parsed, g, None)
        if sub is not None:
            values.update({f.name: getattr(sub, f.name) for f in dataclasses.fields(sub) if f.name in names})
    return cls(**values)


def _cli(cls: type, args: list[str], ctx=None):
    import tyro

    return flatten(tyro.cli(grouped(cls, ctx), args=paired_tokens(cls, args), config=(tyro.conf.OmitArgPrefixes,)),
                   cls)


def parse_args(cls: type, argv: list[str] | None = None):
    """``tyro.cli(cls)`` with ``--help`` in groups (``grouped``) and ``--config FILE``: the file's values
    first, so flags given on the command line win."""
    import sys

    from vaco_jax.driver.helptext import help_context

    argv = list(sys.argv[1:] if argv is None else argv)
    ctx = help_context(argv)  # --help shows the defaults of the preset, task or method given beside it
    path = None
    for i, tok in enumerate(argv):
        if tok == CONFIG_FLAG:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):  # one line and exit code 2, as any bad flag
                print("error: config: --config needs a file (JSON or YAML): --config PATH", file=sys.stderr)
                raise SystemExit(2)
            path = argv[i + 1]
            argv = argv[:i] + argv[i + 2:]
            break
        if tok.startswith(CONFIG_FLAG + "="):
            path = tok.split("=", 1)[1]
            if not path:
                print("error: config: --config needs a file (JSON or YAML): --config PATH", file=sys.stderr)
                raise SystemExit(2)
            argv = argv[:i] + argv[i + 1:]
            break
    if path is None:
        return _cli(cls, argv, ctx)
    positional = argv[:1] if argv and not argv[0].startswith("-") else []  # a stage, e.g. `study.py run`
    try:
        data = read_config_file(path)
        record = read_record(path, data)
        tokens = record_tokens(cls, record) if record is not None else config_tokens(cls, data, path)
    except (ConfigError, ResultsError) as e:  # one line and exit code 2, as for any other bad flag
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    args = _cli(cls, positional + tokens + argv[len(positional):], ctx)
    fields = {f.name for f in dataclasses.fields(cls)}
    given = {_flag_name(tok, fields) for tok in argv[len(positional):] if tok.startswith("--")}
    if record is not None and given <= _RERUN_NEUTRAL:  # a rerun as recorded: checked against the plan
        object.__setattr__(args, RECORD_ATTR, record)
    return args


def _flag_name(token: str, fields: set) -> str:
    name = token[2:].split("=", 1)[0].replace("-", "_")
    return name[3:] if name.startswith("no_") and name not in fields else name


def cli_main(main, args) -> None:
    """Run a script's ``main``: a bad setting is one line on stderr and exit code 2, a damaged result
    file or checkpoint one line and exit code 3, an OS error (a full disk) one line and exit code 1
    (the environment variable VACO_JAX_DEBUG=1 shows the traceback instead). An integer returned by
    ``main`` is the exit code."""
    import sys

    from vaco_jax.driver.checkpoint import CheckpointDamaged

    from vaco_jax.driver.devices import init_distributed, use_compilation_cache, use_cpu_cores

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
