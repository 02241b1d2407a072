"""Env steps per second: raw environment vs our trainer (B = 1) vs Brax's own PPO trainer.

Measured in one process on one task, one batch shape (``num_envs`` x ``unroll_length`` env steps per
phase, ``num_epochs`` x ``num_minibatches`` gradient steps per phase) and one network size, reported
as steps/s and as ratios:

(a)  the raw environment: our ``make_env`` step (with its truncation-aware auto-reset), vmapped over
     ``num_envs`` envs and stepped with uniform random actions inside a jitted ``lax.scan`` of
     ``unroll_length`` steps (``phases`` such scans per call: the env steps of one call of (b));
(a') the same env exactly as Brax's trainer steps it: ``brax.envs.training.wrap`` (Brax's own
     episode bookkeeping and auto-reset instead of ours), a reference for (c);
(b)  our trainer: ``jax.jit(trainer.run_chunk)`` with ``phases_per_chunk = phases``, method
     ``ppo_clip``, lag depth ``B = 1``, no evaluation;
(b') ours at each of ``compare_lag_depths`` and (b'') ours synchronous: the cost pair, whose ratio is
     the lag machinery's cost per env step; (b''') (b'') timed again, an A/A control of the pair;
(c)  Brax's trainer ``brax.training.agents.ppo.train.train`` on the same task with the same env steps
     and gradient steps per update and the same networks (``brax_ppo.bench_brax``, ``BRAX_METHOD``).

How the rounds are interleaved and timed, and why: docs/benchmarks.md, "How throughput is timed".
The timing harness is ``benchmarks.timing``; Brax's side, (a') and (c), is ``benchmarks.brax_ppo``.

Usage (``python -m benchmarks.throughput --help`` lists every flag)::

    python -m benchmarks.throughput                                   # inverted_double_pendulum, 256 envs
    python -m benchmarks.throughput --env halfcheetah --phases 2 --repeats 2

"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import platform
import shlex
import sys
import time
import traceback
from typing import Any, Callable

import jax
import numpy as np

from benchmarks.brax_ppo import bench_brax, prepare_raw_brax
from benchmarks.timing import CompileLog, GcLog, Program, prepare, raw_env_program
from vaco_jax.core.config import Config, make_traced
from vaco_jax.envs import make_env
from vaco_jax.core.train import make_train


@dataclasses.dataclass
class Args:
    """Env steps/s of the raw env, our trainer (B = 1) and Brax's PPO trainer on one configuration."""

    env: str = "inverted_double_pendulum"  # task (any of vaco_jax.envs.TASKS, e.g. halfcheetah)
    backend: str = "mjx"  # physics pipeline of the Brax env (every measurement uses it)
    num_envs: int = 256  # parallel envs
    unroll_length: int = 32  # env steps per env per phase (one update)
    num_minibatches: int = 4  # minibatches per epoch (Brax: num_minibatches, batch_size = num_envs // this)
    num_epochs: int = 4  # epochs per phase (Brax: num_updates_per_batch)
    policy_hidden: tuple[int, ...] = (64, 64)  # policy MLP hidden sizes (both trainers)
    value_hidden: tuple[int, ...] = (64, 64)  # value MLP hidden sizes (both trainers)
    episode_length: int = 1000  # truncation length (both trainers)
    lag_depth: int = 1  # our trainer's policy-lag depth B
    lag_model: str = "uniform"  # our trainer's lag model for (b) (the default model, not the synchronous shortcut)
    compare_lag_depths: tuple[int, ...] = (32,)  # (b') extra runs of ours, `lag_model` at these depths
    synchronous: bool = True  # (b'') also time ours with lag_model='synchronous' (no buffer): the cost reference
    phases: int = 10  # phases (updates) per timed call: env steps per call = phases * num_envs * unroll_length
    repeats: int = 3  # timed rounds (one call of each measurement, brax_epochs_per_round Brax epochs); medians are reported
    brax_epochs_per_round: int = 3  # timed Brax epochs per round, each right between a call of (b) before and one after it; a round's ours / Brax sums them
    warmup: int = 1  # untimed calls after compilation (Brax: untimed epochs, at least its compiling one)
    seed: int = 0  # PRNG seed of every measurement
    learning_rate: float = 3e-4  # Adam step size of both trainers; a tiny one (1e-9) holds both policies near their initialisation, so the simulator sees the same kind of states on both sides
    cost_phases_per_call: int = 1  # phases per timed call of (b') and (b'')
    cost_cycles: int = 20  # A B B A cycles of such calls per round: 2 x cost_cycles x cost_phases_per_call phases of each (b'), (b'') per round
    cost_same_states: bool = True  # (b') and (b'') start each half of a round from the same env states (the synchronous run's): an MJX step's cost depends on the state, and two runs that learn differently drift apart
    cost_control: bool = True  # (b''') time a second copy of (b'') (the same compiled program and state) in the same cycles: an A/A control whose ratio to (b'') is this machine's round-to-round noise, printed beside the cost target
    cost_learning_rate: float | None = 1e-9  # Adam step size of (b'), (b''), (b''') only (None: learning_rate); 1e-9 holds both near their common initialisation, so they step the same kind of states and their ratio is the lag machinery's cost alone
    gc_during_timing: bool = False  # let Python's garbage collector run inside timed calls and Brax's timed epochs (default: off there, run between them, as timeit does: a full collection of this process's objects stalls whatever is timed for ~0.6 s)
    skip_brax: bool = False  # skip (c), Brax's PPO trainer
    brax_devices: int | None = 1  # devices Brax's trainer uses (its max_devices_per_host; None: every local device)
    raw_brax: bool = True  # also time (a'): the env under Brax's own training wrappers instead of ours
    out: str | None = None  # JSON output; default runs/benchmarks/throughput_<env>.json


