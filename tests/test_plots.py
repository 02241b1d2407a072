"""Figures from synthetic run directories in the exact on-disk formats of runner.run_group and
tables.summarise (fast: no training, no compilation)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from vaco_jax.analysis import tables

from vaco_jax.analysis import figures
from vaco_jax.analysis import reviewer_figures
from vaco_jax.analysis import results
from vaco_jax.analysis.results import read_csv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = ("hopper", "inverted_double_pendulum")
METHODS = ("ppo_clip", "vaco", "a3po")
LAGS = (1, 2, 4)
SEEDS = (0, 1, 2)
CHUNKS = 5
STEPS_PER_CHUNK = 20_000
CEILING = {"hopper": 2500.0, "inverted_double_pendulum": 9350.0}
RANDOM = {"hopper": 20.0, "inverted_double_pendulum": 60.0}
DIVERGED = ("hopper", "vaco", 4, 2)  # (task, method, lag depth, seed)
CELL = dict(learning_rate=3e-4, clip_epsilon=0.2, tv_budget=0.2)


def _diagnostics(method: str, lag: int, rng) -> dict:
    stale = (lag - 1) / 2
    d = {"tv_behaviour": 0.02 + 0.04 * stale + 0.005 * rng.random(),
         "tv_learner": 0.02 + 0.002 * rng.random(), "mean_staleness": stale + 0.05 * rng.random(),
         "entropy": 1.0 - 0.1 * rng.random(), "value_loss": 10 * rng.random(),
         "explained_variance": 0.8 + 0.1 * rng.random()}
    if method == "vaco":
        d["filtered_fraction"] = min(0.9, 0.25 * stale + 0.02 * rng.random())
        d["tv_estimate"] = d["tv_behaviour"]
    else:
        d["clip_fraction"] = min(0.9, 0.05 + 0.12 * stale + 0.02 * rng.random())
        d["weight_mean"] = 1.0 + 0.01 * rng.random()
    return d


def _write_group(group_dir: str, task: str, method: str, lags, seeds, tags: dict, rng, quality: float) -> None:
    """curves.csv + scores.csv of one group, computed the way runner.run_group computes them."""
    os.makedirs(group_dir, exist_ok=True)
    curve_rows, score_rows = [], []
    for lag in lags:
        for seed in seeds:
            cell = {"lag_depth": lag, "seed": seed, **CELL}
            penalty = {"ppo_clip": 0.25, "a3po": 0.12, "vaco": 0.05}.get(method, 0.1) * np.log2(lag)
            rows = []
            for chunk in range(CHUNKS):
                frac = 1 - np.exp(-(chunk + 1) / 2)
                eval_ret = RANDOM[task] + (CEILING[task] - RANDOM[task]) * frac * quality * (1 - penalty) * (
                    1 + 0.05 * rng.standard_normal())
                diverged = (task, method, lag, seed) == DIVERGED and chunk >= 3
                row = {"env": task, "method": method, **tags, **cell, "chunk": chunk,
                       "env_steps": float((chunk + 1) * STEPS_PER_CHUNK),
                       "eval_return": float("nan") if diverged else float(eval_ret),
                       "train_return": float(0.8 * eval_ret), "diverged": bool(diverged),
                       **_diagnostics(method, lag, rng), "seconds": 1.0, "grid_steps_per_second": 1e5}
                rows.append(row)
            curve_rows += rows
            evals = np.array([r["eval_return"] for r in rows])
            score = {"env": task, "method": method, **tags, **cell,
                     "final_eval_return": float(evals[-1]), "auc_eval_return": float(np.mean(evals)),
                     "train_return_last5pct": rows[-1]["train_return"],
                     "diverged": any(r["diverged"] for r in rows) or not np.isfinite(evals[-1])}
            for k in rows[0]:
                if k not in score and k not in ("chunk", "env_steps", "eval_return", "train_return", "seconds",
                                                "grid_steps_per_second"):
                    score[f"mean_{k}"] = float(np.nanmean([float(r[k]) for r in rows]))
            score_rows.append(score)
    results.write_cells(group_dir, [{"lag_depth": b, "seed": s, **CELL} for b in lags for s in seeds])
    results.write_table(os.path.join(group_dir, "curves.csv"), curve_rows)
    results.write_table(os.path.join(group_dir, "scores.csv"), score_rows)


def make_synthetic_run(run_dir: str, seed: int = 0) -> str:
    """A lag sweep: 2 tasks x 3 methods (incl. ppo_clip) x lag depths 1, 2, 4 x 3 seeds, one diverged run."""
    rng = np.random.default_rng(seed)
    os.makedirs(run_dir, exist_ok=True)
    results.write_json(os.path.join(run_dir, "run.json"),
                       {"command": {"preset": "synthetic", "bootstrap_reps": 300}, "versions": {}})
    results.write_json(os.path.join(run_dir, "random_scores.json"), RANDOM)
    for task in TASKS:
        for method in METHODS:
            _write_group(os.path.join(run_dir, task, method), task, method, LAGS, SEEDS, {}, rng, quality=1.0)
    return run_dir


def make_forward_run(run_dir: str, epochs=(1, 2, 4), minibatches=(4, 8), seed: int = 1) -> str:
    """A forward-lag sweep at backward lag 8: groups RUN/<task>/<method>/e<E>_m<M>/ with tag columns."""
    rng = np.random.default_rng(seed)
    task = "inverted_double_pendulum"
    os.makedirs(run_dir, exist_ok=True)
    results.write_json(os.path.join(run_dir, "random_scores.json"), {task: RANDOM[task]})
    for method in ("ppo_clip", "vaco"):
        for e in epochs:
            for m in minibatches:
                quality = 1.0 - 0.03 * e * m / 8 * (2 if method == "ppo_clip" else 1)
                _write_group(os.path.join(run_dir, task, method, f"e{e}_m{m}"), task, method, (8,), (0, 1),
                             {"num_epochs": e, "num_minibatches": m}, rng, quality)
    return run_dir


def _assert_figures(paths):
    assert paths, "no figure written"
    pngs = [p for p in paths if p.endswith(".png")]
    pdfs = [p for p in paths if p.endswith(".pdf")]
    assert len(pngs) == len(pdfs) == len(paths) // 2
    for png in pngs:
        assert png[:-4] + ".pdf" in pdfs
    for p in paths:
        assert os.path.getsize(p) > 1000, p
        assert os.path.dirname(p).endswith("figures")
    for png in pngs:
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    for pdf in pdfs:
        with open(pdf, "rb") as f:
            assert f.read(5) == b"%PDF-"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = make_synthetic_run(str(tmp_path_factory.mktemp("lag") / "run"))
    tables.summarise(path, reps=300)
    return path


def test_synthetic_run_matches_the_documented_formats(run_dir):
    summary = read_csv(os.path.join(run_dir, "summary.csv"))
    assert {r["normalization"] for r in summary} == {"raw", "normalized", "own_b1"}
    assert {"median", "iqm", "mean", "optimality_gap"} <= {r["aggregate"] for r in summary}
    vaco4 = [r for r in summary if r["method"] == "vaco" and r["lag_depth"] == 4]
    assert all(r["n_diverged"] == 1 and r["n_runs"] == 2 for r in vaco4)
    diag = read_csv(os.path.join(run_dir, "diagnostics.csv"))
    assert "mean_filtered_fraction_se" in diag[0] and "mean_clip_fraction" in diag[0]


@pytest.mark.parametrize("normalization", [None, "raw", "normalized"])
def test_aggregate_vs_lag(run_dir, normalization):
    paths = figures.plot_aggregate_vs_lag(run_dir, normalization=normalization)
    _assert_figures(paths)
    expected = normalization or "normalized"
    assert paths[0].endswith(f"aggregate_vs_lag_final_eval_return_{expected}.png")


def test_aggregate_vs_lag_other_scores_and_missing(run_dir):
    _assert_figures(figures.plot_aggregate_vs_lag(run_dir, score="auc_eval_return"))
    with pytest.raises(figures.NoData):
        figures.plot_aggregate_vs_lag(run_dir, score="no_such_score")


def test_learning_curves(run_dir):
    paths = figures.plot_learning_curves(run_dir)
    _assert_figures(paths)
    assert len(paths) == 2 * len(TASKS)
    one = figures.plot_learning_curves(run_dir, task="hopper")
    assert [os.path.basename(p) for p in one] == ["learning_curves_hopper.png", "learning_curves_hopper.pdf"]


def test_curve_series_excludes_and_counts_diverged(run_dir):
    from vaco_jax.analysis.results import load_curves

    rows = [r for r in load_curves(run_dir) if r["env"] == "hopper"]
    series = figures._curve_series(rows, "eval_return", [])
    x, mean, se, n, n_div = series[("vaco", ())][4]
    assert (n, n_div) == (2, 1)
    assert len(x) == CHUNKS and np.all(np.isfinite(mean)) and np.all(se >= 0)
    assert series[("ppo_clip", ())][1][3:] == (3, 0)


def test_filtering_and_tv(run_dir):
    _assert_figures(figures.plot_filtering_vs_lag(run_dir))
    _assert_figures(figures.plot_tv_vs_lag(run_dir))


def test_forward_lag_absent_in_lag_sweep(run_dir):
    with pytest.raises(figures.NoData):
        figures.plot_forward_lag(run_dir)


def test_make_all(tmp_path, capsys):
    path = make_synthetic_run(str(tmp_path / "run"))
    paths = figures.make_all(path)  # no summary.csv yet: make_all runs tables.summarise
    assert os.path.exists(os.path.join(path, "summary.csv"))
    _assert_figures(paths)
    names = {os.path.basename(p) for p in paths}
    assert {"aggregate_vs_lag_final_eval_return_normalized.png", "aggregate_vs_lag_final_eval_return_raw.png",
            "learning_curves_hopper.png", "filtering_vs_lag.png", "tv_vs_lag.png"} <= names
    assert not any(n.startswith("forward_lag") for n in names)


def test_make_all_on_an_empty_directory(tmp_path, capsys):
    assert figures.make_all(str(tmp_path)) == []
    assert "skipped" in capsys.readouterr().out


def test_forward_lag_heatmap_and_lines(tmp_path):
    heat = make_forward_run(str(tmp_path / "heat"))
    paths = figures.plot_forward_lag(heat)
    _assert_figures(paths)
    assert os.path.basename(paths[0]) == "forward_lag_final_eval_return_inverted_double_pendulum.png"
    lines = make_forward_run(str(tmp_path / "lines"), epochs=(1, 2, 4, 8), minibatches=(4,))
    _assert_figures(figures.plot_forward_lag(lines, score="auc_eval_return"))
    all_paths = figures.make_all(heat)
    _assert_figures(all_paths)
    assert any(os.path.basename(p).startswith("forward_lag") for p in all_paths)


def test_variant_keys():
    rows = [{"env": "a", "method": "m", "lag_depth": 1, "seed": s, "num_epochs": e, "num_minibatches": 4,
             "learning_rate": 3e-4, "mean_clip_fraction": 0.1} for s in (0, 1) for e in (1, 2)]
    assert figures.variant_keys(rows) == ["num_epochs"]


def test_plot_script(tmp_path):
    path = make_synthetic_run(str(tmp_path / "run"))
    out = subprocess.run([sys.executable, os.path.join(REPO, "experiments", "plot.py"), path, "--bootstrap-reps",
                          "200"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    printed = [ln.strip() for ln in out.stdout.splitlines() if ln.strip().endswith((".png", ".pdf"))]
    assert printed and all(os.path.exists(p) for p in printed)
    assert os.path.exists(os.path.join(path, "summary.csv"))


# ----------------------------------------------------------------------------- reviewer figures (6)-(10)

def _png_width_inches(path: str, dpi: int = 150) -> float:
    import struct

    with open(path, "rb") as f:
        head = f.read(24)
    return struct.unpack(">I", head[16:20])[0] / dpi


def _write_staleness(run_dir: str, capacity: int = 4) -> None:
    """staleness.npz for every group: uniform ages 0 ... B-1 (the `uniform` lag model)."""
    for g in results.group_dirs(run_dir):
        cells = results.read_cells(g)
        counts = np.zeros((CHUNKS, len(cells), capacity), np.int32)
        for i, c in enumerate(cells):
            counts[:, i, : c["lag_depth"]] = 64
        results.save_npz(os.path.join(g, "staleness.npz"), counts=counts)


@pytest.mark.parametrize("name", ["interval", "poi", "profiles", "iqm_curves", "staleness"])
def test_reviewer_figures(run_dir, name):
    if name == "staleness":
        _write_staleness(run_dir)
    fn = {"interval": figures.plot_interval_estimates, "poi": figures.plot_probability_of_improvement,
          "profiles": figures.plot_performance_profiles, "iqm_curves": figures.plot_iqm_curves,
          "staleness": figures.plot_staleness}[name]
    paths = fn(run_dir)
    _assert_figures(paths)
    for p in paths:
        if p.endswith(".png"):
            assert _png_width_inches(p) <= 7.0 + 1e-6, p


def _one_task_run(tmp_path) -> str:
    """A run directory of one task (hopper), every method, the module's lag depths and seeds."""
    run = str(tmp_path / "one")
    rng = np.random.default_rng(5)
    os.makedirs(run)
    results.write_json(os.path.join(run, "random_scores.json"), RANDOM)
    for method in METHODS:
        _write_group(os.path.join(run, "hopper", method), "hopper", method, LAGS, SEEDS, {}, rng, quality=1.0)
    return run


