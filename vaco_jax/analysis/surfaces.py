"""The step size x lag study's stage-1 rules on per-run rows (``results/steplag/protocol.json``, "stage1").

A *surface* is one method's score over a grid of its step knob x lag depths x seeds (x tasks). Rows are
plain dicts with ``env``, ``lag_depth``, ``seed``, ``value`` (the knob's value), the score and
``diverged``. The rules, each written in the protocol before any stage-1 run:

* ``floored``: ``s = max(0, (score − random) / (reference − random))`` per run;
* ``robust_choice``: ``R(v)`` = mean over the surface's (task, B) of the seed-mean of ``s``; the largest
  wins; a value with a diverged run or a missing score anywhere is never chosen; ties go to the smaller;
* ``per_lag_optima``: per B, the value with the largest mean over tasks of the seed-mean of ``s`` (none
  where every value scores the same: the knob does not act there);
* ``edge_extensions``: optima at an edge of the values run ask for one point beyond it (at most two
  per edge);
* ``stability``: the share of paired seed-bootstrap resamples whose argmax of ``R`` is the chosen value,
  and the values picked in at least 5% of them (those get more seeds below 0.8).

numpy only: no jax, no core.
"""

from __future__ import annotations

import math

import numpy as np

from vaco_jax.analysis.tables import is_diverged

STABILITY_THRESHOLD = 0.8
NOISE_SHARE = 0.05  # a value picked in at least this share of resamples is "within noise of the best"
MAX_EXTENSIONS_PER_EDGE = 2


def floored(score: float, random: float, reference: float) -> float:
    """The random-floored normalised score; NaN stays NaN (a missing score)."""
    if reference - random <= 0:
        raise ValueError(f"reference {reference} is not above the random score {random}")
    s = (score - random) / (reference - random)
    return s if math.isnan(s) else max(0.0, s)


def _table(rows: list[dict], score: str, norm: dict) -> dict:
    """{(value, task, B): {seed: s or nan}} and the values that are excluded (diverged or missing)."""
    cells: dict = {}
    excluded: dict = {}
    for r in rows:
        v, task, b, seed = float(r["value"]), r["env"], int(r["lag_depth"]), int(r["seed"])
        raw = float(r[score]) if r.get(score) not in (None, "") else float("nan")
        if is_diverged(r):
            excluded.setdefault(v, set()).add("diverged")
            s = float("nan")
        else:
            s = floored(raw, *norm[task])
            if math.isnan(s):
                excluded.setdefault(v, set()).add("missing")
        cells.setdefault((v, task, b), {})[seed] = s
    return {"cells": cells, "excluded": {v: sorted(x) for v, x in excluded.items()}}


def _expected(cells: dict) -> tuple[list, list, list]:
    values = sorted({k[0] for k in cells})
    tasks = sorted({k[1] for k in cells})
    lags = sorted({k[2] for k in cells})
    return values, tasks, lags


def _incomplete(cells: dict, values, tasks, lags) -> dict:
    """Values missing a (task, B) cell or a seed another value of the same (task, B) has."""
    out: dict = {}
    for task in tasks:
        for b in lags:
            seeds = set().union(*(cells.get((v, task, b), {}).keys() for v in values))
            for v in values:
                if set(cells.get((v, task, b), {})) != seeds:
                    out.setdefault(v, set()).add("incomplete")
    return out


def _r_values(cells: dict, values, tasks, lags, resample: dict | None = None) -> dict:
    """R(v) for every value; ``resample`` maps a task to the seeds drawn (paired over values and B)."""
    out = {}
    for v in values:
        per = []
        for task in tasks:
            for b in lags:
                by_seed = cells[(v, task, b)]
                seeds = resample[task] if resample else sorted(by_seed)
                per.append(np.mean([by_seed[s] for s in seeds]))
        out[v] = float(np.mean(per))
    return out


def _argmax(r: dict, allowed) -> float | None:
    ok = [v for v in sorted(r) if v in allowed and math.isfinite(r[v])]
    if not ok:
        return None
    best = max(r[v] for v in ok)
    return min(v for v in ok if r[v] == best)  # a tie goes to the smaller value


