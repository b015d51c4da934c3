"""The evidence record of the final experiment (schema ``post-training-mechanism-gpu/v2``): its assembly from the
candidate sets and their updates, the decision rule and evidence level, and the failure record."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tools.experiment.candidates import CandidateSet, reward_std_mean, verifier_summary
from tools.experiment.measures import policy_separation
from tools.experiment.update import StepResult
from tools.experiment_settings import check_run_label, check_run_mode

SCHEMA_VERSION = "post-training-mechanism-gpu/v2"
SEMANTIC_ID = "PT-GRPO-LOSS"
LOGPROB_FUNCTION = "tools.post_training_runtime.response_sequence_logps"

EVIDENCE_LEVELS = {
    "dry_run": "dry_run",
    "tiny_cpu": "tiny_cpu_mechanism_check",
    "real_gpu": "real_model_grpo_rlvr_mechanism_benchmark",
    "real_gpu_random_init": "random_init_gpu_resource_benchmark",
}


MEASURED_FIELDS = (
    "trainable_parameters",
    "losses",
    "gradient_norms",
    "clip_fractions",
    "mean_clip_fraction",
    "logprob_shifts",
    "policy_separation",
    "train_eval_logprob_gap",
    "eval_repeat_logprob_gap",
    "precision_logprob_gap",
    "noise_margin",
    "scaler_skipped_steps",
    "update_ms",
    "median_update_ms",
    "p95_update_ms",
    "peak_memory_metric",
    "peak_allocated_bytes",
    "peak_rss_bytes",
    "allocated_bytes_at_start",
)


def candidate_entry(
    candidate_set: CandidateSet,
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    advantages: torch.Tensor,
    guard_passed: bool,
) -> dict[str, Any]:
    """The verifier/advantage half of a candidate set's record; update fields start as ``None``."""
    entry: dict[str, Any] = {
        "candidate_set": candidate_set.name,
        "group_size": candidate_set.group_size,
        "verifier_records": [dict(r) for r in candidate_set.verifier_records],
        **verifier_summary(candidate_set.verifier_records),
        "rewards": [float(v) for v in rewards.detach().cpu()],
        "advantages": [float(v) for v in advantages.detach().cpu()],
        "reward_std_mean": reward_std_mean(rewards.detach().cpu(), group_ids.detach().cpu()),
        "nonzero_advantages": int(advantages.ne(0).sum()),
        "zero_variance_guard_passed": bool(guard_passed),
    }
    entry.update({name: None for name in MEASURED_FIELDS})
    return entry


def add_update_measurements(
    entry: dict[str, Any],
    steps: Sequence[StepResult],
    old_logps: torch.Tensor,
    final_logps: torch.Tensor,
    advantages: torch.Tensor,
    trainable_parameters: int,
    memory: Mapping[str, Any],
    noise: Mapping[str, float] | None = None,
    scaler_skipped_steps: int = 0,
) -> dict[str, Any]:
    """Fill the update half of a candidate set's record from the steps and the before/after log-probs.

    ``noise`` is :func:`logprob_noise`'s result (required for a decision); ``scaler_skipped_steps``
    counts the GradScaler overflow skips that :func:`run_update_steps` retried.
    """
    from tools.training_mechanism_runtime import median_and_p95

    if not steps:
        raise ValueError("没有任何更新步骤，无法记录更新证据")
    update_ms = [s.update_ms for s in steps]
    median_ms, p95_ms = median_and_p95(update_ms)
    clip_fractions = [s.clip_fraction for s in steps]
    entry.update(
        {
            "trainable_parameters": int(trainable_parameters),
            "losses": [s.loss for s in steps],
            "gradient_norms": [s.gradient_norm for s in steps],
            "clip_fractions": clip_fractions,
            "mean_clip_fraction": sum(clip_fractions) / len(clip_fractions),
            "logprob_shifts": [float(v) for v in (final_logps.float() - old_logps.float()).cpu()],
            "policy_separation": policy_separation(old_logps.cpu(), final_logps.cpu(), advantages.cpu()),
            "train_eval_logprob_gap": None if noise is None else float(noise["train_eval_logprob_gap"]),
            "eval_repeat_logprob_gap": None if noise is None else float(noise["eval_repeat_logprob_gap"]),
            "precision_logprob_gap": None if noise is None else float(noise.get("precision_logprob_gap", 0.0)),
            "noise_margin": None if noise is None else float(noise["noise_margin"]),
            "scaler_skipped_steps": int(scaler_skipped_steps),
            "update_ms": update_ms,
            "median_update_ms": float(median_ms),
            "p95_update_ms": float(p95_ms),
            **dict(memory),
        }
    )
    return entry


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_record(
    *,
    run_mode: str,
    run_label: str,
    environment_profile: str,
    framework: Mapping[str, Any],
    hardware: Mapping[str, Any],
    model: Mapping[str, Any],
    dataset: Mapping[str, Any],
    workload: Mapping[str, Any],
    verifier: Mapping[str, Any],
) -> dict[str, Any]:
    """A record that claims nothing yet: no candidates, no failure, level ``dry_run``, ``not_measured``."""
    return {
        "schema_version": SCHEMA_VERSION,
        "semantic_id": SEMANTIC_ID,
        "environment_profile": environment_profile,
        "run_mode": check_run_mode(run_mode),
        "run_label": check_run_label(run_label),
        "created_utc": utc_now(),
        "framework": dict(framework),
        "hardware": dict(hardware),
        "runtime": {
            "device": None,
            "dtype": None,
            "dtype_choice": None,
            "autocast": False,
            "grad_scaler": False,
            "logprob_function": LOGPROB_FUNCTION,
            "logprob_normalize": True,
        },
        "model": dict(model),
        "dataset": dict(dataset),
        "workload": {"batch_shapes": None, "tokenizer_hash": None, "token_ids_hash": None, **dict(workload)},
        "verifier": dict(verifier),
        "baseline": {"name": "sampling_policy_before_update"},
        "candidates": [],
        "failure": None,
        "evidence_level": "dry_run",
        "decision": "not_measured",
        "decision_rules": None,
        "highest_separation_candidate": None,
        "timing": {"total_seconds": None},
    }


