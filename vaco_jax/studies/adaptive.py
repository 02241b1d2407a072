"""A step size that needs no lag tuning (``results/adaptive/``, issue 72's test): a study on the kit, its
protocol fixed before its runs (``protocol.json``, explained in ``protocol.md``).

Do the lag-adaptive clip range (``ppo_clip_adaptive``, docs/adaptive.md) and BAPO's adaptive bounds need
no lag tuning? Each against the per-lag oracle (PPO-Clip at the surfaces' best ε for each lag depth:
non-inferiority at every lag cell, margin 0.1) and against the single lag-robust ε = 0.6 (superiority
without lag, uniform B = 1), Holm over the family; SAT beside, descriptive, run last and only where it
fits the budget (``plan_units``; ``adaptive_parts``). The held-out task tests the adaptive method only.

Units: one compiled group per (task, arm, lag model) with its lag depths x seeds; PPO-Clip's per (task,
lag model, ε) with the depths that use that ε, so where the oracle's ε is the robust one the two arms are
the same runs (one unit, reported under both names). The uniform-lag oracle's ε is stage 1's per-lag
optimum (``results/steplag/choices.csv``); the fixed-lag oracle's is the lag-shape study's fixed-lag
per-lag optimum (``results/lagshape/tuning_choices.csv``), whose units join the plan once that table says
PPO-Clip's surface is complete (those at the robust ε are the robust arm's runs); SAT's follow them.

``python -m vaco_jax.studies.adaptive plan | run --minutes M | run --units NAME | report``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from tyro.conf import Positional

from vaco_jax.core.config import Config, ConfigError
from vaco_jax.studies import kit

RESULTS = os.path.join("results", "adaptive")
STEPLAG = os.path.join("results", "steplag")
LAGSHAPE = os.path.join("results", "lagshape")
STAGE = "study"  # every unit's stage: its folder under the results and the run directories
ORACLE_TABLES = {"uniform": "choices.csv", "fixed": "tuning_choices.csv"}  # under steplag, lagshape
SECTIONS = ("engine", "settings", "normalisation", "tasks", "seeds", "lag_models", "arms", "oracle", "held_out",
            "sat", "rules", "budget")


@dataclasses.dataclass
class Args(kit.RunArgs):
    stage: Positional[Literal["plan", "run", "report"]] = "plan"
    results: str = RESULTS  # protocol, manifest, the units' tables and the report's tables
    runs: str = os.path.join("runs", "adaptive")  # the units' run directories (checkpoints)
    steplag: str = STEPLAG  # the uniform-lag oracle: stage 1's choices.csv (PPO-Clip's per-lag optima)
    lagshape: str = LAGSHAPE  # the fixed-lag oracle: the lag-shape study's tuning_choices.csv
    figures: str = os.path.join("docs", "figures", "adaptive")  # report: the figure
    protocol = property(lambda self: os.path.join(self.results, "protocol.json"))


def config_of(p: dict, task: str, arm: dict, lag_model: str, depths) -> Config:
    """The study's settings (the step size x lag study's) on ``task`` with one arm's method and fields; a
    group's ``lag_depth`` is its smallest (its cells carry their own)."""
    s = {k: tuple(v) if isinstance(v, list) else v for k, v in p["settings"].items()}
    return Config(env=task, backend=p["engine"]["backend"], **{**s, **arm, "lag_model": lag_model,
                                                                "lag_depth": min(depths)})


def unit(p: dict, task: str, name: str, arm: dict, lag_model: str, depths) -> kit.Unit:
    from vaco_jax.driver import dryrun, grid

    subdir = f"{task}/{name}/{lag_model}"
    g = grid.Group(config_of(p, task, arm, lag_model, depths), tuple(grid.grid(depths, p["seeds"])), subdir,
                   f"{STAGE}/{subdir}")
    return kit.Unit(f"{STAGE}/{subdir}", STAGE, g, len(g.cells), dryrun.group_minutes(g))


def unit_dir(name: str) -> str:
    return name  # "study/<task>/<arm>/<lag model>": its folder under the results and the run directories


def per_lag(text: str) -> dict[int, float | None]:
    """``{B: ε}`` from a choices table's ``per_lag`` cell ("B=1: 0.2; B=8: 0.6"); None where every value
    scored alike ("every value equal": the oracle takes the robust ε there, protocol ``oracle.tie``)."""
    out = {}
    for part in str(text).split(";"):
        b, _, v = part.strip().partition(":")
        if not b.strip().startswith("B=") or not v.strip():
            raise ConfigError(f"per_lag: {text!r} is not 'B=<depth>: <value>; ...'")
        out[int(b.strip()[2:])] = None if v.strip() == "every value equal" else float(v)
    return out


