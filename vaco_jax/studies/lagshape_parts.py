"""The lag-shape study's reports of ``pilot``, ``shape``, ``tuning`` and ``study`` (``results/lagshape/``), each by
its rule in ``protocol.json`` and computed once every unit of its part is in the manifest (:func:`reports`).

* ``pilot`` -> ``ant_pilot.csv``: per seed, the env steps of the first evaluation whose normalised return
  reaches 0.1, and whether Ant-v4 at 1M steps is a usable reference at B = 32 (protocol ``pilot.rule``).
* ``shape`` -> ``verdicts.csv`` (families ``shape_effect``, ``contrast_change``; ``shape.rules``).
* ``tuning`` -> ``tuning_choices.csv`` and ``tuning_surfaces.csv`` (``lagshape_tuning``).
* ``study`` -> ``verdicts.csv`` (family ``best_vs_best``; ``study.rules.test``).

Scores are normalised per task by the protocol's ``normalisation`` numbers (stage 2's random and PPO-Clip
B = 1 reference, ``kit_steplag.stage2_scale`` on the step size x lag study's committed stage-2 runs), floored
at 0 with a diverged run at 0 and a missing score left out (``confirm.cells``, as stage 2). A verdict row
has the protocol's columns ``family, method, reference, lag_model, lag_depth, mean_age, margin, verdict``
and its numbers: ``estimate``, the 95% interval ``low``/``high``, the 90% interval ``low90``/``high90``,
``p`` (two-sided bootstrap) and ``holm_p``, each arm's realised mean age (``realised_ages``) and ``ages``
('ages not matched' when two compared arms' realised mean ages differ by more than 1.0).
"""

from __future__ import annotations

import os

import numpy as np

from vaco_jax.core.config import ConfigError

SCORE = "auc_eval_return"  # shape.rules.score and stage 2's score
REFERENCE = "ppo_clip"  # the contrasts' and the best-against-best test's reference arm
CHALLENGER = "vaco"
PAIRS = (("fixed", "uniform"), ("publish", "uniform"), ("publish", "fixed"))  # shape.rules.shape_effect's pairs
REPS, SEED, ALPHA = 2000, 0, 0.05  # the rules' resamples, numpy default_rng seed and Holm's level
MARGIN = 0.1  # shape: equivalent inside +-0.1; study: P(VACO > PPO-Clip) equivalent inside [0.5 - 0.1, 0.5 + 0.1]
AGE_GAP = 1.0  # shape.rules.ages: a pair more than this apart is marked 'ages not matched'
VERDICTS = "verdicts.csv"


def norm(p: dict) -> dict:
    """``{task: (random, reference)}``: the protocol's ``normalisation`` numbers."""
    n = p["normalisation"]
    return {t: (float(n["random"][t]), float(n["reference"][t])) for t in n["random"]}


# ----------------------------------------------------------------------------------------------- pilot
def pilot_rows(p: dict, results_dir: str) -> list[dict]:
    """Protocol ``pilot.rule``: each seed's env steps at its first evaluation whose normalised return
    (eval_return - random) / (reference - random) is >= 0.1, else 'not within <total>'; the reference is
    usable when at least 2 of the 3 seeds leave random by the study's env steps (1M)."""
    from vaco_jax.analysis import results
    c = p["pilot"]
    random, reference = norm(p)[c["task"]]
    total, horizon = int(c["settings"]["total_env_steps"]), int(p["settings"]["total_env_steps"])
    curves = results.read_table(os.path.join(results_dir, "pilot", c["task"], f"B{c['lag_depth']}", "curves.csv"))
    out = []
    for seed in c["seeds"]:
        evals = sorted((int(r["env_steps"]), (float(r["eval_return"]) - random) / (reference - random))
                       for r in curves if int(r["seed"]) == seed)
        if not evals:
            raise ConfigError(f"pilot: curves.csv has no evaluation of seed {seed}")
        left = [steps for steps, s in evals if np.isfinite(s) and s >= 0.1]
        out.append({"task": c["task"], "lag_depth": c["lag_depth"], "seed": seed,
                    "leaves_random_at": left[0] if left else f"not within {total / 1e6:g}M",
                    "by_horizon": bool(left) and left[0] <= horizon, "horizon": horizon,
                    "normalised_at_horizon": ([s for steps, s in evals if steps <= horizon] or [float("nan")])[-1],
                    "final_normalised": evals[-1][1], "evaluations": len(evals)})
    usable = sum(r["by_horizon"] for r in out) >= 2
    for r in out:
        r["usable_reference"] = usable
    return out