def test_reviewer_figures_one_task_and_make_all(tmp_path):
    run = _one_task_run(tmp_path)
    _write_staleness(run)
    paths = figures.make_all(run, reps=100)
    names = {os.path.basename(p) for p in paths}
    assert {"interval_estimates_final_eval_return_normalized.png", "probability_of_improvement_final_eval_return.png",
            "performance_profiles_final_eval_return.png", "iqm_sample_efficiency.png",
            "staleness_histograms.png"} <= names
    assert "aggregate_vs_lag_final_eval_return_own_b1.png" in names
    for p in paths:
        if os.path.basename(p).startswith(("interval", "probability", "performance", "iqm", "staleness",
                                           "aggregate_vs_lag")) and p.endswith(".png"):
            assert _png_width_inches(p) <= 7.0 + 1e-6, p
    # one task: the median of its mean would repeat the mean, so the table has no median row (a reader
    # would take it for the runs' median); the IQM, mean and gap stay
    aggregates = {r["aggregate"] for r in figures.read_summary(run)}
    assert "median" not in aggregates and {"iqm", "mean", "optimality_gap"} <= aggregates


def test_reviewer_figures_without_data(tmp_path):
    run = str(tmp_path / "bare")
    rng = np.random.default_rng(6)
    os.makedirs(run)
    for task in TASKS:  # two tasks, no random_scores.json: nothing to pool across tasks
        _write_group(os.path.join(run, task, "a3po"), task, "a3po", LAGS, SEEDS, {}, rng, quality=1.0)
    with pytest.raises(figures.NoData):
        figures.plot_probability_of_improvement(run)
    with pytest.raises(figures.NoData):
        figures.plot_performance_profiles(run)
    with pytest.raises(figures.NoData):
        figures.plot_iqm_curves(run)
    with pytest.raises(figures.NoData):
        figures.plot_staleness(run)


