"""Lesson 7's TRL section: the same task through ``trl.GRPOTrainer`` (1.16) and the scaling-out checks.

* ``step0_agreement``: one rollout batch sampled by the lesson's ``sample_group`` is handed unchanged to a real
  ``GRPOTrainer``'s ``_compute_loss`` (same model, same advantages, same old log-probs) and compared with the
  lesson's ``grpo_step`` epoch-0 loss for loss_type grpo / bnpo / dr_grpo / dapo, with and without beta.
* ``train_with_trl``: ``GRPOTrainer.train()`` on CPU (``use_vllm=False``) from the same SFT warm start with the
  course verifier as reward function; returns its logged metrics per step under the lesson's names.
* ``check_accelerate_configs``: loads ``environments/accelerate/*.yaml`` with accelerate's own config parser.
"""
from __future__ import annotations

import copy
import os
import tempfile
import time
import warnings
from pathlib import Path

TRL_VERSION_WRITTEN_FOR = "1.16.0"

# lesson name -> TRL log key (GRPOTrainer's self._metrics["train"])
TRL_METRIC_NAMES = {
    "reward_mean": "reward", "reward_std": "reward_std", "frac_reward_zero_std": "frac_reward_zero_std",
    "completion_length": "completions/mean_length", "clip_ratio_low": "clip_ratio/low_mean",
    "clip_ratio_high": "clip_ratio/high_mean", "kl_ref": "kl", "entropy": "entropy",
}


def _quiet():
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)


def grpo_config(config=None, **overrides):
    """A GRPOConfig for CPU whose settings mirror an ``OnlineConfig`` (TRL's names map one to one)."""
    import torch
    from trl import GRPOConfig

    from tools.online_grpo import OnlineConfig

    config = config or OnlineConfig()
    base = dict(
        output_dir=os.path.join(tempfile.gettempdir(), "grpo-course-online-trl"),
        use_cpu=not torch.cuda.is_available(), report_to="none",
        save_strategy="no", logging_steps=1, disable_tqdm=True,
        per_device_train_batch_size=config.prompts_per_step * config.num_generations, gradient_accumulation_steps=1,
        num_generations=config.num_generations, num_iterations=config.num_iterations, loss_type=config.loss_type,
        epsilon=config.epsilon, epsilon_high=config.epsilon_high, beta=config.beta, temperature=config.temperature,
        top_p=config.top_p, top_k=0, max_completion_length=config.max_new_tokens, learning_rate=config.learning_rate,
        lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=config.max_grad_norm, weight_decay=0.01,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, seed=config.seed, use_vllm=False,
        scale_rewards="group", log_completions=False, shuffle_dataset=True, bf16=False, fp16=False,  # TRL defaults to bf16 autocast
    )
    base.update(overrides)
    return GRPOConfig(**base)


def course_reward(completions, answer, **kwargs):
    """The course verifier as a TRL reward function (integer-answer-v1 total reward)."""
    from tools.online_grpo import strict_rewards

    return strict_rewards(completions, answer)


def _dataset(problems, tokenizer):
    from datasets import Dataset

    from tools.online_grpo import chat_prompt

    return Dataset.from_list([{"prompt": chat_prompt(tokenizer, p["prompt"]), "answer": p["answer"]}
                              for p in problems])


def make_trainer(model, tokenizer, problems, args):
    from trl import GRPOTrainer

    _quiet()
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.padding_side = "left"
    from transformers import PrinterCallback

    trainer = GRPOTrainer(model=model, reward_funcs=[course_reward], args=args,
                          train_dataset=_dataset(problems, tokenizer), processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)  # the log is read from trainer.state.log_history instead
    return trainer


SETTINGS = [
    {"loss_type": "grpo", "beta": 0.0}, {"loss_type": "bnpo", "beta": 0.0}, {"loss_type": "dr_grpo", "beta": 0.0},
    {"loss_type": "dapo", "beta": 0.0}, {"loss_type": "grpo", "beta": 0.04}, {"loss_type": "dapo", "beta": 0.04},
    # off-policy: old log-probs shifted by a fixed perturbation, so ratios leave the clip range (as in epoch 2+ of mu)
    {"loss_type": "grpo", "beta": 0.0, "off_policy": True}, {"loss_type": "dapo", "beta": 0.04, "off_policy": True,
                                                             "epsilon_high": 0.28},
]


