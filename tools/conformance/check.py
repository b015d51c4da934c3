"""The conformance check lesson 3B runs: :func:`check_trl_conformance` (every check, one JSON-ready result) and
:func:`validate_result` (its schema, ``tools/schemas/trl-conformance-v1.json``)."""

from __future__ import annotations

import json
import os

from tools.conformance import TRL_VERSION_WRITTEN_FOR
from tools.conformance.advantages import advantage_checks
from tools.conformance.cases import MAX_LEN
from tools.conformance.loss_calls import case_batch, trl_loss_and_grad
from tools.conformance.losses import extended_checks, family_checks
from tools.conformance.rewards import reward_check
from tools.conformance.stand_ins import TrlApiChanged, trl_config

_TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA_PATH = os.path.join(_TOOLS, "schemas", "trl-conformance-v1.json")


def check_trl_conformance(
    *,
    grpo_family_loss,
    grpo_policy_loss,
    cispo_policy_loss,
    importance_ratio,
    group_relative_advantages,
    extended_loss=None,
    advantages=None,
    atol=1e-6,
):
    """Compare the learner's losses (and the lesson's provided ones) with TRL's private code paths.

    ``grpo_family_loss(policy_logps, old_logps, advantages, completion_mask, loss_type, epsilon_low, epsilon_high,
    importance_sampling_level, beta, ref_logps, max_completion_length, num_items_in_batch)`` is the lesson's
    composition of the learner's per-token loss and reduction; ``extended_loss`` takes the same arguments plus
    ``delta``, ``use_bias_correction_kl`` and ``gradient_accumulation_steps``; ``advantages(rewards_per_func,
    reward_weights, num_generations, scale_rewards, multi_objective_aggregation)``. Returns a JSON-ready dict.
    """
    fns = {
        "grpo_family_loss": grpo_family_loss,
        "grpo_policy_loss": grpo_policy_loss,
        "cispo_policy_loss": cispo_policy_loss,
        "importance_ratio": importance_ratio,
        "group_relative_advantages": group_relative_advantages,
        "extended_loss": extended_loss,
        "advantages": advantages,
    }
    try:
        import trl
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as error:
        return {
            "status": "skipped",
            "reason": f"没有可用的 TRL（{error}）。本节需要 PT-CPU 环境：pip install trl=={TRL_VERSION_WRITTEN_FOR}",
            "written_for": TRL_VERSION_WRITTEN_FOR,
        }
    trl_version = getattr(trl, "__version__", "unknown")
    try:  # GRPOTrainer's logging goes through accelerate, which needs its (single-process, CPU) state
        from accelerate import PartialState

        PartialState(cpu=True)
    except Exception as error:  # noqa: BLE001  (reported, not hidden)
        return {
            "status": "api_changed",
            "attribute": "accelerate.PartialState",
            "detail": str(error),
            "trl_version": trl_version,
            "written_for": TRL_VERSION_WRITTEN_FOR,
        }
    paths = ["GRPOTrainer._calculate_rewards", "GRPOTrainer._compute_loss"]
    if advantages is not None:
        paths.append("GRPOTrainer._generate_and_score_completions (advantage block, TRL's source)")
    result = {
        "status": "passed",
        "trl_version": trl_version,
        "written_for": TRL_VERSION_WRITTEN_FOR,
        "framework_paths": paths,
        "atol": atol,
    }
    if trl_version != TRL_VERSION_WRITTEN_FOR:
        result["version_note"] = (
            f"本核对为 trl=={TRL_VERSION_WRITTEN_FOR} 编写，当前是 {trl_version}：照常运行，结果仅供参考"
        )
    failures = []
    try:
        reads = set()
        reward_checks, reward_values = reward_check(GRPOTrainer, reads)
        result["rewards"] = {"checks": reward_checks, **reward_values}
        failures += [f"rewards.{k}" for k, ok in reward_checks.items() if not ok]

        default_config = trl_config(GRPOConfig)
        for field in ("use_bias_correction_kl", "beta", "epsilon_high", "loss_type", "scale_rewards"):
            if not hasattr(default_config, field):
                raise TrlApiChanged(f"GRPOConfig.{field}", "字段不存在")
        result["trl_defaults"] = {
            "beta": default_config.beta,
            "use_bias_correction_kl": default_config.use_bias_correction_kl,
            "loss_type": default_config.loss_type,
            "epsilon": default_config.epsilon,
            "epsilon_high": default_config.epsilon_high,
            "scale_rewards": default_config.scale_rewards,
        }
        result["use_bias_correction_kl_default"] = default_config.use_bias_correction_kl

        loss_results, loss_failures = family_checks(GRPOTrainer, GRPOConfig, fns, atol)
        result["loss"] = loss_results
        failures += loss_failures

        # the default use_bias_correction_kl=True multiplies the KL term by the ratio: not nb02 / nb03a's objective
        policy, old, ref, mask, adv = case_batch(group_relative_advantages, seed=24)
        config = trl_config(GRPOConfig, loss_type="grpo", epsilon=0.2, beta=0.04, max_completion_length=MAX_LEN)
        trl_default, _ = trl_loss_and_grad(
            GRPOTrainer, config, set(), policy, old, ref, mask, adv, num_items_in_batch=int(mask.sum())
        )
        course_plain = grpo_policy_loss(policy, old, adv, mask, epsilon=0.2, beta=0.04, ref_logps=ref).detach()
        result["bias_correction_kl_effect"] = {
            "trl_default_loss": round(float(trl_default), 8),
            "course_loss": round(float(course_plain), 8),
            "changes_loss": bool((trl_default - course_plain).abs() > 1e-6),
        }
        if extended_loss is not None:
            extended_results, extended_failures = extended_checks(GRPOTrainer, GRPOConfig, fns, atol)
            result["extended"] = extended_results
            failures += extended_failures
        if advantages is not None:
            advantage_results, advantage_failures = advantage_checks(GRPOTrainer, fns, atol)
            result["advantages"] = advantage_results
            failures += advantage_failures
    except TrlApiChanged as error:
        return {
            "status": "api_changed",
            "attribute": error.what,
            "detail": error.detail,
            "trl_version": trl_version,
            "written_for": TRL_VERSION_WRITTEN_FOR,
        }
    if failures:
        result["status"] = "failed"
        result["failed"] = failures
    return result


def validate_result(result):
    """Raise jsonschema.ValidationError when ``result`` breaks tools/schemas/trl-conformance-v1.json (or holds NaN)."""
    from tools.notebook_runtime import schema_validator

    schema_validator(SCHEMA_PATH).validate(result)
    json.dumps(result, allow_nan=False)  # NaN / inf cannot be carried by JSON
