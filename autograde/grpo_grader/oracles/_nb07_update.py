"""Lesson 7's oracle (``nb07_online_grpo.py``): the value cases of ``grpo_step`` - the rollouts they send, the
settings drawn for each, and the check of an answer against the float64 reference (``_policy_losses.reference_step``).

The cases must catch every broken update of ``tools.online.trl_mutations`` at every grading seed
(``tests/test_nb07_oracle_mutations.py``): each setting that shows one lands on at least one case (``step_cases``),
and each rollout puts first-epoch ratios on both sides of the clip range and between ``epsilon`` and
``epsilon_high`` (``random_rollout``).
"""

from __future__ import annotations

import math

import torch

from tools.loss_types import CLIPPED_LOSS_TYPES

from ..vocabulary import NUMBER_KINDS, Case, Satisfies, as_number, close_number, close_tensor
from . import _policy_losses as policy_losses
from ._common import choice, randint, uniform
from ._nb07_policy import _encode_prompts, _eos_mask, _logps, _policy


def _step_reference(rollout, advantages, settings, lr, optimizer="adamw"):
    model, _ = _policy()
    extras: dict = {}
    losses, params, lows, highs, kls = policy_losses.reference_step(
        model, rollout, advantages, lr, extras=extras, optimizer=optimizer, **settings
    )
    return losses, lows, highs, kls, torch.cat([p.reshape(-1) for p in params]), extras


def _kl_ref_message(value, settings, extras):
    """None where ``kl_ref`` is right: None for beta = 0, else the epochs' mean of the masked mean k3 to the reference
    (with ``use_bias_correction_kl``, the same times the ratio is accepted too: TRL logs its ``kl`` that way)."""
    if settings["beta"] == 0:
        return None if value is None else "kl_ref 只在 beta > 0 时有值"
    number = as_number(value)
    if number is None:
        return f"beta > 0 时 kl_ref 应是一个数（{NUMBER_KINDS}），实际 {type(value).__name__}"
    wants = [extras["kl_refs"]] + ([extras["kl_refs_weighted"]] if settings.get("use_bias_correction_kl", True) else [])
    means = [sum(v) / len(v) for v in wants]
    if any(close_number(number, want, 1e-6, 1e-6) for want in means):
        return None
    return f"kl_ref 应为 {means[0]:.6f}（掩码内词元上 k3 的平均，各轮次再平均），实际 {value!r}"


# the metrics grpo_step returns (nb07's TODO names them); the check reads each
STEP_METRICS = ("loss", "losses", "clip_ratio_low", "clip_ratio_high", "approx_kl", "kl_ref", "entropy", "grad_norm")


def _step_check(rollout, advantages, settings, lr, optimizer="adamw"):
    reference: list = []  # computed once, on the first answer that has every key

    def check(got):
        if not isinstance(got, dict) or not isinstance(got.get("metrics"), dict):
            return "grpo_step 应返回指标 dict"
        metrics = got["metrics"]
        for key in STEP_METRICS:
            if key not in metrics:
                return f"返回的指标缺少 {key!r}"
        if not reference:
            reference.append(_step_reference(rollout, advantages, settings, lr, optimizer))
        losses, lows, highs, kls, params, extras = reference[0]
        got_losses = metrics["losses"]
        if (
            not isinstance(got_losses, list)
            or len(got_losses) != len(losses)
            or not all(
                as_number(x) is not None and close_number(as_number(x), y, 1e-6, 1e-6)
                for x, y in zip(got_losses, losses)
            )
        ):
            return f"逐轮次损失应为 {[round(v, 6) for v in losses]}，实际 {got_losses!r}"[:300]
        norms = extras["grad_norms"]
        for key, want, atol, rtol in (
            ("loss", sum(losses) / len(losses), 1e-6, 1e-6),
            ("clip_ratio_low", sum(lows) / len(lows), 1e-6, 0.0),
            ("clip_ratio_high", sum(highs) / len(highs), 1e-6, 0.0),
            ("approx_kl", sum(kls) / len(kls), 1e-6, 0.0),
            ("entropy", extras["entropy"], 1e-4, 1e-4),  # the lesson's entropy is computed in float32
            ("grad_norm", sum(norms) / len(norms), 1e-6, 1e-5),
        ):
            value = as_number(metrics[key])
            if value is None:
                return f"{key} 应是一个数（{NUMBER_KINDS}），实际 {type(metrics[key]).__name__}"
            if not close_number(value, want, atol, rtol):
                return f"{key} 应为 {want:.6f}，实际 {value!r}"
        message = _kl_ref_message(metrics["kl_ref"], settings, extras)
        if message:
            return message
        got_params = got.get("params")
        if not torch.is_tensor(got_params) or got_params.shape != params.shape:
            return "更新后的参数形状不对"
        if not close_tensor(got_params, params, 1e-6):
            return "更新后的参数与参考实现不一致（μ 轮次、裁剪、KL、归约、梯度裁剪或优化器步骤有误）"
        return None

    return check


