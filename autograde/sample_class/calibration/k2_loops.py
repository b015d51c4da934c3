"""Calibration learner k2 (never graded, never a sample learner): every graded function written independently
from the lesson's text the way a learner new to tensors writes it - one check per condition with its own message,
Python loops over groups, rows and candidates, intermediate values named step by step. See k1_compact.py.
"""

nb01_group_advantages = {
    "compute_group_advantages": """
def compute_group_advantages(rewards, group_ids, eps=1e-6):
    if not torch.is_tensor(rewards):
        raise ValueError("rewards 必须是张量")
    if not torch.is_tensor(group_ids):
        raise ValueError("group_ids 必须是张量")
    if rewards.dim() != 1:
        raise ValueError("rewards 必须是一维的")
    if rewards.shape != group_ids.shape:
        raise ValueError("group_ids 与 rewards 形状必须一样")
    if len(rewards) == 0:
        raise ValueError("rewards 不能为空")
    if not rewards.is_floating_point():
        raise ValueError("rewards 必须是浮点类型")
    if group_ids.dtype in (torch.bool, torch.float16, torch.bfloat16, torch.float32, torch.float64) \\
            or group_ids.is_complex():
        raise ValueError("group_ids 必须是整数类型")
    for value in rewards.tolist():
        if value != value or value in (math.inf, -math.inf):
            raise ValueError("rewards 里有 NaN 或 inf")
    if type(eps) not in (int, float) or eps != eps or eps == math.inf or eps <= 0:
        raise ValueError("eps 必须是正的有限数")
    values = rewards.tolist()
    labels = group_ids.tolist()
    members = {}
    for position, label in enumerate(labels):
        members.setdefault(label, []).append(position)
    result = [0.0] * len(values)
    for label, positions in members.items():
        group = [values[p] for p in positions]
        if max(group) == min(group):
            continue
        average = sum(group) / len(group)
        spread = math.sqrt(sum((v - average) ** 2 for v in group) / len(group))
        for p in positions:
            result[p] = (values[p] - average) / max(spread, eps)
    return torch.tensor(result, dtype=rewards.dtype, device=rewards.device)
""",
    "group_relative_advantages": """
def group_relative_advantages(rewards, num_generations, eps=1e-4):
    if type(num_generations) is not int:
        raise ValueError("num_generations 必须是整数")
    if num_generations < 1:
        raise ValueError("num_generations 至少为 1")
    if not torch.is_tensor(rewards):
        raise ValueError("rewards 必须是张量")
    if rewards.dim() != 1:
        raise ValueError("rewards 必须是一维的")
    if len(rewards) % num_generations != 0:
        raise ValueError("rewards 的长度必须是 num_generations 的整数倍")
    if type(eps) not in (int, float) or eps != eps or eps == math.inf or eps < 0:
        raise ValueError("eps 必须是非负的有限数")
    pieces = []
    for start in range(0, len(rewards), num_generations):
        group = rewards[start:start + num_generations]
        average = group.mean()
        spread = ((group - average) ** 2).mean().sqrt()
        pieces.append((group - average) / (spread + eps))
    return torch.cat(pieces)
""",
    "answer_conventions_0001": """
def answer_conventions(group, other):
    values = [float(v) for v in group]
    size = len(values)
    average = sum(values) / size
    population_var = sum((v - average) ** 2 for v in values) / size
    sample_var = sum((v - average) ** 2 for v in values) / (size - 1)
    batch = values + [float(v) for v in other]
    batch_average = sum(batch) / len(batch)
    batch_var = sum((v - batch_average) ** 2 for v in batch) / (len(batch) - 1)
    wrong = values.index(0.0)
    right = values.index(1.0)
    answers = {}
    for name, divisor in [("course", max(math.sqrt(population_var), 1e-6)),
                          ("minimind", math.sqrt(population_var) + 1e-4),
                          ("trl_group", math.sqrt(sample_var) + 1e-4),
                          ("trl_batch", math.sqrt(batch_var) + 1e-4),
                          ("trl_none", 1.0),
                          ("cs336", math.sqrt(sample_var) + 1e-6),
                          ("dr_grpo", 1.0)]:
        answers[name] = ((values[wrong] - average) / divisor, (values[right] - average) / divisor)
    return answers
""",
}

