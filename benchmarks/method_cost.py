"""Per-phase cost of every method relative to PPO-Clip at the same batch (issue: corrections).

Two timings per method, both steady state (after a compile call), median of ``repeats``:

* ``learner``: align (values, pi_T, old logits, advantages) + E x M gradient steps on one fixed
  trajectory batch — the part the methods differ in;
* ``phase``: a whole phase (rollout with lagged actors + learner + publish), from ``run_chunk``.

The trajectory batch comes from real lagged actors at lag depth ``--lag-depth`` after a few
phases, so snapshot recovery has several versions to gather from.

    python benchmarks/method_cost.py                    # all methods, inverted_double_pendulum
    python benchmarks/method_cost.py --methods ppo_clip vaco a3po --num-envs 256
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vaco_jax.core.config import Config  # noqa: E402
from vaco_jax.core.methods import METHODS  # noqa: E402
from vaco_jax.driver.program import learner_call  # noqa: E402


@dataclasses.dataclass
class Args:
    """Per-phase cost of each method relative to PPO-Clip, at one lagged batch."""

    env: str = "inverted_double_pendulum"  # task whose lagged batch is timed
    methods: tuple[str, ...] = tuple(METHODS) + ("a3po+infer",)  # '+infer': old_logit_source='infer'
    num_envs: int = 64  # parallel envs (batch = num_envs x unroll_length)
    unroll_length: int = 32  # env steps per env per phase
    num_epochs: int = 4  # epochs per phase E
    num_minibatches: int = 4  # minibatches per epoch M
    lag_depth: int = 8  # policy-lag depth B of the timed batch
    phases: int = 4  # phases per timed chunk
    repeats: int = 5  # timed rounds; medians are reported
    out: str = "runs/benchmarks/method_cost.json"  # JSON output
    learner_diagnostics: bool = True  # False: the TV-to-pi_T diagnostic off, so pi_T is computed only where read


def _time(fn, repeats):
    jax.block_until_ready(fn())  # compile / warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(args: Args, name: str) -> dict:
    method, _, source = name.partition("+")
    config = Config(env=args.env, method=method, old_logit_source=source or None, num_envs=args.num_envs,
                    unroll_length=args.unroll_length, num_epochs=args.num_epochs,
                    num_minibatches=args.num_minibatches, buffer_capacity=max(args.lag_depth, 1),
                    total_env_steps=args.num_envs * args.unroll_length * args.phases, num_evals=1,
                    eval_episodes=0)
    learner, phase, compile_s = learner_call(config, args.lag_depth, learner_diagnostics=args.learner_diagnostics)
    phase_s = _time(phase, args.repeats) / config.phases_per_chunk
    learner_s = _time(learner, args.repeats * 4)
    return {"method": name, "learner_ms": 1e3 * learner_s, "phase_ms": 1e3 * phase_s,
            "first_chunk_s_incl_compile": compile_s}


def main(args: Args) -> dict:
    rows = []
    for name in args.methods:
        row = measure(args, name)
        rows.append(row)
        print(f"{name:<22} learner {row['learner_ms']:8.2f} ms   phase {row['phase_ms']:8.2f} ms", flush=True)
    base = next(r for r in rows if r["method"] == "ppo_clip") if any(r["method"] == "ppo_clip" for r in rows) \
        else rows[0]
    for r in rows:
        r["learner_vs_ppo_clip"] = r["learner_ms"] / base["learner_ms"]
        r["phase_vs_ppo_clip"] = r["phase_ms"] / base["phase_ms"]
    cmd = "python " + " ".join(sys.argv)
    print(f"\n{cmd}\n{time.strftime('%Y-%m-%d')}, {platform.node()}, jax {jax.__version__}, {jax.devices()[0]}, "
          f"{os.cpu_count()} CPUs; {args.env}, {args.num_envs} envs x {args.unroll_length} steps, "
          f"E={args.num_epochs} M={args.num_minibatches}, lag depth {args.lag_depth}")
    print("| method | learner ms/phase | vs ppo_clip | whole phase ms | vs ppo_clip |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['learner_ms']:.2f} | {r['learner_vs_ppo_clip']:.2f}x | {r['phase_ms']:.2f} | "
              f"{r['phase_vs_ppo_clip']:.2f}x |")
    result = {"command": cmd, "date": time.strftime("%Y-%m-%d"), "jax": jax.__version__,
              "device": str(jax.devices()[0]), "args": dataclasses.asdict(args), "rows": rows}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, args.out)
    return result


if __name__ == "__main__":
    from vaco_jax.driver.cli import parse_args

    main(parse_args(Args))
