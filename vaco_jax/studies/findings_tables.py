"""FINDINGS.md's tables of the locomotion, sim-vs-real and deep-lag studies, read from ``results/`` alone.

``rebuild_docs.BLOCKS`` names them (blocks ``locomotion_units``, ``locomotion_verdicts``,
``sim_vs_real`` and ``deep_lag``, and two lines of the first screen's ``summary``), so every number
those sections of FINDINGS.md quote is recomputed from the committed per-run records by
``python experiments/rebuild_docs.py`` and checked by its ``--check``:

- ``locomotion_units_table``: one row per finished study, lag-aware and ablation unit of
  ``results/locomotion/`` (its ``manifest.csv``): per lag depth, the mean ± standard deviation over
  seeds of the area under the evaluation curve (the protocol's primary score) and the mean final
  return; diverged runs are counted and left out of both, never averaged.
- ``locomotion_verdicts_table``: the protocol's verdicts as ``experiments/locomotion.py report`` wrote
  them to ``verdicts.csv`` (primary family with Holm-adjusted p-values, retention of every method, the
  exploratory comparisons, each verdict's stability over bootstrap seeds); a test recomputes that file
  from the committed per-run scores.
- ``sim_vs_real_table``: per real configuration and method of ``results/sim_vs_real/``, the real runs'
  realised mean age, speed (also as a multiple of the lockstep configuration's) and scores; once
  ``verdicts.csv`` exists (``experiments/sim_vs_real.py report``), each simulated counterpart's
  scaled difference from the real runs with its interval and the protocol's verdict.
- ``deep_lag_table``: the deep-lag study's arms, verdicts and wall clock as
  ``experiments/deep_lag.py report`` wrote them (``arms.csv``, ``verdicts.csv``, ``wall_clock.csv``).
"""

from __future__ import annotations

import glob
import json
import math
import os

import numpy as np

from vaco_jax.analysis import results

LOCOMOTION = os.path.join("results", "locomotion")
SIM_VS_REAL = os.path.join("results", "sim_vs_real")
STAGES = ("study", "lag_aware", "ablation")  # the manifest's units with study seeds, in this order
STAGE_LABEL = {"study": "B = 1 tuning", "lag_aware": "lag-aware tuning", "ablation": "parent's B = 1 tuning"}


def num(x, spec: str) -> str:
    """``x`` formatted with ``spec``, a true minus sign, and "—" when it is not a finite number."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "—"
    return format(x, spec).replace("-", "−") if math.isfinite(x) else "—"


def text_cell(x) -> str:
    """A text cell of a table read back by ``results.read_table``: an empty cell reads as NaN, here ""."""
    return x if isinstance(x, str) else ""


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table ("|" in a cell escaped, a newline folded)."""
    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _mean_sd(values: list[float]) -> tuple[float, float]:
    v = np.asarray(values, float)
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def unit_scores_dir(loco: str, unit: str) -> str:
    """Where a study-seed unit's ``scores.csv`` lies (``vaco_jax.studies.locomotion.study_units``)."""
    stage, task, method = unit.split("/")
    sub = os.path.join(task, method, "variant=lag_aware") if stage == "lag_aware" else os.path.join(task, method)
    return os.path.join(loco, "study", sub)


def locomotion_cell(rows: list[dict]) -> str:
    """``AUC mean ± sd (final mean)`` over the finished runs, with the number that diverged."""
    from vaco_jax.analysis.tables import is_diverged

    kept = [r for r in rows if not is_diverged(r)]
    auc, sd = _mean_sd([float(r["auc_eval_return"]) for r in kept])
    final, _ = _mean_sd([float(r["final_eval_return"]) for r in kept])
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


def _protocol(root: str) -> dict:
    with open(os.path.join(root, SIM_VS_REAL, "protocol.json")) as f:
        return json.load(f)


def _real_runs(root: str) -> dict[tuple[str, str], list[dict]]:
    """Each finished real run's score, at the simulator's evaluation points (``kit_real.real_score``)."""
    from vaco_jax.studies.kit_real import real_score

    num_evals = int(_protocol(root)["preset"]["num_evals"])
    out: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(glob.glob(os.path.join(root, SIM_VS_REAL, "real", "*", "*", "seed*", "score.json"))):
        seed_dir = os.path.dirname(path)
        method_dir = os.path.dirname(seed_dir)
        key = (os.path.basename(os.path.dirname(method_dir)), os.path.basename(method_dir))
        out.setdefault(key, []).append(real_score(seed_dir, num_evals))
    return out


