"""A new fix through the step size x lag study's committed protocol, in one command (``vaco-bench``).

    vaco-bench --method spo --dry-run                  # the plan and its cost in CPU-hours; writes nothing
    vaco-bench --method spo --minutes 80               # the next units that fit in 80 minutes (rerun to go on)
    vaco-bench --method-module my_fix.py:my_fix        # a method composed of pieces defined outside the package

Given a method (a registered name, or one that a Python file registers when it is loaded), the bench
runs the protocol of ``results/steplag/protocol.json`` on it, as the committed methods went through it:

1. **Surface** (stage 1's rules, ``vaco_jax.analysis.surfaces``): the method's step knob over a grid
   (``--grid``; default: the protocol's grid of the committed surface with the same knob) x the tuning
   tasks and lag depths of the protocol's surfaces x stage 1's seeds; the lag-robust setting and its
   stability; one point beyond an edge where the edge rule asks for it, and the stability rule's added
   seeds below its threshold (units ``surface/<task>``, ``extend/<task>/<value>``, ``seeds/<task>``).
2. **Confirmation** (stage 2's cells and rules, ``vaco_jax.analysis.confirm``): the method at its
   lag-robust setting on stage 2's fresh seeds (units ``stage2/<task>/<arm>/<lag model>``), compared
   with the committed PPO-Clip runs of ``results/steplag/stage2`` (they ran in other programs and on
   other CPUs: the comparison is statistical, run against run). The primary family is the committed
   one with this method's tests added, Holm over all of them.
3. **Report** (once every unit has finished, never before): ``report.md`` beside the units' tables —
   the surface figure, the verdict table beside the committed methods' verdicts, the cost measured.

Each unit is one compiled group run and collected by the study kit (``vaco_jax.studies.kit``): its
tables and a manifest line with the hash of the bench's plan (``bench.json``: the committed protocol's
hash, the method, its module's hash, the knob and the grid) and the CPU that ran it, so a stopped bench
resumes where it stopped and a changed plan needs ``--deviation``.

``--size tiny`` runs the same machinery in about a minute on the pure-JAX ``point_mass`` task (2 lag
depths, 2 seeds, 2 grid values, 4 fresh seeds, 2,048 env steps a run): the committed reference arms have
no runs there, so PPO-Clip at the committed stage-2 setting is run beside it at that size as their stand-in (its mean
at B = 1 is both stages' scale), and the edge and stability rules are reported but add no units (a
2-point grid always has its optimum at an edge).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from typing import Literal

from vaco_jax.core.config import Config, ConfigError
from vaco_jax.studies import kit

COMMITTED = os.path.join("results", "steplag")
PROTOCOL = os.path.join(COMMITTED, "protocol.json")
REFERENCE = "ppo_clip"  # stage 2's reference arm
MORE_SEEDS = (3, 4, 5)  # the protocol's stage1.stability.more_seeds
STABILITY_REPS = 2000  # the protocol's stage1.stability.rule
LOG_LOG_KNOBS = ("weight_cap",)  # a grid log-spaced in log v (protocol.md: a cap acting through log C)
GRID_POINTS, GRID_SPAN = 5, 30.0  # the protocol's grids: at least 5 points spanning 30x
READ = {"engine": ("backend",), "settings": ("total_env_steps",), "budget": ("rates_env_steps_per_s",),
        "stage1": ("seeds", "score", "surfaces", "normalisation"), "stage2": ("seeds", "arms", "cells", "rules")}
RULE_NUMBERS = ("margin", "retention_margin", "alpha", "floor", "reps", "seed", "confidence", "equivalence_confidence")
# --size tiny: point_mass, where 2,048 steps at a 10x learning rate take PPO-Clip well above the random policy
# (its scale needs that); stage 2's cells are as many as a surface's, so its programs compile once
TINY = {"tasks": ("point_mass",), "lag_depths": (1, 4), "seeds": (0, 1), "stage2_seeds": (200, 201, 202, 203),
        "reps": 200, "settings": {"num_envs": 8, "unroll_length": 16, "total_env_steps": 8 * 16 * 16, "num_evals": 4,
                                  "eval_episodes": 4, "episode_length": 50, "num_epochs": 2, "num_minibatches": 2,
                                  "buffer_capacity": 4, "learning_rate": 3e-3},
        "unit_seconds": 20.0}  # a tiny unit: mostly compilation (BENCHMARKS.md has no rate for it)


@dataclasses.dataclass
class Args:
    """Put a method through the step size x lag study's committed protocol: its surface, its lag-robust
    setting, the confirmatory runs, its verdicts beside the committed methods'."""

    method: str = ""  # a registered method (vaco-train --help lists them), or the name --method-module registers
    method_module: str = ""  # FILE.py:NAME: a Python file that registers its pieces and method NAME when loaded
    knob: str = ""  # the step knob the surface is over
    grid: tuple[float, ...] = ()  # the knob's values (the protocol's rule: at least 5 spanning 30x)
    size: Literal["full", "tiny"] = "full"  # full: the protocol's sizes; tiny: point_mass, a minute (a smoke run)
    out: str = ""  # where the units' tables, the manifest, bench.json and report.md go (run directories: OUT/runs)
    minutes: float | None = None  # run the next unfinished units whose estimates fit in this, at least one
    units: tuple[str, ...] = ()  # run these units (names as --dry-run prints them) instead of --minutes
    protocol: str = PROTOCOL  # the committed protocol
    committed: str = COMMITTED  # the committed results: stage 2's reference arms and verdicts
    deviation: str = ""  # record a change of the bench's plan since earlier units ran (text, dated)
    progress: bool = True  # a progress bar per group (--no-progress for logs)
    max_chunks: int | None = None  # stop every group after this many chunks; rerun to continue
    dry_run: bool = False  # print the plan and its cost in CPU-hours, then exit; nothing compiled or written