nb02_grpo_objective = {
    "token_kl_penalty": """
def token_kl_penalty(policy_logps, ref_logps):
    if not torch.is_tensor(policy_logps):
        raise ValueError("policy_logps 必须是张量")
    if not torch.is_tensor(ref_logps):
        raise ValueError("ref_logps 必须是张量")
    if policy_logps.shape != ref_logps.shape:
        raise ValueError("两个输入的形状必须相同")
    frozen_ref = ref_logps.detach()
    log_ratio = frozen_ref - policy_logps
    ratio = torch.exp(log_ratio)
    penalty = ratio - log_ratio - 1
    return penalty
""",
    "compute_grpo_loss": """
def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    checked = check_grpo_inputs(log_probs_new, log_probs_old, rewards, group_ids, response_mask, clip_range, eps,
                                log_probs_ref, beta)
    mask = checked[0]
    clip_range = checked[1]
    beta = checked[2]
    if beta > 0:
        if log_probs_ref is None:
            raise ValueError("beta > 0 时必须给出 log_probs_ref")
    for row in range(mask.shape[0]):
        if not bool(mask[row].any()):
            raise ValueError(f"第 {row} 个候选没有有效词元")
    advantages = compute_group_advantages(rewards, group_ids, eps=eps)
    candidate_losses = []
    for row in range(log_probs_new.shape[0]):
        keep = mask[row]
        new = log_probs_new[row][keep]
        old = log_probs_old[row][keep].detach()
        advantage = advantages[row].detach().to(new.dtype)
        ratio = torch.exp(new - old)
        unclipped = ratio * advantage
        clipped = torch.clamp(ratio, 1 - clip_range, 1 + clip_range) * advantage
        token_loss = -torch.minimum(unclipped, clipped)
        if beta > 0:
            ref = log_probs_ref[row][keep].detach()
            token_loss = token_loss + beta * token_kl_penalty(new, ref)
        candidate_losses.append(token_loss.mean())
    loss = torch.stack(candidate_losses).mean()
    return loss, advantages
""",
}

nb03a_cispo_trace_lab = {
    "grpo_policy_loss": """
def grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=0.0, ref_logps=None):
    valid = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if epsilon < 0:
        raise ValueError("epsilon 不能小于 0")
    if epsilon >= 1:
        raise ValueError("epsilon 必须小于 1")
    rows = []
    for i in range(policy_logps.shape[0]):
        keep = valid[i]
        if not bool(keep.any()):
            rows.append(policy_logps[i].sum() * 0.0)
            continue
        new = policy_logps[i][keep]
        old = old_logps[i][keep]
        ratio = torch.exp(new - old)
        a = advantages[i].to(ratio.dtype)
        surrogate = torch.minimum(ratio * a, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * a)
        token_loss = -surrogate
        if beta != 0:
            ref = ref_logps[i][keep].to(new.dtype)
            token_loss = token_loss + beta * token_kl_penalty(new, ref)
        rows.append(token_loss.mean())
    return torch.stack(rows).mean()
""",
    "cispo_policy_loss": """
def cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=0.0, ref_logps=None):
    valid = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if epsilon_high <= 0:
        raise ValueError("epsilon_high 必须大于 0")
    rows = []
    for i in range(policy_logps.shape[0]):
        keep = valid[i]
        if not bool(keep.any()):
            rows.append(policy_logps[i].sum() * 0.0)
            continue
        new = policy_logps[i][keep]
        old = old_logps[i][keep]
        with torch.no_grad():
            weight = torch.exp(new - old).clamp(max=epsilon_high)
        token_loss = -weight * advantages[i].to(new.dtype) * new
        if beta != 0:
            token_loss = token_loss + beta * token_kl_penalty(new, ref_logps[i][keep].to(new.dtype))
        rows.append(token_loss.mean())
    return torch.stack(rows).mean()
""",
    "gradient_answers": """
def gradient_answers(advantage, ratio):
    epsilon = 0.2
    epsilon_high = 5.0
    if advantage > 0 and ratio > 1 + epsilon:
        grpo = 0.0
    elif advantage < 0 and ratio < 1 - epsilon:
        grpo = 0.0
    else:
        grpo = -advantage * ratio
    if ratio > epsilon_high:
        cispo = -advantage * epsilon_high
    else:
        cispo = -advantage * ratio
    return float(grpo), float(cispo)
""",
    "q2_answer": "def q2_flat_index(i, j, num_generations):\n    index = i * num_generations\n    index = index + j\n"
    "    return index\n",
    "q3_answer": 'q3_choice = "A"  # 裁剪只在优势推动比率越界的那一侧生效\n',
    "q5_answer": 'q5_choice = "B"\n',
    "q8_answer": 'q8_unchanged = set()\nfor letter in "abcdefh":\n    q8_unchanged.add(letter)\n',
}

