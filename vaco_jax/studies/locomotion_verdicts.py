"""The locomotion study's verdicts: the protocol's decision rules on the committed per-run scores
(``verdicts``; ``vaco_jax.studies.locomotion_report`` writes them to ``results/locomotion/verdicts.csv``).

Every verdict can be recomputed from ``results/locomotion/study/`` alone. The rules are the protocol's
(``results/locomotion/protocol.json``, section ``rules``, explained in ``protocol.md``): its bootstrap
(replicates, seed, confidence, stability seeds), tasks, methods and lag depths are read from the file;
the thresholds its text fixes (P > 0.5, Holm at 0.05, the equivalence margin 0.1, the ceiling's 2%) are
written here as it states them, through ``vaco_jax.analysis.rules``.
"""

from __future__ import annotations

import os

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
