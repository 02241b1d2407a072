"""Real lag where the study's claims live: which real configurations realise mean ages of about 4 and 16.

    python experiments/deep_lag.py plan      # the pilot's configurations, its rule, and what is left to run
    python experiments/deep_lag.py pilot     # run them (a quiet machine: the timing decides the ages)
    python experiments/deep_lag.py choose    # apply the rule to the pilot's runs: one configuration per target
    python experiments/deep_lag.py power     # the study's power per number of seeds (from the first study's spread)

The sim-vs-real study (``sim_vs_real``) realised a mean age of about 1 in every configuration: one batch
per actor per update from a queue of one batch per actor, so no batch waits. The locomotion studies'
claims live at the simulator's B = 8 and B = 32, mean ages (B - 1) / 2 = 3.5 and 15.5. This module
finds real configurations that realise those ages on this machine (docs/real_async.md, "Deep lag"),
with two families of knobs a user of a real system recognises:

* **deep queue** (``queueAxQ``): ``A`` actors, each stepping a whole update's envs, feed a queue of
  ``Q`` batches; the learner takes one batch per update. When the actors together outpace the learner
  the queue runs full and a batch is taken about ``Q`` versions after it was queued: the timing decides
  the ages, and their histogram is narrow around its mean, not uniform.
* **publish interval** (``publishK``): the sim-vs-real layout (4 actors, one batch each per update),
  the learner publishing every ``K``-th version: the i-th update after a publication consumes batches
  at least i versions old, whatever the timing; ages spread over 1 ... K, close to uniform.

The pilot runs every configuration for ``pilot_env_steps`` on Hopper-v4 at the locomotion study's
settings (PPO-Clip and VACO at the first study's B = 1 tuning), and records each run's histogram
(``record.csv``, ``age_histogram.csv``, ``score.json`` with the machine's load) under
``results/deep_lag/pilot/``. The **steady-state** mean age is the mean over the batches consumed at
learner versions >= ``STEADY_FROM`` (earlier versions cannot be that old yet).

**The rule, fixed before the pilot ran** (``choose``): for each target mean age (``TARGETS``), the
configurations whose steady-state mean age, pooled over the pilot's runs of both methods, lies within
``TOLERANCE`` (relative) of the target qualify; among them a deep-queue configuration is preferred (the
timing-driven lag of a real learner-bound system), then the one nearest the target; if none
qualifies, the configuration nearest the target is chosen and the study runs at the age it realises
(said so in the output). Ties go to the configuration listed first.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Literal

import numpy as np
from tyro.conf import Positional

from vaco_jax.core.config import ConfigError

TARGETS = (4.0, 16.0)  # mean ages of the simulator's B = 8 (3.5) and B = 32 (15.5), rounded up
TOLERANCE = 0.25  # a configuration qualifies for a target when |mean age / target - 1| <= this
STEADY_FROM = 32  # learner versions from which any age the buffer holds (32) can occur

# (name, family, RealSettings fields, envs per actor). Hopper-v4's update takes 16 envs x 128 steps: a
# deep-queue actor steps all 16 (the update's batch is one actor's), a publish-interval actor 4 of them.
CONFIGURATIONS = (
    ("queue2x4", "queue", dict(num_actors=2, queue_capacity=4, batches_per_update=1), 16),
    ("queue4x4", "queue", dict(num_actors=4, queue_capacity=4, batches_per_update=1), 16),
    ("queue2x16", "queue", dict(num_actors=2, queue_capacity=16, batches_per_update=1), 16),
    ("queue4x16", "queue", dict(num_actors=4, queue_capacity=16, batches_per_update=1), 16),
    ("publish8", "publish", dict(num_actors=4, queue_capacity=4, publish_interval=8), 4),
    ("publish31", "publish", dict(num_actors=4, queue_capacity=4, publish_interval=31), 4),
)

PRESETS = {
    # Hopper-v4 at the locomotion study's settings (its task defaults), the first study's B = 1 tuning
    "cpu": dict(task="Hopper-v4", methods=("ppo_clip", "vaco"), knobs={"ppo_clip": {"clip_epsilon": 0.2},
                                                                      "vaco": {"tv_budget": 0.06}},
                pilot_seeds=(0,), pilot_env_steps=96 * 2048, num_evals=2, eval_episodes=2, buffer_capacity=32,
                sizes={}, steady_from=STEADY_FROM),
    # the tiny pure-JAX task, for tests: seconds
    "tiny": dict(task="point_mass", methods=("ppo_clip", "vaco"), knobs={}, pilot_seeds=(0,),
                 pilot_env_steps=24 * 8 * 16, num_evals=2, eval_episodes=2, buffer_capacity=32,
                 sizes=dict(unroll_length=16, episode_length=50, num_epochs=1, num_minibatches=2), steady_from=4),
}


@dataclasses.dataclass
class Args:
    """Real configurations that realise deep lag: plan, pilot, choose, power."""

    stage: Positional[Literal["plan", "pilot", "choose", "power"]]
    preset: Literal["cpu", "tiny"] = "cpu"  # the pilot's numbers (PRESETS)
    out: str = ""  # where the pilot's runs and tables go
    configurations: tuple[str, ...] = ()  # pilot: only these (names as plan prints them)
    progress: bool = True  # a line per pilot run
    margin: float = 0.15  # power: the equivalence margin (scale: the real lockstep mean)
    sim_per_real: float = 2.0  # power: simulated seeds per real seed


HELP_DEFAULTS = {"configurations": "every configuration", "out": "results/deep_lag (cpu), runs/deep_lag_tiny (tiny)"}


def settings_of(name: str):
    from vaco_jax.driver.actor_learner import RealSettings

    for n, _, fields, _ in CONFIGURATIONS:
        if n == name:
            return RealSettings(**fields)
    raise ConfigError(f"configurations: {name!r}; allowed values: {', '.join(c[0] for c in CONFIGURATIONS)}")


def config_of(spec: dict, name: str, method: str):
    """The training settings of one configuration: the update's batch is the simulator's shape
    (``envs_per_actor x batches_per_update`` envs), every actor together stepping ``num_envs``."""
    from vaco_jax.core.config import Config

    per_actor = next(c[3] for c in CONFIGURATIONS if c[0] == name)
    settings = settings_of(name)
    sizes = dict(spec["sizes"])
    if spec["task"] != "point_mass":
        base = Config.for_task(spec["task"], method=method)
        if per_actor * settings.per_update() != base.num_envs:
            raise ConfigError(f"{name}: {per_actor} envs x {settings.per_update()} batches per update is not the "
                              f"task's update of {base.num_envs} envs")
    else:
        per_actor = 8 // settings.per_update()
    config = Config.for_task(spec["task"], method=method, total_env_steps=spec["pilot_env_steps"],
                             num_evals=spec["num_evals"], eval_episodes=spec["eval_episodes"],
                             buffer_capacity=spec["buffer_capacity"], **{**sizes, "num_envs": per_actor * settings.num_actors},
                             **spec["knobs"].get(method, {}))
    settings.check(config)
    return config, settings


def _pilot_dir(out: str, name: str, method: str, seed: int) -> str:
    return os.path.join(out, "pilot", name, method, f"seed{seed}")


def pilot(args: Args, spec: dict) -> list[dict]:
    """Every pilot run not yet finished (its ``score.json`` marks it finished)."""
    from vaco_jax.driver.actor_learner import run_real, write_real_run

    done = []
    names = args.configurations or tuple(c[0] for c in CONFIGURATIONS)
    for seed in spec["pilot_seeds"]:
        for name in names:
            for method in spec["methods"]:
                config, settings = config_of(spec, name, method)
                where = _pilot_dir(args.out, name, method, seed)
                if os.path.exists(os.path.join(where, "score.json")):
                    continue
                started = time.monotonic()
                run = run_real(config, settings, seed=seed)
                score = write_real_run(where, run, config, settings, seed)
                done.append(score)
                if args.progress:
                    row = run_summary(where, spec["steady_from"])
                    print(f"pilot {name} {method} seed {seed}: mean age {row['mean_age']:.2f} (steady "
                          f"{row['steady_mean_age']:.2f}, p10-p90 {row['p10']:g}-{row['p90']:g}, max {row['max']:g}), "
                          f"{score['env_steps_per_second']:.0f} env steps/s, {time.monotonic() - started:.0f} s",
                          flush=True)
    return done


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


def pilot_rows(out: str, spec: dict) -> list[dict]:
    """Every finished pilot run's summary, in the order of ``CONFIGURATIONS``."""
    rows = []
    for name, family, fields, per_actor in CONFIGURATIONS:
        for method in spec["methods"]:
            for seed in spec["pilot_seeds"]:
                where = _pilot_dir(out, name, method, seed)
                if os.path.exists(os.path.join(where, "score.json")):
                    rows.append({"configuration": name, "family": family, "method": method, "seed": seed,
                                 **run_summary(where, spec["steady_from"])})
    return rows