# ------------------------------------------------------------------------------------------ bootstrap
def _test(samples: list, stat, null: float) -> dict:
    """shape.rules' numbers of ``stat`` over ``samples`` (each ``(runs, tasks)``): the estimate, the 95% and
    90% percentile intervals and the two-sided bootstrap p-value against ``null``, by the seed bootstrap of
    the rule: ``REPS`` stratified resamples of numpy default_rng(``SEED``), each sample's runs drawn with
    replacement within each task, independently of the other samples (``analysis.rules.replicates``).
    ``stat`` takes ``[reps, runs, tasks]`` arrays."""
    from vaco_jax.analysis import confirm, rules
    values = rules.replicates(samples, stat, REPS, SEED)
    (lo, hi), (lo90, hi90) = rules.interval(values, 0.95), rules.interval(values, 0.90)
    return {"estimate": float(stat(*samples)), "low": lo, "high": hi, "low90": lo90, "high90": hi90,
            "p": confirm.two_sided(values, null)}


def _holm(tests: dict) -> None:
    from vaco_jax.analysis import rules
    for k, (adjusted, _) in rules.holm({k: t["p"] for k, t in tests.items()}, ALPHA).items():
        tests[k]["holm_p"] = adjusted


def _ages(rows: list[dict]) -> dict:
    """``{(arm, lag_model, B): the mean of its runs' mean_mean_staleness}`` (both tasks)."""
    out: dict = {}
    for r in rows:
        out.setdefault((r["arm"], r["lag_model"], int(r["lag_depth"])), []).append(float(r["mean_mean_staleness"]))
    return {k: float(np.mean(v)) for k, v in out.items()}


def _sample(table: dict, tasks: list, arm: str, model: str, b: int) -> np.ndarray:
    from vaco_jax.analysis import confirm
    x = confirm.sample(table, tasks, arm, model, b)
    if x is None:
        raise ConfigError(f"report: no scored runs of {arm} under {model} lag at B = {b} on every task of {tasks}")
    return x


