"""Full marks: the worked answers of solutions/ in every graded notebook (nb03a, nb04 and nb05 also hold
manual-graded answers, reported as needing manual grading)."""
CASE = {
    "nb01_group_advantages": {"base": "solution"},
    "nb02_grpo_objective": {"base": "solution"},
    "nb04_verifiable_rewards": {"base": "solution"},
    "nb05_logprobs_masks": {"base": "solution"},
    "nb03a_cispo_trace_lab": {"base": "solution"},
    "nb03b_loss_family_trl": {"base": "solution"},
    "nb07_online_grpo": {"base": "solution"},
}
