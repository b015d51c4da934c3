"""Calibration learner k1 (never graded, never a sample learner): every graded function written independently
from the lesson's text in a compact, vectorised style - checks folded into few conditions, library calls where the
lesson allows them (``torch.unique``/``index_add``, ``F.log_softmax``, ``torch.gather``, the lesson's provided
helpers). One dict per lesson, named after it: {answer cell grade_id: source}. The copy review calibrates its
thresholds on this, k2, k3 and the honest sample learners (``sample_class/copy_calibration.py``);
``tests/test_similarity_report.py`` checks that every version passes the oracle.
"""

nb01_group_advantages = {
    "compute_group_advantages": """
def compute_group_advantages(rewards, group_ids, eps=1e-6):
    if not (torch.is_tensor(rewards) and torch.is_tensor(group_ids)):
        raise ValueError("rewards、group_ids 都必须是张量")
    if rewards.ndim != 1 or rewards.numel() == 0 or group_ids.shape != rewards.shape:
        raise ValueError("rewards 必须是非空一维张量，group_ids 与它同形状")
    if not rewards.is_floating_point() or not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards 必须是有限的浮点数")
    if group_ids.dtype == torch.bool or group_ids.is_floating_point() or group_ids.is_complex():
        raise ValueError("group_ids 必须是整数张量")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError("eps 必须是正的有限数")
    _, idx = torch.unique(group_ids.cpu(), return_inverse=True)
    k = int(idx.max()) + 1
    x = rewards.detach().cpu().double()
    n = torch.bincount(idx, minlength=k).double()
    hi = torch.full((k,), -math.inf, dtype=torch.float64).scatter_reduce(0, idx, x, "amax")
    lo = torch.full((k,), math.inf, dtype=torch.float64).scatter_reduce(0, idx, x, "amin")
    mu = torch.zeros(k, dtype=torch.float64).index_add(0, idx, x) / n
    d = torch.where((hi == lo)[idx], torch.zeros_like(x), x - mu[idx])
    sd = (torch.zeros(k, dtype=torch.float64).index_add(0, idx, d * d) / n).sqrt()
    return (d / sd.clamp(min=eps)[idx]).to(rewards.dtype).to(rewards.device)
""",
    "group_relative_advantages": """
def group_relative_advantages(rewards, num_generations, eps=1e-4):
    g = num_generations
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise ValueError("num_generations 必须是正整数")
    if not torch.is_tensor(rewards) or rewards.ndim != 1 or rewards.numel() % g:
        raise ValueError("rewards 必须是一维张量且长度为 num_generations 的倍数")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError("eps 必须是非负有限数")
    r = rewards.view(-1, g)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + eps)).view(-1)
""",
    "answer_conventions_0001": """
def answer_conventions(group, other):
    g = group.double()
    c = g - g.mean()
    both = torch.cat([g, other.double()])
    scale = {
        "course": max(float(g.std(unbiased=False)), 1e-6),
        "minimind": float(g.std(unbiased=False)) + 1e-4,
        "trl_group": float(g.std()) + 1e-4,
        "trl_batch": float(both.std()) + 1e-4,
        "trl_none": 1.0,
        "cs336": float(g.std()) + 1e-6,
        "dr_grpo": 1.0,
    }
    lo, hi = float(c[g == 0][0]), float(c[g == 1][0])
    return {k: (lo / s, hi / s) for k, s in scale.items()}
""",
}

nb02_grpo_objective = {
    "token_kl_penalty": """
def token_kl_penalty(policy_logps, ref_logps):
    if not (torch.is_tensor(policy_logps) and torch.is_tensor(ref_logps)) or policy_logps.shape != ref_logps.shape:
        raise ValueError("policy_logps、ref_logps 必须是同形状张量")
    d = ref_logps.detach() - policy_logps
    return d.exp() - d - 1
""",
    "compute_grpo_loss": """
def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    m, clip_range, beta = check_grpo_inputs(log_probs_new, log_probs_old, rewards, group_ids, response_mask,
                                            clip_range, eps, log_probs_ref, beta)
    if beta > 0 and log_probs_ref is None:
        raise ValueError("beta > 0 需要 log_probs_ref")
    if not bool(m.any(-1).all()):
        raise ValueError("每个候选至少一个有效词元")
    adv = compute_group_advantages(rewards, group_ids, eps=eps)
    a = adv.detach().to(log_probs_new.dtype)[:, None]
    r = (log_probs_new - log_probs_old.detach()).masked_fill(~m, 0).exp()
    obj = torch.min(r * a, r.clamp(1 - clip_range, 1 + clip_range) * a)
    if beta > 0:
        d = (log_probs_ref.detach() - log_probs_new).masked_fill(~m, 0)
        obj = obj - beta * (d.exp() - d - 1)
    mf = m.to(obj.dtype)
    return -((obj * mf).sum(-1) / mf.sum(-1)).mean(), adv
""",
}

