"""The settings of one online GRPO run and the RUN_MODE presets.

``OnlineConfig`` (TRL's names; checked once, when built, by ``check_config``; the command line's flags are its
fields), one preset per RUN_MODE (``RUN_PRESETS``: ``tiny_cpu``, ``smoke``, ``real_gpu``) with its dtype and LoRA
adapter (real_gpu's dtype and batch per card, ``preset``; the estimate of its memory), the policy a preset loads,
and the optimizer a run uses.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools import env_vars
from tools.experiment_settings import REAL_GPU_MODEL_ID, VERIFIER_ID, model_id_override  # noqa: F401 (re-exported)
from tools.loss_types import CLIPPED_LOSS_TYPES as LOSS_TYPES  # the --loss-type values (lesson 7's grpo_step)
from tools.online.task import REWARDS


def _setting(default, help: str):
    """A field of :class:`OnlineConfig`: its default and its help text, the one place both are written
    (``python -m tools.cli.online`` builds its flags from them)."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class OnlineConfig:
    """Settings of one online GRPO run (TRL's names). ``make online`` and the notebook use the same defaults; the
    command line's flags are these fields (``--num-steps`` ...), with the help texts below. Checked once, when built
    (``check_config``); frozen, so a built config stays valid (``dataclasses.replace`` makes a changed copy)."""

    num_steps: int = _setting(100, "rollout -> update rounds")
    prompts_per_step: int = _setting(16, "training prompts per rollout batch")
    num_generations: int = _setting(8, "G completions per prompt (TRL num_generations)")
    num_iterations: int = _setting(1, "mu: optimisation epochs per rollout batch (TRL num_iterations)")
    loss_type: str = _setting("grpo", f"TRL loss_type: {' | '.join(LOSS_TYPES)}")
    epsilon: float = _setting(0.2, "lower clip range (TRL epsilon)")
    epsilon_high: float = _setting(0.2, "upper clip range (TRL epsilon_high; 0.28 = DAPO clip-higher)")
    beta: float = _setting(0.0, "KL coefficient to the frozen reference (TRL beta)")
    temperature: float = _setting(1.0, "sampling temperature (TRL temperature)")
    top_p: float = _setting(1.0, "nucleus sampling (TRL top_p)")
    max_new_tokens: int = _setting(
        25, "completion length limit (TRL max_completion_length; the longest scratchpad and its EOS take 25)"
    )
    learning_rate: float = _setting(6e-4, "AdamW learning rate")
    max_grad_norm: float = _setting(1.0, "gradient clipping (TRL max_grad_norm)")
    seed: int = _setting(0, "sampling and batch-order seed (overridden by --seeds)")
    reward: str = _setting(
        VERIFIER_ID,
        f"the training reward: {' | '.join(REWARDS)} (the loophole verifier is the reward-hacking ablation's)",
    )
    format_weight: float = _setting(
        0.0,
        "integer-answer-v1's format bonus for a completion that is one integer alone (lesson 4's default is 0.1; "
        "it taxes a scratchpad, so the lesson trains on correctness only)",
    )
    eval_k: int = _setting(16, "samples per held-out prompt for pass@k / maj@k")
    eval_every: int = _setting(
        10,
        "held-out curve: evaluate held-out pass@1 (same evaluation as before/after) every N training steps; "
        "0 = only before and after. Sampling is seeded, so the training steps are the same with any N",
    )
    use_bias_correction_kl: bool = _setting(
        True,
        "TRL's option and default: the KL term times the ratio (matters "
        "when beta > 0); --no-use-bias-correction-kl gives the plain k3 KL",
    )

    def __post_init__(self):
        check_config(self)

    def to_dict(self) -> dict:
        return asdict(self)


def check_config(config: OnlineConfig) -> None:
    """Raise ValueError (Chinese) for a setting no run can use."""
    ints = {
        "num_steps": 0,
        "prompts_per_step": 1,
        "num_generations": 2,
        "num_iterations": 1,
        "max_new_tokens": 1,
        "eval_k": 1,
        "eval_every": 0,
    }
    for name, low in ints.items():
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} 必须是 >= {low} 的整数，收到 {value!r}")
    for name in ("epsilon", "epsilon_high", "temperature", "learning_rate", "max_grad_norm"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} 必须是正的有限数，收到 {value!r}")
    for name in ("beta", "format_weight"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} 必须是非负的有限数，收到 {value!r}")
    if not isinstance(config.use_bias_correction_kl, bool):
        raise ValueError(f"use_bias_correction_kl 必须是 True 或 False，收到 {config.use_bias_correction_kl!r}")
    if not 0 < config.top_p <= 1:
        raise ValueError(f"top_p 必须在 (0, 1] 内，收到 {config.top_p!r}")
    if config.loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type 必须是 {LOSS_TYPES} 之一，收到 {config.loss_type!r}")
    if config.reward not in REWARDS:
        raise ValueError(f"reward 必须是 {REWARDS} 之一，收到 {config.reward!r}")


