"""Pieces of the course's final experiment (notebook ``nb06_real_model_grpo``).

The notebook walks a learner through one chain: the verifier ``integer-answer-v1`` scores fixed candidate
responses -> group-relative advantages -> a few LoRA GRPO updates of a causal LM -> did the policy move
in the direction of the advantages? -> a JSON evidence record (schema ``post-training-mechanism-gpu/v2``).
The notebook shows and explains each step; the code of each step lives in ``tools.experiment`` so that it can
be unit tested (``tests/test_experiment*.py``) and so that ``dry_run``, ``tiny_cpu`` and ``real_gpu`` share it.
This module is its public face: the notebook (``from tools import grpo_experiment as gx``), the command-line
entry points and the tests use these names.

- ``tools.experiment.candidates``: the fixed candidate groups, the verifier's scores, the advantages, the guard;
- ``tools.experiment.model``: precision (per card, its memory estimate), checkpoint paths, the LoRA policy,
  sequence log-probs;
- ``tools.experiment.update``: the clipped objective and the update steps;
- ``tools.experiment.measures``: no-update noise, policy separation, peak memory, token workload hashes;
- ``tools.experiment.record``: the record, the decision rule, the failure record;
- ``tools.experiment.evidence``: record paths, schema validation, writing, what the notebook shows.

Everything that depends on the run mode is an argument: the same update code runs in fp32 on the CPU
with the tiny local checkpoint and in bf16/fp16 autocast on a CUDA card with Qwen2.5-0.5B-Instruct.
Sequence log-probabilities only ever come from ``tools.post_training_runtime.response_sequence_logps``.

One home per function: the verifier is notebook 4's graded ``verify_integer_response`` and the advantages
are notebook 1's graded ``compute_group_advantages`` (both imported from ``tools.lessons``), so the
experiment scores and normalises exactly as the lessons grade.
"""

from __future__ import annotations

from tools.experiment.candidates import (
    GROUP_FIXTURES,
    ZERO_VARIANCE_PROBES,
    CandidateSet,
    build_candidate_set,
    compute_group_advantages,
    fixtures_hash_items,
    group_advantages,
    reward_std_mean,
    verifier_summary,
    verify_integer_response,
    zero_variance_guard,
)
from tools.experiment.evidence import (
    CANDIDATE_HEADLINE_KEYS,
    REFERENCE_RUN_LABELS,
    RESULTS_KIND,
    candidate_headlines,
    headline,
    load_schema,
    markdown_table,
    output_relative_path,
    validate_record,
    write_record,
)
from tools.experiment.measures import (
    NOISE_MARGIN_FACTOR,
    batch_shape_entry,
    logprob_noise,
    peak_memory,
    policy_separation,
    reset_peak_memory,
    restart_peak_memory,
    token_ids_hash,
    tokenizer_hash,
)
from tools.experiment.model import (
    ENV_FORCE_DTYPE,
    Precision,
    attach_lora,
    bf16_natively_supported,
    checkpoint_weights_kind,
    display_model_id,
    forced_dtype,
    full_precision_sequence_logps,
    load_lora_policy,
    memory_estimate,
    model_id_override,
    resolve_model_path,
    select_precision,
    sequence_logps,
)
from tools.experiment.record import (
    COURSE_RULE,
    EVIDENCE_LEVELS,
    LOGPROB_FUNCTION,
    MEASURED_FIELDS,
    MODEL_DECISIONS,
    RANDOM_INIT_DECISIONS,
    REFERENCE_RULE,
    SCHEMA_VERSION,
    SEMANTIC_ID,
    add_update_measurements,
    candidate_entry,
    decide,
    decision_rules,
    finalize_measured,
    highest_separation,
    mark_failure,
    new_record,
    utc_now,
)
from tools.experiment.update import (
    MAX_SCALER_SKIPS,
    StepResult,
    clipped_surrogate,
    grpo_update_step,
    run_update_steps,
)
from tools.experiment_settings import (
    ENV_MODEL_ID,
    REAL_GPU_MODEL_ID,
    RUN_MODES,
    SCHEMA_PATH,
    VERIFIER_ID,
    WORKLOAD_ID,
    check_run_label,
    check_run_mode,
)

__all__ = [
    "CANDIDATE_HEADLINE_KEYS",
    "COURSE_RULE",
    "CandidateSet",
    "ENV_FORCE_DTYPE",
    "ENV_MODEL_ID",
    "REAL_GPU_MODEL_ID",
    "EVIDENCE_LEVELS",
    "GROUP_FIXTURES",
    "LOGPROB_FUNCTION",
    "MAX_SCALER_SKIPS",
    "MEASURED_FIELDS",
    "MODEL_DECISIONS",
    "NOISE_MARGIN_FACTOR",
    "Precision",
    "RANDOM_INIT_DECISIONS",
    "REFERENCE_RULE",
    "REFERENCE_RUN_LABELS",
    "RESULTS_KIND",
    "RUN_MODES",
    "SCHEMA_PATH",
    "SCHEMA_VERSION",
    "SEMANTIC_ID",
    "StepResult",
    "VERIFIER_ID",
    "WORKLOAD_ID",
    "ZERO_VARIANCE_PROBES",
    "add_update_measurements",
    "attach_lora",
    "batch_shape_entry",
    "bf16_natively_supported",
    "build_candidate_set",
    "candidate_entry",
    "candidate_headlines",
    "check_run_label",
    "check_run_mode",
    "checkpoint_weights_kind",
    "clipped_surrogate",
    "compute_group_advantages",
    "decide",
    "decision_rules",
    "display_model_id",
    "finalize_measured",
    "fixtures_hash_items",
    "forced_dtype",
    "full_precision_sequence_logps",
    "group_advantages",
    "grpo_update_step",
    "headline",
    "highest_separation",
    "load_lora_policy",
    "memory_estimate",
    "load_schema",
    "logprob_noise",
    "mark_failure",
    "markdown_table",
    "model_id_override",
    "new_record",
    "output_relative_path",
    "peak_memory",
    "policy_separation",
    "reset_peak_memory",
    "resolve_model_path",
    "restart_peak_memory",
    "reward_std_mean",
    "run_update_steps",
    "select_precision",
    "sequence_logps",
    "token_ids_hash",
    "tokenizer_hash",
    "utc_now",
    "validate_record",
    "verifier_summary",
    "verify_integer_response",
    "write_record",
    "zero_variance_guard",
]
