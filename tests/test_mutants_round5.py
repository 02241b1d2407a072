"""Behaviours a mutation check of the newest code found unpinned: each test below fails when the
behaviour in its name is broken (the update step's learning rates, a diagnostic's direction, SAPO's
overflow guard, the stage-1 and stage-2 rules, the step-size study's extension count, the run lock,
the order of a table's two writes, M2PO's ties and the band's floor check). Synthetic inputs, CPU, fast."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from test_composition import N, _logp, make_batch, tiny_nets
from test_corrections import _grad_per_sample, ess_reference
from vaco_jax.core import objectives as obj
from vaco_jax.core import pieces as P
from vaco_jax.core.config import ConfigError
from vaco_jax.core.methods import compose, make_method
from vaco_jax.core.proximal import ewma_init
from vaco_jax.core.update import LearnerState, UpdateShape, make_optimizer, policy_loss, update_phase


# ----------------------------------------------------------------------------- the update step

def test_vcpo_step_scale_shrinks_the_policy_learning_rate_and_never_the_critics():
    """One VCPO step on a minibatch whose √ESS is far from 1, the critic fitting non-zero targets: Adam's
    first step is sign-like, so every critic coordinate moves by the learning rate itself (√ESS of it if
    the scale reached the critic), while the policy's step is scaled (the update step's test in
    test_corrections checks it is exactly √ESS)."""
    batch = make_batch(seed=4, spread=0.3)
    targets = jnp.asarray(np.random.default_rng(0).normal(size=N) + 1.0, jnp.float32)
    aligned = jax.tree.map(lambda x: x[None], batch.aligned()._replace(value_targets=targets))
    params = {"mu": jnp.asarray(batch.mu, jnp.float32), "log_std": jnp.asarray(batch.log_std, jnp.float32)}
    value = {"v": jnp.zeros((N,), jnp.float32)}
    opt = make_optimizer(1e9, 1e-8)
    lr = 1e-3
    method = compose(P.GAE(), P.Behavior(), P.ESSScaledPG(ratio_cap=jnp.inf), P.NoFilter())
    learner = LearnerState(params, value, opt.init(params), opt.init(value), ewma_init(params))
    new, _ = update_phase(UpdateShape(num_epochs=1, num_minibatches=1), method, tiny_nets(), opt, learner, aligned,
                          jax.random.PRNGKey(0), lr, lag_depth=1, gamma=0.99, value_coef=0.5, entropy_coef=0.0)
    ess = ess_reference(_logp(batch.action, batch.mu, batch.log_std) - batch.behaviour_logp)
    assert ess < 0.9  # the scale is far from 1: a critic scaled by it would show
    policy_move = np.abs(np.asarray(new.policy_params["mu"] - params["mu"]))
    np.testing.assert_allclose(policy_move[policy_move > 0], np.sqrt(ess) * lr, rtol=1e-3)
    np.testing.assert_allclose(np.abs(np.asarray(new.value_params["v"] - value["v"])), lr, rtol=1e-3)


def test_ess_behaviour_is_the_ess_of_pi_over_beta_not_of_its_inverse():
    """One sample where π_θ/β = w ≫ 1, every other at ratio 1: the ESS of π_θ/β is small, the ESS of
    β/π_θ (one weight 1/w among ones) is close to 1."""
    batch = make_batch(seed=0)
    b_mu, action = batch.mu.copy(), batch.action.copy()
    action[0] = batch.mu[0]  # the sample sits at π_θ's mode ...
    b_mu[0] = batch.mu[0] + 1.0  # ... and in β's tail: one large weight
    batch.b_mu, batch.b_log_std, batch.action = b_mu, batch.log_std.copy(), action
    log_w = _logp(batch.action, batch.mu, batch.log_std) - batch.behaviour_logp
    assert log_w[0] > 2.0 and np.allclose(log_w[1:], 0.0, atol=1e-9)
    params = {"mu": jnp.asarray(batch.mu, jnp.float32), "log_std": jnp.asarray(batch.log_std, jnp.float32)}
    method = make_method("ppo_clip")
    _, metrics = jax.jit(lambda p, mb: policy_loss(method, tiny_nets(), p, p, mb, 0.0))(params, batch.aligned())
    assert float(metrics["ess_behaviour"]) == pytest.approx(ess_reference(log_w), rel=1e-4)
    assert ess_reference(log_w) < 0.5 < 0.95 < ess_reference(-log_w)  # the two directions are far apart


# ----------------------------------------------------------------------------- SAPO's overflow guard

@pytest.mark.parametrize("tau", [0.1, 0.3])
def test_sapo_overflow_guard_keeps_live_gradients_at_temperatures_below_one(tau):
    """Below τ = 1 the gate stays open far above r = 61: at τ = 0.1 a ratio of 67 still has a gradient
    weight 4p(1 − p) of about 5e-3. The guard may cut only where that weight is below 4e^−60."""
    log_ratio = np.asarray([0.0, 1.0, 2.0, 3.0, 4.0, 4.2], np.float32)
    live = tau * (np.exp(log_ratio.astype(np.float64)) - 1.0) < 15.0
    log_ratio, adv = log_ratio[live], np.ones(int(live.sum()), np.float32)
    g = _grad_per_sample(lambda lp, b, a: obj.soft_gate_loss(lp, b, a, tau, 1.0), log_ratio, adv)
    r = np.exp(log_ratio.astype(np.float64))
    p = 1.0 / (1.0 + np.exp(-tau * (r - 1.0)))
    expected = -4.0 * p * (1.0 - p) * r / log_ratio.size
    np.testing.assert_allclose(g, expected, rtol=2e-3)
    assert np.all(g < 0)


# ----------------------------------------------------------------------------- stage 1: the stability bootstrap

def test_the_stability_bootstrap_draws_seeds_for_each_task_on_its_own():
    """Value 0.1's seed effects are opposite on the two tasks: a draw shared by both tasks cancels them
    (0.1 ahead by 0.005 in every resample, share 1), independent draws per task do not (share well below 1)."""
    from vaco_jax.analysis import surfaces

    norm = {"A": (0.0, 100.0), "B": (10.0, 110.0)}
    effect = [-0.3, -0.2, -0.1, 0.1, 0.2, 0.3]
    rows = []
    for t, sign in (("A", 1.0), ("B", -1.0)):
        lo, hi = norm[t]
        for seed, d in enumerate(effect):
            for v, s in ((0.1, 0.5 + sign * d + 0.005), (0.3, 0.5)):
                rows.append({"env": t, "lag_depth": 1, "seed": seed, "value": v, "auc": lo + s * (hi - lo),
                             "diverged": False})
    out = surfaces.stability(rows, "auc", norm, reps=400)
    assert out["value"] == 0.1
    assert 0.2 < out["share"] < 0.9 and not out["stable"]
    assert set(out["within_noise"]) == {0.1, 0.3}


# ----------------------------------------------------------------------------- stage 2: margins and floors

CONFIRM_NORM = {"Hopper-v4": (0.0, 1.0), "Walker2d-v4": (0.0, 1.0)}


def _runs(arm, b, values, lag_model="uniform"):
    return [{"env": t, "arm": arm, "lag_model": lag_model, "lag_depth": b, "seed": i, "diverged": False,
             "auc": float(v)} for t in CONFIRM_NORM for i, v in enumerate(values)]


def _spread(centre, width, seed, n=10):
    return list(centre + width * np.random.default_rng(seed).uniform(-1, 1, n))


def test_the_shape_rules_within_margin_reads_the_90_percent_interval():
    """A margin between the 90% interval's reach and the 95% interval's: the pair's change is within it."""
    from vaco_jax.analysis import confirm

    rows = _runs("a", 8, _spread(0.5, 0.2, 1)) + _runs("b", 8, _spread(0.5, 0.2, 2))
    rows += _runs("a", 8, _spread(0.5, 0.2, 3), "fixed") + _runs("b", 8, _spread(0.5, 0.2, 4), "fixed")

    def pair(**rules):
        out = confirm.shape_dependence(rows, "auc", CONFIRM_NORM, ["a", "b"], 8, ("uniform", "fixed"),
                                       confirm.Rules(reps=400, **rules))
        return out, out["pairs"][0]

    reach = {c: max(abs(pair(confidence=c, margin=10.0)[1][k]) for k in ("low", "high")) for c in (0.90, 0.95)}
    assert reach[0.90] < reach[0.95]
    out, p = pair(margin=(reach[0.90] + reach[0.95]) / 2)
    assert p["within_margin"] and p["verdict"] == "within margin" and out["overall"] == "no change beyond the margin"


