"""real_gpu's tensor paths with the policy's tensors on torch's ``meta`` device (no GPU needed).

Meta raises on any op that mixes a meta tensor with a non-scalar CPU tensor, the mix a CUDA card refuses. The inputs
are built where a learner's code builds them: rewards from a Python list (CPU), advantages from them (CPU), batches
by ``build_response_batch`` (CPU) - and moved by the code under test. ``tests/meta_device.py`` says what meta
cannot run (data reads, host copies, autocast, sampling) and how it stands in; ``READS`` there lists every
data-dependent read these paths make.

Covered: the loss family (lessons 2/3A/3B, nb06's clipped surrogate), group advantages (lesson 1, nb06), the log-prob
helpers (``response_sequence_logps``, ``selective_log_softmax``, ``og.completion_logps``), lesson 7's ``grpo_step``,
its training loop and its visible test cells (``test_grpo_step_visible``, ``test_log_step_metrics_visible``; the
sampling test samples in most of its lines: not run), and nb06's experiment cell with ``RUN_MODE=real_gpu`` (the
Qwen-shaped checkpoint). The tests that run notebook cells are ``slow`` (not in ``make test-fast``). Each check fails
when a ``.to(device)`` of the real code is removed (mutations below).
"""

from __future__ import annotations

import ast
import copy
import json

import pytest
import torch
from meta_device import META, OnMeta, UnlistedRead, device_error, on_meta, qwen_shaped_on_meta, rollout_on
from real_gpu_cells import A7, cell_source, nb07_namespace, run_cell, run_nb06_real_gpu, solution_cells

from tools import grpo_experiment as gx
from tools import online_grpo as og
from tools.lessons.nb01_group_advantages import compute_group_advantages
from tools.lessons.nb02_grpo_objective import token_kl_penalty
from tools.lessons.nb03b_loss_family_trl import EXTENDED_LOSS_TYPES, extended_loss, grpo_family_loss
from tools.lessons.nb04_verifiable_rewards import verify_integer_response
from tools.loss_types import CLIPPED_LOSS_TYPES
from tools.post_training_runtime import build_response_batch, move_response_batch


@pytest.fixture(scope="module")
def preset_policy():
    """lesson 7's real_gpu preset on meta: Qwen2.5-0.5B's shape in bf16, the preset's LoRA adapter, eval mode (as
    ``og.load_preset_policy`` leaves it), and the Qwen-shaped checkpoint's tokenizer (left padding)."""
    torch.set_num_threads(1)
    model, tokenizer = qwen_shaped_on_meta(torch.bfloat16)
    tokenizer.padding_side = "left"
    lora = og.RUN_PRESETS["real_gpu"]["lora"]
    policy, _ = gx.attach_lora(model, lora["rank"], lora["alpha"], lora["dropout"], lora["target_modules"])
    policy.eval()
    assert {p.device for p in policy.parameters()} == {META}
    return policy, tokenizer


def _prompts(count):
    return [p["prompt"] for p in og.split_problems()[0][:count]]


def _answers(count, generations):
    return [p["answer"] for p in og.split_problems()[0][:count] for _ in range(generations)]


# ----------------------------------------------------------------------------------------------- the harness
def test_meta_refuses_a_mix_and_the_harness_answers_only_listed_reads():
    """Meta's refusal is the CUDA one (a 0-dim CPU scalar is fine on both); a read from an unlisted function fails;
    a host copy of a tensor moved to meta gives back its CPU values."""
    with pytest.raises(RuntimeError) as raised:
        torch.ones(3, device=META) * torch.ones(3)
    assert device_error(raised.value)
    assert (torch.ones(3, device=META) * torch.tensor(2.0)).device == META
    with OnMeta() as mode, pytest.raises(UnlistedRead, match="test_meta_refuses"):
        bool(torch.ones(3, device=META).any())
    with OnMeta() as mode:
        values = torch.tensor([3, 1, 2])
        moved = on_meta(values)
        assert moved.device == META and torch.equal(moved.cpu(), values)
        assert torch.equal((moved + 1).cpu(), torch.zeros(3, dtype=torch.long))  # computed on meta: no values
    assert sum(mode.host_copies.values()) == 2


