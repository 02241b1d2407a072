"""The evidence issue's decision rule: a verdict per claim from a run directory's scores (vaco_jax/analysis/claims.py).

Reads the score rows (and curves, for the per-phase cost) of one run directory or several (merged) and
writes ``claims.csv``: one row per claim and per part of a claim, with its statistic, point estimate,
95% bootstrap CI, the runs and tasks it rests on, the verdict (holds / fails / inconclusive / no data)
and why. No training, no jax.

    python experiments/claims.py runs/lag_sweep_paper
    python experiments/claims.py runs/part0 runs/part1 --out results/claims.csv
    python experiments/claims.py --study results/study --out results/claims.csv   # experiments/study.py's layout

``--score auc_eval_return``: verdicts on the area under the evaluation curve instead of the final
evaluation return (the secondary reading, for tasks whose final return saturates).

``--study DIR``: the study's run directories (one per design); each claim reads only the designs
that hold its methods (``vaco_jax.analysis.claims.STUDY_SOURCES``).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> list[dict]:
    from vaco_jax.analysis import claims
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="*", metavar="run_dir", help="run directory; several are merged")
    parser.add_argument("--study", default=None, help="the study's directory (experiments/study.py), instead")
    parser.add_argument("--out", default=None, help="CSV to write (default: RUN_DIR/claims.csv of the first)")
    parser.add_argument("--bootstrap-reps", type=int, default=claims.REPS, help="bootstrap replicates per CI")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap RNG seed")
    parser.add_argument("--score", default=claims.SCORE, choices=claims.SCORES,
                        help="the per-run score the verdicts rest on (default: the final evaluation return)")
    args = parser.parse_args(argv)
    from vaco_jax.analysis.results import run_dirs_problem

    if args.bootstrap_reps < 1:
        parser.error("--bootstrap-reps must be >= 1")
    if args.study is not None:
        if args.run_dirs:
            parser.error("give run directories or --study, not both")
        if not os.path.isdir(args.study):
            parser.error(f"--study {args.study}: no such directory")
        out = args.out or os.path.join(args.study, "claims.csv")
        table = claims.evaluate_study(args.study, reps=args.bootstrap_reps, seed=args.seed, out=out,
                                      score=args.score)
        for row in table:
            print(f"{row['claim']:>3}  {row['verdict']:<12}  {row['statement']}")
        print(f"wrote {out}")
        return table
    if not args.run_dirs:
        parser.error("give at least one run directory, or --study DIR")
    problem = run_dirs_problem(args.run_dirs)
    if problem:
        parser.error(problem)
    out = args.out or os.path.join(args.run_dirs[0], "claims.csv")
    table = claims.evaluate(args.run_dirs, reps=args.bootstrap_reps, seed=args.seed, out=out, score=args.score)
    for row in table:
        print(f"{row['claim']:>3}  {row['verdict']:<12}  {row['statement']}")
    print(f"wrote {out}")
    return table


def cli() -> None:
    """The command line (`experiments/claims.py`, `python -m vaco_jax claims`)."""
    from vaco_jax.analysis.results import EXIT_DAMAGED, ResultsError

    try:
        main()
    except ResultsError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_DAMAGED)


if __name__ == "__main__":
    cli()
