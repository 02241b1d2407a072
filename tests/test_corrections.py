"""The staleness corrections of 2025–26 as pieces (docs/corrections.md): each against a float64 numpy
reference of its formula, through the same update-step wiring every method uses (values and
finite-difference gradients on a synthetic minibatch), plus the edge cases and one property per piece
that a sign flip, a swapped ratio or an inverted mask would break.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from conftest import tiny_config
from test_composition import LOG_2PI, N, _logp, jax_loss_and_grad, make_batch, reference_grad, tiny_nets
from vaco_jax.core import objectives as obj
from vaco_jax.core import pieces as P
from vaco_jax.core.config import ConfigError
from vaco_jax.core.methods import METHODS, compose, make_method
from vaco_jax.core.proximal import ewma_init, target_update
from vaco_jax.core.update import LearnerState, UpdateShape, make_optimizer, update_phase

NEW_METHODS = ("m2po", "tis", "mis", "gipo", "sapo", "vcpo", "impact", "bapo", "sat", "ppo_clip_adaptive")


# ----------------------------------------------------------------------------- slow references

def m2po_keep_reference(log_ratio, budget):
    """The paper's loop, literally: while the kept samples' mean ℓ² exceeds τ, drop the kept sample
    with the largest ℓ² (the earlier one on a tie)."""
    sq = np.asarray(log_ratio, np.float64) ** 2
    keep = np.ones(sq.shape, bool)
    while keep.any() and sq[keep].mean() > budget:
        i = max(np.flatnonzero(keep), key=lambda j: (sq[j], -j))
        keep[i] = False
    return keep


def ess_reference(log_w):
    w = np.exp(np.asarray(log_w, np.float64))
    return w.sum() ** 2 / (w.size * (w ** 2).sum())


def reference_loss(method, b, mu, mu_sg, entropy_coef=0.01):
    """The documented loss of each new method in float64; only ``mu`` is differentiated."""
    sur, filt, prox = method.surrogate, method.sample_filter, method.proximal
    beh = b.behaviour_logp
    logp = _logp(b.action, mu, b.log_std)
    logp_sg = _logp(b.action, mu_sg, b.log_std)
    a = (b.adv - b.adv.mean()) / (b.adv.std() + 1e-8)
    r, r_sg = np.exp(logp - beh), np.exp(logp_sg - beh)
    if method.name == "m2po":
        keep = m2po_keep_reference(logp_sg - beh, filt.second_moment_budget)
        loss = -np.mean(np.where(keep, r, r_sg) * a)
    elif method.name == "gipo":
        omega = np.exp(-((logp_sg - beh) ** 2) / (2 * sur.trust_width ** 2))
        loss = -np.mean(omega * r * a)
    elif method.name == "sapo":
        tau = np.where(a > 0, sur.gate_temperature, sur.gate_temperature * sur.gate_temperature_ratio)
        loss = -np.mean(1 / (1 + np.exp(-tau * (r - 1))) * 4 / tau * a)
    elif method.name == "vcpo":
        loss = -np.mean(np.minimum(r_sg, sur.ratio_cap) * np.exp(logp - logp_sg) * a)
    elif method.name in ("tis", "mis", "impact"):
        p = _logp(b.action, b.ewma_mu, b.log_std) if method.name == "impact" else b.learner_logp
        old = b.old_logp  # the old-logit source's pi_old as the aligned batch carries it
        w = np.exp(p - old)
        if sur.weight_cap_mode == "band":
            floor = 1 / sur.weight_cap if sur.weight_floor is None else sur.weight_floor
            w = np.where((w >= floor) & (w <= sur.weight_cap), w, 0.0)
        else:
            w = np.minimum(w, sur.weight_cap)
        m = (np.abs(old - beh) <= np.log(sur.mismatch_bound)).astype(float)
        rp = np.exp(logp - p)
        eps = sur.clip_epsilon
        loss = -np.mean(m * np.exp(old - beh) * w * np.minimum(rp * a, np.clip(rp, 1 - eps, 1 + eps) * a))
    else:
        raise AssertionError(method.name)
    entropy = np.sum(b.log_std + 0.5 * (LOG_2PI + 1))
    return loss - entropy_coef * entropy


CASES = [
    ("m2po", {"second_moment_budget": 0.1}), ("m2po", {"second_moment_budget": 0.3}),
    ("tis", {}), ("tis", {"weight_cap": 1.2}), ("mis", {}), ("mis", {"weight_cap": 1.3, "weight_floor": 0.9}),
    ("gipo", {}), ("gipo", {"trust_width": 1.5}), ("sapo", {}), ("sapo", {"gate_temperature": 4.0,
                                                                         "gate_temperature_ratio": 2.0}),
    ("vcpo", {}), ("vcpo", {"ratio_cap": 1.5}), ("impact", {}), ("impact", {"weight_cap": 1.2}),
]


@pytest.mark.parametrize("name, options", CASES, ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in CASES])
def test_each_correction_loss_and_gradient_equal_the_numpy_reference(name, options):
    method = make_method(name, **options)
    batch = make_batch(seed=11 + len(name) + len(options), spread=0.25)
    loss, grad, metrics = jax_loss_and_grad(method, batch)
    np.testing.assert_allclose(loss, reference_loss(method, batch, batch.mu, batch.mu), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(grad, reference_grad(method, batch, loss=reference_loss), rtol=2e-3, atol=2e-6)
    assert np.abs(grad).max() > 1e-4
    for key in ("filtered_fraction", "capped_fraction"):  # the mask or the cap really acts in these cases
        if key in metrics and (options or name == "mis"):
            assert 0 < metrics[key] < 1, (key, metrics[key])


# ----------------------------------------------------------------------------- M2PO

@pytest.mark.parametrize("seed, budget", [(0, 0.04), (1, 0.3), (2, 1.0), (3, 5.0), (4, 0.0001)])
def test_m2po_keep_equals_the_greedy_loop(seed, budget):
    lr = np.random.default_rng(seed).normal(scale=0.6, size=37).astype(np.float32)
    keep, m2 = obj.second_moment_keep(jnp.asarray(lr), budget)
    np.testing.assert_array_equal(np.asarray(keep) > 0, m2po_keep_reference(lr, budget))
    np.testing.assert_allclose(float(m2), np.mean(lr.astype(np.float64) ** 2), rtol=1e-5)


def test_m2po_keeps_the_smallest_log_ratios_and_drops_no_more_than_needed():
    """The kept set is a lower set of ℓ² within budget, and putting back the smallest dropped sample
    would exceed the budget: an inverted mask or a sort in the wrong order breaks one of the two."""
    lr = np.random.default_rng(5).normal(scale=0.5, size=64).astype(np.float32)
    budget = 0.05
    keep = np.asarray(obj.second_moment_keep(jnp.asarray(lr), budget)[0]) > 0
    sq = lr.astype(np.float64) ** 2
    assert 0 < keep.sum() < keep.size
    assert sq[keep].max() <= sq[~keep].min()
    assert sq[keep].mean() <= budget
    back = keep.copy()
    back[np.flatnonzero(~keep)[np.argmin(sq[~keep])]] = True
    assert sq[back].mean() > budget


def test_m2po_edge_cases_all_dropped_single_sample_exact_budget_and_inf():
    one = jnp.asarray([0.5], jnp.float32)
    assert float(obj.second_moment_keep(one, 0.25)[0][0]) == 1.0  # ℓ² = 0.25 exactly at τ: kept
    assert float(obj.second_moment_keep(one, 0.2)[0][0]) == 0.0  # a single sample above τ: dropped
    lr = jnp.asarray([1.0, -2.0, 3.0], jnp.float32)
    assert float(jnp.sum(obj.second_moment_keep(lr, 0.5)[0])) == 0.0  # even the smallest ℓ² = 1 > τ: all go
    np.testing.assert_array_equal(obj.second_moment_keep(lr, jnp.inf)[0], [1.0, 1.0, 1.0])
    # mean of the two smallest = (1 + 4)/2 = 2.5 exactly at τ: the largest alone is dropped
    np.testing.assert_array_equal(obj.second_moment_keep(lr, 2.5)[0], [1.0, 1.0, 0.0])


def test_m2po_with_every_sample_dropped_has_zero_policy_gradient():
    method = make_method("m2po", second_moment_budget=1e-8)
    batch = make_batch(seed=2, spread=0.3)
    _, grad, metrics = jax_loss_and_grad(method, batch, entropy_coef=0.0)
    assert metrics["filtered_fraction"] == 1.0 and np.all(grad == 0)


# ----------------------------------------------------------------------------- TIS / MIS

OFFSETS = np.asarray([0.01, -0.02, 0.03, -0.04, 0.05], np.float32)


def _decoupled(weight_log, cap, mode, floor=None):
    n = weight_log.shape[0]
    z = jnp.zeros((n,), jnp.float32)
    logp = jnp.asarray(weight_log + OFFSETS[:n], jnp.float32)  # r_p = π_θ/π_prox near 1, inside the clip
    adv = jnp.ones((n,), jnp.float32)

    def f(lp):
        return obj.decoupled_ppo_loss(lp, jnp.asarray(weight_log), z, z, adv, 0.2, cap, mode, jnp.inf,
                                      weight_floor=floor)

    (loss, m), g = jax.value_and_grad(f, has_aux=True)(logp)
    return np.asarray(g), m


def test_mis_band_is_inclusive_at_both_bounds_and_drops_outside():
    cap = float(np.exp(np.float32(0.7)))
    floor = float(np.exp(np.float32(-0.7)))
    log_w = np.asarray([-0.7, 0.7, -0.71, 0.71, 0.0], np.float32)
    g, m = _decoupled(log_w, cap, "band", floor)
    assert np.all(g[[0, 1, 4]] != 0) and np.all(g[[2, 3]] == 0)
    assert float(m["capped_fraction"]) == pytest.approx(0.4)
    # the symmetric default band [1/C, C] drops the same two
    g_default, _ = _decoupled(log_w, cap, "band")
    np.testing.assert_array_equal(g_default != 0, g != 0)


def test_tis_truncates_where_mis_masks():
    """A weight above C keeps a gradient of weight C under TIS and none under MIS; a weight below 1/C
    keeps its own weight under TIS and none under MIS (a band with its bounds swapped, or a mask turned
    into a truncation, breaks this)."""
    log_w = np.asarray([1.5, -1.5, 0.0], np.float32)
    g_tis, _ = _decoupled(log_w, 2.0, "truncate")
    g_mis, _ = _decoupled(log_w, 2.0, "band")
    r_p = np.exp(OFFSETS[:3])
    np.testing.assert_allclose(g_tis[0] / g_tis[2], 2.0 * r_p[0] / r_p[2], rtol=1e-5)
    np.testing.assert_allclose(g_tis[1] / g_tis[2], np.exp(-1.5) * r_p[1] / r_p[2], rtol=1e-5)
    assert g_mis[0] == 0 and g_mis[1] == 0 and g_mis[2] != 0
    assert abs(g_tis[1]) > 0


def test_tis_with_a_cap_of_five_is_decoupled_recompute_on_float32_actors():
    """TIS reads π_old = β (the actor's log-prob); decoupled PPO (recompute) recovers π_old from the
    sample's snapshot. With float32 actors the two are equal up to round-off."""
    a = _train(tiny_config(method="tis", weight_cap=5.0, lag_depth=3, total_env_steps=8 * 16 * 4, num_evals=2))
    b = _train(tiny_config(method="decoupled_recompute", lag_depth=3, total_env_steps=8 * 16 * 4, num_evals=2))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(x, y, rtol=1e-3, atol=1e-5)


def _train(config, seed=0):
    from vaco_jax.core.config import make_traced
    from vaco_jax.core.train import make_train

    trainer = make_train(config)
    state, _ = jax.jit(trainer.train)(jax.random.PRNGKey(seed), make_traced(config, config.lag_depth))
    return state.learner.policy_params


def test_preset_options_fix_structure_and_default_numbers():
    assert make_method("mis").surrogate.weight_cap_mode == "band"
    assert make_method("tis").surrogate.old_logit_source == "infer"
    assert make_method("tis", weight_cap=3.0).surrogate.weight_cap == 3.0  # a number is a default
    with pytest.raises(ConfigError, match="weight_cap_mode='truncate' conflicts with method='mis'.*method='tis'"):
        make_method("mis", weight_cap_mode="truncate")
    with pytest.raises(ConfigError, match="old_logit_source='snapshot' conflicts with method='impact'"):
        tiny_config(method="impact", old_logit_source="snapshot")


# ----------------------------------------------------------------------------- GIPO / SAPO / VCPO

def _grad_per_sample(loss_fn, log_ratio, adv):
    lr = jnp.asarray(log_ratio, jnp.float32)
    z = jnp.zeros_like(lr)
    return np.asarray(jax.grad(lambda lp: loss_fn(lp, z, jnp.asarray(adv, jnp.float32))[0])(lr))


def test_gipo_weight_is_one_at_ratio_one_symmetric_and_decays():
    lr = np.asarray([0.0, 0.3, -0.3, 1.0, 60.0, 200.0], np.float32)  # the last overflows exp in float32
    adv = np.ones(6, np.float32)
    g = _grad_per_sample(lambda lp, b, a: obj.gaussian_trust_loss(lp, b, a, 0.5), lr, adv)
    n = lr.size
    np.testing.assert_allclose(g[0], -1.0 / n, rtol=1e-6)  # at r = 1 the plain policy gradient
    expected = -np.exp(lr[:4] - lr[:4] ** 2 / (2 * 0.25)) / n  # d/dlogp of ω r A, ω held
    np.testing.assert_allclose(g[:4], expected, rtol=1e-5)
    assert np.all(np.isfinite(g)) and g[4] == 0 and g[5] == 0
    assert g[1] < 0 and g[2] < 0  # a sign flip of the advantage or the loss reverses these


def test_sapo_gate_has_unit_slope_at_one_and_uses_the_negative_temperature_for_negative_advantages():
    lr = np.asarray([0.0, 0.0, 0.5, 0.5, 100.0], np.float32)
    adv = np.asarray([1.0, -1.0, 1.0, -1.0, 1.0], np.float32)
    tau, ratio = 2.0, 3.0
    g = _grad_per_sample(lambda lp, b, a: obj.soft_gate_loss(lp, b, a, tau, ratio), lr, adv)
    n = lr.size
    np.testing.assert_allclose(g[:2], [-1.0 / n, 1.0 / n], rtol=1e-6)  # 4 p (1 - p) = 1 at r = 1
    r = np.exp(0.5)
    for i, t in ((2, tau), (3, tau * ratio)):
        p = 1 / (1 + np.exp(-t * (r - 1)))
        np.testing.assert_allclose(g[i], -adv[i] * 4 * p * (1 - p) * r / n, rtol=1e-5)
    assert abs(g[3]) < abs(g[2])  # the hotter negative side gates harder
    assert np.isfinite(g[4]) and abs(g[4]) < 1e-20


def test_vcpo_step_scale_is_the_root_of_the_ess_and_the_weight_is_truncated():
    lr = np.random.default_rng(3).normal(scale=0.8, size=40).astype(np.float32)
    adv = np.ones(40, np.float32)
    loss, m = obj.truncated_is_pg_loss(jnp.asarray(lr), jnp.zeros(40), jnp.asarray(adv), 1.5)
    np.testing.assert_allclose(float(m["step_scale"]), np.sqrt(ess_reference(lr)), rtol=1e-5)
    g = _grad_per_sample(lambda lp, b, a: obj.truncated_is_pg_loss(lp, b, a, 1.5), lr, adv)
    np.testing.assert_allclose(g, -np.minimum(np.exp(lr), 1.5) / 40, rtol=1e-5)
    assert float(m["capped_fraction"]) == pytest.approx(np.mean(np.exp(lr) > 1.5))


def test_the_update_step_scales_the_policy_step_by_the_surrogate_step_scale():
    """VCPO's ESS reaches the optimiser: the same minibatch with ESS-scaled steps moves the policy by
    √ESS of the unscaled move (Adam's first step is sign-like, so the move is lr·√ESS per coordinate)."""
    batch = make_batch(seed=4, spread=0.3)
    aligned = jax.tree.map(lambda x: x[None], batch.aligned())
    params = {"mu": jnp.asarray(batch.mu, jnp.float32), "log_std": jnp.asarray(batch.log_std, jnp.float32)}
    value = {"v": jnp.zeros((N,), jnp.float32)}
    opt = make_optimizer(1e9, 1e-8)
    shape = UpdateShape(num_epochs=1, num_minibatches=1)
    moves = {}
    for name, cls in (("vcpo", P.ESSScaledPG), ("plain", _NoScale)):
        method = compose(P.GAE(), P.Behavior(), cls(ratio_cap=jnp.inf), P.NoFilter())
        learner = LearnerState(params, value, opt.init(params), opt.init(value), ewma_init(params))
        new, out = update_phase(shape, method, tiny_nets(), opt, learner, aligned, jax.random.PRNGKey(0), 1e-3,
                                lag_depth=1, gamma=0.99, value_coef=0.5, entropy_coef=0.0)
        moves[name] = np.asarray(new.policy_params["mu"] - params["mu"])
    ess = ess_reference(_logp(batch.action, batch.mu, batch.log_std) - batch.behaviour_logp)
    assert ess < 0.9
    np.testing.assert_allclose(moves["vcpo"], np.sqrt(ess) * moves["plain"], rtol=1e-3, atol=1e-9)


@struct.dataclass
class _NoScale(P.ESSScaledPG):
    """VCPO's loss without its step scale (the update step's control)."""

    name = "ess_scaled_pg_unscaled"

    def loss(self, x):
        loss, m = super().loss(x)
        return loss, {k: v for k, v in m.items() if k != "step_scale"}


# ----------------------------------------------------------------------------- IMPACT's target

def test_target_is_copied_every_k_phases_of_s_steps():
    params = {"w": jnp.zeros(())}
    state = ewma_init(params)
    period = 2 * 3  # K = 2 phases of S = 3 steps
    copies = []
    for step in range(1, 13):
        state = target_update(state, {"w": jnp.asarray(float(step))}, period)
        copies.append(float(state.params["w"]))
    assert copies == [0.0] * 5 + [6.0] * 6 + [12.0]


def test_impact_with_one_phase_between_copies_is_tis():
    """With K = 1 the target is π_T in every phase, so IMPACT's loss is TIS's with the same cap; with
    K = 3 the target lags π_T and the runs part."""
    common = dict(lag_depth=3, total_env_steps=8 * 16 * 4, num_evals=2, learning_rate=1e-2)
    tis = _train(tiny_config(method="tis", **common))
    for k, same in ((1, True), (3, False)):
        impact = _train(tiny_config(method="impact", target_update_phases=k, **common))
        close = [np.allclose(x, y, rtol=1e-3, atol=1e-5) for x, y in zip(jax.tree.leaves(impact), jax.tree.leaves(tis))]
        assert all(close) if same else not all(close), k


# ----------------------------------------------------------------------------- diagnostics, declarations

def test_ess_and_log_ratio_stats_equal_numpy_and_stay_finite_when_weights_overflow():
    lw = np.random.default_rng(0).normal(size=33).astype(np.float32)
    np.testing.assert_allclose(float(obj.effective_sample_size(jnp.asarray(lw))), ess_reference(lw), rtol=1e-5)
    assert float(obj.effective_sample_size(jnp.zeros(8))) == pytest.approx(1.0)
    huge = jnp.asarray([200.0, 0.0, 0.0, 0.0], jnp.float32)
    assert float(obj.effective_sample_size(huge)) == pytest.approx(0.25, rel=1e-5)
    mean_abs, p99 = obj.abs_log_ratio_stats(jnp.asarray(lw))
    np.testing.assert_allclose([float(mean_abs), float(p99)], [np.mean(np.abs(lw)), np.percentile(np.abs(lw), 99)],
                               rtol=1e-5)


@pytest.mark.parametrize("name", ("ppo_clip", "vaco", "impala") + NEW_METHODS)
def test_every_method_records_the_staleness_diagnostics(name):
    if name == "impala":
        pytest.skip("every-step estimator: covered by the training run below")
    _, _, metrics = jax_loss_and_grad(make_method(name), make_batch(seed=1))
    for key in ("ess_behaviour", "abs_log_ratio_behaviour_mean", "abs_log_ratio_behaviour_p99",
                "abs_log_ratio_learner_mean", "abs_log_ratio_learner_p99", "tv_behaviour", "tv_learner"):
        assert np.isfinite(metrics[key]), key
    assert 0 < metrics["ess_behaviour"] <= 1


def test_a_piece_that_reads_what_the_rollout_does_not_provide_is_a_config_error():
    @struct.dataclass
    class EpisodeSurrogate(P.PPOClip):
        name = "per_episode"
        reads = ("logp", "episode_id")

    with pytest.raises(ConfigError, match="surrogate='per_episode' reads 'episode_id', which the rollout does not"):
        compose(P.GAE(), P.Behavior(), EpisodeSurrogate(), P.NoFilter())

    @struct.dataclass
    class ValueFilter(P.NoFilter):
        name = "by_value"
        reads = ("values",)

    with pytest.raises(ConfigError, match="sample_filter='by_value' reads 'values'"):
        compose(P.GAE(), P.Behavior(), P.ISPG(), ValueFilter())


def test_new_methods_are_registered_with_label_colour_marker_and_step_knob():
    from vaco_jax.core.knobs import KNOBS

    for name in NEW_METHODS:
        preset = METHODS[name]
        assert preset.label and preset.colour and preset.marker and preset.description
        assert preset.step_knob is None or preset.step_knob in KNOBS
    colours = [p.colour for p in METHODS.values()]
    assert len(colours) == len(set(colours))


def test_each_new_step_knob_is_a_traced_sweep_axis_of_one_program(tmp_path, capsys):
    """``--sweep`` over every new method's step knob: each method stays one group (one compiled program)
    whose cells carry the knob's values; a knob applies to the groups whose method reads it. Every group's
    traced values hold its cells' knob values, and its chunk traces with them as vmapped tracers (a knob
    read in Python control flow or made static fails there; tracing needs no XLA compile); one group, TIS
    with its two knobs, runs, and its rows carry the values."""
    import os

    from vaco_jax.analysis.results import read_csv
    from vaco_jax.driver.cli import parse_args
    from vaco_jax.driver.program import group_program
    from vaco_jax.studies import lag_sweep

    sweeps = {"m2po": ("second_moment_budget", (0.02, 0.08)), "tis": ("weight_cap", (1.5, 3.0)),
              "mis": ("weight_cap", (1.5, 3.0)), "gipo": ("trust_width", (0.3, 1.0)),
              "sapo": ("gate_temperature", (0.5, 2.0)), "impact": ("clip_epsilon", (0.1, 0.3)),
              "vcpo": ("ratio_cap", (2.0, 8.0))}
    axes = {f"{k}={','.join(map(str, v))}" for k, v in sweeps.values()}
    out = str(tmp_path / "run")
    common = ["--preset", "tiny", "--tasks", "point_mass", "--episode-length", "40", "--seeds", "0", "--lag-depths",
              "1", "2", "--out", out, "--no-progress", "--no-figures", "--bootstrap-reps", "200"]
    args = parse_args(lag_sweep.Args, common + ["--methods", *sweeps, "--sweep", *sorted(axes), "--dry-run"])
    lag_sweep.main(args)
    plan = capsys.readouterr().out.split("plan: ")[1]
    assert plan.startswith(f"{len(sweeps)} group(s), one compiled program each")
    assert not os.path.exists(out)
    groups = lag_sweep.plan(args, lag_sweep.resolve(args))
    assert [g.label for g in groups] == [f"point_mass/{m}" for m in sweeps]
    for group, (method, (knob, values)) in zip(groups, sweeps.items()):
        cells = group.cells
        assert {(c.lag_depth, c.knob_dict()[knob]) for c in cells} == {(b, v) for b in (1, 2) for v in values}, method
        # TIS, MIS and IMPACT read both clip_epsilon and weight_cap: the cells multiply by every knob a method reads
        assert len(cells) == (8 if method in ("tis", "mis", "impact") else 4), method
        program = group_program(group.config, list(cells), devices=1)
        held = {jax.tree_util.keystr(path): np.asarray(leaf)
                for path, leaf in jax.tree_util.tree_flatten_with_path(program.traced.method)[0]
                if getattr(path[-1], "name", None) in {k for k, _ in sweeps.values()}}
        for name in {k for c in cells for k in c.knob_dict()}:  # each swept knob is one leaf over the grid
            (leaf,) = [v for p, v in held.items() if p.endswith(f".{name}")]
            np.testing.assert_allclose(leaf, [c.knob_dict()[name] for c in cells], err_msg=f"{method}.{name}")
        jax.eval_shape(lambda k, t: program.train_chunk(program.init(k, t), t), program.keys, program.traced)

    lag_sweep.main(parse_args(lag_sweep.Args, common + ["--methods", "tis", "--sweep", "clip_epsilon=0.1,0.3",
                                                        "weight_cap=1.5,3.0"]))
    rows = read_csv(os.path.join(out, "point_mass", "tis", "scores.csv"))
    assert {(r["lag_depth"], r["clip_epsilon"], r["weight_cap"]) for r in rows} == \
        {(b, e, w) for b in (1, 2) for e in (0.1, 0.3) for w in (1.5, 3.0)}
    assert all(r["diverged"] in (False, "False", 0) for r in rows)


def test_help_lists_each_new_method_with_its_description():
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-m", "vaco_jax", "train", "--help"], capture_output=True, text=True,
                         timeout=120, cwd=root, env={**os.environ, "COLUMNS": "80"})
    squeeze = lambda t: "".join(t.replace("│", "").split())  # noqa: E731  (the help is wrapped in a box)
    text = squeeze(out.stdout)
    for name in NEW_METHODS:
        assert squeeze(f"{name}: {METHODS[name].description}") in text, name


def test_a_band_floor_outside_band_mode_or_above_the_cap_is_an_error():
    with pytest.raises(ConfigError, match="weight_floor=0.5 is read only with weight_cap_mode='band'"):
        make_method("tis", weight_floor=0.5)
    with pytest.raises(ConfigError, match="weight_floor=3.0 is above weight_cap=2.0"):
        make_method("mis", weight_floor=3.0)
    assert make_method("mis", weight_floor=0.5, weight_cap=5.0).surrogate.weight_floor == 0.5  # IcePop's band
