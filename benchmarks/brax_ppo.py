"""Brax's own PPO trainer timed beside ours (``benchmarks.throughput``'s measurements (a') and (c)):
the env under Brax's training wrappers, and ``brax.training.agents.ppo.train`` timed epoch by epoch
through its ``progress_fn``, with a stand-in for a jax function Brax 0.14.2 still calls."""

from __future__ import annotations

import functools
import gc
import importlib.metadata
import math
import time
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.timing import CompileLog, Program, prepare, raw_env_program
from vaco_jax.core.config import Config


def prepare_raw_brax(args, log: CompileLog) -> Program:
    """(a'): the env exactly as Brax's trainer steps it, with Brax's own wrappers and auto-reset.

    ``brax.envs.training.wrap`` = VmapWrapper + EpisodeWrapper(episode_length) + AutoResetWrapper.
    (Brax's bare ``env.step`` without any auto-reset is no throughput reference: finished episodes
    keep simulating, e.g. a fallen double pendulum, whose constraint solve costs far more per step.)
    """
    from brax import envs as brax_envs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = brax_envs.training.wrap(brax_envs.get_environment(args.env, backend=args.backend),
                                      episode_length=args.episode_length)
    key = jax.random.PRNGKey(args.seed)
    t0 = time.perf_counter()
    state = jax.block_until_ready(jax.jit(env.reset)(jax.random.split(key, args.num_envs)))
    reset_seconds = time.perf_counter() - t0

    def step(s, a):
        nxt = env.step(s, a)
        return nxt, nxt.reward

    program = raw_env_program(step, args.num_envs, env.action_size, args.unroll_length, args.phases)
    return prepare("raw_brax_env", program, (state, jax.random.fold_in(key, 1)), lambda out, _: out[:2],
                   steps_per_call=args.phases * args.num_envs * args.unroll_length, warmup=args.warmup,
                   log=log, reset_seconds=reset_seconds)


BRAX_METHOD = (
    "Brax's ppo.train is a closed host loop: num_evals - 1 epochs, each ONE pmapped call of "
    "`phases` training steps; a training step = batch_size x num_minibatches = num_envs "
    "trajectories of unroll_length steps (num_envs x unroll_length env steps, our phase), then "
    "num_updates_per_batch = num_epochs passes over num_minibatches minibatches (our E x M). With "
    "run_evals=False, progress_fn is called right after every epoch. The first epoch compiles "
    "(untimed, with any further warm-up epochs). Steps/s of a timed epoch = (env_steps at its "
    "callback - env_steps at the previous callback) / (wall time from the return of the previous "
    "callback to the entry of this one), so it holds the epoch and Brax's own per-epoch host work "
    "(weak-type stripping, metric means, parameter unreplication) and nothing of ours: the timed "
    "calls of (a), (a') and (b) run inside the callback, between the two timestamps. A round is "
    "k = brax_epochs_per_round consecutive timed epochs, its steps/s their env steps over their "
    "seconds together; median over the rounds. Brax's own 'training/sps' (the epoch call alone) is kept as a cross-check. "
    "Compile seconds = wall time from the train() call to the first callback minus one steady epoch.")

SHIM_NOTE = (
    "jax.device_put_replicated is gone in jax {jax} (removed in 0.10: `AttributeError: {err}`); "
    "Brax {brax}'s ppo.train calls it once, to replicate the initial TrainingState over the local "
    "devices before its pmapped training epoch. The benchmark sets jax.device_put_replicated to a "
    "stand-in for the duration of the Brax run only: every leaf stacked len(devices) times along a "
    "new leading axis and placed with NamedSharding(Mesh(devices, ('{axis}',)), P('{axis}')), one "
    "copy per device - what the removed function returned, except that the mesh axis carries the "
    "name of Brax's pmap axis ('{axis}'), which is the sharding jax 0.10's shard_map-based pmap "
    "gives its outputs. (With any other axis name, e.g. the removed function's own, the second "
    "epoch retraces and recompiles the whole training epoch, because its inputs then come from "
    "the pmap with a different sharding.) Nothing else in ppo.train needed a change with jax "
    "{jax}.")


