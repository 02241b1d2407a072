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

from vaco_jax.analysis import results, reviewer
from vaco_jax.analysis.plotting import (
    CI_TEXT, SCORE_LABELS, SCORE_SHORT, NoData, bootstrap_reps, caption, data_source, figure_legend,
    figure_title, is_finite, method_label, method_style, new_figure, panel_grid_legend, read_summary, run_json,
    save_figure, score_rows, sort_methods)
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
    ax.set_title(f"{method_label(m)}, lag depth B = {lag}", fontsize=9)
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
        unit = f"{SCORE_LABELS.get(score, score)} (episode return)"
        if heat:
            fig, axes = new_figure(len(methods), len(lags), panel=(3.6, 3.2))
            means = [np.mean(v) for v in cell.values() if v]
            vmin, vmax = (min(means), max(means)) if means else (0.0, 1.0)
            image = None
            for li, lag in enumerate(lags):
                for mi, m in enumerate(methods):
                    image = _heat_panel(axes[li][mi], m, lag, epochs, minibatches, cell, n_div, n_miss, vmin, vmax)
            if image is not None:
                fig.colorbar(image, ax=axes, label=f"mean {unit}", shrink=0.8)
            cap = ["Cells: mean over non-diverged seeds with a score (n runs; 'div.' = diverged runs, 'no score' = "
                   "runs without this score, e.g. no episode ended; both excluded). Grey: no runs. "
                   "Gradient steps per phase = E × M."]
        else:
            axis, values, xlabel = (("num_epochs", epochs, "epochs per phase E") if len(epochs) > 1 else
                                    ("num_minibatches", minibatches, "minibatches per epoch M"))
            fixed = (f"M = {minibatches[0]}" if axis == "num_epochs" else f"E = {epochs[0]}")
            fig, axes = new_figure(len(lags), panel=(4.4, 3.5), sharey=True)
            log2 = all(v > 0 and (v & (v - 1)) == 0 for v in values) and len(values) > 1
            for ax, lag in zip(axes[0], lags):
                divs = []
                for i, m in enumerate(methods):
                    colour, marker = method_style(m, i)
                    xs, ys, ses = [], [], []
                    for v in values:
                        key = (m, lag, v if axis == "num_epochs" else epochs[0],
                               v if axis == "num_minibatches" else minibatches[0])
                        if n_div[key]:
                            divs.append(f"{method_label(m)} {axis.split('_')[1][0].upper()}={v}: {n_div[key]}")
                        if n_miss[key]:
                            divs.append(f"{method_label(m)} {axis.split('_')[1][0].upper()}={v}: "
                                        f"{n_miss[key]} no score")
                        if cell[key]:
                            mean, se = _mean_se(cell[key])
                            xs.append(v), ys.append(mean), ses.append(se)
                    if xs:
                        ax.errorbar(xs, ys, yerr=ses, color=colour, marker=marker, capsize=3, lw=1.6,
                                    label=method_label(m))
                if log2:
                    ax.set_xscale("log", base=2)
                ax.xaxis.set_major_locator(FixedLocator(values))
                ax.set_xticklabels([str(v) for v in values])
                ax.xaxis.set_minor_locator(NullLocator())
                ax.set_xlabel(f"{xlabel} ({fixed}{', log$_2$ scale' if log2 else ''})")
                ax.set_title(f"lag depth B = {lag}", fontsize=10)
                ax.grid(alpha=0.3)
                if divs:
                    ax.text(0.98, 0.02, "diverged or no score (excluded):\n" + "\n".join(divs),
                            transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="#b00000")
            axes[0][0].set_ylabel(f"mean {unit}")
            figure_legend(fig, axes)
            cap = ["Points: mean over non-diverged seeds; bars: ± 1 standard error."]
        figure_title(fig, f"Forward-lag sweep on {task}: {SCORE_LABELS.get(score, score)}\nby epochs E × "
                          f"minibatches M per phase (backward lag depth B = {', '.join(map(str, lags))}; "
                          f"{len(methods)} method{'s' if len(methods) > 1 else ''})")
        caption(fig, cap)
        paths += save_figure(fig, run_dir, f"forward_lag_{score}_{task}", figures_dir=figures_dir)
    return paths