def step0_agreement(sample_group, grpo_step, model, tokenizer, problems, settings=SETTINGS, num_generations=4,
                    prompts=4, temperature=1.0, max_new_tokens=6, seed=3) -> list[dict]:
    """Step-0 loss of the lesson's grpo_step vs TRL's GRPOTrainer._compute_loss on one identical batch.

    The batch is sampled once by ``sample_group`` (with the warm start as reference model, so beta > 0 has a
    reference); advantages are the lesson's group advantages with a small spread added so no group is
    degenerate. Both sides see the same weights (fresh deep copies), the same tensors and the same settings.
    """
    import torch

    from tools.lessons.nb01_group_advantages import compute_group_advantages
    from tools.online_grpo import OnlineConfig, strict_rewards

    torch.manual_seed(seed)
    batch = problems[:prompts]
    ref_model = copy.deepcopy(model).eval()
    rollout = sample_group(model, tokenizer, [p["prompt"] for p in batch], num_generations, temperature=temperature,
                           max_new_tokens=max_new_tokens, seed=seed, ref_model=ref_model)
    answers = [p["answer"] for p in batch for _ in range(num_generations)]
    rewards = torch.tensor(strict_rewards(rollout["completions"], answers), dtype=torch.float32)
    rewards = rewards + torch.linspace(0.0, 0.35, rewards.numel())  # no degenerate group, deterministic
    advantages = compute_group_advantages(rewards, rollout["group_ids"].cpu())  # [N]
    shift = 0.4 * torch.randn(rollout["old_per_token_logps"].shape, generator=torch.Generator().manual_seed(seed))
    off_policy_old = (rollout["old_per_token_logps"] + shift).masked_fill(~rollout["completion_mask"], 0.0)  # [N, C]
    rows = []
    for setting in settings:
        setting = dict(setting)
        off_policy = setting.pop("off_policy", False)
        config = OnlineConfig(num_generations=num_generations, prompts_per_step=prompts, temperature=temperature,
                              max_new_tokens=max_new_tokens, **setting)
        batch_rollout = dict(rollout, old_per_token_logps=off_policy_old) if off_policy else rollout
        ours_model = copy.deepcopy(model)
        ours = grpo_step(ours_model, torch.optim.SGD(ours_model.parameters(), lr=0.0), batch_rollout, advantages,
                         num_iterations=1, epsilon=config.epsilon, epsilon_high=config.epsilon_high, beta=config.beta,
                         loss_type=config.loss_type, temperature=temperature, max_completion_length=max_new_tokens)
        trl_model = copy.deepcopy(model)
        trainer = make_trainer(trl_model, tokenizer, problems, grpo_config(config, max_steps=1))
        inputs = {
            "prompt_ids": rollout["prompt_ids"], "prompt_mask": rollout["prompt_mask"].long(),
            "completion_ids": rollout["completion_ids"], "completion_mask": rollout["completion_mask"].long(),
            "advantages": advantages, "old_per_token_logps": batch_rollout["old_per_token_logps"],
            "ref_per_token_logps": rollout["ref_per_token_logps"],
            "num_items_in_batch": rollout["completion_mask"].sum().float(),
        }
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer.training_step during train(); one step here
        with torch.no_grad():
            trl_loss = float(trainer._compute_loss(trl_model, inputs))
        rows.append({"loss_type": config.loss_type, "beta": config.beta, "epsilon_high": config.epsilon_high,
                     "off_policy": off_policy, "clip_ratio_high": ours["clip_ratio_high"],
                     "clip_ratio_low": ours["clip_ratio_low"], "course_loss": ours["losses"][0],
                     "trl_loss": trl_loss, "abs_diff": abs(ours["losses"][0] - trl_loss)})
    return rows


