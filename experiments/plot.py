"""Regenerate every figure of a run directory from the files on disk (docs/evaluation.md).

Re-runs ``analysis.summarise`` (so summary.csv / diagnostics.csv include every finished group),
then draws each figure whose data exists into RUN_DIR/figures/ (PNG and PDF) and prints the paths.

    python experiments/plot.py runs/lag_sweep_cpu
    python experiments/plot.py runs/lag_sweep_cpu --no-summarise      # use the existing summary.csv
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="run directory written by experiments/lag_sweep.py (or another study)")
    parser.add_argument("--no-summarise", dest="summarise", action="store_false",
                        help="do not re-run analysis.summarise; draw from the existing summary.csv")
    parser.add_argument("--bootstrap-reps", type=int, default=None,
                        help="bootstrap replicates for the CIs (default: the run's own setting, else 2000)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.run_dir):
        parser.error(f"{args.run_dir} is not a directory")

    from vaco_jax import plots

    paths = plots.make_all(args.run_dir, summarise=args.summarise, reps=args.bootstrap_reps)
    print(f"{len(paths)} figure files in {os.path.join(args.run_dir, plots.FIGURES)}:")
    for p in paths:
        print(f"  {p}")
    return paths


if __name__ == "__main__":
    main()