def oracle_eps(p: dict, steplag: str, lagshape: str) -> dict[str, dict[int, float] | None]:
    """``{lag model: {B: the oracle's ε}}`` read from the two committed choices tables (protocol ``oracle``);
    None for a lag model whose table is absent or whose PPO-Clip surface is not complete yet."""
    from vaco_jax.analysis import results

    out = {}
    for model, folder in (("uniform", steplag), ("fixed", lagshape)):
        path = os.path.join(folder, ORACLE_TABLES[model])
        rows = [r for r in (results.read_table(path) if os.path.exists(path) else [])
                if r["surface"] == p["oracle"]["surface"] and r["state"] == "complete"]
        found = per_lag(rows[0]["per_lag"]) if rows else {}
        if any(b not in found for b in p["lag_models"][model]):
            out[model] = None
            continue
        robust = float(p["arms"]["robust"]["clip_epsilon"])
        out[model] = {b: robust if found[b] is None else found[b] for b in p["lag_models"][model]}
    return out


def ppo_units(p: dict, task: str, model: str, depths, eps: dict | None, robust_only: bool) -> list[kit.Unit]:
    """PPO-Clip's units of one task and lag model: the robust ε at ``depths`` (with ``robust_only``), else
    the oracle's other ε values, each with the depths that use it (``eps``: the oracle's per-lag ε)."""
    robust = float(p["arms"]["robust"]["clip_epsilon"])
    by_eps = {robust: list(depths)} if robust_only else {}
    for b in depths:
        if not robust_only and eps is not None and eps[b] != robust:
            by_eps.setdefault(eps[b], []).append(b)
    return [unit(p, task, f"ppo_clip-{e:g}", {"method": p["oracle"]["method"], "clip_epsilon": e}, model, sorted(bs))
            for e, bs in by_eps.items()]


def tested_units(p: dict, steplag: str, lagshape: str) -> list[kit.Unit]:
    """Every unit of the tested arms, in the order they run: per task, PPO-Clip (robust ε, then the uniform
    oracle's other ε), the methods under test under uniform then fixed lag; the held-out task's (its own
    ``methods``); last, once the fixed-lag surface is complete, the fixed-lag oracle's units at ε other than
    the robust one."""
    eps, arms, out = oracle_eps(p, steplag, lagshape), p["arms"], []
    if eps["uniform"] is None:
        raise ConfigError(f"oracle: {os.path.join(steplag, ORACLE_TABLES['uniform'])} has no complete "
                          f"{p['oracle']['surface']!r} row with per-lag optima at B in {p['lag_models']['uniform']}")
    for task in p["tasks"]:
        for model, depths in p["lag_models"].items():
            out += ppo_units(p, task, model, depths, eps[model], robust_only=True)
            if model == "uniform":
                out += ppo_units(p, task, model, depths, eps[model], robust_only=False)
            out += [unit(p, task, a, arms[a], model, depths) for a in p["rules"]["methods"]]
    h = p["held_out"]
    out += ppo_units(p, h["task"], h["lag_model"], h["lag_depths"], None, robust_only=True)
    out += ppo_units(p, h["task"], h["lag_model"], h["lag_depths"], eps[h["lag_model"]], robust_only=False)
    out += [unit(p, h["task"], a, arms[a], h["lag_model"], h["lag_depths"]) for a in h["methods"]]
    if eps["fixed"] is not None:
        for task in p["tasks"]:
            out += ppo_units(p, task, "fixed", p["lag_models"]["fixed"], eps["fixed"], robust_only=False)
    return out


def plan_units(p: dict, steplag: str = STEPLAG, lagshape: str = LAGSHAPE) -> tuple[list[kit.Unit], list[kit.Unit]]:
    """(planned, SAT units left out): the tested units, then SAT's (descriptive) once the fixed-lag oracle is
    known, so every tested unit is: in ``sat.tasks`` order, a SAT unit is planned when the minutes of every
    tested unit, the SAT units planned before it and its own are within ``budget.limit_hours`` (the measured
    rates: fixed before any SAT score exists). Before then, no SAT unit and none left out."""
    tested = tested_units(p, steplag, lagshape)
    if oracle_eps(p, steplag, lagshape)["fixed"] is None:
        return tested, []
    s, limit, planned, left = p["sat"], 60.0 * p["budget"]["limit_hours"], list(tested), []
    for t in s["tasks"]:
        u = unit(p, t, "sat", p["arms"]["sat"], s["lag_model"], s["lag_depths"])
        fits = sum(x.minutes for x in planned) + u.minutes <= limit
        (planned if fits else left).append(u)
    return planned, left


