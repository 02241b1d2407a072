"""The peer check: synchronous PPO-Clip on Gymnasium's locomotion tasks against CleanRL's published table.

    python -m benchmarks.peer_check                      # CleanRL's settings, Hopper/HalfCheetah/Walker2d-v4
    python -m benchmarks.peer_check --settings defaults  # the project's defaults (vmapped envs)

CleanRL's ``ppo_continuous_action`` settings (``--settings cleanrl``): 1 env x 2,048 steps a phase,
10 epochs x 32 minibatches, Adam lr 3e-4 annealed linearly, gamma 0.99, GAE lambda 0.95, clip 0.2, value
clipping at 0.2, no entropy bonus, max grad norm 0.5, observation and reward normalisation, 64-64 tanh
networks, a state-independent log-std initialised at 0. The score is CleanRL's: per seed, the mean
return of the training episodes that end in the last 5% of the env steps. Seeds run as one vmapped
program (MuJoCo's C engine steps all of their envs in one call).

Known differences from CleanRL, by design: truncation at 1,000 steps bootstraps from V(next obs) here
where CleanRL treats it as termination; the normalisers' statistics are updated once a phase (CleanRL:
every step); scaled rewards are not clipped at +-10 (CleanRL clips them; they rarely get there).

Writes ``OUT/<task>_<settings>.json`` (per-seed scores, curve, steps/s) and prints the table beside
CleanRL's figures, with whether our seed mean falls inside their mean +- 2 std.

CleanRL's own script run on this machine is a second reference (its published table was made with
other versions of MuJoCo and Gymnasium): ``--cleanrl-logs LOG ... --label TEXT --tasks TASK`` reads
the ``global_step=N, episodic_return=[R]`` lines its ``ppo_continuous_action.py`` prints, one log per
seed, scores each by the same rule (episodes ending in the last 5% of ``total_env_steps``) and writes
``OUT/<task>_cleanrl_code_<label>.json``. BENCHMARKS.md ("The peer check") gives the commands.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.analysis import results
from vaco_jax.analysis.peer import published, table
from vaco_jax.core.config import Config, ConfigError, make_traced
from vaco_jax.driver.runner import last_fraction_train_return
from vaco_jax.core.train import make_train


SETTINGS = {
    "cleanrl": dict(num_envs=1, unroll_length=2048, num_epochs=10, num_minibatches=32, learning_rate=3e-4,
                    anneal_lr=True, gamma=0.99, gae_lambda=0.95, clip_epsilon=0.2, value_clip_epsilon=0.2,
                    entropy_coef=0.0, max_grad_norm=0.5, adam_eps=1e-5, value_coef=0.5, init_log_std=0.0,
                    normalize_observations=True, normalize_rewards=True, normalize_advantages=True,
                    policy_hidden=(64, 64), value_hidden=(64, 64), activation="tanh"),
    "defaults": dict(),  # Config's own defaults (64 envs x 32 steps, 4 epochs x 8 minibatches, ...)
}
# CleanRL's learning settings on 16 vmapped envs x 128 steps: the same 2,048-step phase, 16 actors
SETTINGS["vmapped16"] = {**SETTINGS["cleanrl"], "num_envs": 16, "unroll_length": 128}


@dataclasses.dataclass
class Args:
    tasks: tuple[str, ...] = ("Hopper-v4", "HalfCheetah-v4", "Walker2d-v4")  # Gymnasium tasks, one program each
    settings: str = "cleanrl"  # 'cleanrl' (CleanRL's ppo_continuous_action), 'defaults' (the Config's) or 'vmapped16'
    seeds: int = 5  # seeds, vmapped in one program (>= 2)
    total_env_steps: int = 1_000_000  # env steps per seed
    num_evals: int = 8  # chunks (progress lines); the score reads training episodes, not evaluations
    overrides: str = ""  # JSON object of further Config fields, e.g. '{"num_envs": 16}'
    out: str = "results/peer_check"  # directory of the JSON records (one per task and settings)
    table: bool = False  # run nothing: print the markdown table of every record in OUT
    truncation_as_termination: bool = False  # CleanRL's handling of time limits (a diagnostic): no bootstrap at truncation
    cleanrl_logs: tuple[str, ...] = ()  # run nothing: score these logs of CleanRL's own script (one per seed) as a record
    label: str = ""  # with --cleanrl-logs: what tells this reference apart (e.g. the mujoco version it ran with)


EPISODE_LINE = re.compile(r"global_step=(\d+), episodic_return=\[?\s*([-+0-9.eE]+)")


def cleanrl_log_score(path: str, total_env_steps: int, fraction: float = 0.05) -> tuple[float, int]:
    """(mean return of the episodes that end after ``(1 - fraction) * total_env_steps``, their count)
    from a log of CleanRL's ``ppo_continuous_action.py``; NaN when none ended there."""
    with open(path) as f:
        episodes = [(int(m[1]), float(m[2])) for m in map(EPISODE_LINE.search, f) if m]
    if not episodes:
        raise ConfigError(f"cleanrl_logs: {path} holds no 'global_step=N, episodic_return=[R]' line")
    last = [r for step, r in episodes if step > (1 - fraction) * total_env_steps]
    return (float(np.mean(last)) if last else float("nan")), len(last)