# ---------------------------------------------------------------------------------------------- shape
def shape_rows(p: dict, results_dir: str) -> list[dict]:
    """Protocol ``shape.rules``: shape_effect (per method, mean age and pair of shapes: the difference of mean
    s, tasks averaged; Holm over its 12 tests) and contrast_change (per mean age and pair: (s_VACO -
    s_PPO-Clip) under the first shape minus under the second; Holm over its 6): *differs* when the Holm-adjusted
    p < 0.05, else *equivalent* when the 90% interval lies inside +-0.1, else *inconclusive* (the rule's order)."""
    from vaco_jax.analysis import confirm, results, rules
    c = p["shape"]
    rows = [{**r, "lag_model": r["model"]} for r in
            results.placed_rows(os.path.join(results_dir, "shape"), ("task", "arm", "model"))]
    table, ages, tasks = confirm.cells(rows, SCORE, norm(p)), _ages(rows), list(c["tasks"])
    # the i-th mean age is each shape's i-th lag depth (protocol.md's table: uniform 15/31, fixed 8/16, ...)
    depth = {(m, a): sorted(s["lag_depths"])[i] for m, s in c["models"].items() for i, a in enumerate(c["mean_ages"])}
    diff = lambda a, b: rules.pooled_mean(a) - rules.pooled_mean(b)  # noqa: E731
    change = lambda a, b, x, y: diff(a, b) - diff(x, y)  # noqa: E731
    effect, contrast = {}, {}
    for age in c["mean_ages"]:
        for first, second in PAIRS:
            b1, b2 = depth[(first, age)], depth[(second, age)]
            for method in c["arms"]:
                effect[(method, age, first, second)] = _test(
                    [_sample(table, tasks, method, first, b1), _sample(table, tasks, method, second, b2)], diff, 0.0)
            contrast[(CHALLENGER, age, first, second)] = _test(
                [_sample(table, tasks, m, s, b) for s, b in ((first, b1), (second, b2)) for m in (CHALLENGER, REFERENCE)],
                change, 0.0)
    out = []
    for family, tests in (("shape_effect", effect), ("contrast_change", contrast)):
        _holm(tests)
        for (method, age, first, second), t in tests.items():
            b1, b2 = depth[(first, age)], depth[(second, age)]
            arms = [method] if family == "shape_effect" else [CHALLENGER, REFERENCE]
            got = {(m, s): ages[(m, s, b)] for m in arms for s, b in ((first, b1), (second, b2))}
            apart = max(abs(got[(m, first)] - got[(m, second)]) for m in arms)
            verdict = ("differs" if t["holm_p"] < ALPHA else
                       "equivalent" if -MARGIN < t["low90"] and t["high90"] < MARGIN else "inconclusive")
            out.append({"family": family, "method": method, "reference": "" if family == "shape_effect" else REFERENCE,
                        "lag_model": f"{first} - {second}", "lag_depth": f"{b1} - {b2}", "mean_age": age,
                        "margin": MARGIN, "verdict": verdict, **t, "tasks": " ".join(tasks),
                        "realised_ages": "; ".join(f"{m} {s} {a:.3f}" for (m, s), a in got.items()),
                        "ages": "ages not matched" if apart > AGE_GAP else ""})
    return out


# ---------------------------------------------------------------------------------------------- study
def study_rows(p: dict, results_dir: str, steplag: str) -> list[dict]:
    """Protocol ``study.rules.test``: per fixed B, P(VACO > PPO-Clip) over the same task's runs, averaged over
    the tasks (a tie counts one half, as stage 2's P(X > Y): ``confirm.head_to_head_test``), by the seed bootstrap:
    *better* when the 95% interval's low end > 0.6 and Holm (over the 2 tests, p two-sided against 0.5)
    rejects, *worse* when its high end < 0.4 and Holm rejects, *equivalent* when the 90% interval lies inside
    [0.4, 0.6], else *inconclusive*. Beside (descriptive): each method's per-task mean s and the committed
    stage-2 P(VACO > PPO-Clip) under fixed lag at the same B (settings tuned under uniform lag)."""
    from vaco_jax.analysis import confirm, results
    c = p["study"]
    rows = [{**r, "lag_model": c["lag_model"]} for r in
            results.placed_rows(os.path.join(results_dir, "study"), ("task", "arm"))]
    table, ages, tasks = confirm.cells(rows, SCORE, norm(p)), _ages(rows), list(c["tasks"])
    stage2 = os.path.join(steplag, "stage2_verdicts.csv")
    stage2 = {int(r["lag_depth"]): f"{r['point']:.3f} ({r['tasks']})" for r in
              (results.read_table(stage2) if os.path.exists(stage2) else [])
              if r["family"] == "primary" and r["arm"] == CHALLENGER and r["lag_model"] == c["lag_model"]}
    tests, cols = {}, {}
    for b in c["lag_depths"]:
        x, y = _sample(table, tasks, CHALLENGER, c["lag_model"], b), _sample(table, tasks, REFERENCE, c["lag_model"], b)
        # stage 2's head-to-head test: P(X > Y) with its percentile interval and two-sided p against 1/2;
        # the 90% interval from the same resamples (the same seed)
        h, h90 = (confirm.head_to_head_test(x, y, confirm.Rules(reps=REPS, seed=SEED, confidence=q)) for q in (0.95, 0.9))
        tests[b] = {"estimate": h["point"], "low": h["low"], "high": h["high"], "low90": h90["low"],
                    "high90": h90["high"], "p": h["p_value"]}
        cols[b] = {"per_task_means": "; ".join(f"{t} {CHALLENGER} {x[:, i].mean():.3f} {REFERENCE} {y[:, i].mean():.3f}"
                                               for i, t in enumerate(tasks)),
                   "beside_stage2_P": stage2.get(b, "")}  # settings tuned under uniform lag
    _holm(tests)
    out = []
    for b, t in tests.items():
        got = {m: ages[(m, c["lag_model"], b)] for m in (CHALLENGER, REFERENCE)}
        rejected = t["holm_p"] < ALPHA
        verdict = ("better" if t["low"] > 0.5 + MARGIN and rejected else
                   "worse" if t["high"] < 0.5 - MARGIN and rejected else
                   "equivalent" if 0.5 - MARGIN <= t["low90"] and t["high90"] <= 0.5 + MARGIN else "inconclusive")
        out.append({"family": "best_vs_best", "method": CHALLENGER, "reference": REFERENCE, "lag_model": c["lag_model"],
                    "lag_depth": b, "mean_age": float(np.mean(list(got.values()))), "margin": MARGIN, "verdict": verdict,
                    **t, "tasks": " ".join(tasks), "realised_ages": "; ".join(f"{m} {a:.3f}" for m, a in got.items()),
                    "ages": "ages not matched" if abs(got[CHALLENGER] - got[REFERENCE]) > AGE_GAP else "", **cols[b]})
    return out


