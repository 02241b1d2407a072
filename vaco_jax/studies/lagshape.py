"""The lag real systems make (``results/lagshape/``): a study on the kit, its protocol fixed before its runs.

Five parts (``protocol.json``, explained in ``protocol.md``):

* ``publish``: the simulator's ``publish`` lag model (interval 8, ages 1..8, all actors alike, correlated
  from one update to the next) against the deep-lag study's real ``publish8`` runs, by the deep-lag rule
  (``publish_check.csv``): does it close the gap the i.i.d. histogram leaves in PPO-Clip's retention?
* ``age19``: the deep-lag study's age-19 comparisons again, under a margin derived from the negative
  control's own simulated effect (half of it), from the committed tables alone (``age19_check.csv``).
* ``shape``: uniform, fixed and publish lag at matched mean ages 7 and 15, PPO-Clip and VACO at the
  step-size x lag study's lag-robust settings, on Hopper-v4 and Walker2d-v4.
* ``tuning`` then ``study``: PPO-Clip's and VACO's surfaces under fixed lag, a lag-robust setting each by
  the committed rule, then both at those settings on fresh seeds (best against best).
* ``pilot``: Ant-v4, PPO-Clip at B = 32 for 3M steps, 3 seeds: is 1M steps a usable reference?

``python -m vaco_jax.studies.lagshape plan | run --minutes M | report`` (``loto``: the tasks-as-variance
tables of ``lagshape_tasks``). This module reports ``publish`` and ``age19``; ``lagshape_parts`` the other
parts, each once its units are all in the manifest, and ``lagshape_tuning`` adds the units the tuning rules
ask for (extensions, added seeds) and, once ``tuning_choices.csv`` is complete, the ``study`` units.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

import numpy as np
from tyro.conf import Positional

from vaco_jax.core.config import Config, ConfigError
from vaco_jax.studies import kit

RESULTS = os.path.join("results", "lagshape")
DEEP_LAG = os.path.join("results", "deep_lag")
STEPLAG = os.path.join("results", "steplag")
PARTS = ("publish", "pilot", "shape", "tuning")  # the order units run in (``study`` follows ``tuning``'s choice)


@dataclasses.dataclass
class Args(kit.RunArgs):
    stage: Positional[Literal["plan", "run", "report", "loto"]] = "plan"  # loto: lagshape_tasks' two tables
    results: str = RESULTS  # protocol, manifest, the units' tables and the reports
    runs: str = os.path.join("runs", "lagshape")  # the units' run directories (checkpoints)
    deep_lag: str = DEEP_LAG  # the deep-lag study's committed results (the real runs publish/age19 compare with)
    steplag: str = STEPLAG  # the step size x lag study's results (settings, arms, normalisation; loto)
    protocol = property(lambda self: os.path.join(self.results, "protocol.json"))


def config_of(p: dict, task: str, method: str, **fields) -> Config:
    """The study's settings (the step size x lag study's) on ``task``, one method and its fields; a group's
    ``lag_depth`` is its smallest (its cells carry their own; the publish model checks its interval against it)."""
    s = {k: tuple(v) if isinstance(v, list) else v for k, v in p["settings"].items()}
    return Config(env=task, backend=p["engine"]["backend"], method=method, **{**s, **fields})


def minutes(group) -> float:
    """A unit's estimated minutes: its training and evaluation env steps at the measured rates of its shape."""
    from vaco_jax.driver import dryrun

    return dryrun.group_minutes(group)


def unit(stage: str, subdir: str, config: Config, cells) -> kit.Unit:
    from vaco_jax.driver import grid

    g = grid.Group(config, tuple(cells), subdir, f"{stage}/{subdir}")
    return kit.Unit(f"{stage}/{subdir}", stage, g, len(g.cells), minutes(g))


def unit_dir(name: str) -> str:
    return name  # "<stage>/<subdir>": its folder under the results and under the run directories


def arm_fields(arm: dict) -> dict:
    return {k: v for k, v in arm.items() if k != "method"}