# ----------------------------------------------------------------------------------------------- RUN_MODE presets
# One preset per RUN_MODE (the notebook and the tests read them here). real_gpu: Qwen2.5-0.5B-Instruct without a
# warm start, LoRA on the attention projections only (the base weights stay frozen, AdamW keeps state for the adapter
# only), a learning rate within TRL's range (GRPOConfig's default 1e-6 is for full fine-tuning; LoRA adapters are
# usually trained about ten times faster). Its dtype and batch depend on the card (``preset``):
# * a card with native bf16 (sm >= 80): bf16 weights, 8 prompts x 8 completions per step;
# * Colab's T4 (sm 75, 16 GB; also V100 and any card without native bf16): float32 weights - fp16 would need a
#   GradScaler, which lesson 7's grpo_step does not have - on 4 prompts x 8 completions, so that one step fits
#   in 16 GB. ``preset_memory_estimate`` computes the peak of one step from parameter and activation counts (an
#   estimate; the notebook prints it for the card it runs on, tests/test_device_numerics.py checks the counts
#   against what autograd saves on the CPU and that the full batch in float32 would not fit a T4).
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
RUN_PRESETS = {
    "tiny_cpu": {"config": {}, "heldout": None, "lora": None, "dtype": "float32"},
    "smoke": {
        "config": {"num_steps": 3, "prompts_per_step": 4, "eval_k": 4},
        "heldout": 8,
        "lora": None,
        "dtype": "float32",
    },
    "real_gpu": {
        "config": {
            "learning_rate": 1e-5,
            "max_new_tokens": 48,
            "prompts_per_step": 8,
            "num_generations": 8,
            "eval_k": 8,
        },
        "heldout": None,
        "lora": {"rank": 16, "alpha": 32.0, "dropout": 0.0, "target_modules": LORA_TARGET_MODULES},
        "dtype": "bfloat16",
        # what changes on a card without native bf16 (Colab's T4)
        "no_native_bf16": {"dtype": "float32", "config": {"prompts_per_step": 4}},
    },
}


def check_run_mode(mode: str) -> str:
    if mode not in RUN_PRESETS:
        raise ValueError(f"RUN_MODE 必须是 {' / '.join(RUN_PRESETS)} 之一，收到 {mode!r}")
    return mode


def run_parameters(run_mode: str, run_label: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The notebook's ``RUN_MODE`` and ``RUN_LABEL``, each overridden by its environment variable when set
    (``GRPO_ONLINE_RUN_MODE``: the grading kernels set ``smoke``; ``GRPO_ONLINE_RUN_LABEL``), then checked
    (``ValueError`` for a mode that is not a preset or a label that is not a safe file-name part)."""
    from tools.project_runtime import check_run_label

    environ = os.environ if environ is None else environ
    mode = environ.get(env_vars.ONLINE_RUN_MODE, run_mode)
    label = environ.get(env_vars.ONLINE_RUN_LABEL, run_label)
    return check_run_mode(mode), check_run_label(label)


def native_bf16() -> bool:
    """True iff a CUDA card is present and runs bf16 natively (sm >= 80; ``is_bf16_supported`` without emulation:
    T4 and V100 only emulate it)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False))


def preset(mode: str, bf16_native: bool | None = None) -> dict:
    """RUN_MODE ``mode``'s preset for the card at hand: ``{"config": {...}, "dtype": name, "lora": ..., "heldout": ...,
    "card": "native_bf16" | "no_native_bf16" | "cpu"}``. real_gpu on a card without native bf16 takes its
    ``no_native_bf16`` changes; ``bf16_native`` None asks the machine (:func:`native_bf16`)."""
    entry = RUN_PRESETS[check_run_mode(mode)]
    resolved = {
        "config": dict(entry["config"]),
        "dtype": entry["dtype"],
        "lora": entry["lora"],
        "heldout": entry["heldout"],
    }
    if "no_native_bf16" not in entry:
        return dict(resolved, card="cpu")
    if bf16_native is None:
        bf16_native = native_bf16()
    if bf16_native:
        return dict(resolved, card="native_bf16")
    change = entry["no_native_bf16"]
    return dict(
        resolved, config={**resolved["config"], **change["config"]}, dtype=change["dtype"], card="no_native_bf16"
    )


