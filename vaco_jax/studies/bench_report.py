"""The bench's rules and report (``vaco-bench``, ``vaco_jax.studies.bench``), on the runs of a plan
(``bench_plan.Plan``): stage 1's rules on the method's surface (:func:`stage1`, as the step size x lag
study applies them: ``kit_steplag.surface_rules``), stage 2's verdicts with the method's arm added to the
committed family (:func:`verdicts`, ``vaco_jax.analysis.confirm``), and ``report.md`` with its tables
(:func:`report`), written once every unit has finished.
"""

from __future__ import annotations

import os

from vaco_jax.studies import kit
from vaco_jax.studies.kit_steplag import REFERENCE, STABILITY_REPS, rule_numbers, stage2_rows, stage2_scale, surface_rules


# ----------------------------------------------------------------------------- stage 1's rules

def stage1_scale(plan, results_dir: str) -> dict:
    """Stage 1's fixed scale per tuning task (the protocol's); at the tiny size, the stand-in's stage-2 scale."""
    if plan.size == "tiny":
        return stage2_scale(stage2_rows(results_dir), results_dir, plan.score)
    n = plan.p["stage1"]["normalisation"]
    return {t: (n["random"][t], n["reference"][t]) for t in plan.tasks}


def stage1(plan, results_dir: str) -> dict:
    """Stage 1's rules on the surface's committed rows: ``state`` ("incomplete", "pending" or "decided"),
    the lag-robust ``value`` with its ``choice`` and ``stability``, the per-lag ``optima``, the extension
    ``points`` and within-noise values (``noisy``) the rules ask for, those of them that run as units
    (``run_points``, ``run_noisy``; none at the tiny size), the ``rows`` and the ``contest``."""
    from vaco_jax.analysis import results, surfaces
    # every row under surface/ (no names read from the folders: the rows as they are)
    rows = [{**r, "value": float(r[plan.knob])} for r in results.placed_rows(os.path.join(results_dir, "surface"), ())]
    norm = stage1_scale(plan, results_dir)
    tiny = plan.size == "tiny"
    st = surface_rules(rows, plan.seeds, plan.tasks, plan.lag_depths, plan.values, plan.knob, plan.score, norm,
                       plan.stability_reps, past_edges=tiny)
    out = {"rows": rows, "norm": norm, "state": "incomplete", "value": None, "points": [], "noisy": [],
           "run_points": [], "run_noisy": [], "contest": st["contest"]}
    if st["state"] == "incomplete":
        return out
    if st["state"] == "unscaled":  # (tiny: the stand-in's PPO-Clip did not beat the random policy)
        return {**out, "state": f"no scale for {', '.join(sorted(set(plan.tasks) - set(norm)))}"}
    if st["state"] == "short":  # an extension is in on some tasks only: its other units run first
        return {**out, "state": "pending", "points": st["points"], "run_points": st["extended"]}
    points = st["points"]  # every extension run so far stays a unit
    out.update(points=points, run_points=[] if tiny else sorted(set(st["extended"]) | set(points)), optima=st["optima"])
    if points and not tiny:
        return {**out, "state": "pending"}
    contest, stab = st["base"], st["stability"]
    if not stab["stable"]:
        out["noisy"] = st["noisy"]
        if not tiny and st["lacking"]:
            return {**out, "state": "pending", "run_noisy": out["noisy"]}
        if not st["lacking"]:  # the rule and its stability once more, among the values within noise on every seed
            contest, out["run_noisy"], out["contest"] = st["contest_rows"], out["noisy"], st["contest"]
            stab = surfaces.stability(contest, plan.score, norm, reps=STABILITY_REPS)
    choice = surfaces.robust_choice(contest, plan.score, norm)
    if choice["value"] is None:
        return {**out, "state": "no value allowed", "choice": choice}
    return {**out, "state": "decided", "value": choice["value"], "choice": choice, "stability": stab}


# ----------------------------------------------------------------------------- stage 2's rules

