"""The locomotion study's report: the protocol's decision rules on the committed per-run scores
(``verdicts`` -> ``results/locomotion/verdicts.csv``) and the study's figures (``draw_figures`` ->
``docs/figures/locomotion/``). ``python experiments/locomotion.py report`` runs both; the units that
produce the scores are planned and run by ``vaco_jax.studies.locomotion``.

Every verdict can be recomputed from ``results/locomotion/study/`` alone. The rules are the protocol's
(``results/locomotion/protocol.json``, section ``rules``, explained in ``protocol.md``): its bootstrap
(replicates, seed, confidence, stability seeds), tasks, methods and lag depths are read from the file;
the thresholds its text fixes (P > 0.5, Holm at 0.05, the equivalence margin 0.1, the ceiling's 2%) are
written here as it states them, through ``vaco_jax.analysis.rules``.
"""

from __future__ import annotations

import os
import shutil

from vaco_jax.analysis import results
from vaco_jax.studies.kit import COPIED  # the files of a finished unit the study commits, read back here

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
LAG_AWARE = "lag_aware"  # the lag-aware units' variant (``variant=lag_aware`` beside a study unit)


def _sample(rows: list[dict], tasks: list[str], method: str, b: int, variant: str, score: str):
    """``(runs, tasks)`` scores of one method at one lag depth (``variant`` '' = its B = 1 tuning; a
    method without a lag-aware unit ran the same value there), diverged runs left out; each task keeps
    the first k seeds, k the smallest count of finite runs over the tasks. None when a task has none."""
    import numpy as np

    from vaco_jax.analysis.tables import is_diverged

    cols = []
    for task in tasks:
        sel = [r for r in rows if r["env"] == task and r["method"] == method and int(r["lag_depth"]) == b
               and (r.get("variant") or "") == variant and not is_diverged(r) and np.isfinite(float(r[score]))]
        cols.append([float(r[score]) for r in sorted(sel, key=lambda r: int(r["seed"]))])
    k = min((len(c) for c in cols), default=0)
    if k == 0:
        return None
    return np.array([c[:k] for c in cols]).T


def primary_verdict(rejected: bool, high: float) -> str:
    """Claim 1's call on one comparison: *holds* when Holm's step-down rejects P(VACO > X) <= 0.5,
    *fails* when the whole interval is below 0.5 (its upper bound), else *inconclusive*: an interval
    that straddles 0.5, or touches it, is never a failure."""
    if rejected:
        return "holds"
    return "fails" if high < 0.5 else "inconclusive"