nb03a_cispo_trace_lab = {
    "grpo_policy_loss": """
def grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=0.0, ref_logps=None):
    m = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if not (0 <= epsilon < 1):
        raise ValueError("epsilon 必须在 [0, 1) 内")
    r = (policy_logps - old_logps).masked_fill(~m, 0).exp()
    a = advantages[:, None].to(r.dtype)
    loss = -torch.min(r * a, r.clamp(1 - epsilon, 1 + epsilon) * a)
    if beta:
        loss = loss + beta * token_kl_penalty(policy_logps.masked_fill(~m, 0), ref_logps.to(r.dtype).masked_fill(~m, 0))
    mf = m.to(loss.dtype)
    return ((loss * mf).sum(1) / mf.sum(1).clamp(min=1)).mean()
""",
    "cispo_policy_loss": """
def cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=0.0, ref_logps=None):
    m = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if not epsilon_high > 0:
        raise ValueError("epsilon_high 必须 > 0")
    lp = policy_logps.masked_fill(~m, 0)
    w = (lp - old_logps.masked_fill(~m, 0)).exp().clamp(max=epsilon_high).detach()
    loss = -w * advantages[:, None].to(lp.dtype) * lp
    if beta:
        loss = loss + beta * token_kl_penalty(lp, ref_logps.to(lp.dtype).masked_fill(~m, 0))
    mf = m.to(loss.dtype)
    return ((loss * mf).sum(1) / mf.sum(1).clamp(min=1)).mean()
""",
    "gradient_answers": """
def gradient_answers(advantage, ratio):
    a, r = float(advantage), float(ratio)
    flat = r > 1.2 if a > 0 else (r < 0.8 if a < 0 else False)
    return (0.0 if flat else -a * r, -a * min(r, 5.0))
""",
    "q2_answer": "def q2_flat_index(i, j, num_generations):\n    return j + num_generations * i\n",
    "q3_answer": "q3_choice = 'A'\n",
    "q5_answer": "q5_choice = 'B'\n",
    "q8_answer": "q8_unchanged = {'a', 'b', 'c', 'd', 'e', 'f', 'h'}\n",
}

nb03b_loss_family_trl = {
    "reduce_per_token_loss": """
def reduce_per_token_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    if not torch.is_tensor(per_token_loss) or per_token_loss.ndim != 2:
        raise ValueError("per_token_loss 必须是 [B*G, T]")
    m = completion_bool_mask(completion_mask, per_token_loss.shape)
    mf = m.to(per_token_loss.dtype)
    s = per_token_loss.masked_fill(~m, 0)
    if loss_type == "grpo":
        return (s.sum(1) / mf.sum(1).clamp(min=1)).mean()
    if loss_type == "bnpo":
        return s.sum() / mf.sum().clamp(min=1)
    if loss_type == "dr_grpo":
        L = max_completion_length
        if L is None or isinstance(L, bool) or L != int(L) or L < s.shape[1]:
            raise ValueError("dr_grpo 需要整数 max_completion_length >= T")
        return s.sum() / (s.shape[0] * int(L))
    if loss_type in ("dapo", "cispo"):
        if num_items_in_batch is None or not float(num_items_in_batch) >= 0:
            raise ValueError("需要非负的 num_items_in_batch")
        return s.sum() / max(float(num_items_in_batch), 1.0)
    raise ValueError(f"未知 loss_type {loss_type!r}")
""",
    "importance_ratio": """
def importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level="token"):
    if not torch.is_tensor(policy_logps) or policy_logps.ndim != 2:
        raise ValueError("policy_logps 必须是 [B*G, T]")
    if not torch.is_tensor(old_logps) or old_logps.shape != policy_logps.shape:
        raise ValueError("old_logps 形状必须与 policy_logps 相同")
    m = completion_bool_mask(completion_mask, policy_logps.shape)
    lr = (policy_logps - old_logps).masked_fill(~m, 0)
    if importance_sampling_level == "token":
        return lr.exp()
    if importance_sampling_level == "sequence":
        return (lr.sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1).to(lr.dtype)).exp()
    raise ValueError("importance_sampling_level 只能是 token 或 sequence")
""",
    "per_token_policy_loss": """
def per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                          epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None):
    m = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    if loss_type not in LOSS_TYPES or not 0 <= epsilon_low < 1 or epsilon_high < 0:
        raise ValueError("loss_type 或 epsilon 不合法")
    if loss_type == "cispo" and epsilon_high <= 0:
        raise ValueError("cispo 需要 epsilon_high > 0")
    r = importance_ratio(policy_logps, old_logps, m, importance_sampling_level)
    a = advantages[:, None].to(policy_logps.dtype)
    lp = policy_logps.masked_fill(~m, 0)
    if loss_type == "cispo":
        out = -r.clamp(max=epsilon_high).detach() * a * lp
    else:
        out = -torch.min(r * a, r.clamp(1 - epsilon_low, 1 + epsilon_high) * a) * torch.ones_like(lp)
    if beta:
        out = out + beta * token_kl_penalty(lp, ref_logps.to(lp.dtype).masked_fill(~m, 0))
    return out
""",
    "q9_answer": "def q9_ratio(short_len, long_len):\n    return {'grpo': short_len / long_len, 'dapo': 1.0}\n",
}

