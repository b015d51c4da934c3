"""One TODO wrong in a way the visible tests miss, in each notebook; a hidden test catches it.

nb01: compute_group_advantages shifts `rewards` in place (the result is right, the caller's tensor is not):
      test_compute_group_advantages_hidden (5 points) checks that inputs are left alone.
nb02: compute_grpo_loss clips the ratio only from above: the visible fixtures never go below 1 - epsilon,
      the random ratios of test_compute_grpo_loss_hidden (6 points) do.
nb04: verify_integer_response accepts ``True`` as a weight (bool is an int): only the hidden part of
      test_verify_integer_response_visible (3 points) passes bool weights.
nb05: shifted_token_logps does not check the token range (gather fails with a RuntimeError, not ValueError):
      only the hidden part of test_shifted_token_logps_visible (3 points) passes out-of-range ids.
nb03a: cispo_policy_loss caps the ratio at 1 + epsilon_high instead of epsilon_high: test_cispo_policy_loss
       (4 points) loses its points (tests/test_nb03.py: only its hidden part catches this variant).
nb03b: reduce_per_token_loss reduces loss_type "grpo" as a token mean over the batch: test_reduce_per_token_loss
       (4 points) loses its points (tests/test_nb03.py: only its hidden part catches it).
nb07: log_step_metrics reports the population std of the rewards instead of the sample std:
      test_log_step_metrics_visible (2 points) loses its points (tests/test_nb07_online.py: its hidden part).
"""
CASE = {
    "nb01_group_advantages": {"base": "solution", "edit": {"compute_group_advantages": [
        ("shifted = rewards - pivot[inverse]", "shifted = rewards.sub_(pivot[inverse])"),
    ]}},
    "nb02_grpo_objective": {"base": "solution", "edit": {"compute_grpo_loss": [
        ("ratio.clamp(1.0 - clip_range, 1.0 + clip_range)", "ratio.clamp(max=1.0 + clip_range)"),
    ]}},
    "nb04_verifiable_rewards": {"base": "solution", "edit": {"verify_integer_response": [
        ("    if isinstance(value, bool) or not isinstance(value, (int, float)):",
         "    if not isinstance(value, (int, float)):"),
    ]}},
    "nb05_logprobs_masks": {"base": "solution", "edit": {"shifted_token_logps": [
        ("    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= logits.shape[-1]):\n"
         "        raise ValueError(f\"input_ids 的取值必须在 [0, V={logits.shape[-1]}) 内\")\n", ""),
    ]}},
    "nb03a_cispo_trace_lab": {"base": "solution", "edit": {"cispo_policy_loss": [
        ("torch.clamp(torch.exp(log_ratio), max=epsilon_high)", "torch.clamp(torch.exp(log_ratio), max=1.0 + epsilon_high)"),
    ]}},
    "nb03b_loss_family_trl": {"base": "solution", "edit": {"reduce_per_token_loss": [
        ("return (masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()",
         "return masked.sum() / mask.sum().clamp(min=1.0)"),
    ]}},
    "nb07_online_grpo": {"base": "solution", "edit": {"log_step_metrics": [
        ("values.std(unbiased=True)", "values.std(unbiased=False)"),
    ]}},
}
