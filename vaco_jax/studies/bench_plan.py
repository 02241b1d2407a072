"""The bench's plan (``vaco-bench``, ``vaco_jax.studies.bench``): the method to put through the step size x
lag protocol, loaded (a registered name, or one a Python file registers) and resolved with its knob,
grid and sizes against the committed protocol (:func:`resolve`), every name and number checked before
anything is written; the :class:`Plan` every unit, rule and report of the bench reads, with the hash of
what it covers (``bench.json``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from vaco_jax.core.config import ConfigError
from vaco_jax.studies import kit
from vaco_jax.studies.kit_steplag import REFERENCE, RULE_NUMBERS, STABILITY_REPS

GRID_POINTS, GRID_SPAN = 5, 30.0  # the protocol's grids: at least 5 points spanning 30x
READ = {"engine": ("backend",), "settings": ("total_env_steps",), "budget": ("rates_env_steps_per_s",),
        "stage1": ("seeds", "score", "surfaces", "normalisation"), "stage2": ("seeds", "arms", "cells", "rules")}


@dataclasses.dataclass(frozen=True)
class Plan:
    """The bench's plan: everything a unit, a rule or the report needs, resolved and checked."""

    p: dict  # the committed protocol
    method: str
    arm: str  # the method's arm in stage 2 (its name; suffixed when a committed arm has it)
    knob: str
    values: tuple
    size: str
    tasks: tuple
    lag_depths: tuple
    seeds: tuple
    stage2_seeds: tuple
    cells: tuple  # stage 2's cell entries ({"tasks", "lag_model", "lag_depths"})
    record: dict  # bench.json: what the plan's hash covers
    tiny: dict  # the tiny size's preset (bench.TINY) at that size; {} at the full size

    @property
    def score(self) -> str:
        return self.p["stage1"]["score"]

    @property
    def rules(self) -> dict:
        rl = dict(self.p["stage2"]["rules"])
        return {**rl, "reps": self.tiny["reps"]} if self.size == "tiny" else rl

    @property
    def stability_reps(self) -> int:
        """Stage 1's stability resamples on the stage's own seeds (the tiny size's fewer)."""
        return self.tiny["reps"] if self.size == "tiny" else STABILITY_REPS

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.record, sort_keys=True).encode()).hexdigest()