def cleanrl_record(args: Args) -> dict:
    if len(args.tasks) != 1 or not args.label or not re.fullmatch(r"[A-Za-z0-9_.+-]+", args.label):
        raise ConfigError("cleanrl_logs: give one task (--tasks TASK) and a --label of letters, digits and _.+- "
                          f"(got tasks={list(args.tasks)}, label={args.label!r})")
    scored = [cleanrl_log_score(p, args.total_env_steps) for p in args.cleanrl_logs]
    return {"task": args.tasks[0], "settings": f"cleanrl_code_{args.label}", "label": args.label,
            "logs": [os.path.basename(p) for p in args.cleanrl_logs], "episodes_scored": [n for _, n in scored],
            "scores": [None if not np.isfinite(s) else s for s, _ in scored], "diverged": [False] * len(scored),
            "total_env_steps": args.total_env_steps, "machine": {"cpus": os.cpu_count()},
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _truncation_as_termination(config: Config):
    """The task's env with every truncation reported as a termination: the learner then bootstraps 0
    at the time limit, as CleanRL's PPO does."""
    from vaco_jax.envs import make_env

    env = make_env(config.env, config.backend, config.episode_length)

    def step(state, action):
        state, out = env.step(state, action)
        return state, out._replace(termination=jnp.maximum(out.termination, out.truncation),
                                   truncation=jnp.zeros_like(out.truncation))

    return env._replace(step=step)


def run_task(task: str, args: Args) -> dict:
    fields = {**SETTINGS[args.settings], **json.loads(args.overrides or "{}")}
    config = Config(env=task, method="ppo_clip", lag_model="synchronous", total_env_steps=args.total_env_steps,
                    num_evals=args.num_evals, eval_episodes=0, **fields)
    traced = make_traced(config)
    trainer = make_train(config, env=_truncation_as_termination(config) if args.truncation_as_termination else None)
    keys = jax.random.split(jax.random.PRNGKey(0), args.seeds)
    init = jax.jit(jax.vmap(trainer.init, in_axes=(0, None)))
    chunk = jax.jit(jax.vmap(trainer.train_chunk, in_axes=(0, None)))
    t0 = time.perf_counter()
    state = init(keys, traced)
    sums, counts, seconds = [], [], []
    for i in range(config.num_evals):
        t = time.perf_counter()
        state, metrics = chunk(state, traced)
        ph = jax.device_get(metrics.phases)
        sums.append(np.asarray(ph.episode_return_sum).reshape(args.seeds, -1))
        counts.append(np.asarray(ph.episode_count).reshape(args.seeds, -1))
        seconds.append(time.perf_counter() - t)
        done = (i + 1) * config.env_steps_per_chunk
        recent = sums[-1].sum(-1) / np.maximum(counts[-1].sum(-1), 1)
        print(f"  {task} {args.settings}: {done:,} steps/seed, chunk {seconds[-1]:.0f} s, training return "
              f"{np.round(recent, 1).tolist()}", flush=True)
    sums, counts = np.concatenate(sums, 1), np.concatenate(counts, 1)
    diverged = np.asarray(jax.device_get(~jnp.isfinite(
        sum(jnp.sum(x, axis=tuple(range(1, x.ndim))) for x in jax.tree.leaves(state.learner.policy_params)))))
    scores = last_fraction_train_return(sums, counts)
    steady = sum(seconds[1:]) if len(seconds) > 1 else seconds[0]
    steady_steps = config.env_steps_per_chunk * max(len(seconds) - 1, 1) * args.seeds
    overrides = json.loads(args.overrides or "{}")
    label = args.settings + "".join(f"+{k}={v}" for k, v in sorted(overrides.items()))
    return {"task": task, "settings": label + ("+truncation_as_termination" if args.truncation_as_termination else ""),
            "overrides": overrides,
            "config": config.as_record(), "seeds": args.seeds, "truncation_as_termination": args.truncation_as_termination,
            "scores": [None if not np.isfinite(s) else float(s) for s in scores],
            "diverged": diverged.tolist(),
            "curve": {"episode_return_sum": sums.tolist(), "episode_count": counts.tolist()},
            "seconds_total": time.perf_counter() - t0, "env_steps_per_second": steady_steps / steady,
            "machine": {"cpus": os.cpu_count(), "device": str(jax.devices()[0])},
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def report(record: dict) -> str:
    s = np.array([np.nan if v is None else v for v in record["scores"]], float)
    ok = s[np.isfinite(s)]
    mean, std = (float(ok.mean()), float(ok.std(ddof=1))) if len(ok) > 1 else (float("nan"), float("nan"))
    ref = published(record["task"])
    line = (f"{record['task']:<15} {record['settings']:<9} ours {mean:8.1f} +- {std:6.1f} (n={len(ok)}"
            f"{', ' + str(int(np.sum(record['diverged']))) + ' diverged' if any(record['diverged']) else ''})")
    if ref:
        inside = ref[0] - 2 * ref[1] <= mean <= ref[0] + 2 * ref[1]
        line += f"   {ref[2]} {ref[0]:.1f} +- {ref[1]:.1f}   inside mean +- 2 std: {'yes' if inside else 'NO'}"
    return line + f"   {record['env_steps_per_second']:.0f} env steps/s ({record['seconds_total']:.0f} s)"


def main(args: Args) -> None:
    if args.table:
        print(table(args.out))
        return
    if args.cleanrl_logs:
        record = cleanrl_record(args)
        os.makedirs(args.out, exist_ok=True)
        results.write_json(os.path.join(args.out, f"{record['task']}_{record['settings']}.json"), record)
        print(table(args.out))
        return
    if args.settings not in SETTINGS:
        raise ConfigError(f"settings={args.settings!r} is not valid; allowed values: {', '.join(SETTINGS)}")
    if args.seeds < 2:
        raise ConfigError(f"seeds={args.seeds!r} must be an integer >= 2 (a std needs two)")
    os.makedirs(args.out, exist_ok=True)
    lines = []
    for task in args.tasks:
        record = run_task(task, args)
        suffix = "_" + hashlib.sha1(args.overrides.encode()).hexdigest()[:8] if args.overrides else ""
        suffix += "_truncation_as_termination" if args.truncation_as_termination else ""
        results.write_json(os.path.join(args.out, f"{task}_{args.settings}{suffix}.json"), record)
        lines.append(report(record))
        print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    from vaco_jax.driver.cli import parse_args

    main(parse_args(Args))
