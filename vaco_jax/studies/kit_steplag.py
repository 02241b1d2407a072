"""What the two drivers of the step size x lag protocol (``results/steplag/protocol.json``) share: the
study itself (``steplag``, ``steplag_stage1``, ``steplag_stage2``) and ``vaco-bench`` (``bench``,
``bench_report``), which puts a new method through the same protocol. Both apply stage 1's rules to a
surface (:func:`surface_rules`) and stage 2's scale to its runs (:func:`stage2_scale`), with the same
numbers; each declares its own units and report. Stage 2's unit names (:func:`stage2_entries`), its progress
and its verdicts on the committed runs (:func:`stage2_verdicts`) are here too, for the study, its FINDINGS
tables (``steplag_findings``) and the lag-shape study's leave-one-task-out check (``lagshape_tasks``).
It imports no study module.
"""

from __future__ import annotations

import os

REFERENCE = "ppo_clip"  # stage 2's reference arm: its mean score at B = 1 is the scale
MORE_SEEDS = (3, 4, 5)  # the stability rule's added seeds (protocol: stage1.stability.more_seeds)
STABILITY_REPS = 2000  # the stability rule's resamples (protocol: stage1.stability.rule)
# knobs whose grid is log-spaced in log v (protocol.md: TIS's and MIS's cap acts through log C), so an edge
# extension steps on log v
LOG_LOG_KNOBS = ("weight_cap",)
# the numbers of stage 2's rules that ``analysis.confirm.Rules`` takes
RULE_NUMBERS = ("margin", "retention_margin", "alpha", "floor", "reps", "seed", "confidence", "equivalence_confidence")


def rule_numbers(rules: dict) -> dict:
    """The numbers of the protocol's ``stage2.rules`` that ``confirm.Rules`` takes."""
    return {k: rules[k] for k in RULE_NUMBERS}


def seeds_text(seeds) -> str:
    return " ".join(map(str, seeds))


def surface_rules(every: list[dict], seeds, tasks, lag_depths, grid, knob: str, score: str, norm: dict,
                  reps: int, past_edges: bool = False) -> dict:
    """Stage 1's rules on one surface's rows (``every``: each with its knob's ``value``), in the
    protocol's order. ``seeds``: the stage's own seeds; ``tasks`` and ``lag_depths``: the surface's;
    ``grid``: its knob's values; ``norm``: ``{task: (random, reference)}``; ``reps``: the stability
    rule's resamples.

    ``state``: "incomplete" (a grid value, or an extension on some task, lacks runs on the stage's own
    seeds), "unscaled" (a task has no scale), "short" (an extension is in on some tasks, not all: its
    values are the ``points``; nothing is decided) or "complete". Once complete: the edge rule's
    extension ``points`` (decided on the stage's own seeds) and the per-lag ``optima``; when no point
    is asked (or ``past_edges``), the ``stability`` of the lag-robust setting on the stage's own seeds
    and, below its threshold, the values within noise (``noisy``) that get the added seeds
    (``MORE_SEEDS``) and the tasks still lacking them (``lacking``). ``contest_rows`` are the rows the
    lag-robust rule is applied to, ``contest`` says which: every value on the stage's own seeds, or,
    once the added seeds are in on every task, the values within noise on all their seeds. Also
    ``base`` (the rows on the stage's own seeds), ``values_run`` and ``extended`` (the values run
    beyond the grid)."""
    from vaco_jax.analysis import surfaces
    own = set(seeds)
    base = [r for r in every if int(r["seed"]) in own]
    grid_values = sorted(map(float, grid))
    values_run = sorted({r["value"] for r in base})
    extended = [v for v in values_run if v < grid_values[0] or v > grid_values[-1]]
    out = {"base": base, "values_run": values_run, "extended": extended, "state": "incomplete", "points": [],
           "optima": {}, "stability": None, "noisy": [], "lacking": [], "contest_rows": base,
           "contest": f"every value on seeds {seeds_text(seeds)}"}
    expected = len(tasks) * len(lag_depths) * len(seeds)
    short = [v for v in values_run if sum(1 for r in base if r["value"] == v) < expected]
    if not set(grid_values) <= set(values_run) or set(short) - set(extended):
        return out
    if set(tasks) - set(norm):
        return {**out, "state": "unscaled"}
    if short:  # an extension is in on some tasks, not all: its other units run before anything is decided
        return {**out, "state": "short", "points": short}
    optima = surfaces.per_lag_optima(base, score, norm)
    done = {"low": sum(v < grid_values[0] for v in values_run), "high": sum(v > grid_values[-1] for v in values_run)}
    points = surfaces.edge_extensions(values_run, [surfaces.robust_choice(base, score, norm)["value"]]
                                      + list(optima.values()), done, in_log=knob in LOG_LOG_KNOBS)
    out.update(state="complete", points=points, optima=optima)
    if points and not past_edges:
        return out
    # the stability rule: when the lag-robust setting's stability on the stage's own seeds is below the
    # threshold, every value picked in at least 5% of the resamples (at least two: the picks sum to 1) gets
    # the added seeds at every task and B of the surface
    stab = surfaces.stability(base, score, norm, reps=reps)
    out["stability"] = stab
    if stab["stable"]:
        return out
    have = {(r["env"], int(r["lag_depth"]), int(r["seed"]), r["value"]) for r in every}
    noisy = list(stab["within_noise"])
    out["noisy"] = noisy
    out["lacking"] = [t for t in tasks if not all((t, int(b), seed, v) in have for b in lag_depths
                                                  for seed in MORE_SEEDS for v in noisy)]
    if not out["lacking"]:  # the added seeds are in on every task: the contest is among the values within noise
        out["contest_rows"] = [r for r in every if r["value"] in noisy]
        out["contest"] = (f"values within noise {' '.join(f'{v:g}' for v in noisy)} on seeds "
                          f"{seeds_text(list(seeds) + list(MORE_SEEDS))}")
    return out


