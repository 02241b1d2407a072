"""The locomotion lag-sweep study, run as the protocol fixed before it (``results/locomotion/protocol.json``,
explained in ``protocol.md`` beside it).

    python experiments/locomotion.py plan                 # every unit, its cost, what is done; runs nothing
    python experiments/locomotion.py run --minutes 80     # the next unfinished units that fit in 80 minutes
    python experiments/locomotion.py run --units tune/vaco study/Hopper-v4/vaco
    python experiments/locomotion.py report               # every rule on the committed scores -> verdicts.csv,
                                                          # and the study's figures -> docs/figures/locomotion/

The study is cut into **units**, one compiled group each, in the protocol's order of priority:

1. ``tune/<method>``: the method's step-size knob on its grid, at the tuning lag depths, on the tuning
   seeds, on the tuning task (``runs/locomotion/tuning``). When every tuning unit has finished, the
   choices are frozen in ``results/locomotion/tuned.json`` (never changed afterwards); an optimum at
   an edge of its grid first adds a unit ``extend/<method>/B<b>`` with one point beyond that edge.
2. ``study/<task>/<method>``: every study lag depth x study seed, at the method's B = 1 tuning.
3. ``lag_aware/<task>/<method>``: the protocol's lag-aware depths at the method's B = 16 tuning, only
   for a method whose two tunings differ (known once tuning is frozen).
4. ``ablation/<task>/<method>``: the ablations at their parent's B = 1 tuning.

A unit's cost is its runs x env steps / the task's measured training rate (``rates_env_steps_per_s``).
The rest is the kit's (``vaco_jax.studies.kit``, docs/studies.md): ``run --minutes M`` takes the next
units that fit in what is left of M minutes (at least one; estimates scaled by the measured pace), plans
again after each round (so finished tuning is frozen and the study's units follow in the same call),
and leaves each finished unit's small tables under ``results/locomotion/`` with a line in
``manifest.csv`` (the protocol's sha256, the CPU model that ran it); an interrupted unit resumes from
its checkpoint. A changed protocol is refused until ``--deviation "what changed and why"`` records it
in ``deviations.csv``. ``report`` (the rules and figures: ``vaco_jax.studies.locomotion_report``) is
guarded like ``run``: only under the protocol the units ran under, and only when every unit the
manifest lists holds its tables (``plan`` names a missing one; ``run`` copies it back when it can).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Literal

from tyro.conf import Positional

from vaco_jax.core.config import Config, ConfigError
from vaco_jax.studies.kit import (Unit, check_dry_run, check_protocol_file, check_report_protocol, check_units_present,
                                  check_minutes, dry_run_units, finished, load_protocol, run_units, status)
from vaco_jax.studies.kit import select  # noqa: F401  (the selection the loop uses, as this study's `select`)
from vaco_jax.studies.locomotion_report import draw_figures, report
from vaco_jax.studies.locomotion_tuning import choose, freeze  # noqa: F401  (the tuning rule, as this study's)
from vaco_jax.studies.locomotion_verdicts import LAG_AWARE

RESULTS = os.path.join("results", "locomotion")
RUNS = os.path.join("runs", "locomotion")
PROTOCOL = os.path.join(RESULTS, "protocol.json")
FIGURES = os.path.join("docs", "figures", "locomotion")


@dataclasses.dataclass
class Args:
    """The locomotion study: plan it, or run its next units."""

    # plan: print units, costs and status; run: run units; report: the protocol's rules on the committed
    # scores -> verdicts.csv
    stage: Positional[Literal["plan", "run", "report"]]
    minutes: float | None = None  # run: the next unfinished units whose summed estimated cost fits in this
    units: tuple[str, ...] = ()  # run: these units (names as `plan` prints them) instead of --minutes
    protocol: str = PROTOCOL  # the protocol file
    results: str = RESULTS  # where tuned.json, manifest.csv and the units' tables go
    runs: str = RUNS  # where run directories (checkpoints, policies) go; git-ignored
    deviation: str = ""  # run: record a change of the protocol since earlier units ran (text, dated)
    progress: bool = True  # a progress bar per group (--no-progress for logs)
    max_chunks: int | None = None  # stop every group after this many chunks; rerun to continue
    bootstrap_reps: int = 2000  # bootstrap resamples of each run directory's summary (and of the report's figures)
    figures: str = FIGURES  # report: where the study's figures go
    # run: print the units this call would start with (their plan, memory and time estimates) and exit; nothing
    # is compiled or written
    dry_run: bool = False


HELP_DEFAULTS = {"minutes": "none: run needs --minutes or --units"}  # --help (driver/helptext.py)


def check_protocol(p: dict) -> None:
    """Every name the protocol uses exists, before anything is planned."""
    from vaco_jax.envs import available_envs, env_source
    from vaco_jax.core.methods import METHODS

    for task in p["tasks"] + [p["tuning"]["task"]] + p["ablations"]["tasks"]:
        if env_source(task) is None:  # Brax's and Playground's registries are imported only for a name outside ours
            raise ConfigError(f"protocol tasks: {task!r} is not valid; allowed values: {', '.join(available_envs())}")
    for m in list(p["methods"]) + list(p["ablations"]["methods"]):
        if m not in METHODS:
            raise ConfigError(f"protocol methods: {m!r} is not valid; allowed values: {', '.join(METHODS)}")
    for m in p["methods"]:
        if m not in p["tuning"]["grids"]:
            raise ConfigError(f"protocol tuning.grids: no grid for method {m!r}")
    for task in set(p["tasks"]) | set(p["ablations"]["tasks"]) | {p["tuning"]["task"]}:
        if not p["rates_env_steps_per_s"].get(task):
            raise ConfigError(f"protocol rates_env_steps_per_s: no measured rate for {task!r}")


def base_config(p: dict, task: str, method: str) -> Config:
    return Config(env=task, method=method, backend=p["engine"]["backend"], **{
        k: tuple(v) if isinstance(v, list) else v for k, v in p["settings"].items()})


def _cost(p: dict, task: str, runs: int) -> float:
    return runs * p["settings"]["total_env_steps"] / p["rates_env_steps_per_s"][task] / 60.0


def _unit(p: dict, name: str, stage: str, config: Config, cells: list, subdir: str, tags=()) -> Unit:
    from vaco_jax.driver import grid
    return Unit(name, stage, grid.Group(config, tuple(cells), subdir, name, tags), len(cells),
                _cost(p, config.env, len(cells)))


def tuning_units(p: dict) -> list[Unit]:
    from vaco_jax.driver import grid
    t = p["tuning"]
    out = []
    for m in p["methods"]:
        g = t["grids"][m]
        cells = grid.grid(t["lag_depths"], p["seeds"]["tuning"], **{g["knob"]: [float(v) for v in g["values"]]})
        out.append(_unit(p, f"tune/{m}", "tuning", base_config(p, t["task"], m), cells, os.path.join(t["task"], m)))
    return out


def extension_units(p: dict, tuned: dict) -> list[Unit]:
    """One unit per (method, tuning lag depth) whose optimum sat at an edge of its grid."""
    from vaco_jax.driver import grid
    t = p["tuning"]
    out = []
    for m, per_b in tuned.get("extend", {}).items():
        knob = t["grids"][m]["knob"]
        for b, value in per_b.items():
            cells = grid.grid([int(b)], p["seeds"]["tuning"], **{knob: [float(value)]})
            out.append(_unit(p, f"extend/{m}/B{b}", "tuning", base_config(p, t["task"], m), cells,
                             os.path.join(t["task"], m, f"extend_B{b}")))
    return out


def chosen(tuned: dict, method: str, b: int) -> float:
    return float(tuned["chosen"][method][str(b)]["value"])


def study_units(p: dict, tuned: dict | None) -> list[Unit]:
    """Study, lag-aware and ablation units; those that need the frozen tuning only once it exists."""
    from vaco_jax.driver import grid
    seeds, grids = p["seeds"]["study"], p["tuning"]["grids"]
    b_low, b_high = (int(b) for b in p["tuning"]["lag_depths"])
    out = []
    for task in p["tasks"]:
        for m in p["methods"]:
            config = base_config(p, task, m)
            if tuned is not None:
                config = config.replace(**{grids[m]["knob"]: chosen(tuned, m, b_low)})
            out.append(_unit(p, f"study/{task}/{m}", "study", config, grid.grid(p["lag_depths"], seeds),
                             os.path.join(task, m)))
    if tuned is None:
        return out
    for task in p["tasks"]:
        for m in p["methods"]:
            low, high = chosen(tuned, m, b_low), chosen(tuned, m, b_high)
            if low != high:
                config = base_config(p, task, m).replace(**{grids[m]["knob"]: high})
                out.append(_unit(p, f"lag_aware/{task}/{m}", "study", config,
                                 grid.grid(p["lag_aware"]["lag_depths"], seeds),
                                 os.path.join(task, m, "variant=lag_aware"), (("variant", "lag_aware"),)))
    ab = p["ablations"]
    for task in ab["tasks"]:
        for m, spec in ab["methods"].items():
            config = base_config(p, task, m)
            if spec["inherits"]:
                config = config.replace(**{grids[spec["inherits"]]["knob"]: chosen(tuned, spec["inherits"], b_low)})
            out.append(_unit(p, f"ablation/{task}/{m}", "study", config, grid.grid(ab["lag_depths"], seeds),
                             os.path.join(task, m)))
    return out


# ----------------------------------------------------------------------------- plan and run

def all_units(p: dict, args: Args) -> tuple[list[Unit], dict | None, str]:
    """(units in order, the frozen tuning or None, a line saying where tuning stands)."""
    from vaco_jax.analysis import results
    tuned_path = os.path.join(args.results, "tuned.json")
    units = tuning_units(p)
    tuned = results.read_json(tuned_path) if os.path.exists(tuned_path) else None
    state = "frozen in " + tuned_path if tuned else "not frozen yet"
    if tuned is None and all(finished(args, u) for u in units):
        # from the committed copies: a later session on a fresh machine has no run directories
        pending = freeze(p, os.path.join(args.results, "tuning"), tuned_path, load_protocol(args.protocol)[1])
        if pending["extend"]:
            units += extension_units(p, pending)
            state = "edge extensions pending: " + json.dumps(pending["extend"])
        else:
            tuned, state = pending, "frozen in " + tuned_path
    elif tuned is not None:
        units += extension_units(p, {"extend": {}})
    return units + study_units(p, tuned), tuned, state


def unit_dir(p: dict, name: str) -> str:
    """A unit's folder under the results directory (and under the run directories), from its name alone
    (a listed unit is found even when a lost table changes what the plan holds)."""
    kind, *rest = name.split("/")
    task = p["tuning"]["task"]
    where = {"tune": lambda m: os.path.join("tuning", task, m),
             "extend": lambda m, b: os.path.join("tuning", task, m, f"extend_{b}"),
             "study": lambda t, m: os.path.join("study", t, m),
             "ablation": lambda t, m: os.path.join("study", t, m),
             "lag_aware": lambda t, m: os.path.join("study", t, m, f"variant={LAG_AWARE}")}
    try:
        return where[kind](*rest)
    except (KeyError, TypeError):
        raise ConfigError(f"manifest unit {name!r} is not a unit of this study; allowed kinds: "
                          f"{', '.join(where)}") from None


def plan_text(p: dict, units: list[Unit], state: str, args: Args) -> str:
    lines = [f"{'unit':<44}{'runs':>6}{'est. min':>10}  status"]
    for u in units:
        lines.append(f"{u.name:<44}{u.runs:>6}{u.minutes:>10.1f}  {status(args, u)}")
    todo = [u for u in units if not finished(args, u)]
    total = sum(u.minutes for u in units) / 60
    lines.append(f"tuning: {state}")
    lines.append(f"{len(units)} units, {sum(u.runs for u in units)} runs, ~{total:.1f} h on this machine's measured "
                 f"rates; to run: {len(todo)} units, ~{sum(u.minutes for u in todo) / 60:.1f} h")
    if any(u.name.startswith("tune/") for u in todo) or "frozen" not in state:
        ab = p["ablations"]
        worst = sum(_cost(p, t, len(p["lag_aware"]["lag_depths"]) * len(p["seeds"]["study"]))
                    for t in p["tasks"] for _ in p["methods"])
        ablation = sum(_cost(p, t, len(ab["lag_depths"]) * len(p["seeds"]["study"]))
                       for t in ab["tasks"] for _ in ab["methods"])
        lines.append(f"after tuning: ablation units ~{ablation / 60:.1f} h and lag-aware units up to "
                     f"~{worst / 60:.1f} h (only for methods whose two tunings differ)")
    return "\n".join(lines)


def main(args: Args) -> list[str]:
    from vaco_jax.analysis import tables
    p, digest = load_protocol(args.protocol)
    check_protocol_file(check_protocol, p, args.protocol)
    check_dry_run(args)
    where = lambda name: unit_dir(p, name)  # noqa: E731
    if args.stage == "report":  # guarded like run: the units' protocol, every listed unit's tables
        check_report_protocol(args.results, digest, args.protocol)
        check_units_present(args.results, args.runs, where)
        print(report(p, args.results))
        paths = draw_figures(p, args.results, args.figures, args.bootstrap_reps)
        print("figures:", *paths, sep="\n  ")
        return paths
    if args.stage == "plan" or args.dry_run:  # run checks them in start_run, then copies back what it can
        check_units_present(args.results, args.runs, where, copy_back=args.stage == "run")
    units, tuned, state = all_units(p, args)
    if args.stage == "plan":
        print(f"protocol {args.protocol} sha256 {digest}")
        print(plan_text(p, units, state, args))
        return []
    check_minutes(args)
    if args.dry_run:
        return dry_run_units(units, digest, args, tuned_needed=tuned is None)
    latest = {"tuned": tuned}

    def plan() -> list[Unit]:
        units, latest["tuned"], latest["state"] = all_units(p, args)
        return units

    def ready(chosen_units: list[Unit]) -> None:  # the study's steps come from the frozen tuning
        if any(u.stage == "study" for u in chosen_units) and latest["tuned"] is None:
            tuned_at = os.path.join(args.results, "tuned.json")
            raise ConfigError(f"units: study units need the frozen tuning ({tuned_at}); finish the tuning units first")

    def after_round(chosen_units: list[Unit], done: list[str]) -> None:
        if any(u.stage == "study" for u in chosen_units) and done:
            tables.summarise(os.path.join(args.runs, "study"), reps=args.bootstrap_reps)
        print(f"tuning: {latest['state']}", flush=True)  # frozen once its last unit has just finished

    done = run_units(plan, args, digest, where, lambda u: {"study": "locomotion", "unit": u.name,
                                                           "protocol_sha256": digest},
                     units=units, ready=ready, after_round=after_round, show_pace=True,
                     waiting="nothing to run: the next units wait for tuning to be frozen (run `plan`)")
    if done:
        print("FINDINGS.md's summary reads these results: run `python experiments/rebuild_docs.py` and commit "
              f"{args.results} with it", flush=True)
    return done


def cli() -> None:
    """The command line (`experiments/locomotion.py`, `python -m vaco_jax locomotion`)."""
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.driver.cli import cli_main

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
