"""The step size x lag study (the second locomotion study), run as its protocol fixes it
(``results/steplag/protocol.json``, explained in ``protocol.md`` beside it).

    python experiments/steplag.py plan                 # every unit, its cost, what is done; runs nothing
    python experiments/steplag.py run --minutes 80     # the next unfinished units that fit in 80 minutes
    python experiments/steplag.py report               # stage 1's rules; stage 2's verdicts once its last unit is in

Stage 1 is cut into **units**, one compiled group each, in the protocol's order:

1. ``reuse_check``: one cell of the first locomotion study rerun with this code; the first study's runs
   at identical settings are reused only when it reproduces that run's score to every bit.
2. ``surface/<task>/<surface>``: a method's step knob on its grid x the surface's lag depths x the stage's
   seeds, less the cells reused from the first study (``fill/<task>/<surface>`` runs those when the
   check fails).
3. ``extend/<task>/<surface>/<value>``: one point beyond an edge where the lag-robust setting or a
   per-lag optimum sits (known once every task of the surface is in; at most two per edge).
4. ``seeds/<task>/<surface>``: the stability rule's seeds 3, 4, 5 for every value within noise of the
   best, when the lag-robust setting's stability is below 0.8 (once the surface has no extension pending).
5. ``stage2/<task>/<arm>/<lag model>``: stage 2, once its section is in the protocol
   (``vaco_jax.studies.steplag_stage2``).

Each finished unit's small tables are copied under ``results/steplag/`` with a manifest line naming the
protocol's sha256 and the CPU model that ran it; a changed protocol needs ``--deviation`` before more
units run, and ``report`` computes only under the units' protocol and from every listed unit's tables
(as in the first study: both run on the study kit, ``vaco_jax.studies.kit``). Stage 1's protocol check,
its reuse of the first study and its rules on each surface are ``vaco_jax.studies.steplag_stage1`` (the
rules: ``vaco_jax.analysis.surfaces``, applied as ``kit_steplag`` applies them for ``vaco-bench`` too).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from tyro.conf import Positional

from vaco_jax.core.config import Config, ConfigError
from vaco_jax.studies import kit
from vaco_jax.studies.kit_steplag import MORE_SEEDS
from vaco_jax.studies.steplag_stage1 import (CHECK, base_config, normalisation, reuse_state, reused_cells,
                                             stage1_rows, surface_state)

RESULTS = os.path.join("results", "steplag")
RUNS = os.path.join("runs", "steplag")
PROTOCOL = os.path.join(RESULTS, "protocol.json")


@dataclasses.dataclass
class Args:
    """The step size x lag study: plan it, run its next units, or apply its rules to the committed scores."""

    # plan: print units, costs and status; run: run units; report: stage 1's rules on the committed scores,
    # then stage 2's verdicts once every stage-2 unit has finished (none before)
    stage: Positional[Literal["plan", "run", "report"]]
    minutes: float | None = None  # run: the next unfinished units whose summed estimated cost fits in this
    units: tuple[str, ...] = ()  # run: these units (names as `plan` prints them) instead of --minutes
    protocol: str = PROTOCOL  # the protocol file
    results: str = RESULTS  # where manifest.csv and the units' tables go
    runs: str = RUNS  # where run directories (checkpoints, policies) go; git-ignored
    deviation: str = ""  # run: record a change of the protocol since earlier units ran (text, dated)
    progress: bool = True  # a progress bar per group (--no-progress for logs)
    max_chunks: int | None = None  # stop every group after this many chunks; rerun to continue
    bootstrap_reps: int = 2000  # bootstrap resamples of each run directory's summary
    figures: str = os.path.join("docs", "figures", "steplag")  # report: where the surface figures go
    # run: print the units this call would start with (their plan, memory and time estimates) and exit; nothing
    # is compiled or written
    dry_run: bool = False


HELP_DEFAULTS = {"minutes": "none: run needs --minutes or --units"}  # --help (driver/helptext.py)


# ----------------------------------------------------------------------------- the protocol

def check_protocol(p: dict) -> None:
    """Every name and number the protocol uses is valid, before anything is planned: stage 1's sections
    (``steplag_stage1.check``), then stage 2's once it is fixed (``steplag_stage2.check``)."""
    from vaco_jax.studies import steplag_stage1
    steplag_stage1.check(p)
    if "stage2" in p:
        from vaco_jax.studies import steplag_stage2
        steplag_stage2.check(p)


