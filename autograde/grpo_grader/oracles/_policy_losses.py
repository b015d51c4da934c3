"""The grader's own float64 references of lesson 3's loss family (TRL 1.16 semantics), used by the
nb03a_cispo_trace_lab and nb03b_loss_family_trl oracles. Gradients come from autograd in this process."""

from __future__ import annotations

import torch

from tools.loss_types import LOSS_TYPES  # the one home of the names (re-exported in __all__)

from ._common import normal, ragged_mask, uniform


def k3(policy, ref):
    d = ref - policy
    return torch.exp(d) - d - 1.0


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
    a = adv.unsqueeze(1)
    if loss_type == "cispo":
        out = -(torch.clamp(r, max=epsilon_high).detach() * a * policy)
    else:
        c = torch.clamp(r, 1.0 - epsilon_low, 1.0 + epsilon_high)
        out = -torch.where(r * a <= c * a, r * a, c * a).expand(policy.shape)
    if beta:
        out = out + beta * k3(policy, ref)
    return out


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


__all__ = ["LOSS_TYPES", "k3", "reduce", "ratio", "per_token", "evaluate", "batch", "mask_as", "uniform"]
