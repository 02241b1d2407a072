"""A non-editable install works away from the checkout: ``pip install .`` puts the whole package (the
studies included) and its console scripts in place, and the installed ``vaco-lag-sweep`` runs the tiny
preset from a directory that holds no source. The project is copied first so that the build's
``build/`` and ``*.egg-info`` land in the copy, not in the checkout; dependencies come from the test's
own environment (``--no-deps``), the package and scripts from the install. ``--target`` (not
``--prefix``, which uninstalls the environment's own editable install first) leaves the test's
environment as it was, which the test checks."""

import os
import shutil
import subprocess
import sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_pip_install_puts_the_studies_and_commands_in_place_and_runs_the_tiny_preset(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    shutil.copytree(os.path.join(ROOT, "vaco_jax"), src / "vaco_jax", ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "site"
    before = subprocess.run([sys.executable, "-m", "pip", "list"], capture_output=True, text=True).stdout
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(src)],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-2000:]
    assert subprocess.run([sys.executable, "-m", "pip", "list"], capture_output=True, text=True).stdout == before
    env = {**os.environ, "PYTHONPATH": str(site)}
    work = tmp_path / "elsewhere"
    work.mkdir()

    where = subprocess.run([sys.executable, "-c", "import vaco_jax.studies.lag_sweep as m; print(m.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert where.stdout.strip().startswith(str(site)), where.stdout + where.stderr  # the install, not the checkout

    script = site / "bin" / "vaco-lag-sweep"
    assert script.exists() and (site / "bin" / "vaco-train").exists() and (site / "bin" / "vaco-plot").exists()
    run = subprocess.run([str(script), "--preset", "tiny", "--out", "first", "--no-progress", "--no-figures",
                          "--bootstrap-reps", "10"], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (work / "first" / "point_mass" / "ppo_clip" / "scores.csv").exists()
