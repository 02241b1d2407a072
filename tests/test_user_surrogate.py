"""Acceptance of the composition core: a surrogate defined here, outside the package, trains with
the package's trainer unchanged, and its own numeric knob is a traced grid axis like any other.

Also: a traced grid over γ equals separate compiled runs, and a study script sweeps any field from
the command line. All on the tiny pure-JAX ``point_mass`` task (no MJX compile).
"""

import os
import subprocess
import sys
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from conftest import tiny_config
from vaco_jax.core import pieces
from vaco_jax.core.config import make_traced, stack_traced
from vaco_jax.core.methods import METHODS, register_method
from vaco_jax.analysis.results import read_table as read_csv
from vaco_jax.core.train import make_train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POINT = dict(env="point_mass", episode_length=40, eval_episodes=0)


@struct.dataclass
class CappedPG(pieces.Surrogate):
    """−mean min(r, ratio_cap) A: an importance-sampled gradient whose ratio is capped from above."""

    name: ClassVar[str] = "capped_pg"
    ratio_cap: Any = 1.5

    def loss(self, x):
        ratio = jnp.exp(x.logp - jax.lax.stop_gradient(x.behaviour_logp))
        capped = jnp.minimum(ratio, self.ratio_cap)
        advantages = jax.lax.stop_gradient(x.advantages)
        return -jnp.mean(capped * advantages), {"capped_fraction": jnp.mean((ratio > self.ratio_cap) * 1.0)}


@pytest.fixture(scope="module")
def capped_method():
    register_method("capped_pg", pieces.GAE, pieces.Behavior, CappedPG, pieces.NoFilter, "test: capped IS-PG")
    yield "capped_pg"
    METHODS.pop("capped_pg", None)


def test_a_surrogate_defined_outside_the_package_trains_and_its_knob_is_a_grid_axis(capped_method):
    config = tiny_config(method=capped_method, num_evals=1, total_env_steps=8 * 16, **POINT)  # one phase
    trainer = make_train(config)
    caps = [1.0 + 1e-6, 1.05, 100.0]
    traced = stack_traced([make_traced(config, 2, ratio_cap=c) for c in caps])
    keys = jnp.stack([jax.random.PRNGKey(0)] * len(caps))
    init = jax.vmap(trainer.init)(keys, traced)
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, traced)
    assert np.all(np.asarray(metrics.phases.diagnostics["capped_fraction"]) >= 0)
    moved = [np.max(np.abs(np.asarray(a) - np.asarray(b)), axis=tuple(range(1, np.ndim(a))))
             for a, b in zip(jax.tree.leaves(state.learner.policy_params), jax.tree.leaves(init.learner.policy_params))]
    assert np.all(np.max(np.stack(moved), axis=0) > 0)  # every cell took gradient steps
    final = [np.asarray(x) for x in jax.tree.leaves(state.learner.policy_params)]
    assert any(np.max(np.abs(f[0] - f[2])) > 1e-7 for f in final)  # the cap really differs per cell
    with pytest.raises(Exception, match="ratio_cap"):
        make_traced(tiny_config(method="ppo_clip", **POINT), 1, ratio_cap=2.0)


def test_a_traced_grid_over_gamma_equals_separate_compiled_runs():
    """Tolerance: the vmapped program batches the matmuls of the cells, the separate programs do not;
    float32 round-off, which a few phases of training must not amplify beyond rtol 1e-4."""
    config = tiny_config(method="ppo_clip", **POINT)
    trainer = make_train(config)
    gammas = [0.9, 0.99]
    cells = [make_traced(config, 2, gamma=g) for g in gammas]
    keys = jnp.stack([jax.random.PRNGKey(1)] * 2)
    grid_state, _ = jax.jit(jax.vmap(trainer.train))(keys, stack_traced(cells))
    single = jax.jit(trainer.train)
    for i, cell in enumerate(cells):
        state, _ = single(jax.random.PRNGKey(1), cell)
        for a, g in zip(jax.tree.leaves(state.learner.value_params), jax.tree.leaves(grid_state.learner.value_params)):
            np.testing.assert_allclose(a, g[i], rtol=1e-4, atol=1e-5)
    v = [np.asarray(x) for x in jax.tree.leaves(grid_state.learner.value_params)]
    assert any(np.max(np.abs(x[0] - x[1])) > 1e-4 for x in v)  # γ changed the critic's targets


def test_lag_sweep_script_sweeps_any_field_and_rows_carry_the_values(tmp_path):
    out = str(tmp_path / "run")
    cmd = [sys.executable, os.path.join(ROOT, "experiments", "lag_sweep.py"), "--preset", "tiny", "--tasks",
           "point_mass", "--episode-length", "40", "--seeds", "0", "--lag-depths", "1", "2", "--out", out,
           "--no-progress", "--no-figures", "--bootstrap-reps", "200",
           "--sweep", "gamma=0.99,0.995", "learning_rate=1e-4,3e-4", "num_epochs=1,2"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    plan = res.stdout.split("plan: ")[1]
    assert plan.startswith("2 group(s)") and "8 cells" in plan  # num_epochs: 2 programs; 2 lag x 2 γ x 2 lr
    rows = read_csv(os.path.join(out, "point_mass", "ppo_clip", "num_epochs=2", "scores.csv"))
    assert len(rows) == 8
    assert {(r["lag_depth"], r["gamma"], r["learning_rate"], r["num_epochs"]) for r in rows} == {
        (b, g, lr, 2) for b in (1, 2) for g in (0.99, 0.995) for lr in (1e-4, 3e-4)}
    # a bad sweep value: one line, exit code 2, nothing written
    bad = subprocess.run(cmd[:-3] + ["gamma=1.5"] + ["--out", str(tmp_path / "bad")], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: gamma=1.5")
    assert not os.path.exists(tmp_path / "bad")