nb03b_loss_family_trl = {
    "reduce_per_token_loss": """
def reduce_per_token_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    if not torch.is_tensor(per_token_loss):
        raise ValueError("per_token_loss 必须是张量")
    if per_token_loss.dim() != 2:
        raise ValueError("per_token_loss 必须是二维的 [B*G, T]")
    valid = completion_bool_mask(completion_mask, per_token_loss.shape)
    rows, width = per_token_loss.shape
    if loss_type == "grpo":
        means = []
        for i in range(rows):
            count = max(int(valid[i].sum()), 1)
            means.append(per_token_loss[i][valid[i]].sum() / count)
        return torch.stack(means).mean()
    total = per_token_loss[valid].sum()
    if loss_type == "bnpo":
        return total / max(int(valid.sum()), 1)
    if loss_type == "dr_grpo":
        if max_completion_length is None or type(max_completion_length) is bool:
            raise ValueError("dr_grpo 需要 max_completion_length")
        if int(max_completion_length) != max_completion_length:
            raise ValueError("max_completion_length 必须是整数")
        if max_completion_length < width:
            raise ValueError("max_completion_length 不能小于 T")
        return total / (rows * int(max_completion_length))
    if loss_type == "dapo" or loss_type == "cispo":
        if num_items_in_batch is None:
            raise ValueError("需要 num_items_in_batch")
        items = float(num_items_in_batch)
        if items != items or items < 0:
            raise ValueError("num_items_in_batch 不能为负")
        if items < 1:
            items = 1.0
        return total / items
    raise ValueError("未知的 loss_type：" + str(loss_type))
""",
    "importance_ratio": """
def importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level="token"):
    if not torch.is_tensor(policy_logps) or policy_logps.dim() != 2:
        raise ValueError("policy_logps 必须是二维张量")
    if not torch.is_tensor(old_logps):
        raise ValueError("old_logps 必须是张量")
    if old_logps.shape != policy_logps.shape:
        raise ValueError("old_logps 的形状必须与 policy_logps 相同")
    valid = completion_bool_mask(completion_mask, policy_logps.shape)
    if importance_sampling_level not in ("token", "sequence"):
        raise ValueError("importance_sampling_level 只能是 token 或 sequence")
    log_ratio = policy_logps - old_logps
    log_ratio = log_ratio * valid
    log_ratio = torch.where(valid, log_ratio, torch.zeros_like(log_ratio))
    if importance_sampling_level == "token":
        return torch.exp(log_ratio)
    rows = []
    for i in range(policy_logps.shape[0]):
        count = max(int(valid[i].sum()), 1)
        rows.append(torch.exp(log_ratio[i].sum() / count))
    return torch.stack(rows).unsqueeze(1)
""",
    "per_token_policy_loss": """
def per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                          epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None):
    valid = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if loss_type not in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo"):
        raise ValueError("未知的 loss_type")
    if epsilon_low < 0 or epsilon_low >= 1:
        raise ValueError("epsilon_low 必须在 [0, 1) 内")
    if epsilon_high < 0:
        raise ValueError("epsilon_high 不能为负")
    if loss_type == "cispo" and epsilon_high == 0:
        raise ValueError("cispo 的 epsilon_high 必须大于 0")
    ratio = importance_ratio(policy_logps, old_logps, valid, importance_sampling_level)
    ratio = ratio.expand(policy_logps.shape)
    rows = []
    for i in range(policy_logps.shape[0]):
        a = advantages[i].to(policy_logps.dtype)
        logp = torch.where(valid[i], policy_logps[i], torch.zeros_like(policy_logps[i]))
        if loss_type == "cispo":
            row = -torch.clamp(ratio[i], max=epsilon_high).detach() * a * logp
        else:
            low = torch.clamp(ratio[i], 1 - epsilon_low, 1 + epsilon_high)
            row = -torch.minimum(ratio[i] * a, low * a)
        if beta != 0:
            ref = torch.where(valid[i], ref_logps[i].to(logp.dtype), torch.zeros_like(logp))
            row = row + beta * token_kl_penalty(logp, ref)
        rows.append(row)
    return torch.stack(rows)
""",
    "q9_answer": """
def q9_ratio(short_len, long_len):
    grpo_weight_short = 1 / short_len
    grpo_weight_long = 1 / long_len
    return {"grpo": grpo_weight_long / grpo_weight_short, "dapo": 1.0}
""",
}

