"""Figures of a run directory (docs/evaluation.md): the lag-sweep figures, drawn from the files on disk.

Every function reads a run directory written by :mod:`vaco_jax.driver.runner` and
:func:`vaco_jax.analysis.tables.summarise`, saves one figure as PNG *and* PDF under ``RUN/figures/`` (or
under ``figures_dir`` when given) and returns the paths it wrote. ``sources`` (a list of run
directories) makes a function read the score and curve rows of all of them, merged (e.g. a sweep
whose shards wrote into separate directories), while ``run_dir`` is where the summary is read and
the figures go. Figures are meant to be read without the code: each names its score, its
aggregate, what its bands are and how many runs (and diverged runs) stand behind each point. The
files carry no version string or date, so the same data give the same bytes.

    plot_aggregate_vs_lag   (1) aggregate score vs lag depth, one line per method, 95% CI bands
    plot_learning_curves    (2) eval return vs env steps, one panel per lag depth (per task)
    plot_filtering_vs_lag   (3) filtered fraction (VACO family) and clip fraction vs lag depth
    plot_tv_vs_lag          (4) TV estimates to beta and to pi_T vs lag depth
    plot_forward_lag        (5) forward lag: score over epochs x minibatches at fixed backward lag
    plot_interval_estimates (6) median / IQM / mean / optimality gap with CIs per method, per lag depth
    plot_probability_of_improvement (7) P(VACO > each method) with CIs, per lag depth
    plot_performance_profiles (8) fraction of runs above tau with CI bands, per lag depth
    plot_iqm_curves         (9) IQM of the normalised eval return vs env steps with CI bands, per lag depth
    plot_staleness          (10) realised staleness: share of samples by age, per lag model and lag depth
    make_all                every figure whose data exists

Figures only draw: the numbers they show come from ``summary.csv`` / ``diagnostics.csv``
(:mod:`vaco_jax.analysis.tables`) or from the pure functions of :mod:`vaco_jax.analysis.reviewer`
(probability of improvement, performance profiles, IQM curves, forward-lag cells), called on the
rows a figure loaded.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state), so they never pop up and
never leak; the Agg backend is selected when pyplot has not been imported yet (a notebook that
already chose its inline backend keeps it).
"""

from __future__ import annotations

import math
import os
import sys
import textwrap
from collections import defaultdict
from typing import Iterable, Sequence

import matplotlib

if "matplotlib.pyplot" not in sys.modules:
    matplotlib.use("Agg")

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import EngFormatter, FixedLocator, NullLocator  # noqa: E402

from vaco_jax.analysis import results, reviewer  # noqa: E402
from vaco_jax.analysis.results import load_curves, load_scores, read_csv  # noqa: E402
from vaco_jax.core.knobs import KNOBS  # noqa: E402
from vaco_jax.core.presets import METHODS  # noqa: E402

FIGURES = "figures"

# a method's label, colour and marker: its entry in the registry (core/presets.py); a name not
# registered there (a user's method in another process) gets a spare colour
_EXTRA_COLOURS = ("#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5")

SCORE_LABELS = {
    "final_eval_return": "final evaluation return",
    "auc_eval_return": "area under the eval curve (mean eval return over training)",
    "train_return_last5pct": "training return over the last 5% of env steps",
}
SCORE_SHORT = {
    "final_eval_return": "final eval return",
    "auc_eval_return": "eval-curve AUC",
    "train_return_last5pct": "last-5% train return",
}
AGGREGATE_LABELS = {
    "iqm": "IQM (interquartile mean)",
    "median": "median of per-task means",
    "mean": "mean of per-task means",
    "optimality_gap": "optimality gap to synchronous PPO (lower is better)",
}
AGGREGATE_ORDER = ("iqm", "median", "mean", "optimality_gap")
LAG_AXIS_LABEL = "lag depth B (policy versions, log$_2$ scale)"
CI_TEXT = "95% stratified bootstrap CI"
# score-row columns that are neither a tag nor a traced hyper-parameter
_SCORE_FIXED = {"env", "method", "lag_depth", "seed", "diverged", "final_eval_return", "auc_eval_return",
                "train_return_last5pct"}
_HPARAMS = tuple(KNOBS)  # traced knobs a cell may carry as columns


MISSING_TEXT = {
    "train_return_last5pct": "no training episode ended in the last 5% of the run",
    "final_eval_return": "no evaluation score",
    "auc_eval_return": "no evaluation score",
}


