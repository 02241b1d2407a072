"""FINDINGS.md's tables of the pendulum-suite study (``results/study/``: tuning, claims, IQMs, the
learner cost, where it ran) and of the task screens (``results/screens*/``), read from ``results/``
alone. ``rebuild_docs.BLOCKS`` names them; each takes the build (``rebuild_docs.Build``: where inputs
are read, ``src``, and outputs were just written, ``dst``) and returns a markdown table, or a line
saying what is not built yet; ``pendulum_summary`` gives the first screen's lines on the study.
"""

from __future__ import annotations

import glob
import math
import os
import re

from vaco_jax.analysis import results
from vaco_jax.studies.kit_findings import num, table

STUDY = os.path.join("results", "study")  # one run directory per design (experiments/study.py)
MAIN_DESIGN = "lag"
TUNED = os.path.join(STUDY, "tuned.json")
TUNED_WIDE = os.path.join("results", "study_lr_wide", "tuned.json")  # a check of the grid's upper edge
WIDE_LAG = os.path.join("results", "study_lr_wide", "lag")  # the lag design with those step sizes
CLAIMS = os.path.join("results", "claims.csv")
CLAIMS_AUC = os.path.join("results", "claims_auc.csv")  # the same rule on auc_eval_return


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


# ----------------------------------------------------------------------------- screens

def _screen_module():
    """The screens' rules, for their thresholds (LEARN_FRACTION, LAG_LOSS, MIN_PROGRESS)."""
    from vaco_jax.studies import screen_rules

    return screen_rules


def _learnable_text(row: dict, screen) -> str:
    if row["chosen"]:
        return "**yes**"
    if row["learnable"]:
        just = num(row["learned_fraction"], ".2f") == num(screen.LEARN_FRACTION, ".2f")
        return "yes (just)" if just else "yes"
    return "no (saturated by half)" if row["learned_fraction"] >= screen.LEARN_FRACTION else "no"


def _sensitive_text(row: dict, screen) -> str:
    if row["chosen"]:
        return "**yes**"
    if row["lag_sensitive"]:
        return "yes"
    if not row["learnable"]:  # why it is not lag-sensitive only matters for a task the study could use
        return "no"
    return "no (B = 16 higher)" if row["lag_loss_b16"] < 0 else f"no (loses < {screen.LAG_LOSS:.0%})"


def _screen_setting(screen_csv: str, task: str, field: str, spec: str) -> str:
    """A setting (``field`` of the runs' config) of ``task``'s runs in the screen's run directory (its
    ``run.json`` identity), every distinct value formatted with ``spec``."""
    identity = results.read_json(os.path.join(os.path.dirname(screen_csv), "run.json")).get("identity", {})
    values = {v.get(field) for k, v in identity.items() if k.split("/")[0] == task}
    return ", ".join(format(x, spec) for x in sorted(values)) if values and None not in values else "—"


def screens_table(*paths: str, steps: bool = False, lr: bool = False) -> str:
    """The table of one ``screens.csv`` (``experiments/screen.py``), or of several one after the other;
    ``steps`` adds each run's env steps and ``lr`` its learning rate (screens of several budgets or step
    sizes in one table). "—" marks a share of progress at half time that is negative (below random
    then, or at the end) and a loss at B = 16 on a task where B = 1 got less than ``MIN_PROGRESS`` of
    the way from random to reachable (not judged there)."""
    screen = _screen_module()
    rows = []
    for path in paths:
        for r in results.read_table(path):
            half = r["half_over_final"] if _finite(r["half_over_final"]) and r["half_over_final"] >= 0 else math.nan
            loss = r["lag_loss_b16"] if r["learned_fraction"] >= screen.MIN_PROGRESS else math.nan
            rows.append([r["env"]] + ([_screen_setting(path, r["env"], "total_env_steps", ",")] if steps else [])
                        + ([_screen_setting(path, r["env"], "learning_rate", "g")] if lr else [])
                        + [num(r["random"], ".1f"), num(r["ppo_clip_b1"], ".1f"),
                           num(r["learned_fraction"], ".2f"), num(half, ".2f"), num(r["ppo_clip_b16"], ".1f"),
                           num(loss, ".2f"), _learnable_text(r, screen), _sensitive_text(r, screen)])
    return table(["task"] + (["env steps per run"] if steps else []) + (["learning rate"] if lr else [])
                 + ["random", "PPO-Clip B = 1", "learned", "B = 1 at half / final", "B = 16",
                    "loss at B = 16", "learnable", "lag-sensitive"], rows)


# ----------------------------------------------------------------------------- the study

NO_STUDY = f"_Not built: `{STUDY}/{MAIN_DESIGN}/run.json` does not exist yet._\n"


