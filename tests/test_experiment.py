"""The final experiment (notebook nb06_real_model_grpo, tools.grpo_experiment): the run settings, the verifier,
the advantages and the objective's pieces, without a model.

The update loop on the tiny model: tests/test_experiment_update.py; the record, the decision rule, the schema and
the notebook executed headless: tests/test_experiment_record.py.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from experiment_helpers import WORKLOAD_ID, prepared  # tests/experiment_helpers.py

from tools import grpo_experiment as gx


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