def sim_vs_real_table(root: str) -> str:
    """The sim-vs-real study's real runs and, once reported, its verdicts (see the module's docstring)."""
    from vaco_jax.analysis import plotting

    runs = _real_runs(root) if os.path.exists(os.path.join(root, SIM_VS_REAL, "protocol.json")) else {}
    if not runs:
        return "No real run of the sim-vs-real study has finished (`python experiments/sim_vs_real.py plan`).\n"
    configs = [c["name"] for c in _protocol(root)["configurations"] if any(k[0] == c["name"] for k in runs)]
    methods = plotting.sort_methods({m for _, m in runs})
    sync = [r for (c, _), rs in runs.items() if c.startswith("sync") for r in rs]
    sync_speed = float(np.mean([r["env_steps_per_second"] for r in sync])) if sync else float("nan")
    rows = []
    for c in configs:
        for m in methods:
            rs = runs.get((c, m), [])
            if not rs:
                continue
            kept = [r for r in rs if not r["diverged"]]
            speed = float(np.mean([r["env_steps_per_second"] for r in rs]))
            auc, sd = _mean_sd([r["auc_eval_return"] for r in kept])
            final, final_sd = _mean_sd([r["final_eval_return"] for r in kept])
            rows.append([c, plotting.method_label(m), str(len(rs)) + (f" ({len(rs) - len(kept)} diverged)"
                                                                      if len(kept) < len(rs) else ""),
                         num(np.mean([r["mean_age"] for r in rs]), ".2f"), num(speed, ",.0f"),
                         num(speed / sync_speed, ".2f") + "×", f"{num(auc, ',.0f')} ± {num(sd, ',.0f')}",
                         f"{num(final, ',.0f')} ± {num(final_sd, ',.0f')}"])
    out = ["The real runs (`results/sim_vs_real/real/`): per configuration and method, the seeds run, the "
           "realised mean age of the consumed samples, env steps per second (and as a multiple of the lockstep "
           "configuration's, both methods pooled), and the area under the evaluation curve and final return "
           "(mean ± standard deviation over seeds) at the simulator's evaluation points.", "",
           table(["configuration", "method", "runs", "mean age", "env steps/s", "× lockstep", "AUC", "final return"],
                 rows)]
    verdicts = os.path.join(root, SIM_VS_REAL, "verdicts.csv")
    if not os.path.exists(verdicts):
        out.append("No verdict yet: `python experiments/sim_vs_real.py sim`, then `report`, once every real run is in.\n")
        return "\n".join(out)
    vrows = results.read_table(verdicts)
    by = {(r["configuration"], r["method"], r["variant"], r["score"]): r for r in vrows}
    variants = list(dict.fromkeys(r["variant"] for r in vrows))
    rows = []
    for c in configs:
        for m in methods:
            for v in variants:
                cells = [by.get((c, m, v, s)) for s in ("auc_eval_return", "final_eval_return")]
                if not any(cells):
                    continue
                first = next(x for x in cells if x)
                rows.append([c, plotting.method_label(m), v, num(first["sim_mean_age"], ".2f") + " / "
                             + num(first.get("sim_realised_mean_age"), ".2f")]
                            + [f"{num(x['sim_mean'], ',.0f')}: {num(x['scaled_difference'], '+.3f')} "
                               f"[{num(x['low'], '+.3f')}, {num(x['high'], '+.3f')}] {x['verdict']}" if x else "—"
                               for x in cells])
    margin = num(vrows[0]["margin"], ".2f")
    out += ["The simulated counterparts (`results/sim_vs_real/verdicts.csv`): per configuration, method and "
            "variant, the mean age the simulator was given and the mean age it realised (its samples' ages, "
            "clipped to the phase index early in training), then for each score the simulated mean, the difference of means "
            "(sim − real) over the method's real lockstep mean with its 90% bootstrap interval, and the verdict "
            f"(predicts: the interval inside ±{margin}; differs: wholly outside).", "",
            table(["configuration", "method", "variant", "sim mean age: given / realised", "AUC: sim, (sim − real)/lockstep",
                   "final return: sim, (sim − real)/lockstep"], rows)]
    return "\n".join(out)


