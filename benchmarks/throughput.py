"""Env steps per second: raw environment vs our trainer (B = 1) vs Brax's own PPO trainer.

Three measurements on one task, one batch shape (``num_envs`` x ``unroll_length`` env steps per
phase, ``num_epochs`` x ``num_minibatches`` gradient steps per phase) and one network size, in one
process, reported as steps/s and as ratios:

(a)  the raw environment: our ``make_env`` step (with its truncation-aware auto-reset), vmapped over
     ``num_envs`` envs and stepped with uniform random actions inside a jitted ``lax.scan`` of
     ``unroll_length`` steps (``phases`` such scans per call, the same env steps per call as (b));
(a') the same with Brax's bare ``env.step`` (no auto-reset, no episode bookkeeping): a reference;
(b)  our trainer: ``jax.jit(trainer.run_chunk)`` with ``phases_per_chunk = phases``, method
     ``ppo_clip``, lag depth ``B = 1``, no evaluation;
(c)  Brax's trainer ``brax.training.agents.ppo.train.train`` on the same task with the same env steps
     and gradient steps per update and the same hidden sizes (see ``bench_brax``).

(a) and (b) are compiled ahead of time (``jit(...).lower(...).compile()``, timed: "compile s"), then
run ``warmup`` untimed calls and ``repeats`` timed calls (each ends with ``block_until_ready``); the
reported steps/s is the median over the timed calls. (c) is a closed loop that compiles on its first
epoch, so its steady state is read from the wall-clock times of its ``progress_fn`` callbacks (one per
epoch of ``phases`` training steps; see ``bench_brax``). A ``jax.monitoring`` listener counts XLA
compilations inside every timed interval, so a timing that includes a compile is flagged.

Usage (``python -m benchmarks.throughput --help`` lists every flag)::

    python -m benchmarks.throughput                                   # inverted_double_pendulum, 256 envs
    python -m benchmarks.throughput --env halfcheetah --phases 2 --repeats 2

Brax 0.14.2's trainer calls ``jax.device_put_replicated``, which jax 0.10 removed; this benchmark
(and nothing else in the project) supplies a stand-in while Brax's trainer runs (``_brax_shim``).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib.metadata
import json
import math
import os
import platform
import shlex
import sys
import time
import traceback
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.config import Config, make_traced
from vaco_jax.envs import make_env
from vaco_jax.train import make_train


@dataclasses.dataclass
class Args:
    """Env steps/s of the raw env, our trainer (B = 1) and Brax's PPO trainer on one configuration."""

    env: str = "inverted_double_pendulum"  # task (any of vaco_jax.config.TASKS, e.g. halfcheetah)
    backend: str = "mjx"  # physics pipeline of the Brax env (all three measurements use it)
    num_envs: int = 256  # parallel envs
    unroll_length: int = 32  # env steps per env per phase (one update)
    num_minibatches: int = 4  # minibatches per epoch (Brax: num_minibatches, batch_size = num_envs // this)
    num_epochs: int = 4  # epochs per phase (Brax: num_updates_per_batch)
    policy_hidden: tuple[int, ...] = (64, 64)  # policy MLP hidden sizes (both trainers)
    value_hidden: tuple[int, ...] = (64, 64)  # value MLP hidden sizes (both trainers)
    episode_length: int = 1000  # truncation length (both trainers)
    lag_depth: int = 1  # our trainer's policy-lag depth B
    phases: int = 10  # phases (updates) per timed call: env steps per call = phases * num_envs * unroll_length
    repeats: int = 3  # timed calls per measurement (Brax: timed epochs); the median is reported
    warmup: int = 1  # untimed calls after compilation (Brax: untimed epochs, at least its compiling one)
    seed: int = 0
    skip_brax: bool = False  # skip (c), Brax's PPO trainer
    raw_brax: bool = True  # also time (a'): Brax's bare env.step without our auto-reset wrapper
    out: str | None = None  # JSON output; default runs/benchmarks/throughput_<env>.json


# ----------------------------------------------------------------------------- timing helpers

