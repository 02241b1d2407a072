"""What every figure of :mod:`vaco_jax.analysis.figures` and :mod:`vaco_jax.analysis.reviewer_figures`
shares: a method's label, colour and marker (from the registry), score and aggregate labels, the lag
axis, captions, titles and legends wrapped to the figure's width, PNG + PDF files without a version
string or date, and the rows a figure reads from a run directory (score rows of the complete tasks,
``summary.csv``). ``NoData`` is what a figure raises when its data are absent.

The Agg backend is selected when pyplot has not been imported yet (a notebook that already chose its
inline backend keeps it); figures are ``matplotlib.figure.Figure`` objects, never pyplot state.
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
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

from vaco_jax.analysis import results  # noqa: E402
from vaco_jax.analysis.results import SCORE_COLUMNS, load_scores, read_csv  # noqa: E402
from vaco_jax.names import KNOBS, METHODS  # noqa: E402

FIGURES = "figures"

# a method's label, colour and marker: its entry in the registry (vaco_jax/names.py); a name not
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
SCORE_FIXED = {"env", "method", "lag_depth", "seed", *SCORE_COLUMNS}
HPARAMS = tuple(KNOBS)  # traced knobs a cell may carry as columns


MISSING_TEXT = {
    "train_return_last5pct": "no training episode ended in the last 5% of the run",
    "final_eval_return": "no evaluation score",
    "auc_eval_return": "no evaluation score",
}


def empty_reason(summary_rows: Sequence[dict]) -> str:
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

SETTING_SEP = " | "  # 'ppo_clip | gamma=0.99': a method at one setting of a sweep (see fold_settings)


def method_label(method: str) -> str:
    base, sep, setting = method.partition(SETTING_SEP)
    preset = METHODS.get(base)
    return (preset.label if preset and preset.label else base) + (f" ({setting})" if sep else "")


def fold_settings(rows: list[dict]) -> list[dict]:
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


def is_diverged(value) -> bool:
    return value in (True, 1, "True", "true", "1")


def is_finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def fmt_count(values: Sequence[int]) -> str:
    values = sorted(set(int(v) for v in values))
    if not values:
        return "0"
    return str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]}"


def fmt_value(v) -> str:
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


def figures_dir_of(run_dir: str, figures_dir: str | None = None) -> str:
    path = figures_dir or os.path.join(run_dir, FIGURES)
    os.makedirs(path, exist_ok=True)
    return path


# No version string or creation date in the files: the same figure gives the same bytes.
_METADATA = {"png": {"Software": None}, "pdf": {"Creator": None, "Producer": None, "CreationDate": None}}


def save_figure(fig: Figure, run_dir: str, name: str, figures_dir: str | None = None) -> list[str]:
    """Write ``<name>.png`` and ``.pdf`` into ``figures_dir`` (default ``RUN/figures/``), each to a
    temporary name, then renamed."""
    out = []
    base = os.path.join(figures_dir_of(run_dir, figures_dir), name)
    for ext in ("png", "pdf"):
        path = f"{base}.{ext}"
        tmp = f"{base}.tmp.{os.getpid()}.{ext}"
        fig.savefig(tmp, dpi=150 if ext == "png" else None, format=ext, metadata=_METADATA[ext])
        os.replace(tmp, path)
        out.append(path)
    return out


def new_figure(ncols: int, nrows: int = 1, panel=(4.4, 3.6), **kw):
    fig = Figure(figsize=(panel[0] * ncols + 2.2, panel[1] * nrows + 1.4), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def caption(fig: Figure, lines: Sequence[str]) -> None:
    """A caption under the panels (as supxlabel, so constrained layout makes room for it)."""
    width = max(60, int(fig.get_figwidth() * 10 * 11 / 8))
    lines = [w for ln in lines if ln for w in wrap_text(ln, width)]
    if lines:
        fig.supxlabel("\n".join(lines), fontsize=8, ha="left", x=0.01, color="0.2")


def wrap_text(text: str, width: int) -> list[str]:
    """textwrap.wrap that never breaks inside a $...$ mathtext span (and keeps explicit newlines)."""
    out = []
    for line in text.split("\n"):
        parts = line.split("$")
        protected = "$".join(p.replace(" ", "\x00") if i % 2 else p for i, p in enumerate(parts))
        out += [w.replace("\x00", " ") for w in (textwrap.wrap(protected, width) or [""])]
    return out


def figure_title(fig: Figure, text: str, fontsize: float = 11) -> None:
    """Suptitle wrapped to the figure's width (about 10 characters per inch at 11 pt)."""
    width = max(40, int(fig.get_figwidth() * 10 * 11 / fontsize))
    fig.suptitle("\n".join(wrap_text(text, width)), fontsize=fontsize)


def unique_handles(axes) -> tuple[list, list]:
    """Every labelled artist of the panels, each label once (first panel that has it wins)."""
    handles, labels = [], []
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    return handles, labels


def panel_grid_legend(axes, used: int) -> None:
    """Hide the grid's panels after the first ``used`` and put one legend into the first panel."""
    for ax in np.ravel(axes)[used:]:
        ax.set_visible(False)
    handles, labels = unique_handles(axes)
    axes[0][0].legend(handles, labels, fontsize=7, framealpha=0.8)


def figure_legend(fig: Figure, axes, handles=None, labels=None) -> None:
    if handles is None:
        handles, labels = unique_handles(axes)
    if handles:
        fig.legend(handles, labels, loc="outside right center", fontsize=8, frameon=False)


def run_json(run_dir: str) -> dict:
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


def data_source(run_dir: str, sources) -> str | list[str]:
    """Where the score and curve rows are read: ``sources`` when given, else ``run_dir``."""
    return run_dir if sources is None else list(sources)


def score_rows(run_dir, one_setting: bool = True) -> list[dict]:
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
            if (k in SCORE_FIXED or k.startswith("mean_") or k in keys or k in ("cell", "chunk", "env_steps",
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


def pooled_note(rows: Sequence[dict]) -> str:
    keys = variant_keys(rows)
    if not keys:
        return ""
    show = lambda v: fmt_value(v) if is_finite(v) else str(v)  # noqa: E731
    parts = [f"{k} ∈ {{{', '.join(sorted({show(r[k]) for r in rows if k in r}))}}}" for k in keys]
    return "Caution: pools runs that differ in " + "; ".join(parts) + " (summary.csv does not separate them)."


def variant_label(method: str, variant: tuple, keys: Sequence[str]) -> str:
    short = {"num_epochs": "E", "num_minibatches": "M", "learning_rate": "lr", "clip_epsilon": "ε",
             "tv_budget": "δ"}
    if not keys:
        return method_label(method)
    return f"{method_label(method)} (" + ", ".join(f"{short.get(k, k)}={fmt_value(v) if is_finite(v) else v}"
                                                    for k, v in zip(keys, variant)) + ")"


def read_analysis_table(run_dir: str, filename: str) -> list[dict]:
    """Rows of a table written by ``tables.summarise``; NoData when it is missing or empty."""
    path = os.path.join(run_dir, filename)
    if not os.path.exists(path):
        raise NoData(f"{path} is missing (run vaco_jax.analysis.tables.summarise first)")
    rows = read_csv(path)
    if not rows:
        raise NoData(f"{path} is empty")
    return rows


def read_summary(run_dir: str) -> list[dict]:
    return fold_settings(read_analysis_table(run_dir, "summary.csv"))
