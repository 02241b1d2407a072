"""Env steps per second of MuJoCo's C engine inside the jitted program, beside MJX, EnvPool and training.

    python -m benchmarks.engine_speed                  # every Gymnasium task, 256 envs, 3 rounds
    python -m benchmarks.engine_speed --tasks Hopper-v4 --rounds 5

Each round times, one after another (so every contender sees the same machine load):
  * ours: a jitted ``lax.scan`` of ``steps`` vmapped ``env.step`` calls (auto-reset included) of each
    task at ``num_envs`` envs, threads = cores, over actions drawn before the timed call;
  * EnvPool (optional: ``pip install -e '.[bench]'``; skipped with a message where it does not import):
    the same task, envs and threads, synchronous ``step`` of a whole batch;
  * MJX (the accelerator path) at the same envs: Gymnasium's Hopper-v4 model (``backend='mjx'``) and
    Brax's own ``hopper`` model;
  * training: PPO-Clip's ``train_chunk`` on Hopper-v4 at ``train_envs`` envs (env steps of the phases
    over their seconds), beside ours raw at ``train_envs`` envs.
Ratios are per round; the report gives each round's and their median. Actions are uniform random in
the action box for every contender. Compilation is outside the timings.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time

import jax
import numpy as np

from vaco_jax.envs import make_env, reset_batch
from vaco_jax.envs.gymnasium_tasks import GYM_TASKS


@dataclasses.dataclass
class Args:
    tasks: tuple[str, ...] = tuple(GYM_TASKS)  # Gymnasium tasks stepped by ours and EnvPool
    num_envs: int = 256  # envs stepped together by every contender
    steps: int = 100  # env steps per timed call (ours and EnvPool); MJX takes mjx_steps
    mjx_steps: int = 10  # env steps per timed call of Brax's hopper on MJX (slow on a CPU)
    rounds: int = 3  # rounds; each times every contender once, one after another
    train_envs: int = 64  # envs of the PPO-Clip training timed beside ours raw at the same envs
    mjx: bool = True  # time Hopper on MJX, Gymnasium's model and Brax's (compiles for ~1 minute each)
    envpool: bool = True  # time EnvPool where it is installed (extra 'bench')
    out: str = ""  # a JSON file of every number (optional)


def _scan_program(env):
    """Steps a batch through ``actions`` [steps, envs, A]: the actions are drawn before the timed call, as
    EnvPool's are."""
    def run(state, actions):
        def body(s, a):
            s, out = jax.vmap(env.step)(s, a)
            return s, out.reward[0]
        return jax.lax.scan(body, state, actions)
    return jax.jit(run)


class Ours:
    def __init__(self, task: str, n: int, steps: int, backend: str | None = None):
        self.env = make_env(task, backend)
        self.n, self.steps = n, steps
        self.state = jax.jit(lambda k: reset_batch(self.env, k, n))(jax.random.PRNGKey(0))
        self.run = _scan_program(self.env)
        self.draw = jax.jit(lambda k: jax.random.uniform(k, (steps, n, self.env.action_size), minval=self.env.action_low,
                                                          maxval=self.env.action_high))
        self.key = jax.random.PRNGKey(1)
        self.time()  # compile

    def time(self) -> float:
        self.key, k = jax.random.split(self.key)
        actions = jax.block_until_ready(self.draw(k))
        t = time.perf_counter()
        self.state, r = self.run(self.state, actions)
        jax.block_until_ready((self.state, r))
        return self.n * self.steps / (time.perf_counter() - t)


class EnvPool:
    def __init__(self, task: str, n: int, steps: int):
        import envpool

        self.env = envpool.make(task, env_type="gymnasium", num_envs=n, batch_size=n,
                                num_threads=os.cpu_count() or 1, seed=0)
        self.env.reset()
        space = self.env.action_space
        self.rng = np.random.default_rng(0)
        self.low, self.high = space.low, space.high
        self.n, self.steps = n, steps

    def time(self) -> float:
        actions = self.rng.uniform(self.low, self.high, (self.steps, self.n) + self.low.shape).astype(np.float32)
        t = time.perf_counter()
        for a in actions:
            self.env.step(a)
        return self.n * self.steps / (time.perf_counter() - t)


