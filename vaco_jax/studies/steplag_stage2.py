"""Stage 2 of the step size x lag study: each entering method at its lag-robust setting, fresh seeds,
on four tasks, compared with PPO-Clip by the rules of ``vaco_jax.analysis.confirm``.

Stage 2 is fixed in the ``stage2`` section of ``results/steplag/protocol.json``, committed before its
first run (stage 1's sections stay as they were; adding the section is recorded once as a deviation).
``python experiments/steplag.py report`` prints a draft of the section from stage 1's committed scores
(:func:`draft`: the entry rule's methods, their lag-robust settings, the cells trimmed to fit what is
left of the budget); until the section exists, ``plan`` and ``run`` cover stage 1 only.

The section:

    "stage2": {
      "seeds": [200, ..., 209],
      "arms": {"ppo_clip": 0.2, "vaco": 0.2, ...},          # stage 1 surface -> its lag-robust value
      "cells": [{"tasks": [...], "lag_model": "uniform", "lag_depths": [1, 8, 32]}, ...],
      "rules": {"score": "auc_eval_return", "margin": 0.1, "retention_margin": 0.1, "alpha": 0.05,
                "floor": 0.1, "reps": 2000, "seed": 0, "confidence": 0.95, "equivalence_confidence": 0.9,
                "retention_lags": [1, 32], "shape": {"lag_depth": 8, "models": ["uniform", "fixed"]},
                "normalisation": "...", "diverged": "..."}      # the two texts: DEFAULT_RULES's
    }

Units ``stage2/<task>/<arm>/<lag model>`` (one compiled group each) write to
``results/steplag/stage2/<task>/<arm>/<lag model>/``. The normalisation is stage 2's own
(``kit_steplag.stage2_scale``, which ``vaco-bench`` applies too): per task, the
uniform-random return measured beside its runs and the mean score of its PPO-Clip runs at B = 1 (Ant-v4
has no earlier reference; P(X > Y) does not depend on it, the differences and retentions do, a little,
and their bootstrap takes the scale as fixed). The primary family is every (lag model, B) head-to-head
of the section's cells and every method's retention difference, each pooled over the tasks that ran it
(the row names them; the per-task rows sit beside). The unit names, the rules' computation and an arm's
label are ``kit_steplag``'s (``stage2_verdicts``), which the lag-shape study's leave-one-task-out check
(``lagshape_tasks``) recomputes too; this module reads the committed scores into them.
"""

from __future__ import annotations

import os

from vaco_jax.core.config import ConfigError
from vaco_jax.studies.kit_steplag import STAGE2 as STAGE
from vaco_jax.studies.kit_steplag import (arm_label, rule_numbers, stage2_entries, stage2_progress, stage2_rows,
                                          stage2_scale, stage2_unit_names as unit_names, stage2_verdicts)

ENTRY = ("ppo_clip", "vaco", "vaco_learner")  # always in stage 2 (stage 1's entry rule)
MAX_ARMS = 5  # the protocol's cap on stage 2's methods
PEER_CHECK_HOURS = 0.7  # Ant-v4 PPO-Clip at CleanRL's settings before stage 2 (5 seeds, one env each)


