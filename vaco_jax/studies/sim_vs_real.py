"""Does the simulator predict a real asynchronous actor–learner? (docs/real_async.md)

    python experiments/sim_vs_real.py plan                 # the protocol and what is left to run
    python experiments/sim_vs_real.py real --minutes 80    # real runs (threads; not reproducible bit for bit)
    python experiments/sim_vs_real.py sim --minutes 80     # their simulated counterparts (reproducible)
    python experiments/sim_vs_real.py report               # verdicts, wall clock, histograms

For each real configuration (a number of actors with unequal speeds, or the lockstep reference) and
method, the real system runs on every seed and records its age histogram. The simulator then runs
the same training three ways, one cell per seed each: (a) ``ages`` with the real runs' pooled
histogram, (b) ``uniform`` with the lag depth whose mean age is nearest the real mean (as weights
1, ..., 1: the same draws as ``uniform``), (c) a negative control, the real histogram shifted
``CONTROL_SHIFT`` versions older. The decision rule, fixed here before any run: the simulator
*predicts* a (configuration, method, score) when the 90% bootstrap CI of mean(sim) - mean(real),
divided by the mean of the method's real lockstep runs, lies inside +-``MARGIN``; it *differs* when
the CI lies wholly outside; else *inconclusive*. A rule that does not call the negative control
*differs* cannot tell, and the report says so.

The protocol (the preset's numbers and the rule) is written to ``OUT/protocol.json`` by the first run;
a later run with other numbers is refused. ``OUT`` holds only small tables (the real runs' records,
the simulated sweeps' scores and curves, the verdicts), so the ``cpu`` preset keeps it under
``results/`` to be committed; the simulator's run directories (checkpoints) live in ``WORK``.
Both stages are resumable: a real run is finished when its ``score.json`` exists, a simulated sweep
resumes from its checkpoints; ``--minutes`` stops starting new work once the next piece would not fit.
``report`` writes no protocol and reads only under the one in ``OUT``, once every real run and sweep has
finished and holds its tables (the first one that has not, or the tables gone, named); a real run's
histogram is verified against its checksum, or (a run written before histograms carried one) against
the consumed batches of its ``record.csv``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

import numpy as np
from tyro.conf import Positional

from vaco_jax.core.config import ConfigError
from vaco_jax.studies import kit_real, kit_real_runs
from vaco_jax.studies.kit_real import pooled_histogram, real_dir

# Equivalence margin, as a fraction of the method's real lockstep mean; why this value: docs/real_async.md
MARGIN = 0.15
CONFIDENCE = 0.90
CONTROL_SHIFT = 8  # versions the negative control's histogram is moved older
SCORES = ("auc_eval_return", "final_eval_return")
VARIANTS = ("histogram", "uniform", "control")

PRESETS = {
    # Hopper-v4 with its task defaults (16 envs x 128 steps a batch, 10 epochs x 32 minibatches)
    "cpu": dict(task="Hopper-v4", methods=("ppo_clip", "vaco"), actors=(2, 4, 8), slowest=2.0, sync_actors=4,
                seeds=tuple(range(10)), total_env_steps=300_000, num_evals=10, eval_episodes=8, buffer_capacity=32,
                sizes={}),
    # the tiny pure-JAX task, for tests: seconds
    "tiny": dict(task="point_mass", methods=("ppo_clip", "vaco"), actors=(2, 4), slowest=2.0, sync_actors=2,
                 seeds=(0, 1), total_env_steps=8 * 16 * 8, num_evals=2, eval_episodes=2, buffer_capacity=16,
                 sizes=dict(num_envs=8, unroll_length=16, episode_length=50, num_epochs=2, num_minibatches=2)),
}


@dataclasses.dataclass
class Args:
    """The simulator against a real asynchronous actor-learner: plan, real, sim, report."""

    stage: Positional[Literal["plan", "real", "sim", "report"]]
    preset: Literal["cpu", "tiny"] = "cpu"  # the study's numbers (PRESETS)
    out: str = ""  # the study's tables; default results/sim_vs_real (preset cpu), runs/sim_vs_real_tiny (tiny)
    work: str = ""  # the simulator's run directories (checkpoints); default runs/sim_vs_real_<preset>
    minutes: float | None = None  # real, sim: start no run or sweep that would end after this many minutes
    progress: bool = True  # a line per real run and a progress bar per simulated group
    bootstrap_reps: int = 2000  # bootstrap resamples of the report's intervals
    # real, sim: print what the stage would run (sim: the lag sweeps' plans, memory and time estimates) and exit;
    # nothing is run or written
    dry_run: bool = False


HELP_DEFAULTS = {"minutes": "no limit"}  # --help (driver/helptext.py)


def configurations(spec: dict) -> list[dict]:
    """The real configurations: the lockstep reference, then each actor count with speeds spread
    evenly from 1 (full speed) to ``slowest`` times slower."""
    out = [dict(name=f"sync{spec['sync_actors']}", num_actors=spec["sync_actors"], slowdown=(), mode="sync")]
    for a in spec["actors"]:
        slow = tuple(float(x) for x in np.round(np.linspace(1.0, spec["slowest"], a), 3))
        out.append(dict(name=f"async{a}", num_actors=a, slowdown=slow, mode="async"))
    return out


def base_config(spec: dict, method: str):
    from vaco_jax.core.config import Config

    return Config.for_task(spec["task"], method=method, total_env_steps=spec["total_env_steps"],
                           num_evals=spec["num_evals"], eval_episodes=spec["eval_episodes"],
                           buffer_capacity=spec["buffer_capacity"], **spec["sizes"])


def protocol(spec: dict) -> dict:
    return {"preset": spec, "configurations": configurations(spec), "margin": MARGIN, "confidence": CONFIDENCE,
            "control_shift": CONTROL_SHIFT, "scores": list(SCORES), "variants": list(VARIANTS)}


def real(args: Args, spec: dict) -> list[dict]:
    """Every real run not yet finished (a run's ``score.json`` marks it finished), while ``--minutes`` allows."""
    from vaco_jax.driver.actor_learner import RealSettings

    def runs():
        # seed by seed across every configuration: a study spread over sessions (and machines) then has
        # whole blocks of seeds, each configuration's runs of a seed made on the same machine
        for seed in spec["seeds"]:
            for c in configurations(spec):
                settings = RealSettings(num_actors=c["num_actors"], slowdown=c["slowdown"],
                                        queue_capacity=c["num_actors"], mode=c["mode"])
                for method in spec["methods"]:
                    config = base_config(spec, method)
                    settings.check(config)
                    yield real_dir(args.out, c, method, seed), config, settings, seed, f"{c['name']} {method}"

    return kit_real_runs.run_real_runs(runs(), args.minutes, args.progress)


def variant_weights(hist: tuple[float, ...]) -> dict[str, tuple[float, ...]]:
    """The three simulated counterparts of one real histogram (see the module's docstring)."""
    return kit_real.variant_weights(hist, shift=CONTROL_SHIFT)


def _sim_dir(out: str, c: dict, method: str) -> str:
    return os.path.join(out, "sim", c["name"], method)


def _realised_by_variant(out: str, c: dict, method: str, weights: dict) -> dict[str, np.ndarray]:
    """``realised_ages.csv`` of a sweep as ``{variant: samples by age}`` (``kit_real.realised_in``)."""
    path = os.path.join(_sim_dir(out, c, method), kit_real_runs.REALISED)
    return kit_real.realised_in(path, weights, require=True)


def sim(args: Args, spec: dict) -> None:
    """One lag sweep per (configuration, method): the variants' weights as an ``age_weights`` axis x
    the seeds, with as many envs per simulated actor as a real actor steps. The sweep runs in
    ``WORK``; its small tables are copied to ``OUT/sim/<configuration>/<method>/`` when it finishes."""
    def sweeps():
        for c in configurations(spec):
            for method in spec["methods"]:
                yield _sim_dir(args.out, c, method), lambda c=c, method=method: _sweep(args, spec, c, method)

    kit_real_runs.run_sweeps(sweeps(), args.minutes, dry_run=args.dry_run)


def _sweep(args: Args, spec: dict, c: dict, method: str) -> tuple:
    """(cells, a function that runs it) of one configuration and method's sweep."""
    weights = variant_weights(pooled_histogram(args.out, c, method, spec["seeds"]))
    variants = list(dict.fromkeys(weights.values()))  # lockstep: histogram = uniform

    def run():
        config = base_config(spec, method)
        kit_real_runs.run_sweep(spec, method, variants, spec["seeds"],
                                envs_per_actor=config.num_envs // c["num_actors"],
                                work=os.path.join(args.work, "sim", c["name"], method),
                                dst=_sim_dir(args.out, c, method), progress=args.progress,
                                bootstrap_reps=min(args.bootstrap_reps, 200), dry_run=args.dry_run)

    return len(variants) * len(spec["seeds"]), run


def report_rows(out: str, spec: dict, reps: int = 2000) -> list[dict]:
    """One row per (configuration, method, variant, score): real and simulated means, the scaled
    difference with its CI, and the verdict; plus each configuration's wall clock."""
    from vaco_jax.analysis.stats import contrast_ci

    rows = []
    configs = configurations(spec)
    require_report_units(out, spec)
    for method in spec["methods"]:
        sync = kit_real.real_scores(out, configs[0], method, spec["seeds"], spec["num_evals"])
        for c in configs:
            real_runs = kit_real.real_scores(out, c, method, spec["seeds"], spec["num_evals"])
            weights = variant_weights(pooled_histogram(out, c, method, spec["seeds"]))
            realised = _realised_by_variant(out, c, method, weights)
            for variant, w in weights.items():
                mine = kit_real.cells_of(os.path.join(_sim_dir(out, c, method), "scores.csv"), w, spec["seeds"],
                                         variant)
                for score in SCORES:
                    scale = abs(float(np.mean([r[score] for r in sync])))
                    x = np.array([[r[score]] for r in mine if not r["diverged"]], float) / scale
                    y = np.array([[r[score]] for r in real_runs if not r["diverged"]], float) / scale
                    point, lo, hi = contrast_ci(x, y, aggregate="mean", reps=reps, confidence=CONFIDENCE)
                    verdict = kit_real.verdict(lo, hi, MARGIN)
                    rows.append({"configuration": c["name"], "method": method, "variant": variant, "score": score,
                                 "margin": MARGIN,
                                 "real_mean": float(np.mean([r[score] for r in real_runs])),
                                 "sim_mean": float(np.mean([r[score] for r in mine])) if mine else float("nan"),
                                 "scaled_difference": point, "low": lo, "high": hi, "verdict": verdict,
                                 "real_mean_age": float(np.mean([r["mean_age"] for r in real_runs])),
                                 "sim_mean_age": float(np.dot(np.arange(len(w)), w) / np.sum(w)),
                                 "sim_realised_mean_age": kit_real.mean_age(realised.get(variant)),
                                 "real_env_steps_per_second": float(np.mean([r["env_steps_per_second"]
                                                                             for r in real_runs])),
                                 "n_real": len(y), "n_sim": len(x),
                                 "diverged": sum(bool(r["diverged"]) for r in real_runs + mine)})
    return rows


def require_report_units(out: str, spec: dict) -> None:
    """Every real run and simulated sweep the report reads has finished and holds its tables
    (``kit_real.require_units``), before any number is read."""
    kit_real.require_units([real_dir(out, c, m, s) for s in spec["seeds"] for c in configurations(spec)
                            for m in spec["methods"]], "score.json", kit_real.REAL_TABLES, "real")
    kit_real.require_units([_sim_dir(out, c, m) for c in configurations(spec) for m in spec["methods"]],
                           "scores.csv", kit_real_runs.SIM_TABLES, "sim")


def report(args: Args, spec: dict) -> list[dict]:
    from vaco_jax.analysis import results

    from vaco_jax.analysis import figures

    rows = report_rows(args.out, spec, args.bootstrap_reps)
    histograms = {}  # read before anything is written
    for c in configurations(spec):  # the first method's: the actors' lag does not depend on the method
        real_hist = pooled_histogram(args.out, c, spec["methods"][0], spec["seeds"])
        drawn = _realised_by_variant(args.out, c, spec["methods"][0], variant_weights(real_hist))
        histograms[c["name"]] = {"real (pooled)": real_hist,
                                 **{f"simulated: {v}": drawn[v] for v in ("histogram", "uniform") if v in drawn}}
    results.write_table(os.path.join(args.out, "verdicts.csv"), rows)
    paths = [p for score in SCORES for p in figures.plot_sim_vs_real(args.out, rows, histograms, score)]
    print(f"{'configuration':<10} {'method':<9} {'variant':<10} {'age real/sim':>12} {'score':<18} {'real':>9} "
          f"{'sim':>9} {'(sim-real)/sync':>16} {'90% CI':>17}  verdict")
    for r in rows:
        ages = f"{r['real_mean_age']:.2f}/{r['sim_realised_mean_age']:.2f}"
        print(f"{r['configuration']:<10} {r['method']:<9} {r['variant']:<10} {ages:>12} {r['score']:<18} {r['real_mean']:>9.1f} "
              f"{r['sim_mean']:>9.1f} {r['scaled_difference']:>16.3f} [{r['low']:>7.3f}, {r['high']:>7.3f}]  "
              f"{r['verdict']}")
    note = kit_real.control_note([r for r in rows if not r["configuration"].startswith("sync")])
    if note:
        print(note)
    print("wall clock, real runs (env steps per second, mean over seeds and methods):")
    for c in configurations(spec):
        sps = [r["real_env_steps_per_second"] for r in rows if r["configuration"] == c["name"]]
        print(f"  {c['name']:<8} {np.mean(sps):>10.0f}")
    print("figures:", *paths, sep="\n  ")
    return rows


def plan_text(args: Args, spec: dict) -> str:
    lines = [f"protocol: margin +-{MARGIN} of the lockstep mean, {CONFIDENCE:.0%} bootstrap CI, control shift "
             f"{CONTROL_SHIFT}; task {spec['task']}, methods {', '.join(spec['methods'])}, seeds {list(spec['seeds'])}, "
             f"{spec['total_env_steps']} env steps a run"]
    for c in configurations(spec):
        left = sum(not os.path.exists(os.path.join(real_dir(args.out, c, m, s), "score.json"))
                   for m in spec["methods"] for s in spec["seeds"])
        lines.append(f"  {c['name']:<8} {c['num_actors']} actors, {c['mode']}, slowdown {list(c['slowdown']) or 1}: "
                     f"{left} real runs to go")
    return "\n".join(lines)


def main(args: Args):
    spec = dict(PRESETS[args.preset])
    args.work = args.work or os.path.join("runs", f"sim_vs_real_{args.preset}")
    args.out = args.out or (os.path.join("results", "sim_vs_real") if args.preset == "cpu" else args.work)
    kit_real_runs.check_minutes(args.minutes)
    if not isinstance(args.bootstrap_reps, int) or args.bootstrap_reps < 1:
        raise ConfigError(f"bootstrap_reps={args.bootstrap_reps!r} must be a positive integer")
    for method in spec["methods"]:  # every setting checked before anything runs
        base_config(spec, method)
    if args.stage == "plan":
        print(plan_text(args, spec))
        return None
    if args.dry_run and args.stage == "report":
        raise ConfigError("dry_run: --dry-run applies to real and sim (plan runs nothing; report writes the tables)")
    kit_real_runs.fix_protocol(os.path.join(args.out, "protocol.json"), protocol(spec), write=not args.dry_run,
                               stage=args.stage)
    if args.dry_run and args.stage == "real":
        print(plan_text(args, spec))
        print("dry run: nothing run or written (the real runs are threads on this machine's cores, timed as they go: "
              "no estimate beyond the plan's)")
        return None
    if args.stage == "real":
        return real(args, spec)
    if args.stage == "sim":
        return sim(args, spec)
    return report(args, spec)


def cli() -> None:
    """The command line (`experiments/sim_vs_real.py`, `python -m vaco_jax sim-vs-real`)."""
    from vaco_jax.driver.cli import cli_main, parse_args

    cli_main(main, parse_args(Args))


if __name__ == "__main__":
    cli()