HELP_DEFAULTS = {  # --help (driver/helptext.py)
    "method": "none: give --method or --method-module", "method_module": "none", "minutes": "none: every unit",
    "knob": "the method's registered step knob, else the knob of its committed surface",
    "grid": "the protocol's grid of the committed surface with the same knob (--size tiny: its centre and the "
            "point above)", "out": "runs/bench/METHOD", "max_chunks": "none: to the end"}


@dataclasses.dataclass
class Call:
    """What the kit reads of a call (``results``/``runs``) and ``run_study`` records of it."""

    method: str
    size: str
    results: str
    runs: str
    protocol: str
    minutes: float | None
    units: tuple
    deviation: str
    progress: bool
    max_chunks: int | None
    dry_run: bool = False


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

    @property
    def score(self) -> str:
        return self.p["stage1"]["score"]

    @property
    def rules(self) -> dict:
        rl = dict(self.p["stage2"]["rules"])
        return {**rl, "reps": TINY["reps"]} if self.size == "tiny" else rl

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.record, sort_keys=True).encode()).hexdigest()


# ----------------------------------------------------------------------------- the plan

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


def resolve(args: Args) -> Plan:
    """The plan from the flags and the committed protocol, every name and number checked; nothing written."""
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
        sizes = dict(tasks=TINY["tasks"], lag_depths=TINY["lag_depths"], seeds=TINY["seeds"],
                     stage2_seeds=TINY["stage2_seeds"],
                     cells=({"tasks": list(TINY["tasks"]), "lag_model": "uniform",
                             "lag_depths": list(TINY["lag_depths"])},))
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
    plan = Plan(p, name, arm, knob, values, args.size, record=record, **sizes)
    from vaco_jax.driver import grid
    for u in units(plan, None):  # every config composes, every cell is valid: before anything is written
        grid.check_cells(u.group.cells, u.name)
    return plan


def config(plan: Plan, task: str, method: str, lag_model: str = "uniform") -> Config:
    settings = {k: tuple(v) if isinstance(v, list) else v for k, v in plan.p["settings"].items()}
    if plan.size == "tiny":
        return Config(env=task, method=method, **{**settings, **TINY["settings"], "lag_model": lag_model})
    return Config(env=task, method=method, backend=plan.p["engine"]["backend"], **{**settings, "lag_model": lag_model})


