"""Calibration learner k3 (never graded, never a sample learner): every graded function written independently
from the lesson's text by a learner who splits the work into small helpers of their own (a ``_require`` check,
a masked mean, a per-group statistic) and prefers other library calls (sorting and ``segment`` sums, one-hot
matrices, ``torch.expm1``, ``math.fsum``). See k1_compact.py.
"""

nb01_group_advantages = {
    "compute_group_advantages": """
def _require(ok, message):
    if not ok:
        raise ValueError(message)


def _is_real_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def compute_group_advantages(rewards, group_ids, eps=1e-6):
    _require(torch.is_tensor(rewards) and rewards.ndim == 1 and rewards.numel() > 0, "rewards 必须是非空的一维张量")
    _require(torch.is_tensor(group_ids) and tuple(group_ids.shape) == tuple(rewards.shape), "group_ids 必须与 rewards 同形状")
    _require(rewards.dtype.is_floating_point, "rewards 必须是浮点张量")
    _require(not (group_ids.dtype.is_floating_point or group_ids.dtype.is_complex or group_ids.dtype == torch.bool),
             "group_ids 必须是整数张量")
    _require(bool(torch.isfinite(rewards).all()), "rewards 必须都是有限数")
    _require(_is_real_number(eps) and eps > 0, "eps 必须是正的有限数")
    labels = group_ids.to(rewards.device)
    keys = torch.unique(labels)
    onehot = (labels.unsqueeze(0) == keys.unsqueeze(1)).to(torch.float64)   # [K, N]
    x = rewards.to(torch.float64)
    sizes = onehot.sum(dim=1)                                                # [K]
    first = x[(onehot.cumsum(dim=1) == 1).to(torch.int64).argmax(dim=1)]      # [K] first member of each group
    shifted = x - onehot.T @ first                                           # exact 0 in a constant group
    centre = onehot @ shifted / sizes
    deviation = shifted - onehot.T @ centre
    spread = torch.sqrt(onehot @ deviation.square() / sizes)
    return (deviation / (onehot.T @ spread).clamp_min(eps)).to(rewards.dtype)
""",
    "group_relative_advantages": """
def _require(ok, message):
    if not ok:
        raise ValueError(message)


def _rowwise_standardise(table, eps):
    centre = table - table.mean(dim=-1, keepdim=True)
    spread = centre.square().mean(dim=-1, keepdim=True).sqrt()
    return centre / (spread + eps)


def group_relative_advantages(rewards, num_generations, eps=1e-4):
    _require(isinstance(num_generations, int) and not isinstance(num_generations, bool) and num_generations >= 1,
             "num_generations 必须是 >= 1 的整数")
    _require(torch.is_tensor(rewards) and rewards.ndim == 1, "rewards 必须是一维张量")
    _require(rewards.shape[0] % num_generations == 0, "rewards 的长度必须能被 num_generations 整除")
    _require(isinstance(eps, (int, float)) and not isinstance(eps, bool) and math.isfinite(eps) and eps >= 0,
             "eps 必须是非负的有限数")
    table = rewards.reshape(rewards.shape[0] // num_generations, num_generations)
    return _rowwise_standardise(table, eps).flatten()
""",
    "answer_conventions_0001": """
def _advantage_pair(values, divisor):
    centre = values.mean()
    wrong = values[values == 0][0]
    right = values[values == 1][0]
    return (float((wrong - centre) / divisor), float((right - centre) / divisor))


def answer_conventions(group, other):
    g = group.to(torch.float64)
    pop = torch.sqrt(((g - g.mean()) ** 2).mean())
    sample = torch.sqrt(((g - g.mean()) ** 2).sum() / (g.numel() - 1))
    joint = torch.cat((g, other.to(torch.float64)))
    joint_sample = torch.sqrt(((joint - joint.mean()) ** 2).sum() / (joint.numel() - 1))
    divisors = dict(course=torch.clamp(pop, min=1e-6), minimind=pop + 1e-4, trl_group=sample + 1e-4,
                    trl_batch=joint_sample + 1e-4, trl_none=torch.tensor(1.0, dtype=torch.float64),
                    cs336=sample + 1e-6, dr_grpo=torch.tensor(1.0, dtype=torch.float64))
    return {name: _advantage_pair(g, d) for name, d in divisors.items()}
""",
}

