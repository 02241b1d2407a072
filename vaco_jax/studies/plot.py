"""Regenerate every figure of a run directory from the files on disk (docs/evaluation.md).

Re-runs ``tables.summarise`` (so summary.csv / diagnostics.csv include every finished group),
then draws each figure whose data exists into RUN_DIR/figures/ (PNG and PDF) and prints the paths.
Several run directories are merged (docs/scale.md: the shards of a sweep written into separate
directories); the tables and figures go into the first one, or ``--out``. The shards of a sweep
written into one directory are found in it (``GROUP/shard-I-of-N/``) without listing them.

    python experiments/plot.py runs/lag_sweep_demo
    python experiments/plot.py runs/lag_sweep_demo --no-summarise      # use the existing summary.csv
    python experiments/plot.py runs/part0 runs/part1 --out runs/merged
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", metavar="run_dir",
                        help="run directory written by experiments/lag_sweep.py (or another study); several "
                             "are merged")
    parser.add_argument("--out", default=None,
                        help="where summary.csv, diagnostics.csv and figures/ go (default: the first run_dir)")
    parser.add_argument("--no-summarise", dest="summarise", action="store_false",
                        help="do not re-run tables.summarise; draw from the existing summary.csv")
    parser.add_argument("--bootstrap-reps", type=int, default=None,
                        help="bootstrap replicates for the CIs (default: the run's own setting, else 2000)")
    args = parser.parse_args(argv)
    from vaco_jax.analysis.results import run_dirs_problem

    problem = run_dirs_problem(args.run_dirs)
    if problem:
        parser.error(problem)
    if not args.summarise and (len(args.run_dirs) > 1 or args.out):
        parser.error("--no-summarise draws from one existing summary.csv: give one run_dir and no --out")
    out = args.out or args.run_dirs[0]

    from vaco_jax.analysis import figures
    paths = figures.make_all(args.run_dirs, summarise=args.summarise, reps=args.bootstrap_reps, out=out)
    print(f"{len(paths)} figure files in {os.path.join(out, figures.FIGURES)}:")
    for p in paths:
        print(f"  {p}")
    return paths


def cli() -> None:
    """The command line (`experiments/plot.py`, `python -m vaco_jax plot`)."""
    from vaco_jax.analysis.results import EXIT_DAMAGED, ResultsError

    try:
        main()
    except ResultsError as e:  # a damaged file, or a cell in two of the directories: one line, exit code 3
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_DAMAGED)


if __name__ == "__main__":
    cli()
