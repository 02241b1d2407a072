"""``make_train(config)``: a pure, vmappable trainer.

Shape of one phase (docs/methods.md, "The update step")::

    rollout with lagged actors -> align (once) -> update (E x M steps) -> normaliser -> publish

``Trainer.run_chunk(state, traced)`` runs ``phases_per_chunk`` phases (a ``lax.scan``) and then
evaluates the learner's own policy; ``Trainer.train(key, traced)`` scans over all chunks, so
``jax.vmap(trainer.train)`` over seeds x lag depths is one compiled program. The host driver
(``vaco_jax.driver.program``, run by ``runner.run_group``; a single run is a one-cell group) calls two
programs per chunk:
``train_chunk`` (the phases) and the evaluation, compiled once for every trainer that evaluates alike
(``evaluation_signature``: the methods of one task share it; ``evaluation_program`` here, and over a
group's grid ``driver.devices.shared_grid_program``), and shows progress between chunks (no host
callbacks inside).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from vaco_jax.core import lag as lag_lib
from vaco_jax.core import proximal as prox
from vaco_jax.core.config import Config, ConfigError, TracedParams
from vaco_jax.envs import EnvState, make_env, reset_batch
from vaco_jax.core.networks import (NETWORKS, NormalizerState, RewardScalerState, normalize,
                               normalizer_init, normalizer_update, reward_scaler_init, reward_scaler_update)
from vaco_jax.core.rollout import rollout
from vaco_jax.core.update import LearnerState, Networks, UpdateShape, align, make_optimizer, update_phase

# fold_in streams of the run key (the lag stream lives in lag.py)
INIT_STREAM, ENV_STREAM, PHASE_STREAM, EVAL_STREAM = 11, 12, 13, 14


class TrainState(NamedTuple):
    """The whole training carry: everything a checkpoint must hold."""

    learner: LearnerState
    normalizer: NormalizerState  # the learner's statistics
    reward_scaler: RewardScalerState
    buffer: lag_lib.PolicyBuffer
    env_state: EnvState
    phase: jnp.ndarray  # int32 T
    run_key: jax.Array


class PhaseMetrics(NamedTuple):
    env_steps: jnp.ndarray
    episode_return_sum: jnp.ndarray  # training episodes that ended in this phase
    episode_count: jnp.ndarray
    diagnostics: dict
    staleness_counts: jnp.ndarray  # int32 [buffer_capacity]: the phase's samples by realised age T - v


class ChunkMetrics(NamedTuple):
    phases: PhaseMetrics  # each leaf [phases_per_chunk, ...]
    eval_return: jnp.ndarray  # learner pi_T, stochastic, mean over eval episodes (nan if disabled)
    diverged: jnp.ndarray  # bool: any non-finite parameter
    staleness_counts: jnp.ndarray  # int32 [buffer_capacity]: the chunk's samples by realised age


def staleness_counts(phase, behaviour_version: jnp.ndarray, capacity: int) -> jnp.ndarray:
    """Samples by realised age ``d = T - v`` (0..capacity-1): a fixed-shape histogram of one phase.

    Ages are clipped to the buffer (they always lie in it: an actor reads a slot of the buffer, or
    the learner itself when synchronous, age 0)."""
    ages = jnp.clip(jnp.asarray(phase, jnp.int32) - behaviour_version.reshape(-1), 0, capacity - 1)
    return jnp.zeros((capacity,), jnp.int32).at[ages].add(1)


def _unstable_steps(env_state):
    """Steps the physics flagged unstable so far, summed over envs (None: the engine keeps no count)."""
    count = getattr(env_state.core, "unstable_steps", None)
    return None if count is None else jnp.sum(count)


def _all_finite(tree) -> jnp.ndarray:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
    return jnp.all(jnp.stack(leaves))


@dataclasses.dataclass(frozen=True)
class Trainer:
    config: Config
    env: Any
    nets: Networks
    policy_net: Any
    value_net: Any
    learner_diagnostics: bool = True  # UpdateShape.learner_diagnostics (False: each method pays for pi_T
    # only when it reads it; benchmarks of a method's own cost)
    env_from_config: bool = False  # make_train built the env from the config (the evaluation can be shared)
    progress: bool = False  # ``train`` prints a line after each chunk (ChunkLines): a whole run is one program

    # ------------------------------------------------------------------ pure pieces
    def snapshot(self, policy_params, normalizer):
        return {"policy": policy_params, "normalizer": normalizer}

    @property
    def shape(self) -> UpdateShape:
        cfg = self.config
        return UpdateShape(num_epochs=cfg.num_epochs, num_minibatches=cfg.num_minibatches,
                           minibatch_shuffle=cfg.minibatch_shuffle,
                           normalize_advantages=cfg.normalize_advantages,
                           normalize_observations=cfg.normalize_observations,
                           measure_mismatch=cfg.actor_dtype != "float32",
                           synchronous=lag_lib.LAG_MODELS[cfg.lag_model].synchronous,
                           learner_diagnostics=self.learner_diagnostics,
                           joint_grad_clip=cfg.grad_clip == "joint")

    def init(self, key: jax.Array, traced: TracedParams) -> TrainState:
        cfg = self.config
        k_pol, k_val = jax.random.split(jax.random.fold_in(key, INIT_STREAM))
        obs0 = jnp.zeros((1, self.env.observation_size), jnp.float32)
        policy_params = self.policy_net.init(k_pol, obs0)
        inner = dict(policy_params["params"])
        if "log_std" not in inner:
            raise ConfigError(f"network={cfg.network!r}: the policy needs a top-level parameter 'log_std' "
                              "(init_log_std sets it); see networks.NetworkSpec")
        inner["log_std"] = jnp.full_like(inner["log_std"], traced.init_log_std)  # a traced knob
        policy_params = {**policy_params, "params": inner}
        value_params = self.value_net.init(k_val, obs0)
        opt = make_optimizer(traced.max_grad_norm, traced.adam_eps)
        normalizer = normalizer_init(self.env.observation_size)
        learner = LearnerState(policy_params, value_params, opt.init(policy_params), opt.init(value_params),
                               prox.ewma_init(policy_params))
        buffer = lag_lib.buffer_init(self.snapshot(policy_params, normalizer), cfg.buffer_capacity)
        env_state = reset_batch(self.env, jax.random.fold_in(key, ENV_STREAM), cfg.num_envs)
        return TrainState(learner, normalizer, reward_scaler_init(cfg.num_envs), buffer, env_state,
                          jnp.zeros((), jnp.int32), key)

    def collect(self, state: TrainState, traced: TracedParams):
        """The actors' part of a phase: every actor's snapshot drawn by the lag model, the envs
        unrolled. Returns the new env state, the trajectory and the phase's update key."""
        cfg = self.config
        T = state.phase
        phase_key = jax.random.fold_in(jax.random.fold_in(state.run_key, PHASE_STREAM), T)
        action_key, update_key = jax.random.split(phase_key)
        lag = traced.lag
        start_ages = lag.start_ages(lag_lib.lag_key(state.run_key, T), cfg.num_actors, T)
        env_state, traj = rollout(
            env=self.env, policy_apply=self.nets.policy_apply, buffer=state.buffer,
            learner_snapshot=self.snapshot(state.learner.policy_params, state.normalizer),
            env_state=state.env_state, start_ages=start_ages, action_key=action_key,
            unroll_length=cfg.unroll_length, lag=lag, envs_per_actor=cfg.envs_per_actor,
            actor_dtype=cfg.actor_dtype, normalize_observations=cfg.normalize_observations, phase=T,
            mismatch_strength=traced.mismatch_strength)
        return env_state, traj, update_key

    def phase(self, state: TrainState, traced: TracedParams) -> tuple[TrainState, PhaseMetrics]:
        cfg = self.config
        T = state.phase
        learner = state.learner
        env_state, traj, update_key = self.collect(state, traced)
        before, after = _unstable_steps(state.env_state), _unstable_steps(env_state)
        unstable = None if after is None else after - before
        reward_scaler = state.reward_scaler
        if cfg.normalize_rewards:  # learner-side only: actors never see rewards
            dones = jnp.maximum(traj.termination, traj.truncation)
            reward_scaler, scaled = reward_scaler_update(reward_scaler, traj.reward, dones, traced.gamma)
            traj = traj._replace(reward=scaled)
        learner, diag = self.learn(learner, state.normalizer, state.buffer, traj, T, update_key, traced)
        normalizer = state.normalizer
        if cfg.normalize_observations:  # frozen during the phase, updated after it (docs/lag.md)
            normalizer = normalizer_update(normalizer, traj.obs)
        buffer = lag_lib.buffer_publish(state.buffer, self.snapshot(learner.policy_params, normalizer), T + 1)
        ended = (traj.episode_length > 0).astype(jnp.float32)
        if unstable is not None:  # MuJoCo's own alarm (docs/envs.md): steps it could not integrate or act on
            diag = {**diag, "unstable_steps": unstable.astype(jnp.float32)}
        metrics = PhaseMetrics(
            env_steps=((T + 1) * cfg.batch_size).astype(jnp.float32),
            episode_return_sum=jnp.sum(traj.episode_return * ended),
            episode_count=jnp.sum(ended),
            diagnostics=diag,
            staleness_counts=staleness_counts(T, traj.behaviour_version, cfg.buffer_capacity),
        )
        return TrainState(learner, normalizer, reward_scaler, buffer, env_state, T + 1, state.run_key), metrics

    def learn(self, learner: LearnerState, normalizer, buffer, traj, phase, key: jax.Array,
              traced: TracedParams) -> tuple[LearnerState, dict]:
        """The learner's part of a phase: align once, then E x M gradient steps (docs/methods.md)."""
        cfg = self.config
        method, lag_depth = traced.method, traced.lag_depth
        aligned, diag = align(self.shape, method, traced.gamma, lag_depth, self.nets, learner.policy_params,
                              learner.value_params, normalizer, buffer, traj, phase)
        lr = traced.learning_rate
        if cfg.anneal_lr:
            lr = lr * annealed_fraction(phase, cfg.phases_run)
        opt = make_optimizer(traced.max_grad_norm, traced.adam_eps)
        learner, upd = update_phase(self.shape, method, self.nets, opt, learner, aligned, key, lr,
                                    lag_depth=lag_depth, gamma=traced.gamma, value_coef=traced.value_coef,
                                    entropy_coef=traced.entropy_coef,
                                    value_clip_epsilon=traced.value_clip_epsilon,
                                    max_grad_norm=traced.max_grad_norm)
        return learner, {**diag, **upd}

    def evaluate(self, key: jax.Array, policy_params, normalizer, num_episodes: int | None = None,
                 uniform_random: bool = False) -> jnp.ndarray:
        """Mean return of the learner's stochastic policy over ``eval_episodes`` fresh episodes.

        With ``uniform_random`` the actions are uniform on the action box instead: the ``random``
        reference score of docs/evaluation.md's normalisation.
        """
        cfg = self.config
        env = self.env
        num_episodes = num_episodes or cfg.eval_episodes
        state = reset_batch(env, key, num_episodes)

        def step(carry, t):
            core, alive, total = carry
            noise_key = jax.random.fold_in(key, t)
            if uniform_random:
                action = jax.random.uniform(noise_key, (num_episodes, env.action_size), minval=env.action_low,
                                            maxval=env.action_high)
            else:
                x = normalize(normalizer, core.obs, cfg.normalize_observations)
                mean, log_std = self.nets.policy_apply(policy_params, x)
                noise = jax.random.normal(noise_key, mean.shape)
                action = jnp.clip(mean + jnp.exp(log_std) * noise, env.action_low, env.action_high)
            nxt = jax.vmap(env.raw.step)(core, action)
            total = total + jnp.where(alive > 0, nxt.reward, 0.0)
            # A finished episode is frozen at its last live state: stepping on from a fallen state
            # lets the physics blow up (NaN), which is slow and poisons sums.
            frozen = jax.tree.map(lambda a, b: jnp.where(
                jnp.reshape(alive > 0, (-1,) + (1,) * (jnp.ndim(a) - 1)), a, b), nxt, core)
            alive = alive * (1.0 - (nxt.done > 0.5))
            return (frozen, alive, total), None

        # alive and total are computed from the reset observations (always 1 and 0): under a grid's vmap
        # they are then batched from the first step, as the loop makes them, and the scan is traced
        # once; as constants the batching rule traced the whole MJX step a second time to find that out.
        ones = jnp.where(jnp.isnan(state.core.obs[:, 0]), 1.0, 1.0).astype(jnp.float32)
        carry = (state.core, ones, 0.0 * ones)
        (_, _, total), _ = jax.lax.scan(step, carry, jnp.arange(cfg.episode_length))
        return jnp.mean(total)

    def random_score(self, key: jax.Array, num_episodes: int = 16) -> jnp.ndarray:
        """Mean return of a uniform-random policy (docs/evaluation.md normalisation)."""
        return self.evaluate(key, None, None, num_episodes=num_episodes, uniform_random=True)

    def train_chunk(self, state: TrainState, traced: TracedParams) -> tuple[TrainState, ChunkMetrics]:
        """``phases_per_chunk`` phases; the chunk's evaluation is left out (``eval_return`` NaN): the
        host drivers run it as a program of its own, :func:`evaluation_program`."""
        cfg = self.config
        state, phases = jax.lax.scan(lambda s, _: self.phase(s, traced), state, None,
                                     length=cfg.phases_per_chunk)
        diverged = ~_all_finite((state.learner.policy_params, state.learner.value_params))
        return state, ChunkMetrics(phases, jnp.asarray(jnp.nan, jnp.float32), diverged,
                                   jnp.sum(phases.staleness_counts, axis=0))

    @staticmethod
    def evaluation_inputs(state: TrainState) -> tuple:
        """What the evaluation closing a chunk reads from the state (the same shapes for every method)."""
        return state.run_key, state.phase, state.learner.policy_params, state.normalizer

    def chunk_evaluation(self, run_key: jax.Array, phase, policy_params, normalizer) -> jnp.ndarray:
        """The evaluation that closes a chunk: ``eval_episodes`` episodes of the learner's policy, from
        the run key's evaluation stream at the phase reached (NaN with ``eval_episodes = 0``)."""
        if self.config.eval_episodes <= 0:
            return jnp.asarray(jnp.nan, jnp.float32)
        eval_key = jax.random.fold_in(jax.random.fold_in(run_key, EVAL_STREAM), phase)
        return self.evaluate(eval_key, policy_params, normalizer)

    def evaluation_signature(self) -> tuple | None:
        """Everything the chunk's evaluation depends on besides its inputs' shapes, or None when that
        cannot be told (an env object handed to ``make_train``). Two trainers with the same signature
        (e.g. two methods on one task) compute the same evaluation, so they share one compiled
        program (:func:`evaluation_program`): it does not read the method, the lag or any traced knob."""
        if not self.env_from_config:
            return None
        cfg = self.config
        # id(env.raw): the env object itself (re-registering a name builds a new one); a cached program
        # keeps its trainer, so the id is not reused while the program is kept
        return (cfg.env, cfg.physics_backend, cfg.episode_length, id(self.env.raw), cfg.eval_episodes,
                cfg.normalize_observations, type(self.policy_net), repr(self.policy_net))

    def run_chunk(self, state: TrainState, traced: TracedParams) -> tuple[TrainState, ChunkMetrics]:
        """:meth:`train_chunk`, then the chunk's evaluation, as one function (``train`` scans it)."""
        state, metrics = self.train_chunk(state, traced)
        return state, metrics._replace(eval_return=self.chunk_evaluation(*self.evaluation_inputs(state)))

    def train(self, key: jax.Array, traced: TracedParams) -> tuple[TrainState, ChunkMetrics]:
        """The whole run as one pure function (vmap it over seeds x traced values). With ``progress`` a
        line is printed when the compiled program starts and after each chunk (``ChunkLines``); the
        numbers are the same."""
        state = self.init(key, traced)
        if not self.progress:
            return jax.lax.scan(lambda s, _: self.run_chunk(s, traced), state, None,
                                length=self.config.num_evals)
        lines = ChunkLines(self.config)
        # the chunk index is the same in every cell of a vmapped grid; the phase ties each line to its chunk
        jax.debug.callback(lines, -1, state.phase)

        def chunk(s, i):
            s, metrics = self.run_chunk(s, traced)
            jax.debug.callback(lines, i, s.phase)
            return s, metrics

        return jax.lax.scan(chunk, state, jnp.arange(self.config.num_evals))


