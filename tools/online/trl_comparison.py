"""Lesson 7's whole comparison with TRL, and what it catches.

Two parts, one rollout batch (``trl_agreement.agreement_batch``): the agreement matrix (``trl_agreement``: epoch 0 of
``grpo_step`` against ``GRPOTrainer._compute_loss``, every loss type x beta x ``use_bias_correction_kl``) and the
update scenarios (``trl_scenarios``: whole mu-epoch updates against ``GRPOTrainer.train()``, temperature != 1,
clipping of ratios and of the gradient active, TRL's logged metrics). ``trl_references`` computes TRL's side of both
once; ``first_disagreement`` compares a ``grpo_step`` with it; ``catch_mutations`` does so for every broken copy of
``trl_mutations.MUTATIONS`` and says which comparison caught each.
"""

from __future__ import annotations

from tools.online.trl_agreement import MATRIX, agreement_batch, matrix_key, matrix_row, trl_matrix_references
from tools.online.trl_mutations import MUTATIONS, mutate
from tools.online.trl_scenarios import SCENARIOS, scenario_rows, trl_scenario_references


def trl_references(
    sample_group, policy, ref_model, tokenizer, problems, scenarios=SCENARIOS, max_new_tokens=6, seed=3
) -> dict:
    """TRL's side of the comparison, computed once: {"batch": the agreement batch (sampled by the lesson's
    ``sample_group``), "matrix": ``trl_matrix_references``, "scenarios": ``trl_scenario_references``}."""
    import torch

    torch.manual_seed(seed)
    batch = agreement_batch(
        sample_group, policy, ref_model, tokenizer, problems, max_new_tokens=max_new_tokens, seed=seed
    )
    return {
        "batch": batch,
        "matrix": trl_matrix_references(policy, tokenizer, problems, batch, MATRIX, max_new_tokens),
        "scenarios": trl_scenario_references(policy, ref_model, tokenizer, problems, batch, scenarios, seed=seed),
        "max_new_tokens": max_new_tokens,
    }


def scenario_disagreement(grpo_step, policy, references) -> dict | None:
    """The first update scenario where ``grpo_step`` disagrees with TRL's side ``references``, or None:
    {"by": the scenario and what differs (words), "raised": whether ``grpo_step`` raised instead}."""
    for row in scenario_rows(grpo_step, policy, references["scenarios"], stop_at_first=True):
        if not row["agree"]:
            if "error" in row:
                return {"by": f"{row['scenario']}：{row['error']}", "raised": True}
            bad = [name for name, q in row["quantities"].items() if not q["agree"]]
            shown = ", ".join(bad[:3]) + ("…" if len(bad) > 3 else "")
            return {"by": f"{row['scenario']}：{shown}", "raised": False}
    return None


def matrix_disagreement(grpo_step, policy, references) -> dict | None:
    """The first row of the agreement matrix where ``grpo_step`` disagrees with TRL's side ``references``, or None
    (same shape as ``scenario_disagreement``)."""
    for setting in MATRIX:
        lt, beta, bc = matrix_key(setting)
        where = f"{lt}, β={beta}, bias_correction={bc}"
        try:
            row = matrix_row(
                grpo_step, policy, references["batch"], setting, references["matrix"][matrix_key(setting)],
                references["max_new_tokens"],
            )  # fmt: skip
        except Exception as error:  # noqa: BLE001 (a broken copy may raise: that is a disagreement)
            return {"by": f"{where}：{error!r}"[:300], "raised": True}
        if not row["agree"]:
            return {"by": f"{where}：损失 {row['loss_rel']:.0e}，梯度 {row['grad_rel']:.0e}", "raised": False}
    return None


def first_disagreement(grpo_step, policy, references) -> dict | None:
    """Where ``grpo_step`` first disagrees with TRL: the scenarios (whole updates) first, then the matrix; None where
    every comparison agrees."""
    return scenario_disagreement(grpo_step, policy, references) or matrix_disagreement(grpo_step, policy, references)


def catch_mutations(grpo_step, policy, references, mutations=MUTATIONS) -> dict:
    """{mutation name: {"matrix": ``matrix_disagreement``, "scenarios": ``scenario_disagreement``}} of each broken
    copy of ``grpo_step`` (the course's reference, whose text the mutations edit): a mutation is caught where either
    is not None. Raises ValueError where the unmutated ``grpo_step`` already disagrees: a comparison that fails
    everything catches nothing."""
    base = first_disagreement(grpo_step, policy, references)
    if base is not None:
        raise ValueError(f"未改动的 grpo_step 与 TRL 不一致（the unmutated grpo_step disagrees）：{base['by']}")
    out = {}
    for m in mutations:
        broken = mutate(grpo_step, m)
        out[m.name] = {
            "matrix": matrix_disagreement(broken, policy, references),
            "scenarios": scenario_disagreement(broken, policy, references),
        }
    return out
