"""Full marks: a second, independently written correct implementation of every TODO.

Structure unlike the worked answers: sort-based grouping with scatter_add_/scatter_reduce_ and an explicit
max == min test for constant groups (nb01 TODO 1), unflatten and a two-pass variance (TODO 2), closed forms
(TODO 3); ratio - log(ratio) - 1 for k3 and a loop over candidates with the one-sided clipped surrogate (nb02).
"""
NB01_COMPUTE_GROUP_ADVANTAGES = '''
def compute_group_advantages(rewards, group_ids, eps=1e-6):
    """组内优势：按组号排序后分段统计，全等组直接置 0。"""
    if not torch.is_tensor(rewards) or rewards.dim() != 1:
        raise ValueError("rewards 必须是一维张量 [N]")
    if not torch.is_tensor(group_ids) or group_ids.shape != rewards.shape:
        raise ValueError("group_ids 必须与 rewards 同形状")
    if rewards.numel() == 0:
        raise ValueError("rewards 不能为空")
    if not rewards.is_floating_point():
        raise ValueError("rewards 必须是浮点张量")
    if group_ids.is_floating_point() or group_ids.is_complex() or group_ids.dtype == torch.bool:
        raise ValueError("group_ids 必须是整数张量")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards 不能含 NaN 或 inf")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError("eps 必须是正的有限数")
    order = torch.argsort(group_ids, stable=True)                      # [N]
    sorted_ids = group_ids[order]                                      # [N]
    starts = torch.ones_like(sorted_ids, dtype=torch.bool)             # [N] first member of each segment
    starts[1:] = sorted_ids[1:] != sorted_ids[:-1]
    segment = torch.cumsum(starts.long(), 0) - 1                       # [N] segment index 0..K-1
    k = int(segment[-1].item()) + 1
    r = rewards[order].to(torch.float64)                               # [N]
    count = torch.zeros(k, dtype=torch.float64).scatter_add_(0, segment, torch.ones_like(r))         # [K]
    high = torch.full((k,), -math.inf, dtype=torch.float64).scatter_reduce_(0, segment, r, "amax")  # [K]
    low = torch.full((k,), math.inf, dtype=torch.float64).scatter_reduce_(0, segment, r, "amin")    # [K]
    mean = torch.zeros(k, dtype=torch.float64).scatter_add_(0, segment, r) / count                  # [K]
    deviation = r - mean[segment]                                                                     # [N]
    variance = torch.zeros(k, dtype=torch.float64).scatter_add_(0, segment, deviation**2) / count   # [K]
    scaled = deviation / variance.sqrt().clamp(min=eps)[segment]                                     # [N]
    scaled = torch.where((high == low)[segment], torch.zeros_like(scaled), scaled)
    out = torch.empty_like(scaled)
    out[order] = scaled
    return out.to(dtype=rewards.dtype, device=rewards.device)
'''

NB01_GROUP_RELATIVE_ADVANTAGES = '''
def group_relative_advantages(rewards, num_generations, eps=1e-4):
    """MiniMind 布局：每 G 个一行，(r - 行均值) / (行总体标准差 + eps)。"""
    if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError("num_generations 必须是 >= 1 的整数")
    if not torch.is_tensor(rewards) or rewards.dim() != 1 or rewards.numel() % num_generations != 0:
        raise ValueError("rewards 必须是一维张量，长度是 num_generations 的整数倍")
    rows = rewards.unflatten(0, (-1, num_generations))              # [B, G]
    centered = rows - rows.mean(dim=1, keepdim=True)                 # [B, G]
    spread = centered.pow(2).mean(dim=1, keepdim=True).sqrt()        # [B, 1] population std
    return (centered / (spread + eps)).flatten()                     # [B*G]
'''

NB01_ANSWER_CONVENTIONS = '''
def answer_conventions_0001():
    """手算：组 [0, 0, 0, 1] 的均值 0.25，中心化后 (-0.25, 0.75)，各约定只差除数。"""
    population = math.sqrt(3 / 16)   # population std of [0, 0, 0, 1]
    sample = math.sqrt(1 / 4)        # sample std: sum of squares 0.75 over n - 1 = 3
    batch = math.sqrt(15 / 56)       # sample std of [0, 0, 0, 1, 1, 1, 1, 1]

    def pair(scale):
        return (-0.25 / scale, 0.75 / scale)

    return {"course": pair(max(population, 1e-6)), "minimind": pair(population + 1e-4),
            "trl_group": pair(sample + 1e-4), "trl_batch": pair(batch + 1e-4), "trl_none": pair(1.0),
            "cs336": pair(sample + 1e-6), "dr_grpo": pair(1.0)}
'''