class ChunkLines:
    """``Trainer.train``'s progress lines on the host: one when the compiled program starts (chunk -1),
    one after each chunk with the env steps each run has taken and the seconds since the start. Under
    ``vmap`` it is called once per cell; a chunk is printed once."""

    def __init__(self, config: Config):
        self.config, self.last, self.start = config, None, 0.0

    def __call__(self, chunk, phase) -> None:
        import time

        chunk = int(chunk)
        if chunk == self.last:  # another cell of the same grid
            return
        self.last = chunk
        cfg = self.config
        if chunk < 0:
            self.start = time.perf_counter()
            print(f"training: {cfg.num_evals} chunks of {cfg.env_steps_per_chunk:,} env steps per run "
                  f"({cfg.phases_run * cfg.batch_size:,} in all), a line after each", flush=True)
            return
        print(f"training: chunk {chunk + 1}/{cfg.num_evals}, {(chunk + 1) * cfg.env_steps_per_chunk:,} env steps "
              f"per run, {time.perf_counter() - self.start:.0f} s", flush=True)


def annealed_fraction(phase, phases_run: int):
    """Linear learning-rate decay: 1 at phase 0, 1/N at the last phase that runs, 0 just after it."""
    return 1.0 - jnp.asarray(phase, jnp.float32) / phases_run