COURSE_RULE = (
    "every candidate set: policy_separation > noise_margin (4 x the largest no-update log-prob gap), "
    "zero_variance_guard_passed, reward_std_mean > 0"
)
REFERENCE_RULE = (
    "the reference document's rule: every candidate set: policy_separation > 0, "
    "zero_variance_guard_passed, reward_std_mean > 0"
)
# Decisions: a pretrained (or other non-random) model, and tiny_cpu's mechanism check, use the reference
# vocabulary; a random-init GPU run only says whether its code path behaved, never that a mechanism holds.
MODEL_DECISIONS = ("accept_mechanism", "tune")
RANDOM_INIT_DECISIONS = ("random_init_path_ok", "random_init_path_tune")


def decision_rules(candidates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Both rules evaluated on the measured candidate sets: the course's (noise margin) and the reference's."""
    if not candidates:
        raise ValueError("没有候选组结果，无法做决策")
    for c in candidates:
        if c.get("policy_separation") is None or c.get("noise_margin") is None:
            raise ValueError(f"候选组 {c.get('candidate_set')!r} 缺少 policy_separation 或 noise_margin，无法做决策")
    common = all(c["zero_variance_guard_passed"] and c["reward_std_mean"] > 0 for c in candidates)
    course = common and all(c["policy_separation"] > c["noise_margin"] for c in candidates)
    reference = common and all(c["policy_separation"] > 0 for c in candidates)
    return {
        "course_rule": {"rule": COURSE_RULE, "passed": bool(course)},
        "reference_rule": {"rule": REFERENCE_RULE, "passed": bool(reference)},
    }


def decide(candidates: Sequence[Mapping[str, Any]], random_init: bool = False) -> str:
    """The course's rule (:data:`COURSE_RULE`): ``accept_mechanism`` / ``tune``; for a random-init GPU run
    ``random_init_path_ok`` / ``random_init_path_tune`` (random weights prove no mechanism)."""
    passed = decision_rules(candidates)["course_rule"]["passed"]
    vocabulary = RANDOM_INIT_DECISIONS if random_init else MODEL_DECISIONS
    return vocabulary[0] if passed else vocabulary[1]


def highest_separation(candidates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Diagnostic only: which candidate set separated most. Never a configuration choice."""
    best = max(candidates, key=lambda c: c["policy_separation"])
    return {
        "candidate_set": best["candidate_set"],
        "group_size": best["group_size"],
        "interpretation": "diagnostic_only_not_configuration_selection",
    }


def finalize_measured(record: dict[str, Any]) -> dict[str, Any]:
    """Set evidence level, decision and the diagnostic for a run whose updates all completed."""
    mode = record["run_mode"]
    if mode == "dry_run":
        record.update(
            {
                "evidence_level": "dry_run",
                "decision": "not_measured",
                "decision_rules": None,
                "highest_separation_candidate": None,
            }
        )
        return record
    random_init_gpu = False
    if mode == "tiny_cpu":
        level = EVIDENCE_LEVELS["tiny_cpu"]
    elif record["model"].get("weights") == "random_init":
        level, random_init_gpu = EVIDENCE_LEVELS["real_gpu_random_init"], True
    else:
        level = EVIDENCE_LEVELS["real_gpu"]
    record.update(
        {
            "evidence_level": level,
            "decision": decide(record["candidates"], random_init=random_init_gpu),
            "decision_rules": decision_rules(record["candidates"]),
            "highest_separation_candidate": highest_separation(record["candidates"]),
        }
    )
    return record


def mark_failure(record: dict[str, Any], stage: str, error: BaseException) -> dict[str, Any]:
    """Turn ``record`` into a failure record: the stage, the error, ``reject_until_fixed``.

    Candidate sets that were not fully measured are reset to their unmeasured form so that the record
    never mixes half-filled numbers with a claim.
    """
    from tools.notebook_runtime import failure_record

    for entry in record["candidates"]:
        if entry.get("losses") is None or entry.get("policy_separation") is None:
            entry.update({name: None for name in MEASURED_FIELDS})
    record.update(
        {
            "failure": failure_record(stage, error),
            "evidence_level": f"failed_{record['run_mode']}_attempt",
            "decision": "reject_until_fixed",
            "decision_rules": None,
            "highest_separation_candidate": None,
        }
    )
    return record
