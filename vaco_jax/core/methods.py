"""Named methods: each is a choice of the four pieces of ``pieces.py`` (docs/methods.md).

    advantage estimator x proximal-policy source x surrogate x sample filter

``METHODS`` (the registry, ``presets.py``) maps a name to a ``MethodPreset``: its four pieces, a
description, its label, colour and marker, and its step-size knob. Adding a method is one entry there
(``register_method`` from outside the package) plus, at most, one piece.

``make_method(name, **options)`` builds the method's pytree. The rules, so that a run is always what
was asked for:

* a piece choice given with a preset (``sample_filter='none'`` with ``vaco``) must equal the preset's,
  else it is an error that names the preset that has those pieces, if one does;
* every other option (``clip_epsilon``, ``tv_scale``, ...) is given to the piece that has a field of
  that name; an option that no piece of the method reads is an error naming the pieces;
* ``compose`` refuses combinations in which a piece would be ignored (a proximal policy with a
  surrogate that does not read one, a filter with a surrogate it cannot filter, ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from vaco_jax.core import pieces as P
from vaco_jax.core.knobs import ConfigError, check_knob
from vaco_jax.core.pieces import PIECE_KINDS, STATIC_CHOICES, Method
from vaco_jax.core.presets import CUSTOM, METHODS, MethodPreset  # noqa: F401  (the registry, re-exported)


MAX_SEARCH_STEPS = 1000  # BAPO: the most steps of one clip bound's search (docs/corrections.md, C7)

DEFAULT_PIECES = {"advantage_estimator": "gae", "proximal_source": "behavior", "surrogate": "ppo_clip",
                  "sample_filter": "none"}


def piece_class(kind: str, choice: str | type) -> type:
    """A piece class from its registry name (``pieces.PIECE_KINDS``) or the class itself."""
    if not isinstance(choice, str):
        return choice
    registry = PIECE_KINDS[kind][2]
    if choice not in registry:
        raise ConfigError(f"{kind}={choice!r} is not valid; allowed values: {', '.join(registry)}")
    return registry[choice]


def register_method(name: str, advantage_estimator: type | str, proximal_source: type | str, surrogate: type | str,
                    sample_filter: type | str, description: str = "", label: str = "", colour: str | None = None,
                    marker: str = "o", step_knob: str | None = None, options: dict | None = None) -> MethodPreset:
    """Add a named method (pieces: registry names or a user's own classes); ``Config(method=name)``,
    the command line, figures and tables then know it (``presets.MethodPreset`` for the fields)."""
    if name == CUSTOM:
        raise ConfigError(f"method name {CUSTOM!r} is reserved")
    preset = MethodPreset(piece_class("advantage_estimator", advantage_estimator),
                          piece_class("proximal_source", proximal_source), piece_class("surrogate", surrogate),
                          piece_class("sample_filter", sample_filter), description, label, colour, marker, step_knob,
                          dict(options or {}))
    for kind, (_, base, _) in PIECE_KINDS.items():
        if not (isinstance(getattr(preset, kind), type) and issubclass(getattr(preset, kind), base)):
            raise ConfigError(f"register_method({name!r}): {kind} must be a subclass of pieces.{base.__name__}")
    METHODS[name] = preset
    return preset


def piece_fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def knob_names(method: Method | None = None) -> set[str]:
    """Every name a knob can have: the registry's (``KNOBS``), and every field of a registered piece, of a
    registered method's own piece classes and of ``method``'s pieces (a user's piece adds its own)."""
    from vaco_jax.core.knobs import KNOBS

    classes = {cls for _, _, reg in PIECE_KINDS.values() for cls in reg.values()}
    classes |= {getattr(p, kind) for p in METHODS.values() for kind in PIECE_KINDS
                if isinstance(getattr(p, kind), type)}
    names = set(KNOBS) | {f for cls in classes if dataclasses.is_dataclass(cls) for f in piece_fields(cls)}
    return names | (method_knobs(method) if method is not None else set())


def check_knob_name(name: str, method: Method | None = None) -> None:
    """A ConfigError "unknown knob" with the nearest name unless ``name`` is a knob (``knob_names``)."""
    import difflib

    names = knob_names(method)
    if name in names:
        return
    close = difflib.get_close_matches(name, sorted(names), n=1)
    raise ConfigError(f"unknown knob {name!r}" + (f" (did you mean {close[0]}?)" if close else
                                                  f"; the knobs: {', '.join(sorted(names))}"))


def _preset_with(names: dict) -> str | None:
    for n, preset in METHODS.items():
        if preset.piece_names() == names:
            return n
    return None


def make_method(name: str, **options) -> Method:
    """The method ``name`` (a key of METHODS, or 'custom') with ``options`` honoured (module doc)."""
    options = {k: v for k, v in options.items() if v is not None}
    if name != CUSTOM and name not in METHODS:
        raise ConfigError(f"method={name!r} is not valid; allowed values: {', '.join(list(METHODS) + [CUSTOM])}")
    classes: dict[str, type] = {}
    for kind in PIECE_KINDS:
        given = options.pop(kind, None)
        if name == CUSTOM:
            classes[kind] = piece_class(kind, given if given is not None else DEFAULT_PIECES[kind])
            continue
        preset_cls = piece_class(kind, getattr(METHODS[name], kind))
        if given is not None and given not in (preset_cls.name, preset_cls):
            wanted = {**METHODS[name].piece_names(), kind: getattr(given, "name", given)}
            alt = _preset_with(wanted)
            hint = f"use method={alt!r}" if alt else "use method='custom' to choose the pieces yourself"
            raise ConfigError(f"{kind}={getattr(given, 'name', given)!r} conflicts with method={name!r} "
                              f"(which uses {preset_cls.name!r}); {hint}")
        classes[kind] = preset_cls
    piece_names = ", ".join(f"{k}={c.name!r}" for k, c in classes.items())
    if name != CUSTOM:
        _apply_preset_options(name, options)

    # π_old of the revised EWMA is the EWMA itself: it imposes the surrogate's old-logit source.
    imposed = classes["proximal_source"].old_logit_source
    if imposed is not None and "old_logit_source" in piece_fields(classes["surrogate"]):
        given = options.get("old_logit_source")
        if given is not None and given != imposed:
            raise ConfigError(f"old_logit_source={given!r} would be ignored: proximal_source="
                              f"{classes['proximal_source'].name!r} supplies pi_old itself")
        options["old_logit_source"] = imposed

    per_piece: dict[str, dict] = {kind: {} for kind in classes}
    for opt, value in options.items():
        homes = [kind for kind, cls in classes.items() if opt in piece_fields(cls)]
        if not homes:
            check_knob_name(opt)  # a name no piece has: a typo, not a knob of another method
            readers = sorted({f"{kind}={cls.name!r}" for kind, (_, _, reg) in PIECE_KINDS.items()
                              for cls in reg.values() if opt in piece_fields(cls)})
            where = f"; it is read by {', '.join(readers)}" if readers else ""
            raise ConfigError(f"{opt}={value!r} is not read by method={name!r} ({piece_names}){where}")
        for kind in homes:
            per_piece[kind][opt] = value
    pieces = {kind: cls(**per_piece[kind]) for kind, cls in classes.items()}
    return compose(pieces["advantage_estimator"], pieces["proximal_source"], pieces["surrogate"],
                   pieces["sample_filter"], name=name)


def _apply_preset_options(name: str, options: dict) -> None:
    """The preset's own option values (``MethodPreset.options``) into ``options``: a structural one must
    not be contradicted (it is what makes the method); a number is a default the caller may change."""
    for opt, value in METHODS[name].options.items():
        given = options.get(opt)
        if opt in STATIC_CHOICES and given is not None and given != value:
            wanted = {k: v for k, v in METHODS[name].options.items() if k in STATIC_CHOICES and k != opt}
            alt = [n for n, p in METHODS.items() if n != name and p.piece_names() == METHODS[name].piece_names()
                   and p.options.get(opt, given) == given
                   and all(p.options.get(k) == v for k, v in wanted.items())]
            hint = f"; method={alt[0]!r} has {opt}={given!r}" if alt else ""
            raise ConfigError(f"{opt}={given!r} conflicts with method={name!r} (which sets {opt}={value!r}){hint}")
        options.setdefault(opt, value)


def compose(advantage: Any, proximal: Any, surrogate: Any, sample_filter: Any, name: str = CUSTOM) -> Method:
    """A method from four piece instances, refusing combinations in which a piece would be ignored."""
    method = Method(advantage=advantage, proximal=proximal, surrogate=surrogate, sample_filter=sample_filter,
                    name=name)
    check_method(method)
    return method


def check_method(method: Method) -> None:
    """Compatibility of the pieces and the allowed values of their options and (concrete) numbers."""
    for kind, (attr, base, _) in PIECE_KINDS.items():
        piece = getattr(method, attr)
        if not isinstance(piece, base):
            raise ConfigError(f"{kind}: {piece!r} is not a pieces.{base.__name__}")
    for kind, (attr, _, _) in PIECE_KINDS.items():
        piece = getattr(method, attr)
        missing = [q for q in (getattr(piece, "reads", None) or ()) if q not in P.PROVIDED[kind]]
        if missing:
            raise ConfigError(f"{kind}={piece.name!r} reads {', '.join(map(repr, missing))}, which the rollout does "
                              f"not provide to a {kind.replace('_', ' ')} (it provides: {', '.join(P.PROVIDED[kind])})")
    adv, prox, sur, filt = method.pieces()
    if sur.needs_every_step and not adv.every_step:
        raise ConfigError(f"surrogate={sur.name!r} needs an every-step estimator (advantage_estimator="
                          f"'vtrace_every_step'), got advantage_estimator={adv.name!r}")
    if adv.every_step and not sur.needs_every_step:
        raise ConfigError(f"advantage_estimator={adv.name!r} recomputes advantages inside the loss, which only "
                          f"surrogate='impala' does; surrogate={sur.name!r} would ignore it")
    if not isinstance(prox, P.Behavior) and not sur.reads_proximal:
        raise ConfigError(f"proximal_source={prox.name!r} would be ignored by surrogate={sur.name!r} "
                          "(only a surrogate that reads a proximal policy, e.g. 'decoupled', uses one)")
    if not isinstance(filt, P.NoFilter) and not sur.filterable:
        raise ConfigError(f"sample_filter={filt.name!r} would be ignored by surrogate={sur.name!r} "
                          "(only a filterable surrogate, e.g. 'is_pg', drops samples from its gradient)")
    old = sur.old_logits()
    if (old == "ewma_revised") != (prox.old_logit_source == "ewma_revised"):
        raise ConfigError(f"old_logit_source='ewma_revised' and proximal_source='ewma_revised' go together "
                          f"(got old_logit_source={old!r}, proximal_source={prox.name!r})")
    floor = getattr(sur, "weight_floor", None)
    if floor is not None and getattr(sur, "weight_cap_mode", None) != "band":
        raise ConfigError(f"weight_floor={floor!r} is read only with weight_cap_mode='band' "
                          f"(got weight_cap_mode={sur.weight_cap_mode!r})")
    if floor is not None and _concrete(floor) and _concrete(sur.weight_cap) and float(floor) > float(sur.weight_cap):
        raise ConfigError(f"weight_floor={floor!r} is above weight_cap={sur.weight_cap!r}: the band would drop every "
                          "sample; allowed values: weight_floor <= weight_cap")
    for start, stop, step in (("clip_low_start", "clip_low_max", "clip_low_step"),
                              ("clip_high_start", "clip_high_max", "clip_high_step")):  # BAPO's search ranges
        a, b, d = (getattr(sur, n, None) for n in (start, stop, step))
        if a is None or b is None or not (_concrete(a) and _concrete(b)):
            continue
        for n, v in ((start, a), (stop, b), (step, d)):  # each in its own range first: that error is the clearer
            if v is not None and _concrete(v):
                check_knob(n, v)
        if float(a) > float(b):
            raise ConfigError(f"{start}={a!r} is above {stop}={b!r}: the search range would be empty; "
                              f"allowed values: {start} <= {stop}")
        if d is not None and _concrete(d) and float(d) > 0 and (float(b) - float(a)) / float(d) > MAX_SEARCH_STEPS:
            raise ConfigError(f"{step}={d!r} takes more than {MAX_SEARCH_STEPS} steps from {start}={a!r} to "
                              f"{stop}={b!r} (every gradient step searches them one by one); allowed values: "
                              f"{step} >= ({stop} - {start})/{MAX_SEARCH_STEPS}")
    for piece in method.pieces():
        if not dataclasses.is_dataclass(piece):
            continue
        for f in dataclasses.fields(piece):
            value = getattr(piece, f.name)
            if f.name in STATIC_CHOICES:
                if value not in STATIC_CHOICES[f.name]:
                    raise ConfigError(f"{f.name}={value!r} is not valid; allowed values: "
                                      f"{', '.join(STATIC_CHOICES[f.name])}")
            elif f.metadata.get("pytree_node", True) and value is not None and _concrete(value):
                check_knob(f.name, value)


def _concrete(value) -> bool:
    if isinstance(value, (int, float, np.integer, np.floating)):
        return True
    try:
        np.asarray(value)
        return True
    except Exception:  # a tracer
        return False


def method_knobs(method: Method) -> set[str]:
    """Names of every option the method's pieces read (numbers and structural options)."""
    return {f.name for piece in method.pieces() if dataclasses.is_dataclass(piece)
            for f in dataclasses.fields(piece)}
