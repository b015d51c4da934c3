"""Full marks: a second, independently written correct implementation of every TODO.

Structure unlike the worked answers: sort-based grouping with scatter_add_/scatter_reduce_ and an explicit
max == min test for constant groups (nb01 TODO 1), unflatten and a two-pass variance (TODO 2), closed forms
(TODO 3); ratio - log(ratio) - 1 for k3 and a loop over candidates with the one-sided clipped surrogate (nb02);
a hand-written integer scanner, row-built tables and a matrix product over NaN-zeroed rewards (nb04); argmax
of the first real EOS and logits minus logsumexp with take_along_dim (nb05). nb04/nb05 keep the worked answer
of their manual-graded question (base "solution").
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

NB04_VERIFY = '''
VERIFIER_ID = "integer-answer-v1"


def verify_integer_response(response, expected_answer, correctness_weight=1.0, format_weight=0.1):
    """逐字符扫描整数片段（不用正则），取最后一个。"""
    def weight(name, value):
        if type(value) not in (int, float) or value != value or value in (float("inf"), float("-inf")) or value < 0:
            raise ValueError(f"{name} 必须是有限的非负实数")
        return float(value)

    if type(response) is not str:
        raise ValueError("response 必须是 str")
    if type(expected_answer) is not int:
        raise ValueError("expected_answer 必须是 int")
    cw, fw = weight("correctness_weight", correctness_weight), weight("format_weight", format_weight)
    text = response.strip()
    pieces, i = [], 0
    while i < len(text):
        start = i
        if text[i] == "-" and i + 1 < len(text) and text[i + 1].isdigit() and text[i + 1].isascii():
            i += 1
        if text[i].isdigit() and text[i].isascii():
            while i < len(text) and text[i].isdigit() and text[i].isascii():
                i += 1
            pieces.append(text[start:i])
        else:
            i = start + 1
    parsed = int(pieces[-1]) if pieces else None
    correct = float(parsed is not None and parsed == expected_answer)
    fmt = float(len(pieces) == 1 and pieces[0] == text)
    return {"verifier_id": VERIFIER_ID, "status": "unjudgeable" if parsed is None else "ok", "parsed_answer": parsed,
            "correctness": correct, "format_pass": fmt, "total_reward": cw * correct + fw * fmt}
'''

NB04_TABLE = '''
def rewards_per_func_from_lists(outputs, dtype=torch.float32):
    """先校验，再逐行拼出 [N, F]。"""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError("dtype 必须是浮点类型")
    if type(outputs) not in (list, tuple) or not outputs:
        raise ValueError("outputs 必须是非空列表")
    n = None
    for column in outputs:
        if type(column) not in (list, tuple) or not column:
            raise ValueError("每个奖励函数的输出必须是非空列表")
        if n is not None and len(column) != n:
            raise ValueError("各奖励函数的输出长度必须相同")
        n = len(column)
        for value in column:
            if value is not None and (type(value) not in (int, float) or not math.isfinite(value)):
                raise ValueError("奖励必须是有限实数或 None")
    rows = [[float("nan") if outputs[j][i] is None else float(outputs[j][i]) for j in range(len(outputs))]
            for i in range(n)]
    return torch.tensor(rows, dtype=dtype)
'''

NB04_COMBINE = '''
def combine_rewards(rewards_per_func, weights):
    """where 把 NaN 换成 0 再加权；全 NaN 的行改回 NaN。"""
    if not torch.is_tensor(rewards_per_func) or not rewards_per_func.is_floating_point() or rewards_per_func.ndim != 2:
        raise ValueError("rewards_per_func 必须是 [N, F] 浮点张量")
    n, f = rewards_per_func.shape
    if f == 0 or bool(torch.isinf(rewards_per_func).any()):
        raise ValueError("F 必须 >= 1，且不能含 inf")
    w = torch.tensor(weights.tolist() if torch.is_tensor(weights) else weights, dtype=torch.float64)
    if w.ndim != 1 or w.numel() != f or not bool(torch.isfinite(w).all()):
        raise ValueError("weights 必须是 F 个有限数")
    values = rewards_per_func.to(torch.float64)
    known = ~torch.isnan(values)                                                   # [N, F]
    total = torch.where(known, values, torch.zeros_like(values)) @ w               # [N]
    total = torch.where(known.any(dim=1), total, torch.full_like(total, float("nan")))
    return total.to(rewards_per_func.dtype)
'''

NB05_MASK = '''
def completion_mask_from_eos(completion_ids, eos_token_id, pad_mask=None):
    """逐行：argmax 找第一个真实 EOS 的位置。"""
    if not torch.is_tensor(completion_ids) or completion_ids.ndim != 2 or completion_ids.dtype in (
            torch.bool, torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError("completion_ids 必须是 [B, T] 整数张量")
    if type(eos_token_id) is not int:
        raise ValueError("eos_token_id 必须是 int")
    if pad_mask is None:
        real = torch.ones(completion_ids.shape, dtype=torch.bool)
    else:
        if not torch.is_tensor(pad_mask) or pad_mask.shape != completion_ids.shape or pad_mask.is_floating_point():
            raise ValueError("pad_mask 必须是同形状的布尔或 0/1 整数张量")
        if pad_mask.dtype != torch.bool and not bool(((pad_mask == 0) | (pad_mask == 1)).all()):
            raise ValueError("pad_mask 只能含 0 和 1")
        real = pad_mask.bool()
    hit = (completion_ids == eos_token_id) & real                                  # [B, T]
    t = completion_ids.shape[1]
    first = torch.where(hit.any(dim=1), hit.int().argmax(dim=1), torch.full((completion_ids.shape[0],), t))  # [B]
    return (torch.arange(t).unsqueeze(0) <= first.unsqueeze(1)) & real
'''

NB05_LOGPS = '''
def shifted_token_logps(logits, input_ids):
    """logits - logsumexp，再按下一个词元取值。"""
    if not torch.is_tensor(logits) or logits.ndim != 3 or not logits.is_floating_point():
        raise ValueError("logits 必须是 [B, T, V] 浮点张量")
    if not torch.is_tensor(input_ids) or input_ids.ndim != 2 or input_ids.is_floating_point() or input_ids.dtype == torch.bool:
        raise ValueError("input_ids 必须是 [B, T] 整数张量")
    b, t, v = logits.shape
    if tuple(input_ids.shape) != (b, t) or t < 2:
        raise ValueError("input_ids 必须与 logits 的前两维相同，且 T >= 2")
    if bool((input_ids < 0).any()) or bool((input_ids >= v).any()):
        raise ValueError("input_ids 越界")
    scores = logits[:, :-1] - torch.logsumexp(logits[:, :-1], dim=-1, keepdim=True)   # [B, T-1, V]
    return torch.take_along_dim(scores, input_ids[:, 1:].long().unsqueeze(-1), dim=-1).squeeze(-1)  # [B, T-1]
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
    "nb04_verifiable_rewards": {"base": "solution", "cells": {
        "verify_integer_response": NB04_VERIFY,
        "rewards_per_func_from_lists": NB04_TABLE,
        "combine_rewards": NB04_COMBINE,
    }},
    "nb05_logprobs_masks": {"base": "solution", "cells": {
        "completion_mask_from_eos": NB05_MASK,
        "shifted_token_logps": NB05_LOGPS,
    }},
}
