"""The lag-adaptive study's rules and report (``results/adaptive/``, protocol ``rules``), on the rows of the
units the manifest lists as finished.

* ``verdicts.csv`` (once every unit of the family is in): each method of ``rules.methods`` (the adaptive
  clip range, BAPO) against the per-lag ``oracle`` at every lag cell (non-inferiority, margin 0.1; the
  held-out task's cells their own, for the adaptive method only: ``held_out.methods``) and against the
  ``robust`` ε at uniform B = 1 (superiority); Holm over the 14 tests together. SAT's rows beside,
  descriptive (no p, no verdict); a SAT unit left out of the budget is a row "not run".
* ``per_task.csv`` (from whatever units are in): per task, arm, lag model and B the mean normalised
  score, runs, diverged and missing counts, the realised mean age and d against the oracle on that task.
* the figure: each method's normalised AUC against the lag depth beside the oracle's, per lag model.

Scores are normalised per task by the protocol's ``normalisation`` (stage 2's numbers), floored at 0, a
diverged run at 0 and a missing score left out (``confirm.cells``); a test's ``d`` is the pooled mean
over its cell's tasks of X minus the reference's, by the seed bootstrap stratified by task
(``analysis.rules.replicates``).
"""

from __future__ import annotations

import os

import numpy as np

from vaco_jax.core.config import ConfigError

SCORE = "auc_eval_return"
METHODS = ("adaptive", "bapo")  # rules.methods: the methods under test
HELD_OUT_METHODS = ("adaptive",)  # held_out.methods: those tested on the held-out task too
NOT_RUN = "not run: over the {:g} h budget"  # a SAT unit's descriptive rows when it does not fit
MARGIN, ALPHA, REPS, SEED = 0.1, 0.05, 2000, 0  # rules.margin, alpha, bootstrap_reps, bootstrap_seed
VERDICTS, PER_TASK = "verdicts.csv", "per_task.csv"
ARM_OF = {"ppo_clip_adaptive": "adaptive", "bapo": "bapo", "sat": "sat"}  # a unit's method -> its arm


def check_rules(p: dict) -> None:
    """The protocol's rule numbers are the ones this module applies."""
    r = p["rules"]
    fixed = {"methods": list(METHODS), "margin": MARGIN, "alpha": ALPHA, "bootstrap_reps": REPS, "bootstrap_seed": SEED}
    for k, v in fixed.items():
        if r[k] != v:
            raise ConfigError(f"rules.{k}: {r[k]!r}; allowed values: {v!r} (the rule adaptive_parts applies)")
    if p["held_out"]["methods"] != list(HELD_OUT_METHODS):
        raise ConfigError(f"held_out.methods: {p['held_out']['methods']!r}; allowed values: "
                          f"{list(HELD_OUT_METHODS)!r} (the rule adaptive_parts applies)")
    s = r["superiority"]
    if s["lag_model"] not in p["lag_models"] or s["lag_depth"] not in p["lag_models"][s["lag_model"]]:
        raise ConfigError(f"rules.superiority: B = {s['lag_depth']} under {s['lag_model']!r} lag is not a cell of "
                          f"lag_models {p['lag_models']}")


def norm(p: dict) -> dict:
    n = p["normalisation"]
    return {t: (float(n["random"][t]), float(n["reference"][t])) for t in n["random"]}


def tagged_rows(p: dict, results_dir: str, planned: list, listed: set, eps: dict) -> list[dict]:
    """Every run of the listed units, each under the arm names it counts for: ``adaptive``/``bapo``/``sat``
    by its method; a PPO-Clip run ``robust`` at the robust ε and ``oracle`` where its ε is the oracle's at
    its lag model and B (``eps``: ``{lag model: {B: ε}}``, None while unknown), so a shared run is both."""
    from vaco_jax.analysis import results
    robust = float(p["arms"]["robust"]["clip_epsilon"])
    out = []
    for u in planned:
        if u.name not in listed:
            continue
        c = u.group.config
        for r in results.read_table(os.path.join(results_dir, u.name, "scores.csv")):
            b = int(r["lag_depth"])
            if c.method != p["oracle"]["method"]:
                arms = [ARM_OF[c.method]]
            else:
                oracle = (eps.get(c.lag_model) or {}).get(b)
                arms = ["robust"] * (c.clip_epsilon == robust) + ["oracle"] * (oracle == c.clip_epsilon)
            out += [{**r, "env": c.env, "arm": a, "lag_model": c.lag_model} for a in arms]
    return out