@pytest.mark.parametrize("at_1,at_32,flagged", [
    ((0.05, 0.04), (0.5, 0.4), "Hopper-v4 Walker2d-v4"),  # both below the floor at B = 1 only: flagged
    ((0.8, 0.6), (0.05, 0.04), ""),  # both below it at B = 32 only: not flagged
])
def test_the_retention_rows_floor_flag_reads_b_1(at_1, at_32, flagged):
    from vaco_jax.analysis import confirm

    rows = []
    for arm, i in (("ppo_clip", 0), ("vaco", 1)):
        rows += _runs(arm, 1, [at_1[i]] * 10) + _runs(arm, 32, [at_32[i]] * 10)
    out = confirm.primary(rows, "auc", CONFIRM_NORM, ["ppo_clip", "vaco"], [], (1, 32), confirm.Rules(reps=400))
    (row,) = [r for r in out if r["test"] == "retention X - reference"]
    assert row["at_floor"] == flagged


# ----------------------------------------------------------------------------- the step-size study's extensions

def _steplag():
    from vaco_jax.studies import steplag
    import test_steplag_stage2 as T
    return steplag, T


def _write_by_lag(results_dir, p, key, task, means_by_lag, sub=""):
    """One task's rows of a surface whose normalised score is means_by_lag[B][v] (same on every seed)."""
    from vaco_jax.analysis import results
    steplag, _ = _steplag()
    from vaco_jax.studies import steplag_stage1
    s = p["stage1"]["surfaces"][key]
    lo, hi = steplag_stage1.normalisation(p, key)[task]
    rows = [{"env": task, "method": s["method"], "lag_depth": b, "seed": seed, s["knob"]: v,
             "auc_eval_return": lo + m * (hi - lo), "diverged": False}
            for b, means in means_by_lag.items() for v, m in means.items() for seed in p["stage1"]["seeds"]]
    d = os.path.join(results_dir, "surface", task, key, sub)
    os.makedirs(d, exist_ok=True)
    results.write_table(os.path.join(d, "scores.csv"), rows)


