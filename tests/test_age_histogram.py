"""Measured lag into the simulator: an age histogram on disk (driver/histogram.py) becomes the ``ages``
lag model's weights; the model then draws ages distributed as the histogram (a goodness-of-fit test
that a wrong histogram fails), and a point mass at age B - 1 is the ``fixed`` model, bit for bit."""

import dataclasses
import os

import jax
import numpy as np
import pytest
from scipy import stats

from conftest import study_module, tiny_config
from vaco_jax.core.config import ConfigError, make_traced
from vaco_jax.core.lag import make_lag
from vaco_jax.driver.histogram import age_histogram_text, histogram_settings, read_age_histogram, write_age_histogram


def _file(tmp_path, text: str, name: str = "h.csv") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_written_histogram_reads_back_with_its_zeros_and_without_trailing_ones(tmp_path):
    path = str(tmp_path / "h.csv")
    write_age_histogram(path, [5120, 0, 2048, 17, 0, 0], comment="4 actors, Hopper-v4\nseed 0")
    text = open(path).read()
    assert text.startswith("# 4 actors, Hopper-v4\n# seed 0\nage,count\n0,5120\n1,0\n")
    assert read_age_histogram(path) == (5120.0, 0.0, 2048.0, 17.0)
    # another system's export: fractions, ages in any order, a missing age, spaces
    other = _file(tmp_path, "age, count\n2, 0.25\n0, 0.5\n", "other.csv")
    assert read_age_histogram(other) == (0.5, 0.0, 0.25)


@pytest.mark.parametrize("text, message", [
    ("count,age\n0,1\n", "first line that is not a comment must be 'age,count'"),
    ("", "first line that is not a comment must be 'age,count'"),
    ("age,count\n0,1,2\n", "line 2: expected 'age,count'"),
    ("age,count\n0,x\n", "line 2: '0,x' is not two numbers"),
    ("age,count\n1.5,3\n", "line 2: age 1.5 is not a non-negative integer"),
    ("age,count\n-1,3\n", "line 2: age -1 is not a non-negative integer"),
    ("# c\nage,count\n0,1\n0,2\n", "line 4: age 0 is given twice"),
    ("age,count\n0,-2\n", "line 2: count -2 is not a finite non-negative number"),
    ("age,count\n0,nan\n", "line 2: count nan is not a finite non-negative number"),
    ("age,count\n0,0\n3,0\n", "every count is zero"),
])
def test_a_bad_histogram_is_one_line_naming_file_and_line(tmp_path, text, message):
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        read_age_histogram(path)
    assert str(e.value).startswith(f"age_histogram: {path}") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_one_file_is_fixed_weights_several_are_one_axis_and_weights_come_once(tmp_path):
    a = _file(tmp_path, "age,count\n0,3\n1,1\n", "a.csv")
    b = _file(tmp_path, "age,count\n2,1\n", "b.csv")
    assert histogram_settings((a,), {"gamma": 0.9}, {}) == ({"gamma": 0.9, "age_weights": (3.0, 1.0)}, {})
    assert histogram_settings((a, b), {}, {"lr": [1]}) == ({}, {"lr": [1], "age_weights": [(3.0, 1.0),
                                                                                           (0.0, 0.0, 1.0)]})
    with pytest.raises(ConfigError, match="give the ages' weights once"):
        histogram_settings((a,), {"age_weights": (1.0,)}, {})
    with pytest.raises(ConfigError, match="same histogram"):
        histogram_settings((a, _file(tmp_path, "age,count\n1,1\n0,3\n", "c.csv")), {}, {})


def test_the_ages_model_draws_the_histogram_and_a_wrong_histogram_is_rejected(tmp_path):
    counts = read_age_histogram(_file(tmp_path, "age,count\n0,50\n2,30\n3,15\n4,5\n"))
    lag = make_lag("ages", capacity=8, age_weights=counts)
    draws = np.concatenate([np.asarray(lag.start_ages(jax.random.PRNGKey(i), 4096, 10_000)) for i in range(8)])
    observed = np.bincount(draws, minlength=8)
    assert observed[1] == 0 and observed[5:].sum() == 0  # no age the histogram does not hold
    support = [0, 2, 3, 4]
    p = np.asarray(counts)[support] / np.sum(counts)
    fit = stats.chisquare(observed[support], p * len(draws))
    assert fit.pvalue > 1e-3, fit
    wrong = np.array([0.45, 0.33, 0.16, 0.06])  # a histogram a few points off: the test must see it
    assert stats.chisquare(observed[support], wrong * len(draws)).pvalue < 1e-6


