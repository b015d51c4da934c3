"""Untouched learner versions: every TODO still raises NotImplementedError (0 everywhere)."""
CASE = {
    "nb01_group_advantages": {"base": "release"},
    "nb02_grpo_objective": {"base": "release"},
    "nb04_verifiable_rewards": {"base": "release"},
    "nb05_logprobs_masks": {"base": "release"},
    "nb03a_cispo_trace_lab": {"base": "release"},
    "nb03b_loss_family_trl": {"base": "release"},
    "nb07_online_grpo": {"base": "release"},
}