def claims_table(build, which: str = CLAIMS) -> str:
    """One row per claim and part of ``results/claims.csv`` (or ``which``: claims_auc.csv), as just rebuilt."""
    if not build.has_any_design():
        return NO_STUDY
    rows = []
    for r in results.read_table(build.dst(which)):
        ci = f"[{num(r['ci_low'], '.3g')}, {num(r['ci_high'], '.3g')}]" if _finite(r["ci_low"]) else "—"
        claim = f"{r['claim']}: {r['statement']}" if isinstance(r["statement"], str) else str(r["claim"])
        rests = r["rests_on"] if isinstance(r["rests_on"], str) and r["rests_on"] else ""
        if r["verdict"] == "no data" and isinstance(r["why"], str):  # say why it was not called
            rests = r["why"]
        rows.append([claim, r["verdict"], r["statistic"] if isinstance(r["statistic"], str) else "",
                     num(r["point"], ".3g"), ci, rests])
    return table(["claim", "verdict", "statistic", "point", "95% CI", "rests on (no data: why)"], rows)


def _claim_verdicts(path: str) -> str:
    """``1 holds, 2 holds, ...``: the verdict of each whole claim (not its parts) in a claims table."""
    rows = results.read_table(path)
    whole = [r for r in rows if re.fullmatch(r"\d+( \[\w+\])?", str(r["claim"]))]
    return ", ".join(f"{r['claim']} {r['verdict']}" for r in whole)


def pendulum_summary(build) -> list[str]:
    """FINDINGS.md's first-screen lines on the pendulum-suite study: each whole claim's verdict on the final
    return and on the AUC, from the ``claims.csv`` files just written (none before they exist)."""
    if not os.path.exists(build.dst(CLAIMS)):
        return []
    return [f"- **The pendulum-suite study** (`results/study/`, four tasks: the pendulums, reacher, FingerSpin; "
            f"`results/claims.csv`): claims {_claim_verdicts(build.dst(CLAIMS))} on the final return"
            + (f"; on the AUC {_claim_verdicts(build.dst(CLAIMS_AUC))}" if os.path.exists(build.dst(CLAIMS_AUC))
               else "") + ". Its two pendulums sit at their ceiling on the final return and leave the "
            "final-return claims (no data where nothing else is left); the area under the curve keeps them. "
            "These verdicts cannot tell VACO from a tuned PPO-Clip; the locomotion study is the test.", ""]


def tuned_table(build, tuned: str = TUNED) -> str:
    """The frozen step sizes (``results/study/tuned.json``, or another tuning directory's): per task and
    method, the chosen values and the best pair's mean AUC / final return over the tuning seeds."""
    path = build.src(tuned)
    if not os.path.exists(path):
        return f"_Not built: `{tuned}` does not exist yet._\n"
    from vaco_jax.analysis import plotting
    chosen = results.read_json(path)["chosen"]
    rows = []
    for task in sorted(chosen):
        for method in plotting.sort_methods(chosen[task]):
            pick = chosen[task][method]
            best = next(g for g in pick["grid"] if all(g[k] == v for k, v in pick["chosen"].items()))
            knobs = ", ".join(f"{k} = {v:.3g}" for k, v in pick["chosen"].items())
            rows.append([task, plotting.method_label(method), knobs, num(best["mean_auc"], ",.1f"),
                         num(best["mean_final"], ",.1f"), str(len(pick["grid"]))])
    return table(["task", "method", "chosen", "mean AUC", "mean final", "pairs tried"], rows)


def machine_table(build) -> str:
    """Where each of the study's run directories ran (its ``run.json``): exact numbers differ across
    CPU types, the conclusions are what the CIs support."""
    from vaco_jax.analysis import claims
    designs = ["tuning"] + claims.study_designs()
    rows = []
    for design in designs:
        path = build.src(STUDY, design, "run.json")
        if not os.path.exists(path):
            continue
        meta = results.read_json(path)
        machines = meta.get("machines") or [{}]
        v = meta.get("versions") or {}
        rows.append([design, "; ".join(str(m.get("cpu", "—")) for m in machines),
                     "; ".join(str(m.get("cores", "—")) for m in machines), ", ".join(meta.get("devices", [])),
                     f"jax {v.get('jax')}, mujoco-mjx {v.get('mujoco-mjx')}, brax {v.get('brax')}",
                     str(meta.get("git_commit") or "—")[:7], str(meta.get("started", "—"))])
    if not rows:
        return f"_Not built: no run directory under `{STUDY}` yet._\n"
    return table(["run directory", "CPU", "cores", "devices", "versions", "commit", "started"], rows)


def _iqm_text(row: dict | None, spec: str) -> str:
    if row is None:
        return "—"
    if row["aggregate"] != "iqm":
        return {"all_diverged": "every run diverged", "all_missing": "no run has a score"}.get(
            row["aggregate"], "no run left")
    return f"{num(row['point'], spec)} [{num(row['low'], spec)}, {num(row['high'], spec)}]"


