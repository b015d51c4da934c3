"""One loss case on both sides: controlled log-probs, TRL's ``GRPOTrainer._compute_loss`` on a stand-in trainer,
the course's function on the same inputs, and the entry that compares them."""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from tools.conformance.cases import LENGTHS, MAX_LEN
from tools.conformance.stand_ins import (
    MissingAttribute,
    RecordingInputs,
    RecordingView,
    StandIn,
    TrlApiChanged,
    local_accelerator,
    trl_config,
    trl_method,
)


def controlled_batch(
    advantage_fn, seed, n_prompts, num_generations, t, lengths, spread, big_log_ratio=None, dtype=torch.float64
):
    """Controlled log-probs whose ratios leave the clip range, variable-length masks, MiniMind advantages."""
    gen = torch.Generator().manual_seed(seed)
    n = n_prompts * num_generations
    old = -torch.rand(n, t, generator=gen, dtype=dtype) * 2.5 - 0.05  # [B*G, T]
    log_ratio = (torch.rand(n, t, generator=gen, dtype=dtype) * 2.0 - 1.0) * spread  # [B*G, T]
    if big_log_ratio is not None:  # push some tokens above a large absolute cap (CISPO)
        log_ratio[::2, 0] = big_log_ratio
    policy = old + log_ratio  # [B*G, T]
    ref = old + 0.3 * torch.randn(n, t, generator=gen, dtype=dtype)  # [B*G, T]
    mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]  # [B*G, T]
    rewards = torch.rand(n, generator=gen, dtype=dtype)  # [B*G]
    advantages = advantage_fn(rewards, num_generations)  # [B*G]
    return policy, old, ref, mask, advantages


def case_batch(advantage_fn, seed, big_log_ratio=None):
    """The controlled batch a conformance case runs on: 2 prompts x 4 generations of :data:`LENGTHS` tokens
    (padded to :data:`MAX_LEN`), log-ratios spread over +-0.9."""
    return controlled_batch(
        advantage_fn,
        seed=seed,
        n_prompts=2,
        num_generations=4,
        t=MAX_LEN,
        lengths=LENGTHS,
        spread=0.9,
        big_log_ratio=big_log_ratio,
    )