def verdicts(plan, results_dir: str, committed: str) -> dict:
    """Stage 2's rules with this method's arm added: {'primary' (the family of every committed arm and
    this one, Holm over all), 'per_task' and 'shape' (this arm's pairs), 'left_out', 'unscaled'}. The
    reference runs are the committed ones (``committed/stage2``) at the full size, the stand-in's at the
    tiny size; the scale is theirs."""
    from vaco_jax.analysis import confirm
    tiny = plan.size == "tiny"
    rl = plan.rules
    r = confirm.Rules(**rule_numbers(rl))
    ours = stage2_rows(results_dir)
    every = ours if tiny else stage2_rows(committed) + [x for x in ours if x["arm"] == plan.arm]
    norm = stage2_scale(every, results_dir if tiny else committed, plan.score)
    got = [x for x in every if x["env"] in norm]
    arms = list(dict.fromkeys([REFERENCE] + ([] if tiny else list(plan.p["stage2"]["arms"])) + [plan.arm]))
    lag_cells = list(dict.fromkeys((c["lag_model"], int(b)) for c in plan.cells for b in c["lag_depths"]))
    retention = (min(plan.lag_depths), max(plan.lag_depths)) if tiny else tuple(rl["retention_lags"])
    out = {"primary": confirm.primary(got, plan.score, norm, arms, lag_cells, retention, r),
           "per_task": confirm.per_task(got, plan.score, norm, [REFERENCE, plan.arm], lag_cells, r),
           "left_out": confirm.left_out([x for x in got if x["arm"] == plan.arm], plan.score),
           "unscaled": sorted({x["env"] for x in every} - set(norm)), "shape": None}
    shape = rl["shape"]
    if {(m, int(shape["lag_depth"])) for m in shape["models"]} <= set(lag_cells):
        s = confirm.shape_dependence(got, plan.score, norm, arms, int(shape["lag_depth"]), tuple(shape["models"]), r)
        out["shape"] = {**s, "pairs": [q for q in s["pairs"] if plan.arm in q["pair"].split(" - ")]}
    return out


def committed_cpus(committed: str) -> str:
    """The CPU models that ran the committed stage-2 runs (their ``run.json``)."""
    from vaco_jax.analysis import results
    path = os.path.join(committed, "stage2", "run.json")
    models = {m.get("cpu") for m in results.read_json(path).get("machines", [])} if os.path.exists(path) else set()
    return ", ".join(sorted(m for m in models if m)) or "not recorded"


def committed_verdicts(committed: str) -> dict:
    """``{(test, arm, lag model, B): row}`` of the committed stage-2 primary family."""
    from vaco_jax.analysis import results
    path = os.path.join(committed, "stage2_verdicts.csv")
    rows = results.read_table(path) if os.path.exists(path) else []
    return {(r["test"], r["arm"], r["lag_model"], int(r["lag_depth"])): r for r in rows if r["family"] == "primary"}


# ----------------------------------------------------------------------------- the report

def _interval(r: dict) -> str:
    return f"{r['point']:.2f} [{r['low']:.2f}, {r['high']:.2f}]" if "point" in r else "–"


def cost_lines(plan, results_dir: str) -> list[str]:
    """The cost measured: each unit's seconds and CPU (the manifest), in CPU-hours at this machine's cores."""
    rows = kit.manifest(results_dir)
    cores = os.cpu_count() or 1
    seconds = sum(float(m["seconds_this_session"]) for m in rows)
    cpus = sorted({m.get("cpu") or "not recorded" for m in rows})
    est = sum(float(m["estimated_minutes"]) for m in rows) / 60.0
    return [f"{len(rows)} units, {sum(int(m['runs']) for m in rows)} runs: {seconds / 3600:.2f} h measured "
            f"(the plan's estimate {est:.2f} h), {seconds * cores / 3600:.2f} CPU-hours at {cores} cores; "
            f"CPU: {', '.join(cpus) or 'none yet'}"
            + ("" if plan.size == "tiny" else "; the reused committed runs not counted") + "."]


