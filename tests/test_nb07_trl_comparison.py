"""Lesson 7's comparison with TRL (``tools.online.trl_agreement`` / ``trl_scenarios`` / ``trl_comparison``) and the
broken copies it must catch (``tools.online.trl_mutations``).

TRL's side is computed once for the module (``trl_references``: the agreement matrix's 16 ``_compute_loss`` calls and
the scenarios' 4 ``GRPOTrainer.train()`` runs); each test compares the course's saved ``grpo_step`` (or a broken copy
of it) with that side, which is cheap.
"""

from __future__ import annotations

import pytest

from tools import online_grpo as og
from tools import online_trl
from tools.loss_types import CLIPPED_LOSS_TYPES

# the mutations of the independent audit: the comparison once caught the first 9 of these and missed the last 4
AUDIT_MUTATIONS = (
    "kl_sign",
    "bias_correction_dropped",
    "bias_correction_detached",
    "beta_halved",
    "grpo_reduced_as_bnpo",
    "bnpo_reduced_as_grpo",
    "clip_range_swapped",
    "lower_clip_removed",
    "dr_grpo_normaliser",
    "temperature_ignored",
    "old_refreshed_each_epoch",
    "grad_clip_wrong_norm",
    "clip_ratio_low_sign",
)


@pytest.fixture(scope="module")
def comparison():
    """(course grpo_step, policy, references): TRL's side of the whole comparison on the agreement batch."""
    import torch

    from tools.lessons.nb07_online_grpo import grpo_step, sample_group
    from tools.tiny_model import tiny_checkpoint_path

    torch.set_num_threads(1)
    policy, tokenizer = og.load_policy(og.sft_checkpoint_path(seed=0)[0])
    ref = online_trl.mixed_reference(policy, og.load_policy(tiny_checkpoint_path(seed=0))[0])
    train, _ = og.split_problems()
    references = online_trl.trl_references(sample_group, policy, ref, tokenizer, train)
    rows = online_trl.trl_agreement(sample_group, grpo_step, policy, ref, tokenizer, train, references=references)
    return grpo_step, policy, references, rows


@pytest.mark.slow
def test_trl_agreement_matrix_values_and_gradients(comparison):
    """Every loss type x beta in {0, 0.04} x use_bias_correction_kl: loss and gradient agree with TRL to 1e-5
    relative, on a batch where they could differ (unequal lengths in groups, group advantage sums != 0, a real KL,
    perturbed old log-probs with clipping at both ends)."""
    _, _, references, rows = comparison
    batch = references["batch"]
    mask, g = batch["completion_mask"], 4
    lengths = mask.sum(1).view(-1, g)
    assert bool((lengths.max(1).values > lengths.min(1).values).all()), "completion lengths differ in every group"
    assert bool((batch["advantages"].view(-1, g).sum(1).abs() > 1e-3).all()), "no group's advantages sum to 0"
    assert {(r["loss_type"], r["beta"], r["use_bias_correction_kl"]) for r in rows} == {
        online_trl.matrix_key(m) for m in online_trl.MATRIX
    }
    assert len(rows) == 16
    for r in rows:
        assert r["agree"] and r["loss_rel"] <= 1e-5 and r["grad_rel"] <= 1e-5, r
        assert r["clip_ratio_low"] > 0 and r["clip_ratio_high"] > 0, "clipping fires at both ends"
        assert r["grad_norm"] > 0
        if r["beta"] > 0:
            assert r["kl_ref"] > 0.1, f"the reference differs from the policy (KL {r['kl_ref']})"