def trl_loss_and_grad(
    GRPOTrainer,
    config,
    reads,
    policy,
    old,
    ref,
    mask,
    advantages,
    *,
    num_items_in_batch,
    training=True,
    accumulation_steps=1,
):
    """Run GRPOTrainer._compute_loss on controlled log-probs; return (loss, d loss / d policy_logps)."""
    compute_loss = trl_method(GRPOTrainer, "_compute_loss")
    leaf = policy.detach().clone().requires_grad_(True)

    def controlled_logps(_model, *args, **kwargs):
        # bypass the model forward: hand TRL the controlled per-token log-probs (and zero entropies)
        return leaf, torch.zeros_like(leaf), None

    model = StandIn("model", reads, training=training)
    trainer = StandIn(
        "trainer",
        reads,
        model=model,
        args=RecordingView("args", config, reads),
        accelerator=local_accelerator(reads),
        _get_per_token_logps_and_entropies=controlled_logps,
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=config.importance_sampling_level,
        loss_type=config.loss_type,
        beta=config.beta,
        epsilon_low=config.epsilon,
        epsilon_high=config.epsilon_high if config.epsilon_high is not None else config.epsilon,
        max_completion_length=config.max_completion_length,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        get_gamma_weights=getattr(GRPOTrainer, "get_gamma_weights", None),  # TRL's own (static) VESPO weights
        current_gradient_accumulation_steps=accumulation_steps,
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    n, t = policy.shape
    inputs = RecordingInputs(
        reads,
        {
            "prompt_ids": torch.zeros(n, 1, dtype=torch.long),
            "prompt_mask": torch.ones(n, 1, dtype=torch.long),
            "completion_ids": torch.zeros(n, t, dtype=torch.long),
            "completion_mask": mask.long(),
            "advantages": advantages,
            "old_per_token_logps": old,
            "ref_per_token_logps": ref,
            "num_items_in_batch": torch.tensor(float(num_items_in_batch)),
        },
    )
    try:
        loss = compute_loss(trainer, model, inputs)
    except MissingAttribute as error:
        raise TrlApiChanged(
            str(error), "GRPOTrainer._compute_loss 读取了这个属性，而本核对没有提供（TRL 私有 API 已变化）"
        ) from None
    except KeyError as error:
        raise TrlApiChanged(f"inputs[{error}]", "GRPOTrainer._compute_loss 需要的输入键变了") from None
    except TypeError as error:
        raise TrlApiChanged("GRPOTrainer._compute_loss", f"调用方式变了：{error}") from None
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


def facts_read(reads, inputs_present):
    """The reads this check documents: model/args/accelerator attributes and the loss inputs TRL looked up."""
    keep = [r for r in reads if r.split(".")[0] in ("model", "args", "accelerator")]
    keep += [r for r in reads if any(r == f"inputs[{key!r}]" for key in inputs_present)]
    return sorted(keep)


def course_kwargs(case, old, adv, mask, ref, items) -> dict:
    """The course loss's arguments for a conformance ``case`` on one batch (what its TRL config sets)."""
    return dict(
        old_logps=old,
        advantages=adv,
        completion_mask=mask,
        loss_type=case["loss_type"],
        epsilon_low=case["epsilon"],
        epsilon_high=case["epsilon_high"],
        importance_sampling_level=case["importance_sampling_level"],
        beta=case["beta"],
        ref_logps=ref,
        max_completion_length=MAX_LEN,
        num_items_in_batch=items,
    )


def course_loss_and_grad(fn, policy, **kwargs):
    leaf = policy.detach().clone().requires_grad_(True)
    loss = fn(leaf, **kwargs)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


def minimind_loss_and_grad(fn, case, policy, old, adv, mask, ref, **epsilon):
    """MiniMind's loss ``fn`` (``grpo_policy_loss`` or ``cispo_policy_loss``, with its own ``epsilon`` arguments) on
    a case's batch: (loss, d loss / d policy_logps)."""
    return course_loss_and_grad(
        fn, policy, old_logps=old, advantages=adv, completion_mask=mask, beta=case["beta"], ref_logps=ref, **epsilon
    )


def clipping_fired(importance_ratio, policy, old, mask, advantages, case):
    """How many valid tokens sit in a clipped region (zero GRPO gradient or capped CISPO weight)."""
    ratio = importance_ratio(policy, old, mask, case["importance_sampling_level"]).expand(policy.shape).detach()
    adv = advantages[:, None].expand(policy.shape)
    if case["loss_type"] == "cispo":
        fired = ratio > case["epsilon_high"]
    else:
        low, high = 1 - case["epsilon"], 1 + case["epsilon_high"]
        fired = ((ratio > high) & (adv > 0)) | ((ratio < low) & (adv < 0))
    outside = (ratio > (case["epsilon_high"] if case["loss_type"] == "cispo" else 1 + case["epsilon_high"])) | (
        ratio < 1 - case["epsilon"]
    )
    return int((fired & mask).sum()), int((outside & mask).sum())


def case_config(GRPOConfig, case, **extra):
    return trl_config(
        GRPOConfig,
        loss_type=case["loss_type"],
        epsilon=case["epsilon"],
        epsilon_high=case["epsilon_high"],
        importance_sampling_level=case["importance_sampling_level"],
        beta=case["beta"],
        use_bias_correction_kl=case.get("use_bias_correction_kl", False),
        delta=case.get("delta"),
        max_completion_length=MAX_LEN,
        scale_rewards="group",
        gradient_accumulation_steps=case.get("accumulation_steps", 1),
        steps_per_generation=case.get("accumulation_steps", 1),
        **extra,
    )


def loss_entry(trl_loss, trl_grad, course_loss, course_grad, atol):
    entry = {
        "trl_loss": round(float(trl_loss), 8),
        "course_loss": round(float(course_loss), 8),
        "abs_error": float((trl_loss - course_loss).abs()),
        "grad_max_abs_error": float((trl_grad - course_grad).abs().max()),
    }
    entry["passed"] = bool(
        entry["abs_error"] <= atol
        and entry["grad_max_abs_error"] <= atol
        and math.isfinite(entry["abs_error"])
        and math.isfinite(entry["grad_max_abs_error"])
    )
    return entry
