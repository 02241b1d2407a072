#!/bin/bash
# The paper lag sweep split into N shards, one SLURM array job each (docs/scale.md).
#
#   mkdir -p runs/slurm && sbatch experiments/slurm_array.sh     # from the repository root
#
# (runs/slurm must exist before the jobs start: SLURM opens the --output files first.)
#
# Job I of the array runs shard I/N (0-based: the array is 0..N-1) and writes only its own files
# into runs/paper (runs/paper/run.shard-I-of-N.json, runs/paper/TASK/METHOD/shard-I-of-N/), so
# all jobs write into the one directory at once. A job that hits its time limit is resumed by
# resubmitting it (e.g. sbatch --array=5 experiments/slurm_array.sh): it continues from its last
# checkpoint. When every job has finished, merge (runs nothing; writes the summaries and figures):
#
#   python experiments/lag_sweep.py --preset paper --out runs/paper
#   # or: python experiments/plot.py runs/paper
#
# N must not exceed the study's number of cells (the plan prints it); keep N and the --array range
# in step, and give every job the same flags (a shard planned with other cells is refused).

# --array: 0..N-1 with N = 16 below. --gres: one accelerator per shard. --output: %A is the array's
# job id, %a this task's index. (Comments stay on their own lines: sbatch reads #SBATCH lines whole.)
#SBATCH --job-name=lag_sweep
#SBATCH --array=0-15
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=24:00:00
#SBATCH --output=runs/slurm/lag_sweep_%A_%a.out

set -euo pipefail
# the number of shards: the --array range above is 0..N-1
N=16

# the environment the project is installed in, e.g.:
# source .venv/bin/activate

python experiments/lag_sweep.py --preset paper --no-progress \
    --shard "${SLURM_ARRAY_TASK_ID}/${N}" --out runs/paper
