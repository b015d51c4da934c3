"""Lesson 7's scaling-out section, checked on the CPU: the accelerate configurations under
``environments/accelerate/`` loaded with accelerate's own parser, how each differs from the two-process CPU run that
did run here (``scaling_comparison``: the one home of what each configuration exercises here and what it does not),
and the ``GRPOConfig`` one would use with vLLM generation (constructed only; nothing is launched).
"""

from __future__ import annotations

from pathlib import Path

from tools.online.trl_trainer import grpo_config


def check_accelerate_configs(folder) -> list[dict]:
    """Load every ``*.yaml`` under ``folder`` with accelerate's own parser (``load_config_from_file``)."""
    from accelerate.commands.config.config_args import load_config_from_file

    rows = []
    for path in sorted(Path(folder).glob("*.yaml")):
        cfg = load_config_from_file(str(path))
        deepspeed = getattr(cfg, "deepspeed_config", None) or {}
        rows.append(
            {
                "file": path.name,
                "distributed_type": str(cfg.distributed_type).split(".")[-1],
                "num_processes": cfg.num_processes,
                "mixed_precision": str(cfg.mixed_precision),
                "zero_stage": deepspeed.get("zero_stage", "—"),
            }
        )
    if not rows:
        raise FileNotFoundError(f"{folder} 下没有 accelerate 配置")
    return rows


# What the GPU configurations would add to the CPU run, by accelerate's distributed type: the backend accelerate (or
# DeepSpeed) chooses on CUDA, and what of the configuration has run here. Not measured: this machine has no GPU.
NOT_RUN_HERE = {
    "MULTI_GPU": {
        "backend": "nccl（CUDA 上 accelerate 的选择，未运行）",
        "shared": "DDP 的梯度 all-reduce、全局批次按进程切分、各 loss_type 的归一化（与 CPU 运行同一段代码）",
        "not_run": "CUDA、NCCL 通信、bf16 混合精度",
    },
    "DEEPSPEED": {
        "backend": "nccl（DeepSpeed 的默认，未运行）",
        "shared": "全局批次按进程切分、各 loss_type 的归一化",
        "not_run": "DeepSpeed 本身（本机未安装）与 ZeRO 的切分、CUDA、NCCL、bf16、8 个进程",
    },
}
CPU_RUN_EXERCISES = (
    "GRPOTrainer.train() 的多进程运行、DDP 梯度 all-reduce（各进程权重哈希相同）、批次切分、按 loss_type 的归一化"
)


def scaling_comparison(config_rows, record) -> str:
    """A Markdown table: the two-process CPU run (``record``, the online-multiprocess/v1 record: its distributed type,
    backend, process count and mixed precision as the ranks reported them) beside each accelerate configuration
    (``check_accelerate_configs`` rows), with what each has run here and what it has not (NOT_RUN_HERE)."""
    dist = record["training"]["distributed"]
    lines = [
        "| 运行 / 配置 | distributed_type | 进程数 | mixed_precision | 通信后端 | ZeRO | 在本机运行过（或与 CPU 运行共用）的部分 | 没有运行过的部分 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| CPU 运行（`{record['run_label']}` 记录） | {dist['distributed_type']} | {dist['num_processes']} | "
        f"{dist['mixed_precision']} | {dist['backend']} | — | {CPU_RUN_EXERCISES} | GPU |",
    ]
    for row in config_rows:
        known = NOT_RUN_HERE.get(row["distributed_type"])
        if known is None:
            raise ValueError(f"{row['file']}: 没有说明 distributed_type {row['distributed_type']} 在本机运行过什么")
        lines.append(
            f"| `{row['file']}` | {row['distributed_type']} | {row['num_processes']} | {row['mixed_precision']} | "
            f"{known['backend']} | {row['zero_stage']} | {known['shared']} | {known['not_run']} |"
        )
    return "\n".join(lines)


def vllm_grpo_config(mode: str = "colocate"):
    """The GRPOConfig one would use with vLLM generation (constructed only; nothing is launched here)."""
    return grpo_config(None, use_vllm=True, vllm_mode=mode, max_steps=1)


def describe_vllm_config() -> str:
    lines = []
    for mode in ("colocate", "server"):
        try:
            cfg = vllm_grpo_config(mode)
            lines.append(
                f"GRPOConfig(use_vllm=True, vllm_mode={cfg.vllm_mode!r}) 可以构造："
                f"vllm_gpu_memory_utilization={cfg.vllm_gpu_memory_utilization}，"
                f"vllm_server_host={getattr(cfg, 'vllm_server_host', None)!r}（未启动 vLLM，本机未测量）"
            )
        except Exception as error:  # noqa: BLE001 - report, do not hide
            lines.append(f"GRPOConfig(use_vllm=True, vllm_mode={mode!r}) 构造失败：{type(error).__name__}: {error}")
    return "\n".join(lines)