def _draw_completions(gen, tok, n, width):
    """[n, width] random completion ids with an EOS at a random place in most rows, and their EOS mask with one row
    fully masked (C5). Redrawn (from ``gen``) until some valid row is shorter than the width and the valid tokens are
    not one per row: a grpo mean whose denominator ignores the mask, or a dapo normaliser that counts rows, would
    otherwise give the right numbers."""
    for _ in range(50):
        ids = torch.randint(3, len(tok), (n, width), generator=gen)
        for row in range(n):
            if float(torch.rand((), generator=gen)) < 0.7:
                ids[row, randint(gen, 0, width - 1)] = tok.eos_token_id
        mask = _eos_mask(ids, tok.eos_token_id)
        mask[randint(gen, 0, n - 1)] = False
        lengths = mask.sum(1)
        if bool(((lengths > 0) & (lengths < width)).any()) and int(lengths.sum()) != n:
            return ids, mask
    raise ValueError("oracle nb07: no ragged completion batch drawn")


def random_rollout(gen, model, tok, n_prompts, g, temperature, epsilon, epsilon_high):
    """(rollout, advantages [N] float64) for one grpo_step case. The old log-probs are the policy's at
    ``temperature`` (float64, what grpo_step recomputes at its first epoch) plus 0.3 * N(0, 1) on valid positions,
    and three valid tokens get chosen first-epoch ratios: one below 1 - epsilon in a row whose advantage is negative,
    one between 1 + epsilon and 1 + epsilon_high and one above 1 + epsilon_high in rows whose advantage is positive
    (the last two both above when epsilon_high == epsilon), so both clip bounds and the gap between them matter."""
    problems = [f"{randint(gen, 0, 9)}+{randint(gen, 0, 9)}=" for _ in range(n_prompts)]
    p_ids, p_mask = _encode_prompts(tok, problems)
    n = n_prompts * g
    ids, mask = _draw_completions(gen, tok, n, randint(gen, 3, 6))
    prompt_ids, prompt_mask = p_ids.repeat_interleave(g, 0), p_mask.repeat_interleave(g, 0)
    current = _logps(model, prompt_ids, prompt_mask, ids, mask, temperature)
    old = torch.where(mask, current + 0.3 * torch.randn(current.shape, generator=gen, dtype=torch.float64), current)
    advantages = torch.randn(n, generator=gen, dtype=torch.float64)
    rows = [r for r in torch.randperm(n, generator=gen).tolist() if bool(mask[r].any())]  # >= 3: n >= 4, one empty
    band = epsilon_high - epsilon
    targets = (  # (row, sign of its advantage, first-epoch ratio)
        (rows[0], -1.0, uniform(gen, 0.3, 1.0 - epsilon - 0.03)),
        (rows[1], 1.0, 1.0 + epsilon + band * uniform(gen, 0.2, 0.8) if band > 0.05 else uniform(gen, 1.5, 2.5)),
        (rows[2], 1.0, 1.0 + epsilon_high + uniform(gen, 0.05, 1.0)),
    )
    for row, sign, ratio in targets:
        advantages[row] = sign * (0.3 + abs(float(advantages[row])))
        position = choice(gen, mask[row].nonzero().reshape(-1).tolist())
        old[row, position] = current[row, position] - math.log(ratio)
    big = randint(gen, 0, n - 1)
    old[big] = torch.where(mask[big], old[big], torch.full_like(old[big], -800.0))  # large masked log-ratio (C3)
    ref = current + 0.2
    rollout = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": ids,
        "completion_mask": mask,
        "old_per_token_logps": old,
        "ref_per_token_logps": torch.where(mask, ref, torch.zeros_like(ref)),
    }
    return rollout, advantages