# -------------------------------------------------------------------------------------------- dispatch
def part_units(planned: list, part: str) -> list[str]:
    """The unit names a part's report needs: every unit of its stage; for ``tuning`` the protocol's surfaces
    (``tuning/<task>/<surface>``: the rules then say which extension or added-seed units are pending)."""
    return [u.name for u in planned if u.stage == part and (part != "tuning" or u.name.count("/") == 2)]


def reports(p: dict, args, planned: list, listed: set, tuning) -> tuple[dict, list[str]]:
    """``({table file: rows}, lines to print)`` of every part whose units are all in the manifest (``listed``);
    a part still waiting is a line naming how many of its units are in. ``tuning()``: the tuning part's
    tables, its choices first (``lagshape_tuning.tables``)."""
    tables, lines, verdicts = {}, [], []
    for part in ("pilot", "shape", "tuning", "study"):
        names = part_units(planned, part)
        missing = [n for n in names if n not in listed]
        if not names or missing:
            why = ("its units follow tuning_choices.csv once every surface is complete" if not names else
                   f"{len(names) - len(missing)} of {len(names)} units in; next: {missing[0]}")
            lines.append(f"{part}: waits ({why})")
            continue
        if part == "pilot":
            rows = tables[p["pilot"]["table"]] = pilot_rows(p, args.results)
            lines += [f"{p['pilot']['table']}: seed {r['seed']} leaves random at {r['leaves_random_at']}" for r in rows]
            lines.append(f"pilot: Ant-v4 at 1M steps is {'a usable' if rows[0]['usable_reference'] else 'not a usable'}"
                         f" reference at B = {p['pilot']['lag_depth']} ({sum(r['by_horizon'] for r in rows)} of "
                         f"{len(rows)} seeds leave random by {rows[0]['horizon']:,} env steps)")
        elif part == "tuning":
            tuned = tuning()
            tables.update(tuned)
            name, chosen = next(iter(tuned.items()))
            lines += [f"{name}: {r['surface']} {r['state']}" + (
                f", {r['knob']} = {r['value']:g} (stability {r['stability']:.2f})" if "value" in r and r["value"] is not None
                else "") + (f"; to run: {r['pending']}" if r.get("pending") else "") for r in chosen]
        else:
            verdicts += shape_rows(p, args.results) if part == "shape" else study_rows(p, args.results, args.steplag)
    if verdicts:
        tables[VERDICTS] = verdicts
        lines += [f"{VERDICTS}: {r['family']:<15} {r['method']:<8} {r['lag_model']:<18} B {str(r['lag_depth']):<8} "
                  f"age {r['mean_age']:<5.3g} "
                  f"{r['estimate']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}] holm p {r['holm_p']:.3f}: {r['verdict']}"
                  + (f" ({r['ages']})" if r["ages"] else "") for r in verdicts]
    return tables, lines