def family(p: dict) -> list[dict]:
    """The 14 tests in order: per method, its non-inferiority cells (design tasks, then the held-out task's
    cells where the method is in ``held_out.methods``), then each method's superiority test."""
    r, h, out = p["rules"], p["held_out"], []
    for m in r["methods"]:
        for model, depths in p["lag_models"].items():
            out += [{"family": "non_inferiority", "method": m, "reference": "oracle", "lag_model": model,
                     "lag_depth": b, "tasks": list(p["tasks"])} for b in depths]
        out += [{"family": "non_inferiority", "method": m, "reference": "oracle", "lag_model": h["lag_model"],
                 "lag_depth": b, "tasks": [h["task"]]} for b in h["lag_depths"] if m in h["methods"]]
    s = r["superiority"]
    out += [{"family": "superiority", "method": m, "reference": s["reference"], "lag_model": s["lag_model"],
             "lag_depth": s["lag_depth"], "tasks": list(s["tasks"])} for m in r["methods"]]
    for t in out:
        held = f" ({h['task']})" if t["tasks"] == [h["task"]] else ""  # the held-out task's cells are their own
        t["cell"] = f"{t['lag_model']} B {t['lag_depth']}{held}"
    return out


def sample(table: dict, t: dict, arm: str) -> np.ndarray | None:
    from vaco_jax.analysis import confirm
    return confirm.sample(table, t["tasks"], arm, t["lag_model"], t["lag_depth"])


def difference(x: np.ndarray, y: np.ndarray) -> dict:
    """d = pooled mean of x minus pooled mean of y, its replicates by the stratified seed bootstrap, their
    95% and 90% percentile intervals."""
    from vaco_jax.analysis import rules
    diff = lambda a, b: rules.pooled_mean(a) - rules.pooled_mean(b)  # noqa: E731
    values = rules.replicates([x, y], diff, REPS, SEED)
    (lo, hi), (lo90, hi90) = rules.interval(values, 0.95), rules.interval(values, 0.90)
    return {"estimate": float(diff(x, y)), "low": lo, "high": hi, "low90": lo90, "high90": hi90, "values": values}


def one_sided_p(values: np.ndarray, bound: float) -> float:
    """(1 + #{replicates <= bound}) / (reps + 1): the bootstrap p-value of 'd > bound'."""
    return float((1.0 + np.sum(values <= bound)) / (values.size + 1.0))


def verdict(t: dict) -> str:
    """The rule's call of one test from its Holm-adjusted p and intervals (``rules.non_inferiority``,
    ``rules.superiority``), in the rule's order."""
    if t["family"] == "non_inferiority":
        return "non-inferior" if t["holm_p"] < ALPHA else "inferior" if t["high90"] < -MARGIN else "inconclusive"
    return "better" if t["holm_p"] < ALPHA else "worse" if t["high"] < 0 else "not shown better"


def left_out(rows: list[dict], t: dict, arms) -> tuple[int, int]:
    """(diverged, missing) runs of ``arms`` at the test's cell over its tasks."""
    from vaco_jax.analysis import confirm
    counts = confirm.left_out(rows, SCORE)
    got = [counts.get((task, a, t["lag_model"], t["lag_depth"]), (0, 0)) for task in t["tasks"] for a in arms]
    return sum(g[0] for g in got), sum(g[1] for g in got)