def _empty_reason(summary_rows: Sequence[dict]) -> str:
    """Why a score has no point at all: every run diverged, has no score, or a mix."""
    kinds = {r["aggregate"] for r in summary_rows}
    if kinds <= {"all_diverged"}:
        return "every run diverged"
    score = next(iter({r["score"] for r in summary_rows}), "")
    text = f"no score ({MISSING_TEXT.get(score, 'not computable')})"
    return text if kinds <= {"all_missing"} else f"each run either diverged or has no score ({text[10:-1]})"


class NoData(LookupError):
    """The run directory lacks what a figure needs (``make_all`` skips that figure)."""


# ----------------------------------------------------------------------------- helpers

SETTING_SEP = " | "  # 'ppo_clip | gamma=0.99': a method at one setting of a sweep (see _fold_settings)


def method_label(method: str) -> str:
    base, sep, setting = method.partition(SETTING_SEP)
    preset = METHODS.get(base)
    return (preset.label if preset and preset.label else base) + (f" ({setting})" if sep else "")


def _fold_settings(rows: list[dict]) -> list[dict]:
    """Rows of ``summary.csv`` / ``diagnostics.csv`` written for several settings (their ``setting``
    column, docs/evaluation.md): the setting joins the method's name, so a figure drawn per method
    draws one series per method and setting and pools none of them."""
    def setting(r):  # an empty setting reads back from the CSV as NaN
        return r.get("setting") if isinstance(r.get("setting"), str) else ""

    if not any(setting(r) for r in rows):
        return rows
    return [{**r, "method": f"{r['method']}{SETTING_SEP}{setting(r)}"} if setting(r) else r for r in rows]


def method_style(method: str, index: int = 0) -> tuple[str, str]:
    """(colour, marker) of a method; unknown names get a colour from a spare palette."""
    preset = METHODS.get(method)
    if preset is not None and preset.colour:
        return preset.colour, preset.marker
    return _EXTRA_COLOURS[index % len(_EXTRA_COLOURS)], preset.marker if preset else "o"


def sort_methods(methods: Iterable[str]) -> list[str]:
    """Registered methods in the registry's order (baselines first, VACO family last), then the rest by name."""
    order = list(METHODS)
    methods = set(methods)
    return [m for m in order if m in methods] + sorted(m for m in methods if m not in order)


def _is_diverged(value) -> bool:
    return value in (True, 1, "True", "true", "1")


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _fmt_count(values: Sequence[int]) -> str:
    values = sorted(set(int(v) for v in values))
    if not values:
        return "0"
    return str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]}"


def _fmt_value(v) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else f"{f:g}"


def set_lag_axis(ax, lags: Sequence[int], label: bool = True) -> None:
    """log2 x-axis with ticks at exactly the lag depths of the sweep."""
    lags = sorted(set(int(b) for b in lags))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(lags))
    ax.set_xticklabels([str(b) for b in lags])
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = min(lags), max(lags)
    ax.set_xlim(lo / 2 ** 0.35, hi * 2 ** 0.35)
    if label:
        ax.set_xlabel(LAG_AXIS_LABEL)


def _figures_dir(run_dir: str, figures_dir: str | None = None) -> str:
    path = figures_dir or os.path.join(run_dir, FIGURES)
    os.makedirs(path, exist_ok=True)
    return path


# No version string or creation date in the files: the same figure gives the same bytes.
_METADATA = {"png": {"Software": None}, "pdf": {"Creator": None, "Producer": None, "CreationDate": None}}


def save_figure(fig: Figure, run_dir: str, name: str, figures_dir: str | None = None) -> list[str]:
    """Write ``<name>.png`` and ``.pdf`` into ``figures_dir`` (default ``RUN/figures/``), each to a
    temporary name, then renamed."""
    out = []
    base = os.path.join(_figures_dir(run_dir, figures_dir), name)
    for ext in ("png", "pdf"):
        path = f"{base}.{ext}"
        tmp = f"{base}.tmp.{os.getpid()}.{ext}"
        fig.savefig(tmp, dpi=150 if ext == "png" else None, format=ext, metadata=_METADATA[ext])
        os.replace(tmp, path)
        out.append(path)
    return out


