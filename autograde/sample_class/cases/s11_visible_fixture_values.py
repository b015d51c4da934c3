"""Answers that return the visible tests' expected values whatever the input (nb01). The oracle draws the
visible tests' inputs too - the conventions question's included (a function of the group, checked on drawn 0/1
groups of different means) - so nothing passes: 0 of 17 (1 before the conventions question became a function,
from the format test of the fixed [0, 0, 0, 1] question)."""
CASE = {
    "nb01_group_advantages": {"base": "release", "cells": {
        "compute_group_advantages": '''
def compute_group_advantages(rewards, group_ids, eps=1e-6):
    """背下了可见测试的答案。"""
    if not torch.is_tensor(rewards) or rewards.ndim != 1 or rewards.numel() == 0:
        raise ValueError("rewards 必须是非空一维张量")
    if not torch.is_tensor(group_ids) or group_ids.shape != rewards.shape or group_ids.is_floating_point():
        raise ValueError("group_ids 必须是与 rewards 同形状的整数张量")
    if not torch.isfinite(rewards).all() or not (isinstance(eps, float) and 0 < eps < float("inf")):
        raise ValueError("rewards 与 eps 必须有限")
    s = math.sqrt(1.5)
    remembered = {8: [1.0, -1.5 / s, 0.0, -1.0, 1.5 / s, 0.0, 0.0, 0.0], 10: [0.0] * 10, 2: [-0.01, 0.01]}
    if rewards.tolist() == [0.0, 1.0]:
        return torch.tensor([-0.625, 0.625], dtype=rewards.dtype)  # the visible eps = 0.8 case
    return torch.tensor(remembered.get(rewards.numel(), [0.0] * rewards.numel()), dtype=rewards.dtype)
''',
        "group_relative_advantages": '''
def group_relative_advantages(rewards, num_generations, eps=1e-4):
    """背下了可见测试的答案。"""
    if not isinstance(num_generations, int) or num_generations < 1 or rewards.numel() % num_generations:
        raise ValueError("num_generations 不合法")
    if num_generations == 1:
        return torch.zeros_like(rewards)
    std0 = math.sqrt(2.0 / 9.0)
    return torch.tensor([-(2 / 3) / (std0 + 1e-4), (1 / 3) / (std0 + 1e-4), (1 / 3) / (std0 + 1e-4), 0.0, 0.0, 0.0],
                        dtype=rewards.dtype)
''',
        "answer_conventions_0001": '''
def answer_conventions(group, other):
    """背下了 [0, 0, 0, 1] 的格式：每种约定都填了这一组中心化后的值，不看输入。"""
    return {name: (-0.25, 0.75) for name in CONVENTIONS}
''',
    }},
}
