"""The final experiment (notebook nb06_real_model_grpo, tools.grpo_experiment, tools.cli.experiment).

Unit tests of the update loop's pieces, the schema and the decision rule; then the notebook executed
headless: dry_run through the shared notebook_runs solution run, tiny_cpu and real_gpu-without-CUDA through the
CLI (slow). Evidence from the CLI runs goes to
unique RUN_LABELs that are removed afterwards; nothing is left in benchmarks/results/pt_grpo/.
"""

from __future__ import annotations

import copy
import json
import math
import uuid
from pathlib import Path

import jsonschema
import pytest
import torch

from tools import grpo_experiment as gx

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD_ID = "pt-grpo-real-model-update"
SETS = (("minimal_pair", 2), ("expanded_group", 4))


# ------------------------------------------------------------------------------------------ helpers
def prepared(name, group_size):
    cs = gx.build_candidate_set(name, group_size)
    rewards = torch.tensor(cs.rewards, dtype=torch.float32)
    group_ids = torch.tensor(cs.group_ids, dtype=torch.long)
    advantages = gx.group_advantages(rewards, group_ids)
    return cs, rewards, group_ids, advantages


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


# ------------------------------------------------------------------------------------------ run settings
def test_run_mode_and_label_contracts():
    for mode in ("dry_run", "tiny_cpu", "real_gpu"):
        assert gx.check_run_mode(mode) == mode
    for bad in ("gpu", "DRY_RUN", "", None):
        with pytest.raises(ValueError, match="RUN_MODE"):
            gx.check_run_mode(bad)
    for bad in ("", "a/b", "../x", "has space", "-lead", "x" * 65):
        with pytest.raises(ValueError, match="RUN_LABEL"):
            gx.check_run_label(bad)
    assert (
        gx.output_relative_path(WORKLOAD_ID, "r1").as_posix()
        == "benchmarks/results/local/pt_grpo/pt-grpo-real-model-update_r1.json"
    )
    assert (
        gx.output_relative_path(WORKLOAD_ID, "tiny_cpu_reference").as_posix()
        == "benchmarks/results/pt_grpo/pt-grpo-real-model-update_tiny_cpu_reference.json"
    )


def test_the_parameters_cell_is_the_only_headless_override():
    """papermill injects RUN_MODE / RUN_LABEL right after nb06's cell tagged ``parameters``; nothing else in the lesson
    reads a run mode from the environment, and a notebook without that cell is refused (papermill would inject at
    the top, where the notebook's own assignments would silently win)."""
    import nbformat

    import tools.chain.notebooks as chain

    nb = chain.build_notebook("nb06_real_model_grpo")
    tagged = [i for i, c in enumerate(nb.cells) if chain.PARAMETERS_TAG in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "RUN_MODE = " in nb.cells[tagged[0]].source
    assert "RUN_LABEL = " in nb.cells[tagged[0]].source
    assert not any(
        "GRPO_RUN_MODE" in c.source or "GRPO_RUN_LABEL" in c.source or "headless_overrides" in c.source
        for c in nb.cells
    )
    done = chain.parameterize(nb, {"RUN_MODE": "tiny_cpu", "RUN_LABEL": "x1"})
    injected = done.cells[tagged[0] + 1]
    assert injected.metadata["tags"] == ["injected-parameters"]
    assert 'RUN_MODE = "tiny_cpu"' in injected.source and 'RUN_LABEL = "x1"' in injected.source
    assert len(done.cells) == len(nb.cells) + 1 and "injected-parameters" not in str(nb.cells)  # nb is not changed
    namespace: dict = {}
    exec(nb.cells[tagged[0]].source + "\n" + injected.source, namespace)  # noqa: S102 - the two cells, in order
    assert (namespace["RUN_MODE"], namespace["RUN_LABEL"]) == ("tiny_cpu", "x1")
    untagged = copy.deepcopy(nb)
    untagged.cells[tagged[0]].metadata["tags"] = []
    with pytest.raises(ValueError, match="parameters"):
        chain.parameterize(untagged, {"RUN_MODE": "tiny_cpu"})
    nbformat.validate(done)
    assert gx.model_id_override("Qwen/Qwen2.5-0.5B-Instruct", environ={}) == "Qwen/Qwen2.5-0.5B-Instruct"
    assert gx.model_id_override("Qwen/Qwen2.5-0.5B-Instruct", environ={"GRPO_MODEL_ID": "/m"}) == "/m"


# ------------------------------------------------------------------------------------------ verifier
@pytest.mark.parametrize(
    "response, expected, status, parsed, correct, fmt",
    [
        ("4", 4, "ok", 4, 1.0, 1.0),
        ("  4\n", 4, "ok", 4, 1.0, 1.0),
        ("5", 4, "ok", 5, 0.0, 1.0),
        ("The answer is 4.", 4, "ok", 4, 1.0, 0.0),
        ("I do not know.", 4, "unjudgeable", None, 0.0, 0.0),
        ("-3", -3, "ok", -3, 1.0, 1.0),
        ("4 or maybe 5", 4, "ok", 5, 0.0, 0.0),  # the LAST integer counts
        ("4.5", 5, "ok", 5, 1.0, 0.0),
        ("", 0, "unjudgeable", None, 0.0, 0.0),
    ],
)
def test_verifier_integer_answer_v1(response, expected, status, parsed, correct, fmt):
    record = gx.verify_integer_response(response, expected)
    assert record == {
        "verifier_id": "integer-answer-v1",
        "status": status,
        "parsed_answer": parsed,
        "correctness": correct,
        "format_pass": fmt,
        "total_reward": 1.0 * correct + 0.1 * fmt,
    }
    weighted = gx.verify_integer_response(response, expected, correctness_weight=2.0, format_weight=0.5)
    assert weighted["total_reward"] == pytest.approx(2.0 * correct + 0.5 * fmt)


def test_verifier_input_contract():
    with pytest.raises(ValueError):
        gx.verify_integer_response(4, 4)
    with pytest.raises(ValueError):
        gx.verify_integer_response("4", True)
    with pytest.raises(ValueError):
        gx.verify_integer_response("4", 4.0)


def test_candidate_sets_take_the_first_g_responses_of_every_group():
    minimal = gx.build_candidate_set("minimal_pair", 2)
    assert minimal.responses == ["4", "5", "9", "6"]
    assert minimal.group_ids == [0, 0, 1, 1]
    assert minimal.prompts[0] == minimal.prompts[1] != minimal.prompts[2]
    assert minimal.rewards == pytest.approx([1.1, 0.1, 1.1, 0.1])
    expanded = gx.build_candidate_set("expanded_group", 4)
    assert expanded.responses == ["4", "5", "The answer is 4.", "I do not know.", "9", "6", "The answer is 9.", "10"]
    assert expanded.rewards == pytest.approx([1.1, 0.1, 1.0, 0.0, 1.1, 0.1, 1.0, 0.1])
    assert [r["group_index"] for r in expanded.verifier_records] == expanded.group_ids
    assert gx.verifier_summary(minimal.verifier_records) == {
        "correctness_pass_rate": 0.5,
        "format_pass_rate": 1.0,
        "unjudgeable_count": 0,
    }
    assert gx.verifier_summary(expanded.verifier_records) == {
        "correctness_pass_rate": 0.5,
        "format_pass_rate": 0.625,
        "unjudgeable_count": 1,
    }
    for bad in (1, 5, 2.0, True):
        with pytest.raises(ValueError):
            gx.build_candidate_set("x", bad)


def test_dataset_hash_items_change_with_the_fixtures():
    from tools.notebook_runtime import hash_ids

    base = hash_ids(gx.fixtures_hash_items())
    assert base == hash_ids(gx.fixtures_hash_items(copy.deepcopy(gx.GROUP_FIXTURES)))
    changed = [dict(f) for f in gx.GROUP_FIXTURES]
    changed[1] = {**changed[1], "responses": ("9", "6", "The answer is 9.", "11")}
    assert hash_ids(gx.fixtures_hash_items(changed)) != base


# ------------------------------------------------------------------------------------------ advantages
def _reference_advantages(rewards, group_ids, eps):
    r = rewards.double()
    out = torch.zeros_like(r)
    for g in set(group_ids.tolist()):
        m = group_ids == g
        mean = r[m].mean()
        std = torch.sqrt(((r[m] - mean) ** 2).mean())
        out[m] = (r[m] - mean) / max(float(std), eps)
    return out


@pytest.mark.parametrize("seed, n, dtype", [(0, 6, torch.float32), (1, 13, torch.float64), (2, 40, torch.float32)])
def test_group_advantages_against_float64_reference(seed, n, dtype):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(n, generator=gen).to(dtype)
    group_ids = torch.randint(-3, 3, (n,), generator=gen)  # unsorted, negative ids
    got = gx.group_advantages(rewards, group_ids, eps=1e-6)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), _reference_advantages(rewards, group_ids, 1e-6), rtol=1e-5, atol=1e-5)
    for g in group_ids.unique():
        assert abs(float(got[group_ids == g].sum())) < 1e-4