def units(p: dict, steplag: str = STEPLAG, lagshape: str = LAGSHAPE) -> list[kit.Unit]:
    """Every unit the protocol plans so far, in the order they run (``plan_units``)."""
    return plan_units(p, steplag, lagshape)[0]


def check_protocol(p: dict, steplag: str = STEPLAG) -> None:
    """Every section is there, the rules' numbers are the ones ``adaptive_parts`` applies, the recorded
    uniform-lag oracle is what stage 1's choices.csv says, and every unit builds (each Config checks itself)."""
    from vaco_jax.studies import adaptive_parts

    missing = [s for s in SECTIONS if s not in p]
    if missing:
        raise ConfigError(f"protocol section {missing[0]!r} missing")
    adaptive_parts.check_rules(p)
    recorded = {int(b): float(v) for b, v in p["oracle"]["uniform"]["per_lag"].items()}
    read = oracle_eps(p, steplag, os.devnull)["uniform"]
    if read != recorded:
        raise ConfigError(f"oracle.uniform.per_lag: {recorded} recorded, but {steplag}/choices.csv says {read}")
    units(p, steplag, os.devnull)


def plan_lines(planned: list, args: Args, digest: str, fixed_known: bool, left: list = (),
               limit: float = 15) -> list[str]:
    """``plan``'s lines: each planned unit, the total, each SAT unit left out (over ``limit`` hours) and,
    before the fixed-lag oracle is known, what follows it."""
    todo = [u for u in planned if not kit.finished(args, u)]
    return ([f"protocol {args.protocol} sha256 {digest}"]
            + [f"{u.name:<44}{u.runs:>5} runs  ~{u.minutes:6.1f} min  {kit.status(args, u)}" for u in planned]
            + [f"{'total':<44}{sum(u.runs for u in planned):>5} runs  ~{sum(u.minutes for u in planned) / 60:.1f} h "
               f"in {len(planned)} units at the protocol's measured rates; to run: {len(todo)} units, "
               f"~{sum(u.minutes for u in todo) / 60:.1f} h"]
            + [f"{u.name:<44}{u.runs:>5} runs  ~{u.minutes:6.1f} min  not run: over the {limit:g} h budget"
               for u in left]
            + ([] if fixed_known else ["the fixed-lag oracle's units at an ε other than the robust one, then SAT's "
                                       "units (descriptive, those that fit the budget), follow the lag-shape "
                                       "study's fixed-lag PPO-Clip surface (its tuning_choices.csv)"]))


def main(args: Args):
    if not os.path.exists(args.protocol):
        raise ConfigError(f"protocol: {args.protocol} is missing (the study's protocol is committed with the code)")
    p, digest = kit.load_protocol(args.protocol)
    kit.check_protocol_file(lambda q: check_protocol(q, args.steplag), p, args.protocol)
    kit.check_dry_run(args)
    plan = lambda: units(p, args.steplag, args.lagshape)  # noqa: E731
    if args.stage == "report":
        from vaco_jax.studies import adaptive_parts

        kit.check_report_protocol(args.results, digest, args.protocol)
        kit.check_units_present(args.results, args.runs, unit_dir)
        listed = {m["unit"] for m in kit.manifest(args.results)}
        planned, left = plan_units(p, args.steplag, args.lagshape)
        return adaptive_parts.report(p, args, planned, listed, oracle_eps(p, args.steplag, args.lagshape), left)
    if args.stage == "plan" or args.dry_run:
        kit.check_units_present(args.results, args.runs, unit_dir)
    (planned, left), fixed_known = plan_units(p, args.steplag, args.lagshape), oracle_eps(
        p, args.steplag, args.lagshape)["fixed"] is not None
    if args.stage == "plan":
        print(*plan_lines(planned, args, digest, fixed_known, left, p["budget"]["limit_hours"]), sep="\n")
        return []
    kit.check_minutes(args)
    spec = lambda u: {"study": "adaptive", "unit": u.name, "protocol_sha256": digest}  # noqa: E731
    return (kit.dry_run_units(planned, digest, args) if args.dry_run
            else kit.run_units(plan, args, digest, unit_dir, spec, units=planned, all_done=all_done(fixed_known)))


def all_done(fixed_known: bool) -> str:
    """What ``run`` says when every planned unit has finished: before the fixed-lag oracle is known, that
    its units follow the lag-shape study's fixed-lag surface."""
    if fixed_known:
        return "every unit has finished"
    return ("every unit planned so far has finished; the fixed-lag oracle's units, then SAT's, follow the lag-shape "
            "study's fixed-lag PPO-Clip surface (its tuning_choices.csv, written by `lagshape report`), then `plan`")


def cli() -> None:
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
