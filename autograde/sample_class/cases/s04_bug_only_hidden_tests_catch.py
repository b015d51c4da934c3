"""One TODO wrong in a way the visible tests miss, in each notebook; a hidden test catches it.

nb01: compute_group_advantages shifts `rewards` in place (the result is right, the caller's tensor is not):
      test_compute_group_advantages_hidden (5 points) checks that inputs are left alone.
nb02: compute_grpo_loss clips the ratio only from above: the visible fixtures never go below 1 - epsilon,
      the random ratios of test_compute_grpo_loss_hidden (6 points) do.
"""
CASE = {
    "nb01_group_advantages": {"base": "solution", "edit": {"compute_group_advantages": [
        ("shifted = rewards - pivot[inverse]", "shifted = rewards.sub_(pivot[inverse])"),
    ]}},
    "nb02_grpo_objective": {"base": "solution", "edit": {"compute_grpo_loss": [
        ("ratio.clamp(1.0 - clip_range, 1.0 + clip_range)", "ratio.clamp(max=1.0 + clip_range)"),
    ]}},
}
