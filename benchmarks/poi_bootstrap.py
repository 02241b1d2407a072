"""The bootstrap of P(A > X) two ways, side by side: every resampled pair compared, and the draw counts.

    python -m benchmarks.poi_bootstrap                      # 10 runs a side, 3 tasks, 2,000 replicates
    python -m benchmarks.poi_bootstrap --runs 30 --tasks 2 --rounds 5

Each round times, one after the other on the same scores and seed, ``rules.replicates([a, x], rules._poi,
...)`` (the ``[reps, runs, runs, tasks]`` comparison of the resampled runs) and ``rules.poi_replicates``
(the same draw as counts, a pair relation per task); it checks the two give the same floats and prints
each round's seconds per call and their ratio, then the median ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from vaco_jax.analysis import rules


def _seconds(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main(argv=None) -> list[float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="runs of each method (default 10, stage 2's seeds)")
    ap.add_argument("--tasks", type=int, default=3, help="tasks (default 3)")
    ap.add_argument("--reps", type=int, default=rules.REPS, help=f"replicates (default {rules.REPS})")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    ap.add_argument("--calls", type=int, default=20, help="calls per timing (default 20)")
    args = ap.parse_args(argv)
    for name in ("runs", "tasks", "reps", "rounds", "calls"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be a positive integer; got {getattr(args, name)}")
    rng = np.random.default_rng(0)
    a = np.round(rng.normal(1.0, 0.3, (args.runs, args.tasks)), 2)  # two decimals: some ties, as scores have
    x = np.round(rng.normal(0.9, 0.3, (args.runs, args.tasks)), 2)
    pairwise = lambda: rules.replicates([a, x], rules._poi, args.reps, rules.SEED)
    counts = lambda: rules.poi_replicates(a, x, args.reps, rules.SEED)
    if pairwise().tolist() != counts().tolist():
        raise SystemExit("error: the two bootstraps differ; the timing would compare different computations")
    ratios = []
    for k in range(args.rounds):
        slow, fast = _seconds(pairwise, args.calls), _seconds(counts, args.calls)
        ratios.append(slow / fast)
        print(f"round {k + 1}: every pair {slow * 1e3:.2f} ms, draw counts {fast * 1e3:.2f} ms per call: "
              f"{slow / fast:.1f}x")
    print(f"median ratio {statistics.median(ratios):.1f}x ({args.runs} runs a side, {args.tasks} tasks, "
          f"{args.reps} replicates; the same floats)")
    return ratios


if __name__ == "__main__":
    main()