def test_probability_of_improvement_is_computed_apart_and_drawn_as_returned(run_dir, monkeypatch):
    from vaco_jax.analysis import reviewer

    rows = results.load_scores(run_dir)
    got = reviewer.probability_of_improvement(rows, "vaco", "final_eval_return", reps=100, order=figures.sort_methods)
    assert sorted(got) == list(LAGS)
    for res in got.values():
        assert [d["method"] for d in res] == figures.sort_methods({"ppo_clip", "a3po"})
        assert all(0.0 <= d["low"] <= d["point"] <= d["high"] <= 1.0 for d in res)
    assert reviewer.probability_of_improvement(rows, "vaco", "final_eval_return", reps=100,
                                               order=figures.sort_methods) == got  # seeded: the same numbers

    # the figure draws what the function returns, and nothing it computed itself
    fake = {2: [{"method": "a3po", "point": 0.25, "low": 0.125, "high": 0.375}]}
    calls, drawn = [], []
    monkeypatch.setattr(reviewer, "probability_of_improvement", lambda *a, **k: calls.append((a, k)) or fake)
    monkeypatch.setattr(reviewer_figures, "save_figure", lambda fig, *a, **k: drawn.append(fig) or [])
    reviewer_figures.plot_probability_of_improvement(run_dir)
    (args, kwargs), = calls
    assert args[1:4] == ("vaco", "final_eval_return", 300)  # reps: the run's bootstrap_reps
    ax = [a for a in drawn[0].axes if a.get_visible()]
    assert len(ax) == 1 and ax[0].get_title() == "B = 2"
    bar, tick = ax[0].get_lines()[:2]
    assert list(bar.get_xdata()) == [0.125, 0.375] and list(tick.get_xdata()) == [0.25]
    assert [t.get_text() for t in ax[0].get_yticklabels()] == [figures.method_label("a3po")]


