"""What the lag sweep prints when it is done (``lag_sweep.main``), read from its ``summary.csv`` rows:
the table of the primary score per method and lag depth, the README's headline sentence, and the note
that says when the demo's step sizes are each method's default rather than the ones tuned for the lag."""

from __future__ import annotations

from vaco_jax.core.methods import METHODS

README_FIGURE = "aggregate_vs_lag_auc_eval_return_normalized.png"  # the demo's figure the README shows

# The step size x lag study's best step sizes per lag on Hopper-v4 and Walker2d-v4 (results/steplag/choices.csv,
# its per_lag column; tests/test_readme_numbers.py checks them): (knob, best at B = 1, best at B = 8 and 32).
TUNED_STEPS = {"ppo_clip": ("clip_epsilon", 0.2, 0.6), "vaco": ("tv_budget", 0.06, 0.2)}


def _piece_value(method, knob: str):
    return next(getattr(piece, knob) for piece in (method.advantage, method.proximal, method.surrogate,
                                                   method.sample_filter) if hasattr(piece, knob))


def untuned_note(groups: list) -> str:
    """Why the demo's picture is not the studies' verdict: when PPO-Clip and VACO both ran at their
    default step sizes (neither set nor swept), a line naming them against the best ones the step size x
    lag study found without lag and under it (:data:`TUNED_STEPS`); empty otherwise."""
    used = {}
    for g in groups:
        if g.config.method not in TUNED_STEPS:
            continue
        knob = TUNED_STEPS[g.config.method][0]
        if getattr(g.config, knob) is not None or any(knob in c.knob_dict() for c in g.cells):
            return ""
        used[g.config.method] = _piece_value(g.config.build_method(), knob)
    if set(used) != set(TUNED_STEPS):
        return ""
    parts = [f"{METHODS[m].label or m} {knob} = {used[m]:g} (best at B = 1: {b1:g}; under lag: {lagged:g})"
             for m, (knob, b1, lagged) in TUNED_STEPS.items()]
    return ("Step sizes: each method's default, not tuned for the lag — " + "; ".join(parts)
            + ", on Hopper-v4 and Walker2d-v4. Each tuned for the lag, VACO is not found better than PPO-Clip "
            "(FINDINGS.md, the step size × lag study).")


def central_label(rows: list[dict]) -> str:
    """What the summary's ``iqm`` points of ``rows`` are: the IQM cuts ``int(n / 4)`` of the ``n`` pooled
    runs from each end, so when no cell pools 4 runs it cuts none and each point is the mean of its runs
    ("mean of 3 runs"); otherwise "IQM"."""
    pooled = {int(r["n_runs"]) * int(r.get("n_tasks") or 1) for r in rows if r.get("aggregate") == "iqm"}
    if not pooled or max(pooled) >= 4:
        return "IQM"
    return f"mean of {pooled.pop()} runs" if len(pooled) == 1 else f"mean of {max(pooled)} runs or fewer"


def headline(summary: list[dict]) -> str:
    """The sentence the README quotes from the demo's summary: at the deepest lag, the share of its own
    B = 1 AUC each method keeps, and each method's AUC against synchronous PPO-Clip (IQM, or the mean
    where the IQM cuts no run: :func:`central_label`; 95% CIs). Empty when the summary has neither."""
    auc = [r for r in summary if r["score"] == "auc_eval_return" and r.get("aggregate") == "iqm"
           and not r.get("setting")]
    if not auc:
        return ""
    deepest = max(int(r["lag_depth"]) for r in auc)
    order = sorted({r["method"] for r in auc}, key=lambda m: (m != "ppo_clip", m))

    def at(method, normalization):
        return next((r for r in auc if (r["method"], int(r["lag_depth"]), r["normalization"])
                     == (method, deepest, normalization)), None)

    def ci(r):
        return f"{r['point']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"

    kept = [f"{METHODS[m].label or m} {ci(at(m, 'own_b1'))}" for m in order if at(m, "own_b1")]
    level = [f"{METHODS[m].label or m} {ci(at(m, 'normalized'))}" for m in order if at(m, "normalized")]
    parts = []
    if kept:
        parts.append(f"At B = {deepest} each method keeps this share of its own B = 1 AUC: " + ", ".join(kept))
    if level:
        parts.append("its AUC as a share of synchronous PPO-Clip's: " + ", ".join(level))
    return "; ".join(parts) + f" ({central_label(auc)}, 95% CI)."