# ----------------------------------------------------------------------------- (a) raw env

def prepare_raw(args: Args, log: CompileLog, env_state) -> Program:
    """(a): our ``make_env`` step; ``env_state`` is the batch our trainer's ``init`` reset."""
    env = make_env(args.env, args.backend, args.episode_length)

    def step(s, a):
        nxt, out = jax.vmap(env.step)(s, a)
        return nxt, out.reward

    program = raw_env_program(step, args.num_envs, env.action_size, args.unroll_length, args.phases)
    key = jax.random.fold_in(jax.random.PRNGKey(args.seed), 1)
    return prepare("raw_env", program, (env_state, key), lambda out, _: out[:2],
                   steps_per_call=args.phases * args.num_envs * args.unroll_length, warmup=args.warmup,
                   log=log)


# ----------------------------------------------------------------------------- (b) our trainer

def our_config(args: Args, lag_model: str | None = None, lag_depth: int | None = None,
               phases: int | None = None, learning_rate: float | None = None) -> Config:
    depth = args.lag_depth if lag_depth is None else lag_depth
    phases = phases or args.phases
    return Config(
        env=args.env, backend=args.backend, episode_length=args.episode_length, method="ppo_clip",
        lag_model=lag_model or args.lag_model, buffer_capacity=max(16, depth), lag_depth=depth,
        num_envs=args.num_envs, unroll_length=args.unroll_length, num_epochs=args.num_epochs,
        num_minibatches=args.num_minibatches, policy_hidden=tuple(args.policy_hidden),
        value_hidden=tuple(args.value_hidden),
        learning_rate=args.learning_rate if learning_rate is None else learning_rate,
        total_env_steps=phases * args.num_envs * args.unroll_length, num_evals=1, eval_episodes=0)


def init_ours(args: Args, lag_model: str | None = None, lag_depth: int | None = None,
              phases: int | None = None, learning_rate: float | None = None) -> dict:
    """Our trainer and its initial state (whose env batch (a) starts from too: one reset compile)."""
    config = our_config(args, lag_model, lag_depth, phases, learning_rate)
    assert config.phases_per_chunk == (phases or args.phases)
    traced = make_traced(config, config.lag_depth)
    trainer = make_train(config)
    t0 = time.perf_counter()
    state = jax.block_until_ready(jax.jit(trainer.init)(jax.random.PRNGKey(args.seed), traced))
    return {"config": config, "traced": traced, "trainer": trainer, "state": state,
            "init_seconds": time.perf_counter() - t0}


