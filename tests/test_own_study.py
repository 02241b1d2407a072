"""experiments/own_study.py: a whole study on the study kit in one short file, using public names only. Its
protocol is written (and hashed) before anything runs; its report reads every finished unit, only under
that protocol. End to end at its tiny default size on the pure-JAX point_mass task."""

import ast
import hashlib
import importlib.util
import os
import sys

import pytest

from vaco_jax.analysis import results
from vaco_jax.core.config import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "experiments", "own_study.py")


def _load():
    spec = importlib.util.spec_from_file_location("own_study", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass resolves its annotations through it)
    spec.loader.exec_module(module)
    return module


def _args(study, out, *extra):
    import tyro

    return tyro.cli(study.Args, args=[*extra, "--out", str(out), "--no-progress"])


def test_it_is_short_and_takes_no_private_name():
    text = open(PATH).read()
    assert len(text.splitlines()) <= 120
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vaco_jax"):
            assert not any(a.name.startswith("_") for a in node.names), node.module
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("kit", "rules", "grid"):
            assert not node.attr.startswith("_"), node.attr


def test_plan_fixes_the_protocol_first_and_a_disagreeing_flag_is_refused(tmp_path, capsys):
    study = _load()
    with pytest.raises(ConfigError, match="protocol"):  # a dry run writes nothing, not even a new protocol
        study.main(_args(study, tmp_path, "run", "--dry-run", "--minutes", "5"))
    assert not os.path.exists(tmp_path / "results")
    study.main(_args(study, tmp_path, "plan", "--seeds", "0", "1"))
    path = tmp_path / "results" / "protocol.json"
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    out = capsys.readouterr().out
    assert digest in out and "vaco" in out and "to run" in out
    assert sorted(os.listdir(tmp_path)) == ["results"] and os.listdir(tmp_path / "results") == ["protocol.json"]
    with pytest.raises(ConfigError, match="seeds"):  # the protocol is the study now
        study.main(_args(study, tmp_path, "plan", "--seeds", "0", "1", "2"))
    with pytest.raises(ConfigError, match="not finished"):
        study.main(_args(study, tmp_path, "report"))


@pytest.mark.slow
def test_the_study_end_to_end_and_its_report_guards(tmp_path, capsys):
    study = _load()
    assert study.main(_args(study, tmp_path, "run", "--minutes", "1000", "--seeds", "0", "1")) == ["vaco", "ppo_clip"]
    res = tmp_path / "results"
    digest = hashlib.sha256(open(res / "protocol.json", "rb").read()).hexdigest()
    manifest = results.read_table(str(res / "manifest.csv"))
    assert [r["unit"] for r in manifest] == ["vaco", "ppo_clip"]
    assert {r["protocol_sha256"] for r in manifest} == {digest} and all(r["cpu"] for r in manifest)
    first_unit = os.path.getmtime(res / "study" / "vaco" / "scores.csv")
    assert os.path.getmtime(res / "protocol.json") <= first_unit  # written before the first run
    rows = study.main(_args(study, tmp_path, "report"))
    assert [r["lag_depth"] for r in rows] == [1, 4] and all(r["runs_a"] == r["runs_b"] == 2 for r in rows)
    assert all(r["verdict"] in ("holds", "fails", "inconclusive") and r["threshold"] == 0.6 for r in rows)
    assert results.read_table(str(res / "verdicts.csv")) == rows
    assert "P(vaco > ppo_clip)" in capsys.readouterr().out
    # the protocol edited after the runs: report refuses (until the change is a recorded deviation)
    text = open(res / "protocol.json").read()
    open(res / "protocol.json", "w").write(text.replace('"margin": 0.1', '"margin": 0.2'))
    with pytest.raises(ConfigError, match="not the protocol the units ran under"):
        study.main(_args(study, tmp_path, "report"))
    open(res / "protocol.json", "w").write(text)
    # a finished unit's scores deleted: report refuses, naming it
    os.remove(res / "study" / "ppo_clip" / "scores.csv")
    with pytest.raises(results.ResultsError, match="lists as finished 1 unit.*ppo_clip"):
        study.main(_args(study, tmp_path, "report"))