nb02_grpo_objective = {
    "token_kl_penalty": """
def _same_shape_tensors(a, b):
    return torch.is_tensor(a) and torch.is_tensor(b) and tuple(a.shape) == tuple(b.shape)


def token_kl_penalty(policy_logps, ref_logps):
    if not _same_shape_tensors(policy_logps, ref_logps):
        raise ValueError("policy_logps 与 ref_logps 必须是同形状的张量")
    gap = policy_logps - ref_logps.detach()        # log(pi / pi_ref)
    return torch.expm1(-gap) + gap
""",
    "compute_grpo_loss": """
def _masked_row_mean(values, weights):
    return (values * weights).sum(dim=-1) / weights.sum(dim=-1)


def _clipped_surrogate(ratio, advantage, clip_range):
    low, high = 1.0 - clip_range, 1.0 + clip_range
    return torch.where(advantage >= 0, torch.clamp(ratio, max=high) * advantage, torch.clamp(ratio, min=low) * advantage)


def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    mask, clip_range, beta = check_grpo_inputs(log_probs_new, log_probs_old, rewards, group_ids, response_mask,
                                               clip_range, eps, log_probs_ref, beta)
    if beta > 0 and log_probs_ref is None:
        raise ValueError("beta > 0 时需要参考策略的 log_probs_ref")
    weights = mask.to(log_probs_new.dtype)
    if bool((weights.sum(dim=-1) == 0).any()):
        raise ValueError("response_mask 有一行全为 0")
    advantages = compute_group_advantages(rewards, group_ids, eps=eps)
    delta = torch.where(mask, log_probs_new - log_probs_old.detach(), torch.zeros_like(log_probs_new))
    column = advantages.detach().to(log_probs_new.dtype).reshape(-1, 1)
    objective = _clipped_surrogate(torch.exp(delta), column, clip_range)
    if beta > 0:
        policy = torch.where(mask, log_probs_new, log_probs_ref.detach())
        objective = objective - beta * token_kl_penalty(policy, log_probs_ref.detach())
    return -_masked_row_mean(objective, weights).mean(), advantages
""",
}

nb03a_cispo_trace_lab = {
    "grpo_policy_loss": """
def _masked_sequence_mean(per_token, valid):
    w = valid.to(per_token.dtype)
    return ((per_token * w).sum(dim=-1) / torch.clamp(w.sum(dim=-1), min=1.0)).mean()


def grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=0.0, ref_logps=None):
    valid = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if not (epsilon >= 0 and epsilon < 1):
        raise ValueError("epsilon 应满足 0 <= epsilon < 1")
    safe_new = torch.where(valid, policy_logps, old_logps.to(policy_logps.dtype))
    rho = torch.exp(safe_new - old_logps)
    adv = advantages.reshape(-1, 1).to(rho.dtype)
    per_token = torch.maximum(-rho * adv, -torch.clamp(rho, 1.0 - epsilon, 1.0 + epsilon) * adv)
    if beta > 0:
        zeros = torch.zeros_like(policy_logps)
        per_token = per_token + beta * token_kl_penalty(torch.where(valid, policy_logps, zeros),
                                                        torch.where(valid, ref_logps.to(zeros.dtype), zeros))
    return _masked_sequence_mean(per_token, valid)
""",
    "cispo_policy_loss": """
def _masked_sequence_mean(per_token, valid):
    w = valid.to(per_token.dtype)
    return ((per_token * w).sum(dim=-1) / torch.clamp(w.sum(dim=-1), min=1.0)).mean()


def cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=0.0, ref_logps=None):
    valid = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if not (epsilon_high > 0):
        raise ValueError("epsilon_high 应大于 0")
    zeros = torch.zeros_like(policy_logps)
    logp = torch.where(valid, policy_logps, zeros)
    capped = torch.minimum(torch.exp(logp - torch.where(valid, old_logps.to(zeros.dtype), zeros)),
                           torch.full_like(zeros, float(epsilon_high)))
    per_token = -(capped.detach() * advantages.reshape(-1, 1).to(zeros.dtype)) * logp
    if beta > 0:
        per_token = per_token + beta * token_kl_penalty(logp, torch.where(valid, ref_logps.to(zeros.dtype), zeros))
    return _masked_sequence_mean(per_token, valid)
""",
    "gradient_answers": """
def _grpo_grad(a, r, eps=0.2):
    inside = (1 - eps) <= r <= (1 + eps)
    pushes_out = (a > 0 and r > 1 + eps) or (a < 0 and r < 1 - eps)
    return 0.0 if (not inside and pushes_out) else -a * r


def gradient_answers(advantage, ratio):
    return _grpo_grad(advantage, ratio), -advantage * (5.0 if ratio > 5.0 else ratio)
""",
    "q2_answer": "def q2_flat_index(i, j, num_generations):\n    return int(i) * int(num_generations) + int(j)\n",
    "q3_answer": "q3_choice = str('A')\n",
    "q5_answer": "q5_choice = ['A', 'B', 'C', 'D'][1]\n",
    "q8_answer": "q8_unchanged = set('abcdef') | {'h'}\n",
}

