#!/bin/bash
# Grade the class on a Slurm cluster: a job array of N tasks (one shard each), then `make merge-shards` once
# the array has succeeded. Run from the course checkout, on a node that shares it with the compute nodes:
#   autograde/slurm/grade.sh 3                       # 3 shards, returns at once (squeue shows the jobs)
#   WAIT=1 autograde/slurm/grade.sh 3                # block until the merge has run (exit status = merge's)
#   COURSE=/path/to/autograde GRADE_ARGS="--workers 2" autograde/slurm/grade.sh 3   # another course folder
# Every task reads the grading seed as `make autograde` does (autograde/.grading_seed or GRPO_GRADING_SEED).
set -euo pipefail
cd "$(dirname "$0")/../.."
shards="${1:-3}"
if ! [[ "$shards" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N   (N shards, a positive integer; got '$shards')" >&2
  exit 2
fi
logs="${SLURM_LOG_DIR:-${COURSE:-autograde}/shards}"
mkdir -p "$logs"
course_args=""
if [ -n "${COURSE:-}" ]; then course_args="--course $COURSE"; fi
export GRPO_COURSE_ROOT="$PWD" GRADE_ARGS="$course_args ${GRADE_ARGS:-}"
array=$(sbatch --parsable --array=0-$((shards - 1)) --output="$logs/slurm-%A_%a.log" \
  autograde/slurm/autograde-array.sbatch)
array="${array%%;*}"
echo "[slurm] 作业数组 job array $array：$shards 个分片（shards）"
merge_args=(--parsable --job-name=grpo-merge --dependency="afterok:$array" --kill-on-invalid-dep=yes
  --output="$logs/slurm-merge-%j.log" --wrap "make merge-shards ARGS='$course_args'")
if [ -z "${WAIT:-}" ]; then
  merge=$(sbatch "${merge_args[@]}")
  echo "[slurm] 合并任务 merge job ${merge%%;*}：作业数组成功后运行 make merge-shards（once the array has succeeded）；" \
    "日志 log: $logs/slurm-merge-${merge%%;*}.log"
  exit 0
fi
status=0
merge=$(sbatch --wait "${merge_args[@]}") || status=$?
echo "[slurm] 合并任务 merge job ${merge%%;*} 结束，退出状态（exit status）$status；日志 log: $logs/slurm-merge-${merge%%;*}.log"
exit "$status"
