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
(said so in the output). Ties go to the configuration listed first. ``choose`` is refused while a
configuration has not finished its pilot runs (``--configurations`` applies the rule among the ones
named, and ``chosen.csv`` says so), and once the study has run on its choice.

**The study** (``real``, ``sim``, ``report``; every number in ``STUDY``, written to
``OUT/study_protocol.json`` by its first stage, a later stage with other numbers or other chosen
configurations refused). Three real configurations: ``lockstep`` (``LOCKSTEP``: 4 actors x 4 envs in
lockstep, the synchronous reference) and ``age4`` / ``age16``, the configurations ``chosen.csv`` names
for the targets 4 and 16, each run with both methods (the pilot's knobs) on ``real_seeds`` at the
study's sizes: ``OUT/real/<configuration>/<method>/seed<k>/``, seed by seed across configurations.
Their simulated counterparts (``sim``; ``kit_real.run_sweep``, as in the sim-vs-real study): for each
deep configuration and method, the ``ages`` lag model fed the pooled histogram of its real runs
(``histogram``), a uniform lag of the nearest mean (``uniform``), both on ``sim_seeds``, and the
histogram moved ``control_shift`` versions older (``control``, a negative control) on
``control_seeds``; for ``lockstep`` the synchronous lag (depth 1) on ``sim_seeds``. The simulator's run
directories go to ``WORK``, their small tables to ``OUT/sim/<configuration>/<method>/<sweep>/seeds<a>-<b>/``:
a sweep runs as programs of at most ``PROGRAM_CELLS`` cells over blocks of its seeds (seeds a ... b).
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
import functools
import os
from typing import Literal

import numpy as np
from tyro.conf import Positional

from vaco_jax.core.config import ConfigError
from vaco_jax.studies import kit_real
from vaco_jax.studies.deep_lag_programs import PROGRAM_CELLS, program_dirs, programs_of, seed_blocks
from vaco_jax.studies.deep_lag_report import (CONTRAST, SPREAD_SOURCE, VARIANTS, arm_rows, diverged_in, none_as_nan,
                                             power_table, quantity_rows, run_summary, spread, wall_clock_rows)
from vaco_jax.studies.kit_real import mean_age, pooled, real_dir, require_finished, score_values

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


# The study's synchronous reference, in CONFIGURATIONS' form: the sim-vs-real layout in lockstep (Hopper-v4's
# update of 16 envs: 4 actors x 4 envs, one batch from each)
LOCKSTEP = ("lockstep", "sync", dict(num_actors=4, queue_capacity=4, mode="sync"), 4)

# Every number of the study (real, sim, report), fixed before its first run (OUT/study_protocol.json)
STUDY = {
    "cpu": dict(real_seeds=tuple(range(20)), sim_seeds=tuple(range(1000, 1040)), control_seeds=tuple(range(1000, 1010)),
                total_env_steps=1_000_000, num_evals=10, eval_episodes=8, buffer_capacity=32,
                control_shift=8, margin=0.15, confidence=0.90, bootstrap_reps=2000, return_threshold=1000.0),
    # point_mass, for tests: 16 updates of 8 envs x 16 steps
    "tiny": dict(real_seeds=(0, 1), sim_seeds=(1000, 1001), control_seeds=(1000, 1001), total_env_steps=16 * 8 * 16,
                 num_evals=2, eval_episodes=2, buffer_capacity=32, control_shift=8, margin=0.15, confidence=0.90,
                 bootstrap_reps=2000, return_threshold=40.0),
}


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


def settings_of(name: str):
    from vaco_jax.driver.actor_learner import RealSettings

    for n, _, fields, _ in CONFIGURATIONS:
        if n == name:
            return RealSettings(**fields)
    raise ConfigError(f"configurations: {name!r}; allowed values: {', '.join(c[0] for c in CONFIGURATIONS)}")


def _layout(name: str) -> tuple:
    """A configuration's row (``CONFIGURATIONS`` or ``LOCKSTEP``)."""
    for row in CONFIGURATIONS + (LOCKSTEP,):
        if row[0] == name:
            return row
    settings_of(name)  # the pilot's names in the error
    raise AssertionError(name)


def config_of(spec: dict, name: str, method: str, study: dict | None = None):
    """The training settings of one configuration: the update's batch is the simulator's shape
    (``envs_per_actor x batches_per_update`` envs), every actor together stepping ``num_envs``.
    ``study``: the study's numbers (``STUDY``: env steps, evaluations, buffer) instead of the pilot's."""
    from vaco_jax.core.config import Config
    from vaco_jax.driver.actor_learner import RealSettings

    _, _, fields, per_actor = _layout(name)
    settings = RealSettings(**fields)
    numbers = study or dict(total_env_steps=spec["pilot_env_steps"], num_evals=spec["num_evals"],
                            eval_episodes=spec["eval_episodes"], buffer_capacity=spec["buffer_capacity"])
    sizes = dict(spec["sizes"])
    if spec["task"] != "point_mass":
        base = Config.for_task(spec["task"], method=method)
        if per_actor * settings.per_update() != base.num_envs:
            raise ConfigError(f"{name}: {per_actor} envs x {settings.per_update()} batches per update is not the "
                              f"task's update of {base.num_envs} envs")
    else:
        per_actor = 8 // settings.per_update()
    config = Config.for_task(spec["task"], method=method, total_env_steps=numbers["total_env_steps"],
                             num_evals=numbers["num_evals"], eval_episodes=numbers["eval_episodes"],
                             buffer_capacity=numbers["buffer_capacity"],
                             **{**sizes, "num_envs": per_actor * settings.num_actors}, **spec["knobs"].get(method, {}))
    settings.check(config)
    return config, settings


def _pilot_dir(out: str, name: str, method: str, seed: int) -> str:
    return os.path.join(out, "pilot", name, method, f"seed{seed}")


def pilot(args: Args, spec: dict) -> list[dict]:
    """Every pilot run not yet finished (its ``score.json`` marks it finished)."""
    def runs():
        for seed in spec["pilot_seeds"]:
            for name in args.configurations or tuple(c[0] for c in CONFIGURATIONS):
                for method in spec["methods"]:
                    config, settings = config_of(spec, name, method)
                    yield _pilot_dir(args.out, name, method, seed), config, settings, seed, f"{name} {method}"

    def line(label, seed, where, score, seconds):
        row = run_summary(where, spec["steady_from"])
        return (f"pilot {label} seed {seed}: mean age {row['mean_age']:.2f} (steady {row['steady_mean_age']:.2f}, "
                f"p10-p90 {row['p10']:g}-{row['p90']:g}, max {row['max']:g}), {score['env_steps_per_second']:.0f} "
                f"env steps/s, {seconds:.0f} s")

    return kit_real.run_real_runs(runs(), None, args.progress, line)


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


def require_piloted(out: str, spec: dict, names) -> None:
    """``choose``'s rule compares the configurations ``names`` (every one, unless ``--configurations``
    says which): each must have finished its pilot runs (every method and seed), else a ConfigError
    naming those never piloted and those partly piloted."""
    runs = [(m, s) for m in spec["methods"] for s in spec["pilot_seeds"]]
    done = {n: sum(os.path.exists(os.path.join(_pilot_dir(out, n, m, s), "score.json")) for m, s in runs)
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


# ----------------------------------------------------------------------------------- the study
def study_configurations(out: str, spec: dict, study: dict) -> list[dict]:
    """The study's real configurations: ``lockstep``, then one per target (``age4``, ``age16``) as
    ``OUT/chosen.csv`` names it. Each: ``name`` (the study's, its directories'), ``configuration`` (the
    layout's, ``CONFIGURATIONS``), ``family``, ``settings``, ``envs_per_actor`` and ``update_envs`` (the
    envs of one learner update: a simulated counterpart's ``num_envs``). Refused when ``chosen.csv`` is
    missing, lacks a target, or names one configuration for two targets."""
    import dataclasses as dc

    from vaco_jax.analysis import results

    path = os.path.join(out, "chosen.csv")
    if not os.path.exists(path):
        raise ConfigError(f"study: {path} is missing; run `pilot` and `choose` first (the study runs the "
                          "configurations chosen.csv names)")
    allowed = [c[0] for c in CONFIGURATIONS]
    by_target: dict[float, str] = {}
    for i, r in enumerate(results.read_table(path)):
        try:
            target, name = float(r["target"]), r["configuration"]
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"study: {path}, row {i + 1}: expected a number under 'target' and a name under "
                              "'configuration'; rerun `choose`") from None
        if name not in allowed:
            raise ConfigError(f"study: {path} names {name!r} for the target {target:g}, which is no configuration "
                              f"of the pilot (allowed values: {', '.join(allowed)}); rerun `choose`")
        if target in by_target:
            raise ConfigError(f"study: {path} names the target {target:g} twice; rerun `choose`")
        by_target[target] = name
    names = []
    for target in TARGETS:
        if target not in by_target:
            raise ConfigError(f"study: {path} names no configuration for the target {target:g}; rerun `choose`")
        names.append(by_target[target])
    if len(set(names)) < len(names):
        targets = ", ".join(f"{t:g}" for t in TARGETS)
        raise ConfigError(f"study: {path} names {names[0]} for every target ({targets}); the study needs a different "
                          "configuration per target")
    out_ = []
    for role, name in [("lockstep", LOCKSTEP[0])] + [(f"age{t:g}", n) for t, n in zip(TARGETS, names)]:
        config, settings = [config_of(spec, name, m, study) for m in spec["methods"]][0]  # every method checked
        per_actor = config.num_envs // settings.num_actors
        out_.append({"name": role, "configuration": name, "family": _layout(name)[1],
                     "settings": dc.asdict(settings), "envs_per_actor": per_actor,
                     "update_envs": per_actor * settings.per_update()})
    return out_


def study_protocol(preset: str, spec: dict, study: dict, configs: list[dict]) -> dict:
    return {"preset": preset, "task": spec["task"], "methods": list(spec["methods"]), "knobs": spec["knobs"],
            "sizes": spec["sizes"], "study": study, "configurations": configs, "variants": list(VARIANTS),
            "contrast": list(CONTRAST), "score": "auc_eval_return"}


SWEEP_OF = {"lockstep": "lockstep", "control": "control"}  # a variant's sweep (sweeps_of); the others: "main"


def _sweep_spec(spec: dict, study: dict) -> dict:
    """The numbers ``kit_real.run_sweep`` reads: the study's, the preset's task and sizes."""
    return {"task": spec["task"], "sizes": spec["sizes"],
            **{k: study[k] for k in ("total_env_steps", "num_evals", "eval_episodes", "buffer_capacity")}}


def real_histogram(out: str, c: dict, methods, seeds) -> tuple[float, ...]:
    """Consumed samples by age, summed over the real runs of ``methods`` x ``seeds`` (every one finished)."""
    total = np.zeros(0)
    for method in methods:
        h = np.asarray(kit_real.pooled_histogram(out, c, method, seeds, checksum=True))
        total = np.pad(total, (0, max(0, len(h) - len(total)))) + np.pad(h, (0, max(0, len(total) - len(h))))
    return tuple(float(x) for x in total)


def variants_of(out: str, study: dict, c: dict, method: str) -> dict[str, tuple[float, ...]]:
    """The simulated counterparts' age weights of one configuration and method: ``lockstep`` the
    synchronous lag (depth 1); a deep configuration the ``VARIANTS`` of its real runs' pooled histogram."""
    if c["family"] == "sync":
        return {"lockstep": (1.0,)}
    hist = kit_real.pooled_histogram(out, c, method, study["real_seeds"], checksum=True)
    return kit_real.variant_weights(hist, shift=study["control_shift"])


def sweeps_of(out: str, study: dict, c: dict, method: str) -> list[tuple[str, list[tuple], tuple[int, ...]]]:
    """(sweep name, its weight vectors, its seeds) of one configuration and method: ``lockstep``; or
    ``main`` (histogram and uniform, ``sim_seeds``) and ``control`` (``control_seeds``)."""
    weights = variants_of(out, study, c, method)
    if c["family"] == "sync":
        return [("lockstep", [weights["lockstep"]], tuple(study["sim_seeds"]))]
    return [("main", list(dict.fromkeys([weights["histogram"], weights["uniform"]])), tuple(study["sim_seeds"])),
            ("control", [weights["control"]], tuple(study["control_seeds"]))]


def study_real(args: Args, spec: dict, study: dict, configs: list[dict]) -> list[dict]:
    """Every real run of the study not yet finished (``score.json`` marks it), seed by seed across the
    configurations and methods, while ``--minutes`` allows."""
    def runs():
        for seed in study["real_seeds"]:
            for c in configs:
                for method in spec["methods"]:
                    config, settings = config_of(spec, c["configuration"], method, study)
                    yield (real_dir(args.out, c, method, seed), config, settings, seed,
                           f"{c['name']} ({c['configuration']}) {method}")

    return kit_real.run_real_runs(runs(), args.minutes, args.progress)


def study_sim(args: Args, spec: dict, study: dict, configs: list[dict]) -> None:
    """Every simulated program not yet finished (its ``scores.csv`` in ``OUT`` marks it), while ``--minutes``
    allows: one lag sweep per (configuration, method, sweep), run as programs of at most ``PROGRAM_CELLS``
    cells over blocks of its seeds, as many envs per simulated actor as a real actor steps and one real
    update's envs; the policy buffer is the study's, raised to hold the oldest age a sweep's weights draw
    (the control of a deep histogram: up to ``control_shift`` more)."""
    todo = [(c, method, sweep) for c in configs for method in spec["methods"]  # every histogram read first
            for sweep in sweeps_of(args.out, study, c, method)]

    def program(c, method, name, variants, dst, block):
        def run():
            kit_real.run_sweep(_sweep_spec(spec, study), method, variants, block, envs_per_actor=c["envs_per_actor"],
                               num_envs=c["update_envs"],
                               buffer_capacity=max(study["buffer_capacity"], *map(len, variants)),
                               knobs=spec["knobs"].get(method, {}),
                               work=os.path.join(args.work, "sim", c["name"], method, name, os.path.basename(dst)),
                               dst=dst, progress=args.progress)

        return len(variants) * len(block), run

    kit_real.run_sweeps(((dst, functools.partial(program, c, method, name, variants, dst, block))
                         for c, method, (name, variants, seeds) in todo
                         for dst, block in program_dirs(args.out, c, method, name, len(variants), seeds,
                                                        PROGRAM_CELLS[args.preset])), args.minutes)


def study_scores(out: str, spec: dict, study: dict, configs: list[dict], cells: int):
    """(real, sim, diverged, realised): the scores ``quantity_rows`` reads, the count of diverged runs per
    (configuration, method[, variant]), and the simulated samples by realised age per (configuration,
    method, variant), the programs of each sweep (at most ``cells`` cells each) pooled: every program
    holding one row per seed of its block for each of its counterparts' weights (``kit_real.cells_of``)."""
    real, sim, diverged, realised = {}, {}, {}, {}
    for c in configs:
        for method in spec["methods"]:
            runs = []
            for seed in study["real_seeds"]:
                where = real_dir(out, c, method, seed)
                require_finished(os.path.join(where, "score.json"), "real")
                runs.append(kit_real.real_score(where, study["num_evals"]))
            real[(c["name"], method)] = score_values(runs)
            diverged[(c["name"], method)] = sum(bool(r["diverged"]) for r in runs)
            weights = variants_of(out, study, c, method)
            programs = {}
            for name, variants, seeds in sweeps_of(out, study, c, method):
                programs[name] = program_dirs(out, c, method, name, len(variants), seeds, cells)
                for where, _ in programs[name]:
                    require_finished(os.path.join(where, "scores.csv"), "sim")
            for v, w in weights.items():
                mine, drawn = [], []
                for where, block in programs[SWEEP_OF.get(v, "main")]:
                    mine += kit_real.cells_of(os.path.join(where, "scores.csv"), w, block, v)
                    drawn.append(kit_real.realised_in(os.path.join(where, kit_real.REALISED), {v: w}, require=True)[v])
                sim[(c["name"], method, v)] = score_values(mine)
                diverged[(c["name"], method, v)] = sum(bool(r["diverged"]) for r in mine)
                counts = pooled(drawn)
                if counts is not None:
                    realised[(c["name"], method, v)] = counts
    return real, sim, diverged, realised


def require_study_units(out: str, spec: dict, study: dict, configs: list[dict], cells: int) -> None:
    """Every real run and simulated program the report reads has finished and holds its tables
    (``kit_real.require_units``), before any number is read; the real runs' histograms are verified on the way
    (they decide the programs' weights)."""
    real_runs = [real_dir(out, c, m, s) for s in study["real_seeds"] for c in configs for m in spec["methods"]]
    kit_real.require_units(real_runs, "score.json", kit_real.REAL_TABLES, "real")
    programs = [where for c in configs for m in spec["methods"] for name, variants, seeds in sweeps_of(out, study, c, m)
                for where, _ in program_dirs(out, c, m, name, len(variants), seeds, cells)]
    kit_real.require_units(programs, "scores.csv", kit_real.SIM_TABLES, "sim")


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
    controls = [r for r in rows if r["variant"] == "control"]
    if controls and not all(r["verdict"] == "differs" for r in controls):
        print(f"the negative control is not called 'differs' in {sum(r['verdict'] != 'differs' for r in controls)} "
              f"of {len(controls)} rows: with these seeds the rule cannot tell a wrong histogram from a right one")
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


def plan_text(args: Args, spec: dict) -> str:
    lines = [f"pilot: {spec['task']}, methods {', '.join(spec['methods'])}, seeds {list(spec['pilot_seeds'])}, "
             f"{spec['pilot_env_steps']:,} env steps a run; targets {list(TARGETS)} (steady state: learner versions "
             f">= {spec['steady_from']}), tolerance {TOLERANCE:.0%}"]
    for name, family, fields, per_actor in CONFIGURATIONS:
        left = sum(not os.path.exists(os.path.join(_pilot_dir(args.out, name, m, s), "score.json"))
                   for m in spec["methods"] for s in spec["pilot_seeds"])
        knobs = ", ".join(f"{k} {v}" for k, v in fields.items())
        lines.append(f"  {name:<10} {family:<8} {knobs}, {per_actor} envs per actor: {left} pilot run(s) to go")
    return "\n".join(lines + study_plan_lines(args, spec))


def study_plan_lines(args: Args, spec: dict) -> list[str]:
    """The study's protocol and what is left of it (or why it cannot start yet)."""
    study = STUDY[args.preset]
    lines = [f"study: seeds real {_span(study['real_seeds'])}, simulated {_span(study['sim_seeds'])} (control "
             f"{_span(study['control_seeds'])}), {study['total_env_steps']:,} env steps a run, {study['num_evals']} "
             f"evaluations of {study['eval_episodes']} episodes, buffer {study['buffer_capacity']}; control "
             f"{study['control_shift']} versions older; margin +-{study['margin']:g}, {study['confidence']:.0%} "
             f"bootstrap CI ({study['bootstrap_reps']} resamples); wall clock threshold: return >= "
             f"{study['return_threshold']:g}"]
    try:
        configs = study_configurations(args.out, spec, study)
    except ConfigError as e:
        return lines + [f"  waits for the pilot: {e}"]
    for c in configs:
        left = sum(not os.path.exists(os.path.join(real_dir(args.out, c, m, s), "score.json"))
                   for m in spec["methods"] for s in study["real_seeds"])
        programs = sum(not os.path.exists(os.path.join(where, "scores.csv"))
                       for where in programs_of(args.out, study, [c], spec["methods"], PROGRAM_CELLS[args.preset]))
        knobs = ", ".join(f"{k} {v}" for k, v in _layout(c["configuration"])[2].items())
        lines.append(f"  {c['name']:<8} = {c['configuration']:<10} {knobs}, {c['envs_per_actor']} envs per actor: "
                     f"{left} real run(s) and {programs} simulated program(s) to go")
    return lines


def _span(seeds) -> str:
    seeds = list(seeds)
    return f"{seeds[0]}..{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2 else \
        ", ".join(map(str, seeds))


def main(args: Args):
    spec = dict(PRESETS[args.preset])
    args.out = args.out or (os.path.join("results", "deep_lag") if args.preset == "cpu"
                            else os.path.join("runs", "deep_lag_tiny"))
    args.work = args.work or os.path.join("runs", f"deep_lag_{args.preset}")
    kit_real.check_minutes(args.minutes)
    for name in args.configurations:
        settings_of(name)
    if args.configurations and args.stage not in ("pilot", "choose"):
        raise ConfigError(f"configurations: read by the stages pilot and choose only; {args.stage} takes every "
                          "configuration (the study's stages: lockstep and the ones chosen.csv names)")
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
    if args.stage in ("real", "sim", "report"):
        study = STUDY[args.preset]
        configs = study_configurations(args.out, spec, study)  # refused before anything runs or is written
        path = os.path.join(args.out, "study_protocol.json")
        kit_real.fix_protocol(path, study_protocol(args.preset, spec, study, configs), stage=args.stage,
                              hint="the study's numbers (STUDY) or chosen.csv's configurations changed since its "
                                   "first stage; restore them or use another --out")
        if args.stage == "real":
            return study_real(args, spec, study, configs)
        if args.stage == "sim":
            return study_sim(args, spec, study, configs)
        return study_report(args, spec, study, configs)
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


def cli() -> None:
    """The command line (`experiments/deep_lag.py`)."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
