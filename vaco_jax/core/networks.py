"""Actor and critic networks, the diagonal Gaussian, and the running observation normaliser.

The policy is a diagonal Gaussian with a state-independent log-std (a parameter). Actions are
sampled unsquashed and clipped to the action box only when handed to the env, so the recorded
log-probability is the exact density of the recorded (unclipped) action.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

LOG_2PI = float(np.log(2.0 * np.pi))


@jax.custom_batching.custom_vmap
def _qr_one_at_a_time(x):
    """``jnp.linalg.qr`` whose batched form is a sequential map over the batch.

    Why: jaxlib's CPU LAPACK kernels split a large enough batch of matrices into tasks on XLA's
    intra-op thread pool and then block a pool thread until those tasks finish. When every pool
    thread is inside such a kernel at once (two layers initialised in parallel on a 2-core
    machine), no thread is left to run the tasks and the program hangs at 0% CPU. Under
    ``vmap`` (a grid of runs initialised by one program) the QR of the orthogonal initialiser
    is exactly such a batch; mapping it one matrix at a time keeps each LAPACK call unbatched,
    which jaxlib runs inline. The values are those of the unbatched QR.
    """
    q, r = jnp.linalg.qr(x)
    return q, r


@_qr_one_at_a_time.def_vmap
def _qr_batched(axis_size, in_batched, x):
    del axis_size, in_batched
    return jax.lax.map(_qr_one_at_a_time, x), (True, True)


def orthogonal(scale: float = 1.0):
    """Orthogonal initialiser for a 2-D kernel, the same values as ``nn.initializers.orthogonal``
    (Mezzadri's method: QR of a Gaussian matrix, column signs fixed by diag(R)) but safe to vmap
    on CPU (see :func:`_qr_one_at_a_time`)."""

    def init(key, shape, dtype=jnp.float32):
        if len(shape) != 2:
            raise ValueError(f"orthogonal: expected a 2-D kernel shape, got {shape}")
        rows, cols = shape
        z = jax.random.normal(key, (max(rows, cols), min(rows, cols)), dtype)
        q, r = _qr_one_at_a_time(z)
        q = q * jnp.sign(jnp.diagonal(r))[None, :]
        q = q.T if rows < cols else q
        return jnp.asarray(scale, dtype) * q

    return init


class MLP(nn.Module):
    hidden: Sequence[int]
    out: int
    out_scale: float = 1.0
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x):
        act = ACTIVATIONS[self.activation]
        for size in self.hidden:
            x = act(nn.Dense(size, kernel_init=orthogonal(np.sqrt(2.0)))(x))
        return nn.Dense(self.out, kernel_init=orthogonal(self.out_scale))(x)


ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "elu": nn.elu, "gelu": nn.gelu, "silu": nn.silu}


class GaussianPolicy(nn.Module):
    """Diagonal Gaussian: MLP mean, state-independent log-std (the top-level parameter ``log_std``,
    which the trainer sets to the traced ``init_log_std`` at initialisation)."""

    hidden: Sequence[int]
    action_size: int
    init_log_std: float = -0.5
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs):
        mean = MLP(self.hidden, self.action_size, out_scale=0.01, activation=self.activation)(obs)
        log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (self.action_size,))
        return mean, jnp.broadcast_to(log_std.astype(mean.dtype), mean.shape)


class ValueNet(nn.Module):
    hidden: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs):
        return MLP(self.hidden, 1, out_scale=1.0, activation=self.activation)(obs)[..., 0]


# ----------------------------------------------------------------------------- the network factory

class NetworkSpec(NamedTuple):
    """Builders of a policy and a value network. ``policy(config, action_size)`` returns a Flax module
    mapping a (normalised) observation batch to ``(mean, log_std)``, each ``[..., action_size]``, with a
    top-level parameter ``log_std`` (set from ``init_log_std``); ``value(config)`` one mapping it to
    ``[...]`` values."""

    policy: Callable[[Any, int], nn.Module]
    value: Callable[[Any], nn.Module]


NETWORKS: dict[str, NetworkSpec] = {
    "mlp": NetworkSpec(
        policy=lambda c, a: GaussianPolicy(tuple(c.policy_hidden), a, activation=c.activation),
        value=lambda c: ValueNet(tuple(c.value_hidden), activation=c.activation)),
}


def register_network(name: str, policy: Callable[[Any, int], nn.Module] | None = None,
                     value: Callable[[Any], nn.Module] | None = None) -> None:
    """Make ``Config(network=name)`` build your own modules (either side may stay the MLP)."""
    mlp = NETWORKS["mlp"]
    NETWORKS[name] = NetworkSpec(policy or mlp.policy, value or mlp.value)


# ----------------------------------------------------------------------------- Gaussian

def gaussian_logp_per_dim(action, mean, log_std):
    z = (action - mean) * jnp.exp(-log_std)
    return -0.5 * z * z - log_std - 0.5 * LOG_2PI


def gaussian_logp(action, mean, log_std):
    """log N(action; mean, diag(exp(log_std)^2)), summed over the action dimensions."""
    return jnp.sum(gaussian_logp_per_dim(action, mean, log_std), axis=-1)


def gaussian_entropy(log_std):
    return jnp.sum(log_std + 0.5 * (1.0 + LOG_2PI), axis=-1)


def gaussian_kl(mean_p, log_std_p, mean_q, log_std_q):
    """Analytic KL(p || q) between diagonal Gaussians, summed over dimensions."""
    var_ratio = jnp.exp(2.0 * (log_std_p - log_std_q))
    mahal = ((mean_p - mean_q) * jnp.exp(-log_std_q)) ** 2
    return jnp.sum(0.5 * (var_ratio + mahal - 1.0) - (log_std_p - log_std_q), axis=-1)


# ----------------------------------------------------------------------------- normaliser

class NormalizerState(NamedTuple):
    count: jnp.ndarray  # float32 scalar (pseudo-count; starts at a small epsilon)
    mean: jnp.ndarray
    var: jnp.ndarray


def normalizer_init(size: int) -> NormalizerState:
    return NormalizerState(count=jnp.asarray(1e-4, jnp.float32), mean=jnp.zeros((size,), jnp.float32),
                           var=jnp.ones((size,), jnp.float32))


def normalizer_update(state: NormalizerState, batch: jnp.ndarray) -> NormalizerState:
    """Merge a batch (..., size) into the running mean/variance (parallel-variance formula)."""
    x = batch.reshape(-1, batch.shape[-1])
    n = jnp.asarray(x.shape[0], jnp.float32)
    b_mean = jnp.mean(x, axis=0)
    b_var = jnp.var(x, axis=0)
    total = state.count + n
    delta = b_mean - state.mean
    mean = state.mean + delta * n / total
    m2 = state.var * state.count + b_var * n + delta**2 * state.count * n / total
    return NormalizerState(count=total, mean=mean, var=m2 / total)


def normalize(state: NormalizerState, obs: jnp.ndarray, enabled: bool = True, clip: float = 10.0):
    if not enabled:
        return obs
    return jnp.clip((obs - state.mean) * jax.lax.rsqrt(state.var + 1e-8), -clip, clip)


# ----------------------------------------------------------------------------- reward scaling

class RewardScalerState(NamedTuple):
    """Running variance of each env's discounted return; rewards are divided by its std (not shifted)."""

    returns: jnp.ndarray  # [num_envs] discounted return accumulated so far in each env's episode
    stats: NormalizerState  # of the discounted returns (size 1)


def reward_scaler_init(num_envs: int) -> RewardScalerState:
    return RewardScalerState(returns=jnp.zeros((num_envs,), jnp.float32), stats=normalizer_init(1))


def reward_scaler_update(state: RewardScalerState, rewards, dones, gamma) -> tuple[RewardScalerState, jnp.ndarray]:
    """Scale a time-major [U, N] reward block: update the return statistics with the block's discounted
    returns (reset at episode ends), then divide every reward by the return std."""
    def step(ret, xs):
        r, done = xs
        ret = ret * gamma + r
        return ret * (1.0 - done), ret

    returns, seen = jax.lax.scan(step, state.returns, (rewards, dones))
    stats = normalizer_update(state.stats, seen.reshape(-1, 1))
    scaled = rewards * jax.lax.rsqrt(stats.var[0] + 1e-8)
    return RewardScalerState(returns=returns, stats=stats), scaled
