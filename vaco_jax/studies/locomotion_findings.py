"""FINDINGS.md's tables of the locomotion study (``results/locomotion/``), read from ``results/`` alone.

``rebuild_docs.BLOCKS`` names them (blocks ``locomotion_units``, ``locomotion_verdicts`` and
``locomotion_diagnostics``; ``locomotion_summary`` gives the first screen's lines), so every number those
sections of FINDINGS.md quote is recomputed from the committed per-run records by
``python experiments/rebuild_docs.py`` and checked by its ``--check``:

- ``locomotion_units_table``: one row per finished study, lag-aware and ablation unit (the manifest's
  ``manifest.csv``): per lag depth, the mean ± standard deviation over seeds of the area under the
  evaluation curve (the protocol's primary score) and the mean final return; diverged runs are counted
  and left out of both, never averaged.
- ``locomotion_verdicts_table``: the protocol's verdicts as ``experiments/locomotion.py report`` wrote
  them to ``verdicts.csv`` (primary family with Holm-adjusted p-values, retention of every method, the
  exploratory comparisons, each verdict's stability over bootstrap seeds); a test recomputes that file
  from the committed per-run scores.
- ``locomotion_diagnostics_table``: each per-run diagnostic's mean per method, tuning and lag depth.
"""

from __future__ import annotations

import json
import os

import numpy as np

from vaco_jax.analysis import results
from vaco_jax.studies.kit_findings import interval_text, mean_sd, num, table, text_cell

LOCOMOTION = os.path.join("results", "locomotion")
STAGES = ("study", "lag_aware", "ablation")  # the manifest's units with study seeds, in this order
STAGE_LABEL = {"study": "B = 1 tuning", "lag_aware": "lag-aware tuning", "ablation": "parent's B = 1 tuning"}


def unit_scores_dir(loco: str, unit: str) -> str:
    """Where a study-seed unit's ``scores.csv`` lies (``vaco_jax.studies.locomotion.study_units``)."""
    stage, task, method = unit.split("/")
    sub = os.path.join(task, method, "variant=lag_aware") if stage == "lag_aware" else os.path.join(task, method)
    return os.path.join(loco, "study", sub)


def locomotion_cell(rows: list[dict]) -> str:
    """``AUC mean ± sd (final mean)`` over the finished runs, with the number that diverged."""
    from vaco_jax.analysis.tables import is_diverged

    kept = [r for r in rows if not is_diverged(r)]
    auc, sd = mean_sd([float(r["auc_eval_return"]) for r in kept])
    final, _ = mean_sd([float(r["final_eval_return"]) for r in kept])
    text = f"{num(auc, ',.0f')} ± {num(sd, ',.0f')} ({num(final, ',.0f')})"
    diverged = len(rows) - len(kept)
    return text + (f"; {diverged} of {len(rows)} diverged" if diverged else "")


def locomotion_units_table(root: str) -> str:
    """The finished study-seed units of the locomotion study (see the module's docstring)."""
    from vaco_jax.analysis import plotting

    loco = os.path.join(root, LOCOMOTION)
    manifest = os.path.join(loco, "manifest.csv")
    if not os.path.exists(manifest):
        return "No unit of the locomotion study has finished (`python experiments/locomotion.py plan`).\n"
    with open(os.path.join(loco, "protocol.json")) as f:
        protocol = json.load(f)
    units = [r["unit"] for r in results.read_table(manifest) if r["unit"].split("/")[0] in STAGES]
    tasks = list(dict.fromkeys(protocol["tasks"] + protocol["ablations"]["tasks"]))
    methods = plotting.sort_methods({u.split("/")[2] for u in units})
    units.sort(key=lambda u: (STAGES.index(u.split("/")[0]), tasks.index(u.split("/")[1]),
                              methods.index(u.split("/")[2])))
    depths = sorted({int(b) for b in protocol["lag_depths"]})
    rows = []
    for unit in units:
        stage, task, method = unit.split("/")
        scores = results.read_table(os.path.join(unit_scores_dir(loco, unit), "scores.csv"))
        by_b = {}
        for r in scores:
            by_b.setdefault(int(r["lag_depth"]), []).append(r)
        rows.append([task, plotting.method_label(method), STAGE_LABEL[stage], str(len(scores))]
                    + [locomotion_cell(by_b[b]) if b in by_b else "—" for b in depths])
    header = ["task", "method", "step knob", "runs"] + [f"B = {b}" for b in depths]
    return ("Per unit and lag depth B: the area under the evaluation curve, mean ± standard deviation over "
            "the study seeds, and in brackets the mean final return (diverged runs left out and counted).\n\n"
            + table(header, rows))



def _stable(r: dict) -> str:
    return num(r.get("stability"), ".2f")


def _tasks(r: dict) -> str:
    return text_cell(r.get("tasks")) or "—"


SCORE_LABEL = {"auc_eval_return": "AUC", "final_eval_return": "final return"}