def _iqm_rows(label: str, summary: list[dict]) -> list[list[str]]:
    """Table rows (one per method x lag depth) of ``tables.summary_rows`` output for one task or all."""
    from vaco_jax.analysis import plotting
    def pick(method, lag, norm):
        return next((r for r in summary if (r["method"], r["lag_depth"], r["normalization"]) == (method, lag, norm)
                     and r["aggregate"] in ("iqm", "all_diverged", "all_missing", "none_left")), None)

    out = []
    for method in plotting.sort_methods({r["method"] for r in summary}):
        for lag in sorted({r["lag_depth"] for r in summary if r["method"] == method}):
            raw = pick(method, lag, "raw")
            runs = str(raw["n_runs"]) + (f" ({raw['n_missing']} no score)" if raw["n_missing"] else "")
            out.append([label, plotting.method_label(method), str(lag), _iqm_text(raw, ",.1f"),
                        _iqm_text(pick(method, lag, "normalized"), ".2f"), runs, str(raw["n_diverged"])])
    return out


def study_iqm_table(build) -> str:
    """IQM of the final evaluation return per task x method x lag depth, raw and normalised to the
    task's synchronous PPO-Clip, then pooled over the complete tasks (the study's own ``summary.csv``
    rows), computed with ``tables.summary_rows`` at the study's bootstrap replicates."""
    if not build.has_study():
        return NO_STUDY
    from vaco_jax.analysis import tables
    from vaco_jax.analysis import plotting
    scores = results.load_scores(build.study)
    random = results.load_random_scores(build.study)
    reps = plotting.bootstrap_reps(build.study) or 2000
    tasks = sorted({r["env"] for r in scores})
    complete, left_out = tables.complete_tasks(scores)  # what summary_rows pools
    pooled = len({r["env"] for r in complete})
    label = (f"all {pooled} tasks" if not left_out else
             f"{pooled} tasks pooled (not {', '.join(sorted(left_out))}: unfinished)")
    parts = [(t, [r for r in scores if r["env"] == t]) for t in tasks] + [(label, scores)]
    rows = []
    for label, subset in parts:
        rows += _iqm_rows(label, tables.summary_rows(subset, random, reps=reps, scores=("final_eval_return",)))
    return table(["task", "method", "B", "IQM, raw [95% CI]", "IQM, normalised [95% CI]", "runs", "diverged"],
                 rows)


def wide_iqm_table(build) -> str:
    """The lag design re-run with the wider grid's step sizes (``results/study_lr_wide/lag``): IQM of the
    final return and of the area under the curve per method x lag depth, raw and normalised."""
    run = build.src(WIDE_LAG)
    if not os.path.exists(os.path.join(run, "run.json")):
        return f"_Not built: `{WIDE_LAG}/run.json` does not exist yet._\n"
    from vaco_jax.analysis import tables
    from vaco_jax.analysis import plotting
    scores, random = results.load_scores(run), results.load_random_scores(run)
    reps = plotting.bootstrap_reps(run) or 2000
    rows = []
    for score, label in (("final_eval_return", "final return"), ("auc_eval_return", "area under the curve")):
        rows += _iqm_rows(label, tables.summary_rows(scores, random, reps=reps, scores=(score,)))
    return table(["score", "method", "B", "IQM, raw [95% CI]", "IQM, normalised [95% CI]", "runs", "diverged"],
                 rows)


def cost_table(build) -> str:
    """Claim 3b's learner cost (``results/study/proximal/learner_cost.csv``, ``experiments/study.py
    cost``): per task, each method's mean learner milliseconds per phase over the interleaved rounds,
    the ratio A-3PO / decoupled and where and when it was measured."""
    from vaco_jax.analysis import claims
    from vaco_jax.analysis import plotting
    path = build.src(STUDY, "proximal", claims.COST_FILE)
    if not os.path.exists(path):
        return f"_Not built: `{STUDY}/proximal/{claims.COST_FILE}` does not exist yet._\n"
    rows_in = results.read_table(path)
    meta_path = path[:-len(".csv")] + ".json"
    measured = results.read_json(meta_path)["measurements"] if os.path.exists(meta_path) else []
    rows = []
    for task in sorted({r["env"] for r in rows_in}):
        ms = {m: [r["learner_ms"] for r in rows_in if r["env"] == task and r["method"] == m]
              for m in ("a3po", "decoupled_recompute")}
        where = next((m for m in reversed(measured) if task in m.get("tasks", [])), {})  # the latest
        a, d = (sum(v) / len(v) if v else float("nan") for v in ms.values())
        rows.append([task, str(len(ms["a3po"])), num(a, ".2f"), num(d, ".2f"), num(a / d, ".3f"),
                     f"{where.get('cpu', '—')}, {where.get('cpu_count', '—')} cores, jax {where.get('jax', '—')}",
                     str(where.get("date", "—"))])
    return table(["task", "rounds", f"{plotting.method_label('a3po')} ms", f"{plotting.method_label('decoupled_recompute')} ms",
                  "ratio of means", "machine", "measured"], rows)


def screens_folder_table(build, folder: str) -> str:
    """One row per screen run directory under ``results/FOLDER/`` (each its own budget and step size)."""
    return screens_table(*sorted(glob.glob(build.src("results", folder, "*", "screens.csv"))), steps=True, lr=True)
