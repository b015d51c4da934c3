'''Full marks, no copy flag (nb04): a learner who wrote every answer from the lesson's text alone. The lesson's
contract leaves about one natural way to write ``verify_integer_response`` (strip, ``re.findall`` of ``-?\\d+``,
the last match, ``re.fullmatch`` for the format, a weight check shared by both weights), so this honest answer
shares most of its fingerprint with the reference: it was flagged ``copies-reference:93%`` before thresholds were
calibrated per function. The other two answers are written the learner's own way.'''

NB04_VERIFY = """
import math
import re

VERIFIER_ID = "integer-answer-v1"
NUMBER = re.compile(r"-?\\d+")


def _weight(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} 必须是有限的非负实数，收到 {value!r}")
    return float(value)


def verify_integer_response(response, expected_answer, correctness_weight=1.0, format_weight=0.1):
    if not isinstance(response, str):
        raise ValueError(f"response 必须是 str，收到 {type(response).__name__}")
    if isinstance(expected_answer, bool) or not isinstance(expected_answer, int):
        raise ValueError(f"expected_answer 必须是 int，收到 {type(expected_answer).__name__}")
    correctness_weight = _weight("correctness_weight", correctness_weight)
    format_weight = _weight("format_weight", format_weight)
    text = response.strip()
    found = NUMBER.findall(text)
    parsed_answer = int(found[-1]) if found else None
    status = "ok" if parsed_answer is not None else "unjudgeable"
    correctness = 1.0 if parsed_answer == expected_answer else 0.0
    format_pass = 1.0 if NUMBER.fullmatch(text) else 0.0
    return {
        "verifier_id": VERIFIER_ID,
        "status": status,
        "parsed_answer": parsed_answer,
        "correctness": correctness,
        "format_pass": format_pass,
        "total_reward": correctness_weight * correctness + format_weight * format_pass,
    }
"""

NB04_TABLE = """
def rewards_per_func_from_lists(outputs, dtype=torch.float32):
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype 必须是浮点类型，收到 {dtype!r}")
    if not isinstance(outputs, (list, tuple)) or not outputs:
        raise ValueError("outputs 必须是非空列表")
    n = len(outputs[0]) if isinstance(outputs[0], (list, tuple)) else 0
    table = torch.full((n, len(outputs)), math.nan, dtype=dtype)
    for f, column in enumerate(outputs):
        if not isinstance(column, (list, tuple)) or not column or len(column) != n:
            raise ValueError(f"第 {f} 个奖励函数的输出必须是长度为 {n} 的非空列表")
        for i, reward in enumerate(column):
            if reward is None:
                continue
            if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
                raise ValueError(f"奖励 [{i}, {f}] 必须是有限实数或 None，收到 {reward!r}")
            table[i, f] = float(reward)
    return table
"""

NB04_COMBINE = """
def combine_rewards(rewards_per_func, weights):
    if not torch.is_tensor(rewards_per_func) or rewards_per_func.ndim != 2 or not rewards_per_func.is_floating_point():
        raise ValueError("rewards_per_func 必须是 [N, F] 浮点张量")
    if rewards_per_func.shape[1] == 0:
        raise ValueError("至少需要一个奖励函数（F >= 1）")
    if torch.isinf(rewards_per_func).any():
        raise ValueError("rewards_per_func 不能含 inf")
    w = torch.as_tensor(weights, dtype=rewards_per_func.dtype)
    if w.ndim != 1 or len(w) != rewards_per_func.shape[1] or not torch.isfinite(w).all():
        raise ValueError(f"weights 必须是 {rewards_per_func.shape[1]} 个有限数")
    nan = torch.isnan(rewards_per_func)
    weighted = torch.where(nan, torch.zeros_like(rewards_per_func), rewards_per_func * w)
    total = weighted.sum(dim=1)
    total[nan.all(dim=1)] = math.nan
    return total
"""

CASE = {"nb04_verifiable_rewards": {"base": "solution", "cells": {
    "verify_integer_response": NB04_VERIFY,
    "rewards_per_func_from_lists": NB04_TABLE,
    "combine_rewards": NB04_COMBINE,
}}}
