"""The single-file experiments in experiments/ (single_file_*.py): each reads top to bottom in at most
150 lines, uses the package's public names only, and runs a whole experiment at a tiny size."""

import ast
import importlib.util
import math
import os
import sys

import pytest

from vaco_jax.analysis import results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(f for f in os.listdir(os.path.join(ROOT, "experiments")) if f.startswith("single_file_"))
TINY = dict(env="point_mass", lag_depths=(1, 4), seeds=(0,), total_env_steps=8 * 16 * 2, num_evals=2, num_envs=8,
            unroll_length=16)


def _load(name):
    spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(ROOT, "experiments", name))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass resolves its annotations through it)
    spec.loader.exec_module(module)
    return module


def test_there_are_at_least_two_and_each_is_short_and_uses_public_names_only():
    import vaco_jax

    assert len(FILES) >= 2
    for name in FILES:
        text = open(os.path.join(ROOT, "experiments", name)).read()
        assert len(text.splitlines()) <= 150, name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vaco_jax"):
                assert node.module == "vaco_jax", f"{name}: imports {node.module} (use the package's public names)"
                assert {a.name for a in node.names} <= set(vaco_jax.__all__), name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("vaco_jax.") for a in node.names), name


@pytest.mark.parametrize("name", FILES)
def test_help_shows_what_a_user_types(name, monkeypatch, capsys):
    """As every vaco command's (test_help_truth): INT for a flag left to the task (not {None}|INT, not
    (default: None)), 200_000 for a budget."""
    import tyro

    monkeypatch.setenv("COLUMNS", "120")
    with pytest.raises(SystemExit):
        tyro.cli(_load(name).Args, args=["--help"])
    text = capsys.readouterr().out
    assert "None" not in text and "--num-envs INT" in text and "(default: the task's own)" in text
    assert "(default: 200_000)" in text


def test_the_lag_sweep_runs_whole_and_writes_a_verified_table_and_a_figure(tmp_path, capsys):
    module = _load("single_file_lag_sweep.py")
    rows = module.main(module.Args(method="vaco", out=str(tmp_path), **TINY))
    assert [(r["lag_depth"], r["seed"]) for r in rows] == [(1, 0), (4, 0)]
    back = results.read_table(str(tmp_path / "scores.csv"))
    assert [(r["lag_depth"], r["seed"], r["auc_eval_return"]) for r in back] == \
        [(r["lag_depth"], r["seed"], r["auc_eval_return"]) for r in rows]
    assert all(math.isfinite(r["auc_eval_return"]) for r in rows)
    assert os.path.getsize(tmp_path / "retention.png") > 1000
    out = capsys.readouterr().out
    assert "retention" in out and "wrote" in out
    assert "256 env steps each" in out and "training: chunk 2/2, 256 env steps per run" in out  # a line per chunk
    kept = module.retention(rows + [{**rows[1], "seed": 1, "diverged": True, "auc_eval_return": float("nan")}])
    assert kept[1][0] == pytest.approx(1.0) and kept[4][2] == 1  # a diverged run is left out, not averaged


def test_the_step_lag_grid_runs_both_methods_around_their_defaults(tmp_path, capsys):
    module = _load("single_file_step_lag.py")
    rows = module.main(module.Args(methods=("ppo_clip", "vaco"), factors=(0.5, 2.0), out=str(tmp_path), **TINY))
    steps = sorted({(r["method"], round(r["step_size"], 6)) for r in rows})
    assert steps == [("ppo_clip", 0.1), ("ppo_clip", 0.4), ("vaco", 0.1), ("vaco", 0.4)]  # defaults 0.2 and 0.2
    assert {r["step_knob"] for r in rows} == {"clip_epsilon", "tv_budget"} and len(rows) == 8
    assert len(results.read_table(str(tmp_path / "scores.csv"))) == 8
    assert os.path.getsize(tmp_path / "surface.png") > 1000
    out = capsys.readouterr().out
    assert "best step size" in out and out.count("training: chunk 2/2") == 2  # one program per method
    with pytest.raises(SystemExit, match="step knob"):
        module.method_config(module.Args(methods=("impala",), **TINY), "impala")


@pytest.mark.parametrize("name", FILES)
def test_a_run_that_takes_fewer_steps_than_asked_says_so(name):
    """Whole chunks of whole phases run: 1,000 steps asked of 2 chunks of 128-step phases run 768, said."""
    from vaco_jax import Config

    steps = _load(name).steps
    config = Config(env="point_mass", num_envs=8, unroll_length=16, num_evals=2, total_env_steps=1000)
    assert steps(config) == "768 env steps each (of 1,000 asked: whole chunks of whole phases run)"
    assert steps(config.replace(total_env_steps=768)) == "768 env steps each"
