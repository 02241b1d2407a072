"""FINDINGS.md's tables of the step size x lag study (``results/steplag/``), read from ``results/`` alone.

``rebuild_docs.BLOCKS`` names ``steplag_stage2_table`` (block ``steplag_stage2``: stage 2's finished
units per lag depth, then its verdicts and the lag-shape rule as ``experiments/steplag.py report`` wrote
them) and the first screen's line ``steplag_summary`` (units and hours so far, each stage-1 surface's
lag-robust setting from ``choices.csv``, stage 2's state).
"""

from __future__ import annotations

import math
import os

import numpy as np

from vaco_jax.analysis import results
from vaco_jax.studies import kit
from vaco_jax.studies.kit_findings import interval_text, num, table, text_cell
from vaco_jax.studies.kit_steplag import arm_label, stage2_progress

STEPLAG = os.path.join("results", "steplag")
# The tables ``experiments/steplag.py report`` writes under it (``CHOICES``, ``STAGE2_VERDICTS`` and
# ``STAGE2_SHAPE``; named here so that the tables are read without the study's command module).
CHOICES = "choices.csv"
STAGE2_VERDICTS = "stage2_verdicts.csv"
STAGE2_SHAPE = "stage2_shape.csv"


def steplag_summary(root: str) -> str | None:
    """FINDINGS.md's first-screen line on the step size x lag study: units and hours so far, each stage-1
    surface's state and lag-robust setting as ``report`` wrote them (``choices.csv``), stage 2's state."""
    res = os.path.join(root, STEPLAG)
    if not os.path.exists(os.path.join(res, "protocol.json")):
        return None
    p, digest = kit.load_protocol(os.path.join(res, "protocol.json"))
    manifest = kit.manifest(res)
    hours = sum(float(m["seconds_this_session"]) for m in manifest) / 3600.0
    choices = os.path.join(res, CHOICES)
    parts = []
    for r in results.read_table(choices) if os.path.exists(choices) else []:
        if r["state"] == "incomplete":  # no task in: a surface with no run yet
            tasks = text_cell(r["tasks_in"])
            parts.append(f"{r['surface']} " + (f"on {tasks}" if tasks else "to run"))
        else:
            pending = "" if r["state"] == "complete" else f", {r['state']}: {r['pending']}"
            parts.append(f"{r['surface']} {r['knob']} = {num(r['value'], 'g')} (stability "
                         f"{num(r['stability'], '.2f')}{pending})")
    if "stage2" in p:
        done, names = stage2_progress(p, manifest)
        arms = ", ".join(arm_label(p, a) for a in p["stage2"]["arms"])
        stage2 = (f"Stage 2 is fixed in the protocol ({arms}): "
                  f"{len(done)} of its {len(names)} units finished"
                  + ("" if len(done) == len(names) else ", no verdict before the last"))
        verdicts = os.path.join(res, STAGE2_VERDICTS)
        if len(done) == len(names) and os.path.exists(verdicts):
            from vaco_jax.analysis.confirm import VERDICTS
            prim = [r["verdict"] for r in results.read_table(verdicts) if r["family"] == "primary"]
            counts = ", ".join(f"{prim.count(v)} {v}" for v in VERDICTS if prim.count(v))
            stage2 += f"; its primary family (`stage2_verdicts.csv`, {len(prim)} tests against PPO-Clip): {counts}"
            shape_path = os.path.join(res, STAGE2_SHAPE)
            shape = results.read_table(shape_path) if os.path.exists(shape_path) else []
            if shape:
                stage2 += f"; the lag's shape (`stage2_shape.csv`): {shape[0]['overall']}"
    else:
        stage2 = "Stage 2 is not fixed yet (its section is written from stage 1's complete surfaces)"
    dev = os.path.join(res, "deviations.csv")
    devs = len(results.read_table(dev)) if os.path.exists(dev) else 0
    return (f"- **The step size × lag study** (`results/steplag/`, protocol sha256 `{digest[:8]}…`): "
            f"{len(manifest)} units finished, {hours:.1f} h of runs of the {p['budget']['cap_hours']} h cap. "
            + (f"Stage 1 surfaces (`choices.csv`: the lag-robust setting where complete): {'; '.join(parts)}. "
               if parts else "Stage 1's rules have not been applied yet (`python experiments/steplag.py report`). ")
            + f"{stage2}; {devs} deviation(s) recorded.")



