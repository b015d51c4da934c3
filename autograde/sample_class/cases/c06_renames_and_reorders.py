'''Full marks and a ``copies-reference`` flag (nb03a): the course's reference answers with every local name
renamed, the messages reworded and independent statements reordered (the epsilon check before the input check,
values computed earlier than the reference computes them). The multiple-choice answers and the manual questions
keep the worked answers (too short to say anything about copying).'''

NB03A_GRPO = """
def grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=0.0, ref_logps=None):
    # 先查 epsilon，再查其余输入
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon 需在 [0, 1) 内，收到 {epsilon}")
    keep = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    a = advantages.to(policy_logps.dtype).unsqueeze(1)
    z = torch.zeros_like(policy_logps)
    lr = torch.where(keep, policy_logps - old_logps, z)
    r = torch.exp(lr)
    r_clip = torch.clamp(r, 1.0 - epsilon, 1.0 + epsilon)
    loss_tok = -torch.minimum(r * a, r_clip * a)
    if beta != 0.0:
        rf = torch.where(keep, ref_logps.to(policy_logps.dtype), z)
        pol = torch.where(keep, policy_logps, z)
        loss_tok = loss_tok + beta * token_kl_penalty(pol, rf)
    w = keep.to(loss_tok.dtype)
    per_seq = (loss_tok * w).sum(dim=1) / w.sum(dim=1).clamp(min=1.0)
    return per_seq.mean()
"""

NB03A_CISPO = """
def cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=0.0, ref_logps=None):
    if not epsilon_high > 0:
        raise ValueError(f"epsilon_high 必须为正，收到 {epsilon_high}")
    keep = check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta=beta, ref_logps=ref_logps)
    z = torch.zeros_like(policy_logps)
    pol = torch.where(keep, policy_logps, z)
    lr = torch.where(keep, policy_logps - old_logps, z)
    w_clip = torch.clamp(torch.exp(lr), max=epsilon_high).detach()
    loss_tok = -w_clip * advantages.to(z.dtype).unsqueeze(1) * pol
    if beta != 0.0:
        rf = torch.where(keep, ref_logps.to(z.dtype), z)
        loss_tok = loss_tok + beta * token_kl_penalty(pol, rf)
    w = keep.to(loss_tok.dtype)
    per_seq = (loss_tok * w).sum(dim=1) / w.sum(dim=1).clamp(min=1.0)
    return per_seq.mean()
"""

NB03A_GRADIENTS = """
def gradient_answers(advantage, ratio):
    eps_hi, eps = 5.0, 0.2
    cispo_grad = -advantage * min(ratio, eps_hi)
    on_clipped_side = (advantage > 0 and ratio > 1 + eps) or (advantage < 0 and ratio < 1 - eps)
    grpo_grad = 0.0 if on_clipped_side else -advantage * ratio
    return (float(grpo_grad), float(cispo_grad))
"""

CASE = {
    "nb03a_cispo_trace_lab": {"base": "solution", "cells": {
        "grpo_policy_loss": NB03A_GRPO,
        "cispo_policy_loss": NB03A_CISPO,
        "gradient_answers": NB03A_GRADIENTS,
    }},
}