def unit_minutes(plan: Plan, task: str, runs: int) -> float:
    """A unit's estimate: at the protocol's measured rate for its task, times the pace stage 1 measured."""
    if plan.size == "tiny":
        return TINY["unit_seconds"] / 60.0
    b = plan.p["budget"]
    pace = float(plan.p["stage2"].get("budget", {}).get("pace", 1.0))
    return pace * runs * plan.p["settings"]["total_env_steps"] / b["rates_env_steps_per_s"][task] / 60.0


def _unit(plan: Plan, name: str, stage: str, cfg: Config, cells: list, subdir: str) -> kit.Unit:
    from vaco_jax.driver import grid
    return kit.Unit(name, stage, grid.Group(cfg, tuple(cells), subdir, name), len(cells),
                    unit_minutes(plan, cfg.env, len(cells)))


def unit_dir(name: str) -> str:
    """A unit's folder under the results (and the run directories), from its name alone."""
    kind, *rest = name.split("/")
    where = {"surface": lambda t: os.path.join("surface", t),
             "seeds": lambda t: os.path.join("surface", t, "more_seeds"),
             "extend": lambda t, v: os.path.join("surface", t, f"extend={v}"),
             "stage2": lambda t, a, m: os.path.join("stage2", t, a, m)}
    try:
        return where[kind](*rest)
    except (KeyError, TypeError):
        raise ConfigError(f"manifest unit {name!r} is not a unit of the bench; allowed kinds: "
                          f"{', '.join(where)}") from None


def units(plan: Plan, results_dir: str | None) -> list[kit.Unit]:
    """Every unit known now, in order: (tiny) the reference stand-in, the surfaces, the extensions and
    added seeds the rules ask for, then stage 2 once the lag-robust setting is decided (``results_dir``
    None: every kind of unit, stage 2 at the grid's first value, to check that each composes)."""
    from vaco_jax.driver import grid
    out = []
    if plan.size == "tiny":  # PPO-Clip at its committed stage-2 setting: the reference arms' stand-in
        for c in plan.cells:
            for t in c["tasks"]:
                out.append(_unit(plan, f"stage2/{t}/{REFERENCE}/{c['lag_model']}", "stage2",
                                 config(plan, t, REFERENCE, c["lag_model"]),
                                 grid.grid(c["lag_depths"], plan.stage2_seeds,
                                           clip_epsilon=[float(plan.p["stage2"]["arms"][REFERENCE])]),
                                 os.path.join(t, REFERENCE, c["lag_model"])))
    for t in plan.tasks:
        out.append(_unit(plan, f"surface/{t}", "surface", config(plan, t, plan.method),
                         grid.grid(plan.lag_depths, plan.seeds, **{plan.knob: list(plan.values)}), t))
    st = stage1(plan, results_dir) if results_dir else {"run_points": [], "run_noisy": [], "state": "check"}
    for v in st["run_points"]:
        for t in plan.tasks:
            out.append(_unit(plan, f"extend/{t}/{v:g}", "surface", config(plan, t, plan.method),
                             grid.grid(plan.lag_depths, plan.seeds, **{plan.knob: [v]}),
                             os.path.join(t, f"extend={v:g}")))
    for t in plan.tasks if st["run_noisy"] else ():
        out.append(_unit(plan, f"seeds/{t}", "surface", config(plan, t, plan.method),
                         grid.grid(plan.lag_depths, MORE_SEEDS, **{plan.knob: st["run_noisy"]}),
                         os.path.join(t, "more_seeds")))
    if st["state"] in ("decided", "check"):
        value = st["value"] if st["state"] == "decided" else plan.values[0]
        for c in plan.cells:
            for t in c["tasks"]:
                out.append(_unit(plan, f"stage2/{t}/{plan.arm}/{c['lag_model']}", "stage2",
                                 config(plan, t, plan.method, c["lag_model"]),
                                 grid.grid(c["lag_depths"], plan.stage2_seeds, **{plan.knob: [value]}),
                                 os.path.join(t, plan.arm, c["lag_model"])))
    return out


# ----------------------------------------------------------------------------- stage 1's rules

def table_rows(base: str) -> list[dict]:
    """Every ``scores.csv`` row under ``base`` (verified)."""
    from vaco_jax.analysis import results
    out = []
    for root, _, files in sorted(os.walk(base)) if os.path.isdir(base) else []:
        if "scores.csv" in files:
            out += results.read_table(os.path.join(root, "scores.csv"))
    return out


