"""The deep-lag study's pilot and the rule that chooses its configurations (``deep_lag``'s ``plan``,
``pilot`` and ``choose``; docs/real_async.md, "The pilot").

The pilot runs every configuration (``deep_lag_configs.CONFIGURATIONS``) for ``pilot_env_steps`` on
Hopper-v4 at the locomotion study's settings (PPO-Clip and VACO at the first study's B = 1 tuning), and
records each run's histogram (``record.csv``, ``age_histogram.csv``, ``score.json`` with the machine's
load) under ``OUT/pilot/<configuration>/<method>/seed<k>/``. The **steady-state** mean age is the mean
over the batches consumed at learner versions >= ``STEADY_FROM`` (earlier versions cannot be that old yet).

**The rule, fixed before the pilot ran** (:func:`choose`): for each target mean age (``TARGETS``), the
configurations whose steady-state mean age, pooled over the pilot's runs of both methods, lies within
``TOLERANCE`` (relative) of the target qualify; among them a deep-queue configuration is preferred (the
timing-driven lag of a real learner-bound system), then the one nearest the target; if none
qualifies, the configuration nearest the target is chosen and the study runs at the age it realises
(said so in the output). Ties go to the configuration listed first. ``choose`` is refused while a
configuration has not finished its pilot runs (``--configurations`` applies the rule among the ones
named, and ``chosen.csv`` says so), and once the study has run on its choice.
"""

from __future__ import annotations

import os

import numpy as np

from vaco_jax.core.config import ConfigError
from vaco_jax.studies import kit_real, kit_real_runs
from vaco_jax.studies.deep_lag_configs import CONFIGURATIONS, TARGETS, TOLERANCE, config_of


def pilot_dir(out: str, name: str, method: str, seed: int) -> str:
    """A pilot run's directory: ``OUT/pilot/<configuration>/<method>/seed<k>``."""
    return os.path.join(out, "pilot", name, method, f"seed{seed}")


def run_summary(run_dir: str, steady_from: int) -> dict:
    """One run's realised ages, from its record (consumed batches, weighted by their samples)."""
    from vaco_jax.analysis import results

    rows = results.read_table(os.path.join(run_dir, "record.csv"))
    score = results.read_json(os.path.join(run_dir, "score.json"))
    consumed = [r for r in rows if r["fate"] == "consumed"]
    ages = np.array([float(r["age"]) for r in consumed])
    weights = np.array([float(r["samples"]) for r in consumed])
    steady = np.array([float(r["learner_version"]) >= steady_from for r in consumed])
    sa, sw = ages[steady], weights[steady]
    order = np.argsort(sa, kind="stable")
    cum = np.cumsum(sw[order]) / sw.sum()

    def quantile(q):
        return float(sa[order][np.searchsorted(cum, q)])

    fates = [r["fate"] for r in rows]
    return {"mean_age": float(np.average(ages, weights=weights)),
            "steady_mean_age": float(np.average(sa, weights=sw)),
            "steady_sd": float(np.sqrt(np.average((sa - np.average(sa, weights=sw)) ** 2, weights=sw))),
            "p10": quantile(0.10), "p50": quantile(0.50), "p90": quantile(0.90), "max": float(sa.max()),
            "dropped": sum(f.startswith("dropped") for f in fates), "left": fates.count("left in the queue"),
            "consumed": len(consumed), "env_steps_per_second": float(score["env_steps_per_second"]),
            "load_start": (score.get("load_average") or {}).get("start"),
            "load_end": (score.get("load_average") or {}).get("end")}


def pilot(args, spec: dict) -> list[dict]:
    """Every pilot run not yet finished (its ``score.json`` marks it finished)."""
    def runs():
        for seed in spec["pilot_seeds"]:
            for name in args.configurations or tuple(c[0] for c in CONFIGURATIONS):
                for method in spec["methods"]:
                    config, settings = config_of(spec, name, method)
                    yield pilot_dir(args.out, name, method, seed), config, settings, seed, f"{name} {method}"

    def line(label, seed, where, score, seconds):
        row = run_summary(where, spec["steady_from"])
        return (f"pilot {label} seed {seed}: mean age {row['mean_age']:.2f} (steady {row['steady_mean_age']:.2f}, "
                f"p10-p90 {row['p10']:g}-{row['p90']:g}, max {row['max']:g}), {score['env_steps_per_second']:.0f} "
                f"env steps/s, {seconds:.0f} s")

    return kit_real_runs.run_real_runs(runs(), None, args.progress, line)


def pilot_rows(out: str, spec: dict) -> list[dict]:
    """Every finished pilot run's summary, in the order of ``CONFIGURATIONS``."""
    rows = []
    for name, family, fields, per_actor in CONFIGURATIONS:
        for method in spec["methods"]:
            for seed in spec["pilot_seeds"]:
                where = pilot_dir(out, name, method, seed)
                if os.path.exists(os.path.join(where, "score.json")):
                    rows.append({"configuration": name, "family": family, "method": method, "seed": seed,
                                 **run_summary(where, spec["steady_from"])})
    return rows