# ----------------------------------------------------------------------------- read at a glance (issue 49)
# One-line titles, one legend outside every panel's data, no caption in the picture, plurals, methods
# dodged apart, intervals that stay visible as points, and no probability of improvement at a ceiling.

def _render(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """Every figure make_all draws from the synthetic run (name -> Figure), saving none."""
    path = make_synthetic_run(str(tmp_path_factory.mktemp("glance") / "run"))
    _write_staleness(path)
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        for module in (figures, reviewer_figures):
            mp.setattr(module, "save_figure", lambda fig, run_dir, name, figures_dir=None: out.update({name: fig}) or [name])
        figures.make_all(path, reps=100)
    assert {"aggregate_vs_lag_final_eval_return_normalized", "learning_curves_hopper", "tv_vs_lag",
            "interval_estimates_final_eval_return_normalized", "probability_of_improvement_final_eval_return",
            "probability_of_improvement_auc_eval_return", "performance_profiles_final_eval_return",
            "iqm_sample_efficiency", "staleness_histograms"} <= set(out)
    return out


def test_every_title_is_one_line_that_fits_and_no_caption_is_drawn(drawn):
    from matplotlib.text import Text

    from vaco_jax.analysis import plotting

    for name, fig in drawn.items():
        renderer = _render(fig)
        title = fig.get_suptitle()
        assert title and "\n" not in title, (name, title)
        assert fig._suptitle.get_window_extent(renderer).width <= fig.bbox.width, (name, title)
        assert fig.get_figwidth() <= plotting.FIGURE_WIDTH + 1e-9, name
        texts = [t.get_text() for t in fig.findobj(Text)]
        assert not any("(s)" in t for t in texts), name  # '1 task(s)' is '1 task'
        assert not any("Lines: " in t or "Bars: " in t for t in texts), name  # the caption lives in the docs
    # a footnote only says what was left out: the run's one diverged run, and nothing where none was
    assert "Diverged runs left out: VACO B = 4: 1 run" in drawn["aggregate_vs_lag_final_eval_return_normalized"].get_supxlabel()
    for name in ("interval_estimates_final_eval_return_normalized", "performance_profiles_final_eval_return",
                 "staleness_histograms", "tv_vs_lag"):
        assert drawn[name].get_supxlabel() == "", name


def test_every_legend_lies_outside_the_panels_data(drawn):
    checked = 0
    for name, fig in drawn.items():
        renderer = _render(fig)
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert 0 <= box.x0 and box.x1 <= fig.bbox.width and 0 <= box.y0, name  # inside the picture
            assert box.width <= fig.bbox.width, name
            for ax in panels:
                assert not box.overlaps(ax.get_window_extent(renderer)), (name, ax.get_title())
            checked += 1
    assert checked >= 6  # every figure with several methods or lag depths has its legend


def test_methods_are_dodged_apart_at_each_lag_depth(drawn):
    fig = drawn["aggregate_vs_lag_final_eval_return_normalized"]
    ax = fig.axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_label() in {figures.method_label(m) for m in METHODS}]
    assert len(lines) == len(METHODS)
    xs = np.array([ln.get_xdata() for ln in lines], float)  # methods x lag depths
    for j, lag in enumerate(LAGS):
        assert len(set(np.round(xs[:, j], 9))) == len(METHODS)  # no method hides another one
        assert np.all(np.abs(np.log2(xs[:, j] / lag)) < 0.2)  # each beside its lag depth's tick
    assert list(ax.get_xticks()) == list(LAGS)