nb04_verifiable_rewards = {
    "verify_integer_response": """
import re

VERIFIER_ID = "integer-answer-v1"


def verify_integer_response(response, expected_answer, correctness_weight=1.0, format_weight=0.1):
    if not isinstance(response, str):
        raise ValueError("response 必须是字符串")
    if isinstance(expected_answer, bool) or not isinstance(expected_answer, int):
        raise ValueError("expected_answer 必须是 int")
    for name, w in (("correctness_weight", correctness_weight), ("format_weight", format_weight)):
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ValueError(f"{name} 必须是有限非负实数")
    text = response.strip()
    found = re.findall(r"-?[0-9]+", text)
    parsed = int(found[-1]) if found else None
    correct = float(parsed == expected_answer) if parsed is not None else 0.0
    fmt = float(bool(re.fullmatch(r"-?[0-9]+", text)))
    return dict(verifier_id=VERIFIER_ID, status="ok" if found else "unjudgeable", parsed_answer=parsed,
                correctness=correct, format_pass=fmt, total_reward=correctness_weight * correct + format_weight * fmt)
""",
    "rewards_per_func_from_lists": """
def rewards_per_func_from_lists(outputs, dtype=torch.float32):
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError("dtype 必须是浮点 dtype")
    if not isinstance(outputs, (list, tuple)) or not outputs:
        raise ValueError("outputs 必须是非空列表")
    if any(not isinstance(col, (list, tuple)) or not col or len(col) != len(outputs[0]) for col in outputs):
        raise ValueError("每个输出都必须是等长的非空列表")
    for col in outputs:
        for v in col:
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise ValueError("奖励只能是有限实数或 None")
    return torch.tensor([[math.nan if v is None else float(v) for v in col] for col in outputs], dtype=dtype).T.contiguous()
""",
    "combine_rewards": """
def combine_rewards(rewards_per_func, weights):
    x = rewards_per_func
    if not torch.is_tensor(x) or not x.is_floating_point() or x.ndim != 2 or x.shape[1] < 1 or bool(x.isinf().any()):
        raise ValueError("rewards_per_func 必须是不含 inf 的 [N, F] 浮点张量")
    w = torch.as_tensor(weights, dtype=x.dtype)
    if w.shape != (x.shape[1],) or not bool(torch.isfinite(w).all()):
        raise ValueError("weights 必须是 F 个有限数")
    out = torch.nansum(x * w, dim=1)
    return torch.where(x.isnan().all(1), torch.full_like(out, math.nan), out)
""",
}

