"""The sim-vs-real study (studies/sim_vs_real.py): its simulated counterparts of a real histogram, and
the whole study end to end on the tiny pure-JAX task (real runs, simulated cells, verdicts)."""

import os

import numpy as np
import pytest

from conftest import study_module
from vaco_jax.core.config import ConfigError
from vaco_jax.studies import kit_real_runs


def test_the_three_counterparts_of_a_real_histogram():
    svr = study_module("sim_vs_real")
    w = svr.variant_weights((10.0, 30.0, 10.0))  # mean age 1
    assert w["histogram"] == (0.2, 0.6, 0.2)
    assert w["uniform"] == (1.0, 1.0, 1.0)  # uniform on 0..2: mean 1
    assert w["control"] == (0.0,) * svr.CONTROL_SHIFT + (0.2, 0.6, 0.2)
    assert svr.variant_weights((5.0,))["uniform"] == (1.0,)  # lockstep: every sample age 0
    assert len(svr.variant_weights((0.0, 0.0, 0.0, 1.0))["uniform"]) == 7  # mean 3 -> uniform on 0..6
    names = [c["name"] for c in svr.configurations(svr.PRESETS["cpu"])]
    assert names == ["sync4", "async2", "async4", "async8"]
    assert svr.configurations(svr.PRESETS["cpu"])[2]["slowdown"] == (1.0, 1.333, 1.667, 2.0)


@pytest.mark.slow
def test_the_study_end_to_end_on_point_mass(tmp_path, monkeypatch, capsys):
    svr = study_module("sim_vs_real")
    monkeypatch.setitem(svr.PRESETS, "tiny", {**svr.PRESETS["tiny"], "methods": ("ppo_clip",), "actors": (2,)})
    out, work = str(tmp_path / "svr"), str(tmp_path / "work")
    args = lambda stage, **kw: svr.Args(stage=stage, preset="tiny", out=out, work=work, progress=False,  # noqa: E731
                                        bootstrap_reps=50, **kw)
    svr.main(args("plan"))
    assert "sync2" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="run the 'real' stage first"):
        svr.main(args("sim"))
    first = svr.main(args("real", minutes=1e-6))  # the first run always starts; the budget then stops
    assert len(first) == 1 and "--minutes 1e-06 reached" in capsys.readouterr().out
    done = first + svr.main(args("real"))
    assert len(done) == 2 * 2  # (sync2, async2) x 2 seeds
    assert svr.main(args("real")) == []  # finished runs are kept
    for seed in (0, 1):
        run = os.path.join(out, "real", "async2", "ppo_clip", f"seed{seed}")
        assert sorted(os.listdir(run)) == ["age_histogram.csv", "age_histogram.csv.sha256", "curve.csv",
                                           "curve.csv.sha256", "record.csv", "record.csv.sha256", "score.json"]
    svr.main(args("sim", minutes=1e-6))
    assert "--minutes 1e-06 reached" in capsys.readouterr().out
    assert sorted(os.listdir(os.path.join(out, "sim", "sync2", "ppo_clip"))) == sorted(
        list(kit_real_runs.SIM_TABLES)
        + [t + ".sha256" for t in kit_real_runs.SIM_TABLES if t.endswith(".csv")])  # checksums
    assert not os.path.exists(os.path.join(out, "sim", "async2"))
    with pytest.raises(ConfigError, match="run the 'sim' stage first"):
        svr.main(args("report"))
    svr.main(args("sim"))
    assert os.path.exists(os.path.join(work, "sim", "async2", "ppo_clip"))  # checkpoints stay in WORK
    assert not any(f.endswith(".npz") for _, _, files in os.walk(out) for f in files)  # OUT: tables only
    rows = svr.main(args("report"))
    assert len(rows) == 2 * 1 * 3 * 2  # configurations x methods x variants x scores
    assert {r["verdict"] for r in rows} <= {"predicts", "differs", "inconclusive"}
    assert all(r["n_real"] == 2 and r["n_sim"] == 2 for r in rows)
    assert all(np.isfinite(r["scaled_difference"]) for r in rows)
    sync = [r for r in rows if r["configuration"] == "sync2" and r["variant"] == "histogram"]
    assert all(r["real_mean_age"] == 0.0 and r["sim_mean_age"] == 0.0 == r["sim_realised_mean_age"] for r in sync)
    shifted = {r["variant"]: r["sim_realised_mean_age"] for r in rows if r["configuration"] == "async2"}
    assert shifted["histogram"] < shifted["control"]  # the simulator drew the older ages it was given
    assert os.path.exists(os.path.join(out, "verdicts.csv"))
    monkeypatch.setattr(svr, "MARGIN", 0.2)  # the protocol is fixed by the first run
    with pytest.raises(ConfigError, match="another protocol"):
        svr.main(args("report"))