def test_seed_fixture_advantages_and_reward_std():
    _, rewards, group_ids, adv = prepared("minimal_pair", 2)
    assert adv.tolist() == pytest.approx([1.0, -1.0, 1.0, -1.0])
    assert gx.reward_std_mean(rewards, group_ids) == pytest.approx(0.5)
    _, rewards, group_ids, adv = prepared("expanded_group", 4)
    assert int(adv.ne(0).sum()) == 8
    assert gx.reward_std_mean(rewards, group_ids) == pytest.approx((0.2525**0.5 + 0.226875**0.5) / 2, abs=1e-6)
    with pytest.raises(ValueError):
        gx.group_advantages(torch.ones(3), torch.zeros(4, dtype=torch.long))


def test_zero_variance_guard_passes_only_for_exact_zero_advantages():
    ids = torch.tensor([0, 0, 1, 1, 1])
    assert gx.zero_variance_guard(ids) is True
    constant = gx.group_advantages(torch.full((5,), 3.7), ids)
    assert constant.eq(0).all()

    def no_floor(rewards, group_ids, eps=0.0):
        out = torch.zeros_like(rewards)
        for g in group_ids.unique():
            m = group_ids == g
            out[m] = (rewards[m] - rewards[m].mean()) / rewards[m].std(unbiased=False)
        return out

    def leaky(rewards, group_ids, eps=1e-6):
        return gx.group_advantages(rewards, group_ids, eps) + 1e-3

    def mean_then_floor(rewards, group_ids, eps=1e-6):  # the pre-nb01 rule: exact only for representable values
        out = torch.zeros_like(rewards)
        for g in group_ids.unique():
            m = group_ids == g
            out[m] = (rewards[m] - rewards[m].mean()) / rewards[m].std(unbiased=False).clamp_min(eps)
        return out

    assert gx.zero_variance_guard(ids, advantage_fn=no_floor) is False
    assert gx.zero_variance_guard(ids, advantage_fn=leaky) is False
    # all-ones rewards cannot catch the mean-then-floor rule; 1.1 and 0.1 in float32 do
    ten, eight = torch.zeros(10, dtype=torch.long), torch.zeros(8, dtype=torch.long)
    assert mean_then_floor(torch.ones(10), ten).eq(0).all()
    assert float(mean_then_floor(torch.full((10,), 1.1), ten).abs().max()) > 1e-3
    assert float(mean_then_floor(torch.full((8,), 0.1), eight).abs().max()) > 1e-3
    assert gx.zero_variance_guard(ten, advantage_fn=mean_then_floor) is False
    assert gx.zero_variance_guard(eight, advantage_fn=mean_then_floor) is False
    # the experiment's rule is nb01's graded one: exact zeros for both
    assert gx.group_advantages(torch.full((10,), 1.1), ten).eq(0).all()
    assert gx.group_advantages(torch.full((8,), 0.1), eight).eq(0).all()
    assert gx.zero_variance_guard(ten) is True and gx.zero_variance_guard(eight) is True
    assert gx.ZERO_VARIANCE_PROBES == (1.0, 1.1, 0.1)


