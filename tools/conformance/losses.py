"""The loss checks: the graded loss family case by case against ``GRPOTrainer._compute_loss`` (with MiniMind's
two losses where they apply, and dapo over two micro-batches), and the lesson's ``extended_loss`` against TRL's
other loss types and options."""

from __future__ import annotations

import torch

from tools.conformance.cases import EXTENDED_CASES, LOSS_CASES, MAX_LEN
from tools.conformance.loss_calls import (
    case_batch,
    case_config,
    clipping_fired,
    course_kwargs,
    course_loss_and_grad,
    facts_read,
    loss_entry,
    minimind_loss_and_grad,
    trl_loss_and_grad,
)
from tools.conformance.stand_ins import trl_config


def family_checks(GRPOTrainer, GRPOConfig, fns, atol):
    """The graded loss family against _compute_loss, case by case; plus MiniMind's two losses where they apply."""
    grpo_family_loss, importance_ratio = fns["grpo_family_loss"], fns["importance_ratio"]
    results, failures = {}, []
    for case in LOSS_CASES:
        reads = set()
        policy, old, ref, mask, adv = case_batch(
            fns["group_relative_advantages"], seed=24, big_log_ratio=2.0 if case["loss_type"] == "cispo" else None
        )
        items = int(mask.sum())
        config = case_config(GRPOConfig, case)
        trl_loss, trl_grad = trl_loss_and_grad(
            GRPOTrainer, config, reads, policy, old, ref, mask, adv, num_items_in_batch=items
        )
        course_loss, course_grad = course_loss_and_grad(
            grpo_family_loss, policy, **course_kwargs(case, old, adv, mask, ref, items)
        )
        entry = loss_entry(trl_loss, trl_grad, course_loss, course_grad, atol)
        fired, outside = clipping_fired(importance_ratio, policy, old, mask, adv, case)
        entry.update(
            clipped_tokens=fired,
            tokens_outside_clip_range=outside,
            valid_tokens=items,
            trl_reads=facts_read(reads, inputs_present=("advantages", "num_items_in_batch")),
        )
        entry["passed"] &= fired > 0
        if (
            case["loss_type"] == "grpo"
            and case["importance_sampling_level"] == "token"
            and case["epsilon_high"] == case["epsilon"]
        ):
            mini, mini_grad = minimind_loss_and_grad(
                fns["grpo_policy_loss"], case, policy, old, adv, mask, ref, epsilon=case["epsilon"]
            )
            entry["grpo_policy_loss_abs_error"] = float((mini - trl_loss).abs())
            entry["passed"] &= bool(
                entry["grpo_policy_loss_abs_error"] <= atol and (mini_grad - trl_grad).abs().max() <= atol
            )
        if case["loss_type"] == "cispo":
            cispo = fns["cispo_policy_loss"]
            mini, _ = minimind_loss_and_grad(
                cispo, case, policy, old, adv, mask, ref, epsilon_high=case["epsilon_high"]
            )
            entry["minimind_reduction_loss"] = round(float(mini), 8)
            entry["minimind_vs_trl_reduction_diff"] = round(float(mini - trl_loss), 8)
            # equal-length batch: both reductions agree, so MiniMind's cispo_policy_loss must match TRL directly
            full = torch.ones_like(mask)
            trl_full, trl_full_grad = trl_loss_and_grad(
                GRPOTrainer, config, set(), policy, old, ref, full, adv, num_items_in_batch=int(full.sum())
            )
            mini_full, mini_full_grad = minimind_loss_and_grad(
                cispo, case, policy, old, adv, full, ref, epsilon_high=case["epsilon_high"]
            )
            entry["equal_lengths_cispo_policy_loss_abs_error"] = float((mini_full - trl_full).abs())
            entry["absolute_cap_confirmed"] = bool(
                entry["equal_lengths_cispo_policy_loss_abs_error"] <= atol
                and (mini_full_grad - trl_full_grad).abs().max() <= atol
            )
            # the other convention (cap = 1 + epsilon_high) gives a different number on these inputs
            one_plus, _ = minimind_loss_and_grad(
                cispo, case, policy, old, adv, full, ref, epsilon_high=1.0 + case["epsilon_high"]
            )
            entry["one_plus_epsilon_high_abs_error"] = float((one_plus - trl_full).abs())
            entry["absolute_cap_confirmed"] &= entry["one_plus_epsilon_high_abs_error"] > atol
            # TRL's default epsilon_high (= epsilon = 0.2) caps nearly every ratio: measure how many tokens
            default_cap = trl_config(GRPOConfig, loss_type="cispo").epsilon_high
            ratio = torch.exp(policy - old)[mask]  # [valid tokens]
            entry["trl_default_epsilon_high"] = default_cap
            entry["capped_fraction_at_trl_default"] = round(
                float((ratio > (default_cap if default_cap is not None else 0.2)).double().mean()), 4
            )
            entry["passed"] &= entry["absolute_cap_confirmed"]
        results[case["name"]] = entry
        failures += [] if entry["passed"] else [f"loss.{case['name']}"]

    # dapo over two micro-batches (gradient accumulation): TRL's per-micro-batch losses add up to the
    # course's token mean over the global batch
    policy, old, ref, mask, adv = case_batch(fns["group_relative_advantages"], seed=7)
    config = trl_config(
        GRPOConfig,
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        use_bias_correction_kl=False,
        max_completion_length=MAX_LEN,
        gradient_accumulation_steps=2,
        steps_per_generation=2,
    )
    items = int(mask.sum())
    halves = [slice(0, 4), slice(4, 8)]
    trl_total = sum(
        trl_loss_and_grad(
            GRPOTrainer,
            config,
            set(),
            policy[s],
            old[s],
            ref[s],
            mask[s],
            adv[s],
            num_items_in_batch=items,
            accumulation_steps=2,
        )[0]
        for s in halves
    )
    course_total = grpo_family_loss(
        policy, old, adv, mask, "dapo", epsilon_low=0.2, epsilon_high=0.28, num_items_in_batch=items
    ).detach()
    entry = {
        "trl_loss_sum_over_micro_batches": round(float(trl_total), 8),
        "course_loss": round(float(course_total), 8),
        "abs_error": float((trl_total - course_total).abs()),
    }
    entry["passed"] = bool(entry["abs_error"] <= atol)
    results["dapo_two_micro_batches"] = entry
    failures += [] if entry["passed"] else ["loss.dapo_two_micro_batches"]
    return results, failures