def robust_choice(rows: list[dict], score: str, norm: dict) -> dict:
    """The lag-robust setting: ``{"value", "R": {v: R}, "excluded": {v: reasons}}`` (value None when
    every value is excluded). ``norm`` maps a task to ``(random, reference)``."""
    t = _table(rows, score, norm)
    cells = t["cells"]
    values, tasks, lags = _expected(cells)
    excluded = {v: set(x) for v, x in t["excluded"].items()}
    for v, x in _incomplete(cells, values, tasks, lags).items():
        excluded.setdefault(v, set()).update(x)
    complete = [v for v in values if "incomplete" not in excluded.get(v, ())]
    r = _r_values(cells, complete, tasks, lags)
    allowed = [v for v in complete if v not in excluded]
    return {"value": _argmax(r, allowed), "R": r, "excluded": {v: sorted(x) for v, x in excluded.items()},
            "values": values, "tasks": tasks, "lag_depths": lags}


def per_lag_optima(rows: list[dict], score: str, norm: dict) -> dict:
    """{B: the value with the largest mean over tasks of the seed-mean of s}; None when every value is
    excluded, or when every allowed value scores exactly the same (the knob does not act at that B — TIS's
    cap at B = 1, where π_T = β — so no value is an optimum, and no edge is one)."""
    out = {}
    for b in sorted({int(r["lag_depth"]) for r in rows}):
        c = robust_choice([r for r in rows if int(r["lag_depth"]) == b], score, norm)
        allowed = [v for v in c["R"] if v not in c["excluded"]]
        tied = len(allowed) > 1 and len({c["R"][v] for v in allowed}) == 1
        out[b] = None if tied else c["value"]
    return out


def edge_extensions(values_run: list[float], optima: list[float | None], extensions_done: dict,
                    in_log: bool = False) -> list[float]:
    """The points to add: for each edge of ``values_run`` holding one of ``optima``, the edge times its
    ratio to its neighbour, unless that edge has been extended ``MAX_EXTENSIONS_PER_EDGE`` times
    (``extensions_done``: {'low': n, 'high': n}). ``in_log``: the grid is log-spaced in log v (a cap C
    acting through log C, all values > 1), so the step is taken on log v: the point stays above 1."""
    vs = sorted(values_run)
    out = []
    if len(vs) < 2:
        return out
    if in_log and vs[0] <= 1.0:
        raise ValueError(f"in_log needs every value above 1; got {vs[0]!r}")
    step = (lambda edge, nb: math.exp(math.log(edge) ** 2 / math.log(nb))) if in_log else (lambda edge, nb: edge * edge / nb)
    if vs[0] in optima and extensions_done.get("low", 0) < MAX_EXTENSIONS_PER_EDGE:
        out.append(float(f"{step(vs[0], vs[1]):.4g}"))
    if vs[-1] in optima and extensions_done.get("high", 0) < MAX_EXTENSIONS_PER_EDGE:
        out.append(float(f"{step(vs[-1], vs[-2]):.4g}"))
    return out


def stability(rows: list[dict], score: str, norm: dict, reps: int = 2000, seed: int = 0) -> dict:
    """How often a paired seed bootstrap picks the chosen value: ``{"value", "share", "picks": {v: share},
    "within_noise": [values picked in >= NOISE_SHARE of resamples], "stable": share >= threshold}``."""
    choice = robust_choice(rows, score, norm)
    if choice["value"] is None:
        return {"value": None, "share": float("nan"), "picks": {}, "within_noise": [], "stable": False}
    cells = _table(rows, score, norm)["cells"]
    allowed = [v for v in choice["R"] if v not in choice["excluded"]]
    tasks, lags = choice["tasks"], choice["lag_depths"]
    seeds = {task: sorted(cells[(allowed[0], task, lags[0])]) for task in tasks}
    rng = np.random.default_rng(seed)
    counts: dict = {}
    for _ in range(reps):
        draw = {task: list(rng.choice(seeds[task], size=len(seeds[task]), replace=True)) for task in tasks}
        pick = _argmax(_r_values(cells, allowed, tasks, lags, draw), allowed)
        counts[pick] = counts.get(pick, 0) + 1
    picks = {v: c / reps for v, c in sorted(counts.items())}
    share = picks.get(choice["value"], 0.0)
    return {"value": choice["value"], "share": share, "picks": picks,
            "within_noise": [v for v, p in picks.items() if p >= NOISE_SHARE], "stable": share >= STABILITY_THRESHOLD}