nb05_logprobs_masks = {
    "completion_mask_from_eos": """
def completion_mask_from_eos(completion_ids, eos_token_id, pad_mask=None):
    ids = completion_ids
    if not torch.is_tensor(ids) or ids.ndim != 2 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError("completion_ids 必须是 [B, T] 整数张量")
    if isinstance(eos_token_id, bool) or not isinstance(eos_token_id, int):
        raise ValueError("eos_token_id 必须是 int")
    if pad_mask is None:
        pad_mask = torch.ones_like(ids, dtype=torch.bool)
    elif not torch.is_tensor(pad_mask) or pad_mask.shape != ids.shape or pad_mask.is_complex():
        raise ValueError("pad_mask 必须与 completion_ids 同形状")
    elif pad_mask.dtype != torch.bool:
        if not bool(((pad_mask == 0) | (pad_mask == 1)).all()):
            raise ValueError("pad_mask 只能含 0/1")
        pad_mask = pad_mask == 1
    eos = (ids == eos_token_id) & pad_mask
    before = eos.cumsum(1) - eos.long()
    return (before == 0) & pad_mask
""",
    "shifted_token_logps": """
import torch.nn.functional as F


def shifted_token_logps(logits, input_ids):
    if not torch.is_tensor(logits) or logits.ndim != 3 or not logits.is_floating_point():
        raise ValueError("logits 必须是 [B, T, V] 浮点张量")
    if not torch.is_tensor(input_ids) or input_ids.ndim != 2 or input_ids.is_floating_point() \\
            or input_ids.is_complex() or input_ids.dtype == torch.bool or input_ids.shape != logits.shape[:2]:
        raise ValueError("input_ids 必须是与 logits 前两维相同的整数张量")
    if logits.shape[1] < 2 or (input_ids.numel() and not (0 <= int(input_ids.min()) <= int(input_ids.max()) < logits.shape[2])):
        raise ValueError("T 至少为 2，且 input_ids 必须在 [0, V) 内")
    return torch.gather(F.log_softmax(logits[:, :-1], dim=-1), 2, input_ids[:, 1:, None].long())[..., 0]
""",
}