def verdict_rows(p: dict, rows: list[dict], sat_left: tuple = ()) -> list[dict] | None:
    """``verdicts.csv``'s rows: the family's 14 tests with Holm, then SAT's descriptive rows over the SAT
    tasks run (left out while their runs are) and, per B, a "not run" row naming ``sat_left`` (the SAT
    tasks over the budget); None while a test of the family lacks its runs."""
    from vaco_jax.analysis import confirm, rules
    table, tests = confirm.cells(rows, SCORE, norm(p)), family(p)
    for t in tests:
        x, y = sample(table, t, t["method"]), sample(table, t, t["reference"])
        if x is None or y is None:
            return None
        d = difference(x, y)
        bound = -MARGIN if t["family"] == "non_inferiority" else 0.0
        t.update({k: v for k, v in d.items() if k != "values"}, p=one_sided_p(d["values"], bound))
    adjusted = rules.holm({str(i): t["p"] for i, t in enumerate(tests)}, ALPHA)
    out = []
    for i, t in enumerate(tests):
        t["holm_p"] = adjusted[str(i)][0]
        out.append(row_of(t, verdict(t), rows))
    s, nan = p["sat"], float("nan")
    for b in s["lag_depths"]:
        t = {"family": "descriptive", "method": "sat", "reference": "oracle", "lag_model": s["lag_model"],
             "lag_depth": b, "tasks": [x for x in s["tasks"] if x not in sat_left], "cell": f"{s['lag_model']} B {b}"}
        x, y = (sample(table, t, "sat"), sample(table, t, "oracle")) if t["tasks"] else (None, None)
        if x is not None and y is not None:
            t.update({k: v for k, v in difference(x, y).items() if k != "values"}, p=nan, holm_p=nan)
            out.append(row_of(t, "descriptive", rows))
        if sat_left:
            t.update({k: nan for k in ("estimate", "low", "high", "low90", "high90", "p", "holm_p")},
                     tasks=list(sat_left))
            out.append(row_of(t, NOT_RUN.format(p["budget"]["limit_hours"]), rows))
    return out


def row_of(t: dict, call: str, rows: list[dict]) -> dict:
    diverged, missing = left_out(rows, t, (t["method"], t["reference"]))
    return {"family": t["family"], "method": t["method"], "reference": t["reference"], "lag_model": t["lag_model"],
            "lag_depth": t["lag_depth"], "cell": t["cell"], "verdict": call,
            "margin": MARGIN if t["family"] == "non_inferiority" else 0.0,
            **{k: t[k] for k in ("estimate", "low", "high", "low90", "high90", "p", "holm_p")},
            "tasks": " ".join(t["tasks"]), "diverged": diverged, "missing": missing}


def per_task_rows(p: dict, rows: list[dict]) -> list[dict]:
    """Descriptive, per (task, arm, lag model, B) with runs: mean s, its sample sd, runs, diverged, missing,
    realised mean age and d against the oracle's mean on that task (blank without the oracle's runs)."""
    from vaco_jax.analysis import confirm
    table, counts = confirm.cells(rows, SCORE, norm(p)), confirm.left_out(rows, SCORE)
    ages: dict = {}
    for r in rows:
        key = (r["env"], r["arm"], r["lag_model"], int(r["lag_depth"]))
        ages.setdefault(key, []).append(float(r["mean_mean_staleness"]))
    out = []
    for (task, arm, model, b), s in sorted(table.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][3], kv[0][1])):
        oracle = table.get((task, "oracle", model, b))
        out.append({"task": task, "arm": arm, "lag_model": model, "lag_depth": b, "mean_s": float(np.mean(s)),
                    "sd_s": float(np.std(s, ddof=1)) if len(s) > 1 else 0.0, "runs": len(s),
                    "diverged": counts.get((task, arm, model, b), (0, 0))[0],
                    "missing": counts.get((task, arm, model, b), (0, 0))[1],
                    "mean_age": float(np.mean(ages[(task, arm, model, b)])),
                    "d_vs_oracle": float(np.mean(s) - np.mean(oracle)) if oracle else float("nan")})
    return out


