'''Full marks and a ``copies-reference`` flag (nb03b): the course's reference answers rewritten by hand with
equivalent operations - ``torch.sum(x, dim=1)`` for ``x.sum(dim=1)``, ``masked_fill(~keep, 0.0)`` for
``torch.where(valid, x, zeros)``, ``.type(dtype)`` for ``.to(dtype)``, ``isinstance(x, torch.Tensor)`` for
``torch.is_tensor(x)``, ``[:, None]`` for ``.unsqueeze(1)``, ``elif``/``else`` after a ``return``, negated
conditions - with new local names and messages; the same steps in the same order.'''

NB03B_REDUCE = """
def reduce_per_token_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    if not isinstance(per_token_loss, torch.Tensor) or per_token_loss.ndim != 2:
        raise ValueError("per_token_loss 应为 [B*G, T] 的二维张量")
    keep = completion_bool_mask(completion_mask, per_token_loss.size())
    if not loss_type in LOSS_TYPES:
        raise ValueError(f"不支持的 loss_type：{loss_type!r}")
    weights = keep.type(per_token_loss.dtype)
    zeroed = per_token_loss.masked_fill(~keep, 0.0)
    if loss_type == "grpo":
        per_row = torch.sum(zeroed, dim=1) / torch.clamp(torch.sum(weights, dim=1), min=1.0)
        return torch.mean(per_row)
    elif loss_type == "bnpo":
        return torch.sum(zeroed) / torch.clamp(torch.sum(weights), min=1.0)
    elif loss_type == "dr_grpo":
        if (max_completion_length is None or isinstance(max_completion_length, bool)
                or int(max_completion_length) != max_completion_length
                or per_token_loss.size(1) > max_completion_length):
            raise ValueError(f"dr_grpo 要求整数 max_completion_length >= T，收到 {max_completion_length!r}")
        return torch.sum(zeroed) / (per_token_loss.size(0) * int(max_completion_length))
    else:
        if num_items_in_batch is None:
            raise ValueError(f"{loss_type} 缺少 num_items_in_batch")
        count = float(num_items_in_batch)
        if not count >= 0:
            raise ValueError(f"num_items_in_batch 不能为负：{num_items_in_batch!r}")
        return torch.sum(zeroed) / max(count, 1.0)
"""

NB03B_RATIO = """
def importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level="token"):
    if not isinstance(policy_logps, torch.Tensor) or policy_logps.ndim != 2:
        raise ValueError("policy_logps 应为 [B*G, T] 的二维张量")
    if not isinstance(old_logps, torch.Tensor) or old_logps.size() != policy_logps.size():
        raise ValueError("old_logps 与 policy_logps 的形状不同")
    keep = completion_bool_mask(completion_mask, policy_logps.size())
    diff = torch.sub(policy_logps, old_logps).masked_fill(~keep, 0.0)
    if importance_sampling_level == "token":
        return diff.exp()
    elif importance_sampling_level == "sequence":
        n = torch.clamp(torch.sum(keep.type(diff.dtype), dim=1, keepdim=True), min=1.0)
        return torch.exp(torch.sum(diff, dim=1, keepdim=True) / n)
    else:
        raise ValueError(f"未知的 importance_sampling_level：{importance_sampling_level!r}")
"""

NB03B_PER_TOKEN = """
def per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                          epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None):
    keep = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if not loss_type in LOSS_TYPES:
        raise ValueError(f"不支持的 loss_type：{loss_type!r}")
    if not 0.0 <= epsilon_low < 1.0:
        raise ValueError(f"epsilon_low 越界：{epsilon_low}")
    if epsilon_high < 0 or (loss_type == "cispo" and epsilon_high <= 0):
        raise ValueError(f"epsilon_high 越界：{epsilon_high}")
    r = importance_ratio(policy_logps, old_logps, keep, importance_sampling_level)
    a = advantages.type(policy_logps.dtype)[:, None]
    z = torch.zeros_like(policy_logps)
    lp = policy_logps.masked_fill(~keep, 0.0)
    if loss_type == "cispo":
        w = torch.clamp(r, max=epsilon_high).detach()
        out = -w * a * lp
    else:
        bounded = torch.clamp(r, 1.0 - epsilon_low, 1.0 + epsilon_high)
        out = -torch.minimum(torch.mul(r, a), torch.mul(bounded, a))
        out = out.expand(policy_logps.size())
    if beta != 0.0:
        rf = ref_logps.type(z.dtype).masked_fill(~keep, 0.0)
        out = torch.add(out, beta * token_kl_penalty(lp, rf))
    return out
"""

CASE = {
    "nb03b_loss_family_trl": {"base": "release", "cells": {
        "reduce_per_token_loss": NB03B_REDUCE,
        "importance_ratio": NB03B_RATIO,
        "per_token_policy_loss": NB03B_PER_TOKEN,
        "q9_answer": "def q9_ratio(short_len, long_len):\n    return dict(grpo=short_len / long_len, dapo=1.0)\n",
    }},
}