def test_a_point_mass_at_B_minus_1_is_the_fixed_model_bit_for_bit(tmp_path):
    weights = read_age_histogram(_file(tmp_path, "# every sample 3 versions old\nage,count\n3,1000\n"))
    assert weights == (0.0, 0.0, 0.0, 1000.0)
    ages = make_lag("ages", capacity=8, age_weights=weights)
    fixed = make_lag("fixed", lag_depth=4, capacity=8)
    np.testing.assert_array_equal(np.asarray(ages.probs), np.asarray(fixed.probs))
    assert int(ages.depth()) == int(fixed.depth()) == 4

    from vaco_jax.core.train import make_train

    out = []
    for settings in (dict(lag_model="ages", age_weights=weights), dict(lag_model="fixed", lag_depth=4)):
        config = tiny_config(total_env_steps=8 * 16 * 6, num_evals=1, **settings)
        state, metrics = jax.jit(make_train(config).train)(jax.random.PRNGKey(3), make_traced(config))
        out.append((state.learner.policy_params, np.asarray(metrics.staleness_counts).reshape(-1, 8).sum(0)))
    for x, y in zip(jax.tree.leaves(out[0]), jax.tree.leaves(out[1])):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    counts = out[0][1]  # ages clipped to the phase index early on, then all at 3
    assert list(counts) == [128, 128, 128, 384, 0, 0, 0, 0]  # 6 phases of 128 samples


def test_the_lag_sweep_takes_histogram_files_as_cells_and_refuses_what_it_cannot_read(tmp_path):
    ls = study_module("lag_sweep")
    a = _file(tmp_path, "age,count\n0,3\n2,1\n", "a.csv")
    b = _file(tmp_path, "age,count\n3,1\n", "b.csv")
    args = ls.Args(preset="tiny", lag_model="ages", age_histogram=(a, b), out=str(tmp_path / "run"))
    spec = ls.resolve(args)
    (group,) = ls.plan(args, spec)
    knobs = sorted({(c.lag_depth, c.knob_dict()["age_weights"]) for c in group.cells})
    assert knobs == [(3, (3.0, 0.0, 1.0)), (4, (0.0, 0.0, 0.0, 1.0))]
    assert len(group.cells) == 2 * len(spec["seeds"]) and group.config.buffer_capacity >= 4
    with pytest.raises(ConfigError, match="age_histogram: read only by --lag-model ages"):
        ls.plan(dataclasses.replace(args, lag_model="uniform"), spec)
    with pytest.raises(ConfigError, match="leave --lag-depths out"):
        ls.resolve(dataclasses.replace(args, lag_depths=(1, 4)))
    with pytest.raises(ConfigError, match="needs the ages' weights"):
        ls.resolve(dataclasses.replace(args, age_histogram=()))


def test_the_text_of_counts_is_what_the_reader_reads(tmp_path):
    text = age_histogram_text([1, 2.5, 0])
    assert text == "age,count\n0,1\n1,2.5\n2,0\n"
    assert read_age_histogram(_file(tmp_path, text)) == (1.0, 2.5)


def test_a_real_runs_histogram_carries_a_checksum_written_first_and_verified(tmp_path, monkeypatch):
    """A real run's histogram is checksummed like a table (``NAME.csv.sha256``, written before the file,
    so a crash between the two leaves a file that reads as damaged, never as healthy): one edited count,
    a lost checksum or a changed number of ages is a one-line ResultsError naming the file."""
    from vaco_jax.analysis import results
    from vaco_jax.analysis.results import ResultsError, checksum_line

    path = str(tmp_path / "age_histogram.csv")
    order = []
    write = results.atomic_write_text
    monkeypatch.setattr(results, "atomic_write_text", lambda p, text: (order.append(os.path.basename(p)),
                                                                       write(p, text)))
    write_age_histogram(path, [5120, 0, 2048, 17], comment="real actor-learner: seed 0", checksum=True)
    assert order == ["age_histogram.csv.sha256", "age_histogram.csv"]
    text = open(path).read()
    assert open(path + ".sha256").read() == checksum_line(4, text)
    assert read_age_histogram(path, checksum=True) == (5120.0, 0.0, 2048.0, 17.0)
    edits = {"an edited count": (text.replace("2,2048", "2,2049"), None, "checksum mismatch"),
             "a lost checksum": (text, "remove", "no checksum (age_histogram.csv.sha256 is missing"),
             "another number of ages": (text + "4,1\n", checksum_line(4, text + "4,1\n"),
                                        "5 ages, its checksum says 4")}
    for what, (body, side, message) in edits.items():
        write(path, body)
        if side == "remove":
            os.remove(path + ".sha256")
        elif side is not None:
            write(path + ".sha256", side)
        with pytest.raises(ResultsError) as e:
            read_age_histogram(path, checksum=True)
        assert str(e.value).startswith(path) and message in str(e.value) and "\n" not in str(e.value), what
        read_age_histogram(path)  # without the flag (a user's export) the file is not checked
        write_age_histogram(path, [5120, 0, 2048, 17], comment="real actor-learner: seed 0", checksum=True)


def test_every_committed_real_run_of_the_deep_lag_study_carries_its_histograms_checksum():
    import glob

    from conftest import ROOT

    paths = glob.glob(os.path.join(ROOT, "results", "deep_lag", "*", "*", "*", "seed*", "age_histogram.csv"))
    assert len(paths) == 2 * 3 * 20 + 2 * 6  # the study's real runs and the pilot's
    for path in paths:
        assert read_age_histogram(path, checksum=True) == read_age_histogram(path)
