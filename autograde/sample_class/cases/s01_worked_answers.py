"""Full marks: the worked answers of solutions/ in every graded notebook (nb04 and nb05 also hold a
manual-graded answer, reported as needing manual grading)."""
CASE = {
    "nb01_group_advantages": {"base": "solution"},
    "nb02_grpo_objective": {"base": "solution"},
    "nb04_verifiable_rewards": {"base": "solution"},
    "nb05_logprobs_masks": {"base": "solution"},
}
