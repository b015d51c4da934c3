"""3 of 9 (zero-work answers): nb07 with a real sample_group but metrics that are NaN - grpo_step updates
the model correctly and returns NaN for every metric, log_step_metrics returns NaN for every number it computes.
Comparisons written as ``abs(got - want) > tol`` are False for NaN, so such an answer once took all 9 points; the
oracle compares with ``close_number`` (NaN only where NaN is expected): grpo_step's 4 and log_step_metrics' 2 points
are lost, sample_group's 3 kept.
"""

CASE = {
    "nb07_online_grpo": {
        "base": "solution",
        "edit": {
            "grpo_step": [
                (
                    '    return {"loss": mean(losses), "losses": losses, "clip_ratio_low": mean(lows), '
                    '"clip_ratio_high": mean(highs),\n'
                    '            "approx_kl": mean(kls), "kl_ref": mean(ref_kls) if ref_kls else None, "entropy": entropy,\n'
                    '            "grad_norm": mean(norms), "num_iterations": num_iterations}',
                    '    nan = float("nan")\n'
                    '    return {"loss": nan, "losses": [nan] * len(losses), "clip_ratio_low": nan, "clip_ratio_high": nan,\n'
                    '            "approx_kl": nan, "kl_ref": nan if ref_kls else None, "entropy": nan, "grad_norm": nan,\n'
                    '            "num_iterations": num_iterations}',
                )
            ],
            "log_step_metrics": [
                (
                    "    return row",
                    '    return {key: float("nan") if isinstance(value, float) else value for key, value in row.items()}',
                )
            ],
        },
    },
}