def choose(rows: list[dict], targets=TARGETS, tolerance: float = TOLERANCE) -> list[dict]:
    """The module's rule: per target, the configuration to run (see the docstring)."""
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


# ----------------------------------------------------------------------------------- power calculation
# The study's primary quantities, per deep configuration: the contrast C = (mean AUC of VACO - mean AUC of
# PPO-Clip) / the real lockstep PPO-Clip mean, and each method's retention R = mean(deep) / mean(lockstep);
# the simulator predicts one when the 90% CI of (simulated - real) lies inside +-margin. Its seed spread
# is taken from the first locomotion study's Hopper-v4 runs at the same settings (10 seeds, 1M steps, the
# B = 1 tuning) at the simulated lag of matching mean age: B = 1 for lockstep, B = 8 (3.5) for age 4,
# B = 32 (15.5) for age 16. A real run's spread is assumed equal to a simulated one's at that age.
SPREAD_SOURCE = {"study": os.path.join("results", "locomotion", "study"), "task": "Hopper-v4",
                 "methods": ("ppo_clip", "vaco"), "lags": {"lockstep": 1, "age4": 8, "age16": 32}}
Z90 = 1.6448536269514722  # the two-sided 90% interval's z


def equivalence_power(se: float, margin: float, z: float = Z90) -> float:
    """P(the interval D +- z se lies inside +-margin) when the true difference is 0 and D ~ N(0, se^2)."""
    from math import erf, sqrt

    x = (margin - z * se) / se
    return max(0.0, erf(x / sqrt(2.0)))  # 2 Phi(x) - 1


