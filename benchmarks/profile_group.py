"""Where a study group's wall time goes: each part of a phase timed on its own, at the group's shapes (issue 70).

    python -m benchmarks.profile_group                      # Hopper-v4, the locomotion study's 30-cell group
    python -m benchmarks.profile_group --task Walker2d-v4 --repeats 5

The group is ``study_rate``'s ``training`` shape (the study's settings, its 30 cells, one program). Each
part below is a program of its own over the same grid and the same shapes, compiled ahead of its calls,
or a sum of host time measured inside the real calls. ``repeats`` rounds call every part once, and the
parts of the quietest round (its phase the fastest) are reported: on a shared machine the shares of one
round hold together where medians over rounds need not.

* ``phase``: one whole phase of the group (``train_chunk`` of one phase);
* ``C engine``: the seconds inside the engine's host functions during that phase (``Engine.host_step``,
  wrapped with a timer), split into MuJoCo's batch step (``_step_batch``: the physics, rows copied in and
  out), the resets (``host_reset``) and the rest (the task's reward and observation in numpy, copies);
* ``rollout``: the actors' part alone (``Trainer.collect``: lagged snapshots gathered per env, the policy's
  forward pass, sampling, the env steps), and the same rollout with the engine's callback replaced by a
  pure-JAX stand-in of the same shapes (``forward``: the policy's forward pass with lagged parameters and
  everything else the program does per step, no host call); ``transfers``: rollout minus forward minus the
  host time inside it (handing each step's arrays to the callback and back, the callback's dispatch);
* ``learner``: ``Trainer.learn`` alone on one collected batch (align + E x M gradient steps);
* ``evaluation``: the chunk's evaluation program, and the host time inside it;
* ``compile``: the phase's program and the evaluation compiled ahead of their calls (``lower().compile()``);
* ``fetch``: the chunk's metrics copied to the host, as the runner does after each chunk.

The shares of a study group's wall time are then worked out for the study's own run (``total_env_steps``,
``num_evals`` of the protocol): compile once, its phases, its evaluations.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time

import jax
import jax.numpy as jnp


@dataclasses.dataclass
class Args:
    """Where a study group's wall time goes, each part timed on its own at the group's shapes."""

    task: str = "Hopper-v4"  # the study group's task
    cells: int = 30  # the group's first cells (30: all of them)
    repeats: int = 3  # rounds, each calling every part once; the quietest is reported
    eval_repeats: int = 1  # timed calls of the evaluation (30 x 8 episodes x 1,000 steps each)
    out: str = ""  # a JSON file of every number (optional)


class HostTimer:
    """Seconds spent in some of an object's methods, summed, while ``on``."""

    def __init__(self, obj, names):
        self.seconds = {n: 0.0 for n in names}
        self.on = False
        for n in names:
            setattr(obj, n, self._wrap(n, getattr(obj, n)))

    def _wrap(self, name, fn):
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                if self.on:
                    self.seconds[name] += time.perf_counter() - t
        return timed

    def measure(self, call):
        """Runs ``call``; returns its wall seconds and the host seconds inside it, per method."""
        self.seconds = {n: 0.0 for n in self.seconds}
        self.on = True
        t = time.perf_counter()
        try:
            jax.block_until_ready(call())
        finally:
            self.on = False
        return time.perf_counter() - t, dict(self.seconds)


def stand_in_call(self, state, action, ends, auto_reset):
    """The C-engine env's step with its host call replaced by cheap pure-JAX work of the same shapes: the
    next observation depends on the action, so nothing the policy computes is optimised away."""
    f32 = jnp.float32
    obs = state.obs + jnp.asarray(1e-3, f32) * jnp.sum(action)
    nxt = state.replace(obs=obs, reward=jnp.sum(action).astype(f32), done=jnp.zeros((), f32))
    return nxt, obs