def verdicts(p: dict, results_dir: str) -> list[dict]:
    """Every rule of the protocol on the committed scores: the primary family (Holm) and the exploratory
    comparisons, each row with its point, interval, verdict, and (primary) p-values and stability."""
    import numpy as np

    from vaco_jax.analysis import results

    from vaco_jax.analysis import rules, tables
    from vaco_jax.analysis.tables import is_diverged

    study_dir = os.path.join(results_dir, "study")
    rows = results.load_scores(study_dir) if os.path.isdir(study_dir) else []
    random = results.load_random_scores(study_dir) or {}
    boot = p["rules"]["bootstrap"]
    reps, seed, conf = int(boot["replicates"]), int(boot["seed"]), float(boot["confidence"])
    lo_s, hi_s = boot["stability_seeds"]
    depths = [int(b) for b in p["lag_depths"]]
    high = [b for b in depths if b > 1]
    baselines = [m for m in p["methods"] if m != "vaco"]
    has_variant = {(r["env"], r["method"]) for r in rows if r.get("variant") == LAG_AWARE}
    out = []

    def tasks_with(needs, pool=None):
        """The tasks (of ``pool``) where every needed (method, B, variant) has a run, and a reference."""
        pool = p["tasks"] if pool is None else pool
        ok = []
        for t in pool:
            have = all(any(r["env"] == t and r["method"] == m and int(r["lag_depth"]) == b
                           and (r.get("variant") or "") == v for r in rows) for m, b, v in needs)
            if have and t in random:
                ok.append(t)
        return ok

    def variant_of(task_list, method, tuning):
        if tuning != LAG_AWARE:
            return ""
        kinds = {(t, method) in has_variant for t in task_list}
        return LAG_AWARE if kinds == {True} else "" if kinds == {False} else None

    def normalised(task_list, method, b, v, score):
        raw = _sample(rows, task_list, method, b, v, score)
        ref = _sample(rows, task_list, "ppo_clip", 1, "", score)
        if raw is None or ref is None:
            return None
        rnd = np.array([random[t] for t in task_list])
        return rules.normalise(raw, rnd, ref.mean(axis=0))

    def row(**kw):
        base = dict(family="", claim="", comparison="", score="", tuning="", lag_depth="", point=np.nan,
                    low=np.nan, high=np.nan, p_value=np.nan, p_holm=np.nan, verdict="no data", stability=np.nan,
                    tasks="", runs="")
        base.update(kw)
        out.append(base)

    stability_seeds = tuple(range(int(lo_s), int(hi_s) + 1))

    def decided(common: dict, rule, ts: list[str]) -> None:
        """A row from ``rule(bootstrap_seed) -> {point, low, high, verdict[, p_value]}`` at the protocol's
        seed, with the share of the stability seeds whose verdict agrees."""
        r = {k: v for k, v in rule(seed).items() if k in ("point", "low", "high", "verdict", "p_value")}
        stab = rules.stability(lambda s: rule(s)["verdict"], stability_seeds, seed)
        row(**common, **r, stability=stab, tasks=" ".join(ts))

    def against(interval: tuple, threshold: float) -> dict:
        pt, lo, hi = interval
        return dict(point=pt, low=lo, high=hi, verdict=rules.verdict(lo, hi, threshold))

    def beats(a, c, threshold: float = 0.5):
        """The head-to-head rule P(A > C) against ``threshold``, as a function of the bootstrap seed."""
        return lambda s: (lambda h: {**h, "verdict": rules.verdict(h["low"], h["high"], threshold)})(
            rules.head_to_head(a, c, reps, s, conf))

    # ---- primary: P(VACO > X), Holm over the family
    family = []
    primary_score = p["scores"]["primary"]
    for x in baselines:
        for tuning, bs in (("B1", high), (LAG_AWARE, [int(b) for b in p["lag_aware"]["lag_depths"]])):
            for b in bs:
                family.append((x, tuning, b))
    tests = {}
    for x, tuning, b in family:
        ts = tasks_with([("vaco", b, ""), (x, b, ""), ("ppo_clip", 1, "")])
        va, xa = variant_of(ts, "vaco", tuning), variant_of(ts, x, tuning)
        if ts and va is not None and xa is not None:
            ts = tasks_with([("vaco", b, va), (x, b, xa), ("ppo_clip", 1, "")], ts)
            a = _sample(rows, ts, "vaco", b, va, primary_score) if ts else None
            c = _sample(rows, ts, x, b, xa, primary_score) if ts else None
            if a is not None and c is not None:
                tests[(x, tuning, b)] = (a, c, ts)
    memo: dict = {}

    def family_at(s):
        """Every primary test at bootstrap seed ``s``: key -> (head-to-head, Holm-adjusted p, rejected)."""
        if s not in memo:
            hh = {k: rules.head_to_head(a, c, reps, s, conf) for k, (a, c, _) in tests.items()}
            adj = rules.holm({k: h["p_value"] for k, h in hh.items()})
            memo[s] = {k: (hh[k], *adj[k]) for k in tests}
        return memo[s]

    def call(s, key):
        h, _, rejected = family_at(s)[key]
        return primary_verdict(rejected, h["high"])

    for key in family:
        x, tuning, b = key
        common = dict(family="primary", claim="1", comparison=f"P(vaco > {x})", score=primary_score, tuning=tuning,
                      lag_depth=b)
        if key not in tests:
            row(**common)
            continue
        a, c, ts = tests[key]
        h, adjusted, _ = family_at(seed)[key]
        stab = rules.stability(lambda s, key=key: call(s, key), stability_seeds, seed)
        row(**common, point=h["point"], low=h["low"], high=h["high"], p_value=h["p_value"], p_holm=adjusted,
            verdict=call(seed, key), stability=stab, tasks=" ".join(ts),
            runs=f"{a.shape[0]}x{len(ts)} vs {c.shape[0]}x{len(ts)}")

    # ---- exploratory
    # a task at its ceiling leaves the final-return comparisons (the protocol's ceiling rule)
    final = p["scores"]["secondary"]
    ceiling_tasks = tables.ceiling_tasks(rows, random, final, reference=lambda r: not r.get("variant"))
    at_ceiling = {t: t in ceiling_tasks for t in p["tasks"] if t in random}
    for score in (p["scores"]["primary"], p["scores"]["secondary"]):
        pool = [t for t in p["tasks"] if not (score == final and at_ceiling.get(t))]
        for m in p["methods"]:
            for b in high:
                ts = tasks_with([(m, b, ""), (m, 1, ""), ("ppo_clip", 1, "")], pool)
                at_b, at_1 = (normalised(ts, m, b, "", score), normalised(ts, m, 1, "", score)) if ts else (None, None)
                common = dict(family="exploratory", claim="retention", comparison=f"{m} B={b} / B=1", score=score,
                              tuning="B1", lag_depth=b)
                if at_b is None or at_1 is None:
                    row(**common)
                    continue
                pt, lo, hi = rules.retention(at_b, at_1, reps, seed, conf)
                row(**common, point=pt, low=lo, high=hi, verdict="", tasks=" ".join(ts))
        for x in baselines:
            for b in high:
                ts = tasks_with([(m, bb, "") for m in ("vaco", x) for bb in (1, b)] + [("ppo_clip", 1, "")], pool)
                common = dict(family="exploratory", claim="6", comparison=f"retention vaco - {x}", score=score,
                              tuning="B1", lag_depth=b)
                if not ts:
                    row(**common)
                    continue
                s = [normalised(ts, m, bb, "", score) for m in ("vaco", x) for bb in (b, 1)]
                decided(common, lambda bs, s=s: against(rules.retention_difference(*s, reps, bs, conf), 0.0), ts)
            for b in depths:
                ts = tasks_with([("vaco", b, ""), (x, b, "")], pool)
                common = dict(family="exploratory", claim="1 (all B)", comparison=f"P(vaco > {x})", score=score,
                              tuning="B1", lag_depth=b)
                if not ts:
                    row(**common)
                    continue
                decided(common, beats(_sample(rows, ts, "vaco", b, "", score), _sample(rows, ts, x, b, "", score)), ts)
    top = max(depths)
    for method, column in (("vaco", "mean_filtered_fraction"), ("ppo_clip", "mean_clip_fraction")):
        ts = tasks_with([(method, top, ""), (method, 1, "")])
        common = dict(family="exploratory", claim="2", comparison=f"P({column} B={top} > B=1), {method}",
                      score=column, tuning="B1", lag_depth=top)
        a = _sample(rows, ts, method, top, "", column) if ts else None
        c = _sample(rows, ts, method, 1, "", column) if ts else None
        if a is None or c is None:
            row(**common)
            continue
        decided(common, beats(a, c), ts)
    ab = p["ablations"]
    b = int(max(ab["lag_depths"]))
    for variant in ("vaco_realign_only", "vaco_filter_only"):
        ts = tasks_with([("vaco", b, ""), (variant, b, "")], ab["tasks"])
        common = dict(family="exploratory", claim="5", comparison=f"P(vaco > {variant})", score=primary_score,
                      tuning="B1", lag_depth=b)
        if not ts:
            row(**common)
            continue
        decided(common, beats(_sample(rows, ts, "vaco", b, "", primary_score),
                              _sample(rows, ts, variant, b, "", primary_score)), ts)
    ts = tasks_with([("a3po", b, ""), ("decoupled_recompute", b, ""), ("ppo_clip", 1, "")], ab["tasks"])
    common = dict(family="exploratory", claim="3", comparison="a3po - decoupled_recompute (equivalence, margin 0.1)",
                  score=primary_score, tuning="B1", lag_depth=b)
    if ts:
        pair = (normalised(ts, "a3po", b, "", primary_score), normalised(ts, "decoupled_recompute", b, "", primary_score))
        decided(common, lambda bs: rules.equivalence(*pair, 0.1, reps, bs), ts)
    else:
        row(**common)
    for t, ceiling in at_ceiling.items():
        row(family="exploratory", claim="ceiling", comparison=f"{t}: B=1 PPO-Clip within 2% of the best",
            score=final, verdict="at ceiling" if ceiling else "not at ceiling", tasks=t)
    diverged = sum(is_diverged(r) for r in rows)
    row(family="record", claim="diverged", comparison=f"{diverged} of {len(rows)} runs diverged (left out)",
        verdict="", runs=str(len(rows)))
    return out


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