nb03b_loss_family_trl = {
    "reduce_per_token_loss": """
def _sum_over(values, valid, dim=None):
    kept = torch.where(valid, values, torch.zeros_like(values))
    return kept.sum() if dim is None else kept.sum(dim=dim)


def reduce_per_token_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    if not (torch.is_tensor(per_token_loss) and per_token_loss.ndim == 2):
        raise ValueError("per_token_loss 必须是 [B*G, T] 二维张量")
    valid = completion_bool_mask(completion_mask, per_token_loss.shape)
    counts = valid.sum(dim=-1).to(per_token_loss.dtype)
    reducers = {
        "grpo": lambda: (_sum_over(per_token_loss, valid, -1) / torch.clamp(counts, min=1.0)).mean(),
        "bnpo": lambda: _sum_over(per_token_loss, valid) / torch.clamp(counts.sum(), min=1.0),
    }
    if loss_type in reducers:
        return reducers[loss_type]()
    if loss_type == "dr_grpo":
        length = max_completion_length
        ok = length is not None and not isinstance(length, bool) and float(length).is_integer()
        if not ok or length < per_token_loss.shape[-1]:
            raise ValueError("dr_grpo 需要不小于 T 的整数 max_completion_length")
        return _sum_over(per_token_loss, valid) / (per_token_loss.shape[0] * int(length))
    if loss_type not in ("dapo", "cispo"):
        raise ValueError(f"未知的 loss_type：{loss_type}")
    if num_items_in_batch is None:
        raise ValueError(f"{loss_type} 需要 num_items_in_batch")
    items = float(num_items_in_batch)
    if math.isnan(items) or items < 0:
        raise ValueError("num_items_in_batch 必须 >= 0")
    return _sum_over(per_token_loss, valid) / max(items, 1.0)
""",
    "importance_ratio": """
def _masked_log_ratio(policy_logps, old_logps, valid):
    return torch.where(valid, policy_logps - old_logps, torch.zeros_like(policy_logps))


def importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level="token"):
    if not (torch.is_tensor(policy_logps) and policy_logps.ndim == 2):
        raise ValueError("policy_logps 必须是 [B*G, T] 二维张量")
    if not (torch.is_tensor(old_logps) and tuple(old_logps.shape) == tuple(policy_logps.shape)):
        raise ValueError("old_logps 必须与 policy_logps 同形状")
    valid = completion_bool_mask(completion_mask, policy_logps.shape)
    log_ratio = _masked_log_ratio(policy_logps, old_logps, valid)
    levels = {
        "token": lambda: log_ratio.exp(),
        "sequence": lambda: (log_ratio.sum(-1, keepdim=True)
                             / valid.to(log_ratio.dtype).sum(-1, keepdim=True).clamp(min=1.0)).exp(),
    }
    if importance_sampling_level not in levels:
        raise ValueError(f"未知的 importance_sampling_level：{importance_sampling_level}")
    return levels[importance_sampling_level]()
""",
    "per_token_policy_loss": """
def _check_clip(loss_type, epsilon_low, epsilon_high):
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type 必须是 {LOSS_TYPES} 之一")
    if not (0.0 <= epsilon_low < 1.0):
        raise ValueError("epsilon_low 必须在 [0, 1) 内")
    if epsilon_high < 0 or (loss_type == "cispo" and not epsilon_high > 0):
        raise ValueError("epsilon_high 不合法")


def per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                          epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None):
    valid = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    _check_clip(loss_type, epsilon_low, epsilon_high)
    rho = importance_ratio(policy_logps, old_logps, valid, importance_sampling_level)
    adv = advantages.reshape(-1, 1).to(policy_logps.dtype)
    zeros = torch.zeros_like(policy_logps)
    logp = torch.where(valid, policy_logps, zeros)
    if loss_type == "cispo":
        loss = -(torch.minimum(rho, torch.full_like(rho, float(epsilon_high))).detach() * adv) * logp
    else:
        loss = torch.maximum(-rho * adv, -torch.clamp(rho, 1.0 - epsilon_low, 1.0 + epsilon_high) * adv) + zeros
    if beta != 0:
        loss = loss + beta * token_kl_penalty(logp, torch.where(valid, ref_logps.to(zeros.dtype), zeros))
    return loss
""",
    "q9_answer": """
def q9_ratio(short_len, long_len):
    per_token_grpo = lambda length: 1.0 / length
    return {"grpo": per_token_grpo(long_len) / per_token_grpo(short_len), "dapo": 1.0}
""",
}

