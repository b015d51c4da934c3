"""tools/trl_conformance.py: the check that lesson 3B runs against TRL 1.16's real GRPOTrainer code paths.

It passes for the course's own functions (the #@save modules of lessons 1, 3A and 3B), it is not a rubber stamp
(wrong losses, a wrong option and wrong advantages make it fail, each in its own entry), it reports ``skipped``
without TRL and ``api_changed`` naming the attribute when TRL's private API moves. In process, no notebook kernel.
"""

from __future__ import annotations

import sys

import jsonschema
import pytest
import torch

from tools import trl_conformance
from tools.lessons import nb01_group_advantages as nb01
from tools.lessons import nb03a_cispo_trace_lab as nb03a
from tools.lessons import nb03b_loss_family_trl as nb03b

LOSS_CASES = {"grpo", "grpo_clip_higher", "bnpo", "dr_grpo", "dapo", "cispo", "gspo_sequence", "dapo_two_micro_batches"}
EXTENDED_CASES = {
    "sapo",
    "luspo",
    "vespo",
    "grpo_delta",
    "grpo_bias_correction_kl",
    "dapo_bias_correction_kl",
    "grpo_accumulation_2",
    "bnpo_accumulation_2",
    "dr_grpo_accumulation_2",
}
ADVANTAGE_CASES = {"group", "batch", "none", "normalize_then_sum"}


def course_functions(**overrides):
    functions = dict(
        grpo_family_loss=nb03b.grpo_family_loss,
        grpo_policy_loss=nb03a.grpo_policy_loss,
        cispo_policy_loss=nb03a.cispo_policy_loss,
        importance_ratio=nb03b.importance_ratio,
        group_relative_advantages=nb01.group_relative_advantages,
        extended_loss=nb03b.extended_loss,
        advantages=nb03b.trl_layout_advantages,
    )
    functions.update(overrides)
    return functions


@pytest.fixture(scope="module")
def passed_result():
    pytest.importorskip("trl")
    return trl_conformance.check_trl_conformance(**course_functions())


def test_course_functions_pass_every_case(passed_result):
    result = passed_result
    trl_conformance.validate_result(result)
    assert result["status"] == "passed", result.get("failed")
    assert result["trl_version"] == "1.16.0" and result["written_for"] == "1.16.0"
    assert set(result["loss"]) == LOSS_CASES and set(result["extended"]) == EXTENDED_CASES
    assert set(result["advantages"]) == ADVANTAGE_CASES | {"minimind_population_std_vs_trl"}
    for name, entry in {**result["loss"], **result["extended"]}.items():
        assert entry["passed"] and entry["abs_error"] <= 1e-6, (name, entry)
        if name != "dapo_two_micro_batches":
            assert entry["grad_max_abs_error"] <= 1e-6, (name, entry)
    for name, entry in result["loss"].items():
        if name != "dapo_two_micro_batches":
            assert entry["clipped_tokens"] > 0, (name, entry)  # clipping really happened on these inputs
    for name in ADVANTAGE_CASES:
        assert result["advantages"][name]["passed"] and result["advantages"][name]["max_abs_error"] <= 1e-5
    assert all(result["rewards"]["checks"].values()), result["rewards"]


def test_the_trl_facts_the_lessons_teach_are_measured(passed_result):
    result = passed_result
    defaults = result["trl_defaults"]
    assert defaults["beta"] == 0.0 and defaults["use_bias_correction_kl"] is True and defaults["epsilon_high"] is None
    assert defaults["loss_type"] == "dapo" and defaults["scale_rewards"] == "group"
    cispo = result["loss"]["cispo"]
    assert cispo["absolute_cap_confirmed"] is True and cispo["one_plus_epsilon_high_abs_error"] > 1e-6
    assert cispo["capped_fraction_at_trl_default"] > 0.9  # TRL's default cap (= epsilon) caps nearly everything
    assert result["bias_correction_kl_effect"]["changes_loss"]
    on_policy = result["extended"]["grpo_bias_correction_kl"]["on_policy"]
    assert on_policy["loss_change_from_correction"] <= 1e-12 < 1e-4 < on_policy["grad_change_from_correction"]
    assert result["extended"]["grpo_delta"]["delta_changes_loss"]
    for name in ("grpo_accumulation_2", "bnpo_accumulation_2", "dr_grpo_accumulation_2"):
        assert result["extended"][name]["ratio_to_single_step"] == pytest.approx(0.5)
    mm = result["advantages"]["minimind_population_std_vs_trl"]
    assert mm["ratio_minimind_over_trl"] == pytest.approx(mm["sqrt_g_over_g_minus_1"], rel=1e-3)
    dapo_reads = set(result["loss"]["dapo"]["trl_reads"])
    assert {
        "model.training",
        "args.delta",
        "args.steps_per_generation",
        "accelerator.num_processes",
        "inputs['num_items_in_batch']",
    } <= dapo_reads
    assert "inputs['num_items_in_batch']" not in result["loss"]["grpo"]["trl_reads"]
    assert {"args.vespo_k_pos", "args.vespo_lambda_neg"} <= set(result["extended"]["vespo"]["trl_reads"])
    assert {"args.sapo_temperature_pos", "args.sapo_temperature_neg"} <= set(result["extended"]["sapo"]["trl_reads"])


