"""Untouched learner versions: every TODO still raises NotImplementedError (0 everywhere)."""
CASE = {
    "nb01_group_advantages": {"base": "release"},
    "nb02_grpo_objective": {"base": "release"},
    "nb04_verifiable_rewards": {"base": "release"},
    "nb05_logprobs_masks": {"base": "release"},
}