nb04_verifiable_rewards = {
    "verify_integer_response": """
VERIFIER_ID = "integer-answer-v1"
_INTEGER = re.compile(r"-?[0-9]+")


def _weight(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} 必须是实数")
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise ValueError(f"{name} 必须是有限的非负数")
    return float(value)


def _last_integer(text):
    matches = [m.group(0) for m in _INTEGER.finditer(text)]
    return int(matches[-1]) if matches else None


def verify_integer_response(response, expected_answer, correctness_weight=1.0, format_weight=0.1):
    if not isinstance(response, str):
        raise ValueError("response 必须是字符串")
    if not isinstance(expected_answer, int) or isinstance(expected_answer, bool):
        raise ValueError("expected_answer 必须是 int")
    cw = _weight("correctness_weight", correctness_weight)
    fw = _weight("format_weight", format_weight)
    body = response.strip()
    value = _last_integer(body)
    correctness = 0.0 if value is None or value != expected_answer else 1.0
    format_pass = 1.0 if body and (body[1:] if body[0] == "-" else body).isdigit() and body.isascii() else 0.0
    return {"verifier_id": VERIFIER_ID, "status": "unjudgeable" if value is None else "ok", "parsed_answer": value,
            "correctness": correctness, "format_pass": format_pass, "total_reward": cw * correctness + fw * format_pass}
""",
    "rewards_per_func_from_lists": """
def _as_reward(value, where):
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} 必须是有限实数或 None")
    return float(value)


def rewards_per_func_from_lists(outputs, dtype=torch.float32):
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError("dtype 必须是浮点 dtype")
    if not (isinstance(outputs, (list, tuple)) and len(outputs) > 0):
        raise ValueError("outputs 必须是非空列表")
    lengths = {len(col) if isinstance(col, (list, tuple)) else -1 for col in outputs}
    if len(lengths) != 1 or min(lengths) < 1:
        raise ValueError("每个奖励函数的输出必须是等长的非空列表")
    columns = [torch.tensor([_as_reward(v, f"奖励[{i}, {j}]") for i, v in enumerate(col)], dtype=dtype)
               for j, col in enumerate(outputs)]
    return torch.stack(columns, dim=1)
""",
    "combine_rewards": """
def _finite_weights(weights, count, dtype):
    w = torch.tensor(weights.tolist() if torch.is_tensor(weights) else list(weights), dtype=dtype)
    if w.ndim != 1 or w.numel() != count or not bool(torch.isfinite(w).all()):
        raise ValueError(f"weights 必须是 {count} 个有限数")
    return w


def combine_rewards(rewards_per_func, weights):
    if not (torch.is_tensor(rewards_per_func) and rewards_per_func.is_floating_point() and rewards_per_func.ndim == 2):
        raise ValueError("rewards_per_func 必须是 [N, F] 浮点张量")
    if rewards_per_func.shape[1] < 1 or bool(torch.isinf(rewards_per_func).any()):
        raise ValueError("F 必须 >= 1，且不能含 inf")
    w = _finite_weights(weights, rewards_per_func.shape[1], rewards_per_func.dtype)
    scored = ~torch.isnan(rewards_per_func)
    total = (torch.nan_to_num(rewards_per_func, nan=0.0) * w).sum(dim=1)
    return total.masked_fill(~scored.any(dim=1), float("nan"))
""",
}

