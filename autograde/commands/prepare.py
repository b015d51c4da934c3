"""``python -m autograde.pipeline prepare`` (``make setup``): the checkpoints the grading kernels load, built once."""

from __future__ import annotations

from autograde.grpo_grader.course import GradingPipeline, prepare_kernel_files


def prepare(settings: GradingPipeline) -> int:
    try:
        prepare_kernel_files(settings)
    except ImportError as error:
        print(f"[prepare] 跳过：当前环境没有 {error.name}（skipped: this profile lacks {error.name}）")
        return 0
    print("[prepare] 评分内核所需的检查点已就绪（the grading kernels' checkpoints are ready）")
    return 0