def locomotion_verdicts_table(root: str) -> str:
    """The locomotion study's verdicts (``results/locomotion/verdicts.csv``, written by
    ``experiments/locomotion.py report`` from the committed per-run scores): the primary family, every
    method's retention, then the other exploratory comparisons, the ceiling test and the diverged runs."""
    from vaco_jax.analysis import plotting

    path = os.path.join(root, LOCOMOTION, "verdicts.csv")
    if not os.path.exists(path):
        return "No verdict yet: `python experiments/locomotion.py report` writes them once the units are done.\n"
    rows = results.read_table(path)
    primary = [r for r in rows if r["family"] == "primary"]
    out = ["The primary family (claim 1, head to head on the AUC, pooled over the tasks listed): P(VACO > X) "
           "with its 95% stratified-bootstrap interval, the one-sided p-value after Holm's correction over the "
           "family, the verdict (holds: Holm rejects P ≤ 0.5; fails: the interval lies below 0.5) and the share "
           "of bootstrap seeds 1–20 that give the same verdict.", "",
           table(["X", "tunings", "B", "P(VACO > X)", "p (Holm)", "verdict", "stable", "tasks"],
                 [[plotting.method_label(r["comparison"].split("> ")[1].rstrip(")")),
                   "lag-aware" if r["tuning"] == "lag_aware" else "B = 1", r["lag_depth"],
                   interval_text(r) if r["verdict"] != "no data" else "—", num(r["p_holm"], ".4f"), r["verdict"],
                   _stable(r), _tasks(r)] for r in primary])]
    retention = [r for r in rows if r["claim"] == "retention"]
    methods = list(dict.fromkeys(r["comparison"].split(" ")[0] for r in retention))
    cols = list(dict.fromkeys((r["score"], r["lag_depth"]) for r in retention))
    by = {(r["comparison"].split(" ")[0], r["score"], r["lag_depth"]): r for r in retention}
    out += ["Exploratory (no correction). Retention: each method's pooled mean normalised score at B over its "
            "own at B = 1 (0 = a uniform-random policy, 1 = synchronous PPO-Clip), B = 1 tunings, with its 95% "
            "interval.", "",
            table(["method"] + [f"{SCORE_LABEL.get(s, s)}, B = {b}" for s, b in cols],
                  [[plotting.method_label(m)] + [interval_text(by[(m, s, b)]) if (m, s, b) in by
                                                and by[(m, s, b)]["verdict"] != "no data" else "—" for s, b in cols]
                   for m in methods])]
    other = [r for r in rows if r["family"] == "exploratory" and r["claim"] not in ("retention", "ceiling")]
    out += ["The other exploratory comparisons: claim 6 (VACO's retention minus X's; holds above 0), claim 1 "
            "at every B, claim 2 (P(fraction at B = 32 > at B = 1)), claim 5 (VACO against its ablations) and "
            "claim 3 (A-3PO against decoupled PPO with π_T recomputed: equivalent when the 90% interval lies inside "
            "±0.1 of normalised score).", "",
            table(["claim", "comparison", "score", "B", "point [interval]", "verdict", "stable", "tasks"],
                  [[r["claim"], r["comparison"], SCORE_LABEL.get(r["score"], r["score"]), r["lag_depth"],
                    interval_text(r) if r["verdict"] != "no data" else "—", r["verdict"], _stable(r),
                    _tasks(r)] for r in other])]
    notes = [r["comparison"].split(":")[0] + ": " + r["verdict"] for r in rows if r["claim"] == "ceiling"]
    diverged = [r["comparison"] for r in rows if r["claim"] == "diverged"]
    out.append("Ceiling (B = 1 PPO-Clip within 2% of the best final return in most runs): " + "; ".join(notes)
               + ". " + "".join(d[0].upper() + d[1:] + ". " for d in diverged).rstrip() + "\n")
    return "\n".join(out)


def locomotion_verdict_summary(root: str) -> str | None:
    """The primary family's verdicts in one sentence (None before ``report`` has run)."""
    path = os.path.join(root, LOCOMOTION, "verdicts.csv")
    if not os.path.exists(path):
        return None
    primary = [r["verdict"] for r in results.read_table(path) if r["family"] == "primary"]
    counts = ", ".join(f"{primary.count(v)} {v}" for v in ("holds", "fails", "inconclusive", "no data")
                       if primary.count(v))
    return (f"Primary family (claim 1: P(VACO > X) on the AUC for X in PPO-Clip, PPO-KL, SPO; Holm over "
            f"{len(primary)}): {counts} (`results/locomotion/verdicts.csv`).")


# (column of scores.csv, header): the per-run diagnostics the locomotion summary reads (docs/diagnostics.md)
LOCOMOTION_DIAGNOSTICS = (("mean_mean_staleness", "mean age (versions)"),
                          ("mean_tv_behaviour", "sampled TV estimate to β"),
                          ("mean_tv_learner", "sampled TV estimate to π_T (the learner's move)"),
                          ("mean_filtered_fraction", "filtered fraction"),
                          ("mean_clip_fraction", "clip fraction"),
                          ("mean_entropy", "entropy"))


