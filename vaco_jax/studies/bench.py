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
resumes where it stopped and a changed plan needs ``--deviation``. The plan is resolved and checked by
``vaco_jax.studies.bench_plan``; the rules and ``report.md`` are ``vaco_jax.studies.bench_report``, on
the rules the step size x lag study applies (``vaco_jax.studies.kit_steplag``).

``--size tiny`` runs the same machinery in about a minute on the pure-JAX ``point_mass`` task (2 lag
depths, 2 seeds, 2 grid values, 4 fresh seeds, 2,048 env steps a run): the committed reference arms have
no runs there, so PPO-Clip at the committed stage-2 setting is run beside it at that size as their stand-in (its mean
at B = 1 is both stages' scale), and the edge and stability rules are reported but add no units (a
2-point grid always has its optimum at an edge).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Literal

from vaco_jax.core.config import Config, ConfigError
from vaco_jax.studies import bench_plan, kit
from vaco_jax.studies.bench_plan import Plan
from vaco_jax.studies.bench_report import report, stage1
from vaco_jax.studies.kit_steplag import MORE_SEEDS, REFERENCE

COMMITTED = os.path.join("results", "steplag")
PROTOCOL = os.path.join(COMMITTED, "protocol.json")
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




# ----------------------------------------------------------------------------- the plan and its units

def resolve(args: Args) -> Plan:
    """The plan from the flags and the committed protocol (``bench_plan.resolve``), every name and number
    checked, every unit's configuration composed and its cells checked; nothing written."""
    from vaco_jax.driver import grid
    plan = bench_plan.resolve(args, TINY)
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