nb05_logprobs_masks = {
    "completion_mask_from_eos": """
def _bool_pad_mask(pad_mask, like):
    if pad_mask is None:
        return torch.ones(like.shape, dtype=torch.bool, device=like.device)
    if not torch.is_tensor(pad_mask) or tuple(pad_mask.shape) != tuple(like.shape) or pad_mask.is_complex():
        raise ValueError("pad_mask 必须是与 completion_ids 同形状的布尔或 0/1 张量")
    if pad_mask.dtype == torch.bool:
        return pad_mask
    if not bool(torch.isin(pad_mask, torch.tensor([0, 1], dtype=pad_mask.dtype)).all()):
        raise ValueError("pad_mask 只能含 0 和 1")
    return pad_mask.to(torch.bool)


def completion_mask_from_eos(completion_ids, eos_token_id, pad_mask=None):
    if not (torch.is_tensor(completion_ids) and completion_ids.ndim == 2):
        raise ValueError("completion_ids 必须是 [B, T] 张量")
    if completion_ids.dtype.is_floating_point or completion_ids.dtype.is_complex or completion_ids.dtype == torch.bool:
        raise ValueError("completion_ids 必须是整数张量")
    if not isinstance(eos_token_id, int) or isinstance(eos_token_id, bool):
        raise ValueError("eos_token_id 必须是 int")
    real = _bool_pad_mask(pad_mask, completion_ids)
    hits = (completion_ids == eos_token_id) & real
    width = completion_ids.shape[1]
    positions = torch.arange(width, device=completion_ids.device).expand_as(completion_ids)
    first = torch.where(hits, positions, torch.full_like(positions, width)).min(dim=1, keepdim=True).values
    return (positions <= first) & real
""",
    "shifted_token_logps": """
def _integer_tensor(x):
    return torch.is_tensor(x) and not (x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool)


def shifted_token_logps(logits, input_ids):
    if not (torch.is_tensor(logits) and logits.ndim == 3 and logits.dtype.is_floating_point):
        raise ValueError("logits 必须是 [B, T, V] 浮点张量")
    if not (_integer_tensor(input_ids) and input_ids.ndim == 2):
        raise ValueError("input_ids 必须是 [B, T] 整数张量")
    if tuple(input_ids.shape) != tuple(logits.shape[:2]):
        raise ValueError("input_ids 的形状必须等于 logits 的前两维")
    if logits.shape[1] < 2:
        raise ValueError("T 必须至少为 2")
    vocab = logits.shape[-1]
    if bool(((input_ids < 0) | (input_ids >= vocab)).any()):
        raise ValueError("input_ids 超出 [0, V)")
    predictions, targets = logits[:, :-1, :], input_ids[:, 1:].to(torch.int64)
    picked = predictions.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - predictions.logsumexp(dim=-1)
""",
}