def _token_mean_family(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", **kwargs):
    """A wrong reduction: grpo reduced as a token mean (bnpo); every other loss type left alone."""
    return nb03b.grpo_family_loss(
        policy_logps,
        old_logps,
        advantages,
        completion_mask,
        loss_type="bnpo" if loss_type == "grpo" else loss_type,
        **kwargs,
    )


def _no_delta(*args, delta=None, **kwargs):
    """A wrong option: delta silently ignored."""
    return nb03b.extended_loss(*args, **kwargs)


def _population_std_advantages(
    rewards_per_func,
    reward_weights,
    num_generations,
    scale_rewards="group",
    multi_objective_aggregation="sum_then_normalize",
):
    """Wrong advantages for group scaling: MiniMind's population std instead of TRL's Bessel-corrected one."""
    if scale_rewards != "group" or multi_objective_aggregation != "sum_then_normalize":
        return nb03b.trl_layout_advantages(
            rewards_per_func, reward_weights, num_generations, scale_rewards, multi_objective_aggregation
        )
    rewards = (rewards_per_func * torch.as_tensor(reward_weights)).nansum(dim=1)
    return nb01.group_relative_advantages(rewards, num_generations)


def test_wrong_functions_fail_in_their_own_entries():
    """Not a rubber stamp: three wrong functions in one run, each caught where it belongs and nowhere else."""
    pytest.importorskip("trl")
    result = trl_conformance.check_trl_conformance(
        **course_functions(
            grpo_family_loss=_token_mean_family, extended_loss=_no_delta, advantages=_population_std_advantages
        )
    )
    assert result["status"] == "failed"
    trl_conformance.validate_result(result)
    failed = set(result["failed"])
    assert {
        "loss.grpo",
        "loss.grpo_clip_higher",
        "loss.gspo_sequence",
        "extended.grpo_delta",
        "advantages.group",
    } <= failed
    assert not failed & {
        "loss.bnpo",
        "loss.dapo",
        "loss.cispo",
        "extended.sapo",
        "extended.vespo",
        "advantages.batch",
        "advantages.none",
        "advantages.normalize_then_sum",
    }, failed


def test_skipped_without_trl(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` now raises ImportError
    result = trl_conformance.check_trl_conformance(**course_functions())
    assert result["status"] == "skipped" and "PT-CPU" in result["reason"] and result["written_for"] == "1.16.0"
    trl_conformance.validate_result(result)


def test_api_changed_names_the_attribute(monkeypatch):
    trl = pytest.importorskip("trl")
    original = trl.GRPOTrainer._compute_loss

    def renamed_attribute(self, model, inputs):
        _ = self.clip_epsilon_low  # an attribute this check does not provide
        return original(self, model, inputs)

    monkeypatch.setattr(trl.GRPOTrainer, "_compute_loss", renamed_attribute)
    result = trl_conformance.check_trl_conformance(**course_functions())
    assert result["status"] == "api_changed" and result["attribute"] == "trainer.clip_epsilon_low"
    assert result["trl_version"] == trl.__version__ and result["written_for"] == "1.16.0"
    trl_conformance.validate_result(result)

    monkeypatch.delattr(trl.GRPOTrainer, "_compute_loss")
    result = trl_conformance.check_trl_conformance(**course_functions())
    assert result["status"] == "api_changed" and result["attribute"] == "GRPOTrainer._compute_loss"


def test_api_changed_when_the_advantage_code_moved(monkeypatch):
    trl = pytest.importorskip("trl")

    def rewritten(self, inputs):  # TRL's advantage block is no longer there
        return inputs

    monkeypatch.setattr(trl.GRPOTrainer, "_generate_and_score_completions", rewritten)
    result = trl_conformance.check_trl_conformance(**course_functions())
    assert result["status"] == "api_changed"
    assert result["attribute"] == "GRPOTrainer._generate_and_score_completions"
    assert trl_conformance.ADVANTAGE_BLOCK_START in result["detail"]


def test_lesson_functions_mask_before_exp():
    """C3 in the saved lesson code the check relies on: 800 on a padded position changes neither loss nor gradient."""
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 5, generator=gen, dtype=torch.float64) - 0.1
    policy = old + 0.5 * torch.randn(4, 5, generator=gen, dtype=torch.float64)
    ref = old + 0.1 * torch.randn(4, 5, generator=gen, dtype=torch.float64)
    adv = torch.randn(4, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    extreme = torch.where(mask.bool(), policy, old + 800.0)
    for loss_type, options in (
        ("sapo", {}),
        ("vespo", {}),
        ("luspo", {"importance_sampling_level": "sequence"}),
        ("grpo", {"delta": 1.5, "use_bias_correction_kl": True}),
    ):
        grads = []
        for p in (policy, extreme):
            leaf = p.clone().requires_grad_(True)
            loss = nb03b.extended_loss(
                leaf,
                old,
                adv,
                mask,
                loss_type,
                beta=0.04,
                ref_logps=ref,
                max_completion_length=5,
                num_items_in_batch=int(mask.sum()),
                **options,
            )
            (grad,) = torch.autograd.grad(loss, leaf)
            grads.append((loss.detach(), grad))
        assert torch.isfinite(grads[1][1]).all(), loss_type
        torch.testing.assert_close(grads[1][0], grads[0][0], rtol=0, atol=1e-12)
        torch.testing.assert_close(grads[1][1], grads[0][1], rtol=0, atol=1e-12)


def test_schema_rejects_a_broken_result():
    """The schema is not a rubber stamp either: a failed result without its list of failures, an unknown status."""
    with pytest.raises(jsonschema.ValidationError):
        trl_conformance.validate_result({"status": "failed", "written_for": "1.16.0"})
    with pytest.raises(jsonschema.ValidationError):
        trl_conformance.validate_result({"status": "ok", "written_for": "1.16.0"})
    with pytest.raises(jsonschema.ValidationError):
        trl_conformance.validate_result({"status": "skipped", "written_for": "1.16.0"})  # no reason
