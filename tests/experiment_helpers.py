"""What the final experiment's tests share (tests/test_experiment*.py, tests/test_device_numerics.py): the workload id,
the candidate sets, a prepared candidate set, nb06's LoRA policy and a record that needs no model."""

from __future__ import annotations

import torch

from tools import grpo_experiment as gx

WORKLOAD_ID = "pt-grpo-real-model-update"
SETS = (("minimal_pair", 2), ("expanded_group", 4))


def prepared(name, group_size):
    cs = gx.build_candidate_set(name, group_size)
    rewards = torch.tensor(cs.rewards, dtype=torch.float32)
    group_ids = torch.tensor(cs.group_ids, dtype=torch.long)
    advantages = gx.group_advantages(rewards, group_ids)
    return cs, rewards, group_ids, advantages


def nb06_policy(path, precision, seed=42):
    """nb06's LoRA policy (r = 8 on q_proj / v_proj, seed 42 as the notebook) from a local checkpoint folder."""
    return gx.load_lora_policy(
        path,
        precision,
        revision=None,
        local_files_only=True,
        lora_rank=8,
        lora_alpha=16,
        lora_dropout=0.0,
        target_modules=("q_proj", "v_proj"),
        seed=seed,
    )


def dry_record(run_mode="dry_run", weights=None):
    record = gx.new_record(
        run_mode=run_mode,
        run_label="unit",
        environment_profile="PT-RL-CUDA",
        framework={"python": "3", "torch": torch.__version__, "transformers": None, "peft": None, "jsonschema": None},
        hardware={"cuda_available": False},
        model={
            "id": "Qwen/Qwen2.5-0.5B-Instruct",
            "requested_revision": "main",
            "resolved_commit": None,
            "resolution_source": None,
            "weights": weights,
            "local_files_only": False,
        },
        dataset={"source": "embedded_fixed_candidate_groups_with_verifier", "groups": 2, "sample_hash": "0" * 64},
        workload={
            "id": WORKLOAD_ID,
            "version": "v3",
            "candidate_sets": [{"name": n, "group_size": g} for n, g in SETS],
            "comparison_scope": "candidate_coverage_not_group_size_causality",
            "max_length": 96,
            "clip_range": 0.2,
            "lora_rank": 8,
            "lora_alpha": 16,
            "lora_dropout": 0.0,
            "lora_target_modules": ["q_proj", "v_proj"],
            "update_steps": 4,
            "learning_rate": 2e-4,
            "learning_rate_source": "seed",
            "seed": 42,
            "advantage_eps": 1e-6,
        },
        verifier={
            "id": "integer-answer-v1",
            "correctness_weight": 1.0,
            "format_weight": 0.1,
            "failure_policy": "unjudgeable_receives_zero",
        },
    )
    for name, size in SETS:
        cs, rewards, group_ids, advantages = prepared(name, size)
        record["candidates"].append(
            gx.candidate_entry(cs, rewards, group_ids, advantages, gx.zero_variance_guard(group_ids))
        )
    record["timing"]["total_seconds"] = 0.1
    return record


def fake_measurements(record, separations=(0.3, 0.2), margin=0.01):
    """Fill the update half by hand (for schema / decision tests that need no model)."""
    for entry, sep in zip(record["candidates"], separations):
        n = len(entry["rewards"])
        entry.update(
            {
                "trainable_parameters": 100,
                "losses": [0.0, -0.1],
                "gradient_norms": [0.5, 0.4],
                "clip_fractions": [0.0, 0.5],
                "mean_clip_fraction": 0.25,
                "logprob_shifts": [0.0] * n,
                "policy_separation": sep,
                "train_eval_logprob_gap": margin / 4,
                "eval_repeat_logprob_gap": 0.0,
                "precision_logprob_gap": 0.0,
                "noise_margin": margin,
                "scaler_skipped_steps": 0,
                "update_ms": [1.0, 2.0],
                "median_update_ms": 1.5,
                "p95_update_ms": 1.95,
                "peak_memory_metric": "process_peak_rss",
                "peak_allocated_bytes": None,
                "peak_rss_bytes": 123,
                "allocated_bytes_at_start": None,
            }
        )
    record["model"].update({"resolved_commit": "abc", "resolution_source": "local"})
    record["runtime"]["dtype_choice"] = "auto"
    record["workload"].update(
        {
            "batch_shapes": [
                {
                    "candidate_set": c["candidate_set"],
                    "input_ids_shape": [len(c["rewards"]), 30],
                    "response_tokens": [2] * len(c["rewards"]),
                    "response_tokens_total": 2 * len(c["rewards"]),
                    "prompt_tokens": [20] * len(c["rewards"]),
                    "attended_tokens_total": 22 * len(c["rewards"]),
                }
                for c in record["candidates"]
            ],
            "tokenizer_hash": "a" * 64,
            "token_ids_hash": "b" * 64,
        }
    )
    return record