def stage2_rows(results_dir: str) -> list[dict]:
    """Every stage-2 run under ``results_dir/stage2/<task>/<arm>/<lag model>``, with its arm and lag model."""
    from vaco_jax.analysis import results

    return results.placed_rows(os.path.join(results_dir, STAGE2), ("arm", "lag_model"))


def stage2_scale(rows: list[dict], random_dir: str, score: str) -> dict:
    """Stage 2's normalisation, ``{task: (random, reference)}``: random the uniform-random return measured
    beside the reference runs (``random_dir/stage2``), reference the mean score of the reference arm's
    runs at B = 1 (uniform lag, diverged runs left out); a task lacking either, or whose reference does
    not exceed its random return, has no scale."""
    import numpy as np

    from vaco_jax.analysis import results
    from vaco_jax.analysis.tables import is_diverged
    random = results.load_random_scores(os.path.join(random_dir, "stage2")) or {}
    out = {}
    for task in sorted({r["env"] for r in rows}):
        ref = [float(r[score]) for r in rows if r["env"] == task and r["arm"] == REFERENCE
               and r["lag_model"] == "uniform" and int(r["lag_depth"]) == 1
               and not is_diverged(r) and np.isfinite(float(r[score]))]
        if ref and task in random and float(np.mean(ref)) > float(random[task]):
            out[task] = (float(random[task]), float(np.mean(ref)))
    return out


# ----------------------------------------------------------------------------- stage 2's units and verdicts
STAGE2 = "stage2"  # the protocol's section, and the folder of its units and runs


def stage2_entries(p: dict):
    """(name, task, arm, cell entry) for each stage-2 unit, in the section's order: per cell entry, per
    task, per arm. The one place a unit's name is made."""
    s2 = p[STAGE2]
    for c in s2["cells"]:
        for task in c["tasks"]:
            for arm in s2["arms"]:
                yield f"{STAGE2}/{task}/{arm}/{c['lag_model']}", task, arm, c


def stage2_unit_names(p: dict) -> list[str]:
    """Stage 2's unit names in the section's order (no configuration built)."""
    return [name for name, *_ in stage2_entries(p)]