def pilot_plan_lines(out: str, spec: dict) -> list[str]:
    """``plan``'s lines of the pilot: its numbers, then each configuration and its pilot runs to go."""
    lines = [f"pilot: {spec['task']}, methods {', '.join(spec['methods'])}, seeds {list(spec['pilot_seeds'])}, "
             f"{spec['pilot_env_steps']:,} env steps a run; targets {list(TARGETS)} (steady state: learner versions "
             f">= {spec['steady_from']}), tolerance {TOLERANCE:.0%}"]
    for name, family, fields, per_actor in CONFIGURATIONS:
        left = kit_real.unfinished([pilot_dir(out, name, m, s) for m in spec["methods"] for s in spec["pilot_seeds"]],
                                   "score.json")
        knobs = ", ".join(f"{k} {v}" for k, v in fields.items())
        lines.append(f"  {name:<10} {family:<8} {knobs}, {per_actor} envs per actor: {left} pilot run(s) to go")
    return lines


def require_piloted(out: str, spec: dict, names) -> None:
    """``choose``'s rule compares the configurations ``names`` (every one, unless ``--configurations``
    says which): each must have finished its pilot runs (every method and seed), else a ConfigError
    naming those never piloted and those partly piloted."""
    runs = [(m, s) for m in spec["methods"] for s in spec["pilot_seeds"]]
    done = {n: sum(os.path.exists(os.path.join(pilot_dir(out, n, m, s), "score.json")) for m, s in runs)
            for n in names}
    never = [n for n in names if done[n] == 0]
    partly = [f"{n} ({done[n]} of {len(runs)} runs)" for n in names if 0 < done[n] < len(runs)]
    if never or partly:
        finished = [n for n in names if done[n] == len(runs)]
        what = "; ".join(([f"never piloted: {', '.join(never)}"] if never else [])
                         + ([f"partly piloted: {', '.join(partly)}"] if partly else []))
        raise ConfigError(f"choose: the rule compares every configuration it is given, and the pilot has not finished "
                          f"them ({what}); run `pilot`" + (f", or choose among the finished ones only: "
                                                          f"--configurations {' '.join(finished)}" if finished else ""))


def study_begun(out: str) -> list[str]:
    """What the study's stages have left in ``out`` (its protocol, finished real runs, finished simulated
    programs), in words; empty before its first stage."""
    import glob

    real = len(glob.glob(os.path.join(glob.escape(out), "real", "*", "*", "*", "score.json")))
    sim = len(glob.glob(os.path.join(glob.escape(out), "sim", "**", "scores.csv"), recursive=True))
    found = ["study_protocol.json"] if os.path.exists(os.path.join(out, "study_protocol.json")) else []
    return found + ([f"{real} finished real run(s)"] if real else []) + (
        [f"{sim} finished simulated program(s)"] if sim else [])


def choose(rows: list[dict], targets=TARGETS, tolerance: float = TOLERANCE) -> list[dict]:
    """The rule: per target, the configuration to run (see the module's docstring)."""
    pooled: dict[str, dict] = {}
    for r in rows:
        p = pooled.setdefault(r["configuration"], {"configuration": r["configuration"], "family": r["family"],
                                                   "ages": [], "runs": 0})
        p["ages"].append(r["steady_mean_age"])
        p["runs"] += 1
    if not pooled:
        raise ConfigError("choose: no finished pilot run (run `pilot` first)")
    candidates = [dict(p, mean=float(np.mean(p["ages"]))) for p in pooled.values()]
    out = []
    for target in targets:
        def miss(c):
            return abs(c["mean"] / target - 1.0)

        qualify = [c for c in candidates if miss(c) <= tolerance]
        if qualify:
            best = min(qualify, key=lambda c: (c["family"] != "queue", miss(c)))
            why = f"within {tolerance:.0%} of the target" + (", deep queue preferred" if best["family"] == "queue" else "")
        else:
            best = min(candidates, key=miss)
            why = f"none within {tolerance:.0%}: the nearest; the study runs at the age it realises"
        out.append({"target": target, "configuration": best["configuration"], "family": best["family"],
                    "steady_mean_age": best["mean"], "runs": best["runs"], "why": why})
    return out


def choose_stage(args, spec: dict) -> list[dict]:
    """``choose``: the rule applied to the finished pilot runs (of ``--configurations``, when given), written
    to ``pilot.csv`` and ``chosen.csv``; refused once the study has run on an earlier choice."""
    from vaco_jax.analysis import results

    begun = study_begun(args.out)
    if begun:
        raise ConfigError(f"choose: the study has run on {os.path.join(args.out, 'chosen.csv')} ({', '.join(begun)}); "
                          "choosing again would leave its runs under another choice: keep it, or pilot and choose "
                          "in another --out")
    names = tuple(dict.fromkeys(args.configurations)) or tuple(c[0] for c in CONFIGURATIONS)
    require_piloted(args.out, spec, names)
    rows = [r for r in pilot_rows(args.out, spec) if r["configuration"] in names]
    chosen = choose(rows)
    if args.configurations:  # the rule among the configurations asked for: said in the table
        for c in chosen:
            c["why"] += f"; among {', '.join(names)} only (--configurations)"
    results.write_table(os.path.join(args.out, "pilot.csv"), rows)
    results.write_table(os.path.join(args.out, "chosen.csv"), chosen)
    for r in rows:
        print(f"{r['configuration']:<10} {r['method']:<9} seed {r['seed']}: steady mean age {r['steady_mean_age']:.2f} "
              f"(sd {r['steady_sd']:.2f}, p10/p50/p90 {r['p10']:g}/{r['p50']:g}/{r['p90']:g}, max {r['max']:g}), "
              f"dropped {r['dropped']}, {r['env_steps_per_second']:.0f} env steps/s")
    for c in chosen:
        print(f"target {c['target']:g}: {c['configuration']} (steady mean age {c['steady_mean_age']:.2f}; {c['why']})")
    return chosen