def steplag_stage2_table(root: str) -> str:
    """Stage 2 of the step size x lag study: every finished unit's runs per lag depth (mean ± sd of the
    AUC over seeds, diverged runs counted and left out of the mean), then, once ``report`` has computed
    them (only when every unit has finished), the primary family, the per-task rows and the lag-shape
    rule as it wrote them (``stage2_verdicts.csv``, ``stage2_shape.csv``)."""
    from vaco_jax.analysis.tables import is_diverged

    res = os.path.join(root, STEPLAG)
    if not os.path.exists(os.path.join(res, "protocol.json")):
        return "No step size × lag study in this tree (`results/steplag/protocol.json`).\n"
    p = kit.load_protocol(os.path.join(res, "protocol.json"))[0]
    if "stage2" not in p:
        return ("Stage 2 is not fixed yet: `python experiments/steplag.py report` prints its section once stage 1 "
                "is complete, and the section is committed into the protocol before stage 2's first run.\n")
    done, names = stage2_progress(p, kit.manifest(res))
    score = p["stage2"]["rules"]["score"]
    depths = sorted({int(b) for c in p["stage2"]["cells"] for b in c["lag_depths"]})
    rows = []
    for name in done:
        _, task, arm, lag_model = name.split("/")
        path = os.path.join(res, name, "scores.csv")
        runs = results.read_table(path) if os.path.exists(path) else []
        cells = []
        for b in depths:
            at = [r for r in runs if int(r["lag_depth"]) == b]
            ok = [float(r[score]) for r in at if not is_diverged(r) and math.isfinite(float(r[score]))]
            bad = len(at) - len(ok)
            mean, sd = np.mean(ok) if ok else math.nan, np.std(ok, ddof=1) if len(ok) > 1 else math.nan
            cells.append("" if not at else f"{num(mean, ',.0f')} ± {num(sd, ',.0f')} ({len(ok)}"
                         + (f"; {bad} diverged" if bad else "") + ")")
        rows.append([task, arm_label(p, arm), lag_model] + cells)
    seeds = p["stage2"]["seeds"]
    if not done:
        return (f"Stage 2 (`results/steplag/stage2/`): none of its {len(names)} units has finished yet "
                "(`python experiments/steplag.py plan` lists them; `run --minutes M` runs the next).\n")
    text = [f"Stage 2 (`results/steplag/stage2/`): {len(done)} of {len(names)} units finished. Per unit and lag "
            f"depth, the AUC's mean ± sd over seeds {seeds[0]}–{seeds[-1]} (runs counted; a diverged run is "
            "counted, left out of the mean and scored at the floor by the rules).", "",
            table(["task", "method at its lag-robust setting", "lag model"] + [f"B = {b}" for b in depths],
                  rows).rstrip("\n"), ""]
    verdicts = os.path.join(res, STAGE2_VERDICTS)
    if not os.path.exists(verdicts):
        text.append("No verdict yet: `python experiments/steplag.py report` computes them once every stage-2 unit "
                    "has finished (no interim verdict).")
        return "\n".join(text) + "\n"
    v = results.read_table(verdicts)

    rules_ = p["stage2"]["rules"]
    ci, eci = float(rules_["confidence"]), float(rules_["equivalence_confidence"])

    prim = [[r["test"].replace("reference", "PPO-Clip"), arm_label(p, r["arm"]), r["lag_model"],
             str(int(r["lag_depth"])), text_cell(r["tasks"]), interval_text(r, spec=".3f"),
             interval_text(r, "difference", "+.3f"), num(r.get("p_holm"), ".4f"),
             f"**{r['verdict']}**", text_cell(r.get("at_floor")) or "—", num(r.get("setting_stability"), ".2f")]
            for r in v if r["family"] == "primary"]
    text += ["The primary family (`results/steplag/stage2_verdicts.csv`, Holm over the family): per lag model and "
             "B, P(X > PPO-Clip) pooled over the tasks both ran, and each method's retention (B = 32 over B = 1) "
             f"minus PPO-Clip's, with its {ci:.0%} interval, the difference the equivalence call reads (the mean "
             "normalised score minus PPO-Clip's for a head-to-head, the retention difference for a retention) with "
             f"its {eci:.0%} interval (equivalent when it lies inside ±{num(rules_['margin'], 'g')}; a retention inside "
             f"±{num(rules_['retention_margin'], 'g')}), Holm's p-value, the verdict, the tasks at their floor and how "
             "firmly stage 1 chose the method's setting (its stability).", "",
             table(["test", "method", "lag model", "B", "tasks", f"point [{ci:.0%} interval]",
                    f"difference [{eci:.0%} interval]", "p (Holm)", "verdict", "at floor", "setting stability"],
                   prim).rstrip("\n"), ""]
    per = [[r["tasks"], arm_label(p, r["arm"]), r["lag_model"], str(int(r["lag_depth"])), interval_text(r, spec=".3f"),
            r["verdict"],
            "floor" if text_cell(r.get("at_floor")) else "ceiling" if str(r.get("at_ceiling")) == "True" else ""]
           for r in v if r["family"] == "per task"]
    text += ["Per task beside the pooled rows (exploratory: the interval's verdict against ½, no Holm), with the "
             "tasks at their floor or ceiling.", "",
             table(["task", "method", "lag model", "B", "P(X > PPO-Clip) [interval]", "verdict", "floor / ceiling"],
                   per).rstrip("\n"), ""]
    shape_path = os.path.join(res, STAGE2_SHAPE)
    if os.path.exists(shape_path):
        shape = results.read_table(shape_path)
        if shape:
            m0, m1 = str(shape[0]["models"]).split()
            rows = [[" − ".join(arm_label(p, k).split(",")[0] for k in r["pair"].split(" - ")),
                     num(r.get(f"contrast_{m0}"), ".3f"), num(r.get(f"contrast_{m1}"), ".3f"),
                     f"{num(r.get('change'), '.3f')} [{num(r.get('low'), '.3f')}, {num(r.get('high'), '.3f')}]",
                     num(r.get("p_holm"), ".4f"), r["verdict"]] for r in shape]
            text += [f"The lag's shape at B = {int(shape[0]['lag_depth'])} (`results/steplag/stage2_shape.csv`): per "
                     f"pair of methods, the contrast (pooled normalised score) under each lag model and its change, "
                     f"Holm over the pairs; overall: **{shape[0]['overall']}**.", "",
                     table(["pair", f"contrast, {m0}", f"contrast, {m1}", f"change ({m1} − {m0}) [interval]",
                            "p (Holm)", "verdict"], rows).rstrip("\n")]
    return "\n".join(text).rstrip("\n") + "\n"