def unit_dir(name: str) -> str:
    """A unit's folder under the results directory (and under the run directories), from its name alone
    (a listed unit is found even when a lost table changes what the plan holds)."""
    kind, *rest = name.split("/")
    where = {"reuse_check": lambda: os.path.join("check", CHECK["task"], CHECK["surface"]),
             "surface": lambda t, k: os.path.join("surface", t, k),
             "fill": lambda t, k: os.path.join("surface", t, k, "fill"),
             "extend": lambda t, k, v: os.path.join("surface", t, k, f"extend={v}"),
             "seeds": lambda t, k: os.path.join("surface", t, k, "more_seeds"),
             "stage2": lambda t, a, m: os.path.join("stage2", t, a, m)}
    try:
        return where[kind](*rest)
    except (KeyError, TypeError):
        raise ConfigError(f"manifest unit {name!r} is not a unit of this study; allowed kinds: "
                          f"{', '.join(where)}") from None


def _cost(p: dict, task: str, runs: int) -> float:
    return runs * p["settings"]["total_env_steps"] / p["budget"]["rates_env_steps_per_s"][task] / 60.0


def _unit(p: dict, name: str, stage: str, config: Config, cells: list, subdir: str) -> kit.Unit:
    from vaco_jax.driver import grid
    return kit.Unit(name, stage, grid.Group(config, tuple(cells), subdir, name), len(cells),
                      _cost(p, config.env, len(cells)))


# ----------------------------------------------------------------------------- units

def all_units(p: dict, args: Args) -> tuple[list, str]:
    from vaco_jax.driver import grid
    s1 = p["stage1"]
    reuse = reuse_state(p, args.results)
    c = CHECK
    check_cfg = base_config(p, c["task"], c["surface"])
    units = [_unit(p, "reuse_check", "check", check_cfg,
                   grid.grid([c["lag_depth"]], [c["seed"]], **{s1["surfaces"][c["surface"]]["knob"]: [c["value"]]}),
                   os.path.join(c["task"], c["surface"]))]
    # the protocol's order: every surface on the first task (in the protocol's order), then the second task
    tasks = list(dict.fromkeys(t for s in s1["surfaces"].values() for t in s["tasks"]))
    order = [(t, k) for t in tasks for k, s in s1["surfaces"].items() if t in s["tasks"]]
    extend = []
    for task, key in order:
        s = s1["surfaces"][key]
        config = base_config(p, task, key)
        reused = reused_cells(p, task, key)
        cells = [cell for cell in grid.grid(s["lag_depths"], s1["seeds"], **{s["knob"]: [float(v) for v in s["values"]]})
                 if (cell.lag_depth, cell.seed, cell.knob_dict()[s["knob"]]) not in reused]
        units.append(_unit(p, f"surface/{task}/{key}", "surface", config, cells, os.path.join(task, key)))
        if reuse == "fails" and reused:
            fill = [grid.Cell(b, seed).with_knobs(**{s["knob"]: v}) for (b, seed, v) in sorted(reused)]
            units.append(_unit(p, f"fill/{task}/{key}", "surface", config, fill, os.path.join(task, key, "fill")))
        if task == s["tasks"][-1]:
            st = surface_state(p, args.results, key, reuse)
            # every extension run so far (finished units show as done) and those the edge rule asks for
            points, noisy = sorted(set(st["extended"]) | set(st["points"])), st["noisy"]
            for v in points:
                for t in s["tasks"]:
                    extend.append(_unit(p, f"extend/{t}/{key}/{v:g}", "surface", base_config(p, t, key),
                                        grid.grid(s["lag_depths"], s1["seeds"], **{s["knob"]: [v]}),
                                        os.path.join(t, key, f"extend={v:g}")))
            for t in s["tasks"] if noisy else []:
                extend.append(_unit(p, f"seeds/{t}/{key}", "surface", base_config(p, t, key),
                                    grid.grid(s["lag_depths"], MORE_SEEDS, **{s["knob"]: noisy}),
                                    os.path.join(t, key, "more_seeds")))
    # an extension runs right after the surfaces it extends are complete: before the next surfaces
    units = units[:1] + extend + units[1:]
    if "stage2" in p:  # fixed only once stage 1 is complete, so its units come after every stage-1 unit
        from vaco_jax.studies import steplag_stage2
        units += steplag_stage2.units(p, base_config, _unit)
    return units, reuse