def locomotion_diagnostics_table(root: str) -> str:
    """Per method, tuning and lag depth: each diagnostic's mean over a task's runs, averaged over the tasks
    that have it (each task counts once), from the committed study and lag-aware units; diverged runs
    left out. A diagnostic a method does not record is "—"."""
    from vaco_jax.analysis import plotting
    from vaco_jax.analysis.tables import is_diverged

    loco = os.path.join(root, LOCOMOTION)
    manifest = os.path.join(loco, "manifest.csv")
    if not os.path.exists(manifest):
        return "No unit of the locomotion study has finished.\n"
    units = [r["unit"] for r in results.read_table(manifest) if r["unit"].split("/")[0] in ("study", "lag_aware")]
    cells: dict = {}  # (method, stage, B) -> task -> rows
    for unit in units:
        stage, task, method = unit.split("/")
        for r in results.read_table(os.path.join(unit_scores_dir(loco, unit), "scores.csv")):
            if not is_diverged(r):
                cells.setdefault((method, stage, int(r["lag_depth"])), {}).setdefault(task, []).append(r)
    methods = plotting.sort_methods({k[0] for k in cells})
    rows = []
    for key in sorted(cells, key=lambda k: (methods.index(k[0]), STAGES.index(k[1]), k[2])):
        method, stage, b = key
        values = []
        for column, _ in LOCOMOTION_DIAGNOSTICS:
            per_task = [np.nanmean([float(r.get(column, "nan")) for r in rs]) for rs in cells[key].values()
                        if any(np.isfinite(float(r.get(column, "nan"))) for r in rs)]
            values.append(num(np.mean(per_task), ".3f") if per_task else "—")
        rows.append([plotting.method_label(method), STAGE_LABEL[stage], str(b), str(len(cells[key]))] + values)
    return ("Diagnostics of the study seeds' runs (`scores.csv`, per-run means over training; docs/diagnostics.md): "
            "per method, step-knob tuning and lag depth B, each task's mean over its runs, averaged over the tasks "
            "(each counts once). The TVs are the minibatch estimates ½·mean|ratio − 1|, which exceed 1 when the "
            "policy moves far.\n\n"
            + table(["method", "step knob", "B", "tasks"] + [h for _, h in LOCOMOTION_DIAGNOSTICS], rows))


def _deviations(loco: str) -> str:
    """The locomotion protocol's recorded deviations (``deviations.csv``), dated, or that there is none."""
    path = os.path.join(loco, "deviations.csv")
    rows = results.read_table(path) if os.path.exists(path) else []
    if not rows:
        return "No deviation from the protocol is recorded (`results/locomotion/deviations.csv` absent)."
    return (f"Deviations from the protocol (`results/locomotion/deviations.csv`), {len(rows)}: "
            + "; ".join(f"{r['date']}: {r['deviation']}" for r in rows) + ".")


def locomotion_summary(root: str) -> list[str]:
    """FINDINGS.md's first-screen lines on the locomotion study (none before its ``protocol.json``): the
    units finished, the primary family's verdicts or what is left, the recorded deviations, and the step
    knobs its tuning froze (``tuned.json``)."""
    from vaco_jax.analysis import plotting

    out: list[str] = []
    loco = os.path.join(root, LOCOMOTION)
    if not os.path.exists(os.path.join(loco, "protocol.json")):
        return out
    with open(os.path.join(loco, "protocol.json")) as f:  # written by hand, fixed by its sha256 in the manifest
        protocol = json.load(f)
    units = [r["unit"] for r in results.read_table(os.path.join(loco, "manifest.csv"))] \
        if os.path.exists(os.path.join(loco, "manifest.csv")) else []
    stages = {}
    for u in units:
        stages.setdefault(u.split("/")[0], []).append(u)
    done = "; ".join(f"{stage} {len(us)} ({', '.join(u.split('/', 1)[1] for u in us)})" for stage, us in stages.items())
    verdicts = os.path.join(loco, "verdicts.csv")
    out.append(f"- **The locomotion study** (`results/locomotion/`, protocol `protocol.md`; "
               f"{', '.join(protocol['tasks'])}; {', '.join(plotting.method_label(m) for m in protocol['methods'])}): "
               f"{len(units)} units finished — {done or 'none'}. "
               + (locomotion_verdict_summary(root) if os.path.exists(verdicts) else
                  "No verdict yet: `python experiments/locomotion.py report` applies the protocol's rules once "
                  "the study units are done; `plan` lists what is left.")
               + " " + _deviations(loco))
    out.append("")
    tuned_path = os.path.join(loco, "tuned.json")
    if os.path.exists(tuned_path):
        chosen = results.read_json(tuned_path)["chosen"]
        depths = sorted({b for by in chosen.values() for b in by}, key=int)
        rows = []
        for method in plotting.sort_methods(chosen):
            by = chosen[method]
            first = next(iter(by.values()))
            rows.append([plotting.method_label(method), first["knob"]]
                        + [f"{by[b]['value']:g} (AUC {num(max(g['mean'] for g in by[b]['grid']), ',.0f')})"
                           if b in by else "—" for b in depths])
        out += ["  Step knobs frozen by the tuning (Hopper-v4, tuning seeds; mean AUC of the choice):", "",
                table(["method", "knob"] + [f"tuned at B = {b}" for b in depths], rows)]
    return out