class CompileLog:
    """Records every XLA backend compilation (end time, seconds) through ``jax.monitoring``."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self):
        self.events: list[tuple[float, float]] = []
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event: str, duration: float, **kwargs) -> None:
        if event == self.EVENT:
            self.events.append((time.perf_counter(), float(duration)))

    def between(self, t0: float, t1: float) -> tuple[int, float]:
        """(count, seconds) of compilations that ended inside [t0, t1]."""
        hits = [d for t, d in self.events if t0 <= t <= t1]
        return len(hits), float(sum(hits))


def time_program(fn: Callable, args: tuple, next_args: Callable, *, steps_per_call: int, warmup: int,
                 repeats: int, log: CompileLog) -> dict:
    """Compile ``fn`` ahead of time, run ``warmup`` untimed and ``repeats`` timed calls, chaining state."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    t1 = time.perf_counter()
    _, xla_compile_s = log.between(t0, t1)
    for _ in range(warmup):
        out = jax.block_until_ready(compiled(*args))
        args = next_args(out, args)
    seconds, compiles = [], 0
    for _ in range(repeats):
        ta = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        tb = time.perf_counter()
        seconds.append(tb - ta)
        compiles += log.between(ta, tb)[0]
        args = next_args(out, args)
    per_call = [steps_per_call / s for s in seconds]
    return {
        "steps_per_second": float(np.median(per_call)),
        "steps_per_second_each": per_call,
        "seconds_each": seconds,
        "env_steps_per_call": steps_per_call,
        "compile_seconds": t1 - t0,
        "xla_compile_seconds": xla_compile_s,
        "compiles_during_timing": compiles,
    }


# ----------------------------------------------------------------------------- (a) raw env

def raw_env_program(step: Callable, num_envs: int, action_size: int, unroll_length: int, phases: int):
    """``phases`` x a ``lax.scan`` of ``unroll_length`` batched steps with uniform random actions."""

    def run(state, key):
        def one_step(carry, _):
            s, k = carry
            k, k_act = jax.random.split(k)
            action = jax.random.uniform(k_act, (num_envs, action_size), minval=-1.0, maxval=1.0)
            s, reward = step(s, action)
            return (s, k), jnp.sum(reward)

        def one_phase(carry, _):
            carry, rewards = jax.lax.scan(one_step, carry, None, length=unroll_length)
            return carry, jnp.sum(rewards)

        (state, key), rewards = jax.lax.scan(one_phase, (state, key), None, length=phases)
        return state, key, jnp.sum(rewards)  # the reward sum keeps every step observable

    return run


def bench_raw(args: Args, log: CompileLog, env_state, bare_brax: bool) -> dict:
    """``env_state``: the batch of envs our trainer's ``init`` reset (one reset compile for all)."""
    env = make_env(args.env, args.backend, args.episode_length)
    if bare_brax:
        state = env_state.core

        def step(s, a):
            nxt = jax.vmap(env.raw.step)(s, a)
            return nxt, nxt.reward
    else:
        state = env_state

        def step(s, a):
            nxt, out = jax.vmap(env.step)(s, a)
            return nxt, out.reward

    program = raw_env_program(step, args.num_envs, env.action_size, args.unroll_length, args.phases)
    key = jax.random.fold_in(jax.random.PRNGKey(args.seed), 1)
    return time_program(program, (state, key), lambda out, _: out[:2],
                        steps_per_call=args.phases * args.num_envs * args.unroll_length,
                        warmup=args.warmup, repeats=args.repeats, log=log)


# ----------------------------------------------------------------------------- (b) our trainer

def our_config(args: Args) -> Config:
    return Config(
        env=args.env, backend=args.backend, episode_length=args.episode_length, method="ppo_clip",
        num_envs=args.num_envs, unroll_length=args.unroll_length, num_epochs=args.num_epochs,
        num_minibatches=args.num_minibatches, policy_hidden=tuple(args.policy_hidden),
        value_hidden=tuple(args.value_hidden),
        total_env_steps=args.phases * args.num_envs * args.unroll_length, num_evals=1, eval_episodes=0)


def setup_ours(args: Args) -> dict:
    """Build our trainer and its initial state (whose env batch (a) and (a') start from too)."""
    config = our_config(args)
    assert config.phases_per_chunk == args.phases
    traced = make_traced(config, args.lag_depth)
    trainer = make_train(config)
    t0 = time.perf_counter()
    state = jax.block_until_ready(jax.jit(trainer.init)(jax.random.PRNGKey(args.seed), traced))
    return {"config": config, "traced": traced, "trainer": trainer, "state": state,
            "init_seconds": time.perf_counter() - t0}


def bench_ours(args: Args, log: CompileLog, setup: dict) -> dict:
    result = time_program(setup["trainer"].run_chunk, (setup["state"], setup["traced"]),
                          lambda out, prev: (out[0], prev[1]),
                          steps_per_call=setup["config"].env_steps_per_chunk, warmup=args.warmup,
                          repeats=args.repeats, log=log)
    result["init_seconds"] = setup["init_seconds"]  # jit(trainer.init): compile + env reset
    return result