# ----------------------------------------------------------------------------- (6)-(10) reviewer figures
# Each at most MAX_WIDTH inches wide: one column of a two-column paper page pair, or a full single column.

MAX_WIDTH = 7.0


def _narrow_figure(nrows: int, ncols: int, row_height: float, sharex=False, sharey=False):
    fig = Figure(figsize=(MAX_WIDTH, row_height * nrows + 1.6), layout="constrained")
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
    fig, axes = _narrow_figure(len(lags), len(aggs), 0.28 * len(methods) + 0.7, sharey=True)
    for li, lag in enumerate(lags):
        for ai, agg in enumerate(aggs):
            ax = axes[li][ai]
            for i, m in enumerate(methods):
                if (m, lag, agg) in est.points:
                    colour, _ = method_style(m, i)
                    p, lo, hi = est.points[(m, lag, agg)]
                    ax.plot([lo, hi], [i, i], color=colour, lw=5, alpha=0.45, solid_capstyle="butt")
                    ax.plot([p], [i], "|", color="k", ms=9)
            ax.set_yticks(range(len(methods)), [method_label(m) for m in methods], fontsize=7)
            ax.set_ylim(-0.7, len(methods) - 0.3)
            ax.invert_yaxis()
            ax.tick_params(axis="x", labelsize=7)
            ax.grid(axis="x", alpha=0.3)
            if li == 0:
                ax.set_title("IQM" if agg == "iqm" else agg.replace("_", " "), fontsize=9)
            if ai == 0:
                ax.set_ylabel(f"B = {lag}", fontsize=9)
    unit = {"normalized": "normalised scores (1 = sync PPO-Clip)", "own_b1": "scores / own B = 1 score",
            "raw": "raw episode returns"}.get(normalization, normalization)
    figure_title(fig, f"Interval estimates of {SCORE_SHORT.get(score, score)}, {unit}, per lag depth", fontsize=10)
    lines = [f"Bars: {CI_TEXT}; ticks: point estimates. Diverged runs and runs with no score are excluded."]
    if n_tasks == 1:
        lines.append("One task: median and mean of the per-task mean coincide, so the median is not shown; IQM and "
                     "mean are over the runs of that task.")
    caption(fig, lines)
    return save_figure(fig, run_dir, f"interval_estimates_{score}_{normalization}", figures_dir=figures_dir)