@pytest.mark.slow
def test_trl_agreement_fails_when_one_side_drops_an_option(comparison):
    """Sensitivity: each row disagrees (> 1e-5 relative) when one side drops the option the row exercises: another
    loss type (bnpo and dapo are the same reduction on one process with one step per batch, and agree), on-policy
    old log-probs, epsilon_high = epsilon, and for beta > 0: beta = 0, and use_bias_correction_kl flipped on the
    course side or on TRL's. With beta = 0 TRL ignores use_bias_correction_kl: flipping it changes nothing."""
    *_, rows = comparison
    for r in rows:
        checks = r["sensitivity"]
        expected = {"on-policy old", "epsilon_high=epsilon"} | {
            f"loss_type={o}"
            for o in ("grpo", "bnpo", "dr_grpo", "dapo")
            if o != r["loss_type"] and {o, r["loss_type"]} != {"bnpo", "dapo"}
        }
        if r["beta"] > 0:
            expected |= {"beta=0", "course use_bias_correction_kl flipped", "TRL use_bias_correction_kl flipped"}
        assert set(checks) == expected, (r["loss_type"], sorted(checks))
        for name, check in checks.items():
            assert check["detected"], (r["loss_type"], r["beta"], r["use_bias_correction_kl"], name, check)
        for name, check in r["not_exercised"].items():
            assert not check["detected"], (name, check)
    same = {(r["loss_type"], r["beta"], r["use_bias_correction_kl"]): r["trl_loss"] for r in rows}
    assert all(same[("bnpo", b, c)] == same[("dapo", b, c)] for b in (0.0, 0.04) for c in (False, True))


@pytest.mark.slow
def test_scenarios_agree_with_trl_train_where_they_exercise_what_they_are_for(comparison):
    """The course's grpo_step against GRPOTrainer.train() on each scenario: every epoch's loss, the mean gradient
    norm, the weights after mu SGD steps, TRL's logged clip fractions (low, high, region), entropy and, without the
    bias correction, kl - all within tolerance. And each scenario does exercise what it is there for, read from TRL's
    own log: mu optimizer steps, clipping on both sides at the first step, a gradient norm above max_grad_norm at
    every step; together the scenarios cover every loss type, temperatures other than 1, mu > 1, and beta > 0 with
    and without the bias correction."""
    grpo_step, policy, references, _ = comparison
    settings = online_trl.SCENARIO_SETTINGS
    assert settings["epsilon"] != settings["epsilon_high"]
    assert settings["max_completion_length"] > references["batch"]["completion_ids"].shape[1]  # dr_grpo's normaliser
    for ref in references["scenarios"]:
        scenario, steps = ref["scenario"], ref["trl"]["steps"]
        assert len(steps) == scenario["num_iterations"]
        assert steps[0]["clip_ratio/low_mean"] > 0 and steps[0]["clip_ratio/high_mean"] > 0
        assert all(e["grad_norm"] > settings["max_grad_norm"] for e in steps)
    scenarios = online_trl.SCENARIOS
    assert {s["loss_type"] for s in scenarios} == set(CLIPPED_LOSS_TYPES)
    assert any(s["temperature"] != 1.0 for s in scenarios) and any(s["num_iterations"] > 1 for s in scenarios)
    assert {s["use_bias_correction_kl"] for s in scenarios if s["beta"] > 0} == {False, True}
    rows = online_trl.scenario_rows(grpo_step, policy, references["scenarios"])
    for row in rows:
        assert row["agree"], (row["scenario"], {k: v for k, v in row["quantities"].items() if not v["agree"]})
        names = set(row["quantities"])
        assert {"grad_norm", "weights after μ steps", "clip_ratio/region_mean", "entropy", "loss[0]"} <= names
    assert any("kl" in row["quantities"] for row in rows)
    table = online_trl.scenario_table(rows)
    assert table.count("\n") == len(rows) + 1 and "—" in table


