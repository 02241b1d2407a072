"""Real lag where the study's claims live: which real configurations realise mean ages of about 4 and 16.

    python experiments/deep_lag.py plan      # the pilot's configurations, its rule, and what is left to run
    python experiments/deep_lag.py pilot     # run them (a quiet machine: the timing decides the ages)
    python experiments/deep_lag.py choose    # apply the rule to the pilot's runs: one configuration per target
    python experiments/deep_lag.py power     # the study's power per number of seeds (from the first study's spread)
    python experiments/deep_lag.py real --minutes 80   # the study's real runs (resumable)
    python experiments/deep_lag.py sim --minutes 80    # their simulated counterparts (resumable)
    python experiments/deep_lag.py report              # verdicts, wall clock, the figure

The sim-vs-real study (``sim_vs_real``) realised a mean age of about 1 in every configuration: one batch
per actor per update from a queue of one batch per actor, so no batch waits. The locomotion studies'
claims live at the simulator's B = 8 and B = 32, mean ages (B - 1) / 2 = 3.5 and 15.5. This study
finds real configurations that realise those ages on this machine (docs/real_async.md, "Deep lag"),
with two families of knobs a user of a real system recognises:

* **deep queue** (``queueAxQ``): ``A`` actors, each stepping a whole update's envs, feed a queue of
  ``Q`` batches; the learner takes one batch per update. When the actors together outpace the learner
  the queue runs full and a batch is taken about ``Q`` versions after it was queued: the timing decides
  the ages, and their histogram is narrow around its mean, not uniform.
* **publish interval** (``publishK``): the sim-vs-real layout (4 actors, one batch each per update),
  the learner publishing every ``K``-th version: the i-th update after a publication consumes batches
  at least i versions old, whatever the timing; ages spread over 1 ... K, close to uniform.

The study is a declaration on the real-versus-simulated kit (``kit_real``) in parts: its configurations,
presets and numbers (``deep_lag_configs``), its pilot and the rule that chooses the configurations,
fixed before the pilot ran (``deep_lag_pilot``), its real and simulated stages (``deep_lag_study``), its
simulated programs (``deep_lag_programs``) and its statistics (``deep_lag_report``). This module is the
command and the report.

``report`` compares, per deep configuration and simulated variant, (1) the contrast C = (mean AUC of
VACO - mean AUC of PPO-Clip) / the real lockstep PPO-Clip mean AUC and (2) each method's retention
R = mean(deep) / mean(lockstep) (real lockstep in the real R, simulated lockstep in the simulated one)
between the real runs and the simulated ones: the simulator *predicts* when the 90% bootstrap CI of
simulated - real (every arm's seeds resampled independently) lies inside +-``margin``, *differs* when
it lies wholly outside, else *inconclusive*. It also gives each real configuration's wall clock
(median env steps/s, seconds to the first evaluation at or above ``return_threshold``, start load),
and writes ``arms.csv`` (every arm's runs, diverged runs, realised mean age and AUC), ``verdicts.csv``,
``wall_clock.csv`` and ``figures/deep_lag.png``. The score is the AUC of
the evaluation curve at the simulator's evaluation points (``kit_real.real_score``). ``report``
writes no protocol: it reads under the one the first stage wrote (its checksum verified), once every
real run and simulated program has finished and holds its tables (the first one that has not, or the
tables gone, named), every real histogram verified against its checksum, and every program holding one
row per seed of each counterpart it ran; else it writes nothing.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

import numpy as np
from tyro.conf import Positional

from vaco_jax.core.config import ConfigError
from vaco_jax.studies import kit_real, kit_real_runs
# the study's declarations and parts, also named by this module (docs/real_async.md, results/deep_lag/protocol.md)
from vaco_jax.studies.deep_lag_configs import (CONFIGURATIONS, LOCKSTEP, PRESETS, STEADY_FROM, STUDY,  # noqa: F401
                                               TARGETS, TOLERANCE, config_of, settings_of)
from vaco_jax.studies.deep_lag_pilot import choose, choose_stage, pilot, pilot_plan_lines  # noqa: F401
from vaco_jax.studies.deep_lag_programs import PROGRAM_CELLS, seed_blocks  # noqa: F401
from vaco_jax.studies.deep_lag_report import (CONTRAST, SPREAD_SOURCE, VARIANTS, arm_rows, diverged_in, none_as_nan,
                                             power_table, quantity_rows, spread, wall_clock_rows)
from vaco_jax.studies.deep_lag_study import (real_histogram, require_study_units, study_configurations,
                                             study_plan_lines, study_real, study_scores, study_sim, variants_of)
from vaco_jax.studies.kit_real import mean_age, pooled


@dataclasses.dataclass
class Args:
    """Real configurations that realise deep lag: plan, pilot, choose, power; the study: real, sim, report."""

    stage: Positional[Literal["plan", "pilot", "choose", "power", "real", "sim", "report"]]
    preset: Literal["cpu", "tiny"] = "cpu"  # the pilot's and the study's numbers (PRESETS, STUDY)
    out: str = ""  # where the pilot's and the study's runs and tables go
    work: str = ""  # sim: the simulator's run directories (checkpoints)
    configurations: tuple[str, ...] = ()  # pilot, choose: only these (names as plan prints them)
    minutes: float | None = None  # real, sim: start no run or sweep that would end after this many minutes
    progress: bool = True  # a line per pilot or real run and a progress bar per simulated sweep
    margin: float = 0.15  # power: the equivalence margin (scale: the real lockstep mean)
    sim_per_real: float = 2.0  # power: simulated seeds per real seed


HELP_DEFAULTS = {"configurations": "every configuration", "out": "results/deep_lag (cpu), runs/deep_lag_tiny (tiny)",
                 "work": "runs/deep_lag_cpu (cpu), runs/deep_lag_tiny (tiny)", "minutes": "no limit"}


def study_protocol(preset: str, spec: dict, study: dict, configs: list[dict]) -> dict:
    return {"preset": preset, "task": spec["task"], "methods": list(spec["methods"]), "knobs": spec["knobs"],
            "sizes": spec["sizes"], "study": study, "configurations": configs, "variants": list(VARIANTS),
            "contrast": list(CONTRAST), "score": "auc_eval_return"}


def study_report(args: Args, spec: dict, study: dict, configs: list[dict]) -> dict:
    from vaco_jax.analysis import figures, results

    require_study_units(args.out, spec, study, configs, PROGRAM_CELLS[args.preset])
    real, sim, diverged, realised = study_scores(args.out, spec, study, configs, PROGRAM_CELLS[args.preset])
    deep = [c for c in configs if c["family"] != "sync"]
    rows = quantity_rows(real, sim, [c["name"] for c in deep], VARIANTS, study)
    layout = {c["name"]: c["configuration"] for c in configs}
    # the real runs' consumed samples by age, per configuration and method: read once, pooled as needed
    ages = {(c["name"], m): real_histogram(args.out, c, (m,), study["real_seeds"]) for c in configs
            for m in spec["methods"]}
    histograms = {}
    for c in deep:
        hist = tuple(pooled([ages[(c["name"], m)] for m in spec["methods"]]))
        drawn = {v: pooled([realised.get((c["name"], m, v)) for m in spec["methods"]]) for v in VARIANTS}
        histograms[c["name"]] = {"real runs (pooled)": hist,
                                 **{f"simulated: {v}": h for v, h in drawn.items() if h is not None}}
    for r in rows:
        methods = spec["methods"] if r["quantity"] == "contrast" else (r["method"],)
        c = next(x for x in deep if x["name"] == r["configuration"])
        weights = [variants_of(args.out, study, c, m)[r["variant"]] for m in methods]
        r.update(layout=layout[r["configuration"]],
                 real_mean_age=mean_age(pooled([ages[(r["configuration"], m)] for m in methods])),
                 sim_mean_age=float(np.mean([mean_age(w) for w in weights])),
                 sim_realised_mean_age=mean_age(pooled([realised.get((r["configuration"], m, r["variant"]))
                                                          for m in methods])),
                 diverged=diverged_in(r, diverged))
    wall = wall_clock_rows(args.out, spec, study, configs)
    arms = arm_rows(real, sim, diverged, realised, ages, configs, spec["methods"])
    results.write_table(os.path.join(args.out, "arms.csv"), none_as_nan(arms))
    results.write_table(os.path.join(args.out, "verdicts.csv"), none_as_nan(rows))
    results.write_table(os.path.join(args.out, "wall_clock.csv"), none_as_nan(wall))
    paths = figures.plot_deep_lag(args.out, rows, histograms, study["margin"])
    ci = f"{study['confidence']:.0%} CI"
    print(f"{'quantity':<9} {'configuration':<20} {'method':<18} {'variant':<9} {'age real/sim':>12} {'real':>7} "
          f"{'sim':>7} {'sim-real':>8} {ci:>17}  verdict (margin +-{study['margin']:g})")
    for r in rows:
        ages = f"{r['real_mean_age']:.2f}/{r['sim_realised_mean_age']:.2f}"
        where = f"{r['configuration']} ({r['layout']})"
        print(f"{r['quantity']:<9} {where:<20} {r['method']:<18} {r['variant']:<9} {ages:>12} {r['real']:>7.3f} "
              f"{r['sim']:>7.3f} {r['difference']:>8.3f} [{r['low']:>7.3f}, {r['high']:>7.3f}]  {r['verdict']}")
    note = kit_real.control_note(rows)
    if note:
        print(note)
    print(f"wall clock, real runs (medians over seeds; threshold: an evaluation return >= "
          f"{study['return_threshold']:g}):")
    for w in wall:
        reach = "never (median)" if w["seconds_to_threshold"] is None else f"{w['seconds_to_threshold']:.3g} s"
        load = "n/a" if w["load_start"] is None else f"{w['load_start']:.2f}"
        print(f"  {w['configuration']:<9} {w['layout']:<10} {w['method']:<9} {w['env_steps_per_second']:>8.0f} env "
              f"steps/s, threshold {reach} ({w['reached']}/{w['runs']} reached), start load {load}, mean age "
              f"{w['mean_age']:.2f}")
    print("tables:", *(os.path.join(args.out, f) for f in ("arms.csv", "verdicts.csv", "wall_clock.csv")))
    print("figure:", *paths, sep="\n  ")
    return {"verdicts": rows, "wall_clock": wall, "arms": arms, "figures": paths}


def power(args: Args) -> list[dict]:
    """``power``: the rule's power per number of seeds at ``--margin``, printed."""
    if not 0 < args.margin < 1 or not args.sim_per_real > 0:
        raise ConfigError(f"margin={args.margin!r} must lie in (0, 1) and sim_per_real={args.sim_per_real!r} "
                          "must be positive")
    rows = power_table(spread(), args.margin, sim_per_real=args.sim_per_real)
    keys = [k for k in rows[0] if k not in ("real_seeds", "sim_seeds")]
    print(f"power of 'predicts' (90% CI of sim - real inside +-{args.margin:g}) when the simulator is exact; "
          f"spread: {SPREAD_SOURCE['task']} in {SPREAD_SOURCE['study']}")
    print("real sim  " + "  ".join(keys))
    for r in rows:
        print(f"{r['real_seeds']:>4} {r['sim_seeds']:>3}  " + "  ".join(f"{r[k]:>{len(k)}.2f}" for k in keys))
    return rows