def prepare_ours(args: Args, log: CompileLog, setup: dict, label: str = "ours", warmup: int | None = None) -> Program:
    return prepare(label, setup["trainer"].run_chunk, (setup["state"], setup["traced"]),
                   lambda out, prev: (out[0], prev[1]), steps_per_call=setup["config"].env_steps_per_chunk,
                   warmup=args.warmup if warmup is None else warmup, log=log,
                   init_seconds=setup["init_seconds"])  # jit(trainer.init): compile + env reset


def share_env_state(pair: list[Program]) -> None:
    """Every program of ``pair`` continues from the first one's env states (untimed; no copy: the
    programs do not donate their inputs)."""
    env_state = pair[0].args[0].env_state
    for p in pair[1:]:
        p.args = (p.args[0]._replace(env_state=env_state), *p.args[1:])


def cost_pair_round(pair: list[Program], cycles: int, log: CompileLog, same_states: bool = True) -> dict:
    """One round of the cost pair ((b''), each (b'), the control (b''')): ``cycles`` times A B ... B A,
    cycle i with the list rotated by i places (B ... A A ... B, ...), so that over a round every
    program takes every place in a cycle alike (a fixed place biased a program by up to 4 % here);
    each program's calls before the turn summed into its round's "before" seconds and those after it
    into its "after" seconds; with ``same_states`` each half-cycle starts every program from the
    first one's env states. Returns each program's env steps/s over the round."""
    for i in range(cycles if pair else 0):  # no pair (--no-synchronous, no depths): nothing to time
        turn = pair[i % len(pair):] + pair[:i % len(pair)]
        for order, after in ((turn, False), (turn[::-1], True)):
            if same_states and len(pair) > 1:
                share_env_state(pair)
            for p in order:
                p.timed_call(log, after=after, more=i > 0)
    return {p.label: 2 * p.steps_per_call / (p.seconds[-1] + p.seconds_after[-1]) for p in pair}


CONTROL = "ours_sync_again"  # (b'''), the A/A control of the cost pair