def sim_vs_real_summary(root: str) -> str | None:
    """FINDINGS.md's first-screen line on the sim-vs-real study (None before its first real run)."""
    runs = _real_runs(root) if os.path.exists(os.path.join(root, SIM_VS_REAL, "protocol.json")) else {}
    if not runs:
        return None
    n = sum(len(v) for v in runs.values())
    verdicts = os.path.join(root, SIM_VS_REAL, "verdicts.csv")
    if not os.path.exists(verdicts):
        return (f"- **The sim-vs-real study** (`results/sim_vs_real/`): {n} real runs in; no verdict yet "
                "(`python experiments/sim_vs_real.py plan`).")
    task = _protocol(root)["preset"].get("task", "?")
    rows = [r for r in results.read_table(verdicts) if not str(r["configuration"]).startswith("sync")]
    parts = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r["verdict"] for r in rows if r["variant"] == variant]
        counts = ", ".join(f"{mine.count(v)} {v}" for v in ("predicts", "differs", "inconclusive"))
        parts.append(f"{variant}: {counts}")
    return (f"- **The sim-vs-real study** (`results/sim_vs_real/`, {task}, {n} real runs): verdicts over the "
            f"{len(rows) // max(1, len(parts))} asynchronous (configuration, method, score) rows — " + "; ".join(parts)
            + ". The control must be called *differs*; *inconclusive* means the interval is wider than the margin.")