def stage2_rows(results_dir: str) -> list[dict]:
    """Every stage-2 run under ``results_dir/stage2/<task>/<arm>/<lag model>``, with its arm and lag model."""
    return kit.placed_rows(os.path.join(results_dir, "stage2"), ("arm", "lag_model"))


def stage2_scale(rows: list[dict], random_dir: str, score: str) -> dict:
    """Stage 2's normalisation: ``{task: (random, reference)}``, random the uniform-random return measured
    beside the reference runs (``random_dir/stage2``), reference the mean score of PPO-Clip at B = 1
    (uniform lag, diverged runs left out); a task lacking either, or whose reference is not above random,
    has none."""
    import numpy as np

    from vaco_jax.analysis import results
    from vaco_jax.analysis.tables import is_diverged
    random = results.load_random_scores(os.path.join(random_dir, "stage2")) or {}
    out = {}
    for task in sorted({r["env"] for r in rows}):
        ref = [float(r[score]) for r in rows if r["env"] == task and r["arm"] == REFERENCE
               and r["lag_model"] == "uniform"
               and int(r["lag_depth"]) == 1 and not is_diverged(r) and np.isfinite(float(r[score]))]
        if ref and task in random and float(np.mean(ref)) > float(random[task]):
            out[task] = (float(random[task]), float(np.mean(ref)))
    return out


def stage1_scale(plan: Plan, results_dir: str) -> dict:
    """Stage 1's fixed scale per tuning task (the protocol's); at the tiny size, the stand-in's stage-2 scale."""
    if plan.size == "tiny":
        return stage2_scale(stage2_rows(results_dir), results_dir, plan.score)
    n = plan.p["stage1"]["normalisation"]
    return {t: (n["random"][t], n["reference"][t]) for t in plan.tasks}


def stage1(plan: Plan, results_dir: str) -> dict:
    """Stage 1's rules on the surface's committed rows: ``state`` ("incomplete", "pending" or "decided"),
    the lag-robust ``value`` with its ``choice`` and ``stability``, the per-lag ``optima``, the extension
    ``points`` and within-noise values (``noisy``) the rules ask for, those of them that run as units
    (``run_points``, ``run_noisy``; none at the tiny size), the ``rows`` and the ``contest``."""
    from vaco_jax.analysis import surfaces
    rows = [{**r, "value": float(r[plan.knob])} for r in table_rows(os.path.join(results_dir, "surface"))]
    base = [r for r in rows if int(r["seed"]) in plan.seeds]
    norm = stage1_scale(plan, results_dir)
    out = {"rows": rows, "norm": norm, "state": "incomplete", "value": None, "points": [], "noisy": [],
           "run_points": [], "run_noisy": [], "contest": f"every value on seeds {' '.join(map(str, plan.seeds))}"}
    expected = len(plan.tasks) * len(plan.lag_depths) * len(plan.seeds)
    values_run = sorted({r["value"] for r in base})
    short = [v for v in values_run if sum(r["value"] == v for r in base) < expected]
    if not set(plan.values) <= set(values_run) or set(short) & set(plan.values):
        return out
    if set(plan.tasks) - set(norm):  # (tiny: the stand-in's PPO-Clip did not beat the random policy)
        return {**out, "state": f"no scale for {', '.join(sorted(set(plan.tasks) - set(norm)))}"}
    tiny = plan.size == "tiny"
    extended = [v for v in values_run if v not in plan.values]  # every extension run so far stays a unit
    if short:  # an extension is in on some tasks only: its other units run first
        return {**out, "state": "pending", "points": short, "run_points": extended}
    optima = surfaces.per_lag_optima(base, plan.score, norm)
    grid_lo, grid_hi = min(plan.values), max(plan.values)
    done = {"low": sum(v < grid_lo for v in values_run), "high": sum(v > grid_hi for v in values_run)}
    points = surfaces.edge_extensions(values_run, [surfaces.robust_choice(base, plan.score, norm)["value"]]
                                      + list(optima.values()), done, in_log=plan.knob in LOG_LOG_KNOBS)
    out.update(points=points, run_points=[] if tiny else sorted(set(extended) | set(points)), optima=optima)
    if points and not tiny:
        return {**out, "state": "pending"}
    contest = base
    stab = surfaces.stability(base, plan.score, norm, reps=TINY["reps"] if tiny else STABILITY_REPS)
    if not stab["stable"]:
        out["noisy"] = list(stab["within_noise"])
        have = {(r["env"], int(r["lag_depth"]), int(r["seed"]), r["value"]) for r in rows}
        added = all((t, b, s, v) in have for t in plan.tasks for b in plan.lag_depths for s in MORE_SEEDS
                    for v in out["noisy"])
        if not tiny and not added:
            return {**out, "state": "pending", "run_noisy": out["noisy"]}
        if added:  # the rule and its stability once more, among the values within noise on every seed
            contest = [r for r in rows if r["value"] in out["noisy"]]
            out["run_noisy"] = out["noisy"]
            out["contest"] = (f"values within noise {' '.join(f'{v:g}' for v in out['noisy'])} on seeds "
                              f"{' '.join(map(str, plan.seeds + MORE_SEEDS))}")
            stab = surfaces.stability(contest, plan.score, norm, reps=STABILITY_REPS)
    choice = surfaces.robust_choice(contest, plan.score, norm)
    if choice["value"] is None:
        return {**out, "state": "no value allowed", "choice": choice}
    return {**out, "state": "decided", "value": choice["value"], "choice": choice, "stability": stab}