def test_spo_extended_twice_at_its_upper_edge_asks_for_no_third(tmp_path, monkeypatch):
    """SPO's optimum at its upper edge after 5.4 and 16.2 are in on both tasks: the edge's two extensions
    are spent, so nothing more is asked (no 48.6 unit in the plan)."""
    steplag, T = _steplag()
    from vaco_jax.studies import steplag_stage1
    monkeypatch.setattr(steplag_stage1, "STABILITY_REPS", 100)  # the rule applied next; its resamples do not matter here
    p = T._protocol()
    res = str(tmp_path / "results")
    vals = p["stage1"]["surfaces"]["spo"]["values"]
    for task in ("Hopper-v4", "Walker2d-v4"):
        T._write_surface(res, p, "spo", dict(zip(vals, (0.1, 0.2, 0.3, 0.5, 0.7))), task=task)
        T._write_surface(res, p, "spo", {5.4: 0.8}, task=task, sub="extend=5.4")
        T._write_surface(res, p, "spo", {16.2: 0.9}, task=task, sub="extend=16.2")
    points, state = steplag_stage1.extensions_state(p, res, "spo", "unknown")
    assert state == "complete" and points == []
    names = [u.name for u in steplag.all_units(p, T._args(tmp_path))[0]]
    assert "extend/Hopper-v4/spo/16.2" in names and not any("/spo/48.6" in n for n in names)


def test_extensions_are_counted_on_their_own_edge(tmp_path):
    """M2PO's upper edge extended twice, its optimum at B = 1 now at the lower edge (never extended): the
    lower edge gets its first extension and the upper edge none."""
    steplag, T = _steplag()
    from vaco_jax.studies import steplag_stage1
    p = T._protocol()
    res = str(tmp_path / "results")
    vals = [float(v) for v in p["stage1"]["surfaces"]["m2po"]["values"]]
    high1 = float(f"{vals[-1] ** 2 / vals[-2]:.4g}")
    high2 = float(f"{high1 ** 2 / vals[-1]:.4g}")
    run = vals + [high1, high2]
    at_1 = {v: 0.9 - 0.05 * i for i, v in enumerate(run)}  # best at the lower edge
    at_32 = {v: 0.2 + 0.05 * i for i, v in enumerate(run)}  # best at the upper edge
    for group, sub in ((vals, ""), ([high1], f"extend={high1:g}"), ([high2], f"extend={high2:g}")):
        _write_by_lag(res, p, "m2po", "Hopper-v4", {1: {v: at_1[v] for v in group}, 32: {v: at_32[v] for v in group}},
                      sub=sub)
    points, state = steplag_stage1.extensions_state(p, res, "m2po", "unknown")
    assert state == "complete" and points == [pytest.approx(vals[0] ** 2 / vals[1], rel=1e-3)]


