"""What every figure of :mod:`vaco_jax.analysis.figures` and :mod:`vaco_jax.analysis.reviewer_figures`
shares: a method's label, colour and marker (from the registry), score and aggregate labels, the lag
axis (methods dodged apart at each lag depth), the page layout (``panel_figure``: paper width, one
legend outside every panel, ``place_legend``), one-line titles, a one-line note of what was left
out (``footnote``), intervals that stay visible when they are a point (``interval_bars``), PNG + PDF
files without a version string or date, and the rows a figure reads from a run directory (score
rows of the complete tasks, ``summary.csv``). ``NoData`` is what a figure raises when its data are
absent.

A figure carries no caption: what its lines, bands and ticks are is said once, in docs/evaluation.md
("Figures"), and beside a committed figure in the text that shows it. Inside the picture are a title
of one line (what the figure shows), short panel titles, labelled axes, one legend (methods, then
what a band or a reference line is) and, only when something was left out or excluded, a footnote.

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
LAG_AXIS_LABEL = "lag depth B (policy versions)"
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


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 task``, ``3 tasks`` (``many``: the plural when it is not ``word + "s"``)."""
    return f"{n} {word if int(n) == 1 else many or word + 's'}"


def count_text(values: Sequence[int], word: str, many: str | None = None) -> str:
    """Run counts as a reader says them: ``1 run``, ``10 runs``, ``2–3 runs`` (a range: several counts)."""
    values = sorted(set(int(v) for v in values))
    if len(values) == 1:
        return plural(values[0], word, many)
    return f"{fmt_count(values)} {many or word + 's'}"


def fmt_value(v) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else f"{f:g}"


# ----------------------------------------------------------------------------- page layout
# A full-width figure of a paper page at save_figure's 150 dpi; a one-panel figure is a column wide.
FIGURE_WIDTH = 7.0
COLUMN_WIDTH = 4.5
PANEL_HEIGHT = 2.4
TITLE_SIZE = 10
LEGEND_SIZE = 8
NOTE_SIZE = 7
CHAR_WIDTH = 0.56  # mean advance of a DejaVu Sans character, in ems (sizes a title or a legend column)
LEGEND_SLOT = "legend slot"  # the label of the axes a legend below the panels is drawn in

# Methods at one lag depth are drawn side by side: neighbours DODGE of the lag axis' width apart
# (log2 units), so a method whose point equals another's (PPO-Clip and A-3PO at 1.0 at B = 1) stays
# visible beside it; the tick stays at the lag depth.
DODGE = 0.022
LAG_MARGIN = 0.35  # log2 units beyond the smallest and the largest lag depth


def panel_figure(n: int, ncols: int = 2, panel_height: float = PANEL_HEIGHT, legend: bool = True,
                 width: float | None = None, sharex=False, sharey=False):
    """A figure of ``n`` panels, ``ncols`` to a row (fewer when ``n`` is smaller), ``FIGURE_WIDTH``
    wide (``COLUMN_WIDTH`` for one column). Returns ``(fig, axes)``: ``axes`` the grid (2-D), its slots
    after the ``n``-th hidden. With ``legend``, a full grid gets a row below the panels for the legend
    (``place_legend``); a grid with a slot to spare puts the legend there."""
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    row = legend and nrows * ncols == n
    width = width or (COLUMN_WIDTH if ncols == 1 else FIGURE_WIDTH)
    fig = Figure(figsize=(width, panel_height * nrows + 0.45 + (0.35 if row else 0.0)), layout="constrained")
    outer = fig.add_gridspec(1 + row, 1, height_ratios=[1.0, 1e-3] if row else [1.0])
    axes = outer[0].subgridspec(nrows, ncols).subplots(sharex=sharex, sharey=sharey, squeeze=False)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    if row:
        slot = fig.add_subplot(outer[1], label=LEGEND_SLOT)
        slot.axis("off")
    return fig, axes


def new_figure(ncols: int, nrows: int = 1, panel_height: float = PANEL_HEIGHT, legend: bool = True, **kw):
    """``panel_figure`` for a grid given as columns x rows (every slot used)."""
    return panel_figure(ncols * nrows, ncols, panel_height, legend, **kw)