# ----------------------------------------------------------------------------- stage 2's rules

def verdicts(plan: Plan, results_dir: str, committed: str) -> dict:
    """Stage 2's rules with this method's arm added: {'primary' (the family of every committed arm and
    this one, Holm over all), 'per_task' and 'shape' (this arm's pairs), 'left_out', 'unscaled'}. The
    reference runs are the committed ones (``committed/stage2``) at the full size, the stand-in's at the
    tiny size; the scale is theirs."""
    from vaco_jax.analysis import confirm
    tiny = plan.size == "tiny"
    rl = plan.rules
    r = confirm.Rules(**{k: rl[k] for k in RULE_NUMBERS})
    ours = stage2_rows(results_dir)
    every = ours if tiny else stage2_rows(committed) + [x for x in ours if x["arm"] == plan.arm]
    norm = stage2_scale(every, results_dir if tiny else committed, plan.score)
    got = [x for x in every if x["env"] in norm]
    arms = list(dict.fromkeys([REFERENCE] + ([] if tiny else list(plan.p["stage2"]["arms"])) + [plan.arm]))
    lag_cells = list(dict.fromkeys((c["lag_model"], int(b)) for c in plan.cells for b in c["lag_depths"]))
    retention = (min(plan.lag_depths), max(plan.lag_depths)) if tiny else tuple(rl["retention_lags"])
    out = {"primary": confirm.primary(got, plan.score, norm, arms, lag_cells, retention, r),
           "per_task": confirm.per_task(got, plan.score, norm, [REFERENCE, plan.arm], lag_cells, r),
           "left_out": confirm.left_out([x for x in got if x["arm"] == plan.arm], plan.score),
           "unscaled": sorted({x["env"] for x in every} - set(norm)), "shape": None}
    shape = rl["shape"]
    if {(m, int(shape["lag_depth"])) for m in shape["models"]} <= set(lag_cells):
        s = confirm.shape_dependence(got, plan.score, norm, arms, int(shape["lag_depth"]), tuple(shape["models"]), r)
        out["shape"] = {**s, "pairs": [q for q in s["pairs"] if plan.arm in q["pair"].split(" - ")]}
    return out


def committed_cpus(committed: str) -> str:
    """The CPU models that ran the committed stage-2 runs (their ``run.json``)."""
    from vaco_jax.analysis import results
    path = os.path.join(committed, "stage2", "run.json")
    models = {m.get("cpu") for m in results.read_json(path).get("machines", [])} if os.path.exists(path) else set()
    return ", ".join(sorted(m for m in models if m)) or "not recorded"