NB02_TOKEN_KL_PENALTY = '''
def token_kl_penalty(policy_logps, ref_logps):
    """k3：ratio - log(ratio) - 1，ratio = pi_ref / pi_theta；参考策略 detach。"""
    if not torch.is_tensor(policy_logps) or not torch.is_tensor(ref_logps) or policy_logps.shape != ref_logps.shape:
        raise ValueError("policy_logps 与 ref_logps 必须是同形状的张量")
    ratio = torch.exp(ref_logps.detach() - policy_logps)   # [..., T] pi_ref / pi_theta
    return ratio - torch.log(ratio) - 1.0
'''

NB02_COMPUTE_GRPO_LOSS = '''
def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    """逐个候选：只取有效 token，单边写法的裁剪目标，加可选 k3，候选内求均值后再平均。"""
    def check_number(value, name, positive=False):
        bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        if bad or value < 0 or (positive and value == 0):
            raise ValueError(f"{name} 必须是{'正' if positive else '非负'}的有限数，实际 {value!r}")

    if not torch.is_tensor(log_probs_new) or log_probs_new.dim() != 2 or log_probs_new.numel() == 0:
        raise ValueError("log_probs_new 必须是非空的二维张量 [N, T]")
    n, t = log_probs_new.shape
    if not torch.is_tensor(log_probs_old) or tuple(log_probs_old.shape) != (n, t):
        raise ValueError("log_probs_old 必须与 log_probs_new 同形状")
    if not torch.is_tensor(rewards) or rewards.dim() != 1 or rewards.shape[0] != n:
        raise ValueError("rewards 必须是长度为 N 的一维张量")
    if not torch.is_tensor(group_ids) or group_ids.shape != rewards.shape:
        raise ValueError("group_ids 必须与 rewards 同形状")
    check_number(clip_range, "clip_range")
    check_number(beta, "beta")
    check_number(eps, "eps", positive=True)
    named = [("log_probs_new", log_probs_new), ("log_probs_old", log_probs_old)]
    if log_probs_ref is not None:
        named.append(("log_probs_ref", log_probs_ref))
    for name, value in named:
        if not torch.is_tensor(value) or tuple(value.shape) != (n, t):
            raise ValueError(f"{name} 的形状必须是 [N, T]")
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} 必须全部是有限数")
    if beta > 0 and log_probs_ref is None:
        raise ValueError("beta > 0 时必须给出 log_probs_ref")
    mask = torch.ones(n, t, dtype=torch.bool) if response_mask is None else response_mask
    if not torch.is_tensor(mask) or tuple(mask.shape) != (n, t):
        raise ValueError("response_mask 必须是形状 [N, T] 的张量")
    if mask.dtype != torch.bool:
        if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError("response_mask 只能是布尔或 0/1 数值掩码")
        mask = mask != 0
    if not bool(mask.any(dim=1).all()):
        raise ValueError("每个候选至少需要一个有效 token")

    advantages = compute_group_advantages(rewards, group_ids, eps=eps)   # [N] the provided function
    use_kl = log_probs_ref is not None and beta > 0
    total = torch.zeros((), dtype=log_probs_new.dtype)
    for i in range(n):
        valid = mask[i]                                                    # [T]
        ratio = torch.exp(log_probs_new[i][valid] - log_probs_old[i][valid].detach())   # [T_i]
        a = advantages[i].detach().to(ratio.dtype)
        upper = torch.full_like(ratio, 1.0 + clip_range)
        lower = torch.full_like(ratio, 1.0 - clip_range)
        surrogate = torch.where(a >= 0, torch.minimum(ratio, upper) * a, torch.maximum(ratio, lower) * a)
        token_loss = -surrogate                                            # [T_i]
        if use_kl:
            token_loss = token_loss + beta * token_kl_penalty(log_probs_new[i][valid], log_probs_ref[i][valid])
        total = total + token_loss.mean()
    return total / n, advantages
'''

CASE = {
    "nb01_group_advantages": {"base": "release", "cells": {
        "compute_group_advantages": NB01_COMPUTE_GROUP_ADVANTAGES,
        "group_relative_advantages": NB01_GROUP_RELATIVE_ADVANTAGES,
        "answer_conventions_0001": NB01_ANSWER_CONVENTIONS,
    }},
    "nb02_grpo_objective": {"base": "release", "cells": {
        "token_kl_penalty": NB02_TOKEN_KL_PENALTY,
        "compute_grpo_loss": NB02_COMPUTE_GRPO_LOSS,
    }},
}