def epoch_hooks(k: int, repeats: int, run_round: Callable[[int], None], ours: Program, log: CompileLog):
    """The two hooks ``bench_brax`` calls around timed epoch j, for rounds of ``k`` epochs: before the
    first epoch of round r, ``run_round(r)`` (the round's other measurements, then ours' first call);
    before every other epoch a call of ours added to the round's "before" seconds; after every epoch
    a call of ours added to its "after" seconds."""
    def before_epoch(j: int) -> None:
        if j % k == 0:
            run_round(j // k)
        else:
            print(f"[round {j // k + 1}/{repeats}] before Brax epoch {j % k + 1}/{k}: ours "
                  f"{ours.timed_call(log, more=True):,.0f}", flush=True)

    def after_epoch(j: int) -> None:
        print(f"[round {j // k + 1}/{repeats}] after Brax epoch {j % k + 1}/{k}: ours "
              f"{ours.timed_call(log, after=True, more=j % k > 0):,.0f}", flush=True)

    return before_epoch, after_epoch


# ----------------------------------------------------------------------------- report

def _versions() -> dict:
    from vaco_jax.driver.provenance import package_versions

    return package_versions()


def _machine() -> dict:
    """The driver's record of the machine (provenance.machine), plus what a timing depends on."""
    from vaco_jax.driver.provenance import machine

    dev = jax.devices()[0]
    cpu_model = machine()["cpu"]
    return {
        "device": str(dev), "platform": dev.platform, "device_kind": dev.device_kind,
        "device_count": jax.device_count(), "cpu_model": cpu_model, "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(), "hostname": platform.node(),
        "compilation_cache_dir": jax.config.jax_compilation_cache_dir,
    }


def _ratio(a: dict | None, b: dict | None) -> float | None:
    if not a or not b or "steps_per_second" not in a or "steps_per_second" not in b:
        return None
    return a["steps_per_second"] / b["steps_per_second"]


def _fmt(x, spec=",.0f", missing="-") -> str:
    return missing if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _per_round(a: dict | None, b: dict | None, key: str = "steps_per_second_each",
               key_b: str = "steps_per_second_each") -> list[float]:
    """Round-by-round ratios of two interleaved measurements (round r of each ran back to back);
    ``key`` and ``key_b`` pick which of ``a``'s and ``b``'s rates (e.g. the bracketing ones) divide."""
    if not a or not b or key not in a or key_b not in b:
        return []
    return [x / y for x, y in zip(a[key], b[key_b])]


def targets(args: Args, results: dict) -> list[dict]:
    """The throughput targets, each met only when every round's ratio clears it (not just the median).

    ours / Brax is taken, round by round, from ours' two calls that bracket Brax's epoch (one right
    before, one right after: a drift of the machine's speed during the round hits both sides alike);
    the ratio of the call before alone is reported beside it."""
    out = []
    for key, what in (("bracket_steps_per_second_each", "calls before + after the epoch"),
                      ("steps_per_second_each", "call before the epoch only")):
        each = _per_round(results.get("ours"), results.get("brax"), key)
        if each:
            out.append({"name": f"ours ({args.lag_model}, B={args.lag_depth}) / Brax's trainer ({what})",
                        "bound": ">= 1.05", "median": float(np.median(each)), "min": min(each), "max": max(each),
                        "each": each, "met": min(each) >= 1.05, "decides": key.startswith("bracket")})
    lr = args.learning_rate if args.cost_learning_rate is None else args.cost_learning_rate
    for depth in (*args.compare_lag_depths, None):
        sync, lagged = results.get("ours_sync"), results.get(CONTROL if depth is None else f"ours_b{depth}")
        key = "bracket_steps_per_second_each"  # A B B A: both calls of each side in round r together
        ab_ba = bool(sync and lagged and key in sync and key in lagged)
        each = _per_round(sync, lagged, *(2 * (key,) if ab_ba else ()))  # cost ratio = sps ratio inverted
        if each:
            what = ("A/A control: the synchronous path again / synchronous (the same program; this "
                    "machine's round-to-round noise, no target)" if depth is None else
                    f"cost per env step, {args.lag_model} B={depth} / synchronous")
            out.append({"name": f"{what} ({f'{args.cost_cycles} A B B A cycles a round' if ab_ba else 'one call each'}"
                                f"{', same env states' if ab_ba and args.cost_same_states else ''}, learning rate {lr:g})",
                        "bound": "" if depth is None else "<= 1.10", "median": float(np.median(each)),
                        "min": min(each), "max": max(each), "each": each, "met": max(each) <= 1.10,
                        "decides": depth is not None})
    return out


def report(args: Args, results: dict, meta: dict) -> str:
    brax = results.get("brax")
    rows = [("raw_env", "(a)  raw env, our make_env step"),
            ("raw_brax_env", "(a') raw env, Brax's training wrappers"),
            ("ours", f"(b)  ours: ppo_clip, {args.lag_model} B={args.lag_depth}"
                     + (" (calls of half the phases)" if (results.get("ours") or {}).get("env_steps_per_call")
                        == args.phases // 2 * args.num_envs * args.unroll_length else "")),
            *[(f"ours_b{d}", f"(b') ours: ppo_clip, {args.lag_model} B={d}") for d in args.compare_lag_depths],
            ("ours_sync", "(b'') ours: ppo_clip, synchronous"),
            (CONTROL, "(b''') (b'') again: the A/A control"),
            ("brax", "(c)  Brax ppo.train" + (" (shimmed)" if brax and brax.get("shim_used") else ""))]
    m = meta["machine"]
    lines = [
        f"throughput on {args.env} ({args.backend}): {args.num_envs} envs x {args.unroll_length} steps per "
        f"phase, {args.num_epochs} epochs x {args.num_minibatches} minibatches, policy "
        f"{tuple(args.policy_hidden)}, value {tuple(args.value_hidden)}, episode_length {args.episode_length}",
        f"timed: {args.phases} phases = {args.phases * args.num_envs * args.unroll_length:,} env steps per call "
        f"/ Brax epoch; median of {args.repeats} interleaved rounds ({args.brax_epochs_per_round} Brax epochs, "
        f"{args.cost_cycles} cost-pair cycles a round), after compile + {args.warmup} warm-up call(s)",
        f"jax {meta['versions']['jax']}, brax {meta['versions']['brax']}, mujoco-mjx "
        f"{meta['versions']['mujoco-mjx']}; device {m['device']} ({m['cpu_model']}, {m['cpus_available']} "
        f"CPUs available, 1-min load average {_fmt((m['load_average'] or [None])[0], '.2f')} at start, "
        f"{_fmt((meta.get('load_average_end') or [None])[0], '.2f')} at end); {meta['date']}",
        f"command: {meta['command']}",
        "",
        f"{'measurement':<42} {'steps/s':>10} {'min..max':>17} {'s/round':>8} {'compile s':>10}",
    ]
    for key, label in rows:
        r = results.get(key)
        if r is None:
            lines.append(f"{label:<42} {'skipped':>10}")
        elif "error" in r:
            lines.append(f"{label:<42} {'FAILED':>10}  {r['error']}")
        else:
            each = r["steps_per_second_each"]
            spread = f"{_fmt(min(each))}..{_fmt(max(each))}"
            lines.append(f"{label:<42} {_fmt(r['steps_per_second']):>10} {spread:>17} "
                         f"{_fmt(float(np.median(r['seconds_each'])), '.2f'):>8} "
                         f"{_fmt(r['compile_seconds'], '.1f'):>10}")
    for key, label in rows:
        r = results.get(key) or {}
        if "bracket_steps_per_second_each" in r:
            each = r["bracket_steps_per_second_each"]
            label = label.split(" ")[0] + (" ours, its calls before + after each epoch" if key == "ours"
                                           else f" {key[5:]}, its two calls of a round")
            lines.append(f"{label:<42} {_fmt(r['bracket_steps_per_second']):>10} "
                         f"{_fmt(min(each)) + '..' + _fmt(max(each)):>17}")
    if args.cost_same_states and len([k for k in results if k.startswith("ours_b") or k == "ours_sync"]) > 1:
        lines.append("(b') and (b'') start each half of a round from the synchronous run's env states "
                     "(--no-cost-same-states: each from its own)")
    if args.cost_learning_rate is not None:
        lines.append(f"(b') and (b'') ran at learning rate {args.cost_learning_rate:g} (the others at "
                     f"{args.learning_rate:g})")
    ratios = results["ratios"]
    ob, orw = ratios["ours_over_brax"], ratios["ours_over_raw"]
    lines += [
        "",
        f"ours / brax = {_fmt(ob, '.3f')}   (medians; the round-by-round target is below)",
        f"ours / raw  = {_fmt(orw, '.3f')}   (raw / ours = {_fmt(None if not orw else 1 / orw, '.2f')}x; "
        f"target raw / ours <= 1.5x: {'n/a' if orw is None else 'met' if orw >= 1 / 1.5 else 'NOT met'}"
        + ("" if args.env == "halfcheetah" else
           "; the target is set for a simulation-dominated task, halfcheetah") + ")",
    ]
    for t in results.get("targets", []):
        lines.append(f"{'target' if t['decides'] else 'for reference:'} {t['name']}{' ' + t['bound'] if t['bound'] else ''}: median "
                     f"{t['median']:.3f}, rounds {t['min']:.3f}..{t['max']:.3f} ("
                     + ", ".join(f"{x:.3f}" for x in t["each"]) + ")"
                     + (f" -> {'met' if t['met'] else 'NOT met'}" if t["decides"] else ""))
    if ratios["ours_over_raw_brax"] is not None:
        lines.append(f"against (a'): ours / raw = {_fmt(ratios['ours_over_raw_brax'], '.3f')}, brax / raw = "
                     f"{_fmt(ratios['brax_over_raw_brax'], '.3f')}; raw env under Brax's wrappers / under ours "
                     f"= {_fmt(ratios['raw_brax_over_raw'], '.3f')}")
    g = results.get("gc")
    if g:
        lines.append(f"Python GC: {len(g['pauses'])} collections of >= {1e3 * g['min_seconds']:.0f} ms, longest "
                     f"{1e3 * g['longest_seconds']:.0f} ms; " + (
                         "allowed inside timed intervals (--gc-during-timing); begun inside timed calls: "
                         + (", ".join(f"{k} {v}" for k, v in g["inside_timed_calls"].items() if v) or "none")
                         if g["during_timing"] else
                         "disabled inside timed calls and Brax's timed epochs, run between them"))
    flagged = [k for k in results if isinstance(results[k], dict)
               if results.get(k) and results[k].get("compiles_during_timing")]
    if flagged:
        lines.append(f"WARNING: XLA compilations happened inside timed intervals of: {', '.join(flagged)}")
    if brax and "error" not in brax:
        lines += ["", "Brax's own 'training/sps' for the timed epochs: "
                      + ", ".join(_fmt(x) for x in brax["brax_reported_sps_each"]),
                  "How (c) was measured: " + brax["method"], "Shim: " + brax["shim"]]
    elif brax:
        lines += ["", f"Brax's trainer could not run: {brax['error']} ({brax['why']}); "
                      "the other measurements were timed on their own."]
    return "\n".join(lines)


def main(args: Args | None = None) -> dict:
    from vaco_jax.driver.cli import parse_args

    args = args or parse_args(Args)
    if (args.synchronous or args.compare_lag_depths) and (args.cost_phases_per_call < 1 or args.cost_cycles < 1):
        raise SystemExit(f"--cost-phases-per-call (got {args.cost_phases_per_call}) and --cost-cycles (got "
                         f"{args.cost_cycles}) must be >= 1: each round runs that many A B B A cycles of (b') "
                         "and (b'') calls of that many phases")
    if args.brax_epochs_per_round < 1 or args.repeats < 1:
        raise SystemExit(f"--brax-epochs-per-round (got {args.brax_epochs_per_round}) and --repeats (got "
                         f"{args.repeats}) must be >= 1")
    out_path = args.out or os.path.join("runs", "benchmarks", f"throughput_{args.env}.json")
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": command, "versions": _versions(), "machine": _machine()}
    log = CompileLog()
    gc_log = GcLog()
    t_all = time.perf_counter()

    # (b) against Brax: calls of half an epoch, one right before and one right after each Brax epoch, and
    # twice Brax's untimed epochs as warm-up, so ours and Brax's run stand at the same env steps at the
    # start and end of every timed epoch (the cost of an env step changes as the policy learns)
    halves = not args.skip_brax and args.phases % 2 == 0
    print(f"[setup] our trainer's init (env reset) on {args.env} ...", flush=True)
    setup = init_ours(args, phases=args.phases // 2 if halves else None)
    print("[compile] (a) raw env, our make_env step ...", flush=True)
    programs = [prepare_raw(args, log, setup["state"].env_state)]  # (its own phases per call)
    if args.raw_brax:
        print("[compile] (a') raw env, Brax's training wrappers ...", flush=True)
        programs.append(prepare_raw_brax(args, log))
    print(f"[compile] (b) ours: ppo_clip trainer, lag model {args.lag_model!r} at B={args.lag_depth} ...", flush=True)
    programs.append(prepare_ours(args, log, setup, warmup=2 * max(args.warmup, 1) if halves else None))
    del setup
    # (b') and (b''), the cost pair: `cost_cycles` cycles per round of short calls of
    # `cost_phases_per_call` phases timed A B B A (the synchronous path, each depth, then the same in
    # reverse): the machine's speed swings by tens of percent within seconds, and calls this short and
    # this finely interleaved see the same swings; both runs advance the same env steps
    c = args.cost_phases_per_call
    cycles = args.cost_cycles
    pair_kw = dict(phases=c, learning_rate=args.cost_learning_rate)
    pair = []
    if args.synchronous:
        print("[compile] (b'') ours, lag model 'synchronous' ...", flush=True)
        pair.append(prepare_ours(args, log, init_ours(args, "synchronous", 1, **pair_kw), label="ours_sync",
                                 warmup=args.warmup * args.phases // c))
    for depth in args.compare_lag_depths:
        print(f"[compile] (b') ours, lag model {args.lag_model!r} at B={depth} ...", flush=True)
        pair.append(prepare_ours(args, log, init_ours(args, lag_depth=depth, **pair_kw), label=f"ours_b{depth}",
                                 warmup=args.warmup * args.phases // c))
    if args.synchronous and args.cost_control:  # (b'''), last: no compile, the same program from the same state
        pair.append(dataclasses.replace(pair[0], label=CONTROL, seconds=[], seconds_after=[], call_seconds=[],
                                        compile_seconds=0.0, xla_compile_seconds=0.0, extra=dict(pair[0].extra)))
    for p in pair:  # a round's "call" before (and after) is the sum of its cycles' calls
        p.extra["phases_per_call"] = c
        p.steps_per_call *= cycles
    programs += pair
    for p in programs:
        p.gc_off = not args.gc_during_timing

    ours = next(p for p in programs if p.label == "ours")
    rounds_done = 0

    def run_round(r: int) -> None:
        nonlocal rounds_done
        rates = [f"{p.label} {p.timed_call(log):,.0f}" for p in programs if p.label.startswith("raw")]
        rates += [f"{label} {rate:,.0f}" for label, rate in
                  cost_pair_round(pair, cycles, log, args.cost_same_states).items()]
        # ours (b) last: right before the Brax epoch its ratio is taken against
        rates.append(f"{ours.label} {ours.timed_call(log):,.0f}")
        rounds_done += 1
        print(f"[round {r + 1}/{args.repeats}] steps/s: {', '.join(rates)}", flush=True)

    k = args.brax_epochs_per_round
    before_epoch, after_epoch = epoch_hooks(k, args.repeats, run_round, ours, log)

    results: dict[str, Any] = {}
    if not args.skip_brax:
        print("[brax] (c) Brax's ppo.train (compiles during its first epoch; rounds run between its "
              "timed epochs) ...", flush=True)
        try:
            ours.steps_per_call *= k  # a round of ours: k calls before and k after Brax's k epochs
            ours.calls_per_round = k
            results["brax"] = bench_brax(args, log, before_epoch, after_epoch)
            print(f"[brax] rounds steps/s: {', '.join(_fmt(x) for x in results['brax']['steps_per_second_each'])}",
                  flush=True)
        except Exception as err:  # report why instead of losing the other measurements
            frame = traceback.extract_tb(err.__traceback__)[-1]
            results["brax"] = {
                "error": f"{type(err).__name__}: {err}",
                "why": f"raised at {frame.filename}:{frame.lineno} ({frame.name}): {frame.line}",
                "traceback": traceback.format_exc(),
            }
            print(f"[brax] FAILED: {results['brax']['error']}", flush=True)
            if ours.calls_per_round > 1:  # rounds cut short: ours is timed again below, one call a round
                ours.steps_per_call //= ours.calls_per_round
                ours.calls_per_round = 1
                ours.seconds.clear()
                ours.seconds_after.clear()
    while rounds_done < args.repeats:
        run_round(rounds_done)
    for p in programs:
        results[p.label] = p.summary()

    results["targets"] = targets(args, results)
    results["gc"] = {**gc_log.summary(programs), "during_timing": args.gc_during_timing}
    gc_log.close()
    results["ratios"] = {
        "ours_over_brax": _ratio(results["ours"], results.get("brax")),
        "ours_over_raw": _ratio(results["ours"], results["raw_env"]),
        "raw_over_ours": _ratio(results["raw_env"], results["ours"]),
        "raw_brax_over_raw": _ratio(results.get("raw_brax_env"), results["raw_env"]),
        "ours_over_raw_brax": _ratio(results["ours"], results.get("raw_brax_env")),
        "brax_over_raw_brax": _ratio(results.get("brax"), results.get("raw_brax_env")),
    }
    meta["total_seconds"] = time.perf_counter() - t_all
    meta["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
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