# ----------------------------------------------------------------------------- the run lock

HOLD_PLAIN = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, getattr(fcntl, sys.argv[2]))
print("held", flush=True)
sys.stdin.read()
"""

HOLD_RUN_LOCK = """
import sys
from vaco_jax.driver import provenance
with provenance.run_lock([sys.argv[1]]):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.mark.parametrize("lock", ["run_lock", "LOCK_SH", "LOCK_EX"])
def test_the_run_lock_refuses_a_directory_another_process_holds_whatever_its_lock(tmp_path, lock):
    """A second run of the same group is refused while the first holds its directory: by the run lock
    itself, or by any flock (a shared one included)."""
    from vaco_jax.driver import provenance

    d = str(tmp_path / "group")
    os.makedirs(d)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script, args = (HOLD_RUN_LOCK, [d]) if lock == "run_lock" else (HOLD_PLAIN, [d, lock])
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=root, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"another run holds this directory \(pid {proc.pid}"):
            with provenance.run_lock([d]):
                pass
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    with provenance.run_lock([d]):  # released with the other process
        pass


# ----------------------------------------------------------------------------- a table's two writes

def test_a_crash_between_a_tables_two_writes_leaves_the_group_unfinished_so_it_resumes(tmp_path, monkeypatch):
    """``scores.csv`` marks a group finished: a crash after the first of write_table's two renames must
    leave no scores.csv (the checksum goes first), so the group resumes and its next write reads back."""
    from vaco_jax.analysis import results
    from vaco_jax.driver.runner import group_finished

    group = tmp_path / "point_mass" / "ppo_clip"
    group.mkdir(parents=True)
    path = str(group / "scores.csv")
    real, calls = results.atomic_write_text, []

    def crash_on_second(p, text):
        calls.append(p)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the two writes")
        real(p, text)

    monkeypatch.setattr(results, "atomic_write_text", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        results.write_table(path, [{"seed": 0, "auc": 1.5}])
    monkeypatch.undo()
    assert not os.path.exists(path) and not group_finished(str(group))
    results.write_table(path, [{"seed": 0, "auc": 2.5}])  # the resumed group's write
    assert group_finished(str(group)) and results.read_table(path) == [{"seed": 0, "auc": 2.5}]


# ----------------------------------------------------------------------------- M2PO's ties, the band's floor

def test_m2po_drops_the_earlier_of_tied_samples_first():
    """ℓ² = 1, 0, 1, 0, 1, 0: the budget 0.3 drops two of the three ties (mean 1/4 left), and the docstring's
    order drops the earlier ones."""
    keep, _ = obj.second_moment_keep(jnp.asarray([1.0, 0.0, -1.0, 0.0, 1.0, 0.0]), 0.3)
    np.testing.assert_array_equal(np.asarray(keep), [0, 1, 0, 1, 1, 1])
    keep, _ = obj.second_moment_keep(jnp.asarray([1.0, 0.0, -1.0, 0.0, 1.0, 0.0]), 0.45)  # one dropped
    np.testing.assert_array_equal(np.asarray(keep), [0, 1, 1, 1, 1, 1])


def test_a_band_floor_equal_to_the_cap_is_allowed_as_the_error_says():
    """'allowed values: weight_floor <= weight_cap': the floor may equal the cap; only above it is refused."""
    from conftest import tiny_config

    assert make_method("mis", weight_floor=2.0, weight_cap=2.0).surrogate.weight_floor == 2.0
    assert tiny_config(method="mis", weight_floor=2.0, weight_cap=2.0).weight_floor == 2.0
    with pytest.raises(ConfigError, match="allowed values: weight_floor <= weight_cap"):
        make_method("mis", weight_floor=2.001, weight_cap=2.0)