def test_one_home_for_the_verifier_and_the_advantages():
    from tools.lessons.nb01_group_advantages import compute_group_advantages
    from tools.lessons.nb04_verifiable_rewards import verify_integer_response

    assert gx.verify_integer_response is verify_integer_response
    assert gx.compute_group_advantages is compute_group_advantages
    with pytest.raises(ValueError):  # nb01's input contract
        gx.group_advantages(torch.ones(3, dtype=torch.long), torch.zeros(3, dtype=torch.long))


# ------------------------------------------------------------------------------------------ objective pieces
def test_clipped_surrogate_values_clip_fraction_and_gradient():
    old = torch.zeros(4, dtype=torch.float64)
    new = torch.log(torch.tensor([1.5, 0.5, 1.1, 0.9], dtype=torch.float64)).requires_grad_(True)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    loss, clip_fraction = gx.clipped_surrogate(new, old, adv, 0.2)
    # min(r*A, clip(r)*A) = [1.2, 0.5, -1.1, -0.9] -> loss = -mean = 0.075; ratios 1.5 and 0.5 are clipped
    assert float(loss.detach()) == pytest.approx(0.075)
    assert float(clip_fraction) == pytest.approx(0.5)
    loss.backward()
    # d loss / d new_i = -A_i * r_i / 4 where the unclipped branch is chosen, 0 where the clipped one is
    assert new.grad.tolist() == pytest.approx([0.0, -0.125, 0.275, 0.225])
    with pytest.raises(ValueError):
        gx.clipped_surrogate(new.detach(), old[:3], adv, 0.2)
    with pytest.raises(ValueError):
        gx.clipped_surrogate(new.detach(), old, adv, 1.5)


def test_policy_separation_is_positive_minus_negative_shift():
    old = torch.tensor([-2.0, -2.0, -3.0, -1.0])
    new = torch.tensor([-1.0, -2.5, -2.0, -1.5])  # shifts [1.0, -0.5, 1.0, -0.5]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    assert gx.policy_separation(old, new, adv) == pytest.approx(1.5)
    assert gx.policy_separation(old, new, -adv) == pytest.approx(-1.5)
    with pytest.raises(ValueError):
        gx.policy_separation(old, new, torch.tensor([1.0, 0.0, 2.0, 0.0]))


def test_select_precision():
    cpu = gx.select_precision("tiny_cpu")
    assert (cpu.device.type, cpu.dtype, cpu.autocast, cpu.grad_scaler) == ("cpu", torch.float32, False, False)
    bf16 = gx.select_precision("real_gpu", cuda_available=True, bf16_supported=True)
    assert (bf16.device.type, bf16.dtype_name, bf16.autocast, bf16.grad_scaler) == ("cuda", "bfloat16", True, False)
    fp16 = gx.select_precision("real_gpu", cuda_available=True, bf16_supported=False)
    assert (fp16.dtype_name, fp16.grad_scaler) == ("float16", True)
    with pytest.raises(RuntimeError, match="CUDA"):
        gx.select_precision("real_gpu", cuda_available=False)
    with pytest.raises(ValueError):
        gx.select_precision("dry_run")
    forced = gx.select_precision("real_gpu", cuda_available=True, bf16_supported=True, force_dtype=torch.float16)
    assert (forced.dtype_name, forced.grad_scaler) == ("float16", True)
    assert gx.forced_dtype({}) is None and gx.forced_dtype({"GRPO_REAL_GPU_DTYPE": ""}) is None
    assert gx.forced_dtype({"GRPO_REAL_GPU_DTYPE": "float16"}) is torch.float16
    assert gx.forced_dtype({"GRPO_REAL_GPU_DTYPE": "bfloat16"}) is torch.bfloat16
    with pytest.raises(ValueError, match="GRPO_REAL_GPU_DTYPE"):
        gx.forced_dtype({"GRPO_REAL_GPU_DTYPE": "fp8"})


def test_bf16_emulation_does_not_count_as_bf16_support(monkeypatch):
    """A T4/V100 answers is_bf16_supported() True only through emulation: the fp16 branch must be taken."""
    calls = []

    def t4_like(including_emulation=True):
        calls.append(including_emulation)
        return including_emulation  # emulated bf16 only

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", t4_like)
    precision = gx.select_precision("real_gpu", cuda_available=True)
    assert calls == [False]
    assert (precision.dtype_name, precision.grad_scaler) == ("float16", True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # an A100
    assert gx.select_precision("real_gpu", cuda_available=True).dtype_name == "bfloat16"


def test_checkpoint_weights_kind_and_model_paths(tmp_path):
    assert gx.checkpoint_weights_kind("Qwen/Qwen2.5-0.5B-Instruct") == "pretrained_hub"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert gx.checkpoint_weights_kind(str(plain)) == "local_checkpoint"
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / "course_checkpoint.json").write_text(json.dumps({"weights": "random_init"}), encoding="utf-8")
    assert gx.checkpoint_weights_kind(str(marked)) == "random_init"
    assert gx.resolve_model_path("marked", tmp_path) == str(marked.resolve())
    assert gx.resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct", tmp_path) == "Qwen/Qwen2.5-0.5B-Instruct"
    assert gx.display_model_id(str(marked), tmp_path) == "marked"
    assert gx.display_model_id("Qwen/Qwen2.5-0.5B-Instruct", tmp_path) == "Qwen/Qwen2.5-0.5B-Instruct"


