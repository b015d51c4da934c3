"""6 of 9: nb07 with grpo_step's metrics returned as 0-d tensors (honest: the lesson asks for numbers
and a 0-d tensor is one; the oracle required Python numbers: 5/9) and a sample_group that does not sample (greedy
decoding, one token per row whatever max_new_tokens says: the oracle checked neither the budget, nor that
different seeds differ, nor the temperature: 9/9). Fair: sample_group's 3 points lost, the other 6 kept.
"""
CASE = {
    "nb07_online_grpo": {
        "base": "solution",
        "edit": {
            "sample_group": [("do_sample=True", "do_sample=False"),
                             ("max_new_tokens=max_new_tokens, pad_token_id", "max_new_tokens=1, pad_token_id")],
            "grpo_step": [(
                '    return {"loss": mean(losses), "losses": losses, "clip_ratio_low": mean(lows), '
                '"clip_ratio_high": mean(highs),\n'
                '            "approx_kl": mean(kls), "kl_ref": mean(ref_kls) if ref_kls else None, "entropy": entropy,\n'
                '            "grad_norm": mean(norms), "num_iterations": num_iterations}',
                '    as_tensor = lambda value: torch.tensor(value, dtype=old.dtype)  # noqa: E731 (0-d tensors)\n'
                '    return {"loss": as_tensor(mean(losses)), "losses": [as_tensor(v) for v in losses],\n'
                '            "clip_ratio_low": as_tensor(mean(lows)), "clip_ratio_high": as_tensor(mean(highs)),\n'
                '            "approx_kl": as_tensor(mean(kls)), "kl_ref": mean(ref_kls) if ref_kls else None,\n'
                '            "entropy": as_tensor(entropy), "grad_norm": as_tensor(mean(norms)),\n'
                '            "num_iterations": num_iterations}')],
        },
    },
}