# ----------------------------------------------------------------------------- (c) Brax's trainer

BRAX_METHOD = (
    "Brax's ppo.train is a closed host loop: num_evals - 1 epochs, each ONE pmapped call of "
    "`phases` training steps (= our phases: num_envs // num_minibatches x num_minibatches "
    "trajectories of unroll_length steps, i.e. num_envs x unroll_length env steps, then "
    "num_updates_per_batch = num_epochs passes of num_minibatches minibatches), with "
    "run_evals=False so progress_fn is called right after every epoch. The first epoch compiles "
    "(untimed, with any further warm-up epochs); steps/s of each timed epoch = (env_steps at this "
    "callback - env_steps at the previous one) / (wall time between the two callbacks), so the "
    "interval also holds Brax's per-epoch host work (weak-type stripping, metric means, "
    "parameter unreplication); the median over the timed epochs is reported. Brax's own "
    "'training/sps' (device time of the epoch call alone) is recorded as a cross-check. Compile "
    "seconds = wall time from the train() call to the first callback minus one steady epoch.")

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


@dataclasses.dataclass
class _BraxShim:
    used: bool = False
    note: str = ""


def _brax_shim(axis_name: str, brax_version: str) -> tuple[_BraxShim, Callable[[], None]]:
    """Install a stand-in for ``jax.device_put_replicated`` if this jax lacks it; returns an undo."""
    try:
        jax.device_put_replicated  # noqa: B018  (jax 0.10 raises AttributeError via __getattr__)
        return _BraxShim(False, "jax.device_put_replicated exists in this jax; no shim needed"), lambda: None
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

    note = SHIM_NOTE.format(jax=jax.__version__, brax=brax_version, err=message, axis=axis_name)
    return _BraxShim(True, note), undo


def bench_brax(args: Args, log: CompileLog) -> dict:
    """Time Brax's own PPO trainer on the same configuration (method: ``BRAX_METHOD``)."""
    from flax import linen
    from brax import envs as brax_envs
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo_train

    if args.num_envs % args.num_minibatches:
        raise ValueError(f"Brax needs num_minibatches={args.num_minibatches} to divide "
                         f"num_envs={args.num_envs} (batch_size = num_envs // num_minibatches)")
    batch_size = args.num_envs // args.num_minibatches
    steps_per_epoch = args.phases * batch_size * args.num_minibatches * args.unroll_length
    untimed_epochs = max(args.warmup, 1)  # the first epoch compiles
    num_evals = untimed_epochs + args.repeats + 1  # num_evals - 1 epochs, one callback after each
    num_timesteps = (num_evals - 1) * steps_per_epoch  # -> exactly `phases` training steps per epoch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        environment = brax_envs.get_environment(args.env, backend=args.backend)
    # Same sizes as ours; also our activation (tanh) and distribution (Gaussian, state-independent
    # log-std, no tanh squashing) so the two trainers run the same network arithmetic.
    network_factory = functools.partial(
        ppo_networks.make_ppo_networks, policy_hidden_layer_sizes=tuple(args.policy_hidden),
        value_hidden_layer_sizes=tuple(args.value_hidden), activation=linen.tanh,
        distribution_type="normal", noise_std_type="log")
    train_kwargs = dict(
        num_timesteps=num_timesteps, episode_length=args.episode_length, num_envs=args.num_envs,
        unroll_length=args.unroll_length, batch_size=batch_size, num_minibatches=args.num_minibatches,
        num_updates_per_batch=args.num_epochs, num_evals=num_evals, run_evals=False,
        normalize_observations=True, learning_rate=3e-4, entropy_cost=0.0, discounting=0.99,
        gae_lambda=0.95, clipping_epsilon=0.2, max_grad_norm=0.5, normalize_advantage=True,
        seed=args.seed)

    stamps: list[tuple[float, int, float]] = []

    def progress_fn(step, metrics):
        stamps.append((time.perf_counter(), int(step), float(metrics.get("training/sps", math.nan))))

    brax_version = importlib.metadata.version("brax")
    shim, undo = _brax_shim(getattr(ppo_train, "_PMAP_AXIS_NAME", "i"), brax_version)
    t_start = time.perf_counter()
    try:
        ppo_train.train(environment=environment, network_factory=network_factory,
                        progress_fn=progress_fn, **train_kwargs)
    finally:
        undo()
    t_end = time.perf_counter()

    timed = list(zip(stamps[untimed_epochs - 1:-1], stamps[untimed_epochs:]))
    if len(stamps) != num_evals - 1 or len(timed) != args.repeats:
        raise RuntimeError(f"expected {num_evals - 1} progress callbacks, got {len(stamps)}")
    per_epoch, seconds, own_sps, compiles = [], [], [], 0
    for (t0, s0, _), (t1, s1, sps) in timed:
        per_epoch.append((s1 - s0) / (t1 - t0))
        seconds.append(t1 - t0)
        own_sps.append(sps)
        compiles += log.between(t0, t1)[0]
        if s1 - s0 != steps_per_epoch:
            raise RuntimeError(f"Brax epoch ran {s1 - s0} env steps, expected {steps_per_epoch}")
    _, xla_compile_s = log.between(t_start, stamps[0][0])
    return {
        "steps_per_second": float(np.median(per_epoch)),
        "steps_per_second_each": per_epoch,
        "seconds_each": seconds,
        "env_steps_per_call": steps_per_epoch,
        "compile_seconds": (stamps[0][0] - t_start) - float(np.median(seconds)),
        "xla_compile_seconds": xla_compile_s,
        "compiles_during_timing": compiles,
        "brax_reported_sps_each": own_sps,
        "brax_reported_sps": float(np.median(own_sps)),
        "total_seconds": t_end - t_start,
        "train_kwargs": train_kwargs,
        "network_factory": ("make_ppo_networks(policy_hidden_layer_sizes={}, value_hidden_layer_sizes={}, "
                            "activation=tanh, distribution_type='normal', noise_std_type='log')"
                            .format(tuple(args.policy_hidden), tuple(args.value_hidden))),
        "shim_used": shim.used,
        "shim": shim.note,
        "method": BRAX_METHOD,
    }