def _interval_text(r: dict, spec: str = ".2f") -> str:
    return f"{num(r['point'], spec)} [{num(r['low'], spec)}, {num(r['high'], spec)}]"


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
                   _interval_text(r) if r["verdict"] != "no data" else "—", num(r["p_holm"], ".4f"), r["verdict"],
                   _stable(r), _tasks(r)] for r in primary])]
    retention = [r for r in rows if r["claim"] == "retention"]
    methods = list(dict.fromkeys(r["comparison"].split(" ")[0] for r in retention))
    cols = list(dict.fromkeys((r["score"], r["lag_depth"]) for r in retention))
    by = {(r["comparison"].split(" ")[0], r["score"], r["lag_depth"]): r for r in retention}
    out += ["Exploratory (no correction). Retention: each method's pooled mean normalised score at B over its "
            "own at B = 1 (0 = a uniform-random policy, 1 = synchronous PPO-Clip), B = 1 tunings, with its 95% "
            "interval.", "",
            table(["method"] + [f"{SCORE_LABEL.get(s, s)}, B = {b}" for s, b in cols],
                  [[plotting.method_label(m)] + [_interval_text(by[(m, s, b)]) if (m, s, b) in by
                                                and by[(m, s, b)]["verdict"] != "no data" else "—" for s, b in cols]
                   for m in methods])]
    other = [r for r in rows if r["family"] == "exploratory" and r["claim"] not in ("retention", "ceiling")]
    out += ["The other exploratory comparisons: claim 6 (VACO's retention minus X's; holds above 0), claim 1 "
            "at every B, claim 2 (P(fraction at B = 32 > at B = 1)), claim 5 (VACO against its ablations) and "
            "claim 3 (A-3PO against decoupled PPO with π_T recomputed: equivalent when the 90% interval lies inside "
            "±0.1 of normalised score).", "",
            table(["claim", "comparison", "score", "B", "point [interval]", "verdict", "stable", "tasks"],
                  [[r["claim"], r["comparison"], SCORE_LABEL.get(r["score"], r["score"]), r["lag_depth"],
                    _interval_text(r) if r["verdict"] != "no data" else "—", r["verdict"], _stable(r),
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


# ----------------------------------------------------------------------------- the studies in progress

STEPLAG = os.path.join("results", "steplag")
DEEP_LAG = os.path.join("results", "deep_lag")


def steplag_summary(root: str) -> str | None:
    """FINDINGS.md's first-screen line on the step size x lag study: units and hours so far, each stage-1
    surface's state and lag-robust setting as ``report`` wrote them (``choices.csv``), stage 2's state."""
    from vaco_jax.studies import kit
    from vaco_jax.studies import steplag

    res = os.path.join(root, STEPLAG)
    if not os.path.exists(os.path.join(res, "protocol.json")):
        return None
    p, digest = kit.load_protocol(os.path.join(res, "protocol.json"))
    manifest = kit.manifest(res)
    hours = sum(float(m["seconds_this_session"]) for m in manifest) / 3600.0
    choices = os.path.join(res, steplag.CHOICES)
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
        from vaco_jax.studies import steplag_stage2
        done, names = steplag_stage2.progress(p, res)
        arms = ", ".join(steplag_stage2.arm_label(p, a) for a in p["stage2"]["arms"])
        stage2 = (f"Stage 2 is fixed in the protocol ({arms}): "
                  f"{len(done)} of its {len(names)} units finished"
                  + ("" if len(done) == len(names) else ", no verdict before the last"))
        verdicts = os.path.join(res, steplag.STAGE2_VERDICTS)
        if len(done) == len(names) and os.path.exists(verdicts):
            from vaco_jax.analysis.confirm import VERDICTS
            prim = [r["verdict"] for r in results.read_table(verdicts) if r["family"] == "primary"]
            counts = ", ".join(f"{prim.count(v)} {v}" for v in VERDICTS if prim.count(v))
            stage2 += f"; its primary family (`stage2_verdicts.csv`, {len(prim)} tests against PPO-Clip): {counts}"
            shape_path = os.path.join(res, steplag.STAGE2_SHAPE)
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


def deep_lag_summary(root: str) -> str | None:
    """FINDINGS.md's first-screen line on the deep-lag study: real runs per configuration and their
    realised mean age, simulated programs finished, and the verdicts once its report has run."""
    out = os.path.join(root, DEEP_LAG)
    if not os.path.exists(os.path.join(out, "study_protocol.json")):
        return None
    spec = results.read_json(os.path.join(out, "study_protocol.json"))
    from vaco_jax.studies import deep_lag

    parts, counts = [], []
    for config in sorted(os.listdir(os.path.join(out, "real"))) if os.path.isdir(os.path.join(out, "real")) else []:
        runs = [results.read_json(path) for path in
                sorted(glob.glob(os.path.join(out, "real", config, "*", "seed*", "score.json")))]
        ages = [r["mean_age"] for r in runs if r.get("mean_age") is not None]
        parts.append(f"{config} {len(runs)} (mean age {num(np.mean(ages) if ages else math.nan, '.2f')})")
        counts.append(len(runs))
    want = len(spec["methods"]) * len(spec["study"]["real_seeds"])

    programs = deep_lag.programs_of(out, spec["study"], spec["configurations"], spec["methods"],
                                    deep_lag.PROGRAM_CELLS[spec["preset"]])
    done = sum(os.path.exists(os.path.join(where, "scores.csv")) for where in programs)
    verdicts = os.path.join(out, "verdicts.csv")
    if os.path.exists(verdicts):
        rows = results.read_table(verdicts)
        calls = {v: [r["verdict"] for r in rows if r["variant"] == v] for v in dict.fromkeys(r["variant"] for r in rows)}
        state = (f"verdicts over the {len(rows) // max(len(calls), 1)} rows per counterpart (the contrast and the "
                 "retentions at each deep configuration) — "
                 + "; ".join(f"{v}: " + ", ".join(f"{c.count(k)} {k}" for k in ("predicts", "differs", "inconclusive"))
                             for v, c in calls.items())
                 + " (the control must be called *differs*)")
    else:
        real_done = len(counts) == len(spec["configurations"]) and all(n == want for n in counts)
        state = ("no verdict yet (`python experiments/deep_lag.py report` runs once every simulated program has "
                 "finished)" if real_done else "no verdict yet (the simulated sweeps follow the real runs)")
    return (f"- **The deep-lag study** (`results/deep_lag/`, {spec['task']}, "
            f"{', '.join(spec['methods'])}): real runs per configuration (of {want}): " + "; ".join(parts)
            + f"; simulated programs finished: {done} of {len(programs)}; {state}.")


def deep_lag_table(root: str) -> str:
    """The deep-lag study once its report has run: every arm's runs, realised mean age and AUC
    (``arms.csv``), the verdicts on the contrast and the retentions (``verdicts.csv``) and the real
    configurations' wall clock (``wall_clock.csv``)."""
    from vaco_jax.analysis import plotting

    out = os.path.join(root, DEEP_LAG)
    names = ("arms.csv", "verdicts.csv", "wall_clock.csv")
    if not all(os.path.exists(os.path.join(out, n)) for n in names):
        return ("No verdict yet: `python experiments/deep_lag.py report` runs once every real run and simulated "
                "program has finished.\n")
    arms, verdicts, wall = (results.read_table(os.path.join(out, n)) for n in names)

    def where(r):
        return r["configuration"] if r["layout"] == r["configuration"] else f"{r['configuration']} ({r['layout']})"

    def method(m):
        return " − ".join(plotting.method_label(x.strip()) for x in str(m).split(" - "))

    rows = [[where(r), method(r["method"]), r["variant"],
             str(int(r["runs"])) + (f" ({int(r['diverged'])} diverged)" if int(r["diverged"]) else ""),
             num(r["mean_age"], ".2f"), f"{num(r['auc_mean'], ',.0f')} ± {num(r['auc_sd'], ',.0f')}"]
            for r in arms]
    text = ["Every arm (`results/deep_lag/arms.csv`): per configuration and method, the real runs and each "
            "simulated counterpart — `histogram` (the real runs' pooled ages), `uniform` (the same mean age), "
            "`control` (the histogram 8 versions older), `lockstep` (synchronous) — with the runs (diverged ones "
            "left out of the mean), the realised mean age of the consumed samples and the area under the "
            "evaluation curve (mean ± sd over seeds).", "",
            table(["configuration", "method", "arm", "runs", "mean age", "AUC"], rows).rstrip("\n"), ""]
    margin = num(verdicts[0]["margin"], "g") if verdicts else "—"
    rows = [[r["quantity"], where(r), method(r["method"]), r["variant"],
             f"{num(r['real_mean_age'], '.2f')} / {num(r['sim_realised_mean_age'], '.2f')}",
             num(r["real"], ".3f"), num(r["sim"], ".3f"), num(r["difference"], ".3f"),
             f"[{num(r['low'], '.3f')}, {num(r['high'], '.3f')}]", f"**{r['verdict']}**"] for r in verdicts]
    text += [f"The verdicts (`results/deep_lag/verdicts.csv`): the contrast C = (VACO − PPO-Clip) / the real "
             f"lockstep PPO-Clip mean and each method's retention R = deep / lockstep, real and simulated, "
             f"simulated − real with its 90% bootstrap interval; *predicts* inside ±{margin}, *differs* wholly "
             f"outside, else *inconclusive*.", "",
             table(["quantity", "configuration", "method", "counterpart", "mean age real / sim", "real", "sim",
                    "sim − real", "90% CI", "verdict"], rows).rstrip("\n"), ""]
    controls = [r for r in verdicts if r["variant"] == "control"]
    if controls and any(r["verdict"] != "differs" for r in controls):
        text += [f"The negative control is not called *differs* in "
                 f"{sum(r['verdict'] != 'differs' for r in controls)} of {len(controls)} rows: there the rule "
                 f"cannot tell a wrong histogram from a right one.", ""]
    rows = [[where(r), method(r["method"]) if r["method"] != "all" else "both", str(int(r["runs"])),
             num(r["mean_age"], ".2f"), num(r["env_steps_per_second"], ",.0f"),
             "never (median)" if not math.isfinite(float(r["seconds_to_threshold"])) else
             num(r["seconds_to_threshold"], ",.0f"), f"{int(r['reached'])} / {int(r['runs'])}",
             num(r["load_start"], ".2f")] for r in wall]
    threshold = num(wall[0]["threshold"], ",.0f") if wall else "—"
    text += [f"Wall clock of the real runs (`results/deep_lag/wall_clock.csv`; medians over seeds): env steps per "
             f"second, seconds to the first evaluation with return ≥ {threshold} (*never* when half the runs or "
             f"more never reach it), the runs that reach it, and the load average as each run started.", "",
             table(["configuration", "method", "runs", "mean age", "env steps/s", "s to threshold", "reached",
                    "start load"], rows)]
    return "\n".join(text)


def steplag_stage2_table(root: str) -> str:
    """Stage 2 of the step size x lag study: every finished unit's runs per lag depth (mean ± sd of the
    AUC over seeds, diverged runs counted and left out of the mean), then, once ``report`` has computed
    them (only when every unit has finished), the primary family, the per-task rows and the lag-shape
    rule as it wrote them (``stage2_verdicts.csv``, ``stage2_shape.csv``)."""
    from vaco_jax.analysis.tables import is_diverged
    from vaco_jax.studies import kit
    from vaco_jax.studies import steplag, steplag_stage2

    label = steplag_stage2.arm_label
    res = os.path.join(root, STEPLAG)
    if not os.path.exists(os.path.join(res, "protocol.json")):
        return "No step size × lag study in this tree (`results/steplag/protocol.json`).\n"
    p = kit.load_protocol(os.path.join(res, "protocol.json"))[0]
    if "stage2" not in p:
        return ("Stage 2 is not fixed yet: `python experiments/steplag.py report` prints its section once stage 1 "
                "is complete, and the section is committed into the protocol before stage 2's first run.\n")
    done, names = steplag_stage2.progress(p, res)
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
        rows.append([task, label(p, arm), lag_model] + cells)
    seeds = p["stage2"]["seeds"]
    if not done:
        return (f"Stage 2 (`results/steplag/stage2/`): none of its {len(names)} units has finished yet "
                "(`python experiments/steplag.py plan` lists them; `run --minutes M` runs the next).\n")
    text = [f"Stage 2 (`results/steplag/stage2/`): {len(done)} of {len(names)} units finished. Per unit and lag "
            f"depth, the AUC's mean ± sd over seeds {seeds[0]}–{seeds[-1]} (runs counted; a diverged run is "
            "counted, left out of the mean and scored at the floor by the rules).", "",
            table(["task", "method at its lag-robust setting", "lag model"] + [f"B = {b}" for b in depths],
                  rows).rstrip("\n"), ""]
    verdicts = os.path.join(res, steplag.STAGE2_VERDICTS)
    if not os.path.exists(verdicts):
        text.append("No verdict yet: `python experiments/steplag.py report` computes them once every stage-2 unit "
                    "has finished (no interim verdict).")
        return "\n".join(text) + "\n"
    v = results.read_table(verdicts)

    def interval(r, point="point", spec=".3f"):
        """``r[point]`` [``r[low]``, ``r[high]``], the bounds named after the point (``difference_low``...)"""
        low, high = ("low", "high") if point == "point" else (f"{point}_low", f"{point}_high")
        return f"{num(r.get(point), spec)} [{num(r.get(low), spec)}, {num(r.get(high), spec)}]"

    rules_ = p["stage2"]["rules"]
    ci, eci = float(rules_["confidence"]), float(rules_["equivalence_confidence"])

    prim = [[r["test"].replace("reference", "PPO-Clip"), label(p, r["arm"]), r["lag_model"],
             str(int(r["lag_depth"])), text_cell(r["tasks"]), interval(r), interval(r, "difference", "+.3f"),
             num(r.get("p_holm"), ".4f"),
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
    per = [[r["tasks"], label(p, r["arm"]), r["lag_model"], str(int(r["lag_depth"])), interval(r),
            r["verdict"],
            "floor" if text_cell(r.get("at_floor")) else "ceiling" if str(r.get("at_ceiling")) == "True" else ""]
           for r in v if r["family"] == "per task"]
    text += ["Per task beside the pooled rows (exploratory: the interval's verdict against ½, no Holm), with the "
             "tasks at their floor or ceiling.", "",
             table(["task", "method", "lag model", "B", "P(X > PPO-Clip) [interval]", "verdict", "floor / ceiling"],
                   per).rstrip("\n"), ""]
    shape_path = os.path.join(res, steplag.STAGE2_SHAPE)
    if os.path.exists(shape_path):
        shape = results.read_table(shape_path)
        if shape:
            m0, m1 = str(shape[0]["models"]).split()
            rows = [[" − ".join(label(p, k).split(",")[0] for k in r["pair"].split(" - ")),
                     num(r.get(f"contrast_{m0}"), ".3f"), num(r.get(f"contrast_{m1}"), ".3f"),
                     f"{num(r.get('change'), '.3f')} [{num(r.get('low'), '.3f')}, {num(r.get('high'), '.3f')}]",
                     num(r.get("p_holm"), ".4f"), r["verdict"]] for r in shape]
            text += [f"The lag's shape at B = {int(shape[0]['lag_depth'])} (`results/steplag/stage2_shape.csv`): per "
                     f"pair of methods, the contrast (pooled normalised score) under each lag model and its change, "
                     f"Holm over the pairs; overall: **{shape[0]['overall']}**.", "",
                     table(["pair", f"contrast, {m0}", f"contrast, {m1}", f"change ({m1} − {m0}) [interval]",
                            "p (Holm)", "verdict"], rows).rstrip("\n")]
    return "\n".join(text).rstrip("\n") + "\n"