def agreement_table(rows) -> str:
    return ("| loss_type | beta | ε_high | 旧对数概率 | 裁剪比例 low / high | 本课 grpo_step 第 0 轮 | TRL `_compute_loss` | 差 |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- |\n"
            + "\n".join(f"| {r['loss_type']} | {r['beta']} | {r['epsilon_high']} | {'扰动（离策略）' if r['off_policy'] else '采样时'} | "
                        f"{r['clip_ratio_low']:.3f} / {r['clip_ratio_high']:.3f} | {r['course_loss']:.8f} | "
                        f"{r['trl_loss']:.8f} | {r['abs_diff']:.2e} |" for r in rows))


def train_with_trl(model_path, config, problems, max_steps: int = 30) -> dict:
    """``GRPOTrainer.train()`` for ``max_steps`` steps from ``model_path``; its per-step log under our names."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet()
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=Path(str(model_path)).is_dir())
    model = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=Path(str(model_path)).is_dir())
    torch.manual_seed(config.seed)
    trainer = make_trainer(model, tokenizer, problems, grpo_config(config, max_steps=max_steps))
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    steps = []
    for entry in trainer.state.log_history:
        if "step" not in entry or "reward" not in entry:
            continue
        row = {"step": int(entry["step"]) - 1}
        for ours, theirs in TRL_METRIC_NAMES.items():
            row[ours] = entry.get(theirs)
        row["loss"] = entry.get("loss")
        steps.append(row)
    return {"steps": steps, "seconds": round(seconds, 3), "max_steps": max_steps}


def comparison_table(trl_run, record) -> str:
    """Mean of each metric over the first ``max_steps`` steps: the hand-written loop vs GRPOTrainer."""
    n = len(trl_run["steps"])
    ours = record["steps"][:n]
    lines = [f"前 {n} 步的平均（TRL 训练 {trl_run['seconds']:.1f} s）：", "",
             "| 指标 | 本课循环 | TRL GRPOTrainer |", "| --- | --- | --- |"]

    def mean(rows, key):
        values = [r[key] for r in rows if r.get(key) is not None]
        return "—" if not values else f"{sum(values) / len(values):.4f}"

    for key in TRL_METRIC_NAMES:
        lines.append(f"| `{key}` | {mean(ours, key)} | {mean(trl_run['steps'], key)} |")
    return "\n".join(lines)


def plot_comparison(trl_run, record) -> bytes:
    from tools.online_grpo import plot_steps

    n = len(trl_run["steps"])
    return plot_steps(None, title="hand-written loop vs trl.GRPOTrainer (same task, same warm start)",
                      others={"course loop": record["steps"][:max(n, 1)], "trl GRPOTrainer": trl_run["steps"]})


def check_accelerate_configs(folder) -> list[dict]:
    """Load every ``*.yaml`` under ``folder`` with accelerate's own parser (``load_config_from_file``)."""
    from accelerate.commands.config.config_args import load_config_from_file

    rows = []
    for path in sorted(Path(folder).glob("*.yaml")):
        cfg = load_config_from_file(str(path))
        deepspeed = getattr(cfg, "deepspeed_config", None) or {}
        rows.append({"file": path.name, "distributed_type": str(cfg.distributed_type).split(".")[-1],
                     "num_processes": cfg.num_processes, "mixed_precision": str(cfg.mixed_precision),
                     "zero_stage": deepspeed.get("zero_stage", "—")})
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
            lines.append(f"GRPOConfig(use_vllm=True, vllm_mode={cfg.vllm_mode!r}) 可以构造："
                         f"vllm_gpu_memory_utilization={cfg.vllm_gpu_memory_utilization}，"
                         f"vllm_server_host={getattr(cfg, 'vllm_server_host', None)!r}（未启动 vLLM，本机未测量）")
        except Exception as error:  # noqa: BLE001 - report, do not hide
            lines.append(f"GRPOConfig(use_vllm=True, vllm_mode={mode!r}) 构造失败：{type(error).__name__}: {error}")
    return "\n".join(lines)