nb07_online_grpo = {
    "sample_group": """
def sample_group(model, tokenizer, prompts, num_generations, temperature=1.0, top_p=1.0, max_new_tokens=6,
                 seed=None, ref_model=None):
    def positive_int(v, low):
        return not isinstance(v, bool) and isinstance(v, int) and v >= low

    if not isinstance(prompts, (list, tuple)) or not prompts or any(not isinstance(p, str) for p in prompts):
        raise ValueError("prompts 必须是非空的字符串列表")
    if not positive_int(num_generations, 2) or not positive_int(max_new_tokens, 1):
        raise ValueError("num_generations >= 2，max_new_tokens >= 1，都必须是整数")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 < temperature < math.inf:
        raise ValueError("temperature 必须是正的有限数")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError("top_p 必须在 (0, 1] 内")
    dev = next(model.parameters()).device
    enc = encode_prompts(tokenizer, list(prompts))
    p_ids = enc["input_ids"].repeat_interleave(num_generations, 0).to(dev)
    p_mask = enc["attention_mask"].repeat_interleave(num_generations, 0).to(dev)
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(input_ids=p_ids, attention_mask=p_mask, do_sample=True, temperature=float(temperature),
                             top_p=float(top_p), top_k=0, max_new_tokens=max_new_tokens,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        c_ids = out[:, p_ids.shape[1]:]
        c_mask = completion_mask_from_eos(c_ids, int(tokenizer.eos_token_id))
        logps = lambda m: completion_logps(m, p_ids, p_mask, c_ids, c_mask, temperature=float(temperature)).masked_fill(~c_mask, 0)
        old = logps(model)
        ref = logps(ref_model) if ref_model is not None else None
    texts = [tokenizer.decode(ids[m].tolist(), skip_special_tokens=True) for ids, m in zip(c_ids, c_mask)]
    return dict(prompt_ids=p_ids, prompt_mask=p_mask, completion_ids=c_ids, completion_mask=c_mask,
                old_per_token_logps=old, ref_per_token_logps=ref, completions=texts,
                group_ids=torch.arange(len(prompts), device=dev).repeat_interleave(num_generations))
""",
    "grpo_step": """
from tools.loss_types import CLIPPED_LOSS_TYPES as LOSS_TYPES


def _as_bool_mask(mask, shape):
    if not torch.is_tensor(mask) or tuple(mask.shape) != tuple(shape):
        raise ValueError("completion_mask 形状不对")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("completion_mask 只能含 0/1")
    return mask != 0


def grpo_step(model, optimizer, rollout, advantages, num_iterations=1, epsilon=0.2, epsilon_high=None, beta=0.0,
              loss_type="grpo", max_grad_norm=1.0, temperature=1.0, max_completion_length=None,
              use_bias_correction_kl=True):
    ids = rollout["completion_ids"]
    m = _as_bool_mask(rollout["completion_mask"], ids.shape)
    real = lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    if not torch.is_tensor(advantages) or advantages.shape != (ids.shape[0],) or not advantages.is_floating_point() \\
            or not bool(advantages.isfinite().all()):
        raise ValueError("advantages 必须是长度 N 的有限浮点张量")
    if isinstance(num_iterations, bool) or not isinstance(num_iterations, int) or num_iterations < 1:
        raise ValueError("num_iterations 必须是正整数")
    eh = epsilon if epsilon_high is None else epsilon_high
    if not all(real(v) and v > 0 for v in (epsilon, eh, max_grad_norm, temperature)):
        raise ValueError("epsilon、epsilon_high、max_grad_norm、temperature 必须是正的有限数")
    if not real(beta) or beta < 0 or loss_type not in LOSS_TYPES or not isinstance(use_bias_correction_kl, bool):
        raise ValueError("beta、loss_type 或 use_bias_correction_kl 不合法")
    ref = rollout.get("ref_per_token_logps") if beta > 0 else None
    if beta > 0 and ref is None:
        raise ValueError("beta > 0 需要 ref_per_token_logps")
    old = rollout["old_per_token_logps"].detach()
    a = advantages.detach().to(old.dtype)
    mf = m.to(old.dtype)
    tokens = mf.sum().clamp(min=1.0)
    avg = lambda t: float((t * mf).sum() / tokens)
    params = [p for p in model.parameters() if p.requires_grad]
    hist = {k: [] for k in ("loss", "low", "high", "kl", "ref", "norm")}
    ent = None
    for it in range(num_iterations):
        lp, h = completion_logps(model, rollout["prompt_ids"], rollout["prompt_mask"], ids, m,
                                 temperature=float(temperature), with_entropy=True)
        loss = extended_loss(lp, old, a, m, loss_type=loss_type, epsilon_low=epsilon, epsilon_high=eh,
                             beta=float(beta), ref_logps=ref, use_bias_correction_kl=use_bias_correction_kl,
                             max_completion_length=max_completion_length or ids.shape[1], num_items_in_batch=tokens)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            lr = (lp - old).masked_fill(~m, 0)
            r = lr.exp()
            hist["loss"].append(float(loss))
            hist["low"].append(avg(((r < 1 - epsilon) & (a[:, None] < 0)).to(old.dtype)))
            hist["high"].append(avg(((r > 1 + eh) & (a[:, None] > 0)).to(old.dtype)))
            hist["kl"].append(avg(r - 1 - lr))
            if beta > 0:
                hist["ref"].append(avg(token_kl_penalty(lp.masked_fill(~m, 0), ref.masked_fill(~m, 0))))
            if it == 0:
                ent = avg(h.to(old.dtype))
            hist["norm"].append(float(gn))
    mean = lambda k: sum(hist[k]) / len(hist[k])
    return {"loss": mean("loss"), "losses": hist["loss"], "clip_ratio_low": mean("low"), "clip_ratio_high": mean("high"),
            "approx_kl": mean("kl"), "kl_ref": mean("ref") if hist["ref"] else None, "entropy": ent,
            "grad_norm": mean("norm"), "num_iterations": num_iterations}
""",
    "log_step_metrics": """
def log_step_metrics(step, rewards, num_generations, completion_mask, update, strict_correct, seconds=0.0):
    g = num_generations
    if not torch.is_tensor(rewards) or rewards.ndim != 1 or not rewards.is_floating_point():
        raise ValueError("rewards 必须是一维浮点张量")
    n = len(rewards)
    if isinstance(g, bool) or not isinstance(g, int) or g < 1 or n < 2 or n % g:
        raise ValueError("rewards 长度须 >= 2 且为 num_generations 的倍数")
    if not bool(rewards.isfinite().all()):
        raise ValueError("rewards 必须有限")
    if not torch.is_tensor(completion_mask) or completion_mask.ndim != 2 or len(completion_mask) != n:
        raise ValueError("completion_mask 必须是 [N, C]")
    m = _as_bool_mask(completion_mask, completion_mask.shape)
    if len(strict_correct) != n:
        raise ValueError("strict_correct 长度必须为 N")
    r = rewards.detach().double().cpu()
    rows = r.view(-1, g)
    out = dict(step=int(step), reward_mean=r.mean().item(), reward_std=r.std().item(),
               frac_reward_zero_std=(rows.amax(1) == rows.amin(1)).double().mean().item(),
               completion_length=m.sum(1).double().mean().item(),
               strict_accuracy=sum(map(float, strict_correct)) / n, seconds=float(seconds))
    out.update({k: float(update[k]) for k in ("loss", "clip_ratio_low", "clip_ratio_high", "approx_kl", "entropy", "grad_norm")})
    out["kl_ref"] = None if update.get("kl_ref") is None else float(update["kl_ref"])
    return out
""",
}