@pytest.mark.slow
def test_every_mutation_fails_the_comparison_and_the_course_code_passes(comparison):
    """Each broken copy of grpo_step in tools.online.trl_mutations.MUTATIONS (the audit's 13 and the course's own)
    disagrees with TRL somewhere in the comparison, by value (not by raising), while the unmutated grpo_step agrees
    everywhere; catch_mutations refuses to report on a grpo_step that already disagrees."""
    grpo_step, policy, references, _ = comparison
    assert set(AUDIT_MUTATIONS) == {m.name for m in online_trl.MUTATIONS if m.origin == "audit"}
    assert len(online_trl.MUTATIONS) > len(AUDIT_MUTATIONS)
    assert online_trl.first_disagreement(grpo_step, policy, references) is None
    missed, raised = [], []
    for m in online_trl.MUTATIONS:
        found = online_trl.first_disagreement(online_trl.mutate(grpo_step, m), policy, references)
        if found is None:
            missed.append(m.name)
        elif found["raised"]:
            raised.append((m.name, found["by"]))
    assert not missed, f"mutations the comparison does not catch: {missed}"
    assert not raised, f"mutations caught only because the copy raised: {raised}"
    with pytest.raises(ValueError, match="unmutated"):
        online_trl.catch_mutations(online_trl.mutate(grpo_step, "kl_sign"), policy, references)


def test_mutate_builds_a_broken_copy_and_leaves_the_course_code_alone():
    """mutate edits a copy: the course's grpo_step (and the extended_loss it calls) keep their code, the copy's path
    leads to an edited function; an anchor the source no longer contains is a ValueError, as is a path through a
    name the function does not call. Every registered anchor is found exactly once."""
    import tools.lessons.nb03b_loss_family_trl as nb03b
    import tools.lessons.nb07_online_grpo as nb07
    from tools.online.trl_mutations import Mutation, mutate

    loss_code, step_code = nb03b.extended_loss.__code__, nb07.grpo_step.__code__
    broken = mutate(nb07.grpo_step, "kl_sign")
    assert broken is not nb07.grpo_step and broken.__code__ is step_code  # grpo_step itself is not edited
    assert broken.__globals__["extended_loss"] is not nb03b.extended_loss
    assert (
        nb07.grpo_step.__globals__["extended_loss"] is nb03b.extended_loss and nb03b.extended_loss.__code__ is loss_code
    )
    for m in online_trl.MUTATIONS:
        assert mutate(nb07.grpo_step, m).__name__ == "grpo_step"
    with pytest.raises(ValueError, match="found 0 times"):
        mutate(nb07.grpo_step, Mutation("gone", "", "added", "grpo_step", "no such text", "x"))
    with pytest.raises(ValueError, match="does not call"):
        mutate(nb07.grpo_step, Mutation("path", "", "added", "grpo_step>no_such_function", "a", "b"))
    with pytest.raises(KeyError):
        online_trl.mutate(nb07.grpo_step, "no_such_mutation")
    table = online_trl.mutation_table()
    assert table.count("\n") == len(online_trl.MUTATIONS) + 1


@pytest.mark.slow
def test_a_scenario_that_does_not_exercise_clipping_is_refused(comparison):
    """trl_scenario reads from TRL's own log whether the scenario does what it is for, and refuses it otherwise: old
    log-probs equal to the policy's (no ratio leaves the clip range at the first step), or a max_grad_norm above
    every step's gradient norm (clipping never binds). Two one-step TRL runs."""
    _, policy, references, _ = comparison
    ref = references["scenarios"][0]
    scenario = dict(ref["scenario"], num_iterations=1)
    tokenizer = og.load_policy(og.sft_checkpoint_path(seed=0)[0])[1]
    train, _ = og.split_problems()
    on_policy = dict(ref["batch"], old_per_token_logps=ref["batch"]["on_policy_old"])
    with pytest.raises(ValueError, match="clipping must fire"):
        online_trl.trl_scenario(policy, tokenizer, train, on_policy, scenario)
    with pytest.raises(ValueError, match="clipping must bind"):
        online_trl.trl_scenario(policy, tokenizer, train, ref["batch"], scenario, settings={"max_grad_norm": 1e6})