def _legend_columns(labels: Sequence[str], width_in: float, fontsize: float) -> int:
    """How many legend entries fit side by side in ``width_in`` inches."""
    entry = max(len(str(lab)) for lab in labels) * CHAR_WIDTH * fontsize + 3.2 * fontsize  # text + handle, pt
    return max(1, min(len(labels), int(0.95 * width_in * 72 // entry)))


def _row_major(items: list, ncol: int) -> list:
    """``items`` reordered so that a legend of ``ncol`` columns (filled column by column, the first
    ``len % ncol`` columns one longer) reads them left to right, row by row."""
    n = len(items)
    nrows = math.ceil(n / ncol)
    long = n % ncol or ncol
    cols = [[items[r * ncol + c] for r in range(nrows if c < long else nrows - 1)] for c in range(ncol)]
    return [x for col in cols for x in col]


def place_legend(fig: Figure, axes, handles=None, labels=None, extra: Sequence[tuple] = ()):
    """One legend for the figure, outside every panel's data: in the grid's first hidden slot when there
    is one, else in the row ``panel_figure`` kept below the panels (else to the figure's right), as
    many entries to a row as fit. ``handles``/``labels`` default to every panel's labelled artists
    (each label once); ``extra``: ``(handle, label)`` pairs after them (what a band or a line means).
    Returns the legend (None when there is nothing to show)."""
    if handles is None:
        handles, labels = unique_handles(axes)
    handles = list(handles) + [h for h, _ in extra]
    labels = list(labels) + [lab for _, lab in extra]
    if not handles:
        return None
    spare = [ax for ax in np.ravel(axes) if not ax.get_visible()]
    slot = next((ax for ax in fig.axes if ax.get_label() == LEGEND_SLOT), None)
    if spare:
        ax = spare[0]
        ax.set_visible(True)
        ax.axis("off")
        width = ax.get_position().width * fig.get_figwidth()
        ncol = 1 if len(labels) <= 8 else min(2, _legend_columns(labels, width, LEGEND_SIZE))
        return ax.legend(_row_major(handles, ncol), _row_major(labels, ncol), loc="center", ncol=ncol,
                         frameon=False, fontsize=LEGEND_SIZE)
    if slot is None:
        return fig.legend(handles, labels, loc="outside right center", frameon=False, fontsize=LEGEND_SIZE)
    ncol = _legend_columns(labels, fig.get_figwidth(), LEGEND_SIZE)
    return slot.legend(_row_major(handles, ncol), _row_major(labels, ncol), loc="upper center",
                       bbox_to_anchor=(0.5, 1.0), borderaxespad=0.0, ncol=ncol, frameon=False,
                       fontsize=LEGEND_SIZE, columnspacing=1.2, handlelength=1.8)


def band_handle(text: str = "95% CI"):
    """A legend entry for a shaded band: what the band is."""
    from matplotlib.patches import Patch
    return Patch(facecolor="0.5", alpha=0.25, lw=0), f"shaded: {text}"


def line_handle(text: str, **style):
    """A legend entry for a reference line (``style``: its colour, linestyle ...)."""
    from matplotlib.lines import Line2D
    return Line2D([], [], **{"color": "0.3", "ls": ":", "lw": 1, **style}), text


def footnote(fig: Figure, parts: Sequence[str]) -> None:
    """What a reader must know that the picture cannot show (runs left out, pooled settings): one small
    line under everything (wrapped only when it does not fit). Nothing when there is nothing to say."""
    text = " ".join(p.strip() for p in parts if p and p.strip())
    if text:
        width = int(fig.get_figwidth() * 72 / (CHAR_WIDTH * NOTE_SIZE))
        fig.supxlabel("\n".join(wrap_text(text, width)), fontsize=NOTE_SIZE, color="0.3")


def wrap_text(text: str, width: int) -> list[str]:
    """textwrap.wrap that never breaks inside a $...$ mathtext span (and keeps explicit newlines)."""
    out = []
    for line in text.split("\n"):
        parts = line.split("$")
        protected = "$".join(p.replace(" ", "\x00") if i % 2 else p for i, p in enumerate(parts))
        out += [w.replace("\x00", " ") for w in (textwrap.wrap(protected, width) or [""])]
    return out


def text_width(text: str, fontsize: float) -> float:
    """The width of one line of text, in points, as matplotlib sets it (mathtext included)."""
    from matplotlib.textpath import TextPath
    return float(TextPath((0, 0), text, size=fontsize).get_extents().width)


def figure_title(fig: Figure, text: str, fontsize: float = TITLE_SIZE) -> None:
    """The figure's title: one line saying what it shows (a caption's text belongs in the docs). A
    title wider than the figure is set smaller (down to ``NOTE_SIZE``), never wrapped; a line break is
    an error."""
    if "\n" in text:
        raise ValueError(f"a figure title is one line: {text!r}")
    room = 0.96 * fig.get_figwidth() * 72
    wide = text_width(text, fontsize)
    fig.suptitle(text, fontsize=fontsize if wide <= room else max(NOTE_SIZE, fontsize * room / wide))


def sentence(text: str) -> str:
    """``text`` with its first letter capital (a title that opens with a score's name)."""
    return text[:1].upper() + text[1:]


def unique_handles(axes) -> tuple[list, list]:
    """Every labelled artist of the panels, each label once (first panel that has it wins)."""
    handles, labels = [], []
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    return handles, labels


# ----------------------------------------------------------------------------- what panels draw

def dodge_factors(lags: Sequence[float], n: int) -> list[float]:
    """Multiplicative x offsets (the lag axis is log2) of ``n`` series drawn at the same lag depths (or
    any positive values on a log axis): neighbours ``DODGE`` of the axis' width apart, centred on the
    value."""
    lags = [float(b) for b in lags] or [1.0]
    span = math.log2(max(lags) / min(lags)) + 2 * LAG_MARGIN
    return [2.0 ** ((i - (n - 1) / 2) * DODGE * span) for i in range(n)]


def set_lag_axis(ax, lags: Sequence[int], label: bool = True, dodged: int = 1) -> None:
    """log2 x-axis with ticks at exactly the lag depths of the sweep, wide enough for ``dodged``
    series side by side (``dodge_factors``)."""
    lags = sorted(set(int(b) for b in lags))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(lags))
    ax.set_xticklabels([str(b) for b in lags])
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = min(lags), max(lags)
    margin = LAG_MARGIN + math.log2(max(dodge_factors(lags, max(1, dodged))))
    ax.set_xlim(lo / 2 ** margin, hi * 2 ** margin)
    if label:
        ax.set_xlabel(LAG_AXIS_LABEL)


POINT_INTERVAL = 0.02  # an interval narrower than this share of its panel's range is drawn as a point too


def interval_bars(ax, bars: Sequence[tuple], span: float | None = None) -> None:
    """Horizontal interval bars, one per row: ``(y, point, low, high, colour)`` as a bar from low to high
    and a black tick at the point. A bar narrower than ``POINT_INTERVAL`` of ``span`` (default: the
    panel's range of the bars) would vanish under its tick, so it gets a dot of its colour too: every
    bootstrap replicate gave (almost) the same value."""
    finite = [b for b in bars if all(is_finite(v) for v in b[1:4])]
    if not finite:
        return
    if span is None:
        span = max(b[3] for b in finite) - min(b[2] for b in finite)
        ax.margins(x=0.1)  # no bar ends on the frame
    for y, point, low, high, colour in finite:
        ax.plot([low, high], [y, y], color=colour, lw=5, alpha=0.5, solid_capstyle="butt")
        ax.plot([point], [y], "|", color="k", ms=9)
        if not span > 0 or high - low < POINT_INTERVAL * span:
            ax.plot([point], [y], "o", ms=6, mfc=colour, mec="k", mew=0.8, zorder=3)


def figures_dir_of(run_dir: str, figures_dir: str | None = None) -> str:
    path = figures_dir or os.path.join(run_dir, FIGURES)
    os.makedirs(path, exist_ok=True)
    return path


# No version string or creation date in the files: the same figure gives the same bytes.
_METADATA = {"png": {"Software": None}, "pdf": {"Creator": None, "Producer": None, "CreationDate": None}}
DPI = 150  # a FIGURE_WIDTH figure is 1050 pixels wide


def save_figure(fig: Figure, run_dir: str, name: str, figures_dir: str | None = None) -> list[str]:
    """Write ``<name>.png`` and ``.pdf`` into ``figures_dir`` (default ``RUN/figures/``), each to a
    temporary name, then renamed."""
    out = []
    base = os.path.join(figures_dir_of(run_dir, figures_dir), name)
    for ext in ("png", "pdf"):
        path = f"{base}.{ext}"
        tmp = f"{base}.tmp.{os.getpid()}.{ext}"
        fig.savefig(tmp, dpi=DPI if ext == "png" else None, format=ext, metadata=_METADATA[ext])
        os.replace(tmp, path)
        out.append(path)
    return out


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
