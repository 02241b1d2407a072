"""The sim-vs-real study (studies/sim_vs_real.py): its simulated counterparts of a real histogram, and
the whole study end to end on the tiny pure-JAX task (real runs, simulated cells, verdicts)."""

import os

import numpy as np
import pytest

from conftest import study_module
from vaco_jax.core.config import ConfigError


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
        assert sorted(os.listdir(run)) == ["age_histogram.csv", "curve.csv", "curve.csv.sha256", "record.csv",
                                           "record.csv.sha256", "score.json"]
    svr.main(args("sim", minutes=1e-6))
    assert "--minutes 1e-06 reached" in capsys.readouterr().out
    assert sorted(os.listdir(os.path.join(out, "sim", "sync2", "ppo_clip"))) == sorted(
        list(svr.SIM_TABLES) + [t + ".sha256" for t in svr.SIM_TABLES if t.endswith(".csv")])  # tables' checksums
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