class Training:
    def __init__(self, task: str, n: int):
        from vaco_jax.core.config import Config, make_traced
        from vaco_jax.core.train import make_train

        self.config = Config(env=task, num_envs=n, unroll_length=32, total_env_steps=n * 32 * 40, num_evals=4,
                             eval_episodes=0, method="ppo_clip")
        trainer = make_train(self.config)
        self.traced = make_traced(self.config)
        self.state = jax.jit(trainer.init)(jax.random.PRNGKey(0), self.traced)
        self.chunk = jax.jit(trainer.train_chunk)
        self.time()  # compile

    def time(self) -> float:
        t = time.perf_counter()
        self.state, m = self.chunk(self.state, self.traced)
        jax.block_until_ready(m)
        return self.config.env_steps_per_chunk / (time.perf_counter() - t)


def main(args: Args) -> dict:
    contenders: dict[str, object] = {}
    notes = []
    for task in args.tasks:
        contenders[f"ours {task}"] = Ours(task, args.num_envs, args.steps)
        if args.envpool:
            try:
                contenders[f"envpool {task}"] = EnvPool(task, args.num_envs, args.steps)
            except ImportError:
                notes.append("EnvPool is not installed (pip install -e '.[bench]'): its columns are skipped")
                args.envpool = False
    if "Hopper-v4" in args.tasks:
        if args.mjx:  # the same model on MJX, and Brax's own hopper model on MJX
            contenders["mjx Hopper-v4"] = Ours("Hopper-v4", args.num_envs, args.mjx_steps, backend="mjx")
            contenders["mjx hopper (Brax)"] = Ours("hopper", args.num_envs, args.mjx_steps)
        contenders[f"ours Hopper-v4 @{args.train_envs}"] = Ours("Hopper-v4", args.train_envs, args.steps)
        contenders[f"training Hopper-v4 @{args.train_envs}"] = Training("Hopper-v4", args.train_envs)
    rates: dict[str, list[float]] = {k: [] for k in contenders}
    for r in range(args.rounds):
        for name, c in contenders.items():
            rates[name].append(c.time())
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()), flush=True)

    def ratio(a, b):
        if a not in rates or b not in rates:
            return None
        per_round = [x / y for x, y in zip(rates[a], rates[b])]
        return {"rounds": per_round, "median": statistics.median(per_round)}

    ratios = {}
    for task in args.tasks:
        ratios[f"ours / EnvPool, {task}"] = ratio(f"ours {task}", f"envpool {task}")
    ratios["ours / MJX, Hopper-v4 (same model)"] = ratio("ours Hopper-v4", "mjx Hopper-v4")
    ratios["ours / MJX, Brax's hopper"] = ratio("ours Hopper-v4", "mjx hopper (Brax)")
    ratios[f"training / ours raw, Hopper-v4 @{args.train_envs}"] = ratio(
        f"training Hopper-v4 @{args.train_envs}", f"ours Hopper-v4 @{args.train_envs}")
    lines = [f"env steps/s, {args.num_envs} envs, {os.cpu_count()} threads, median of {args.rounds} rounds "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}):"]
    lines += [f"  {k:<32} {statistics.median(v):>10,.0f}   rounds: {', '.join(f'{x:,.0f}' for x in v)}"
              for k, v in rates.items()]
    lines += ["ratios (per round; median):"]
    lines += [f"  {k:<40} {v['median']:6.2f}   rounds: {', '.join(f'{x:.2f}' for x in v['rounds'])}"
              for k, v in ratios.items() if v is not None]
    lines += notes
    print("\n".join(lines))
    record = {"args": dataclasses.asdict(args), "rates": rates, "ratios": ratios, "report": "\n".join(lines)}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    return record


if __name__ == "__main__":
    from vaco_jax.driver.cli import parse_args

    main(parse_args(Args))
