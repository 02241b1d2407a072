"""The locomotion study's report: the protocol's decision rules on the committed per-run scores
(``verdicts``, in ``vaco_jax.studies.locomotion_verdicts`` -> ``results/locomotion/verdicts.csv``) and
the study's figures (``draw_figures`` -> ``docs/figures/locomotion/``). ``python experiments/locomotion.py
report`` runs both; the units that produce the scores are planned and run by ``vaco_jax.studies.locomotion``.
"""

from __future__ import annotations

import os
import shutil

from vaco_jax.analysis import results
from vaco_jax.studies.kit import COPIED  # the files of a finished unit the study commits, read back here
# the protocol's rules, as this report's names
from vaco_jax.studies.locomotion_verdicts import LAG_AWARE, primary_verdict, verdicts  # noqa: F401

# The report's figures, per view (every task pooled, then each task alone), from the runs at each
# method's B = 1 tuning: (file name, figures function, its arguments, views it is drawn for)
STUDY_FIGURES = (
    ("auc_vs_lag", "plot_aggregate_vs_lag", ("auc_eval_return", "normalized"), "all"),
    ("final_vs_lag", "plot_aggregate_vs_lag", ("final_eval_return", "normalized"), "all"),
    ("auc_retention", "plot_aggregate_vs_lag", ("auc_eval_return", "own_b1"), "all"),
    ("final_retention", "plot_aggregate_vs_lag", ("final_eval_return", "own_b1"), "all"),
    ("auc_vs_lag_raw", "plot_aggregate_vs_lag", ("auc_eval_return", "raw"), "task"),
    ("final_vs_lag_raw", "plot_aggregate_vs_lag", ("final_eval_return", "raw"), "task"),
    ("learning_curves", "plot_learning_curves", (), "task"),
    ("interval_estimates_auc", "plot_interval_estimates", ("auc_eval_return", "normalized"), "pooled"),
    ("probability_of_improvement", "plot_probability_of_improvement", ("auc_eval_return",), "pooled"),
    ("performance_profiles", "plot_performance_profiles", ("auc_eval_return",), "pooled"),
    # claim 1 with both tunings: the lag-aware units join as methods of their own ("PPO-Clip (lag-aware
    # tuning)"), at B = 32 beside every method at its B = 1 tuning
    ("interval_estimates_both_tunings", "plot_interval_estimates", ("auc_eval_return", "normalized"), "tunings"),
)
LAG_AWARE_LABEL = "lag-aware tuning"


def _lag_aware_copy(group: str, dst: str, method: str) -> None:
    """A lag-aware unit's tables at ``dst`` as a method of its own: ``<method> | lag-aware tuning`` (the
    figures' label for a method at one setting), its ``variant`` column dropped."""
    from vaco_jax.analysis import figures, results

    os.makedirs(dst, exist_ok=True)
    for name in COPIED:
        path = os.path.join(group, name)
        if not os.path.exists(path):
            continue
        if name.endswith(".csv"):
            rows = [{**{k: v for k, v in r.items() if k != "variant"},
                     "method": f"{method}{figures.SETTING_SEP}{LAG_AWARE_LABEL}"} for r in results.read_table(path)]
            results.write_table(os.path.join(dst, name), rows)
        else:
            results.atomic_copy(path, os.path.join(dst, name))


def _study_view(results_dir: str, dst: str, tasks: list[str], methods: list[str], lag_aware: bool = False) -> list[str]:
    """A run directory at ``dst`` holding the study units of ``tasks`` and ``methods`` (the protocol's: the
    ablation units, at one lag depth on two tasks, are a design of their own and would leave a task
    incomplete) at each method's B = 1 tuning; with ``lag_aware`` also the lag-aware units, each as a
    method of its own (``_lag_aware_copy``); without it they are left out, so that a figure's methods are
    each one setting. Returns the tasks it holds."""
    src = os.path.join(results_dir, "study")
    held = []
    for name in ("run.json", "random_scores.json"):
        if os.path.exists(os.path.join(src, name)):
            os.makedirs(dst, exist_ok=True)
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    for task in tasks:
        for method in sorted(os.listdir(os.path.join(src, task))) if os.path.isdir(os.path.join(src, task)) else []:
            group = os.path.join(src, task, method)
            if method not in methods or not os.path.exists(os.path.join(group, "scores.csv")):
                continue
            os.makedirs(os.path.join(dst, task, method), exist_ok=True)
            for name in COPIED:
                if os.path.exists(os.path.join(group, name)):
                    results.atomic_copy(os.path.join(group, name), os.path.join(dst, task, method, name))
            held.append(task)
            variant = os.path.join(group, f"variant={LAG_AWARE}")
            if lag_aware and os.path.exists(os.path.join(variant, "scores.csv")):
                _lag_aware_copy(variant, os.path.join(dst, task, f"{method}-{LAG_AWARE}"), method)
    return sorted(set(held))