def stage2_progress(p: dict, manifest: list[dict]) -> tuple[list[str], list[str]]:
    """(stage 2's units ``manifest`` (``kit.manifest``'s rows) lists as finished, every stage-2 unit), in the
    section's order."""
    done = {m["unit"] for m in manifest}
    names = stage2_unit_names(p)
    return [n for n in names if n in done], names


def arm_label(p: dict, arm: str) -> str:
    """A stage-2 arm (a stage-1 surface's key) as a reader knows it, with its fixed setting."""
    from vaco_jax.analysis.surfaces import surface_label
    s = p["stage1"]["surfaces"][arm]
    return f"{surface_label(s)}, {s['knob']} = {float(p[STAGE2]['arms'][arm]):g}"


def stage2_verdicts(p: dict, every: list[dict], results_dir: str, tasks: str = "fixed") -> dict:
    """Every stage-2 rule on ``every`` (stage 2's runs, each with its ``arm`` and ``lag_model``; the scale and
    stage 1's ``choices.csv`` read from ``results_dir``): {'primary' (each row with its method's stage-1
    setting stability), 'per_task', 'shape', 'left_out', 'unscaled'}. ``tasks``: the primary family's
    bootstrap over tasks (``confirm.TASK_RESAMPLING``; the committed rule is 'fixed')."""
    from vaco_jax.analysis import confirm
    s2 = p[STAGE2]
    rl = s2["rules"]
    r = confirm.Rules(**rule_numbers(rl))
    norm = stage2_scale(every, results_dir, rl["score"])
    got = [x for x in every if x["env"] in norm]
    arms = list(s2["arms"])
    lag_cells = list(dict.fromkeys((c["lag_model"], int(b)) for c in s2["cells"] for b in c["lag_depths"]))
    shape = rl["shape"]
    primary = confirm.primary(got, rl["score"], norm, arms, lag_cells, tuple(rl["retention_lags"]), r, tasks=tasks)
    # how firmly stage 1 chose each method's setting: a verdict on a setting picked in few of stage 1's
    # resamples is a verdict on that setting, and the row says so
    stability = setting_stability(results_dir)
    for row in primary:
        row["setting_stability"] = stability.get(row["arm"], float("nan"))
    return {
        "primary": primary,
        "per_task": confirm.per_task(got, rl["score"], norm, arms, lag_cells, r, ceiling(got, norm, rl["score"])),
        "shape": confirm.shape_dependence(got, rl["score"], norm, arms, int(shape["lag_depth"]),
                                          tuple(shape["models"]), r),
        "left_out": {"/".join(map(str, k)): v for k, v in confirm.left_out(got, rl["score"]).items()},
        "unscaled": unscaled(every, norm),
    }


def unscaled(all_rows: list[dict], norm: dict) -> list[str]:
    """The tasks with runs but no scale (left out of every verdict; the report names them)."""
    return sorted({r["env"] for r in all_rows} - set(norm))


def setting_stability(results_dir: str) -> dict:
    """``{surface: the share of stage 1's resamples that picked its setting}`` from ``choices.csv``."""
    from vaco_jax.analysis import results
    path = os.path.join(results_dir, "choices.csv")
    return {r["surface"]: float(r["stability"]) for r in results.read_table(path)
            if r.get("stability") not in (None, "")} if os.path.exists(path) else {}


def ceiling(all_rows: list[dict], norm: dict, score: str) -> dict:
    """``{task: at its ceiling}``: PPO-Clip at B = 1 within 2% of the best score any run of the task reached,
    in most of its runs (``rules.at_ceiling``, the first study's rule)."""
    import numpy as np

    from vaco_jax.analysis import rules
    from vaco_jax.analysis.tables import is_diverged
    out = {}
    for task, (random, _) in norm.items():
        ok = [r for r in all_rows if r["env"] == task and not is_diverged(r)
              and np.isfinite(float(r[score]))]
        ref = [float(r[score]) for r in ok if r["arm"] == "ppo_clip" and r["lag_model"] == "uniform"
               and int(r["lag_depth"]) == 1]
        out[task] = bool(ref) and rules.at_ceiling(ref, max(float(r[score]) for r in ok), random)
    return out
