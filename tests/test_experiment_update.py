"""The final experiment's update loop on the course's tiny model (tools.grpo_experiment): LoRA, the update step in
fp32, bf16 and fp16 with a GradScaler, the token workload and the update measurements."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from experiment_helpers import nb06_policy, prepared  # tests/experiment_helpers.py

from tools import grpo_experiment as gx


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoTokenizer

    from tools.tiny_model import tiny_checkpoint_path

    path = str(tiny_checkpoint_path())
    return path, AutoTokenizer.from_pretrained(path, local_files_only=True)


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
    policy, trainable = nb06_policy(path, precision)
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
    policy, trainable = nb06_policy(path, precision)
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
    policy2, trainable2 = nb06_policy(path, precision)
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
        policy, trainable = nb06_policy(path, precision)
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
    policy, trainable = nb06_policy(path, gx.select_precision("tiny_cpu"))  # fp32 weights, bf16 autocast compute
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
        policy, trainable = nb06_policy(path, precision)
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
    policy, trainable = nb06_policy(path, precision)
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
    policy, trainable = nb06_policy(path, precision)  # from_pretrained(dtype=torch.bfloat16)
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
    policy, trainable = nb06_policy(path, precision)
    assert {p.dtype for p in trainable} == {torch.float32}
    assert {p.dtype for p in policy.parameters() if not p.requires_grad} == {torch.float16}
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    old = gx.sequence_logps(policy, batch, precision)
    steps, skipped, _ = gx.run_update_steps(policy, batch, old, adv, optimizer, trainable, 0.2, precision, scaler, 4)
    assert len(steps) == 4 and all(math.isfinite(s.gradient_norm) and s.gradient_norm > 0 for s in steps)
    assert gx.policy_separation(old, gx.sequence_logps(policy, batch, precision), adv) > 0


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
