"""Figures of a run directory (docs/evaluation.md): the lag-sweep figures, drawn from the files on disk.

Every function reads a run directory written by :mod:`vaco_jax.driver.runner` and
:func:`vaco_jax.analysis.tables.summarise`, saves one figure as PNG *and* PDF under ``RUN/figures/`` (or
under ``figures_dir`` when given) and returns the paths it wrote. ``sources`` (a list of run
directories) makes a function read the score and curve rows of all of them, merged (e.g. a sweep
whose shards wrote into separate directories), while ``run_dir`` is where the summary is read and
the figures go. Figures are meant to be read at a glance: a one-line title names the score, the
normalisation, the tasks and the runs behind each point; the legend (outside the panels) says what
each line, band and reference line is; a footnote appears only when runs were left out (diverged,
no score) or pooled across settings. What the figures show is described once, in docs/evaluation.md
("Figures"). The files carry no version string or date, so the same data give the same bytes.

    plot_aggregate_vs_lag   (1) aggregate score vs lag depth, one line per method, 95% CI bands
    plot_learning_curves    (2) eval return vs env steps, one panel per lag depth (per task)
    plot_filtering_vs_lag   (3) filtered fraction (VACO family) and clip fraction vs lag depth
    plot_tv_vs_lag          (4) TV estimates to beta and to pi_T vs lag depth
    make_all                every figure whose data exists: these and (5)-(10) of
                            :mod:`vaco_jax.analysis.reviewer_figures` (forward lag, interval estimates,
                            probability of improvement, performance profiles, IQM curves, staleness)
    plot_sim_vs_real        the sim-vs-real study's figure (docs/real_async.md)
    plot_deep_lag           the deep-lag study's figure (docs/real_async.md)

Figures only draw: the numbers they show come from ``summary.csv`` / ``diagnostics.csv``
(:mod:`vaco_jax.analysis.tables`) or from the pure functions of :mod:`vaco_jax.analysis.reviewer`
(probability of improvement, performance profiles, IQM curves, forward-lag cells), called on the
rows a figure loaded.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state), so they never pop up and
never leak; what every figure shares (labels, styles, the lag axis and its dodge, layout, legends, saving) is in
:mod:`vaco_jax.analysis.plotting`.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import Sequence

import numpy as np
from matplotlib.ticker import EngFormatter

from vaco_jax.analysis.plotting import (
    AGGREGATE_ORDER, FIGURES, HPARAMS, MISSING_TEXT, SCORE_SHORT, SETTING_SEP,
    NoData, band_handle, bootstrap_reps, count_text, data_source, dodge_factors, empty_reason, figure_title,
    fold_settings, footnote, is_diverged, is_finite, line_handle, method_label, method_style, new_figure,
    panel_figure, place_legend, plural, pooled_note, read_analysis_table, read_summary, save_figure, sentence,
    set_lag_axis, sort_methods, variant_keys, variant_label)
from vaco_jax.analysis.results import load_curves, load_scores
from vaco_jax.analysis.reviewer_figures import (plot_forward_lag, plot_interval_estimates, plot_iqm_curves,
                                                plot_performance_profiles, plot_probability_of_improvement,
                                                plot_staleness)


# ----------------------------------------------------------------------------- (1) aggregate vs lag
def _one_task_panels(rows: list[dict], aggs: list[str]) -> list[str]:
    """The panels that say something different with one task: the IQM, and the mean where it differs
    from the IQM (with 3 seeds they are the same number)."""
    def points(agg):
        return {(r["method"], int(r["lag_depth"])): r["point"] for r in rows if r["aggregate"] == agg}

    keep = [a for a in aggs if a == "iqm"]
    if "mean" in aggs and (not keep or any(not np.isclose(v, points("iqm").get(k, np.nan), equal_nan=True)
                                           for k, v in points("mean").items())):
        keep.append("mean")
    return keep or aggs[:1]


PANEL_TITLES = {"iqm": "IQM", "median": "median of task means", "mean": "mean of task means",
                "optimality_gap": "optimality gap (lower is better)"}


def plot_aggregate_vs_lag(run_dir: str, score: str = "final_eval_return",
                          normalization: str | None = None, sources=None, figures_dir: str | None = None) -> list[str]:
    """The main lag-sweep figure: one panel per aggregate, one line per method with 95% CI bands,
    methods dodged apart at each lag depth."""
    rows = [r for r in read_summary(run_dir) if r["score"] == score]
    if not rows:
        raise NoData(f"summary.csv has no rows for score {score!r}")
    norms = {r["normalization"] for r in rows}
    normalization = normalization or ("normalized" if "normalized" in norms else "raw")
    if normalization not in norms:
        raise NoData(f"summary.csv has no {normalization!r} rows for {score!r} (has: {sorted(norms)})")
    rows = [r for r in rows if r["normalization"] == normalization]
    normalized = normalization == "normalized"
    own = normalization == "own_b1"
    aggs = [a for a in AGGREGATE_ORDER if any(r["aggregate"] == a for r in rows)]
    methods = sort_methods({r["method"] for r in rows})
    lags = sorted({int(r["lag_depth"]) for r in rows})
    n_tasks = max(int(r["n_tasks"]) for r in rows)
    if not aggs:
        raise NoData(f"no cell of {score!r} has a run left: {empty_reason(rows)}")
    if n_tasks == 1:  # the median and mean of one task's mean are that mean, the gap is 1 minus it: one panel
        aggs = _one_task_panels(rows, aggs)

    fig, axes = panel_figure(len(aggs), ncols=2, panel_height=2.9 if len(aggs) == 1 else 2.4)
    drawn = [m for m in methods if any(r["method"] == m and is_finite(r["point"]) for r in rows)]
    shift = dict(zip(drawn, dodge_factors(lags, len(drawn))))
    runs = []
    unit = ("normalised score" if normalized else "score / own B = 1 score" if own
            else SCORE_SHORT.get(score, score))
    for k, (ax, agg) in enumerate(zip(np.ravel(axes), aggs)):
        for i, m in enumerate(methods):
            pts = sorted((r for r in rows if r["method"] == m and r["aggregate"] == agg and is_finite(r["point"])),
                         key=lambda r: int(r["lag_depth"]))
            if not pts:
                continue
            colour, marker = method_style(m, i)
            x = [int(r["lag_depth"]) * shift[m] for r in pts]
            runs += [int(r["n_runs"]) for r in pts]
            ax.plot(x, [r["point"] for r in pts], color=colour, marker=marker, lw=1.6, ms=5, label=method_label(m))
            ax.fill_between(x, [r["low"] for r in pts], [r["high"] for r in pts], color=colour, alpha=0.18, lw=0)
        if (normalized or own) and agg != "optimality_gap":
            ax.axhline(1.0, color="0.3", ls=":", lw=1)
        if normalized and agg == "optimality_gap":
            ax.axhline(0.0, color="0.3", ls=":", lw=1)
        set_lag_axis(ax, lags, label=k >= len(aggs) - 2 or len(aggs) <= 2, dodged=len(drawn))
        if k % 2 == 0:
            ax.set_ylabel(unit)
        ax.set_title("mean" if agg == "mean" and n_tasks == 1 else PANEL_TITLES[agg], fontsize=9)
        ax.grid(alpha=0.3)
    extra = [band_handle("95% CI")]
    if normalized:
        extra.append(line_handle("1.0 = sync PPO-Clip (B = 1)"))
    if own:
        extra.append(line_handle("1.0 = own B = 1 score"))
    place_legend(fig, axes, extra=extra)
    kind = "normalised" if normalized else "share of own B = 1 score" if own else "raw"
    figure_title(fig, f"{sentence(SCORE_SHORT.get(score, score))} vs lag depth: {kind}, "
                      f"{plural(n_tasks, 'task')}, {count_text(runs, 'run')} per point")
    diverged = sorted({(m, int(r["lag_depth"]), int(r["n_diverged"])) for m in methods for r in rows
                       if r["method"] == m and is_finite(r.get("n_diverged")) and int(r["n_diverged"]) > 0})
    all_div = sorted({(r["method"], int(r["lag_depth"])) for r in rows if r["aggregate"] == "all_diverged"})
    missing = sorted({(m, int(r["lag_depth"]), int(r["n_missing"])) for m in methods for r in rows
                      if r["method"] == m and is_finite(r.get("n_missing")) and int(r["n_missing"]) > 0})
    no_score = sorted({(r["method"], int(r["lag_depth"])) for r in rows
                       if r["aggregate"] in ("all_missing", "none_left")})
    notes = []
    if diverged:
        notes.append("Diverged runs left out: " + "; ".join(f"{method_label(m)} B = {b}: {plural(d, 'run')}"
                                                            for m, b, d in diverged) + ".")
    if all_div:
        notes.append("Every run diverged (no point): " + "; ".join(f"{method_label(m)} B = {b}"
                                                                   for m, b in all_div) + ".")
    if missing:
        notes.append(f"Runs with no score left out ({MISSING_TEXT.get(score, 'not computable')}): "
                     + "; ".join(f"{method_label(m)} B = {b}: {plural(k, 'run')}" for m, b, k in missing) + ".")
    if no_score:
        notes.append("No run left (no point): " + "; ".join(f"{method_label(m)} B = {b}" for m, b in no_score) + ".")
    if not _separated(rows):
        try:
            notes.append(pooled_note(load_scores(data_source(run_dir, sources))))
        except OSError:
            pass
    footnote(fig, notes)
    return save_figure(fig, run_dir, f"aggregate_vs_lag_{score}_{normalization}", figures_dir=figures_dir)


# ----------------------------------------------------------------------------- (2) learning curves

def _curve_series(rows: Sequence[dict], metric: str, keys: Sequence[str]):
    """{(method, variant): {lag: (x, mean, se, n_runs, n_diverged)}} over the runs (cells) of one task."""
    cells: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r in rows:
        variant = tuple(r.get(k) for k in keys)
        cell = (r["method"], variant, int(r["lag_depth"]), r.get("seed"),
                *(r.get(h) for h in HPARAMS if h not in keys))
        cells[cell][int(r["chunk"])] = r  # a resumed group may repeat a chunk: the last row wins
    out: dict[tuple, dict[int, tuple]] = defaultdict(dict)
    grouped: dict[tuple, list] = defaultdict(list)
    for cell, chunks in cells.items():
        grouped[(cell[0], cell[1], cell[2])].append(chunks)
    for (method, variant, lag), runs in grouped.items():
        kept = [c for c in runs if not any(is_diverged(r.get("diverged")) for r in c.values())]
        n_div = len(runs) - len(kept)
        chunk_ids = sorted({k for c in kept for k in c})
        x, mean, se = [], [], []
        for k in chunk_ids:
            vals = np.array([float(c[k][metric]) for c in kept if k in c], float)
            vals = vals[np.isfinite(vals)]
            if not len(vals):
                continue
            x.append(float(np.mean([float(c[k]["env_steps"]) for c in kept if k in c])))
            mean.append(float(vals.mean()))
            se.append(float(vals.std(ddof=1) / np.sqrt(len(vals))) if len(vals) > 1 else 0.0)
        out[(method, variant)][lag] = (np.array(x), np.array(mean), np.array(se), len(kept), n_div)
    return out


def plot_learning_curves(run_dir: str, task: str | None = None, sources=None,
                         figures_dir: str | None = None) -> list[str]:
    """Per task: one panel per lag depth, eval return vs env steps, one line per method
    (mean over seeds, shaded ± standard error); diverged runs are excluded and counted."""
    curves = load_curves(data_source(run_dir, sources))
    if not curves:
        raise NoData(f"no curves.csv under {run_dir}")
    tasks = sorted({r["env"] for r in curves}) if task is None else [task]
    try:
        keys = variant_keys(load_scores(data_source(run_dir, sources)))
    except OSError:
        keys = []
    paths = []
    for t in tasks:
        rows = [r for r in curves if r["env"] == t]
        if not rows:
            raise NoData(f"no curve rows for task {t!r}")
        metric = "eval_return" if any(is_finite(r.get("eval_return")) for r in rows) else "train_return"
        series = _curve_series(rows, metric, keys)
        lags = sorted({lag for s in series.values() for lag in s})
        fig, axes = panel_figure(len(lags), ncols=2 if len(lags) <= 4 else 3, sharey=True)
        order = sort_methods({m for m, _ in series})
        names = sorted(series, key=lambda mv: (order.index(mv[0]), str(mv[1])))
        linestyles = ("-", "--", "-.", ":")
        divs = []
        ncols = axes.shape[1]
        for k, (ax, lag) in enumerate(zip(np.ravel(axes), lags)):
            runs = []
            for i, (m, variant) in enumerate(names):
                if lag not in series[(m, variant)]:
                    continue
                x, mean, se, n, n_div = series[(m, variant)][lag]
                runs.append(n)
                if n_div:
                    divs.append(f"{variant_label(m, variant, keys)} B = {lag}: {plural(n_div, 'run')}")
                if not len(x):
                    continue
                colour, marker = method_style(m, order.index(m))
                vi = sorted({v for mm, v in names if mm == m}, key=str).index(variant)
                ax.plot(x, mean, color=colour, lw=1.5, ls=linestyles[vi % len(linestyles)], marker=marker,
                        ms=3.5, markevery=max(1, len(x) // 12), label=variant_label(m, variant, keys))
                ax.fill_between(x, mean - se, mean + se, color=colour, alpha=0.18, lw=0)
            ax.set_title(f"B = {lag} ({count_text(runs, 'run')} per line)", fontsize=9)
            if k >= len(lags) - ncols:
                ax.set_xlabel("environment steps")
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 250k, 1M, ...
            ax.grid(alpha=0.3)
        ylabel = "evaluation return" if metric == "eval_return" else "training return (lagged actors)"
        for row in axes:
            row[0].set_ylabel(ylabel)
        place_legend(fig, axes, extra=[band_handle("±1 standard error")])
        figure_title(fig, f"{t}: {ylabel} vs environment steps"
                     + ("" if metric == "eval_return" else " (evaluation was off)"))
        footnote(fig, ["Diverged runs left out: " + "; ".join(divs) + "."] if divs else [])
        paths += save_figure(fig, run_dir, f"learning_curves_{t}", figures_dir=figures_dir)
    return paths


# ----------------------------------------------------------------------------- (3), (4) diagnostics vs lag

def read_diagnostics(run_dir: str) -> list[dict]:
    return fold_settings(read_analysis_table(run_dir, "diagnostics.csv"))


def _separated(rows: Sequence[dict]) -> bool:
    """Whether these summary / diagnostics rows keep several settings apart (then nothing is pooled)."""
    return any(SETTING_SEP in str(r.get("method")) for r in rows)


def _diag_panel(ax, rows: Sequence[dict], column: str, lags: Sequence[int], methods: Sequence[str]) -> list[int]:
    """Error-bar lines of one diagnostic per method, dodged apart at each lag depth (``methods``: every
    method of the figure, so a method keeps its offset in each panel); returns the run counts behind
    its points."""
    shift = dict(zip(methods, dodge_factors(lags, len(methods))))
    runs, top = [], 0.0
    for i, m in enumerate(methods):
        pts = sorted((r for r in rows if r["method"] == m and is_finite(r.get(column))),
                     key=lambda r: int(r["lag_depth"]))
        if not pts:
            continue
        colour, marker = method_style(m, i)
        se = [float(r.get(column + "_se")) if is_finite(r.get(column + "_se")) else 0.0 for r in pts]
        ax.errorbar([int(r["lag_depth"]) * shift[m] for r in pts], [float(r[column]) for r in pts], yerr=se,
                    color=colour, marker=marker, ms=5, lw=1.5, capsize=2.5, label=method_label(m))
        runs += [int(r["n_runs"]) for r in pts]
        top = max([float(r[column]) + e for r, e in zip(pts, se)] + [top])
    ax.set_ylim(0.0, top * 1.08 if top > 0 else 1.0)
    set_lag_axis(ax, lags, dodged=len(methods))
    ax.grid(alpha=0.3)
    return runs


def _diagnostics_figure(run_dir: str, panels: Sequence[tuple[str, str, str]], title: str, name: str,
                        sources=None, figures_dir: str | None = None) -> list[str]:
    rows = read_diagnostics(run_dir)
    panels = [p for p in panels if any(is_finite(r.get(p[0])) for r in rows)]
    if not panels:
        raise NoData(f"diagnostics.csv has none of the columns {name} needs")
    lags = sorted({int(r["lag_depth"]) for r in rows})
    methods = sort_methods({r["method"] for r in rows if any(is_finite(r.get(p[0])) for p in panels)})
    fig, axes = panel_figure(len(panels), ncols=2)
    runs = []
    for ax, (column, panel_title, ylabel) in zip(np.ravel(axes), panels):
        runs += _diag_panel(ax, rows, column, lags, methods)
        ax.set_title(panel_title, fontsize=9)
        ax.set_ylabel(ylabel)
    place_legend(fig, axes, extra=[line_handle("bars: ±1 standard error", color="0.3", ls="-", marker="|")])
    figure_title(fig, f"{title}, {count_text(runs, 'run')} per point")
    notes = []
    if not _separated(rows):
        try:
            notes.append(pooled_note(load_scores(data_source(run_dir, sources))))
        except OSError:
            pass
    footnote(fig, notes)
    return save_figure(fig, run_dir, name, figures_dir=figures_dir)


def plot_filtering_vs_lag(run_dir: str, sources=None, figures_dir: str | None = None) -> list[str]:
    """Filtered fraction (VACO's TV filter) and clip fraction (PPO family, decoupled, SPO) vs lag depth."""
    panels = [("mean_filtered_fraction", "filtered: TV filter (VACO family)", "share of samples"),
              ("mean_clip_fraction", r"clipped: $|r - 1| > \epsilon$ (PPO family)", "share of samples")]
    return _diagnostics_figure(run_dir, panels, "Share of each batch filtered or clipped vs lag depth",
                               "filtering_vs_lag", sources=sources, figures_dir=figures_dir)


def plot_tv_vs_lag(run_dir: str, sources=None, figures_dir: str | None = None) -> list[str]:
    """TV estimates of the current policy to the behaviour policy β and to the phase's learner π_T."""
    panels = [("mean_tv_behaviour", r"$\widehat{\mathrm{TV}}(\pi_\theta, \beta)$: to the actors' policy",
               "TV estimate"),
              ("mean_tv_learner", r"$\widehat{\mathrm{TV}}(\pi_\theta, \pi_T)$: to the phase's learner",
               "TV estimate"),
              ("mean_mean_staleness", "mean staleness of the data", r"versions behind $\pi_T$")]
    return _diagnostics_figure(run_dir, panels, "Total-variation estimates and staleness vs lag depth",
                               "tv_vs_lag", sources=sources, figures_dir=figures_dir)


# ----------------------------------------------------------------------------- everything

def make_all(run_dirs, summarise: bool | None = None, reps: int | None = None, out: str | None = None,
             figures_dir: str | None = None) -> list[str]:
    """Draw every figure whose data exists; prints a note for each one skipped.

    ``run_dirs``: one run directory or several whose score and curve rows are merged (the shards of
    a sweep written into separate directories); ``summary.csv``, ``diagnostics.csv`` and
    ``figures/`` go into ``out`` (default: the first directory).
    ``summarise``: re-run :func:`vaco_jax.analysis.tables.summarise` first (True), never (False), or only
    when ``summary.csv`` is missing (None, the default). ``reps``: bootstrap replicates for it
    (default: the run's ``bootstrap_reps`` from ``run.json``, else 2000). ``figures_dir``: where the
    figures go instead of ``out/figures/``.
    """
    from vaco_jax.analysis import tables
    sources = [run_dirs] if isinstance(run_dirs, (str, os.PathLike)) else [str(d) for d in run_dirs]
    run_dir = out or sources[0]
    data = sources[0] if sources == [run_dir] else sources
    summary_ok = tables.summarise_if_needed(data, run_dir, summarise, reps or bootstrap_reps(sources) or 2000,
                                            log=lambda line: print(f"[plots] {line}"))
    paths: list[str] = []
    merged = None if data == run_dir else data

    def attempt(name, fn, *args):
        try:
            paths.extend(fn(run_dir, *args, sources=merged, figures_dir=figures_dir))
        except NoData as e:
            print(f"[plots] skipped {name}: {e}")

    try:
        summary = read_summary(run_dir) if summary_ok else []
    except NoData as e:
        print(f"[plots] skipped aggregate-vs-lag figures: {e}")
        summary = []
    combos = []
    for r in summary:
        key = (r["score"], r["normalization"])
        if key not in combos:
            combos.append(key)
    order = {s: i for i, s in enumerate(tables.SCORES)}
    combos.sort(key=lambda k: (order.get(k[0], len(order)), k[1] != "normalized"))
    for score, norm in combos:
        attempt(f"aggregate vs lag ({score}, {norm})", plot_aggregate_vs_lag, score, norm)
    attempt("learning curves", plot_learning_curves)
    if summary_ok:
        attempt("filtering vs lag", plot_filtering_vs_lag)
        attempt("TV vs lag", plot_tv_vs_lag)
    try:
        scores = load_scores(data)
    except OSError:
        scores = []
    if any("num_epochs" in r and "num_minibatches" in r for r in scores):
        attempt("forward lag", plot_forward_lag)
    if summary:
        attempt("interval estimates", plot_interval_estimates)
    if scores:
        attempt("probability of improvement", plot_probability_of_improvement)
        if any(is_finite(r.get("auc_eval_return")) for r in scores):  # the score a task's ceiling does not tie
            attempt("probability of improvement (AUC)", plot_probability_of_improvement, "auc_eval_return")
        attempt("performance profiles", plot_performance_profiles)
        attempt("IQM sample efficiency", plot_iqm_curves)
    attempt("staleness histograms", plot_staleness)
    return paths


def plot_sim_vs_real(out_dir: str, rows: Sequence[dict], histograms: dict[str, dict[str, Sequence[float]]],
                     score: str = "auc_eval_return") -> list[str]:
    """The sim-vs-real study (docs/real_async.md), from what its report computed. Top: per real
    configuration, the share of samples by age of each series in ``histograms[configuration]`` (the
    real runs' pooled histogram beside the ages the simulator realised). Middle: per method, the real
    runs' mean score beside each simulated counterpart's. Bottom: each counterpart's scaled
    difference from the real runs with its CI and the equivalence margin."""
    configs = list(histograms)
    methods = sorted({r["method"] for r in rows})
    colour = {"histogram": "C0", "uniform": "C1", "control": "C2"}  # one colour per counterpart in every panel

    def colour_of(label: str) -> str:
        return colour.get(label.split(": ")[-1], "0.25")  # "simulated: <variant>", else the real runs

    fig, axes = new_figure(max(len(configs), len(methods)), 3, panel_height=2.2)
    for ax, name in zip(axes[0], configs):
        series = {label: np.asarray(h, float) for label, h in histograms[name].items() if np.sum(h) > 0}
        n = max(int(np.flatnonzero(h)[-1]) + 1 for h in series.values())  # up to the oldest age drawn
        ages, width = np.arange(n), 0.8 / len(series)
        for j, (label, h) in enumerate(series.items()):
            share = np.pad(h / h.sum(), (0, max(0, n - len(h))))[:n]
            ax.bar(ages + (j - (len(series) - 1) / 2) * width, share, width=width, label=label,
                   color=colour_of(label))
        ax.set_title(name, fontsize=10)
        ax.set_xticks(ages)
        ax.set_xlabel("age (versions)")
        ax.set_ylabel("share of samples")
    for ax, method in zip(axes[1], methods):
        mine = [r for r in rows if r["method"] == method and r["score"] == score]
        variants = list(dict.fromkeys(r["variant"] for r in mine))
        real = {r["configuration"]: r["real_mean"] for r in mine}
        ax.plot([configs.index(c) for c in real], list(real.values()), "s", color="0.25", label="real runs")
        for j, v in enumerate(variants):
            pts = [r for r in mine if r["variant"] == v]
            ax.plot(np.array([configs.index(r["configuration"]) for r in pts]) + (j - 1) * 0.15,
                    [r["sim_mean"] for r in pts], "o", color=colour.get(v), label=f"simulated: {v}")
        ax.set_xticks(range(len(configs)), configs, fontsize=8)
        ax.set_title(method_label(method), fontsize=10)
        ax.set_ylabel(f"mean {SCORE_SHORT.get(score, score)}")
    for ax, method in zip(axes[2], methods):
        mine = [r for r in rows if r["method"] == method and r["score"] == score]
        variants = list(dict.fromkeys(r["variant"] for r in mine))
        for j, v in enumerate(variants):
            pts = [r for r in mine if r["variant"] == v]
            x = np.array([configs.index(r["configuration"]) for r in pts]) + (j - 1) * 0.2
            y = np.array([r["scaled_difference"] for r in pts])
            err = np.array([[y_ - r["low"] for y_, r in zip(y, pts)], [r["high"] - y_ for y_, r in zip(y, pts)]])
            ax.errorbar(x, y, yerr=err, fmt="o", capsize=3, color=colour.get(v), label=f"simulated: {v}")
        bound = rows[0].get("margin", 0.1) if rows else 0.1
        ax.axhspan(-bound, bound, color="0.9", zorder=0)
        ax.axhline(0.0, color="0.5", lw=0.8)
        ax.set_xticks(range(len(configs)), configs, fontsize=8)
        ax.set_title(method_label(method), fontsize=10)
        ax.set_ylabel("(sim - real) / real lockstep")
    for row, used in ((axes[0], len(configs)), (axes[1], len(methods)), (axes[2], len(methods))):
        for ax in row[used:]:
            ax.set_visible(False)
    from matplotlib.patches import Patch
    place_legend(fig, axes, extra=[(Patch(facecolor="0.9"), "grey: equivalence margin")])
    figure_title(fig, f"Simulator vs a real actor-learner: lag and {SCORE_SHORT.get(score, score)}")
    return save_figure(fig, out_dir, f"sim_vs_real_{score}", figures_dir=os.path.join(out_dir, FIGURES))


def plot_deep_lag(out_dir: str, rows: Sequence[dict], histograms: dict[str, dict[str, Sequence[float]]],
                  margin: float) -> list[str]:
    """The deep-lag study (docs/real_async.md), from what its report computed. Top: per deep configuration,
    the share of samples by age of the real runs (pooled) and of each simulated counterpart (the ages the
    simulator realised). Bottom: per deep configuration, simulated - real of the contrast and of each
    method's retention, one interval per counterpart, against the equivalence margin (the grey band)."""
    from matplotlib.patches import Patch

    from vaco_jax.analysis.plotting import interval_bars

    configs = list(histograms)
    colour = {"histogram": "C0", "uniform": "C1", "control": "C2"}  # one colour per counterpart in every panel
    layout = {r["configuration"]: r.get("layout") for r in rows}

    def title(name):
        return f"{name}: {layout[name]}" if layout.get(name) and layout[name] != name else name

    fig, axes = new_figure(max(1, len(configs)), 2, panel_height=2.3)
    for ax, name in zip(axes[0], configs):
        series = {label: np.asarray(h, float) for label, h in histograms[name].items() if np.sum(h) > 0}
        n = max(int(np.flatnonzero(h)[-1]) + 1 for h in series.values())
        edges = np.arange(n + 1) - 0.5
        for label, h in series.items():
            share = np.pad(h / h.sum(), (0, max(0, n - len(h))))[:n]
            variant = label.split(": ")[-1]
            if variant in colour:
                ax.stairs(share, edges, color=colour[variant], lw=1.4, label=label,
                          ls="--" if variant == "control" else "-")
            else:
                ax.stairs(share, edges, fill=True, color="0.8", label=label)
        ax.set_title(title(name), fontsize=10)
        ax.set_xlabel("age (versions)")
        ax.set_ylabel("share of samples")
    for ax, name in zip(axes[1], configs):
        mine = [r for r in rows if r["configuration"] == name]
        quantities = list(dict.fromkeys((r["quantity"], r["method"]) for r in mine))
        variants = list(dict.fromkeys(r["variant"] for r in mine))
        bars = []
        for i, q in enumerate(quantities):
            for j, v in enumerate(variants):
                r = next((r for r in mine if (r["quantity"], r["method"]) == q and r["variant"] == v), None)
                if r is not None:
                    y = i + (j - (len(variants) - 1) / 2) * 0.22
                    bars.append((y, r["difference"], r["low"], r["high"], colour.get(v, "0.25")))
        ax.axvspan(-margin, margin, color="0.9", zorder=0)
        ax.axvline(0.0, color="0.5", lw=0.8)
        interval_bars(ax, bars)
        labels = ["C: " + " − ".join(method_label(m) for m in q[1].split(" - ")) if q[0] == "contrast"
                  else f"R: {method_label(q[1])}" for q in quantities]
        ax.set_yticks(range(len(quantities)), labels, fontsize=8)
        ax.set_ylim(len(quantities) - 0.5, -0.5)
        ax.set_title(title(name), fontsize=10)
        ax.set_xlabel("simulated − real")
    from matplotlib.lines import Line2D
    handles = [Patch(facecolor="0.8"), *[Line2D([], [], color=c, lw=5, alpha=0.5) for c in colour.values()],
               Patch(facecolor="0.9")]
    labels = ["real runs (pooled)", *[f"simulated: {v}" for v in colour], f"grey: margin ±{margin:g}"]
    place_legend(fig, axes, handles, labels)
    figure_title(fig, "Deep lag: real and simulated ages; simulated − real contrast C and retention R")
    return save_figure(fig, out_dir, "deep_lag", figures_dir=os.path.join(out_dir, FIGURES))