nb07_online_grpo = {
    "sample_group": """
def _check_sampling_args(prompts, num_generations, temperature, top_p, max_new_tokens):
    def real(x):
        return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)

    def integer(x):
        return isinstance(x, int) and not isinstance(x, bool)

    if not isinstance(prompts, (list, tuple)) or len(prompts) == 0 or not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts 必须是非空的字符串列表")
    if not (integer(num_generations) and num_generations >= 2):
        raise ValueError("num_generations 必须是 >= 2 的整数")
    if not (real(temperature) and temperature > 0):
        raise ValueError("temperature 必须是正的有限数")
    if not (real(top_p) and 0 < top_p <= 1):
        raise ValueError("top_p 必须在 (0, 1] 内")
    if not (integer(max_new_tokens) and max_new_tokens >= 1):
        raise ValueError("max_new_tokens 必须是正整数")


def _masked_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature):
    values = completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature=temperature)
    return values * completion_mask.to(values.dtype)


def sample_group(model, tokenizer, prompts, num_generations, temperature=1.0, top_p=1.0, max_new_tokens=6,
                 seed=None, ref_model=None):
    _check_sampling_args(prompts, num_generations, temperature, top_p, max_new_tokens)
    device = next(iter(model.parameters())).device
    batch = encode_prompts(tokenizer, [p for p in prompts])
    expand = lambda t: torch.repeat_interleave(t, num_generations, dim=0).to(device)
    prompt_ids, prompt_mask = expand(batch["input_ids"]), expand(batch["attention_mask"])
    if seed is not None:
        torch.manual_seed(seed)
    settings = dict(do_sample=True, temperature=float(temperature), top_p=float(top_p), top_k=0,
                    max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id)
    with torch.no_grad():
        full = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, **settings)
        completion_ids = full[:, prompt_ids.size(1):]
        completion_mask = completion_mask_from_eos(completion_ids, int(tokenizer.eos_token_id))
        args = (prompt_ids, prompt_mask, completion_ids, completion_mask, float(temperature))
        old = _masked_logps(model, *args)
        ref = None if ref_model is None else _masked_logps(ref_model, *args)
    texts = [tokenizer.decode(completion_ids[i][completion_mask[i]].tolist(), skip_special_tokens=True)
             for i in range(completion_ids.size(0))]
    groups = torch.arange(len(prompts), device=device).unsqueeze(1).expand(-1, num_generations).reshape(-1)
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask, "old_per_token_logps": old, "ref_per_token_logps": ref,
            "completions": texts, "group_ids": groups}
""",
    "grpo_step": """
from tools.lessons.nb03b_loss_family_trl import reduce_per_token_loss

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def _as_bool_mask(mask, shape):
    if not torch.is_tensor(mask) or tuple(mask.shape) != tuple(shape):
        raise ValueError(f"completion_mask 的形状必须是 {tuple(shape)}")
    if mask.dtype != torch.bool and (mask.is_complex() or not bool(torch.isin(mask, torch.tensor([0, 1])).all())):
        raise ValueError("completion_mask 必须是 bool 或 0/1")
    return mask.to(torch.bool)


def _positive(name, x):
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} 必须是正的有限数")


def _masked_average(values, weights, total):
    return float((values * weights).sum() / total)


def grpo_step(model, optimizer, rollout, advantages, num_iterations=1, epsilon=0.2, epsilon_high=None, beta=0.0,
              loss_type="grpo", max_grad_norm=1.0, temperature=1.0, max_completion_length=None,
              use_bias_correction_kl=True):
    ids = rollout["completion_ids"]
    valid = _as_bool_mask(rollout["completion_mask"], ids.shape)
    ok_adv = torch.is_tensor(advantages) and advantages.ndim == 1 and advantages.numel() == ids.shape[0]
    if not ok_adv or not advantages.dtype.is_floating_point or not bool(torch.isfinite(advantages).all()):
        raise ValueError("advantages 必须是长度为 N 的有限浮点张量")
    if not (isinstance(num_iterations, int) and not isinstance(num_iterations, bool) and num_iterations >= 1):
        raise ValueError("num_iterations 必须是正整数")
    high = epsilon if epsilon_high is None else epsilon_high
    for name, value in dict(epsilon=epsilon, epsilon_high=high, max_grad_norm=max_grad_norm,
                            temperature=temperature).items():
        _positive(name, value)
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not math.isfinite(beta) or beta < 0:
        raise ValueError("beta 必须是非负的有限数")
    if loss_type not in LOSS_TYPES or not isinstance(use_bias_correction_kl, bool):
        raise ValueError("loss_type 或 use_bias_correction_kl 不合法")
    reference = rollout.get("ref_per_token_logps") if beta > 0 else None
    if beta > 0 and reference is None:
        raise ValueError("beta > 0 需要 ref_per_token_logps")
    old = rollout["old_per_token_logps"].detach()
    weights = valid.to(old.dtype)
    total = weights.sum().clamp(min=1.0)
    adv = advantages.detach().to(old.dtype).reshape(-1, 1)
    trainable = [p for p in model.parameters() if p.requires_grad]
    records = []
    for epoch in range(num_iterations):
        logps, entropies = completion_logps(model, rollout["prompt_ids"], rollout["prompt_mask"], ids, valid,
                                            temperature=float(temperature), with_entropy=True)
        log_ratio = (logps - old).masked_fill(~valid, 0.0)
        rho = log_ratio.exp()
        per_token = torch.maximum(-rho * adv, -rho.clamp(1 - epsilon, 1 + high) * adv)
        kl = None
        if beta > 0:
            kl = token_kl_penalty(logps.masked_fill(~valid, 0.0), reference.masked_fill(~valid, 0.0))
            per_token = per_token + beta * (kl * rho if use_bias_correction_kl else kl)
        loss = reduce_per_token_loss(per_token, valid, loss_type,
                                     max_completion_length=max_completion_length or ids.shape[1],
                                     num_items_in_batch=total)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            records.append({
                "loss": float(loss.detach()),
                "low": _masked_average(((rho < 1 - epsilon) & (adv < 0)).to(old.dtype), weights, total),
                "high": _masked_average(((rho > 1 + high) & (adv > 0)).to(old.dtype), weights, total),
                "kl": _masked_average(rho - 1 - log_ratio, weights, total),
                "ref": None if kl is None else _masked_average(kl, weights, total),
                "entropy": _masked_average(entropies.to(old.dtype), weights, total),
                "norm": float(grad_norm),
            })

    def average(key):
        return sum(r[key] for r in records) / len(records)

    return {"loss": average("loss"), "losses": [r["loss"] for r in records], "clip_ratio_low": average("low"),
            "clip_ratio_high": average("high"), "approx_kl": average("kl"),
            "kl_ref": average("ref") if beta > 0 else None, "entropy": records[0]["entropy"],
            "grad_norm": average("norm"), "num_iterations": num_iterations}
""",
    "log_step_metrics": """
def _validate_metrics_inputs(rewards, num_generations, completion_mask, strict_correct):
    if not (torch.is_tensor(rewards) and rewards.ndim == 1 and rewards.dtype.is_floating_point):
        raise ValueError("rewards 必须是一维浮点张量")
    n = rewards.numel()
    if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError("num_generations 必须是正整数")
    if n < 2 or n % num_generations != 0:
        raise ValueError("rewards 的长度必须 >= 2 且能被 num_generations 整除")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards 必须都是有限数")
    if not (torch.is_tensor(completion_mask) and completion_mask.ndim == 2 and completion_mask.shape[0] == n):
        raise ValueError("completion_mask 必须是 [N, C]")
    if len(strict_correct) != n:
        raise ValueError("strict_correct 的长度必须是 N")
    return _as_bool_mask(completion_mask, completion_mask.shape)


def log_step_metrics(step, rewards, num_generations, completion_mask, update, strict_correct, seconds=0.0):
    mask = _validate_metrics_inputs(rewards, num_generations, completion_mask, strict_correct)
    values = rewards.detach().to("cpu", torch.float64)
    by_group = values.reshape(-1, num_generations)
    spread_zero = (by_group - by_group[:, :1]).abs().amax(dim=1) == 0
    metrics = {
        "step": int(step),
        "reward_mean": math.fsum(values.tolist()) / values.numel(),
        "reward_std": float(torch.std(values, correction=1)),
        "frac_reward_zero_std": float(spread_zero.to(torch.float64).mean()),
        "completion_length": float(mask.to(torch.float64).sum(dim=1).mean()),
        "strict_accuracy": math.fsum(float(x) for x in strict_correct) / values.numel(),
        "seconds": float(seconds),
    }
    metrics.update({k: float(update[k]) for k in ("loss", "clip_ratio_low", "clip_ratio_high", "approx_kl", "entropy",
                                                  "grad_norm")})
    metrics["kl_ref"] = float(update["kl_ref"]) if update.get("kl_ref") is not None else None
    return metrics
""",
}