# The value cases of grpo_step: one per loss type, and a second dr_grpo one whose max_completion_length is None (the
# others give dr_grpo a larger one, so its normaliser is seen). Every broken update of tools.online.trl_mutations
# must fail at every grading seed (tests/test_nb07_oracle_mutations.py), so each setting that shows one lands on
# at least one case; which case is drawn from the seed (a permutation per setting), the values stay drawn.
STEP_CASE_LOSS_TYPES = (*CLIPPED_LOSS_TYPES, "dr_grpo")


def step_cases(gen, model, tok, test) -> list[Case]:
    n_cases = len(STEP_CASE_LOSS_TYPES)

    def slots():
        return torch.randperm(n_cases, generator=gen).tolist()

    kl_slots, t_slots, mu_slots, eps_slots = slots(), slots(), slots(), slots()
    sgd_slot = slots()[0]  # SGD, and a max_grad_norm below the first epoch's gradient norm
    out = []
    for index, loss_type in enumerate(STEP_CASE_LOSS_TYPES):
        if index == t_slots[0]:  # far from 1
            temperature = choice(gen, [uniform(gen, 0.55, 0.8), uniform(gen, 1.25, 1.6)])
        else:
            temperature = 1.0 if index == t_slots[1] else choice(gen, [1.0, uniform(gen, 0.7, 1.5)])
        if index == kl_slots[0] or index == kl_slots[1]:  # beta > 0, with and without TRL's bias correction
            beta, bias_correction = uniform(gen, 0.05, 0.3), index == kl_slots[0]
        else:
            beta = 0.0 if index == kl_slots[2] else choice(gen, [0.0, uniform(gen, 0.01, 0.3)])
            bias_correction = choice(gen, [False, True])
        if index in mu_slots[:2]:
            num_iterations = randint(gen, 2, 3)
        else:
            num_iterations = 1 if index == mu_slots[2] else randint(gen, 1, 3)
        epsilon = uniform(gen, 0.05, 0.3)
        epsilon_high = None if index == eps_slots[0] else epsilon + uniform(gen, 0.08, 0.25)
        rollout, advantages = random_rollout(
            gen, model, tok, randint(gen, 2, 3), randint(gen, 2, 4), temperature, epsilon, epsilon_high or epsilon
        )
        width = rollout["completion_ids"].shape[1]
        if loss_type == "dr_grpo":
            max_completion_length = None if index == n_cases - 1 else width + randint(gen, 1, 4)
        else:
            max_completion_length = choice(gen, [None, width + randint(gen, 0, 4)])
        settings = {
            "num_iterations": num_iterations,
            "epsilon": epsilon,
            "epsilon_high": epsilon_high,
            "beta": beta,
            "loss_type": loss_type,
            "max_grad_norm": uniform(gen, 0.3, 2.0),
            "temperature": temperature,
            "max_completion_length": max_completion_length,
            "use_bias_correction_kl": bias_correction,
        }
        optimizer, lr = "adamw", uniform(gen, 1e-4, 3e-3)
        if index == sgd_slot:  # the weights after show the clipped gradient's scale; a step of norm 0.1 to 0.4
            extras: dict = {}
            policy_losses.reference_step(
                model, rollout, advantages, 0.0, **dict(settings, num_iterations=1, max_grad_norm=1e12), extras=extras
            )
            settings["max_grad_norm"] = extras["grad_norms"][0] * uniform(gen, 0.2, 0.5)
            optimizer, lr = "sgd", uniform(gen, 0.1, 0.4) / settings["max_grad_norm"]
        if choice(gen, [False, True]):
            rollout = dict(
                rollout, completion_mask=rollout["completion_mask"].to(choice(gen, [torch.float32, torch.int64]))
            )
        out.append(
            Case(
                test,
                "_oracle_step",
                (rollout, advantages, settings, lr, optimizer),
                {},
                Satisfies(_step_check(dict(rollout), advantages, settings, lr, optimizer)),
                what=f"loss_type={loss_type}，μ={num_iterations}，beta={beta:.3f}，温度 {temperature:.2f}，"
                f"{'SGD' if optimizer == 'sgd' else 'AdamW'} 的一次更新",
            )
        )
    return out
