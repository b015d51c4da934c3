"""Lesson 7's task trained by ``GRPOTrainer.train()`` itself.

``train_with_trl``: a short TRL run from the SFT warm start (on CPU, ``use_vllm=False``) with the course verifier as
reward function (``course_reward``), its logged metrics per step under the lesson's names (``TRL_METRIC_NAMES``);
``comparison_table`` / ``plot_comparison`` set them beside the hand-written loop's. ``trl_seed_entry`` /
``trl_seeds_summary``: the committed multi-seed record of the TRL trainer (label ``record.TRL_SEEDS_LABEL``),
evaluated on the held-out prompts exactly as the course loop is.
"""

from __future__ import annotations

import time
from pathlib import Path

from tools.online.config import preset_dtype, preset_lora_config
from tools.online.evaluation import evaluate, evaluation_seed
from tools.online.figures import plot_steps
from tools.online.record import (
    SEEDS_SCHEMA_VERSION,
    framework_versions,
    hardware_snapshot,
    resolve_root,
    utc_now,
)
from tools.online.seeds import heldout_statistics
from tools.online.task import heldout_groups, split_problems, strict_rewards
from tools.online.trl_trainer import grpo_config, make_trainer, quiet
from tools.online.warm_start import content_hash, load_policy, sft_checkpoint_path
from tools.project_runtime import check_run_label

# lesson name -> TRL log key (GRPOTrainer's self._metrics["train"])
TRL_METRIC_NAMES = {
    "reward_mean": "reward",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "completion_length": "completions/mean_length",
    "clip_ratio_low": "clip_ratio/low_mean",
    "clip_ratio_high": "clip_ratio/high_mean",
    "kl_ref": "kl",
    "entropy": "entropy",
}


def course_reward(verify, format_weight: float):
    """The course verifier as a TRL reward function (integer-answer-v1 total reward with ``format_weight``, the run's
    OnlineConfig.format_weight); ``verify`` is nb04's
    ``verify_integer_response``, passed in by the lesson or the command line (this runtime never imports
    ``tools.lessons``)."""

    def integer_answer_v1(completions, answer, **kwargs):
        return strict_rewards(completions, answer, verify, format_weight=format_weight)

    return integer_answer_v1


