"""Full marks: a second, independently written correct implementation of every TODO.

Structure unlike the worked answers: sort-based grouping with scatter_add_/scatter_reduce_ and an explicit
max == min test for constant groups (nb01 TODO 1), unflatten and a two-pass variance (TODO 2), closed forms
(TODO 3); ratio - log(ratio) - 1 for k3 and a loop over candidates with the one-sided clipped surrogate (nb02);
a hand-written integer scanner, row-built tables and a matrix product over NaN-zeroed rewards (nb04); argmax
of the first real EOS and logits minus logsumexp with take_along_dim (nb05). nb04/nb05 keep the worked answer
of their manual-graded question (base "solution"). nb03a/nb03b: written here, and read by tests/test_nb03.py (one home)
(nb03a keeps the worked answers of its four manual-graded questions). nb07: grpo_step validated up front, with a
reduction helper and per-epoch logs; log_step_metrics in plain Python (hand-computed sample std); sample_group
keeps the worked answer.
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
def answer_conventions(group, other):
    """公式：k 个答对时均值 mu = k/G，中心化后 (-mu, 1 - mu)，各约定只差除数。"""
    rewards = [float(v) for v in group.tolist()]
    size = len(rewards)
    mu = sum(rewards) / size
    population = math.sqrt(mu * (1 - mu))                  # population std of a 0/1 group
    sample = population * math.sqrt(size / (size - 1))     # Bessel-corrected
    both = rewards + [float(v) for v in other.tolist()]
    both_mean = sum(both) / len(both)
    batch = math.sqrt(sum((v - both_mean) ** 2 for v in both) / (len(both) - 1))

    def pair(scale):
        return (-mu / scale, (1 - mu) / scale)

    return {"course": pair(max(population, 1e-6)), "minimind": pair(population + 1e-4),
            "trl_group": pair(sample + 1e-4), "trl_batch": pair(batch + 1e-4), "trl_none": pair(1.0),
            "cs336": pair(sample + 1e-6), "dr_grpo": pair(1.0)}
'''

NB03A_GRADIENTS = '''
def gradient_answers(advantage, ratio):
    """A > 0 里 r > 1.2、A < 0 里 r < 0.8 时 GRPO 取了裁剪分支（常数），导数 0；其余 -A r。CISPO：-A min(r, 5)。"""
    grpo_dead = ratio > 1.2 if advantage > 0 else ratio < 0.8
    return (0.0 if grpo_dead else -advantage * ratio, -advantage * min(ratio, 5.0))
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
        raise ValueError("response_mask 必须是同形布尔张量")
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
        if not torch.is_tensor(pad_mask) or pad_mask.shape != completion_ids.shape or pad_mask.is_complex():
            raise ValueError("pad_mask 必须是同形状的布尔或 0/1 实数张量")
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

# nb03a / nb03b: independent implementations written from the notebooks' contracts (tests/test_nb03.py reads them)
NB03A_GRPO = '''
def grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=0.0, ref_logps=None):
    keep = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta, ref_logps)
    if epsilon < 0 or epsilon >= 1:
        raise ValueError("epsilon 越界")
    log_r = (policy_logps - old_logps).masked_fill(~keep, 0.0)
    r = log_r.exp()
    a = advantages[:, None].to(r.dtype)
    unclipped = r * a
    clipped = r.clamp(min=1 - epsilon, max=1 + epsilon) * a
    objective = torch.where(unclipped < clipped, unclipped, clipped)
    if beta:
        d = (ref_logps - policy_logps).masked_fill(~keep, 0.0)
        objective = objective - beta * (d.exp() - d - 1)
    m = keep.to(r.dtype)
    counts = torch.maximum(m.sum(-1), torch.ones_like(m[:, 0]))
    return -((objective * m).sum(-1) / counts).sum() / m.shape[0]
'''

NB03A_CISPO = '''
def cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=0.0, ref_logps=None):
    keep = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta, ref_logps)
    if epsilon_high <= 0:
        raise ValueError("epsilon_high 必须为正")
    with torch.no_grad():
        w = (policy_logps - old_logps).masked_fill(~keep, 0.0).exp().clamp(max=epsilon_high)
    lp = policy_logps.masked_fill(~keep, 0.0)
    objective = w * advantages[:, None] * lp
    if beta:
        d = (ref_logps - policy_logps).masked_fill(~keep, 0.0)
        objective = objective - beta * (d.exp() - d - 1)
    m = keep.to(policy_logps.dtype)
    counts = m.sum(-1).clamp(min=1)
    return (-(objective * m).sum(-1) / counts).mean()
'''

NB03B_REDUCE = '''
def reduce_per_token_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    if not torch.is_tensor(per_token_loss) or per_token_loss.ndim != 2:
        raise ValueError("per_token_loss 不是二维张量")
    if not torch.is_tensor(completion_mask) or tuple(completion_mask.shape) != tuple(per_token_loss.shape):
        raise ValueError("mask 形状不对")
    if completion_mask.dtype != torch.bool and not bool(((completion_mask == 0) | (completion_mask == 1)).all()):
        raise ValueError("mask 只能取 0/1")
    keep = completion_mask.bool()
    m = keep.to(per_token_loss.dtype)
    v = per_token_loss.masked_fill(~keep, 0.0)
    total = v.sum()
    if loss_type == "grpo":
        return (v.sum(1) / m.sum(1).clamp(min=1)).mean()
    if loss_type == "bnpo":
        return total / m.sum().clamp(min=1)
    if loss_type == "dr_grpo":
        ok = isinstance(max_completion_length, int) and not isinstance(max_completion_length, bool)
        if not ok or max_completion_length < per_token_loss.shape[1]:
            raise ValueError("max_completion_length 不合法")
        return total / (per_token_loss.shape[0] * max_completion_length)
    if loss_type in ("dapo", "cispo"):
        if num_items_in_batch is None:
            raise ValueError("缺少 num_items_in_batch")
        n = num_items_in_batch.item() if torch.is_tensor(num_items_in_batch) else num_items_in_batch
        if n < 0:
            raise ValueError("num_items_in_batch 为负")
        return total / max(n, 1)
    raise ValueError(f"未知 loss_type {loss_type}")
'''

NB03B_RATIO = '''
def importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level="token"):
    if policy_logps.ndim != 2 or old_logps.shape != policy_logps.shape or completion_mask.shape != policy_logps.shape:
        raise ValueError("形状不一致")
    if completion_mask.dtype != torch.bool and not bool(((completion_mask == 0) | (completion_mask == 1)).all()):
        raise ValueError("mask 只能取 0/1")
    keep = completion_mask.bool()
    log_r = (policy_logps - old_logps).masked_fill(~keep, 0.0)
    if importance_sampling_level == "token":
        return log_r.exp()
    if importance_sampling_level != "sequence":
        raise ValueError("未知的 importance_sampling_level")
    m = keep.to(policy_logps.dtype)
    return (log_r.sum(1) / m.sum(1).clamp(min=1)).exp().unsqueeze(1)
'''

NB03B_PER_TOKEN = '''
def per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                          epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None):
    keep = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta, ref_logps)
    if loss_type not in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo"):
        raise ValueError("未知 loss_type")
    if not (0 <= epsilon_low < 1) or epsilon_high < 0 or (loss_type == "cispo" and epsilon_high == 0):
        raise ValueError("裁剪参数越界")
    r = importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level)
    a = advantages.view(-1, 1)
    lp = policy_logps.masked_fill(~keep, 0.0)
    if loss_type == "cispo":
        out = -(torch.clamp(r, max=epsilon_high).detach() * a) * lp
    else:
        c = torch.clamp(r, 1 - epsilon_low, 1 + epsilon_high)
        out = torch.maximum(-r * a, -c * a) + torch.zeros_like(policy_logps)
    if beta != 0:
        out = out + beta * token_kl_penalty(lp, ref_logps.masked_fill(~keep, 0.0))
    return out
'''

NB07_GRPO_STEP = '''
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def _positive(name, value):
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} 必须是正的有限数")
    return float(value)


def grpo_step(model, optimizer, rollout, advantages, num_iterations=1, epsilon=0.2, epsilon_high=None, beta=0.0,
              loss_type="grpo", max_grad_norm=1.0, temperature=1.0, max_completion_length=None,
              use_bias_correction_kl=True):
    """先做全部校验；每个 epoch 一次前向、一次反向，指标逐 epoch 记下再取平均。"""
    ids = rollout["completion_ids"]                                            # [N, C]
    n, c = ids.shape
    raw = rollout["completion_mask"]
    if not torch.is_tensor(raw) or tuple(raw.shape) != (n, c):
        raise ValueError("completion_mask 的形状必须是 [N, C]")
    if raw.dtype != torch.bool and (raw.is_complex() or not bool(((raw == 0) | (raw == 1)).all())):
        raise ValueError("completion_mask 只能含 0/1")
    keep = raw.ne(0)                                                           # [N, C] bool
    if not torch.is_tensor(advantages) or tuple(advantages.shape) != (n,) or not advantages.is_floating_point():
        raise ValueError("advantages 必须是长度 N 的浮点张量")
    if not bool(torch.isfinite(advantages).all()):
        raise ValueError("advantages 含 NaN 或 inf")
    if type(num_iterations) is not int or num_iterations < 1:
        raise ValueError("num_iterations 必须是正整数")
    eps_low = _positive("epsilon", epsilon)
    eps_high = eps_low if epsilon_high is None else _positive("epsilon_high", epsilon_high)
    clip_norm = _positive("max_grad_norm", max_grad_norm)
    temp = _positive("temperature", temperature)
    if type(beta) not in (int, float) or not math.isfinite(beta) or beta < 0:
        raise ValueError("beta 必须是非负的有限数")
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"未知的 loss_type {loss_type!r}")
    if type(use_bias_correction_kl) is not bool:
        raise ValueError("use_bias_correction_kl 必须是 bool")
    ref = rollout.get("ref_per_token_logps")
    if beta > 0 and ref is None:
        raise ValueError("beta > 0 时需要 ref_per_token_logps")
    width = c if max_completion_length is None else max_completion_length
    old = rollout["old_per_token_logps"].detach()                             # [N, C]
    w = keep.to(old.dtype)                                                     # [N, C]
    a = advantages.detach().to(old.dtype).view(n, 1)                           # [N, 1]
    token_count = max(float(w.sum()), 1.0)

    def batch_mean(values):
        return float((values * w).sum()) / token_count

    def reduce(per_token):
        if loss_type == "grpo":
            return ((per_token * w).sum(1) / w.sum(1).clamp(min=1.0)).mean()
        if loss_type == "dr_grpo":
            return (per_token * w).sum() / (n * width)
        return (per_token * w).sum() / token_count

    params = [p for p in model.parameters() if p.requires_grad]
    log = {"loss": [], "low": [], "high": [], "kl": [], "ref": [], "norm": []}
    entropy = None
    for epoch in range(num_iterations):
        new, ent = completion_logps(model, rollout["prompt_ids"], rollout["prompt_mask"], ids, keep,
                                    temperature=temp, with_entropy=True)      # [N, C], [N, C]
        delta = torch.where(keep, new - old, torch.zeros_like(new))           # [N, C] masked before exp
        rho = delta.exp()
        surrogate = torch.minimum(rho * a, rho.clamp(1.0 - eps_low, 1.0 + eps_high) * a)
        per_token = -surrogate
        if beta > 0:
            gap = torch.where(keep, ref - new, torch.zeros_like(new))
            penalty = gap.exp() - gap - 1.0
            if use_bias_correction_kl:  # TRL's default: the KL term times the (differentiable) ratio
                penalty = penalty * rho
            per_token = per_token + beta * penalty
        loss = reduce(per_token)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, clip_norm)
        optimizer.step()
        with torch.no_grad():
            log["loss"].append(float(loss))
            log["low"].append(batch_mean(((rho < 1.0 - eps_low) & (a < 0)).to(old.dtype)))
            log["high"].append(batch_mean(((rho > 1.0 + eps_high) & (a > 0)).to(old.dtype)))
            log["kl"].append(batch_mean(rho - 1.0 - delta))
            if beta > 0:
                log["ref"].append(batch_mean(penalty))
            if epoch == 0:
                entropy = batch_mean(ent.to(old.dtype))
            log["norm"].append(float(norm))

    def avg(key):
        return sum(log[key]) / len(log[key])

    return {"loss": avg("loss"), "losses": list(log["loss"]), "clip_ratio_low": avg("low"),
            "clip_ratio_high": avg("high"), "approx_kl": avg("kl"), "kl_ref": avg("ref") if log["ref"] else None,
            "entropy": entropy, "grad_norm": avg("norm"), "num_iterations": num_iterations}
'''

NB07_LOG_STEP_METRICS = '''
def log_step_metrics(step, rewards, num_generations, completion_mask, update, strict_correct, seconds=0.0):
    """纯 Python 统计：样本标准差手算，全等组用“每组都等于组内第一个”判断。"""
    if not torch.is_tensor(rewards) or rewards.ndim != 1 or not rewards.is_floating_point():
        raise ValueError("rewards 必须是一维浮点张量")
    values = [float(v) for v in rewards.detach().cpu().tolist()]
    n = len(values)
    if type(num_generations) is not int or num_generations < 1 or n < 2 or n % num_generations:
        raise ValueError("rewards 的长度必须 >= 2 且是 num_generations 的整数倍")
    if not all(math.isfinite(v) for v in values):
        raise ValueError("rewards 含 NaN 或 inf")
    if not torch.is_tensor(completion_mask) or completion_mask.ndim != 2 or completion_mask.shape[0] != n:
        raise ValueError("completion_mask 必须是 [N, C]")
    if completion_mask.dtype != torch.bool and (completion_mask.is_complex()
                                                or not bool(((completion_mask == 0) | (completion_mask == 1)).all())):
        raise ValueError("completion_mask 只能含 0/1")
    if len(strict_correct) != n:
        raise ValueError("strict_correct 的长度必须是 N")
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    groups = [values[i:i + num_generations] for i in range(0, n, num_generations)]
    flat = sum(1.0 for g in groups if all(v == g[0] for v in g)) / len(groups)
    lengths = completion_mask.ne(0).sum(dim=1).tolist()
    row = {"step": int(step), "reward_mean": mean, "reward_std": std, "frac_reward_zero_std": flat,
           "completion_length": sum(lengths) / n, "strict_accuracy": sum(float(x) for x in strict_correct) / n,
           "seconds": float(seconds)}
    for key in ("loss", "clip_ratio_low", "clip_ratio_high", "approx_kl", "entropy", "grad_norm"):
        row[key] = float(update[key])
    row["kl_ref"] = None if update.get("kl_ref") is None else float(update["kl_ref"])
    return row
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
    "nb03a_cispo_trace_lab": {"base": "solution", "cells": {
        "grpo_policy_loss": NB03A_GRPO,
        "cispo_policy_loss": NB03A_CISPO,
        "gradient_answers": NB03A_GRADIENTS,
        "q2_answer": "def q2_flat_index(i, j, num_generations):\n    return num_generations * i + j",
        "q3_answer": 'q3_choice = "A"',
        "q5_answer": 'q5_choice = "B"',
        "q8_answer": 'q8_unchanged = set("abcdefh")',
    }},
    "nb03b_loss_family_trl": {"base": "release", "cells": {
        "reduce_per_token_loss": NB03B_REDUCE,
        "importance_ratio": NB03B_RATIO,
        "per_token_policy_loss": NB03B_PER_TOKEN,
        "q9_answer": 'def q9_ratio(short_len, long_len):\n    return {"grpo": float(short_len) / long_len, "dapo": 1}',
    }},
    "nb07_online_grpo": {"base": "solution", "cells": {
        "grpo_step": NB07_GRPO_STEP,
        "log_step_metrics": NB07_LOG_STEP_METRICS,
    }},
}