# ----------------------------------------------------------------------------- report

def _versions() -> dict:
    out = {}
    for name in ("jax", "jaxlib", "brax", "mujoco", "mujoco-mjx", "flax", "optax"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _machine() -> dict:
    dev = jax.devices()[0]
    cpu_model = platform.processor() or None
    try:
        with open("/proc/cpuinfo") as f:
            cpu_model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                             cpu_model)
    except OSError:
        pass
    return {
        "device": str(dev), "platform": dev.platform, "device_kind": dev.device_kind,
        "device_count": jax.device_count(), "cpu_model": cpu_model, "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(), "hostname": platform.node(),
        "compilation_cache_dir": jax.config.jax_compilation_cache_dir,
    }


def _ratio(a: dict | None, b: dict | None) -> float | None:
    if not a or not b or "steps_per_second" not in a or "steps_per_second" not in b:
        return None
    return a["steps_per_second"] / b["steps_per_second"]


def _fmt(x, spec=",.0f", missing="-") -> str:
    return missing if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def report(args: Args, results: dict, meta: dict) -> str:
    rows = [("raw_env", "(a)  raw env: our make_env step, random actions"),
            ("raw_brax_env", "(a') raw env: Brax env.step, no auto-reset"),
            ("ours", f"(b)  ours: ppo_clip trainer, B={args.lag_depth}"),
            ("brax", "(c)  Brax ppo.train (shimmed)" if (results.get("brax") or {}).get("shim_used")
             else "(c)  Brax ppo.train")]
    lines = [
        f"throughput on {args.env} ({args.backend}): {args.num_envs} envs x {args.unroll_length} steps per "
        f"phase, {args.num_epochs} epochs x {args.num_minibatches} minibatches, policy "
        f"{tuple(args.policy_hidden)}, value {tuple(args.value_hidden)}, episode_length {args.episode_length}",
        f"timed: {args.phases} phases = {args.phases * args.num_envs * args.unroll_length:,} env steps per "
        f"call; median of {args.repeats} timed calls after compile + {args.warmup} warm-up call(s)",
        f"jax {meta['versions']['jax']}, brax {meta['versions']['brax']}, mujoco-mjx "
        f"{meta['versions']['mujoco-mjx']}; device {meta['machine']['device']} "
        f"({meta['machine']['cpu_model']}, {meta['machine']['cpus_available']} CPUs available); {meta['date']}",
        f"command: {meta['command']}",
        "",
        f"{'measurement':<50} {'steps/s':>10} {'min..max':>17} {'s/call':>8} {'compile s':>10}",
    ]
    for key, label in rows:
        r = results.get(key)
        if r is None:
            lines.append(f"{label:<50} {'skipped':>10}")
        elif "error" in r:
            lines.append(f"{label:<50} {'FAILED':>10}  {r['error']}")
        else:
            each = r["steps_per_second_each"]
            spread = f"{_fmt(min(each))}..{_fmt(max(each))}"
            lines.append(f"{label:<50} {_fmt(r['steps_per_second']):>10} {spread:>17} "
                         f"{_fmt(float(np.median(r['seconds_each'])), '.2f'):>8} "
                         f"{_fmt(r['compile_seconds'], '.1f'):>10}")
    ratios = results["ratios"]
    lines.append("")
    ob = ratios["ours_over_brax"]
    lines.append(f"ours / brax = {_fmt(ob, '.3f')}   (target >= 1: "
                 f"{'met' if ob is not None and ob >= 1 else 'NOT met' if ob is not None else 'n/a'})")
    orw = ratios["ours_over_raw"]
    verdict = "n/a" if orw is None else ("met" if orw >= 1 / 1.5 else "NOT met")
    scope = "" if args.env == "halfcheetah" else "; the target is set for a simulation-dominated task (halfcheetah)"
    lines.append(f"ours / raw  = {_fmt(orw, '.3f')}   (raw / ours = {_fmt(None if not orw else 1 / orw, '.2f')}x; "
                 f"target raw/ours <= 1.5x: {verdict}{scope})")
    if ratios["raw_brax_over_raw"] is not None:
        lines.append(f"raw Brax env.step / raw make_env step = {_fmt(ratios['raw_brax_over_raw'], '.3f')} "
                     "(cost of the auto-reset wrapper; bare steps keep simulating after an episode ends)")
    flagged = [k for k in ("raw_env", "raw_brax_env", "ours", "brax")
               if results.get(k) and results[k].get("compiles_during_timing")]
    if flagged:
        lines.append(f"WARNING: XLA compilations happened inside timed intervals of: {', '.join(flagged)}")
    b = results.get("brax")
    if b and "error" not in b:
        lines += ["", f"Brax's own 'training/sps' for the timed epochs: "
                      f"{', '.join(_fmt(x) for x in b['brax_reported_sps_each'])}",
                  "How (c) was measured: " + b["method"], "Shim: " + b["shim"]]
    elif b:
        lines += ["", "Brax's trainer could not run: " + b["error"], b.get("why", "")]
    return "\n".join(lines)