def _brax_shim(axis_name: str, brax_version: str) -> tuple[bool, str, Callable[[], None]]:
    """Install a stand-in for ``jax.device_put_replicated`` if this jax lacks it.

    Returns (installed, explanation, undo).
    """
    try:
        jax.device_put_replicated  # noqa: B018  (jax 0.10 raises AttributeError via __getattr__)
        return False, "jax.device_put_replicated exists in this jax; no shim needed", lambda: None
    except AttributeError as err:
        message = str(err)

    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    def device_put_replicated(x: Any, devices) -> Any:
        devices = list(devices)
        sharding = NamedSharding(Mesh(np.array(devices), (axis_name,)), PartitionSpec(axis_name))

        def put(leaf):
            leaf = jnp.asarray(leaf)
            return jax.device_put(jnp.broadcast_to(leaf[None], (len(devices),) + leaf.shape), sharding)

        return jax.tree.map(put, x)

    jax.device_put_replicated = device_put_replicated

    def undo():
        try:
            del jax.device_put_replicated
        except AttributeError:
            pass

    return True, SHIM_NOTE.format(jax=jax.__version__, brax=brax_version, err=message, axis=axis_name), undo


def bench_brax(args, log: CompileLog, between_epochs: Callable[[int], None],
               after_epoch: Callable[[int], None] | None = None) -> dict:
    """Time Brax's PPO trainer (method: ``BRAX_METHOD``); ``between_epochs(j)`` runs right before timed
    epoch ``j`` and ``after_epoch(j)`` (if given) right after it, so a measurement taken in both
    brackets the epoch in time. There are ``repeats`` x ``brax_epochs_per_round`` timed epochs; round r
    is epochs r k ... r k + k - 1, its rate their env steps over their seconds together."""
    from brax import envs as brax_envs
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo_train
    from flax import linen

    if args.num_envs % args.num_minibatches:
        raise ValueError(f"Brax needs num_minibatches={args.num_minibatches} to divide "
                         f"num_envs={args.num_envs} (batch_size = num_envs // num_minibatches)")
    batch_size = args.num_envs // args.num_minibatches
    steps_per_epoch = args.phases * batch_size * args.num_minibatches * args.unroll_length
    untimed = max(args.warmup, 1)  # the first epoch compiles
    timed = args.repeats * args.brax_epochs_per_round
    num_evals = untimed + timed + 1  # num_evals - 1 epochs, one callback after each
    num_timesteps = (num_evals - 1) * steps_per_epoch  # -> exactly `phases` training steps per epoch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        environment = brax_envs.get_environment(args.env, backend=args.backend)
    # Same hidden sizes as ours, and our activation (tanh), distribution (Gaussian with a
    # state-independent log-std, no tanh squashing) and policy initialisation (orthogonal, mean layer
    # scaled 0.01, std exp(init_log_std)): both trainers do the same network arithmetic and start by
    # sending the same action distribution to the simulator, whose cost per step depends on the state.
    init_std = math.exp(Config().init_log_std)  # what our trainer (Config's default) starts from
    network_factory = functools.partial(
        ppo_networks.make_ppo_networks, policy_hidden_layer_sizes=tuple(args.policy_hidden),
        value_hidden_layer_sizes=tuple(args.value_hidden), activation=linen.tanh,
        distribution_type="normal", noise_std_type="log", init_noise_std=init_std,
        policy_network_kernel_init_fn=jax.nn.initializers.orthogonal,
        policy_network_kernel_init_kwargs={"scale": math.sqrt(2.0)},
        mean_kernel_init_fn=jax.nn.initializers.orthogonal, mean_kernel_init_kwargs={"scale": 0.01})
    train_kwargs = dict(
        num_timesteps=num_timesteps, episode_length=args.episode_length, num_envs=args.num_envs,
        unroll_length=args.unroll_length, batch_size=batch_size, num_minibatches=args.num_minibatches,
        num_updates_per_batch=args.num_epochs, num_evals=num_evals, run_evals=False,
        normalize_observations=True, learning_rate=args.learning_rate, entropy_cost=0.0, discounting=0.99,
        gae_lambda=0.95, clipping_epsilon=0.2, max_grad_norm=0.5, normalize_advantage=True,
        seed=args.seed, max_devices_per_host=args.brax_devices)

    stamps: list[tuple[float, float, int, float]] = []  # (entry, exit, env_steps, Brax's sps)

    def progress_fn(step, metrics):
        entry = time.perf_counter()
        if not args.gc_during_timing:
            gc.enable()  # off during the epoch that just ended, on between epochs
        index = len(stamps)  # this callback follows epoch index + 1
        if after_epoch is not None and untimed <= index < untimed + timed:
            after_epoch(index - untimed)  # right after timed epoch j
        if untimed - 1 <= index < untimed - 1 + timed:
            between_epochs(index - (untimed - 1))  # right before timed epoch j
        if not args.gc_during_timing:
            gc.collect()  # what the epoch's garbage would have cost it, outside its interval (and ours)
            gc.disable()
        stamps.append((entry, time.perf_counter(), int(step), float(metrics.get("training/sps", math.nan))))

    shim_used, shim_note, undo = _brax_shim(getattr(ppo_train, "_PMAP_AXIS_NAME", "i"),
                                            importlib.metadata.version("brax"))
    t_start = time.perf_counter()
    try:
        ppo_train.train(environment=environment, network_factory=network_factory,
                        progress_fn=progress_fn, **train_kwargs)
    finally:
        undo()
        gc.enable()
    t_end = time.perf_counter()

    if len(stamps) != num_evals - 1:
        raise RuntimeError(f"expected {num_evals - 1} progress callbacks from Brax, got {len(stamps)}")
    per_epoch, seconds, own_sps, compiles = [], [], [], 0  # per timed epoch
    for (_, left, s0, _), (entry, _, s1, sps) in zip(stamps[untimed - 1:-1], stamps[untimed:]):
        if s1 - s0 != steps_per_epoch:
            raise RuntimeError(f"a Brax epoch ran {s1 - s0} env steps, expected {steps_per_epoch}")
        per_epoch.append((s1 - s0) / (entry - left))
        seconds.append(entry - left)
        own_sps.append(sps)
        compiles += log.between(left, entry)[0]
    k = args.brax_epochs_per_round  # round r: epochs r k ... r k + k - 1, env steps over seconds together
    round_seconds = [sum(seconds[r * k:(r + 1) * k]) for r in range(args.repeats)]
    per_round = [k * steps_per_epoch / sec for sec in round_seconds]
    return {
        "steps_per_second": float(np.median(per_round)),
        "steps_per_second_each": per_round,
        "steps_per_second_each_epoch": per_epoch,
        "epochs_per_round": k,
        "seconds_each": round_seconds,
        "seconds_each_epoch": seconds,
        "env_steps_per_call": k * steps_per_epoch,
        "compile_seconds": (stamps[0][0] - t_start) - float(np.median(seconds)),
        "xla_compile_seconds": log.between(t_start, stamps[0][0])[1],
        "compiles_during_timing": compiles,
        "brax_reported_sps_each": own_sps,
        "brax_reported_sps": float(np.median(own_sps)),
        "total_seconds": t_end - t_start,
        "train_kwargs": train_kwargs,
        "network_factory": (f"make_ppo_networks(policy_hidden_layer_sizes={tuple(args.policy_hidden)}, "
                            f"value_hidden_layer_sizes={tuple(args.value_hidden)}, activation=linen.tanh, "
                            f"distribution_type='normal', noise_std_type='log', init_noise_std={init_std:.4f}, "
                            "policy_network_kernel_init_fn=orthogonal, policy_network_kernel_init_kwargs="
                            "{'scale': sqrt(2)}, mean_kernel_init_fn=orthogonal, "
                            "mean_kernel_init_kwargs={'scale': 0.01})"),
        "shim_used": shim_used,
        "shim": shim_note,
        "method": BRAX_METHOD,
    }
