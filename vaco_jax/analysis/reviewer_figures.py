"""Figures (5)-(10) of a run directory (docs/evaluation.md), each drawn from the numbers the pure
functions of :mod:`vaco_jax.analysis.reviewer` compute on the rows it loaded; the same conventions as
:mod:`vaco_jax.analysis.figures` (PNG + PDF under ``RUN/figures/`` or ``figures_dir``, ``sources`` to
merge several run directories, ``NoData`` when the data are absent). ``figures.make_all`` draws them.

    plot_forward_lag        (5) forward lag: score over epochs x minibatches at fixed backward lag
    plot_interval_estimates (6) median / IQM / mean / optimality gap with CIs per method, per lag depth
    plot_probability_of_improvement (7) P(VACO > each method) with CIs, per lag depth
    plot_performance_profiles (8) fraction of runs above tau with CI bands, per lag depth
    plot_iqm_curves         (9) IQM of the normalised eval return vs env steps with CI bands, per lag depth
    plot_staleness          (10) realised staleness: share of samples by age, per lag model and lag depth
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, FixedLocator, NullLocator

from vaco_jax.analysis import results, reviewer, rules
from vaco_jax.analysis.plotting import (
    FIGURE_WIDTH, SCORE_SHORT, NoData, band_handle, bootstrap_reps, data_source, dodge_factors,
    figure_title, footnote, interval_bars, is_finite, line_handle, method_label, method_style, new_figure,
    panel_figure, place_legend, plural, read_summary, run_json, save_figure, score_rows, sentence,
    sort_methods, unique_handles)
from vaco_jax.analysis.results import load_curves


# ----------------------------------------------------------------------------- (5) forward lag

_mean_se = reviewer.mean_se


def _heat_panel(ax, m: str, lag: int, epochs: Sequence[int], minibatches: Sequence[int], cell, n_div, n_miss,
                vmin: float, vmax: float):
    """One heat map of the forward-lag figure (method ``m`` at lag depth ``lag``): the mean score per
    (E, M) with its run count and excluded runs written in; returns the image."""
    grid = np.full((len(epochs), len(minibatches)), np.nan)
    for ei, e in enumerate(epochs):
        for ji, mb in enumerate(minibatches):
            key = (m, lag, e, mb)
            mean, _ = _mean_se(cell[key])
            grid[ei, ji] = mean
            if not (cell[key] or n_div[key] or n_miss[key]):
                continue
            text = (f"{mean:.4g}\nn={len(cell[key])}" if cell[key] else
                    "all\ndiverged" if not n_miss[key] else "no score" if not n_div[key]
                    else "diverged /\nno score")
            if n_div[key] and cell[key]:
                text += f", {n_div[key]} div."
            if n_miss[key] and cell[key]:
                text += f", {n_miss[key]} no score"
            ax.text(ji, ei, text, ha="center", va="center", fontsize=7,
                    color="white" if np.isfinite(mean) and
                    (mean - vmin) < 0.5 * (vmax - vmin + 1e-12) else "black")
    image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap="viridis",
                      vmin=vmin, vmax=vmax)
    ax.set_facecolor("0.85")
    ax.set_xticks(range(len(minibatches)), [str(v) for v in minibatches])
    ax.set_yticks(range(len(epochs)), [str(v) for v in epochs])
    ax.set_xlabel("minibatches per epoch M")
    ax.set_ylabel("epochs per phase E")
    ax.set_title(f"{method_label(m)}, B = {lag}", fontsize=9)
    return image


def plot_forward_lag(run_dir: str, score: str = "final_eval_return", sources=None,
                     figures_dir: str | None = None) -> list[str]:
    """Forward-lag sweep (epochs E x minibatches M per phase) at fixed backward lag: per task, a heat map
    of the mean score per method (rows of panels: lag depths), or lines when only one of E, M varies."""
    rows = [r for r in score_rows(data_source(run_dir, sources), one_setting=False)
            if is_finite(r.get("num_epochs")) and is_finite(r.get("num_minibatches"))]
    if not rows:
        raise NoData("no score rows carry num_epochs and num_minibatches tags (not a forward-lag run)")
    if not any(score in r for r in rows):
        raise NoData(f"score rows have no {score!r} column")
    paths = []
    for task in sorted({r["env"] for r in rows}):
        trows = [r for r in rows if r["env"] == task]
        methods = sort_methods({r["method"] for r in trows})
        lags = sorted({int(r["lag_depth"]) for r in trows})
        epochs = sorted({int(r["num_epochs"]) for r in trows})
        minibatches = sorted({int(r["num_minibatches"]) for r in trows})
        cell, n_div, n_miss = reviewer.forward_lag_cells(trows, score)
        heat = len(epochs) > 1 and len(minibatches) > 1
        unit = SCORE_SHORT.get(score, score)
        notes = []
        if heat:
            fig, axes = new_figure(len(methods), len(lags), panel_height=2.2, legend=False)
            means = [np.mean(v) for v in cell.values() if v]
            vmin, vmax = (min(means), max(means)) if means else (0.0, 1.0)
            image = None
            for li, lag in enumerate(lags):
                for mi, m in enumerate(methods):
                    image = _heat_panel(axes[li][mi], m, lag, epochs, minibatches, cell, n_div, n_miss, vmin, vmax)
            if image is not None:
                fig.colorbar(image, ax=axes, label=f"mean {unit}", shrink=0.8)
        else:
            axis, values, xlabel = (("num_epochs", epochs, "epochs per phase E") if len(epochs) > 1 else
                                    ("num_minibatches", minibatches, "minibatches per epoch M"))
            fixed = (f"M = {minibatches[0]}" if axis == "num_epochs" else f"E = {epochs[0]}")
            fig, axes = panel_figure(len(lags), ncols=2, sharey=True)
            log2 = all(v > 0 and (v & (v - 1)) == 0 for v in values) and len(values) > 1
            shift = (dodge_factors(values, len(methods)) if log2 else
                     [1.0 + (i - (len(methods) - 1) / 2) * 0.02 for i in range(len(methods))])
            for ax, lag in zip(np.ravel(axes), lags):
                for i, m in enumerate(methods):
                    colour, marker = method_style(m, i)
                    xs, ys, ses = [], [], []
                    for v in values:
                        key = (m, lag, v if axis == "num_epochs" else epochs[0],
                               v if axis == "num_minibatches" else minibatches[0])
                        what = f"{method_label(m)} B = {lag} {axis.split('_')[1][0].upper()} = {v}"
                        if n_div[key]:
                            notes.append(f"{what}: {plural(n_div[key], 'run')} diverged")
                        if n_miss[key]:
                            notes.append(f"{what}: {plural(n_miss[key], 'run')} with no score")
                        if cell[key]:
                            mean, se = _mean_se(cell[key])
                            xs.append(v * shift[i] if log2 else v + (shift[i] - 1) * (max(values) - min(values)))
                            ys.append(mean), ses.append(se)
                    if xs:
                        ax.errorbar(xs, ys, yerr=ses, color=colour, marker=marker, capsize=2.5, lw=1.5, ms=5,
                                    label=method_label(m))
                if log2:
                    ax.set_xscale("log", base=2)
                ax.xaxis.set_major_locator(FixedLocator(values))
                ax.set_xticklabels([str(v) for v in values])
                ax.xaxis.set_minor_locator(NullLocator())
                ax.set_xlabel(f"{xlabel} ({fixed})")
                ax.set_title(f"B = {lag}", fontsize=9)
                ax.grid(alpha=0.3)
            for row in axes:
                row[0].set_ylabel(f"mean {unit}")
            place_legend(fig, axes, extra=[line_handle("bars: ±1 standard error", ls="-", marker="|")])
        figure_title(fig, f"{task}: {SCORE_SHORT.get(score, score)} by epochs E × minibatches M")
        footnote(fig, ["Left out: " + "; ".join(notes) + "."] if notes else [])
        paths += save_figure(fig, run_dir, f"forward_lag_{score}_{task}", figures_dir=figures_dir)
    return paths


# ----------------------------------------------------------------------------- (6)-(10) reviewer figures
# Each FIGURE_WIDTH (7 in) wide: a full-width figure of a paper page.

MAX_WIDTH = FIGURE_WIDTH


def _narrow_figure(nrows: int, ncols: int, row_height: float, sharex=False, sharey=False):
    """A grid of rows x columns of interval panels (no legend: the methods are the rows' labels)."""
    fig = Figure(figsize=(MAX_WIDTH, row_height * nrows + 0.6), layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey)


def _grid(n: int, ncols: int = 2) -> tuple[int, int]:
    ncols = max(1, min(ncols, n))
    return math.ceil(n / ncols), ncols


def _reps(run_dir, sources) -> int:
    return bootstrap_reps([run_dir] + list(sources or [])) or 2000


def plot_interval_estimates(run_dir: str, score: str = "final_eval_return", normalization: str | None = None,
                            sources=None, figures_dir: str | None = None) -> list[str]:
    """Median / IQM / mean / optimality gap with 95% CIs per method, one row of panels per lag depth."""
    est = reviewer.interval_estimates(read_summary(run_dir), score, normalization, order=sort_methods)
    if not est.points:
        raise NoData(f"summary.csv has no {est.normalization!r} points for {score!r}")
    normalization, n_tasks, aggs = est.normalization, est.n_tasks, est.aggregates
    lags, methods = est.lags, est.methods
    # each lag depth's row of panels lists the methods run at that depth (a lag-aware tuning ran at one)
    ran = {lag: [m for m in methods if any((m, lag, a) in est.points for a in aggs)] for lag in lags}
    lags = [lag for lag in lags if ran[lag]]
    heights = [0.28 * len(ran[lag]) + 0.7 for lag in lags]
    fig = Figure(figsize=(MAX_WIDTH, sum(heights) + 0.6), layout="constrained")
    grid = fig.add_gridspec(len(lags), len(aggs), height_ratios=heights)
    for li, lag in enumerate(lags):
        rows = ran[lag]
        first = None
        for ai, agg in enumerate(aggs):
            ax = fig.add_subplot(grid[li, ai], sharey=first)
            first = first or ax
            interval_bars(ax, [(i, *est.points[(m, lag, agg)], method_style(m, methods.index(m))[0])
                               for i, m in enumerate(rows) if (m, lag, agg) in est.points])
            ax.set_yticks(range(len(rows)), [method_label(m) for m in rows], fontsize=7)
            ax.tick_params(axis="y", labelleft=ai == 0)
            ax.set_ylim(len(rows) - 0.3, -0.7)  # the first method on top
            ax.tick_params(axis="x", labelsize=7)
            ax.grid(axis="x", alpha=0.3)
            if li == 0:
                ax.set_title("IQM" if agg == "iqm" else agg.replace("_", " "), fontsize=9)
            if ai == 0:
                ax.set_ylabel(f"B = {lag}", fontsize=9)
    unit = {"normalized": "normalised (1 = sync PPO-Clip)", "own_b1": "share of own B = 1 score",
            "raw": "raw return"}.get(normalization, normalization)
    figure_title(fig, f"{sentence(SCORE_SHORT.get(score, score))}, {unit}: 95% CIs per lag depth, "
                      f"{plural(n_tasks, 'task')}")
    return save_figure(fig, run_dir, f"interval_estimates_{score}_{normalization}", figures_dir=figures_dir)


def poi_tasks(rows: list[dict], score: str, random: dict | None) -> tuple[list[dict], list[str]]:
    """The rows a probability of improvement reads, and the tasks it leaves out: a task at its ceiling
    on ``score`` (``claims.ceiling_tasks``, the claims' rule: synchronous PPO-Clip within
    ``rules.CEILING_TOLERANCE`` of the best run, on the final return) ties every method there, so P
    there only says which method's runs ended a fraction of a point higher."""
    from vaco_jax.analysis import claims

    ceiling = claims.ceiling_tasks(rows, random, score)
    return [r for r in rows if r["env"] not in ceiling], ceiling


def plot_probability_of_improvement(run_dir: str, score: str = "final_eval_return", method: str = "vaco",
                                    sources=None, figures_dir: str | None = None) -> list[str]:
    """P(``method`` > each other method) with 95% CIs, one panel per lag depth, on the tasks below their
    ceiling on ``score`` (``poi_tasks``); NoData when every task is at its ceiling."""
    data = data_source(run_dir, sources)
    rows, ceiling = poi_tasks(score_rows(data), score, results.load_random_scores(data))
    rule = (f"synchronous PPO-Clip within {rules.CEILING_TOLERANCE:.0%} of the best run on "
            f"{SCORE_SHORT.get(score, score)}")
    if not rows:
        raise NoData(f"every task is at its ceiling ({rule}: {', '.join(ceiling)}), where P({method_label(method)} "
                     "> Y) only says whose runs ended a fraction of a point higher (the AUC's figure compares them: "
                     "probability_of_improvement_auc_eval_return)")
    tasks = sorted({r["env"] for r in rows})
    if not any(r["method"] == method for r in rows):
        raise NoData(f"no {method} runs")
    reps = _reps(run_dir, sources)
    results_by_lag = {lag: [(d["method"], d["point"], d["low"], d["high"]) for d in res] for lag, res in
                      reviewer.probability_of_improvement(rows, method, score, reps, order=sort_methods).items()}
    if not results_by_lag:
        raise NoData(f"no lag depth with both {method} and another method")
    nrows, ncols = _grid(len(results_by_lag))
    n_max = max(len(v) for v in results_by_lag.values())
    fig, axes = _narrow_figure(nrows, ncols, 0.3 * n_max + 0.9, sharex=True)
    for ax, (lag, res) in zip(np.ravel(axes), results_by_lag.items()):
        interval_bars(ax, [(i, p, lo, hi, method_style(o, i)[0]) for i, (o, p, lo, hi) in enumerate(res)], span=1.0)
        ax.axvline(0.5, color="0.3", ls=":", lw=1)
        ax.set_yticks(range(len(res)), [method_label(o) for o, *_ in res], fontsize=7)
        ax.set_ylim(-0.7, len(res) - 0.3)
        ax.invert_yaxis()
        ax.set_xlim(-0.04, 1.04)  # P = 0 or 1 stays clear of the frame
        ax.set_title(f"B = {lag}", fontsize=9)
        ax.set_xlabel(f"P({method_label(method)} > Y); 0.5 = no difference", fontsize=8)
        ax.tick_params(axis="x", labelbottom=True, labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    for ax in np.ravel(axes)[len(results_by_lag):]:
        ax.set_visible(False)
    figure_title(fig, f"P({method_label(method)} > Y) on {SCORE_SHORT.get(score, score)}, per lag depth, "
                      f"{plural(len(tasks), 'task')}")
    footnote(fig, [f"Left out at {'its' if len(ceiling) == 1 else 'their'} ceiling ({rule}): "
                   f"{', '.join(ceiling)}."] if ceiling else [])
    return save_figure(fig, run_dir, f"probability_of_improvement_{score}", figures_dir=figures_dir)


def plot_performance_profiles(run_dir: str, score: str = "final_eval_return", sources=None,
                              figures_dir: str | None = None) -> list[str]:
    """Fraction of runs x tasks with score > tau per method, with 95% CI bands, one panel per lag depth."""
    data = data_source(run_dir, sources)
    cells = reviewer.normalised_cells(score_rows(data), score, results.load_random_scores(data), order=sort_methods)
    if cells is None:
        raise NoData("several tasks and no reference (random_scores.json or ppo_clip at B = 1): cannot pool them")
    unit = ("normalised score (1 = sync PPO-Clip)" if cells.normalised
            else f"{SCORE_SHORT.get(score, score)} (raw: no reference)")
    if not cells.cells:
        raise NoData(f"no run of {score!r} is left after excluding diverged / no-score runs")
    reps = _reps(run_dir, sources)
    profiles = reviewer.performance_profiles(cells, reps)
    taus, lags, methods = profiles.taus, profiles.lags, cells.methods
    fig, axes = panel_figure(len(lags), ncols=2, panel_height=2.2, sharey=True)
    for k, (ax, lag) in enumerate(zip(np.ravel(axes), lags)):
        for i, m in enumerate(methods):
            if (m, lag) not in profiles.curves:
                continue
            prof, low, high = profiles.curves[(m, lag)]
            colour, _ = method_style(m, i)
            ax.plot(taus, prof, color=colour, lw=1.5, label=method_label(m))
            ax.fill_between(taus, low, high, color=colour, alpha=0.18, lw=0)
        ax.set_title(f"B = {lag}", fontsize=9)
        if k >= len(lags) - 2:
            ax.set_xlabel(f"τ: {unit}", fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for row in axes:
        row[0].set_ylabel("share of runs > τ", fontsize=8)
    place_legend(fig, axes, extra=[band_handle("95% CI")])
    figure_title(fig, f"Performance profiles of {SCORE_SHORT.get(score, score)} per lag depth, "
                      f"{plural(len(cells.tasks), 'task')}")
    return save_figure(fig, run_dir, f"performance_profiles_{score}", figures_dir=figures_dir)


def plot_iqm_curves(run_dir: str, sources=None, figures_dir: str | None = None) -> list[str]:
    """Sample efficiency: IQM of the normalised eval return vs env steps with 95% CI bands, per lag depth."""
    data = data_source(run_dir, sources)
    curves = [r for r in load_curves(data) if is_finite(r.get("eval_return"))]
    if not curves:
        raise NoData("no curves.csv rows with an eval_return")
    rows = score_rows(data)
    reps = _reps(run_dir, sources)
    iqm = reviewer.iqm_curves(curves, rows, results.load_random_scores(data), reps, order=sort_methods)
    if iqm is None:
        raise NoData("several tasks and no reference: cannot pool eval returns across tasks")
    lags, methods = iqm.lags, iqm.methods
    fig, axes = panel_figure(len(lags), ncols=2, panel_height=2.2, sharey=True)
    for k, (ax, lag) in enumerate(zip(np.ravel(axes), lags)):
        for i, m in enumerate(methods):
            if (m, lag) in iqm.series:
                xs, pts, los, his = iqm.series[(m, lag)]
                colour, marker = method_style(m, i)
                ax.plot(xs, pts, color=colour, marker=marker, ms=3, lw=1.5, label=method_label(m))
                ax.fill_between(xs, los, his, color=colour, alpha=0.18, lw=0)
        ax.set_title(f"B = {lag}", fontsize=9)
        if k >= len(lags) - 2:
            ax.set_xlabel("environment steps", fontsize=8)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    unit = "normalised eval return" if iqm.normalised else "eval return (raw: no reference)"
    for row in axes:
        row[0].set_ylabel(f"IQM of {unit}", fontsize=8)
    place_legend(fig, axes, extra=[band_handle("95% CI")])
    figure_title(fig, "IQM of the evaluation return vs environment steps, per lag depth, "
                      + plural(len({r["env"] for r in rows}), "task"))
    return save_figure(fig, run_dir, "iqm_sample_efficiency", figures_dir=figures_dir)


def _lag_model(run_dir: str, cell: dict, group: str | None = None) -> str:
    """The cell's lag model: its own column, else its group's configuration in ``run.json``'s identity
    (keyed by the group's subdirectory), else the command's flag."""
    if cell.get("lag_model"):
        return str(cell["lag_model"])
    meta = run_json(run_dir) if os.path.isdir(run_dir) else {}
    identity = meta.get("identity", {})
    if group is not None:
        key = next((k for k in identity if group == k or group.startswith(k + "/")), None)
        if key is not None and identity[key].get("lag_model"):
            return str(identity[key]["lag_model"])
    return str(meta.get("command", {}).get("lag_model") or "lag model not recorded")


def plot_staleness(run_dir: str, sources=None, figures_dir: str | None = None) -> list[str]:
    """Realised staleness: share of samples by age, one panel per lag model, one line per lag depth."""
    hist: dict = defaultdict(lambda: defaultdict(lambda: 0))
    for src in ([run_dir] if sources is None else list(sources)):
        for name, group in results.load_staleness(src).items():
            counts = np.asarray(group["counts"], np.float64).sum(axis=0)  # [cells, ages]
            for cell, row in zip(group["cells"], counts):
                key = (_lag_model(src, cell, name), int(cell.get("lag_depth", 0)))
                hist[key[0]][key[1]] = hist[key[0]][key[1]] + row
    if not hist:
        raise NoData("no staleness.npz under the run directory")
    models = sorted(hist)
    every = sorted({b for model in models for b in hist[model]})  # one colour per lag depth in every panel
    fig, axes = panel_figure(len(models), ncols=2, panel_height=2.2, sharey=True)
    cmap = matplotlib.colormaps["viridis"]
    for k, (ax, model) in enumerate(zip(np.ravel(axes), models)):
        for b in sorted(hist[model]):
            counts = np.asarray(hist[model][b], float)
            if counts.sum() <= 0:
                continue
            share = counts / counts.sum()
            last = int(np.flatnonzero(share)[-1]) + 1
            ax.step(np.arange(last), share[:last], where="mid", color=cmap(every.index(b) / max(1, len(every) - 1)),
                    lw=1.5, marker="o" if last == 1 else None, markersize=4, label=f"B = {b}")  # one age: a point
        ax.set_title(f"lag model: {model}", fontsize=9)
        if k >= len(models) - 2:
            ax.set_xlabel("age d = T − v (policy versions)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("share of samples", fontsize=8)
    handles, labels = zip(*sorted(zip(*unique_handles(axes)), key=lambda hl: int(hl[1].split("= ")[1])))
    place_legend(fig, axes, list(handles), list(labels))
    figure_title(fig, "Realised staleness: share of training samples by age")
    return save_figure(fig, run_dir, "staleness_histograms", figures_dir=figures_dir)