# ----------------------------------------------------------------------------- the figure

def surface_curves(rows: list[dict], score: str, norm: dict) -> dict:
    """{(panel, B): [(value, seed-mean, min, max)]} of the floored normalised score, panel = a task or
    'pooled' (per seed, the mean over tasks; only seeds every task has). Diverged and missing runs are
    left out of a point (a point with none left is not drawn)."""
    cells = _table(rows, score, norm)["cells"]
    values, tasks, lags = _expected(cells)
    out: dict = {}
    for b in lags:
        for panel in list(tasks) + (["pooled"] if len(tasks) > 1 else []):
            points = []
            for v in values:
                if panel == "pooled":
                    per_task = [cells.get((v, t, b), {}) for t in tasks]
                    seeds = set.intersection(*(set(d) for d in per_task))
                    ys = [float(np.mean([d[s] for d in per_task])) for s in sorted(seeds)]
                else:
                    ys = list(cells.get((v, panel, b), {}).values())
                ys = [y for y in ys if math.isfinite(y)]
                if ys:
                    points.append((v, float(np.mean(ys)), float(min(ys)), float(max(ys))))
            out[(panel, b)] = points
    return out


def surface_label(surface: dict) -> str:
    """A surface's method as a reader knows it (a protocol's ``stage1.surfaces`` entry): VACO with its
    budget on the learner's own move is named apart from VACO."""
    from vaco_jax.analysis.plotting import method_label
    return method_label(surface["method"]) + (" (TV to π_T)" if surface.get("options", {}).get("tv_denominator")
                                              else "")


def draw_surface(rows: list[dict], score: str, norm: dict, knob: str, title: str, chosen: float | None = None):
    """The stage-1 figure of one surface: score against the knob (log axis), one curve per lag depth with
    the seeds' min-max as a band, a panel per task and one pooled; the lag-robust setting marked."""
    from vaco_jax.analysis.plotting import (band_handle, dodge_factors, figure_title, line_handle, panel_figure,
                                            place_legend)

    curves = surface_curves(rows, score, norm)
    panels = sorted({p for p, _ in curves}, key=lambda p: (p == "pooled", p))
    lags = sorted({b for _, b in curves})
    fig, axes = panel_figure(len(panels), ncols=3, panel_height=2.4, sharey=True)
    colours = dict(zip(lags, ("#1f77b4", "#ff7f0e", "#d62728", "#2ca02c", "#9467bd")))
    values = sorted({float(r["value"]) for r in rows if float(r["value"]) > 0})
    shift = dict(zip(lags, dodge_factors(values, len(lags))))  # lag depths side by side at each value
    for ax, panel in zip(axes.ravel(), panels):
        for b in lags:
            pts = curves[(panel, b)]
            if not pts:
                continue
            x, m, lo, hi = (np.array(c) for c in zip(*pts))
            ax.plot(x * shift[b], m, marker="o", ms=4, color=colours[b], label=f"B = {b}")
            ax.fill_between(x * shift[b], lo, hi, color=colours[b], alpha=0.15, linewidth=0)
        if chosen is not None:
            ax.axvline(chosen, color="0.4", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel(knob)
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("normalised AUC (floored at random)")
    extra = [band_handle("seeds' min–max")] + ([line_handle(f"lag-robust {knob} = {chosen:g}")]
                                               if chosen is not None else [])
    place_legend(fig, axes, extra=extra)
    figure_title(fig, title)
    return fig