def committed_verdicts(committed: str) -> dict:
    """``{(test, arm, lag model, B): row}`` of the committed stage-2 primary family."""
    from vaco_jax.analysis import results
    path = os.path.join(committed, "stage2_verdicts.csv")
    rows = results.read_table(path) if os.path.exists(path) else []
    return {(r["test"], r["arm"], r["lag_model"], int(r["lag_depth"])): r for r in rows if r["family"] == "primary"}


# ----------------------------------------------------------------------------- the report

def _interval(r: dict) -> str:
    return f"{r['point']:.2f} [{r['low']:.2f}, {r['high']:.2f}]" if "point" in r else "–"


def cost_lines(plan: Plan, results_dir: str) -> list[str]:
    """The cost measured: each unit's seconds and CPU (the manifest), in CPU-hours at this machine's cores."""
    rows = kit.manifest(results_dir)
    cores = os.cpu_count() or 1
    seconds = sum(float(m["seconds_this_session"]) for m in rows)
    cpus = sorted({m.get("cpu") or "not recorded" for m in rows})
    est = sum(float(m["estimated_minutes"]) for m in rows) / 60.0
    return [f"{len(rows)} units, {sum(int(m['runs']) for m in rows)} runs: {seconds / 3600:.2f} h measured "
            f"(the plan's estimate {est:.2f} h), {seconds * cores / 3600:.2f} CPU-hours at {cores} cores; "
            f"CPU: {', '.join(cpus) or 'none yet'}"
            + ("" if plan.size == "tiny" else "; the reused committed runs not counted") + "."]