def print_table(summary: list[dict]) -> None:
    """The primary score per method and lag depth: the area under the evaluation curve (AUC; the final
    return cannot separate methods at a task's ceiling), its IQM normalised to synchronous PPO-Clip
    (raw where there is no PPO-Clip at B = 1), and the share of the method's own B = 1 AUC it keeps
    (IQM, ``own_b1``); 95% stratified bootstrap CIs. One block per setting when the sweep had axes
    beyond method, lag depth and seed (summary.csv's ``setting`` column)."""
    settings = sorted({r.get("setting", "") for r in summary})
    diverged, unstable = [], []
    for setting in settings:
        part = [r for r in summary if r.get("setting", "") == setting and r["score"] == "auc_eval_return"]
        norm = "normalized" if any(r["normalization"] == "normalized" for r in part) else "raw"

        def pick(normalization):
            return {(r["method"], r["lag_depth"]): r for r in part if r["normalization"] == normalization
                    and r.get("aggregate") in ("iqm", "all_diverged", "all_missing", "none_left")}

        level, kept = pick(norm), pick("own_b1")
        where = "" if len(settings) == 1 else (f"{setting}: " if setting else
                                               "methods that do not read the swept values: ")
        ref = "1.0 = synchronous PPO-Clip" + (" of the same setting" if len(settings) > 1 else "")
        print(f"{where}IQM of the AUC (area under the evaluation curve; "
              f"{norm + '; ' + ref if norm == 'normalized' else norm}) and the share of its own B = 1 AUC "
              "each method keeps, 95% stratified bootstrap CIs:")
        label = central_label(list(level.values()) + list(kept.values()))
        if label != "IQM":
            print(f"  (here the IQM is the {label}: it cuts a quarter of the runs from each end, and of fewer "
                  "than 4 none)")
        print(f"{'method':<22}{'B':>4}  {'AUC':>7}  {'95% CI':>17}  {'kept':>6}  {'95% CI':>15}  runs  diverged")
        for key in sorted(level):
            r, k = level[key], kept.get(key)
            if r.get("aggregate") != "iqm":
                why = {"all_diverged": "every run diverged", "all_missing": "no run has a score"}
                cells = f"{why.get(r['aggregate'], 'no run left (diverged or no score)'):>51}"
            else:
                share = (f"{k['point']:>6.2f}  [{k['low']:>5.2f}, {k['high']:>5.2f}]"
                         if k is not None and k.get("aggregate") == "iqm" else f"{'':>6}  {'':>14}")
                cells = f"{r['point']:>7.3f}  [{r['low']:>6.3f}, {r['high']:>6.3f}]  {share}"
            print(f"{r['method']:<22}{r['lag_depth']:>4}  {cells}  {r['n_runs']:>4}  {r['n_diverged']:>8}")
            where_cell = f"{r['method']} B={r['lag_depth']}" + (f" {setting}" if setting else "")
            if int(r["n_diverged"]):
                diverged.append((int(r["n_diverged"]), f"{where_cell} ({r['n_diverged']})"))
            if int(r.get("n_unstable") or 0):
                unstable.append((int(r["n_unstable"]), f"{where_cell} ({r['n_unstable']})"))
    if diverged:
        print(f"diverged runs (dropped from every aggregate): {sum(n for n, _ in diverged)} in "
              + ", ".join(text for _, text in diverged))
    if unstable:
        print(f"runs with steps MuJoCo flagged unstable (kept; see unstable_steps in scores.csv): "
              f"{sum(n for n, _ in unstable)} in " + ", ".join(text for _, text in unstable))