# ------------------------------------------------------------------------------------------ LoRA + update step (tiny model)
@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoTokenizer

    from tools.tiny_model import tiny_checkpoint_path

    path = str(tiny_checkpoint_path())
    return path, AutoTokenizer.from_pretrained(path, local_files_only=True)


def _policy(path, precision, seed=42):
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


def _batch(tokenizer, cs):
    from tools.post_training_runtime import build_response_batch

    return build_response_batch(tokenizer, cs.prompts, cs.responses, max_length=96)


def test_lora_starts_at_the_base_policy_and_trains_only_adapters(tiny):
    from transformers import AutoModelForCausalLM

    path, tokenizer = tiny
    precision = gx.select_precision("tiny_cpu")
    cs, *_ = prepared("expanded_group", 4)
    batch = _batch(tokenizer, cs)
    base = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    base_logps = gx.sequence_logps(base, batch, precision)
    policy, trainable = _policy(path, precision)
    names = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert names and all("lora_A" in n or "lora_B" in n for n in names)
    assert all(any(t in n for t in ("q_proj", "v_proj")) for n in names)
    assert sum(p.numel() for p in trainable) == sum(p.numel() for n, p in policy.named_parameters() if p.requires_grad)
    torch.testing.assert_close(gx.sequence_logps(policy, batch, precision), base_logps)
    with pytest.raises((ValueError, RuntimeError)):  # a target that does not exist never trains silently
        gx.attach_lora(AutoModelForCausalLM.from_pretrained(path, local_files_only=True), 8, 16, 0.0, ["nope_proj"])


def test_update_steps_move_the_policy_along_the_advantages(tiny):
    path, tokenizer = tiny
    precision = gx.select_precision("tiny_cpu")
    cs, _, _, adv = prepared("minimal_pair", 2)
    batch = _batch(tokenizer, cs)
    policy, trainable = _policy(path, precision)
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    old = gx.sequence_logps(policy, batch, precision)
    before = [p.detach().clone() for p in trainable]
    steps = [gx.grpo_update_step(policy, batch, old, adv, optimizer, trainable, 0.2, precision) for _ in range(4)]
    # step 1: ratio == 1 and each group's advantages sum to zero -> loss 0, but a real gradient
    assert steps[0].loss == pytest.approx(0.0, abs=1e-6)
    assert steps[0].clip_fraction == 0.0
    assert all(math.isfinite(s.loss) and math.isfinite(s.gradient_norm) and s.gradient_norm > 0 for s in steps)
    assert all(s.update_ms > 0 for s in steps)
    assert steps[-1].loss < 0  # the surrogate improves
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainable))
    final = gx.sequence_logps(policy, batch, precision)
    assert gx.policy_separation(old, final, adv) > 0
    # flipping the advantages flips the direction
    policy2, trainable2 = _policy(path, precision)
    opt2 = torch.optim.AdamW(trainable2, lr=1e-2)
    old2 = gx.sequence_logps(policy2, batch, precision)
    for _ in range(4):
        gx.grpo_update_step(policy2, batch, old2, -adv, opt2, trainable2, 0.2, precision)
    assert gx.policy_separation(old2, gx.sequence_logps(policy2, batch, precision), adv) < 0


def test_grad_scaler_path_reports_unscaled_gradient_norm(tiny):
    path, tokenizer = tiny
    precision = gx.select_precision("tiny_cpu")
    cs, _, _, adv = prepared("minimal_pair", 2)
    batch = _batch(tokenizer, cs)
    norms = []
    for scaler in (None, torch.amp.GradScaler("cpu", init_scale=1024.0)):
        policy, trainable = _policy(path, precision)
        optimizer = torch.optim.AdamW(trainable, lr=1e-2)
        old = gx.sequence_logps(policy, batch, precision)
        norms.append(
            gx.grpo_update_step(policy, batch, old, adv, optimizer, trainable, 0.2, precision, scaler).gradient_norm
        )
    assert norms[0] > 0
    assert norms[1] == pytest.approx(norms[0], rel=1e-4)


def test_bf16_autocast_path_runs_on_cpu(tiny):
    path, tokenizer = tiny
    precision = gx.Precision(torch.device("cpu"), torch.bfloat16, autocast=True, grad_scaler=False)
    cs, _, _, adv = prepared("expanded_group", 4)
    batch = _batch(tokenizer, cs)
    policy, trainable = _policy(path, gx.select_precision("tiny_cpu"))  # fp32 weights, bf16 autocast compute
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    old = gx.sequence_logps(policy, batch, precision)
    assert old.dtype == torch.float32
    step = gx.grpo_update_step(policy, batch, old, adv, optimizer, trainable, 0.2, precision)
    assert math.isfinite(step.loss) and step.gradient_norm > 0


def test_scaler_overflow_skips_are_retried_and_counted(tiny):
    """fp16's normal overflow: the GradScaler skips a step; the loop retries until 4 effective steps."""
    path, tokenizer = tiny
    precision = gx.select_precision("tiny_cpu")
    cs, _, _, adv = prepared("minimal_pair", 2)
    batch = _batch(tokenizer, cs)
    runs = {}
    for name, scaler in (("plain", None), ("overflowing", torch.amp.GradScaler("cpu", init_scale=3e38))):
        policy, trainable = _policy(path, precision)
        optimizer = torch.optim.AdamW(trainable, lr=1e-2)
        old = gx.sequence_logps(policy, batch, precision)
        runs[name] = gx.run_update_steps(policy, batch, old, adv, optimizer, trainable, 0.2, precision, scaler, 4)
    plain_steps, plain_skipped, _ = runs["plain"]
    steps, skipped, first = runs["overflowing"]
    assert plain_skipped == 0 and skipped >= 1
    assert len(steps) == 4 and not any(s.skipped for s in steps)
    assert all(math.isfinite(s.gradient_norm) and s.gradient_norm > 0 for s in steps)
    # skipped steps change nothing: the effective steps are the plain run's steps
    assert [s.loss for s in steps] == pytest.approx([s.loss for s in plain_steps], rel=1e-4, abs=1e-7)
    assert [s.gradient_norm for s in steps] == pytest.approx([s.gradient_norm for s in plain_steps], rel=1e-4)
    assert first.shape == (4,)
    # an overflow that never ends is a failure, not noise
    policy, trainable = _policy(path, precision)
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    old = gx.sequence_logps(policy, batch, precision)
    stuck = torch.amp.GradScaler("cpu", init_scale=3e38, backoff_factor=0.9999)
    with pytest.raises(FloatingPointError, match="GradScaler"):
        gx.run_update_steps(policy, batch, old, adv, optimizer, trainable, 0.2, precision, stuck, 4, max_skips=3)


