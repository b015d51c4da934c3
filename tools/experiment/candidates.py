"""The candidate sets of the final experiment: the fixed candidate groups scored by the verifier
``integer-answer-v1``, and their group-relative advantages with the zero-variance guard.

One home per function: the verifier is notebook 4's graded ``verify_integer_response`` and the advantages are
notebook 1's graded ``compute_group_advantages`` (both imported from ``tools.lessons``), so the experiment scores
and normalises exactly as the lessons grade.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tools.lessons.nb01_group_advantages import compute_group_advantages  # nb01's graded rule
from tools.lessons.nb04_verifiable_rewards import verify_integer_response  # nb04's graded verifier

# The seed's two fixed groups: one prompt each, four fixed responses each. A candidate set of group
# size G takes the first G responses of every group, so `minimal_pair` (G=2) is one correct, well
# formatted answer against one wrong one, and `expanded_group` (G=4) adds a correct answer in prose
# (format fails) and, in the first group, an answer with no integer at all (unjudgeable).
GROUP_FIXTURES: tuple[dict[str, Any], ...] = (
    {
        "prompt": "Return only the integer result of 2 + 2.",
        "expected_answer": 4,
        "responses": ("4", "5", "The answer is 4.", "I do not know."),
    },
    {
        "prompt": "Return only the integer result of 3 * 3.",
        "expected_answer": 9,
        "responses": ("9", "6", "The answer is 9.", "10"),
    },
)


@dataclass(frozen=True)
class CandidateSet:
    """One candidate set, flattened group by group (the TRL layout ``[num_groups * G]``)."""

    name: str
    group_size: int
    prompts: list[str]
    responses: list[str]
    group_ids: list[int]
    verifier_records: list[dict[str, Any]]  # one per response, with group_index and response added

    @property
    def rewards(self) -> list[float]:
        return [record["total_reward"] for record in self.verifier_records]


def build_candidate_set(
    name: str,
    group_size: int,
    fixtures: Sequence[Mapping[str, Any]] = GROUP_FIXTURES,
    correctness_weight: float = 1.0,
    format_weight: float = 0.1,
) -> CandidateSet:
    """Take the first ``group_size`` responses of every fixture group and score them with the verifier."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size 必须是 >= 2 的整数（组内至少两个候选才能比较），收到 {group_size!r}")
    prompts, responses, group_ids, records = [], [], [], []
    for group_index, fixture in enumerate(fixtures):
        available = list(fixture["responses"])
        if group_size > len(available):
            raise ValueError(f"第 {group_index} 组只有 {len(available)} 个固定候选，不够 group_size={group_size}")
        for response in available[:group_size]:
            prompts.append(fixture["prompt"])
            responses.append(response)
            group_ids.append(group_index)
            record = verify_integer_response(response, fixture["expected_answer"], correctness_weight, format_weight)
            records.append({"group_index": group_index, "response": response, **record})
    return CandidateSet(name, group_size, prompts, responses, group_ids, records)


def verifier_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Correctness and format pass rates over the candidates, and how many were unjudgeable."""
    if not records:
        raise ValueError("verifier_records 为空，无法统计通过率")
    count = len(records)
    return {
        "correctness_pass_rate": sum(r["correctness"] for r in records) / count,
        "format_pass_rate": sum(r["format_pass"] for r in records) / count,
        "unjudgeable_count": sum(r["status"] == "unjudgeable" for r in records),
    }


def fixtures_hash_items(fixtures: Sequence[Mapping[str, Any]] = GROUP_FIXTURES) -> list[str]:
    """The ordered strings whose hash identifies the embedded data set (prompt, answer, responses)."""
    return [
        json.dumps(
            {"prompt": f["prompt"], "expected_answer": f["expected_answer"], "responses": list(f["responses"])},
            ensure_ascii=False,
            sort_keys=True,
        )
        for f in fixtures
    ]


def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Notebook 1's graded rule ``(r - mean_g) / max(std_g, eps)`` (population std), imported from
    ``tools.lessons.nb01_group_advantages``: a group whose rewards are all equal gets exactly zero
    advantages, also for float32 rewards that are not exactly representable (ten 1.1's, eight 0.1's).

    rewards: [N] float, group_ids: [N] int (any order). A bad input raises ``ValueError`` (nb01's contract).
    """
    return compute_group_advantages(rewards, group_ids, eps=eps)  # [N]


# Collapsed rewards the guard tries: 1.0 is exactly representable; 1.1 and 0.1 are not (in float32 a
# mean-then-subtract rule leaves residues like 1e-8 that a std floor of 1e-6 turns into 0.1-scale advantages).
ZERO_VARIANCE_PROBES = (1.0, 1.1, 0.1)


def zero_variance_guard(
    group_ids: torch.Tensor, eps: float = 1e-6, advantage_fn: Callable[..., torch.Tensor] = group_advantages
) -> bool:
    """True iff identical float32 rewards in every group give exactly zero advantages (no fake signal).

    Tries every value of :data:`ZERO_VARIANCE_PROBES` (1.0, 1.1, 0.1) for all candidates.
    ``advantage_fn`` is the function under test (the experiment passes :func:`group_advantages`); a
    version without the ``eps`` floor divides 0 by 0 (NaN), and a mean-then-subtract version with a
    floor passes 1.0 but not 1.1 or 0.1 (rounding residues divided by ``eps``).
    """
    for value in ZERO_VARIANCE_PROBES:
        collapsed = torch.full(group_ids.shape, value, dtype=torch.float32, device=group_ids.device)  # [N]
        advantages = advantage_fn(collapsed, group_ids, eps=eps)  # [N]
        if not bool(torch.isfinite(advantages).all() and advantages.eq(0).all()):
            return False
    return True


def reward_std_mean(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Mean over groups of the within-group population std of the rewards (0 = collapsed rewards)."""
    stds = [rewards[group_ids == gid].std(unbiased=False) for gid in group_ids.unique(sorted=True)]
    return float(torch.stack(stds).mean())