def make_train(config: Config, env=None, learner_diagnostics: bool = True, progress: bool = False) -> Trainer:
    """The trainer of ``config`` (``env``: an env object in place of the config's task). ``progress``:
    ``train`` prints a line when its program starts and after each chunk (the drivers, which run a chunk at
    a time, show their own progress)."""
    env_from_config = env is None
    env = env if env is not None else make_env(config.env, config.backend, config.episode_length)
    spec = NETWORKS[config.network]
    policy_net = spec.policy(config, env.action_size)
    value_net = spec.value(config)
    nets = Networks(policy_apply=policy_net.apply, value_apply=value_net.apply)
    return Trainer(config=config, env=env, nets=nets, policy_net=policy_net, value_net=value_net,
                   learner_diagnostics=learner_diagnostics, env_from_config=env_from_config, progress=bool(progress))


# Compiled evaluations, shared: key (Trainer.evaluation_signature(), layout) -> (jitted program, the
# trainer it was built from, kept alive with it). Oldest dropped beyond EVALUATIONS_KEPT.
_EVALUATIONS: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
EVALUATIONS_KEPT = 16


def evaluation_program(trainer: Trainer, over_grid: Callable | None = None, layout: tuple = ()) -> Callable:
    """``jit`` of ``trainer.chunk_evaluation``, or of ``over_grid``: that evaluation over a grid of cells
    (e.g. a grid's ``shard_map`` of ``vmap``s, laid out as ``layout`` describes), shared by every trainer
    with the same ``evaluation_signature``: the groups of a study that differ only in method or lag
    compile it once. (Inside the training program the evaluation's MJX rollout doubled its compile time:
    ~20 s of tracing and ~21 s of XLA per group for inverted_double_pendulum on a 2-core CPU,
    docs/scale.md.) Call it as ``program(*Trainer.evaluation_inputs(state))``."""
    fn = trainer.chunk_evaluation if over_grid is None else over_grid
    signature = trainer.evaluation_signature()
    if signature is None:
        return jax.jit(fn)
    key = (signature, layout)
    if key in _EVALUATIONS:
        _EVALUATIONS.move_to_end(key)
    else:
        _EVALUATIONS[key] = (jax.jit(fn), trainer)
        while len(_EVALUATIONS) > EVALUATIONS_KEPT:
            _EVALUATIONS.popitem(last=False)
    return _EVALUATIONS[key][0]


def evaluated(metrics: ChunkMetrics, evaluation: Callable, state: TrainState, config: Config) -> ChunkMetrics:
    """``metrics`` of a ``train_chunk`` with the chunk's evaluation filled in (when ``config`` evaluates)."""
    if config.eval_episodes <= 0:
        return metrics
    return metrics._replace(eval_return=evaluation(*Trainer.evaluation_inputs(state)))