def draw_figures(p: dict, results_dir: str, figures_dir: str, reps: int = 2000) -> list[str]:
    """``STUDY_FIGURES`` from the committed study units: ``<figures_dir>/<view>_<name>.png`` for the view
    ``all`` (every task with units, pooled by the stratified bootstrap) and each task alone; a figure
    whose data are absent is skipped with a note. Returns the PNG paths written."""
    import tempfile

    from matplotlib import style

    from vaco_jax.analysis import figures, results, tables

    written = []
    os.makedirs(figures_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, style.context("default"):
        views = [("all", list(p["tasks"]), False)] + [(t, [t], False) for t in p["tasks"]]
        views += [(view, tasks, True) for view, tasks, _ in views]  # the same views with the lag-aware units
        for view, tasks, lag_aware in views:
            run_dir = os.path.join(tmp, view + ("_tunings" if lag_aware else ""))
            if not _study_view(results_dir, run_dir, tasks, list(p["methods"]), lag_aware):
                if not lag_aware:
                    print(f"[report] no study unit of {', '.join(tasks)} yet: no {view}_*.png")
                continue
            tables.summarise(run_dir, reps=reps)
            for name, function, fargs, where in STUDY_FIGURES:
                if (where == "tunings") != lag_aware or not {
                        "all": True, "pooled": view == "all", "task": view != "all", "tunings": True}[where]:
                    continue
                try:
                    paths = getattr(figures, function)(run_dir, *fargs, figures_dir=os.path.join(tmp, "out"))
                except figures.NoData as e:
                    print(f"[report] skipped {view}_{name}.png: {e}")
                    continue
                for path in (q for q in paths if q.endswith(".png")):
                    stem = os.path.basename(path)[:-4]
                    suffix = stem.split(view, 1)[1] if function == "plot_learning_curves" else ""
                    dst = os.path.join(figures_dir, f"{view}_{name}{suffix}.png")
                    results.atomic_copy(path, dst)
                    written.append(dst)
    return written


def report(p: dict, results_dir: str) -> str:
    """Write ``verdicts.csv`` under ``results_dir`` and return the table as text."""
    from vaco_jax.analysis import results
    rows = verdicts(p, results_dir)
    results.write_table(os.path.join(results_dir, "verdicts.csv"), rows)
    short = {"auc_eval_return": "AUC", "final_eval_return": "final"}
    lines = [f"{'family':<12}{'claim':<10}{'comparison':<46}{'score':<7}{'tuning':<10}{'B':>3}  {'point':>7}  "
             f"{'interval':>18}  {'p Holm':>7}  {'stable':>6}  verdict"]
    for r in rows:
        nums = "" if r["verdict"] == "no data" else (
            f"{r['point']:>7.3f}  [{r['low']:>7.3f}, {r['high']:>7.3f}]" if r["point"] == r["point"] else "")
        holm = f"{r['p_holm']:>7.4f}" if r["p_holm"] == r["p_holm"] else " " * 7
        stable = f"{r['stability']:>6.2f}" if r["stability"] == r["stability"] else " " * 6
        lines.append(f"{r['family']:<12}{r['claim']:<10}{r['comparison'][:45]:<46}"
                     f"{short.get(r['score'], r['score'])[:6]:<7}{r['tuning']:<10}"
                     f"{r['lag_depth']!s:>3}  {nums:<36}  {holm}  {stable}  {r['verdict']}")
    lines.append("intervals: 95% stratified bootstrap (claim 3's equivalence: 90%); stable: the share of bootstrap "
                 "seeds " + "-".join(map(str, p["rules"]["bootstrap"]["stability_seeds"]))
                 + " giving the same verdict; exploratory rows are uncorrected")
    return "\n".join(lines)