def test_plural_text():
    from vaco_jax.analysis import plotting

    assert plotting.plural(1, "task") == "1 task" and plotting.plural(3, "task") == "3 tasks"
    assert plotting.count_text([10, 10], "run") == "10 runs" and plotting.count_text([1], "run") == "1 run"
    assert plotting.count_text([3, 2], "run") == "2–3 runs"


def test_a_one_task_figure_says_1_task(tmp_path):
    run = _one_task_run(tmp_path)
    tables.summarise(run, reps=50)
    fig = _drawn_by(figures, figures.plot_aggregate_vs_lag, run)
    assert fig.get_suptitle().endswith(", 1 task, 2–3 runs per point")  # VACO at B = 4: one run diverged


def _drawn_by(module, fn, *args, **kw):
    """The Figure ``fn`` would have saved."""
    kept = []
    saved = module.save_figure
    module.save_figure = lambda fig, *a, **k: kept.append(fig) or []
    try:
        fn(*args, **kw)
    finally:
        module.save_figure = saved
    (fig,) = kept
    return fig


def test_a_zero_width_interval_is_drawn_as_a_visible_point():
    from matplotlib.figure import Figure

    from vaco_jax.analysis import plotting

    ax = Figure().subplots()
    plotting.interval_bars(ax, [(0, 1.0, 1.0, 1.0, "C0"), (1, 0.5, 0.2, 0.8, "C1")], span=1.0)
    dots = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    assert len(dots) == 1 and list(dots[0].get_xdata()) == [1.0] and list(dots[0].get_ydata()) == [0]
    assert dots[0].get_markersize() >= 5 and dots[0].get_visible()