def plan_text(units: list, reuse: str, args: Args) -> str:
    lines = [f"{'unit':<44}{'runs':>6}{'est. min':>10}  status"]
    for u in units:
        lines.append(f"{u.name:<44}{u.runs:>6}{u.minutes:>10.1f}  {kit.status(args, u)}")
    todo = [u for u in units if not kit.finished(args, u)]
    lines.append(f"reuse of the first study's runs: {reuse}")
    lines.append(f"{len(units)} units, {sum(u.runs for u in units)} runs, ~{sum(u.minutes for u in units) / 60:.1f} h "
                 f"at the protocol's rates; to run: {len(todo)} units, ~{sum(u.minutes for u in todo) / 60:.1f} h")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- report

def draw_figures(p: dict, results_dir: str, figures_dir: str) -> list[str]:
    """The surface figure of every surface with rows (complete or not: the title says which), and stage
    2's once a task has its scale."""
    from vaco_jax.analysis import surfaces
    from vaco_jax.analysis.plotting import save_figure
    reuse = reuse_state(p, results_dir)
    s1 = p["stage1"]
    paths = []
    for key, s in s1["surfaces"].items():
        st = surface_state(p, results_dir, key, reuse)
        rows, state = st["every"], st["state"]
        if not rows:
            continue
        norm = normalisation(p, key)
        chosen = surfaces.robust_choice(rows, s1["score"], norm)["value"] if state == "complete" else None
        fig = surfaces.draw_surface(rows, s1["score"], norm, s["knob"], f"{surfaces.surface_label(s)}: AUC against {s['knob']}"
                                    + ("" if state == "complete" else " (incomplete)"), chosen)
        paths += save_figure(fig, results_dir, f"surface_{key}", figures_dir)
    if "stage2" in p:
        from vaco_jax.studies import steplag_stage2
        done, names = steplag_stage2.progress(p, results_dir)
        fig = steplag_stage2.draw(p, results_dir, "" if len(done) == len(names) else
                                  f" ({len(done)} of {len(names)} units)")
        if fig is not None:
            paths += save_figure(fig, results_dir, "stage2", figures_dir)
    return paths


CHOICES = "choices.csv"  # stage 1's rules per surface, written by ``report`` (a test recomputes it)
STAGE2_VERDICTS = "stage2_verdicts.csv"  # stage 2's primary and per-task rows, written by ``report``
STAGE2_SHAPE = "stage2_shape.csv"  # stage 2's lag-shape rule, a row per pair of methods, written by ``report``