def check(p: dict) -> None:
    """Every name and number of the ``stage2`` section is valid, before anything is planned."""
    from vaco_jax.analysis import confirm
    from vaco_jax.core.config import LAG_MODELS
    from vaco_jax.core.knobs import check_knob
    from vaco_jax.envs import env_source

    s2, surfaces = p[STAGE], p["stage1"]["surfaces"]
    missing = [k for k in ("seeds", "arms", "cells", "rules") if k not in s2]
    if missing:
        raise ConfigError(f"protocol stage2: missing {', '.join(missing)}; the section has seeds, arms, cells, rules")
    unknown = sorted(set(s2["rules"]) - set(DEFAULT_RULES))
    if unknown:
        raise ConfigError(f"protocol stage2.rules: {', '.join(unknown)} not valid; allowed values: "
                          f"{', '.join(DEFAULT_RULES)}")
    absent = [k for k in DEFAULT_RULES if k not in s2["rules"]]
    if absent:
        raise ConfigError(f"protocol stage2.rules: missing {', '.join(absent)} (every rule is written in the section)")
    if not set(ENTRY) <= set(s2["arms"]) or len(s2["arms"]) > MAX_ARMS:
        raise ConfigError(f"protocol stage2.arms: {', '.join(ENTRY)} and at most {MAX_ARMS} in all; got "
                          f"{', '.join(s2['arms'])}")
    for key, value in s2["arms"].items():
        if key not in surfaces:
            raise ConfigError(f"protocol stage2.arms: {key!r} is not a stage 1 surface; allowed values: "
                              f"{', '.join(surfaces)}")
        check_knob(surfaces[key]["knob"], float(value))
    if len(s2["seeds"]) < 10:
        raise ConfigError(f"protocol stage2.seeds: at least 10 (the protocol's floor); got {len(s2['seeds'])}")
    used = set(p["stage1"]["seeds"]) & set(s2["seeds"])
    if used:
        raise ConfigError(f"protocol stage2.seeds: must be fresh; {sorted(used)} ran in stage 1")
    for i, c in enumerate(s2["cells"]):
        if c["lag_model"] not in LAG_MODELS:
            raise ConfigError(f"protocol stage2.cells[{i}].lag_model: {c['lag_model']!r} is not valid; allowed "
                              f"values: {', '.join(LAG_MODELS)}")
        for t in c["tasks"]:
            if env_source(t) is None:  # Brax and Playground imported only for a name outside ours
                raise ConfigError(f"protocol stage2.cells[{i}].tasks: {t!r} is not valid")
            if not p["budget"]["rates_env_steps_per_s"].get(t):
                raise ConfigError(f"protocol budget.rates_env_steps_per_s: no rate for {t!r}")
    confirm.Rules(**rule_numbers(s2["rules"]))
    ran = {(c["lag_model"], int(b)) for c in s2["cells"] for b in c["lag_depths"]}
    rl = s2["rules"]
    need = {("uniform", int(b)) for b in rl["retention_lags"]} | {(m, int(rl["shape"]["lag_depth"]))
                                                                 for m in rl["shape"]["models"]}
    if not need <= ran:
        raise ConfigError(f"protocol stage2.rules: retention_lags and shape need cells "
                          f"{sorted(need - ran)} that stage2.cells does not run")


def units(p: dict, base_config, make_unit) -> list:
    """Stage 2's units in the section's order (``base_config(p, task, surface)`` and ``make_unit(p, name,
    stage, config, cells, subdir)`` are the study driver's)."""
    from vaco_jax.driver import grid

    s2, surfaces = p[STAGE], p["stage1"]["surfaces"]
    out = []
    for name, task, arm, c in stage2_entries(p):
        config = base_config(p, task, arm).replace(
            lag_model=c["lag_model"], **{surfaces[arm]["knob"]: float(s2["arms"][arm])})
        out.append(make_unit(p, name, STAGE, config, grid.grid(c["lag_depths"], s2["seeds"]),
                             os.path.join(task, arm, c["lag_model"])))
    return out


def progress(p: dict, results_dir: str) -> tuple[list[str], list[str]]:
    """(stage 2's units the manifest lists as finished, every stage-2 unit), in the section's order."""
    from vaco_jax.studies import kit
    return stage2_progress(p, kit.manifest(results_dir))


def complete(p: dict, results_dir: str) -> bool:
    """Every stage-2 unit has finished: only then are its verdicts computed (no interim verdict: the
    family, Holm's correction and the normalisation are the whole section's)."""
    done, names = progress(p, results_dir)
    return len(done) == len(names)


# ----------------------------------------------------------------------------- report

