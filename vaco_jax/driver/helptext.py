"""What ``--help`` says a flag's default is: the value a run uses when the flag is left out.

tyro ends a flag's help with ``(default: X)``, X its Python default; for most of the project's flags
that is ``None`` ("the preset's", "the task's", "the method's"), which says nothing. ``default_hint``
resolves it, by one rule for every command (``cli.grouped`` attaches it to each flag):

* **a study with presets** (a ``PRESETS`` dict in its module): the value the preset gives its groups,
  one per preset where they differ (``cpu: 300,000; tiny: 512``); ``--preset P --help`` shows P's
  alone. A ``Config`` setting is read from the configs the preset plans: the module's
  ``help_configs(preset)``, else ``Config.for_task(task, **the preset's sizes)`` for each of its tasks
  (what ``lag_sweep.base_config`` builds);
* **vaco-train**: Config's value, then the Gymnasium tasks whose own defaults (``config.TASK_DEFAULTS``)
  differ (``64; --env Hopper-v4, Hopper-v5: 16``); ``--env E --help`` shows E's;
* **a method's piece, option or knob**: the value of each method that reads it (``0.2 for ppo_clip,
  ...``); ``--method M --help`` shows M's;
* **anything else left unset**: what unset means (``NONE_MEANS``, the module's ``HELP_DEFAULTS``, or the
  ``default: X`` its own help line states).

``task_choices`` lists the tasks compactly from the registries (without importing Brax or Playground).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any

from vaco_jax.errors import ConfigError

# What a flag left unset (None, empty) means, by field name (a module's HELP_DEFAULTS comes first).
NONE_MEANS = {
    "max_chunks": "no limit: every chunk",
    "shard": "the whole study, in one process",
    "cell": "every planned cell",
    "max_cells_per_program": "one program per group",
    "grid_batch": "all of a device's cells at once",
    "sweep": "no sweep axis",
    "age_histogram": "no file",
    "age_weights": "unset (--lag-model ages needs them)",
    "backend": "the task's engine: mujoco for a Gymnasium task, mjx for a Brax task",
    "value_clip_epsilon": "off (no value clipping)",
    "ewma_age": "(S-1)/2 gradient steps",
    "weight_floor": "1/weight_cap",
    "units": "none: --minutes chooses the units",
    "learning_rates": "the study's grid, LEARNING_RATES",
    "methods": "every method of the chosen designs",
    "config": "no file",
    "group": "the run directory's only group",
}
# a method's pieces: names in the method's registry entry (names.METHODS)
PIECES = ("advantage_estimator", "proximal_source", "surrogate", "sample_filter")


@dataclasses.dataclass(frozen=True)
class HelpContext:
    """What the command line already says, so ``--help`` can show the one value that applies."""

    preset: str | None = None
    env: str | None = None
    method: str | None = None
    task_defaults: bool = True


def _value_after(argv: list[str], flag: str) -> str | None:
    for i, tok in enumerate(argv):
        if tok == flag and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            return argv[i + 1]
        if tok.startswith(flag + "="):
            return tok.split("=", 1)[1]
    return None


def help_context(argv: list[str]) -> HelpContext:
    return HelpContext(preset=_value_after(argv, "--preset"), env=_value_after(argv, "--env"),
                       method=_value_after(argv, "--method"), task_defaults="--no-task-defaults" not in argv)


def show(value, name: str = "") -> str:
    """A value as a flag takes it: numbers as ``number``, tuples space-separated."""
    if value is None:
        return NONE_MEANS.get(name, "unset")
    if isinstance(value, (tuple, list)):
        return " ".join(show(v) for v in value) if value else "none"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number(value)
    return str(value)


def number(value: int | float) -> str:
    """A number as every ``--help`` shows it (a default, a preset's value): an int of five digits or more
    grouped in threes by ``_`` (``300_000``, ``10_000_000``; ``512``, ``2000`` as they are), a float as
    short as it stays exact (``0.0003``, ``1e-05``). One token without spaces or commas, so a wrapped help
    line never splits it, and a value to paste back: a flag reads ``300_000`` as 300000 (Python's
    ``int``/``float``)."""
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def _join(groups: dict[str, list[str]], sep: str = "; ") -> str:
    """``{shown value: [names]}`` -> ``v1 for a, b; v2 for c``."""
    return sep.join(f"{v} for {', '.join(names)}" for v, names in groups.items())


# ----------------------------------------------------------------------------- the module a class comes from

def study_module(cls: type):
    """The module of ``cls`` or of the first base whose module defines ``PRESETS`` (a study's ``Args``
    built by ``with_config_flags`` lives in the study's module)."""
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        if isinstance(getattr(module, "PRESETS", None), dict):
            return module
    return sys.modules.get(cls.__module__)


def presets_of(cls: type) -> dict:
    """The ``PRESETS`` of the script that defined ``cls`` (or a base of it): preset -> field values."""
    return dict(getattr(study_module(cls), "PRESETS", None) or {})


# ----------------------------------------------------------------------------- per method

def method_dependent(name: str) -> bool:
    """Whether a Config field's default is each method's own (a piece, a piece's option or knob)."""
    from vaco_jax.core.knobs import KNOBS
    from vaco_jax.core.pieces import STATIC_CHOICES

    return name in PIECES or name in STATIC_CHOICES or (name in KNOBS and KNOBS[name].home == "method")


def method_values(name: str) -> dict[str, Any]:
    """``{method: the value it uses for name}`` over the registered methods that read ``name`` (a
    method's piece by registry name; a piece option or knob from the built pieces)."""
    from vaco_jax.core.methods import CUSTOM, DEFAULT_PIECES, METHODS, make_method

    out: dict[str, Any] = {}
    for m, preset in METHODS.items():
        if name in PIECES:
            out[m] = preset.piece_names()[name]
            continue
        try:
            method = make_method(m)
        except ConfigError:  # a user's method that does not build alone: say nothing about it
            continue
        for piece in (method.advantage, method.proximal, method.surrogate, method.sample_filter):
            if dataclasses.is_dataclass(piece) and name in {f.name for f in dataclasses.fields(piece)}:
                out[m] = getattr(piece, name)
                break
    if name in PIECES:
        out[CUSTOM] = DEFAULT_PIECES[name]
    return out


def by_method(name: str, ctx: HelpContext) -> str:
    from vaco_jax.core.methods import METHODS

    values = method_values(name)
    if ctx.method:
        if ctx.method in values:
            return f"(default: {show(values[ctx.method], name)} for --method {ctx.method})"
        return f"(default: not read by --method {ctx.method}, which refuses it)"
    groups: dict[str, list[str]] = {}
    for m, v in values.items():
        groups.setdefault(show(v, name), []).append(m)
    if len(groups) == 1 and set(METHODS) <= set(values):
        return f"(default: {next(iter(groups))}, every method)"
    rest = "" if set(METHODS) <= set(values) else "; no other method reads it"
    return f"(default by method: {_join(groups)}{rest})"


# ----------------------------------------------------------------------------- per task (vaco-train)

def by_task(name: str, default, ctx: HelpContext) -> str | None:
    """Config's value and the Gymnasium tasks whose own default differs (vaco-train applies them)."""
    from vaco_jax.core.config import TASK_DEFAULTS

    if not ctx.task_defaults:
        return f"(default: {show(default, name)}, --no-task-defaults)" if default is None else None
    if ctx.env:
        value = TASK_DEFAULTS.get(ctx.env, {}).get(name, default)
        return f"(default: {show(value, name)} for --env {ctx.env})"
    groups: dict[str, list[str]] = {}
    for task, values in TASK_DEFAULTS.items():
        if name in values and values[name] != default:
            groups.setdefault(show(values[name], name), []).append(task)
    if not groups:
        return f"(default: {show(default, name)})" if default is None else None
    tasks = "; ".join(f"--env {', '.join(t)}: {v}" for v, t in groups.items())
    return f"(default: {show(default, name)}; {tasks})"


# ----------------------------------------------------------------------------- per preset (a study)

def preset_configs(cls: type, preset: str) -> list[tuple[str, Any]]:
    """``[(task, Config)]``: the configs a preset's groups start from when no flag is given (the study
    module's ``help_configs(preset)``, else ``Config.for_task`` of each of its tasks with its sizes)."""
    from vaco_jax.core.config import Config

    module = study_module(cls)
    hook = getattr(module, "help_configs", None)
    if hook is not None:
        return list(hook(preset))
    spec = presets_of(cls)[preset]
    fields = {f.name for f in dataclasses.fields(Config)}
    tasks = spec.get("tasks") or ([spec["task"]] if "task" in spec else [Config().env])
    sizes = {k: v for k, v in spec.items() if k in fields and v is not None}
    return [(t, Config.for_task(t, **sizes)) for t in tasks]


def by_preset(values: dict[str, str], ctx: HelpContext) -> str:
    """``{preset: shown value}`` -> the hint: one value when every preset agrees, else one per preset."""
    if ctx.preset in values:
        return f"(default: {values[ctx.preset]} with --preset {ctx.preset})"
    if len(set(values.values())) == 1:
        return f"(default: {next(iter(values.values()))})"
    return "(default by --preset: " + "; ".join(f"{p}: {v}" for p, v in values.items()) + ")"


def _config_value_text(pairs: list[tuple[str, Any]], name: str) -> str:
    """One preset's value of a Config field over its groups' configs: one value, or one per task."""
    groups: dict[str, list[str]] = {}
    for task, config in pairs:
        tasks = groups.setdefault(show(getattr(config, name), name), [])
        if task not in tasks:
            tasks.append(task)
    if len(groups) == 1:
        return next(iter(groups))
    return ", ".join(f"{v} ({', '.join(t)})" for v, t in groups.items())


# ----------------------------------------------------------------------------- the rule

def declared_default(text: str) -> str | None:
    """The ``default X`` / ``default: X`` / ``unset: X`` / ``None: X`` a help line states (up to ``;`` or an
    unmatched ``)``)."""
    m = re.search(r"\b(?:default:?|unset:|None:) (?!\()([^;]+)", text or "")
    if not m:
        return None
    found, depth = m.group(1), 0
    for i, ch in enumerate(found):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return found[:i].strip()
    return found.strip()


def default_hint(cls: type, name: str, default, text: str, ctx: HelpContext) -> str | None:
    """The ``(default: ...)`` of flag ``name`` of ``cls`` (module doc); None keeps tyro's own (a plain
    value that is what runs)."""
    from vaco_jax.core.config import Config

    module = study_module(cls)
    own = getattr(module, "HELP_DEFAULTS", None) or {}
    if name in own:
        return f"(default: {own[name]})"
    presets = presets_of(cls)
    if ctx.preset in presets:  # --preset P --help: P's values alone
        presets = {ctx.preset: presets[ctx.preset]}
    else:
        ctx = dataclasses.replace(ctx, preset=None)
    unset = default is None or (isinstance(default, (str, tuple)) and len(default) == 0)
    config_field = name in {f.name for f in dataclasses.fields(Config)}
    if config_field and unset and method_dependent(name):
        return by_method(name, ctx)
    if presets and unset and config_field:  # the preset's own value, else what its groups' configs hold
        return by_preset({p: show(spec[name], name) if spec.get(name) is not None else
                          _config_value_text(preset_configs(cls, p), name) for p, spec in presets.items()}, ctx)
    if presets and unset and any(name in spec for spec in presets.values()):
        return by_preset({p: show(spec.get(name), name) for p, spec in presets.items()}, ctx)
    if config_field and name != "env" and "task_defaults" in {f.name for f in dataclasses.fields(cls)}:
        hint = by_task(name, default, ctx)
        if hint is not None:
            return hint
    if not unset:
        return None
    if config_field and getattr(Config(), name) is not None:  # a study that passes it on to Config when given
        return f"(default: {show(getattr(Config(), name), name)}, Config's)"
    meaning = NONE_MEANS.get(name) or declared_default(text)
    if meaning and ctx.preset and "<preset>" in meaning:
        return f"(default: {meaning.replace('<preset>', ctx.preset)} with --preset {ctx.preset})"
    if meaning:
        return f"(default: {meaning})"
    return None if isinstance(default, str) else "(default: unset)"


def rule_text(cls: type) -> str:
    """The line under a command's description that says how its defaults are shown."""
    fields = {f.name for f in dataclasses.fields(cls)}
    where = []
    if presets_of(cls):
        where.append("per --preset where presets differ (--preset P --help: P's alone)")
    if "task_defaults" in fields:
        where.append("per task where a Gymnasium task's own defaults differ (--env E --help: E's)")
    if fields & {"method", "methods"}:
        where.append("per method for a method's pieces and knobs")
    return ("Each flag's (default: ...) is the value used when it is left out" + (": " + "; ".join(where)
                                                                                   if where else "") + ".")


# ----------------------------------------------------------------------------- choices

def task_choices() -> str:
    """The tasks, compactly, from the registries (no Brax or Playground import)."""
    from vaco_jax.envs.registry import task_families

    fam = task_families()
    versions: dict[str, list[str]] = {}
    for name in fam["gymnasium"]:
        base, _, version = name.rpartition("-")
        versions.setdefault(base, []).append(version)
    gym = ", ".join(f"{b}-{'/'.join(v)}" for b, v in versions.items())
    text = (f"Gymnasium on MuJoCo's C engine: {gym}; Brax: {', '.join(fam['brax'])} (and any Brax-registered env); "
            f"{', '.join(fam['builtin'])}")
    if fam["user"]:
        text += f"; registered here: {', '.join(fam['user'])}"
    return text + "; MuJoCo Playground's DM Control tasks (extra 'playground'), e.g. CartpoleSwingup"


def choices_of(cls: type, name: str) -> tuple | None:
    """A study's own allowed values for a flag (its module's ``CHOICES``), if it declares them."""
    own = getattr(study_module(cls), "CHOICES", None) or {}
    return tuple(own[name]) if name in own else None