def test_bf16_weights_load_and_update(tiny):
    """real_gpu loads the checkpoint with dtype=bf16 (not fp32 weights under autocast): the same on CPU."""
    path, tokenizer = tiny
    precision = gx.Precision(torch.device("cpu"), torch.bfloat16, autocast=True, grad_scaler=False)
    cs, _, _, adv = prepared("expanded_group", 4)
    batch = _batch(tokenizer, cs)
    policy, trainable = _policy(path, precision)  # from_pretrained(dtype=torch.bfloat16)
    base = {p.dtype for n, p in policy.named_parameters() if not p.requires_grad}
    assert base == {torch.bfloat16}
    assert {p.dtype for p in trainable} == {torch.float32}  # peft keeps LoRA adapters in float32
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    old = gx.sequence_logps(policy, batch, precision)
    repeat = gx.sequence_logps(policy, batch, precision)
    assert old.dtype == torch.float32 and torch.isfinite(old).all()
    before = {id(p): p.dtype for p in policy.parameters()}
    fp32 = gx.full_precision_sequence_logps(policy, batch, precision)
    assert {id(p): p.dtype for p in policy.parameters()} == before  # every dtype restored, same Parameters
    torch.testing.assert_close(gx.sequence_logps(policy, batch, precision), old, rtol=0, atol=0)  # weights intact
    steps, skipped, first = gx.run_update_steps(policy, batch, old, adv, optimizer, trainable, 0.2, precision, None, 3)
    assert skipped == 0 and all(math.isfinite(s.loss) and s.gradient_norm > 0 for s in steps)
    assert steps[0].loss == pytest.approx(0.0, abs=0.05)  # about 0: train and eval forwards may differ in bf16
    noise = gx.logprob_noise(old, first, repeat, fp32)
    assert 1e-4 < noise["precision_logprob_gap"] < 0.1  # bf16 rounding moves log-probs measurably
    assert noise["noise_margin"] == pytest.approx(
        4 * max(noise["train_eval_logprob_gap"], noise["eval_repeat_logprob_gap"], noise["precision_logprob_gap"])
    )
    final = gx.sequence_logps(policy, batch, precision)
    assert torch.isfinite(final).all() and not torch.equal(final, old)


def test_fp16_weights_with_grad_scaler_as_the_forced_fp16_run(tiny):
    """What GRPO_REAL_GPU_DTYPE=float16 runs, on CPU: fp16 weights, fp16 autocast, a GradScaler; peft
    keeps the adapters in float32, so the scaler can unscale their gradients."""
    path, tokenizer = tiny
    precision = gx.Precision(torch.device("cpu"), torch.float16, autocast=True, grad_scaler=True)
    cs, _, _, adv = prepared("expanded_group", 4)
    batch = _batch(tokenizer, cs)
    policy, trainable = _policy(path, precision)
    assert {p.dtype for p in trainable} == {torch.float32}
    assert {p.dtype for p in policy.parameters() if not p.requires_grad} == {torch.float16}
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    old = gx.sequence_logps(policy, batch, precision)
    steps, skipped, _ = gx.run_update_steps(policy, batch, old, adv, optimizer, trainable, 0.2, precision, scaler, 4)
    assert len(steps) == 4 and all(math.isfinite(s.gradient_norm) and s.gradient_norm > 0 for s in steps)
    assert gx.policy_separation(old, gx.sequence_logps(policy, batch, precision), adv) > 0


def test_logprob_noise_and_margin():
    old = torch.tensor([-1.0, -2.0, -3.0])
    noise = gx.logprob_noise(old, old + torch.tensor([0.0, 0.004, -0.001]), old + torch.tensor([0.0, 0.0, 0.002]))
    assert noise == pytest.approx(
        {
            "train_eval_logprob_gap": 0.004,
            "eval_repeat_logprob_gap": 0.002,
            "precision_logprob_gap": 0.0,
            "noise_margin": 0.016,
        },
        abs=1e-6,
    )
    rounded = gx.logprob_noise(old, old.clone(), old.clone(), old + torch.tensor([0.0087, 0.0, 0.0]))
    assert rounded == pytest.approx(
        {
            "train_eval_logprob_gap": 0.0,
            "eval_repeat_logprob_gap": 0.0,
            "precision_logprob_gap": 0.0087,
            "noise_margin": 0.0348,
        },
        abs=1e-6,
    )
    exact = gx.logprob_noise(old, old.clone(), old.clone())
    assert exact == {
        "train_eval_logprob_gap": 0.0,
        "eval_repeat_logprob_gap": 0.0,
        "precision_logprob_gap": 0.0,
        "noise_margin": 0.0,
    }