def units(p: dict, results: str | None = None, steplag: str = STEPLAG) -> list[kit.Unit]:
    """Every unit the protocol fixes so far, in the order they run (``PARTS``); with ``results`` (its
    committed tables) also the tuning units the rules have asked for and the study units once the tuning
    choices are complete (``lagshape_tuning``; ``steplag``: stage 1's normalisation)."""
    from vaco_jax.driver import grid
    from vaco_jax.studies import lagshape_tuning

    out = []
    c = p["publish"]
    for method, arm in c["arms"].items():
        for block in c["seed_blocks"]:
            config = config_of(p, c["task"], arm["method"], lag_depth=c["lag_depth"], **{**c["settings"], **arm_fields(arm)})
            out.append(unit("publish", f"{method}/seeds{block[0]}-{block[-1]}", config,
                            grid.grid([c["lag_depth"]], block)))
    c = p["pilot"]
    config = config_of(p, c["task"], c["arm"]["method"], **{**c["settings"], **arm_fields(c["arm"])})
    out.append(unit("pilot", f"{c['task']}/B{c['lag_depth']}", config, grid.grid([c["lag_depth"]], c["seeds"])))
    c = p["shape"]
    for task in c["tasks"]:
        for method, arm in c["arms"].items():
            for model, shape in c["models"].items():
                config = config_of(p, task, arm["method"], lag_model=model, lag_depth=min(shape["lag_depths"]),
                                   **arm_fields(arm), **{k: v for k, v in shape.items() if k != "lag_depths"})
                out.append(unit("shape", f"{task}/{method}/{model}", config, grid.grid(shape["lag_depths"], c["seeds"])))
    c = p["tuning"]
    for task in c["tasks"]:
        for method, s in c["surfaces"].items():
            config = config_of(p, task, s["method"], lag_model=c["lag_model"])
            out.append(unit("tuning", f"{task}/{method}", config,
                            grid.grid(c["lag_depths"], c["seeds"], **{s["knob"]: list(s["values"])})))
    if results is None:
        return out
    for task, method, suffix, cells in lagshape_tuning.extra_units(p, results, steplag):
        out.append(unit("tuning", f"{task}/{method}/{suffix}",
                        config_of(p, task, c["surfaces"][method]["method"], lag_model=c["lag_model"]), cells))
    listed, chosen = {m["unit"] for m in kit.manifest(results)}, lagshape_tuning.chosen(p, results)
    if chosen is None or any(u.stage == "tuning" and u.name not in listed for u in out):
        return out
    for task in p["study"]["tasks"]:  # best against best: each method at its fixed-lag robust setting
        for method, s in c["surfaces"].items():
            config = config_of(p, task, s["method"], lag_model=p["study"]["lag_model"], **{s["knob"]: chosen[method]})
            out.append(unit("study", f"{task}/{method}", config, grid.grid(p["study"]["lag_depths"], p["study"]["seeds"])))
    return out


def check_protocol(p: dict) -> None:
    """Every unit builds (each Config checks its own fields) and the rules' numbers are in range."""
    for name in ("publish", "age19", "shape", "tuning", "study", "pilot"):
        if name not in p:
            raise ConfigError(f"protocol section {name!r} missing")
    if not 0 < p["publish"]["rule"]["margin"] < 1 or not 0 < p["age19"]["margin_share"] < 1:
        raise ConfigError("publish.rule.margin and age19.margin_share must lie in (0, 1)")
    from vaco_jax.studies import lagshape_tuning
    lagshape_tuning.check(p)
    units(p)


# ----------------------------------------------------------------------------------- the two reports here
def real_scores(p: dict, deep_lag: str) -> dict:
    """{(configuration, method): AUCs}: the deep-lag study's real runs (lockstep, age4), scored at the
    simulator's evaluation points, and its simulated lockstep as ('lockstep', method, 'lockstep')."""
    from vaco_jax.studies import kit_real

    c, out = p["publish"], {}
    for method in c["arms"]:
        for name in ("lockstep", c["real_configuration"]):
            runs = kit_real.real_scores(deep_lag, {"name": name}, method, c["real_seeds"], c["rule"]["num_evals"])
            out[(name, method)] = kit_real.score_values(runs)
        path = os.path.join(deep_lag, "sim", "lockstep", method, "lockstep", c["sim_lockstep_programs"], "scores.csv")
        out[("lockstep", method, "lockstep")] = kit_real.score_values(
            kit_real.cells_of(path, (1.0,), c["sim_lockstep_seeds"], "lockstep"))
    return out