def main(args: Args | None = None) -> dict:
    import tyro

    args = args or tyro.cli(Args)
    out_path = args.out or os.path.join("runs", "benchmarks", f"throughput_{args.env}.json")
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": command, "versions": _versions(), "machine": _machine()}
    log = CompileLog()
    results: dict[str, Any] = {}
    t_all = time.perf_counter()

    print(f"[0/4] set-up: our trainer's init (env reset) on {args.env} ...", flush=True)
    setup = setup_ours(args)
    print("[1/4] (a) raw env: our make_env step, random actions ...", flush=True)
    results["raw_env"] = bench_raw(args, log, setup["state"].env_state, bare_brax=False)
    if args.raw_brax:
        print("[2/4] (a') raw env: Brax env.step without auto-reset ...", flush=True)
        results["raw_brax_env"] = bench_raw(args, log, setup["state"].env_state, bare_brax=True)
    print(f"[3/4] (b) ours: ppo_clip trainer at B={args.lag_depth} ...", flush=True)
    results["ours"] = bench_ours(args, log, setup)
    if not args.skip_brax:
        print("[4/4] (c) Brax's ppo.train ...", flush=True)
        try:
            results["brax"] = bench_brax(args, log)
        except Exception as err:  # report why instead of crashing the whole benchmark
            frame = traceback.extract_tb(err.__traceback__)[-1]
            results["brax"] = {
                "error": f"{type(err).__name__}: {err}",
                "why": f"raised at {frame.filename}:{frame.lineno} ({frame.name}): {frame.line}",
                "traceback": traceback.format_exc(),
            }
    results["ratios"] = {
        "ours_over_brax": _ratio(results["ours"], results.get("brax")),
        "ours_over_raw": _ratio(results["ours"], results["raw_env"]),
        "raw_over_ours": _ratio(results["raw_env"], results["ours"]),
        "raw_brax_over_raw": _ratio(results.get("raw_brax_env"), results["raw_env"]),
        "ours_over_raw_brax": _ratio(results["ours"], results.get("raw_brax_env")),
    }
    meta["total_seconds"] = time.perf_counter() - t_all
    text = report(args, results, meta)
    print("\n" + text, flush=True)

    payload = {"args": dataclasses.asdict(args), **meta, "results": results, "report": text}
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1, default=lambda x: x.item() if hasattr(x, "item") else str(x))
    os.replace(tmp, out_path)
    print(f"\nwritten to {out_path} (total {meta['total_seconds']:.0f} s)")
    return payload


if __name__ == "__main__":
    main()