def train_with_trl(model_path, config, problems, verify, max_steps: int = 30, mode: str = "tiny_cpu") -> dict:
    """``GRPOTrainer.train()`` for ``max_steps`` steps from ``model_path`` with ``verify`` (nb04's verifier) as the
    reward; its per-step log under our names. ``mode`` (a RUN_MODE): its dtype and, for real_gpu, its LoRA adapter,
    handed to TRL as ``peft_config`` (the same preset the course loop uses: RUN_PRESETS)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet()
    local = Path(str(model_path)).is_dir()
    dtype = preset_dtype(mode)
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=local)
    model = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=local, dtype=dtype)
    torch.manual_seed(config.seed)
    args = grpo_config(config, max_steps=max_steps, bf16=dtype == torch.bfloat16)
    trainer = make_trainer(
        model, tokenizer, problems, args, course_reward(verify, config.format_weight), preset_lora_config(mode)
    )
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
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
    return {
        "steps": steps,
        "seconds": round(seconds, 3),
        "max_steps": max_steps,
        "trainable_parameters": trainable,
        "total_parameters": sum(p.numel() for p in trainer.model.parameters()),
    }


def trl_seed_entry(config, verify, root=None) -> dict:
    """One seed of ``GRPOTrainer.train()`` on the lesson's task from the lesson's SFT warm start, evaluated on the
    held-out prompts exactly as the course loop is (``evaluate`` with ``verify``, nb04's verifier, which is also the
    reward; same samples per prompt, evaluation seeds from the run seed: ``evaluation_seed``):
    a ``seeds[]`` entry of the online-grpo-seeds/v2 summary, with the two evaluations and the held-out groups under
    ``_before`` / ``_after`` / ``_groups`` for ``trl_seeds_summary`` (which leaves them out of the entry)."""
    import torch

    quiet()
    started = time.perf_counter()
    root = Path(root) if root is not None else resolve_root()
    path, _, _ = sft_checkpoint_path(seed=0, root=root)
    model, tokenizer = load_policy(path)
    train, heldout = split_problems()
    eval_kwargs = dict(
        samples_per_prompt=config.eval_k,
        temperature=config.temperature,
        max_new_tokens=config.max_new_tokens,
        ks=tuple(k for k in (1, 2, 4, 8, 16) if k <= config.eval_k),
    )
    before = evaluate(model, tokenizer, heldout, verify, seed=evaluation_seed(config.seed, 0), **eval_kwargs)
    torch.manual_seed(config.seed)
    trainer = make_trainer(
        model,
        tokenizer,
        train,
        grpo_config(config, max_steps=config.num_steps),
        course_reward(verify, config.format_weight),
    )
    trainer.train()
    if trainer.state.global_step != config.num_steps:
        raise RuntimeError(f"GRPOTrainer ran {trainer.state.global_step} steps, not {config.num_steps}")
    trained = trainer.model.eval()
    after = evaluate(
        trained, tokenizer, heldout, verify, seed=evaluation_seed(config.seed, config.num_steps), **eval_kwargs
    )
    return {
        "seed": config.seed,
        "pass_at_1_before": before["pass_at_1"],
        "pass_at_1_after": after["pass_at_1"],
        "gain": round(after["pass_at_1"] - before["pass_at_1"], 6),
        "evaluation_seeds": [before["seed"], after["seed"]],
        "train_steps": trainer.state.global_step,
        "wall_seconds": round(time.perf_counter() - started, 3),
        "warm_start_hash": content_hash(path),
        "record": "trl.GRPOTrainer (no per-step record)",
        "outcomes_before": before["outcomes"],
        "outcomes_after": after["outcomes"],
        "_before": before,
        "_after": after,
        "_groups": heldout_groups(train, heldout),
    }


def trl_seeds_summary(label, config, entries) -> dict:
    """The online-grpo-seeds/v2 summary of ``trl_seed_entry`` results (``trainer``: what produced them); its held-out
    figures are ``heldout_statistics``, the course loop's (no transfer sets: the TRL seeds evaluate the held-out set
    only)."""

    seeds = [{k: v for k, v in e.items() if not k.startswith("_")} for e in entries]
    summary = {
        "schema_version": SEEDS_SCHEMA_VERSION,
        "run_label": check_run_label(label),
        "created_utc": utc_now(),
        "config": {k: v for k, v in config.to_dict().items() if k != "seed"},
        "trainer": f"trl.GRPOTrainer {framework_versions()['trl']} (grpo_config: the same settings)",
        "seeds": seeds,
        **heldout_statistics([e["_before"] for e in entries], [e["_after"] for e in entries], entries[0]["_groups"]),
        "framework": framework_versions(),
        "hardware": hardware_snapshot(),
    }
    return summary


def comparison_table(trl_run, record) -> str:
    """Mean of each metric over the first ``max_steps`` steps: the hand-written loop vs GRPOTrainer."""
    n = len(trl_run["steps"])
    ours = record["steps"][:n]
    lines = [
        f"前 {n} 步的平均（TRL 训练 {trl_run['seconds']:.1f} s）：",
        "",
        "| 指标 | 本课循环 | TRL GRPOTrainer |",
        "| --- | --- | --- |",
    ]

    def mean(rows, key):
        values = [r[key] for r in rows if r.get(key) is not None]
        return "—" if not values else f"{sum(values) / len(values):.4f}"

    for key in TRL_METRIC_NAMES:
        lines.append(f"| `{key}` | {mean(ours, key)} | {mean(trl_run['steps'], key)} |")
    return "\n".join(lines)


def plot_comparison(trl_run, record) -> bytes:
    n = len(trl_run["steps"])
    return plot_steps(
        None,
        title="hand-written loop vs trl.GRPOTrainer (same task, same warm start)",
        others={"course loop": record["steps"][: max(n, 1)], "trl GRPOTrainer": trl_run["steps"]},
    )