def publish_rows(p: dict, args: Args, methods: tuple) -> list[dict]:
    """The deep-lag rule on the publish counterpart of ``methods`` (those whose publish units have all
    finished): each one's retention, and the contrast once both arms are in; beside the committed
    histogram and uniform verdicts. A row's bootstrap draws only its own arms, so a row computed before
    the other arm's units finish is the row the full report gives."""
    from vaco_jax.analysis import results
    from vaco_jax.studies import deep_lag_report, kit_real

    c, scores = p["publish"], real_scores(p, args.deep_lag)
    real, sim, ages = {k: v for k, v in scores.items() if len(k) == 2}, {}, {}
    for method in methods:
        rows = results.placed_rows(os.path.join(args.results, "publish", method), ("block",))
        if sorted(int(r["seed"]) for r in rows) != sorted(s for b in c["seed_blocks"] for s in b):
            raise ConfigError(f"report: the publish runs of {method} lack seeds; run every publish unit first")
        sim[(c["real_configuration"], method, "publish")] = kit_real.score_values(rows)
        sim[("lockstep", method, "lockstep")] = scores[("lockstep", method, "lockstep")]
        ages[method] = float(np.mean([float(r["mean_mean_staleness"]) for r in rows]))
    pair = tuple(c["contrast"])
    if set(methods) == set(pair):
        out = deep_lag_report.quantity_rows(real, sim, [c["real_configuration"]], ["publish"], c["rule"], pair)
    else:  # one arm: its retention rows alone (the contrast waits for the other)
        out = [r for m in methods for r in deep_lag_report.quantity_rows(
            real, sim, [c["real_configuration"]], ["publish"], c["rule"], (m, m))[1:2]]
    committed = {(r["quantity"], r["method"], r["variant"]): r for r in
                 results.read_table(os.path.join(args.deep_lag, "verdicts.csv"))
                 if r["configuration"] == c["real_configuration"]}
    for r in out:
        r["sim_mean_age"] = float(np.mean([ages[m] for m in (pair if r["quantity"] == "contrast" else (r["method"],))]))
        for v in ("histogram", "uniform"):
            k = committed[(r["quantity"], r["method"], v)]
            r[f"{v}_sim"], r[f"{v}_difference"], r[f"{v}_verdict"] = float(k["sim"]), float(k["difference"]), k["verdict"]
    return out


def age19_rows(p: dict, deep_lag: str) -> list[dict]:
    """The deep-lag study's age-19 rows, each variant's committed interval judged against a margin of
    ``margin_share`` x |simulated control - simulated histogram| of its quantity (the control's own effect)."""
    from vaco_jax.analysis import results
    from vaco_jax.studies import kit_real

    c = p["age19"]
    rows = [r for r in results.read_table(os.path.join(deep_lag, "verdicts.csv")) if r["configuration"] == c["configuration"]]
    sims = {(r["quantity"], r["method"], r["variant"]): float(r["sim"]) for r in rows}
    out = []
    for r in rows:
        effect = sims[(r["quantity"], r["method"], "control")] - sims[(r["quantity"], r["method"], "histogram")]
        margin = c["margin_share"] * abs(effect)
        out.append({"quantity": r["quantity"], "configuration": r["configuration"], "method": r["method"],
                    "variant": r["variant"], "real": float(r["real"]), "sim": float(r["sim"]),
                    "difference": float(r["difference"]), "low": float(r["low"]), "high": float(r["high"]),
                    "control_effect": effect, "margin": margin, "verdict": kit_real.verdict(float(r["low"]),
                                                                                          float(r["high"]), margin),
                    "committed_margin": float(r["margin"]), "committed_verdict": r["verdict"],
                    "real_mean_age": float(r["real_mean_age"])})
    control = {(r["quantity"], r["method"]): r["verdict"] == "differs" for r in out if r["variant"] == "control"}
    for r in out:  # where the control is not called differs, no call of that quantity can tell right from wrong
        r["discriminates"] = control[(r["quantity"], r["method"])]
    return out