def report(p: dict, results_dir: str, write: bool = True) -> str:
    """Stage 1's rules on every surface (``choices.csv``); then stage 2's verdicts when its section is
    fixed (``stage2_verdicts.csv``), or, once stage 1 is complete, the draft of that section."""
    import json

    from vaco_jax.analysis import results
    from vaco_jax.studies import steplag_stage2
    lines = [f"reuse of the first study's runs: {reuse_state(p, results_dir)}"]
    rows = stage1_rows(p, results_dir)
    for r in rows:
        if r["state"] == "incomplete":
            lines.append(f"{r['surface']:<14} incomplete ({r['runs']} runs; tasks in: {r['tasks_in'] or 'none'})")
            continue
        lines.append(f"{r['surface']:<14} {r['knob']} lag-robust {r['value']:g} (stability {r['stability']:.2f}); "
                     f"per B {r['per_lag']}; R {r['R']}" + (f"; {r['state']}: {r['pending']}" if r["pending"] else "")
                     + (f"; excluded {r['excluded']}" if r["excluded"] else ""))
    tables = {CHOICES: rows}  # written once everything is computed: a failure leaves every table as it was
    done, names = steplag_stage2.progress(p, results_dir) if "stage2" in p else ([], [])
    if "stage2" in p and len(done) < len(names):
        lines.append(f"stage 2: {len(done)} of {len(names)} units finished; its verdicts are computed once every "
                     "unit has finished (no interim verdict)")
    elif "stage2" in p:
        v = steplag_stage2.verdicts(p, results_dir)
        lines.append("stage 2 (primary, Holm over the family):")
        for r in v["primary"]:
            nums = f"{r['point']:.3f} [{r['low']:.3f}, {r['high']:.3f}] p_holm {r['p_holm']:.4f}" if "point" in r else ""
            lines.append(f"  {r['test']:<24} {r['arm']:<14} {r['lag_model']:<8} B={r['lag_depth']:<3} {nums:<44} "
                         f"{r['verdict']}" + (f" (floor: {r['at_floor']})" if r.get("at_floor") else "")
                         + f"; setting stability {r['setting_stability']:.2f}")
        lines.append(f"  the lag's shape at B={v['shape']['lag_depth']}: {v['shape']['overall']}"
                     + (f" (flips: {', '.join(v['shape']['flips'])})" if v["shape"]["flips"] else ""))
        for key, (diverged, missing) in v["left_out"].items():
            lines.append(f"  {key}: {diverged} diverged (scored at the floor), {missing} missing (left out)")
        if v["unscaled"]:
            lines.append(f"  no scale (left out of every verdict): {', '.join(v['unscaled'])}")
        tables[STAGE2_VERDICTS] = ([{"family": "primary", **r} for r in v["primary"]]
                                   + [{"family": "per task", **r} for r in v["per_task"]])
        tables[STAGE2_SHAPE] = steplag_stage2.shape_rows(v["shape"])
    elif all(r["state"] == "complete" and r["value"] is not None and r["R_H"] is not None for r in rows):
        choices = {r["surface"]: {"value": r["value"], "R_H": r["R_H"]} for r in rows}
        lines.append("stage 1 is complete; the stage2 section its rules give (commit it into the protocol before "
                     "stage 2's first run):")
        lines.append(json.dumps(steplag_stage2.draft(p, results_dir, choices, _cost), indent=1))
    for name, table in tables.items() if write else ():
        results.write_table(os.path.join(results_dir, name), table)  # atomic, its checksum first
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main

def main(args: Args) -> list[str]:
    p, digest = kit.load_protocol(args.protocol)
    kit.check_protocol_file(check_protocol, p, args.protocol)
    kit.check_dry_run(args)
    if args.stage == "report":  # guarded like run: the units' protocol, every listed unit's tables
        kit.check_report_protocol(args.results, digest, args.protocol)
        kit.check_units_present(args.results, args.runs, unit_dir)
        print(report(p, args.results))
        paths = draw_figures(p, args.results, args.figures)
        print("figures:", *paths, sep="\n  ")
        return paths
    if args.stage == "plan" or args.dry_run:  # run checks them in start_run, then copies back what it can
        kit.check_units_present(args.results, args.runs, unit_dir, copy_back=args.stage == "run")
    units, reuse = all_units(p, args)
    if args.stage == "plan":
        print(f"protocol {args.protocol} sha256 {digest}")
        print(plan_text(units, reuse, args))
        return []
    kit.check_minutes(args)
    if args.dry_run:
        return kit.dry_run_units(units, digest, args)

    def after_unit(u) -> bool:  # the plan depends on the check's outcome
        if u.name == "reuse_check":
            print(f"reuse of the first study's runs: {reuse_state(p, args.results)}", flush=True)
        return u.name == "reuse_check"

    # a one-run unit's pace is its compilation: it would misjudge the surfaces'
    return kit.run_units(lambda: all_units(p, args)[0], args, digest, unit_dir,
                         lambda u: {"study": "steplag", "unit": u.name, "protocol_sha256": digest},
                         units=units, after_unit=after_unit, paced=lambda u: u.runs > 1)


def cli() -> None:
    """The command line (`experiments/steplag.py`, `python -m vaco_jax steplag`)."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()