def verdicts(p: dict, results_dir: str, leave_out: tuple = (), tasks: str = "fixed") -> dict:
    """Every stage-2 rule on the committed scores (``kit_steplag.stage2_verdicts``). ``leave_out``: tasks
    whose runs are set aside first (the leave-one-task-out check); ``tasks``: the primary family's
    bootstrap over tasks (``confirm.TASK_RESAMPLING``; the committed rule is 'fixed')."""
    return stage2_verdicts(p, [x for x in stage2_rows(results_dir) if x["env"] not in leave_out], results_dir, tasks)


def shape_rows(shape: dict) -> list[dict]:
    """The lag-shape rule as a table: a row per pair of methods, with the B, the two lag models and the
    overall call on every row."""
    return [{"lag_depth": shape["lag_depth"], "models": " ".join(shape["models"]), "overall": shape["overall"], **pair}
            for pair in shape["pairs"]]


def draw(p: dict, results_dir: str, title_note: str = ""):
    """Stage 2's figure (None before any task has a scale): per task and pooled, each method's
    normalised AUC (PPO-Clip at B = 1 is 1, the random policy 0) against the lag depth under the uniform
    lag (mean over the runs, ±2 standard errors; a diverged run at the floor, as the rules score it), the
    fixed lag model's cells as open markers."""
    import numpy as np

    from vaco_jax.analysis import confirm
    from vaco_jax.analysis.plotting import (dodge_factors, figure_title, line_handle, method_style, panel_figure,
                                            place_legend)
    every = stage2_rows(results_dir)
    norm = stage2_scale(every, results_dir, p[STAGE]["rules"]["score"])
    got = [r for r in every if r["env"] in norm]
    if not got:
        return None
    table = confirm.cells(got, p[STAGE]["rules"]["score"], norm)
    tasks = sorted(norm)
    panels = tasks + (["pooled"] if len(tasks) > 1 else [])
    arms = [a for a in p[STAGE]["arms"] if any(k[1] == a for k in table)]
    depths = sorted({k[3] for k in table})
    shift = dict(zip(arms, dodge_factors(depths, len(arms))))
    fig, axes = panel_figure(len(panels), ncols=3, panel_height=2.4, sharey=True)
    for ax, panel in zip(axes.ravel(), panels):
        for i, arm in enumerate(arms):
            colour, marker = method_style(p["stage1"]["surfaces"][arm]["method"], i)
            colour = colour if arm != "vaco_learner" else "#8c564b"  # VACO's own colour is VACO's (TV to β)
            for model, fill in (("uniform", colour), ("fixed", "none")):
                pts = []
                for b in depths:
                    runs = [v for t in (tasks if panel == "pooled" else [panel]) for v in table.get((t, arm, model, b), [])]
                    if runs:
                        se = np.std(runs, ddof=1) / np.sqrt(len(runs)) if len(runs) > 1 else 0.0
                        pts.append((b * shift[arm], np.mean(runs), 2 * se))
                if pts:
                    x, m, e = (np.array(c) for c in zip(*pts))
                    ax.errorbar(x, m, yerr=e, color=colour, marker=marker, mfc=fill, ms=5, capsize=2, lw=1,
                                ls="-" if model == "uniform" else "none",
                                label=arm_label(p, arm) if model == "uniform" else None)
        ax.set_xscale("log", base=2)
        ax.set_xticks(depths, [str(b) for b in depths])
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("lag depth B")
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("normalised AUC")
    place_legend(fig, axes, extra=[line_handle("open marker: fixed lag (every sample B − 1 old)", marker="o",
                                                mfc="none", ls="none", color="0.3"),
                                   line_handle("bars: ±2 standard errors over seeds", ls="-")])
    figure_title(fig, "Stage 2: each method at its lag-robust setting against the lag" + title_note)
    return fig


# ----------------------------------------------------------------------------- the draft of the section

