"""Lesson 7's scaling-out section, checked on the CPU: the accelerate configurations under
``environments/accelerate/`` loaded with accelerate's own parser, and the ``GRPOConfig`` one would use with vLLM
generation (constructed only; nothing is launched).
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
