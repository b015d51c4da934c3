"""Full marks (honest variants): answers that use what the notebook itself provides, and fixes below.

- nb03a: grpo_policy_loss reads ``sys`` (imported by the locked bootstrap cell); the oracle's driver used to skip
  the bootstrap (``SKIP_SETUP = ("trace_lab",)`` matched it as a substring: 6/14);
- nb05: shifted_token_logps uses ``selective_log_softmax``, imported by the lesson's setup cell (the driver
  skipped that cell because it also loads the tiny model: 3/6);
- nb04: ``import numpy as np`` added to the editable imports cell (no ``processes`` flag for its released
  ``import subprocess``), the weight check of verify_integer_response in a helper of an added cell above the
  answer, and combine_rewards fixed in a new cell below its answer cell (4/7).
"""
NB04_HELPER = '''
def _weight(name, value):
    """My helper: a finite, non-negative real weight (bool rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} 必须是有限的非负实数，收到 {value!r}")
    return float(value)
'''
NB04_COMBINE_FIXED = '''
def combine_rewards(rewards_per_func, weights):
    """Fixed below the answer: NaN columns are skipped, rows NaN everywhere stay NaN."""
    if not isinstance(rewards_per_func, torch.Tensor) or not rewards_per_func.is_floating_point() \\
            or rewards_per_func.dim() != 2 or rewards_per_func.shape[1] == 0:
        raise ValueError("rewards_per_func 必须是 [N, F] 的浮点张量，F >= 1")
    if torch.isinf(rewards_per_func).any():
        raise ValueError("rewards_per_func 不能含 ±inf")
    w = torch.as_tensor(weights, dtype=rewards_per_func.dtype)
    if w.dim() != 1 or w.shape[0] != rewards_per_func.shape[1] or not torch.isfinite(w).all():
        raise ValueError("weights 必须是长度为 F 的有限数序列")
    total = torch.where(torch.isnan(rewards_per_func), torch.zeros_like(rewards_per_func), rewards_per_func) @ w
    return total.masked_fill(torch.isnan(rewards_per_func).all(dim=1), float("nan"))
'''
CASE = {
    "nb03a_cispo_trace_lab": {"base": "solution", "edit": {"grpo_policy_loss": [(
        "    valid = check_policy_inputs(",
        "    if sys.version_info < (3, 8):\n        raise ValueError(\"本课需要 Python 3.8 以上\")\n"
        "    valid = check_policy_inputs(")]}},
    "nb05_logprobs_masks": {"base": "solution", "edit": {"shifted_token_logps": [(
        "    next_token_logps = torch.log_softmax(logits[:, :-1, :], dim=-1)  # [B, T-1, V]\n"
        "    targets = input_ids[:, 1:].long().unsqueeze(-1)  # [B, T-1, 1]\n"
        "    return next_token_logps.gather(-1, targets).squeeze(-1)  # [B, T-1]",
        "    return selective_log_softmax(logits[:, :-1, :], input_ids[:, 1:].long())  # [B, T-1]")]}},
    "nb04_verifiable_rewards": {
        "base": "solution",
        "edit": {
            "verify_integer_response": [
                ('    correctness_weight = _check_weight("correctness_weight", correctness_weight)\n'
                 '    format_weight = _check_weight("format_weight", format_weight)\n',
                 '    correctness_weight = _weight("correctness_weight", correctness_weight)\n'
                 '    format_weight = _weight("format_weight", format_weight)\n')],
            "combine_rewards": [("    return combined.masked_fill(unscorable, math.nan)  # [N]",
                                 "    return combined  # [N] (forgot the all-NaN rows: fixed in the next cell)")],
        },
        "edit_setup": [("import subprocess", "import math\n", "import math\n\nimport numpy as np\n")],
        "insert_before": [("verify_integer_response", NB04_HELPER)],
        "insert_after": [("combine_rewards", NB04_COMBINE_FIXED)],
    },
}