def plot_probability_of_improvement(run_dir: str, score: str = "final_eval_return", method: str = "vaco",
                                    sources=None, figures_dir: str | None = None) -> list[str]:
    """P(``method`` > each other method) with 95% CIs, one panel per lag depth."""
    rows = score_rows(data_source(run_dir, sources))
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
        for i, (o, p, lo, hi) in enumerate(res):
            colour, _ = method_style(o, i)
            ax.plot([lo, hi], [i, i], color=colour, lw=5, alpha=0.5, solid_capstyle="butt")
            ax.plot([p], [i], "|", color="k", ms=9)
        ax.axvline(0.5, color="0.3", ls=":", lw=1)
        ax.set_yticks(range(len(res)), [method_label(o) for o, *_ in res], fontsize=7)
        ax.set_ylim(-0.7, len(res) - 0.3)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_title(f"lag depth B = {lag}", fontsize=9)
        ax.set_xlabel(f"P({method_label(method)} > Y)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    for ax in np.ravel(axes)[len(results_by_lag):]:
        ax.set_visible(False)
    figure_title(fig, f"Probability of improvement of {method_label(method)} over each method Y "
                      f"({SCORE_SHORT.get(score, score)}, {len(tasks)} task{'s' if len(tasks) > 1 else ''})",
                 fontsize=10)
    caption(fig, [f"Bars: 95% bootstrap CI (each method's runs resampled independently within each task, {reps} "
                  "replicates); ticks: point estimates. P is computed per task (Mann-Whitney) and averaged over "
                  "tasks, so it is the same on raw and normalised scores. 0.5 = no difference."])
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
    nrows, ncols = _grid(len(lags))
    fig, axes = _narrow_figure(nrows, ncols, 2.4, sharey=True)
    for ax, lag in zip(np.ravel(axes), lags):
        for i, m in enumerate(methods):
            if (m, lag) not in profiles.curves:
                continue
            prof, low, high = profiles.curves[(m, lag)]
            colour, _ = method_style(m, i)
            ax.plot(taus, prof, color=colour, lw=1.5, label=method_label(m))
            ax.fill_between(taus, low, high, color=colour, alpha=0.18, lw=0)
        ax.set_title(f"lag depth B = {lag}", fontsize=9)
        ax.set_xlabel(f"τ ({unit})", fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for row in axes:
        row[0].set_ylabel("fraction of runs > τ", fontsize=8)
    panel_grid_legend(axes, len(lags))
    figure_title(fig, f"Performance profiles of {SCORE_SHORT.get(score, score)} per lag depth", fontsize=10)
    caption(fig, [f"Lines: fraction of runs × tasks scoring above τ; bands: pointwise {CI_TEXT} ({reps} "
                  "replicates). Diverged runs and runs with no score are excluded."])
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
    nrows, ncols = _grid(len(lags))
    fig, axes = _narrow_figure(nrows, ncols, 2.4, sharey=True)
    for ax, lag in zip(np.ravel(axes), lags):
        for i, m in enumerate(methods):
            if (m, lag) in iqm.series:
                xs, pts, los, his = iqm.series[(m, lag)]
                colour, marker = method_style(m, i)
                ax.plot(xs, pts, color=colour, marker=marker, ms=3, lw=1.5, label=method_label(m))
                ax.fill_between(xs, los, his, color=colour, alpha=0.18, lw=0)
        ax.set_title(f"lag depth B = {lag}", fontsize=9)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    unit = "normalised eval return" if iqm.normalised else "eval return (raw: no reference)"
    for row in axes:
        row[0].set_ylabel(f"IQM of {unit}", fontsize=8)
    panel_grid_legend(axes, len(lags))
    figure_title(fig, "Sample efficiency: IQM of the evaluation return vs environment steps", fontsize=10)
    caption(fig, [f"Lines: IQM over runs × tasks at each evaluation; bands: {CI_TEXT} ({reps} replicates). "
                  + ("Normalised per task with the final-score reference (1 = mean final eval return of sync "
                     "PPO-Clip). " if iqm.normalised else "")
                  + "Diverged runs are excluded."])
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
    nrows, ncols = _grid(len(models))
    fig, axes = _narrow_figure(nrows, ncols, 2.4, sharey=True)
    cmap = matplotlib.colormaps["viridis"]
    for ax, model in zip(np.ravel(axes), models):
        depths = sorted(hist[model])
        for j, b in enumerate(depths):
            counts = np.asarray(hist[model][b], float)
            if counts.sum() <= 0:
                continue
            share = counts / counts.sum()
            last = int(np.flatnonzero(share)[-1]) + 1
            ax.step(np.arange(last), share[:last], where="mid", color=cmap(j / max(1, len(depths) - 1)), lw=1.5,
                    marker="o" if last == 1 else None, markersize=4, label=f"B = {b}")  # one age: a point
        ax.set_title(f"lag model: {model}", fontsize=9)
        ax.set_xlabel("realised age d = T − v (policy versions)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
    for row in axes:
        row[0].set_ylabel("share of samples", fontsize=8)
    for ax in np.ravel(axes)[len(models):]:
        ax.set_visible(False)
    figure_title(fig, "Realised staleness: share of training samples by age", fontsize=10)
    caption(fig, ["Summed over every chunk, cell (seed), method and task of each lag depth; ages are clipped to the "
                  "phase index, so early phases hold no sample older than their index."])
    return save_figure(fig, run_dir, "staleness_histograms", figures_dir=figures_dir)