def load_method(spec: str) -> tuple[str, str]:
    """Load ``FILE.py:NAME`` (running the file registers its pieces and method); (NAME, the file's sha256)."""
    import importlib.util

    from vaco_jax.core.methods import METHODS
    path, sep, name = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not name:
        raise ConfigError(f"method_module={spec!r}: expected FILE.py:NAME (a Python file that registers method NAME)")
    if not os.path.isfile(path):
        raise ConfigError(f"method_module={spec!r}: {path} is not a file")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    module_spec = importlib.util.spec_from_file_location(f"vaco_bench_{digest[:12]}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if name not in METHODS:
        raise ConfigError(f"method_module={spec!r}: {path} registers no method {name!r} "
                          f"(register_method({name!r}, ...))")
    return name, digest


def numeric_knobs(method) -> list[str]:
    """The numeric knobs a method's pieces read (its traced fields; not the structural choices)."""
    from vaco_jax.core.pieces import STATIC_CHOICES
    return sorted({f.name for piece in method.pieces() if dataclasses.is_dataclass(piece)
                   for f in dataclasses.fields(piece) if f.metadata.get("pytree_node", True)
                   and f.name not in STATIC_CHOICES})


def check_committed(p: dict) -> None:
    """The fields of the committed protocol the bench reads (a missing one is a one-line error naming it)."""
    from vaco_jax.analysis import confirm
    missing = [f"{section}.{key}" for section, keys in READ.items() for key in keys if key not in p.get(section, {})]
    if missing:
        raise ConfigError(f"protocol: missing {', '.join(missing)} (fields the bench reads)")
    confirm.Rules(**{k: p["stage2"]["rules"][k] for k in RULE_NUMBERS})
    if REFERENCE not in p["stage2"]["arms"]:
        raise ConfigError(f"protocol stage2.arms: no {REFERENCE!r} (the reference every arm is compared with)")


def resolve(args, tiny: dict) -> Plan:
    """The plan from the flags (``bench.Args``) and the committed protocol, every name and number checked;
    ``tiny``: the tiny size's preset. Nothing written."""
    from vaco_jax.core.knobs import COMMON_KNOBS, check_knob
    from vaco_jax.core.methods import METHODS, make_method
    if bool(args.method) == bool(args.method_module):
        raise ConfigError("method: give --method NAME (a registered method) or --method-module FILE.py:NAME, "
                          "one of them")
    name, module_sha = load_method(args.method_module) if args.method_module else (args.method, None)
    if name not in METHODS:
        raise ConfigError(f"method={name!r} is not valid; allowed values: {', '.join(METHODS)} "
                          "(or --method-module FILE.py:NAME for a method of your own)")
    p, protocol_sha = kit.load_protocol(args.protocol)
    kit.check_protocol_file(check_committed, p, args.protocol)
    surfaces = p["stage1"]["surfaces"]
    by_method = [s["knob"] for s in surfaces.values() if s["method"] == name and not s.get("options")]
    knob = args.knob or METHODS[name].step_knob or (by_method[0] if by_method else "")
    own = numeric_knobs(make_method(name))
    if not knob:
        raise ConfigError(f"knob: method {name!r} has no registered step knob; give --knob (one it reads: "
                          f"{', '.join(own)})")
    if knob not in set(own) | set(COMMON_KNOBS):
        raise ConfigError(f"knob={knob!r} is not read by method={name!r}; allowed values: {', '.join(own)}, "
                          f"or a setting every method reads ({', '.join(COMMON_KNOBS)})")
    same = [s for s in surfaces.values() if s["knob"] == knob]
    values = tuple(float(v) for v in (args.grid or (same[0]["values"] if same else ())))
    if not values:
        raise ConfigError(f"grid: no committed surface is over {knob!r}; give its values with --grid V1 V2 ...")
    if args.size == "tiny" and not args.grid:
        values = tuple(sorted(values)[len(values) // 2:][:2])  # the grid's centre and the point above it
    for v in values:
        check_knob(knob, v)
    if len(set(values)) != len(values) or any(v <= 0 for v in values):
        raise ConfigError(f"grid={values}: distinct positive values (the knob's axis is logarithmic)")
    wanted = (2, 1.0) if args.size == "tiny" else (GRID_POINTS, GRID_SPAN)
    if len(values) < wanted[0] or max(values) / min(values) < wanted[1]:
        raise ConfigError(f"grid={values}: the protocol's grids have at least {wanted[0]} points spanning "
                          f"{wanted[1]:g}x; allowed values: such a grid")
    committed_arms = set(p["stage2"]["arms"])
    arm = name if name not in committed_arms else f"{name}_bench"
    if args.size == "tiny":
        sizes = dict(tasks=tiny["tasks"], lag_depths=tiny["lag_depths"], seeds=tiny["seeds"],
                     stage2_seeds=tiny["stage2_seeds"],
                     cells=({"tasks": list(tiny["tasks"]), "lag_model": "uniform",
                             "lag_depths": list(tiny["lag_depths"])},))
    else:  # the tuning tasks and lag depths of the protocol's surfaces (the committed arms' surfaces)
        sizes = dict(tasks=tuple(dict.fromkeys(t for s in surfaces.values() for t in s["tasks"])),
                     lag_depths=tuple(sorted({int(b) for s in surfaces.values() for b in s["lag_depths"]})),
                     seeds=tuple(p["stage1"]["seeds"]), stage2_seeds=tuple(p["stage2"]["seeds"]),
                     cells=tuple(p["stage2"]["cells"]))
        for t in {t for c in sizes["cells"] for t in c["tasks"]} | set(sizes["tasks"]):
            if not p["budget"]["rates_env_steps_per_s"].get(t):
                raise ConfigError(f"protocol budget.rates_env_steps_per_s: no rate for {t!r}")
    pieces = {k: str(v) for k, v in METHODS[name].piece_names().items()}
    record = {"protocol": args.protocol, "protocol_sha256": protocol_sha, "method": name, "arm": arm,
              "pieces": pieces, "options": {k: repr(v) for k, v in METHODS[name].options.items()},
              "method_module_sha256": module_sha, "knob": knob, "values": list(values), "size": args.size}
    return Plan(p, name, arm, knob, values, args.size, record=record, tiny=dict(tiny) if args.size == "tiny" else {},
                **sizes)