def main(args: Args):
    spec = dict(PRESETS[args.preset])
    args.out = args.out or (os.path.join("results", "deep_lag") if args.preset == "cpu"
                            else os.path.join("runs", "deep_lag_tiny"))
    args.work = args.work or os.path.join("runs", f"deep_lag_{args.preset}")
    kit_real_runs.check_minutes(args.minutes)
    for name in args.configurations:
        settings_of(name)
    if args.configurations and args.stage not in ("pilot", "choose"):
        raise ConfigError(f"configurations: read by the stages pilot and choose only; {args.stage} takes every "
                          "configuration (the study's stages: lockstep and the ones chosen.csv names)")
    for name, *_ in CONFIGURATIONS:  # every setting checked before anything runs
        for method in spec["methods"]:
            config_of(spec, name, method)
    if args.stage == "plan":
        print("\n".join(pilot_plan_lines(args.out, spec)
                        + study_plan_lines(args.out, spec, STUDY[args.preset], PROGRAM_CELLS[args.preset])))
        return None
    if args.stage == "pilot":
        return pilot(args, spec)
    if args.stage == "power":
        return power(args)
    if args.stage == "choose":
        return choose_stage(args, spec)
    study = STUDY[args.preset]
    configs = study_configurations(args.out, spec, study)  # refused before anything runs or is written
    kit_real_runs.fix_protocol(os.path.join(args.out, "study_protocol.json"),
                               study_protocol(args.preset, spec, study, configs), stage=args.stage,
                               hint="the study's numbers (STUDY) or chosen.csv's configurations changed since its "
                                    "first stage; restore them or use another --out")
    if args.stage == "real":
        return study_real(args, spec, study, configs)
    if args.stage == "sim":
        return study_sim(args, spec, study, configs, PROGRAM_CELLS[args.preset])
    return study_report(args, spec, study, configs)


def cli() -> None:
    """The command line (`experiments/deep_lag.py`)."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