nb04_verifiable_rewards = {
    "verify_integer_response": """
VERIFIER_ID = "integer-answer-v1"


def verify_integer_response(response, expected_answer, correctness_weight=1.0, format_weight=0.1):
    if type(response) is not str:
        raise ValueError("response 必须是 str")
    if type(expected_answer) is not int:
        raise ValueError("expected_answer 必须是 int")
    if type(correctness_weight) not in (int, float) or not math.isfinite(correctness_weight) or correctness_weight < 0:
        raise ValueError("correctness_weight 必须是有限的非负数")
    if type(format_weight) not in (int, float) or not math.isfinite(format_weight) or format_weight < 0:
        raise ValueError("format_weight 必须是有限的非负数")
    text = response.strip()
    numbers_found = []
    current = ""
    for position, char in enumerate(text):
        if char in "0123456789":
            if current == "" and position > 0 and text[position - 1] == "-":
                current = "-"
            current += char
        else:
            if current not in ("", "-"):
                numbers_found.append(current)
            current = ""
    if current not in ("", "-"):
        numbers_found.append(current)
    if numbers_found:
        parsed = int(numbers_found[-1])
        status = "ok"
    else:
        parsed = None
        status = "unjudgeable"
    if parsed is not None and parsed == expected_answer:
        correctness = 1.0
    else:
        correctness = 0.0
    if len(numbers_found) == 1 and numbers_found[0] == text:
        format_pass = 1.0
    else:
        format_pass = 0.0
    total = float(correctness_weight) * correctness + float(format_weight) * format_pass
    return {"verifier_id": VERIFIER_ID, "status": status, "parsed_answer": parsed, "correctness": correctness,
            "format_pass": format_pass, "total_reward": total}
""",
    "rewards_per_func_from_lists": """
def rewards_per_func_from_lists(outputs, dtype=torch.float32):
    if not isinstance(dtype, torch.dtype):
        raise ValueError("dtype 必须是 torch.dtype")
    if not dtype.is_floating_point:
        raise ValueError("dtype 必须是浮点类型")
    if type(outputs) not in (list, tuple):
        raise ValueError("outputs 必须是列表")
    if len(outputs) == 0:
        raise ValueError("outputs 不能为空")
    n = None
    for j in range(len(outputs)):
        column = outputs[j]
        if type(column) not in (list, tuple):
            raise ValueError(f"第 {j} 个输出不是列表")
        if len(column) == 0:
            raise ValueError(f"第 {j} 个输出为空")
        if n is None:
            n = len(column)
        elif len(column) != n:
            raise ValueError("各个奖励函数输出的长度不同")
    table = torch.empty(n, len(outputs), dtype=dtype)
    for j in range(len(outputs)):
        for i in range(n):
            value = outputs[j][i]
            if value is None:
                table[i, j] = float("nan")
            elif type(value) not in (int, float):
                raise ValueError(f"奖励 [{i}, {j}] 不是实数")
            elif not math.isfinite(value):
                raise ValueError(f"奖励 [{i}, {j}] 是 NaN 或 inf")
            else:
                table[i, j] = float(value)
    return table
""",
    "combine_rewards": """
def combine_rewards(rewards_per_func, weights):
    if not torch.is_tensor(rewards_per_func):
        raise ValueError("rewards_per_func 必须是张量")
    if not rewards_per_func.is_floating_point():
        raise ValueError("rewards_per_func 必须是浮点张量")
    if rewards_per_func.dim() != 2:
        raise ValueError("rewards_per_func 必须是 [N, F]")
    n, f = rewards_per_func.shape
    if f == 0:
        raise ValueError("至少需要一个奖励函数")
    if bool(torch.isinf(rewards_per_func).any()):
        raise ValueError("rewards_per_func 不能有 inf")
    weight_list = weights.tolist() if torch.is_tensor(weights) else list(weights)
    if len(weight_list) != f:
        raise ValueError("weights 的长度必须等于 F")
    for w in weight_list:
        if isinstance(w, list) or not math.isfinite(w):
            raise ValueError("weights 必须是有限数")
    totals = []
    for i in range(n):
        total = 0.0
        seen = False
        for j in range(f):
            value = float(rewards_per_func[i, j])
            if not math.isnan(value):
                total += value * weight_list[j]
                seen = True
        totals.append(total if seen else float("nan"))
    return torch.tensor(totals, dtype=rewards_per_func.dtype)
""",
}