def _new_figure(ncols: int, nrows: int = 1, panel=(4.4, 3.6), **kw):
    fig = Figure(figsize=(panel[0] * ncols + 2.2, panel[1] * nrows + 1.4), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def _caption(fig: Figure, lines: Sequence[str]) -> None:
    """A caption under the panels (as supxlabel, so constrained layout makes room for it)."""
    width = max(60, int(fig.get_figwidth() * 10 * 11 / 8))
    lines = [w for ln in lines if ln for w in _wrap(ln, width)]
    if lines:
        fig.supxlabel("\n".join(lines), fontsize=8, ha="left", x=0.01, color="0.2")


def _wrap(text: str, width: int) -> list[str]:
    """textwrap.wrap that never breaks inside a $...$ mathtext span (and keeps explicit newlines)."""
    out = []
    for line in text.split("\n"):
        parts = line.split("$")
        protected = "$".join(p.replace(" ", "\x00") if i % 2 else p for i, p in enumerate(parts))
        out += [w.replace("\x00", " ") for w in (textwrap.wrap(protected, width) or [""])]
    return out


def _title(fig: Figure, text: str, fontsize: float = 11) -> None:
    """Suptitle wrapped to the figure's width (about 10 characters per inch at 11 pt)."""
    width = max(40, int(fig.get_figwidth() * 10 * 11 / fontsize))
    fig.suptitle("\n".join(_wrap(text, width)), fontsize=fontsize)


def _unique_handles(axes) -> tuple[list, list]:
    """Every labelled artist of the panels, each label once (first panel that has it wins)."""
    handles, labels = [], []
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    return handles, labels


def _panel_grid_legend(axes, used: int) -> None:
    """Hide the grid's panels after the first ``used`` and put one legend into the first panel."""
    for ax in np.ravel(axes)[used:]:
        ax.set_visible(False)
    handles, labels = _unique_handles(axes)
    axes[0][0].legend(handles, labels, fontsize=7, framealpha=0.8)


def _legend(fig: Figure, axes, handles=None, labels=None) -> None:
    if handles is None:
        handles, labels = _unique_handles(axes)
    if handles:
        fig.legend(handles, labels, loc="outside right center", fontsize=8, frameon=False)


def _run_json(run_dir: str) -> dict:
    path = os.path.join(run_dir, "run.json")
    return results.read_json(path) if os.path.exists(path) else {}


def bootstrap_reps(run_dirs) -> int | None:
    """The ``bootstrap_reps`` of the run's command (``run.json``, else a shard's record); the first
    directory of several that has one."""
    for run_dir in [run_dirs] if isinstance(run_dirs, (str, os.PathLike)) else run_dirs:
        records = [os.path.join(run_dir, "run.json")] + [os.path.join(run_dir, f) for f in
                                                        sorted(os.listdir(run_dir)) if f.startswith("run.shard-")] \
            if os.path.isdir(run_dir) else []
        for path in records:
            if os.path.exists(path):
                reps = results.read_json(path).get("command", {}).get("bootstrap_reps")
                if isinstance(reps, (int, float)):
                    return int(reps)
    return None


def _data(run_dir: str, sources) -> str | list[str]:
    """Where the score and curve rows are read: ``sources`` when given, else ``run_dir``."""
    return run_dir if sources is None else list(sources)


def _score_rows(run_dir, one_setting: bool = True) -> list[dict]:
    """Score rows of the complete tasks (``tables.complete_tasks``): a figure pooled over tasks never
    pools one method over fewer tasks than another while a study is part-way through. With
    ``one_setting`` (a figure that compares methods over their pooled runs) rows of several settings
    (``tables.setting_axes``: a ``--sweep`` beyond method and lag depth) are NoData, not pooled."""
    from vaco_jax.analysis import tables
    rows = load_scores(run_dir)
    if not rows:
        raise NoData(f"no scores.csv under {run_dir} (no group has finished)")
    axes = tables.setting_axes(rows) if one_setting else []
    if axes:
        raise NoData(f"the runs hold several settings ({', '.join(axes)}) and this figure compares methods "
                     "over pooled runs; summary.csv and the figures drawn from it keep the settings apart "
                     "(draw this one from a run of one setting)")
    kept, left_out = tables.complete_tasks(rows)
    if not kept:
        raise NoData(f"no task under {run_dir} holds every method and lag depth: {tables.left_out_text(left_out)}")
    return kept


def variant_keys(rows: Sequence[dict]) -> list[str]:
    """Columns besides method / lag depth / seed that vary within a method: group tags (e.g.
    ``num_epochs``) and traced hyper-parameters swept as a grid (e.g. ``learning_rate``)."""
    keys: list[str] = []
    for row in rows:
        for k in row:
            if (k in _SCORE_FIXED or k.startswith("mean_") or k in keys or k in ("cell", "chunk", "env_steps",
                                                                                  "eval_return", "train_return")):
                continue
            keys.append(k)
    varying = []
    for k in keys:
        by_method = defaultdict(set)
        for r in rows:
            if k in r:
                by_method[r["method"]].add(str(r[k]))
        if any(len(v) > 1 for v in by_method.values()):
            varying.append(k)
    return varying


def _pooled_note(score_rows: Sequence[dict]) -> str:
    keys = variant_keys(score_rows)
    if not keys:
        return ""
    show = lambda v: _fmt_value(v) if _finite(v) else str(v)  # noqa: E731
    parts = [f"{k} ∈ {{{', '.join(sorted({show(r[k]) for r in score_rows if k in r}))}}}" for k in keys]
    return "Caution: pools runs that differ in " + "; ".join(parts) + " (summary.csv does not separate them)."


def _variant_label(method: str, variant: tuple, keys: Sequence[str]) -> str:
    short = {"num_epochs": "E", "num_minibatches": "M", "learning_rate": "lr", "clip_epsilon": "ε",
             "tv_budget": "δ"}
    if not keys:
        return method_label(method)
    return f"{method_label(method)} (" + ", ".join(f"{short.get(k, k)}={_fmt_value(v) if _finite(v) else v}"
                                                    for k, v in zip(keys, variant)) + ")"


# ----------------------------------------------------------------------------- (1) aggregate vs lag

def _read_analysis_table(run_dir: str, filename: str) -> list[dict]:
    """Rows of a table written by ``tables.summarise``; NoData when it is missing or empty."""
    path = os.path.join(run_dir, filename)
    if not os.path.exists(path):
        raise NoData(f"{path} is missing (run vaco_jax.analysis.tables.summarise first)")
    rows = read_csv(path)
    if not rows:
        raise NoData(f"{path} is empty")
    return rows


def read_summary(run_dir: str) -> list[dict]:
    return _fold_settings(_read_analysis_table(run_dir, "summary.csv"))


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


def plot_aggregate_vs_lag(run_dir: str, score: str = "final_eval_return",
                          normalization: str | None = None, sources=None, figures_dir: str | None = None) -> list[str]:
    """The main lag-sweep figure: one panel per aggregate, one line per method with 95% CI bands."""
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
        raise NoData(f"no cell of {score!r} has a run left: {_empty_reason(rows)}")
    if n_tasks == 1:  # the median and mean of one task's mean are that mean, the gap is 1 minus it: one panel
        aggs = _one_task_panels(rows, aggs)

    fig, axes = _new_figure(len(aggs), panel=(4.2, 3.6))
    for ax, agg in zip(axes[0], aggs):
        for i, m in enumerate(methods):
            pts = sorted((r for r in rows if r["method"] == m and r["aggregate"] == agg and _finite(r["point"])),
                         key=lambda r: int(r["lag_depth"]))
            if not pts:
                continue
            colour, marker = method_style(m, i)
            x = [int(r["lag_depth"]) for r in pts]
            runs = [int(r["n_runs"]) for r in pts]
            ax.plot(x, [r["point"] for r in pts], color=colour, marker=marker, lw=1.8, ms=6,
                    label=f"{method_label(m)} (n={_fmt_count(runs)} runs/point)")
            ax.fill_between(x, [r["low"] for r in pts], [r["high"] for r in pts], color=colour, alpha=0.18, lw=0)
        if normalized and agg != "optimality_gap":
            ax.axhline(1.0, color="0.3", ls=":", lw=1)
            ax.text(0.02, 1.0, "sync PPO-Clip", transform=ax.get_yaxis_transform(), fontsize=7, color="0.3",
                    va="bottom")
        if normalized and agg == "optimality_gap":
            ax.axhline(0.0, color="0.3", ls=":", lw=1)
        if own:
            ax.axhline(1.0, color="0.3", ls=":", lw=1)
            ax.text(0.02, 1.0, "own B = 1", transform=ax.get_yaxis_transform(), fontsize=7, color="0.3",
                    va="bottom")
        set_lag_axis(ax, lags)
        unit = ("normalised score" if normalized else "score / own B=1 score" if own
                else f"{SCORE_SHORT.get(score, score)} (episode return)")
        ax.set_ylabel(f"{agg.upper() if agg == 'iqm' else agg.replace('_', ' ')} of {unit}")
        ax.set_title(AGGREGATE_LABELS[agg], fontsize=10)
        ax.grid(alpha=0.3)
    _legend(fig, axes)

    title = (f"{SCORE_LABELS.get(score, score)} vs lag depth — "
             f"{'normalised' if normalized else 'lag-robustness' if own else 'raw'} scores, "
             f"{n_tasks} task{'s' if n_tasks > 1 else ''}")
    if normalized:
        title += "\n1.0 = synchronous PPO-Clip (lag depth 1); 0.0 = uniform-random policy"
    if own:
        title += "\n1.0 = the same method at lag depth 1; 0.0 = uniform-random policy"
    title += f"\nlines: point estimates; bands: {CI_TEXT}"
    _title(fig, title[0].upper() + title[1:])
    reps = bootstrap_reps([run_dir] + list(sources or []))
    diverged = sorted({(m, int(r["lag_depth"]), int(r["n_diverged"])) for m in methods for r in rows
                       if r["method"] == m and _finite(r.get("n_diverged")) and int(r["n_diverged"]) > 0})
    all_div = sorted({(r["method"], int(r["lag_depth"])) for r in rows if r["aggregate"] == "all_diverged"})
    missing = sorted({(m, int(r["lag_depth"]), int(r["n_missing"])) for m in methods for r in rows
                      if r["method"] == m and _finite(r.get("n_missing")) and int(r["n_missing"]) > 0})
    no_score = sorted({(r["method"], int(r["lag_depth"])) for r in rows
                       if r["aggregate"] in ("all_missing", "none_left")})
    lines = [f"Lines: point estimates; bands: {CI_TEXT} (seeds resampled within each task"
             + (f", {reps} replicates)." if reps else ").")
             + f" A run = one seed across all {n_tasks} task(s); n = runs per point after excluding diverged runs"
             " and runs with no score."]
    if diverged:
        lines.append("Diverged runs excluded: " + "; ".join(f"{method_label(m)} B={b}: {d}" for m, b, d in diverged)
                     + ".")
    if all_div:
        lines.append("Every run diverged (no point): " + "; ".join(f"{method_label(m)} B={b}" for m, b in all_div)
                     + ".")
    if missing:
        lines.append(f"Runs with no score ({MISSING_TEXT.get(score, 'not computable')}; not diverged), excluded: "
                     + "; ".join(f"{method_label(m)} B={b}: {k}" for m, b, k in missing) + ".")
    if no_score:
        lines.append("No run left (no point): " + "; ".join(f"{method_label(m)} B={b}" for m, b in no_score) + ".")
    if _separated(rows):
        lines.append("One line per method and setting (the sweep's values; each normalised by PPO-Clip at lag "
                     "depth 1 of the same setting).")
    else:
        try:
            lines.append(_pooled_note(load_scores(_data(run_dir, sources))))
        except OSError:
            pass
    _caption(fig, lines)
    return save_figure(fig, run_dir, f"aggregate_vs_lag_{score}_{normalization}", figures_dir=figures_dir)


# ----------------------------------------------------------------------------- (2) learning curves

def _curve_series(rows: Sequence[dict], metric: str, keys: Sequence[str]):
    """{(method, variant): {lag: (x, mean, se, n_runs, n_diverged)}} over the runs (cells) of one task."""
    cells: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r in rows:
        variant = tuple(r.get(k) for k in keys)
        cell = (r["method"], variant, int(r["lag_depth"]), r.get("seed"),
                *(r.get(h) for h in _HPARAMS if h not in keys))
        cells[cell][int(r["chunk"])] = r  # a resumed group may repeat a chunk: the last row wins
    out: dict[tuple, dict[int, tuple]] = defaultdict(dict)
    grouped: dict[tuple, list] = defaultdict(list)
    for cell, chunks in cells.items():
        grouped[(cell[0], cell[1], cell[2])].append(chunks)
    for (method, variant, lag), runs in grouped.items():
        kept = [c for c in runs if not any(_is_diverged(r.get("diverged")) for r in c.values())]
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
    curves = load_curves(_data(run_dir, sources))
    if not curves:
        raise NoData(f"no curves.csv under {run_dir}")
    tasks = sorted({r["env"] for r in curves}) if task is None else [task]
    try:
        keys = variant_keys(load_scores(_data(run_dir, sources)))
    except OSError:
        keys = []
    paths = []
    for t in tasks:
        rows = [r for r in curves if r["env"] == t]
        if not rows:
            raise NoData(f"no curve rows for task {t!r}")
        metric = "eval_return" if any(_finite(r.get("eval_return")) for r in rows) else "train_return"
        series = _curve_series(rows, metric, keys)
        lags = sorted({lag for s in series.values() for lag in s})
        ncols = min(len(lags), 4)
        nrows = math.ceil(len(lags) / ncols)
        fig, axes = _new_figure(ncols, nrows, panel=(4.0, 3.2), sharey=True)
        order = sort_methods({m for m, _ in series})
        names = sorted(series, key=lambda mv: (order.index(mv[0]), str(mv[1])))
        linestyles = ("-", "--", "-.", ":")
        for ax, lag in zip(np.ravel(axes), lags):
            runs, divs = [], []
            for i, (m, variant) in enumerate(names):
                if lag not in series[(m, variant)]:
                    continue
                x, mean, se, n, n_div = series[(m, variant)][lag]
                runs.append(n)
                if n_div:
                    divs.append(f"{_variant_label(m, variant, keys)}: {n_div}")
                if not len(x):
                    continue
                colour, marker = method_style(m, order.index(m))
                vi = sorted({v for mm, v in names if mm == m}, key=str).index(variant)
                ax.plot(x, mean, color=colour, lw=1.6, ls=linestyles[vi % len(linestyles)], marker=marker,
                        ms=4, markevery=max(1, len(x) // 12), label=_variant_label(m, variant, keys))
                ax.fill_between(x, mean - se, mean + se, color=colour, alpha=0.18, lw=0)
            ax.set_title(f"lag depth B = {lag}  (n = {_fmt_count(runs)} runs per line)", fontsize=9)
            ax.set_xlabel("environment steps")
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 250k, 1M, ...
            ax.grid(alpha=0.3)
            if divs:
                ax.text(0.98, 0.02, "diverged (excluded):\n" + "\n".join(divs), transform=ax.transAxes,
                        ha="right", va="bottom", fontsize=7, color="#b00000",
                        bbox=dict(boxstyle="round", fc="white", ec="#b00000", alpha=0.8))
        for ax in np.ravel(axes)[len(lags):]:
            ax.set_visible(False)
        ylabel = (r"evaluation return (learner $\pi_T$, stochastic)" if metric == "eval_return"
                  else "training episode return (actors, lagged)")
        for row in axes:
            row[0].set_ylabel(ylabel)
        _legend(fig, axes)
        _title(fig, f"Learning curves on {t}: {ylabel} vs environment steps, one panel per lag depth")
        cap = ["Lines: mean over seeds; shading: ± 1 standard error of the mean. Diverged runs (non-finite "
               "parameters) are excluded and counted in the panel."]
        if metric == "train_return":
            cap.append("Evaluation was disabled in this run (eval_episodes = 0): training return shown instead.")
        _caption(fig, cap)
        paths += save_figure(fig, run_dir, f"learning_curves_{t}", figures_dir=figures_dir)
    return paths


# ----------------------------------------------------------------------------- (3), (4) diagnostics vs lag

def read_diagnostics(run_dir: str) -> list[dict]:
    return _fold_settings(_read_analysis_table(run_dir, "diagnostics.csv"))


def _separated(rows: Sequence[dict]) -> bool:
    """Whether these summary / diagnostics rows keep several settings apart (then nothing is pooled)."""
    return any(SETTING_SEP in str(r.get("method")) for r in rows)


def _diag_panel(ax, rows: Sequence[dict], column: str, lags: Sequence[int]) -> list[int]:
    """Error-bar lines of one diagnostic per method; returns the run counts behind its points."""
    methods = sort_methods({r["method"] for r in rows if _finite(r.get(column))})
    runs, top = [], 0.0
    for i, m in enumerate(methods):
        pts = sorted((r for r in rows if r["method"] == m and _finite(r.get(column))),
                     key=lambda r: int(r["lag_depth"]))
        colour, marker = method_style(m, i)
        se = [float(r.get(column + "_se")) if _finite(r.get(column + "_se")) else 0.0 for r in pts]
        ax.errorbar([int(r["lag_depth"]) for r in pts], [float(r[column]) for r in pts], yerr=se, color=colour,
                    marker=marker, ms=6, lw=1.6, capsize=3, label=method_label(m))
        runs += [int(r["n_runs"]) for r in pts]
        top = max([float(r[column]) + e for r, e in zip(pts, se)] + [top])
    ax.set_ylim(0.0, top * 1.08 if top > 0 else 1.0)
    set_lag_axis(ax, lags)
    ax.grid(alpha=0.3)
    return runs


def _diagnostics_figure(run_dir: str, panels: Sequence[tuple[str, str, str]], title: str, name: str,
                        extra_caption: str = "", sources=None, figures_dir: str | None = None) -> list[str]:
    rows = read_diagnostics(run_dir)
    panels = [p for p in panels if any(_finite(r.get(p[0])) for r in rows)]
    if not panels:
        raise NoData(f"diagnostics.csv has none of the columns {name} needs")
    lags = sorted({int(r["lag_depth"]) for r in rows})
    fig, axes = _new_figure(len(panels), panel=(4.4, 3.5))
    runs = []
    for ax, (column, panel_title, ylabel) in zip(axes[0], panels):
        runs += _diag_panel(ax, rows, column, lags)
        ax.set_title(panel_title, fontsize=10)
        ax.set_ylabel(ylabel)
    _legend(fig, axes)
    _title(fig, title)
    lines = [f"Points: mean over runs of the per-run average over training; bars: ± 1 standard error "
             f"(n = {_fmt_count(runs)} non-diverged runs per point, pooled over tasks).", extra_caption]
    if _separated(rows):
        lines.append("One line per method and setting (the sweep's values).")
    else:
        try:
            lines.append(_pooled_note(load_scores(_data(run_dir, sources))))
        except OSError:
            pass
    _caption(fig, lines)
    return save_figure(fig, run_dir, name, figures_dir=figures_dir)


def plot_filtering_vs_lag(run_dir: str, sources=None, figures_dir: str | None = None) -> list[str]:
    """Filtered fraction (VACO's TV filter) and clip fraction (PPO family, decoupled, SPO) vs lag depth."""
    panels = [("mean_filtered_fraction", "filtered fraction (TV filter: VACO family)",
               "fraction of samples filtered"),
              ("mean_clip_fraction", "clip fraction |r − 1| > ε (PPO family, decoupled, SPO)",
               "fraction of samples clipped")]
    return _diagnostics_figure(
        run_dir, panels, "Filtering behaviour vs lag depth: how much of each batch the objective discards",
        "filtering_vs_lag",
        "Fractions are per minibatch, averaged over all gradient steps of a run (0 = nothing filtered/clipped).",
        sources=sources, figures_dir=figures_dir)


def plot_tv_vs_lag(run_dir: str, sources=None, figures_dir: str | None = None) -> list[str]:
    """TV estimates of the current policy to the behaviour policy β and to the phase's learner π_T."""
    panels = [("mean_tv_behaviour", r"$\widehat{\mathrm{TV}}(\pi_\theta, \beta)$: to the behaviour policy",
               "TV estimate (0 = identical policies)"),
              ("mean_tv_learner", r"$\widehat{\mathrm{TV}}(\pi_\theta, \pi_T)$: to the learner at phase start",
               "TV estimate (0 = identical policies)"),
              ("mean_mean_staleness", "mean staleness of the data", "policy versions behind $\\pi_T$")]
    return _diagnostics_figure(
        run_dir, panels, r"Total-variation estimates vs lag depth: $\widehat{\mathrm{TV}} = \frac{1}{2}\,"
        r"\mathrm{mean}_i\,|r_i - 1|$ over each minibatch (docs/diagnostics.md)",
        "tv_vs_lag", r"$r_i = \pi_\theta/\beta$ resp. $\pi_\theta/\pi_T$; $\beta$ = the lagged actor's policy that "
        r"produced the sample; $\pi_T$ = the learner when the phase began.", sources=sources, figures_dir=figures_dir)


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
    rows = [r for r in _score_rows(_data(run_dir, sources), one_setting=False)
            if _finite(r.get("num_epochs")) and _finite(r.get("num_minibatches"))]
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
            fig, axes = _new_figure(len(methods), len(lags), panel=(3.6, 3.2))
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
            fig, axes = _new_figure(len(lags), panel=(4.4, 3.5), sharey=True)
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
            _legend(fig, axes)
            cap = ["Points: mean over non-diverged seeds; bars: ± 1 standard error."]
        _title(fig, f"Forward-lag sweep on {task}: {SCORE_LABELS.get(score, score)}\nby epochs E × minibatches M "
                    f"per phase (backward lag depth B = {', '.join(map(str, lags))}; {len(methods)} "
                    f"method{'s' if len(methods) > 1 else ''})")
        _caption(fig, cap)
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
    _title(fig, f"Interval estimates of {SCORE_SHORT.get(score, score)}, {unit}, per lag depth", fontsize=10)
    lines = [f"Bars: {CI_TEXT}; ticks: point estimates. Diverged runs and runs with no score are excluded."]
    if n_tasks == 1:
        lines.append("One task: median and mean of the per-task mean coincide, so the median is not shown; IQM and "
                     "mean are over the runs of that task.")
    _caption(fig, lines)
    return save_figure(fig, run_dir, f"interval_estimates_{score}_{normalization}", figures_dir=figures_dir)


def plot_probability_of_improvement(run_dir: str, score: str = "final_eval_return", method: str = "vaco",
                                    sources=None, figures_dir: str | None = None) -> list[str]:
    """P(``method`` > each other method) with 95% CIs, one panel per lag depth."""
    rows = _score_rows(_data(run_dir, sources))
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
    _title(fig, f"Probability of improvement of {method_label(method)} over each method Y "
                f"({SCORE_SHORT.get(score, score)}, {len(tasks)} task{'s' if len(tasks) > 1 else ''})", fontsize=10)
    _caption(fig, [f"Bars: 95% bootstrap CI (each method's runs resampled independently within each task, {reps} "
                   "replicates); ticks: point estimates. P is computed per task (Mann-Whitney) and averaged over "
                   "tasks, so it is the same on raw and normalised scores. 0.5 = no difference."])
    return save_figure(fig, run_dir, f"probability_of_improvement_{score}", figures_dir=figures_dir)


def plot_performance_profiles(run_dir: str, score: str = "final_eval_return", sources=None,
                              figures_dir: str | None = None) -> list[str]:
    """Fraction of runs x tasks with score > tau per method, with 95% CI bands, one panel per lag depth."""
    data = _data(run_dir, sources)
    cells = reviewer.normalised_cells(_score_rows(data), score, results.load_random_scores(data), order=sort_methods)
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
    _panel_grid_legend(axes, len(lags))
    _title(fig, f"Performance profiles of {SCORE_SHORT.get(score, score)} per lag depth", fontsize=10)
    _caption(fig, [f"Lines: fraction of runs × tasks scoring above τ; bands: pointwise {CI_TEXT} ({reps} "
                   "replicates). Diverged runs and runs with no score are excluded."])
    return save_figure(fig, run_dir, f"performance_profiles_{score}", figures_dir=figures_dir)


def plot_iqm_curves(run_dir: str, sources=None, figures_dir: str | None = None) -> list[str]:
    """Sample efficiency: IQM of the normalised eval return vs env steps with 95% CI bands, per lag depth."""
    data = _data(run_dir, sources)
    curves = [r for r in load_curves(data) if _finite(r.get("eval_return"))]
    if not curves:
        raise NoData("no curves.csv rows with an eval_return")
    rows = _score_rows(data)
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
    _panel_grid_legend(axes, len(lags))
    _title(fig, "Sample efficiency: IQM of the evaluation return vs environment steps", fontsize=10)
    _caption(fig, [f"Lines: IQM over runs × tasks at each evaluation; bands: {CI_TEXT} ({reps} replicates). "
                   + ("Normalised per task with the final-score reference (1 = mean final eval return of sync "
                      "PPO-Clip). " if iqm.normalised else "")
                   + "Diverged runs are excluded."])
    return save_figure(fig, run_dir, "iqm_sample_efficiency", figures_dir=figures_dir)


def _lag_model(run_dir: str, cell: dict, group: str | None = None) -> str:
    """The cell's lag model: its own column, else its group's configuration in ``run.json``'s identity
    (keyed by the group's subdirectory), else the command's flag."""
    if cell.get("lag_model"):
        return str(cell["lag_model"])
    meta = _run_json(run_dir) if os.path.isdir(run_dir) else {}
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
    _title(fig, "Realised staleness: share of training samples by age", fontsize=10)
    _caption(fig, ["Summed over every chunk, cell (seed), method and task of each lag depth; ages are clipped to the "
                   "phase index, so early phases hold no sample older than their index."])
    return save_figure(fig, run_dir, "staleness_histograms", figures_dir=figures_dir)


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

    fig, axes = _new_figure(max(len(configs), len(methods)), 3, panel=(3.2, 2.6))
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
        ax.set_ylabel(f"mean {score}")
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
    _legend(fig, [ax for row in axes for ax in row])
    _title(fig, f"Simulator vs a real actor-learner: lag and {score}")
    _caption(fig, ["Top: samples by age, the real runs' pooled histogram beside the ages the simulator realised. "
                   "Middle: mean over seeds, real runs and each simulated counterpart. Bottom: the simulated mean "
                   "minus the real one, divided by the method's real lockstep mean, with its bootstrap CI; grey: "
                   "the equivalence margin."])
    return save_figure(fig, out_dir, f"sim_vs_real_{score}", figures_dir=os.path.join(out_dir, FIGURES))