# ----------------------------------------------------------------------------------------------- the loss family
def _loss_inputs(rows=6, width=5, requires_grad=True):
    """Policy-side tensors on meta (as the policy's forward leaves them) and advantages built on the CPU from a
    Python list of rewards, as the loop builds them."""
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0, 0.0][:rows], dtype=torch.float32)  # [N] from a list: CPU
    group_ids = torch.arange(rows // 2).repeat_interleave(2)  # [N] CPU
    advantages = compute_group_advantages(rewards, group_ids)  # [N] CPU
    policy = torch.zeros(rows, width, device=META, requires_grad=requires_grad)  # [N, C] float32
    old = torch.zeros(rows, width, device=META)
    ref = torch.zeros(rows, width, device=META)
    mask = torch.ones(rows, width, dtype=torch.bool, device=META)
    return policy, old, ref, mask, advantages


def test_the_loss_family_runs_on_the_policys_device():
    policy, old, ref, mask, advantages = _loss_inputs()
    with OnMeta():
        adv = advantages.to(META)  # what the training loop does
        for loss_type in EXTENDED_LOSS_TYPES:
            for level in ("token", "sequence"):
                loss = extended_loss(
                    policy,
                    old,
                    adv,
                    mask,
                    loss_type=loss_type,
                    importance_sampling_level=level,
                    beta=0.04,
                    ref_logps=ref,
                    use_bias_correction_kl=True,
                    max_completion_length=5,
                    num_items_in_batch=mask.sum(),
                )
                loss.backward()
                assert loss.device == META and policy.grad.device == META
        for loss_type in CLIPPED_LOSS_TYPES:
            loss = grpo_family_loss(
                policy,
                old,
                adv,
                mask.float(),
                loss_type=loss_type,
                beta=0.04,
                ref_logps=ref,
                max_completion_length=5,
                num_items_in_batch=12,
            )
            assert loss.device == META
        assert token_kl_penalty(policy, ref).device == META
        loss, clipped = gx.clipped_surrogate(policy[:, 0], old[:, 0], adv, 0.2)
        assert loss.device == clipped.device == META


@pytest.mark.parametrize("loss", ["extended_loss", "clipped_surrogate"])
def test_a_loss_given_cpu_advantages_fails_on_meta(loss):
    """The losses do not move their inputs: advantages left on the CPU (the missing ``.to(device)``) fail."""
    policy, old, ref, mask, advantages = _loss_inputs()
    with OnMeta(), pytest.raises(RuntimeError) as raised:
        if loss == "extended_loss":
            extended_loss(policy, old, advantages, mask)
        else:
            gx.clipped_surrogate(policy[:, 0], old[:, 0], advantages, 0.2)
    assert device_error(raised.value)


def test_group_advantages_come_back_on_the_rewards_device():
    """Rewards come from a Python list (CPU) and the group ids from the rollout (the policy's device):
    ``compute_group_advantages`` (and nb06's ``group_advantages``) return them on the rewards' device - the CPU - so
    the caller must move them (the training loop does; the visible grpo_step test did not). It reads the group ids'
    values (its fast path and its checks are data-dependent): on meta they come back through a host copy."""
    rewards = torch.tensor([1.0, 0.0, 0.1, 0.0])
    with OnMeta() as mode:
        group_ids = on_meta(torch.tensor([0, 0, 1, 1]))  # as sample_group leaves them, on the policy's device
        for fn in (compute_group_advantages, gx.group_advantages):
            advantages = fn(rewards, group_ids)
            assert advantages.device.type == "cpu"
            assert torch.allclose(advantages, torch.tensor([1.0, -1.0, 1.0, -1.0]))
    assert sum(mode.host_copies.values()) == 2


# ----------------------------------------------------------------------------------------------- log-prob helpers
def test_the_logprob_helpers_run_on_the_policys_device(preset_policy):
    from tools.post_training_runtime import response_sequence_logps, selective_log_softmax

    policy, tokenizer = preset_policy
    cs = gx.build_candidate_set("expanded_group", 4)
    cpu_batch = build_response_batch(tokenizer, cs.prompts, cs.responses, max_length=96)  # CPU, as nb06 builds it
    with OnMeta():
        batch = move_response_batch(cpu_batch, META)
        sequence, tokens = response_sequence_logps(policy, batch)
        assert sequence.device == tokens.device == META and tokens.dtype == torch.float32  # bf16 logits -> fp32
        sequence.sum().backward()
        assert all(p.grad.device == META for p in policy.parameters() if p.requires_grad)
        policy.zero_grad(set_to_none=True)
        for dtype in (torch.float32, torch.bfloat16):
            logits = torch.zeros(2, 3, 11, device=META, dtype=dtype, requires_grad=True)
            selective_log_softmax(logits, torch.zeros(2, 3, dtype=torch.long, device=META)).sum().backward()
            assert logits.grad.device == META
        rollout = rollout_on(policy, tokenizer, _prompts(2), 2)
        logps, entropy = og.completion_logps(
            policy,
            rollout["prompt_ids"],
            rollout["prompt_mask"],
            rollout["completion_ids"],
            rollout["completion_mask"],
            temperature=0.7,
            with_entropy=True,
        )
        assert logps.device == entropy.device == META
        with pytest.raises(RuntimeError) as raised:  # a batch left on the CPU
            response_sequence_logps(policy, cpu_batch)
    assert device_error(raised.value)


# ----------------------------------------------------------------------------------------------- lesson 7
def test_grpo_step_runs_on_the_policys_device(preset_policy):
    """The reference grpo_step on the preset policy: beta > 0 with a reference model (later epochs run the same ops:
    mu = 1 keeps the test cheap), the loop's advantages (CPU rewards -> CPU advantages -> ``.to(device)``); the adapter and AdamW's state stay on meta."""
    from tools.lessons.nb07_online_grpo import grpo_step

    policy, tokenizer = preset_policy
    model = copy.deepcopy(policy)
    ref_model = copy.deepcopy(policy)
    optimizer = og.make_optimizer(model, 1e-5)
    with OnMeta():
        rollout = rollout_on(model, tokenizer, _prompts(2), 4, ref_model=ref_model)
        rewards = torch.tensor(og.strict_rewards(rollout["completions"], _answers(2, 4), verify_integer_response))
        advantages = compute_group_advantages(rewards, rollout["group_ids"].cpu())  # [N] CPU, as the loop
        out = grpo_step(
            model,
            optimizer,
            rollout,
            advantages.to(rollout["completion_ids"].device),
            num_iterations=1,
            beta=0.04,
            loss_type="dapo",
        )  # every loss_type: the loss family's test
        assert isinstance(out["loss"], float) and out["kl_ref"] is not None
        with pytest.raises(RuntimeError) as raised:  # advantages left on the CPU
            grpo_step(model, optimizer, rollout, advantages)
    assert device_error(raised.value)
    assert {t.device for state in optimizer.state.values() for t in state.values() if t.dim() > 0} == {META}


def _namespace(policy, tokenizer):
    """lesson 7's globals in RUN_MODE=real_gpu with the policy on meta and ``sample_group`` standing in by
    ``rollout_on`` (meta cannot sample)."""

    def sample_group(
        model,
        tokenizer,
        prompts,
        num_generations,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=6,
        seed=None,
        ref_model=None,
    ):
        return rollout_on(model, tokenizer, prompts, num_generations, temperature=temperature, ref_model=ref_model)

    return nb07_namespace(policy, tokenizer, META, sample_group=sample_group)


class _AssertsEvaluated(ast.NodeTransformer):
    """``assert test, message`` -> ``test``: every tensor op of the cell runs, its values (meta has none) are not
    judged - the values are the CPU runs' business (tests/test_nb07_online.py)."""

    def visit_Assert(self, node):
        return ast.copy_location(ast.Expr(value=node.test), node)


def _placement_only(source: str) -> str:
    return ast.unparse(_AssertsEvaluated().visit(ast.parse(source)))


def _run_on_meta(grade_id, policy, tokenizer, replace=None):
    source = cell_source(A7, grade_id)
    if replace is not None:
        assert replace[0] in source, f"the mutation's target is not in {grade_id}: {replace[0]!r}"
        source = source.replace(*replace)
    namespace = _namespace(policy, tokenizer)

    def judge_nothing(*args, **kwargs):  # assert_close's values: see _AssertsEvaluated
        return None

    def expect_value_error(call, contract):  # the contract checks still run; a device error still fails
        try:
            call()
        except ValueError:
            pass

    namespace.update(assert_close=judge_nothing, expect_value_error=expect_value_error)
    with OnMeta():
        run_cell(_placement_only(source), namespace, f"{A7}:{grade_id}")
    return namespace


# the one .to(device) the visible grpo_step test needs: its advantages come from CPU rewards
GRPO_TEST_MOVE = '.to(_vr["completion_ids"].device)'


@pytest.mark.slow
@pytest.mark.parametrize("grade_id", ["test_grpo_step_visible", "test_log_step_metrics_visible"])
def test_lesson7_visible_test_cells_run_with_the_policy_on_meta(preset_policy, grade_id):
    policy, tokenizer = preset_policy
    namespace = _run_on_meta(grade_id, policy, tokenizer)
    if grade_id == "test_grpo_step_visible":
        assert namespace["_vadv"].device == META and namespace["_out"]["num_iterations"] == 1


@pytest.mark.slow
def test_the_visible_grpo_step_test_fails_without_its_move(preset_policy):
    """Mutation: the cell's ``.to(...)`` of its advantages removed (the cell as it was) - the CPU advantages meet the
    policy's log-probs in extended_loss."""
    policy, tokenizer = preset_policy
    assert cell_source(A7, "test_grpo_step_visible").count(GRPO_TEST_MOVE) == 1
    with pytest.raises(RuntimeError) as raised:
        _run_on_meta("test_grpo_step_visible", policy, tokenizer, replace=(GRPO_TEST_MOVE, ""))
    assert device_error(raised.value)


LOOP_MOVE = 'advantages.to(rollout["completion_ids"].device)'


@pytest.mark.slow
@pytest.mark.parametrize("mutated", [False, True], ids=["as_written", "without_its_move"])
def test_the_training_loop_runs_on_meta_and_fails_without_its_move(preset_policy, mutated):
    """lesson 7's ``train_online_grpo`` (its locked cell), one step of the real_gpu preset's settings on meta; with
    the ``.to(...)`` of the advantages removed it fails."""
    policy, tokenizer = preset_policy
    source = next(s for m, s in solution_cells(A7) if m.get("nbgrader", {}).get("grade_id") == "training_loop")
    assert source.count(LOOP_MOVE) == 1
    if mutated:
        source = source.replace(LOOP_MOVE, "advantages")
    namespace = _namespace(copy.deepcopy(policy), tokenizer)
    config = og.preset_config("real_gpu", num_steps=1, prompts_per_step=2, num_generations=4)
    with OnMeta():
        run_cell(source, namespace, f"{A7}:training_loop")
        if not mutated:
            history = namespace["train_online_grpo"](namespace["policy"], tokenizer, og.split_problems()[0], config)
            assert len(history) == 1 and json.dumps(history)
            return
        with pytest.raises(RuntimeError) as raised:
            namespace["train_online_grpo"](namespace["policy"], tokenizer, og.split_problems()[0], config)
    assert device_error(raised.value)


# ----------------------------------------------------------------------------------------------- nb06
@pytest.fixture(scope="module")
def nb06_policy():
    """nb06's real_gpu policy on meta: Qwen2.5-0.5B's shape in bf16 and nb06's LoRA (r = 8 on q/v), as
    ``gx.load_lora_policy`` builds it from the checkpoint."""
    model, tokenizer = qwen_shaped_on_meta(torch.bfloat16)
    policy, trainable = gx.attach_lora(model, 8, 16, 0.0, ["q_proj", "v_proj"])
    return policy, trainable, tokenizer


@pytest.mark.parametrize("mutated", [None, "batch", "advantages"])
def test_nb06_update_step_runs_on_the_policys_device(nb06_policy, mutated):
    """nb06's update as its cell runs it: CPU batch and advantages moved to the device, old / repeat / float32
    log-probs, effective steps, the noise and the measurements (host copies); without one of the two moves it fails.
    Precision without autocast (meta has none)."""
    policy, trainable, tokenizer = nb06_policy
    precision = gx.Precision(META, torch.bfloat16, autocast=False, grad_scaler=False)
    cs = gx.build_candidate_set("expanded_group", 4)
    rewards = torch.tensor(cs.rewards, dtype=torch.float32)  # [N] CPU, as the cell builds them
    group_ids = torch.tensor(cs.group_ids, dtype=torch.long)
    cpu_advantages = gx.group_advantages(rewards, group_ids)  # [N] CPU
    cpu_batch = build_response_batch(tokenizer, cs.prompts, cs.responses, max_length=96)
    optimizer = torch.optim.AdamW(trainable, lr=2e-4)
    with OnMeta():
        batch = cpu_batch if mutated == "batch" else move_response_batch(cpu_batch, precision.device)
        advantages = cpu_advantages if mutated == "advantages" else cpu_advantages.to(precision.device)
        try:
            old = gx.sequence_logps(policy, batch, precision)
            repeat = gx.sequence_logps(policy, batch, precision)
            fp32 = gx.full_precision_sequence_logps(policy, batch, precision)
            steps, skipped, first = gx.run_update_steps(
                policy, batch, old, advantages, optimizer, trainable, 0.2, precision, None, 2
            )
        except RuntimeError as error:
            assert mutated is not None and device_error(error), error
            return
        assert mutated is None, "the mutation was not caught"
        final = gx.sequence_logps(policy, batch, precision)
        entry = gx.candidate_entry(cs, rewards, group_ids, cpu_advantages, True)
        gx.add_update_measurements(
            entry,
            steps,
            old,
            final,
            advantages,
            trainable_parameters=540_672,
            memory=gx.peak_memory(precision),
            noise=gx.logprob_noise(old, first, repeat, fp32),
            scaler_skipped_steps=skipped,
        )
    assert old.device == final.device == META and len(steps) == 2 and entry["noise_margin"] == 0.0
    assert {p.dtype for p in policy.parameters() if not p.requires_grad} == {torch.bfloat16}  # float32 detour undone


NB06_MOVES = {  # the two moves of nb06's experiment cell
    "batch": ("batch = move_response_batch(cpu_batch, precision.device)", "batch = cpu_batch"),
    "advantages": ("advantages = advantages.to(precision.device)", "advantages = advantages"),
}


@pytest.mark.slow
@pytest.mark.parametrize("mutated", [None, *NB06_MOVES])
def test_nb06_experiment_cell_runs_on_meta(monkeypatch, mutated):
    """The notebook's own experiment cell with RUN_MODE = real_gpu, both candidate sets, the Qwen-shaped checkpoint
    loaded and moved to meta: no failure record; with either of its moves removed, a failure record whose message
    is the device mix."""
    with OnMeta():
        record = run_nb06_real_gpu(
            monkeypatch,
            gx.Precision(META, torch.bfloat16, autocast=False, grad_scaler=False),
            replace=None if mutated is None else NB06_MOVES[mutated],
        )
    if mutated is None:
        assert record["failure"] is None, record["failure"]
        assert record["runtime"]["device"] == "meta" and record["runtime"]["dtype"] == "bfloat16"
        assert record["model"]["weights"] == "random_init" and record["evidence_level"] != "failed_real_gpu_attempt"
        assert [c["trainable_parameters"] for c in record["candidates"]] == [540_672, 540_672]
    else:
        failure = record["failure"]
        assert failure["stage"] == "candidate_set_minimal_pair" and device_error(RuntimeError(failure["message"]))