def report(plan: Plan, results_dir: str, committed: str) -> str:
    """``report.md`` (with the surface figure and the tables ``choice.csv`` and ``verdicts.csv``) from every
    finished unit; returns its text."""
    from vaco_jax.analysis import results, surfaces
    from vaco_jax.analysis.plotting import save_figure
    from vaco_jax.core.methods import METHODS
    st = stage1(plan, results_dir)
    v = verdicts(plan, results_dir, committed)
    label = METHODS[plan.method].label or plan.method
    tiny = plan.size == "tiny"
    fig = surfaces.draw_surface(st["rows"], plan.score, st["norm"], plan.knob, f"{label}: AUC against {plan.knob}",
                                st["value"])
    save_figure(fig, results_dir, "surface", results_dir)
    stab, choice = st["stability"], st["choice"]
    r_text = ", ".join(f"{k:g}: {x:.3f}" for k, x in choice["R"].items())
    optima = ", ".join(f"B = {b}: " + ("every value equal" if x is None else f"{x:g}") for b, x in st["optima"].items())
    lines = [f"# {label} through the step size × lag protocol", "",
             f"Method `{plan.method}` ({', '.join(f'{k}={x}' for k, x in plan.record['pieces'].items())}), knob "
             f"`{plan.knob}`, grid {' '.join(f'{x:g}' for x in plan.values)}; protocol `{plan.record['protocol']}` "
             f"(sha256 {plan.record['protocol_sha256'][:12]}…); the bench's plan `bench.json` "
             f"(sha256 {plan.digest[:12]}…).",
             ""]
    if tiny:
        lines += ["**Tiny size** (a smoke run of the machinery, not evidence): `point_mass`, B ∈ "
                  f"{{{', '.join(map(str, plan.lag_depths))}}}, seeds {', '.join(map(str, plan.seeds))}, "
                  f"{TINY['settings']['total_env_steps']} env steps a run. The committed reference arms have no runs "
                  "at this size: PPO-Clip at its committed stage-2 setting ran here, beside this method, as their "
                  "stand-in, and its mean at B = 1 is both stages' scale. The edge and stability rules are reported, "
                  "and add no units at this size.", ""]
    lines += ["## Stage 1: the surface", "", "![surface](surface.png)", "",
              f"Lag-robust `{plan.knob}` = **{st['value']:g}** (stability {stab['share']:.2f}, threshold 0.8; picks "
              + ", ".join(f"{k:g}: {x:.2f}" for k, x in stab["picks"].items()) + f"), from {st['contest']}. "
              f"R per value: {r_text}. Per-lag optima: {optima}."]
    if choice["excluded"]:
        lines.append("Excluded: " + "; ".join(f"{k:g} ({', '.join(x)})" for k, x in choice["excluded"].items()) + ".")
    asked = ([f"extensions {' '.join(f'{x:g}' for x in st['points'])}"] if st["points"] else []) + (
        [f"more seeds for {' '.join(f'{x:g}' for x in st['noisy'])}"] if st["noisy"] else [])
    if tiny and asked:
        lines.append(f"Asked for by the rules, not run at this size: {'; '.join(asked)}.")
    arms = [a for a in plan.p["stage2"]["arms"] if a != REFERENCE] if not tiny else []
    mine = [x for x in v["primary"] if x["arm"] == plan.arm]
    old = committed_verdicts(committed) if not tiny else {}
    lines += ["", "## Stage 2: verdicts against PPO-Clip", ""]
    lines.append(("Reference: PPO-Clip at its committed stage-2 setting, run at this size (a stand-in). " if tiny else
                  f"Reference: the committed PPO-Clip runs of `{committed}/stage2`. They and the committed arms ran in "
                  f"other programs and on other CPUs ({committed_cpus(committed)}) than this method's runs, so the "
                  "comparison is statistical (run against run, by the seed bootstrap), never a paired replay. ")
                 + f"Seeds {', '.join(map(str, plan.stage2_seeds))}; the primary family is "
                 + ("this method's tests" if tiny else "the committed one with this method's tests added")
                 + f", Holm over {sum('p_holm' in x for x in v['primary'])} tests at α = {plan.rules['alpha']}; "
                 f"equivalence: the 90% interval inside ±{plan.rules['margin']}.")
    lines += ["", "| test | lag | this method: estimate [95% CI] | p (Holm) | verdict |"
              + "".join(f" {a} |" for a in arms), "|---|---|---|---|---|" + "---|" * len(arms)]
    for x in mine:
        name = "P(X > PPO-Clip)" if x["test"].startswith("P(") else "retention − PPO-Clip's"
        cells = "".join(f" {old[k]['verdict']} ({float(old[k]['point']):.2f}) |" if (k := (x["test"], a, x["lag_model"],
                        int(x["lag_depth"]))) in old else " – |" for a in arms)
        lines.append(f"| {name} | {x['lag_model']} B = {x['lag_depth']} | {_interval(x)} | "
                     + (f"{x['p_holm']:.3f}" if "p_holm" in x else "–") + f" | **{x['verdict']}** |" + cells)
    if not tiny:
        changed = [x for x in v["primary"] if x["arm"] != plan.arm and (k := (x["test"], x["arm"], x["lag_model"],
                   int(x["lag_depth"]))) in old and old[k]["verdict"] != x["verdict"]]
        lines.append("")
        lines.append(f"The committed columns are the committed verdicts; with this method's tests in the family, "
                     f"{len(changed)} of them would read differently.")
    if v["shape"] is not None:
        lines += ["", f"The lag's shape at B = {v['shape']['lag_depth']} ({' against '.join(v['shape']['models'])}): "
                  + "; ".join(f"{q['pair']}: {q['verdict']}" for q in v["shape"]["pairs"]) + "."]
    for key, (diverged, missing) in v["left_out"].items():
        lines.append(f"{'/'.join(map(str, key))}: {diverged} diverged (scored at the floor), "
                     f"{missing} missing (left out).")
    if v["unscaled"]:
        lines.append(f"No scale (left out of every verdict): {', '.join(v['unscaled'])}.")
    lines += ["", "## Cost", ""] + cost_lines(plan, results_dir)
    text = "\n".join(lines) + "\n"
    results.write_table(os.path.join(results_dir, "choice.csv"), [
        {"method": plan.method, "knob": plan.knob, "value": st["value"], "stability": stab["share"],
         "contest": st["contest"], "R": r_text, "per_lag": optima,
         "pending": " ".join(f"{x:g}" for x in st["points"] + st["noisy"]) if tiny else ""}])
    results.write_table(os.path.join(results_dir, "verdicts.csv"),
                        [{"family": "primary", **x} for x in mine] + [{"family": "per task", **x} for x in v["per_task"]
                                                                      if x["arm"] == plan.arm])
    results.atomic_write_text(os.path.join(results_dir, "report.md"), text)
    return text


# ----------------------------------------------------------------------------- main