def test_token_workload_shapes_and_hashes(tiny):
    from tools.post_training_runtime import build_response_batch

    _, tokenizer = tiny
    cs, *_ = prepared("expanded_group", 4)
    batch = _batch(tokenizer, cs)
    entry = gx.batch_shape_entry("expanded_group", batch)
    assert entry["input_ids_shape"] == list(batch["input_ids"].shape)
    assert entry["response_tokens"] == batch["response_mask"][:, 1:].sum(-1).tolist()
    assert entry["response_tokens_total"] == sum(entry["response_tokens"])
    assert all(p + r <= entry["input_ids_shape"][1] for p, r in zip(entry["prompt_tokens"], entry["response_tokens"]))
    assert entry["attended_tokens_total"] == int(batch["attention_mask"].sum())
    same = gx.token_ids_hash([_batch(tokenizer, cs)])
    assert gx.token_ids_hash([batch]) == same and len(same) == 64
    other = build_response_batch(tokenizer, cs.prompts, cs.responses[:-1] + ["11"], max_length=96)
    assert gx.token_ids_hash([other]) != same
    assert gx.tokenizer_hash(tokenizer) == gx.tokenizer_hash(tokenizer)
    changed = copy.deepcopy(tokenizer)
    changed.chat_template = tokenizer.chat_template + " "
    assert gx.tokenizer_hash(changed) != gx.tokenizer_hash(tokenizer)


def test_lora_budget_on_the_qwen_shaped_architecture():
    """r = 8 on q_proj / v_proj over Qwen2.5-0.5B's 24 layers: 540,672 trainable parameters (the GPU
    check's invariant), counted on the meta device (shapes only)."""
    from tools import tiny_model

    tokenizer = tiny_model.build_tokenizer()
    with torch.device("meta"):
        base = tiny_model._build_model(dict(tiny_model.QWEN25_05B_ARCHITECTURE), tokenizer, 0, torch.bfloat16)
        _, trainable = gx.attach_lora(base, 8, 16, 0.0, ["q_proj", "v_proj"])
    assert sum(p.numel() for p in trainable) == 540_672 == 24 * ((8 * 896 + 896 * 8) + (8 * 896 + 128 * 8))


def test_update_measurements_fill_every_field(tiny):
    path, tokenizer = tiny
    precision = gx.select_precision("tiny_cpu")
    cs, rewards, group_ids, adv = prepared("expanded_group", 4)
    entry = gx.candidate_entry(cs, rewards, group_ids, adv, True)
    assert all(entry[name] is None for name in gx.MEASURED_FIELDS)
    steps = [gx.StepResult(0.0, 0.5, 0.0, 3.0), gx.StepResult(-0.1, 0.4, 0.5, 1.0)]
    old = torch.zeros(8)
    new = adv * 0.1
    gx.add_update_measurements(
        entry,
        steps,
        old,
        new,
        adv,
        1234,
        gx.peak_memory(precision),
        noise=gx.logprob_noise(old, old, old),
        scaler_skipped_steps=2,
    )
    assert entry["losses"] == [0.0, -0.1] and entry["gradient_norms"] == [0.5, 0.4]
    assert entry["scaler_skipped_steps"] == 2 and entry["noise_margin"] == 0.0
    assert entry["mean_clip_fraction"] == 0.25
    assert entry["median_update_ms"] == 2.0
    assert entry["policy_separation"] > 0
    assert entry["peak_memory_metric"] == "process_peak_rss" and entry["peak_allocated_bytes"] is None
    assert entry["peak_rss_bytes"] > 0
    with pytest.raises(ValueError):
        gx.add_update_measurements(entry, [], old, new, adv, 1, {})


# ------------------------------------------------------------------------------------------ records, decision, schema
def test_dry_run_record_is_schema_valid_and_claims_nothing():
    record = dry_record()
    gx.finalize_measured(record)
    gx.validate_record(record)
    assert (record["evidence_level"], record["decision"]) == ("dry_run", "not_measured")
    assert [c["nonzero_advantages"] for c in record["candidates"]] == [4, 8]
    for broken in (
        {"decision": "accept_mechanism"},
        {"evidence_level": "tiny_cpu_mechanism_check"},
        {"run_label": "bad label"},
        {"schema_version": "post-training-mechanism-gpu/v1"},  # v1 records do not carry the v2 fields
    ):
        with pytest.raises(jsonschema.ValidationError):
            gx.validate_record({**copy.deepcopy(record), **broken})
    claim = copy.deepcopy(record)
    claim["candidates"][0]["policy_separation"] = 1.0
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record(claim)
    missing = copy.deepcopy(record)
    del missing["candidates"][1]["unjudgeable_count"]
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record(missing)
    nan = copy.deepcopy(record)
    nan["candidates"][0]["reward_std_mean"] = float("nan")
    with pytest.raises(ValueError):
        gx.validate_record(nan)
    lie = copy.deepcopy(record)
    lie["candidates"][1]["verifier_records"][3]["total_reward"] = 0.1  # unjudgeable must earn zero
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record(lie)


