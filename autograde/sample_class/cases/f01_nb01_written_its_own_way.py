"""Full marks (honest variants): nb01 written the way learners write notebooks.

- the input checks of compute_group_advantages live in a helper defined in a cell the learner added above the
  answer (the oracle's driver ran only the answer cells: 5/17);
- the helper states the contract in its own words and order (non-float rewards rejected: the lesson's contract);
- ``import numpy as np`` added to the editable imports cell (was a false ``grader-internals``/``processes``
  flag and 5/17), and the conventions answer returns the values as NumPy numbers from ``.numpy()`` (13/17);
- group_relative_advantages has a bug in its answer cell that a new cell below it fixes before the tests run.
"""
NB01_HELPER = '''
def _check_advantage_inputs(rewards, group_ids, eps):
    """My own helper: the input contract of compute_group_advantages, in one place."""
    if not torch.is_tensor(rewards) or not torch.is_tensor(group_ids):
        raise ValueError("rewards 与 group_ids 必须是张量")
    if rewards.ndim != 1 or group_ids.shape != rewards.shape:
        raise ValueError("rewards 必须是一维，group_ids 与它同形状")
    if rewards.numel() == 0:
        raise ValueError("rewards 为空")
    if rewards.dtype.is_complex or not rewards.dtype.is_floating_point:
        raise ValueError("rewards 必须是浮点张量")
    if group_ids.is_floating_point() or group_ids.is_complex() or group_ids.dtype == torch.bool:
        raise ValueError("group_ids 必须是整数张量")
    if not torch.isfinite(rewards.double()).all():
        raise ValueError("rewards 含 NaN 或 inf")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError("eps 必须是正的有限数")
'''
CHECKS_START = "    if not torch.is_tensor(rewards) or not torch.is_tensor(group_ids):"
CHECKS_END = '        raise ValueError(f"输入契约：eps 必须是正的有限数，实际为 {eps!r}")\n'
FIXED_GROUP_RELATIVE = '''
def group_relative_advantages(rewards, num_generations, eps=1e-4):
    """Fixed here: the answer cell above used the sample std."""
    if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError("num_generations 必须是正整数")
    if not torch.is_tensor(rewards) or rewards.ndim != 1 or rewards.numel() % num_generations:
        raise ValueError("rewards 必须是一维且长度是 num_generations 的整数倍")
    grouped = rewards.reshape(-1, num_generations)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    std = centered.pow(2).mean(dim=1, keepdim=True).sqrt()
    return (centered / (std + eps)).reshape(-1)
'''


def _without_checks(source):
    start, end = source.index(CHECKS_START), source.index(CHECKS_END) + len(CHECKS_END)
    return source[:start] + "    _check_advantage_inputs(rewards, group_ids, eps)\n" + source[end:]


def _load_worked():
    from autograde.sample_class.build import worked_answers

    return worked_answers("nb01_group_advantages")


_WORKED = _load_worked()
CASE = {
    "nb01_group_advantages": {
        "base": "solution",
        "cells": {"compute_group_advantages": _without_checks(_WORKED["compute_group_advantages"])},
        "edit": {
            "answer_conventions_0001": [("(table[name][0, wrong].item(), table[name][0, right].item())",
                                         "(table[name][0, wrong].numpy(), np.float64(table[name][0, right].numpy()))")],
            "group_relative_advantages": [("unbiased=False", "unbiased=True")],
        },
        "edit_setup": [("import matplotlib.pyplot", "import math\n", "import math\n\nimport numpy as np\n")],
        "insert_before": [("compute_group_advantages", NB01_HELPER)],
        "insert_after": [("group_relative_advantages", FIXED_GROUP_RELATIVE)],
    },
}
