"""The controlled cases of the conformance check: the loss types and options, TRL's advantage settings, and the
batch they run on (2 prompts x 4 generations of variable length)."""

from __future__ import annotations

COLUMNS = ("name", "loss_type", "epsilon", "epsilon_high", "importance_sampling_level", "beta")


def _case(*row, **options) -> dict:
    """One loss case: a row of :data:`COLUMNS` (the TRL config it sets), then any option of the extended loss
    (``delta``, ``use_bias_correction_kl``, ``accumulation_steps``)."""
    return {**dict(zip(COLUMNS, row, strict=True)), **options}


# the TRL config of each case, and how the course computes the same objective (the learner's grpo_family_loss)
LOSS_CASES = [
    _case("grpo", "grpo", 0.2, 0.2, "token", 0.04),
    _case("grpo_clip_higher", "grpo", 0.2, 0.28, "token", 0.0),
    _case("bnpo", "bnpo", 0.2, 0.28, "token", 0.04),
    _case("dr_grpo", "dr_grpo", 0.2, 0.28, "token", 0.04),
    _case("dapo", "dapo", 0.2, 0.28, "token", 0.04),
    _case("cispo", "cispo", 0.2, 5.0, "token", 0.04),
    _case("gspo_sequence", "grpo", 3e-4, 4e-4, "sequence", 0.0),
]
# TRL 1.16's other loss types and options, computed by the lesson's provided `extended_loss`
EXTENDED_CASES = [
    _case("sapo", "sapo", 0.2, 0.28, "token", 0.04),
    _case("luspo", "luspo", 3e-4, 4e-4, "sequence", 0.0),
    _case("vespo", "vespo", 0.2, 0.28, "token", 0.0),
    _case("grpo_delta", "grpo", 0.2, 0.28, "token", 0.0, delta=1.5),
    _case("grpo_bias_correction_kl", "grpo", 0.2, 0.2, "token", 0.04, use_bias_correction_kl=True),
    _case("dapo_bias_correction_kl", "dapo", 0.2, 0.28, "token", 0.04, use_bias_correction_kl=True),
    _case("grpo_accumulation_2", "grpo", 0.2, 0.28, "token", 0.04, accumulation_steps=2),
    _case("bnpo_accumulation_2", "bnpo", 0.2, 0.28, "token", 0.0, accumulation_steps=2),
    _case("dr_grpo_accumulation_2", "dr_grpo", 0.2, 0.28, "token", 0.0, accumulation_steps=2),
]


ADVANTAGE_CASES = [
    dict(name="group", scale_rewards="group", multi_objective_aggregation="sum_then_normalize"),
    dict(name="batch", scale_rewards="batch", multi_objective_aggregation="sum_then_normalize"),
    dict(name="none", scale_rewards="none", multi_objective_aggregation="sum_then_normalize"),
    dict(name="normalize_then_sum", scale_rewards="group", multi_objective_aggregation="normalize_then_sum"),
]
LENGTHS = [8, 3, 5, 8, 1, 6, 2, 7]  # [B*G] = 2 prompts x 4 generations, variable lengths
MAX_LEN = 8
