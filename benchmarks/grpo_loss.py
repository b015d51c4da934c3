"""GRPO loss: forward + backward of notebook 2's ``compute_grpo_loss`` against the seed's reference formulation.

``grpo_loss_fwd_bwd_ms``: the course's loss is loaded from its single source (``benchmarks.course_code``); the
baseline :func:`seed_reference_grpo_loss` is a separate body on purpose (per-group loop advantages, the same
clipped objective and k3 KL).
"""

from __future__ import annotations

import math

from benchmarks.group_advantages import seed_loop_advantages
from benchmarks.harness import EPS, Unavailable, load, median, metric, timed, unavailable


def seed_reference_grpo_loss(
    log_probs_new,
    log_probs_old,
    rewards,
    group_ids,
    response_mask,
    clip_range=0.2,
    eps=EPS,
    log_probs_ref=None,
    beta=0.0,
):
    """Baseline: the seed's reference formulation - its input checks, per-group loop advantages, token
    ratio with PPO clipping, k3 reference KL, mean over each candidate's valid tokens, then over candidates."""
    import torch

    if log_probs_new.ndim != 2 or log_probs_new.numel() == 0 or log_probs_new.shape != log_probs_old.shape:
        raise ValueError("log-prob tensors must be non-empty [N, T] of the same shape")
    if rewards.shape[0] != log_probs_new.shape[0] or group_ids.shape != rewards.shape:
        raise ValueError("rewards / group_ids must match the candidate dimension")
    if not (math.isfinite(clip_range) and clip_range >= 0 and math.isfinite(beta) and beta >= 0):
        raise ValueError("clip_range and beta must be non-negative and finite")
    if not torch.isfinite(log_probs_new).all() or not torch.isfinite(log_probs_old).all():
        raise ValueError("log-probs must be finite")
    if log_probs_ref is not None and (
        log_probs_ref.shape != log_probs_new.shape or not torch.isfinite(log_probs_ref).all()
    ):
        raise ValueError("reference log-probs must be finite and of the policy's shape")
    if (
        response_mask.shape != log_probs_new.shape
        or response_mask.dtype != torch.bool
        or not response_mask.any(dim=-1).all()
    ):
        raise ValueError("response_mask must be a bool [N, T] with a valid token in every row")
    advantages = seed_loop_advantages(rewards, group_ids, eps)  # [N]
    ratio = torch.exp(log_probs_new - log_probs_old.detach())  # [N, T]
    clipped = torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)  # [N, T]
    adv = advantages.detach().unsqueeze(-1)  # [N, 1]
    per_token = -torch.minimum(ratio * adv, clipped * adv)  # [N, T]
    if log_probs_ref is not None and beta > 0:
        delta = log_probs_ref.detach() - log_probs_new  # [N, T]
        per_token = per_token + beta * (torch.exp(delta) - delta - 1.0)  # [N, T]
    per_candidate = (per_token * response_mask).sum(dim=-1) / response_mask.sum(dim=-1)  # [N]
    return per_candidate.mean(), advantages


def _grpo_case(candidates: int, length: int, group_size: int):
    import torch

    gen = torch.Generator().manual_seed(1234)
    new = (-1.0 - torch.rand(candidates, length, generator=gen)).requires_grad_(True)  # [N, T]
    old = new.detach() + 0.05 * torch.randn(candidates, length, generator=gen)  # [N, T]
    ref = new.detach() + 0.05 * torch.randn(candidates, length, generator=gen)  # [N, T]
    rewards = torch.rand(candidates, generator=gen)  # [N]
    group_ids = torch.arange(candidates // group_size).repeat_interleave(group_size)  # [N]
    lengths = torch.randint(length // 4, length + 1, (candidates,), generator=gen)  # [N]
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)  # [N, T] right-padded responses
    return new, old, ref, rewards, group_ids, mask


def bench_grpo_loss(tiny: bool) -> list[dict]:
    name = "grpo_loss_fwd_bwd_ms"
    baseline = {"what": "seed's reference formulation (per-group loop advantages + the same objective)", "unit": "ms"}
    try:
        course = load(
            "nb02_grpo_objective",
            ["provided_group_advantages", "token_kl_penalty", "provided_grpo_input_checks", "compute_grpo_loss"],
        )["compute_grpo_loss"]
    except Unavailable as error:
        return [unavailable(name, "ms", baseline, str(error))]
    candidates, length, group_size = (8, 16, 4) if tiny else (64, 1024, 8)
    new, old, ref, rewards, group_ids, mask = _grpo_case(candidates, length, group_size)
    settings = {"clip_range": 0.2, "eps": EPS, "beta": 0.04}

    def step(fn):
        new.grad = None
        loss, _ = fn(
            new,
            old,
            rewards,
            group_ids,
            mask,
            clip_range=settings["clip_range"],
            eps=EPS,
            log_probs_ref=ref,
            beta=settings["beta"],
        )
        loss.backward()
        return loss.detach(), new.grad.detach().clone()

    loss_course, grad_course = step(course)
    loss_ref, grad_ref = step(seed_reference_grpo_loss)
    repeats = 1 if tiny else 21
    t_course = median(timed(lambda: step(course), repeats))
    t_ref = median(timed(lambda: step(seed_reference_grpo_loss), repeats))
    value = 1e3 * t_course
    return [
        metric(
            name,
            value,
            "ms",
            dict(baseline, value=1e3 * t_ref),
            {
                "shape": {
                    "candidates": candidates,
                    "tokens": length,
                    "group_size": group_size,
                    "dtype": "float32",
                    "valid_tokens": int(mask.sum()),
                },
                "settings": settings,
                "repeats": repeats,
                "time_vs_reference": t_course / t_ref,
                "abs_diff_loss": float((loss_course - loss_ref).abs()),
                "max_abs_diff_grad": float((grad_course - grad_ref).abs().max()),
                "formula": "median wall time of loss forward + backward (grad of log_probs_new), course vs reference",
            },
        )
    ]