# ----------------------------------------------------------------------------------- the report's guards
def _committed_copy(tmp_path, study):
    import shutil

    from conftest import ROOT

    out = str(tmp_path / study)
    shutil.copytree(os.path.join(ROOT, "results", study), out, ignore=shutil.ignore_patterns("figures", "pilot"))
    return out


def _files(out):
    return {os.path.relpath(os.path.join(d, f), out): open(os.path.join(d, f), "rb").read()
            for d, _, names in os.walk(out) for f in names}


def _edit_count(path):
    """One count of a histogram changed by hand."""
    lines = open(path).read().split("\n")
    i = next(i for i, line in enumerate(lines) if line[:1].isdigit() and not line.endswith(",0"))
    age, count = lines[i].split(",")
    lines[i] = f"{age},{int(count) + 1}"
    open(path, "w").write("\n".join(lines))


def _drop_seed(path, seed):
    """A sweep's table rewritten (with a valid checksum) without one seed's rows."""
    from vaco_jax.analysis import results

    results.write_table(path, [r for r in results.read_table(path) if r["seed"] != seed])


SVR_DAMAGE = {  # what is done to a copy of results/sim_vs_real, and the one line report answers with
    "a real run's curve gone": (lambda o: os.remove(f"{o}/real/async4/vaco/seed3/curve.csv"), "ResultsError",
                                "report: 1 table(s) of finished units are missing: "
                                "{o}/real/async4/vaco/seed3/curve.csv;"),
    "a sweep's realised ages gone": (lambda o: os.remove(f"{o}/sim/async8/ppo_clip/realised_ages.csv"), "ResultsError",
                                     "are missing: {o}/sim/async8/ppo_clip/realised_ages.csv;"),
    "a real run's score gone": (lambda o: os.remove(f"{o}/real/sync4/ppo_clip/seed0/score.json"), "ConfigError",
                                "report: {o}/real/sync4/ppo_clip/seed0 has not finished; run the 'real' stage first"),
    "a sweep's scores gone": (lambda o: os.remove(f"{o}/sim/async2/vaco/scores.csv"), "ConfigError",
                              "report: {o}/sim/async2/vaco has not finished; run the 'sim' stage first"),
    "the protocol gone": (lambda o: os.remove(f"{o}/protocol.json"), "ConfigError",
                          "report: {o}/protocol.json is missing: no stage of the study has run there"),
    # a run written before histograms carried a checksum: checked against its record's consumed batches
    "a real histogram's count edited": (lambda o: _edit_count(f"{o}/real/async2/ppo_clip/seed0/age_histogram.csv"),
                                        "ResultsError", "{o}/real/async2/ppo_clip/seed0/age_histogram.csv: its counts "
                                                        "differ from the consumed batches of the record.csv"),
    "a sweep's seed lost": (lambda o: _drop_seed(f"{o}/sim/async4/ppo_clip/scores.csv", 3), "ResultsError",
                            "{o}/sim/async4/ppo_clip/scores.csv: seeds [0, 1, 2, 4, 5, 6, 7, 8, 9] of the histogram "
                            "counterpart's weights, expected [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"),
}


@pytest.mark.parametrize("damage", list(SVR_DAMAGE))
def test_a_report_on_a_damaged_copy_of_the_study_is_one_line_and_writes_nothing(tmp_path, damage):
    """The committed study, copied, one unit's file gone or changed: the report names it in one line
    before it writes anything (never a verdict from the units that are left)."""
    from vaco_jax.analysis.results import ResultsError

    svr = study_module("sim_vs_real")
    out = _committed_copy(tmp_path, "sim_vs_real")
    act, kind, message = SVR_DAMAGE[damage]
    act(out)
    before = _files(out)
    with pytest.raises({"ResultsError": ResultsError, "ConfigError": ConfigError}[kind]) as e:
        svr.main(svr.Args(stage="report", out=out, work=str(tmp_path / "work"), progress=False, bootstrap_reps=20))
    assert message.format(o=out) in str(e.value) and "\n" not in str(e.value)
    assert _files(out) == before