def report(p: dict, args: Args) -> dict:
    from vaco_jax.analysis import results
    from vaco_jax.studies import lagshape_parts, lagshape_tuning

    listed = {m["unit"] for m in kit.manifest(args.results)}
    parts, lines = lagshape_parts.reports(p, args, units(p, args.results, args.steplag), listed,
                                          lambda: lagshape_tuning.tables(p, args.results, args.steplag))
    out = {"age19": age19_rows(p, args.deep_lag)}
    done = tuple(m for m in p["publish"]["arms"] if all(u.name in listed for u in units(p)
                                                        if u.stage == "publish" and u.name.startswith(f"publish/{m}/")))
    if done:
        out["publish"] = publish_rows(p, args, done)
    if len(done) < len(p["publish"]["arms"]):
        print(f"publish: the units of {', '.join(m for m in p['publish']['arms'] if m not in done)} have not all "
              "finished; publish_check.csv holds the rows of the arms that have (the contrast waits for both)")
    for name, rows in [*((p[n]["table"], r) for n, r in out.items()), *parts.items()]:  # computed first, then written
        results.write_table(os.path.join(args.results, name), rows)
    for name, rows in out.items():
        print(f"{p[name]['table']}:")
        for r in rows:
            extra = f" (histogram {r['histogram_verdict']}, uniform {r['uniform_verdict']})" if name == "publish" else ""
            print(f"  {r['quantity']:<9} {r['method']:<16} {r['variant']:<9} real {r['real']:.3f} sim {r['sim']:.3f} "
                  f"sim-real {r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}] margin {r['margin']:.3f}: "
                  f"{r['verdict']}{extra}")
    for r in out["age19"]:
        if r["variant"] == "control" and not r["discriminates"]:
            print(f"age19: the control of {r['quantity']} {r['method']} is not called differs: at this margin the check "
                  "cannot tell a wrong histogram from a right one there")
    print(*lines, sep="\n")
    return {**out, **parts}


def main(args: Args):
    if args.stage == "loto":
        from vaco_jax.studies import lagshape_tasks
        return lagshape_tasks.main(lagshape_tasks.Args("loto", steplag=args.steplag, out=args.results))
    if not os.path.exists(args.protocol):
        raise ConfigError(f"protocol: {args.protocol} is missing (the study's protocol is committed with the code)")
    p, digest = kit.load_protocol(args.protocol)
    kit.check_protocol_file(check_protocol, p, args.protocol)
    kit.check_dry_run(args)
    if args.stage == "report":
        kit.check_report_protocol(args.results, digest, args.protocol)
        kit.check_units_present(args.results, args.runs, unit_dir)
        return report(p, args)
    if args.stage == "plan" or args.dry_run:
        kit.check_units_present(args.results, args.runs, unit_dir)
    planned = units(p, args.results, args.steplag)
    if args.stage == "plan":
        print(f"protocol {args.protocol} sha256 {digest}", *(
            f"{u.name:<44}{u.runs:>5} runs  ~{u.minutes:6.1f} min  {kit.status(args, u)}" for u in planned),
              f"{'total':<44}{sum(u.runs for u in planned):>5} runs  ~{sum(u.minutes for u in planned) / 60:.1f} h "
              "(the confirmatory units follow the fixed-lag surfaces' choice)", sep="\n")
        return []
    kit.check_minutes(args)
    spec = lambda u: {"study": "lagshape", "unit": u.name, "protocol_sha256": digest}  # noqa: E731
    return (kit.dry_run_units(planned, digest, args) if args.dry_run
            else kit.run_units(lambda: units(p, args.results, args.steplag), args, digest, unit_dir, spec,
                               units=planned, all_done=all_done(planned)))


def all_done(planned: list) -> str:
    """What ``run`` says when every planned unit has finished: before the study's units are planned, that
    they follow ``report`` (it writes tuning_choices.csv from the finished surfaces)."""
    if any(u.stage == "study" for u in planned):
        return "every unit has finished"
    return ("every unit planned so far has finished; the best-against-best units follow the fixed-lag choice: "
            "run `report` (it writes tuning_choices.csv), then `plan`")


def cli() -> None:
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
