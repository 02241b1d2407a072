"""The composition core (docs/methods.md): presets and pieces, the wiring of the update step against
numpy references on synthetic minibatches, the EWMA reset wiring, grids of pieces under jit(vmap).

No MJX here: the losses run on random per-sample batches through a "policy" whose mean is a free
parameter per sample, so the gradient of every method can be checked by finite differences of a
float64 numpy reference of the loss.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from vaco_jax.core import pieces as P
from vaco_jax.core.config import STATIC_FIELDS, TRACED_FIELDS, Config, ConfigError, make_traced, stack_traced
from vaco_jax.core.knobs import KNOBS
from vaco_jax.core.methods import METHODS, compose, make_method
from vaco_jax.core.proximal import ewma_init
from vaco_jax.core.train import annealed_fraction
from vaco_jax.core.update import Aligned, LearnerState, Networks, UpdateShape, make_optimizer, policy_loss, update_phase

N, A = 48, 3
LOG_2PI = math.log(2 * math.pi)


# ----------------------------------------------------------------------------- preset rules

@pytest.mark.parametrize("given", [
    dict(method="vaco", sample_filter="none"),
    dict(method="vaco", advantage_estimator="gae"),
    dict(method="a3po", proximal_source="behavior"),
])
def test_a_preset_never_overwrites_a_piece_the_user_gave(given):
    kind = [k for k in given if k != "method"][0]
    with pytest.raises(ConfigError, match=f"{kind}='{given[kind]}' conflicts with method='{given['method']}'"):
        tiny_config(**given)


def test_the_error_points_to_the_preset_that_has_those_pieces():
    with pytest.raises(ConfigError, match="use method='vaco_realign_only'"):
        tiny_config(method="vaco", sample_filter="none")
    # the preset's own choice is honoured (not an error)
    assert tiny_config(method="vaco", sample_filter="tv").build_method().sample_filter.name == "tv"


@pytest.mark.parametrize("given, names", [
    (dict(method="custom", surrogate="ppo_clip", proximal_source="loglinear"), ("loglinear", "ppo_clip")),
    (dict(method="custom", surrogate="ppo_clip", sample_filter="tv"), ("tv", "ppo_clip")),
    (dict(method="custom", advantage_estimator="vtrace_every_step"), ("vtrace_every_step", "ppo_clip")),
    (dict(method="custom", surrogate="impala"), ("impala", "gae")),
    (dict(method="ppo_clip", tv_denominator="learner"), ("tv_denominator", "is_pg")),
    (dict(method="ppo_kl", tv_scale="l1"), ("tv_scale", "sample_filter='tv'")),
    (dict(method="ppo_ewma_revised", old_logit_source="snapshot"), ("old_logit_source", "ewma_revised")),
    (dict(method="a3po", old_logit_source="ewma_revised"), ("ewma_revised", "loglinear")),
    (dict(method="ppo_clip", old_logit_source="infer"), ("old_logit_source", "decoupled")),
    (dict(method="vaco", clip_epsilon=0.3), ("clip_epsilon", "vaco")),
    (dict(method="ppo_clip", tv_budget=0.1), ("tv_budget", "ppo_clip")),
    (dict(method="vaco", kl_coef=0.5), ("kl_coef", "ppo_kl")),
])
def test_a_piece_or_option_that_would_be_ignored_is_an_error_naming_both(given, names):
    with pytest.raises(ConfigError) as err:
        tiny_config(**given)
    for name in names:
        assert name in str(err.value), (name, str(err.value))


def test_options_reach_the_piece_that_reads_them():
    m = tiny_config(method="vaco", tv_budget=0.1, tv_scale="l1", tv_denominator="learner", rho_bar=2.0,
                    gae_lambda=0.9).build_method()
    assert m.sample_filter.tv_budget == 0.1 and m.sample_filter.tv_scale == "l1"
    assert m.surrogate.tv_denominator == "learner"
    assert m.advantage.rho_bar == 2.0 and m.advantage.gae_lambda == 0.9
    m = tiny_config(method="spo", clip_epsilon=0.3).build_method()
    assert m.surrogate.clip_epsilon == 0.3
    m = tiny_config(method="ppo_ewma_revised", ewma_ratio_test="per_dim").build_method()
    assert m.proximal.ewma_ratio_test == "per_dim" and m.surrogate.old_logit_source == "ewma_revised"
    # the revised EWMA imposes its pi_old; giving the same value is fine
    assert tiny_config(method="ppo_ewma_revised", old_logit_source="ewma_revised")


def test_fields_that_were_never_read_are_gone():
    for name in ("action_repeat", "spo_epsilon_from_clip", "value_clip"):
        with pytest.raises(TypeError):
            tiny_config(**{name: 1})


def test_static_and_traced_fields_are_defined_once_and_disjoint():
    assert set(TRACED_FIELDS) == set(KNOBS)
    assert not set(TRACED_FIELDS) & set(STATIC_FIELDS)
    for name in ("lag_depth", "learning_rate", "gamma", "gae_lambda", "rho_bar", "c_bar", "entropy_coef",
                 "value_coef", "kl_coef", "weight_cap", "mismatch_bound", "ewma_age", "max_grad_norm",
                 "clip_epsilon", "tv_budget", "age_weights"):
        assert name in TRACED_FIELDS
    for name in ("num_epochs", "num_minibatches", "policy_hidden", "actor_dtype", "buffer_capacity", "method"):
        assert name in STATIC_FIELDS
    config_fields = {f.name for f in dataclasses.fields(Config)}
    assert set(KNOBS) <= config_fields, "every knob has its Config field (the default)"


def test_a_common_knob_gets_its_traced_slot_from_the_knob_table():
    """TracedParams is built from knobs.KNOBS: the lag piece, the method, then each common knob in the
    table's order (the pytree's leaf order, hence the numbers, follows it); make_traced fills each."""
    from vaco_jax.core.config import TracedParams
    from vaco_jax.core.knobs import COMMON_KNOBS

    assert [f.name for f in dataclasses.fields(TracedParams)] == ["lag", "method", *COMMON_KNOBS]
    traced = make_traced(tiny_config(gamma=0.9, mismatch_strength=0.5), lag_depth=2)
    assert float(traced.gamma) == pytest.approx(0.9) and float(traced.mismatch_strength) == 0.5
    assert int(traced.lag_depth) == 2


@pytest.mark.parametrize("field, value", [("learning_rate", float("nan")), ("learning_rate", 1e40),
                                          ("gamma", 1.5), ("mismatch_bound", float("nan")),
                                          ("init_log_std", float("nan")), ("tv_budget", 0.0),
                                          ("clip_epsilon", -0.1)])
def test_numeric_knobs_are_checked_naming_field_and_range(field, value):
    method = {"tv_budget": "vaco", "mismatch_bound": "a3po"}.get(field, "ppo_clip")
    with pytest.raises(ConfigError, match=field):
        tiny_config(method=method, **{field: value})


def test_make_traced_rejects_a_knob_the_method_does_not_read_and_static_fields():
    config = tiny_config(method="ppo_clip")
    with pytest.raises(ConfigError, match="tv_budget"):
        make_traced(config, 1, tv_budget=0.1)
    with pytest.raises(ConfigError, match="num_epochs is static"):
        make_traced(config, 1, num_epochs=2)


def test_annealing_ends_at_zero_after_the_phases_that_run():
    config = tiny_config(total_env_steps=8 * 16 * 5, num_evals=2)  # 5 phases possible, 4 run
    assert config.num_phases == 5 and config.phases_run == 4
    fractions = [float(annealed_fraction(t, config.phases_run)) for t in range(config.phases_run + 1)]
    np.testing.assert_allclose(fractions, [1.0, 0.75, 0.5, 0.25, 0.0])


# ----------------------------------------------------------------------------- a synthetic minibatch

def _logp(a, mu, log_std):
    return np.sum(-0.5 * ((a - mu) / np.exp(log_std)) ** 2 - log_std - 0.5 * LOG_2PI, axis=-1)


def _logp_dims(a, mu, log_std):
    return -0.5 * ((a - mu) / np.exp(log_std)) ** 2 - log_std - 0.5 * LOG_2PI


@dataclasses.dataclass
class Batch:
    action: np.ndarray
    mu: np.ndarray  # pi_theta's mean per sample (the parameter)
    log_std: np.ndarray  # pi_theta's log-std [A]
    b_mu: np.ndarray
    b_log_std: np.ndarray
    learner_logp: np.ndarray
    old_logp: np.ndarray
    staleness: np.ndarray
    adv: np.ndarray
    pg_adv: np.ndarray
    ewma_mu: np.ndarray

    @property
    def behaviour_logp(self):
        return _logp(self.action, self.b_mu, self.b_log_std)

    def aligned(self) -> Aligned:
        f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
        idx = jnp.arange(N, dtype=jnp.float32)[:, None]
        z = jnp.zeros((N,), jnp.float32)
        return Aligned(obs=idx, next_obs=idx, action=f(self.action), reward=z, termination=z, truncation=z,
                       behaviour_logp=f(self.behaviour_logp), behaviour_mean=f(self.b_mu),
                       behaviour_log_std=f(np.broadcast_to(self.b_log_std, (N, A))), old_logp=f(self.old_logp),
                       learner_logp=f(self.learner_logp), staleness=jnp.asarray(self.staleness, jnp.int32),
                       advantages=f(self.adv), pg_advantages=f(self.pg_adv), value_targets=z, old_values=z)


def make_batch(seed=0, spread=0.4):
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=(N, A)) * 0.5
    log_std = np.full((A,), -0.3)
    b_mu = mu + spread * rng.normal(size=(N, A))
    b_log_std = np.full((A,), -0.5)
    action = b_mu + np.exp(b_log_std) * rng.normal(size=(N, A))
    learner_mu = mu + 0.3 * spread * rng.normal(size=(N, A))
    learner_logp = _logp(action, learner_mu, log_std)
    beh = _logp(action, b_mu, b_log_std)
    old_logp = beh + 0.05 * rng.normal(size=N)  # a small training-inference mismatch
    return Batch(action, mu, log_std, b_mu, b_log_std, learner_logp, old_logp, rng.integers(0, 5, N),
                 rng.normal(size=N) + 0.7, rng.normal(size=N) + 0.7, mu + 0.1 * rng.normal(size=(N, A)))


def tiny_nets():
    def policy_apply(params, obs):
        idx = obs[..., 0].astype(jnp.int32)
        mean = params["mu"][idx]
        return mean, jnp.broadcast_to(params["log_std"], mean.shape)

    def value_apply(params, obs):
        return params["v"][obs[..., 0].astype(jnp.int32)]

    return Networks(policy_apply, value_apply)


def jax_loss_and_grad(method, batch: Batch, entropy_coef=0.01):
    nets = tiny_nets()
    mb = batch.aligned()
    ewma = {"mu": jnp.asarray(batch.ewma_mu, jnp.float32), "log_std": jnp.asarray(batch.log_std, jnp.float32)}

    def f(mu):
        params = {"mu": mu, "log_std": jnp.asarray(batch.log_std, jnp.float32)}
        return policy_loss(method, nets, params, ewma, mb, entropy_coef, True)

    (loss, metrics), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(batch.mu, jnp.float32))
    return float(loss), np.asarray(grad), jax.device_get(metrics)


# ----------------------------------------------------------------------------- numpy references

def reference_loss(method, b: Batch, mu, mu_sg, entropy_coef=0.01):
    """The documented loss (docs/surrogates.md) in float64; only ``mu`` is differentiated, every
    stop-gradient quantity is computed at ``mu_sg``."""
    adv_name, prox_name, sur_name, filt_name = (p.name for p in method.pieces())
    sur, filt, prox = method.surrogate, method.sample_filter, method.proximal
    beh = b.behaviour_logp
    logp = _logp(b.action, mu, b.log_std)
    logp_sg = _logp(b.action, mu_sg, b.log_std)
    learner_den = sur_name == "is_pg" and sur.tv_denominator == "learner"
    a = b.pg_adv if learner_den else b.adv
    a = (a - a.mean()) / (a.std() + 1e-8)  # normalised before any filter test
    if sur_name == "ppo_clip":
        eps = sur.clip_epsilon
        r = np.exp(logp - beh)
        loss = -np.mean(np.minimum(r * a, np.clip(r, 1 - eps, 1 + eps) * a))
    elif sur_name == "spo":
        eps = sur.clip_epsilon
        r = np.exp(logp - beh)
        loss = -np.mean(r * a - np.abs(a) / (2 * eps) * (r - 1) ** 2)
    elif sur_name == "ppo_kl":
        r = np.exp(logp - beh)
        s_b, s_t = np.exp(b.b_log_std), np.exp(b.log_std)
        kl = np.sum(b.log_std - b.b_log_std + (s_b ** 2 + (b.b_mu - mu) ** 2) / (2 * s_t ** 2) - 0.5, axis=-1)
        loss = -np.mean(r * a) + sur.kl_coef * np.mean(kl)  # KL(beta || pi_theta)
    elif sur_name == "decoupled":
        d = b.staleness
        ewma_logp = _logp(b.action, b.ewma_mu, b.log_std)
        if prox_name == "behavior":
            p = beh
        elif prox_name == "recompute":
            p = b.learner_logp
        elif prox_name == "loglinear":
            alpha = 1.0 / np.maximum(d, 1)
            p = np.where(d <= 1, beh, alpha * beh + (1 - alpha) * logp_sg)
        elif prox_name == "linear":
            dd = np.maximum(d, 1)
            p = np.where(d <= 1, beh, np.log(np.exp(beh) / dd + (1 - 1 / dd) * np.exp(logp_sg)))
        else:
            p = ewma_logp
        old = ewma_logp if prox_name == "ewma_revised" else b.old_logp
        test = old - beh
        if prox_name == "ewma_revised" and prox.ewma_ratio_test == "per_dim":
            test = np.mean(_logp_dims(b.action, b.ewma_mu, b.log_std)
                           - _logp_dims(b.action, b.b_mu, b.b_log_std), axis=-1)
        m = (np.abs(test) <= np.log(sur.mismatch_bound)).astype(float)
        w = np.minimum(np.exp(p - old), sur.weight_cap)
        r = np.exp(logp - p)
        eps = sur.clip_epsilon
        loss = -np.mean(m * np.exp(old - beh) * w * np.minimum(r * a, np.clip(r, 1 - eps, 1 + eps) * a))
    elif sur_name == "is_pg":
        den = b.learner_logp if learner_den else beh
        r, r_sg = np.exp(logp - den), np.exp(logp_sg - den)
        if filt_name == "tv":
            l1 = np.mean(np.abs(r_sg - 1))
            tv = 0.5 * l1 if filt.tv_scale == "tv" else l1
            grows = a * (logp_sg - den) > 0
            keep = (tv <= filt.tv_budget) | ~grows
        else:
            keep = np.ones(N, bool)
        loss = -np.mean(np.where(keep, r, r_sg) * a)
    else:
        raise AssertionError(sur_name)
    entropy = np.sum(b.log_std + 0.5 * (LOG_2PI + 1))
    return loss - entropy_coef * entropy


def reference_grad(method, b: Batch, h=1e-6, loss=None):
    """Central finite differences of ``loss`` (default: this file's ``reference_loss``) in each mean."""
    loss = loss or reference_loss
    grad = np.zeros_like(b.mu)
    for i in range(N):
        for j in range(A):
            up, down = b.mu.copy(), b.mu.copy()
            up[i, j] += h
            down[i, j] -= h
            grad[i, j] = (loss(method, b, up, b.mu) - loss(method, b, down, b.mu)) / (2 * h)
    return grad


CASES = [
    ("ppo_clip", {}), ("ppo_kl", {"kl_coef": 0.7}), ("spo", {"clip_epsilon": 0.15}),
    ("decoupled_recompute", {}), ("decoupled_linear", {}), ("a3po", {}), ("ppo_ewma", {}),
    ("ppo_ewma_revised", {}), ("ppo_ewma_revised", {"ewma_ratio_test": "per_dim", "mismatch_bound": 1.1}),
    ("vaco", {"tv_budget": 0.05}), ("vaco", {"tv_budget": 0.05, "tv_denominator": "learner"}),
    ("vaco", {"tv_budget": 0.05, "tv_scale": "l1"}), ("vaco_realign_only", {}),
    ("vaco_filter_only", {"tv_budget": 0.08}),
]


@pytest.mark.parametrize("name, options", CASES, ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in CASES])
def test_each_method_loss_and_gradient_equal_the_numpy_reference(name, options):
    method = make_method(name, **options)
    batch = make_batch(seed=len(name) + len(options))
    loss, grad, metrics = jax_loss_and_grad(method, batch)
    ref = reference_loss(method, batch, batch.mu, batch.mu)
    np.testing.assert_allclose(loss, ref, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(grad, reference_grad(method, batch), rtol=2e-3, atol=2e-6)
    assert np.abs(grad).max() > 1e-4  # a gradient that is not zero everywhere
    if method.sample_filter.name == "tv":  # the filter is really active in these cases
        assert 0 < metrics["filtered_fraction"] < 1


def test_normalisation_happens_before_the_filter_test():
    """A filter that tested the raw advantages would keep a different set of samples here."""
    method = make_method("vaco", tv_budget=0.05)
    batch = make_batch(seed=3)
    a = batch.adv
    assert np.any(np.sign(a) != np.sign(a - a.mean()))  # normalising flips some signs
    _, grad, _ = jax_loss_and_grad(method, batch)
    raw = dataclasses.replace(batch)
    keep_norm = _keep(batch, (a - a.mean()) / a.std())
    keep_raw = _keep(raw, a)
    assert np.any(keep_norm != keep_raw)
    np.testing.assert_array_equal(np.abs(grad).sum(-1) > 0, keep_norm)


def _keep(b, adv):
    lr = _logp(b.action, b.mu, b.log_std) - b.behaviour_logp
    tv = 0.5 * np.mean(np.abs(np.exp(lr) - 1))
    return (tv <= 0.05) | ~(adv * lr > 0)


def test_kl_penalty_direction_is_beta_to_pi_theta():
    method = make_method("ppo_kl", kl_coef=1.0)
    batch = make_batch(seed=5)
    batch.adv = np.zeros(N)  # only the KL term remains
    batch.pg_adv = np.zeros(N)
    _, grad, _ = jax_loss_and_grad(method, batch, entropy_coef=0.0)
    forward = (batch.mu - batch.b_mu) / np.exp(2 * batch.log_std) / N  # d KL(beta||pi)/d mu_theta
    reverse = (batch.mu - batch.b_mu) / np.exp(2 * batch.b_log_std) / N  # d KL(pi||beta)/d mu_theta
    np.testing.assert_allclose(grad, forward, rtol=1e-4, atol=1e-7)
    assert np.abs(grad - reverse).max() > 1e-3


def test_decoupled_loss_has_no_nan_for_a_masked_sample_whose_ratio_overflows():
    method = make_method("decoupled_recompute")
    batch = make_batch(seed=7)
    batch.learner_logp = batch.learner_logp.copy()
    batch.learner_logp[0] = -200.0  # pi_prox = pi_T tiny: r_p = pi_theta/pi_prox overflows float32
    batch.old_logp = batch.old_logp.copy()
    batch.old_logp[0] = batch.behaviour_logp[0] + 5.0  # outside [1/c, c]: masked
    batch.adv = batch.adv.copy()
    batch.adv[0] = -1.0
    loss, grad, metrics = jax_loss_and_grad(method, batch)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    assert np.all(grad[0] == 0)
    assert metrics["mismatch_kept_fraction"] < 1


def test_r_d_is_measured_for_every_method_when_old_logits_differ():
    """A surrogate that reads no pi_old still reports r_d = pi_old / pi_infer (the float32 snapshot
    the trainer supplies in low precision), instead of a constant 1."""
    batch = make_batch(seed=9)
    _, _, metrics = jax_loss_and_grad(make_method("ppo_clip"), batch)
    expected = np.mean(np.exp(batch.old_logp - batch.behaviour_logp))
    np.testing.assert_allclose(metrics["mismatch_ratio_mean"], expected, rtol=1e-5)
    assert abs(metrics["mismatch_ratio_mean"] - 1) > 1e-3


# ----------------------------------------------------------------------------- EWMA reset wiring

def _ewma_batch(per_dim_shift=0.15, dims=6, n=16):
    """beta's log-std exceeds pi_theta's by ``per_dim_shift`` in every dimension and the actions sit at
    both means: per dimension pi_theta/beta = exp(shift) (inside [1/2, 2]), jointly exp(dims * shift)
    = exp(0.9) > 2 (outside)."""
    mu = np.zeros((n, dims))
    log_std = np.full((dims,), -0.5)
    idx = jnp.arange(n, dtype=jnp.float32)[:, None][None]  # [U=1, N, 1]
    f = lambda x: jnp.asarray(x, jnp.float32)[None]  # noqa: E731
    b_log_std = log_std + per_dim_shift
    beh = _logp(mu, mu, b_log_std)
    z = jnp.zeros((1, n), jnp.float32)
    aligned = Aligned(obs=idx, next_obs=idx, action=f(mu), reward=z, termination=z, truncation=z,
                      behaviour_logp=f(beh), behaviour_mean=f(mu), behaviour_log_std=f(np.broadcast_to(b_log_std, mu.shape)),
                      old_logp=f(beh), learner_logp=f(beh), staleness=jnp.zeros((1, n), jnp.int32),
                      advantages=f(np.linspace(-1, 1, n)), pg_advantages=f(np.linspace(-1, 1, n)),
                      value_targets=z, old_values=z)
    params = {"mu": jnp.asarray(mu, jnp.float32), "log_std": jnp.asarray(log_std, jnp.float32)}
    return aligned, params, n


@pytest.mark.parametrize("test, kept, resets", [("joint", 0.0, 4.0), ("per_dim", 1.0, 0.0)])
def test_revised_ewma_ratio_test_drives_both_the_loss_mask_and_the_reset(test, kept, resets):
    aligned, params, n = _ewma_batch()
    method = make_method("ppo_ewma_revised", ewma_ratio_test=test)
    value = {"v": jnp.zeros((n,), jnp.float32)}
    opt = make_optimizer(0.5, 1e-5)
    learner = LearnerState(params, value, opt.init(params), opt.init(value), ewma_init(params))
    shape = UpdateShape(num_epochs=2, num_minibatches=2)
    _, out = update_phase(shape, method, tiny_nets(), opt, learner, aligned, jax.random.PRNGKey(0), 1e-3,
                          lag_depth=jnp.asarray(2), gamma=0.99, value_coef=0.5, entropy_coef=0.0)
    np.testing.assert_allclose(out["mismatch_kept_fraction"], kept, atol=1e-6)  # the loss's mask
    np.testing.assert_allclose(out["ewma_kept_fraction"], kept, atol=1e-6)  # what the reset read
    assert float(out["ewma_resets"]) == resets  # one per gradient step when everything is masked


# ----------------------------------------------------------------------------- grids of pieces

def test_a_grid_of_pieces_runs_through_jit_vmap_and_equals_each_cell():
    config = tiny_config(method="vaco")
    budgets = [0.02, 0.1, 5.0]
    cells = [make_traced(config, 1, tv_budget=d, gae_lambda=0.9) for d in budgets]
    stacked = stack_traced(cells)
    batch = make_batch(seed=11)
    nets, mb = tiny_nets(), batch.aligned()
    params = {"mu": jnp.asarray(batch.mu, jnp.float32), "log_std": jnp.asarray(batch.log_std, jnp.float32)}

    def loss(traced):
        return policy_loss(traced.method, nets, params, params, mb, traced.entropy_coef, True)

    grid_loss, grid_metrics = jax.jit(jax.vmap(loss))(stacked)
    for i, cell in enumerate(cells):
        single, m = jax.jit(loss)(cell)
        np.testing.assert_allclose(grid_loss[i], single, rtol=1e-6)
        np.testing.assert_allclose(grid_metrics["filtered_fraction"][i], m["filtered_fraction"])
    fractions = np.asarray(grid_metrics["filtered_fraction"])
    assert fractions[0] > fractions[2]  # the budget really varies across the grid


def test_cells_of_different_structure_cannot_be_stacked():
    a = make_traced(tiny_config(method="vaco"), 1)
    b = make_traced(tiny_config(method="vaco", tv_scale="l1"), 1)
    with pytest.raises(ConfigError, match="share"):
        stack_traced([a, b])


def test_compose_accepts_pieces_directly_and_checks_them():
    m = compose(P.GAE(gae_lambda=0.9), P.LogLinear(), P.Decoupled(clip_epsilon=0.1), P.NoFilter())
    assert m.name == "custom" and m.surrogate.clip_epsilon == 0.1
    with pytest.raises(ConfigError, match="loglinear.*ppo_clip"):
        compose(P.GAE(), P.LogLinear(), P.PPOClip(), P.NoFilter())
    with pytest.raises(ConfigError, match="clip_epsilon"):
        compose(P.GAE(), P.Behavior(), P.PPOClip(clip_epsilon=float("nan")), P.NoFilter())


def test_every_registered_method_builds_and_names_its_pieces():
    for name, preset in METHODS.items():
        method = make_method(name)
        assert method.name == name
        assert [p.name for p in method.pieces()] == list(preset.piece_names().values())


# ----------------------------------------------------------------------------- align and IMPALA wiring

def _trajectory(seed=0, U=6, n=4):
    from vaco_jax.core.networks import normalizer_init
    from vaco_jax.core.rollout import Transition

    rng = np.random.default_rng(seed)
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    idx = np.broadcast_to(np.arange(n, dtype=np.float32)[None, :, None], (U, n, 1))
    b_mu = rng.normal(size=(U, n, A))
    action = b_mu + 0.5 * rng.normal(size=(U, n, A))
    traj = Transition(obs=f(idx), action=f(action), reward=f(rng.normal(size=(U, n))),
                      termination=f(rng.random((U, n)) < 0.1), truncation=f(rng.random((U, n)) < 0.1),
                      next_obs=f(idx), behaviour_logp=f(_logp(action, b_mu, np.full(A, -0.5))),
                      behaviour_version=jnp.asarray(rng.integers(0, 3, (U, n)), jnp.int32),
                      behaviour_mean=f(b_mu), behaviour_log_std=f(np.full((U, n, A), -0.5)),
                      episode_return=f(np.zeros((U, n))), episode_length=jnp.zeros((U, n), jnp.int32))
    policy = {"mu": f(rng.normal(size=(n, A))), "log_std": f(np.full(A, -0.3))}
    value = {"v": f(rng.normal(size=(n,)))}
    return traj, policy, value, normalizer_init(1), n


@pytest.mark.parametrize("name, source", [("ppo_clip", None), ("vaco", None), ("decoupled_recompute", "recompute"),
                                          ("a3po", "infer")])
def test_align_feeds_the_estimator_pi_T_over_beta_and_the_requested_old_logits(name, source):
    from vaco_jax.core import advantages as adv_lib
    from vaco_jax.core.update import align

    traj, policy, value, norm, n = _trajectory()
    method = make_method(name, **({"old_logit_source": source} if source else {}))
    shape = UpdateShape(num_epochs=1, num_minibatches=1, normalize_observations=False)
    aligned, _ = align(shape, method, 0.97, jnp.asarray(2), tiny_nets(), policy, value, norm, None, traj, 3)
    mu = np.asarray(policy["mu"])[np.asarray(traj.obs[..., 0], int)]
    learner = _logp(np.asarray(traj.action), mu, np.asarray(policy["log_std"]))
    np.testing.assert_allclose(aligned.learner_logp, learner, rtol=1e-5, atol=1e-5)
    v = np.asarray(value["v"])[np.asarray(traj.obs[..., 0], int)]
    args = (traj.reward, v, v, traj.termination, traj.truncation)
    if name == "vaco":  # realignment toward pi_T: log rho = log pi_T - log beta (not the reverse)
        out = adv_lib.vtrace_outputs(*args, learner - np.asarray(traj.behaviour_logp), 0.97, 0.95, 1.0, 1.0, 1.0)
        expected, targets = out.advantages, out.value_targets
    else:
        expected, targets = adv_lib.gae(*args, 0.97, 0.95)
    np.testing.assert_allclose(aligned.advantages, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(aligned.value_targets, targets, rtol=1e-5, atol=1e-5)
    old = learner if source == "recompute" else np.asarray(traj.behaviour_logp)
    np.testing.assert_allclose(aligned.old_logp, old, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(aligned.staleness, 3 - np.asarray(traj.behaviour_version))


def test_impala_loss_recomputes_vtrace_with_the_current_policy_and_critic():
    from vaco_jax.core import advantages as adv_lib
    from vaco_jax.core.update import align, every_step_loss

    traj, policy, value, norm, n = _trajectory(seed=1)
    method = make_method("impala", rho_bar_pg=0.8)
    shape = UpdateShape(num_epochs=1, num_minibatches=1, normalize_observations=False)
    aligned, _ = align(shape, method, 0.97, jnp.asarray(2), tiny_nets(), policy, value, norm, None, traj, 3)
    moved = {"mu": policy["mu"] + 0.2, "log_std": policy["log_std"]}  # the current policy differs from pi_T
    pg, vl, _ = every_step_loss(method, 0.97, tiny_nets(), moved, value, aligned, 0.0)
    mu = np.asarray(moved["mu"])[np.asarray(traj.obs[..., 0], int)]
    logp = _logp(np.asarray(traj.action), mu, np.asarray(moved["log_std"]))
    v = np.asarray(value["v"])[np.asarray(traj.obs[..., 0], int)]
    out = adv_lib.vtrace_outputs(traj.reward, v, v, traj.termination, traj.truncation,
                                 logp - np.asarray(traj.behaviour_logp), 0.97, 0.95, 1.0, 1.0, 0.8)
    np.testing.assert_allclose(pg, -np.mean(np.asarray(out.pg_advantages) * logp), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(vl, 0.5 * np.mean((v - np.asarray(out.value_targets)) ** 2), rtol=1e-5, atol=1e-6)