def preset_config(mode: str, bf16_native: bool | None = None, **overrides) -> OnlineConfig:
    """The OnlineConfig of RUN_MODE ``mode`` (its preset for the card, see :func:`preset`, then ``overrides``)."""
    return OnlineConfig(**{**preset(mode, bf16_native)["config"], **overrides})


def preset_lora_config(mode: str):
    """RUN_MODE ``mode``'s LoRA adapter as a peft ``LoraConfig`` (what TRL's ``peft_config`` takes), or None."""
    lora = RUN_PRESETS[check_run_mode(mode)]["lora"]
    if lora is None:
        return None
    from peft import LoraConfig, TaskType

    return LoraConfig(
        r=lora["rank"],
        lora_alpha=lora["alpha"],
        lora_dropout=lora["dropout"],
        target_modules=list(lora["target_modules"]),
        bias="none",
        task_type=TaskType.CAUSAL_LM,
    )


def preset_dtype(mode: str, bf16_native: bool | None = None):
    """The preset's torch dtype for the card: real_gpu bf16 with native bf16, else float32; the CPU modes float32."""
    import torch

    return getattr(torch, preset(mode, bf16_native)["dtype"])


def preset_memory_estimate(mode: str, prompt_tokens: int, bf16_native: bool | None = None) -> dict:
    """An ESTIMATE of the peak memory of one training step of RUN_MODE ``mode`` (real_gpu) on Qwen2.5-0.5B's
    architecture, at the preset's batch and dtype for the card (``prompts_per_step x num_generations`` completions of
    ``max_new_tokens``, prompts of ``prompt_tokens``): ``tools.training_mechanism_runtime.lora_step_memory_estimate``
    (its docstring says what is counted and what is not), plus ``"card"``, ``"rows"``, ``"dtype"``."""
    from tools.tiny_model import QWEN25_05B_ARCHITECTURE
    from tools.training_mechanism_runtime import lora_step_memory_estimate

    chosen = preset(mode, bf16_native)
    if chosen["lora"] is None:
        raise ValueError(f"RUN_MODE {mode!r} 没有 LoRA 适配器：只估计 real_gpu")
    config = OnlineConfig(**chosen["config"])
    rows = config.prompts_per_step * config.num_generations
    estimate = lora_step_memory_estimate(
        QWEN25_05B_ARCHITECTURE,
        weight_dtype=chosen["dtype"],
        autocast=False,
        rows=rows,
        prompt_tokens=prompt_tokens,
        completion_tokens=config.max_new_tokens,
        lora_targets=chosen["lora"]["target_modules"],
        lora_rank=chosen["lora"]["rank"],
        logprob_path="completion",
    )
    return dict(estimate, card=chosen["card"], rows=rows, dtype=chosen["dtype"])


def load_preset_policy(mode: str, path, device="cpu", seed: int = 0, bf16_native: bool | None = None):
    """(model, tokenizer) for RUN_MODE ``mode`` from the local checkpoint folder or model id ``path``: its dtype for
    the card (:func:`preset`) and, for real_gpu, a LoRA adapter on LORA_TARGET_MODULES (tools.grpo_experiment.
    attach_lora; only the adapter trains). Eval mode (no dropout)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lora = RUN_PRESETS[check_run_mode(mode)]["lora"]
    local = Path(str(path)).is_dir()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local)
    tokenizer.padding_side = "left"
    dtype = preset_dtype(mode, bf16_native)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=local, dtype=dtype).to(device)
    if lora is not None:
        from tools.grpo_experiment import attach_lora

        torch.manual_seed(seed)
        model, _ = attach_lora(model, lora["rank"], lora["alpha"], lora["dropout"], lora["target_modules"])
    model.eval()
    return model, tokenizer


def make_optimizer(model, learning_rate: float):
    """AdamW over the parameters that require grad (with LoRA: the adapter only; no state for frozen weights)."""
    import torch

    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