def outlines() -> list[list[dict]]:
    """Stage 2's cells at its outline, then after each of the protocol's cell trims, in its order
    (HalfCheetah-v4 at B in 1, 32; then Walker2d-v4 at B in 1, 32)."""
    fixed = {"tasks": ["Hopper-v4", "Walker2d-v4"], "lag_model": "fixed", "lag_depths": [8]}
    ant = {"tasks": ["Ant-v4"], "lag_model": "uniform", "lag_depths": [1, 32]}

    def uniform(full, ends):
        return ([{"tasks": full, "lag_model": "uniform", "lag_depths": [1, 8, 32]}]
                + ([{"tasks": ends, "lag_model": "uniform", "lag_depths": [1, 32]}] if ends else []))

    # the fixed lag at B = 8 runs only where the uniform lag also runs B = 8 (its partner in the shape rule)
    return [uniform(["Hopper-v4", "Walker2d-v4", "HalfCheetah-v4"], []) + [ant, fixed],
            uniform(["Hopper-v4", "Walker2d-v4"], ["HalfCheetah-v4"]) + [ant, fixed],
            uniform(["Hopper-v4"], ["Walker2d-v4", "HalfCheetah-v4"]) + [ant, {**fixed, "tasks": ["Hopper-v4"]}]]


def draft(p: dict, results_dir: str, choices: dict, cost) -> dict:
    """The ``stage2`` section stage 1's rules give (``choices``: surface -> {'value', 'R_H'} for every
    complete surface; ``cost(p, task, runs)``: the driver's minutes at the protocol's rates): the entry
    rule's arms, and the cells trimmed in the protocol's order (the cell
    trims, then four methods) until their cost, at the protocol's rates times the pace stage 1 measured,
    fits what is left of the cap after stage 1's measured hours."""
    from vaco_jax.studies import kit
    others = sorted((k for k in choices if k not in ENTRY), key=lambda k: (-choices[k]["R_H"], k))
    arms = {k: choices[k]["value"] for k in ENTRY if k in choices}
    arms.update({k: choices[k]["value"] for k in others[:2]})
    manifest = kit.manifest(results_dir)
    spent = sum(float(m["seconds_this_session"]) for m in manifest) / 3600.0
    # the pace of units of many runs (a one-run unit's time is mostly its compilation)
    many = [m for m in manifest if int(m["runs"]) > 1]
    estimated = sum(float(m["estimated_minutes"]) for m in many) / 60.0
    pace = sum(float(m["seconds_this_session"]) for m in many) / 3600.0 / estimated if estimated else 1.0
    left = float(p["budget"]["cap_hours"]) - spent - PEER_CHECK_HOURS
    seeds = list(range(200, 210))
    steps = [(arms, cells) for cells in outlines()] + [(dict(list(arms.items())[:4]), outlines()[-1])]
    out = {"seeds": seeds, "hours_left": round(left, 1), "pace": round(pace, 3), "peer_check_hours": PEER_CHECK_HOURS,
           "rules": DEFAULT_RULES}
    for a, cells in steps:
        hours = pace * len(a) * sum(cost(p, t, len(c["lag_depths"]) * len(seeds))
                                    for c in cells for t in c["tasks"]) / 60.0
        if hours <= left:
            return {**out, "arms": a, "cells": cells, "estimated_hours": round(hours, 1)}
    return {**out, "arms": steps[-1][0], "cells": steps[-1][1], "estimated_hours": None,
            "note": "does not fit what is left of the cap even trimmed"}


DEFAULT_RULES = {
    "score": "auc_eval_return", "margin": 0.1, "retention_margin": 0.1, "alpha": 0.05, "floor": 0.1, "reps": 2000,
    "seed": 0, "confidence": 0.95, "equivalence_confidence": 0.9, "retention_lags": [1, 32],
    "shape": {"lag_depth": 8, "models": ["uniform", "fixed"]},
    "normalisation": "per task, s = max(0, (score - random) / (reference - random)); random = the uniform-random "
                     "return measured beside stage 2's runs, reference = the mean score of stage 2's PPO-Clip runs "
                     "at B = 1 (uniform lag)",
    "diverged": "a diverged run scores s = 0 (the floor) and is reported; a missing score is left out and reported",
}