nb05_logprobs_masks = {
    "completion_mask_from_eos": """
def completion_mask_from_eos(completion_ids, eos_token_id, pad_mask=None):
    if not torch.is_tensor(completion_ids):
        raise ValueError("completion_ids 必须是张量")
    if completion_ids.dim() != 2:
        raise ValueError("completion_ids 必须是 [B, T]")
    if completion_ids.dtype not in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        raise ValueError("completion_ids 必须是整数张量")
    if type(eos_token_id) is not int:
        raise ValueError("eos_token_id 必须是 int")
    rows, width = completion_ids.shape
    if pad_mask is None:
        real = [[True] * width for _ in range(rows)]
    else:
        if not torch.is_tensor(pad_mask) or pad_mask.shape != completion_ids.shape:
            raise ValueError("pad_mask 必须与 completion_ids 同形状")
        if pad_mask.is_complex():
            raise ValueError("pad_mask 不能是复数")
        real = []
        for row in pad_mask.tolist():
            for value in row:
                if value not in (0, 1):
                    raise ValueError("pad_mask 只能含 0/1")
            real.append([bool(value) for value in row])
    ids = completion_ids.tolist()
    mask = []
    for b in range(rows):
        ended = False
        row = []
        for t in range(width):
            row.append(real[b][t] and not ended)
            if real[b][t] and ids[b][t] == eos_token_id:
                ended = True
        mask.append(row)
    return torch.tensor(mask, dtype=torch.bool, device=completion_ids.device)
""",
    "shifted_token_logps": """
def shifted_token_logps(logits, input_ids):
    if not torch.is_tensor(logits):
        raise ValueError("logits 必须是张量")
    if logits.dim() != 3:
        raise ValueError("logits 必须是 [B, T, V]")
    if not logits.is_floating_point():
        raise ValueError("logits 必须是浮点张量")
    if not torch.is_tensor(input_ids) or input_ids.dim() != 2:
        raise ValueError("input_ids 必须是 [B, T]")
    if input_ids.dtype not in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        raise ValueError("input_ids 必须是整数张量")
    batch, length, vocab = logits.shape
    if input_ids.shape[0] != batch or input_ids.shape[1] != length:
        raise ValueError("input_ids 的形状必须等于 logits 的前两维")
    if length < 2:
        raise ValueError("T 至少为 2")
    if input_ids.numel() > 0:
        if int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab:
            raise ValueError("input_ids 越界")
    rows = []
    for b in range(batch):
        row = []
        for t in range(length - 1):
            scores = logits[b, t]
            log_probs = scores - torch.logsumexp(scores, dim=0)
            row.append(log_probs[int(input_ids[b, t + 1])])
        rows.append(torch.stack(row))
    return torch.stack(rows)
""",
}

