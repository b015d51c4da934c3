#!/bin/bash
# Grade the class as a Slurm job array: task i of N grades shard i+1 of N (`make autograde SHARD=k/N`).
#
#   export GRPO_GRADING_SEED=$(cat /secure/grading_seed)     # every task draws the same cases
#   sbatch --array=0-7 --cpus-per-task=4 autograde/slurm_grade.sh   # from the course checkout (shared file system)
#   # once every task has finished, on one node:
#   make merge-shards && make feedback && make grades
#
# N is the array's size (SLURM_ARRAY_TASK_COUNT; SHARDS=N overrides it); ARGS="..." reaches `make autograde`
# (e.g. ARGS="--workers 4"). tests/test_slurm.py runs this script on a single-node cluster.
#SBATCH --job-name=grpo-autograde
set -euo pipefail
: "${SLURM_ARRAY_TASK_ID:?submit this script with sbatch --array=0-(N-1)}"
shards="${SHARDS:-${SLURM_ARRAY_TASK_COUNT:?no SLURM_ARRAY_TASK_COUNT: set SHARDS=N}}"
cd "${SLURM_SUBMIT_DIR:-.}"
exec make --no-print-directory autograde SHARD="$((SLURM_ARRAY_TASK_ID + 1))/${shards}" ARGS="${ARGS:-}"