def draw(p: dict, rows: list[dict], note: str = ""):
    """The figure: per panel (uniform lag, fixed lag on the design tasks; uniform lag on the held-out task)
    each arm's pooled mean normalised AUC against B, bars its 95% stratified bootstrap interval; None
    before any run is in."""
    from vaco_jax.analysis import confirm, rules
    from vaco_jax.analysis.plotting import (dodge_factors, figure_title, line_handle, method_label, method_style,
                                            panel_figure, place_legend)
    table = confirm.cells(rows, SCORE, norm(p))
    if not table:
        return None
    h = p["held_out"]
    panels = [(f"{m} lag, {len(p['tasks'])} tasks pooled", m, list(p["tasks"])) for m in p["lag_models"]]
    panels.append((f"{h['lag_model']} lag, {h['task']} (held out)", h["lag_model"], [h["task"]]))
    arms = ["oracle", "robust", *p["rules"]["methods"], "sat"]
    style = {"oracle": ("k", "o"), "robust": ("0.55", "s")}
    robust = f"{p['arms']['robust']['clip_epsilon']:g}"
    labels = {"oracle": "PPO-Clip at the per-lag ε (oracle)", "robust": f"PPO-Clip at ε = {robust} (robust)",
              **{a: method_label(p["arms"][a]["method"]) for a in arms if a not in style}}
    fig, axes = panel_figure(len(panels), ncols=3, panel_height=2.4, sharey=True)
    for ax, (title, model, tasks) in zip(axes.ravel(), panels):
        depths = sorted({k[3] for k in table if k[2] == model and k[0] in tasks})
        shift = dict(zip(arms, dodge_factors(depths or [1], len(arms))))
        for i, arm in enumerate(arms):
            colour, marker = style.get(arm) or method_style(p["arms"][arm]["method"], i)
            pts = []
            for b in depths:
                x = confirm.sample(table, tasks, arm, model, b)
                if x is not None:
                    lo, hi = rules.interval(rules.replicates([x], rules.pooled_mean, REPS, SEED), 0.95)
                    m = float(rules.pooled_mean(x))
                    pts.append((b * shift[arm], m, m - lo, hi - m))
            if pts:
                xs, ms, lo, hi = (np.array(c) for c in zip(*pts))
                ax.errorbar(xs, ms, yerr=[lo, hi], color=colour, marker=marker, ms=5, capsize=2, lw=1,
                            ls="--" if arm == "robust" else "-", label=labels[arm])
        ax.set_xscale("log", base=2)
        if depths:
            ax.set_xticks(depths, [str(b) for b in depths])
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("lag depth B")
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("normalised AUC")
    place_legend(fig, axes, extra=[line_handle("bars: 95% stratified bootstrap interval over seeds", ls="-")])
    figure_title(fig, "Lag-adaptive step sizes against the per-lag oracle" + note)
    return fig


def report(p: dict, args, planned: list, listed: set, eps: dict, sat_left: list = ()) -> dict:
    """The tables (computed first, then written) and the figure from the listed units; prints what waits
    (``sat_left``: the SAT units over the budget, rows "not run")."""
    from vaco_jax.analysis import results
    from vaco_jax.analysis.plotting import save_figure
    done = [u.name for u in planned if u.name in listed]
    if not done:
        print(f"no unit has finished: nothing to report (next: {planned[0].name})")
        return {}
    rows = tagged_rows(p, args.results, planned, listed, eps)
    tables, lines = {PER_TASK: per_task_rows(p, rows)}, [f"{len(done)} of {len(planned)} planned units in"]
    verdicts = verdict_rows(p, rows, tuple(u.group.config.env for u in sat_left))
    if verdicts is None:
        waiting = [u.name for u in planned if u.name not in listed]
        nxt = waiting[0] if waiting else "the fixed-lag oracle's units (they follow the lag-shape study's surface)"
        lines.append(f"{VERDICTS}: waits for every unit of the family; next: {nxt}")
    else:
        tables[VERDICTS] = verdicts
        lines += [f"{VERDICTS}: {r['method']:<8} vs {r['reference']:<6} {r['cell']:<22} {r['estimate']:+.3f} "
                  f"[{r['low']:+.3f}, {r['high']:+.3f}] holm p {r['holm_p']:.4f}: {r['verdict']}" for r in verdicts]
        lines += [f"{u.name}: {NOT_RUN.format(p['budget']['limit_hours'])}" for u in sat_left]
    for name, t in tables.items():
        results.write_table(os.path.join(args.results, name), t)
    fig = draw(p, rows, "" if len(done) == len(planned) else f" ({len(done)} of {len(planned)} units)")
    if fig is not None:
        save_figure(fig, args.results, "adaptive", args.figures)
    print(*lines, sep="\n")
    return tables