nb07_online_grpo = {
    "sample_group": """
def sample_group(model, tokenizer, prompts, num_generations, temperature=1.0, top_p=1.0, max_new_tokens=6,
                 seed=None, ref_model=None):
    if type(prompts) not in (list, tuple) or len(prompts) == 0:
        raise ValueError("prompts 必须是非空列表")
    for prompt in prompts:
        if type(prompt) is not str:
            raise ValueError("每个 prompt 都必须是字符串")
    if type(num_generations) is not int or num_generations < 2:
        raise ValueError("num_generations 必须是 >= 2 的整数")
    if type(temperature) not in (int, float) or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError("temperature 必须是正的有限数")
    if type(top_p) not in (int, float) or top_p <= 0 or top_p > 1:
        raise ValueError("top_p 必须在 (0, 1] 内")
    if type(max_new_tokens) is not int or max_new_tokens < 1:
        raise ValueError("max_new_tokens 必须是正整数")
    repeated = []
    group_list = []
    for index, prompt in enumerate(prompts):
        for _ in range(num_generations):
            repeated.append(prompt)
            group_list.append(index)
    device = next(model.parameters()).device
    encoded = encode_prompts(tokenizer, repeated)
    prompt_ids = encoded["input_ids"].to(device)
    prompt_mask = encoded["attention_mask"].to(device)
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        generated = model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            do_sample=True,
            temperature=float(temperature),
            top_p=float(top_p),
            top_k=0,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    prompt_width = prompt_ids.shape[1]
    completion_ids = generated[:, prompt_width:]
    completion_mask = completion_mask_from_eos(completion_ids, int(tokenizer.eos_token_id))
    with torch.no_grad():
        old = completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                               temperature=float(temperature))
        old = torch.where(completion_mask, old, torch.zeros_like(old))
        if ref_model is None:
            ref = None
        else:
            ref = completion_logps(ref_model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                   temperature=float(temperature))
            ref = torch.where(completion_mask, ref, torch.zeros_like(ref))
    completions = []
    for row in range(completion_ids.shape[0]):
        kept = [int(token) for token, keep in zip(completion_ids[row], completion_mask[row]) if keep]
        completions.append(tokenizer.decode(kept, skip_special_tokens=True))
    result = {}
    result["prompt_ids"] = prompt_ids
    result["prompt_mask"] = prompt_mask
    result["completion_ids"] = completion_ids
    result["completion_mask"] = completion_mask
    result["old_per_token_logps"] = old
    result["ref_per_token_logps"] = ref
    result["completions"] = completions
    result["group_ids"] = torch.tensor(group_list, device=device)
    return result
""",
    "grpo_step": """
LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo"]


def _as_bool_mask(mask, shape):
    if not torch.is_tensor(mask):
        raise ValueError("completion_mask 必须是张量")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError("completion_mask 的形状不对")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex():
        raise ValueError("completion_mask 不能是复数")
    for value in mask.flatten().tolist():
        if value != 0 and value != 1:
            raise ValueError("completion_mask 只能含 0/1")
    return mask != 0


def grpo_step(model, optimizer, rollout, advantages, num_iterations=1, epsilon=0.2, epsilon_high=None, beta=0.0,
              loss_type="grpo", max_grad_norm=1.0, temperature=1.0, max_completion_length=None,
              use_bias_correction_kl=True):
    completion_ids = rollout["completion_ids"]
    n = completion_ids.shape[0]
    width = completion_ids.shape[1]
    mask = _as_bool_mask(rollout["completion_mask"], (n, width))
    if not torch.is_tensor(advantages):
        raise ValueError("advantages 必须是张量")
    if advantages.dim() != 1 or advantages.shape[0] != n:
        raise ValueError("advantages 的长度必须是 N")
    if not advantages.is_floating_point():
        raise ValueError("advantages 必须是浮点张量")
    for value in advantages.tolist():
        if not math.isfinite(value):
            raise ValueError("advantages 里有 NaN 或 inf")
    if type(num_iterations) is not int or num_iterations < 1:
        raise ValueError("num_iterations 必须是正整数")
    if epsilon_high is None:
        epsilon_high = epsilon
    for name in ("epsilon", "epsilon_high", "max_grad_norm", "temperature"):
        value = {"epsilon": epsilon, "epsilon_high": epsilon_high, "max_grad_norm": max_grad_norm,
                 "temperature": temperature}[name]
        if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
            raise ValueError(name + " 必须是正的有限数")
    if type(beta) not in (int, float) or not math.isfinite(beta) or beta < 0:
        raise ValueError("beta 必须是非负的有限数")
    if loss_type not in LOSS_TYPES:
        raise ValueError("loss_type 不支持")
    if type(use_bias_correction_kl) is not bool:
        raise ValueError("use_bias_correction_kl 必须是 bool")
    ref = None
    if beta > 0:
        ref = rollout.get("ref_per_token_logps")
        if ref is None:
            raise ValueError("beta > 0 时需要 ref_per_token_logps")
    if max_completion_length is None:
        max_completion_length = width
    old = rollout["old_per_token_logps"].detach()
    weights = mask.to(old.dtype)
    token_total = max(float(weights.sum()), 1.0)
    adv = advantages.detach().to(old.dtype).unsqueeze(1)
    parameters = [p for p in model.parameters() if p.requires_grad]
    losses = []
    low_fracs = []
    high_fracs = []
    approx_kls = []
    ref_kls = []
    norms = []
    entropy = None
    for epoch in range(num_iterations):
        new, entropies = completion_logps(model, rollout["prompt_ids"], rollout["prompt_mask"], completion_ids,
                                          mask, temperature=float(temperature), with_entropy=True)
        log_ratio = torch.where(mask, new - old, torch.zeros_like(new))
        ratio = torch.exp(log_ratio)
        clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
        token_loss = -torch.minimum(ratio * adv, clipped * adv)
        kl_tokens = None
        if beta > 0:
            kl_tokens = token_kl_penalty(torch.where(mask, new, torch.zeros_like(new)),
                                         torch.where(mask, ref, torch.zeros_like(ref)))
            if use_bias_correction_kl:
                token_loss = token_loss + beta * kl_tokens * ratio
            else:
                token_loss = token_loss + beta * kl_tokens
        token_loss = token_loss * weights
        if loss_type == "grpo":
            per_row = token_loss.sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
            loss = per_row.mean()
        elif loss_type == "bnpo":
            loss = token_loss.sum() / token_total
        elif loss_type == "dr_grpo":
            loss = token_loss.sum() / (n * max_completion_length)
        else:
            loss = token_loss.sum() / token_total
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            losses.append(float(loss))
            low = ((ratio < 1 - epsilon) & (adv < 0)).to(old.dtype)
            high = ((ratio > 1 + epsilon_high) & (adv > 0)).to(old.dtype)
            low_fracs.append(float((low * weights).sum()) / token_total)
            high_fracs.append(float((high * weights).sum()) / token_total)
            approx_kls.append(float(((ratio - 1 - log_ratio) * weights).sum()) / token_total)
            if kl_tokens is not None:
                ref_kls.append(float((kl_tokens * weights).sum()) / token_total)
            if epoch == 0:
                entropy = float((entropies.to(old.dtype) * weights).sum()) / token_total
            norms.append(float(norm))
    result = {}
    result["loss"] = sum(losses) / len(losses)
    result["losses"] = losses
    result["clip_ratio_low"] = sum(low_fracs) / len(low_fracs)
    result["clip_ratio_high"] = sum(high_fracs) / len(high_fracs)
    result["approx_kl"] = sum(approx_kls) / len(approx_kls)
    result["kl_ref"] = sum(ref_kls) / len(ref_kls) if ref_kls else None
    result["entropy"] = entropy
    result["grad_norm"] = sum(norms) / len(norms)
    result["num_iterations"] = num_iterations
    return result
""",
    "log_step_metrics": """
def log_step_metrics(step, rewards, num_generations, completion_mask, update, strict_correct, seconds=0.0):
    if not torch.is_tensor(rewards):
        raise ValueError("rewards 必须是张量")
    if rewards.dim() != 1:
        raise ValueError("rewards 必须是一维的")
    if not rewards.is_floating_point():
        raise ValueError("rewards 必须是浮点张量")
    n = rewards.shape[0]
    if type(num_generations) is not int or num_generations < 1:
        raise ValueError("num_generations 必须是正整数")
    if n < 2:
        raise ValueError("rewards 至少要有两个")
    if n % num_generations != 0:
        raise ValueError("rewards 的长度必须是 num_generations 的整数倍")
    values = rewards.detach().cpu().double().tolist()
    for value in values:
        if not math.isfinite(value):
            raise ValueError("rewards 里有 NaN 或 inf")
    if not torch.is_tensor(completion_mask) or completion_mask.dim() != 2 or completion_mask.shape[0] != n:
        raise ValueError("completion_mask 必须是 [N, C]")
    mask = _as_bool_mask(completion_mask, completion_mask.shape)
    if len(strict_correct) != n:
        raise ValueError("strict_correct 的长度必须是 N")
    average = sum(values) / n
    variance = 0.0
    for value in values:
        variance += (value - average) ** 2
    std = math.sqrt(variance / (n - 1))
    flat_groups = 0
    group_count = n // num_generations
    for g in range(group_count):
        group = values[g * num_generations:(g + 1) * num_generations]
        if max(group) == min(group):
            flat_groups += 1
    lengths = [int(row.sum()) for row in mask]
    correct = 0.0
    for item in strict_correct:
        correct += float(item)
    row = {
        "step": int(step),
        "reward_mean": average,
        "reward_std": std,
        "frac_reward_zero_std": flat_groups / group_count,
        "completion_length": sum(lengths) / n,
        "strict_accuracy": correct / n,
        "seconds": float(seconds),
    }
    for key in ["loss", "clip_ratio_low", "clip_ratio_high", "approx_kl", "entropy", "grad_norm"]:
        row[key] = float(update[key])
    if update.get("kl_ref") is None:
        row["kl_ref"] = None
    else:
        row["kl_ref"] = float(update["kl_ref"])
    return row
""",
}