def plan_text(plan: Plan, todo: list, call: Call) -> str:
    """Every unit known now with its runs, estimate and status; what the rules may add; the cost."""
    lines = [f"bench of {plan.method} ({plan.knob} over {' '.join(f'{x:g}' for x in plan.values)}, size {plan.size}); "
             f"plan sha256 {plan.digest}", f"{'unit':<48}{'runs':>6}{'est. min':>10}  status"]
    lines += [f"{u.name:<48}{u.runs:>6}{u.minutes:>10.1f}  {kit.status(call, u)}" for u in todo]
    known = {u.name for u in todo}
    later = [u for u in units(plan, None) if u.name not in known and u.stage == "stage2"]
    lines += [f"{u.name:<48}{u.runs:>6}{u.minutes:>10.1f}  once the lag-robust setting is decided" for u in later]
    left = [u for u in todo if not kit.finished(call, u)] + later
    hours = sum(u.minutes for u in left) / 60.0
    cores = os.cpu_count() or 1
    extra = 0.0 if plan.size == "tiny" else sum(unit_minutes(plan, t, len(plan.lag_depths) * len(plan.seeds))
                                                for t in plan.tasks) / 60.0
    lines.append(f"to run: {len(left)} units, {sum(u.runs for u in left)} runs, ~{hours:.2f} h here "
                 f"({hours * cores:.2f} CPU-hours at this machine's {cores} cores), "
                 + ("at a tiny unit's measured time" if plan.size == "tiny" else
                    "at the protocol's measured rates x the pace stage 1 measured")
                 + ("" if plan.size == "tiny" else f"; each edge extension the rules may ask for adds ~{extra:.1f} h "
                    f"({extra * cores:.1f} CPU-hours), the stability rule's added seeds up to "
                    f"~{extra * len(MORE_SEEDS) / len(plan.seeds) * len(plan.values):.1f} h"))
    return "\n".join(lines)


def main(args: Args) -> str:
    plan = resolve(args)
    out = args.out or os.path.join("runs", "bench", plan.method)
    bench_json = os.path.join(out, "bench.json")
    if args.minutes is not None and not args.minutes > 0:
        raise ConfigError(f"minutes={args.minutes!r}: a positive number (or leave it out: every unit)")
    call = Call(plan.method, plan.size, out, os.path.join(out, "runs"), bench_json,
                math.inf if args.minutes is None else args.minutes, tuple(args.units), args.deviation, args.progress,
                args.max_chunks, args.dry_run)
    if args.dry_run:
        try:
            kit.check_protocol_unchanged(out, plan.digest, "", bench_json)
        except ConfigError as e:
            print(f"{e}: a run records the --deviation given first" if args.deviation else e)
        print(plan_text(plan, units(plan, out), call))
        print("dry run: nothing compiled or written")
        return out
    from vaco_jax.analysis import results

    def ready(_):  # the plan, beside the manifest whose lines carry its hash (after every read-only check)
        if not os.path.exists(bench_json) or results.read_json(bench_json) != plan.record:
            os.makedirs(out, exist_ok=True)
            results.write_json(bench_json, plan.record)

    spec = lambda u: {"study": "bench", "unit": u.name, "protocol_sha256": plan.digest}
    kit.run_units(lambda: units(plan, out), call, plan.digest, unit_dir, spec, ready=ready,
                  waiting="nothing to run now")
    todo = units(plan, out)
    listed = {m["unit"] for m in kit.manifest(out)}  # the report reads only the units the manifest lists
    if stage1(plan, out)["state"] == "decided" and all(u.name in listed for u in todo):
        kit.check_report_protocol(out, plan.digest, bench_json)
        kit.check_units_present(out, call.runs, unit_dir)
        report(plan, out, args.committed)
        print(f"every unit has finished; the report: {os.path.join(out, 'report.md')}")
    else:
        state = stage1(plan, out)["state"]
        print(plan_text(plan, todo, call))
        print(f"stage 1: {state}; " + ("the report is written once every unit has finished (no interim verdict); "
                                       "run the command again" if state in ("incomplete", "pending", "decided") else
                                       "stage 2 cannot start, and no report is written"))
    return out


def cli() -> None:
    """The command line (`experiments/bench.py`, `vaco-bench`, `python -m vaco_jax bench`)."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
