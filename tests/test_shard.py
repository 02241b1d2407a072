"""A sweep split into shards (``--shard I/N``), merged again, and one cell re-run alone (``--cell``)
(docs/scale.md). Training runs only on the tiny pure-JAX point_mass preset; the rest is file-level."""

import os
import shutil
import threading

import numpy as np
import pytest

from conftest import tiny_config, study_module
from vaco_jax.analysis import tables
from vaco_jax.analysis import figures
from vaco_jax.analysis import reviewer_figures
from vaco_jax.analysis import results
from vaco_jax.driver import grid, study
from vaco_jax.core.config import ConfigError
from vaco_jax.analysis.results import ResultsError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ("lag_sweep", "delta_sweep", "forward_lag", "mismatch")


def _script(name):
    return study_module(name)


def _groups(n_groups=2, n_cells=6):
    cells = tuple(grid.grid([1, 2, 4], range(n_cells // 3)))
    return [grid.Group(tiny_config(method=m), cells, f"point_mass/{m}", m)
            for m in ("ppo_clip", "vaco")[:n_groups]]


# ----------------------------------------------------------------------------- splitting (no training)

def test_shards_are_disjoint_even_and_keep_a_groups_cells_in_one_program():
    groups = _groups()
    parts = [grid.shard_groups(groups, i, 4) for i in range(4)]
    assert [sum(len(g.cells) for g in p) for p in parts] == [3, 3, 3, 3]
    assert [len(p) for p in parts] == [1, 1, 1, 1]  # 3 cells of one group: one compiled program each
    assert parts[1][0].subdir == "point_mass/ppo_clip/shard-1-of-4"
    flat = [(g.subdir.rsplit("/", 1)[0], c) for p in parts for g in p for c in g.cells]
    assert flat == [(g.subdir, c) for g in groups for c in g.cells]  # every cell once, in plan order
    sizes = [sum(len(g.cells) for g in grid.shard_groups(groups, i, 5)) for i in range(5)]
    assert sum(sizes) == 12 and max(sizes) - min(sizes) <= 1
    assert len(grid.shard_groups(groups, 2, 5)) == 2  # a shard across the groups' border: two programs
    assert grid.shard_groups(groups, 0, 1) == [
        type(g)(g.config, g.cells, g.subdir + "/shard-0-of-1", f"{g.label} [shard 0/1]") for g in groups]


@pytest.mark.parametrize("text", ["2/2", "-1/2", "1/0", "0/-3", "x", "1", "1/2/3", "a/b", "", "1.5/2"])
def test_a_malformed_or_out_of_range_shard_names_shard_and_the_allowed_values(text):
    with pytest.raises(ConfigError, match=r"shard=.*allowed values are I/N with N >= 1 and 0 <= I < N"):
        grid.parse_shard(text)
    assert grid.parse_shard(" 3/4 ") == (3, 4)


def test_more_shards_than_cells_is_refused():
    with pytest.raises(ConfigError, match=r"shard=0/13: the study has 12 cell\(s\), so N must be 1..12"):
        grid.shard_groups(_groups(), 0, 13)


def test_a_cell_is_chosen_by_its_plan_number_or_by_group_and_index(capsys):
    groups = _groups()
    assert "#0-5" in grid.plan_text(groups) and "#6-11" in grid.plan_text(groups)
    g, j, k = grid.select_cell(groups, "7")
    assert (g.subdir, j, k) == ("point_mass/vaco", 1, 7)
    assert grid.select_cell(groups, "point_mass/vaco:1")[1:] == (1, 7)
    for bad in ("12", "-1", "x", "point_mass/vaco:6", "nogroup:0"):
        with pytest.raises(ConfigError, match=r"cell=.*allowed values are K in 0..11 or GROUP:J"):
            grid.select_cell(groups, bad)
    listing = capsys.readouterr().out
    assert "     11  point_mass/vaco:5" in listing and "lag_depth=4 seed=1" in listing


@pytest.mark.parametrize("flags, match", [
    (dict(shard="4/4"), "shard="), (dict(shard="0/99"), r"shard=0/99: the study has \d cell\(s\), so N must be 1"),
    (dict(cell="99"), "cell='99': allowed values are K in 0..[0-9]"),
    (dict(shard="0/2", cell="1"), "not both"), (dict(shard="0/2", max_chunks=0), "max_chunks"),
])
def test_every_study_checks_shard_and_cell_before_writing_anything(tmp_path, flags, match, capsys):
    for name in SCRIPTS:
        module = _script(name)
        out = str(tmp_path / name)
        args = module.Args(preset="tiny", out=out, progress=False, **flags)
        with pytest.raises(ConfigError, match=match):
            module.main(args)
        assert not os.path.exists(out), name


# ----------------------------------------------------------------------------- merging (no training)

def _synthetic(tmp_path):
    """A small lag sweep in the on-disk format (2 tasks x 2 methods x 2 lag depths x 2 seeds)."""
    from test_plots import RANDOM, _write_group

    whole = str(tmp_path / "whole")
    rng = np.random.default_rng(0)
    os.makedirs(whole)
    results.write_json(os.path.join(whole, "random_scores.json"), RANDOM)
    for task in RANDOM:
        for method in ("ppo_clip", "vaco"):
            _write_group(os.path.join(whole, task, method), task, method, (1, 4), (0, 1), {}, rng, 1.0)
    return whole


def test_several_run_directories_merge_into_one_summary_and_a_cell_twice_is_an_error(tmp_path, monkeypatch):
    whole = _synthetic(tmp_path)
    part_a, part_b = str(tmp_path / "a"), str(tmp_path / "b")
    shutil.copytree(whole, part_a)
    shutil.copytree(whole, part_b)
    shutil.rmtree(os.path.join(part_a, "hopper"))  # each part holds what the other lacks
    shutil.rmtree(os.path.join(part_b, "inverted_double_pendulum"))
    os.remove(os.path.join(part_b, "random_scores.json"))
    expected, expected_diag = tables.summarise(whole, reps=100)
    merged_dir = str(tmp_path / "merged")
    summary, diag = tables.summarise([part_a, part_b], reps=100, out=merged_dir)
    assert summary == expected and diag == expected_diag
    assert results.read_table(os.path.join(merged_dir, "summary.csv")) == results.read_table(
        os.path.join(whole, "summary.csv"))
    assert not os.path.exists(os.path.join(part_b, "summary.csv"))
    by = tables.summarise_by([part_a, part_b], ("method", "lag_depth"), reps=100, filename="by.csv",
                               out=merged_dir)
    assert by == tables.summarise_by(whole, ("method", "lag_depth"), reps=100)
    drawn = []  # which figures go where (rendering them is test_plots' job, and slow)
    for module in (figures, reviewer_figures):
        monkeypatch.setattr(module, "save_figure",
                            lambda fig, run_dir, name, figures_dir=None: drawn.append((run_dir, name)) or [name])
    paths = figures.make_all([part_a, part_b], out=merged_dir, reps=100)
    assert {"learning_curves_hopper", "learning_curves_inverted_double_pendulum", "tv_vs_lag",
            "aggregate_vs_lag_final_eval_return_normalized"} <= set(paths)
    assert {d for d, _ in drawn} == {merged_dir}
    with pytest.raises(ResultsError, match="is in both"):
        results.load_scores([whole, part_a])  # part_a's cells are in whole too


def test_rerun_directories_are_not_part_of_the_run(tmp_path):
    whole = _synthetic(tmp_path)
    n = len(results.load_scores(whole))
    shutil.copytree(os.path.join(whole, "hopper", "vaco"), os.path.join(whole, "rerun", "hopper", "vaco", "cell-3"))
    assert len(results.load_scores(whole)) == n  # else every cell of hopper/vaco would count twice


def test_concurrent_writers_of_one_file_never_collide_or_leave_a_broken_file(tmp_path):
    """Shards on one machine (same pid namespace) or on several (same pid possible) write
    random_scores.json at once: each write has a temporary name of its own, so every reader sees a
    whole file, and nothing is left over."""
    path = str(tmp_path / "random_scores.json")
    errors = []

    def writer(i):
        try:
            for j in range(40):
                results.write_json(path, {"point_mass": float(i), "j": j})
                assert results.read_json(path)["point_mass"] in (0.0, 1.0, 2.0, 3.0)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert os.listdir(tmp_path) == ["random_scores.json"]


# ----------------------------------------------------------------------------- the tiny lag sweep, for real

# Whole and sharded grids are not bit-identical (a vmapped grid of 1 cell batches its matmuls
# differently from one of 2): measured relative differences up to ~3e-5 (eval returns), so rtol=1e-5
# is too tight; near-zero means (policy loss ~ 4e-3) need the absolute tolerance.
SCORE_RTOL, SCORE_ATOL = 1e-4, 1e-7


def _run(out, **flags):
    ls = _script("lag_sweep")
    flags = {"seeds": (0,), **flags}  # 2 cells: lag depths 1 and 4 (shards of 1 cell: the re-run's program)
    return ls.main(ls.Args(preset="tiny", out=out, progress=False, figures=False, bootstrap_reps=50,
                           episode_length=30, **flags))


@pytest.fixture(scope="module")
def whole_and_shards(tmp_path_factory):
    """The tiny lag sweep (1 group x 2 cells) run whole into A, and as 2 shards into B."""
    base = tmp_path_factory.mktemp("shards")
    a, b = str(base / "A"), str(base / "B")
    _run(a)
    _run(b, shard="0/2")
    _run(b, shard="1/2")
    return a, b


def test_two_shards_merge_to_the_unsharded_sweep(whole_and_shards, capsys):
    a, b = whole_and_shards
    assert sorted(os.listdir(os.path.join(b, "point_mass", "ppo_clip"))) == ["shard-0-of-2", "shard-1-of-2"]
    assert {"run.shard-0-of-2.json", "run.shard-1-of-2.json", "random_scores.json"} <= set(os.listdir(b))
    for name in ("summary.csv", "diagnostics.csv", "figures", "run.json"):  # a shard writes no summary
        assert not os.path.exists(os.path.join(b, name)), name
    rows_a, rows_b = results.load_scores(a), results.load_scores(b)
    key = lambda r: (r["lag_depth"], r["seed"])  # noqa: E731
    rows_a, rows_b = sorted(rows_a, key=key), sorted(rows_b, key=key)
    assert [key(r) for r in rows_a] == [key(r) for r in rows_b] == [(1, 0), (4, 0)]
    worst = 0.0
    for ra, rb in zip(rows_a, rows_b):
        assert set(ra) == set(rb)
        for k, v in ra.items():
            if isinstance(v, float):
                np.testing.assert_allclose(rb[k], v, rtol=SCORE_RTOL, atol=SCORE_ATOL, err_msg=k)
                worst = max(worst, study._relative_difference(v, rb[k]))
            else:
                assert rb[k] == v, k
    assert worst > 0  # not bit-identical (if this fails, the grids became bit-identical: tighten the tolerance)
    capsys.readouterr()
    _run(b)  # the same command without --shard: runs nothing, merges, writes the summaries
    out = capsys.readouterr().out
    assert "merging the 2 shards" in out and "IQM of the AUC" in out
    summary_a, summary_b = results.read_table(os.path.join(a, "summary.csv")), results.read_table(
        os.path.join(b, "summary.csv"))
    assert len(summary_a) == len(summary_b)
    for ra, rb in zip(summary_a, summary_b):
        for k, v in ra.items():
            if isinstance(v, float):
                np.testing.assert_allclose(rb[k], v, rtol=SCORE_RTOL, atol=SCORE_ATOL, err_msg=k)
            else:
                assert rb[k] == v, k
    merged = str(os.path.dirname(a) + "/merged")  # the shards as separate directories, merged by plot.py
    for i in range(2):
        part = os.path.join(os.path.dirname(a), f"part{i}")
        shutil.copytree(os.path.join(b, "point_mass", "ppo_clip", f"shard-{i}-of-2"),
                        os.path.join(part, "point_mass", "ppo_clip", f"shard-{i}-of-2"))
    shutil.copy(os.path.join(b, "random_scores.json"), os.path.join(os.path.dirname(a), "part0"))
    summary_parts, _ = tables.summarise([os.path.join(os.path.dirname(a), f"part{i}") for i in range(2)],
                                          reps=50, out=merged)
    assert summary_parts == tables.summarise(b, reps=50)[0]


def test_a_shard_refuses_a_directory_that_holds_the_whole_sweep_or_another_split(whole_and_shards):
    a, b = whole_and_shards
    with pytest.raises(ConfigError, match="run whole"):
        _run(a, shard="0/2")
    with pytest.raises(ConfigError, match="2-way split"):
        _run(b, shard="0/1")
    with pytest.raises(ConfigError, match="planned with other cells"):
        _run(b, shard="0/2", seeds=(0, 1, 2))


def test_one_cell_rerun_alone_is_compared_with_the_sweep_and_touches_none_of_its_files(whole_and_shards, capsys):
    a, b = whole_and_shards
    before = {os.path.join(r, f): os.path.getmtime(os.path.join(r, f)) for r, _, fs in os.walk(a) for f in fs}
    _run(a, cell="point_mass/ppo_clip:1")  # = cell 1: lag depth 4, seed 0
    out = capsys.readouterr().out
    assert "re-running cell 1 = point_mass/ppo_clip:1 (lag_depth=4 seed=0)" in out
    assert "largest relative difference:" in out and "final_eval_return" in out
    after = {os.path.join(r, f): os.path.getmtime(os.path.join(r, f)) for r, _, fs in os.walk(a) for f in fs
             if os.sep + "rerun" + os.sep not in os.path.join(r, f)}
    assert after == before  # nothing of the sweep was written
    where = os.path.join(a, "rerun", "point_mass", "ppo_clip", "cell-1")
    (row,) = results.load_scores(where)
    assert (row["lag_depth"], row["seed"]) == (4, 0)
    swept = [r for r in results.load_scores(a) if (r["lag_depth"], r["seed"]) == (4, 0)][0]
    assert len(results.load_scores(a)) == 2  # the re-run is not a third run of the sweep
    table, worst = study.compare_rows(row, swept)
    assert worst < SCORE_RTOL and any(name == "final_eval_return" for name, *_ in table)
    assert f"largest relative difference: {worst:.3e}" in out
    # in a sweep split into shards, the cell's row is found in its shard's directory
    ls = _script("lag_sweep")
    args = ls.Args(preset="tiny", seeds=(0,), episode_length=30)
    (group,) = ls.plan(args, ls.resolve(args))
    in_shard = study.sweep_row(b, group, group.cells[1])
    assert (in_shard["lag_depth"], in_shard["seed"]) == (4, 0)
    assert in_shard["final_eval_return"] == pytest.approx(swept["final_eval_return"], rel=SCORE_RTOL)
    assert study.sweep_row(str(os.path.dirname(a)) + "/nowhere", group, group.cells[1]) is None