def main(args: Args) -> dict:
    from benchmarks.study_rate import machine, shapes
    from vaco_jax.core.train import Trainer
    from vaco_jax.driver.program import group_program
    from vaco_jax.envs import cengine
    from vaco_jax.studies.locomotion import PROTOCOL, load_protocol

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    shape = shapes(args.task, args.cells)[0]
    batch = shape.config.batch_size
    config = shape.config.replace(total_env_steps=batch * (args.repeats + 2), num_evals=args.repeats + 2)
    prog = group_program(config, shape.cells, devices=1)
    trainer, traced = prog.trainer, prog.traced
    eng = cengine.engine(args.task)
    host = HostTimer(eng, ("host_step", "_step_batch", "host_reset"))
    state = prog.start()

    def compiled(fn, *inputs):
        """``fn`` (a jitted program) compiled ahead of time for ``inputs``, and its compile seconds."""
        t = time.perf_counter()
        c = fn.lower(*inputs).compile()
        return c, time.perf_counter() - t

    out = {}
    # every program compiled ahead of its calls: the phase as the group runs it (one phase a chunk), the
    # rollout alone, the rollout with the stand-in step (no host call), the learner alone
    phase, out["compile_phase"] = compiled(prog.train_chunk, state, traced)
    state, _ = jax.block_until_ready(phase(state, traced))  # a first call (allocations), untimed
    collect, _ = compiled(prog.over_grid(lambda s, tr: trainer.collect(s, tr)[1]), state, traced)
    real_call = cengine.CEngineEnv._call
    cengine.CEngineEnv._call = stand_in_call
    try:
        forward, _ = compiled(prog.over_grid(lambda s, tr: trainer.collect(s, tr)[1]), state, traced)
    finally:
        cengine.CEngineEnv._call = real_call
    traj = collect(state, traced)
    keys = jax.vmap(lambda k: jax.random.fold_in(k, 3))(prog.keys)
    learn, _ = compiled(prog.over_grid(lambda s, tr, tj, k: trainer.learn(
        s.learner, s.normalizer, s.buffer, tj, s.phase, k, tr)[0].policy_params), state, traced, traj, keys)
    holder = {"state": state}

    def one_phase():
        holder["state"], holder["metrics"] = phase(holder["state"], traced)
        return holder["state"], holder["metrics"]

    # round by round, every part once, so a drift in the machine's load reaches them alike
    parts = {"phase": one_phase, "rollout": lambda: collect(state, traced),
             "forward": lambda: forward(state, traced), "learner": lambda: learn(state, traced, traj, keys)}
    runs = {name: [] for name in parts}
    for _ in range(args.repeats):
        for name, call in parts.items():
            runs[name].append(host.measure(call))
    # the parts of one round, the quietest (its phase the fastest): the shares of a round hold together,
    # where medians over rounds of a loaded machine need not
    quiet = min(range(args.repeats), key=lambda i: runs["phase"][i][0])
    for name, r in runs.items():
        out[name], out[name + "_host"] = r[quiet]
        out[name + "_rounds"] = [x[0] for x in r]
    t = time.perf_counter()
    jax.device_get(holder["metrics"])
    out["fetch"] = time.perf_counter() - t

    # the evaluation (its env steps are many: ``eval_repeats`` calls)
    inputs = Trainer.evaluation_inputs(holder["state"])
    evaluation, out["compile_evaluation"] = compiled(prog.evaluation, *inputs)
    evals = [host.measure(lambda: evaluation(*inputs)) for _ in range(args.eval_repeats)]
    out["evaluation"] = statistics.median(r[0] for r in evals)
    out["evaluation_host"] = {k: statistics.median(r[1][k] for r in evals) for k in evals[0][1]}

    h = out["phase_host"]
    rh = out["rollout_host"]
    per_phase = {
        "C engine: MuJoCo's batch step": h["_step_batch"],
        "C engine: resets": h["host_reset"],
        "C engine: reward, observation, copies (numpy)": h["host_step"] - h["_step_batch"] - h["host_reset"],
        "policy forward with lagged parameters (+ sampling, wrapper)": out["forward"],
        "host<->program transfers and callback dispatch": out["rollout"] - out["forward"] - rh["host_step"],
        "learner (align + E x M steps)": out["learner"],
        "rest of the phase (normaliser, publish, metrics; + timing noise)":
            out["phase"] - h["host_step"] - out["forward"] - (out["rollout"] - out["forward"] - rh["host_step"])
            - out["learner"],
    }
    p, _ = load_protocol(PROTOCOL)
    study = shape.config.replace(total_env_steps=p["settings"]["total_env_steps"],
                                 num_evals=p["settings"]["num_evals"])
    phases, evals = study.phases_run, study.num_evals
    whole = {f"{k}": v * phases for k, v in per_phase.items()}
    whole["evaluation"] = out["evaluation"] * evals
    whole["compile (phase and evaluation programs)"] = out["compile_phase"] + out["compile_evaluation"]
    whole["fetch of each chunk's metrics"] = out["fetch"] * evals
    total = sum(whole.values())
    cells = len(shape.cells)
    lines = [f"profile of a {cells}-cell {args.task} group at the locomotion study's settings ({shape.config.num_envs} "
             f"envs x {shape.config.unroll_length} steps, {shape.config.num_epochs} x "
             f"{shape.config.num_minibatches}), {machine()}, {started}, the quietest of {args.repeats} rounds "
             f"(phase: {', '.join(f'{x:.2f}' for x in out['phase_rounds'])} s)",
             f"one phase ({cells * batch:,} env steps): {out['phase']:.2f} s "
             f"({cells * batch / out['phase']:,.0f} env steps/s); rollout {out['rollout']:.2f} s, of it host "
             f"{rh['host_step']:.2f} s; learner {out['learner']:.2f} s; evaluation {out['evaluation']:.2f} s "
             f"(host {out['evaluation_host']['host_step']:.2f} s); compile: phase {out['compile_phase']:.1f} s, "
             f"evaluation {out['compile_evaluation']:.1f} s",
             "per phase, seconds and share of the phase:"]
    lines += [f"  {k:<68} {v:7.3f} s  {100 * v / out['phase']:5.1f}%" for k, v in per_phase.items()]
    lines.append(f"the study's whole group ({phases} phases, {evals} evaluations, compiled once), seconds and share "
                 f"of {total:,.0f} s:")
    lines += [f"  {k:<68} {v:8.1f} s  {100 * v / total:5.1f}%" for k, v in whole.items()]
    print("\n".join(lines))
    record = {"args": dataclasses.asdict(args), "machine": machine(), "started": started, "measured": out,
              "per_phase": per_phase, "whole_group": whole, "report": "\n".join(lines)}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    return record


if __name__ == "__main__":
    from vaco_jax.driver.cli import parse_args

    main(parse_args(Args))
