"""The deep-lag study's stages before its report (``deep_lag``'s ``real`` and ``sim``), and where the
report finds their runs (docs/real_async.md, "The study").

Every number is in ``STUDY`` (``deep_lag_configs``), written to ``OUT/study_protocol.json`` by the
study's first stage; a later stage with other numbers or other chosen configurations is refused. Three
real configurations (:func:`study_configurations`): ``lockstep`` (``LOCKSTEP``: 4 actors x 4 envs in
lockstep, the synchronous reference) and ``age4`` / ``age16``, the configurations ``chosen.csv`` names
for the targets 4 and 16, each run with both methods (the pilot's knobs) on ``real_seeds`` at the
study's sizes: ``OUT/real/<configuration>/<method>/seed<k>/``, seed by seed across configurations.
Their simulated counterparts (``sim``; ``kit_real_runs.run_sweep``, as in the sim-vs-real study): for each
deep configuration and method, the ``ages`` lag model fed the pooled histogram of its real runs
(``histogram``), a uniform lag of the nearest mean (``uniform``), both on ``sim_seeds``, and the
histogram moved ``control_shift`` versions older (``control``, a negative control) on
``control_seeds``; for ``lockstep`` the synchronous lag (depth 1) on ``sim_seeds``. The simulator's run
directories go to ``WORK``, their small tables to ``OUT/sim/<configuration>/<method>/<sweep>/seeds<a>-<b>/``:
a sweep runs as programs of at most ``PROGRAM_CELLS`` cells over blocks of its seeds (seeds a ... b).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import numpy as np

from vaco_jax.core.config import ConfigError
from vaco_jax.studies import kit_real, kit_real_runs
from vaco_jax.studies.deep_lag_configs import CONFIGURATIONS, LOCKSTEP, TARGETS, config_of, layout
from vaco_jax.studies.deep_lag_programs import program_dirs, programs_of
from vaco_jax.studies.kit_real import pooled, real_dir, require_finished, score_values

SWEEP_OF = {"lockstep": "lockstep", "control": "control"}  # a variant's sweep (sweeps_of); the others: "main"


def study_configurations(out: str, spec: dict, study: dict) -> list[dict]:
    """The study's real configurations: ``lockstep``, then one per target (``age4``, ``age16``) as
    ``OUT/chosen.csv`` names it. Each: ``name`` (the study's, its directories'), ``configuration`` (the
    layout's, ``CONFIGURATIONS``), ``family``, ``settings``, ``envs_per_actor`` and ``update_envs`` (the
    envs of one learner update: a simulated counterpart's ``num_envs``). Refused when ``chosen.csv`` is
    missing, lacks a target, or names one configuration for two targets."""
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
        out_.append({"name": role, "configuration": name, "family": layout(name)[1],
                     "settings": dataclasses.asdict(settings), "envs_per_actor": per_actor,
                     "update_envs": per_actor * settings.per_update()})
    return out_


def sweep_spec(spec: dict, study: dict) -> dict:
    """The numbers ``kit_real_runs.run_sweep`` reads: the study's, the preset's task and sizes."""
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


def study_real(args, spec: dict, study: dict, configs: list[dict]) -> list[dict]:
    """Every real run of the study not yet finished (``score.json`` marks it), seed by seed across the
    configurations and methods, while ``--minutes`` allows."""
    def runs():
        for seed in study["real_seeds"]:
            for c in configs:
                for method in spec["methods"]:
                    config, settings = config_of(spec, c["configuration"], method, study)
                    yield (real_dir(args.out, c, method, seed), config, settings, seed,
                           f"{c['name']} ({c['configuration']}) {method}")

    return kit_real_runs.run_real_runs(runs(), args.minutes, args.progress)


def study_sim(args, spec: dict, study: dict, configs: list[dict], cells: int) -> None:
    """Every simulated program not yet finished (its ``scores.csv`` in ``OUT`` marks it), while ``--minutes``
    allows: one lag sweep per (configuration, method, sweep), run as programs of at most ``cells`` cells
    over blocks of its seeds, as many envs per simulated actor as a real actor steps and one real update's
    envs; the policy buffer is the study's, raised to hold the oldest age a sweep's weights draw (the
    control of a deep histogram: up to ``control_shift`` more)."""
    todo = [(c, method, sweep) for c in configs for method in spec["methods"]  # every histogram read first
            for sweep in sweeps_of(args.out, study, c, method)]

    def program(c, method, name, variants, dst, block):
        def run():
            kit_real_runs.run_sweep(sweep_spec(spec, study), method, variants, block,
                                    envs_per_actor=c["envs_per_actor"], num_envs=c["update_envs"],
                                    buffer_capacity=max(study["buffer_capacity"], *map(len, variants)),
                                    knobs=spec["knobs"].get(method, {}),
                                    work=os.path.join(args.work, "sim", c["name"], method, name,
                                                      os.path.basename(dst)),
                                    dst=dst, progress=args.progress)

        return len(variants) * len(block), run

    kit_real_runs.run_sweeps(((dst, functools.partial(program, c, method, name, variants, dst, block))
                         for c, method, (name, variants, seeds) in todo
                         for dst, block in program_dirs(args.out, c, method, name, len(variants), seeds, cells)),
                        args.minutes)


def study_scores(out: str, spec: dict, study: dict, configs: list[dict], cells: int):
    """(real, sim, diverged, realised): the scores ``quantity_rows`` reads, the count of diverged runs per
    (configuration, method[, variant]), and the simulated samples by realised age per (configuration,
    method, variant), the programs of each sweep (at most ``cells`` cells each) pooled: every program
    holding one row per seed of its block for each of its counterparts' weights (``kit_real.cells_of``)."""
    real, sim, diverged, realised = {}, {}, {}, {}
    for c in configs:
        for method in spec["methods"]:
            runs = kit_real.real_scores(out, c, method, study["real_seeds"], study["num_evals"])
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
                    realised_at = os.path.join(where, kit_real_runs.REALISED)
                    drawn.append(kit_real.realised_in(realised_at, {v: w}, require=True)[v])
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
    kit_real.require_units(programs, "scores.csv", kit_real_runs.SIM_TABLES, "sim")


def study_plan_lines(out: str, spec: dict, study: dict, cells: int) -> list[str]:
    """``plan``'s lines of the study: its protocol and what is left of it (or why it cannot start yet)."""
    span = kit_real.span
    lines = [f"study: seeds real {span(study['real_seeds'])}, simulated {span(study['sim_seeds'])} (control "
             f"{span(study['control_seeds'])}), {study['total_env_steps']:,} env steps a run, {study['num_evals']} "
             f"evaluations of {study['eval_episodes']} episodes, buffer {study['buffer_capacity']}; control "
             f"{study['control_shift']} versions older; margin +-{study['margin']:g}, {study['confidence']:.0%} "
             f"bootstrap CI ({study['bootstrap_reps']} resamples); wall clock threshold: return >= "
             f"{study['return_threshold']:g}"]
    try:
        configs = study_configurations(out, spec, study)
    except ConfigError as e:
        return lines + [f"  waits for the pilot: {e}"]
    for c in configs:
        left = kit_real.unfinished([real_dir(out, c, m, s) for m in spec["methods"] for s in study["real_seeds"]],
                                   "score.json")
        programs = kit_real.unfinished(programs_of(out, study, [c], spec["methods"], cells), "scores.csv")
        knobs = ", ".join(f"{k} {v}" for k, v in layout(c["configuration"])[2].items())
        lines.append(f"  {c['name']:<8} = {c['configuration']:<10} {knobs}, {c['envs_per_actor']} envs per actor: "
                     f"{left} real run(s) and {programs} simulated program(s) to go")
    return lines
