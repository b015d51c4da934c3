"""The grader's own float64 references of the policy losses (TRL 1.16 semantics): lesson 3's loss family (the
nb03a_cispo_trace_lab and nb03b_loss_family_trl oracles) and lesson 7's update step (``reference_step``, for the
nb07_online_grpo oracle: the same ``clipped``, ``k3`` and ``reduce``). Gradients come from autograd in this process."""

from __future__ import annotations

import copy

import torch

from tools.loss_types import LOSS_TYPES  # the one home of the names (re-exported in __all__)
from tools.online.grading_policy import grading_optimizer

from ._common import normal, ragged_mask, uniform


def k3(policy, ref):
    d = ref - policy
    return torch.exp(d) - d - 1.0


def clipped(r, adv, epsilon_low, epsilon_high):
    """The PPO-style clipped surrogate per token, ``-min(r A, clip(r, 1 - epsilon_low, 1 + epsilon_high) A)``, of the
    ratios ``r`` and the per-sequence advantages ``adv``."""
    a = adv.unsqueeze(1)
    return -torch.min(r * a, torch.clamp(r, 1.0 - epsilon_low, 1.0 + epsilon_high) * a)


def reduce(ptl, mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    m = mask.to(torch.float64)
    masked = ptl * m
    if loss_type == "grpo":
        return (masked.sum(dim=1) / m.sum(dim=1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return masked.sum() / m.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return masked.sum() / (ptl.shape[0] * max_completion_length)
    return masked.sum() / max(float(num_items_in_batch), 1.0)


def ratio(policy, old, mask, level="token"):
    log_ratio = policy - old
    if level == "token":
        return torch.exp(log_ratio)
    m = mask.to(torch.float64)
    return torch.exp((log_ratio * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0))


def per_token(
    policy, old, adv, mask, loss_type="grpo", epsilon_low=0.2, epsilon_high=0.28, level="token", beta=0.0, ref=None
):
    r = ratio(policy, old, mask, level)
    if loss_type == "cispo":
        out = -(torch.clamp(r, max=epsilon_high).detach() * adv.unsqueeze(1) * policy)
    else:
        out = clipped(r, adv, epsilon_low, epsilon_high).expand(policy.shape)
    if beta:
        out = out + beta * k3(policy, ref)
    return out


def reference_step(
    model,
    rollout,
    advantages,
    lr,
    num_iterations=1,
    epsilon=0.2,
    epsilon_high=None,
    beta=0.0,
    loss_type="grpo",
    max_grad_norm=1.0,
    temperature=1.0,
    max_completion_length=None,
    use_bias_correction_kl=True,
    extras=None,
    optimizer="adamw",
):
    """Float64 re-derivation of one ``grpo_step`` (same keyword arguments and defaults; ``epsilon_high=None`` means
    ``epsilon``) on a copy of ``model`` with ``optimizer`` (``GRADING_OPTIMIZERS``: torch's AdamW or SGD, defaults
    but ``lr``): (per-epoch losses, parameters after, clip_ratio_low, clip_ratio_high and approx_kl per epoch). The one
    reference of the update (the lesson's hidden tests run the nb07_online_grpo oracle's cases). ``extras`` (a dict)
    also receives ``entropy`` (the first epoch's masked mean token entropy), ``grad_norms`` (each epoch's gradient
    norm before clipping) and, for beta > 0, ``kl_refs`` / ``kl_refs_weighted`` (each epoch's masked mean of k3 to the
    reference, alone / times the ratio as TRL logs it with ``use_bias_correction_kl``)."""
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    m = copy.deepcopy(model).double()
    opt = grading_optimizer(optimizer, m.parameters(), lr)
    mask = rollout["completion_mask"] != 0
    w = mask.double()
    old = rollout["old_per_token_logps"].double()
    adv = advantages.double()[:, None]
    width = rollout["completion_ids"].shape[1]
    lmax = max_completion_length or width
    losses, lows, highs, kls = [], [], [], []
    for _ in range(num_iterations):
        ids = torch.cat([rollout["prompt_ids"], rollout["completion_ids"]], 1)
        att = torch.cat([rollout["prompt_mask"].long(), mask.long()], 1)
        logits = m(input_ids=ids, attention_mask=att, use_cache=False).logits[:, -width - 1 : -1] / temperature
        logps = torch.log_softmax(logits, -1).gather(-1, rollout["completion_ids"].unsqueeze(-1)).squeeze(-1)
        if extras is not None and not losses:
            with torch.no_grad():
                token_entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
                extras["entropy"] = float((token_entropy * w).sum() / w.sum().clamp(min=1))
        lr_ = torch.where(mask, logps - old, torch.zeros_like(logps))  # masked before exp (C3)
        ratio = torch.exp(lr_)
        ptl = clipped(ratio, advantages.double(), epsilon, epsilon_high)
        if beta > 0:  # k3 of the valid positions only: the masked ones get policy == ref
            ref = rollout["ref_per_token_logps"].double()
            kl = k3(torch.where(mask, logps, ref), ref)
            ptl = ptl + beta * kl * (ratio if use_bias_correction_kl else 1.0)
            if extras is not None:  # metrics: no graph
                tokens = w.sum().clamp(min=1)
                extras.setdefault("kl_refs", []).append(float((kl.detach() * w).sum() / tokens))
                extras.setdefault("kl_refs_weighted", []).append(float((kl * ratio).detach().mul(w).sum() / tokens))
        # one process: dapo's num_items_in_batch is the batch's own count of valid tokens
        loss = reduce(ptl, mask, loss_type, lmax, num_items_in_batch=w.sum())
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(m.parameters()), max_grad_norm)
        if extras is not None:
            extras.setdefault("grad_norms", []).append(float(norm))
        opt.step()
        tot = w.sum().clamp(min=1)
        losses.append(float(loss.detach()))
        lows.append(float((((ratio < 1 - epsilon) & (adv < 0)).double() * w).sum() / tot))
        highs.append(float((((ratio > 1 + epsilon_high) & (adv > 0)).double() * w).sum() / tot))
        kls.append(float(((ratio - 1 - lr_).detach() * w).sum() / tot))  # a metric: no graph
    return losses, [p.detach() for p in m.parameters()], lows, highs, kls


def evaluate(fn, tensors: dict, weights=None, **kwargs):
    """(value, d(sum(weights * value)) / d policy) of ``fn`` on float64 copies; tensors["policy"] gets the grad."""
    policy = tensors["policy"].detach().to(torch.float64).requires_grad_(True)
    rest = {
        k: (v.detach().to(torch.float64) if torch.is_tensor(v) and v.is_floating_point() else v)
        for k, v in tensors.items()
        if k != "policy"
    }
    value = fn(policy, **rest, **kwargs)
    target = value if weights is None else (value * weights).sum()
    (grad,) = torch.autograd.grad(target.sum() if target.dim() else target, policy)
    return value.detach(), grad


def batch(gen, n, t, dtype, spread=0.9, empty_row=False, prefix=True):
    """policy, old, advantages, bool mask, ref: log-ratios uniform in [-spread, spread]."""
    old = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3.0 - 0.05
    policy = old + (torch.rand(n, t, generator=gen, dtype=torch.float64) * 2.0 - 1.0) * spread
    ref = old + normal(gen, (n, t), 0.3)
    adv = normal(gen, (n,))
    mask = ragged_mask(gen, n, t, prefix=prefix)
    if empty_row:
        mask[0] = False
    return policy.to(dtype), old.to(dtype), adv.to(dtype), mask, ref.to(dtype)


def mask_as(gen, mask, kind=None):
    """The bool mask as bool, int64 or the given float dtype (C1: same results)."""
    kinds = [torch.bool, torch.int64, torch.float32] if kind is None else [kind]
    choice = kinds[int(torch.randint(0, len(kinds), (), generator=gen))]
    return mask if choice == torch.bool else mask.to(choice)


__all__ = [
    "LOSS_TYPES",
    "k3",
    "clipped",
    "reduce",
    "ratio",
    "per_token",
    "reference_step",
    "evaluate",
    "batch",
    "mask_as",
    "uniform",
]