def test_a_probability_of_one_is_drawn_inside_the_frame(run_dir, monkeypatch):
    from vaco_jax.analysis import reviewer

    fake = {4: [{"method": "ppo_clip", "point": 1.0, "low": 1.0, "high": 1.0},
                {"method": "a3po", "point": 0.75, "low": 0.5, "high": 1.0}]}
    monkeypatch.setattr(reviewer, "probability_of_improvement", lambda *a, **k: fake)
    fig = _drawn_by(reviewer_figures, reviewer_figures.plot_probability_of_improvement, run_dir)
    (ax,) = [a for a in fig.axes if a.get_visible()]
    dots = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    assert [list(d.get_xdata()) for d in dots] == [[1.0]]  # the point interval, not the wide one
    assert ax.get_xlim()[1] > 1.0 and ax.get_xlim()[0] < 0.0  # P = 1 (or 0) is clear of the frame


def _at_ceiling(run: str, task: str) -> None:
    """Every run of ``task`` ends within a point of 9,350 (VACO a fraction higher): its ceiling."""
    for method in METHODS:
        group = os.path.join(run, task, method)
        rows = results.read_table(os.path.join(group, "scores.csv"))
        for r in rows:
            r["final_eval_return"] = 9350.0 + 0.1 * METHODS.index(method) + 0.01 * int(r["seed"])
        results.write_table(os.path.join(group, "scores.csv"), rows)


def test_probability_of_improvement_leaves_out_a_task_at_its_ceiling(tmp_path):
    from vaco_jax.analysis import claims

    run = make_synthetic_run(str(tmp_path / "run"))
    _at_ceiling(run, "inverted_double_pendulum")
    assert claims.ceiling_tasks(results.load_scores(run), RANDOM) == ["inverted_double_pendulum"]
    fig = _drawn_by(reviewer_figures, reviewer_figures.plot_probability_of_improvement, run)
    assert fig.get_suptitle().endswith("1 task")
    assert "ceiling" in fig.get_supxlabel() and "inverted_double_pendulum" in fig.get_supxlabel()
    # the AUC does not saturate: the same figure on it keeps both tasks
    fig = _drawn_by(reviewer_figures, reviewer_figures.plot_probability_of_improvement, run, "auc_eval_return")
    assert fig.get_suptitle().endswith("2 tasks") and fig.get_supxlabel() == ""


def test_probability_of_improvement_is_skipped_when_every_task_is_at_its_ceiling(tmp_path, capsys):
    run = str(tmp_path / "one")
    rng = np.random.default_rng(7)
    os.makedirs(run)
    results.write_json(os.path.join(run, "random_scores.json"), RANDOM)
    for method in METHODS:
        task = "inverted_double_pendulum"
        _write_group(os.path.join(run, task, method), task, method, LAGS, SEEDS, {}, rng, quality=1.0)
    _at_ceiling(run, "inverted_double_pendulum")
    with pytest.raises(figures.NoData, match="every task is at its ceiling.*inverted_double_pendulum"):
        figures.plot_probability_of_improvement(run)
    with pytest.MonkeyPatch.context() as mp:
        for module in (figures, reviewer_figures):
            mp.setattr(module, "save_figure", lambda fig, run_dir, name, figures_dir=None: [name])
        names = figures.make_all(run, reps=50)
    assert "probability_of_improvement_final_eval_return" not in names
    assert "probability_of_improvement_auc_eval_return" in names
    assert "skipped probability of improvement: every task is at its ceiling" in capsys.readouterr().out