def test_decision_rule_and_evidence_levels():
    record = fake_measurements(dry_record("tiny_cpu", weights="random_init"))
    record["runtime"].update({"device": "cpu", "dtype": "float32"})
    gx.finalize_measured(record)
    gx.validate_record(record)
    assert (record["evidence_level"], record["decision"]) == ("tiny_cpu_mechanism_check", "accept_mechanism")
    assert record["decision_rules"]["course_rule"]["passed"] and record["decision_rules"]["reference_rule"]["passed"]
    assert record["highest_separation_candidate"] == {
        "candidate_set": "minimal_pair",
        "group_size": 2,
        "interpretation": "diagnostic_only_not_configuration_selection",
    }

    for change in (
        {"policy_separation": 0.0},
        {"zero_variance_guard_passed": False},
        {"reward_std_mean": 0.0},
        {"policy_separation": 0.005},
    ):  # 0.005: above the reference's 0, below the 0.01 noise margin
        candidates = copy.deepcopy(record["candidates"])
        candidates[1].update(change)
        assert gx.decide(candidates) == "tune"
        assert gx.decide(candidates, random_init=True) == "random_init_path_tune"
    within_noise = copy.deepcopy(record["candidates"])
    within_noise[1]["policy_separation"] = 0.005
    rules = gx.decision_rules(within_noise)
    assert (rules["course_rule"]["passed"], rules["reference_rule"]["passed"]) == (False, True)
    assert gx.decide(record["candidates"], random_init=True) == "random_init_path_ok"
    with pytest.raises(ValueError):
        gx.decide([])
    no_margin = copy.deepcopy(record["candidates"])
    no_margin[0]["noise_margin"] = None
    with pytest.raises(ValueError, match="noise_margin"):
        gx.decide(no_margin)

    gpu = fake_measurements(dry_record("real_gpu", weights="random_init"))
    gpu["hardware"] = {"cuda_available": True}
    gpu["runtime"].update({"device": "cuda", "dtype": "bfloat16", "autocast": True})
    for c in gpu["candidates"]:
        c.update(
            {
                "peak_memory_metric": "cuda_max_memory_allocated",
                "peak_allocated_bytes": 10,
                "allocated_bytes_at_start": 0,
            }
        )
    gx.finalize_measured(gpu)
    gx.validate_record(gpu)
    assert gpu["evidence_level"] == "random_init_gpu_resource_benchmark"
    assert gpu["decision"] == "random_init_path_ok"  # never accept_mechanism for random weights
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record({**gpu, "decision": "accept_mechanism"})
    gpu["model"]["weights"] = "pretrained_hub"
    gx.finalize_measured(gpu)
    gx.validate_record(gpu)
    assert gpu["evidence_level"] == "real_model_grpo_rlvr_mechanism_benchmark"
    assert gpu["decision"] == "accept_mechanism"
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record({**gpu, "decision": "random_init_path_ok"})
    gpu["model"]["weights"] = "random_init"  # a random-init model must never carry the real-model level
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record(gpu)
    # a measured record must say which tokens it ran, and a scaler-free run cannot skip steps
    for broken in ({"tokenizer_hash": None}, {"batch_shapes": None}, {"token_ids_hash": None}):
        bad = copy.deepcopy(gpu)
        bad["model"]["weights"] = "pretrained_hub"
        bad["workload"].update(broken)
        with pytest.raises(jsonschema.ValidationError):
            gx.validate_record(bad)
    bad = copy.deepcopy(gpu)
    bad["model"]["weights"] = "pretrained_hub"
    bad["candidates"][0]["scaler_skipped_steps"] = 1
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record(bad)
    bad["runtime"].update({"dtype": "float16", "grad_scaler": True})
    gx.validate_record(bad)


def test_failure_record_names_the_stage_and_resets_partial_numbers():
    record = fake_measurements(dry_record("tiny_cpu"))
    record["candidates"][1]["policy_separation"] = None  # half-measured
    try:
        raise RuntimeError("boom")
    except RuntimeError as error:
        gx.mark_failure(record, "candidate_set_expanded_group", error)
    gx.validate_record(record)
    assert record["failure"]["stage"] == "candidate_set_expanded_group"
    assert record["failure"]["error_type"] == "RuntimeError"
    assert (record["evidence_level"], record["decision"]) == ("failed_tiny_cpu_attempt", "reject_until_fixed")
    assert record["candidates"][0]["losses"] is not None  # the completed set keeps its numbers
    assert all(record["candidates"][1][name] is None for name in gx.MEASURED_FIELDS)
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record({**record, "decision": "tune"})


def test_write_record_validates_and_replaces_an_invalid_record(tmp_path):
    good = dry_record()
    out = tmp_path / "ok.json"
    gx.write_record(out, good)
    gx.validate_record(json.loads(out.read_text(encoding="utf-8")))
    bad = dry_record()
    bad["decision"] = "accept_mechanism"
    out_bad = tmp_path / "bad.json"
    written = gx.write_record(out_bad, bad)
    saved = json.loads(out_bad.read_text(encoding="utf-8"))
    assert saved == written
    assert saved["failure"]["stage"] == "evidence_validation"
    assert saved["decision"] == "reject_until_fixed"
    gx.validate_record(saved)


def test_schema_file_is_a_valid_draft_2020_12_schema():
    schema = gx.load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"]["const"] == gx.SCHEMA_VERSION


def test_committed_records_are_schema_valid():
    results = ROOT / "benchmarks" / "results" / "pt_grpo"
    paths = sorted(results.glob("*.json"))
    names = [path.name for path in paths]
    assert "pt-grpo-real-model-update_tiny_cpu_reference.json" in names, f"the reference record is missing: {names}"
    for path in paths:
        gx.validate_record(json.loads(path.read_text(encoding="utf-8")))


# ------------------------------------------------------------------------------------------ the notebook, headless
@pytest.fixture()
def run_label():
    """A unique label; its evidence file is removed afterwards."""
    label = f"pytest-{uuid.uuid4().hex[:10]}"
    yield label
    (ROOT / gx.output_relative_path(WORKLOAD_ID, label)).unlink(missing_ok=True)


def _run(mode, label, tmp_path):
    from tools.cli import experiment

    status, evidence, record = experiment.run(mode, label, timeout=600, executed_dir=tmp_path)
    executed = tmp_path / f"nb06_real_model_grpo_{label}.ipynb"
    return status, evidence, record, executed


def _outputs(executed_path):
    import nbformat

    return _notebook_text(nbformat.read(executed_path, as_version=4))


def _notebook_text(nb):
    """(the printed and markdown outputs of ``nb`` as one text, the number of PNG images it shows)."""
    text, images = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text.append(out["text"])
            data = out.get("data", {})
            text.append(data.get("text/markdown", ""))
            images += "image/png" in data
    return "\n".join(text), images


