"""A short human-readable view of a conformance result (Chinese): :func:`print_conformance_summary`."""

from __future__ import annotations

import json


def _fmt(value):
    return "-" if value is None else f"{value:.1e}"


def print_conformance_summary(result):
    """A short human-readable view of the result (Chinese); the lesson prints the full result as one JSON line."""
    print(
        f"status: {result['status']}  (trl {result.get('trl_version', '-')}, 核对为 trl=={result['written_for']} 编写)"
    )
    for key in ("reason", "version_note", "attribute", "detail", "failed"):
        if key in result:
            print(f"{key}: {result[key]}")
    if "rewards" in result:
        print("奖励核对:", ", ".join(f"{k}={v}" for k, v in result["rewards"]["checks"].items()))
    if "trl_defaults" in result:
        print("TRL 1.16 的默认值:", json.dumps(result["trl_defaults"], ensure_ascii=False))
    for section in ("loss", "extended"):
        if section not in result:
            continue
        print(f"{'case':<26}{'TRL':>12}{'本课':>12}{'|误差|':>10}{'梯度误差':>10}{'裁剪词元':>8}  通过")
        for name, entry in result[section].items():
            trl_value = entry.get("trl_loss", entry.get("trl_loss_sum_over_micro_batches"))
            print(
                f"{name:<26}{trl_value:>12.6f}{entry['course_loss']:>12.6f}{_fmt(entry['abs_error']):>10}"
                f"{_fmt(entry.get('grad_max_abs_error')):>10}{entry.get('clipped_tokens', '-'):>8}  {entry['passed']}"
            )
    cispo = result.get("loss", {}).get("cispo", {})
    if cispo:
        print(
            f"cispo：MiniMind 归约（回答等权）比 TRL 归约（全局词元均值）多 {cispo['minimind_vs_trl_reduction_diff']:+.6f}；"
            f"等长批上 cispo_policy_loss 与 TRL 一致（绝对上限）: {cispo['absolute_cap_confirmed']}；"
            f"TRL 默认 epsilon_high={cispo['trl_default_epsilon_high']}（即 = epsilon）时被封顶的词元比例 "
            f"{cispo['capped_fraction_at_trl_default']:.2f}"
        )
    if "bias_correction_kl_effect" in result:
        effect = result["bias_correction_kl_effect"]
        print(
            f"use_bias_correction_kl 默认值 = {result['use_bias_correction_kl_default']}，"
            f"默认值下 TRL 损失 {effect['trl_default_loss']:.6f}，本课（无修正）{effect['course_loss']:.6f}"
        )
    on_policy = result.get("extended", {}).get("grpo_bias_correction_kl", {}).get("on_policy")
    if on_policy:
        print(
            f"on-policy（old = policy）时 KL 修正使损失变化 {on_policy['loss_change_from_correction']:.1e}，"
            f"梯度变化 {on_policy['grad_change_from_correction']:.2e}"
        )
    if "advantages" in result:
        for name, entry in result["advantages"].items():
            if "max_abs_error" in entry:
                print(f"优势 {name:<20} TRL 源码 vs 本课 最大误差 {entry['max_abs_error']:.1e}  通过 {entry['passed']}")
        mm = result["advantages"]["minimind_population_std_vs_trl"]
        print(
            f"MiniMind（总体 std）/ TRL（Bessel std）= {mm['ratio_minimind_over_trl']:.6f}，"
            f"sqrt(G/(G-1)) = {mm['sqrt_g_over_g_minus_1']:.6f}"
        )
    if "loss" in result and "dapo" in result["loss"]:
        print("dapo 读取的属性:", ", ".join(result["loss"]["dapo"]["trl_reads"]))