def report(plan, results_dir: str, committed: str) -> str:
    """``report.md`` (with the surface figure and the tables ``choice.csv`` and ``verdicts.csv``) from every
    finished unit; returns its text."""
    from vaco_jax.analysis import results, surfaces
    from vaco_jax.analysis.plotting import save_figure
    from vaco_jax.core.methods import METHODS
    st = stage1(plan, results_dir)
    v = verdicts(plan, results_dir, committed)
    label = METHODS[plan.method].label or plan.method
    tiny = plan.size == "tiny"
    fig = surfaces.draw_surface(st["rows"], plan.score, st["norm"], plan.knob, f"{label}: AUC against {plan.knob}",
                                st["value"])
    save_figure(fig, results_dir, "surface", results_dir)
    stab, choice = st["stability"], st["choice"]
    r_text = ", ".join(f"{k:g}: {x:.3f}" for k, x in choice["R"].items())
    optima = ", ".join(f"B = {b}: " + ("every value equal" if x is None else f"{x:g}") for b, x in st["optima"].items())
    lines = [f"# {label} through the step size × lag protocol", "",
             f"Method `{plan.method}` ({', '.join(f'{k}={x}' for k, x in plan.record['pieces'].items())}), knob "
             f"`{plan.knob}`, grid {' '.join(f'{x:g}' for x in plan.values)}; protocol `{plan.record['protocol']}` "
             f"(sha256 {plan.record['protocol_sha256'][:12]}…); the bench's plan `bench.json` "
             f"(sha256 {plan.digest[:12]}…).",
             ""]
    if tiny:
        lines += ["**Tiny size** (a smoke run of the machinery, not evidence): `point_mass`, B ∈ "
                  f"{{{', '.join(map(str, plan.lag_depths))}}}, seeds {', '.join(map(str, plan.seeds))}, "
                  f"{plan.tiny['settings']['total_env_steps']} env steps a run. The committed reference arms have no runs "
                  "at this size: PPO-Clip at its committed stage-2 setting ran here, beside this method, as their "
                  "stand-in, and its mean at B = 1 is both stages' scale. The edge and stability rules are reported, "
                  "and add no units at this size.", ""]
    lines += ["## Stage 1: the surface", "", "![surface](surface.png)", "",
              f"Lag-robust `{plan.knob}` = **{st['value']:g}** (stability {stab['share']:.2f}, threshold 0.8; picks "
              + ", ".join(f"{k:g}: {x:.2f}" for k, x in stab["picks"].items()) + f"), from {st['contest']}. "
              f"R per value: {r_text}. Per-lag optima: {optima}."]
    if choice["excluded"]:
        lines.append("Excluded: " + "; ".join(f"{k:g} ({', '.join(x)})" for k, x in choice["excluded"].items()) + ".")
    asked = ([f"extensions {' '.join(f'{x:g}' for x in st['points'])}"] if st["points"] else []) + (
        [f"more seeds for {' '.join(f'{x:g}' for x in st['noisy'])}"] if st["noisy"] else [])
    if tiny and asked:
        lines.append(f"Asked for by the rules, not run at this size: {'; '.join(asked)}.")
    arms = [a for a in plan.p["stage2"]["arms"] if a != REFERENCE] if not tiny else []
    mine = [x for x in v["primary"] if x["arm"] == plan.arm]
    old = committed_verdicts(committed) if not tiny else {}
    lines += ["", "## Stage 2: verdicts against PPO-Clip", ""]
    lines.append(("Reference: PPO-Clip at its committed stage-2 setting, run at this size (a stand-in). " if tiny else
                  f"Reference: the committed PPO-Clip runs of `{committed}/stage2`. They and the committed arms ran in "
                  f"other programs and on other CPUs ({committed_cpus(committed)}) than this method's runs, so the "
                  "comparison is statistical (run against run, by the seed bootstrap), never a paired replay. ")
                 + f"Seeds {', '.join(map(str, plan.stage2_seeds))}; the primary family is "
                 + ("this method's tests" if tiny else "the committed one with this method's tests added")
                 + f", Holm over {sum('p_holm' in x for x in v['primary'])} tests at α = {plan.rules['alpha']}; "
                 f"equivalence: the 90% interval inside ±{plan.rules['margin']}.")
    lines += ["", "| test | lag | this method: estimate [95% CI] | p (Holm) | verdict |"
              + "".join(f" {a} |" for a in arms), "|---|---|---|---|---|" + "---|" * len(arms)]
    for x in mine:
        name = "P(X > PPO-Clip)" if x["test"].startswith("P(") else "retention − PPO-Clip's"
        cells = "".join(f" {old[k]['verdict']} ({float(old[k]['point']):.2f}) |" if (k := (x["test"], a, x["lag_model"],
                        int(x["lag_depth"]))) in old else " – |" for a in arms)
        lines.append(f"| {name} | {x['lag_model']} B = {x['lag_depth']} | {_interval(x)} | "
                     + (f"{x['p_holm']:.3f}" if "p_holm" in x else "–") + f" | **{x['verdict']}** |" + cells)
    if not tiny:
        changed = [x for x in v["primary"] if x["arm"] != plan.arm and (k := (x["test"], x["arm"], x["lag_model"],
                   int(x["lag_depth"]))) in old and old[k]["verdict"] != x["verdict"]]
        lines.append("")
        lines.append(f"The committed columns are the committed verdicts; with this method's tests in the family, "
                     f"{len(changed)} of them would read differently.")
    if v["shape"] is not None:
        lines += ["", f"The lag's shape at B = {v['shape']['lag_depth']} ({' against '.join(v['shape']['models'])}): "
                  + "; ".join(f"{q['pair']}: {q['verdict']}" for q in v["shape"]["pairs"]) + "."]
    for key, (diverged, missing) in v["left_out"].items():
        lines.append(f"{'/'.join(map(str, key))}: {diverged} diverged (scored at the floor), "
                     f"{missing} missing (left out).")
    if v["unscaled"]:
        lines.append(f"No scale (left out of every verdict): {', '.join(v['unscaled'])}.")
    lines += ["", "## Cost", ""] + cost_lines(plan, results_dir)
    text = "\n".join(lines) + "\n"
    results.write_table(os.path.join(results_dir, "choice.csv"), [
        {"method": plan.method, "knob": plan.knob, "value": st["value"], "stability": stab["share"],
         "contest": st["contest"], "R": r_text, "per_lag": optima,
         "pending": " ".join(f"{x:g}" for x in st["points"] + st["noisy"]) if tiny else ""}])
    results.write_table(os.path.join(results_dir, "verdicts.csv"),
                        [{"family": "primary", **x} for x in mine] + [{"family": "per task", **x} for x in v["per_task"]
                                                                      if x["arm"] == plan.arm])
    results.atomic_write_text(os.path.join(results_dir, "report.md"), text)
    return text