def extended_checks(GRPOTrainer, GRPOConfig, fns, atol):
    """TRL's sapo / luspo / vespo, delta, use_bias_correction_kl=True, accumulation: the lesson's extended_loss vs TRL."""
    extended_loss = fns["extended_loss"]
    results, failures = {}, []
    for case in EXTENDED_CASES:
        reads = set()
        policy, old, ref, mask, adv = case_batch(fns["group_relative_advantages"], seed=31)
        items = int(mask.sum())
        steps = case.get("accumulation_steps", 1)
        config = case_config(GRPOConfig, case)
        trl_loss, trl_grad = trl_loss_and_grad(
            GRPOTrainer, config, reads, policy, old, ref, mask, adv, num_items_in_batch=items, accumulation_steps=steps
        )
        kwargs = dict(
            course_kwargs(case, old, adv, mask, ref, items),
            delta=case.get("delta"),
            use_bias_correction_kl=case.get("use_bias_correction_kl", False),
            gradient_accumulation_steps=steps,
        )
        course_loss, course_grad = course_loss_and_grad(extended_loss, policy, **kwargs)
        entry = loss_entry(trl_loss, trl_grad, course_loss, course_grad, atol)
        entry["trl_reads"] = facts_read(reads, inputs_present=("num_items_in_batch", "importance_sampling_ratio"))
        # each option must matter on these inputs, otherwise agreeing with TRL proves nothing about it
        if case.get("delta") is not None:
            plain, _ = course_loss_and_grad(extended_loss, policy, **{**kwargs, "delta": None})
            entry["delta_changes_loss"] = bool((plain - course_loss).abs() > atol)
            entry["passed"] &= entry["delta_changes_loss"]
        if case.get("use_bias_correction_kl"):
            plain, plain_grad = course_loss_and_grad(
                extended_loss, policy, **{**kwargs, "use_bias_correction_kl": False}
            )
            entry["correction_changes_loss"] = bool((plain - course_loss).abs() > atol)
            # on-policy (old = policy): the ratio is 1, the value is unchanged, the gradient is not
            on_kwargs = {**kwargs, "old_logps": policy.detach()}
            on_trl, on_trl_grad = trl_loss_and_grad(
                GRPOTrainer, config, set(), policy, policy.detach(), ref, mask, adv, num_items_in_batch=items
            )
            on_course, on_course_grad = course_loss_and_grad(extended_loss, policy, **on_kwargs)
            on_plain, on_plain_grad = course_loss_and_grad(
                extended_loss, policy, **{**on_kwargs, "use_bias_correction_kl": False}
            )
            entry["on_policy"] = {
                "abs_error": float((on_trl - on_course).abs()),
                "grad_max_abs_error": float((on_trl_grad - on_course_grad).abs().max()),
                "loss_change_from_correction": float((on_course - on_plain).abs()),
                "grad_change_from_correction": float((on_course_grad - on_plain_grad).abs().max()),
            }
            entry["passed"] &= bool(
                entry["on_policy"]["abs_error"] <= atol
                and entry["on_policy"]["grad_max_abs_error"] <= atol
                and entry["on_policy"]["loss_change_from_correction"] <= atol
                and entry["on_policy"]["grad_change_from_correction"] > atol
            )
        if steps > 1:
            single, _ = course_loss_and_grad(extended_loss, policy, **{**kwargs, "gradient_accumulation_steps": 1})
            entry["ratio_to_single_step"] = round(float(course_loss / single), 8)
            entry["passed"] &= abs(entry["ratio_to_single_step"] - 1.0 / steps) <= 1e-6
        results[case["name"]] = entry
        failures += [] if entry["passed"] else [f"extended.{case['name']}"]
    return results, failures