@pytest.mark.slow
def test_notebook_dry_run(notebook_runs):
    """The solution notebook as test_notebooks executes it (shared run): RUN_MODE dry_run, label default."""
    import tools.chain.notebooks as chain

    executed = notebook_runs.solution("nb06_real_model_grpo")
    assert not chain.cell_errors(executed)
    saved = json.loads((ROOT / gx.output_relative_path(WORKLOAD_ID, "default")).read_text(encoding="utf-8"))
    gx.validate_record(saved)
    assert saved["run_label"] == "default" and saved["run_mode"] == "dry_run"
    assert (saved["evidence_level"], saved["decision"], saved["failure"]) == ("dry_run", "not_measured", None)
    assert saved["decision_rules"] is None and saved["workload"]["batch_shapes"] is None
    assert [c["nonzero_advantages"] for c in saved["candidates"]] == [4, 8]
    assert [c["unjudgeable_count"] for c in saved["candidates"]] == [0, 1]
    assert all(c["zero_variance_guard_passed"] for c in saved["candidates"])
    assert all(c[name] is None for c in saved["candidates"] for name in gx.MEASURED_FIELDS)
    assert saved["model"]["resolved_commit"] is None
    text, images = _notebook_text(executed)
    assert "Schema 校验通过" in text and "pt-grpo-real-model-update_default.json" in text
    assert "种子参考" in text and "未测量" in text
    assert "-0.1192" in text  # the mean-then-floor counter-example on ten float32 1.1's, computed
    assert images == 0


@pytest.mark.slow
def test_notebook_tiny_cpu(run_label, tmp_path):
    status, evidence, record, executed = _run("tiny_cpu", run_label, tmp_path)
    assert status == 0, record and record.get("failure")
    saved = json.loads(evidence.read_text(encoding="utf-8"))
    gx.validate_record(saved)
    assert saved["failure"] is None
    assert saved["evidence_level"] == "tiny_cpu_mechanism_check"
    assert saved["decision"] == "accept_mechanism"
    assert saved["model"]["weights"] == "random_init" and saved["model"]["resolution_source"] == "local"
    assert len(saved["model"]["resolved_commit"]) == 64
    assert saved["runtime"]["device"] == "cpu" and saved["runtime"]["dtype"] == "float32"
    assert saved["workload"]["learning_rate_source"] == "tiny_cpu_override"
    steps = saved["workload"]["update_steps"]
    minimal, expanded = saved["candidates"]
    assert (minimal["candidate_set"], expanded["candidate_set"]) == ("minimal_pair", "expanded_group")
    assert (minimal["nonzero_advantages"], expanded["nonzero_advantages"]) == (4, 8)
    assert (minimal["unjudgeable_count"], expanded["unjudgeable_count"]) == (0, 1)
    for c in saved["candidates"]:
        assert c["zero_variance_guard_passed"] is True
        assert c["policy_separation"] > 0
        assert len(c["losses"]) == len(c["gradient_norms"]) == len(c["clip_fractions"]) == steps
        assert all(math.isfinite(v) for v in c["losses"] + c["gradient_norms"])
        assert all(v > 0 for v in c["gradient_norms"])
        assert c["losses"][0] == pytest.approx(0.0, abs=1e-6)
        assert c["peak_memory_metric"] == "process_peak_rss" and c["peak_rss_bytes"] > 0
        assert c["median_update_ms"] > 0
    assert saved["highest_separation_candidate"]["interpretation"] == "diagnostic_only_not_configuration_selection"
    assert saved["decision_rules"]["course_rule"]["passed"] and saved["decision_rules"]["reference_rule"]["passed"]
    assert saved["runtime"]["dtype_choice"] == "auto"
    shapes = saved["workload"]["batch_shapes"]
    assert [s["candidate_set"] for s in shapes] == ["minimal_pair", "expanded_group"]
    assert [s["input_ids_shape"][0] for s in shapes] == [4, 8]
    assert len(saved["workload"]["tokenizer_hash"]) == len(saved["workload"]["token_ids_hash"]) == 64
    for c in saved["candidates"]:
        assert c["scaler_skipped_steps"] == 0
        assert 0 <= c["noise_margin"] < 1e-4 < c["policy_separation"]  # fp32 on CPU: no-update noise is tiny
    assert saved["timing"]["total_seconds"] < 60
    text, images = _outputs(executed)
    assert images == 1  # the per-step loss / clip fraction figure
    assert f"{minimal['policy_separation']:.3f} / {expanded['policy_separation']:.3f}" in text  # computed, not pasted
    assert "1.476 / 1.731" in text  # the seed's reference, labelled beside it


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA failure path")
def test_notebook_real_gpu_without_cuda_writes_a_failure_record(run_label, tmp_path):
    status, evidence, record, executed = _run("real_gpu", run_label, tmp_path)
    assert status == 2
    saved = json.loads(evidence.read_text(encoding="utf-8"))
    gx.validate_record(saved)
    assert saved["failure"]["stage"] == "environment_preflight"
    assert "CUDA" in saved["failure"]["message"]
    assert (saved["evidence_level"], saved["decision"]) == ("failed_real_gpu_attempt", "reject_until_fixed")
    assert [c["nonzero_advantages"] for c in saved["candidates"]] == [4, 8]  # the verifier half is still there


@pytest.mark.slow
def test_notebook_rejects_an_unknown_run_mode(run_label, tmp_path, notebook_runs):
    import nbformat

    import tools.chain.notebooks as chain

    nb = chain.build_notebook("nb06_real_model_grpo")
    nb = chain.parameterize(nb, {"RUN_MODE": "gpu", "RUN_LABEL": run_label})
    done = notebook_runs.run(nb, ROOT, timeout=300)
    errors = chain.cell_errors(done)
    assert errors and errors[0][2] == "ValueError" and "RUN_MODE" in errors[0][3]
    assert not (ROOT / gx.output_relative_path(WORKLOAD_ID, run_label)).exists()
    assert isinstance(done, nbformat.NotebookNode)