def spread(study: str = SPREAD_SOURCE["study"]) -> dict:
    """{(method, lag name): (mean AUC, seed sd)} of the runs the power calculation reads."""
    from vaco_jax.analysis import results

    out = {}
    for method in SPREAD_SOURCE["methods"]:
        rows = results.read_table(os.path.join(study, SPREAD_SOURCE["task"], method, "scores.csv"))
        for name, b in SPREAD_SOURCE["lags"].items():
            auc = np.array([float(r["auc_eval_return"]) for r in rows if int(float(r["lag_depth"])) == b])
            out[(method, name)] = (float(auc.mean()), float(auc.std(ddof=1)))
    return out


def prediction_ses(sd: dict, n_real: int, n_sim: int) -> dict:
    """The standard error of (simulated - real) for each primary quantity, by the delta method;
    contrasts are on the scale of the lockstep PPO-Clip mean."""
    ref = sd[("ppo_clip", "lockstep")][0]
    both = 1.0 / n_real + 1.0 / n_sim
    out = {}
    for age in ("age4", "age16"):
        (_, sp), (_, sv) = sd[("ppo_clip", age)], sd[("vaco", age)]
        out[f"contrast {age}"] = float(np.sqrt((sp ** 2 + sv ** 2) / ref ** 2 * both))
        for method in SPREAD_SOURCE["methods"]:
            (md, s_d), (ml, s_l) = sd[(method, age)], sd[(method, "lockstep")]
            cv2 = (s_d / md) ** 2 + (s_l / ml) ** 2
            out[f"retention {method} {age}"] = float((md / ml) * np.sqrt(cv2 * both))
    return out


def power_table(sd: dict, margin: float, seeds=(10, 15, 20, 25, 30), sim_per_real: float = 1.0) -> list[dict]:
    """Per number of real seeds (``sim_per_real`` times as many simulated), each quantity's power."""
    rows = []
    for n in seeds:
        ses = prediction_ses(sd, n, max(2, int(round(n * sim_per_real))))
        rows.append({"real_seeds": n, "sim_seeds": max(2, int(round(n * sim_per_real))),
                     **{k: equivalence_power(v, margin) for k, v in ses.items()}})
    return rows


def plan_text(args: Args, spec: dict) -> str:
    lines = [f"pilot: {spec['task']}, methods {', '.join(spec['methods'])}, seeds {list(spec['pilot_seeds'])}, "
             f"{spec['pilot_env_steps']:,} env steps a run; targets {list(TARGETS)} (steady state: learner versions "
             f">= {spec['steady_from']}), tolerance {TOLERANCE:.0%}"]
    for name, family, fields, per_actor in CONFIGURATIONS:
        left = sum(not os.path.exists(os.path.join(_pilot_dir(args.out, name, m, s), "score.json"))
                   for m in spec["methods"] for s in spec["pilot_seeds"])
        knobs = ", ".join(f"{k} {v}" for k, v in fields.items())
        lines.append(f"  {name:<10} {family:<8} {knobs}, {per_actor} envs per actor: {left} pilot run(s) to go")
    return "\n".join(lines)


def main(args: Args):
    spec = dict(PRESETS[args.preset])
    args.out = args.out or (os.path.join("results", "deep_lag") if args.preset == "cpu"
                            else os.path.join("runs", "deep_lag_tiny"))
    for name in args.configurations:
        settings_of(name)
    for name, *_ in CONFIGURATIONS:  # every setting checked before anything runs
        for method in spec["methods"]:
            config_of(spec, name, method)
    if args.stage == "plan":
        print(plan_text(args, spec))
        return None
    if args.stage == "pilot":
        return pilot(args, spec)
    if args.stage == "power":
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
    from vaco_jax.analysis import results

    rows = pilot_rows(args.out, spec)
    chosen = choose(rows)
    results.write_table(os.path.join(args.out, "pilot.csv"), rows)
    results.write_table(os.path.join(args.out, "chosen.csv"), chosen)
    for r in rows:
        print(f"{r['configuration']:<10} {r['method']:<9} seed {r['seed']}: steady mean age {r['steady_mean_age']:.2f} "
              f"(sd {r['steady_sd']:.2f}, p10/p50/p90 {r['p10']:g}/{r['p50']:g}/{r['p90']:g}, max {r['max']:g}), "
              f"dropped {r['dropped']}, {r['env_steps_per_second']:.0f} env steps/s")
    for c in chosen:
        print(f"target {c['target']:g}: {c['configuration']} (steady mean age {c['steady_mean_age']:.2f}; {c['why']})")
    return chosen


def cli() -> None:
    """The command line (`experiments/deep_lag.py`)."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
